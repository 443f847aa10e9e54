/* An FP8 engine synced from a bf16 trainer (fp8_job.h: 4 trainer ranks, 2
 * data-parallel replicas x 2 tensor-parallel; 4 engine ranks, 2 replicas x
 * 2), every member a thread of this process over shared memory: each
 * trainer rank quantizes its share of the blocks into its pack area once per
 * version (its quant ops), the engine ranks pull the fp8 bytes and scales
 * into their weight and scale buffers, and after every version each engine
 * rank holds exactly the whole tensors' quantization (and the plain tensor
 * as it is), checksums verified. Readers one version behind take deltas of
 * the fp8 bytes and scales.
 *
 * --gpu (label gpu, scripts/gpu-test.sh): every buffer in GPU memory, the
 * writers on GPU 0 (quantizing there: ferry_fp8_cuda_block_quantize_ld),
 * the readers on GPU 1 where there are two; the test fills and checks host
 * mirrors. */
#include <pthread.h>

#include "fp8_job.h"
#include "gpu_arg.h"
#ifdef FERRY_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda.h"
#endif

static bool g_gpu;
static int g_rdev; /* the readers' GPU (writers: 0) */

/* --gpu: n bytes between a buffer and its host mirror. */
static void mirror(void *dev, void *host, uint64_t n, bool to_gpu) {
#ifdef FERRY_CUDA
    if (g_gpu)
        CHECK((to_gpu ? cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice) : cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost)) ==
              cudaSuccess);
#else
    (void)dev, (void)host, (void)n, (void)to_gpu;
#endif
}

#define VERSIONS 3
#define RANKS 4

typedef struct job {
    ferry_model_t *tm, *em;
    ferry_layout_t *src, *dst;
    fp8_whole_t whole;                /* this round's version */
    pthread_barrier_t start, done;    /* around each round: the main thread makes the version between */
    char meta[128];
    ferry_status_t st;
    bool failed;
    uint64_t delta_pairs;             /* readers' updates that applied deltas, versions 2.. */
} job_t;

typedef struct member {
    job_t *j;
    uint32_t rank;
    ferry_writer_t *w;
    ferry_reader_t *r;
} member_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(job_t *j, const char *what, uint32_t rank, const char *detail) {
    pthread_mutex_lock(&g_lock);
    fprintf(stderr, "%s %u: %s\n", what, rank, detail);
    j->failed = true;
    pthread_mutex_unlock(&g_lock);
}

/* The rank's buffers (filled by add_layout), as an array over all of the layout's buffers. */
static void **rank_buffers(const ferry_layout_t *l, uint32_t rank, uint32_t *n) {
    uint32_t nb = ferry_layout_buffer_count(l), k = 0;
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(l, b, &bi);
        k += bi.rank == rank;
    }
    *n = k;
    void **p = calloc(k + 1, sizeof *p);
    CHECK(p);
    return p;
}

/* bufs (the rank's, in layout order) into a global index (others NULL). */
static uint8_t **global_view(const ferry_layout_t *l, uint32_t rank, void **bufs) {
    uint32_t nb = ferry_layout_buffer_count(l), k = 0;
    uint8_t **g = calloc(nb + 1, sizeof *g);
    CHECK(g);
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(l, b, &bi);
        if (bi.rank == rank) g[b] = bufs[k++];
    }
    return g;
}

static ferry_sync_params_t params(const char *meta, uint32_t rank, bool writer) {
    ferry_sync_params_t p = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN | FERRY_SYNC_PARAM_TIMEOUT_MS |
                                           FERRY_SYNC_PARAM_DELTAS,
                             .job = "fp8", .rank = rank, .world = RANKS, .meta = meta, .token = "t",
                             .timeout_ms = 60000, .deltas = FERRY_SYNC_DELTAS_ALWAYS};
    if (g_gpu) {
        p.field_mask |= FERRY_SYNC_PARAM_MEMORY;
        p.memory = FERRY_MEM_CUDA;
        p.device = writer ? 0 : g_rdev;
    }
    return p;
}

/* The host view of a rank's buffers: the buffers themselves, or (--gpu)
 * host mirrors, in a global index (others NULL). */
static uint8_t **host_view(const ferry_layout_t *l, uint32_t rank, void **bufs) {
    uint8_t **g = global_view(l, rank, bufs);
    for (uint32_t b = 0; g_gpu && b < ferry_layout_buffer_count(l); b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(l, b, &bi);
        if (g[b]) CHECK((g[b] = calloc(1, bi.size)));
    }
    return g;
}

/* --gpu: every buffer of the rank to (or from) its mirror. */
static void mirror_all(const ferry_layout_t *l, uint8_t **dev, uint8_t **host, bool to_gpu) {
    for (uint32_t b = 0; g_gpu && b < ferry_layout_buffer_count(l); b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(l, b, &bi);
        if (host[b]) mirror(dev[b], host[b], bi.size, to_gpu);
    }
}

static void free_view(const ferry_layout_t *l, uint8_t **dev, uint8_t **host) {
    for (uint32_t b = 0; g_gpu && b < ferry_layout_buffer_count(l); b++)
        if (host[b] != dev[b]) free(host[b]);
    free(host);
    free(dev);
}

