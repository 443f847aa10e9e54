/* Fuzz target: a side's global layout rebuilt from its members' encoded
 * RankLayouts (sync_wire_decode), the bytes other processes send through the
 * metadata service. The first byte gives the member count (1 + byte % 4);
 * then each member's blob is a 2-byte little-endian length and that many
 * bytes (cut short where the input ends). Every blob lies in its own
 * allocation of exactly its length.
 *
 * A refusal must leave a detail text. An accepted side must hold together
 * through the public layout API: the world is the member count, every
 * buffer lies in its rank's range [buf_base[r], buf_base[r+1]), every piece
 * names a tensor of the model and a buffer of its own rank, the model's
 * tensors are sorted by name, fp8 pairs name each other; ferry_layout_validate may refuse the layout
 * (with a detail) but must not crash. Re-encoding every rank with
 * sync_wire_encode and decoding again must give the same pieces and, when
 * every tensor is named by some piece (encoding drops the others), the same
 * digest; a third round must reproduce the second exactly. Never a crash or
 * a leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sync/sync_internal.h"
#include "fuzz_ctx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MEMBERS 4

/* Says what broke (the replay driver names no file) and stops. */
#define FAIL(why)                                                                              \
    do {                                                                                       \
        fprintf(stderr, "fuzz_wire_layout: %s (%zu members, %zu-byte input)\n", (why), n, size); \
        abort();                                                                               \
    } while (0)

static void free_hosts(ferry_ctx_t *ctx, char **hosts, size_t n) {
    for (size_t r = 0; hosts && r < n; r++) ferry_free(ctx, hosts[r]);
    ferry_free(ctx, hosts);
}

/* Decodes n blobs; on failure checks the detail and returns false. */
static bool decode(ferry_ctx_t *ctx, const meta_bytes_t *blobs, size_t n, size_t size, sync_side_t *side,
                   char ***hosts) {
    ferry_errbuf_t err;
    err.text[0] = '\0';
    *hosts = NULL;
    ferry_status_t st = sync_wire_decode(ctx, blobs, n, "writer", side, hosts, &err);
    if (st != FERRY_OK) {
        if (err.text[0] == '\0') FAIL("a refused layout left no detail");
        if (side->layout || side->model || side->buf_base || *hosts) FAIL("a refused layout left a side behind");
        return false;
    }
    if (!*hosts || !side->layout || !side->model || !side->buf_base) FAIL("an accepted layout is incomplete");
    return true;
}

