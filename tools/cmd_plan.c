/* ferry plan: plans the copies from a trainer layout to an engine layout and
 * reports bytes, balance, ops, packing, time and memory, and verifies that
 * every destination byte is written exactly once. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry plan --model M --train SPEC --infer SPEC [--rank R] [--writer S]\n"
            "                  [--ranks-per-host N] [--bucket BYTES] [--pack-below BYTES] [--pack-limit BYTES]\n"
            "                  [--locals N] [--repeat R] [--mtp] [--quant none|auto|fp8] [--json]\n"
            "  M      a config.json path or a bundled name (see ferry layout --help)\n"
            "  SPEC   parallel configurations as for ferry layout --parallel\n"
            "  --rank R            the local plan of destination rank R: its sources in reading order\n"
            "  --writer S          the local plan of source rank S: what it packs and serves\n"
            "  --ranks-per-host N  ranks 0..N-1 of each side share a host, and so on (default 8);\n"
            "                      trainer and engine hosts are distinct machines\n"
            "  --bucket BYTES      largest grouped transfer (default 4M = 4194304)\n"
            "  --pack-below BYTES  pack ops smaller than this (default 64K = 65536)\n"
            "  --pack-limit BYTES  most bytes one source rank's pack area holds (default 0: no\n"
            "                      limit); strided sources past it are read run by run (gathered)\n"
            "                      (BYTES: digits with an optional K, M, G or T, powers of 1024)\n"
            "  --locals N          also time the local plans of N destination and N source ranks\n"
            "  --repeat R          build the global plan R times (1..1000) and report the median time\n"
            "  --quant Q           the engine's spec as for ferry model --quant (the trainer's is\n"
            "                      always none); an fp8 engine needs quantize ops, which the\n"
            "                      planner does not build yet: refused\n"
            "  --json              machine-readable output\n"
            "Exit status: 0 planned and verified, 1 planning or verification failed, 2 bad input.\n");
}

/* Counts the bytes the library holds, so plan memory is measured exactly. */
typedef struct {
    size_t cur, peak;
} meter_t;

static void *m_alloc(void *o, size_t n) {
    meter_t *m = o;
    size_t *p = malloc(n + 16);
    if (!p) return NULL;
    p[0] = n;
    m->cur += n;
    if (m->cur > m->peak) m->peak = m->cur;
    return (char *)p + 16;
}

static void m_free(void *o, void *ptr) {
    if (!ptr) return;
    meter_t *m = o;
    size_t *p = (size_t *)((char *)ptr - 16);
    m->cur -= p[0];
    free(p);
}

static void *m_realloc(void *o, void *ptr, size_t n) {
    if (!ptr) return m_alloc(o, n);
    meter_t *m = o;
    size_t *p = (size_t *)((char *)ptr - 16), old = p[0];
    size_t *q = realloc(p, n + 16);
    if (!q) return NULL;
    q[0] = n;
    m->cur = m->cur - old + n;
    if (m->cur > m->peak) m->peak = m->cur;
    return (char *)q + 16;
}

typedef struct {
    uint64_t min, median, max;
    double mean;
} spread_t;

/* Spread of v[0..n) over the entries that are non-zero (ranks that take part). */
static spread_t spread(uint64_t *v, size_t n) {
    spread_t s = {0, 0, 0, 0};
    qsort(v, n, sizeof *v, cli_cmp_u64);
    size_t z = 0;
    while (z < n && v[z] == 0) z++;
    if (z == n) return s;
    uint64_t sum = 0;
    for (size_t i = z; i < n; i++) sum += v[i];
    s.min = v[z];
    s.median = v[z + (n - z) / 2];
    s.max = v[n - 1];
    s.mean = (double)sum / (double)(n - z);
    return s;
}

/* The floor for any planner that must look at every piece: copying both
 * piece arrays once (median of 5), against which plan times are quoted. */
static double piece_read_seconds(const ferry_layout_t *src, const ferry_layout_t *dst) {
    size_t a = ferry_layout_piece_count(src) * sizeof(ferry_piece_t);
    size_t b = ferry_layout_piece_count(dst) * sizeof(ferry_piece_t);
    char *buf = malloc(a + b + 1);
    double t[5];
    if (!buf) return 0;
    for (int i = 0; i < 5; i++) {
        double t0 = cli_now_s();
        memcpy(buf, ferry_layout_pieces(src), a);
        memcpy(buf + a, ferry_layout_pieces(dst), b);
        __asm__ volatile("" : : "r"(buf) : "memory"); /* keep the copies */
        t[i] = cli_now_s() - t0;
    }
    free(buf);
    qsort(t, 5, sizeof t[0], cli_cmp_dbl);
    return t[2];
}

