/* Boxes between strided buffers and row-major packed bytes. The trailing
 * dims contiguous under every strides involved form one run, moved with one
 * memcpy; the leading dims are walked with an odometer (sync_box_runs). */
#include <string.h>

#include "sync/sync_internal.h"

bool sync_box_contiguous(const ferry_box_t *box, const int64_t *strides) {
    int64_t want = 1;
    for (int d = (int)box->ndim - 1; d >= 0; d--) {
        if (box->extent[d] == 1) continue;
        if (strides[d] != want) return false;
        want *= box->extent[d];
    }
    return true;
}

uint64_t sync_box_span(const int64_t *strides, const ferry_box_t *box, size_t esz) {
    int64_t last = 0;
    for (uint32_t d = 0; d < box->ndim; d++) last += (box->extent[d] - 1) * strides[d];
    return ((uint64_t)last + 1) * esz;
}

int64_t sync_box_run(const ferry_box_t *box, const int64_t *s1, const int64_t *s2, uint32_t *outer) {
    int64_t run = 1;
    int d = (int)box->ndim - 1;
    for (; d >= 0; d--) {
        if (box->extent[d] != 1 && (s1[d] != run || (s2 && s2[d] != run))) break;
        run *= box->extent[d];
    }
    *outer = (uint32_t)(d + 1);
    return run;
}

void sync_box_runs(const ferry_box_t *box, const int64_t *s1, const int64_t *s2, size_t esz, sync_run_fn fn,
                   void *arg) {
    uint32_t outer;
    size_t run_bytes = (size_t)sync_box_run(box, s1, s2, &outer) * esz;
    int64_t idx[FERRY_MAX_DIMS] = {0};
    uint64_t packed = 0;
    for (;;) {
        int64_t e1 = 0, e2 = 0;
        for (uint32_t d = 0; d < outer; d++) {
            e1 += idx[d] * s1[d];
            if (s2) e2 += idx[d] * s2[d];
        }
        fn(arg, (uint64_t)e1 * esz, s2 ? (uint64_t)e2 * esz : packed, run_bytes);
        packed += run_bytes;
        int d = (int)outer - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < box->extent[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

typedef struct copy_arg {
    uint8_t *to;
    const uint8_t *from;
} copy_arg_t;

static void run_gather(void *arg, uint64_t strided, uint64_t packed, size_t n) {
    copy_arg_t *c = arg;
    memcpy(c->to + packed, c->from + strided, n);
}
static void run_scatter(void *arg, uint64_t strided, uint64_t packed, size_t n) {
    copy_arg_t *c = arg;
    memcpy(c->to + strided, c->from + packed, n);
}
static void run_same(void *arg, uint64_t at, uint64_t unused, size_t n) {
    (void)unused;
    copy_arg_t *c = arg;
    memcpy(c->to + at, c->from + at, n);
}

void sync_gather(uint8_t *packed, const uint8_t *base, uint64_t offset, const int64_t *strides, const ferry_box_t *box,
                 size_t esz) {
    copy_arg_t c = {packed, base + offset};
    sync_box_runs(box, strides, NULL, esz, run_gather, &c);
}

void sync_scatter(uint8_t *base, uint64_t offset, const int64_t *strides, const ferry_box_t *box, size_t esz,
                  const uint8_t *packed) {
    copy_arg_t c = {base + offset, packed};
    sync_box_runs(box, strides, NULL, esz, run_scatter, &c);
}

void sync_copy_box(uint8_t *dst, const uint8_t *src, uint64_t offset, const int64_t *strides, const ferry_box_t *box,
                   size_t esz) {
    copy_arg_t c = {dst + offset, src + offset};
    sync_box_runs(box, strides, NULL, esz, run_same, &c);
}
