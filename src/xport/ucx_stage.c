/* Host staging of GPU memory for the UCX transport (ucx_internal.h).
 *
 * Used where one side's UCX cannot touch GPU memory (no CUDA support in it,
 * or FERRY_UCX_CUDA=staged): a reader asks the owner for each run with an
 * active message (REQ, carrying the reader's worker address); the owner's
 * progress thread checks the run against the registration (slot,
 * generation, range), copies it to the host in chunks of STAGE_CHUNK bytes
 * through STAGE_BUFS pinned buffers and sends every chunk back (DATA,
 * rendezvous) on an endpoint of its own to that reader, as soon as its copy
 * has landed. A free buffer serves the reader holding the fewest, so a slow
 * reader does not keep them all while others wait. The reader receives every chunk into one of its STAGE_BUFS
 * bounce buffers, then copies it to its destination (to the GPU on a stream
 * of its own). So the owner's copy of chunk k+1, the wire's chunk k and the
 * reader's copy of chunk k-1 overlap. An error (a registration that ended,
 * a range outside it) comes back as a DATA message with the status and no
 * bytes.
 *
 * Bytes reach the caller's memory only from the bounce buffers, in
 * ucx_stage_wait: once a wait has returned, nothing of its request lands
 * (receives still in flight land in bounce buffers and are dropped).
 *
 * The owner's endpoints to readers belong to ferry (not UCX's reply
 * endpoints, which UCX may destroy under us): a reader that dies or fails a
 * send is marked lost, its queued work dropped and its chunks reclaimed.
 *
 * Threads: UCX callbacks (on the progress thread or a waiting caller) only
 * record what happened, under the stage lock. CUDA work runs under that
 * lock; UCX calls never do (a callback may need the lock while UCX holds
 * its worker's). The owner's work runs on the progress thread, the reader's
 * in ucx_stage_wait. A thread's CUDA context is put back as it was (none
 * included) after work on another device.
 *
 * Memory: each endpoint takes STAGE_BUFS x STAGE_CHUNK bytes of pinned host
 * memory (plain memory without CUDA) for each role it stages in, on first
 * use, until it ends.
 *
 * Rate: FERRY_UCX_STAGE_RATE (bytes per second) caps what a reader
 * receives through staging: it starts each chunk's receive (which is when
 * a rendezvous chunk crosses the wire) no sooner than the rate allows, so
 * a link is left room for other traffic, or a slower link is emulated
 * (docs/transport.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/bytes.h"
#include "common/cuda.h"
#include "xport/cuda_ipc.h"
#include "xport/ucx_internal.h"

#define STAGE_CHUNK (8u << 20)
#define STAGE_BUFS 4
#define STAGE_MAX_DEVICES 64
#define STAGE_MAX_JOBS 65536   /* queued runs of all readers; more are dropped (their readers time out) */
#define STAGE_ADDR_MAX 4096    /* a reader's worker address */
enum { AM_STAGE_REQ = 7, AM_STAGE_DATA = 8 };
#define REQ_HDR 40  /* req_id(8) run(4) slot(4) gen(8) offset(8) len(8); data: host(8) pid(4) worker address */
#define DATA_HDR 32 /* req_id(8) run(4) status(4) off(8) len(8) */

#ifndef FERRY_CUDA
typedef void *cudaEvent_t;
typedef void *cudaStream_t;
#endif

/* ---- state ---------------------------------------------------------------- */

typedef struct job {
    ucx_peer_t *r;            /* the reader; NULL until the progress thread connects */
    uint64_t addr_id;
    uint64_t host;
    uint32_t pid;
    uint64_t req_id, gen, off, len, done;
    uint32_t run, slot;
    int32_t status;           /* not FERRY_OK: replied with no bytes */
    size_t addr_len;
    struct job *next;
    uint8_t addr[];           /* the reader's worker address */
} job_t;

typedef enum { OC_FREE, OC_D2H, OC_READY, OC_SEND } oc_state_t;

typedef struct {
    oc_state_t state;
    uint64_t seq;             /* bumped per use: a late completion of a reclaimed send is ignored */
    uint8_t *buf;             /* pinned */
    const void *data;         /* what goes out: buf, or host memory of the registration */
    size_t len;
    uint32_t slot;
    ucx_peer_t *r;
    cudaEvent_t ev;           /* made on the device of the copy it marks */
    int ev_device;
    uint8_t hdr[DATA_HDR];    /* lives until the send completes */
} ochunk_t;

typedef struct {
    struct ucx_stage *st;
    int idx;
    uint64_t seq;
} send_tok_t;

typedef struct {
    bool staged;
    uint8_t *local;
    size_t len, landed;
    int device;               /* of local, -1: host memory */
    ucx_peer_t *peer;
    uint8_t *seen;            /* a bit per chunk: each lands once */
    uint8_t hdr[REQ_HDR];
} srun_t;

struct ucx_sreq {
    struct ucx_stage *st;
    uint64_t id;
    size_t n;
    srun_t *runs;
    ferry_status_t status;
    uint32_t busy;            /* UCX operations and landings still to come */
    bool abandoned;           /* its wait returned: nothing more lands; freed once nothing is busy */
    struct ucx_sreq *next;
};

/* RX_ORPHAN: a receive in flight when its request was forced to end (a
 * lost or silent owner); it keeps its bounce buffer, which UCX may still
 * write, until the endpoint's end. */
typedef enum { RX_WAIT, RX_RECV, RX_BOUNCED, RX_H2D, RX_TEMP, RX_DONE, RX_ORPHAN } rx_state_t;

typedef struct rx {
    struct ucx_stage *st;
    ucx_sreq_t *sr;
    uint32_t run;
    uint64_t off;
    size_t len;
    void *desc;               /* UCX's data descriptor (RX_WAIT) */
    void *temp;               /* eager bytes copied out (RX_TEMP) */
    int bounce;               /* bounce buffer index, -1: none */
    uint8_t *orphan_buf;      /* RX_ORPHAN: the bounce buffer it took along */
    rx_state_t state;
    struct rx *next;
} rx_t;

typedef struct {
    uint8_t *buf;
    bool used;
    cudaEvent_t ev;
    int ev_device;
} bounce_t;

