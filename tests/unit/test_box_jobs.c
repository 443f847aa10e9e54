/* The GPU box copies' decomposition (src/sync/box_jobs.h), walked on the
 * CPU the way the kernel of strided.cu walks it: warps taking pieces in
 * grid-stride order, lanes moving head bytes, aligned vectors and tail
 * bytes of split runs, and flat vectors over groups of 32 short runs. The
 * bytes must be those of the CPU functions of strided.c (gather, scatter,
 * copy_box, strided to strided), every destination byte of a box written
 * exactly once and nothing else written. */
#include <stdlib.h>

#include "box_cases.h"
#include "check.h"
#include "sync/box_jobs.h"

#define ARENA (16u << 20)

/* The CPU walk: every write goes through here, counted per arena byte. */
typedef struct walk {
    uint8_t *arena;
    uint8_t *writes;
    uint64_t size;
} walk_t;

static void put(walk_t *w, uint8_t *dst, const uint8_t *src, uint32_t n) {
    CHECK(dst >= w->arena && dst + n <= w->arena + w->size);
    memcpy(dst, src, n);
    for (uint32_t i = 0; i < n; i++) w->writes[dst - w->arena + i]++;
}

/* A split piece: one segment, as copy_segment's lanes move it. */
static void walk_segment(walk_t *w, uint8_t *dst, const uint8_t *src, uint32_t len) {
    sync_box_seg_t g = sync_box_seg((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, len);
    CHECK(g.width == 1 || g.width == 2 || g.width == 4 || g.width == 8 || g.width == 16);
    CHECK(g.head < 32 && g.tail < 32 && g.head + g.nvec * g.width + g.tail == len);
    CHECK(g.nvec == 0 || g.head < g.width);
    for (uint32_t lane = 0; lane < g.head; lane++) put(w, dst + lane, src + lane, 1);
    dst += g.head;
    src += g.head;
    if (g.nvec) CHECK(((uintptr_t)dst % g.width) == 0 && ((uintptr_t)src % g.width) == 0);
    for (uint32_t lane = 0; lane < 32; lane++)
        for (uint32_t i = lane; i < g.nvec; i += 32) put(w, dst + (size_t)i * g.width, src + (size_t)i * g.width, g.width);
    uint32_t done = g.nvec * g.width;
    for (uint32_t lane = 0; lane < g.tail; lane++) put(w, dst + done + lane, src + done + lane, 1);
}

/* A grouped piece: 32 runs at a time, lane k finding run k's offsets, the
 * vectors of those runs as one flat array. */
static void walk_grouped(walk_t *w, const sync_box_job_t *jb, const sync_box_dim_t *dims, sync_box_piece_t q) {
    CHECK(jb->vec == 1 || jb->vec == 2 || jb->vec == 4 || jb->vec == 8 || jb->vec == 16);
    CHECK(jb->run_bytes % jb->vec == 0 && jb->run_bytes < SYNC_BOX_SPLIT);
    uint32_t vpr = (uint32_t)(jb->run_bytes / jb->vec);
    uint8_t *dst = (uint8_t *)(uintptr_t)jb->dst;
    const uint8_t *src = (const uint8_t *)(uintptr_t)jb->src;
    for (uint64_t b = 0; b < q.nruns; b += 32) {
        uint32_t nb = q.nruns - b < 32 ? (uint32_t)(q.nruns - b) : 32;
        int64_t doff[32], soff[32];
        for (uint32_t lane = 0; lane < nb; lane++) sync_box_run_at(jb, dims, q.run + b + lane, &doff[lane], &soff[lane]);
        uint32_t nv = nb * vpr;
        for (uint32_t i = 0; i < nv; i++) {
            uint32_t k = i / vpr, o = i - k * vpr;
            uint8_t *to = dst + doff[k] + (int64_t)o * jb->vec;
            const uint8_t *from = src + soff[k] + (int64_t)o * jb->vec;
            CHECK((uintptr_t)to % jb->vec == 0 && (uintptr_t)from % jb->vec == 0);
            put(w, to, from, jb->vec);
        }
    }
}

static void walk_table(walk_t *w, const uint8_t *table, const sync_box_batch_t *bt, uint64_t nwarps) {
    const sync_box_job_t *jobs = (const sync_box_job_t *)table;
    const sync_box_dim_t *dims = (const sync_box_dim_t *)(table + bt->dims_at);
    for (uint32_t j = 0; j < bt->njobs; j++) {
        CHECK(jobs[j].piece0 < bt->pieces);
        if (j) CHECK(jobs[j].piece0 > jobs[j - 1].piece0);
    }
    for (uint64_t warp = 0; warp < nwarps; warp++) {
        uint32_t j = 0;
        for (uint64_t p = warp; p < bt->pieces; p += nwarps) {
            j = sync_box_find(jobs, bt->njobs, p, j);
            CHECK(jobs[j].piece0 <= p && (j + 1 == bt->njobs || jobs[j + 1].piece0 > p));
            sync_box_job_t jb = jobs[j];
            sync_box_piece_t q = sync_box_piece(&jb, p - jb.piece0);
            CHECK(q.nruns >= 1 && q.run + q.nruns <= jb.nruns && q.len > 0 && q.at + q.len <= jb.run_bytes);
            CHECK(q.len <= SYNC_BOX_PIECE || !jb.split);
            CHECK(q.nruns * q.len <= SYNC_BOX_PIECE);
            if (jb.split) {
                int64_t doff, soff;
                sync_box_run_at(&jb, dims, q.run, &doff, &soff);
                walk_segment(w, (uint8_t *)(uintptr_t)jb.dst + doff + q.at,
                             (const uint8_t *)(uintptr_t)jb.src + soff + q.at, (uint32_t)q.len);
            } else {
                walk_grouped(w, &jb, dims, q);
            }
        }
    }
}

static uint8_t *table_for(const sync_box_copy_t *jobs, size_t n, sync_box_batch_t *bt) {
    size_t cap = sync_box_table_bound(jobs, n);
    uint8_t *t = malloc(cap ? cap : 8);
    CHECK(t);
    ferry_errbuf_t err = {{0}};
    CHECK_OK(sync_box_table_build(jobs, n, t, cap, bt, &err), err.text);
    CHECK(bt->table_bytes <= cap);
    return t;
}

static void mark_run(void *arg, uint64_t at1, uint64_t at2, size_t n) {
    (void)at2;
    memset((uint8_t *)arg + at1, 1, n);
}

/* One batch of random cases: the walk against the CPU functions. */
static void random_batch(const box_gen_t *g, size_t max_cases, uint64_t nwarps) {
    uint8_t *src = aligned_alloc(4096, ARENA), *dst = aligned_alloc(4096, ARENA), *want = aligned_alloc(4096, ARENA);
    uint8_t *writes = calloc(ARENA, 1), *mask = calloc(ARENA, 1);
    box_case_t *cs = calloc(max_cases, sizeof *cs);
    sync_box_copy_t *jobs = calloc(max_cases, sizeof *jobs);
    CHECK(src && dst && want && writes && mask && cs && jobs);
    for (size_t i = 0; i < ARENA; i++) {
        src[i] = (uint8_t)rng_next();
        dst[i] = want[i] = (uint8_t)(i * 131 + 7);
    }
    uint64_t cursor = 0;
    size_t n = 0;
    uint64_t moved = 0;
    while (n < max_cases && box_case_rand(&cs[n], g, &cursor, ARENA, ARENA)) {
        box_case_t *c = &cs[n];
        box_case_ref(c, want, src);
        jobs[n] = box_case_job(c, dst, src);
        if (jobs[n].dst_strides) sync_box_runs(&c->box, c->dst_strides, NULL, c->esz, mark_run, mask + c->dst_base + c->dst_off);
        else memset(mask + c->dst_base, 1, box_numel(&c->box) * c->esz);
        moved += box_numel(&c->box) * c->esz;
        n++;
    }
    CHECK(n > 0);
    sync_box_batch_t bt;
    uint8_t *table = table_for(jobs, n, &bt);
    CHECK_EQ_INT(bt.njobs, n);
    CHECK_EQ_INT(bt.bytes, moved);
    walk_t w = {dst, writes, ARENA};
    walk_table(&w, table, &bt, nwarps);
    char what[128];
    snprintf(what, sizeof what, "CPU walk of %zu cases (%llu bytes, %llu pieces, %llu warps)", n,
             (unsigned long long)moved, (unsigned long long)bt.pieces, (unsigned long long)nwarps);
    box_compare(what, dst, want, ARENA, cs, n);
    for (size_t i = 0; i < ARENA; i++)
        if (writes[i] != mask[i]) {
            const box_case_t *c = box_case_at(cs, n, i);
            fprintf(stderr, "%s: arena byte %zu written %u times, expected %u (%s)\n", what, i, writes[i], mask[i],
                    c ? c->what : "outside every case");
            exit(1);
        }
    printf("%s: ok\n", what);
    free(table);
    free(src), free(dst), free(want), free(writes), free(mask), free(cs), free(jobs);
}

/* What the table says about a few plain cases, from the definitions. */
static void shapes(void) {
    static uint8_t a[1 << 16] __attribute__((aligned(16))), b[1 << 16] __attribute__((aligned(16)));
    sync_box_batch_t bt;
    const sync_box_job_t *j;

    /* one contiguous 3 MiB + 5 job (as pointers only: never walked) */
    sync_box_copy_t big = {(uint8_t *)0x10000, NULL, (const uint8_t *)0x90000, NULL, {.ndim = 1, .extent = {(3 << 20) + 5}}, 1};
    uint8_t *t = table_for(&big, 1, &bt);
    j = (const sync_box_job_t *)t;
    CHECK_EQ_INT(bt.njobs, 1);
    CHECK_EQ_INT(bt.ndims, 0);
    CHECK(j->split && j->outer == 0 && j->nruns == 1);
    CHECK_EQ_INT(bt.pieces, ((3 << 20) + 5 + SYNC_BOX_PIECE - 1) / SYNC_BOX_PIECE);
    free(t);

    /* a column slice: 100 rows of 512 bf16, columns 0..128: 256-byte runs, grouped */
    int64_t rows[2] = {512, 1};
    sync_box_copy_t col = {a, NULL, b, rows, {.ndim = 2, .extent = {100, 128}}, 2};
    t = table_for(&col, 1, &bt);
    j = (const sync_box_job_t *)t;
    CHECK(!j->split && j->run_bytes == 256 && j->nruns == 100 && j->per == SYNC_BOX_PIECE / 256);
    CHECK_EQ_INT(j->vec, 16);
    CHECK_EQ_INT(bt.pieces, (100 + j->per - 1) / j->per);
    free(t);
    /* the same one column over (odd element offset): 2-byte vectors */
    col.src = b + 2;
    t = table_for(&col, 1, &bt);
    CHECK_EQ_INT(((const sync_box_job_t *)t)->vec, 2);
    free(t);

    /* outer dims: extent 1 left out, neighbours that flatten merged */
    int64_t pad[4] = {6 * 12 * 3, 6 * 12, 12, 1};
    sync_box_copy_t m = {a, NULL, b, pad, {.ndim = 4, .extent = {1, 4, 6, 10}}, 4};
    t = table_for(&m, 1, &bt);
    j = (const sync_box_job_t *)t;
    const sync_box_dim_t *d = (const sync_box_dim_t *)(t + bt.dims_at);
    CHECK_EQ_INT(bt.ndims, 1);
    CHECK(j->outer == 1 && j->run_bytes == 40 && j->nruns == 24);
    CHECK(d[0].extent == 24 && d[0].src_stride == 48 && d[0].dst_stride == 40);
    free(t);

    /* empty boxes move nothing; the rest keep their order */
    sync_box_copy_t two[3] = {m, m, m};
    two[1].box.extent[2] = 0;
    t = table_for(two, 3, &bt);
    CHECK_EQ_INT(bt.njobs, 2);
    CHECK_EQ_INT(bt.bytes, 2 * 4 * 6 * 10 * 4);
    free(t);
}

/* A last piece shorter than the head its alignment asks for: dst and src
 * 1 byte past 16, the run 3 bytes past whole pieces. */
static void short_last_piece(void) {
    enum { N = 2 * SYNC_BOX_PIECE + 3 };
    static uint8_t src[N + 64] __attribute__((aligned(16))), dst[N + 64] __attribute__((aligned(16))),
        want[N + 64], writes[N + 64];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)rng_next();
    memset(dst, 0xa5, sizeof dst);
    memset(want, 0xa5, sizeof want);
    memcpy(want + 17, src + 33, N);
    sync_box_copy_t job = {dst + 17, NULL, src + 33, NULL, {.ndim = 1, .extent = {N}}, 1};
    sync_box_batch_t bt;
    uint8_t *t = table_for(&job, 1, &bt);
    CHECK_EQ_INT(bt.pieces, 3);
    walk_t w = {dst, writes, sizeof dst};
    walk_table(&w, t, &bt, 2);
    box_compare("short last piece", dst, want, sizeof dst, NULL, 0);
    free(t);
}

