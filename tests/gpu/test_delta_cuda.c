/* Deltas applied on the GPU (codec/delta_cuda.h) give exactly what
 * ferry_delta_apply gives on the CPU: deltas encoded on the CPU, of every
 * dtype, of RL-like (synthetic Adam) and random changes, with sparse, raw
 * and unchanged chunks, partial chunks, one class or eight, regions at
 * addresses that are not 16-aligned, all in one batch. Then what must be
 * refused, each beside regions that apply in the same batch: a damaged
 * record, a damaged stream resealed with a good checksum, a wrong base
 * (sparse, raw and unchanged chunks), another version, dtype or size, a
 * record header damaged after good ones;
 * every refused region is left byte for byte as it was. A batch that
 * outgrows the object's tables mid-way is applied in parts.
 *
 *   gpu_test_delta_cuda          the test (exit 77 without a usable GPU)
 *   gpu_test_delta_cuda --bench [LR]
 *       apply of synthetic Adam steps at lr 1e-6, 3e-6 and 1e-5 (or LR
 *       alone) (bf16, 16 regions of 256M elements: 8 GiB, about half of
 *       Qwen3-8B) beside a same-GPU copy of the same bytes, medians of 5;
 *       format 2 also in one group (ferry_delta_cuda_set_group_min) beside
 *       its default groups; first the floor (a read of every region,
 *       tests/gpu/floor.h); BENCH_GROUP_MIN=8,16 (MiB, a list): format 2
 *       also in groups of at least that many bytes of frames */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "codec/codec_internal.h"
#include "codec/delta_cuda.h"
#include "common/hash.h"
#include "ferry/ctx.h"
#include "floor.h"
#include "gpu_check.h"
#include "gpu_synth.h"
#include "synth.h"

static ferry_ctx_t *g_ctx;
static ferry_delta_codec_t *g_codec;
static ferry_delta_cuda_t *g_gpu;
static cudaStream_t g_stream;

/* One region of a test batch: its base and next contents (host), its delta,
   its device memory. */
typedef struct tcase {
    const char *what;
    ferry_dtype_t dtype;
    uint32_t w;
    uint64_t n;
    uint8_t *base, *next;
    uint8_t *delta;
    size_t len;
    uint8_t *dev_alloc, *dev; /* dev: the region, dev_alloc + an offset */
    uint64_t version;         /* the base's version */
} tcase_t;

static uint32_t g_format = 1; /* the delta format the cases encode */
static size_t g_group_min = 0; /* ferry_delta_cuda_set_group_min: 0 the default, 1 a group per item (up to 8) */

static uint64_t rng(uint64_t *s) {
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random base bit patterns over many magnitude buckets (and ±0, infinities,
   NaNs); next changes a share `p` of them by ±1 step of elem_ord, a tenth
   of those by up to ±300. */
static void make_random(tcase_t *t, double p, uint64_t seed) {
    uint64_t s = seed;
    for (uint64_t i = 0; i < t->n; i++) {
        uint32_t v = (uint32_t)rng(&s);
        if (t->w == 2) v &= 0xFFFF;
        if (t->w == 1) v &= 0xFF;
        uint32_t r = (uint32_t)(rng(&s) % 1000);
        if (r == 0) v = 0;
        else if (r == 1) v = 1u << (8 * t->w - 1); /* -0 */
        else if (r == 2) v = mag_mask(t->w);       /* NaN with every mantissa bit */
        else if (t->w >= 2 && r < 600) {          /* weight-like: the middle exponents */
            uint32_t sh = t->w == 2 ? 7 : 23, ex = 100 + (uint32_t)(rng(&s) % 30);
            v = (v & ~(0xFFu << sh)) | (ex << sh);
        }
        elem_put(t->base, t->w, i, v);
        uint32_t nv = v;
        if ((double)(rng(&s) % 1000000) < p * 1e6) {
            int64_t d = rng(&s) % 10 ? 1 : 2 + (int64_t)(rng(&s) % 299);
            if (rng(&s) & 1) d = -d;
            if (!elem_unord(elem_ord(v, t->w) + d, t->w, &nv)) elem_unord(elem_ord(v, t->w) - d, t->w, &nv);
        }
        elem_put(t->next, t->w, i, nv);
    }
}

/* bf16 of synthetic Adam masters at steps `step` and step + 1. */
static void make_synth(tcase_t *t, double lr, uint32_t step, uint64_t seed) {
    synth_bf16_pair(t->n, lr, step, seed, t->base, t->next);
}

static tcase_t *tcase_new(const char *what, ferry_dtype_t dtype, uint64_t n) {
    tcase_t *t = calloc(1, sizeof *t);
    CHECK(t);
    t->what = what;
    t->dtype = dtype;
    t->w = delta_width(dtype);
    t->n = n;
    t->base = malloc(n * t->w + 1);
    t->next = malloc(n * t->w + 1);
    CHECK(t->base && t->next);
    t->version = 7;
    return t;
}

/* Encodes base -> next on the CPU (chunk: elements per chunk, 0 default;
   classes: max classes, 0 default), checks the CPU's own apply, and puts
   the base into a device region at byte offset `off` of its allocation. */
static void tcase_encode(tcase_t *t, uint32_t chunk, uint32_t classes, size_t off) {
    size_t cap = ferry_delta_bound(t->dtype, t->n, chunk);
    t->delta = malloc(cap ? cap : 1);
    CHECK(t->delta);
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_VERSIONS, .dtype = t->dtype, .base_version = t->version,
                              .next_version = t->version + 1};
    if (chunk) p.field_mask |= FERRY_DELTA_PARAM_CHUNK_ELEMS, p.chunk_elems = chunk;
    if (classes) p.field_mask |= FERRY_DELTA_PARAM_MAX_CLASSES, p.max_classes = classes;
    p.field_mask |= FERRY_DELTA_PARAM_FORMAT;
    p.format = g_format;
    CHECK_OK(ferry_delta_encode(g_codec, &p, t->base, t->next, t->n, t->delta, cap, &t->len),
             ferry_delta_codec_detail(g_codec));
    uint8_t *cpu = malloc(t->n * t->w + 1);
    CHECK(cpu);
    memcpy(cpu, t->base, t->n * t->w);
    CHECK_OK(ferry_delta_apply(g_codec, t->delta, t->len, cpu, t->n, t->version, NULL),
             ferry_delta_codec_detail(g_codec));
    CHECK(memcmp(cpu, t->next, t->n * t->w) == 0);
    free(cpu);
    CUDA_OK(cudaMalloc((void **)&t->dev_alloc, t->n * t->w + off + 16));
    t->dev = t->dev_alloc + off;
    CUDA_OK(cudaMemcpy(t->dev, t->base, t->n * t->w, cudaMemcpyHostToDevice));
}