typedef struct {
    double time_med, time_max;
    size_t mem_max;
    size_t count;
    bool agree;
} locals_t;

/* Builds the local plans of n ranks spread evenly over one side. */
static int time_locals(ferry_ctx_t *ctx, meter_t *meter, const ferry_layout_t *src,
                       const ferry_layout_t *dst, ferry_plan_params_t base, ferry_side_t side,
                       uint32_t world, uint64_t n, uint64_t digest, locals_t *out) {
    if (n > world) n = world;
    double *t = calloc(n ? n : 1, sizeof *t);
    if (!t) return -1;
    out->agree = true;
    out->mem_max = 0;
    out->count = n;
    for (uint64_t i = 0; i < n; i++) {
        base.field_mask |= FERRY_PLAN_PARAM_ONLY;
        base.only_side = side;
        base.only_rank = (uint32_t)(i * world / n);
        ferry_plan_t *lp = NULL;
        size_t before = meter->cur;
        meter->peak = meter->cur;
        double t0 = cli_now_s();
        ferry_status_t st = ferry_plan_build(ctx, src, dst, &base, &lp);
        t[i] = cli_now_s() - t0;
        if (st != FERRY_OK) {
            fprintf(stderr, "ferry plan: local plan of rank %u: %s\n", base.only_rank, ferry_ctx_error(ctx));
            free(t);
            return -1;
        }
        if (meter->peak - before > out->mem_max) out->mem_max = meter->peak - before;
        if (ferry_plan_digest(lp) != digest) out->agree = false;
        ferry_plan_destroy(lp);
    }
    qsort(t, n, sizeof *t, cli_cmp_dbl);
    out->time_med = n ? t[n / 2] : 0;
    out->time_max = n ? t[n - 1] : 0;
    free(t);
    return 0;
}

static void print_pairs(const ferry_plan_t *p, bool writer, uint32_t rank) {
    size_t np = ferry_plan_pair_count(p);
    const ferry_plan_pair_t *pairs = ferry_plan_pairs(p);
    const ferry_plan_bucket_t *buckets = ferry_plan_buckets(p);
    char b1[32];
    printf("\n%s rank %u, %s:\n", writer ? "source" : "destination", rank,
           writer ? "the destination ranks it serves" : "its sources in reading order");
    printf("  %8s %8s %8s %8s %12s\n", writer ? "dst rank" : "src rank", "ops", "buckets", "packed", "bytes");
    for (size_t i = 0; i < np; i++) {
        if (i == 24 && np > 32) {
            printf("  ... (%zu more pairs)\n", np - i);
            break;
        }
        size_t packed = 0;
        for (size_t b = pairs[i].first_bucket; b < pairs[i].first_bucket + pairs[i].bucket_count; b++)
            packed += (buckets[b].flags & FERRY_BUCKET_PACKED) != 0;
        printf("  %8u %8zu %8zu %8zu %12s\n", writer ? pairs[i].dst_rank : pairs[i].src_rank,
               pairs[i].op_count, pairs[i].bucket_count, packed, cli_bytes(pairs[i].bytes, b1, sizeof b1));
    }
    if (writer) printf("  pack area %s\n", cli_bytes(ferry_plan_pack_bytes(p, rank), b1, sizeof b1));
}

