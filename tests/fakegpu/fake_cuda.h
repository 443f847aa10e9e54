/* A model of the CUDA runtime on the CPU, for the host code of the GPU
 * delta apply and encoder (codec/delta_cuda.c, codec/delta_cuda_enc.c) to
 * run in CI, where no GPU is: included first by every file of the fakegpu
 * tests, it renames the CUDA calls that code makes (and the launchers of
 * delta.cu and delta_enc.cu, and ferry_cuda_init) to the model's, which
 * fake_cuda.c defines. The kernels are dk_cpu.c's and ek_cpu.c's, plain C
 * that does what the passes do, table for table.
 *
 * What the model holds the host code to, beyond what a GPU would check:
 *  - Work is deferred. Each stream is a queue; an operation runs when the
 *    model chooses, in an order that keeps each stream's order and its
 *    event waits (fake_cuda_reset picks: lazily, only what is waited for
 *    and what that waits for; eagerly, as enqueued; or a seeded random
 *    mix), and at the latest when something waits for it. Copies read their source and kernels their
 *    tables when they run, not when enqueued, so a missing event wait, or
 *    host memory changed while a copy or pull of it is queued, gives wrong
 *    results here as it can on a GPU.
 *  - Memory is exact: device and pinned host allocations are malloc'd at
 *    their size (AddressSanitizer sees any access past them) and filled
 *    with 0xA5 bytes (device memory comes uninitialized); copies and sets
 *    are checked to lie inside an allocation of the right kind; a kernel's
 *    pull (dk_pull) must read pinned memory.
 *  - Failures on demand: the nth allocation, the nth operation (copy, set,
 *    event record or wait, launch, or synchronisation) or the nth timing
 *    read fails as CUDA reports it: returned and left as the last error,
 *    which cudaGetLastError clears.
 *  - cudaFree and cudaFreeHost wait for all work (as CUDA's do).
 * Not modelled: several devices (one, ordinal 0), the legacy default
 * stream's implicit synchronisation (stream 0 is a stream of its own; the
 * code under test uses non-blocking streams), sticky errors (an injected
 * failure of a synchronisation is not sticky here, as a failed launch's
 * is not on a GPU), a wait captured before an event is recorded again on
 * another stream (it is released by the later record's completion too),
 * and the kernels' GPU-only code: the CPU passes compile delta_dev.h's
 * host branches, and repeat delta.cu's launchers rather than run them. */
#ifndef FERRY_TESTS_FAKE_CUDA_H
#define FERRY_TESTS_FAKE_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#undef cudaDeviceGetAttribute
#define cudaDeviceGetAttribute fake_cudaDeviceGetAttribute
#undef cudaDeviceGetStreamPriorityRange
#define cudaDeviceGetStreamPriorityRange fake_cudaDeviceGetStreamPriorityRange
#undef cudaDeviceSynchronize
#define cudaDeviceSynchronize fake_cudaDeviceSynchronize
#undef cudaEventCreate
#define cudaEventCreate fake_cudaEventCreate
#undef cudaEventCreateWithFlags
#define cudaEventCreateWithFlags fake_cudaEventCreateWithFlags
#undef cudaEventDestroy
#define cudaEventDestroy fake_cudaEventDestroy
#undef cudaEventElapsedTime
#define cudaEventElapsedTime fake_cudaEventElapsedTime
#undef cudaEventRecord
#define cudaEventRecord fake_cudaEventRecord
#undef cudaEventSynchronize
#define cudaEventSynchronize fake_cudaEventSynchronize
#undef cudaFree
#define cudaFree fake_cudaFree
#undef cudaFreeHost
#define cudaFreeHost fake_cudaFreeHost
#undef cudaGetDevice
#define cudaGetDevice fake_cudaGetDevice
#undef cudaGetDeviceCount
#define cudaGetDeviceCount fake_cudaGetDeviceCount
#undef cudaGetErrorName
#define cudaGetErrorName fake_cudaGetErrorName
#undef cudaGetErrorString
#define cudaGetErrorString fake_cudaGetErrorString
#undef cudaGetLastError
#define cudaGetLastError fake_cudaGetLastError
#undef cudaMalloc
#define cudaMalloc fake_cudaMalloc
#undef cudaMallocHost
#define cudaMallocHost fake_cudaMallocHost
#undef cudaMemcpy
#define cudaMemcpy fake_cudaMemcpy
#undef cudaMemcpyAsync
#define cudaMemcpyAsync fake_cudaMemcpyAsync
#undef cudaMemset
#define cudaMemset fake_cudaMemset
#undef cudaMemsetAsync
#define cudaMemsetAsync fake_cudaMemsetAsync
#undef cudaPeekAtLastError
#define cudaPeekAtLastError fake_cudaPeekAtLastError
#undef cudaSetDevice
#define cudaSetDevice fake_cudaSetDevice
#undef cudaStreamCreate
#define cudaStreamCreate fake_cudaStreamCreate
#undef cudaStreamCreateWithFlags
#define cudaStreamCreateWithFlags fake_cudaStreamCreateWithFlags
#undef cudaStreamCreateWithPriority
#define cudaStreamCreateWithPriority fake_cudaStreamCreateWithPriority
#undef cudaStreamDestroy
#define cudaStreamDestroy fake_cudaStreamDestroy
#undef cudaStreamSynchronize
#define cudaStreamSynchronize fake_cudaStreamSynchronize
#undef cudaStreamWaitEvent
#define cudaStreamWaitEvent fake_cudaStreamWaitEvent
/* delta.cu's and delta_enc.cu's launchers (dk_cpu.c, ek_cpu.c), the
   library's CUDA start-up and error text, and the objects under test,
   renamed so that none can meet the library's own in the link */
