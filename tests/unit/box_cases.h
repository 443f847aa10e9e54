/* Random box copies for the box-copy tests (tests/unit/test_box_jobs.c
 * walks them on the CPU, tests/gpu/test_boxes.c on a GPU). Each case reads
 * a source arena and owns its own region of a destination arena (regions
 * never overlap, with a few untouched bytes between them); box_case_ref
 * applies it with the CPU functions of src/sync/strided.c, the reference. */
#ifndef FERRY_TESTS_BOX_CASES_H
#define FERRY_TESTS_BOX_CASES_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "sync/box_jobs.h"
#include "sync/sync_internal.h"

enum { BOX_GATHER, BOX_SCATTER, BOX_SAME, BOX_S2S, BOX_PACKED, BOX_KINDS };
static const char *const box_kind_name[] = {"gather", "scatter", "copy_box", "strided-to-strided", "packed"};

typedef struct box_case {
    int kind;
    uint32_t esz;
    ferry_box_t box;           /* offset: where the box sits in its tensor(s) */
    int64_t shape[FERRY_MAX_DIMS];
    int64_t dst_strides[FERRY_MAX_DIMS], src_strides[FERRY_MAX_DIMS];
    uint64_t dst_base, src_base; /* the tensor (or packed box) in its arena */
    uint64_t dst_off, src_off;   /* bytes from there to element 0 of the box */
    uint64_t dst_span, src_span; /* bytes from the base the case may touch */
    char what[200];
} box_case_t;

/* Shapes and layouts: how big and what kind of cases to draw. */
typedef struct box_gen {
    uint64_t max_elems;  /* per tensor */
    bool columns;        /* 2-d tensors, boxes of whole rows and some columns */
    bool long_runs;      /* 1-d or 2-d with runs of tens of KiB */
} box_gen_t;

static inline uint64_t box_rand(uint64_t n) { return n ? rng_next() % n : 0; }

/* snprintf at the end of buf, cut at its size */
static inline void box_appendf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void box_appendf(char *buf, size_t cap, const char *fmt, ...) {
    size_t n = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    if (n + 1 < cap) vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

/* Row-major strides over padded extents, dims in a random order (a
 * transposed layout) one time in three. */
static inline void box_rand_strides(uint32_t ndim, const int64_t *shape, bool pad, int64_t *strides) {
    uint32_t order[FERRY_MAX_DIMS];
    for (uint32_t d = 0; d < ndim; d++) order[d] = d;
    if (box_rand(3) == 0)
        for (uint32_t d = ndim; d > 1; d--) {
            uint32_t k = (uint32_t)box_rand(d), t = order[d - 1];
            order[d - 1] = order[k];
            order[k] = t;
        }
    int64_t s = 1;
    for (int i = (int)ndim - 1; i >= 0; i--) {
        uint32_t d = order[i];
        strides[d] = s;
        s *= shape[d] + (pad && box_rand(3) == 0 ? (int64_t)box_rand(4) + 1 : 0);
    }
}

static inline uint64_t box_numel(const ferry_box_t *b) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < b->ndim; d++) n *= (uint64_t)b->extent[d];
    return n;
}

/* Elements from a tensor's element 0 to the box's. */
static inline uint64_t box_elem_off(const ferry_box_t *b, const int64_t *strides) {
    uint64_t e = 0;
    for (uint32_t d = 0; d < b->ndim; d++) e += (uint64_t)(b->offset[d] * strides[d]);
    return e;
}

/* Bytes a tensor of this shape and strides spans. */
static inline uint64_t box_tensor_span(uint32_t ndim, const int64_t *shape, const int64_t *strides, uint32_t esz) {
    ferry_box_t all = ferry_box_of_shape(ndim, shape);
    return sync_box_span(strides, &all, esz);
}

/* Draws one case into the next free region of the destination arena
 * (*cursor onwards); false when it does not fit. */
