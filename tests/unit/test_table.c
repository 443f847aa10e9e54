/* TensorTable: members put boxes of tensors, complete a sequence id, and
 * get arbitrary boxes back, resharded from whichever puts cover them and
 * checked tile by tile. Three members in one process (each with its own
 * service connection and transport endpoint), a service beside them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ferry/ferry.h"

#define MEMBERS 3
/* How long a get that must succeed (or fail other than by timing out) may
 * take: only a guard against a hang, never part of a correct run. */
#define HANG_GUARD_MS 120000

static ferry_ctx_t *ctx;
static ferry_table_t *tab[MEMBERS];

/* The value of element `lin` of tensor `name` (as its dtype's bytes). */
static uint64_t val(const char *name, uint64_t lin, uint64_t salt) {
    uint64_t h = 1469598103934665603ull ^ salt;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    h ^= lin * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    return h * 0xBF58476D1CE4E5B9ull;
}

typedef struct tensor {
    const char *name;
    ferry_dtype_t dtype;
    uint32_t ndim;
    int64_t shape[FERRY_MAX_DIMS];
} tensor_t;

/* Row-major bytes of box b of tensor t (salt changes the values). */
static uint8_t *make_box(const tensor_t *t, const ferry_box_t *b, uint64_t salt) {
    size_t esz = ferry_dtype_size(t->dtype);
    int64_t n = ferry_box_numel(b);
    uint8_t *buf = malloc((size_t)n * esz + 1);
    CHECK(buf);
    int64_t idx[FERRY_MAX_DIMS] = {0};
    for (int64_t k = 0; k < n; k++) {
        uint64_t lin = 0;
        for (uint32_t d = 0; d < t->ndim; d++) lin = lin * (uint64_t)t->shape[d] + (uint64_t)(b->offset[d] + idx[d]);
        uint64_t v = val(t->name, lin, salt);
        memcpy(buf + (size_t)k * esz, &v, esz);
        for (int d = (int)t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < b->extent[d]) break;
            idx[d] = 0;
        }
    }
    return buf;
}

static ferry_box_t box2(int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    return (ferry_box_t){.ndim = 2, .offset = {r0, c0}, .extent = {r1 - r0, c1 - c0}};
}

static void put(int member, uint64_t seq, const tensor_t *t, ferry_box_t b, uint64_t salt) {
    uint8_t *data = make_box(t, &b, salt);
    ferry_table_entry_t e = {.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .shape = t->shape, .box = b, .data = data};
    CHECK_OK(ferry_table_put(tab[member], seq, &e), ferry_table_error(tab[member]));
    free(data);
}

/* Gets box b of t through `member` and compares with the expected values. */
static void get_check(int member, uint64_t seq, const tensor_t *t, ferry_box_t b) {
    size_t bytes = (size_t)ferry_box_numel(&b) * ferry_dtype_size(t->dtype);
    uint8_t *got = calloc(1, bytes + 1), *want = make_box(t, &b, 0);
    ferry_table_entry_t e = {.name = t->name, .dtype = t->dtype, .box = b, .data = got};
    CHECK_OK(ferry_table_get(tab[member], seq, &e, HANG_GUARD_MS), ferry_table_error(tab[member]));
    if (memcmp(got, want, bytes) != 0) {
        char bs[200];
        ferry_box_format(&b, bs, sizeof bs);
        fprintf(stderr, "member %d got wrong bytes for %s%s\n", member, t->name, bs);
        exit(1);
    }
    free(got);
    free(want);
}

typedef struct get_job {
    int member;
    const tensor_t *t;
    ferry_box_t b;
} get_job_t;

static void *get_thread(void *arg) {
    get_job_t *g = arg;
    get_check(g->member, 1, g->t, g->b);
    return NULL;
}

