/* delta.cu's passes on the CPU, for the fake CUDA runtime (fake_cuda.h):
 * each launcher enqueues a kernel that does what the GPU's does with the
 * same tables, chunk by chunk and class by class, with delta_dev.h's own
 * readers (decode_class, dk_table, decode_sub). The write pass keeps the
 * GPU's rules and order of verdicts (a change out of range, the result's
 * checksum, then the first class whose counts differ) and its undo log;
 * where a kernel relies on what the host promised (alignment, the width a
 * list's kernel is built for, pinned memory for a pull), the model checks
 * it and stops the process if it does not hold. */
#include "fake_cuda.h"

#include <string.h>

#include "codec/codec_internal.h"
#include "codec/delta_dev.h"
#include "codec/delta_kern.h"
#include "common/hash.h"

#define CLASSES_MAX 8u
#define TILE 4096u

static void fail_chunk(uint32_t *status, uint32_t code) { /* the first failure sticks (atomicCAS) */
    if (*status == DK_OK) *status = code;
}


/* The batch's arrays: device memory, or NULL. */
static void dev_batch(const dk_batch_t *b) {
    const void *p[] = {b->chunks, b->classes, b->status, b->applied, b->rank, b->delta, b->hashes, b->subs, b->cls_sum};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) /* (NULL: none allocated yet, of no entries) */
        if (p[i]) fake_cuda_dev((uint64_t)(uintptr_t)p[i], 0, "a batch array", i);
}

/* ---- pull -------------------------------------------------------------------------- */

typedef struct pull_args {
    uint32_t *dst;
    const uint32_t *src;
    size_t bytes;
} pull_args_t;

static void pull_run(const void *a) {
    const pull_args_t *p = a;
    FAKE_REQUIRE(fake_cuda_kind(p->src, p->bytes) == 'h', "dk_pull of %zu bytes from %p: not pinned host memory",
                 p->bytes, (const void *)p->src);
    FAKE_REQUIRE(fake_cuda_kind(p->dst, p->bytes) == 'd', "dk_pull of %zu bytes to %p: not device memory", p->bytes,
                 (void *)p->dst);
    memcpy(p->dst, p->src, p->bytes);
}

cudaError_t dk_pull_enqueue(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
    FAKE_REQUIRE(bytes % 4 == 0 && (uintptr_t)dst % 4 == 0 && (uintptr_t)src % 4 == 0, "dk_pull: %zu bytes, %p <- %p",
                 bytes, dst, src);
    const pull_args_t p = {dst, src, bytes};
    if (bytes / 4) fake_cuda_launch(stream, pull_run, &p, sizeof p, "dk_pull");
    return cudaGetLastError();
}

cudaError_t dk_init(void) { return cudaSuccess; }

/* ---- pre ------------------------------------------------------------------------------ */

static void pre_run(const void *a) {
    const dk_batch_t *b = a;
    dev_batch(b);
    for (uint64_t c = b->chunk0; c < (uint64_t)b->chunk0 + b->nchunks; c++) {
        const dk_chunk_t *ch = &b->chunks[c];
        const uint64_t bytes = (uint64_t)ch->elems * ch->width;
        const void *reg = fake_cuda_dev(ch->region, bytes, "the region", c);
        uint32_t code = DK_OK;
        const void *rec = fake_cuda_dev(ch->rec, ch->rec_len, "the record", c);
        if (XXH3_64bits_withSeed(rec, ch->rec_len, ch->rec_seed) != ch->rec_sum)
            code = DK_REC_SUM;
        else if (ch->mode == DK_UNCHANGED_CHUNK) {
            if (XXH3_64bits(reg, bytes) != ch->next_sum) code = DK_UNCHANGED;
        } else if (ch->mode == DK_RAW_CHUNK) {
            if (XXH3_64bits(reg, bytes) != ch->base_sum) code = DK_RAW_BASE;
            else if (XXH3_64bits(fake_cuda_dev(ch->payload, bytes, "the raw payload", c), bytes) != ch->next_sum)
                code = DK_RAW_DATA;
        }
        b->status[c] = code, b->applied[c] = 0;
    }
}

cudaError_t dk_pre_enqueue(const dk_batch_t *b, unsigned sms, cudaStream_t stream) {
    (void)sms;
    if (b->nchunks) fake_cuda_launch(stream, pre_run, b, sizeof *b, "dk_pre");
    return cudaGetLastError();
}

/* ---- decode ---------------------------------------------------------------------------- */

