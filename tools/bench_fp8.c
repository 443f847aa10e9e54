/* ferry bench fp8-delta: what one RL step changes in an FP8 engine's
 * weights. A rows x cols weight takes Adam steps on fp32 masters
 * (tools/synth.h, as `ferry bench delta`); the trainer's bf16 (or the fp32
 * masters, --source f32) before and after the measured step are quantized
 * to float8_e4m3fn with 128 x 128 block scales (ferry_fp8_block_quantize,
 * with and without UE8M0 scales), and the bench counts what changed: bf16
 * elements, fp8 bytes, scales, blocks with any change; then ferry's deltas
 * of the fp8 bytes and of the scales are encoded, applied to the older
 * version and checked equal to the newer one, and their bytes set beside
 * the whole fp8 weight and scales (what an FP8 engine is sent without
 * deltas) and beside the bf16 delta (what a bf16 engine is sent). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_parse.h"
#include "ferry/codec.h"
#include "ferry/fp8.h"
#include "synth.h"

typedef struct fp8_opts {
    uint64_t rows, cols;
    uint32_t steps;
    double lrs[8];
    uint32_t n_lrs;
    bool from_f32;
} fp8_opts_t;

static void usage(FILE *f) {
    fprintf(f, "usage: ferry bench fp8-delta [--rows R] [--cols C] [--steps S] [--lr LIST] [--source bf16|f32]\n"
               "  A rows x cols weight (default 7168 x 4096, a DeepSeek-V3-sized linear) takes S Adam steps\n"
               "  (fp32 masters, bf16 params, as `ferry bench delta`) at each learning rate; its versions\n"
               "  before and after step S are quantized to float8_e4m3fn with 128 x 128 block scales (plain\n"
               "  and UE8M0), from the bf16 params (default) or the fp32 masters (--source f32). Prints what\n"
               "  the step changed (bf16 elements, fp8 bytes, scales, blocks) and the bytes of ferry's deltas\n"
               "  of the fp8 weight and its scales (each applied and checked) beside the whole fp8 weight\n"
               "  and scales, and beside the bf16 weight's delta.\n"
               "  --steps S    Adam steps up to the measured one (default 5: the change from step 4 to 5)\n"
               "  --lr LIST    learning rates (default 1e-6,3e-6,1e-5)\n");
}

static int parse(int argc, char **argv, fp8_opts_t *o) {
    *o = (fp8_opts_t){.rows = 7168, .cols = 4096, .steps = 5, .lrs = {1e-6, 3e-6, 1e-5}, .n_lrs = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        }
        if (!v) {
            fprintf(stderr, "ferry bench fp8-delta: unknown option or missing value: %s\n", a);
            usage(stderr);
            return CLI_USAGE;
        }
        i++;
        static const cli_range_t lr_range = {.lo = 0, .hi = 1, .lo_open = true};
        size_t n;
        if (!strcmp(a, "--rows")) {
            if (!cli_size(a, v, 1, 1u << 20, &o->rows)) return CLI_USAGE;
        } else if (!strcmp(a, "--cols")) {
            if (!cli_size(a, v, 1, 1u << 20, &o->cols)) return CLI_USAGE;
        } else if (!strcmp(a, "--steps")) {
            if (!cli_u32(a, v, 1, 1000, &o->steps)) return CLI_USAGE;
        } else if (!strcmp(a, "--lr")) {
            if (!cli_f64_list(a, v, lr_range, o->lrs, sizeof o->lrs / sizeof o->lrs[0], &n)) return CLI_USAGE;
            o->n_lrs = (uint32_t)n;
        } else if (!strcmp(a, "--source")) {
            static const char *const words[] = {"bf16", "f32"};
            size_t k;
            if (!cli_word(a, v, words, 2, &k)) return CLI_USAGE;
            o->from_f32 = k == 1;
        } else {
            fprintf(stderr, "ferry bench fp8-delta: unknown option %s\n", a);
            usage(stderr);
            return CLI_USAGE;
        }
    }
    if (o->rows * o->cols > (1ull << 31)) {
        fprintf(stderr, "ferry bench fp8-delta: --rows x --cols is at most 2^31 elements\n");
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* The delta from base to next (n elements of dtype), applied to a copy of
 * base and checked equal to next; its bytes, or 0 (said) on failure. */
