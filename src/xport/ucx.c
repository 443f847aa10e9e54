/* The UCX transport: one-sided RMA over UCX UCP (RDMA where there is RDMA,
 * TCP or shared memory otherwise), for peers on other hosts.
 *
 * UCX performs a get or put without the owner only on memory UCX allocated
 * itself and over transports with real RMA; on user memory, and over TCP
 * always, it emulates RMA with active messages that the owner's worker must
 * progress, and connection set-up needs owner progress too. So every endpoint
 * runs one progress thread (its worker is created thread-safe), and
 * ferry_xport_mem_alloc takes its memory from UCX.
 *
 * Checks: the owner keeps a generation per registration in a UCX-allocated
 * control array whose rkey every descriptor carries; a peer reads the word
 * (8 bytes, one-sided) before and after each batch: a different value means
 * the registration ended (FERRY_ERR_STALE). Endpoints use peer error
 * handling: a dead owner fails the request (FERRY_ERR_PEER_LOST), and a
 * request that does not finish within the timeout is cancelled
 * (FERRY_ERR_TIMEOUT).
 *
 * Peers on the same host (and network namespace) connect without UCX's
 * peer-failure mode, which would keep UCX off its shared-memory transports,
 * and watch the owner through a pidfd instead.
 *
 * GPU memory: where UCX has CUDA support, it maps and moves GPU memory
 * itself (cuda_copy, cuda_ipc, GPUDirect RDMA); else reads go through
 * host staging (ucx_stage.c). FERRY_UCX_CUDA=auto|native|staged.
 *
 * Descriptor body: host(8) pid(4) addr_len(2) worker address, slot(4) gen(8) size(8)
 * memory(1: 0 host, 1 CUDA) remote addr(8), rkey_len(2) rkey (empty: GPU
 * memory the owner's UCX cannot map), control addr(8), control rkey_len(2)
 * control rkey. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/bytes.h"
#include "common/cuda.h"
#include "xport/cuda_ipc.h"
#include "xport/ucx_internal.h"

static ferry_status_t from_ucs(ucs_status_t s) {
    switch (s) {
    case UCS_OK: return FERRY_OK;
    case UCS_ERR_NO_MEMORY: return FERRY_ERR_NO_MEMORY;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT: return FERRY_ERR_TIMEOUT;
    case UCS_ERR_CANCELED: return FERRY_ERR_TIMEOUT;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED: return FERRY_ERR_PEER_LOST;
    default: return FERRY_ERR_PEER_LOST;
    }
}

static void *progress_thread(void *arg) {
    ferry_xport_t *xp = arg;
    ucx_t *u = xp->backend;
    struct pollfd fds[2] = {{u->efd, POLLIN, 0}, {u->wake[0], POLLIN, 0}};
    while (!atomic_load_explicit(&u->stop, memory_order_acquire)) {
        char drain[64]; /* first: a wake-up written from here on is seen by the next poll */
        while (read(u->wake[0], drain, sizeof drain) > 0) {
        }
        while (ucp_worker_progress(u->worker)) {
        }
        if (ucx_stage_pump_owner(xp)) continue; /* copies to the host in flight: poll them */
        ucs_status_t s = ucp_worker_arm(u->worker);
        if (s == UCS_ERR_BUSY) continue; /* more events came in */
        poll(fds, 2, 100);
    }
    return NULL;
}

/* UCX's TCP defaults give a third of a socket's speed here. These are UCT
 * settings, which UCX reads only from the environment: set them there, never
 * over a value the user chose. */
static void tune(void) {
    static const char *const kv[][2] = {{"UCX_TCP_TX_SEG_SIZE", "64K"}, {"UCX_TCP_RX_SEG_SIZE", "256K"},
                                        {"UCX_TCP_SNDBUF", "8M"},       {"UCX_TCP_RCVBUF", "8M"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) setenv(kv[i][0], kv[i][1], 0);
}

/* Processes on one machine, in one network and one pid namespace share this
 * value: only then is the owner's pid in a descriptor meaningful here. */
static uint64_t host_identity(void) {
    char buf[256] = "";
    size_t n = 0;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        n = fread(buf, 1, 64, f);
        fclose(f);
    }
    ssize_t l = readlink("/proc/self/ns/net", buf + n, sizeof buf - n - 1);
    if (l > 0) n += (size_t)l;
    l = readlink("/proc/self/ns/pid", buf + n, sizeof buf - n - 1); /* the descriptor's pid means ours */
    if (l > 0) n += (size_t)l;
    return XXH3_64bits(buf, n);
}

/* GPU memory goes natively where this UCX has CUDA support (its memory
 * types include CUDA: PyPI's libucx-cu13, or a UCX built with CUDA), else
 * through ferry's host staging; FERRY_UCX_CUDA=native|staged asks for one. */
