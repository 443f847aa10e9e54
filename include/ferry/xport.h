/* ferry: one-sided transports.
 *
 * A transport endpoint registers memory and describes each registration in a
 * small descriptor (bytes the owner publishes, e.g. through the metadata
 * service). A peer that holds the descriptor connects to the owner once and
 * then reads (get) or writes (put) byte ranges of that memory without the
 * owner's code handling each request. Every access is checked against the
 * registration (range inside it, registration still alive), and a peer that
 * dies turns into an error on the request, never a hang.
 *
 * Backends:
 *  - FERRY_XPORT_SHM: one host. Memory from ferry_xport_mem_alloc lives in a
 *    memfd that peers map once (a read is one memcpy, split over threads when
 *    large); other registered memory is read with process_vm_readv. The
 *    endpoint runs one service thread that hands out mappings to connecting
 *    peers; reads and writes never involve it.
 *  - FERRY_XPORT_UCX: any hosts, through UCX UCP RMA (RDMA, TCP or shared
 *    memory, as UCX_TLS allows). The endpoint runs one progress thread:
 *    UCX needs the owner's worker to progress emulated RMA (user memory,
 *    TCP) and connection set-up.
 *
 * Requests complete when ferry_xport_req_wait returns; shm finishes its
 * copies in the calling thread before get/put return, UCX leaves them in
 * flight so that requests to many owners overlap.
 */
#ifndef FERRY_XPORT_H
#define FERRY_XPORT_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/ctx.h"
#include "ferry/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

typedef enum ferry_xport_kind {
    FERRY_XPORT_SHM = 1,
    FERRY_XPORT_UCX = 2
} ferry_xport_kind_t;

/* Where registered memory lives. CUDA memory is device memory of one GPU
 * (cudaMalloc'd, or VMM memory such as PyTorch's expandable_segments made
 * with a POSIX file descriptor handle type); it needs a ferry built with
 * CUDA (else FERRY_ERR_UNSUPPORTED). On shm, peers open it through CUDA IPC
 * (docs/transport.md) and copy with the GPUs' copy engines. */
typedef enum ferry_mem_type {
    FERRY_MEM_HOST = 0,
    FERRY_MEM_CUDA = 1
} ferry_mem_type_t;

/* Which fields of ferry_xport_params_t are set; unset fields take defaults. */
enum {
    FERRY_XPORT_PARAM_KIND = 1u << 0,       /* default: FERRY_XPORT_SHM */
    FERRY_XPORT_PARAM_TIMEOUT_MS = 1u << 1, /* default: 10000 */
    FERRY_XPORT_PARAM_THREADS = 1u << 2,    /* default: 1 (copy threads per large request) */
    FERRY_XPORT_PARAM_SPLIT_BYTES = 1u << 3 /* default: 8 MiB (requests at least this large use threads) */
};

typedef struct ferry_xport_params {
    uint64_t field_mask;
    ferry_xport_kind_t kind;
    uint32_t timeout_ms;  /* connecting, handing out mappings, waiting on a request */
    uint32_t threads;     /* copy threads a large get/put may use (1..64) */
    uint64_t split_bytes;
} ferry_xport_params_t;

typedef struct ferry_xport ferry_xport_t;           /* an endpoint */
typedef struct ferry_xport_mem ferry_xport_mem_t;   /* a local registration */
typedef struct ferry_xport_rmem ferry_xport_rmem_t; /* a remote registration, from its descriptor */
typedef struct ferry_xport_req ferry_xport_req_t;   /* one get/put of one or many runs */

/* Largest descriptor any backend packs. */
#define FERRY_XPORT_DESC_MAX 1024

/* Creates an endpoint. SHM starts its service thread here; UCX its progress
 * thread, and it sets UCX_TCP_{TX,RX}_SEG_SIZE and UCX_TCP_{SND,RCV}BUF in
 * the environment when they are unset (create UCX endpoints before other
 * threads read the environment).
 * Ownership: caller owns *out (ferry_xport_destroy). Errors: detail on ctx.
 * Thread-safety: the endpoint and everything made from it are used by one
 * thread at a time (the service thread is internal). */
ferry_status_t ferry_xport_create(ferry_ctx_t *ctx, const ferry_xport_params_t *params,
                                  ferry_xport_t **out);

/* Stops the service thread, drops every registration and connection; NULL is
 * accepted. Peers reading this endpoint's memory get errors from then on. */
