/* Delta chains in sync mode (docs/sync.md, "Deltas"). A reader ends up
 * behind the way it does in a sync job: it does not update, and the
 * writer's publish waits for its acknowledgement only until the writer's
 * timeout (LAG_MS: the cases' subject), then returns with the reader
 * missing; the weights move on. A writer thread publishes versions; the
 * readers that take part in a version update in threads of their own while
 * it waits, and each is checked element by element against the writer
 * after every update it makes, and its update info (delta_pairs,
 * delta_steps, bytes, delta_bytes) against what it should have done; each
 * publish's acknowledged and missing readers are checked too.
 *
 * Small changes (~2% of bf16 elements by an ulp), two engine replicas
 * (the same bytes: one encode serves both); reader 1 applies at most 2
 * steps (delta_chain 2):
 *   v1      both pull whole
 *   v2      one behind: one step each (delta_pairs 1, delta_steps 1)
 *   v4      two behind (v3 missed): a chain of 2 steps each
 *   v7      three behind: reader 0 a chain of 3 steps; reader 1's cap is 2,
 *           so it pulls whole
 *   v10     three behind, with reader 0's middle step (8 -> 9) damaged in
 *           the writer's area: reader 0 falls back to the whole pull (the
 *           first step it applied is overwritten) and ends exact; reader 1
 *           pulls whole (its cap)
 *   v11     one behind again: one step each
 * Large changes (every element up to 128 ulps: a step of about 70% of the
 * whole), one reader:
 *   v2      one behind: one step (small)
 *   v4      two behind, a large step then a small one: together fewer bytes
 *           than the whole, so a chain of 2
 *   v6      two behind, two large steps: more bytes than the whole, so no
 *           chain is offered (the writer dropped the older step) and the
 *           reader pulls whole
 *   v7      one behind: one step
 * A writer with delta_chain 1 (deltas only one version behind, as before
 * chains): a reader two behind pulls whole, then one behind gets a step.
 * All of it again with async writers of 1, 2 and 3 slots (each slot its
 * own delta area, the kept steps copied from slot to slot; the writer's
 * publish returns before the readers update, and a reader misses a
 * version by not asking for it).
 * TEST_CHAINS_VERBOSE=1 prints every publish. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "layout_check.h"
#include "ferry/ferry.h"
#include "sync/delta_area.h"

#define LONG_MS 60000u /* a guard against a hang: a correct run never reaches it */
#define LAG_MS 500u    /* how long a publish waits for a reader that does not update */
#define MAX_READERS 2

static uint32_t g_slots; /* async writers' slots; 0: sync mode */

typedef enum { SMALL, LARGE } change_t;

typedef struct job {
    ferry_ctx_t *ctx;
    ferry_model_t *model;
    ferry_layout_t *src, *dst;
    ferry_writer_t *w;
    void **wb;
    uint64_t *wsize;
    uint32_t nwb;
    uint32_t nr;
    ferry_reader_t *r[MAX_READERS];
    void **rb; /* every reader's buffers, by the destination layout's index */
    uint64_t dense; /* a reader's bytes pulled whole */
    /* the writer thread: publishes version v with change c between the barriers */
    pthread_t th;
    pthread_barrier_t go, done;
    uint64_t v;
    change_t c;
    bool quit;
    ferry_status_t pst;
    ferry_publish_info_t pinfo;
} job_t;

/* Version v of every writer buffer: version 1 random bf16 near 0.02; then
 * SMALL: every 50th element (shifted per version) one ulp up; LARGE: every
 * element up to 128 ulps up or down (a step of about 70% of the whole). */
static void fill(job_t *j, uint64_t v, change_t c) {
    for (uint32_t b = 0; b < j->nwb; b++) {
        uint16_t *p = j->wb[b];
        size_t n = j->wsize[b] / 2;
        if (v == 1) {
            for (size_t i = 0; i < n; i++) p[i] = (uint16_t)(0x3C00 + rng_next() % 0x200);
        } else if (c == SMALL) {
            for (size_t i = v % 50; i < n; i += 50) p[i]++;
        } else {
            for (size_t i = 0; i < n; i++) p[i] = (uint16_t)(p[i] + rng_next() % 256 - 128);
        }
    }
}