#undef dk_init
#define dk_init fake_dk_init
#undef dk_pre_enqueue
#define dk_pre_enqueue fake_dk_pre_enqueue
#undef dk_decode_enqueue
#define dk_decode_enqueue fake_dk_decode_enqueue
#undef dk_write_enqueue
#define dk_write_enqueue fake_dk_write_enqueue
#undef dk_pull_enqueue
#define dk_pull_enqueue fake_dk_pull_enqueue
#undef dk_undo_enqueue
#define dk_undo_enqueue fake_dk_undo_enqueue
#undef ferry_cuda_init
#define ferry_cuda_init fake_ferry_cuda_init
#undef ferry_cuda_fail
#define ferry_cuda_fail fake_ferry_cuda_fail
#undef ferry_delta_cuda_create
#define ferry_delta_cuda_create fake_ferry_delta_cuda_create
#undef ferry_delta_cuda_destroy
#define ferry_delta_cuda_destroy fake_ferry_delta_cuda_destroy
#undef ferry_delta_cuda_apply
#define ferry_delta_cuda_apply fake_ferry_delta_cuda_apply
#undef ferry_delta_cuda_set_group_min
#define ferry_delta_cuda_set_group_min fake_ferry_delta_cuda_set_group_min
#undef ferry_delta_cuda_last_times
#define ferry_delta_cuda_last_times fake_ferry_delta_cuda_last_times
#undef ferry_delta_cuda_device_bytes
#define ferry_delta_cuda_device_bytes fake_ferry_delta_cuda_device_bytes
#undef ek_scan_enqueue
#define ek_scan_enqueue fake_ek_scan_enqueue
#undef ek_classes_enqueue
#define ek_classes_enqueue fake_ek_classes_enqueue
#undef ek_plan_enqueue
#define ek_plan_enqueue fake_ek_plan_enqueue
#undef ek_write_enqueue
#define ek_write_enqueue fake_ek_write_enqueue
#undef ferry_delta_cuda_enc_create
#define ferry_delta_cuda_enc_create fake_ferry_delta_cuda_enc_create
#undef ferry_delta_cuda_enc_destroy
#define ferry_delta_cuda_enc_destroy fake_ferry_delta_cuda_enc_destroy
#undef ferry_delta_cuda_encode
#define ferry_delta_cuda_encode fake_ferry_delta_cuda_encode
#undef ferry_delta_cuda_enc_copy
#define ferry_delta_cuda_enc_copy fake_ferry_delta_cuda_enc_copy
#undef ferry_delta_cuda_enc_last_times
#define ferry_delta_cuda_enc_last_times fake_ferry_delta_cuda_enc_last_times
#undef ferry_delta_cuda_enc_set_slice_max
#define ferry_delta_cuda_enc_set_slice_max fake_ferry_delta_cuda_enc_set_slice_max
#undef ferry_delta_cuda_enc_device_bytes
#define ferry_delta_cuda_enc_device_bytes fake_ferry_delta_cuda_enc_device_bytes

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaFree(void *p);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceCount(int *count);
const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaMalloc(void **p, size_t size);
cudaError_t cudaMallocHost(void **p, size_t size);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int value, size_t n);
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags);

