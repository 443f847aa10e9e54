/* ferry bench delta: bytes per changed element and encode/apply speed of
 * ferry's sparse deltas on synthetic RL updates (tools/synth.h), beside
 * what other systems ship for the same change, measured in the same run:
 *   TRL raw       int32 index + bf16 value per changed element (6 B);
 *   TRL gap       gaps as uint16 (uint32 when one does not fit) + bf16 values;
 *   zstd          gaps as uint32 and the bf16 values, each zstd -3;
 * and beside memcpy of the dense tensor with 1 and all threads (the fastest
 * copy: the limit), and the floor under any verified encoder on one thread
 * (bench_floor.c). Speeds are dense tensor bytes per second, medians of
 * --repeat runs; every applied delta is compared with the expected next
 * version. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "cli.h"
#include "bench_floor.h"
#include "synth.h"

typedef struct bench_opts {
    uint64_t elems;
    uint32_t steps, threads, repeat;
    double lrs[8];
    uint32_t n_lrs;
} bench_opts_t;

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry bench delta [--elems N] [--steps S] [--lr LIST] [--threads T] [--repeat R]\n"
            "  Synthetic bf16 weights (fp32 masters ~ N(0, 0.02), Adam on noisy gradients) take S\n"
            "  steps at each learning rate; the delta between steps S-1 and S is encoded by ferry and\n"
            "  sized as TRL's raw and gap patches and as zstd'd gaps + values would ship it.\n"
            "  Speeds (medians) are beside memcpy of the tensor (the fastest of at least 9 copies:\n"
            "  the limit) and the floor under any verified encoder: reading base and next once,\n"
            "  finding the changed lines, hashing next.\n"
            "  --elems N    elements of the tensor (default 16M; K/M/G suffixes)\n"
            "  --steps S    Adam steps before the measured one (default 5)\n"
            "  --lr LIST    learning rates (default 1e-6,3e-6,1e-5)\n"
            "  --threads T  threads for the all-threads figures (default: online CPUs)\n"
            "  --repeat R   runs per timing, median reported (default 5)\n");
}

static double median(double *v, uint32_t n) {
    qsort(v, n, sizeof *v, cli_cmp_dbl);
    return v[n / 2];
}

/* ---- a parallel for over chunks ---- */
typedef struct job {
    void (*fn)(struct job *, uint32_t chunk);
    uint32_t chunks, threads, next_t;
    pthread_mutex_t mu;
    /* the work */
    ferry_ctx_t *ctx;
    ferry_delta_codec_t **codecs;
    const uint16_t *base, *next;
    uint16_t *region;
    uint64_t elems;
    uint32_t chunk_elems;
    uint8_t **recs;
    size_t *lens;
    const uint8_t *delta;
    size_t delta_len;
    ferry_status_t st;
    /* synth */
    delta_synth_t *synth;
    uint16_t *out;
} job_t;

typedef struct worker {
    job_t *job;
    uint32_t t;
} worker_t;

static void *work(void *arg) {
    worker_t *w = arg;
    job_t *j = w->job;
    for (uint32_t c = w->t; c < j->chunks; c += j->threads) j->fn(j, c);
    return NULL;
}

static void run_parallel(job_t *j, uint32_t threads) {
    if (threads < 1) threads = 1;
    j->threads = threads;
    pthread_t th[64];
    worker_t ws[64] = {{0}};
    for (uint32_t t = 0; t < threads; t++) ws[t] = (worker_t){j, t};
    for (uint32_t t = 1; t < threads; t++) pthread_create(&th[t], NULL, work, &ws[t]);
    work(&ws[0]);
    for (uint32_t t = 1; t < threads; t++) pthread_join(th[t], NULL);
}

static uint32_t chunk_len(const job_t *j, uint32_t c) {
    uint64_t at = (uint64_t)c * j->chunk_elems;
    return (uint32_t)(j->elems - at < j->chunk_elems ? j->elems - at : j->chunk_elems);
}

