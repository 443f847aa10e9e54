/* delta_enc.cu's passes on the CPU, for the fake CUDA runtime (fake_cuda.h):
 * each launcher enqueues a kernel that does what the GPU's does with the
 * same tables (delta_enc_kern.h), with delta_enc_dev.h's and enc_rules.h's
 * own steps, as test_delta_enc_dev.c runs them for one chunk: scan and
 * hash, classes, rank (each change's rank among its class's elements of
 * its sub-block, and the counts), totals, part, choose, write, head, raw,
 * seal. The launchers are delta.cu's, line for line. Addresses from the
 * tables must lie in device memory. */
#include "fake_cuda.h"

#include <string.h>

#include "codec/codec_internal.h"
#include "codec/delta_enc_kern.h"
#include "common/hash.h"
#include "common/sum_xxh3.h"


static void dev_batch(const ek_batch_t *b) {
    const void *p[] = {b->chunks, b->hist, b->busy, b->blks, b->subs, b->list, b->runs, b->out, b->raw, b->sparse_blks};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) /* (NULL: none allocated yet, of no entries) */
        if (p[i]) fake_cuda_dev((uint64_t)(uintptr_t)p[i], 0, "a batch array", i);
}

/* ek_scan's choice: base and next 16-aligned and longer than xxh3's short
   inputs are hashed by the scan, the others by ek_hash. */
static bool hashed_by_scan(const ek_chunk_t *c) {
    return ((c->base | c->next) & 15) == 0 && (uint64_t)c->elems * c->width > SUMX_SHORT_MAX;
}

/* ---- scan, hash ---------------------------------------------------------------------- */

static void scan_run(const void *a) {
    const ek_batch_t *b = a;
    dev_batch(b);
    for (uint32_t x = 0; x < b->nchunks; x++) {
        ek_chunk_t *c = &b->chunks[x];
        const uint32_t w = c->width, elems = c->elems, stride = elems >= (1u << 16) ? 64 : 1;
        const uint8_t *base = fake_cuda_dev(c->base, (uint64_t)elems * w, "base", x);
        const uint8_t *next = fake_cuda_dev(c->next, (uint64_t)elems * w, "next", x);
        uint32_t *hist = b->hist + (uint64_t)x * 512, changed = 0;
        memset(hist, 0, 512 * sizeof *hist); /* every entry written, as the kernel's */
        for (uint32_t i = 0; i < elems; i++) {
            const uint32_t bv = elem_get(base, w, i), nv = elem_get(next, w, i), bk = ek_bucket(bv, w);
            if (i % stride == 0) hist[bk]++;
            if (bv != nv) hist[256 + bk]++, changed++;
        }
        if (hashed_by_scan(c)) {
            if (!c->given) c->base_sum = XXH3_64bits(base, (size_t)elems * w);
            c->next_sum = XXH3_64bits(next, (size_t)elems * w);
        }
        c->changed = changed;
    }
}

static void hash_run(const void *a) {
    const ek_batch_t *b = a;
    for (uint32_t x = 0; x < b->nchunks; x++) {
        ek_chunk_t *c = &b->chunks[x];
        if (hashed_by_scan(c)) continue;
        const size_t n = (size_t)c->elems * c->width;
        c->next_sum = XXH3_64bits(fake_cuda_dev(c->next, n, "next", x), n);
        if (c->changed && !c->given) c->base_sum = XXH3_64bits(fake_cuda_dev(c->base, n, "base", x), n);
    }
}

/* ---- classes ------------------------------------------------------------------------- */

static void classes_run(const void *a) {
    const ek_batch_t *b = a;
    dev_batch(b);
    static er_groups_t gr; /* (9 KiB each: not on the stack) */
    static er_scratch_t ws;
    static uint64_t cost[ER_GROUPS_MAX * (ER_GROUPS_MAX + 1) / 2];
    for (uint32_t x = 0; x < b->nbusy; x++) {
        ek_chunk_t *c = &b->chunks[b->busy[x]];
        const uint32_t *hist = b->hist + (uint64_t)b->busy[x] * 512;
        const uint32_t stride = c->elems >= (1u << 16) ? 64 : 1;
        er_groups_make(hist, stride, hist + 256, &gr, &ws);
        const uint32_t g = gr.g;
        if (c->max_classes > 1 && g > 1)
            for (uint32_t e = 0; e < er_cost_entries(g); e++) {
                uint32_t j, i;
                er_cost_pair(g, e, &j, &i);
                cost[e] = er_class_cost(&gr, j, i);
            }
        uint32_t lower[EK_CLASSES];
        const uint32_t K = er_classes_dp(&gr, cost, c->max_classes, c->width == 1 ? 0 : c->width == 2 ? 7 : 23,
                                         lower, &ws);
        c->classes = K;
        for (uint32_t k = 0; k < EK_CLASSES; k++) c->lower[k] = k < K ? lower[k] : 0;
    }
}