static void *writer_main(void *arg) {
    job_t *j = arg;
    for (;;) {
        pthread_barrier_wait(&j->go);
        if (j->quit) return NULL;
        fill(j, j->v, j->c);
        memset(&j->pinfo, 0, sizeof j->pinfo);
        j->pst = ferry_writer_publish(j->w, j->v, &j->pinfo);
        if (j->pst != FERRY_OK)
            fprintf(stderr, "publish %llu: %s\n", (unsigned long long)j->v, ferry_writer_error(j->w));
        pthread_barrier_wait(&j->done);
    }
}

/* 140 KB of bf16: small changes' deltas are ~2% of it, and every publish
 * a reader takes part in, large changes included, ends well within LAG_MS
 * under the sanitizers too (a few tens of ms with TSan) */
static const char *CFG = "{\"model_type\":\"qwen3\",\"hidden_size\":64,\"num_hidden_layers\":1,"
                         "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":32,\"vocab_size\":512,"
                         "\"intermediate_size\":128,\"tie_word_embeddings\":true}";

/* A writer (timeout LAG_MS, delta_chain wchain; 0: the default) and nr
 * engine replicas (reader k's delta_chain rchain[k]; 0: the default). */
static void job_start(job_t *j, uint32_t nr, uint32_t wchain, const uint32_t *rchain) {
    memset(j, 0, sizeof *j);
    CHECK_OK(ferry_ctx_create(NULL, &j->ctx, NULL, 0), "ctx");
    CHECK_OK(ferry_model_from_hf_config(j->ctx, "qwen3", CFG, strlen(CFG), NULL, &j->model), ferry_ctx_error(j->ctx));
    char spec[64];
    snprintf(spec, sizeof spec, "tp=1,replicas=%u", nr);
    j->src = build_layout(j->ctx, j->model, FERRY_SIDE_TRAIN, "tp=1");
    j->dst = build_layout(j->ctx, j->model, FERRY_SIDE_INFER, spec);
    j->nr = nr;
    ferry_sync_params_t wp = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN |
                                            FERRY_SYNC_PARAM_TIMEOUT_MS | FERRY_SYNC_PARAM_DELTAS,
                              .job = "chains", .rank = 0, .world = 1, .meta = "127.0.0.1:0", .token = "t",
                              .timeout_ms = LAG_MS, .deltas = FERRY_SYNC_DELTAS_ALWAYS};
    if (wchain) wp.field_mask |= FERRY_SYNC_PARAM_DELTA_CHAIN, wp.delta_chain = wchain;
    if (g_slots) {
        wp.field_mask |= FERRY_SYNC_PARAM_MODE | FERRY_SYNC_PARAM_SLOTS;
        wp.mode = FERRY_SYNC_MODE_ASYNC;
        wp.slots = g_slots;
    }
    CHECK_OK(ferry_writer_create(j->ctx, j->model, &wp, &j->w), ferry_ctx_error(j->ctx));
    j->nwb = ferry_layout_buffer_count(j->src);
    j->wb = calloc(j->nwb, sizeof *j->wb);
    j->wsize = calloc(j->nwb, sizeof *j->wsize);
    CHECK(j->wb && j->wsize);
    CHECK_OK(ferry_writer_add_layout(j->w, j->src, 0, j->wb, j->nwb), ferry_writer_error(j->w));
    for (uint32_t b = 0; b < j->nwb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(j->src, b, &bi);
        CHECK(bi.dtype == FERRY_DTYPE_BF16);
        j->wsize[b] = bi.size;
    }
    uint32_t nd = ferry_layout_buffer_count(j->dst);
    j->rb = calloc(nd, sizeof *j->rb);
    void **mine = calloc(nd, sizeof *mine);
    CHECK(j->rb && mine);
    for (uint32_t k = 0; k < nr; k++) {
        ferry_sync_params_t rp = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN |
                                                FERRY_SYNC_PARAM_TIMEOUT_MS | FERRY_SYNC_PARAM_DELTAS,
                                  .job = "chains", .rank = k, .world = nr, .meta = ferry_writer_service_address(j->w),
                                  .token = "t", .timeout_ms = LONG_MS, .deltas = FERRY_SYNC_DELTAS_ALWAYS};
        if (rchain && rchain[k]) rp.field_mask |= FERRY_SYNC_PARAM_DELTA_CHAIN, rp.delta_chain = rchain[k];
        CHECK_OK(ferry_reader_create(j->ctx, j->model, &rp, &j->r[k]), ferry_ctx_error(j->ctx));
        /* reader k's buffers, in index order; ferry allocates them */
        uint32_t n = 0;
        for (uint32_t b = 0; b < nd; b++) {
            ferry_buffer_info_t bi;
            ferry_layout_buffer(j->dst, b, &bi);
            if (bi.rank == k) mine[n++] = NULL;
        }
        CHECK_OK(ferry_reader_add_layout(j->r[k], j->dst, k, mine, n), ferry_reader_error(j->r[k]));
        n = 0;
        for (uint32_t b = 0; b < nd; b++) {
            ferry_buffer_info_t bi;
            ferry_layout_buffer(j->dst, b, &bi);
            if (bi.rank == k) j->rb[b] = mine[n++];
        }
    }
    free(mine);
    CHECK_OK(ferry_writer_commit(j->w), ferry_writer_error(j->w));
    for (uint32_t k = 0; k < nr; k++) CHECK_OK(ferry_reader_commit(j->r[k]), ferry_reader_error(j->r[k]));
    CHECK(pthread_barrier_init(&j->go, NULL, 2) == 0 && pthread_barrier_init(&j->done, NULL, 2) == 0);
    CHECK(pthread_create(&j->th, NULL, writer_main, j) == 0);
}

