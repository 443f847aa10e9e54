/* The processes of `ferry demo` / `ferry bench sync`: one writer (trainer
 * rank) or one reader (engine rank). Reports go to fd 3, one line per
 * event, each shorter than PIPE_BUF so lines from many processes never
 * interleave:
 *   F rank version                      (a writer computed the version)
 *   W rank version t_start t_end bytes_served
 *   R rank version t_start t_end bytes verified mismatches changed elements
 *   E role rank message */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "demo.h"
#include "demo_gpu.h"
#include "demo_weights.h"
#include "demo_worker.h"

#define REPORT_FD 3

void demo_report(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(REPORT_FD, line, (size_t)n);
    (void)w;
}

int demo_fail(worker_t *w, const char *what, const char *detail) {
    demo_report("E %s %u %s: %s", w->role, w->rank, what, detail);
    return CLI_FAIL;
}

/* The global index of the rank's first buffer (its buffers are in layout order). */
static uint32_t rank_first_buffer(const worker_t *w) {
    uint32_t nb = ferry_layout_buffer_count(w->layout);
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(w->layout, b, &bi);
        if (bi.rank == w->rank) return b;
    }
    return UINT32_MAX;
}

uint64_t demo_weights_pass(worker_t *w, uint64_t v, bool fill, uint8_t **prev, uint64_t *changed,
                             uint64_t *elements) {
    size_t first, count;
    ferry_layout_rank_pieces(w->layout, w->rank, &first, &count);
    uint32_t base = rank_first_buffer(w);
    uint64_t bad = 0, diff = 0, n = 0;
    for (size_t i = first; i < first + count; i++) {
        const ferry_piece_t *p = &ferry_layout_pieces(w->layout)[i];
        ferry_tensor_info_t ti;
        ferry_model_tensor(w->model, p->tensor, &ti);
        demo_tensor_t t = demo_tensor(w->o.seed, ti.name, w->o.lr, v);
        uint8_t *buf = w->bufs[p->buffer - base];
        uint8_t *old = prev ? prev[p->buffer - base] : NULL;
        ferry_tensor_quant_t tq;
        if (!fill && ferry_model_tensor_quant(w->model, p->tensor, &tq) && tq.kind != FERRY_QUANT_NONE) {
            bad += demo_fp8_piece_pass(w, p, &ti, &tq, v, buf, old, &diff); /* an fp8 engine's weight or scales */
        } else if (ti.dtype == FERRY_DTYPE_BF16) {
            DEMO_FOR_EACH(&ti, p, 2, {
                uint16_t want = demo_bf16(demo_master(&t, lin));
                uint16_t *at = (uint16_t *)(buf + addr);
                if (fill) *at = want;
                else {
                    bad += *at != want;
                    if (old) diff += *(uint16_t *)(old + addr) != *at;
                }
            });
        } else { /* F32 (checked at start) */
            DEMO_FOR_EACH(&ti, p, 4, {
                float want = demo_master(&t, lin);
                float *at = (float *)(buf + addr);
                if (fill) memcpy(at, &want, 4);
                else {
                    bad += memcmp(at, &want, 4) != 0;
                    if (old) diff += memcmp(old + addr, at, 4) != 0;
                }
            });
        }
        n += (uint64_t)ferry_box_numel(&p->box);
    }
    if (changed) *changed = diff;
    if (elements) *elements = n;
    return bad;
}

/* What writers and readers set alike: the pack limit, the delta chain, and where buffers are. */
static void member_params(const worker_t *w, ferry_sync_params_t *sp) {
    if (w->o.pack_limit) {
        sp->field_mask |= FERRY_SYNC_PARAM_PACK_LIMIT;
        sp->pack_limit = w->o.pack_limit;
    }
    if (w->o.delta_chain) {
        sp->field_mask |= FERRY_SYNC_PARAM_DELTA_CHAIN;
        sp->delta_chain = w->o.delta_chain;
    }
    if (w->gpu < 0) return;
    sp->field_mask |= FERRY_SYNC_PARAM_MEMORY;
    sp->memory = FERRY_MEM_CUDA;
    sp->device = w->gpu;
}