static void tcase_free(tcase_t *t) {
    cudaFree(t->dev_alloc);
    free(t->base);
    free(t->next);
    free(t->delta);
    free(t);
}

static ferry_delta_cuda_item_t item_of(const tcase_t *t) {
    return (ferry_delta_cuda_item_t){.delta = t->delta, .len = t->len, .region = t->dev, .dtype = t->dtype,
                                     .elems = t->n, .base_version = t->version};
}

/* Whether the device region holds want (n elements); says where not. */
static bool region_is(const tcase_t *t, const uint8_t *want, const char *which) {
    size_t bytes = t->n * t->w;
    uint8_t *h = malloc(bytes + 1);
    CHECK(h);
    CUDA_OK(cudaMemcpy(h, t->dev, bytes, cudaMemcpyDeviceToHost));
    bool ok = memcmp(h, want, bytes) == 0;
    if (!ok)
        for (size_t i = 0; i < bytes; i++)
            if (h[i] != want[i]) {
                fprintf(stderr, "%s: byte %zu (element %zu) is %02x, the %s has %02x\n", t->what, i, i / t->w, h[i],
                        which, want[i]);
                break;
            }
    free(h);
    return ok;
}

/* Chunk c's record in a delta. */
static uint8_t *record_of(uint8_t *delta, uint32_t c, size_t *len) {
    uint32_t chunks = get_u32(delta + 20);
    size_t off = DELTA_FRAME_HEADER + 4 * (size_t)chunks;
    for (uint32_t i = 0; i < c; i++) off += get_u32(delta + DELTA_FRAME_HEADER + 4 * (size_t)i);
    *len = get_u32(delta + DELTA_FRAME_HEADER + 4 * (size_t)c);
    return delta + off;
}

/* The first chunk of mode `mode` in a delta, or UINT32_MAX. */
static uint32_t chunk_of_mode(uint8_t *delta, uint32_t mode) {
    uint32_t chunks = get_u32(delta + 20);
    for (uint32_t c = 0; c < chunks; c++) {
        size_t len;
        if (record_of(delta, c, &len)[0] == mode) return c;
    }
    return UINT32_MAX;
}