/* ---- rank, totals, part, choose ---------------------------------------------------------- */

static void rank_run(const void *a) {
    const ek_batch_t *b = a;
    dev_batch(b);
    for (uint32_t x = 0; x < b->nbusy; x++) {
        const ek_chunk_t *c = &b->chunks[b->busy[x]];
        const uint32_t w = c->width, elems = c->elems, S = c->sub_log2;
        const uint8_t *base = fake_cuda_dev(c->base, (uint64_t)elems * w, "base", b->busy[x]);
        const uint8_t *next = fake_cuda_dev(c->next, (uint64_t)elems * w, "next", b->busy[x]);
        FAKE_REQUIRE(S >= 12 && S <= 24 && c->nsub == ((elems + (1u << S) - 1) >> S), "chunk %u: sub_log2 %u, nsub %u",
                     b->busy[x], S, c->nsub);
        uint8_t class_of[256];
        ek_class_table(c, class_of);
        uint64_t *list = b->list + c->list0;
        uint32_t m = 0;
        for (uint32_t sb = 0; sb < c->nsub; sb++) {
            ek_subblk_t *k = &b->blks[(uint64_t)c->sub0 + sb];
            ek_sub_t *subs = &b->subs[((uint64_t)c->sub0 + sb) * EK_CLASSES];
            uint32_t cnt[EK_CLASSES] = {0}, sm[EK_CLASSES] = {0}, snu[EK_CLASSES] = {0};
            const uint32_t first = m, end = (sb + 1) << S < elems ? (sb + 1) << S : elems;
            for (uint32_t i = sb << S; i < end; i++) {
                const uint32_t bv = elem_get(base, w, i), nv = elem_get(next, w, i), cl = class_of[ek_bucket(bv, w)];
                if (bv != nv) {
                    uint32_t val, sign;
                    ek_change(bv, nv, w, &val, &sign);
                    list[m++] = ek_entry(cnt[cl], cl, sign, val);
                    sm[cl]++;
                    snu[cl] += val != 0;
                }
                cnt[cl]++;
            }
            for (uint32_t cl = 0; cl < EK_CLASSES; cl++)
                subs[cl].count = cnt[cl], subs[cl].m = sm[cl], subs[cl].nu = snu[cl];
            k->first = first;
            k->m = m - first;
        }
        FAKE_REQUIRE(m == c->changed, "chunk %u: %u changes ranked, the scan counted %u", b->busy[x], m, c->changed);
    }
}

static void totals_run(const void *a) {
    const ek_batch_t *b = a;
    for (uint32_t x = 0; x < b->nbusy; x++) {
        ek_chunk_t *c = &b->chunks[b->busy[x]];
        ek_totals(c, b->subs + (uint64_t)c->sub0 * EK_CLASSES);
    }
}

/* Per class of sub-block blk, in list order: f's part of a walk (as
   delta_enc.cu's walk gives lane k class k's changes). */
static void part_run(const void *a) {
    const ek_batch_t *b = a;
    dev_batch(b);
    for (uint32_t s = 0; s < b->nblks; s++) {
        const ek_subblk_t blk = b->blks[s];
        const ek_chunk_t *c = &b->chunks[blk.chunk];
        FAKE_REQUIRE(blk.b < c->nsub, "sub-block %u: its chunk's sub-block %u of %u", s, blk.b, c->nsub);
        const uint64_t at = c->list0 + blk.first;
        for (uint32_t k = 0; k < c->classes; k++) {
            ek_part_t p;
            ek_part_init(&p);
            for (uint64_t i = at; i < at + blk.m; i++)
                if (ek_entry_class(b->list[i]) == k) ek_part_change(&p, b->list[i], i, c->g0[k], c->n0[k], b->runs);
            ek_part_end(&p, c->nonunit[k], c->n0[k], b->runs, &b->subs[((uint64_t)c->sub0 + blk.b) * EK_CLASSES + k]);
        }
    }
}

static void choose_run(const void *a) {
    const ek_batch_t *b = a;
    for (uint32_t x = 0; x < b->nbusy; x++) {
        ek_chunk_t *c = &b->chunks[b->busy[x]];
        ek_choose(c, b->subs + (uint64_t)c->sub0 * EK_CLASSES);
    }
}

/* ---- write, head, raw, seal ---------------------------------------------------------------- */

