/* ferry bench delta: bytes per changed element and encode/apply speed of
 * ferry's sparse deltas on synthetic RL updates (tools/synth.h), beside
 * what other systems ship for the same change, measured in the same run:
 *   TRL raw       int32 index + bf16 value per changed element (6 B);
 *   TRL gap       gaps as uint16 (uint32 when one does not fit) + bf16 values;
 *   zstd          gaps as uint32 and the bf16 values, each zstd -3;
 * Each speed times what ferry's callers run: encode as the sync writer
 * calls it (versions, next chunk sums out; from its second delta on the
 * base's sums in), apply as the sync reader and delta files call it (the
 * header peek, then apply against the held version); the threaded rows use
 * the chunk-level calls. Every run of an operation follows a memcpy of the
 * tensor with the same threads, so the two are measured in turns under the
 * same load; speeds are medians (with min-max) and "x memcpy" is the ratio
 * of the two medians. The floor under any verified encoder
 * (bench_floor.c) is measured the same way. Every applied delta is
 * compared with the expected next version. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "cli.h"
#include "cli_parse.h"
#include "bench_floor.h"
#include "synth.h"

typedef struct bench_opts {
    uint64_t elems;
    uint32_t steps, threads, repeat;
    double lrs[8];
    uint32_t n_lrs;
    uint32_t format; /* of the deltas: 1 or 2 */
} bench_opts_t;

#define MAX_RUNS 64 /* --repeat at most */

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry bench delta [--elems N] [--steps S] [--lr LIST] [--threads T] [--repeat R]\n"
            "                         [--format F]\n"
            "  Synthetic bf16 weights (fp32 masters ~ N(0, 0.02), Adam on noisy gradients) take S\n"
            "  steps at each learning rate; the delta between steps S-1 and S is encoded by ferry and\n"
            "  sized as TRL's raw and gap patches and as zstd'd gaps + values would ship it.\n"
            "  Encode and apply are timed as ferry's callers run them (the sync writer's encode; the\n"
            "  header peek, then apply), each run right after a memcpy of the tensor with the same\n"
            "  threads: medians (min-max) of R runs of each, and the ratio of the two medians. The\n"
            "  floor under any verified encoder (read base and next once, find the changed lines,\n"
            "  hash next) is measured the same way.\n"
            "  --elems N    elements of the tensor (default 16M; K/M/G suffixes)\n"
            "  --steps S    Adam steps before the measured one (default 5)\n"
            "  --lr LIST    learning rates (default 1e-6,3e-6,1e-5)\n"
            "  --threads T  threads for the all-threads figures (default: online CPUs)\n"
            "  --repeat R   runs per timing (default 5, at most %d)\n"
            "  --format F   delta format, 1 (default) or 2 (class streams cut at sub-blocks)\n",
            MAX_RUNS);
}

/* ---- timings: an operation in turns with memcpy ---- */

typedef struct series {
    double t[MAX_RUNS]; /* seconds */
    uint32_t n;
} series_t;

static double median(const series_t *s) {
    double v[MAX_RUNS];
    memcpy(v, s->t, s->n * sizeof *v);
    qsort(v, s->n, sizeof *v, cli_cmp_dbl);
    return s->n % 2 ? v[s->n / 2] : (v[s->n / 2 - 1] + v[s->n / 2]) / 2;
}

static double fastest(const series_t *s) {
    double m = s->t[0];
    for (uint32_t i = 1; i < s->n; i++) m = s->t[i] < m ? s->t[i] : m;
    return m;
}

static double slowest(const series_t *s) {
    double m = s->t[0];
    for (uint32_t i = 1; i < s->n; i++) m = s->t[i] > m ? s->t[i] : m;
    return m;
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
    uint32_t chunk_flags; /* FERRY_DELTA_CHUNK_FORMAT2 for format 2 */
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
    ferry_status_t st = ferry_delta_chunk_encode(j->codecs[c % j->threads], FERRY_DTYPE_BF16, 0, j->chunk_flags,
                                                 j->base + at, j->next + at, n, j->recs[c],
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

static int parse_args(int argc, char **argv, bench_opts_t *o) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (bench_opts_t){.elems = 16u << 20, .steps = 5, .threads = cpus > 0 ? (uint32_t)cpus : 1, .repeat = 5,
                        .lrs = {1e-6, 3e-6, 1e-5}, .n_lrs = 3, .format = 1};
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
        static const cli_range_t lr_range = {.lo = 0, .hi = 1, .lo_open = true};
        size_t n_lrs;
        if (!strcmp(a, "--elems")) {
            if (!cli_size(a, v, 1, 1ull << 32, &o->elems)) return CLI_USAGE;
        } else if (!strcmp(a, "--steps")) {
            if (!cli_u32(a, v, 1, 1000, &o->steps)) return CLI_USAGE;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_u32(a, v, 1, 64, &o->threads)) return CLI_USAGE;
        } else if (!strcmp(a, "--repeat")) {
            if (!cli_u32(a, v, 1, MAX_RUNS, &o->repeat)) return CLI_USAGE;
        } else if (!strcmp(a, "--format")) {
            if (!cli_u32(a, v, 1, 2, &o->format)) return CLI_USAGE;
        } else if (!strcmp(a, "--lr")) {
            if (!cli_f64_list(a, v, lr_range, o->lrs, sizeof o->lrs / sizeof o->lrs[0], &n_lrs)) return CLI_USAGE;
            o->n_lrs = (uint32_t)n_lrs;
        } else {
            fprintf(stderr, "ferry bench delta: unknown option %s\n", a);
            usage(stderr);
            return CLI_USAGE;
        }
    }
    return CLI_OK;
}