/* each thread's codec is codecs[chunk % threads] */
static void encode_chunk(job_t *j, uint32_t c) {
    uint64_t at = (uint64_t)c * j->chunk_elems;
    uint32_t n = chunk_len(j, c);
    ferry_status_t st = ferry_delta_chunk_encode(j->codecs[c % j->threads], FERRY_DTYPE_BF16, 0, 0, j->base + at,
                                                 j->next + at, n, j->recs[c],
                                                 ferry_delta_chunk_bound(FERRY_DTYPE_BF16, n), &j->lens[c], NULL, NULL);
    if (st != FERRY_OK) j->st = st;
}

static void apply_chunk(job_t *j, uint32_t c) {
    const void *rec;
    size_t rl;
    ferry_delta_codec_t *codec = j->codecs[c % j->threads];
    ferry_status_t st = ferry_delta_chunk_get(codec, j->delta, j->delta_len, c, &rec, &rl);
    if (st == FERRY_OK)
        st = ferry_delta_chunk_apply(codec, FERRY_DTYPE_BF16, rec, rl, j->region + (uint64_t)c * j->chunk_elems,
                                     chunk_len(j, c));
    if (st != FERRY_OK) j->st = st;
}

static void synth_chunk(job_t *j, uint32_t c) {
    uint64_t at = (uint64_t)c * j->chunk_elems, to = at + chunk_len(j, c);
    if (j->out)
        delta_synth_bf16(j->synth, j->out, at, to);
    else
        delta_synth_step_range(j->synth, at, to);
}

/* ---- the baselines' sizes ---- */
typedef struct sizes {
    uint64_t changed, trl_raw, trl_gap, zstd;
} sizes_t;

static int baseline_sizes(const uint16_t *base, const uint16_t *next, uint64_t n, sizes_t *s) {
    uint64_t m = 0, max_gap = 0, prev = 0;
    for (uint64_t i = 0; i < n; i++)
        if (base[i] != next[i]) {
            uint64_t g = m ? i - prev : i;
            if (g > max_gap) max_gap = g;
            prev = i;
            m++;
        }
    uint32_t *gaps = malloc((m + 1) * 4);
    uint16_t *vals = malloc((m + 1) * 2);
    if (!gaps || !vals) return -1;
    uint64_t k = 0;
    prev = 0;
    for (uint64_t i = 0; i < n; i++)
        if (base[i] != next[i]) {
            gaps[k] = (uint32_t)(k ? i - prev : i);
            vals[k++] = next[i];
            prev = i;
        }
    s->changed = m;
    s->trl_raw = m * 6;
    s->trl_gap = m * ((max_gap <= 0xFFFF ? 2 : 4) + 2);
    size_t cap = ZSTD_compressBound(m * 4 + 1);
    void *z = malloc(cap);
    size_t zg = ZSTD_compress(z, cap, gaps, m * 4, 3), zv = ZSTD_compress(z, cap, vals, m * 2, 3);
    free(z);
    free(gaps);
    free(vals);
    if (ZSTD_isError(zg) || ZSTD_isError(zv)) return -1;
    s->zstd = zg + zv;
    return 0;
}

static bool parse_count(const char *s, uint64_t *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    uint64_t mult = 1;
    if (*end == 'K' || *end == 'k') mult = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm') mult = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g') mult = 1ull << 30, end++;
    if (end == s || *end || v == 0) return false;
    *out = v * mult;
    return true;
}