static void write_run(const void *a) {
    const ek_batch_t *b = a;
    dev_batch(b);
    uint32_t *words = (uint32_t *)b->out;
    for (uint32_t x = 0; x < b->nsparse_blks; x++) {
        const ek_subblk_t blk = b->blks[b->sparse_blks[x]];
        const ek_chunk_t *c = &b->chunks[blk.chunk];
        FAKE_REQUIRE(c->mode == EK_SPARSE, "sub-block %u of a chunk of mode %u in the sparse list", x, c->mode);
        fake_cuda_dev(c->rec, c->rec_len + 8, "the record", blk.chunk);
        const uint64_t rec_at = c->rec - (uint64_t)(uintptr_t)b->out, at = c->list0 + blk.first;
        for (uint32_t k = 0; k < c->classes; k++) {
            const ek_sub_t *s = &b->subs[((uint64_t)c->sub0 + blk.b) * EK_CLASSES + k];
            ek_wr_t wr;
            ek_wr_begin(&wr, c, k, s, rec_at, words);
            for (uint64_t i = at; i < at + blk.m; i++)
                if (ek_entry_class(b->list[i]) == k) ek_wr_change(&wr, b->list[i], b->runs[i], words);
            ek_wr_end(&wr, c, k, blk.b, s, rec_at, words);
        }
    }
}

static void head_run(const void *a) {
    const ek_batch_t *b = a;
    for (uint32_t x = 0; x < b->nchunks; x++) {
        const ek_chunk_t *c = &b->chunks[b->chunk0 + x];
        ek_head(c, fake_cuda_dev(c->rec, EK_HEADER, "the record", b->chunk0 + x));
    }
}

static void raw_run(const void *a) {
    const ek_batch_t *b = a;
    for (uint32_t x = 0; x < b->nraw; x++) {
        const ek_chunk_t *c = &b->chunks[b->raw[x]];
        FAKE_REQUIRE(c->mode == EK_RAW, "chunk %u of mode %u in the raw list", b->raw[x], c->mode);
        const size_t n = (size_t)c->elems * c->width;
        memcpy((uint8_t *)fake_cuda_dev(c->rec, EK_HEADER + n, "the record", b->raw[x]) + EK_HEADER,
               fake_cuda_dev(c->next, n, "next", b->raw[x]), n);
    }
}

static void seal_run(const void *a) {
    const ek_batch_t *b = a;
    for (uint32_t x = 0; x < b->nchunks; x++) {
        const ek_chunk_t *c = &b->chunks[b->chunk0 + x];
        uint8_t *rec = fake_cuda_dev(c->rec, c->rec_len, "the record", b->chunk0 + x);
        ek_put64(rec + 32, delta_record_sum(rec, c->rec_len));
    }
}

/* ---- launchers (delta_enc.cu's, line for line) ----------------------------------------------- */

#define LAUNCH(fn) fake_cuda_launch(stream, fn, b, sizeof *b, #fn)
#define LAUNCHED()                                              \
    do {                                                        \
        const cudaError_t e_ = cudaGetLastError();              \
        if (e_ != cudaSuccess) return e_;                       \
    } while (0)

cudaError_t ek_scan_enqueue(const ek_batch_t *b, cudaStream_t stream) {
    if (!b->nchunks) return cudaSuccess;
    LAUNCH(scan_run);
    LAUNCHED();
    LAUNCH(hash_run);
    return cudaGetLastError();
}

cudaError_t ek_classes_enqueue(const ek_batch_t *b, cudaStream_t stream) {
    if (!b->nbusy) return cudaSuccess;
    LAUNCH(classes_run);
    return cudaGetLastError();
}

cudaError_t ek_plan_enqueue(const ek_batch_t *b, cudaStream_t stream) {
    if (!b->nbusy) return cudaSuccess;
    LAUNCH(rank_run);
    LAUNCHED();
    LAUNCH(totals_run);
    LAUNCHED();
    if (b->nblks) {
        LAUNCH(part_run);
        LAUNCHED();
    }
    LAUNCH(choose_run);
    return cudaGetLastError();
}

cudaError_t ek_write_enqueue(const ek_batch_t *b, cudaStream_t stream) {
    if (b->nsparse_blks) {
        LAUNCH(write_run);
        LAUNCHED();
    }
    if (b->nchunks) {
        LAUNCH(head_run);
        LAUNCHED();
    }
    if (b->nraw) {
        LAUNCH(raw_run);
        LAUNCHED();
    }
    if (b->nchunks) LAUNCH(seal_run);
    return cudaGetLastError();
}