static void decode_run(const void *a) { /* format 1: a class each */
    const dk_batch_t *b = a;
    dev_batch(b);
    for (uint64_t i = b->class0; i < (uint64_t)b->class0 + b->nclasses; i++) {
        const dk_class_t *e = &b->classes[i];
        if (e->nsub || b->status[e->chunk] != DK_OK) continue;
        fake_cuda_dev(e->stream, e->len, "the class stream", i);
        FAKE_REQUIRE(e->change0 % 4 == 0 && (uintptr_t)(b->rank + e->change0) % 16 == 0 &&
                         (uintptr_t)(b->delta + e->change0) % 16 == 0,
                     "class %llu's slots at %llu: decode_class stores 16 bytes at a time", (unsigned long long)i,
                     (unsigned long long)e->change0);
        if (!decode_class(e, b->rank + e->change0, b->delta + e->change0)) fail_chunk(&b->status[e->chunk], DK_STREAM);
    }
}

static void subs_run(const void *a) { /* format 2: each class's sub-stream table */
    const dk_batch_t *b = a;
    dev_batch(b);
    for (uint64_t i = b->class0; i < (uint64_t)b->class0 + b->nclasses; i++) {
        const dk_class_t *e = &b->classes[i];
        if (!e->nsub) continue;
        fake_cuda_dev(e->stream, e->len, "the class stream", i);
        const bool ok = b->status[e->chunk] == DK_OK;
        uint64_t slot = 0, end = 0;
        if (!dk_table(e, (uint32_t)i, ok, b->subs + e->sub0, &slot, &end)) fail_chunk(&b->status[e->chunk], DK_STREAM);
        else FAKE_REQUIRE(slot <= end, "class %llu's sub-streams take slots past the host's reservation",
                          (unsigned long long)i);
    }
}

static void decode2_run(const void *a) { /* format 2: a sub-stream each */
    const dk_batch_t *b = a;
    dev_batch(b);
    for (uint64_t i = b->sub0; i < (uint64_t)b->sub0 + b->nsubs; i++) {
        dk_sub_t *sb = &b->subs[i];
        const uint32_t cls = sb->cls;
        const dk_class_t *e = &b->classes[cls];
        if (b->status[e->chunk] != DK_OK) continue;
        FAKE_REQUIRE((uintptr_t)(b->delta + sb->slot) % 16 == 0, "sub-stream %llu's slots: not 16-aligned",
                     (unsigned long long)i);
        const uint32_t limit = 1u << b->chunks[e->chunk].sub_log2;
        uint32_t nu = 0;
        if (!decode_sub(e, (const uint8_t *)(uintptr_t)e->stream, sb, limit, b->delta + sb->slot, &nu)) {
            fail_chunk(&b->status[e->chunk], DK_STREAM);
            continue;
        }
        b->cls_sum[2 * cls] += sb->count;
        b->cls_sum[2 * cls + 1] += nu;
    }
}

