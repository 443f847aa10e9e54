/* Boxes between strided buffers and row-major packed bytes. The trailing
 * dims that are contiguous under the strides form one run, copied with one
 * memcpy; the leading dims are walked with an odometer. */
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

/* Elements of the trailing contiguous run and the number of leading dims. */
static int64_t run_of(const ferry_box_t *box, const int64_t *strides, uint32_t *outer) {
    int64_t run = 1;
    int d = (int)box->ndim - 1;
    for (; d >= 0; d--) {
        if (box->extent[d] != 1 && strides[d] != run) break;
        run *= box->extent[d];
    }
    *outer = (uint32_t)(d + 1);
    return run;
}

typedef void (*run_fn)(uint8_t *strided, uint8_t *packed, size_t bytes);

static void walk(uint8_t *base, uint64_t offset, const int64_t *strides, const ferry_box_t *box, size_t esz,
                 uint8_t *packed, run_fn fn) {
    uint32_t outer;
    int64_t run = run_of(box, strides, &outer);
    size_t run_bytes = (size_t)run * esz;
    int64_t idx[FERRY_MAX_DIMS] = {0};
    for (;;) {
        int64_t e = 0;
        for (uint32_t d = 0; d < outer; d++) e += idx[d] * strides[d];
        fn(base + offset + (uint64_t)e * esz, packed, run_bytes);
        packed += run_bytes;
        int d = (int)outer - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < box->extent[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

static void to_packed(uint8_t *strided, uint8_t *packed, size_t n) { memcpy(packed, strided, n); }
static void from_packed(uint8_t *strided, uint8_t *packed, size_t n) { memcpy(strided, packed, n); }

void sync_gather(uint8_t *packed, const uint8_t *base, uint64_t offset, const int64_t *strides, const ferry_box_t *box,
                 size_t esz) {
    walk((uint8_t *)base, offset, strides, box, esz, packed, to_packed);
}

void sync_scatter(uint8_t *base, uint64_t offset, const int64_t *strides, const ferry_box_t *box, size_t esz,
                  const uint8_t *packed) {
    walk(base, offset, strides, box, esz, (uint8_t *)packed, from_packed);
}

void sync_copy_box(uint8_t *dst, const uint8_t *src, uint64_t offset, const int64_t *strides, const ferry_box_t *box,
                   size_t esz) {
    uint32_t outer;
    int64_t run = run_of(box, strides, &outer);
    size_t run_bytes = (size_t)run * esz;
    int64_t idx[FERRY_MAX_DIMS] = {0};
    for (;;) {
        int64_t e = 0;
        for (uint32_t d = 0; d < outer; d++) e += idx[d] * strides[d];
        uint64_t at = offset + (uint64_t)e * esz;
        memcpy(dst + at, src + at, run_bytes);
        int d = (int)outer - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < box->extent[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}