static size_t delta_bytes(ferry_delta_codec_t *c, ferry_dtype_t dtype, const void *base, const void *next, uint64_t n) {
    size_t esz = ferry_dtype_size(dtype), cap = ferry_delta_bound(dtype, n, 0), len = 0;
    uint8_t *d = malloc(cap), *copy = malloc(n * esz);
    ferry_delta_params_t p = {.dtype = dtype};
    bool ok = d && copy && ferry_delta_encode(c, &p, base, next, n, d, cap, &len) == FERRY_OK;
    if (ok) {
        memcpy(copy, base, n * esz);
        ok = ferry_delta_apply(c, d, len, copy, n, 0, NULL) == FERRY_OK && memcmp(copy, next, n * esz) == 0;
    }
    if (!ok) fprintf(stderr, "ferry bench fp8-delta: a %s delta failed: %s\n", ferry_dtype_name(dtype),
                     ferry_delta_codec_detail(c));
    free(d);
    free(copy);
    return ok ? len : 0;
}

static uint64_t count_diff(const uint8_t *a, const uint8_t *b, uint64_t n, size_t esz) {
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++) k += memcmp(a + i * esz, b + i * esz, esz) != 0;
    return k;
}

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0; }

int bench_fp8(int argc, char **argv) {
    fp8_opts_t o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    const uint64_t n = o.rows * o.cols, ns = ferry_fp8_scale_count(o.rows, o.cols);
    const uint64_t bcols = (o.cols + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK;
    float *w = malloc(4 * n * sizeof *w), *m0 = malloc(n * sizeof *m0);
    uint16_t *b0 = malloc(2 * n), *b1 = malloc(2 * n);
    uint8_t *q[2][2] = {{malloc(n), malloc(n)}, {malloc(n), malloc(n)}}; /* [ue8m0][version] */
    float *s[2][2] = {{malloc(4 * ns), malloc(4 * ns)}, {malloc(4 * ns), malloc(4 * ns)}};
    ferry_ctx_t *ctx = NULL;
    ferry_delta_codec_t *codec = NULL;
    bool ok = w && m0 && b0 && b1 && ferry_ctx_create(NULL, &ctx, NULL, 0) == FERRY_OK &&
              ferry_delta_codec_create(ctx, &codec) == FERRY_OK;
    for (int u = 0; u < 2; u++)
        for (int v = 0; v < 2; v++) ok = ok && q[u][v] && s[u][v];
    if (!ok) {
        fprintf(stderr, "ferry bench fp8-delta: out of memory\n");
        rc = CLI_FAIL;
        goto out;
    }
    printf("ferry bench fp8-delta: a %llu x %llu weight (%llu 128 x 128 blocks), the change from Adam step %u to "
           "%u, fp8 from the %s\n",
           (unsigned long long)o.rows, (unsigned long long)o.cols, (unsigned long long)ns, o.steps - 1, o.steps,
           o.from_f32 ? "fp32 masters" : "bf16 params");
    printf("  %-6s %-6s %9s %9s %9s %10s | %12s %9s %11s %12s | %11s %8s\n", "lr", "scales", "bf16 chg", "fp8 chg",
           "scale chg", "blocks chg", "fp8 delta", "B/chg", "scale delta", "bf16 delta", "fp8+scales", "d/whole");
    for (uint32_t l = 0; l < o.n_lrs && rc == CLI_OK; l++) {
        delta_synth_t sy;
        delta_synth_init(&sy, n, false, o.lrs[l], 1, w, w + n, w + 2 * n, w + 3 * n);
        for (uint32_t st = 0; st < o.steps; st++) {
            if (st + 1 == o.steps) { /* the version before the measured step */
                delta_synth_bf16(&sy, b0, 0, n);
                memcpy(m0, sy.w, n * sizeof *m0);
            }
            delta_synth_step_range(&sy, 0, n);
            delta_synth_next(&sy);
        }
        delta_synth_bf16(&sy, b1, 0, n);
        const uint64_t bf16_chg = count_diff((const uint8_t *)b0, (const uint8_t *)b1, n, 2);
        size_t bf16_delta = delta_bytes(codec, FERRY_DTYPE_BF16, b0, b1, n);
        for (int u = 0; u < 2 && rc == CLI_OK; u++) {
            const uint32_t flags = u ? FERRY_FP8_UE8M0 : 0;
            const void *src[2] = {o.from_f32 ? (const void *)m0 : b0, o.from_f32 ? (const void *)sy.w : b1};
            for (int v = 0; v < 2; v++)
                if (ferry_fp8_block_quantize(o.from_f32 ? FERRY_DTYPE_F32 : FERRY_DTYPE_BF16, src[v], o.rows, o.cols,
                                             flags, q[u][v], s[u][v]) != FERRY_OK) {
                    fprintf(stderr, "ferry bench fp8-delta: quantizing failed\n");
                    rc = CLI_FAIL;
                }
            if (rc) break;
            uint64_t fp8_chg = count_diff(q[u][0], q[u][1], n, 1);
            uint64_t sc_chg = count_diff((const uint8_t *)s[u][0], (const uint8_t *)s[u][1], ns, 4), blocks = 0;
            for (uint64_t br = 0; br < ns / bcols; br++)
                for (uint64_t bc = 0; bc < bcols; bc++) {
                    bool any = false;
                    uint64_t r1 = (br + 1) * FERRY_FP8_BLOCK < o.rows ? (br + 1) * FERRY_FP8_BLOCK : o.rows;
                    uint64_t c0 = bc * FERRY_FP8_BLOCK, c1 = c0 + FERRY_FP8_BLOCK < o.cols ? c0 + FERRY_FP8_BLOCK : o.cols;
                    for (uint64_t r = br * FERRY_FP8_BLOCK; r < r1 && !any; r++)
                        any = memcmp(q[u][0] + r * o.cols + c0, q[u][1] + r * o.cols + c0, c1 - c0) != 0;
                    blocks += any;
                }
            size_t fd = delta_bytes(codec, FERRY_DTYPE_F8_E4M3, q[u][0], q[u][1], n);
            size_t sd = delta_bytes(codec, FERRY_DTYPE_F32, s[u][0], s[u][1], ns);
            if (!fd || !sd || !bf16_delta) {
                rc = CLI_FAIL;
                break;
            }
            char lr[16];
            snprintf(lr, sizeof lr, "%.0e", o.lrs[l]);
            printf("  %-6s %-6s %8.3f%% %8.3f%% %8.3f%% %9.3f%% | %8.1f KiB %9.3f %7.2f KiB %8.1f KiB | %7.2f MiB %8.4f\n",
                   lr, u ? "ue8m0" : "fp32", pct(bf16_chg, n), pct(fp8_chg, n), pct(sc_chg, ns), pct(blocks, ns),
                   fd / 1024.0, fp8_chg ? (double)fd / (double)fp8_chg : 0, sd / 1024.0, bf16_delta / 1024.0,
                   (n + 4.0 * ns) / 1048576.0, (fd + sd) / (n + 4.0 * ns));
        }
    }
    if (rc == CLI_OK)
        printf("(chg: share of elements, scales or blocks the step changed; B/chg: fp8 delta bytes per changed fp8\n"
               " element; deltas applied and checked equal; d/whole: the fp8 and scale deltas' bytes over the\n"
               " whole fp8 weight and scales', what an FP8 engine is sent without deltas)\n");
out:
    ferry_delta_codec_destroy(codec);
    ferry_ctx_destroy(ctx);
    free(w), free(m0), free(b0), free(b1);
    for (int u = 0; u < 2; u++)
        for (int v = 0; v < 2; v++) free(q[u][v]), free(s[u][v]);
    return rc;
}
