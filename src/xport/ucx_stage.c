/* Host staging of GPU memory for the UCX transport (ucx_internal.h).
 *
 * Used where one side's UCX cannot touch GPU memory (no CUDA support in it,
 * or FERRY_UCX_CUDA=staged): a reader asks the owner for each run with an
 * active message (REQ); the owner's progress thread checks it against the
 * registration (slot, generation, range), copies the range to the host in
 * chunks of STAGE_CHUNK bytes through STAGE_BUFS pinned buffers and sends
 * every chunk back (DATA, rendezvous) as soon as its copy has landed; the
 * reader receives a host destination in place, and a GPU destination into
 * one of its STAGE_BUFS pinned bounce buffers followed by a copy to the GPU.
 * So the owner's copy of chunk k+1, the wire's chunk k and the reader's copy
 * of chunk k-1 overlap. An error (a registration that ended, a range outside
 * it) comes back as a DATA message carrying the status and no bytes.
 *
 * Threads: UCX callbacks (on the progress thread or a waiting caller) only
 * record what happened, under the stage lock. CUDA work runs under that
 * lock; UCX calls never do (a callback may need the lock while UCX holds
 * its worker's). The owner's work runs on the progress thread, the reader's
 * in ucx_stage_wait.
 *
 * Memory: each endpoint pins STAGE_BUFS x STAGE_CHUNK bytes of host memory
 * for each role it stages in, on first use, until it ends. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/cuda.h"
#include "xport/cuda_ipc.h"
#include "xport/ucx_internal.h"

#define STAGE_CHUNK (8u << 20)
#define STAGE_BUFS 4
#define STAGE_MAX_DEVICES 64
enum { AM_STAGE_REQ = 7, AM_STAGE_DATA = 8 };
#define REQ_HDR 40  /* req_id(8) run(4) slot(4) gen(8) offset(8) len(8) */
#define DATA_HDR 32 /* req_id(8) run(4) status(4) off(8) len(8) */

#ifndef FERRY_CUDA
typedef void *cudaEvent_t;
typedef void *cudaStream_t;
#endif

/* ---- owner ---------------------------------------------------------------- */

typedef struct job {
    ucp_ep_h ep;              /* the reader's, to reply on */
    uint64_t req_id, gen, off, len, done;
    uint32_t run, slot;
    int32_t status;           /* not FERRY_OK: replied with no bytes */
    struct job *next;
} job_t;

typedef enum { OC_FREE, OC_D2H, OC_READY, OC_SEND } oc_state_t;

typedef struct {
    struct ucx_stage *st;
    oc_state_t state;
    uint8_t *buf;             /* pinned */
    const void *data;         /* what goes out: buf, or host memory of the registration */
    size_t len;
    uint32_t slot;
    ucp_ep_h ep;
    cudaEvent_t ev;           /* made on the device of the copy it marks */
    int ev_device;
    uint8_t hdr[DATA_HDR];    /* lives until the send completes */
} ochunk_t;

/* ---- reader --------------------------------------------------------------- */

typedef struct {
    bool staged;
    uint8_t *local;
    size_t len, landed;
    int device;               /* of local, -1: host memory */
    ucx_peer_t *peer;
    uint8_t hdr[REQ_HDR];
} srun_t;

struct ucx_sreq {
    struct ucx_stage *st;
    uint64_t id;
    size_t n;
    srun_t *runs;
    ferry_status_t status;
    uint32_t busy;            /* UCX operations and landings still to come */
    bool abandoned;           /* its wait returned: freed once nothing is busy */
    struct ucx_sreq *next;
};

typedef enum { RX_WAIT, RX_RECV, RX_BOUNCED, RX_H2D, RX_TEMP, RX_DONE } rx_state_t;

