/* The UCX transport's shared state: ucx.c (endpoints, RMA, checks) and
 * ucx_stage.c (GPU memory through host staging) both use it. */
#ifndef FERRY_XPORT_UCX_INTERNAL_H
#define FERRY_XPORT_UCX_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <ucp/api/ucp.h>

#include "xport/xport_internal.h"

#define UCX_SLOTS 4096

typedef struct ucx_peer_t {
    uint64_t id;              /* xxh3 of the worker address */
    ucp_ep_h ep;
    int pidfd;                /* same host and network namespace: the other process's pidfd, else -1 */
    bool local;               /* same host and network namespace: no peer-failure mode */
    atomic_bool lost;         /* set by UCX's error callback on the progress thread too */
    uint32_t refs;
    struct ucx_peer_t *next;
} ucx_peer_t;

typedef struct ucx_stage ucx_stage_t;

/* How the endpoint moves GPU memory (FERRY_UCX_CUDA, docs/transport.md). */
typedef enum { UCX_CUDA_STAGED = 0, UCX_CUDA_NATIVE = 1 } ucx_cuda_mode_t;

typedef struct {
    uint64_t host;            /* boot id and network namespace: who counts as local */
    uint32_t pid;
    ucx_cuda_mode_t cuda;     /* native: UCX maps and moves GPU memory itself */
    bool stage_host;          /* FERRY_UCX_STAGE_HOST=1 (tests): host memory is served through staging too */
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_address_t *address;
    size_t address_len;
    int efd;
    int wake[2];
    pthread_t thread;
    bool running;
    atomic_bool stop;         /* tells the progress thread to end */
    ucp_mem_h ctl_memh;       /* the generations, UCX-allocated */
    uint64_t *gens;
    void *ctl_rkey;
    size_t ctl_rkey_len;
    pthread_mutex_t lock;
    ucp_mem_h slot_memh[UCX_SLOTS];   /* NULL for GPU memory served by staging */
    void *slot_rkey[UCX_SLOTS];
    size_t slot_rkey_len[UCX_SLOTS];
    uint8_t slot_used[UCX_SLOTS];
    uint8_t *slot_ptr[UCX_SLOTS];     /* what staging serves a read from */
    size_t slot_size[UCX_SLOTS];
    int slot_device[UCX_SLOTS];       /* GPU of CUDA memory, -1 for host memory */
    ucx_peer_t *peers;
    ucx_peer_t *closed;       /* freed at the end: UCX's progress thread may still call back */
    ucp_mem_h *parked;        /* ended registrations, unmapped at the end: a peer's emulated */
    size_t nparked, cap_parked; /* get may still be served from them by the progress thread */
    void **parked_cuda;       /* GPU memory the endpoint allocated, freed at the end */
    size_t nparked_cuda, cap_parked_cuda;
    uint64_t **orphans;       /* where interrupted reads of generations land, freed at the end */
    size_t norphans, cap_orphans;
    ucx_stage_t *stage;       /* host staging of GPU memory (ucx_stage.c) */
} ucx_t;

/* Backend data of a remote registration. */
typedef struct {
    ucp_rkey_h rkey, ctl_rkey; /* rkey NULL: read through staging */
    uint64_t ctl_addr;
} ucx_rmem_t;

bool ucx_peer_lost(ucx_peer_t *p);
/* A new connection (in no list) to the worker at addr; local_pid: the other
 * process's pid when it shares this host and network namespace, else 0.
 * Local peers skip UCX's peer-failure mode, which would keep UCX off its
 * shared-memory transports, and are watched through a pidfd. Errors
 * (FERRY_ERR_PEER_LOST, FERRY_ERR_NO_MEMORY) come with *why. */
ferry_status_t ucx_peer_connect(ucx_t *u, ferry_ctx_t *ctx, const uint8_t *addr, size_t len, uint32_t local_pid,
                                ucx_peer_t **out, const char **why);
/* Frees a peer whose endpoint is closed or left to the worker. */
void ucx_peer_free(ferry_ctx_t *ctx, ucx_peer_t *p);
/* Fails everything in flight to a peer (its endpoint force-closed) and
 * never uses it again. */
void ucx_peer_abandon(ucx_t *u, ucx_peer_t *p);

/* ---- staging (ucx_stage.c) ----------------------------------------------
 * A read of GPU memory that UCX cannot touch on one side (no CUDA in this
 * UCX, or in the owner's) goes as an active message to the owner, whose
 * progress thread copies the range to the host in chunks through a few
 * pinned buffers and sends each chunk back as it lands (rendezvous); the
 * reader receives host destinations in place, and device destinations
 * through pinned bounce buffers and a copy to the GPU. The copies to and
 * from the GPU, the wire and the next chunk overlap. */

/* Creates the staging state and installs the active-message handlers
 * (both roles: every endpoint may own and read). */
ferry_status_t ucx_stage_init(ferry_xport_t *xp);
/* With the progress thread stopped, before the worker ends: closes the
 * owner's endpoints to readers. */
void ucx_stage_close(ferry_xport_t *xp);
/* After the worker ended: frees everything. */
void ucx_stage_fini(ferry_xport_t *xp);
/* The owner's work, from the progress thread: returns true while copies
 * are in flight (the thread then polls instead of sleeping). */
bool ucx_stage_pump_owner(ferry_xport_t *xp);
/* A registration ends: no copy of it is in flight when this returns. */
void ucx_stage_slot_ended(ferry_xport_t *xp, uint32_t slot);

/* Whether a get of this run goes through staging. */
bool ucx_stage_needed(ferry_xport_t *xp, const ferry_xport_run_t *run);
/* Starts the staged runs of a get (runs[i] for which staged[i] is true). */
typedef struct ucx_sreq ucx_sreq_t;
ferry_status_t ucx_stage_get(ferry_xport_t *xp, const ferry_xport_run_t *runs, const bool *staged, size_t n,
                             ucx_sreq_t **out);
/* Waits for them until the deadline (monotonic seconds); frees sr (or keeps
 * it for late callbacks). */
ferry_status_t ucx_stage_wait(ferry_xport_t *xp, ucx_sreq_t *sr, double deadline);

#endif