void ferry_xport_destroy(ferry_xport_t *xp);

const char *ferry_xport_error(const ferry_xport_t *xp);

/* What peers may do with a registration. Read-only is the default: a
 * descriptor then lets its holder read the memory, not change it. Ask for
 * FERRY_XPORT_ACCESS_WRITE only where peers put into the memory.
 * The descriptor carries the access, and a peer's ferry_xport_put into a
 * read-only registration is refused before anything moves
 * (FERRY_ERR_INVALID_ARGUMENT, naming the run). Beyond that refusal, which
 * only ferry's own code obeys, the owner's side enforces it where the
 * transport can:
 *  - shm, memory from ferry_xport_mem_alloc: enforced by the kernel. Peers
 *    get a read-only memfd, sealed against writable mappings
 *    (F_SEAL_FUTURE_WRITE), so no process of the owner's user can map it
 *    writable, even by reopening it.
 *  - shm, memory from ferry_xport_mem_register: not enforced. A peer that
 *    may process_vm_readv the owner (same user, ptrace permission) may also
 *    process_vm_writev it.
 *  - UCX: not enforced. ferry asks ucp_mem_map for no remote write, but UCX
 *    1.13 ignores the request: RDMA memory is registered remotely writable,
 *    and TCP and shared-memory transports write wherever a connected peer
 *    asks (docs/transport.md). Keep UCX on a network of trusted hosts. */
typedef enum ferry_xport_access {
    FERRY_XPORT_ACCESS_READ = 0, /* peers get; puts are refused (the default) */
    FERRY_XPORT_ACCESS_WRITE = 1 /* peers get and put */
} ferry_xport_access_t;

/* Allocates size bytes that peers can map (shm: a sealed memfd, which peers
 * can neither shrink nor grow), zero-filled, and registers them with the
 * given access for peers. Ownership: the endpoint owns the memory; *out
 * lives until ferry_xport_mem_deregister or the endpoint's end.
 * Errors: detail on xp. */
ferry_status_t ferry_xport_mem_alloc(ferry_xport_t *xp, size_t size, ferry_mem_type_t type,
                                     ferry_xport_access_t access, ferry_xport_mem_t **out);

/* Registers memory the caller owns (it must stay valid while registered),
 * with the given access for peers. Registering the same range with the same
 * access again returns the same registration with a reference added (a
 * registration cache: repeated steps cost nothing); each registration is
 * released by one deregister. shm reads it with process_vm_readv (needs
 * ptrace permission on the owner; same user). */
ferry_status_t ferry_xport_mem_register(ferry_xport_t *xp, void *ptr, size_t size, ferry_mem_type_t type,
                                        ferry_xport_access_t access, ferry_xport_mem_t **out);

/* Drops a reference; the last one ends the registration: descriptors of it
 * become stale and peers' reads of it fail with FERRY_ERR_STALE. A read
 * racing the end returns STALE, never as good data; a put racing it may
 * still land, so end a registration only when no peer writes it. UCX keeps
 * the mapping until the endpoint ends (its progress thread may still serve
 * a late emulated get from it): caller-owned memory must stay valid as long. */
void ferry_xport_mem_deregister(ferry_xport_mem_t *mem);

void *ferry_xport_mem_ptr(const ferry_xport_mem_t *mem);
size_t ferry_xport_mem_size(const ferry_xport_mem_t *mem);

/* Writes the registration's descriptor (at most FERRY_XPORT_DESC_MAX bytes)
 * into buf; *len gets its length. The descriptor names the endpoint, so a
 * peer needs nothing else. Errors: FERRY_ERR_LIMIT if size is too small. */
ferry_status_t ferry_xport_mem_pack(const ferry_xport_mem_t *mem, void *buf, size_t size, size_t *len);

/* Connects to the endpoint a descriptor names (once per owner; descriptors of
 * the same owner share the connection) and resolves the registration.
 * Corrupt or truncated descriptors are refused (FERRY_ERR_CORRUPT), one of
 * another transport kind too (FERRY_ERR_MISMATCH), before anything in them is
 * used. The checksum catches corruption, not forgery: descriptors must come
 * over a trusted channel (shm additionally serves only the owner's user with
 * the endpoint's secret, and checks sizes against the real memory). Ownership: *out belongs to xp and lives
 * until ferry_xport_rmem_release or the endpoint's end. */
ferry_status_t ferry_xport_rmem_unpack(ferry_xport_t *xp, const void *desc, size_t len,
                                       ferry_xport_rmem_t **out);
