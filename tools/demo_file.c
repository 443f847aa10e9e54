/* `ferry demo --transport file`: the file channel between processes. Each
 * trainer rank publishes its buffers (one tensor each) as versions into its
 * own directory $FERRY_DEMO_DIR/rank-K: a snapshot first and every few
 * versions, a delta always. Each engine rank plans its copies from the
 * trainer layout (ferry_plan_build, its own ops only), follows the
 * directories of the trainer ranks it reads from into local mirrors
 * (deltas when one version behind, verified), and copies its pieces out.
 * The parent says when a version is published (a byte on stdin), so nothing
 * polls. Reports as in demo_worker.c; a reader's bytes are the file bytes
 * it read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "demo_worker.h"

static bool wait_go(void) {
    char go;
    ssize_t k;
    while ((k = read(0, &go, 1)) < 0 && errno == EINTR) {
    }
    return k == 1;
}

/* The rank's own buffers (the sync engine allocates them for the other transports). */
static bool alloc_bufs(worker_t *w) {
    for (size_t i = 0; i < w->nbufs; i++)
        if (!w->bufs[i] && !(w->bufs[i] = calloc(1, w->sizes[i] ? w->sizes[i] : 1))) return false;
    return true;
}

static void free_bufs(worker_t *w) {
    for (size_t i = 0; i < w->nbufs; i++) {
        free(w->bufs[i]);
        w->bufs[i] = NULL;
    }
}

static const char *demo_dir(void) {
    const char *d = getenv("FERRY_DEMO_DIR");
    return d && *d ? d : NULL;
}

/* Channel tensors for the buffers of rank k of layout l: named "<i>.<name>"
 * (i: the buffer's place among the rank's), data from bufs (or NULL). */
static size_t rank_tensors(const ferry_layout_t *l, uint32_t k, void **bufs, ferry_channel_tensor_t *t,
                           char (*names)[96], uint32_t *global) {
    size_t n = 0;
    for (uint32_t b = 0; b < ferry_layout_buffer_count(l); b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(l, b, &bi);
        if (bi.rank != k) continue;
        snprintf(names[n], sizeof names[n], "%zu.%s", n, bi.name);
        size_t esz = ferry_dtype_size(bi.dtype);
        t[n] = (ferry_channel_tensor_t){.name = names[n], .dtype = bi.dtype, .ndim = 1, .shape = {(int64_t)(bi.size / esz)},
                                        .data = bufs ? bufs[n] : NULL, .bytes = bi.size};
        if (global) global[n] = b;
        n++;
    }
    return n;
}

int demo_file_writer(worker_t *w) {
    const char *root = demo_dir();
    if (!root) return demo_fail(w, "setup", "FERRY_DEMO_DIR is not set");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/rank-%u", root, w->rank);
    ferry_channel_tensor_t *t = calloc(w->nbufs + 1, sizeof *t);
    char (*names)[96] = calloc(w->nbufs + 1, sizeof *names);
    ferry_channel_writer_t *cw = NULL;
    int rc = CLI_OK;
    if (!t || !names || !alloc_bufs(w)) {
        rc = demo_fail(w, "setup", "out of memory");
        goto out;
    }
    rank_tensors(w->layout, w->rank, w->bufs, t, names, NULL);
    if (ferry_channel_writer_create(w->ctx, dir, NULL, &cw) != FERRY_OK) {
        rc = demo_fail(w, "create", ferry_ctx_error(w->ctx));
        goto out;
    }
    for (uint64_t v = 1; v <= w->o.steps; v++) {
        demo_weights_pass(w, v, true, NULL, NULL, NULL);
        demo_report("F %u %llu", w->rank, (unsigned long long)v);
        if (v > 1 && !wait_go()) {
            rc = demo_fail(w, "publish", "the demo was stopped");
            goto out;
        }
        double t0 = cli_now_s();
        if (ferry_channel_publish(cw, v, t, w->nbufs) != FERRY_OK) {
            rc = demo_fail(w, "publish", ferry_ctx_error(w->ctx));
            goto out;
        }
        double t1 = cli_now_s();
        demo_report("W %u %llu %.6f %.6f %llu %.6f %.6f %.6f %llu", w->rank, (unsigned long long)v, t0, t1, 0ull, 0.0,
                    0.0, 0.0, 0ull); /* (the file channel holds host memory only) */
    }
    while (wait_go()) {
    }
out:
    ferry_channel_writer_destroy(cw);
    free(t);
    free(names);
    free_bufs(w);
    return rc;
}