static void test_good_batch(void) {
    tcase_t *t[32];
    size_t n = 0;
    static const double lrs[] = {1e-6, 3e-6, 1e-5};
    static const char *synth_names[] = {"bf16 Adam lr 1e-6", "bf16 Adam lr 3e-6", "bf16 Adam lr 1e-5"};
    for (int i = 0; i < 3; i++) { /* 3 chunks of 2^20, the last partial */
        t[n] = tcase_new(synth_names[i], FERRY_DTYPE_BF16, 3000001);
        make_synth(t[n], lrs[i], 3, 11 + (uint64_t)i);
        tcase_encode(t[n], 0, 0, 0);
        n++;
    }
    t[n] = tcase_new("bf16 Adam, 1 class, region at +2 bytes", FERRY_DTYPE_BF16, 1500000);
    make_synth(t[n], 1e-6, 2, 5);
    tcase_encode(t[n], 0, 1, 2);
    n++;
    struct {
        const char *what;
        ferry_dtype_t dt;
        uint64_t n;
        double p;
        uint32_t chunk;
        size_t off;
    } r[] = {
        {"bf16 random 2%, chunks of 1024", FERRY_DTYPE_BF16, 100003, 0.02, 1024, 0},
        {"bf16 random 30%, region at +6 bytes", FERRY_DTYPE_BF16, 200000, 0.30, 4096, 6},
        {"f16 random 5%", FERRY_DTYPE_F16, 300007, 0.05, 65536, 0},
        {"f32 random 3%, region at +4 bytes", FERRY_DTYPE_F32, 250001, 0.03, 32768, 4},
        {"f32 random 60%", FERRY_DTYPE_F32, 70000, 0.60, 8192, 0},
        {"f8_e4m3 random 4%", FERRY_DTYPE_F8_E4M3, 400009, 0.04, 65536, 1},
        {"f8_e5m2 random 10%", FERRY_DTYPE_F8_E5M2, 123457, 0.10, 16384, 3},
        {"bf16 1 element", FERRY_DTYPE_BF16, 1, 1.0, 0, 0},
        {"bf16 17 elements", FERRY_DTYPE_BF16, 17, 0.5, 0, 2},
        {"f32 300 elements", FERRY_DTYPE_F32, 300, 0.1, 0, 0},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        t[n] = tcase_new(r[i].what, r[i].dt, r[i].n);
        make_random(t[n], r[i].p, 1000 + i);
        tcase_encode(t[n], r[i].chunk, 0, r[i].off);
        n++;
    }
    /* raw chunks (next unrelated to base) beside sparse and unchanged ones */
    t[n] = tcase_new("bf16 raw, sparse and unchanged chunks", FERRY_DTYPE_BF16, 5 * 4096 + 100);
    make_random(t[n], 0.01, 77);
    uint64_t s = 99;
    for (uint64_t i = 4096; i < 2 * 4096; i++) elem_put(t[n]->next, 2, i, (uint32_t)rng(&s) & 0xFFFF);
    memcpy(t[n]->next + 3 * 4096 * 2, t[n]->base + 3 * 4096 * 2, 4096 * 2);
    tcase_encode(t[n], 4096, 0, 0);
    CHECK(chunk_of_mode(t[n]->delta, CHUNK_RAW) != UINT32_MAX);
    CHECK(chunk_of_mode(t[n]->delta, CHUNK_UNCHANGED) != UINT32_MAX);
    CHECK(chunk_of_mode(t[n]->delta, CHUNK_SPARSE) != UINT32_MAX);
    n++;
    t[n] = tcase_new("bf16 unchanged", FERRY_DTYPE_BF16, 70000);
    make_random(t[n], 0, 5);
    tcase_encode(t[n], 0, 0, 0);
    n++;

    ferry_delta_cuda_item_t items[32];
    for (size_t i = 0; i < n; i++) items[i] = item_of(t[i]);
    ferry_errbuf_t err = {{0}};
    double t0 = now_s();
    CHECK_OK(ferry_delta_cuda_apply(g_gpu, items, n, g_stream, &err), err.text);
    ferry_delta_cuda_times_t tm;
    ferry_delta_cuda_last_times(g_gpu, &tm);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(items[i].status == FERRY_OK);
        bad += !region_is(t[i], t[i]->next, "next version");
    }
    CHECK(bad == 0);
    /* format 2 batches go in groups (format 1: one), here up to 8 of about equal frame bytes */
    CHECK(g_format == 2 && g_group_min == 1 ? tm.groups >= 2 && tm.groups <= 8 : tm.groups == 1);
    printf("format %u, good batch: %zu regions applied on the GPU in %u group(s), each equal to the CPU's result "
           "(%.3f s; copies %.4f s, passes %.4f s; %zu bytes of device memory)\n",
           g_format, n, tm.groups, now_s() - t0, tm.copy_s, tm.check_s + tm.decode_s + tm.write_s,
           ferry_delta_cuda_device_bytes(g_gpu));
    /* applied again, the next version is not its base: refused, untouched */
    CHECK(ferry_delta_cuda_apply(g_gpu, items, 3, g_stream, &err) == FERRY_ERR_MISMATCH);
    for (size_t i = 0; i < 3; i++) {
        CHECK(items[i].status == FERRY_ERR_MISMATCH);
        CHECK(region_is(t[i], t[i]->next, "next version"));
    }
    printf("format %u, applied twice: refused as another base (%s), regions untouched\n", g_format, err.text);
    for (size_t i = 0; i < n; i++) tcase_free(t[i]);
}

/* A batch where region `bad` is spoiled by spoil(); the others must apply,
   it must fail with `want` and stay as it was. */
