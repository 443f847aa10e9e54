/* ferry layout: builds a trainer or engine layout, validates it, and shows
 * what each rank holds. */
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry layout --model M --side train|infer --parallel SPEC [--rank N]\n"
            "                    [--ranks all] [--mtp] [--quant none|auto|fp8] [--json]\n"
            "  M      a config.json path or a bundled name (qwen3-0.6b, qwen3-8b,\n"
            "         qwen3-30b-a3b, deepseek-v3, kimi-k2)\n"
            "  SPEC   train: tp=,pp=,vpp=,cp=,ep=,etp=,dp=,pp_first=,pp_last=,pp_layers=a+b+..,\n"
            "                experts=grouped|grouped_t, buffers=param|flat, vocab_multiple=\n"
            "         infer: tp=,ep=,dp= (DP-attention groups),replicas=,transpose=GLOB,\n"
            "                buffers=param|flat, vocab_multiple=\n"
            "  --rank N     also list rank N's buffers and the tensor boxes in each\n"
            "  --ranks all  print every rank's row (default: the first 16 of a large world)\n"
            "  --quant      the model's spec as for ferry model --quant: auto or fp8 gives an fp8\n"
            "               engine's spec (F8_E4M3 weights, each with its weight_scale_inv param);\n"
            "               engine layouts only (a trainer's spec is always none, the default)\n"
            "  --json       machine-readable output\n"
            "Exit status: 0 valid layout, 1 coverage check failed, 2 bad input.\n");
}

/* "model.layers.12.mlp.experts.7.up_proj" -> "model.layers.*.mlp.experts.*.up_proj" */
static void pattern(const char *name, char *out, size_t size) {
    size_t o = 0;
    for (size_t i = 0; name[i] && o + 2 < size;) {
        if (isdigit((unsigned char)name[i]) && (i == 0 || name[i - 1] == '.')) {
            size_t j = i;
            while (isdigit((unsigned char)name[j])) j++;
            if (name[j] == '.' || name[j] == '\0') {
                out[o++] = '*';
                i = j;
                continue;
            }
        }
        out[o++] = name[i++];
    }
    out[o] = '\0';
}

/* the part of a tensor pattern after "model.layers.*." */
static const char *short_tensor(const char *pat) {
    const char *p = strstr(pat, "layers.*.");
    return p ? p + 9 : pat;
}

#define MAX_FUSED 64

typedef struct {
    char buffer[160];
    char parts[320];
    uint64_t buffers;
} fused_t;

typedef struct {
    uint64_t bytes, padding;
    uint32_t buffers;
    size_t pieces;
} rank_stat_t;

static int cmp_piece_buffer(const void *x, const void *y) {
    const ferry_piece_t *a = *(const ferry_piece_t *const *)x, *b = *(const ferry_piece_t *const *)y;
    if (a->buffer != b->buffer) return a->buffer < b->buffer ? -1 : 1;
    return a < b ? -1 : a > b;
}

static uint64_t piece_bytes(const ferry_model_t *m, const ferry_piece_t *p) {
    ferry_tensor_info_t t;
    ferry_model_tensor(m, p->tensor, &t);
    return (uint64_t)ferry_box_numel(&p->box) * ferry_dtype_size(t.dtype);
}