static void job_end(job_t *j) {
    j->quit = true;
    pthread_barrier_wait(&j->go);
    pthread_join(j->th, NULL);
    pthread_barrier_destroy(&j->go);
    pthread_barrier_destroy(&j->done);
    for (uint32_t k = 0; k < j->nr; k++) ferry_reader_destroy(j->r[k]);
    ferry_writer_destroy(j->w);
    free(j->wb), free(j->wsize), free(j->rb);
    ferry_layout_destroy(j->src);
    ferry_layout_destroy(j->dst);
    ferry_model_destroy(j->model);
    ferry_ctx_destroy(j->ctx);
}

typedef struct update {
    ferry_reader_t *r;
    uint64_t v;
    ferry_status_t st;
    ferry_update_info_t info;
} update_t;

static void *update_main(void *arg) {
    update_t *u = arg;
    u->st = ferry_reader_update(u->r, u->v, LONG_MS, &u->info);
    if (u->st != FERRY_OK)
        fprintf(stderr, "update to %llu: %s\n", (unsigned long long)u->v, ferry_reader_error(u->r));
    return NULL;
}

/* Version v with change c: the readers in `who` (bit k: reader k) update
 * while the writer publishes, each in a thread of its own; the others miss
 * it. Each reader that updated holds exactly the writer's bytes. */
static void step(job_t *j, uint64_t v, change_t c, unsigned who, ferry_update_info_t *info) {
    j->v = v;
    j->c = c;
    pthread_barrier_wait(&j->go);
    if (g_slots) pthread_barrier_wait(&j->done); /* async: published (the readers then take it) */
    update_t u[MAX_READERS];
    pthread_t th[MAX_READERS];
    uint32_t updated = 0;
    for (uint32_t k = 0; k < j->nr; k++) {
        if (!(who >> k & 1)) continue;
        u[k] = (update_t){.r = j->r[k], .v = v};
        CHECK(pthread_create(&th[k], NULL, update_main, &u[k]) == 0);
        updated++;
    }
    for (uint32_t k = 0; k < j->nr; k++)
        if (who >> k & 1) pthread_join(th[k], NULL);
    if (!g_slots) pthread_barrier_wait(&j->done); /* the publish returned: acknowledged, or LAG_MS waited for the others */
    if (getenv("TEST_CHAINS_VERBOSE"))
        fprintf(stderr, "v%llu: publish %.3f s (deltas %.3f s, %llu bytes), %u acknowledged\n", (unsigned long long)v,
                j->pinfo.seconds, j->pinfo.delta_seconds, (unsigned long long)j->pinfo.delta_bytes,
                j->pinfo.readers_acked);
    CHECK_OK(j->pst, ferry_writer_error(j->w));
    if (!g_slots) { /* (an async publish waits for nobody) */
        CHECK_EQ_INT(j->pinfo.readers_acked, updated);
        CHECK_EQ_INT(j->pinfo.readers_missing, j->nr - updated);
    }
    if (v >= 2) CHECK(j->pinfo.delta_bytes > 0);
    for (uint32_t k = 0; k < j->nr; k++) {
        if (!(who >> k & 1)) continue;
        CHECK_OK(u[k].st, ferry_reader_error(j->r[k]));
        CHECK_EQ_INT(u[k].info.version, v);
        CHECK_EQ_INT(ferry_reader_version(j->r[k]), v);
        CHECK(check_layout_copy_rank(j->model, j->src, j->dst, j->wb, j->rb, k) > 0);
        info[k] = u[k].info;
    }
}