static bool gpu_move(worker_t *w, bool to_gpu) {
    char err[256];
    for (size_t b = 0; w->gpu >= 0 && b < w->nbufs; b++)
        if (!demo_gpu_copy(w->dbufs[b], w->bufs[b], w->sizes[b], to_gpu, err, sizeof err)) {
            demo_fail(w, to_gpu ? "to the GPU" : "from the GPU", err);
            return false;
        }
    return true;
}

/* A GPU writer's version v, computed in its GPU buffers (demo_gpu_weights.cu):
 * the same bits as demo_weights_pass, at memory speed (the host takes
 * seconds per GiB on one core), so every version is a real RL-like step
 * (deltas see what they would in training) and readers that verify check
 * these kernels against the host's reference. */
static bool gpu_weights(worker_t *w, uint64_t v) {
    size_t first, count;
    ferry_layout_rank_pieces(w->layout, w->rank, &first, &count);
    uint32_t base = rank_first_buffer(w);
    char err[256];
    for (size_t i = first; i < first + count; i++) {
        const ferry_piece_t *p = &ferry_layout_pieces(w->layout)[i];
        ferry_tensor_info_t ti;
        ferry_model_tensor(w->model, p->tensor, &ti);
        demo_gpu_piece_t g;
        memset(&g, 0, sizeof g);
        g.t = demo_tensor(w->o.seed, ti.name, w->o.lr, v);
        g.f32 = ti.dtype != FERRY_DTYPE_BF16; /* F32 (checked at start) */
        g.ndim = p->box.ndim;
        g.byte_offset = p->byte_offset;
        int64_t acc = 1;
        for (int d = (int)p->box.ndim - 1; d >= 0; d--) {
            g.extent[d] = p->box.extent[d];
            g.offset[d] = p->box.offset[d];
            g.pstride[d] = p->strides[d];
            g.tstride[d] = acc;
            acc *= ti.shape[d];
        }
        if (!demo_gpu_weights(w->dbufs[p->buffer - base], &g, err, sizeof err)) {
            demo_fail(w, "step", err);
            return false;
        }
    }
    if (!demo_gpu_wait(err, sizeof err)) {
        demo_fail(w, "step", err);
        return false;
    }
    return true;
}

static int run_writer(worker_t *w, uint32_t world) {
    ferry_sync_params_t sp = {.field_mask = FERRY_SYNC_PARAM_MODE | FERRY_SYNC_PARAM_TRANSPORT |
                                            FERRY_SYNC_PARAM_TIMEOUT_MS | FERRY_SYNC_PARAM_SERVE |
                                            FERRY_SYNC_PARAM_SLOTS | FERRY_SYNC_PARAM_DELTAS,
                              .deltas = w->o.deltas,
                              .job = "demo",
                              .rank = w->rank,
                              .world = world,
                              .mode = w->o.mode,
                              .transport = w->o.transport,
                              .timeout_ms = w->o.timeout_ms,
                              .serve = false,
                              .slots = w->o.slots};
    member_params(w, &sp);
    ferry_writer_t *wr;
    if (ferry_writer_create(w->ctx, w->model, &sp, &wr) != FERRY_OK) return demo_fail(w, "create", ferry_ctx_error(w->ctx));
    int rc = CLI_OK;
    if (ferry_writer_add_layout(wr, w->layout, w->rank, w->gpu >= 0 ? w->dbufs : w->bufs, w->nbufs) != FERRY_OK ||
        ferry_writer_commit(wr) != FERRY_OK) {
        rc = demo_fail(w, "setup", ferry_writer_error(wr));
        goto out;
    }
    for (uint64_t v = 1; v <= w->o.steps; v++) {
        /* the optimizer step, where the buffers are */
        if (w->gpu >= 0) {
            if (!gpu_weights(w, v)) {
                rc = CLI_FAIL;
                goto out;
            }
        } else {
            demo_weights_pass(w, v, true, NULL, NULL, NULL);
        }
        demo_report("F %u %llu", w->rank, (unsigned long long)v);
        /* the parent's go (stdin): every reader checked v - 1 and is waiting, so
         * the figures measure the sync alone */
        char go;
        ssize_t k;
        while (v > 1 && (k = read(0, &go, 1)) < 0 && errno == EINTR) {
        }
        if (v > 1 && k != 1) {
            rc = demo_fail(w, "publish", "the demo was stopped");
            goto out;
        }
        ferry_publish_info_t info;
        double t0 = cli_now_s();
        ferry_status_t st = ferry_writer_publish(wr, v, &info);
        double t1 = cli_now_s();
        if (st != FERRY_OK) {
            rc = demo_fail(w, "publish", ferry_writer_error(wr));
            goto out;
        }
        demo_report("W %u %llu %.6f %.6f %llu %.6f %.6f %.6f %llu", w->rank, (unsigned long long)v, t0, t1,
                    (unsigned long long)info.bytes_served, info.pack_seconds, info.hash_seconds, info.snapshot_seconds,
                    (unsigned long long)info.device_bytes);
    }
    /* stay (serving the last versions) until the parent says every reader is done */
    for (;;) {
        char c;
        ssize_t k = read(0, &c, 1);
        if (k == 0 || (k < 0 && errno != EINTR)) break;
    }
out:
    ferry_writer_destroy(wr);
    return rc;
}