/* ---- the measured operations ---- */
enum {
    OP_ENCODE,       /* 1 thread, as the sync writer's first delta (and ferry_delta_file_build) */
    OP_ENCODE_GIVEN, /* 1 thread, the base's chunk sums given: the sync writer from its second delta on */
    OP_APPLY,        /* 1 thread: peek, then apply against the held version */
    OP_ENCODE_T,     /* all threads: chunk_encode spread over threads, then assemble */
    OP_APPLY_T,      /* all threads: peek, then chunk_apply spread over threads */
    OP_FLOOR,        /* 1 thread: the floor under any verified encoder */
    OPS
};
static const char *const op_names[OPS] = {
    "encode (sync writer, file build)", "encode, base's chunk sums given", "peek + apply (sync reader, files)",
    "encode: chunks, then assemble", "peek + apply: chunks on threads", "floor of any verified encoder"};

typedef struct bench {
    bench_opts_t o;
    uint64_t n, bytes, bv, nv;
    uint16_t *base, *next, *region;
    uint8_t *delta, *ref; /* scratch output; the delta every run must give */
    size_t cap, ref_len;
    uint64_t *bsums, *nsums; /* base's chunk sums (given), next's (out) */
    job_t job;
    ferry_delta_codec_t **codecs;
    const void **crecs;
    volatile uint64_t sink; /* the floor's result, so none of it is optimized away */
} bench_t;

static ferry_delta_params_t writer_params(const bench_t *b, bool given) {
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_VERSIONS | FERRY_DELTA_PARAM_NEXT_CHUNK_SUMS |
                                            FERRY_DELTA_PARAM_FORMAT,
                              .dtype = FERRY_DTYPE_BF16, .base_version = b->bv, .next_version = b->nv,
                              .next_chunk_sums = b->nsums, .format = b->o.format};
    if (given) {
        p.field_mask |= FERRY_DELTA_PARAM_BASE_CHUNK_SUMS;
        p.base_chunk_sums = b->bsums;
    }
    return p;
}

/* Runs op once (region holds base on entry) and checks its result untimed;
 * *t gets the seconds it took. */
