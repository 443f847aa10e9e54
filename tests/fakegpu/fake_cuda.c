/* The model of the CUDA runtime that fake_cuda.h describes: streams as
 * queues run in a seeded random order, events, exact allocations, failures
 * on demand. Single-threaded, as the code under test calls it. */
#include "fake_cuda.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cuda.h"
#include "common/internal.h"

#define ARGS_MAX 256
#define STREAMS_MAX 64
#define DEPTH_MAX 64 /* waits a lazy run follows back before it calls it a deadlock */

enum op_kind { OP_KERNEL, OP_COPY, OP_SET, OP_RECORD, OP_WAIT };

typedef struct op {
    enum op_kind kind;
    fake_kernel_fn fn;
    const char *name;
    void *dst;
    const void *src;
    size_t n;
    int value;
    struct CUevent_st *ev;
    uint64_t gen; /* record: its generation; wait: the one it waits for */
    void *args;   /* a kernel's, copied at launch (malloc'd: read as the kernel's own struct) */
} op_t;

struct CUstream_st {
    op_t *q;
    size_t head, len, cap;
};

struct CUevent_st {
    unsigned flags;
    uint64_t recorded, done; /* records asked for, and run */
    double ms;               /* the model's clock when the last record ran */
};

typedef struct alloc {
    char *p;
    size_t n;
    char kind; /* 'd' device, 'h' pinned host */
} alloc_t;

static struct CUstream_st g_default;
static struct CUstream_st *g_streams[STREAMS_MAX] = {&g_default};
static size_t g_nstreams = 1;
static alloc_t *g_allocs;
static size_t g_nallocs, g_capallocs;
static cudaError_t g_last = cudaSuccess;
static uint64_t g_rng = 1;
static unsigned g_mode = 2;
static long g_alloc_count, g_fail_alloc = -1, g_op_count, g_fail_op = -1, g_timing_count, g_fail_timing = -1;
static long g_injected;
static bool g_fail_sticky;
static double g_clock_ms;
static int g_device;
static double g_mark_s = -1, g_mark_sync_s = -1; /* fake_cuda_mark */
static bool g_skip_kernels;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The first wait for work since fake_cuda_mark: timed. */
static void waited(void) {
    if (g_mark_s >= 0 && g_mark_sync_s < 0) g_mark_sync_s = mono_s() - g_mark_s;
}