/* One trainer rank the reader follows: its directory and a mirror of its buffers. */
typedef struct mirror {
    uint32_t rank;
    ferry_channel_reader_t *r;
    ferry_channel_tensor_t *t;
    char (*names)[96];
    uint32_t *global; /* the tensors' buffer indices in the trainer layout */
    size_t n;
    uint64_t version;
} mirror_t;

/* Copies one op's box from the source mirror to the destination buffer. */
static void copy_op(const ferry_copy_op_t *op, size_t esz, const uint8_t *src, uint8_t *dst) {
    uint32_t nd = op->box.ndim;
    int64_t idx[FERRY_MAX_DIMS] = {0};
    int64_t inner = nd ? op->box.extent[nd - 1] : 1;
    bool contiguous = nd == 0 || (op->src_strides[nd - 1] == 1 && op->dst_strides[nd - 1] == 1);
    for (;;) {
        uint64_t so = op->src_offset, doff = op->dst_offset;
        for (uint32_t d = 0; d + 1 < nd; d++) {
            so += (uint64_t)(idx[d] * op->src_strides[d]) * esz;
            doff += (uint64_t)(idx[d] * op->dst_strides[d]) * esz;
        }
        if (contiguous) {
            memcpy(dst + doff, src + so, (size_t)inner * esz);
        } else {
            for (int64_t k = 0; k < inner; k++)
                memcpy(dst + doff + (uint64_t)(k * op->dst_strides[nd - 1]) * esz,
                       src + so + (uint64_t)(k * op->src_strides[nd - 1]) * esz, esz);
        }
        int d = (int)nd - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < op->box.extent[d]) break;
            idx[d] = 0;
        }
        if (d < 0) break;
    }
}

