/* Deltas: a writer thread publishes versions that change ~2%
 * of bf16 elements by an ulp; a reader one version behind applies the
 * writer's deltas in place (delta_pairs 1, delta_steps 1, a small fraction
 * of the bytes), and its buffers equal the writer's byte for byte. A reader whose buffers
 * were changed behind ferry's back falls back to pulling whole and still
 * ends exact; with deltas off it always pulls whole. Again with the
 * trainer holding every matrix in padded rows and no pack area (pack_limit
 * 1): its strided sources are read row by row, and encoded from gathers.
 * Again in async mode (2 slots, each with its delta area; the base the
 * writer encodes from is the previous version's slot): the reader skips
 * version 3 and gets version 4 as a chain of 2 steps, the first of them
 * copied from version 3's slot into version 4's; the weights it changed
 * behind ferry's back are then version 5's case. And with 1 slot, whose
 * base is a copy as in sync mode.
 *
 * --gpu (label gpu, scripts/gpu-test.sh): the same with every buffer in GPU
 * memory (the writer on GPU 0, the reader on GPU 1 where there are two):
 * the writer's base on its GPU, its deltas encoded there
 * (codec/delta_cuda_enc.h), the reader's applied on its GPU
 * (codec/delta_cuda.h). A CUDA writer offers no deltas for gathered reads,
 * so the padded case pulls whole, exact all the same. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpu_arg.h"
#include "layout_check.h"
#include "ferry/ferry.h"
#ifdef FERRY_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda.h"
#endif

static bool g_gpu;          /* --gpu: every buffer in GPU memory */
static int g_wdev, g_rdev;  /* the writer's and the reader's GPUs */

#define VERSIONS 5

typedef struct shared {
    ferry_writer_t *w;
    void **wb;     /* the writer's buffers (on its GPU with --gpu) */
    void **hb;     /* their host mirrors with --gpu (else wb) */
    bool offered;  /* publishes from version 2 on offer deltas */
    bool bad;      /* a publish offered otherwise */
    bool want;     /* and the reader takes them */
    uint64_t *size;
    uint32_t nb;
    ferry_status_t st;
    pthread_barrier_t checked; /* the reader compared version v: the writer may compute v + 1 */
} shared_t;

/* Version v of every writer buffer: version 1 random bf16 near 0.02, then
 * every 50th element (shifted per version) one ulp up. */
static void fill(shared_t *s, uint64_t v) {
    for (uint32_t b = 0; b < s->nb; b++) {
        uint16_t *p = s->hb[b];
        size_t n = s->size[b] / 2;
        if (v == 1) {
            for (size_t i = 0; i < n; i++) p[i] = (uint16_t)(0x3C00 + rng_next() % 0x200);
        } else {
            for (size_t i = v % 50; i < n; i += 50) p[i]++;
        }
#ifdef FERRY_CUDA
        if (g_gpu) CHECK(cudaMemcpy(s->wb[b], p, s->size[b], cudaMemcpyHostToDevice) == cudaSuccess);
#endif
    }
}

/* --gpu: the reader's GPU buffers into their host mirrors (or back, to_gpu). */
static void mirror(void **dev, void **host, const uint64_t *size, uint32_t n, bool to_gpu) {
#ifdef FERRY_CUDA
    for (uint32_t b = 0; b < n && g_gpu; b++)
        CHECK((to_gpu ? cudaMemcpy(dev[b], host[b], size[b], cudaMemcpyHostToDevice)
                      : cudaMemcpy(host[b], dev[b], size[b], cudaMemcpyDeviceToHost)) == cudaSuccess);
#else
    (void)dev, (void)host, (void)size, (void)n, (void)to_gpu;
#endif
}

static void *writer_main(void *arg) {
    shared_t *s = arg;
    for (uint64_t v = 1; v <= VERSIONS; v++) {
        fill(s, v);
        ferry_publish_info_t info;
        s->st = ferry_writer_publish(s->w, v, &info);
        if (s->st != FERRY_OK) {
            fprintf(stderr, "publish %llu: %s\n", (unsigned long long)v, ferry_writer_error(s->w));
            return NULL;
        }
        if (v >= 2 && (info.delta_bytes == 0) == s->offered) {
            fprintf(stderr, "publish %llu offered %llu bytes of deltas\n", (unsigned long long)v,
                    (unsigned long long)info.delta_bytes);
            s->bad = true; /* (s->st is the next publish's) */
        }
        pthread_barrier_wait(&s->checked);
    }
    return NULL;
}

/* One buffer per tensor, each row of a 2-D tensor followed by 32 unused
 * elements (strided, in rows long enough to be read one by one). */