/* Finds fused buffers (pieces of several tensors) and per-buffer padding. */
static size_t analyse(const ferry_layout_t *l, fused_t *fused, uint64_t *pad_per_buffer) {
    const ferry_model_t *m = ferry_layout_model(l);
    size_t n = ferry_layout_piece_count(l), nf = 0;
    const ferry_piece_t *pieces = ferry_layout_pieces(l);
    const ferry_piece_t **sorted = malloc((n ? n : 1) * sizeof *sorted);
    if (!sorted) return 0;
    for (size_t i = 0; i < n; i++) sorted[i] = &pieces[i];
    qsort(sorted, n, sizeof *sorted, cmp_piece_buffer);
    uint32_t nb = ferry_layout_buffer_count(l);
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(l, b, &bi);
        pad_per_buffer[b] = bi.size;
    }
    for (size_t i = 0; i < n;) {
        uint32_t b = sorted[i]->buffer;
        char parts[320] = "", first[160] = "";
        int distinct = 0;
        size_t j = i;
        for (; j < n && sorted[j]->buffer == b; j++) {
            pad_per_buffer[b] -= piece_bytes(m, sorted[j]);
            ferry_tensor_info_t t;
            ferry_model_tensor(m, sorted[j]->tensor, &t);
            char pat[160];
            pattern(t.name, pat, sizeof pat);
            const char *s = short_tensor(pat);
            if (strstr(parts, s) == NULL || distinct == 0) {
                if (distinct == 0) snprintf(first, sizeof first, "%s", s);
                if (strlen(parts) + strlen(s) + 3 < sizeof parts) {
                    if (parts[0]) strcat(parts, ", ");
                    strcat(parts, s);
                }
                if (strcmp(first, s) != 0 || distinct == 0) distinct++;
            }
        }
        if (distinct >= 2) {
            ferry_buffer_info_t bi;
            ferry_layout_buffer(l, b, &bi);
            char bp[160];
            pattern(bi.name, bp, sizeof bp);
            size_t k = 0;
            for (; k < nf; k++)
                if (!strcmp(fused[k].buffer, bp)) break;
            if (k == nf && nf < MAX_FUSED) {
                snprintf(fused[nf].buffer, sizeof fused[nf].buffer, "%s", bp);
                snprintf(fused[nf].parts, sizeof fused[nf].parts, "%s", parts);
                fused[nf].buffers = 0;
                nf++;
            }
            if (k < nf) fused[k].buffers++;
        }
        i = j;
    }
    free(sorted);
    return nf;
}

static json_t *box_json(const ferry_box_t *b) {
    json_t *arr = json_array();
    for (uint32_t d = 0; d < b->ndim; d++)
        json_array_append_new(arr, json_pack("[I, I]", (json_int_t)b->offset[d],
                                             (json_int_t)(b->offset[d] + b->extent[d])));
    return arr;
}

static void print_rank_detail(const ferry_layout_t *l, uint32_t rank, json_t *jout) {
    const ferry_model_t *m = ferry_layout_model(l);
    size_t first, count;
    ferry_layout_rank_pieces(l, rank, &first, &count);
    const ferry_piece_t *pieces = ferry_layout_pieces(l);
    json_t *jbufs = jout ? json_array() : NULL;
    uint32_t nb = ferry_layout_buffer_count(l);
    if (!jout) printf("\nrank %u holds:\n", rank);
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(l, b, &bi);
        if (bi.rank != rank) continue;
        char shape[96] = "", sz[32];
        for (uint32_t d = 0; d < bi.ndim; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? ", " : "",
                     (long long)bi.shape[d]);
        json_t *jp = jout ? json_array() : NULL;
        if (!jout)
            printf("  %s  %s [%s]  %s\n", bi.name, ferry_dtype_name(bi.dtype), shape,
                   cli_bytes(bi.size, sz, sizeof sz));
        for (size_t i = first; i < first + count; i++) {
            const ferry_piece_t *p = &pieces[i];
            if (p->buffer != b) continue;
            ferry_tensor_info_t t;
            ferry_model_tensor(m, p->tensor, &t);
            if (jout) {
                json_t *strides = json_array();
                for (uint32_t d = 0; d < p->box.ndim; d++)
                    json_array_append_new(strides, json_integer(p->strides[d]));
                json_array_append_new(jp, json_pack("{s:s, s:o, s:I, s:o}", "tensor", t.name, "box",
                                                    box_json(&p->box), "byte_offset",
                                                    (json_int_t)p->byte_offset, "strides", strides));
            } else {
                char bx[160], st[96] = "";
                ferry_box_format(&p->box, bx, sizeof bx);
                for (uint32_t d = 0; d < p->box.ndim; d++)
                    snprintf(st + strlen(st), sizeof st - strlen(st), "%s%lld", d ? ", " : "",
                             (long long)p->strides[d]);
                printf("      <- %s %s  at byte %llu, strides [%s]\n", t.name, bx,
                       (unsigned long long)p->byte_offset, st);
            }
        }
        if (jout)
            json_array_append_new(jbufs, json_pack("{s:s, s:s, s:s, s:I, s:o}", "name", bi.name, "dtype",
                                                   ferry_dtype_name(bi.dtype), "shape", shape, "bytes",
                                                   (json_int_t)bi.size, "pieces", jp));
    }
    if (jout) json_object_set_new(jout, "rank_detail", json_pack("{s:I, s:o}", "rank", (json_int_t)rank,
                                                                  "buffers", jbufs));
}