/* The invariants of an accepted side of n members. */
static void check_side(const sync_side_t *side, char **hosts, size_t n, size_t size) {
    const ferry_layout_t *l = side->layout;
    const ferry_model_t *m = side->model;
    if (side->world != n || ferry_layout_world_size(l) != n) FAIL("the world is not the member count");
    if (ferry_layout_model(l) != m) FAIL("the layout is not over the side's model");
    for (size_t r = 0; r < n; r++)
        if (!hosts[r] || strlen(hosts[r]) > META_MAX_NAME) FAIL("a host name is missing or too long");
    /* tensors sorted by name, each well formed */
    uint32_t nt = ferry_model_tensor_count(m);
    const char *prev = NULL;
    for (uint32_t t = 0; t < nt; t++) {
        ferry_tensor_info_t ti;
        if (!ferry_model_tensor(m, t, &ti) || !ti.name || !ti.name[0]) FAIL("a model tensor is unreadable");
        if (prev && strcmp(prev, ti.name) >= 0) FAIL("the model's tensors are not sorted by name");
        if (ti.ndim > FERRY_MAX_DIMS || ferry_dtype_size(ti.dtype) == 0) FAIL("a model tensor is malformed");
        uint32_t found;
        if (!ferry_model_find(m, ti.name, &found) || found != t) FAIL("a model tensor is not found by its name");
        prev = ti.name;
        /* fp8 pairs: a weight (F8_E4M3) and its F32 scale name each other */
        ferry_tensor_quant_t q, pq;
        if (!ferry_model_tensor_quant(m, t, &q)) FAIL("a model tensor's quant is unreadable");
        if (q.kind == FERRY_QUANT_NONE) continue;
        if (q.partner >= nt || !ferry_model_tensor_quant(m, q.partner, &pq) || pq.partner != t ||
            pq.flags != q.flags || pq.kind == q.kind || pq.kind == FERRY_QUANT_NONE)
            FAIL("an fp8 tensor's partner does not name it back");
        if (q.kind == FERRY_QUANT_FP8_BLOCK ? ti.dtype != FERRY_DTYPE_F8_E4M3 : ti.dtype != FERRY_DTYPE_F32)
            FAIL("an fp8 pair has the wrong dtypes");
    }
    /* buffers: each rank's a contiguous range starting at buf_base[r] */
    uint32_t nb = ferry_layout_buffer_count(l);
    if (side->buf_base[0] != 0 || side->buf_base[n] != nb) FAIL("buf_base does not span the buffers");
    for (size_t r = 0; r < n; r++) {
        if (side->buf_base[r] > side->buf_base[r + 1]) FAIL("buf_base is not monotonic");
        for (uint32_t b = side->buf_base[r]; b < side->buf_base[r + 1]; b++) {
            ferry_buffer_info_t bi;
            if (!ferry_layout_buffer(l, b, &bi) || bi.rank != r) FAIL("a buffer lies outside its rank's range");
            if (!bi.name || !bi.name[0] || bi.size == 0 || ferry_dtype_size(bi.dtype) == 0)
                FAIL("a buffer is malformed");
        }
    }
    /* pieces: grouped by rank, each on a buffer of its rank */
    size_t np = ferry_layout_piece_count(l), seen = 0;
    const ferry_piece_t *ps = ferry_layout_pieces(l);
    for (size_t i = 0; i < np; i++) {
        const ferry_piece_t *p = &ps[i];
        if (p->rank >= n) FAIL("a piece's rank is outside the world");
        if (p->buffer < side->buf_base[p->rank] || p->buffer >= side->buf_base[p->rank + 1])
            FAIL("a piece's buffer is outside its rank's range");
        if (p->tensor >= nt) FAIL("a piece names no tensor of the model");
        ferry_tensor_info_t ti;
        ferry_model_tensor(m, p->tensor, &ti);
        if (p->box.ndim != ti.ndim || ferry_box_numel(&p->box) <= 0) FAIL("a piece's box does not fit its tensor");
    }
    for (uint32_t r = 0; r < n; r++) {
        size_t first, count;
        ferry_layout_rank_pieces(l, r, &first, &count);
        if (first != seen || first + count > np) FAIL("the rank piece ranges do not tile the pieces");
        for (size_t i = first; i < first + count; i++)
            if (ps[i].rank != r) FAIL("a piece lies in another rank's range");
        seen += count;
    }
    if (seen != np) FAIL("the rank piece ranges do not cover the pieces");
}

/* Bounds the work ferry_layout_validate may do here (it expands strided
 * pieces into runs, up to 2^26 of them) and the checks of its answer: at
 * most this many elements in pieces and in tensors. */
#define VALIDATE_MAX_ELEMENTS (1u << 20)

typedef struct {
    uint64_t lo, hi; /* bytes [lo, hi) of one element */
    uint32_t buffer;
    size_t piece;
} elem_t;

static int cmp_elem(const void *x, const void *y) {
    const elem_t *a = x, *b = y;
    if (a->buffer != b->buffer) return a->buffer < b->buffer ? -1 : 1;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    return a->piece < b->piece ? -1 : a->piece > b->piece;
}

