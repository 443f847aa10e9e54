/* A `ferry demo` worker process's state and helpers, shared by the sync
 * workers (demo_worker.c) and the file-channel ones (demo_file.c). */
#ifndef FERRY_TOOLS_DEMO_WORKER_H
#define FERRY_TOOLS_DEMO_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "demo.h"

typedef struct worker {
    const char *role;
    uint32_t rank;
    demo_opts_t o;
    ferry_ctx_t *ctx;
    ferry_model_t *model;
    ferry_layout_t *layout; /* this rank's pieces */
    void **bufs;            /* the rank's buffers, in layout order */
    uint64_t *sizes;
    size_t nbufs;
    int gpu;                /* --device cuda: this worker's GPU (bufs are host copies, dbufs the GPU buffers); else -1 */
    void **dbufs;
} worker_t;

/* One report line to the parent (fd 3), shorter than PIPE_BUF. */
void demo_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Reports an error line and returns CLI_FAIL. */
int demo_fail(worker_t *w, const char *what, const char *detail);
/* Writes (fill) or checks (!fill) every element of the rank's pieces for
 * version v; returns mismatches, and counts elements that differ from
 * `prev` (a copy of the buffers before the update, or NULL). */
uint64_t demo_weights_pass(worker_t *w, uint64_t v, bool fill, uint8_t **prev, uint64_t *changed, uint64_t *elements);

/* An fp8 engine's piece p of tensor ti (an F8_E4M3 weight or its F32
 * scales, tq says which) against the reference quantization of version v
 * (demo_fp8.c): returns mismatches; adds to *diff the elements that
 * differ from `old` (the buffer before the update, or NULL). */
uint64_t demo_fp8_piece_pass(worker_t *w, const ferry_piece_t *p, const ferry_tensor_info_t *ti,
                             const ferry_tensor_quant_t *tq, uint64_t v, const uint8_t *buf, const uint8_t *old,
                             uint64_t *diff);

/* The file transport: each trainer rank publishes its buffers into
 * $FERRY_DEMO_DIR/rank-K; engine ranks follow the directories they need
 * and copy their pieces out (demo_file.c). */
int demo_file_writer(worker_t *w);
int demo_file_reader(worker_t *w);

#endif