static ferry_status_t run_op(bench_t *b, int op, double *t) {
    ferry_delta_codec_t *c = b->codecs[0];
    job_t *j = &b->job;
    ferry_status_t st = FERRY_OK;
    size_t len = 0;
    double t0 = cli_now_s();
    switch (op) {
    case OP_ENCODE:
    case OP_ENCODE_GIVEN: {
        ferry_delta_params_t p = writer_params(b, op == OP_ENCODE_GIVEN);
        st = ferry_delta_encode(c, &p, b->base, b->next, b->n, b->delta, b->cap, &len);
        break;
    }
    case OP_ENCODE_T: {
        ferry_delta_params_t p = writer_params(b, false);
        p.field_mask = FERRY_DELTA_PARAM_VERSIONS | FERRY_DELTA_PARAM_FORMAT;
        j->fn = encode_chunk;
        j->st = FERRY_OK;
        run_parallel(j, b->o.threads);
        st = j->st;
        if (st == FERRY_OK) st = ferry_delta_assemble(c, &p, b->n, b->crecs, j->lens, b->delta, b->cap, &len);
        break;
    }
    case OP_APPLY:
    case OP_APPLY_T: {
        ferry_delta_info_t info;
        st = ferry_delta_peek(c, b->ref, b->ref_len, &info);
        if (st == FERRY_OK && (info.dtype != FERRY_DTYPE_BF16 || info.elems != b->n || info.base_version != b->bv))
            st = FERRY_ERR_MISMATCH;
        if (st == FERRY_OK && op == OP_APPLY) {
            st = ferry_delta_apply(c, b->ref, b->ref_len, b->region, b->n, b->bv, NULL);
        } else if (st == FERRY_OK) {
            j->fn = apply_chunk;
            j->st = FERRY_OK;
            j->delta = b->ref;
            j->delta_len = b->ref_len;
            run_parallel(j, b->o.threads);
            st = j->st;
            for (uint32_t k = 0; k < b->o.threads; k++)
                st == FERRY_OK ? ferry_delta_codec_commit(b->codecs[k]) : ferry_delta_codec_rollback(b->codecs[k]);
        }
        break;
    }
    default: b->sink += bench_encode_floor((const uint8_t *)b->base, (const uint8_t *)b->next, b->bytes); break;
    }
    *t = cli_now_s() - t0;
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry bench delta: %s failed: %s %s\n", op_names[op], ferry_status_name(st),
                ferry_delta_codec_detail(c));
        return st;
    }
    bool same = true;
    if (op == OP_APPLY || op == OP_APPLY_T) same = memcmp(b->region, b->next, b->bytes) == 0;
    else if (op != OP_FLOOR) same = len == b->ref_len && memcmp(b->delta, b->ref, len) == 0;
    if (!same) {
        fprintf(stderr, "ferry bench delta: %s gave %s\n", op_names[op],
                op == OP_APPLY || op == OP_APPLY_T ? "other contents than the next version" : "another delta");
        return FERRY_ERR_INTERNAL;
    }
    return FERRY_OK;
}

/* R runs of op, each right after a memcpy of the tensor (base into region,
 * which also resets it for an apply) with the op's threads. */
static ferry_status_t measure(bench_t *b, int op, series_t *ops, series_t *copies) {
    uint32_t threads = op == OP_ENCODE_T || op == OP_APPLY_T ? b->o.threads : 1;
    ops->n = copies->n = 0;
    for (uint32_t r = 0; r < b->o.repeat; r++) {
        double t = cli_now_s();
        cli_memcpy_threads((uint8_t *)b->region, (const uint8_t *)b->base, b->bytes, threads);
        copies->t[copies->n++] = cli_now_s() - t;
        ferry_status_t st = run_op(b, op, &ops->t[ops->n]);
        if (st != FERRY_OK) return st;
        ops->n++;
    }
    return FERRY_OK;
}

/* One row: lr (or blank), operation, threads, both speeds and their ratio. */
static void print_row(const bench_t *b, const char *lr, int op, const series_t *ops, const series_t *copies) {
    double gb = (double)b->bytes / 1e9, f = gb / median(ops), m = gb / median(copies);
    char fs[48], ms[48];
    snprintf(fs, sizeof fs, "%6.2f [%.2f-%.2f]", f, gb / slowest(ops), gb / fastest(ops));
    snprintf(ms, sizeof ms, "%6.2f [%.2f-%.2f]", m, gb / slowest(copies), gb / fastest(copies));
    printf("%-6s %-36s %3u | %-21s | %-21s | %5.2f\n", lr, op_names[op],
           op == OP_ENCODE_T || op == OP_APPLY_T ? b->o.threads : 1, fs, ms, f / m);
}

typedef struct lr_result {
    uint64_t changed, positions, values, len;
    sizes_t others;
    series_t ops[OPS - 1], copies[OPS - 1];
    series_t peek, inspect; /* seconds per call */
} lr_result_t;

/* Synthesizes base and next for one learning rate (steps - 1 and steps). */
static void synth_pair(bench_t *b, double lr, float *w, float *m, float *v, float *d) {
    delta_synth_t s;
    delta_synth_init(&s, b->n, false, lr, 1, w, m, v, d);
    job_t j = {.chunks = b->job.chunks, .chunk_elems = b->job.chunk_elems, .elems = b->n, .synth = &s};
    j.fn = synth_chunk;
    for (uint32_t t = 0; t < b->o.steps; t++) {
        if (t + 1 == b->o.steps) {
            j.out = b->base;
            run_parallel(&j, b->o.threads);
            j.out = NULL;
        }
        run_parallel(&j, b->o.threads);
        delta_synth_next(&s);
    }
    j.out = b->next;
    run_parallel(&j, b->o.threads);
}