/* True if two different pieces share a byte of a buffer (element by element). */
static bool bytes_overlap(const ferry_layout_t *l, size_t elements) {
    const ferry_model_t *m = ferry_layout_model(l);
    const ferry_piece_t *ps = ferry_layout_pieces(l);
    size_t np = ferry_layout_piece_count(l), k = 0;
    elem_t *e = malloc((elements ? elements : 1) * sizeof *e);
    if (!e) abort();
    for (size_t i = 0; i < np; i++) {
        const ferry_piece_t *p = &ps[i];
        ferry_tensor_info_t ti;
        ferry_model_tensor(m, p->tensor, &ti);
        uint64_t esz = ferry_dtype_size(ti.dtype);
        int64_t idx[FERRY_MAX_DIMS] = {0};
        for (;;) {
            uint64_t off = 0;
            for (uint32_t d = 0; d < p->box.ndim; d++) off += (uint64_t)idx[d] * (uint64_t)p->strides[d];
            e[k].lo = p->byte_offset + off * esz;
            e[k].hi = e[k].lo + esz;
            e[k].buffer = p->buffer;
            e[k].piece = i;
            k++;
            uint32_t d = p->box.ndim;
            while (d > 0 && ++idx[d - 1] == p->box.extent[d - 1]) idx[--d] = 0;
            if (d == 0) break;
        }
    }
    qsort(e, k, sizeof *e, cmp_elem);
    /* per buffer: the furthest end so far, and the furthest of any other piece */
    bool overlap = false;
    uint64_t end1 = 0, end2 = 0;
    size_t piece1 = SIZE_MAX;
    for (size_t i = 0; i < k && !overlap; i++) {
        if (i == 0 || e[i].buffer != e[i - 1].buffer) end1 = end2 = 0, piece1 = SIZE_MAX;
        uint64_t other = e[i].piece == piece1 ? end2 : end1;
        if (e[i].lo < other) overlap = true;
        if (e[i].piece == piece1) {
            if (e[i].hi > end1) end1 = e[i].hi;
        } else if (e[i].hi > end1) {
            end2 = end1;
            end1 = e[i].hi;
            piece1 = e[i].piece;
        } else if (e[i].hi > end2) {
            end2 = e[i].hi;
        }
    }
    free(e);
    return overlap;
}

/* True if every element of every tensor is held, all of a tensor's equally
 * often; false also where the tensors are too large to count. */
static bool covered(const ferry_layout_t *l) {
    const ferry_model_t *m = ferry_layout_model(l);
    const ferry_piece_t *ps = ferry_layout_pieces(l);
    size_t np = ferry_layout_piece_count(l);
    uint32_t nt = ferry_model_tensor_count(m);
    uint64_t total = 0;
    uint64_t *base = malloc((nt + 1) * sizeof *base);
    if (!base) abort();
    for (uint32_t t = 0; t < nt; t++) {
        ferry_tensor_info_t ti;
        ferry_model_tensor(m, t, &ti);
        base[t] = total;
        uint64_t numel = 1;
        for (uint32_t d = 0; d < ti.ndim; d++) numel *= (uint64_t)ti.shape[d]; /* at most 2^48 */
        total += numel;
        if (total > VALIDATE_MAX_ELEMENTS) {
            free(base);
            return false;
        }
    }
    uint32_t *count = calloc(total ? total : 1, sizeof *count);
    if (!count) abort();
    for (size_t i = 0; i < np; i++) {
        const ferry_piece_t *p = &ps[i];
        ferry_tensor_info_t ti;
        ferry_model_tensor(m, p->tensor, &ti);
        int64_t idx[FERRY_MAX_DIMS] = {0};
        for (;;) {
            uint64_t lin = 0;
            for (uint32_t d = 0; d < ti.ndim; d++) lin = lin * (uint64_t)ti.shape[d] + (uint64_t)(p->box.offset[d] + idx[d]);
            count[base[p->tensor] + lin]++;
            uint32_t d = p->box.ndim;
            while (d > 0 && ++idx[d - 1] == p->box.extent[d - 1]) idx[--d] = 0;
            if (d == 0) break;
        }
    }
    bool ok = true;
    for (uint32_t t = 0; t < nt && ok; t++) {
        uint64_t end = t + 1 < nt ? base[t + 1] : total;
        for (uint64_t j = base[t]; j < end && ok; j++) ok = count[j] > 0 && count[j] == count[base[t]];
    }
    free(count);
    free(base);
    return ok;
}