static ferry_status_t choose_cuda_mode(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    bool has = ucp_context_query(u->context, &ca) == UCS_OK && (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
    const char *sh = getenv("FERRY_UCX_STAGE_HOST"); /* tests: the staging protocol without a GPU */
    u->stage_host = sh && !strcmp(sh, "1");
    const char *want = getenv("FERRY_UCX_CUDA");
    if (!want || !*want || !strcmp(want, "auto")) {
        u->cuda = has ? UCX_CUDA_NATIVE : UCX_CUDA_STAGED;
    } else if (!strcmp(want, "staged")) {
        u->cuda = UCX_CUDA_STAGED;
    } else if (!strcmp(want, "native")) {
        if (!has) {
            unsigned major, minor, release;
            ucp_get_version(&major, &minor, &release);
            return ferry_fail(&xp->err, FERRY_ERR_UNSUPPORTED,
                              "ucx: FERRY_UCX_CUDA=native, but this UCX (%u.%u.%u) has no CUDA support (no cuda "
                              "module loaded: a UCX built without CUDA, or no GPU driver here)",
                              major, minor, release);
        }
        u->cuda = UCX_CUDA_NATIVE;
    } else {
        return ferry_fail(&xp->err, FERRY_ERR_INVALID_CONFIG,
                          "ucx: FERRY_UCX_CUDA=\"%s\" is none of auto, native, staged", want);
    }
    return FERRY_OK;
}

static ferry_status_t ucx_init(ferry_xport_t *xp) {
    ucx_t *u = ferry_calloc(xp->ctx, 1, sizeof *u);
    if (!u) return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory creating a UCX endpoint");
    u->efd = u->wake[0] = u->wake[1] = -1;
    atomic_init(&u->stop, false);
    pthread_mutex_init(&u->lock, NULL);
    xp->backend = u;
    u->host = host_identity();
    u->pid = (uint32_t)getpid();
    tune();
    ucp_config_t *cfg = NULL;
    ucs_status_t s = ucp_config_read(NULL, NULL, &cfg);
    if (s != UCS_OK) return ferry_fail(&xp->err, FERRY_ERR_INVALID_CONFIG, "ucx: reading UCX_* settings: %s",
                                       ucs_status_string(s));
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                           .features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                           .mt_workers_shared = 1};
    s = ucp_init(&params, cfg, &u->context);
    ucp_config_release(cfg);
    if (s != UCS_OK) return ferry_fail(&xp->err, FERRY_ERR_IO, "ucx: ucp_init: %s", ucs_status_string(s));
    ferry_status_t st = choose_cuda_mode(xp);
    if (st) return st;
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_MULTI};
    if ((s = ucp_worker_create(u->context, &wp, &u->worker)) != UCS_OK)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "ucx: ucp_worker_create: %s", ucs_status_string(s));
    if ((s = ucp_worker_get_address(u->worker, &u->address, &u->address_len)) != UCS_OK)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "ucx: worker address: %s", ucs_status_string(s));
    if ((s = ucp_worker_get_efd(u->worker, &u->efd)) != UCS_OK)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "ucx: worker event fd: %s", ucs_status_string(s));
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                                             UCP_MEM_MAP_PARAM_FIELD_PROT,
                               .length = UCX_SLOTS * sizeof(uint64_t),
                               .flags = UCP_MEM_MAP_ALLOCATE,
                               .prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE |
                                       UCP_MEM_MAP_PROT_REMOTE_READ}; /* peers only read it */
    if ((s = ucp_mem_map(u->context, &mp, &u->ctl_memh)) != UCS_OK)
        return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "ucx: control array: %s", ucs_status_string(s));
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    ucp_mem_query(u->ctl_memh, &ma);
    u->gens = ma.address;
    memset(u->gens, 0, UCX_SLOTS * sizeof(uint64_t));
    if ((s = ucp_rkey_pack(u->context, u->ctl_memh, &u->ctl_rkey, &u->ctl_rkey_len)) != UCS_OK)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "ucx: control rkey: %s", ucs_status_string(s));
    if (pipe2(u->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "ucx: wake pipe: %s", strerror(errno));
    if ((st = ucx_stage_init(xp)) != FERRY_OK) return st;
    if (pthread_create(&u->thread, NULL, progress_thread, xp) != 0)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "ucx: starting the progress thread failed");
    u->running = true;
    return FERRY_OK;
}

static void close_ep(ucx_t *u, ucp_ep_h ep) {
    if (!ep) return;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(u->worker);
        ucp_request_free(r);
    }
}

static void ucx_quiesce(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    if (!u || !u->running) return;
    atomic_store_explicit(&u->stop, true, memory_order_release);
    char b = 1;
    ssize_t w = write(u->wake[1], &b, 1);
    (void)w;
    pthread_join(u->thread, NULL);
    u->running = false;
}