/* Everything measured at one learning rate. */
static int measure_lr(bench_t *b, lr_result_t *res) {
    if (baseline_sizes(b->base, b->next, b->n, &res->others) != 0) {
        fprintf(stderr, "ferry bench delta: the zstd baseline failed\n");
        return CLI_FAIL;
    }
    ferry_delta_codec_t *c = b->codecs[0];
    /* the reference delta, and base's chunk sums from an encode towards base (untimed) */
    ferry_delta_params_t p = writer_params(b, false);
    p.next_chunk_sums = b->bsums;
    size_t l2;
    ferry_status_t st = ferry_delta_encode(c, &p, b->next, b->base, b->n, b->ref, b->cap, &l2);
    p = writer_params(b, false);
    if (st == FERRY_OK) st = ferry_delta_encode(c, &p, b->base, b->next, b->n, b->ref, b->cap, &b->ref_len);
    ferry_delta_info_t info;
    if (st == FERRY_OK) st = ferry_delta_inspect(c, b->ref, b->ref_len, &info);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry bench delta: encode failed: %s %s\n", ferry_status_name(st),
                ferry_delta_codec_detail(c));
        return CLI_FAIL;
    }
    res->changed = info.changed;
    res->positions = info.bytes_positions;
    res->values = info.bytes_values;
    res->len = b->ref_len;
    for (int op = 0; op < OP_FLOOR; op++)
        if (measure(b, op, &res->ops[op], &res->copies[op]) != FERRY_OK) return CLI_FAIL;
    /* the peek (many per timing: it takes microseconds) and, for
       comparison, the inspect walk callers ran before applying until the
       peek existed */
    res->peek.n = res->inspect.n = 0;
    for (uint32_t r = 0; r < b->o.repeat; r++) {
        ferry_delta_info_t pi;
        double t = cli_now_s();
        for (int k = 0; k < 1000; k++) st = st == FERRY_OK ? ferry_delta_peek(c, b->ref, b->ref_len, &pi) : st;
        res->peek.t[res->peek.n++] = (cli_now_s() - t) / 1000;
        t = cli_now_s();
        if (st == FERRY_OK) st = ferry_delta_inspect(c, b->ref, b->ref_len, &pi);
        res->inspect.t[res->inspect.n++] = cli_now_s() - t;
    }
    return st == FERRY_OK ? CLI_OK : CLI_FAIL;
}