void fake_cuda_abort(const char *file, int line, const char *cond, const char *fmt, ...) {
    fprintf(stderr, "%s:%d: fake CUDA: %s: ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

static uint64_t rnd(void) { /* xorshift64* */
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}

static cudaError_t fail(cudaError_t e) {
    if (e != cudaSuccess) g_last = e;
    return e;
}

/* ---- memory ------------------------------------------------------------------ */

static alloc_t *find(const void *p, size_t n) {
    const char *c = p;
    for (size_t i = 0; i < g_nallocs; i++)
        if (c >= g_allocs[i].p && c <= g_allocs[i].p + g_allocs[i].n &&
            n <= (size_t)(g_allocs[i].p + g_allocs[i].n - c))
            return &g_allocs[i];
    return NULL;
}

char fake_cuda_kind(const void *p, size_t n) {
    const alloc_t *a = find(p, n);
    return a ? a->kind : 0;
}

static cudaError_t alloc(void **p, size_t n, char kind) {
    if (!p) return fail(cudaErrorInvalidValue);
    *p = NULL;
    const long nth = g_alloc_count++;
    if (g_fail_alloc >= 0 && (nth == g_fail_alloc || (g_fail_sticky && nth > g_fail_alloc))) {
        g_injected++;
        return fail(cudaErrorMemoryAllocation);
    }
    if (!n) return cudaSuccess;
    void *m = NULL;
    if (posix_memalign(&m, 256, n)) return fail(cudaErrorMemoryAllocation); /* 256-aligned as cudaMalloc's */
    memset(m, 0xA5, n); /* not zeroed: cudaMalloc's memory holds anything */
    if (g_nallocs == g_capallocs) {
        size_t c = g_capallocs ? 2 * g_capallocs : 64;
        alloc_t *na = realloc(g_allocs, c * sizeof *na);
        FAKE_REQUIRE(na, "out of host memory");
        g_allocs = na, g_capallocs = c;
    }
    g_allocs[g_nallocs++] = (alloc_t){m, n, kind};
    *p = m;
    return cudaSuccess;
}

static void run_all(void);

static cudaError_t release(void *p, char kind) {
    if (!p) return cudaSuccess;
    run_all(); /* cudaFree waits for the device */
    for (size_t i = 0; i < g_nallocs; i++)
        if (g_allocs[i].p == p) {
            if (g_allocs[i].kind != kind) return fail(cudaErrorInvalidValue);
            free(p);
            g_allocs[i] = g_allocs[--g_nallocs];
            return cudaSuccess;
        }
    return fail(cudaErrorInvalidValue);
}

void *fake_cuda_dev(uint64_t addr, uint64_t n, const char *what, uint64_t idx) {
    FAKE_REQUIRE(fake_cuda_kind((const void *)(uintptr_t)addr, n) == 'd',
                 "%s of entry %llu: %llu bytes at %#llx, not inside device memory", what, (unsigned long long)idx,
                 (unsigned long long)n, (unsigned long long)addr);
    return (void *)(uintptr_t)addr;
}

size_t fake_cuda_live_bytes(void) {
    size_t s = 0;
    for (size_t i = 0; i < g_nallocs; i++) s += g_allocs[i].n;
    return s;
}

cudaError_t cudaMalloc(void **p, size_t n) { return alloc(p, n, 'd'); }
cudaError_t cudaMallocHost(void **p, size_t n) { return alloc(p, n, 'h'); }
cudaError_t cudaFree(void *p) { return release(p, 'd'); }
cudaError_t cudaFreeHost(void *p) { return release(p, 'h'); }

/* ---- the queues ---------------------------------------------------------------- */

static struct CUstream_st *stream_of(cudaStream_t s) {
    if (!s) return &g_default;
    for (size_t i = 0; i < g_nstreams; i++)
        if (g_streams[i] == s) return s;
    fake_cuda_abort(__FILE__, __LINE__, "stream_of", "%p is not a live stream", (void *)s);
}

static bool runnable(const struct CUstream_st *s) {
    if (s->head == s->len) return false;
    const op_t *o = &s->q[s->head];
    return o->kind != OP_WAIT || o->ev->done >= o->gen;
}

/* The head of s run and taken off. */
static void exec(struct CUstream_st *s) {
    op_t *o = &s->q[s->head];
    switch (o->kind) {
    case OP_KERNEL:
        if (!g_skip_kernels) o->fn(o->args);
        free(o->args);
        g_clock_ms += 0.01;
        break;
    case OP_COPY: memmove(o->dst, o->src, o->n), g_clock_ms += 0.001; break;
    case OP_SET: memset(o->dst, o->value, o->n), g_clock_ms += 0.001; break;
    case OP_RECORD:
        if (o->gen > o->ev->done) o->ev->done = o->gen, o->ev->ms = g_clock_ms;
        break;
    case OP_WAIT: break;
    }
    if (++s->head == s->len) s->head = s->len = 0;
}

/* One runnable operation, of a stream picked at random; false if none. */
static bool step(void) {
    struct CUstream_st *ready[STREAMS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < g_nstreams; i++)
        if (runnable(g_streams[i])) ready[n++] = g_streams[i];
    if (!n) return false;
    exec(ready[rnd() % n]);
    return true;
}

size_t fake_cuda_pending(void) {
    size_t n = 0;
    for (size_t i = 0; i < g_nstreams; i++) n += g_streams[i]->len - g_streams[i]->head;
    return n;
}

static void deadlock(const char *what) {
    fake_cuda_abort(__FILE__, __LINE__, what, "%zu operations queued and none can run (a wait for an event "
                    "that is never recorded)", fake_cuda_pending());
}

/* Lazily (mode 0): only what is waited for runs, and what that waits for.
   The first n operations of s, each wait first satisfied by running the
   stream that holds the record it waits for, up to that record. */
static void satisfy(const struct CUevent_st *e, uint64_t gen, unsigned depth);
static void run_through(struct CUstream_st *s, size_t n, unsigned depth) {
    for (size_t k = 0; k < n; k++) {
        const op_t *o = &s->q[s->head];
        if (o->kind == OP_WAIT && o->ev->done < o->gen) satisfy(o->ev, o->gen, depth + 1);
        exec(s);
    }
}
static void satisfy(const struct CUevent_st *e, uint64_t gen, unsigned depth) {
    if (depth > DEPTH_MAX) deadlock("satisfy");
    for (size_t i = 0; i < g_nstreams; i++) {
        struct CUstream_st *t = g_streams[i];
        for (size_t j = t->head; j < t->len; j++)
            if (t->q[j].kind == OP_RECORD && t->q[j].ev == e && t->q[j].gen >= gen) {
                run_through(t, j - t->head + 1, depth);
                return;
            }
    }
    deadlock("satisfy");
}

static void run_stream(struct CUstream_st *s) {
    waited();
    if (g_mode == 0) run_through(s, s->len - s->head, 0);
    while (s->head != s->len)
        if (!step()) deadlock("run_stream");
}

static void run_all(void) {
    waited();
    for (size_t i = 0; g_mode == 0 && i < g_nstreams; i++) run_stream(g_streams[i]);
    while (step()) {
    }
    if (fake_cuda_pending()) deadlock("run_all");
}

/* An injected failure of the nth operation (enqueued or a synchronisation). */
static bool injected_op(void) {
    const long nth = g_op_count++;
    if (g_fail_op < 0 || nth != g_fail_op) return false;
    g_injected++;
    return true;
}

/* After an enqueue: per the mode, nothing, everything runnable, or a few. */
static void maybe_run(void) {
    if (g_mode == 1) {
        while (step()) {
        }
    } else if (g_mode == 2) {
        for (uint64_t k = rnd() % 4; k && step(); k--) {
        }
    }
}

/* Enqueues o on s, or fails it as injected. */
static cudaError_t push(cudaStream_t sh, op_t *o, cudaError_t injected) {
    struct CUstream_st *s = stream_of(sh);
    if (injected_op()) {
        free(o->args);
        return fail(injected);
    }
    if (s->len == s->cap) {
        size_t c = s->cap ? 2 * s->cap : 32;
        op_t *q = realloc(s->q, c * sizeof *q);
        FAKE_REQUIRE(q, "out of host memory");
        s->q = q, s->cap = c;
    }
    s->q[s->len++] = *o;
    maybe_run();
    return cudaSuccess;
}

cudaError_t fake_cuda_launch(cudaStream_t s, fake_kernel_fn fn, const void *args, size_t size, const char *name) {
    FAKE_REQUIRE(size <= ARGS_MAX, "%s: %zu bytes of arguments", name, size);
    op_t o = {.kind = OP_KERNEL, .fn = fn, .name = name, .args = malloc(size ? size : 1)};
    FAKE_REQUIRE(o.args, "out of host memory");
    memcpy(o.args, args, size);
    return push(s, &o, cudaErrorLaunchOutOfResources); /* a launch's own failure: not sticky */
}

static void check_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    const char dk = fake_cuda_kind(dst, n), sk = fake_cuda_kind(src, n);
    switch (kind) {
    case cudaMemcpyHostToDevice:
        FAKE_REQUIRE(dk == 'd' && sk != 'd', "a host-to-device copy of %zu bytes to %p (%c) from %p (%c)", n, dst,
                     dk ? dk : '-', src, sk ? sk : '-');
        break;
    case cudaMemcpyDeviceToHost:
        FAKE_REQUIRE(sk == 'd' && dk != 'd', "a device-to-host copy of %zu bytes from %p (%c) to %p (%c)", n, src,
                     sk ? sk : '-', dst, dk ? dk : '-');
        break;
    case cudaMemcpyDeviceToDevice:
        FAKE_REQUIRE(sk == 'd' && dk == 'd', "a device-to-device copy of %zu bytes", n);
        break;
    default: break; /* host to host, or inferred: anything */
    }
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    if (!n) return cudaSuccess;
    check_copy(dst, src, n, kind);
    op_t o = {.kind = OP_COPY, .dst = dst, .src = src, .n = n};
    return push(s, &o, cudaErrorInvalidValue);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, NULL);
    if (e == cudaSuccess) run_stream(&g_default);
    return e;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s) {
    if (!n) return cudaSuccess;
    FAKE_REQUIRE(fake_cuda_kind(p, n) == 'd', "a set of %zu bytes at %p, not inside device memory", n, p);
    op_t o = {.kind = OP_SET, .dst = p, .n = n, .value = value};
    return push(s, &o, cudaErrorInvalidValue);
}