typedef void (*spoil_fn)(tcase_t *t, ferry_delta_cuda_item_t *it);

static void spoil_record(tcase_t *t, ferry_delta_cuda_item_t *it) { /* a payload byte, checksum left */
    (void)it;
    size_t len;
    uint8_t *rec = record_of(t->delta, chunk_of_mode(t->delta, CHUNK_SPARSE), &len);
    rec[len - 3] ^= 0x10;
}
static void spoil_stream(tcase_t *t, ferry_delta_cuda_item_t *it) { /* a stream byte, record resealed */
    (void)it;
    size_t len;
    uint8_t *rec = record_of(t->delta, chunk_of_mode(t->delta, CHUNK_SPARSE), &len);
    uint32_t classes = rec[2];
    rec[CHUNK_HEADER + classes * CLASS_ENTRY + (len - CHUNK_HEADER - classes * CLASS_ENTRY) / 2] ^= 0x24;
    put_u64(rec + 32, delta_record_sum(rec, len));
}
static void spoil_table(tcase_t *t, ferry_delta_cuda_item_t *it) { /* format 2: a length, record resealed */
    (void)it;
    size_t len;
    uint8_t *rec = record_of(t->delta, chunk_of_mode(t->delta, CHUNK_SPARSE), &len);
    uint32_t classes = rec[2];
    size_t at = CHUNK_HEADER + classes * CLASS_ENTRY;
    for (uint32_t k = 0; k < classes; k++) { /* the first class with a table: its last byte */
        const uint8_t *e = rec + CHUNK_HEADER + k * CLASS_ENTRY;
        at += get_u32(e + 16);
        if (e[23]) break;
    }
    rec[at - 1] ^= 0x01;
    put_u64(rec + 32, delta_record_sum(rec, len));
}
static void spoil_base_sparse(tcase_t *t, ferry_delta_cuda_item_t *it) { /* an unchanged element of the base */
    (void)it;
    for (uint64_t i = 0; i < t->n; i++)
        if (elem_get(t->base, t->w, i) == elem_get(t->next, t->w, i)) {
            elem_put(t->base, t->w, i, elem_get(t->base, t->w, i) ^ 1);
            break;
        }
    CUDA_OK(cudaMemcpy(t->dev, t->base, t->n * t->w, cudaMemcpyHostToDevice));
}
static void spoil_base_raw(tcase_t *t, ferry_delta_cuda_item_t *it) {
    (void)it;
    t->base[4096 * 2 + 10] ^= 1; /* chunk 1, raw */
    CUDA_OK(cudaMemcpy(t->dev, t->base, t->n * t->w, cudaMemcpyHostToDevice));
}
static void spoil_base_unchanged(tcase_t *t, ferry_delta_cuda_item_t *it) {
    (void)it;
    t->base[3 * 4096 * 2 + 10] ^= 1; /* chunk 3, unchanged */
    CUDA_OK(cudaMemcpy(t->dev, t->base, t->n * t->w, cudaMemcpyHostToDevice));
}
static void spoil_version(tcase_t *t, ferry_delta_cuda_item_t *it) {
    (void)t;
    it->base_version = 6;
}
static void spoil_dtype(tcase_t *t, ferry_delta_cuda_item_t *it) {
    (void)t;
    it->dtype = FERRY_DTYPE_F16;
}
static void spoil_size(tcase_t *t, ferry_delta_cuda_item_t *it) {
    (void)t;
    it->elems--;
}
static void spoil_later_header(tcase_t *t, ferry_delta_cuda_item_t *it) { /* chunk 4's mode: refused mid-walk */
    (void)it;
    size_t len;
    record_of(t->delta, 4, &len)[0] ^= 0xFF;
}
static void spoil_header(tcase_t *t, ferry_delta_cuda_item_t *it) {
    (void)it;
    t->delta[30] ^= 1; /* the base version, under the header checksum */
}