static ferry_layout_t *padded_rows(ferry_ctx_t *ctx, const ferry_model_t *m) {
    ferry_layout_t *l;
    CHECK_OK(ferry_layout_create(ctx, m, 1, &l), ferry_ctx_error(ctx));
    for (uint32_t t = 0; t < ferry_model_tensor_count(m); t++) {
        ferry_tensor_info_t ti;
        ferry_model_tensor(m, t, &ti);
        ferry_piece_t pc;
        memset(&pc, 0, sizeof pc);
        pc.tensor = t;
        pc.box = ferry_box_of_shape(ti.ndim, ti.shape);
        int64_t n = ferry_box_numel(&pc.box), at = 1;
        for (int d = (int)ti.ndim - 1; d >= 0; d--) {
            pc.strides[d] = at;
            at *= ti.shape[d];
        }
        if (ti.ndim == 2) {
            pc.strides[0] = ti.shape[1] + 32;
            n = (ti.shape[0] - 1) * pc.strides[0] + ti.shape[1];
        }
        CHECK_OK(ferry_layout_add_buffer(l, 0, ti.name, ti.dtype, (uint64_t)n * ferry_dtype_size(ti.dtype), &pc.buffer),
                 ferry_layout_error(l));
        CHECK_OK(ferry_layout_add_piece(l, &pc), ferry_layout_error(l));
    }
    return l;
}