static int parse_args(int argc, char **argv, bench_opts_t *o) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (bench_opts_t){.elems = 16u << 20, .steps = 5, .threads = cpus > 0 ? (uint32_t)cpus : 1, .repeat = 5,
                        .lrs = {1e-6, 3e-6, 1e-5}, .n_lrs = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return CLI_OK + 100;
        }
        if (!v) {
            fprintf(stderr, "ferry bench delta: unknown option or missing value: %s\n", a);
            usage(stderr);
            return CLI_USAGE;
        }
        i++;
        char *end;
        if (!strcmp(a, "--elems")) {
            if (!parse_count(v, &o->elems) || o->elems > (1ull << 32)) {
                fprintf(stderr, "ferry bench delta: --elems %s: want 1 to 4G\n", v);
                return CLI_USAGE;
            }
        } else if (!strcmp(a, "--steps") || !strcmp(a, "--threads") || !strcmp(a, "--repeat")) {
            unsigned long x = strtoul(v, &end, 10);
            if (*end || end == v || x < 1 || x > (strcmp(a, "--threads") ? 1000 : 64)) {
                fprintf(stderr, "ferry bench delta: %s %s: want a positive count%s\n", a, v,
                        strcmp(a, "--threads") ? "" : " up to 64");
                return CLI_USAGE;
            }
            *(!strcmp(a, "--steps") ? &o->steps : !strcmp(a, "--threads") ? &o->threads : &o->repeat) = (uint32_t)x;
        } else if (!strcmp(a, "--lr")) {
            o->n_lrs = 0;
            for (const char *p = v; *p && o->n_lrs < 8;) {
                double lr = strtod(p, &end);
                if (end == p || lr <= 0 || lr > 1 || (*end && *end != ',')) {
                    fprintf(stderr, "ferry bench delta: --lr %s: want a comma list of rates in (0, 1]\n", v);
                    return CLI_USAGE;
                }
                o->lrs[o->n_lrs++] = lr;
                p = *end ? end + 1 : end;
            }
        } else {
            fprintf(stderr, "ferry bench delta: unknown option %s\n", a);
            usage(stderr);
            return CLI_USAGE;
        }
    }
    return CLI_OK;
}