struct ucx_stage {
    ucx_t *u;
    pthread_mutex_t lock;
    uint64_t next_id;
    job_t *jobs, *jobs_tail;
    size_t njobs;
    ucx_peer_t *readers;      /* the owner's connections to readers: progress thread only */
    ochunk_t oc[STAGE_BUFS];
    bool oc_ready, oc_pinned;
    bounce_t bounce[STAGE_BUFS];
    bool bounce_ready, bounce_pinned;
    ucx_sreq_t *reqs;
    rx_t *rxs;
    rx_t *orphans;
    uint8_t *who;             /* this endpoint's identity (host, pid, worker address): every REQ's data */
    size_t who_len;
    double rate;              /* FERRY_UCX_STAGE_RATE: bytes per second received at most; 0: no cap */
    double pace_at;           /* with a rate: when the next chunk's receive may start (ferry_mono_s) */
    cudaStream_t ostream[STAGE_MAX_DEVICES], rstream[STAGE_MAX_DEVICES];
};

static void put_u(uint8_t *p, uint64_t v, int n) { ferry_put_le(p, v, n); }
static uint64_t get_u(const uint8_t *p, int n) { return ferry_get_le(p, n); }

static void wake(ucx_t *u) {
    char b = 1;
    ssize_t w = write(u->wake[1], &b, 1); /* non-blocking: a full pipe wakes the thread anyway */
    (void)w;
}

/* ---- CUDA pieces (without CUDA no GPU memory is ever registered or
 * recognized, so only the host fallbacks are reached) ---------------------- */

#ifdef FERRY_CUDA
typedef CUcontext saved_ctx_t;
static saved_ctx_t ctx_save(void) {
    CUcontext c = NULL;
    if (ferry_cuda_loaded()) ferry_cuda_driver()->CtxGetCurrent(&c);
    return c;
}
static void ctx_restore(saved_ctx_t c) {
    if (ferry_cuda_loaded()) ferry_cuda_driver()->CtxSetCurrent(c);
}

/* Allocates STAGE_BUFS buffers of STAGE_CHUNK bytes (bufs[i * stride]),
 * pinned on device's context where CUDA is loaded (device < 0: the first
 * one), else plain. Buffers allocated by an earlier, partly failed call are
 * kept. */
static bool alloc_bufs(uint8_t **bufs, size_t stride, int device, bool *pinned) {
    bool cuda = ferry_cuda_loaded();
    saved_ctx_t prev = ctx_save();
    if (cuda && cudaSetDevice(device >= 0 ? device : 0) != cudaSuccess) cuda = false;
    bool ok = true;
    for (int i = 0; i < STAGE_BUFS && ok; i++) {
        uint8_t **b = (uint8_t **)((char *)bufs + i * stride);
        if (*b) continue;
        if (cuda) ok = cudaHostAlloc((void **)b, STAGE_CHUNK, cudaHostAllocPortable) == cudaSuccess;
        else ok = posix_memalign((void **)b, 4096, STAGE_CHUNK) == 0;
    }
    if (!ok) cudaGetLastError();
    ctx_restore(prev);
    *pinned = cuda;
    return ok;
}

static void free_buf(uint8_t *buf, bool pinned, cudaEvent_t ev) {
    if (buf && pinned) cudaFreeHost(buf);
    else free(buf);
    if (ev) cudaEventDestroy(ev);
}

static cudaStream_t stream_of(cudaStream_t *streams, int device) {
    if (device < 0 || device >= STAGE_MAX_DEVICES) return NULL;
    if (!streams[device]) cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking);
    return streams[device];
}

/* Enqueues a copy on device's stream and marks its end with *ev (remade on
 * that device when it was made on another: an event records only on its
 * own device's streams). */
static bool copy_async(cudaStream_t *streams, int device, void *dst, const void *src, size_t len, bool to_host,
                       cudaEvent_t *ev, int *ev_device) {
    saved_ctx_t prev = ctx_save();
    bool ok = cudaSetDevice(device) == cudaSuccess;
    if (ok && (!*ev || *ev_device != device)) {
        if (*ev) cudaEventDestroy(*ev);
        *ev = NULL;
        ok = cudaEventCreateWithFlags(ev, cudaEventDisableTiming) == cudaSuccess;
        *ev_device = device;
    }
    cudaStream_t s = ok ? stream_of(streams, device) : NULL;
    ok = s && cudaMemcpyAsync(dst, src, len, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s) ==
                  cudaSuccess &&
         cudaEventRecord(*ev, s) == cudaSuccess;
    if (!ok) cudaGetLastError();
    ctx_restore(prev);
    return ok;
}

/* 1: done, 0: in flight, -1: failed */
static int event_done(cudaEvent_t ev) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) return 0;
    cudaGetLastError();
    return -1;
}

static void event_sync(cudaEvent_t ev) {
    if (ev && cudaEventSynchronize(ev) != cudaSuccess) cudaGetLastError();
}

static bool copy_sync_to_device(int device, void *dst, const void *src, size_t len) {
    saved_ctx_t prev = ctx_save();
    /* waited for: from pageable memory cudaMemcpy returns once the bytes are
       staged, before they land, and the streams that read them next do not
       wait for the default one */
    bool ok = cudaSetDevice(device) == cudaSuccess && cudaMemcpy(dst, src, len, cudaMemcpyHostToDevice) == cudaSuccess &&
              cudaStreamSynchronize(0) == cudaSuccess;
    if (!ok) cudaGetLastError();
    ctx_restore(prev);
    return ok;
}

static int device_of(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return a.device;
}

static void streams_destroy(cudaStream_t *streams) {
    for (int i = 0; i < STAGE_MAX_DEVICES; i++)
        if (streams[i]) cudaStreamDestroy(streams[i]);
}
#else
static bool alloc_bufs(uint8_t **bufs, size_t stride, int device, bool *pinned) {
    (void)device;
    *pinned = false;
    for (int i = 0; i < STAGE_BUFS; i++) {
        uint8_t **b = (uint8_t **)((char *)bufs + i * stride);
        if (!*b && posix_memalign((void **)b, 4096, STAGE_CHUNK) != 0) return false;
    }
    return true;
}
static void free_buf(uint8_t *buf, bool pinned, cudaEvent_t ev) {
    (void)pinned, (void)ev;
    free(buf);
}
static bool copy_async(cudaStream_t *streams, int device, void *dst, const void *src, size_t len, bool to_host,
                       cudaEvent_t *ev, int *ev_device) {
    (void)streams, (void)device, (void)dst, (void)src, (void)len, (void)to_host, (void)ev, (void)ev_device;
    return false;
}
static int event_done(cudaEvent_t ev) {
    (void)ev;
    return -1;
}
static void event_sync(cudaEvent_t ev) { (void)ev; }
static bool copy_sync_to_device(int device, void *dst, const void *src, size_t len) {
    (void)device, (void)dst, (void)src, (void)len;
    return false;
}
static int device_of(const void *p) {
    (void)p;
    return -1;
}
static void streams_destroy(cudaStream_t *streams) { (void)streams; }
#endif