/* Reader k's update arrived as a chain of `steps` steps (1: one step). */
static void expect_chain(job_t *j, const ferry_update_info_t *info, uint32_t steps) {
    CHECK_EQ_INT(info->delta_pairs, 1);
    CHECK_EQ_INT(info->delta_steps, steps);
    CHECK(info->delta_bytes > 0 && info->bytes == info->delta_bytes && info->delta_bytes < j->dense);
}

/* Reader k's update pulled whole. */
static void expect_whole(job_t *j, const ferry_update_info_t *info) {
    CHECK_EQ_INT(info->delta_pairs, 0);
    CHECK_EQ_INT(info->delta_steps, 0);
    CHECK_EQ_INT(info->delta_bytes, 0);
    CHECK_EQ_INT(info->bytes, j->dense);
}

/* The writer's delta area of `version`, through its own mapping of it: the
 * one shared writable mapping of a ferry memfd that starts with the area's
 * magic and names that version (the readers' mappings of it are read-only;
 * an async writer has an area per slot). */
static uint8_t *writer_area(uint64_t *size, uint64_t version) {
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f);
    char line[1024];
    uint8_t *found = NULL;
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || strcmp(perms, "rw-s") != 0 ||
            !strstr(line, "memfd:ferry-shm"))
            continue;
        sync_delta_header_t h;
        ferry_errbuf_t err;
        if (memcmp((const void *)lo, "FDTA", 4) == 0 &&
            sync_delta_header_parse((const uint8_t *)lo, hi - lo, &h, &err) == FERRY_OK && h.version == version) {
            found = (uint8_t *)lo;
            *size = hi - lo;
            n++;
        }
    }
    fclose(f);
    CHECK_EQ_INT(n, 1);
    return found;
}

/* Damages the last byte of reader `rank`'s step from version `base` in the
 * writer's area (the last op's frame). */
static void damage_step(uint32_t rank, uint64_t base, uint64_t version) {
    uint64_t size;
    uint8_t *a = writer_area(&size, version);
    sync_delta_header_t h;
    sync_delta_entry_t es[64];
    ferry_errbuf_t err;
    CHECK_OK(sync_delta_area_parse(a, size, &h, es, 64, &err), err.text);
    CHECK_EQ_INT(h.version, version);
    bool done = false;
    for (uint32_t i = 0; i < h.entries; i++)
        if (es[i].dst_rank == rank && es[i].base_version == base) {
            a[es[i].blob + es[i].blob_len - 1] ^= 0x5A;
            done = true;
        }
    CHECK(done);
}

/* The base versions of reader `rank`'s steps that the writer's area of
 * `version` offers: `n` steps from `first` on, one version apart. */
static void expect_offered(uint32_t rank, uint64_t version, uint64_t first, uint32_t n) {
    uint64_t size;
    const uint8_t *a = writer_area(&size, version);
    sync_delta_header_t h;
    sync_delta_entry_t es[64];
    ferry_errbuf_t err;
    CHECK_OK(sync_delta_area_parse(a, size, &h, es, 64, &err), err.text);
    CHECK_EQ_INT(h.version, version);
    uint32_t k = 0;
    for (uint32_t i = 0; i < h.entries; i++)
        if (es[i].dst_rank == rank) CHECK_EQ_INT(es[i].base_version, first + k++);
    CHECK_EQ_INT(k, n);
}