static void errors(void) {
    uint8_t x[64];
    int64_t s[1] = {1};
    sync_box_copy_t ok = {x, s, x + 32, NULL, {.ndim = 1, .extent = {4}}, 4};
    uint8_t table[1024] __attribute__((aligned(8)));
    sync_box_batch_t bt;
    ferry_errbuf_t err = {{0}};
    sync_box_copy_t bad[2] = {ok, ok};
    bad[1].esz = 3;
    CHECK_FAILS(sync_box_table_build(bad, 2, table, sizeof table, &bt, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "box copy 1: esz 3 is not 1, 2, 4 or 8");
    bad[1] = ok;
    bad[1].box.ndim = 9;
    CHECK_FAILS(sync_box_table_build(bad, 2, table, sizeof table, &bt, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "box copy 1: ndim 9 is over 8");
    bad[1] = ok;
    bad[1].box.extent[0] = -2;
    CHECK_FAILS(sync_box_table_build(bad, 2, table, sizeof table, &bt, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "extent[0] = -2 is negative");
    bad[1] = ok;
    bad[1].src = NULL;
    CHECK_FAILS(sync_box_table_build(bad, 2, table, sizeof table, &bt, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "box copy 1: src is NULL");
    bad[1] = ok;
    int64_t huge[1] = {INT64_MAX / 2};
    bad[1].dst_strides = huge;
    CHECK_FAILS(sync_box_table_build(bad, 2, table, sizeof table, &bt, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "past 2^63");
    CHECK_FAILS(sync_box_table_build(&ok, 1, table, 8, &bt, &err), FERRY_ERR_LIMIT, err.text, "needed");
}

int main(void) {
    shapes();
    short_last_piece();
    errors();
    box_gen_t mixed = {4096, false, false}, cols = {20000, true, false}, longr = {150000, false, true};
    random_batch(&mixed, 3000, 7);
    random_batch(&mixed, 3000, 1000);
    random_batch(&cols, 3000, 13);
    random_batch(&longr, 200, 64);
    box_gen_t small = {64, false, false};
    random_batch(&small, 5000, 3);
    return 0;
}