static int run_reader(worker_t *w, uint32_t world) {
    ferry_sync_params_t sp = {.field_mask = FERRY_SYNC_PARAM_TRANSPORT | FERRY_SYNC_PARAM_TIMEOUT_MS |
                                            FERRY_SYNC_PARAM_STAGED | FERRY_SYNC_PARAM_DELTAS,
                              .deltas = w->o.deltas,
                              .job = "demo",
                              .rank = w->rank,
                              .world = world,
                              .transport = w->o.transport,
                              .timeout_ms = w->o.timeout_ms,
                              .staged = w->o.staged};
    member_params(w, &sp);
    ferry_reader_t *rd;
    if (ferry_reader_create(w->ctx, w->model, &sp, &rd) != FERRY_OK) return demo_fail(w, "create", ferry_ctx_error(w->ctx));
    int rc = CLI_OK;
    uint8_t **prev = NULL;
    if (ferry_reader_add_layout(rd, w->layout, w->rank, w->gpu >= 0 ? w->dbufs : w->bufs, w->nbufs) != FERRY_OK ||
        ferry_reader_commit(rd) != FERRY_OK) {
        rc = demo_fail(w, "setup", ferry_reader_error(rd));
        goto out;
    }
    /* the first rank of each engine instance counts changed elements (one copy of the model) */
    ferry_rank_info_t ri;
    ferry_layout_rank_info(w->layout, w->rank, &ri);
    bool count_changes = w->o.verify && ri.replica == 0;
    if (count_changes) {
        prev = calloc(w->nbufs, sizeof *prev);
        for (size_t b = 0; prev && b < w->nbufs; b++) {
            prev[b] = malloc(w->sizes[b]);
            if (!prev[b]) count_changes = false;
        }
        if (!prev) count_changes = false;
    }
    uint64_t held = 0;
    while (held < w->o.steps) {
        uint64_t want = w->o.mode == FERRY_SYNC_MODE_SYNC ? held + 1 : FERRY_VERSION_NEXT;
        ferry_update_info_t info;
        double t0 = cli_now_s();
        ferry_status_t st = ferry_reader_update(rd, want, w->o.timeout_ms, &info);
        double t1 = cli_now_s();
        if (st != FERRY_OK) {
            rc = demo_fail(w, "update", ferry_reader_error(rd));
            goto out;
        }
        held = info.version;
        if (w->o.verify && !gpu_move(w, false)) {
            rc = CLI_FAIL;
            goto out;
        }
        uint64_t bad = 0, changed = 0, elements = 0;
        if (w->o.verify) bad = demo_weights_pass(w, held, false, count_changes && held > 1 ? prev : NULL, &changed, &elements);
        if (count_changes) /* the base the next version's changes are counted against, taken before reporting */
            for (size_t b = 0; b < w->nbufs; b++) memcpy(prev[b], w->bufs[b], w->sizes[b]);
        demo_report("R %u %llu %.6f %.6f %llu %d %llu %llu %llu %.6f %.6f %.6f %u %llu", w->rank, (unsigned long long)held, t0,
                    t1, (unsigned long long)info.bytes, w->o.verify && bad == 0, (unsigned long long)bad,
                    (unsigned long long)(count_changes ? changed : 0), (unsigned long long)(count_changes ? elements : 0),
                    info.wait_seconds, info.pull_seconds, info.verify_seconds, info.delta_pairs,
                    (unsigned long long)info.device_bytes);
        if (bad) rc = CLI_FAIL;
    }
out:
    if (prev) {
        for (size_t b = 0; b < w->nbufs; b++) free(prev[b]);
        free(prev);
    }
    ferry_reader_destroy(rd);
    return rc;
}