static void ucx_fini(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    if (!u) return;
    ucx_quiesce(xp);
    ucx_stage_close(xp);
    while (u->peers) {
        ucx_peer_t *p = u->peers;
        u->peers = p->next;
        close_ep(u, p->ep);
        ucx_peer_free(xp->ctx, p);
    }
    while (u->closed) { /* the progress thread is gone: no callback can come now */
        ucx_peer_t *p = u->closed;
        u->closed = p->next;
        ferry_free(xp->ctx, p);
    }
    for (size_t i = 0; i < u->nparked; i++) ucp_mem_unmap(u->context, u->parked[i]);
    ferry_free(xp->ctx, u->parked);
    for (size_t i = 0; i < u->nparked_cuda; i++) xcuda_free(u->parked_cuda[i]);
    ferry_free(xp->ctx, u->parked_cuda);

    if (u->ctl_rkey) ucp_rkey_buffer_release(u->ctl_rkey);
    if (u->ctl_memh) ucp_mem_unmap(u->context, u->ctl_memh);
    if (u->address) ucp_worker_release_address(u->worker, u->address);
    if (u->worker) ucp_worker_destroy(u->worker);
    ucx_stage_fini(xp); /* after the worker: no callback can reach its state now */
    if (u->context) ucp_cleanup(u->context);
    for (size_t i = 0; i < u->norphans; i++) ferry_free(xp->ctx, u->orphans[i]); /* no request is left to land */
    ferry_free(xp->ctx, u->orphans);
    for (int i = 0; i < 2; i++)
        if (u->wake[i] >= 0) close(u->wake[i]);
    pthread_mutex_destroy(&u->lock);
    ferry_free(xp->ctx, u);
    xp->backend = NULL;
}

/* Registers m in a slot. Host memory and, where this UCX moves GPU memory
 * itself, CUDA memory are mapped with UCX (the descriptor carries an rkey);
 * CUDA memory in staged mode is only recorded, for the owner's staging to
 * serve reads from. allocate: host memory comes from UCX (CUDA memory was
 * allocated by the caller of this). */
static ferry_status_t map_slot(ferry_xport_t *xp, ferry_xport_mem_t *m, bool allocate, int device) {
    ucx_t *u = xp->backend;
    ucp_mem_h memh = NULL;
    void *rkey = NULL;
    size_t rkey_len = 0;
    bool cuda = m->type == FERRY_MEM_CUDA;
    if (!cuda || u->cuda == UCX_CUDA_NATIVE) {
        /* no remote write unless asked for. UCX 1.13 does not enforce it (it
         * registers with full access and emulated puts write anywhere), a UCX
         * that honours the field will */
        unsigned prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE | UCP_MEM_MAP_PROT_REMOTE_READ;
        if (m->access == FERRY_XPORT_ACCESS_WRITE) prot |= UCP_MEM_MAP_PROT_REMOTE_WRITE;
        ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                                                 UCP_MEM_MAP_PARAM_FIELD_PROT,
                                   .length = m->size,
                                   .flags = allocate && !cuda ? UCP_MEM_MAP_ALLOCATE : 0,
                                   .prot = prot};
        if (!allocate || cuda) {
            mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
            mp.address = m->ptr;
        }
        if (cuda) {
            mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
            mp.memory_type = UCS_MEMORY_TYPE_CUDA;
        }
        ucs_status_t s = ucp_mem_map(u->context, &mp, &memh);
        if (s != UCS_OK)
            return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "ucx: mapping %zu bytes of %s memory: %s", m->size,
                              cuda ? "GPU" : "host", ucs_status_string(s));
        if (allocate && !cuda) {
            ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
            ucp_mem_query(memh, &ma);
            m->ptr = ma.address;
            memset(m->ptr, 0, m->size);
        }
        if ((s = ucp_rkey_pack(u->context, memh, &rkey, &rkey_len)) != UCS_OK) {
            ucp_mem_unmap(u->context, memh);
            return ferry_fail(&xp->err, FERRY_ERR_IO, "ucx: packing an rkey: %s", ucs_status_string(s));
        }
    }
    pthread_mutex_lock(&u->lock);
    uint32_t slot = 0;
    while (slot < UCX_SLOTS && u->slot_used[slot]) slot++;
    if (slot == UCX_SLOTS) {
        pthread_mutex_unlock(&u->lock);
        if (rkey) ucp_rkey_buffer_release(rkey);
        if (memh) ucp_mem_unmap(u->context, memh);
        return ferry_fail(&xp->err, FERRY_ERR_LIMIT, "ucx: more than %d registrations on one endpoint", UCX_SLOTS);
    }
    u->slot_used[slot] = 1;
    u->slot_memh[slot] = memh;
    u->slot_rkey[slot] = rkey;
    u->slot_rkey_len[slot] = rkey_len;
    u->slot_ptr[slot] = m->ptr;
    u->slot_size[slot] = m->size;
    u->slot_device[slot] = cuda ? device : -1;
    m->slot = slot;
    m->gen = __atomic_add_fetch(&u->gens[slot], 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&u->lock);
    return FERRY_OK;
}

/* The GPU holding [ptr, ptr + size), which must be device memory. */
static ferry_status_t cuda_device_of(ferry_xport_t *xp, const void *ptr, size_t size, int *device) {
    ferry_cuda_ptr_t q;
    ferry_status_t st = ferry_cuda_init(&xp->err);
    if (st == FERRY_OK) st = ferry_cuda_ptr_query(ptr, size, &q, &xp->err);
    if (st == FERRY_OK) *device = q.device;
    return st;
}

static ferry_status_t ucx_mem_alloc(ferry_xport_t *xp, ferry_xport_mem_t *m) {
    if (m->type != FERRY_MEM_CUDA) return map_slot(xp, m, true, -1);
    int device = -1;
    ferry_status_t st = xcuda_alloc(&xp->err, m->size, &m->ptr);
    if (st == FERRY_OK && (st = cuda_device_of(xp, m->ptr, m->size, &device)) == FERRY_OK)
        st = map_slot(xp, m, true, device);
    if (st && m->ptr) {
        xcuda_free(m->ptr);
        m->ptr = NULL;
    }
    return st;
}