int bench_delta(int argc, char **argv) {
    bench_t b = {0};
    int rc = parse_args(argc, argv, &b.o);
    if (rc != CLI_OK) return rc == CLI_OK + 100 ? CLI_OK : rc;
    const bench_opts_t *o = &b.o;
    b.n = o->elems, b.bytes = b.n * 2, b.bv = o->steps - 1, b.nv = o->steps;
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_FAIL;
    uint64_t n = b.n;
    float *w = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4), *d = malloc(n * 4);
    b.base = malloc(b.bytes), b.next = malloc(b.bytes), b.region = malloc(b.bytes);
    uint32_t chunk = FERRY_DELTA_CHUNK_DEFAULT, chunks = ferry_delta_chunk_count(n, chunk);
    uint8_t **recs = calloc(chunks, sizeof *recs);
    size_t *lens = calloc(chunks, sizeof *lens);
    b.crecs = calloc(chunks, sizeof *b.crecs);
    b.cap = ferry_delta_bound(FERRY_DTYPE_BF16, n, 0);
    b.delta = malloc(b.cap), b.ref = malloc(b.cap);
    b.bsums = malloc((chunks + 1) * sizeof *b.bsums), b.nsums = malloc((chunks + 1) * sizeof *b.nsums);
    ferry_delta_codec_t *codecs[64] = {0};
    b.codecs = codecs;
    if (b.region) memset(b.region, 0, b.bytes); /* a first copy into fresh pages would time page faults */
    lr_result_t *res = calloc(o->n_lrs, sizeof *res);
    series_t floor_t = {0}, floor_copy = {0};
    bool ok = w && m && v && d && b.base && b.next && b.region && recs && b.crecs && lens && b.delta && b.ref &&
              b.bsums && b.nsums && res;
    for (uint32_t c = 0; ok && c < chunks; c++) {
        uint64_t at = (uint64_t)c * chunk;
        recs[c] = malloc(ferry_delta_chunk_bound(FERRY_DTYPE_BF16, (uint32_t)(n - at < chunk ? n - at : chunk)));
        b.crecs[c] = recs[c];
        ok = recs[c] != NULL;
    }
    for (uint32_t t = 0; ok && t < o->threads; t++) ok = ferry_delta_codec_create(ctx, &codecs[t]) == FERRY_OK;
    if (!ok) {
        fprintf(stderr, "ferry bench delta: out of memory for %llu elements\n", (unsigned long long)n);
        rc = CLI_FAIL;
        goto out;
    }
    b.job = (job_t){.chunks = chunks, .chunk_elems = chunk, .elems = n, .codecs = codecs, .base = b.base,
                    .chunk_flags = o->format == 2 ? FERRY_DELTA_CHUNK_FORMAT2 : 0u,
                    .next = b.next, .region = b.region, .recs = recs, .lens = lens};
    for (uint32_t li = 0; li < o->n_lrs; li++) {
        synth_pair(&b, o->lrs[li], w, m, v, d);
        if ((rc = measure_lr(&b, &res[li])) != CLI_OK) goto out;
        /* the floor (data-independent but for the changed lines), once */
        if (li == 0 && bench_encode_floor_runs() && measure(&b, OP_FLOOR, &floor_t, &floor_copy) != FERRY_OK) {
            rc = CLI_FAIL;
            goto out;
        }
    }
    char sz[32];
    printf("ferry bench delta: %llu bf16 elements (%s), delta of Adam step %u vs %u, %u threads, %u runs per "
           "figure\n",
           (unsigned long long)n, cli_bytes(b.bytes, sz, sizeof sz), o->steps, o->steps - 1, o->threads, o->repeat);
    printf("Speeds are GB/s of dense tensor bytes, median [slowest-fastest] of the runs. Each run follows a memcpy of\n"
           "the tensor with the same threads, so both are measured in turns under the same load; \"x memcpy\" is the\n"
           "ratio of the two medians.\n\n");
    printf("%-6s %7s | %-26s | %-22s\n", "", "", "ferry, bytes per change", "others, bytes per change");
    printf("%-6s %7s | %8s %8s %8s | %7s %7s %6s\n", "lr", "changed", "total", "pos", "val", "TRL raw", "TRL gap",
           "zstd");
    for (uint32_t li = 0; li < o->n_lrs; li++) {
        const lr_result_t *r = &res[li];
        double mc = r->changed ? (double)r->changed : 1.0;
        printf("%-6.0e %6.2f%% | %8.3f %8.3f %8.3f | %7.2f %7.2f %6.2f\n", o->lrs[li],
               100.0 * (double)r->changed / (double)n, (double)r->len / mc, (double)r->positions / mc,
               (double)r->values / mc, (double)r->others.trl_raw / mc, (double)r->others.trl_gap / mc,
               (double)r->others.zstd / mc);
    }
    printf("\n%-6s %-36s %3s | %-21s | %-21s | %s\n", "lr", "operation, as ferry's callers run it", "thr",
           "ferry GB/s", "memcpy GB/s", "x memcpy");
    for (uint32_t li = 0; li < o->n_lrs; li++) {
        char lr[16];
        snprintf(lr, sizeof lr, "%.0e", o->lrs[li]);
        for (int op = 0; op < OP_FLOOR; op++) print_row(&b, op ? "" : lr, op, &res[li].ops[op], &res[li].copies[op]);
    }
    if (floor_t.n) print_row(&b, "any", OP_FLOOR, &floor_t, &floor_copy);
    printf("\npeek before each apply:");
    for (uint32_t li = 0; li < o->n_lrs; li++) {
        const lr_result_t *r = &res[li];
        double pa = median(&r->ops[OP_APPLY]);
        printf("%s %.0e %.1f us (%.3f%% of peek + apply)", li ? " |" : "", o->lrs[li], median(&r->peek) * 1e6,
               100.0 * median(&r->peek) / pa);
    }
    printf("\ninspect, the walk of every stream that callers ran before applying until the peek:");
    for (uint32_t li = 0; li < o->n_lrs; li++) {
        const lr_result_t *r = &res[li];
        printf("%s %.0e %.2f ms (%.2fx peek + apply)", li ? " |" : "", o->lrs[li], median(&r->inspect) * 1e3,
               median(&r->inspect) / median(&r->ops[OP_APPLY]));
    }
    printf("\n\nferry: whole delta incl. headers and checksums; every applied delta matched the next version, every\n"
           "encode gave the same bytes. TRL sizes count the index and value payloads only; zstd: level 3, gaps and\n"
           "values compressed apart. The floor reads base and next once, finds the changed lines and hashes next.\n");
    rc = CLI_OK;
out:
    for (uint32_t t = 0; t < 64; t++) ferry_delta_codec_destroy(codecs[t]);
    for (uint32_t c = 0; recs && c < chunks; c++) free(recs[c]);
    free(recs), free(b.crecs), free(lens), free(b.delta), free(b.ref), free(b.bsums), free(b.nsums), free(res);
    free(w), free(m), free(v), free(d), free(b.base), free(b.next), free(b.region);
    ferry_ctx_destroy(ctx);
    return rc;
}