/* ---- owner ---------------------------------------------------------------- */

/* A reader's REQ (a callback: it only queues the job). Everything in it is
 * checked against the registration before a byte is read. */
static ucs_status_t on_req(void *arg, const void *header, size_t hlen, void *data, size_t len,
                           const ucp_am_recv_param_t *param) {
    ferry_xport_t *xp = arg;
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    if (hlen != REQ_HDR || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || len < 14) return UCS_OK; /* dropped */
    const uint8_t *d = data;
    size_t alen = (size_t)get_u(d + 12, 2);
    if (alen == 0 || alen > STAGE_ADDR_MAX || 14 + alen != len) return UCS_OK;
    job_t *j = ferry_calloc(xp->ctx, 1, sizeof *j + alen);
    if (!j) return UCS_OK; /* the reader times out */
    const uint8_t *h = header;
    j->req_id = get_u(h, 8);
    j->run = (uint32_t)get_u(h + 8, 4);
    j->slot = (uint32_t)get_u(h + 12, 4);
    j->gen = get_u(h + 16, 8);
    j->off = get_u(h + 24, 8);
    j->len = get_u(h + 32, 8);
    j->host = get_u(d, 8);
    j->pid = (uint32_t)get_u(d + 8, 4);
    j->addr_len = alen;
    memcpy(j->addr, d + 14, alen);
    j->addr_id = XXH3_64bits(j->addr, alen);
    j->status = FERRY_OK;
    pthread_mutex_lock(&u->lock);
    if (j->slot >= UCX_SLOTS || !u->slot_used[j->slot] ||
        __atomic_load_n(&u->gens[j->slot], __ATOMIC_ACQUIRE) != j->gen)
        j->status = FERRY_ERR_STALE;
    else if (j->len == 0 || j->off > u->slot_size[j->slot] || j->len > u->slot_size[j->slot] - j->off)
        j->status = FERRY_ERR_INVALID_ARGUMENT;
    pthread_mutex_unlock(&u->lock);
    pthread_mutex_lock(&st->lock);
    bool full = st->njobs >= STAGE_MAX_JOBS;
    if (!full) {
        if (st->jobs_tail) st->jobs_tail->next = j;
        else st->jobs = j;
        st->jobs_tail = j;
        st->njobs++;
    }
    pthread_mutex_unlock(&st->lock);
    if (full) ferry_free(xp->ctx, j);
    wake(u);
    return UCS_OK;
}

/* The owner's endpoint to the reader a job came from (progress thread,
 * outside callbacks); NULL if it cannot connect. */
static ucx_peer_t *reader_of(ferry_xport_t *xp, const job_t *j) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    for (ucx_peer_t *r = st->readers; r; r = r->next)
        if (r->id == j->addr_id && !ucx_peer_lost(r)) return r;
    ucx_peer_t *r = NULL;
    const char *why;
    if (ucx_peer_connect(u, xp->ctx, j->addr, j->addr_len, j->host == u->host ? j->pid : 0, &r, &why) != FERRY_OK)
        return NULL;
    r->next = st->readers;
    st->readers = r;
    return r;
}

static void on_chunk_sent(void *request, ucs_status_t status, void *user_data) {
    send_tok_t *t = user_data;
    ucx_stage_t *st = t->st;
    pthread_mutex_lock(&st->lock);
    ochunk_t *c = &st->oc[t->idx];
    if (c->seq == t->seq) { /* else reclaimed already (its reader was lost) */
        if (status != UCS_OK && c->r) atomic_store_explicit(&c->r->lost, true, memory_order_release);
        c->state = OC_FREE;
        c->r = NULL;
    }
    pthread_mutex_unlock(&st->lock);
    ucp_request_free(request);
    wake(st->u); /* the next piece, from the progress thread */
    free(t);
}

static void pop_job(ferry_xport_t *xp, ucx_stage_t *st, job_t *prev, job_t *j) {
    if (prev) prev->next = j->next;
    else st->jobs = j->next;
    if (st->jobs_tail == j) st->jobs_tail = prev;
    st->njobs--;
    ferry_free(xp->ctx, j);
}

/* Fills chunk c with the next piece of job j (or its error), under the lock. */
static void next_piece(ferry_xport_t *xp, ucx_stage_t *st, ochunk_t *c, job_t *j) {
    ucx_t *u = xp->backend;
    if (j->status == FERRY_OK && __atomic_load_n(&u->gens[j->slot], __ATOMIC_ACQUIRE) != j->gen)
        j->status = FERRY_ERR_STALE; /* ended since: its memory may be gone */
    size_t piece = 0;
    c->seq++;
    if (j->status == FERRY_OK) {
        piece = j->len - j->done < STAGE_CHUNK ? (size_t)(j->len - j->done) : STAGE_CHUNK;
        const uint8_t *src = u->slot_ptr[j->slot] + j->off + j->done;
        int device = u->slot_device[j->slot];
        bool pinned = false;
        if (device < 0) { /* host memory: sent from where it is */
            c->data = src;
            c->state = OC_READY;
        } else if (!st->oc_ready && !(st->oc_ready = alloc_bufs(&st->oc[0].buf, sizeof st->oc[0], device, &pinned))) {
            j->status = FERRY_ERR_NO_MEMORY;
            st->oc_pinned |= pinned;
        } else if (st->oc_pinned |= pinned, !copy_async(st->ostream, device, c->buf, src, piece, true, &c->ev,
                                                        &c->ev_device)) {
            j->status = FERRY_ERR_IO;
        } else {
            c->data = c->buf;
            c->state = OC_D2H;
        }
    }
    if (j->status != FERRY_OK) piece = 0;
    put_u(c->hdr, j->req_id, 8);
    put_u(c->hdr + 8, j->run, 4);
    put_u(c->hdr + 12, (uint32_t)j->status, 4);
    put_u(c->hdr + 16, j->done, 8);
    put_u(c->hdr + 24, piece, 8);
    c->len = piece;
    c->slot = j->slot;
    c->r = j->r;
    if (j->status != FERRY_OK) {
        c->data = NULL;
        c->state = OC_READY;
        j->done = j->len;
    } else {
        j->done += piece;
    }
}