static ferry_status_t ucx_mem_register(ferry_xport_t *xp, ferry_xport_mem_t *m) {
    int device = -1;
    if (m->type == FERRY_MEM_CUDA) {
        ferry_status_t st = cuda_device_of(xp, m->ptr, m->size, &device);
        if (st) return st;
    }
    return map_slot(xp, m, false, device);
}

static void ucx_mem_deregister(ferry_xport_t *xp, ferry_xport_mem_t *m) {
    ucx_t *u = xp->backend;
    pthread_mutex_lock(&u->lock);
    __atomic_add_fetch(&u->gens[m->slot], 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&u->lock);
    ucx_stage_slot_ended(xp, m->slot); /* staging reads no more of it */
    pthread_mutex_lock(&u->lock);
    if (!u->slot_memh[m->slot]) { /* GPU memory only staging read: nothing of UCX's to park */
        if (m->allocated) xcuda_free(m->ptr);
        u->slot_used[m->slot] = 0;
        u->slot_ptr[m->slot] = NULL;
        pthread_mutex_unlock(&u->lock);
        return;
    }
    ucp_rkey_buffer_release(u->slot_rkey[m->slot]);
    /* UCX serves emulated gets of this memory from the progress thread,
     * after the generation check, with no way to tell when the last one is
     * done: the mapping (and memory UCX allocated) lives until the endpoint
     * ends. Caller-owned memory must stay valid as long (docs/transport.md). */
    bool parked = u->running &&
                  ferry_grow(xp->ctx, (void **)&u->parked, sizeof *u->parked, &u->cap_parked, u->nparked + 1) == 0;
    if (parked) u->parked[u->nparked++] = u->slot_memh[m->slot];
    else ucp_mem_unmap(u->context, u->slot_memh[m->slot]);
    if (m->allocated && m->type == FERRY_MEM_CUDA) { /* freed after its mapping, at the end if that is parked */
        if (parked && ferry_grow(xp->ctx, (void **)&u->parked_cuda, sizeof *u->parked_cuda, &u->cap_parked_cuda,
                                 u->nparked_cuda + 1) == 0)
            u->parked_cuda[u->nparked_cuda++] = m->ptr;
        else if (!parked)
            xcuda_free(m->ptr);
        /* else: out of memory to remember it; leaked rather than freed under a live mapping */
    }
    u->slot_used[m->slot] = 0;
    u->slot_memh[m->slot] = NULL;
    u->slot_rkey[m->slot] = NULL;
    u->slot_ptr[m->slot] = NULL;
    pthread_mutex_unlock(&u->lock);
}

typedef struct {
    uint8_t *p, *end;
} wbuf_t;

static bool w_bytes(wbuf_t *w, const void *b, size_t n) {
    if (n == 0) return true; /* b may be NULL (no rkey) */
    if ((size_t)(w->end - w->p) < n) return false;
    memcpy(w->p, b, n);
    w->p += n;
    return true;
}

static bool w_u(wbuf_t *w, uint64_t v, int bytes) {
    uint8_t b[8];
    ferry_put_le(b, v, bytes);
    return w_bytes(w, b, (size_t)bytes);
}

static ferry_status_t ucx_mem_pack(const ferry_xport_mem_t *m, uint8_t *body, size_t cap, size_t *len) {
    ucx_t *u = m->xp->backend;
    wbuf_t w = {body, body + cap};
    size_t rklen = u->stage_host && m->type == FERRY_MEM_HOST ? 0 : u->slot_rkey_len[m->slot];
    bool ok = w_u(&w, u->host, 8) && w_u(&w, u->pid, 4) && w_u(&w, u->address_len, 2) &&
              w_bytes(&w, u->address, u->address_len) && w_u(&w, m->slot, 4) &&
              w_u(&w, m->gen, 8) && w_u(&w, m->size, 8) && w_u(&w, m->type == FERRY_MEM_CUDA, 1) && w_u(&w, (uint64_t)(uintptr_t)m->ptr, 8) &&
              w_u(&w, rklen, 2) && w_bytes(&w, u->slot_rkey[m->slot], rklen) &&
              w_u(&w, (uint64_t)(uintptr_t)u->gens, 8) && w_u(&w, u->ctl_rkey_len, 2) &&
              w_bytes(&w, u->ctl_rkey, u->ctl_rkey_len);
    if (!ok || u->address_len > 0xffff)
        return ferry_fail(&m->xp->err, FERRY_ERR_LIMIT, "ucx: the descriptor does not fit in %zu bytes", cap);
    *len = (size_t)(w.p - body);
    return FERRY_OK;
}

typedef struct {
    const uint8_t *p, *end;
} rbuf_t;

static const uint8_t *r_bytes(rbuf_t *r, size_t n) {
    if ((size_t)(r->end - r->p) < n) return NULL;
    const uint8_t *at = r->p;
    r->p += n;
    return at;
}

static bool r_u(rbuf_t *r, int bytes, uint64_t *v) {
    const uint8_t *b = r_bytes(r, (size_t)bytes);
    if (!b) return false;
    *v = ferry_get_le(b, bytes);
    return true;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    (void)ep;
    (void)status;
    ucx_peer_t *p = arg;
    atomic_store_explicit(&p->lost, true, memory_order_release);
}