static void run(ferry_sync_deltas_t reader_deltas, bool padded, uint64_t pack_limit, uint32_t async_slots) {
    const bool async = async_slots > 0;
    ferry_ctx_t *ctx;
    CHECK_OK(ferry_ctx_create(NULL, &ctx, NULL, 0), "ctx");
    ferry_model_t *model;
    /* small enough for a unit test, large enough that deltas beat whole copies */
    const char *cfg = "{\"model_type\":\"qwen3\",\"hidden_size\":256,\"num_hidden_layers\":1,"
                      "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":64,\"vocab_size\":2048,"
                      "\"intermediate_size\":512,\"tie_word_embeddings\":true}";
    CHECK_OK(ferry_model_from_hf_config(ctx, "small-qwen3", cfg, strlen(cfg), NULL, &model), ferry_ctx_error(ctx));
    ferry_layout_t *src = (padded ? padded_rows(ctx, model) : build_layout(ctx, model, FERRY_SIDE_TRAIN, "tp=1")), *dst = build_layout(ctx, model, FERRY_SIDE_INFER, "tp=1");
    if (pack_limit) { /* the case is what it says: strided sources past the pack limit */
        ferry_plan_params_t pp = {.field_mask = FERRY_PLAN_PARAM_PACK_LIMIT, .pack_limit = pack_limit};
        ferry_plan_t *plan;
        ferry_plan_stats_t st;
        CHECK_OK(ferry_plan_build(ctx, src, dst, &pp, &plan), ferry_ctx_error(ctx));
        ferry_plan_stats(plan, &st);
        CHECK(st.gather_ops > 0 && st.pack_bytes <= pack_limit);
        ferry_plan_destroy(plan);
    }
    ferry_sync_params_t wp = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN |
                                            FERRY_SYNC_PARAM_TIMEOUT_MS | FERRY_SYNC_PARAM_DELTAS,
                              .job = "deltas", .rank = 0, .world = 1, .meta = "127.0.0.1:0", .token = "t",
                              .timeout_ms = 60000, .deltas = FERRY_SYNC_DELTAS_ALWAYS, .pack_limit = pack_limit};
    if (pack_limit) wp.field_mask |= FERRY_SYNC_PARAM_PACK_LIMIT;
    if (async) {
        wp.field_mask |= FERRY_SYNC_PARAM_MODE | FERRY_SYNC_PARAM_SLOTS;
        wp.mode = FERRY_SYNC_MODE_ASYNC;
        wp.slots = async_slots;
    }
    if (g_gpu) {
        wp.field_mask |= FERRY_SYNC_PARAM_MEMORY;
        wp.memory = FERRY_MEM_CUDA;
        wp.device = g_wdev;
    }
    shared_t s = {0};
    CHECK_OK(ferry_writer_create(ctx, model, &wp, &s.w), ferry_ctx_error(ctx));
    ferry_sync_params_t rp = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN |
                                            FERRY_SYNC_PARAM_TIMEOUT_MS | FERRY_SYNC_PARAM_DELTAS,
                              .job = "deltas", .rank = 0, .world = 1, .meta = ferry_writer_service_address(s.w),
                              .token = "t", .timeout_ms = 60000, .deltas = reader_deltas, .pack_limit = pack_limit};
    if (pack_limit) rp.field_mask |= FERRY_SYNC_PARAM_PACK_LIMIT;
    if (g_gpu) {
        rp.field_mask |= FERRY_SYNC_PARAM_MEMORY;
        rp.memory = FERRY_MEM_CUDA;
        rp.device = g_rdev;
    }
    /* a CUDA writer offers no deltas for gathered reads (pack_limit 1) */
    s.offered = !(g_gpu && pack_limit);
    s.want = s.offered && reader_deltas != FERRY_SYNC_DELTAS_OFF;
    ferry_reader_t *r;
    CHECK_OK(ferry_reader_create(ctx, model, &rp, &r), ferry_ctx_error(ctx));
    s.nb = ferry_layout_buffer_count(src);
    s.wb = calloc(s.nb, sizeof *s.wb);
    uint32_t nd = ferry_layout_buffer_count(dst);
    void **rb = calloc(nd, sizeof *rb), **rh = calloc(nd, sizeof *rh);
    uint64_t *rsize = calloc(nd, sizeof *rsize);
    s.size = calloc(s.nb, sizeof *s.size);
    s.hb = calloc(s.nb, sizeof *s.hb);
    CHECK(s.wb && rb && rh && rsize && s.size && s.hb);
    CHECK_OK(ferry_writer_add_layout(s.w, src, 0, s.wb, s.nb), ferry_writer_error(s.w));
    CHECK_OK(ferry_reader_add_layout(r, dst, 0, rb, nd), ferry_reader_error(r));
    uint64_t total = 0;
    for (uint32_t b = 0; b < s.nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(src, b, &bi);
        CHECK(bi.dtype == FERRY_DTYPE_BF16);
        s.size[b] = bi.size;
        total += bi.size;
        s.hb[b] = g_gpu ? calloc(1, bi.size) : s.wb[b];
        CHECK(s.hb[b]);
    }
    for (uint32_t b = 0; b < nd; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(dst, b, &bi);
        rsize[b] = bi.size;
        rh[b] = g_gpu ? calloc(1, bi.size) : rb[b];
        CHECK(rh[b]);
    }
    CHECK_OK(ferry_writer_commit(s.w), ferry_writer_error(s.w));
    CHECK_OK(ferry_reader_commit(r), ferry_reader_error(r));
    pthread_t th;
    CHECK(pthread_barrier_init(&s.checked, NULL, 2) == 0);
    CHECK(pthread_create(&th, NULL, writer_main, &s) == 0);
    uint64_t touched = async ? 5 : 4;
    for (uint64_t v = 1; v <= VERSIONS; v++) {
        if (async && v == 3) { /* behind by two at the next update */
            pthread_barrier_wait(&s.checked);
            continue;
        }
        if (v == touched) { /* the engine touched its weights: not version v - 1 any more */
            mirror(rb, rh, rsize, nd, false);
            ((uint16_t *)rh[0])[3] ^= 0x1;
            mirror(rb, rh, rsize, nd, true);
        }
        ferry_update_info_t info;
        CHECK_OK(ferry_reader_update(r, v, 60000, &info), ferry_reader_error(r));
        CHECK_EQ_INT(info.version, v);
        mirror(rb, rh, rsize, nd, false);
        check_layout_copy(model, src, dst, s.hb, rh);
        bool want = s.want && v >= 2 && v != touched;
        if (want) {
            CHECK_EQ_INT(info.delta_pairs, 1);
            /* one version behind: one step (test_sync_chains: more); async's version 4: 2 */
            CHECK_EQ_INT(info.delta_steps, async && v == 4 ? 2 : 1);
            CHECK(info.delta_bytes > 0 && info.delta_bytes * 8 < total);
            CHECK(info.bytes == info.delta_bytes);
        } else {
            CHECK_EQ_INT(info.delta_pairs, 0);
            CHECK_EQ_INT(info.delta_steps, 0);
            if (!(info.delta_bytes == 0 && info.bytes * 3 >= total)) {
                fprintf(stderr, "v %llu: bytes %llu delta %llu total %llu\n", (unsigned long long)v, (unsigned long long)info.bytes, (unsigned long long)info.delta_bytes, (unsigned long long)total);
                exit(1);
            }
        }
        pthread_barrier_wait(&s.checked);
    }
    pthread_join(th, NULL);
    pthread_barrier_destroy(&s.checked);
    CHECK_OK(s.st, "the writer thread failed");
    CHECK(!s.bad);
    ferry_reader_destroy(r);
    ferry_writer_destroy(s.w);
    for (uint32_t b = 0; g_gpu && b < s.nb; b++) free(s.hb[b]);
    for (uint32_t b = 0; g_gpu && b < nd; b++) free(rh[b]);
    free(s.wb), free(rb), free(s.size), free(s.hb), free(rh), free(rsize);
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(model);
    ferry_ctx_destroy(ctx);
}

int main(int argc, char **argv) {
    g_gpu = gpu_arg(argc, argv, &g_rdev); /* (exits 77 without a usable GPU) */
    run(FERRY_SYNC_DELTAS_ALWAYS, false, 0, 0);
    run(FERRY_SYNC_DELTAS_OFF, false, 0, 0);
    run(FERRY_SYNC_DELTAS_ALWAYS, true, 1, 0);
    run(FERRY_SYNC_DELTAS_OFF, true, 1, 0);
    run(FERRY_SYNC_DELTAS_ALWAYS, false, 0, 2);
    run(FERRY_SYNC_DELTAS_OFF, false, 0, 2);
    run(FERRY_SYNC_DELTAS_ALWAYS, true, 1, 2);
    run(FERRY_SYNC_DELTAS_ALWAYS, false, 0, 1);
    run(FERRY_SYNC_DELTAS_ALWAYS, true, 1, 1);
    if (g_gpu) printf("test_sync_deltas --gpu: deltas encoded and applied on GPUs %d -> %d, every version exact\n",
                      g_wdev, g_rdev);
    return 0;
}