static void test_refusal(const char *what, spoil_fn spoil, ferry_status_t want, const char *needle) {
    tcase_t *t[3];
    for (int i = 0; i < 3; i++) {
        t[i] = tcase_new(i == 1 ? "spoiled" : "good", FERRY_DTYPE_BF16, 5 * 4096 + 100);
        make_random(t[i], 0.02, 500 + (uint64_t)i);
        if (i == 1) { /* a raw chunk 1 and an unchanged chunk 3 */
            uint64_t s = 3;
            for (uint64_t x = 4096; x < 2 * 4096; x++) elem_put(t[i]->next, 2, x, (uint32_t)rng(&s) & 0xFFFF);
            memcpy(t[i]->next + 3 * 4096 * 2, t[i]->base + 3 * 4096 * 2, 4096 * 2);
        }
        tcase_encode(t[i], 4096, 0, 0);
    }
    ferry_delta_cuda_item_t items[3];
    for (int i = 0; i < 3; i++) items[i] = item_of(t[i]);
    spoil(t[1], &items[1]);
    ferry_errbuf_t err = {{0}};
    ferry_status_t st = ferry_delta_cuda_apply(g_gpu, items, 3, g_stream, &err);
    if (st != want || items[1].status != want || !strstr(err.text, needle) || !strstr(err.text, "delta 1 of 3")) {
        fprintf(stderr, "%s: got %s (%s), item 1 %s; want %s with \"%s\"\n", what, ferry_status_name(st), err.text,
                ferry_status_name(items[1].status), ferry_status_name(want), needle);
        exit(1);
    }
    CHECK(items[0].status == FERRY_OK && items[2].status == FERRY_OK);
    ferry_delta_cuda_times_t tm;
    ferry_delta_cuda_last_times(g_gpu, &tm);
    /* format 2, g_group_min 1: up to a group per item that passed its own checks, and two items make two */
    CHECK(g_format == 2 && g_group_min == 1 ? tm.groups >= 2 && tm.groups <= 3 : tm.groups == 1);
    CHECK(region_is(t[0], t[0]->next, "next version"));
    CHECK(region_is(t[2], t[2]->next, "next version"));
    CHECK(region_is(t[1], t[1]->base, "region before the call"));
    printf("format %u, %s, %u group(s): refused (%s: %s), the region as it was, the other two applied\n", g_format,
           what, tm.groups, ferry_status_name(st), err.text);
    for (int i = 0; i < 3; i++) tcase_free(t[i]);
}

/* A large region whose last chunk is not its delta's base: its first chunks
   are written, then taken back, after a batch that left other slots of the
   object's scratch behind (format 2: many sub-blocks per chunk). */
static void test_big_undo(void) {
    tcase_t *t[2];
    t[0] = tcase_new("good, lr 1e-6", FERRY_DTYPE_BF16, 3000000);
    make_synth(t[0], 1e-6, 3, 21);
    tcase_encode(t[0], 0, 0, 0);
    t[1] = tcase_new("wrong base in chunk 2, lr 1e-5", FERRY_DTYPE_BF16, 3000000);
    make_synth(t[1], 1e-5, 3, 22);
    tcase_encode(t[1], 0, 0, 0);
    for (uint64_t i = 2500000; i < t[1]->n; i++) /* an element of chunk 2 that does not change */
        if (elem_get(t[1]->base, 2, i) == elem_get(t[1]->next, 2, i)) {
            elem_put(t[1]->base, 2, i, elem_get(t[1]->base, 2, i) ^ 1);
            break;
        }
    CUDA_OK(cudaMemcpy(t[1]->dev, t[1]->base, t[1]->n * 2, cudaMemcpyHostToDevice));
    ferry_delta_cuda_item_t items[2] = {item_of(t[0]), item_of(t[1])};
    ferry_errbuf_t err = {{0}};
    CHECK(ferry_delta_cuda_apply(g_gpu, items, 2, g_stream, &err) == FERRY_ERR_MISMATCH);
    CHECK(items[0].status == FERRY_OK && items[1].status == FERRY_ERR_MISMATCH);
    CHECK_STR_HAS(err.text, "chunk 2");
    CHECK(region_is(t[0], t[0]->next, "next version"));
    CHECK(region_is(t[1], t[1]->base, "region before the call"));
    printf("format %u, a 3 M-element region refused in its last chunk: its first two chunks taken back (%s)\n",
           g_format, err.text);
    tcase_free(t[0]);
    tcase_free(t[1]);
}

/* A batch that outgrows a fresh object's tables after its first group
   (format 2, a group per item): a region of raw chunks first (no changes
   to decode, so the tables are sized for none), then sparse regions. The
   batch is applied in parts, each part's failures restored before the
   next part grows the tables: the raw region is not its delta's base (the
   first part, restored from its saved contents), the third is refused by
   its checks in the group where the first part was cut (checked again in
   the second part), the fourth is not its delta's base (the second part). */