/* Whether the owner is known to be gone (UCX's error callback, or a local
 * owner's pidfd turning readable). */
bool ucx_peer_lost(ucx_peer_t *p) {
    if (atomic_load_explicit(&p->lost, memory_order_acquire)) return true;
    if (p->pidfd >= 0) {
        struct pollfd pf = {p->pidfd, POLLIN, 0};
        if (poll(&pf, 1, 0) > 0) atomic_store_explicit(&p->lost, true, memory_order_release);
    }
    return atomic_load_explicit(&p->lost, memory_order_acquire);
}

ferry_status_t ucx_peer_connect(ucx_t *u, ferry_ctx_t *ctx, const uint8_t *addr, size_t len, uint32_t local_pid,
                                ucx_peer_t **out, const char **why) {
    *why = "";
    int pidfd = -1;
    if (local_pid) {
        pidfd = (int)syscall(SYS_pidfd_open, (pid_t)local_pid, 0);
        if (pidfd < 0 && errno == ESRCH) {
            *why = "the process is gone";
            return FERRY_ERR_PEER_LOST;
        }
    }
    ucx_peer_t *p = ferry_calloc(ctx, 1, sizeof *p);
    if (!p) {
        if (pidfd >= 0) close(pidfd);
        *why = "out of memory";
        return FERRY_ERR_NO_MEMORY;
    }
    p->pidfd = pidfd;
    p->local = local_pid != 0;
    atomic_init(&p->lost, false);
    /* the mode follows from the host identity alone, which both ends of a
       pair see alike: UCX refuses a pair whose endpoints differ in it */
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .address = (const ucp_address_t *)addr,
                          .err_mode = p->local ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {.cb = on_ep_error, .arg = p}};
    ucs_status_t s = ucp_ep_create(u->worker, &ep, &p->ep);
    if (s != UCS_OK) {
        ucx_peer_free(ctx, p);
        *why = ucs_status_string(s);
        return FERRY_ERR_PEER_LOST;
    }
    p->id = XXH3_64bits(addr, len);
    *out = p;
    return FERRY_OK;
}

void ucx_peer_free(ferry_ctx_t *ctx, ucx_peer_t *p) {
    if (p->pidfd >= 0) close(p->pidfd);
    ferry_free(ctx, p);
}

/* The connection to an owner, made once and shared by its descriptors. */
static ferry_status_t get_peer(ferry_xport_t *xp, const uint8_t *addr, size_t len, uint32_t local_pid,
                               ucx_peer_t **out) {
    ucx_t *u = xp->backend;
    uint64_t id = XXH3_64bits(addr, len);
    for (ucx_peer_t *p = u->peers; p; p = p->next) {
        if (p->id == id && !ucx_peer_lost(p)) {
            *out = p;
            return FERRY_OK;
        }
    }
    const char *why;
    ferry_status_t st = ucx_peer_connect(u, xp->ctx, addr, len, local_pid, out, &why);
    if (st && local_pid) return ferry_fail(&xp->err, st, "ucx: connecting to the owner (pid %u): %s", local_pid, why);
    if (st) return ferry_fail(&xp->err, st, "ucx: connecting to the owner: %s", why);
    (*out)->next = u->peers;
    u->peers = *out;
    return FERRY_OK;
}