static void run_chains(void) {
    job_t j;
    const uint32_t rchain[MAX_READERS] = {0, 2};
    job_start(&j, 2, 0, rchain);
    ferry_update_info_t in[MAX_READERS];
    step(&j, 1, SMALL, 3, in);
    j.dense = in[0].bytes;
    CHECK(j.dense > 0 && in[1].bytes == j.dense);
    expect_whole(&j, &in[0]);
    expect_whole(&j, &in[1]);
    step(&j, 2, SMALL, 3, in); /* one behind: as before chains */
    expect_chain(&j, &in[0], 1);
    expect_chain(&j, &in[1], 1);
    CHECK(in[0].delta_bytes * 8 < j.dense);
    uint64_t one = in[0].delta_bytes;
    step(&j, 3, SMALL, 0, in);
    step(&j, 4, SMALL, 3, in); /* two behind */
    expect_chain(&j, &in[0], 2);
    expect_chain(&j, &in[1], 2);
    CHECK(in[0].delta_bytes > one && in[0].delta_bytes * 8 < j.dense);
    step(&j, 5, SMALL, 0, in);
    step(&j, 6, SMALL, 0, in);
    step(&j, 7, SMALL, 3, in); /* three behind: reader 1 applies 2 steps at most */
    expect_chain(&j, &in[0], 3);
    expect_whole(&j, &in[1]);
    step(&j, 8, SMALL, 0, in);
    step(&j, 9, SMALL, 0, in);
    expect_offered(0, 9, 1, 8); /* delta_chain 8: the steps from 1 to 9 */
    damage_step(0, 8, 9); /* reader 0's chain 7 -> 10 will be 7 -> 8, 8 -> 9 (this one), 9 -> 10 */
    step(&j, 10, SMALL, 3, in);
    expect_whole(&j, &in[0]); /* and exact: step() compared every element */
    expect_whole(&j, &in[1]);
    step(&j, 11, SMALL, 3, in);
    expect_chain(&j, &in[0], 1);
    expect_chain(&j, &in[1], 1);
    job_end(&j);
}

/* A chain is offered while it takes fewer bytes than the whole. */
static void run_large(void) {
    job_t j;
    job_start(&j, 1, 0, NULL);
    ferry_update_info_t in[MAX_READERS];
    step(&j, 1, SMALL, 1, in);
    j.dense = in[0].bytes;
    expect_whole(&j, &in[0]);
    step(&j, 2, SMALL, 1, in);
    expect_chain(&j, &in[0], 1);
    step(&j, 3, LARGE, 0, in);
    uint64_t large = j.pinfo.delta_bytes; /* (the step and the index) */
    CHECK(large * 2 > j.dense && large < j.dense); /* two such steps take more than the whole */
    step(&j, 4, SMALL, 1, in); /* 2 -> 3 (large), 3 -> 4 (small) */
    expect_chain(&j, &in[0], 2);
    CHECK(in[0].delta_bytes * 2 > j.dense);
    step(&j, 5, LARGE, 0, in);
    step(&j, 6, LARGE, 1, in); /* 4 -> 5, 5 -> 6: both large */
    expect_whole(&j, &in[0]);
    expect_offered(0, 6, 5, 1); /* only the newest step */
    step(&j, 7, SMALL, 1, in);
    expect_chain(&j, &in[0], 1);
    job_end(&j);
}

/* delta_chain 1 at the writer: only one behind gets deltas. */
static void run_writer_cap(void) {
    job_t j;
    job_start(&j, 1, 1, NULL);
    ferry_update_info_t in[MAX_READERS];
    step(&j, 1, SMALL, 1, in);
    j.dense = in[0].bytes;
    expect_whole(&j, &in[0]);
    step(&j, 2, SMALL, 0, in);
    step(&j, 3, SMALL, 1, in);
    expect_whole(&j, &in[0]);
    step(&j, 4, SMALL, 1, in);
    expect_chain(&j, &in[0], 1);
    job_end(&j);
}

int main(void) {
    for (g_slots = 0; g_slots <= 3; g_slots++) { /* sync, then async with 1, 2, 3 slots */
        run_chains();
        run_large();
        run_writer_cap();
    }
    printf("test_sync_chains: readers 1, 2 and 3 versions behind applied chains and ended exact; a chain longer than "
           "the reader's or the writer's cap, one with a damaged middle step and one larger than the whole were "
           "pulled whole; sync, and async with 1, 2 and 3 slots\n");
    return 0;
}