typedef struct rx {
    struct ucx_stage *st;
    ucx_sreq_t *sr;
    uint32_t run;
    uint64_t off;
    size_t len;
    void *desc;               /* UCX's data descriptor (RX_WAIT) */
    void *req;                /* UCX's receive in flight (RX_RECV), to cancel */
    void *temp;               /* eager bytes copied out (RX_TEMP) */
    int bounce;               /* bounce buffer index, -1: none */
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
    ochunk_t oc[STAGE_BUFS];
    bool oc_pinned;
    bounce_t bounce[STAGE_BUFS];
    bool bounce_pinned;
    ucx_sreq_t *reqs;
    rx_t *rxs;
    cudaStream_t ostream[STAGE_MAX_DEVICES], rstream[STAGE_MAX_DEVICES];
};

static void put_u(uint8_t *p, uint64_t v, int n) { ferry_put_le(p, v, n); }
static uint64_t get_u(const uint8_t *p, int n) { return ferry_get_le(p, n); }

static void wake(ucx_t *u) {
    char b = 1;
    ssize_t w = write(u->wake[1], &b, 1); /* non-blocking: a full pipe wakes the thread anyway */
    (void)w;
}

/* ---- CUDA pieces (none without CUDA: no GPU memory is ever registered or
 * recognized there, so these are never reached) ---------------------------- */

#ifdef FERRY_CUDA
/* Pins STAGE_BUFS buffers of STAGE_CHUNK bytes (bufs[i * stride]). */
static bool pin_all(uint8_t **bufs, size_t stride) {
    for (int i = 0; i < STAGE_BUFS; i++) {
        uint8_t **b = (uint8_t **)((char *)bufs + i * stride);
        if (cudaHostAlloc((void **)b, STAGE_CHUNK, cudaHostAllocPortable) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
    }
    return true;
}

static void unpin(uint8_t *buf, cudaEvent_t ev) {
    if (buf) cudaFreeHost(buf);
    if (ev) cudaEventDestroy(ev);
}

static cudaStream_t stream_of(cudaStream_t *streams, int device) {
    if (device < 0 || device >= STAGE_MAX_DEVICES) return NULL;
    if (!streams[device]) cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking);
    return streams[device];
}

/* Enqueues a copy on device's stream and marks its end with *ev (remade on
 * that device when it was made on another: an event records only on its
 * own device's streams), the calling thread's device left as it was. */
static bool copy_async(cudaStream_t *streams, int device, void *dst, const void *src, size_t len, bool to_host,
                       cudaEvent_t *ev, int *ev_device) {
    int prev = -1;
    cudaGetDevice(&prev);
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
    if (prev >= 0) cudaSetDevice(prev);
    if (!ok) cudaGetLastError();
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
    int prev = -1;
    cudaGetDevice(&prev);
    bool ok = cudaSetDevice(device) == cudaSuccess && cudaMemcpy(dst, src, len, cudaMemcpyHostToDevice) == cudaSuccess;
    if (prev >= 0) cudaSetDevice(prev);
    if (!ok) cudaGetLastError();
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
static bool pin_all(uint8_t **bufs, size_t stride) {
    (void)bufs, (void)stride;
    return false;
}
static void unpin(uint8_t *buf, cudaEvent_t ev) { (void)buf, (void)ev; }
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
    (void)data, (void)len;
    ferry_xport_t *xp = arg;
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    if (hlen != REQ_HDR || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) || !param->reply_ep)
        return UCS_OK; /* not ours to answer: dropped */
    const uint8_t *h = header;
    job_t *j = ferry_calloc(xp->ctx, 1, sizeof *j);
    if (!j) return UCS_OK; /* the reader times out */
    j->ep = param->reply_ep;
    j->req_id = get_u(h, 8);
    j->run = (uint32_t)get_u(h + 8, 4);
    j->slot = (uint32_t)get_u(h + 12, 4);
    j->gen = get_u(h + 16, 8);
    j->off = get_u(h + 24, 8);
    j->len = get_u(h + 32, 8);
    j->status = FERRY_OK;
    pthread_mutex_lock(&u->lock);
    if (j->slot >= UCX_SLOTS || !u->slot_used[j->slot] ||
        __atomic_load_n(&u->gens[j->slot], __ATOMIC_ACQUIRE) != j->gen)
        j->status = FERRY_ERR_STALE;
    else if (j->len == 0 || j->off > u->slot_size[j->slot] || j->len > u->slot_size[j->slot] - j->off)
        j->status = FERRY_ERR_INVALID_ARGUMENT;
    pthread_mutex_unlock(&u->lock);
    pthread_mutex_lock(&st->lock);
    if (st->jobs_tail) st->jobs_tail->next = j;
    else st->jobs = j;
    st->jobs_tail = j;
    pthread_mutex_unlock(&st->lock);
    wake(u);
    return UCS_OK;
}