static void put_peer(ferry_xport_t *xp, ucx_peer_t *p) {
    ucx_t *u = xp->backend;
    if (--p->refs > 0) return;
    for (ucx_peer_t **pp = &u->peers; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    close_ep(u, p->ep);
    p->ep = NULL;
    if (p->pidfd >= 0) close(p->pidfd);
    p->pidfd = -1;
    atomic_store_explicit(&p->lost, true, memory_order_release);
    p->next = u->closed;
    u->closed = p;
}

/* Aborts everything in flight to a peer: a force-closed endpoint completes
 * its requests with errors, and the peer is not used again. */
void ucx_peer_abandon(ucx_t *u, ucx_peer_t *p) {
    atomic_store_explicit(&p->lost, true, memory_order_release);
    if (p->ep) {
        close_ep(u, p->ep);
        p->ep = NULL;
    }
}

/* Waits for UCX requests (NULL entries are done already). At the deadline,
 * or when the owner is known to be gone, the peer's endpoint is force-closed,
 * which fails the requests still in flight. Returns the first failure.
 * intr (NULL: none) is the caller's interrupt hook, asked every 100 ms; only
 * for requests whose landing memory outlives them (read_gen): when it asks
 * to stop, what is still in flight is handed back to UCX, which finishes it
 * in the background, and the peer stays as it is (force-closing its
 * endpoint would fail a reply the owner is sending, an assertion in UCX
 * 1.13 there). FERRY_ERR_INTERRUPTED then. */
static ferry_status_t wait_all(ferry_xport_t *xp, ucs_status_ptr_t *reqs, ucx_peer_t *const *peers, size_t n,
                               const ferry_intr_t *intr) {
    ucx_t *u = xp->backend;
    ferry_status_t st = FERRY_OK;
    double deadline = ferry_mono_s() + xp->timeout_ms / 1e3, tick = 0;
    for (size_t i = 0; i < n; i++) {
        ucx_peer_t *peer = peers[i];
        if (!reqs[i]) continue;
        if (UCS_PTR_IS_ERR(reqs[i])) {
            if (st == FERRY_OK) st = from_ucs(UCS_PTR_STATUS(reqs[i]));
            reqs[i] = NULL;
            continue;
        }
        ucs_status_t s;
        bool abandoned = false;
        double hard = 0;
        while ((s = ucp_request_check_status(reqs[i])) == UCS_INPROGRESS) {
            double now = ferry_mono_s();
            if (!abandoned && ferry_intr_due(intr, &tick)) {
                for (size_t k = i; k < n; k++) {
                    if (reqs[k] && UCS_PTR_IS_PTR(reqs[k])) ucp_request_free(reqs[k]); /* released once done */
                    reqs[k] = NULL;
                }
                return FERRY_ERR_INTERRUPTED;
            }
            if (!abandoned && (now > deadline || ucx_peer_lost(peer))) {
                if (st == FERRY_OK) st = ucx_peer_lost(peer) ? FERRY_ERR_PEER_LOST : FERRY_ERR_TIMEOUT;
                ucx_peer_abandon(u, peer); /* fails what UCX can fail */
                abandoned = true;
                hard = now + 1.0;
            } else if (abandoned && now > hard) {
                break; /* UCX cannot cancel it (no peer-failure mode): left to UCX, never waited on again */
            }
            ucp_worker_progress(u->worker);
        }
        if (s == UCS_INPROGRESS) {
            reqs[i] = NULL;
            continue;
        }
        if (s != UCS_OK && st == FERRY_OK) st = from_ucs(s);
        ucp_request_free(reqs[i]);
        reqs[i] = NULL;
    }
    for (size_t i = 0; i < n && st == FERRY_OK; i++)
        if (ucx_peer_lost(peers[i])) st = FERRY_ERR_PEER_LOST;
    return st;
}

/* Reads the owner's generation word of a registration. With an interrupt
 * hook the word lands in memory of the endpoint's: a read the hook cut
 * short may still land after this returns (the owner stopped, then went
 * on), so that memory is kept until the endpoint's end. */
static ferry_status_t read_gen(ferry_xport_t *xp, ucx_peer_t *peer, const ucx_rmem_t *b, uint32_t slot,
                               uint64_t *gen) {
    if (!peer->ep) return FERRY_ERR_PEER_LOST;
    ucx_t *u = xp->backend;
    const ferry_intr_t *intr = ferry_ctx_intr(xp->ctx);
    uint64_t *land = gen;
    if (intr) {
        if (ferry_grow(xp->ctx, (void **)&u->orphans, sizeof *u->orphans, &u->cap_orphans, u->norphans + 1) != 0 ||
            !(land = ferry_alloc(xp->ctx, sizeof *land)))
            return FERRY_ERR_NO_MEMORY;
    }
    ucp_request_param_t p = {.op_attr_mask = 0};
    ucs_status_ptr_t r = ucp_get_nbx(peer->ep, land, sizeof *land, b->ctl_addr + slot * sizeof(uint64_t), b->ctl_rkey,
                                     &p);
    ferry_status_t st = wait_all(xp, &r, &peer, 1, intr);
    if (land != gen) {
        if (st == FERRY_ERR_INTERRUPTED) {
            u->orphans[u->norphans++] = land;
        } else {
            *gen = *land;
            ferry_free(xp->ctx, land);
        }
    }
    return st;
}

static ferry_status_t ucx_rmem_unpack(ferry_xport_t *xp, const uint8_t *body, size_t len, ferry_xport_rmem_t *r) {
    rbuf_t rb = {body, body + len};
    uint64_t host, pid, alen, slot, gen, size, mem, addr, rklen, ctl_addr, crklen;
    const uint8_t *a = NULL, *rk = NULL, *crk = NULL;
    bool ok = r_u(&rb, 8, &host) && r_u(&rb, 4, &pid) && r_u(&rb, 2, &alen) && (a = r_bytes(&rb, (size_t)alen)) && r_u(&rb, 4, &slot) && r_u(&rb, 8, &gen) &&
              r_u(&rb, 8, &size) && r_u(&rb, 1, &mem) && r_u(&rb, 8, &addr) && r_u(&rb, 2, &rklen) && (rk = r_bytes(&rb, (size_t)rklen)) &&
              r_u(&rb, 8, &ctl_addr) && r_u(&rb, 2, &crklen) && (crk = r_bytes(&rb, (size_t)crklen)) && rb.p == rb.end;
    if (!ok || alen == 0 || slot >= UCX_SLOTS || size == 0 || size > SIZE_MAX || addr + size < addr || mem > 1 ||
        crklen == 0)
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT, "ucx descriptor: malformed body (%zu bytes)", len);
    ucx_peer_t *peer = NULL;
    ucx_t *u = xp->backend;
    ferry_status_t st = get_peer(xp, a, (size_t)alen, host == u->host ? (uint32_t)pid : 0, &peer);
    if (st) return st;
    peer->refs++;
    ucx_rmem_t *b = ferry_calloc(xp->ctx, 1, sizeof *b);
    if (!b) {
        put_peer(xp, peer);
        return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory unpacking a descriptor");
    }
    /* GPU memory is read with RMA only where both UCXs have CUDA support;
     * otherwise through the owner's staging */
    bool rma = rklen > 0 && (mem == 0 || u->cuda == UCX_CUDA_NATIVE);
    ucs_status_t s = rma ? ucp_ep_rkey_unpack(peer->ep, rk, &b->rkey) : UCS_OK;
    if (s == UCS_OK) s = ucp_ep_rkey_unpack(peer->ep, crk, &b->ctl_rkey);
    if (s != UCS_OK) {
        if (b->rkey) ucp_rkey_destroy(b->rkey);
        ferry_free(xp->ctx, b);
        put_peer(xp, peer);
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT, "ucx descriptor: rkey: %s", ucs_status_string(s));
    }
    b->ctl_addr = ctl_addr;
    r->peer = peer;
    r->slot = (uint32_t)slot;
    r->gen = gen;
    r->size = (size_t)size;
    r->remote_addr = addr;
    r->type = mem ? FERRY_MEM_CUDA : FERRY_MEM_HOST;
    r->backend = b;
    uint64_t now = 0;
    st = read_gen(xp, peer, b, r->slot, &now);
    if (st == FERRY_OK && now != gen) st = FERRY_ERR_STALE;
    if (st) {
        if (b->rkey) ucp_rkey_destroy(b->rkey);
        ucp_rkey_destroy(b->ctl_rkey);
        ferry_free(xp->ctx, b);
        put_peer(xp, peer);
        return ferry_fail(&xp->err, st, "ucx: registration %u of the owner: %s", r->slot,
                          st == FERRY_ERR_STALE         ? "has ended (stale descriptor)"
                          : st == FERRY_ERR_TIMEOUT     ? "no answer within the timeout"
                          : st == FERRY_ERR_INTERRUPTED ? "interrupted while waiting for the owner's answer"
                                                        : "the owner is unreachable or gone");
    }
    return FERRY_OK;
}

