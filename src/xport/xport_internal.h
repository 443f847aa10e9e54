/* Transports: the generic layer (xport.c) and the backend vtable. The
 * generic layer owns the objects, frames and checksums descriptors, checks
 * every run against its registration, and caches registrations; a backend
 * moves bytes and says whether a remote registration is still alive. */
#ifndef FERRY_XPORT_XPORT_INTERNAL_H
#define FERRY_XPORT_XPORT_INTERNAL_H

#include <stdbool.h>

#include "common/internal.h"
#include "common/intr.h"
#include "ferry/xport.h"

struct ferry_xport_mem {
    ferry_xport_t *xp;
    void *ptr;
    size_t size;
    ferry_mem_type_t type;
    ferry_xport_access_t access; /* what peers may do (the descriptor says so) */
    bool allocated;          /* from ferry_xport_mem_alloc (else: the caller's memory) */
    uint32_t refs;
    uint32_t slot;           /* backend's index of the registration */
    uint64_t gen;            /* generation the descriptor carries */
    int fd;                  /* shm: the memfd, -1 if none */
    void *cuda;              /* shm: the export of CUDA memory (xport/cuda_ipc.h) */
    ferry_xport_mem_t *next; /* the endpoint's list */
};

struct ferry_xport_rmem {
    ferry_xport_t *xp;
    void *peer;              /* the backend's connection to the owner */
    void *backend;           /* the backend's data of this registration */
    size_t size;
    uint32_t slot;
    uint64_t gen;
    bool writable;           /* the owner allows puts (the descriptor's access; shm: and the memfd's) */
    bool mapped;             /* shm: a memfd mapping (or CUDA memory opened here) at base; else process_vm at remote_addr */
    ferry_mem_type_t type;   /* what the owner registered */
    uint8_t *base;
    uint64_t remote_addr;
    ferry_xport_rmem_t *next;
};

struct ferry_xport_req {
    ferry_xport_t *xp;
    ferry_status_t status;
    bool done;
    void *backend;           /* a backend's state of a request in flight */
};

typedef struct xport_ops {
    const char *name;
    ferry_status_t (*init)(ferry_xport_t *xp);
    void (*fini)(ferry_xport_t *xp);
    ferry_status_t (*mem_alloc)(ferry_xport_t *xp, ferry_xport_mem_t *mem);
    ferry_status_t (*mem_register)(ferry_xport_t *xp, ferry_xport_mem_t *mem);
    void (*mem_deregister)(ferry_xport_t *xp, ferry_xport_mem_t *mem);
    /* backend part of a descriptor */
    ferry_status_t (*mem_pack)(const ferry_xport_mem_t *mem, uint8_t *body, size_t cap, size_t *len);
    ferry_status_t (*rmem_unpack)(ferry_xport_t *xp, const uint8_t *body, size_t len, ferry_xport_rmem_t *rmem);
    void (*rmem_release)(ferry_xport_t *xp, ferry_xport_rmem_t *rmem);
    /* FERRY_OK, FERRY_ERR_STALE or FERRY_ERR_PEER_LOST */
    ferry_status_t (*rmem_check)(ferry_xport_t *xp, const ferry_xport_rmem_t *rmem);
    /* runs are checked already; completes req now (done = true), or leaves
     * it in flight for req_wait */
    ferry_status_t (*transfer)(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n, bool put,
                               ferry_xport_req_t *req);
    ferry_status_t (*progress)(ferry_xport_t *xp);
    /* optional: stop serving peers before the endpoint is torn down */
    void (*quiesce)(ferry_xport_t *xp);
    /* for backends whose transfer returns before the request is done:
     * finishes it (timeout_ms < 0: the endpoint's) and sets its status */
    ferry_status_t (*req_wait)(ferry_xport_t *xp, ferry_xport_req_t *req, int timeout_ms);
} xport_ops_t;

struct ferry_xport {
    ferry_ctx_t *ctx;
    ferry_errbuf_t err;
    const xport_ops_t *ops;
    ferry_xport_kind_t kind;
    uint32_t timeout_ms;
    uint32_t threads;
    uint64_t split_bytes;
    ferry_xport_mem_t *mems;
    ferry_xport_rmem_t *rmems;
    void *backend;
};

extern const xport_ops_t xport_shm_ops;
extern const xport_ops_t xport_ucx_ops;

/* Copies the bytes of n runs between remote memory and local buffers with up
 * to xp->threads threads; copy(run, offset, len) moves one slice. Returns the
 * first failure. */
typedef ferry_status_t (*xport_copy_fn)(ferry_xport_t *xp, const ferry_xport_run_t *run, size_t offset,
                                        size_t len, bool put);
ferry_status_t xport_copy_parallel(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n, bool put,
                                   xport_copy_fn copy);

#endif