/* The first job whose reader is connected (the others wait for the next
 * pump), or NULL. Under the lock. */
static job_t *first_job(ucx_stage_t *st) {
    job_t *j = st->jobs;
    while (j && !j->r) j = j->next;
    return j;
}

/* The job a free chunk serves next, under the lock: the first (each
 * reader's jobs in order) of a reader holding the fewest chunks in flight,
 * so that a reader that takes its chunks slowly (FERRY_UCX_STAGE_RATE, a
 * slow link) holds at most its share of the chunks while others wait.
 * Looks at the first JOB_SCAN jobs; *prev gets the one before it. */
#define JOB_SCAN 256
static job_t *pick_job(ucx_stage_t *st, job_t **prev) {
    job_t *best = NULL, *best_prev = NULL, *p = NULL;
    int best_n = STAGE_BUFS + 1, seen = 0;
    for (job_t *j = st->jobs; j && seen < JOB_SCAN && best_n > 0; p = j, j = j->next, seen++) {
        if (!j->r) continue; /* not connected yet: the next pump */
        int n = 0;
        for (int i = 0; i < STAGE_BUFS; i++) n += st->oc[i].state != OC_FREE && st->oc[i].r == j->r;
        if (n < best_n) best = j, best_prev = p, best_n = n;
    }
    *prev = best_prev;
    return best;
}

bool ucx_stage_pump_owner(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    if (!st) return false;
    /* connect to the readers of new jobs (UCX calls: not under the lock) */
    pthread_mutex_lock(&st->lock);
    job_t *fresh = NULL;
    for (job_t *j = st->jobs; j && !fresh; j = j->next)
        if (!j->r) fresh = j;
    pthread_mutex_unlock(&st->lock);
    while (fresh) { /* only this thread sets r or removes jobs: fresh stays valid */
        ucx_peer_t *r = reader_of(xp, fresh);
        pthread_mutex_lock(&st->lock);
        fresh->r = r;
        if (!r) fresh->status = FERRY_ERR_PEER_LOST; /* nobody to answer */
        job_t *next = NULL;
        for (job_t *j = fresh->next; j && !next; j = j->next)
            if (!j->r) next = j;
        for (job_t *j = fresh->next; j; j = j->next) /* same reader: same endpoint */
            if (!j->r && j->addr_id == fresh->addr_id && r) j->r = r;
        pthread_mutex_unlock(&st->lock);
        fresh = next;
    }
    ochunk_t *send[STAGE_BUFS];
    send_tok_t *toks[STAGE_BUFS];
    int ns = 0;
    bool busy = false;
    pthread_mutex_lock(&st->lock);
    /* work for readers that are gone is dropped, their chunks reclaimed */
    for (job_t *j = st->jobs, *prev = NULL, *next; j; j = next) {
        next = j->next;
        if ((j->status == FERRY_ERR_PEER_LOST && !j->r) || (j->r && ucx_peer_lost(j->r))) pop_job(xp, st, prev, j);
        else prev = j;
    }
    for (int i = 0; i < STAGE_BUFS; i++) {
        ochunk_t *c = &st->oc[i];
        if (c->state == OC_SEND && c->r && ucx_peer_lost(c->r)) {
            c->seq++; /* its send may never complete (UCX keeps the request) */
            c->state = OC_FREE;
            c->r = NULL;
        }
    }
    for (int i = 0; i < STAGE_BUFS; i++) {
        ochunk_t *c = &st->oc[i];
        if (c->state == OC_D2H) {
            int d = event_done(c->ev);
            if (d < 0) { /* the copy failed: the reader gets an error instead */
                put_u(c->hdr + 12, (uint32_t)FERRY_ERR_IO, 4);
                put_u(c->hdr + 24, 0, 8);
                c->len = 0;
                c->data = NULL;
            }
            if (d != 0) c->state = OC_READY;
        }
        job_t *jprev = NULL, *j = c->state == OC_FREE ? pick_job(st, &jprev) : first_job(st);
        if (c->state == OC_FREE && j) {
            next_piece(xp, st, c, j);
            if (j->done == j->len) pop_job(xp, st, jprev, j);
        }
        if (c->state == OC_READY) {
            send_tok_t *t = malloc(sizeof *t);
            if (!t) { /* retried on the next pump */
                busy = true;
                continue;
            }
            *t = (send_tok_t){st, i, c->seq};
            c->state = OC_SEND;
            toks[ns] = t;
            send[ns++] = c;
        }
        busy |= c->state == OC_D2H || (c->state == OC_FREE && j); /* to poll; sends complete by wake-up */
    }
    pthread_mutex_unlock(&st->lock);
    for (int i = 0; i < ns; i++) {
        ochunk_t *c = send[i];
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                                 UCP_OP_ATTR_FIELD_FLAGS,
                                 .cb.send = on_chunk_sent,
                                 .user_data = toks[i],
                                 .flags = c->len ? UCP_AM_SEND_FLAG_RNDV : 0};
        ucs_status_ptr_t r = ucp_am_send_nbx(c->r->ep, AM_STAGE_DATA, c->hdr, DATA_HDR, c->data, c->len, &p);
        if (UCS_PTR_IS_PTR(r)) continue;
        pthread_mutex_lock(&st->lock); /* done already, or failed */
        if (c->seq == toks[i]->seq) {
            if (UCS_PTR_IS_ERR(r)) atomic_store_explicit(&c->r->lost, true, memory_order_release);
            c->state = OC_FREE;
            c->r = NULL;
        }
        pthread_mutex_unlock(&st->lock);
        free(toks[i]);
    }
    return busy || ns > 0; /* a send that completed at once freed its chunk */
}