static void *writer_main(void *arg) {
    member_t *me = arg;
    job_t *j = me->j;
    uint32_t n;
    void **bufs = rank_buffers(j->src, me->rank, &n);
    if (ferry_writer_add_layout(me->w, j->src, me->rank, bufs, n) != FERRY_OK ||
        ferry_writer_commit(me->w) != FERRY_OK)
        fail(j, "writer", me->rank, ferry_writer_error(me->w));
    uint8_t **dv = global_view(j->src, me->rank, bufs), **g = host_view(j->src, me->rank, bufs);
    for (uint64_t v = 1; v <= VERSIONS; v++) {
        pthread_barrier_wait(&j->start);
        if (!j->failed) {
            fp8_fill_trainer(j->src, g, me->rank, &j->whole); /* the optimizer step */
            mirror_all(j->src, dv, g, true);
            ferry_publish_info_t info;
            if (ferry_writer_publish(me->w, v, &info) != FERRY_OK)
                fail(j, "writer publish", me->rank, ferry_writer_error(me->w));
        }
        pthread_barrier_wait(&j->done);
    }
    free_view(j->src, dv, g);
    free(bufs);
    return NULL;
}

static void *reader_main(void *arg) {
    member_t *me = arg;
    job_t *j = me->j;
    uint32_t n;
    void **bufs = rank_buffers(j->dst, me->rank, &n);
    if (ferry_reader_add_layout(me->r, j->dst, me->rank, bufs, n) != FERRY_OK || ferry_reader_commit(me->r) != FERRY_OK)
        fail(j, "reader", me->rank, ferry_reader_error(me->r));
    uint8_t **dv = global_view(j->dst, me->rank, bufs), **g = host_view(j->dst, me->rank, bufs);
    for (uint64_t v = 1; v <= VERSIONS; v++) {
        pthread_barrier_wait(&j->start);
        if (!j->failed) {
            ferry_update_info_t info;
            ferry_status_t st = ferry_reader_update(me->r, v, 60000, &info);
            if (st == FERRY_OK) mirror_all(j->dst, dv, g, false);
            if (st != FERRY_OK) {
                fail(j, "reader update", me->rank, ferry_reader_error(me->r));
            } else if (info.version != v || !fp8_engine_ok(j->dst, g, me->rank, &j->whole, NULL)) {
                fail(j, "reader", me->rank, "the engine does not hold the version's quantization");
            } else if (v >= 2) {
                pthread_mutex_lock(&g_lock);
                j->delta_pairs += info.delta_pairs;
                pthread_mutex_unlock(&g_lock);
            }
        }
        pthread_barrier_wait(&j->done);
    }
    free_view(j->dst, dv, g);
    free(bufs);
    return NULL;
}

int main(int argc, char **argv) {
    g_gpu = gpu_arg(argc, argv, &g_rdev); /* (exits 77 without a usable GPU) */
    ferry_ctx_t *ctx;
    CHECK_OK(ferry_ctx_create(NULL, &ctx, NULL, 0), "ctx");
    job_t j;
    memset(&j, 0, sizeof j);
    uint32_t scale[NT] = {0};
    j.tm = make_model(ctx, false, NULL);
    j.em = make_model(ctx, true, scale);
    j.src = trainer(ctx, j.tm, false);
    j.dst = engine(ctx, j.em, scale, 0);
    CHECK(pthread_barrier_init(&j.start, NULL, 2 * RANKS + 1) == 0 && pthread_barrier_init(&j.done, NULL, 2 * RANKS + 1) == 0);
    member_t m[2 * RANKS];
    memset(m, 0, sizeof m);
    /* writer 0 serves the job; everyone else finds it there */
    ferry_sync_params_t p0 = params("127.0.0.1:0", 0, true);
    CHECK_OK(ferry_writer_create(ctx, j.tm, &p0, &m[0].w), ferry_ctx_error(ctx));
    snprintf(j.meta, sizeof j.meta, "%s", ferry_writer_service_address(m[0].w));
    for (uint32_t r = 0; r < 2 * RANKS; r++) {
        m[r].j = &j;
        m[r].rank = r % RANKS;
        ferry_sync_params_t pp = params(j.meta, r % RANKS, r < RANKS);
        if (r > 0 && r < RANKS) CHECK_OK(ferry_writer_create(ctx, j.tm, &pp, &m[r].w), ferry_ctx_error(ctx));
        if (r >= RANKS) CHECK_OK(ferry_reader_create(ctx, j.em, &pp, &m[r].r), ferry_ctx_error(ctx));
    }
    pthread_t th[2 * RANKS];
    for (uint32_t r = 0; r < 2 * RANKS; r++)
        CHECK(pthread_create(&th[r], NULL, r < RANKS ? writer_main : reader_main, &m[r]) == 0);
    for (uint64_t v = 1; v <= VERSIONS; v++) {
        fp8_whole_make(&j.whole, v); /* every member waits at start: nobody reads it now */
        pthread_barrier_wait(&j.start);
        pthread_barrier_wait(&j.done);
        CHECK(!j.failed);
        printf("ok: version %llu: every engine rank holds the whole tensors' quantization\n", (unsigned long long)v);
    }
    for (uint32_t r = 0; r < 2 * RANKS; r++) pthread_join(th[r], NULL);
    CHECK(j.delta_pairs > 0); /* readers one behind took deltas of fp8 bytes and scales */
    for (uint32_t r = 2 * RANKS; r-- > 0;) {
        ferry_reader_destroy(m[r].r);
        ferry_writer_destroy(m[r].w);
    }
    pthread_barrier_destroy(&j.start);
    pthread_barrier_destroy(&j.done);
    fp8_whole_free(&j.whole);
    ferry_layout_destroy(j.src);
    ferry_layout_destroy(j.dst);
    ferry_model_destroy(j.tm);
    ferry_model_destroy(j.em);
    ferry_ctx_destroy(ctx);
    printf("test_sync_fp8%s: %d versions, deltas in %llu reader updates\n", g_gpu ? " --gpu" : "", VERSIONS,
           (unsigned long long)j.delta_pairs);
    return 0;
}