static void ucx_rmem_release(ferry_xport_t *xp, ferry_xport_rmem_t *r) {
    ucx_rmem_t *b = r->backend;
    if (b->rkey) ucp_rkey_destroy(b->rkey);
    ucp_rkey_destroy(b->ctl_rkey);
    ferry_free(xp->ctx, b);
    put_peer(xp, (ucx_peer_t *)r->peer);
}

static ferry_status_t ucx_rmem_check(ferry_xport_t *xp, const ferry_xport_rmem_t *r) {
    if (ucx_peer_lost(r->peer)) return FERRY_ERR_PEER_LOST;
    uint64_t now = 0;
    ferry_status_t st = read_gen(xp, (ucx_peer_t *)r->peer, (const ucx_rmem_t *)r->backend, r->slot, &now);
    if (st) return st;
    return now == r->gen ? FERRY_OK : FERRY_ERR_STALE;
}

/* A request in flight: what its wait needs to finish it. */
typedef struct {
    size_t n;
    bool put;
    ucs_status_ptr_t *reqs;
    ucx_peer_t **peers;
    ferry_xport_rmem_t **rmems;
    ucx_sreq_t *staged;       /* the runs that go through host staging, NULL if none */
} ucx_pending_t;

static void free_pending(ferry_xport_t *xp, ucx_pending_t *pd) {
    ferry_free(xp->ctx, pd->reqs);
    ferry_free(xp->ctx, pd->peers);
    ferry_free(xp->ctx, pd->rmems);
    ferry_free(xp->ctx, pd);
}

/* Issues every run and returns: the transfers proceed (the progress thread
 * drives them) until ferry_xport_req_wait finishes the request. */
static ferry_status_t ucx_transfer(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n, bool put,
                                   ferry_xport_req_t *req) {
    ucx_pending_t *pd = ferry_calloc(xp->ctx, 1, sizeof *pd);
    if (pd) {
        pd->reqs = ferry_calloc(xp->ctx, n ? n : 1, sizeof *pd->reqs);
        pd->peers = ferry_calloc(xp->ctx, n ? n : 1, sizeof *pd->peers);
        pd->rmems = ferry_calloc(xp->ctx, n ? n : 1, sizeof *pd->rmems);
    }
    if (!pd || !pd->reqs || !pd->peers || !pd->rmems) {
        if (pd) free_pending(xp, pd);
        return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory for UCX requests");
    }
    /* runs of GPU memory that one side's UCX cannot touch go through host
     * staging (gets only: nothing in ferry puts into GPU memory remotely) */
    bool *staged = NULL;
    size_t nstaged = 0;
    for (size_t i = 0; i < n; i++) {
        if (runs[i].len == 0 || !ucx_stage_needed(xp, &runs[i])) continue;
        if (put) {
            free_pending(xp, pd);
            ferry_free(xp->ctx, staged);
            return ferry_fail(&xp->err, FERRY_ERR_UNSUPPORTED,
                              "ucx: run %zu puts GPU memory that this UCX or the owner's cannot map (no CUDA "
                              "support); staging moves gets only", i);
        }
        if (!staged && !(staged = ferry_calloc(xp->ctx, n, sizeof *staged))) {
            free_pending(xp, pd);
            return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory for UCX requests");
        }
        staged[i] = true;
        nstaged++;
    }
    if (nstaged) {
        ferry_status_t st = ucx_stage_get(xp, runs, staged, n, &pd->staged);
        if (st) {
            ferry_free(xp->ctx, staged);
            free_pending(xp, pd);
            return st;
        }
    }
    pd->n = n;
    pd->put = put;
    for (size_t i = 0; i < n; i++) {
        const ferry_xport_run_t *run = &runs[i];
        pd->peers[i] = run->rmem->peer;
        pd->rmems[i] = run->rmem;
        if (staged && staged[i]) continue;
        const ucx_rmem_t *b = (const ucx_rmem_t *)run->rmem->backend;
        ucp_request_param_t p = {.op_attr_mask = 0};
        uint64_t raddr = run->rmem->remote_addr + run->remote_offset;
        ucp_ep_h ep = pd->peers[i]->ep;
        if (!ep) {
            pd->reqs[i] = UCS_STATUS_PTR(UCS_ERR_CONNECTION_RESET);
            continue;
        }
        pd->reqs[i] = run->len == 0 ? NULL
                      : put        ? ucp_put_nbx(ep, run->local, run->len, raddr, b->rkey, &p)
                                   : ucp_get_nbx(ep, run->local, run->len, raddr, b->rkey, &p);
    }
    ferry_free(xp->ctx, staged);
    req->backend = pd;
    req->done = false;
    return FERRY_OK;
}