static void test_parts(void) {
    ferry_errbuf_t err = {{0}};
    ferry_delta_cuda_t *fresh = NULL;
    CHECK_OK(ferry_delta_cuda_create(0, &fresh, &err), err.text);
    ferry_delta_cuda_set_group_min(fresh, 1);
    const uint32_t saved = g_format;
    g_format = 2;
    enum { N = 5 };
    tcase_t *t[N];
    for (int i = 0; i < N; i++) {
        t[i] = tcase_new(i == 0 ? "raw chunks, wrong base" : i == 2 ? "another version" : i == 3 ? "wrong base" : "sparse",
                         FERRY_DTYPE_BF16, i == 0 ? 2 * 4096 : 5 * 4096 + 100);
        make_random(t[i], 0.02, 900 + (uint64_t)i);
        if (i == 0) {
            uint64_t s = 9;
            for (uint64_t x = 0; x < t[i]->n; x++) elem_put(t[i]->next, 2, x, (uint32_t)rng(&s) & 0xFFFF);
        }
        tcase_encode(t[i], 4096, 0, 0);
    }
    CHECK(chunk_of_mode(t[0]->delta, CHUNK_SPARSE) == UINT32_MAX &&
          chunk_of_mode(t[0]->delta, CHUNK_UNCHANGED) == UINT32_MAX);
    ferry_delta_cuda_item_t items[N];
    for (int i = 0; i < N; i++) items[i] = item_of(t[i]);
    spoil_base_raw(t[0], &items[0]);
    spoil_version(t[2], &items[2]);
    spoil_base_sparse(t[3], &items[3]);
    CHECK(ferry_delta_cuda_apply(fresh, items, N, g_stream, &err) == FERRY_ERR_MISMATCH);
    CHECK_STR_HAS(err.text, "delta 0 of 5");
    CHECK_STR_HAS(err.text, "not this delta's base");
    CHECK(items[0].status == FERRY_ERR_MISMATCH && items[1].status == FERRY_OK &&
          items[2].status == FERRY_ERR_MISMATCH && items[3].status == FERRY_ERR_MISMATCH && items[4].status == FERRY_OK);
    ferry_delta_cuda_times_t tm;
    ferry_delta_cuda_last_times(fresh, &tm);
    CHECK(tm.groups >= 1 && tm.groups < N); /* the last part's: the first item was a part of its own */
    for (int i = 0; i < N; i++)
        CHECK(i == 1 || i == 4 ? region_is(t[i], t[i]->next, "next version")
                               : region_is(t[i], t[i]->base, "region before the call"));
    printf("format 2, a batch that outgrew a fresh object's tables after its first group: applied in parts (the last "
           "of %u group(s)), three regions refused and as they were (%s), the other two applied\n",
           tm.groups, err.text);
    for (int i = 0; i < N; i++) tcase_free(t[i]);
    g_format = saved;
    ferry_delta_cuda_destroy(fresh);
}

