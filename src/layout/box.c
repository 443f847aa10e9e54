#include <stdio.h>
#include <string.h>

#include "ferry/layout.h"

/* offset + extent without signed overflow: boxes may come from untrusted input */
static int64_t box_end(int64_t offset, int64_t extent) {
    int64_t end;
    if (__builtin_add_overflow(offset, extent, &end)) return extent > 0 ? INT64_MAX : INT64_MIN;
    return end;
}

int64_t ferry_box_numel(const ferry_box_t *box) {
    int64_t n = 1;
    for (uint32_t d = 0; d < box->ndim && d < FERRY_MAX_DIMS; d++) {
        if (box->extent[d] <= 0) return 0;
        if (__builtin_mul_overflow(n, box->extent[d], &n)) return 0;
    }
    return n;
}

bool ferry_box_intersect(const ferry_box_t *a, const ferry_box_t *b, ferry_box_t *out) {
    if (a->ndim != b->ndim || a->ndim > FERRY_MAX_DIMS) return false;
    ferry_box_t r;
    memset(&r, 0, sizeof r);
    r.ndim = a->ndim;
    for (uint32_t d = 0; d < a->ndim; d++) {
        int64_t lo = a->offset[d] > b->offset[d] ? a->offset[d] : b->offset[d];
        int64_t ea = box_end(a->offset[d], a->extent[d]), eb = box_end(b->offset[d], b->extent[d]);
        int64_t hi = ea < eb ? ea : eb;
        if (hi <= lo) return false;
        r.offset[d] = lo;
        r.extent[d] = hi - lo;
    }
    if (out) *out = r;
    return true;
}

bool ferry_box_contains(const ferry_box_t *outer, const ferry_box_t *inner) {
    if (outer->ndim != inner->ndim || outer->ndim > FERRY_MAX_DIMS) return false;
    if (ferry_box_numel(inner) == 0) return true;
    for (uint32_t d = 0; d < outer->ndim; d++) {
        if (inner->offset[d] < outer->offset[d]) return false;
        if (box_end(inner->offset[d], inner->extent[d]) > box_end(outer->offset[d], outer->extent[d]))
            return false;
    }
    return true;
}

bool ferry_box_equal(const ferry_box_t *a, const ferry_box_t *b) {
    if (a->ndim != b->ndim || a->ndim > FERRY_MAX_DIMS) return false;
    for (uint32_t d = 0; d < a->ndim; d++)
        if (a->offset[d] != b->offset[d] || a->extent[d] != b->extent[d]) return false;
    return true;
}

ferry_box_t ferry_box_of_shape(uint32_t ndim, const int64_t *shape) {
    ferry_box_t b;
    memset(&b, 0, sizeof b);
    b.ndim = ndim <= FERRY_MAX_DIMS ? ndim : FERRY_MAX_DIMS;
    for (uint32_t d = 0; d < b.ndim; d++) b.extent[d] = shape[d];
    return b;
}

int ferry_box_format(const ferry_box_t *box, char *buf, size_t size) {
    size_t used = 0;
    int total = 0;
    int n = snprintf(buf, size, "[");
    total += n;
    used = (size_t)n < size ? (size_t)n : size;
    for (uint32_t d = 0; d < box->ndim && d < FERRY_MAX_DIMS; d++) {
        n = snprintf(buf + used, size - used, "%s%lld:%lld", d ? ", " : "",
                     (long long)box->offset[d], (long long)box_end(box->offset[d], box->extent[d]));
        total += n;
        used = used + (size_t)n < size ? used + (size_t)n : size;
    }
    n = snprintf(buf + used, size - used, "]");
    return total + n;
}