static void on_chunk_sent(void *request, ucs_status_t status, void *user_data) {
    (void)status; /* a reader that is gone has timed out, or sees the owner's end */
    ochunk_t *c = user_data;
    pthread_mutex_lock(&c->st->lock);
    c->state = OC_FREE;
    pthread_mutex_unlock(&c->st->lock);
    ucp_request_free(request);
    wake(c->st->u); /* the next piece, from the progress thread */
}

/* Fills chunk c with the next piece of the head job (or its error), under
 * the lock. */
static void next_piece(ferry_xport_t *xp, ucx_stage_t *st, ochunk_t *c) {
    ucx_t *u = xp->backend;
    job_t *j = st->jobs;
    if (j->status == FERRY_OK && __atomic_load_n(&u->gens[j->slot], __ATOMIC_ACQUIRE) != j->gen)
        j->status = FERRY_ERR_STALE; /* ended since: its memory may be gone */
    size_t piece = 0;
    if (j->status == FERRY_OK) {
        piece = j->len - j->done < STAGE_CHUNK ? (size_t)(j->len - j->done) : STAGE_CHUNK;
        const uint8_t *src = u->slot_ptr[j->slot] + j->off + j->done;
        int device = u->slot_device[j->slot];
        if (device < 0) { /* host memory: sent from where it is */
            c->data = src;
            c->state = OC_READY;
        } else if (!st->oc_pinned && !(st->oc_pinned = pin_all(&st->oc[0].buf, sizeof st->oc[0]))) {
            j->status = FERRY_ERR_NO_MEMORY;
        } else if (!copy_async(st->ostream, device, c->buf, src, piece, true, &c->ev, &c->ev_device)) {
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
    c->ep = j->ep;
    if (j->status != FERRY_OK) {
        c->data = NULL;
        c->state = OC_READY;
        j->done = j->len;
    } else {
        j->done += piece;
    }
    if (j->done == j->len) {
        st->jobs = j->next;
        if (!st->jobs) st->jobs_tail = NULL;
        ferry_free(xp->ctx, j);
    }
}

bool ucx_stage_pump_owner(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    if (!st) return false;
    ochunk_t *send[STAGE_BUFS];
    int ns = 0;
    bool busy = false;
    pthread_mutex_lock(&st->lock);
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
        if (c->state == OC_FREE && st->jobs) next_piece(xp, st, c);
        if (c->state == OC_READY) {
            c->state = OC_SEND;
            send[ns++] = c;
        }
        busy |= c->state == OC_D2H || (c->state == OC_FREE && st->jobs); /* to poll; sends complete by wake-up */
    }
    pthread_mutex_unlock(&st->lock);
    for (int i = 0; i < ns; i++) {
        ochunk_t *c = send[i];
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                                 UCP_OP_ATTR_FIELD_FLAGS,
                                 .cb.send = on_chunk_sent,
                                 .user_data = c,
                                 .flags = c->len ? UCP_AM_SEND_FLAG_RNDV : 0};
        ucs_status_ptr_t r = ucp_am_send_nbx(c->ep, AM_STAGE_DATA, c->hdr, DATA_HDR, c->data, c->len, &p);
        if (!UCS_PTR_IS_PTR(r)) { /* done already, or failed (the reader times out) */
            pthread_mutex_lock(&st->lock);
            c->state = OC_FREE;
            pthread_mutex_unlock(&st->lock);
        }
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

static ucs_status_t on_data(void *arg, const void *header, size_t hlen, void *data, size_t len,
                            const ucp_am_recv_param_t *param) {
    ferry_xport_t *xp = arg;
    ucx_stage_t *st = ((ucx_t *)xp->backend)->stage;
    if (hlen != DATA_HDR) return UCS_OK;
    const uint8_t *h = header;
    uint64_t id = get_u(h, 8), off = get_u(h + 16, 8), n = get_u(h + 24, 8);
    uint32_t run = (uint32_t)get_u(h + 8, 4);
    int32_t status = (int32_t)get_u(h + 12, 4);
    ucs_status_t keep = UCS_OK;
    pthread_mutex_lock(&st->lock);
    ucx_sreq_t *sr = find_req(st, id);
    if (!sr || sr->abandoned || sr->status != FERRY_OK) goto out; /* dropped */
    if (status != FERRY_OK) {
        fail_req(sr, status == FERRY_ERR_STALE || status == FERRY_ERR_INVALID_ARGUMENT || status == FERRY_ERR_IO ||
                             status == FERRY_ERR_NO_MEMORY
                         ? (ferry_status_t)status
                         : FERRY_ERR_CORRUPT);
        goto out;
    }
    if (run >= sr->n || !sr->runs[run].staged || n != len || n == 0 || off > sr->runs[run].len ||
        n > sr->runs[run].len - off) {
        fail_req(sr, FERRY_ERR_CORRUPT); /* not what was asked for */
        goto out;
    }
    rx_t *x = ferry_calloc(xp->ctx, 1, sizeof *x);
    void *temp = NULL;
    bool persistent = param->recv_attr & (UCP_AM_RECV_ATTR_FLAG_RNDV | UCP_AM_RECV_ATTR_FLAG_DATA);
    if (!x || (!persistent && sr->runs[run].device >= 0 && !(temp = ferry_alloc(xp->ctx, n)))) {
        ferry_free(xp->ctx, x);
        fail_req(sr, FERRY_ERR_NO_MEMORY);
        goto out;
    }
    *x = (rx_t){.st = st, .sr = sr, .run = run, .off = off, .len = (size_t)n, .bounce = -1};
    sr->busy++;
    if (persistent) { /* received later, from ucx_stage_wait (no UCX call in a callback) */
        x->desc = data;
        x->state = RX_WAIT;
        keep = UCS_INPROGRESS;
    } else if (!temp) { /* eager bytes for host memory */
        memcpy(sr->runs[run].local + off, data, (size_t)n);
        rx_finish(x, true);
    } else {
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
    x->req = NULL;
    if (status != UCS_OK || length != x->len) {
        fail_req(x->sr, status == UCS_OK ? FERRY_ERR_CORRUPT : FERRY_ERR_PEER_LOST);
        rx_finish(x, false);
    } else if (x->bounce >= 0) {
        x->state = RX_BOUNCED; /* copied to the GPU by the next pump */
    } else {
        rx_finish(x, true);
    }
    pthread_mutex_unlock(&x->st->lock);
    ucp_request_free(request);
}

/* The reader's work, from ucx_stage_wait: copies landed bounces to their
 * GPUs, retires finished copies, starts the receives that can start. */
static void pump_reader(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    rx_t *start[STAGE_BUFS * 4];
    int ns = 0;
    pthread_mutex_lock(&st->lock);
    for (rx_t **pp = &st->rxs; *pp;) {
        rx_t *x = *pp;
        srun_t *r = x->state == RX_DONE ? NULL : &x->sr->runs[x->run];
        if (x->state == RX_H2D) {
            int d = event_done(st->bounce[x->bounce].ev);
            if (d < 0) fail_req(x->sr, FERRY_ERR_IO);
            if (d != 0) rx_finish(x, d > 0);
        } else if (x->state == RX_BOUNCED) {
            bounce_t *b = &st->bounce[x->bounce];
            if (copy_async(st->rstream, r->device, r->local + x->off, b->buf, x->len, false, &b->ev, &b->ev_device)) {
                x->state = RX_H2D;
            } else {
                fail_req(x->sr, FERRY_ERR_IO);
                rx_finish(x, false);
            }
        } else if (x->state == RX_TEMP) {
            bool ok = copy_sync_to_device(r->device, r->local + x->off, x->temp, x->len);
            if (!ok) fail_req(x->sr, FERRY_ERR_IO);
            ferry_free(xp->ctx, x->temp);
            x->temp = NULL;
            rx_finish(x, ok);
        } else if (x->state == RX_WAIT && ns < (int)(sizeof start / sizeof *start)) {
            bool direct = r->device < 0 || u->cuda == UCX_CUDA_NATIVE;
            if (!direct && !st->bounce_pinned &&
                !(st->bounce_pinned = pin_all(&st->bounce[0].buf, sizeof st->bounce[0]))) {
                fail_req(x->sr, FERRY_ERR_NO_MEMORY);
            } else if (!direct) {
                for (int b = 0; b < STAGE_BUFS && x->bounce < 0; b++) {
                    if (st->bounce[b].used) continue;
                    st->bounce[b].used = true;
                    x->bounce = b;
                }
            }
            if (direct || x->bounce >= 0) {
                x->state = RX_RECV;
                start[ns++] = x;
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
        void *dst = x->bounce >= 0 ? (void *)st->bounce[x->bounce].buf : (void *)(x->sr->runs[x->run].local + x->off);
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                 .cb.recv_am = on_recv_done,
                                 .user_data = x};
        /* a failed request has its data dropped all the same: UCX owns the descriptor from here */
        ucs_status_ptr_t r = ucp_am_recv_data_nbx(u->worker, x->desc, dst, x->len, &p);
        pthread_mutex_lock(&st->lock);
        if (UCS_PTR_IS_PTR(r)) {
            if (x->state == RX_RECV) x->req = r; /* else finished already (only this thread frees x) */
            pthread_mutex_unlock(&st->lock);
            continue;
        }
        if (UCS_PTR_IS_ERR(r)) {
            fail_req(x->sr, FERRY_ERR_PEER_LOST);
            rx_finish(x, false);
        } else if (x->bounce >= 0) {
            x->state = RX_BOUNCED;
        } else {
            rx_finish(x, true);
        }
        pthread_mutex_unlock(&st->lock);
    }
}

bool ucx_stage_needed(ferry_xport_t *xp, const ferry_xport_run_t *run) {
    ucx_t *u = xp->backend;
    const ucx_rmem_t *b = run->rmem->backend;
    if (!b->rkey) return true; /* GPU memory UCX cannot reach on one side */
    return u->cuda == UCX_CUDA_STAGED && xcuda_is_device(run->local);
}

ferry_status_t ucx_stage_get(ferry_xport_t *xp, const ferry_xport_run_t *runs, const bool *staged, size_t n,
                             ucx_sreq_t **out) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    ucx_sreq_t *sr = ferry_calloc(xp->ctx, 1, sizeof *sr);
    if (sr && !(sr->runs = ferry_calloc(xp->ctx, n, sizeof *sr->runs))) {
        ferry_free(xp->ctx, sr);
        sr = NULL;
    }
    if (!sr) return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory for a staged UCX request");
    sr->st = st;
    sr->n = n;
    for (size_t i = 0; i < n; i++) {
        if (!staged[i]) continue;
        srun_t *r = &sr->runs[i];
        r->staged = true;
        r->local = runs[i].local;
        r->len = runs[i].len;
        r->peer = runs[i].rmem->peer;
        r->device = xcuda_is_device(runs[i].local) ? device_of(runs[i].local) : -1;
        put_u(r->hdr + 8, (uint32_t)i, 4);
        put_u(r->hdr + 12, runs[i].rmem->slot, 4);
        put_u(r->hdr + 16, runs[i].rmem->gen, 8);
        put_u(r->hdr + 24, runs[i].remote_offset, 8);
        put_u(r->hdr + 32, runs[i].len, 8);
    }
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
                                 .flags = UCP_AM_SEND_FLAG_REPLY};
        ucs_status_ptr_t q = r->peer->ep ? ucp_am_send_nbx(r->peer->ep, AM_STAGE_REQ, r->hdr, REQ_HDR, NULL, 0, &p)
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

static void free_req(ferry_xport_t *xp, ucx_stage_t *st, ucx_sreq_t *sr) {
    for (ucx_sreq_t **pp = &st->reqs; *pp; pp = &(*pp)->next) {
        if (*pp == sr) {
            *pp = sr->next;
            break;
        }
    }
    ferry_free(xp->ctx, sr->runs);
    ferry_free(xp->ctx, sr);
}

/* Frees the abandoned requests nothing refers to any more (under the lock). */
static void sweep_abandoned(ferry_xport_t *xp, ucx_stage_t *st) {
    for (ucx_sreq_t *r = st->reqs, *next; r; r = next) {
        next = r->next;
        if (r->abandoned && r->busy == 0) free_req(xp, st, r);
    }
}

ferry_status_t ucx_stage_wait(ferry_xport_t *xp, ucx_sreq_t *sr, double deadline) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    ferry_status_t status = FERRY_OK;
    bool forced = false;
    for (;;) {
        ucp_worker_progress(u->worker);
        pump_reader(xp);
        pthread_mutex_lock(&st->lock);
        bool complete = true;
        for (size_t i = 0; i < sr->n; i++)
            if (sr->runs[i].staged && sr->runs[i].landed != sr->runs[i].len) complete = false;
        status = sr->status;
        uint32_t busy = sr->busy;
        pthread_mutex_unlock(&st->lock);
        if (busy == 0 && (complete || status != FERRY_OK)) break;
        bool lost = false;
        for (size_t i = 0; i < sr->n && !lost; i++) lost = sr->runs[i].staged && ucx_peer_lost(sr->runs[i].peer);
        if (!forced && (lost || ferry_mono_s() > deadline)) {
            pthread_mutex_lock(&st->lock);
            fail_req(sr, lost ? FERRY_ERR_PEER_LOST : FERRY_ERR_TIMEOUT);
            pthread_mutex_unlock(&st->lock);
            /* fail what UCX still has in flight to these owners, then stop
             * waiting: anything left belongs to the abandoned request */
            for (size_t i = 0; i < sr->n; i++)
                if (sr->runs[i].staged) ucx_peer_abandon(u, sr->runs[i].peer);
            void *cancel[64];
            size_t nc = 0;
            pthread_mutex_lock(&st->lock);
            for (rx_t *x = st->rxs; x && nc < sizeof cancel / sizeof *cancel; x = x->next)
                if (x->sr == sr && x->state == RX_RECV && x->req) cancel[nc++] = x->req;
            pthread_mutex_unlock(&st->lock);
            for (size_t i = 0; i < nc; i++) ucp_request_cancel(u->worker, cancel[i]); /* their callbacks finish them */
            forced = true;
            deadline = ferry_mono_s() + 0.2; /* with its endpoint closed nothing more comes from that owner */
        } else if (forced && ferry_mono_s() > deadline) {
            pthread_mutex_lock(&st->lock);
            status = sr->status;
            pthread_mutex_unlock(&st->lock);
            break;
        }
    }
    void *drop[64];
    size_t ndrop = 0;
    pthread_mutex_lock(&st->lock);
    for (rx_t *x = st->rxs; x && ndrop < sizeof drop / sizeof *drop; x = x->next) {
        if (x->sr != sr || x->state == RX_DONE || x->state == RX_RECV) continue;
        if (x->state == RX_WAIT) drop[ndrop++] = x->desc; /* never received: handed back to UCX below */
        if (x->state == RX_H2D) event_sync(st->bounce[x->bounce].ev); /* nothing lands after this returns */
        ferry_free(xp->ctx, x->temp);
        x->temp = NULL;
        rx_finish(x, false);
    }
    if (sr->busy) sr->abandoned = true; /* late callbacks still refer to it */
    else free_req(xp, st, sr);
    sweep_abandoned(xp, st);
    pthread_mutex_unlock(&st->lock);
    for (size_t i = 0; i < ndrop; i++) ucp_am_data_release(u->worker, drop[i]);
    if (status == FERRY_ERR_STALE) return ferry_fail(&xp->err, status, "ucx: a registration ended during the transfer");
    if (status == FERRY_ERR_INVALID_ARGUMENT)
        return ferry_fail(&xp->err, status, "ucx: the owner refused a staged read outside its registration");
    if (status == FERRY_ERR_NO_MEMORY)
        return ferry_fail(&xp->err, status, "ucx: out of pinned memory for host staging (here or at the owner)");
    if (status == FERRY_ERR_IO)
        return ferry_fail(&xp->err, status, "ucx: a copy between GPU and host memory for staging failed");
    if (status == FERRY_ERR_CORRUPT)
        return ferry_fail(&xp->err, status, "ucx: a staged reply did not match its request");
    return status;
}

/* ---- life ----------------------------------------------------------------- */

ferry_status_t ucx_stage_init(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = ferry_calloc(xp->ctx, 1, sizeof *st);
    if (!st) return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory creating a UCX endpoint");
    st->u = u;
    pthread_mutex_init(&st->lock, NULL);
    for (int i = 0; i < STAGE_BUFS; i++) {
        st->oc[i].st = st;
        st->oc[i].state = OC_FREE;
    }
    u->stage = st;
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
                                 .id = AM_STAGE_REQ,
                                 .flags = UCP_AM_FLAG_WHOLE_MSG,
                                 .cb = on_req,
                                 .arg = xp};
    ucs_status_t s = ucp_worker_set_am_recv_handler(u->worker, &hp);
    if (s == UCS_OK) {
        hp.id = AM_STAGE_DATA;
        hp.flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA;
        hp.cb = on_data;
        s = ucp_worker_set_am_recv_handler(u->worker, &hp);
    }
    if (s != UCS_OK)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "ucx: installing the staging handlers: %s", ucs_status_string(s));
    return FERRY_OK;
}

void ucx_stage_fini(ferry_xport_t *xp) {
    ucx_t *u = xp->backend;
    ucx_stage_t *st = u->stage;
    if (!st) return;
    for (int i = 0; i < STAGE_BUFS; i++) {
        if (st->oc[i].state == OC_D2H) event_sync(st->oc[i].ev);
        if (st->bounce[i].used) event_sync(st->bounce[i].ev);
        unpin(st->oc[i].buf, st->oc[i].ev);
        unpin(st->bounce[i].buf, st->bounce[i].ev);
    }
    streams_destroy(st->ostream);
    streams_destroy(st->rstream);
    while (st->jobs) {
        job_t *j = st->jobs;
        st->jobs = j->next;
        ferry_free(xp->ctx, j);
    }
    while (st->rxs) {
        rx_t *x = st->rxs;
        st->rxs = x->next;
        ferry_free(xp->ctx, x->temp);
        ferry_free(xp->ctx, x);
    }
    while (st->reqs) free_req(xp, st, st->reqs);
    pthread_mutex_destroy(&st->lock);
    ferry_free(xp->ctx, st);
    u->stage = NULL;
}