static ferry_status_t ucx_req_wait(ferry_xport_t *xp, ferry_xport_req_t *req, int timeout_ms) {
    ucx_pending_t *pd = req->backend;
    uint32_t saved = xp->timeout_ms;
    if (timeout_ms >= 0) xp->timeout_ms = timeout_ms > 0 ? (uint32_t)timeout_ms : 1;
    /* not interruptible: the bytes land in the caller's buffers, which a
     * request handed back to UCX could still write after this returns (the
     * caller asks its hook between requests) */
    ferry_status_t st = wait_all(xp, pd->reqs, pd->peers, pd->n, NULL);
    bool said = false; /* the error's detail is on the endpoint already */
    if (pd->staged) { /* waited even after a failure: its buffers are ours until then */
        ferry_status_t s2 = ucx_stage_wait(xp, pd->staged, ferry_mono_s() + xp->timeout_ms / 1e3);
        pd->staged = NULL;
        if (st == FERRY_OK && s2 != FERRY_OK) {
            st = s2;
            said = true;
        }
    }
    /* a put request completes when its local buffer is free again; the data
     * is in the owner's memory only after a flush of the endpoint */
    for (size_t i = 0; pd->put && st == FERRY_OK && i < pd->n; i++) {
        ucx_peer_t *peer = pd->peers[i];
        if (i > 0 && peer == pd->peers[i - 1]) continue;
        ucp_request_param_t fp = {.op_attr_mask = 0};
        ucs_status_ptr_t f = peer->ep ? ucp_ep_flush_nbx(peer->ep, &fp) : UCS_STATUS_PTR(UCS_ERR_CONNECTION_RESET);
        st = wait_all(xp, &f, &peer, 1, NULL);
    }
    xp->timeout_ms = saved;
    for (size_t i = 0; i < pd->n && st == FERRY_OK; i++) {
        if (ucx_peer_lost(pd->peers[i])) st = FERRY_ERR_PEER_LOST;
        if (st == FERRY_OK && (i == 0 || pd->rmems[i] != pd->rmems[i - 1])) st = ucx_rmem_check(xp, pd->rmems[i]);
    }
    if (st != FERRY_OK && !said) { /* staging said what failed already */
        if (st == FERRY_ERR_STALE) ferry_fail(&xp->err, st, "ucx: a registration ended during the transfer");
        else if (st == FERRY_ERR_PEER_LOST) ferry_fail(&xp->err, st, "ucx: the owner of the memory is gone");
        else if (st == FERRY_ERR_TIMEOUT)
            ferry_fail(&xp->err, st, "ucx: the transfer did not finish within %d ms",
                       timeout_ms >= 0 ? timeout_ms : (int)xp->timeout_ms);
        else if (st == FERRY_ERR_INTERRUPTED)
            ferry_fail(&xp->err, st, "ucx: interrupted while checking the registration after the transfer");
        else ferry_fail(&xp->err, st, "ucx: the transfer failed");
    }
    free_pending(xp, pd);
    req->backend = NULL;
    req->status = st;
    req->done = true;
    return st;
}

static ferry_status_t ucx_progress(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    ucp_worker_progress(u->worker);
    return FERRY_OK;
}

const xport_ops_t xport_ucx_ops = {
    .name = "ucx",
    .init = ucx_init,
    .fini = ucx_fini,
    .mem_alloc = ucx_mem_alloc,
    .mem_register = ucx_mem_register,
    .mem_deregister = ucx_mem_deregister,
    .mem_pack = ucx_mem_pack,
    .rmem_unpack = ucx_rmem_unpack,
    .rmem_release = ucx_rmem_release,
    .rmem_check = ucx_rmem_check,
    .transfer = ucx_transfer,
    .progress = ucx_progress,
    .quiesce = ucx_quiesce,
    .req_wait = ucx_req_wait,
};