static void test_edges(void) {
    ferry_errbuf_t err = {{0}};
    CHECK_OK(ferry_delta_cuda_apply(g_gpu, NULL, 0, g_stream, &err), err.text);
    CHECK(ferry_delta_cuda_apply(g_gpu, NULL, 1, g_stream, &err) == FERRY_ERR_INVALID_ARGUMENT);
    ferry_delta_cuda_t *x = NULL;
    CHECK(ferry_delta_cuda_create(1000, &x, &err) == FERRY_ERR_INVALID_ARGUMENT && !x);
    /* a misaligned region is refused before anything is copied */
    tcase_t *t = tcase_new("odd", FERRY_DTYPE_BF16, 1000);
    make_random(t, 0.1, 1);
    tcase_encode(t, 0, 0, 0);
    ferry_delta_cuda_item_t it = item_of(t);
    it.region = t->dev + 1;
    CHECK(ferry_delta_cuda_apply(g_gpu, &it, 1, g_stream, &err) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK_STR_HAS(err.text, "aligned");
    CHECK(region_is(t, t->base, "region before the call"));
    tcase_free(t);
    printf("edges: empty batches, a device that does not exist, a misaligned region\n");
}

/* ---- the benchmark ----------------------------------------------------------- */

/* Seconds of a same-GPU copy of pristine into each of the R regions, timed by events. */
static double copy_regions_s(uint8_t **reg, const uint8_t *pristine, size_t bytes, int R, cudaEvent_t e0,
                             cudaEvent_t e1) {
    CUDA_OK(cudaEventRecord(e0, g_stream));
    for (int r = 0; r < R; r++) CUDA_OK(cudaMemcpyAsync(reg[r], pristine, bytes, cudaMemcpyDeviceToDevice, g_stream));
    CUDA_OK(cudaEventRecord(e1, g_stream));
    CUDA_OK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    return ms / 1e3;
}

/* One learning rate's delta, in one format, applied to R regions in one
   batch, beside a same-GPU copy of the same bytes. */
static void bench_one(uint32_t fmt, double lr, uint64_t n, int R, int REPS, const uint16_t *b0, const uint16_t *b1,
                      uint8_t *pristine, uint8_t **reg, cudaEvent_t e0, cudaEvent_t e1) {
    const size_t bytes = n * 2;
    size_t cap = ferry_delta_bound(FERRY_DTYPE_BF16, n, 0), len = 0;
    uint8_t *delta = NULL;
    CUDA_OK(cudaMallocHost((void **)&delta, cap)); /* pinned, as a transport's receive buffer */
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_VERSIONS | FERRY_DELTA_PARAM_FORMAT,
                              .dtype = FERRY_DTYPE_BF16, .base_version = 4, .next_version = 5, .format = fmt};
    CHECK_OK(ferry_delta_encode(g_codec, &p, b0, b1, n, delta, cap, &len), ferry_delta_codec_detail(g_codec));
    ferry_delta_info_t info;
    CHECK_OK(ferry_delta_peek(g_codec, delta, len, &info), ferry_delta_codec_detail(g_codec));
    CUDA_OK(cudaMemcpy(pristine, b0, bytes, cudaMemcpyHostToDevice));
    ferry_delta_cuda_item_t items[16];
    for (int r = 0; r < R; r++)
        items[r] = (ferry_delta_cuda_item_t){.delta = delta, .len = len, .region = reg[r],
                                             .dtype = FERRY_DTYPE_BF16, .elems = n, .base_version = 4};
    double tc[8], ta[8], tp[8], tx[4][8], th[8];
    ferry_errbuf_t err = {{0}};
    for (int rep = -1; rep < REPS; rep++) { /* one warm-up */
        const double copy_s = copy_regions_s(reg, pristine, bytes, R, e0, e1);
        double t0 = now_s();
        CHECK_OK(ferry_delta_cuda_apply(g_gpu, items, (size_t)R, g_stream, &err), err.text);
        double t1 = now_s();
        if (rep < 0) {
            uint16_t *h = malloc(bytes);
            CHECK(h);
            CUDA_OK(cudaMemcpy(h, reg[R - 1], bytes, cudaMemcpyDeviceToHost));
            CHECK(memcmp(h, b1, bytes) == 0);
            free(h);
            continue;
        }
        ferry_delta_cuda_times_t tm;
        ferry_delta_cuda_last_times(g_gpu, &tm);
        tc[rep] = copy_s;
        ta[rep] = t1 - t0;
        tp[rep] = tm.total_s;
        th[rep] = tm.host_s;
        tx[0][rep] = tm.copy_s, tx[1][rep] = tm.check_s, tx[2][rep] = tm.decode_s, tx[3][rep] = tm.write_s;
    }
    double mc = median(tc, REPS), ma = median(ta, REPS), mp = median(tp, REPS);
    double total = (double)R * bytes;
    printf("lr %.0e, format %u: %.2f%% changed, %.3f B per changed element, delta %.1f MiB per region\n", lr, fmt,
           100.0 * (double)info.changed / (double)n, (double)len / (double)info.changed, (double)len / (1 << 20));
    printf("  same-GPU copy of the regions: %.4f s (%.0f GB/s copied; range %.4f-%.4f)\n", mc, total / mc / 1e9,
           tc[0], tc[REPS - 1]);
    printf("  apply on the GPU, whole call: %.4f s (%.0f GB/s of region; %.2fx the copy; range %.4f-%.4f)\n", ma,
           total / ma / 1e9, mc / ma, ta[0], ta[REPS - 1]);
    ferry_delta_cuda_times_t last;
    ferry_delta_cuda_last_times(g_gpu, &last);
    printf("    on the GPU %.4f s (%.0f GB/s of region; %.2fx the copy), in %u group(s), after %.4f s of checks on the "
           "CPU; medians of the passes (added up over the groups): copy-in %.4f, check %.4f, decode %.4f, write and "
           "verify %.4f\n",
           mp, total / mp / 1e9, mc / mp, last.groups, median(th, REPS), median(tx[0], REPS), median(tx[1], REPS),
           median(tx[2], REPS), median(tx[3], REPS));
    printf("  device memory held: %.1f MiB\n", (double)ferry_delta_cuda_device_bytes(g_gpu) / (1 << 20));
    cudaFreeHost(delta);
}