static void check_validate(ferry_layout_t *l, size_t n, size_t size) {
    uint64_t elements = 0;
    const ferry_piece_t *ps = ferry_layout_pieces(l);
    for (size_t i = 0; i < ferry_layout_piece_count(l); i++) {
        elements += (uint64_t)ferry_box_numel(&ps[i].box);
        if (elements > VALIDATE_MAX_ELEMENTS) return;
    }
    ferry_coverage_t cov;
    memset(&cov, 0, sizeof cov);
    ferry_status_t st = ferry_layout_validate(l, &cov);
    if (st != FERRY_OK) {
        if (ferry_layout_error(l)[0] == '\0') FAIL("a refused validation left no detail");
        return;
    }
    if (cov.pieces != ferry_layout_piece_count(l) || cov.tensors != ferry_model_tensor_count(ferry_layout_model(l)))
        FAIL("the coverage counts differ from the layout's");
    /* what it accepted, counted element by element */
    if (bytes_overlap(l, (size_t)elements)) FAIL("a validated layout has pieces sharing buffer bytes");
    uint32_t nt = ferry_model_tensor_count(ferry_layout_model(l));
    uint64_t tensor_elements = 0;
    for (uint32_t t = 0; t < nt && tensor_elements <= VALIDATE_MAX_ELEMENTS; t++) {
        ferry_tensor_info_t ti;
        ferry_model_tensor(ferry_layout_model(l), t, &ti);
        uint64_t numel = 1;
        for (uint32_t d = 0; d < ti.ndim; d++) numel *= (uint64_t)ti.shape[d];
        tensor_elements += numel;
    }
    if (tensor_elements <= VALIDATE_MAX_ELEMENTS && !covered(l))
        FAIL("a validated layout leaves a gap or holds elements unequally often");
}

/* True if some piece names every tensor of the model. */
static bool all_tensors_named(const ferry_layout_t *l) {
    uint32_t nt = ferry_model_tensor_count(ferry_layout_model(l));
    size_t np = ferry_layout_piece_count(l);
    const ferry_piece_t *ps = ferry_layout_pieces(l);
    uint8_t *named = calloc(nt ? nt : 1, 1);
    if (!named) abort();
    for (size_t i = 0; i < np; i++) named[ps[i].tensor] = 1;
    bool all = true;
    for (uint32_t t = 0; t < nt; t++) all = all && named[t];
    free(named);
    return all;
}

/* Re-encodes every rank of side into blobs (ctx allocations). */
static void encode_side(ferry_ctx_t *ctx, const sync_side_t *side, char **hosts, meta_bytes_t *out, size_t n,
                        size_t size) {
    for (size_t r = 0; r < n; r++) {
        ferry_errbuf_t err;
        err.text[0] = '\0';
        uint8_t *buf = NULL;
        size_t len = 0;
        if (sync_wire_encode(ctx, side->layout, (uint32_t)r, hosts[r], &buf, &len, &err) != FERRY_OK) {
            fprintf(stderr, "fuzz_wire_layout: encoding rank %zu: %s\n", r, err.text);
            FAIL("an accepted layout does not re-encode");
        }
        out[r].data = buf;
        out[r].len = len;
    }
}