cudaError_t cudaMemset(void *p, int value, size_t n) {
    cudaError_t e = cudaMemsetAsync(p, value, n, NULL);
    if (e == cudaSuccess) run_stream(&g_default);
    return e;
}

/* ---- streams and events ------------------------------------------------------------ */

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority) {
    (void)flags, (void)priority;
    FAKE_REQUIRE(g_nstreams < STREAMS_MAX, "more than %d streams", STREAMS_MAX);
    struct CUstream_st *n = calloc(1, sizeof *n);
    FAKE_REQUIRE(n, "out of host memory");
    g_streams[g_nstreams++] = n;
    *s = n;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    return cudaStreamCreateWithPriority(s, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithPriority(s, 0, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    struct CUstream_st *st = stream_of(s);
    if (st == &g_default) return fail(cudaErrorInvalidResourceHandle);
    run_stream(st); /* its work completes, as CUDA's does */
    for (size_t i = 0; i < g_nstreams; i++)
        if (g_streams[i] == st) g_streams[i] = g_streams[--g_nstreams];
    free(st->q);
    free(st);
    return cudaSuccess;
}

/* A synchronisation that fails (injected) still waits for the work: the
   error is the work's, reported when it is waited for. */
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    run_stream(stream_of(s));
    return injected_op() ? fail(cudaErrorLaunchOutOfResources) : cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    run_all();
    return injected_op() ? fail(cudaErrorLaunchOutOfResources) : cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    struct CUevent_st *n = calloc(1, sizeof *n);
    FAKE_REQUIRE(n, "out of host memory");
    n->flags = flags;
    *e = n;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    run_all(); /* no queued record or wait may name it */
    free(e);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    op_t o = {.kind = OP_RECORD, .ev = e, .gen = e->recorded + 1};
    cudaError_t r = push(s, &o, cudaErrorInvalidValue);
    if (r == cudaSuccess && o.gen > e->recorded) e->recorded = o.gen;
    return r;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    (void)flags;
    op_t o = {.kind = OP_WAIT, .ev = e, .gen = e->recorded}; /* the last record asked for: 0, none, waits for nothing */
    return push(s, &o, cudaErrorInvalidValue);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    waited();
    if (g_mode == 0 && e->done < e->recorded) satisfy(e, e->recorded, 0);
    while (e->done < e->recorded)
        if (!step()) deadlock("cudaEventSynchronize");
    return injected_op() ? fail(cudaErrorLaunchOutOfResources) : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    const long nth = g_timing_count++;
    if (g_fail_timing >= 0 && nth == g_fail_timing) {
        g_injected++;
        return fail(cudaErrorNotReady);
    }
    if ((a->flags | b->flags) & cudaEventDisableTiming || !a->recorded || !b->recorded)
        return fail(cudaErrorInvalidResourceHandle);
    if (a->done < a->recorded || b->done < b->recorded) return fail(cudaErrorNotReady);
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}

/* ---- the device ------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *device) {
    *device = g_device;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    if (device != 0) return fail(cudaErrorInvalidDevice);
    g_device = device;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    if (device != 0) return fail(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = 4; return cudaSuccess;
    case cudaDevAttrUnifiedAddressing: *value = 1; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue);
    }
}
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    *least = 0, *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_last; }

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    default: return "cudaError (other)";
    }
}
const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory" : "fake CUDA failure";
}

/* The library's start-up (common/cuda.c) would load the driver. */
ferry_status_t ferry_cuda_init(ferry_errbuf_t *err) {
    (void)err;
    return FERRY_OK;
}
ferry_status_t ferry_cuda_fail(ferry_errbuf_t *err, ferry_status_t status, cudaError_t e, const char *what) {
    return ferry_fail(err, status, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* ---- controls --------------------------------------------------------------------- */

void fake_cuda_reset(uint64_t seed) {
    run_all();
    g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
    g_mode = (unsigned)(seed % 3);
    g_fail_alloc = g_fail_op = g_fail_timing = -1;
    g_fail_sticky = false;
    g_last = cudaSuccess;
}

void fake_cuda_fail_alloc(long nth, bool sticky) {
    g_fail_alloc = nth < 0 ? -1 : g_alloc_count + nth;
    g_fail_sticky = sticky;
}
void fake_cuda_fail_op(long nth) { g_fail_op = nth < 0 ? -1 : g_op_count + nth; }
void fake_cuda_fail_timing(long nth) { g_fail_timing = nth < 0 ? -1 : g_timing_count + nth; }
long fake_cuda_allocs(void) { return g_alloc_count; }
long fake_cuda_ops(void) { return g_op_count; }
long fake_cuda_timings(void) { return g_timing_count; }
long fake_cuda_injected(void) { return g_injected; }

void fake_cuda_mark(void) { g_mark_s = mono_s(), g_mark_sync_s = -1; }
double fake_cuda_mark_to_wait_s(void) { return g_mark_sync_s; }
void fake_cuda_skip_kernels(bool skip) { g_skip_kernels = skip; }