static inline bool box_case_rand(box_case_t *c, const box_gen_t *g, uint64_t *cursor, uint64_t dst_size,
                                 uint64_t src_size) {
    memset(c, 0, sizeof *c);
    static const uint32_t eszs[] = {1, 2, 4, 8};
    c->esz = eszs[box_rand(4)];
    c->kind = (int)box_rand(BOX_KINDS);
    uint32_t ndim;
    if (g->columns || g->long_runs) {
        ndim = g->long_runs && box_rand(4) == 0 ? 1 : 2;
        uint64_t row_bytes;
        if (g->long_runs) /* sometimes a few bytes past whole pieces: a last piece shorter than a head */
            row_bytes = SYNC_BOX_PIECE * (1 + box_rand(5)) + (box_rand(2) ? box_rand(24) : box_rand(SYNC_BOX_PIECE));
        else {
            static const uint64_t rows[] = {16, 64, 256, 1000, 2048, 4096, 8192};
            row_bytes = rows[box_rand(7)] + (box_rand(2) ? box_rand(64) : 0);
        }
        c->shape[ndim - 1] = (int64_t)(row_bytes / c->esz) + 1;
        if (ndim == 2) {
            uint64_t rows = g->max_elems / (uint64_t)c->shape[1];
            c->shape[0] = 1 + (int64_t)box_rand(rows > 1 ? rows : 1);
        }
    } else {
        ndim = 1 + (uint32_t)box_rand(4);
        static const int64_t top[] = {0, 70000, 300, 45, 18};
        uint64_t n = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            c->shape[d] = 1 + (int64_t)box_rand((uint64_t)top[ndim]);
            if (box_rand(6) == 0) c->shape[d] = 1;
            n *= (uint64_t)c->shape[d];
        }
        while (n > g->max_elems) { /* shrink the largest dim */
            uint32_t big = 0;
            for (uint32_t d = 1; d < ndim; d++)
                if (c->shape[d] > c->shape[big]) big = d;
            n /= (uint64_t)c->shape[big];
            c->shape[big] = (c->shape[big] + 1) / 2;
            n *= (uint64_t)c->shape[big];
        }
    }
    c->box.ndim = ndim;
    for (uint32_t d = 0; d < ndim; d++) {
        /* columns, long runs: all rows; long runs: whole rows half the time */
        bool whole = ((g->columns || g->long_runs) && ndim == 2 && d == 0) || (g->long_runs && d == ndim - 1 && box_rand(2));
        c->box.offset[d] = whole ? 0 : (int64_t)box_rand((uint64_t)c->shape[d]);
        c->box.extent[d] = whole ? c->shape[d] : 1 + (int64_t)box_rand((uint64_t)(c->shape[d] - c->box.offset[d]));
    }
    bool pad = !g->columns && !g->long_runs;
    box_rand_strides(ndim, c->shape, pad, c->src_strides);
    if (c->kind == BOX_S2S) box_rand_strides(ndim, c->shape, pad, c->dst_strides);
    else memcpy(c->dst_strides, c->src_strides, sizeof c->dst_strides);
    if (g->columns || g->long_runs) { /* plain row-major, sometimes with wider rows */
        c->src_strides[ndim - 1] = c->dst_strides[ndim - 1] = 1;
        if (ndim == 2) c->src_strides[0] = c->dst_strides[0] = c->shape[1] + (int64_t)box_rand(3) * 7;
    }
    uint64_t packed = box_numel(&c->box) * c->esz;
    bool dst_packed = c->kind == BOX_GATHER || c->kind == BOX_PACKED;
    bool src_packed = c->kind == BOX_SCATTER || c->kind == BOX_PACKED;
    c->dst_span = dst_packed ? packed : box_tensor_span(ndim, c->shape, c->dst_strides, c->esz);
    c->src_span = src_packed ? packed : box_tensor_span(ndim, c->shape, c->src_strides, c->esz);
    c->dst_off = dst_packed ? 0 : box_elem_off(&c->box, c->dst_strides) * c->esz;
    c->src_off = src_packed ? 0 : box_elem_off(&c->box, c->src_strides) * c->esz;
    if (c->src_span > src_size) return false;
    c->src_base = box_rand(src_size - c->src_span + 1); /* any alignment */
    c->dst_base = *cursor + box_rand(40);
    if (c->dst_base + c->dst_span + 8 > dst_size) return false;
    *cursor = c->dst_base + c->dst_span + 1 + box_rand(24);
    char *w = c->what;
    size_t cap = sizeof c->what;
    box_appendf(w, cap, "%s esz %u box [", box_kind_name[c->kind], c->esz);
    for (uint32_t d = 0; d < ndim; d++)
        box_appendf(w, cap, "%s%lld:+%lld", d ? ", " : "", (long long)c->box.offset[d], (long long)c->box.extent[d]);
    box_appendf(w, cap, "] dst %s", dst_packed ? "packed" : "strides");
    for (uint32_t d = 0; d < ndim && !dst_packed; d++) box_appendf(w, cap, " %lld", (long long)c->dst_strides[d]);
    box_appendf(w, cap, ", src %s", src_packed ? "packed" : "strides");
    for (uint32_t d = 0; d < ndim && !src_packed; d++) box_appendf(w, cap, " %lld", (long long)c->src_strides[d]);
    return true;
}