void ferry_xport_rmem_release(ferry_xport_rmem_t *rmem);
size_t ferry_xport_rmem_size(const ferry_xport_rmem_t *rmem);
/* What memory the owner registered: a view (below) of FERRY_MEM_CUDA memory
 * is a device pointer, valid on the device that was current when the
 * descriptor was unpacked. */
ferry_mem_type_t ferry_xport_rmem_mem_type(const ferry_xport_rmem_t *rmem);

/* Where bytes [offset, offset + len) of a remote registration lie in this
 * process, when the transport maps them here (shm, memory the owner got from
 * ferry_xport_mem_alloc): *out points at the owner's live bytes, valid until
 * the registration is released. Lets a reader copy with its own loop (and
 * checksum what it read while it is in cache) instead of a get. Reading
 * through a view is a get without its checks: call ferry_xport_rmem_check
 * after reading, and treat what was read as undefined if it fails.
 * Errors: FERRY_ERR_UNSUPPORTED where nothing is mapped (UCX; shm over
 * process_vm), FERRY_ERR_INVALID_ARGUMENT outside the registration.
 * Nothing is recorded on the endpoint (callers fall back to a get). */
ferry_status_t ferry_xport_rmem_view(const ferry_xport_rmem_t *rmem, uint64_t offset, size_t len,
                                     const void **out);

/* Whether a remote registration is still good: FERRY_OK, FERRY_ERR_STALE
 * (it ended), FERRY_ERR_PEER_LOST (its owner is gone; its bytes may be half
 * written) or FERRY_ERR_TIMEOUT. Errors: detail on the endpoint. */
ferry_status_t ferry_xport_rmem_check(ferry_xport_rmem_t *rmem);

/* One run of a batched transfer: len bytes at remote_offset of rmem, to or
 * from local. */
typedef struct ferry_xport_run {
    ferry_xport_rmem_t *rmem;
    uint64_t remote_offset;
    void *local;
    size_t len;
} ferry_xport_run_t;

/* Reads (get) or writes (put) n runs. Every run is checked first: inside its
 * registration (FERRY_ERR_INVALID_ARGUMENT naming the run), for a put a
 * registration its owner made writable (FERRY_ERR_INVALID_ARGUMENT naming
 * the run: ferry_xport_access_t), registration alive
 * (FERRY_ERR_STALE), owner alive (FERRY_ERR_PEER_LOST); nothing is
 * transferred unless all pass. *req gets the request; wait on it and free it.
 * A request that fails part way (the owner dies, a registration ends during
 * the copy) reports the error from ferry_xport_req_wait; the local bytes of
 * a failed get are undefined. */
ferry_status_t ferry_xport_get(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n,
                               ferry_xport_req_t **req);
ferry_status_t ferry_xport_put(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n,
                               ferry_xport_req_t **req);

/* Drives pending requests forward without blocking. */
ferry_status_t ferry_xport_progress(ferry_xport_t *xp);

/* Waits up to timeout_ms (-1: the endpoint's timeout) for a request and
 * finishes it; returns its final status (FERRY_ERR_TIMEOUT if it did not
 * finish: its transfers are then aborted, and its local bytes undefined).
 * The context's interrupt hook (ctx.h) does not cut a transfer short: its
 * bytes land in the caller's buffers, which a request left in flight could
 * still write after the call. It does cut short the waits for an owner's
 * answer (ferry_xport_rmem_unpack; the registration checks of
 * ferry_xport_rmem_check, get, put and this call): FERRY_ERR_INTERRUPTED,
 * after which the endpoint and its registrations stay usable (shm: an
 * unpack interrupted while the owner handed out its memory drops that
 * owner's connection; its other registrations then fail with
 * FERRY_ERR_PEER_LOST and are unpacked again).
 * UCX requests are in flight from get/put until their wait, so many requests
 * (to many owners) overlap; shm copies of host memory run inside get/put
 * and this returns at once, while its copies that touch GPU memory run on
 * the copy engines from get/put until this wait (so a caller overlaps them
 * with its own GPU work). The remote regions of a request must not be released before its
 * wait. */
ferry_status_t ferry_xport_req_wait(ferry_xport_req_t *req, int timeout_ms);
/* Frees a request; one not yet waited is waited first (nothing may write
 * into the caller's buffers afterwards). */
void ferry_xport_req_free(ferry_xport_req_t *req);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