int bench_delta(int argc, char **argv) {
    bench_opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc != CLI_OK) return rc == CLI_OK + 100 ? CLI_OK : rc;
    uint64_t n = o.elems, bytes = n * 2;
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_FAIL;
    float *w = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4), *d = malloc(n * 4);
    uint16_t *base = malloc(bytes), *next = malloc(bytes), *region = malloc(bytes);
    uint32_t chunk = FERRY_DELTA_CHUNK_DEFAULT, chunks = (uint32_t)((n + chunk - 1) / chunk);
    uint8_t **recs = calloc(chunks, sizeof *recs);
    const void **crecs = calloc(chunks, sizeof *crecs);
    size_t *lens = calloc(chunks, sizeof *lens), cap = ferry_delta_bound(FERRY_DTYPE_BF16, n, 0);
    uint8_t *delta = malloc(cap);
    uint64_t *bsums = malloc((chunks + 1) * sizeof *bsums);
    ferry_delta_codec_t *codecs[64] = {0};
    bool ok = w && m && v && d && base && next && region && recs && crecs && lens && delta && bsums;
    for (uint32_t c = 0; ok && c < chunks; c++) {
        uint64_t at = (uint64_t)c * chunk;
        recs[c] = malloc(ferry_delta_chunk_bound(FERRY_DTYPE_BF16, (uint32_t)(n - at < chunk ? n - at : chunk)));
        crecs[c] = recs[c];
        ok = recs[c] != NULL;
    }
    for (uint32_t t = 0; ok && t < o.threads; t++) ok = ferry_delta_codec_create(ctx, &codecs[t]) == FERRY_OK;
    if (!ok) {
        fprintf(stderr, "ferry bench delta: out of memory for %llu elements\n", (unsigned long long)n);
        rc = CLI_FAIL;
        goto out;
    }
    /* memcpy of the dense tensor, 1 and all threads, between pages already
       written (an untouched source reads the kernel's one zero page, which
       stays in cache, and the copy measured about 1.5x its real speed); the
       fastest of at least 9 copies, as the limit: on a shared host the
       same copy varies by up to 1.8x from one try to the next */
    memset(base, 0x3c, bytes);
    memset(region, 0, bytes);
    const uint32_t copies = o.repeat < 9 ? 9 : o.repeat;
    double t1 = 1e30, tn = 1e30;
    for (uint32_t r = 0; r < copies; r++) {
        double t = cli_now_s();
        cli_memcpy_threads((uint8_t *)region, (const uint8_t *)base, bytes, 1);
        t = cli_now_s() - t;
        t1 = t < t1 ? t : t1;
        t = cli_now_s();
        cli_memcpy_threads((uint8_t *)region, (const uint8_t *)base, bytes, o.threads);
        t = cli_now_s() - t;
        tn = t < tn ? t : tn;
    }
    double mem1 = (double)bytes / t1 / 1e9, memn = (double)bytes / tn / 1e9;
    char sz[32];
    printf("ferry bench delta: %llu bf16 elements (%s), delta of Adam step %u vs %u, %u threads, median of %u\n",
           (unsigned long long)n, cli_bytes(bytes, sz, sizeof sz), o.steps, o.steps - 1, o.threads, o.repeat);
    printf("memcpy of the dense tensor, fastest of %u: %.2f GB/s (1 thread), %.2f GB/s (%u threads)\n\n", copies,
           mem1, memn, o.threads);
    printf("%-6s %7s | %-22s | %6s %6s %6s | %-27s | %-27s\n", "", "", "bytes per changed elem", "TRL", "TRL", "zstd",
           "encode GB/s (x memcpy)", "apply GB/s (x memcpy)");
    printf("%-6s %7s | %6s %6s %8s | %6s %6s %6s | %13s %13s | %13s %13s\n", "lr", "changed", "pos", "val", "ferry",
           "raw", "gap", "", "1 thread", "all", "1 thread", "all");
    double given[8]; /* per lr (o.lrs): 1-thread encode with the base's chunk sums given */
    for (uint32_t li = 0; li < o.n_lrs; li++) {
        delta_synth_t s;
        delta_synth_init(&s, n, false, o.lrs[li], 1, w, m, v, d);
        job_t j = {.chunks = chunks, .chunk_elems = chunk, .elems = n, .synth = &s};
        j.fn = synth_chunk;
        for (uint32_t t = 0; t < o.steps; t++) {
            if (t + 1 == o.steps) {
                j.out = base;
                run_parallel(&j, o.threads);
                j.out = NULL;
            }
            run_parallel(&j, o.threads);
            delta_synth_next(&s);
        }
        j.out = next;
        run_parallel(&j, o.threads);
        sizes_t bs;
        if (baseline_sizes(base, next, n, &bs) != 0) {
            fprintf(stderr, "ferry bench delta: the zstd baseline failed\n");
            rc = CLI_FAIL;
            goto out;
        }
        /* ferry, one thread: the whole-region calls */
        ferry_delta_params_t p = {.field_mask = 0, .dtype = FERRY_DTYPE_BF16};
        double te1[64], ten[64], ta1[64], tan[64];
        size_t len = 0;
        ferry_delta_info_t info;
        for (uint32_t r = 0; r < o.repeat; r++) {
            double t = cli_now_s();
            ferry_status_t st = ferry_delta_encode(codecs[0], &p, base, next, n, delta, cap, &len);
            te1[r] = cli_now_s() - t;
            memcpy(region, base, bytes);
            t = cli_now_s();
            if (st == FERRY_OK) st = ferry_delta_apply(codecs[0], delta, len, region, n, FERRY_DELTA_ANY_BASE, NULL);
            ta1[r] = cli_now_s() - t;
            if (st != FERRY_OK || memcmp(region, next, bytes) != 0) {
                fprintf(stderr, "ferry bench delta: round trip failed: %s %s\n", ferry_status_name(st),
                        ferry_delta_codec_detail(codecs[0]));
                rc = CLI_FAIL;
                goto out;
            }
        }
        ferry_delta_inspect(codecs[0], delta, len, &info);
        /* the sync writer's case from its second delta on: the base's chunk
           sums came out of the encode that made it (here from an encode
           towards base, untimed), so base is not hashed; same bytes */
        {
            ferry_delta_params_t q = {.field_mask = FERRY_DELTA_PARAM_NEXT_CHUNK_SUMS, .dtype = FERRY_DTYPE_BF16,
                                      .next_chunk_sums = bsums};
            size_t l2 = 0;
            ferry_status_t st = ferry_delta_encode(codecs[0], &q, next, base, n, delta, cap, &l2);
            q.field_mask = FERRY_DELTA_PARAM_BASE_CHUNK_SUMS;
            q.base_chunk_sums = bsums;
            double tg[64];
            for (uint32_t r = 0; r < o.repeat && st == FERRY_OK; r++) {
                double t = cli_now_s();
                st = ferry_delta_encode(codecs[0], &q, base, next, n, delta, cap, &l2);
                tg[r] = cli_now_s() - t;
            }
            if (st != FERRY_OK || l2 != len) {
                fprintf(stderr, "ferry bench delta: encode with the base's sums failed: %s %s\n",
                        ferry_status_name(st), ferry_delta_codec_detail(codecs[0]));
                rc = CLI_FAIL;
                goto out;
            }
            given[li] = (double)bytes / median(tg, o.repeat) / 1e9;
        }
        /* all threads: chunks spread over threads, then assembled */
        j = (job_t){.chunks = chunks, .chunk_elems = chunk, .elems = n, .codecs = codecs, .base = base, .next = next,
                    .region = region, .recs = recs, .lens = lens, .delta = delta, .st = FERRY_OK};
        for (uint32_t r = 0; r < o.repeat; r++) {
            j.fn = encode_chunk;
            double t = cli_now_s();
            run_parallel(&j, o.threads);
            size_t len2 = 0;
            if (j.st == FERRY_OK)
                j.st = ferry_delta_assemble(codecs[0], &p, n, crecs, lens, delta, cap, &len2);
            ten[r] = cli_now_s() - t;
            j.delta_len = len2;
            memcpy(region, base, bytes);
            j.fn = apply_chunk;
            t = cli_now_s();
            if (j.st == FERRY_OK) run_parallel(&j, o.threads);
            for (uint32_t c = 0; c < o.threads; c++)
                j.st == FERRY_OK ? ferry_delta_codec_commit(codecs[c]) : ferry_delta_codec_rollback(codecs[c]);
            tan[r] = cli_now_s() - t;
            if (j.st != FERRY_OK || len2 != len || memcmp(region, next, bytes) != 0) {
                fprintf(stderr, "ferry bench delta: threaded round trip failed: %s\n", ferry_status_name(j.st));
                rc = CLI_FAIL;
                goto out;
            }
        }
        double mc = (double)info.changed;
        double e1 = (double)bytes / median(te1, o.repeat) / 1e9, en = (double)bytes / median(ten, o.repeat) / 1e9;
        double a1 = (double)bytes / median(ta1, o.repeat) / 1e9, an = (double)bytes / median(tan, o.repeat) / 1e9;
        printf("%-6.0e %6.2f%% | %6.3f %6.3f %8.3f | %6.2f %6.2f %6.2f | %5.2f (%.2fx) %5.2f (%.2fx) | %5.2f (%.2fx) "
               "%5.2f (%.2fx)\n",
               o.lrs[li], 100.0 * mc / (double)n, (double)info.bytes_positions / mc, (double)info.bytes_values / mc,
               (double)len / mc, (double)bs.trl_raw / mc, (double)bs.trl_gap / mc, (double)bs.zstd / mc, e1,
               e1 / mem1, en, en / memn, a1, a1 / mem1, an, an / memn);
        fflush(stdout);
    }
    printf("\nencode, 1 thread, with the base's chunk sums given (the sync writer from its second delta on):");
    for (uint32_t li = 0; li < o.n_lrs; li++) printf(" %s%.0e %.2f (%.2fx)", li ? "| " : "", o.lrs[li], given[li], given[li] / mem1);
    if (bench_encode_floor_runs()) {
        double tf[64];
        volatile uint64_t sink = 0;
        for (uint32_t r = 0; r < o.repeat; r++) {
            double t = cli_now_s();
            sink += bench_encode_floor((const uint8_t *)base, (const uint8_t *)next, bytes);
            tf[r] = cli_now_s() - t;
        }
        double fl = (double)bytes / median(tf, o.repeat) / 1e9;
        printf("\nfloor of any verified encoder, 1 thread (read base and next once, find the changed lines, xxh3 of "
               "next): %.2f (%.2fx)",
               fl, fl / mem1);
    }
    printf("\n\nferry: whole delta incl. headers and checksums; every applied delta matched the next version.\n"
           "TRL sizes count the index and value payloads only; zstd: level 3, gaps and values compressed apart.\n");
out:
    for (uint32_t t = 0; t < 64; t++) ferry_delta_codec_destroy(codecs[t]);
    for (uint32_t c = 0; recs && c < chunks; c++) free(recs[c]);
    free(recs), free(crecs), free(lens), free(delta), free(bsums);
    free(w), free(m), free(v), free(d), free(base), free(next), free(region);
    ferry_ctx_destroy(ctx);
    return rc;
}