/* Same pieces, buffers and hosts; tensors compared by name. */
static void check_same(const sync_side_t *a, char **ha, const sync_side_t *b, char **hb, size_t n, size_t size) {
    const ferry_layout_t *la = a->layout, *lb = b->layout;
    const ferry_model_t *ma = a->model, *mb = b->model;
    size_t np = ferry_layout_piece_count(la);
    if (ferry_layout_piece_count(lb) != np) FAIL("a round trip changed the piece count");
    if (ferry_layout_buffer_count(la) != ferry_layout_buffer_count(lb)) FAIL("a round trip changed the buffers");
    for (size_t r = 0; r <= n; r++)
        if (a->buf_base[r] != b->buf_base[r]) FAIL("a round trip changed buf_base");
    for (size_t r = 0; r < n; r++)
        if (strcmp(ha[r], hb[r]) != 0) FAIL("a round trip changed a host");
    for (uint32_t i = 0; i < ferry_layout_buffer_count(la); i++) {
        ferry_buffer_info_t x, y;
        ferry_layout_buffer(la, i, &x);
        ferry_layout_buffer(lb, i, &y);
        if (strcmp(x.name, y.name) != 0 || x.rank != y.rank || x.size != y.size || x.dtype != y.dtype)
            FAIL("a round trip changed a buffer");
    }
    const ferry_piece_t *pa = ferry_layout_pieces(la), *pb = ferry_layout_pieces(lb);
    for (size_t i = 0; i < np; i++) {
        ferry_tensor_info_t ta, tb;
        ferry_model_tensor(ma, pa[i].tensor, &ta);
        ferry_model_tensor(mb, pb[i].tensor, &tb);
        bool same = strcmp(ta.name, tb.name) == 0 && ta.dtype == tb.dtype && ta.ndim == tb.ndim &&
                    memcmp(ta.shape, tb.shape, sizeof ta.shape) == 0 && pa[i].rank == pb[i].rank &&
                    pa[i].buffer == pb[i].buffer && pa[i].byte_offset == pb[i].byte_offset &&
                    ferry_box_equal(&pa[i].box, &pb[i].box);
        for (uint32_t d = 0; same && d < pa[i].box.ndim; d++) same = pa[i].strides[d] == pb[i].strides[d];
        if (!same) FAIL("a round trip changed a piece");
    }
    /* the re-encoded side's tensors are the ones some piece names */
    for (uint32_t t = 0; t < ferry_model_tensor_count(mb); t++) {
        ferry_tensor_info_t tb;
        ferry_model_tensor(mb, t, &tb);
        if (!ferry_model_find(ma, tb.name, NULL)) FAIL("a round trip made up a tensor");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    ferry_ctx_t *ctx = fuzz_ctx();
    size_t n = 1 + data[0] % MAX_MEMBERS, at = 1;
    meta_bytes_t blobs[MAX_MEMBERS];
    for (size_t r = 0; r < n; r++) {
        size_t len = 0;
        if (size - at >= 2) {
            len = (size_t)data[at] | (size_t)data[at + 1] << 8;
            at += 2;
        } else {
            at = size;
        }
        if (len > size - at) len = size - at;
        uint8_t *blob = malloc(len ? len : 1);
        if (!blob) abort();
        if (len) memcpy(blob, data + at, len);
        blobs[r] = (meta_bytes_t){blob, len};
        at += len;
    }

    sync_side_t s1, s2, s3;
    char **h1 = NULL, **h2 = NULL, **h3 = NULL;
    bool ok = decode(ctx, blobs, n, size, &s1, &h1);
    for (size_t r = 0; r < n; r++) free((void *)blobs[r].data);
    if (!ok) return 0;
    check_side(&s1, h1, n, size);
    check_validate(s1.layout, n, size);

    /* round trip: every rank re-encoded, then decoded again (twice) */
    meta_bytes_t e2[MAX_MEMBERS], e3[MAX_MEMBERS];
    encode_side(ctx, &s1, h1, e2, n, size);
    if (!decode(ctx, e2, n, size, &s2, &h2)) FAIL("a re-encoded layout does not decode");
    check_side(&s2, h2, n, size);
    check_same(&s1, h1, &s2, h2, n, size);
    if (all_tensors_named(s1.layout) && ferry_layout_digest(s1.layout) != ferry_layout_digest(s2.layout))
        FAIL("a round trip changed the layout digest");
    encode_side(ctx, &s2, h2, e3, n, size);
    if (!decode(ctx, e3, n, size, &s3, &h3)) FAIL("a twice re-encoded layout does not decode");
    if (ferry_layout_digest(s2.layout) != ferry_layout_digest(s3.layout)) FAIL("a second round trip changed the digest");
    for (size_t r = 0; r < n; r++)
        if (e2[r].len != e3[r].len || memcmp(e2[r].data, e3[r].data, e2[r].len) != 0)
            FAIL("a second round trip encodes to other bytes");

    for (size_t r = 0; r < n; r++) {
        ferry_free(ctx, (void *)e2[r].data);
        ferry_free(ctx, (void *)e3[r].data);
    }
    sync_side_free(ctx, &s1);
    sync_side_free(ctx, &s2);
    sync_side_free(ctx, &s3);
    free_hosts(ctx, h1, n);
    free_hosts(ctx, h2, n);
    free_hosts(ctx, h3, n);
    return 0;
}