/* ---- the model's own controls ---------------------------------------------- */

/* A kernel: runs on the CPU with its arguments, as copied at launch. */
typedef void (*fake_kernel_fn)(const void *args);

/* Enqueues fn on s with a copy of args (size bytes, at most 256), as a
 * launch passes its parameters by value; cudaSuccess, or the injected
 * failure (cudaErrorLaunchOutOfResources, left as the last error, nothing
 * enqueued). name: for messages. */
cudaError_t fake_cuda_launch(cudaStream_t s, fake_kernel_fn fn, const void *args, size_t size, const char *name);

/* Clears every injection and the last error, and seeds the order in which
 * runnable operations run (seed % 3: 0 lazily, only when waited for; 1
 * eagerly, as soon as enqueued; 2 a random mix). Work still queued runs
 * first. */
void fake_cuda_reset(uint64_t seed);

/* The nth allocation (cudaMalloc, cudaMallocHost) from now fails with
 * cudaErrorMemoryAllocation, counting from 0; every one after it too when
 * sticky. -1: none. */
void fake_cuda_fail_alloc(long nth, bool sticky);

/* The nth operation from now fails, counting from 0: an enqueue (a launch
 * with cudaErrorLaunchOutOfResources, others cudaErrorInvalidValue), or a
 * synchronisation (cudaErrorLaunchOutOfResources, once its work has run).
 * -1: none. */
void fake_cuda_fail_op(long nth);

/* The nth cudaEventElapsedTime from now fails with cudaErrorNotReady. */
void fake_cuda_fail_timing(long nth);

/* Allocations, operations and timing reads so far (to pick the nth above),
 * and the injected failures that have happened. */
long fake_cuda_allocs(void);
long fake_cuda_ops(void);
long fake_cuda_timings(void);
long fake_cuda_injected(void);

/* Operations enqueued and not yet run, on every stream. */
size_t fake_cuda_pending(void);

/* The host's own time: fake_cuda_mark starts a clock that the first wait
 * for queued work after it (a synchronisation, or a free) stops;
 * fake_cuda_mark_to_wait_s gives its seconds (-1: no wait yet). In the
 * lazy order nothing runs before that wait, so this is the time the code
 * under test spends on the CPU before it first needs the GPU. */
void fake_cuda_mark(void);
double fake_cuda_mark_to_wait_s(void);

/* Kernels enqueued from now are taken off their queues without running
 * (skip true): for timing the host's own work many times over, whatever
 * the results. */
void fake_cuda_skip_kernels(bool skip);

/* Bytes allocated and not freed (device and pinned host). */
size_t fake_cuda_live_bytes(void);

/* Where p lies: 'd' device memory, 'h' pinned host memory (inside an
 * allocation holding [p, p + n)), 0 neither (with n > 0). */
char fake_cuda_kind(const void *p, size_t n);

/* For the kernels (dk_cpu.c, ek_cpu.c): an address from their tables, n
 * bytes from it, as a pointer; it must lie in device memory, or the
 * process stops naming what (of table entry idx) it was: a kernel given a
 * host address would fault on a GPU. */
void *fake_cuda_dev(uint64_t addr, uint64_t n, const char *what, uint64_t idx);

/* The kernels (dk_cpu.c, ek_cpu.c) stop the process with a message where they would
 * read or write past what their tables allow. */
#define FAKE_REQUIRE(cond, ...)                                                  \
    do {                                                                         \
        if (!(cond)) fake_cuda_abort(__FILE__, __LINE__, #cond, __VA_ARGS__);    \
    } while (0)
void fake_cuda_abort(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

#endif