void ucx_stage_slot_ended(ferry_xport_t *xp, uint32_t slot) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    if (!st) return;
    pthread_mutex_lock(&st->lock);
    for (int i = 0; i < STAGE_BUFS; i++)
        if (st->oc[i].state == OC_D2H && st->oc[i].slot == slot) event_sync(st->oc[i].ev);
    pthread_mutex_unlock(&st->lock);
}

/* ---- reader --------------------------------------------------------------- */

static ucx_sreq_t *find_req(ucx_stage_t *st, uint64_t id) {
    for (ucx_sreq_t *r = st->reqs; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

static void fail_req(ucx_sreq_t *sr, ferry_status_t s) {
    if (sr->status == FERRY_OK) sr->status = s;
}

/* Marks an rx finished (its bytes landed or it failed), under the lock. */
static void rx_finish(rx_t *x, bool landed) {
    ucx_stage_t *st = x->st;
    if (landed) x->sr->runs[x->run].landed += x->len;
    if (x->bounce >= 0) st->bounce[x->bounce].used = false;
    x->bounce = -1;
    x->state = RX_DONE;
    x->sr->busy--;
}

/* Whether a DATA chunk is one the request asked for and has not had. */
static bool chunk_expected(srun_t *r, uint64_t off, uint64_t n) {
    if (!r->staged || off % STAGE_CHUNK != 0 || off >= r->len) return false;
    uint64_t want = r->len - off < STAGE_CHUNK ? r->len - off : STAGE_CHUNK;
    uint64_t k = off / STAGE_CHUNK;
    if (n != want || (r->seen[k / 8] >> (k % 8) & 1)) return false;
    r->seen[k / 8] |= (uint8_t)(1u << (k % 8));
    return true;
}

static ucs_status_t on_data(void *arg, const void *header, size_t hlen, void *data, size_t len,
                            const ucp_am_recv_param_t *param) {
    ferry_xport_t *xp = arg;
    ucx_stage_t *st = ((ucx_t *)xp->backend)->stage;
    if (hlen != DATA_HDR) return UCS_OK;
    const uint8_t *h = header;
    uint64_t id = get_u(h, 8), off = get_u(h + 16, 8), n = get_u(h + 24, 8);
    uint32_t run = (uint32_t)get_u(h + 8, 4);
    int32_t status = (int32_t)get_u(h + 12, 4);
    bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
    ucs_status_t keep = UCS_OK;
    pthread_mutex_lock(&st->lock);
    ucx_sreq_t *sr = find_req(st, id);
    if (sr && rndv && run < sr->n && ucx_peer_lost(sr->runs[run].peer)) {
        keep = UCS_INPROGRESS; /* from a dead owner: kept, not answered (see DEAD_OWNERS) */
        goto out;
    }
    if (!sr || sr->abandoned || sr->status != FERRY_OK) goto out; /* dropped */
    if (status != FERRY_OK) {
        fail_req(sr, status == FERRY_ERR_STALE || status == FERRY_ERR_INVALID_ARGUMENT || status == FERRY_ERR_IO ||
                             status == FERRY_ERR_NO_MEMORY
                         ? (ferry_status_t)status
                         : FERRY_ERR_CORRUPT);
        goto out;
    }
    if (run >= sr->n || n != len || !chunk_expected(&sr->runs[run], off, n)) {
        fail_req(sr, FERRY_ERR_CORRUPT); /* not what was asked for */
        goto out;
    }
    rx_t *x = ferry_calloc(xp->ctx, 1, sizeof *x);
    void *temp = NULL;
    if (!x || (!rndv && !(temp = ferry_alloc(xp->ctx, n)))) {
        ferry_free(xp->ctx, x);
        fail_req(sr, FERRY_ERR_NO_MEMORY);
        goto out;
    }
    *x = (rx_t){.st = st, .sr = sr, .run = run, .off = off, .len = (size_t)n, .bounce = -1};
    sr->busy++;
    if (rndv) { /* received later, from ucx_stage_wait (no UCX call in a callback) */
        x->desc = data;
        x->state = RX_WAIT;
        keep = UCS_INPROGRESS;
    } else { /* eager: valid only during this call */
        memcpy(temp, data, (size_t)n);
        x->temp = temp;
        x->state = RX_TEMP;
    }
    x->next = st->rxs;
    st->rxs = x;
out:
    pthread_mutex_unlock(&st->lock);
    return keep;
}

static void on_req_sent(void *request, ucs_status_t status, void *user_data) {
    ucx_sreq_t *sr = user_data;
    pthread_mutex_lock(&sr->st->lock);
    if (status != UCS_OK) fail_req(sr, FERRY_ERR_PEER_LOST);
    sr->busy--;
    pthread_mutex_unlock(&sr->st->lock);
    ucp_request_free(request);
}

static void on_recv_done(void *request, ucs_status_t status, size_t length, void *user_data) {
    rx_t *x = user_data;
    pthread_mutex_lock(&x->st->lock);
    if (x->state == RX_ORPHAN) { /* its request is gone */
    } else if (status != UCS_OK || length != x->len) {
        fail_req(x->sr, status == UCS_OK ? FERRY_ERR_CORRUPT : FERRY_ERR_PEER_LOST);
        rx_finish(x, false);
    } else {
        x->state = RX_BOUNCED; /* copied out by the next pump */
    }
    pthread_mutex_unlock(&x->st->lock);
    ucp_request_free(request);
}

/* The reader's work, from ucx_stage_wait: copies landed bounces to their
 * destinations (nothing of a request whose wait returned), retires
 * finished copies, starts the receives that have a bounce buffer (no
 * sooner than the rate allows). Returns the seconds until the rate lets
 * the next waiting chunk start (0: none waits for the rate). */
static double pump_reader(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    rx_t *start[STAGE_BUFS];
    int ns = 0;
    double now = st->rate > 0 ? ferry_mono_s() : 0, paced = 0;
    pthread_mutex_lock(&st->lock);
    for (rx_t **pp = &st->rxs; *pp;) {
        rx_t *x = *pp;
        srun_t *r = x->state == RX_DONE ? NULL : &x->sr->runs[x->run];
        bool dead = r && (x->sr->abandoned || x->sr->status != FERRY_OK);
        if (x->state == RX_H2D) {
            int d = event_done(st->bounce[x->bounce].ev);
            if (d < 0) fail_req(x->sr, FERRY_ERR_IO);
            if (d != 0) rx_finish(x, d > 0);
        } else if (x->state == RX_BOUNCED && dead) {
            rx_finish(x, false);
        } else if (x->state == RX_BOUNCED && r->device < 0) {
            memcpy(r->local + x->off, st->bounce[x->bounce].buf, x->len);
            rx_finish(x, true);
        } else if (x->state == RX_BOUNCED) {
            bounce_t *b = &st->bounce[x->bounce];
            if (copy_async(st->rstream, r->device, r->local + x->off, b->buf, x->len, false, &b->ev, &b->ev_device)) {
                x->state = RX_H2D;
            } else {
                fail_req(x->sr, FERRY_ERR_IO);
                rx_finish(x, false);
            }
        } else if (x->state == RX_TEMP) {
            bool ok = dead;
            if (!dead && r->device < 0) memcpy(r->local + x->off, x->temp, x->len), ok = true;
            else if (!dead && !(ok = copy_sync_to_device(r->device, r->local + x->off, x->temp, x->len)))
                fail_req(x->sr, FERRY_ERR_IO);
            ferry_free(xp->ctx, x->temp);
            x->temp = NULL;
            rx_finish(x, ok && !dead);
        } else if (x->state == RX_WAIT && !dead && st->rate > 0 && now < st->pace_at) {
            paced = st->pace_at - now; /* the rate's: started later */
        } else if (x->state == RX_WAIT && !dead && ns < STAGE_BUFS && !ucx_peer_lost(r->peer)) {
            /* (a receive answers its owner: a dead one's waits, to be kept) */
            bool pinned = false;
            if (!st->bounce_ready &&
                !(st->bounce_ready = alloc_bufs(&st->bounce[0].buf, sizeof st->bounce[0], r->device, &pinned))) {
                fail_req(x->sr, FERRY_ERR_NO_MEMORY);
            } else {
                if (pinned) st->bounce_pinned = true;
                for (int b = 0; b < STAGE_BUFS && x->bounce < 0; b++) {
                    if (st->bounce[b].used) continue;
                    st->bounce[b].used = true;
                    x->bounce = b;
                }
            }
            if (x->bounce >= 0) {
                x->state = RX_RECV;
                start[ns++] = x;
                if (st->rate > 0) st->pace_at = fmax(now, st->pace_at) + (double)x->len / st->rate;
            }
        }
        if (x->state == RX_DONE) {
            *pp = x->next;
            ferry_free(xp->ctx, x);
        } else {
            pp = &x->next;
        }
    }
    pthread_mutex_unlock(&st->lock);
    for (int i = 0; i < ns; i++) {
        rx_t *x = start[i];
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                 .cb.recv_am = on_recv_done,
                                 .user_data = x};
        /* UCX owns the descriptor from here, even when this fails */
        ucs_status_ptr_t r = ucp_am_recv_data_nbx(u->worker, x->desc, st->bounce[x->bounce].buf, x->len, &p);
        if (UCS_PTR_IS_PTR(r)) continue;
        pthread_mutex_lock(&st->lock);
        if (UCS_PTR_IS_ERR(r)) {
            fail_req(x->sr, FERRY_ERR_PEER_LOST);
            rx_finish(x, false);
        } else {
            x->state = RX_BOUNCED;
        }
        pthread_mutex_unlock(&st->lock);
    }
    return paced;
}

/* Whether p is GPU memory. A process that has not used CUDA through ferry
 * may still pass GPU memory it allocated itself: CUDA is loaded here once
 * (where there is a driver) to tell. */
static bool is_device(const void *p) {
    if (!ferry_cuda_loaded()) {
        ferry_errbuf_t e;
        if (ferry_cuda_init(&e) != FERRY_OK) return false; /* no CUDA: no GPU memory either */
    }
    return xcuda_is_device(p);
}

bool ucx_stage_needed(ferry_xport_t *xp, const ferry_xport_run_t *run) {
    ucx_t *u = xp->backend;
    const ucx_rmem_t *b = run->rmem->backend;
    if (!b->rkey) return true; /* GPU memory UCX cannot reach on one side */
    return u->cuda == UCX_CUDA_STAGED && is_device(run->local);
}

static void free_req(ferry_xport_t *xp, ucx_stage_t *st, ucx_sreq_t *sr) {
    for (ucx_sreq_t **pp = &st->reqs; *pp; pp = &(*pp)->next) {
        if (*pp == sr) {
            *pp = sr->next;
            break;
        }
    }
    for (size_t i = 0; i < sr->n; i++) ferry_free(xp->ctx, sr->runs[i].seen);
    ferry_free(xp->ctx, sr->runs);
    ferry_free(xp->ctx, sr);
}

ferry_status_t ucx_stage_get(ferry_xport_t *xp, const ferry_xport_run_t *runs, const bool *staged, size_t n,
                             ucx_sreq_t **out) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    ucx_sreq_t *sr = ferry_calloc(xp->ctx, 1, sizeof *sr);
    bool ok = sr && (sr->runs = ferry_calloc(xp->ctx, n, sizeof *sr->runs));
    for (size_t i = 0; ok && i < n; i++) {
        if (!staged[i]) continue;
        srun_t *r = &sr->runs[i];
        r->staged = true;
        ok = (r->seen = ferry_calloc(xp->ctx, (runs[i].len / STAGE_CHUNK + 1) / 8 + 1, 1)) != NULL;
        r->local = runs[i].local;
        r->len = runs[i].len;
        r->peer = runs[i].rmem->peer;
        r->device = is_device(runs[i].local) ? device_of(runs[i].local) : -1;
        put_u(r->hdr + 8, (uint32_t)i, 4);
        put_u(r->hdr + 12, runs[i].rmem->slot, 4);
        put_u(r->hdr + 16, runs[i].rmem->gen, 8);
        put_u(r->hdr + 24, runs[i].remote_offset, 8);
        put_u(r->hdr + 32, runs[i].len, 8);
    }
    if (!ok) {
        if (sr && sr->runs) sr->n = n;
        if (sr) free_req(xp, st, sr);
        return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory for a staged UCX request");
    }
    sr->st = st;
    sr->n = n;
    pthread_mutex_lock(&st->lock);
    sr->id = ++st->next_id;
    sr->next = st->reqs;
    st->reqs = sr;
    pthread_mutex_unlock(&st->lock);
    for (size_t i = 0; i < n; i++) {
        srun_t *r = &sr->runs[i];
        if (!r->staged) continue;
        put_u(r->hdr, sr->id, 8);
        pthread_mutex_lock(&st->lock);
        sr->busy++;
        pthread_mutex_unlock(&st->lock);
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                                 UCP_OP_ATTR_FIELD_FLAGS,
                                 .cb.send = on_req_sent,
                                 .user_data = sr,
                                 .flags = UCP_AM_SEND_FLAG_EAGER};
        ucs_status_ptr_t q = r->peer->ep ? ucp_am_send_nbx(r->peer->ep, AM_STAGE_REQ, r->hdr, REQ_HDR, st->who,
                                                           st->who_len, &p)
                                         : UCS_STATUS_PTR(UCS_ERR_CONNECTION_RESET);
        if (UCS_PTR_IS_PTR(q)) continue;
        pthread_mutex_lock(&st->lock);
        if (UCS_PTR_IS_ERR(q)) fail_req(sr, FERRY_ERR_PEER_LOST);
        sr->busy--;
        pthread_mutex_unlock(&st->lock);
    }
    *out = sr;
    return FERRY_OK;
}

