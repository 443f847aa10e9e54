/* CUDA memory across processes of one host, for the shm transport.
 *
 * Owner: a registration of device memory is exported as the allocations
 * that hold it ("chunks"): one cudaMalloc allocation (a legacy IPC handle),
 * or the cuMemCreate allocations mapped across the range (VMM memory, e.g.
 * PyTorch's expandable_segments: one POSIX file descriptor each, handed to
 * peers over the endpoint's unix socket).
 * Peer: each chunk is opened once per allocation and shared by every
 * registration that lies in it, keyed by the owner's allocation (its buffer
 * id, size and handle), never by address: an address the owner frees and
 * allocates again is a new allocation, and gets a new opening. A
 * registration over several VMM chunks is mapped into one contiguous range
 * of this process's address space.
 * Builds without CUDA compile this file too; every call then fails with
 * FERRY_ERR_UNSUPPORTED. */
#ifndef FERRY_XPORT_CUDA_IPC_H
#define FERRY_XPORT_CUDA_IPC_H

#include <stdbool.h>
#include <stdint.h>

#include "common/internal.h"

#define XCUDA_HANDLE_BYTES 64 /* sizeof(cudaIpcMemHandle_t) */
#define XCUDA_MAX_CHUNKS 65536

typedef struct xcuda_chunk {
    int64_t off;     /* chunk start minus the registration's start (<= 0 for the first) */
    uint64_t size;
    uint64_t id;     /* the owner's buffer id of the allocation */
    int fd;          /* VMM: a shareable descriptor (owned); -1 for legacy memory */
    uint8_t handle[XCUDA_HANDLE_BYTES]; /* legacy: the IPC handle */
} xcuda_chunk_t;

typedef struct xcuda_export {
    int device;
    bool vmm;
    uint32_t n;
    xcuda_chunk_t *chunks;
} xcuda_export_t;

/* What the owner sends for chunk `index` (with its fd for VMM memory). */
typedef struct xcuda_chunk_msg {
    int32_t status;
    uint32_t n;
    uint32_t index;
    uint32_t vmm;
    int64_t off;
    uint64_t size;
    uint64_t id;
    uint8_t handle[XCUDA_HANDLE_BYTES];
} xcuda_chunk_msg_t;

/* Exports [ptr, ptr + size) of device memory. Errors name what the memory
 * is when it cannot be shared (not device memory; VMM memory created
 * without a POSIX file descriptor handle type). */
ferry_status_t xcuda_export(ferry_ctx_t *ctx, ferry_errbuf_t *err, void *ptr, size_t size, xcuda_export_t **out);
void xcuda_export_free(ferry_ctx_t *ctx, xcuda_export_t *e);

/* Device memory the endpoint owns: cudaMalloc on the calling thread's
 * current device, zeroed. */
ferry_status_t xcuda_alloc(ferry_errbuf_t *err, size_t size, void **out);
void xcuda_free(void *ptr);

/* A peer's openings of one owner's allocations. */
typedef struct xcuda_cache xcuda_cache_t;
/* One registration opened here. */
typedef struct xcuda_import xcuda_import_t;

xcuda_cache_t *xcuda_cache_create(ferry_ctx_t *ctx);
/* Closes every opening (call once no import of it is left). */
void xcuda_cache_destroy(xcuda_cache_t *c);

/* Opens a registration of `size` bytes from its chunks (checked: they must
 * cover it contiguously), on the calling thread's current device; the fds
 * in chunks are consumed. *base gets the registration's first byte here. */
ferry_status_t xcuda_import(xcuda_cache_t *c, ferry_errbuf_t *err, xcuda_chunk_t *chunks, uint32_t n, bool vmm,
                            uint64_t size, bool writable, xcuda_import_t **out, uint8_t **base);
void xcuda_import_release(xcuda_cache_t *c, xcuda_import_t *imp);

/* Copies n runs (pointers of any kind CUDA knows: device, mapped peer
 * memory, pinned or pageable host) on the endpoint's stream (made on first
 * use, on the calling thread's device). xcuda_copy_start returns with them
 * in flight and *ev marking their end; xcuda_event_wait waits for it and
 * frees it. */
typedef struct xcuda_copy {
    void *dst;
    const void *src;
    size_t len;
} xcuda_copy_t;
typedef struct xcuda_stream xcuda_stream_t;
typedef struct xcuda_event xcuda_event_t;
ferry_status_t xcuda_copy_start(xcuda_stream_t **stream, ferry_errbuf_t *err, const xcuda_copy_t *runs, size_t n,
                                 xcuda_event_t **ev);
ferry_status_t xcuda_event_wait(xcuda_event_t *ev, ferry_errbuf_t *err);
void xcuda_stream_destroy(xcuda_stream_t *s);

/* Whether ptr is device memory, answered without initializing CUDA: false
 * in a process that has not used CUDA through ferry. */
bool xcuda_is_device(const void *ptr);

#endif