/* The job of a case over these arenas (host or device addresses). */
static inline sync_box_copy_t box_case_job(const box_case_t *c, uint8_t *dst_arena, const uint8_t *src_arena) {
    sync_box_copy_t j;
    j.dst = dst_arena + c->dst_base + c->dst_off;
    j.src = src_arena + c->src_base + c->src_off;
    j.dst_strides = c->kind == BOX_GATHER || c->kind == BOX_PACKED ? NULL : c->dst_strides;
    j.src_strides = c->kind == BOX_SCATTER || c->kind == BOX_PACKED ? NULL : c->src_strides;
    j.box = c->box;
    j.esz = c->esz;
    return j;
}

typedef struct box_pair {
    uint8_t *to;
    const uint8_t *from;
} box_pair_t;

static inline void box_copy_run(void *arg, uint64_t at1, uint64_t at2, size_t n) {
    box_pair_t *p = arg;
    memcpy(p->to + at1, p->from + at2, n);
}

/* Applies the case with the CPU functions of strided.c (host arenas). */
static inline void box_case_ref(const box_case_t *c, uint8_t *dst_arena, const uint8_t *src_arena) {
    uint8_t *dst = dst_arena + c->dst_base;
    const uint8_t *src = src_arena + c->src_base;
    switch (c->kind) {
    case BOX_GATHER: sync_gather(dst, src, c->src_off, c->src_strides, &c->box, c->esz); break;
    case BOX_SCATTER: sync_scatter(dst, c->dst_off, c->dst_strides, &c->box, c->esz, src); break;
    case BOX_SAME: sync_copy_box(dst, src, c->dst_off, c->dst_strides, &c->box, c->esz); break;
    case BOX_S2S: {
        box_pair_t p = {dst + c->dst_off, src + c->src_off};
        sync_box_runs(&c->box, c->dst_strides, c->src_strides, c->esz, box_copy_run, &p);
        break;
    }
    default: memcpy(dst, src, box_numel(&c->box) * c->esz); break;
    }
}

/* The case whose destination region holds arena byte at (or NULL). */
static inline const box_case_t *box_case_at(const box_case_t *cs, size_t n, uint64_t at) {
    for (size_t i = 0; i < n; i++)
        if (at >= cs[i].dst_base && at < cs[i].dst_base + cs[i].dst_span) return &cs[i];
    return NULL;
}

/* Compares got with want over n bytes; on a difference prints the first,
 * how many differ, and the case owning it (cases before it in the batch
 * decide between a wrong copy and a stray write), and fails. */
static inline void box_compare(const char *what, const uint8_t *got, const uint8_t *want, uint64_t n,
                               const box_case_t *cs, size_t ncases) {
    if (memcmp(got, want, n) == 0) return;
    uint64_t first = UINT64_MAX, bad = 0;
    for (uint64_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            if (first == UINT64_MAX) first = i;
            bad++;
        }
    const box_case_t *c = box_case_at(cs, ncases, first);
    fprintf(stderr, "%s: %llu bytes differ; first at arena byte %llu: got 0x%02x, want 0x%02x\n", what,
            (unsigned long long)bad, (unsigned long long)first, got[first], want[first]);
    if (!cs) {
    } else if (c)
        fprintf(stderr, "  in case %zu (dst region %llu+%llu, element 0 at +%llu, src %llu+%llu): %s\n",
                (size_t)(c - cs), (unsigned long long)c->dst_base, (unsigned long long)c->dst_span,
                (unsigned long long)c->dst_off, (unsigned long long)c->src_base, (unsigned long long)c->src_off,
                c->what);
    else
        fprintf(stderr, "  outside every case's region: a stray write\n");
    exit(1);
}

#endif