cudaError_t dk_decode_enqueue(const dk_batch_t *b, unsigned sms, cudaStream_t stream) {
    (void)sms; /* (as delta.cu's, line for line) */
    cudaError_t e = cudaSuccess;
    if (b->nclasses) {
        fake_cuda_launch(stream, decode_run, b, sizeof *b, "dk_decode");
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (b->nsubs) {
        fake_cuda_launch(stream, subs_run, b, sizeof *b, "dk_subs");
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        fake_cuda_launch(stream, decode2_run, b, sizeof *b, "dk_decode2");
        e = cudaGetLastError();
    }
    return e;
}

/* ---- write ------------------------------------------------------------------------------ */

typedef struct place_args {
    dk_batch_t b;
    const uint32_t *list;
    uint32_t n, kind;
} place_args_t;

/* One sparse chunk written in place, as dk_place does: each element's
   class from its magnitude bucket, each change written where its rank
   (within its run: the class's over the chunk in format 1, its sub-block's
   sub-stream in format 2) meets the element's place among the class's,
   its slot then the undo's log; slots of changes never placed get 0. */
static void place_one(const dk_batch_t *b, uint32_t c, uint32_t kind) {
    const dk_chunk_t *ch = &b->chunks[c];
    const uint32_t K = ch->classes, S = ch->sub_log2, w = ch->width, elems = ch->elems;
    FAKE_REQUIRE(ch->mode == DK_SPARSE_CHUNK && dk_place_kind(w, S) == kind,
                 "chunk %u (mode %u, width %u, sub_log2 %u) in the list of write kernel %u", c, ch->mode, w, S, kind);
    FAKE_REQUIRE(K >= 1 && K <= CLASSES_MAX, "chunk %u: %u classes", c, K);
    FAKE_REQUIRE(!S || (1u << S) >= TILE, "chunk %u: sub-blocks of 2^%u, below a tile", c, S);
    bool go = b->status[c] == DK_OK;
    for (uint32_t k = 0; k < K && go && S; k++) { /* format 2: the sub-streams' sums */
        const uint32_t i = ch->class0 + k;
        if (b->cls_sum[2 * i] != b->classes[i].changed || b->cls_sum[2 * i + 1] != b->classes[i].nonunit) {
            fail_chunk(&b->status[c], DK_STREAM);
            go = false;
        }
    }
    if (!go) return;
    b->applied[c] = 1;
    uint8_t *reg = fake_cuda_dev(ch->region, (uint64_t)elems * w, "the region", c);
    const uint32_t shift = delta_bucket_shift(w);
    const dk_class_t *e[CLASSES_MAX];
    uint32_t lower[CLASSES_MAX], cend[CLASSES_MAX] = {0}, ci[CLASSES_MAX] = {0}, before[CLASSES_MAX] = {0};
    uint32_t seen[CLASSES_MAX] = {0}, placed_before[CLASSES_MAX] = {0};
    uint64_t run0[CLASSES_MAX] = {0};
    for (uint32_t k = 0; k < K; k++) {
        e[k] = &b->classes[ch->class0 + k];
        lower[k] = e[k]->lower >> shift;
        if (!S) run0[k] = e[k]->change0, cend[k] = e[k]->changed;
    }
    for (uint32_t i = 0; i < elems; i++) {
        if (S && (i & ((1u << S) - 1)) == 0)
            for (uint32_t k = 0; k < K; k++) { /* the sub-block's run */
                for (uint32_t j = ci[k]; j < cend[k]; j++) b->delta[run0[k] + j] = 0; /* past the class's elements */
                placed_before[k] += ci[k];
                seen[k] += before[k];
                if (e[k]->nsub) {
                    FAKE_REQUIRE((i >> S) < e[k]->nsub, "chunk %u, class %u: sub-block %u of %u", c, k, i >> S,
                                 e[k]->nsub);
                    const dk_sub_t *sb = &b->subs[e[k]->sub0 + (i >> S)];
                    run0[k] = sb->slot, cend[k] = sb->count;
                } else {
                    cend[k] = 0;
                }
                ci[k] = 0, before[k] = 0;
            }
        const uint32_t v = elem_get(reg, w, i), bucket = (v & mag_mask(w)) >> shift;
        uint32_t k = 0;
        for (uint32_t j = 1; j < K; j++) k += bucket >= lower[j];
        if (ci[k] < cend[k]) {
            const uint64_t at = run0[k] + ci[k];
            const uint32_t r = S ? dk_pack_rank(b->delta[at]) : b->rank[at];
            const int64_t d = S ? dk_pack_delta(b->delta[at]) : b->delta[at];
            if (r == before[k]) {
                uint32_t nv;
                if (elem_unord(elem_ord(v, w) + d, w, &nv)) {
                    elem_put(reg, w, i, nv);
                    if (S) b->delta[at] = dk_pack(i & ((1u << S) - 1), d); /* the undo's log */
                    else b->rank[at] = i;
                } else {
                    b->delta[at] = 0; /* not written */
                    fail_chunk(&b->status[c], DK_RANGE);
                }
                ci[k]++;
            }
        }
        before[k]++;
    }
    for (uint32_t k = 0; k < K; k++) {
        for (uint32_t j = ci[k]; j < cend[k]; j++) b->delta[run0[k] + j] = 0;
        seen[k] += before[k], placed_before[k] += ci[k];
    }
    if (XXH3_64bits(reg, (size_t)elems * w) != ch->next_sum) fail_chunk(&b->status[c], DK_NEXT_SUM);
    for (uint32_t k = 0; k < K; k++) { /* the first class at fault, as the CPU walk reports it */
        if (seen[k] != e[k]->count) {
            fail_chunk(&b->status[c], DK_COUNT);
            break;
        }
        if (placed_before[k] != e[k]->changed) {
            fail_chunk(&b->status[c], DK_PAST);
            break;
        }
    }
}

static void place_run(const void *a) {
    const place_args_t *p = a;
    dev_batch(&p->b);
    fake_cuda_dev((uint64_t)(uintptr_t)p->list, 4ull * p->n, "the write pass's list", 0);
    for (uint32_t j = 0; j < p->n; j++) place_one(&p->b, p->list[j], p->kind);
}

static void raw_run(const void *a) {
    const place_args_t *p = a;
    fake_cuda_dev((uint64_t)(uintptr_t)p->list, 4ull * p->n, "the raw list", 0);
    for (uint32_t j = 0; j < p->n; j++) {
        const uint32_t c = p->list[j];
        const dk_chunk_t *ch = &p->b.chunks[c];
        FAKE_REQUIRE(ch->mode == DK_RAW_CHUNK, "chunk %u (mode %u) in the raw list", c, ch->mode);
        if (p->b.status[c] != DK_OK) continue;
        const size_t bytes = (size_t)ch->elems * ch->width;
        uint8_t *reg = fake_cuda_dev(ch->region, bytes, "the region", c);
        p->b.applied[c] = 1;
        memcpy(fake_cuda_dev((uint64_t)(uintptr_t)(p->b.save + ch->save), bytes, "the saved contents", c), reg, bytes);
        memcpy(reg, fake_cuda_dev(ch->payload, bytes, "the raw payload", c), bytes);
    }
}

cudaError_t dk_write_enqueue(const dk_batch_t *b, const uint32_t *sparse, const uint32_t nsparse[DK_PLACE_KINDS],
                             const uint32_t *raw, uint32_t nraw, cudaStream_t stream) {
    cudaError_t e = cudaSuccess; /* (as delta.cu's, line for line) */
    for (uint32_t k = 0, from = 0; k < DK_PLACE_KINDS; from += nsparse[k++])
        if (nsparse[k]) {
            const place_args_t p = {*b, sparse + from, nsparse[k], k};
            fake_cuda_launch(stream, place_run, &p, sizeof p, "dk_place");
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
        }
    if (nraw) {
        const place_args_t p = {*b, raw, nraw, 0};
        fake_cuda_launch(stream, raw_run, &p, sizeof p, "dk_raw");
        e = cudaGetLastError();
    }
    return e;
}

/* ---- undo -------------------------------------------------------------------------------- */

static void undo_one(uint8_t *reg, uint32_t w, uint32_t at, int64_t d, uint32_t elems) {
    uint32_t v;
    if (!d) return;
    FAKE_REQUIRE(at < elems, "the undo log names element %u of %u", at, elems);
    if (elem_unord(elem_ord(elem_get(reg, w, at), w) - d, w, &v)) elem_put(reg, w, at, v);
}

static void undo_run(const void *a) {
    const place_args_t *p = a;
    const dk_batch_t *b = &p->b;
    dev_batch(b);
    fake_cuda_dev((uint64_t)(uintptr_t)p->list, 4ull * p->n, "the undo list", 0);
    for (uint32_t j = 0; j < p->n; j++) {
        const uint32_t c = p->list[j];
        const dk_chunk_t *ch = &b->chunks[c];
        const uint32_t w = ch->width;
        const size_t bytes = (size_t)ch->elems * w;
        uint8_t *reg = fake_cuda_dev(ch->region, bytes, "the region", c);
        if (b->applied[c]) {
            if (ch->mode == DK_SPARSE_CHUNK && !ch->sub_log2) {
                for (uint64_t i = ch->change0; i < ch->change0 + ch->changed; i++)
                    undo_one(reg, w, b->rank[i], b->delta[i], ch->elems);
            } else if (ch->mode == DK_SPARSE_CHUNK) {
                for (uint32_t k = 0; k < ch->classes; k++) {
                    const dk_class_t *e = &b->classes[ch->class0 + k];
                    for (uint32_t x = 0; x < e->nsub; x++) {
                        const dk_sub_t *sb = &b->subs[e->sub0 + x];
                        for (uint32_t i = 0; i < sb->count; i++) {
                            const int64_t q = b->delta[sb->slot + i];
                            undo_one(reg, w, (x << ch->sub_log2) + dk_pack_rank(q), dk_pack_delta(q), ch->elems);
                        }
                    }
                }
            } else if (ch->mode == DK_RAW_CHUNK) {
                const uint64_t saved = (uint64_t)(uintptr_t)(b->save + ch->save);
                memcpy(reg, fake_cuda_dev(saved, bytes, "the saved contents", c), bytes);
            }
        }
        b->hashes[c] = XXH3_64bits(reg, bytes);
    }
}

cudaError_t dk_undo_enqueue(const dk_batch_t *b, const uint32_t *idx, uint32_t n, cudaStream_t stream) {
    const place_args_t p = {*b, idx, n, 0};
    if (n) fake_cuda_launch(stream, undo_run, &p, sizeof p, "dk_undo");
    return cudaGetLastError();
}