int cmd_layout(int argc, char **argv) {
    const char *model_arg = NULL, *side_arg = NULL, *par_arg = NULL;
    uint32_t rank_arg = UINT32_MAX; /* none */
    bool json = false, mtp = false, all_rows = false;
    ferry_model_quant_t quant = FERRY_MODEL_QUANT_NONE;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (cli_opt(argc, argv, &i, "--model", &v)) model_arg = v;
        else if (cli_opt(argc, argv, &i, "--side", &v)) side_arg = v;
        else if (cli_opt(argc, argv, &i, "--parallel", &v)) par_arg = v;
        else if (cli_opt(argc, argv, &i, "--rank", &v)) {
            if (!cli_u32("--rank", v, 0, (1u << 24) - 1, &rank_arg)) return CLI_USAGE;
        } else if (cli_opt(argc, argv, &i, "--quant", &v)) {
            if (v && !cli_quant(v, &quant)) return CLI_USAGE;
        }
        else if (cli_opt(argc, argv, &i, "--ranks", &v)) {
            if (v && strcmp(v, "all") != 0) {
                fprintf(stderr, "ferry layout: --ranks takes \"all\"\n");
                return CLI_USAGE;
            }
            all_rows = true;
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
            fprintf(stderr, "ferry layout: unknown option %s\n", argv[i]);
            usage(stderr);
            return CLI_USAGE;
        }
        if (!v) return CLI_USAGE;
    }
    if (!model_arg || !side_arg) {
        usage(stderr);
        return CLI_USAGE;
    }
    ferry_side_t side;
    if (!strcmp(side_arg, "train")) side = FERRY_SIDE_TRAIN;
    else if (!strcmp(side_arg, "infer")) side = FERRY_SIDE_INFER;
    else {
        fprintf(stderr, "ferry layout: --side must be train or infer, not \"%s\"\n", side_arg);
        return CLI_USAGE;
    }
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_USAGE;
    int rc = CLI_USAGE;
    ferry_model_t *m = NULL;
    ferry_layout_t *l = NULL;
    rank_stat_t *stats = NULL;
    uint64_t *sorted_bytes = NULL, *pad = NULL;
    fused_t *fused = NULL;
    json_t *jout = NULL;
    ferry_parallel_t par;
    ferry_status_t st = ferry_parallel_parse(ctx, side, par_arg ? par_arg : "", &par);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry layout: %s\n", ferry_ctx_error(ctx));
        goto out;
    }
    if (!(m = cli_load_model_quant(ctx, model_arg, mtp, quant))) goto out;
    st = ferry_layout_build(ctx, m, &par, FERRY_ALL_RANKS, &l);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry layout: %s (%s)\n", ferry_ctx_error(ctx), ferry_status_name(st));
        goto out;
    }
    uint32_t world = ferry_layout_world_size(l);
    long rank = -1;
    if (rank_arg != UINT32_MAX) {
        if (rank_arg >= world) {
            fprintf(stderr, "ferry layout: --rank %u is not a rank in [0, %u)\n", rank_arg, world);
            goto out;
        }
        rank = (long)rank_arg;
    }
    ferry_coverage_t cov;
    ferry_status_t vst = ferry_layout_validate(l, &cov);
    rc = vst == FERRY_OK ? CLI_OK : CLI_FAIL;

    stats = calloc(world, sizeof *stats);
    sorted_bytes = calloc(world, sizeof *sorted_bytes);
    pad = calloc(ferry_layout_buffer_count(l) + 1, sizeof *pad);
    fused = calloc(MAX_FUSED, sizeof *fused);
    if (!stats || !sorted_bytes || !pad || !fused) {
        fprintf(stderr, "ferry layout: out of memory\n");
        rc = CLI_FAIL;
        goto out;
    }
    size_t nfused = analyse(l, fused, pad);
    uint64_t total_bytes = 0, total_pad = 0;
    for (uint32_t b = 0; b < ferry_layout_buffer_count(l); b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(l, b, &bi);
        stats[bi.rank].bytes += bi.size;
        stats[bi.rank].padding += pad[b];
        stats[bi.rank].buffers++;
        total_bytes += bi.size;
        total_pad += pad[b];
    }
    for (uint32_t r = 0; r < world; r++) {
        size_t f, c;
        ferry_layout_rank_pieces(l, r, &f, &c);
        stats[r].pieces = c;
        sorted_bytes[r] = stats[r].bytes;
    }
    qsort(sorted_bytes, world, sizeof *sorted_bytes, cli_cmp_u64);
    double mean = (double)total_bytes / world;
    double imbalance = mean > 0 ? (double)sorted_bytes[world - 1] / mean : 0;
    char spec[512], digest[32];
    ferry_parallel_format(&par, spec, sizeof spec);
    snprintf(digest, sizeof digest, "%016llx", (unsigned long long)ferry_layout_digest(l));
    const ferry_arch_t *a = ferry_model_arch(m);

    if (json) {
        jout = json_object();
        json_object_set_new(jout, "model", json_string(ferry_model_name(m)));
        json_object_set_new(jout, "side", json_string(side_arg));
        json_object_set_new(jout, "parallel", json_string(spec));
        json_object_set_new(jout, "world", json_integer(world));
        json_object_set_new(jout, "parameters", json_integer((json_int_t)ferry_model_param_count(m)));
        json_object_set_new(jout, "model_bytes", json_integer((json_int_t)ferry_model_byte_size(m)));
        json_object_set_new(jout, "bytes", json_integer((json_int_t)total_bytes));
        json_object_set_new(jout, "padding_bytes", json_integer((json_int_t)total_pad));
        json_object_set_new(jout, "pieces", json_integer((json_int_t)ferry_layout_piece_count(l)));
        json_t *jr = json_array();
        for (uint32_t r = 0; r < world; r++) {
            ferry_rank_info_t ri;
            ferry_layout_rank_info(l, r, &ri);
            json_array_append_new(
                jr, json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                              "rank", (json_int_t)r, "replica", (json_int_t)ri.replica, "tp",
                              (json_int_t)ri.tp, "pp", (json_int_t)ri.pp, "cp", (json_int_t)ri.cp, "ep",
                              (json_int_t)ri.ep, "etp", (json_int_t)ri.etp, "edp", (json_int_t)ri.edp,
                              "dp_attn", (json_int_t)ri.dp_attn, "layers", (json_int_t)ri.num_layers,
                              "buffers", (json_int_t)stats[r].buffers, "pieces",
                              (json_int_t)stats[r].pieces, "bytes", (json_int_t)stats[r].bytes,
                              "padding_bytes", (json_int_t)stats[r].padding));
        }
        json_object_set_new(jout, "ranks", jr);
        json_t *jf = json_array();
        for (size_t i = 0; i < nfused; i++)
            json_array_append_new(jf, json_pack("{s:s, s:s, s:I}", "buffer", fused[i].buffer, "holds",
                                                fused[i].parts, "count", (json_int_t)fused[i].buffers));
        json_object_set_new(jout, "fused", jf);
        json_object_set_new(jout, "bytes_per_rank",
                            json_pack("{s:I, s:I, s:I, s:f}", "min", (json_int_t)sorted_bytes[0],
                                      "median", (json_int_t)sorted_bytes[world / 2], "max",
                                      (json_int_t)sorted_bytes[world - 1], "max_over_mean", imbalance));
        if (vst == FERRY_OK)
            json_object_set_new(jout, "coverage",
                                json_pack("{s:b, s:I, s:I, s:I, s:I}", "ok", 1, "tensors",
                                          (json_int_t)cov.tensors, "distinct_boxes",
                                          (json_int_t)cov.distinct_boxes, "min_replicas",
                                          (json_int_t)cov.min_replicas, "max_replicas",
                                          (json_int_t)cov.max_replicas));
        else
            json_object_set_new(jout, "coverage", json_pack("{s:b, s:s}", "ok", 0, "error",
                                                            ferry_layout_error(l)));
        json_object_set_new(jout, "digest", json_string(digest));
        if (rank >= 0) print_rank_detail(l, (uint32_t)rank, jout);
        json_dumpf(jout, stdout, JSON_INDENT(2));
        printf("\n");
        goto out;
    }

    char b1[32], b2[32], b3[32];
    printf("%s on the %s side: %s, %u ranks\n", ferry_model_name(m), side_arg, spec, world);
    printf("model      %s, %u tensors, %s parameters, %s in %s\n", a->model_type,
           ferry_model_tensor_count(m), cli_count(ferry_model_param_count(m), b1, sizeof b1),
           cli_bytes(ferry_model_byte_size(m), b2, sizeof b2), ferry_dtype_name(a->dtype));
    printf("held       %s over all ranks = %.2f copies of the model; padding %s\n",
           cli_bytes(total_bytes, b1, sizeof b1),
           (double)(total_bytes - total_pad) / (double)ferry_model_byte_size(m),
           cli_bytes(total_pad, b2, sizeof b2));
    if (nfused) {
        printf("fused      buffers holding several tensors (count = buffers over all ranks):\n");
        for (size_t i = 0; i < nfused; i++)
            printf("           %-56s x%-6llu <- %s\n", fused[i].buffer,
                   (unsigned long long)fused[i].buffers, fused[i].parts);
    }
    printf("\n%6s %7s %4s %4s %4s %4s %6s %7s %7s %12s %10s\n", "rank", "replica", "tp", "pp", "ep",
           "etp", "layers", "buffers", "pieces", "bytes", "padding");
    uint32_t shown = 0;
    for (uint32_t r = 0; r < world; r++) {
        if (!all_rows && world > 32 && r >= 16 && (long)r != rank) continue;
        ferry_rank_info_t ri;
        ferry_layout_rank_info(l, r, &ri);
        printf("%6u %7u %4u %4u %4u %4u %6u %7u %7zu %12s %10s\n", r, ri.replica, ri.tp, ri.pp, ri.ep,
               ri.etp, ri.num_layers, stats[r].buffers, stats[r].pieces,
               cli_bytes(stats[r].bytes, b1, sizeof b1), cli_bytes(stats[r].padding, b2, sizeof b2));
        shown++;
    }
    if (shown < world) printf("%6s (%u more ranks; --ranks all prints them)\n", "...", world - shown);
    printf("\nper rank   bytes min %s, median %s, max %s; max/mean %.3f\n",
           cli_bytes(sorted_bytes[0], b1, sizeof b1), cli_bytes(sorted_bytes[world / 2], b2, sizeof b2),
           cli_bytes(sorted_bytes[world - 1], b3, sizeof b3), imbalance);
    if (vst == FERRY_OK) {
        printf("coverage   ok: %llu pieces (%llu distinct boxes) cover all %llu elements of %llu "
               "tensors; every element is held by %u",
               (unsigned long long)cov.pieces, (unsigned long long)cov.distinct_boxes,
               (unsigned long long)cov.elements, (unsigned long long)cov.tensors, cov.min_replicas);
        if (cov.max_replicas != cov.min_replicas) printf(" to %u", cov.max_replicas);
        printf(" rank(s), no partial overlaps, buffer bytes disjoint\n");
    } else {
        printf("coverage   FAILED: %s (%s)\n", ferry_layout_error(l), ferry_status_name(vst));
    }
    printf("digest     %s\n", digest);
    if (rank >= 0) print_rank_detail(l, (uint32_t)rank, NULL);
out:
    if (jout) json_decref(jout);
    free(stats);
    free(sorted_bytes);
    free(pad);
    free(fused);
    ferry_layout_destroy(l);
    ferry_model_destroy(m);
    ferry_ctx_destroy(ctx);
    return rc;
}