static int bench(double only_lr) {
    const uint64_t n = (uint64_t)256 << 20; /* elements per region */
    const int R = 16, REPS = 5;
    const size_t bytes = n * 2;
    float *a = malloc(4 * n * sizeof(float));
    uint16_t *b0 = malloc(bytes), *b1 = malloc(bytes);
    uint8_t *pristine = NULL, *reg[16];
    CHECK(a && b0 && b1);
    CUDA_OK(cudaMalloc((void **)&pristine, bytes));
    for (int r = 0; r < R; r++) CUDA_OK(cudaMalloc((void **)&reg[r], bytes));
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    static const double lrs[] = {1e-6, 3e-6, 1e-5};
    printf("bench: %d bf16 regions of %llu M elements (%.1f GiB), synthetic Adam steps 4 -> 5\n", R,
           (unsigned long long)(n >> 20), (double)R * bytes / (1u << 30));
    { /* the floor: a verified apply reads every region once (its hash), beside the copy, in the same run */
        double tc[8];
        for (int rep = -1; rep < REPS; rep++) {
            const double copy_s = copy_regions_s(reg, pristine, bytes, R, e0, e1);
            if (rep >= 0) tc[rep] = copy_s;
        }
        const void *rr[16];
        for (int r = 0; r < R; r++) rr[r] = reg[r];
        uint64_t none = 0;
        double mc = median(tc, REPS), t1 = gpu_floor_read(rr, NULL, R, bytes, REPS, g_stream, &none);
        CHECK(t1 > 0);
        printf("floor: reading the regions once (16-byte loads at full occupancy) %.4f s, %.0f GB/s; the copy "
               "%.4f s: a verified apply (it hashes every region) is at best %.2fx the copy\n",
               t1, (double)R * bytes / t1 / 1e9, mc, mc / t1);
    }
    for (int l = 0; l < 3; l++) {
        if (only_lr > 0 && only_lr != lrs[l]) continue;
        delta_synth_t s;
        delta_synth_init(&s, n, false, lrs[l], 42, a, a + n, a + 2 * n, a + 3 * n);
        for (int st = 0; st < 4; st++) synth_par(&s, NULL);
        synth_par(&s, b0);
        synth_par(&s, NULL);
        synth_par(&s, b1);
        for (uint32_t fmt = 1; fmt <= 2; fmt++) {
            if (fmt == 2) { /* beside the default groups, the same in one group */
                ferry_delta_cuda_set_group_min(g_gpu, SIZE_MAX);
                bench_one(fmt, lrs[l], n, R, REPS, b0, b1, pristine, reg, e0, e1);
                ferry_delta_cuda_set_group_min(g_gpu, 0);
            }
            bench_one(fmt, lrs[l], n, R, REPS, b0, b1, pristine, reg, e0, e1);
            const char *more = fmt == 2 ? getenv("BENCH_GROUP_MIN") : NULL; /* other group sizes, MiB */
            for (char *e = (char *)more; e && *e; e += *e == ',') {
                const unsigned long mib = strtoul(e, &e, 10);
                if (!mib) break;
                printf("format 2 in groups of at least %lu MiB of frames:\n", mib);
                ferry_delta_cuda_set_group_min(g_gpu, (size_t)mib << 20);
                bench_one(fmt, lrs[l], n, R, REPS, b0, b1, pristine, reg, e0, e1);
                ferry_delta_cuda_set_group_min(g_gpu, 0);
            }
        }
    }
    for (int r = 0; r < R; r++) cudaFree(reg[r]);
    cudaFree(pristine);
    free(a);
    free(b0);
    free(b1);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* each figure as it comes, even into a file */
    gpu_require();
    char detail[256];
    CHECK(ferry_ctx_create(NULL, &g_ctx, detail, sizeof detail) == FERRY_OK);
    CHECK(ferry_delta_codec_create(g_ctx, &g_codec) == FERRY_OK);
    ferry_errbuf_t err = {{0}};
    CHECK_OK(ferry_delta_cuda_create(0, &g_gpu, &err), err.text);
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamCreate(&g_stream));
    int rc = 0;
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        rc = bench(argc > 2 ? atof(argv[2]) : 0);
    } else {
        for (int run = 0; run < 3; run++) {
            /* format 1; format 2 in one group; format 2 a group per item */
            g_format = run ? 2 : 1, g_group_min = run == 2 ? 1 : 0;
            ferry_delta_cuda_set_group_min(g_gpu, g_group_min ? g_group_min : SIZE_MAX);
            test_good_batch();
            test_refusal("damaged record", spoil_record, FERRY_ERR_CORRUPT, "record checksum");
            test_refusal("damaged stream, record resealed", spoil_stream, FERRY_ERR_CORRUPT, "chunk");
            if (g_format == 2)
                test_refusal("damaged length table, record resealed", spoil_table, FERRY_ERR_CORRUPT, "chunk");
            test_refusal("wrong base, sparse chunk", spoil_base_sparse, FERRY_ERR_MISMATCH, "not this delta's base");
            test_refusal("wrong base, raw chunk", spoil_base_raw, FERRY_ERR_MISMATCH, "not this delta's base");
            test_refusal("wrong base, unchanged chunk", spoil_base_unchanged, FERRY_ERR_MISMATCH,
                         "not this delta's base");
            test_refusal("another version", spoil_version, FERRY_ERR_MISMATCH, "version");
            test_refusal("another dtype", spoil_dtype, FERRY_ERR_MISMATCH, "F16");
            test_refusal("another size", spoil_size, FERRY_ERR_MISMATCH, "elements");
            test_refusal("damaged frame header", spoil_header, FERRY_ERR_CORRUPT, "");
            /* its first records already in the tables (the check's walk fills them): taken back */
            test_refusal("damaged record header after four good ones", spoil_later_header, FERRY_ERR_CORRUPT,
                         "chunk 4");
            test_big_undo();
        }
        test_parts();
        g_format = 1;
        test_edges();
        printf("delta apply on the GPU: all cases passed, formats 1 and 2\n");
    }
    ferry_delta_cuda_destroy(g_gpu);
    cudaStreamDestroy(g_stream);
    ferry_delta_codec_destroy(g_codec);
    ferry_ctx_destroy(g_ctx);
    return rc;
}