/* Frees the abandoned requests nothing refers to any more (under the lock). */
static void sweep_abandoned(ferry_xport_t *xp, ucx_stage_t *st) {
    for (ucx_sreq_t *r = st->reqs, *next; r; r = next) {
        next = r->next;
        if (r->abandoned && r->busy == 0) free_req(xp, st, r);
    }
}

/* DEAD_OWNERS: rendezvous descriptors of an owner known to be dead are
 * never given back, received or refused: each of those answers the owner,
 * and with UCX 1.13's TCP transport an answer to a dead owner opens a
 * connection whose failure aborts the process (tcp_ep.c: Assertion
 * `ep->fd != -1'; tcp_iface.c: `!(ep->flags & UCT_TCP_EP_FLAG_ON_MATCH_CTX)').
 * They stay with UCX until the worker ends (it warns of them then): a few
 * small descriptors per dead owner, at most its pipeline's.
 *
 * Ends what of sr has not started: waiting descriptors go back to UCX (in
 * batches, outside the lock; a dead owner's are kept), copies to the GPU
 * are waited for, eager copies dropped. Receives in flight land in bounce
 * buffers later. */
static void quiesce_req(ferry_xport_t *xp, ucx_sreq_t *sr, bool forced) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    if (forced) { /* receives that may never complete (or late): they keep their bounce buffers */
        pthread_mutex_lock(&st->lock);
        for (rx_t **pp = &st->rxs; *pp;) {
            rx_t *x = *pp;
            if (x->sr != sr || x->state != RX_RECV) {
                pp = &x->next;
                continue;
            }
            *pp = x->next;
            x->orphan_buf = st->bounce[x->bounce].buf;
            st->bounce[x->bounce].buf = NULL; /* refilled on next use */
            st->bounce[x->bounce].used = false;
            st->bounce_ready = false;
            x->bounce = -1;
            x->state = RX_ORPHAN;
            sr->busy--;
            x->sr = NULL;
            x->next = st->orphans;
            st->orphans = x;
        }
        pthread_mutex_unlock(&st->lock);
    }
    for (;;) {
        void *drop[64];
        size_t ndrop = 0;
        pthread_mutex_lock(&st->lock);
        for (rx_t *x = st->rxs; x && ndrop < sizeof drop / sizeof *drop; x = x->next) {
            if (x->sr != sr || x->state == RX_DONE || x->state == RX_RECV) continue;
            if (x->state == RX_WAIT && !ucx_peer_lost(sr->runs[x->run].peer)) /* (a dead owner's: kept) */
                drop[ndrop++] = x->desc;
            if (x->state == RX_H2D) event_sync(st->bounce[x->bounce].ev); /* nothing lands after this returns */
            ferry_free(xp->ctx, x->temp);
            x->temp = NULL;
            rx_finish(x, false);
        }
        pthread_mutex_unlock(&st->lock);
        for (size_t i = 0; i < ndrop; i++) ucp_am_data_release(u->worker, drop[i]);
        if (ndrop < sizeof drop / sizeof *drop) return;
    }
}