/* _sync-worker writer|reader RANK MODEL TRAIN INFER STEPS MODE TRANSPORT STAGED VERIFY LR SEED TIMEOUT SLOTS DELTAS
 * DEVICE PACK_LIMIT DELTA_CHAIN QUANT */
int demo_worker_main(int argc, char **argv) {
    if (argc != 20) {
        fprintf(stderr, "ferry _sync-worker: internal command (used by `ferry demo`), %d arguments\n", argc);
        return CLI_USAGE;
    }
    worker_t w;
    memset(&w, 0, sizeof w);
    w.role = argv[1];
    w.o.model = argv[3];
    w.o.train = argv[4];
    w.o.infer = argv[5];
    /* the parent wrote these; each is checked all the same, as any argument is */
    uint32_t mode, transport, staged, verify, deltas, quant;
    if ((strcmp(w.role, "writer") && strcmp(w.role, "reader")) || !cli_u32("RANK", argv[2], 0, UINT32_MAX, &w.rank) ||
        !cli_u32("STEPS", argv[6], 1, UINT32_MAX, &w.o.steps) ||
        !cli_u32("MODE", argv[7], FERRY_SYNC_MODE_SYNC, FERRY_SYNC_MODE_ASYNC, &mode) ||
        !cli_u32("TRANSPORT", argv[8], 0, DEMO_TRANSPORT_FILE, &transport) ||
        !cli_u32("STAGED", argv[9], 0, 1, &staged) || !cli_u32("VERIFY", argv[10], 0, 1, &verify) ||
        !cli_f64("LR", argv[11], (cli_range_t){0, 1, false, false}, &w.o.lr) ||
        !cli_u64("SEED", argv[12], 0, UINT64_MAX, &w.o.seed) ||
        !cli_u32("TIMEOUT", argv[13], 1, UINT32_MAX, &w.o.timeout_ms) ||
        !cli_u32("SLOTS", argv[14], 1, UINT32_MAX, &w.o.slots) ||
        !cli_u32("DELTAS", argv[15], FERRY_SYNC_DELTAS_AUTO, FERRY_SYNC_DELTAS_OFF, &deltas) ||
        !demo_gpu_parse(argv[16], &w.o.device) || !cli_u64("PACK_LIMIT", argv[17], 0, UINT64_MAX, &w.o.pack_limit) ||
        !cli_u32("DELTA_CHAIN", argv[18], 0, FERRY_SYNC_DELTA_CHAIN_MAX, &w.o.delta_chain) ||
        !cli_u32("QUANT", argv[19], FERRY_MODEL_QUANT_NONE, FERRY_MODEL_QUANT_FP8, &quant) ||
        (transport != FERRY_XPORT_SHM && transport != FERRY_XPORT_UCX && transport != DEMO_TRANSPORT_FILE)) {
        fprintf(stderr, "ferry _sync-worker: internal command (used by `ferry demo`): bad arguments\n");
        return CLI_USAGE;
    }
    w.o.mode = (ferry_sync_mode_t)mode;
    w.o.transport = (ferry_xport_kind_t)transport;
    w.o.staged = staged;
    w.o.verify = verify;
    w.o.deltas = (ferry_sync_deltas_t)deltas;
    w.o.quant = (ferry_model_quant_t)quant;
    bool writer = strcmp(w.role, "writer") == 0;
    w.ctx = cli_ctx();
    if (!w.ctx) return CLI_FAIL;
    int rc = CLI_FAIL;
    /* trainers hold bf16; an fp8 engine's spec says which of its tensors are fp8 */
    w.model = cli_load_model_quant(w.ctx, w.o.model, false, writer ? FERRY_MODEL_QUANT_NONE : w.o.quant);
    if (!w.model) {
        demo_report("E %s %u cannot load model %s", w.role, w.rank, w.o.model);
        goto out;
    }
    ferry_parallel_t par;
    ferry_side_t side = writer ? FERRY_SIDE_TRAIN : FERRY_SIDE_INFER;
    if (ferry_parallel_parse(w.ctx, side, writer ? w.o.train : w.o.infer, &par) != FERRY_OK ||
        ferry_layout_build(w.ctx, w.model, &par, w.rank, &w.layout) != FERRY_OK) {
        rc = demo_fail(&w, "layout", ferry_ctx_error(w.ctx));
        goto out;
    }
    for (uint32_t t = 0; t < ferry_model_tensor_count(w.model); t++) {
        ferry_tensor_info_t ti;
        ferry_model_tensor(w.model, t, &ti);
        ferry_tensor_quant_t tq;
        bool fp8 = ferry_model_tensor_quant(w.model, t, &tq) && tq.kind != FERRY_QUANT_NONE;
        if (ti.dtype != FERRY_DTYPE_BF16 && ti.dtype != FERRY_DTYPE_F32 && !fp8) {
            rc = demo_fail(&w, "model", "the demo generates bf16 and f32 tensors only");
            goto out;
        }
    }
    uint32_t nb = ferry_layout_buffer_count(w.layout);
    w.bufs = calloc(nb + 1, sizeof *w.bufs);
    w.sizes = calloc(nb + 1, sizeof *w.sizes);
    if (!w.bufs || !w.sizes) goto out;
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(w.layout, b, &bi);
        if (bi.rank == w.rank) w.sizes[w.nbufs++] = bi.size;
    }
    uint32_t world = ferry_parallel_world_size(&par);
    w.gpu = -1;
    if (w.o.device != DEMO_DEVICE_CPU) { /* GPU buffers from ferry; readers check host copies */
        char err[256];
        if ((w.gpu = demo_gpu_pick(w.o.device, writer, w.rank, err, sizeof err)) < 0) {
            rc = demo_fail(&w, "device", err);
            goto out;
        }
        w.dbufs = calloc(w.nbufs + 1, sizeof *w.dbufs);
        if (!w.dbufs) goto out;
        for (size_t b = 0; b < w.nbufs; b++)
            if (!(w.bufs[b] = calloc(1, w.sizes[b] ? w.sizes[b] : 1))) goto out;
    }
    if (w.o.transport == (ferry_xport_kind_t)DEMO_TRANSPORT_FILE)
        rc = writer ? demo_file_writer(&w) : demo_file_reader(&w);
    else
        rc = writer ? run_writer(&w, world) : run_reader(&w, world);
out:
    for (size_t b = 0; w.dbufs && b < w.nbufs; b++) free(w.bufs[b]); /* (the GPU buffers are ferry's) */
    free(w.dbufs);
    free(w.bufs);
    free(w.sizes);
    ferry_layout_destroy(w.layout);
    ferry_model_destroy(w.model);
    ferry_ctx_destroy(w.ctx);
    return rc;
}