int cmd_plan(int argc, char **argv) {
    const char *model_arg = NULL, *train_arg = NULL, *infer_arg = NULL, *rank_arg = NULL,
               *writer_arg = NULL, *rph_arg = NULL, *bucket_arg = NULL, *pack_arg = NULL, *limit_arg = NULL,
               *locals_arg = NULL, *repeat_arg = NULL;
    bool json = false, mtp = false;
    ferry_model_quant_t quant = FERRY_MODEL_QUANT_NONE;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_opt(argc, argv, &i, "--model", &v)) model_arg = v;
        else if (cli_opt(argc, argv, &i, "--train", &v)) train_arg = v;
        else if (cli_opt(argc, argv, &i, "--infer", &v)) infer_arg = v;
        else if (cli_opt(argc, argv, &i, "--rank", &v)) rank_arg = v;
        else if (cli_opt(argc, argv, &i, "--writer", &v)) writer_arg = v;
        else if (cli_opt(argc, argv, &i, "--ranks-per-host", &v)) rph_arg = v;
        else if (cli_opt(argc, argv, &i, "--bucket", &v)) bucket_arg = v;
        else if (cli_opt(argc, argv, &i, "--pack-below", &v)) pack_arg = v;
        else if (cli_opt(argc, argv, &i, "--pack-limit", &v)) limit_arg = v;
        else if (cli_opt(argc, argv, &i, "--locals", &v)) locals_arg = v;
        else if (cli_opt(argc, argv, &i, "--repeat", &v)) repeat_arg = v;
        else if (cli_opt(argc, argv, &i, "--quant", &v)) {
            if (v && !cli_quant(v, &quant)) return CLI_USAGE;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
            continue;
        } else if (!strcmp(argv[i], "--mtp")) {
            mtp = true;
            continue;
        } else if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return CLI_OK;
        } else {
            fprintf(stderr, "ferry plan: unknown option %s\n", argv[i]);
            usage(stderr);
            return CLI_USAGE;
        }
        if (!v) return CLI_USAGE;
    }
    if (!model_arg || !train_arg || !infer_arg) {
        usage(stderr);
        return CLI_USAGE;
    }
    uint64_t rph = 8, nlocals = 0, rank = UINT64_MAX, writer = UINT64_MAX, repeat = 1;
    ferry_plan_params_t params = {0};
    const uint64_t ranks = 1u << 24; /* ferry_parallel_parse's limit on a world */
    if ((rph_arg && !cli_u64("--ranks-per-host", rph_arg, 1, ranks, &rph)) ||
        (locals_arg && !cli_u64("--locals", locals_arg, 0, ranks, &nlocals)) ||
        (repeat_arg && !cli_u64("--repeat", repeat_arg, 1, 1000, &repeat)) ||
        (rank_arg && !cli_u64("--rank", rank_arg, 0, ranks - 1, &rank)) ||
        (writer_arg && !cli_u64("--writer", writer_arg, 0, ranks - 1, &writer)) ||
        (bucket_arg && !cli_size("--bucket", bucket_arg, 1, 1ull << 40, &params.bucket_bytes)) ||
        (pack_arg && !cli_size("--pack-below", pack_arg, 0, 1ull << 40, &params.pack_below)) ||
        (limit_arg && !cli_size("--pack-limit", limit_arg, 0, 1ull << 50, &params.pack_limit)))
        return CLI_USAGE;
    if (rank_arg && writer_arg) {
        fprintf(stderr, "ferry plan: give --rank or --writer, not both\n");
        return CLI_USAGE;
    }
    if (bucket_arg) params.field_mask |= FERRY_PLAN_PARAM_BUCKET_BYTES;
    if (pack_arg) params.field_mask |= FERRY_PLAN_PARAM_PACK_BELOW;
    if (limit_arg) params.field_mask |= FERRY_PLAN_PARAM_PACK_LIMIT;

    meter_t meter = {0, 0};
    ferry_ctx_params_t cp = {.field_mask = FERRY_CTX_PARAM_ALLOCATOR,
                             .allocator = {m_alloc, m_realloc, m_free, &meter}};
    ferry_ctx_t *ctx = NULL;
    char detail[512];
    if (ferry_ctx_create(&cp, &ctx, detail, sizeof detail) != FERRY_OK) {
        fprintf(stderr, "ferry: %s\n", detail);
        return CLI_USAGE;
    }
    int rc = CLI_USAGE;
    ferry_model_t *m = NULL, *em = NULL; /* the trainer's spec, the engine's (when it differs) */
    ferry_layout_t *src = NULL, *dst = NULL;
    ferry_plan_t *plan = NULL, *local = NULL;
    uint32_t *src_hosts = NULL, *dst_hosts = NULL;
    uint64_t *v = NULL;
    json_t *jout = NULL;
    ferry_parallel_t tp, ip;
    if (ferry_parallel_parse(ctx, FERRY_SIDE_TRAIN, train_arg, &tp) != FERRY_OK ||
        ferry_parallel_parse(ctx, FERRY_SIDE_INFER, infer_arg, &ip) != FERRY_OK) {
        fprintf(stderr, "ferry plan: %s\n", ferry_ctx_error(ctx));
        goto out;
    }
    if (!(m = cli_load_model(ctx, model_arg, mtp))) goto out;
    if (quant != FERRY_MODEL_QUANT_NONE && !(em = cli_load_model_quant(ctx, model_arg, mtp, quant))) goto out;
    double t0 = cli_now_s();
    ferry_status_t st = ferry_layout_build(ctx, m, &tp, FERRY_ALL_RANKS, &src);
    if (st == FERRY_OK) st = ferry_layout_build(ctx, em ? em : m, &ip, FERRY_ALL_RANKS, &dst);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry plan: %s (%s)\n", ferry_ctx_error(ctx), ferry_status_name(st));
        goto out;
    }
    double t_layout = cli_now_s() - t0;
    size_t layout_mem = meter.cur;
    uint32_t sw = ferry_layout_world_size(src), dw = ferry_layout_world_size(dst);
    if ((rank != UINT64_MAX && rank >= dw) || (writer != UINT64_MAX && writer >= sw)) {
        fprintf(stderr, "ferry plan: --rank must be below %u and --writer below %u\n", dw, sw);
        goto out;
    }
    src_hosts = malloc(sw * sizeof *src_hosts);
    dst_hosts = malloc(dw * sizeof *dst_hosts);
    v = malloc((sw > dw ? sw : dw) * sizeof *v);
    if (!src_hosts || !dst_hosts || !v) {
        fprintf(stderr, "ferry plan: out of memory\n");
        rc = CLI_FAIL;
        goto out;
    }
    uint32_t src_host_count = (uint32_t)((sw + rph - 1) / rph);
    for (uint32_t r = 0; r < sw; r++) src_hosts[r] = (uint32_t)(r / rph);
    for (uint32_t r = 0; r < dw; r++) dst_hosts[r] = src_host_count + (uint32_t)(r / rph);
    params.field_mask |= FERRY_PLAN_PARAM_SRC_HOSTS | FERRY_PLAN_PARAM_DST_HOSTS;
    params.src_hosts = src_hosts;
    params.dst_hosts = dst_hosts;

    rc = CLI_FAIL;
    double times[1000];
    size_t plan_mem = 0;
    for (uint64_t i = 0; i < repeat; i++) {
        ferry_plan_destroy(plan);
        plan = NULL;
        meter.peak = meter.cur;
        t0 = cli_now_s();
        st = ferry_plan_build(ctx, src, dst, &params, &plan);
        times[i] = cli_now_s() - t0;
        if (meter.peak - layout_mem > plan_mem) plan_mem = meter.peak - layout_mem;
        if (st != FERRY_OK) {
            fprintf(stderr, "ferry plan: %s (%s)\n", ferry_ctx_error(ctx), ferry_status_name(st));
            goto out;
        }
    }
    qsort(times, repeat, sizeof times[0], cli_cmp_dbl);
    double t_plan = times[repeat / 2];
    double t_read = piece_read_seconds(src, dst);
    t0 = cli_now_s();
    ferry_status_t vst = ferry_plan_verify(plan, src, dst);
    double t_verify = cli_now_s() - t0;
    uint64_t digest = ferry_plan_digest(plan);
    locals_t ldst = {0}, lsrc = {0};
    if (nlocals && (time_locals(ctx, &meter, src, dst, params, FERRY_SIDE_INFER, dw, nlocals, digest, &ldst) ||
                    time_locals(ctx, &meter, src, dst, params, FERRY_SIDE_TRAIN, sw, nlocals, digest, &lsrc)))
        goto out;
    if (rank != UINT64_MAX || writer != UINT64_MAX) {
        ferry_plan_params_t lp = params;
        lp.field_mask |= FERRY_PLAN_PARAM_ONLY;
        lp.only_side = rank != UINT64_MAX ? FERRY_SIDE_INFER : FERRY_SIDE_TRAIN;
        lp.only_rank = (uint32_t)(rank != UINT64_MAX ? rank : writer);
        if (ferry_plan_build(ctx, src, dst, &lp, &local) != FERRY_OK ||
            ferry_plan_verify(local, src, dst) != FERRY_OK) {
            fprintf(stderr, "ferry plan: local plan: %s\n",
                    local ? ferry_plan_error(local) : ferry_ctx_error(ctx));
            goto out;
        }
    }

    ferry_plan_stats_t s;
    ferry_plan_stats(plan, &s);
    for (uint32_t r = 0; r < sw; r++) v[r] = ferry_plan_src_bytes(plan, r);
    spread_t ssrc = spread(v, sw);
    for (uint32_t r = 0; r < sw; r++) v[r] = 0;
    for (uint32_t r = 0; r < sw; r++) v[src_hosts[r]] += ferry_plan_src_bytes(plan, r);
    spread_t shost = spread(v, src_host_count);
    for (uint32_t r = 0; r < dw; r++) v[r] = ferry_plan_dst_bytes(plan, r);
    spread_t sdst = spread(v, dw);
    double src_imb = ssrc.mean > 0 ? (double)ssrc.max / ssrc.mean : 0;
    double src_lb = s.src_lower_bound ? (double)s.src_max / (double)s.src_lower_bound : 0;
    double host_imb = shost.mean > 0 ? (double)shost.max / shost.mean : 0;
    char spec_t[512], spec_i[512], dg[32];
    ferry_parallel_format(&tp, spec_t, sizeof spec_t);
    ferry_parallel_format(&ip, spec_i, sizeof spec_i);
    snprintf(dg, sizeof dg, "%016llx", (unsigned long long)digest);
    if (vst == FERRY_OK) rc = CLI_OK;

    if (json) {
        jout = json_pack(
            "{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:f, s:f, s:I, s:f, s:s}", "model", ferry_model_name(m),
            "train", spec_t, "infer", spec_i, "src_ranks", (json_int_t)sw, "dst_ranks", (json_int_t)dw,
            "src_pieces", (json_int_t)ferry_layout_piece_count(src), "dst_pieces",
            (json_int_t)ferry_layout_piece_count(dst), "layout_seconds", t_layout, "plan_seconds", t_plan,
            "plan_peak_bytes", (json_int_t)plan_mem, "verify_seconds", t_verify, "digest", dg);
        json_object_set_new(jout, "bytes", json_integer((json_int_t)s.bytes));
        json_object_set_new(jout, "model_bytes", json_integer((json_int_t)ferry_model_byte_size(m)));
        json_object_set_new(jout, "fragments", json_integer((json_int_t)s.fragments));
        json_object_set_new(jout, "routes", json_integer((json_int_t)s.routes));
        json_object_set_new(jout, "src_bytes",
                            json_pack("{s:I, s:I, s:I, s:f, s:f, s:I, s:I, s:f}", "min", (json_int_t)ssrc.min,
                                      "median", (json_int_t)ssrc.median, "max", (json_int_t)ssrc.max,
                                      "max_over_mean", src_imb, "max_over_lower_bound", src_lb,
                                      "lower_bound", (json_int_t)s.src_lower_bound, "serving",
                                      (json_int_t)s.src_serving, "host_max_over_mean", host_imb));
        json_object_set_new(jout, "dst_bytes",
                            json_pack("{s:I, s:I, s:I}", "min", (json_int_t)sdst.min, "median",
                                      (json_int_t)sdst.median, "max", (json_int_t)sdst.max));
        json_object_set_new(jout, "ops",
                            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "ops", (json_int_t)s.ops, "runs",
                                      (json_int_t)s.runs, "packed", (json_int_t)s.packed_ops, "gathered", (json_int_t)s.gather_ops, "pack_bytes",
                                      (json_int_t)s.pack_bytes, "buckets", (json_int_t)s.buckets, "pairs",
                                      (json_int_t)s.pairs, "quant_ops", (json_int_t)s.quant_ops, "quant_bytes",
                                      (json_int_t)s.quant_bytes));
        json_object_set_new(jout, "verified", json_boolean(vst == FERRY_OK));
        if (vst != FERRY_OK) json_object_set_new(jout, "verify_error", json_string(ferry_plan_error(plan)));
        if (nlocals)
            json_object_set_new(
                jout, "locals",
                json_pack("{s:I, s:f, s:f, s:I, s:f, s:f, s:I, s:b, s:f}", "count", (json_int_t)ldst.count,
                          "dst_seconds_median", ldst.time_med, "dst_seconds_max", ldst.time_max,
                          "dst_peak_bytes", (json_int_t)ldst.mem_max, "src_seconds_median", lsrc.time_med,
                          "src_seconds_max", lsrc.time_max, "src_peak_bytes", (json_int_t)lsrc.mem_max,
                          "digests_agree", ldst.agree && lsrc.agree, "piece_copy_seconds", t_read));
        json_dumpf(jout, stdout, JSON_INDENT(2));
        printf("\n");
        goto out;
    }
    char b1[32], b2[32], b3[32];
    printf("%s: train %s (%u ranks) -> infer %s (%u ranks)\n", ferry_model_name(m), spec_t, sw, spec_i, dw);
    printf("layouts    %zu source pieces, %zu destination pieces; built in %.2f s, %s\n",
           ferry_layout_piece_count(src), ferry_layout_piece_count(dst), t_layout,
           cli_bytes(layout_mem, b1, sizeof b1));
    printf("plan       global in %.3f s%s, peak %s; %llu fragments in %llu routes; digest %s\n", t_plan,
           repeat > 1 ? " (median)" : "", cli_bytes(plan_mem, b1, sizeof b1), (unsigned long long)s.fragments,
           (unsigned long long)s.routes, dg);
    printf("moved      %s into %u destination ranks (%.2f copies of the model)\n",
           cli_bytes(s.bytes, b1, sizeof b1), dw, (double)s.bytes / (double)ferry_model_byte_size(m));
    printf("sources    %u of %u ranks serve: min %s, median %s, max %s; max/mean %.3f, max/lower bound %.3f\n",
           s.src_serving, sw, cli_bytes(ssrc.min, b1, sizeof b1), cli_bytes(ssrc.median, b2, sizeof b2),
           cli_bytes(ssrc.max, b3, sizeof b3), src_imb, src_lb);
    printf("hosts      %llu ranks per host: max %s; max/mean %.3f\n", (unsigned long long)rph,
           cli_bytes(shost.max, b1, sizeof b1), host_imb);
    printf("receivers  min %s, median %s, max %s; max/mean %.3f\n", cli_bytes(sdst.min, b1, sizeof b1),
           cli_bytes(sdst.median, b2, sizeof b2), cli_bytes(sdst.max, b3, sizeof b3),
           sdst.mean > 0 ? (double)sdst.max / sdst.mean : 0);
    char gathered[64] = "";
    if (s.gather_ops) snprintf(gathered, sizeof gathered, " (%llu strided ops read run by run)", (unsigned long long)s.gather_ops);
    printf("ops        %llu ops (%llu contiguous runs before packing), %llu packed into %s of pack "
           "areas%s, %llu transfers in %llu pairs\n",
           (unsigned long long)s.ops, (unsigned long long)s.runs, (unsigned long long)s.packed_ops,
           cli_bytes(s.pack_bytes, b1, sizeof b1), gathered, (unsigned long long)s.buckets,
           (unsigned long long)s.pairs);
    if (s.quant_ops)
        printf("quantized  %llu quant ops write %s of fp8 bytes and scales into the writers' pack areas (each "
               "block of the engine's fp8 weights once per version)\n",
               (unsigned long long)s.quant_ops, cli_bytes(s.quant_bytes, b1, sizeof b1));
    if (vst == FERRY_OK)
        printf("verified   every byte of the %zu destination pieces is written exactly once, from a "
               "source piece that holds it (%.2f s)\n", ferry_layout_piece_count(dst), t_verify);
    else
        printf("verified   FAILED: %s\n", ferry_plan_error(plan));
    if (nlocals) {
        printf("local      %zu destination ranks: median %.1f ms, max %.1f ms, peak %s; %zu source ranks: "
               "median %.1f ms, max %.1f ms, peak %s; digests %s\n",
               ldst.count, ldst.time_med * 1e3, ldst.time_max * 1e3, cli_bytes(ldst.mem_max, b1, sizeof b1),
               lsrc.count, lsrc.time_med * 1e3, lsrc.time_max * 1e3, cli_bytes(lsrc.mem_max, b2, sizeof b2),
               ldst.agree && lsrc.agree ? "agree with the global plan" : "DIFFER");
        printf("floor      copying all %zu pieces once takes %.1f ms: a local plan costs %.1f such copies\n",
               ferry_layout_piece_count(src) + ferry_layout_piece_count(dst), t_read * 1e3,
               t_read > 0 ? ldst.time_med / t_read : 0);
    }
    if (local) print_pairs(local, rank == UINT64_MAX, (uint32_t)(rank != UINT64_MAX ? rank : writer));
    if (nlocals && !(ldst.agree && lsrc.agree)) rc = CLI_FAIL;
out:
    if (jout) json_decref(jout);
    free(src_hosts);
    free(dst_hosts);
    free(v);
    ferry_plan_destroy(local);
    ferry_plan_destroy(plan);
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(em);
    ferry_model_destroy(m);
    ferry_ctx_destroy(ctx);
    return rc;
}