ferry_status_t ucx_stage_wait(ferry_xport_t *xp, ucx_sreq_t *sr, double deadline) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    ferry_status_t status = FERRY_OK;
    bool by_rate = false; /* a timeout while chunks waited for the rate: not the owner's fault */
    for (;;) {
        ucp_worker_progress(u->worker);
        const double paced = pump_reader(xp);
        pthread_mutex_lock(&st->lock);
        bool complete = true;
        for (size_t i = 0; i < sr->n; i++)
            if (sr->runs[i].staged && sr->runs[i].landed != sr->runs[i].len) complete = false;
        status = sr->status;
        uint32_t busy = sr->busy;
        pthread_mutex_unlock(&st->lock);
        if (busy == 0 && complete) break;
        if (status != FERRY_OK) break; /* what is still in flight is dropped where it lands */
        bool lost = false;
        for (size_t i = 0; i < sr->n && !lost; i++) lost = sr->runs[i].staged && ucx_peer_lost(sr->runs[i].peer);
        if (lost || ferry_mono_s() > deadline) {
            status = lost ? FERRY_ERR_PEER_LOST : FERRY_ERR_TIMEOUT;
            by_rate = !lost && paced > 0;
            pthread_mutex_lock(&st->lock);
            fail_req(sr, status);
            pthread_mutex_unlock(&st->lock);
            quiesce_req(xp, sr, true);
            if (!lost && !by_rate) /* a live owner that did not answer: its connection is not used again */
                for (size_t i = 0; i < sr->n; i++)
                    if (sr->runs[i].staged) ucx_peer_abandon(u, sr->runs[i].peer);
            break;
        }
        if (paced > 0) { /* a chunk waits for the rate: sleep rather than spin (at most 1 ms at a time) */
            struct timespec ts = {0, (long)(fmin(paced, 1e-3) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    quiesce_req(xp, sr, false);
    pthread_mutex_lock(&st->lock);
    sr->abandoned = true; /* late callbacks still refer to it until nothing is busy */
    sweep_abandoned(xp, st);
    pthread_mutex_unlock(&st->lock);
    if (status == FERRY_ERR_STALE) return ferry_fail(&xp->err, status, "ucx: a registration ended during the transfer");
    if (status == FERRY_ERR_INVALID_ARGUMENT)
        return ferry_fail(&xp->err, status, "ucx: the owner refused a staged read outside its registration");
    if (status == FERRY_ERR_NO_MEMORY)
        return ferry_fail(&xp->err, status, "ucx: out of pinned memory for host staging (here or at the owner)");
    if (status == FERRY_ERR_IO)
        return ferry_fail(&xp->err, status, "ucx: a copy between GPU and host memory for staging failed");
    if (status == FERRY_ERR_CORRUPT)
        return ferry_fail(&xp->err, status, "ucx: a staged reply did not match its request");
    if (status == FERRY_ERR_PEER_LOST) return ferry_fail(&xp->err, status, "ucx: the owner of the memory is gone");
    if (status == FERRY_ERR_TIMEOUT && by_rate)
        return ferry_fail(&xp->err, status,
                          "ucx: a staged read did not finish within the timeout at FERRY_UCX_STAGE_RATE=%.0f "
                          "bytes/s (the endpoint's queued reads at that rate take longer)", st->rate);
    if (status == FERRY_ERR_TIMEOUT)
        return ferry_fail(&xp->err, status, "ucx: the owner did not answer a staged read within the timeout");
    return status;
}

/* ---- life ----------------------------------------------------------------- */

/* FERRY_UCX_STAGE_RATE: bytes per second, with an optional k, M or G
 * (10^3, 10^6, 10^9), at least 1k; unset, empty or 0: no cap. -1: not a
 * rate. */
static double parse_rate(const char *v) {
    if (!v || !*v) return 0;
    char *end;
    double r = strtod(v, &end);
    if (end == v) return -1;
    if (*end == 'k' || *end == 'K') r *= 1e3, end++;
    else if (*end == 'M') r *= 1e6, end++;
    else if (*end == 'G') r *= 1e9, end++;
    while (*end == ' ') end++;
    if (*end || !isfinite(r) || r < 0) return -1;
    return r == 0 ? 0 : r < 1e3 ? -1 : r;
}

ferry_status_t ucx_stage_init(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    const char *rv = getenv("FERRY_UCX_STAGE_RATE");
    const double rate = parse_rate(rv);
    if (rate < 0)
        return ferry_fail(&xp->err, FERRY_ERR_INVALID_CONFIG,
                          "ucx: FERRY_UCX_STAGE_RATE=\"%.64s\" is not a rate in bytes per second (at least 1k, "
                          "such as 1.25G; 0 for none)", rv);
    ucx_stage_t *st = ferry_calloc(xp->ctx, 1, sizeof *st);
    if (!st) return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory creating a UCX endpoint");
    st->u = u;
    st->rate = rate;
    pthread_mutex_init(&st->lock, NULL);
    u->stage = st;
    st->who_len = 14 + u->address_len;
    if (!(st->who = ferry_alloc(xp->ctx, st->who_len)))
        return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory creating a UCX endpoint");
    put_u(st->who, u->host, 8);
    put_u(st->who + 8, u->pid, 4);
    put_u(st->who + 12, u->address_len, 2);
    memcpy(st->who + 14, u->address, u->address_len);
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
                                 .id = AM_STAGE_REQ,
                                 .flags = UCP_AM_FLAG_WHOLE_MSG,
                                 .cb = on_req,
                                 .arg = xp};
    ucs_status_t s = ucp_worker_set_am_recv_handler(u->worker, &hp);
    if (s == UCS_OK) {
        hp.id = AM_STAGE_DATA;
        hp.cb = on_data;
        s = ucp_worker_set_am_recv_handler(u->worker, &hp);
    }
    if (s != UCS_OK)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "ucx: installing the staging handlers: %s", ucs_status_string(s));
    return FERRY_OK;
}

/* Before the worker ends, with the progress thread stopped: the owner's
 * endpoints to readers are closed. */
void ucx_stage_close(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    if (!st) return;
    for (ucx_peer_t *r = st->readers; r; r = r->next) {
        if (!r->ep || ucx_peer_lost(r)) continue; /* a dead reader's endpoint goes with the worker */
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = r->local ? 0 : UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t q = ucp_ep_close_nbx(r->ep, &p);
        double until = ferry_mono_s() + 1.0; /* a dead reader's flush never completes */
        while (UCS_PTR_IS_PTR(q) && ucp_request_check_status(q) == UCS_INPROGRESS && ferry_mono_s() < until)
            ucp_worker_progress(u->worker);
        if (UCS_PTR_IS_PTR(q) && ucp_request_check_status(q) != UCS_INPROGRESS) ucp_request_free(q);
        r->ep = NULL;
    }
}

void ucx_stage_fini(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    if (!st) return;
    for (int i = 0; i < STAGE_BUFS; i++) {
        if (st->oc[i].state == OC_D2H) event_sync(st->oc[i].ev);
        if (st->bounce[i].used) event_sync(st->bounce[i].ev);
        free_buf(st->oc[i].buf, st->oc_pinned, st->oc[i].ev);
        free_buf(st->bounce[i].buf, st->bounce_pinned, st->bounce[i].ev);
    }
    streams_destroy(st->ostream);
    streams_destroy(st->rstream);
    while (st->jobs) {
        job_t *j = st->jobs;
        st->jobs = j->next;
        ferry_free(xp->ctx, j);
    }
    while (st->readers) {
        ucx_peer_t *r = st->readers;
        st->readers = r->next;
        ucx_peer_free(xp->ctx, r);
    }
    while (st->rxs) {
        rx_t *x = st->rxs;
        st->rxs = x->next;
        ferry_free(xp->ctx, x->temp);
        ferry_free(xp->ctx, x);
    }
    while (st->orphans) {
        rx_t *x = st->orphans;
        st->orphans = x->next;
        free_buf(x->orphan_buf, st->bounce_pinned, NULL);
        ferry_free(xp->ctx, x);
    }
    while (st->reqs) free_req(xp, st, st->reqs);
    ferry_free(xp->ctx, st->who);
    pthread_mutex_destroy(&st->lock);
    ferry_free(xp->ctx, st);
    u->stage = NULL;
}