int demo_file_reader(worker_t *w) {
    const char *root = demo_dir();
    if (!root) return demo_fail(w, "setup", "FERRY_DEMO_DIR is not set");
    ferry_parallel_t tp, ip;
    ferry_layout_t *train = NULL, *infer = NULL;
    ferry_plan_t *plan = NULL;
    mirror_t *mirrors = NULL;
    size_t nm = 0;
    uint8_t **mbuf = NULL; /* per trainer buffer (global index): its mirror, if followed */
    int rc = CLI_OK;
    if (!alloc_bufs(w)) return demo_fail(w, "setup", "out of memory");
    if (ferry_parallel_parse(w->ctx, FERRY_SIDE_TRAIN, w->o.train, &tp) != FERRY_OK ||
        ferry_parallel_parse(w->ctx, FERRY_SIDE_INFER, w->o.infer, &ip) != FERRY_OK ||
        ferry_layout_build(w->ctx, w->model, &tp, FERRY_ALL_RANKS, &train) != FERRY_OK ||
        ferry_layout_build(w->ctx, w->model, &ip, FERRY_ALL_RANKS, &infer) != FERRY_OK) {
        rc = demo_fail(w, "layout", ferry_ctx_error(w->ctx));
        goto out;
    }
    ferry_plan_params_t pp = {.field_mask = FERRY_PLAN_PARAM_ONLY, .only_side = FERRY_SIDE_INFER, .only_rank = w->rank};
    if (ferry_plan_build(w->ctx, train, infer, &pp, &plan) != FERRY_OK) {
        rc = demo_fail(w, "plan", ferry_ctx_error(w->ctx));
        goto out;
    }
    /* the trainer ranks this reader reads from, each mirrored whole */
    uint32_t tworld = ferry_parallel_world_size(&tp), nb = ferry_layout_buffer_count(train);
    bool *needed = calloc(tworld, sizeof *needed);
    mirrors = calloc(tworld, sizeof *mirrors);
    mbuf = calloc(nb + 1, sizeof *mbuf);
    if (!needed || !mirrors || !mbuf) {
        free(needed);
        rc = demo_fail(w, "setup", "out of memory");
        goto out;
    }
    const ferry_copy_op_t *ops = ferry_plan_ops(plan);
    size_t nops = ferry_plan_op_count(plan);
    for (size_t i = 0; i < nops; i++) needed[ops[i].src_rank] = true;
    for (uint32_t k = 0; k < tworld && rc == CLI_OK; k++) {
        if (!needed[k]) continue;
        mirror_t *m = &mirrors[nm++];
        m->rank = k;
        m->version = FERRY_CHANNEL_NONE;
        m->t = calloc(nb + 1, sizeof *m->t);
        m->names = calloc(nb + 1, sizeof *m->names);
        m->global = calloc(nb + 1, sizeof *m->global);
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/rank-%u", root, k);
        if (!m->t || !m->names || !m->global) {
            rc = demo_fail(w, "setup", "out of memory");
            break;
        }
        if (ferry_channel_reader_create(w->ctx, dir, &m->r) != FERRY_OK) {
            rc = demo_fail(w, "setup", ferry_ctx_error(w->ctx));
            break;
        }
        m->n = rank_tensors(train, k, NULL, m->t, m->names, m->global);
        for (size_t i = 0; i < m->n && rc == CLI_OK; i++) {
            m->t[i].data = mbuf[m->global[i]] = calloc(1, m->t[i].bytes ? m->t[i].bytes : 1);
            if (!m->t[i].data) rc = demo_fail(w, "setup", "out of memory for a mirror");
        }
    }
    free(needed);
    /* our buffers in the engine layout: global index -> local */
    uint32_t ib = ferry_layout_buffer_count(infer), first = UINT32_MAX;
    for (uint32_t b = 0; b < ib && first == UINT32_MAX; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(infer, b, &bi);
        if (bi.rank == w->rank) first = b;
    }
    for (uint64_t v = 1; v <= w->o.steps && rc == CLI_OK; v++) {
        if (!wait_go()) {
            rc = demo_fail(w, "update", "the demo was stopped");
            break;
        }
        double t0 = cli_now_s();
        uint64_t bytes = 0;
        for (size_t i = 0; i < nm; i++) {
            ferry_channel_update_info_t info = {0};
            ferry_status_t st = ferry_channel_update(mirrors[i].r, mirrors[i].t, mirrors[i].n, &mirrors[i].version, &info);
            bytes += info.bytes_read;
            if (st != FERRY_OK || mirrors[i].version != v) {
                char why[600];
                snprintf(why, sizeof why, "rank %u's channel: %s (holds version %llu, wanted %llu)", mirrors[i].rank,
                         st != FERRY_OK ? ferry_ctx_error(w->ctx) : "another version",
                         (unsigned long long)mirrors[i].version, (unsigned long long)v);
                rc = demo_fail(w, "update", why);
                break;
            }
        }
        if (rc != CLI_OK) break;
        double t1 = cli_now_s();
        for (size_t i = 0; i < nops; i++) {
            ferry_tensor_info_t ti;
            ferry_model_tensor(w->model, ops[i].tensor, &ti);
            copy_op(&ops[i], ferry_dtype_size(ti.dtype), mbuf[ops[i].src_buffer], w->bufs[ops[i].dst_buffer - first]);
        }
        double t2 = cli_now_s();
        uint64_t bad = w->o.verify ? demo_weights_pass(w, v, false, NULL, NULL, NULL) : 0;
        double t3 = cli_now_s();
        demo_report("R %u %llu %.6f %.6f %llu %d %llu %llu %llu %.6f %.6f %.6f %u %llu", w->rank, (unsigned long long)v,
                    t0, t2, (unsigned long long)bytes, w->o.verify && bad == 0, (unsigned long long)bad, 0ull, 0ull, 0.0,
                    t1 - t0, t3 - t2, 0u, 0ull);
        if (bad) rc = CLI_FAIL;
    }
out:
    for (size_t i = 0; i < nm; i++) {
        ferry_channel_reader_destroy(mirrors[i].r);
        free(mirrors[i].t);
        free(mirrors[i].names);
        free(mirrors[i].global);
    }
    for (uint32_t b = 0; mbuf && b < ferry_layout_buffer_count(train); b++) free(mbuf[b]);
    free(mbuf);
    free(mirrors);
    ferry_plan_destroy(plan);
    ferry_layout_destroy(train);
    ferry_layout_destroy(infer);
    free_bufs(w);
    return rc;
}