int main(void) {
    CHECK_OK(ferry_ctx_create(NULL, &ctx, NULL, 0), "ctx");
    ferry_meta_params_t mp = {.field_mask = FERRY_META_PARAM_LISTEN | FERRY_META_PARAM_TOKEN,
                              .listen = "127.0.0.1:0",
                              .token = "table-test"};
    ferry_meta_service_t *svc;
    CHECK_OK(ferry_meta_service_create(ctx, &mp, &svc), ferry_ctx_error(ctx));
    for (int i = 0; i < MEMBERS; i++) {
        ferry_sync_params_t p = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN | FERRY_SYNC_PARAM_TIMEOUT_MS,
                                 .job = "table",
                                 .rank = (uint32_t)i,
                                 .world = MEMBERS,
                                 .meta = ferry_meta_service_address(svc),
                                 .token = "table-test",
                                 .timeout_ms = 30000}; /* a guard: replies come when they come */
        CHECK_OK(ferry_table_create(ctx, &p, &tab[i]), ferry_ctx_error(ctx));
    }
    tensor_t w = {"model.w", FERRY_DTYPE_BF16, 2, {300, 1100}};   /* tiles 128 x 512, ragged edges */
    tensor_t v = {"opt.v", FERRY_DTYPE_F32, 1, {100000}};        /* 1-d: tiles of 65536 */
    tensor_t e = {"experts", FERRY_DTYPE_F16, 3, {4, 40, 600}};
    tensor_t s = {"step", FERRY_DTYPE_I64, 0, {0}};

    /* seq 1: w split by rows over members 0 and 1, v by halves over 1 and 2,
     * experts one per member (member 0 holds two), step on member 2 */
    put(0, 1, &w, box2(0, 170, 0, 1100), 0);
    put(1, 1, &w, box2(170, 300, 0, 1100), 0);
    put(1, 1, &v, (ferry_box_t){.ndim = 1, .offset = {0}, .extent = {70000}}, 0);
    put(2, 1, &v, (ferry_box_t){.ndim = 1, .offset = {70000}, .extent = {30000}}, 0);
    for (int x = 0; x < 4; x++)
        put(x == 3 ? 0 : x, 1, &e, (ferry_box_t){.ndim = 3, .offset = {x, 0, 0}, .extent = {1, 40, 600}}, 0);
    put(2, 1, &s, (ferry_box_t){.ndim = 0}, 0);
    for (int i = 0; i < MEMBERS; i++) CHECK_OK(ferry_table_complete(tab[i], 1), ferry_table_error(tab[i]));

    /* any box, by any member: whole, column halves (a TP split), boxes that
     * cut tiles and straddle two puts */
    get_check(2, 1, &w, box2(0, 300, 0, 1100));
    get_check(0, 1, &w, box2(0, 300, 0, 550));
    get_check(1, 1, &w, box2(0, 300, 550, 1100));
    get_check(2, 1, &w, box2(100, 250, 300, 777));
    get_check(0, 1, &w, box2(169, 171, 1099, 1100));
    get_check(0, 1, &v, (ferry_box_t){.ndim = 1, .offset = {0}, .extent = {100000}});
    get_check(2, 1, &v, (ferry_box_t){.ndim = 1, .offset = {65000}, .extent = {10000}});
    get_check(1, 1, &e, (ferry_box_t){.ndim = 3, .offset = {0, 5, 100}, .extent = {4, 30, 300}});
    get_check(0, 1, &s, (ferry_box_t){.ndim = 0});

    /* multi_get: several entries in one plan */
    {
        ferry_box_t b1 = box2(10, 20, 0, 1100), b2 = {.ndim = 1, .offset = {99990}, .extent = {10}};
        uint8_t *g1 = calloc(1, 10 * 1100 * 2), *g2 = calloc(1, 40);
        ferry_table_entry_t es[2] = {{.name = "model.w", .box = b1, .data = g1}, {.name = "opt.v", .box = b2, .data = g2}};
        CHECK_OK(ferry_table_multi_get(tab[1], 1, es, 2, HANG_GUARD_MS), ferry_table_error(tab[1]));
        uint8_t *w1 = make_box(&w, &b1, 0), *w2 = make_box(&v, &b2, 0);
        CHECK(memcmp(g1, w1, 10 * 1100 * 2) == 0 && memcmp(g2, w2, 40) == 0);
        free(g1), free(g2), free(w1), free(w2);
    }

    /* a restarted service knows nothing: each member reconnects on its next
     * request and replays the sequences it completed, so gets by every member
     * at once (each waiting for the others' replays) see seq 1 again */
    {
        char addr[64];
        snprintf(addr, sizeof addr, "%s", ferry_meta_service_address(svc));
        ferry_meta_service_destroy(svc);
        mp.listen = addr;
        CHECK_OK(ferry_meta_service_create(ctx, &mp, &svc), ferry_ctx_error(ctx));
        CHECK(!strcmp(addr, ferry_meta_service_address(svc)));
        get_job_t jobs[MEMBERS] = {{0, &w, box2(0, 300, 0, 1100)},
                                   {1, &v, {.ndim = 1, .offset = {0}, .extent = {100000}}},
                                   {2, &e, {.ndim = 3, .offset = {0, 0, 0}, .extent = {4, 40, 600}}}};
        pthread_t th[MEMBERS];
        for (int i = 0; i < MEMBERS; i++) CHECK(pthread_create(&th[i], NULL, get_thread, &jobs[i]) == 0);
        for (int i = 0; i < MEMBERS; i++) pthread_join(th[i], NULL);
    }

    /* errors name what is wrong */
    {
        uint8_t buf[64];
        ferry_table_entry_t x = {.name = "nope", .box = {.ndim = 1, .offset = {0}, .extent = {1}}, .data = buf};
        CHECK(ferry_table_get(tab[0], 1, &x, HANG_GUARD_MS) == FERRY_ERR_NOT_FOUND);
        CHECK(strstr(ferry_table_error(tab[0]), "nope"));
        x.name = "model.w";
        x.dtype = FERRY_DTYPE_F32;
        x.box = box2(0, 1, 0, 1);
        CHECK(ferry_table_get(tab[0], 1, &x, HANG_GUARD_MS) == FERRY_ERR_MISMATCH);
        x.dtype = 0;
        x.box = box2(299, 301, 0, 1); /* past the end */
        CHECK(ferry_table_get(tab[0], 1, &x, HANG_GUARD_MS) != FERRY_OK);
        ferry_table_entry_t bad = {.name = "w2", .dtype = FERRY_DTYPE_BF16, .ndim = 2, .shape = w.shape,
                                   .box = box2(0, 400, 0, 1), .data = buf};
        CHECK(ferry_table_put(tab[0], 2, &bad) == FERRY_ERR_INVALID_ARGUMENT);
        CHECK(strstr(ferry_table_error(tab[0]), "outside"));
        CHECK(ferry_table_complete(tab[0], 1) == FERRY_ERR_INVALID_ARGUMENT); /* twice */
    }

    /* seq 2: a gap (rows 100..200 of w put by nobody) is a coverage error
     * naming the tensor; replicas that disagree fail the tile checksums */
    put(0, 2, &w, box2(0, 100, 0, 1100), 0);
    put(1, 2, &w, box2(200, 300, 0, 1100), 0);
    put(1, 2, &v, (ferry_box_t){.ndim = 1, .offset = {0}, .extent = {100000}}, 0);
    put(2, 2, &v, (ferry_box_t){.ndim = 1, .offset = {0}, .extent = {100000}}, 7); /* other values */
    for (int i = 0; i < MEMBERS; i++) CHECK_OK(ferry_table_complete(tab[i], 2), ferry_table_error(tab[i]));
    {
        uint8_t *buf = calloc(1, 300 * 1100 * 2);
        ferry_table_entry_t x = {.name = "model.w", .box = box2(0, 300, 0, 1100), .data = buf};
        CHECK(ferry_table_get(tab[2], 2, &x, HANG_GUARD_MS) == FERRY_ERR_COVERAGE);
        CHECK(strstr(ferry_table_error(tab[2]), "model.w"));
        x.box = box2(0, 100, 0, 1100);
        CHECK_OK(ferry_table_get(tab[2], 2, &x, HANG_GUARD_MS), ferry_table_error(tab[2])); /* the covered part is fine */
        ferry_table_entry_t y = {.name = "opt.v", .box = {.ndim = 1, .offset = {0}, .extent = {100000}}, .data = buf};
        CHECK(ferry_table_get(tab[0], 2, &y, HANG_GUARD_MS) == FERRY_ERR_CORRUPT);
        CHECK(strstr(ferry_table_error(tab[0]), "checksum mismatch on opt.v"));
        free(buf);
    }

    /* seq 3: member 2 never completes -> a timeout naming it; after member 0
     * drops seq 1, gets of seq 1 wait for it in vain. (These timeouts are the
     * point and short; nothing else has to happen within them.) */
    put(0, 3, &v, (ferry_box_t){.ndim = 1, .offset = {0}, .extent = {100000}}, 0);
    CHECK_OK(ferry_table_complete(tab[0], 3), ferry_table_error(tab[0]));
    CHECK_OK(ferry_table_complete(tab[1], 3), ferry_table_error(tab[1]));
    {
        uint8_t buf[40];
        ferry_table_entry_t x = {.name = "opt.v", .box = {.ndim = 1, .offset = {0}, .extent = {10}}, .data = buf};
        CHECK(ferry_table_get(tab[1], 3, &x, 300) == FERRY_ERR_TIMEOUT);
        CHECK(strstr(ferry_table_error(tab[1]), "member(s) 2"));
        CHECK_OK(ferry_table_drop(tab[0], 1), ferry_table_error(tab[0]));
        x.name = "model.w";
        x.box = box2(0, 1, 0, 10);
        /* the drop is one-way: member 0's own get, on the same connection, is
         * answered after the service took it (member 1's could overtake it) */
        CHECK(ferry_table_get(tab[0], 1, &x, 0) == FERRY_ERR_TIMEOUT);
        CHECK(strstr(ferry_table_error(tab[0]), "member(s) 0"));
        CHECK(ferry_table_get(tab[1], 1, &x, 300) == FERRY_ERR_TIMEOUT);
        CHECK(strstr(ferry_table_error(tab[1]), "member(s) 0"));
        CHECK(ferry_table_drop(tab[0], 42) == FERRY_ERR_NOT_FOUND);
    }

    for (int i = 0; i < MEMBERS; i++) ferry_table_destroy(tab[i]);
    ferry_meta_service_destroy(svc);
    ferry_ctx_destroy(ctx);
    printf("test_table: puts split by rows, halves, 1-d, 3-d and 0-d tensors; gets of any box verified tile by "
           "tile; coverage, mismatch, corrupt-replica, timeout and drop errors\n");
    return 0;
}
