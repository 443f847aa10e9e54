/* Transports, generic layer: objects, descriptor framing and checksum, run
 * checks, the registration cache, and the parallel copy helper. */
#include <pthread.h>
#include <string.h>
#include <xxhash.h>

#include "common/bytes.h"
#include "xport/xport_internal.h"

/* Descriptor: "FXD" version(1) kind(1) flags(1) body_len(2, LE) body
 * xxh3-64(everything before, LE). flags: bit 0, peers may put
 * (FERRY_XPORT_ACCESS_WRITE); other bits 0. */
#define DESC_MAGIC "FXD"
#define DESC_VERSION 1
#define DESC_HEAD 8
#define DESC_TAIL 8
#define DESC_FLAG_WRITE 0x01

static const xport_ops_t *ops_of(ferry_xport_kind_t kind) {
    switch (kind) {
    case FERRY_XPORT_SHM: return &xport_shm_ops;
    case FERRY_XPORT_UCX: return &xport_ucx_ops;
    }
    return NULL;
}

ferry_status_t ferry_xport_create(ferry_ctx_t *ctx, const ferry_xport_params_t *params, ferry_xport_t **out) {
    if (!ctx) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_errbuf_t *cerr = ferry_ctx_errbuf(ctx);
    if (!out) return ferry_fail(cerr, FERRY_ERR_INVALID_ARGUMENT, "ferry_xport_create: out is NULL");
    uint64_t known = FERRY_XPORT_PARAM_KIND | FERRY_XPORT_PARAM_TIMEOUT_MS | FERRY_XPORT_PARAM_THREADS |
                     FERRY_XPORT_PARAM_SPLIT_BYTES;
    ferry_xport_kind_t kind = FERRY_XPORT_SHM;
    uint32_t timeout_ms = 10000, threads = 1;
    uint64_t split = 8u << 20;
    if (params) {
        if (params->field_mask & ~known)
            return ferry_fail(cerr, FERRY_ERR_INVALID_ARGUMENT, "xport params: unknown field_mask bits 0x%llx",
                              (unsigned long long)(params->field_mask & ~known));
        if (params->field_mask & FERRY_XPORT_PARAM_KIND) kind = params->kind;
        if (params->field_mask & FERRY_XPORT_PARAM_TIMEOUT_MS) timeout_ms = params->timeout_ms;
        if (params->field_mask & FERRY_XPORT_PARAM_THREADS) threads = params->threads;
        if (params->field_mask & FERRY_XPORT_PARAM_SPLIT_BYTES) split = params->split_bytes;
    }
    const xport_ops_t *ops = ops_of(kind);
    if (!ops) return ferry_fail(cerr, FERRY_ERR_UNSUPPORTED, "xport: no backend of kind %d", (int)kind);
    if (threads < 1 || threads > 64)
        return ferry_fail(cerr, FERRY_ERR_INVALID_ARGUMENT, "xport params: threads must be 1..64, not %u", threads);
    if (timeout_ms == 0)
        return ferry_fail(cerr, FERRY_ERR_INVALID_ARGUMENT, "xport params: timeout_ms must be positive");
    if (split == 0)
        return ferry_fail(cerr, FERRY_ERR_INVALID_ARGUMENT, "xport params: split_bytes must be positive");
    ferry_xport_t *xp = ferry_calloc(ctx, 1, sizeof *xp);
    if (!xp) return ferry_fail(cerr, FERRY_ERR_NO_MEMORY, "out of memory creating a transport");
    xp->ctx = ctx;
    xp->ops = ops;
    xp->kind = kind;
    xp->timeout_ms = timeout_ms;
    xp->threads = threads;
    xp->split_bytes = split;
    ferry_status_t st = ops->init(xp);
    if (st != FERRY_OK) {
        ferry_fail(cerr, st, "%s", xp->err.text);
        ops->fini(xp); /* undoes whatever init got to */
        ferry_free(ctx, xp);
        return st;
    }
    *out = xp;
    return FERRY_OK;
}

void ferry_xport_destroy(ferry_xport_t *xp) {
    if (!xp) return;
    if (xp->ops->quiesce) xp->ops->quiesce(xp); /* no peer is served from here on */
    while (xp->rmems) ferry_xport_rmem_release(xp->rmems);
    while (xp->mems) {
        xp->mems->refs = 1;
        ferry_xport_mem_deregister(xp->mems);
    }
    xp->ops->fini(xp);
    ferry_free(xp->ctx, xp);
}

const char *ferry_xport_error(const ferry_xport_t *xp) { return xp->err.text; }

static ferry_status_t new_mem(ferry_xport_t *xp, size_t size, ferry_mem_type_t type, ferry_xport_access_t access,
                              ferry_xport_mem_t **out) {
    if (type != FERRY_MEM_HOST && type != FERRY_MEM_CUDA)
        return ferry_fail(&xp->err, FERRY_ERR_INVALID_ARGUMENT, "xport: memory type %d is neither FERRY_MEM_HOST nor FERRY_MEM_CUDA", (int)type);
    if (access != FERRY_XPORT_ACCESS_READ && access != FERRY_XPORT_ACCESS_WRITE)
        return ferry_fail(&xp->err, FERRY_ERR_INVALID_ARGUMENT,
                          "xport: access %d is neither FERRY_XPORT_ACCESS_READ nor FERRY_XPORT_ACCESS_WRITE", (int)access);
    if (size == 0) return ferry_fail(&xp->err, FERRY_ERR_INVALID_ARGUMENT, "xport: cannot register 0 bytes");
    ferry_xport_mem_t *m = ferry_calloc(xp->ctx, 1, sizeof *m);
    if (!m) return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory registering memory");
    m->xp = xp;
    m->size = size;
    m->type = type;
    m->access = access;
    m->refs = 1;
    m->fd = -1;
    *out = m;
    return FERRY_OK;
}

ferry_status_t ferry_xport_mem_alloc(ferry_xport_t *xp, size_t size, ferry_mem_type_t type,
                                     ferry_xport_access_t access, ferry_xport_mem_t **out) {
    if (!xp || !out) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_xport_mem_t *m = NULL;
    ferry_status_t st = new_mem(xp, size, type, access, &m);
    if (st) return st;
    m->allocated = true;
    if ((st = xp->ops->mem_alloc(xp, m)) != FERRY_OK) {
        ferry_free(xp->ctx, m);
        return st;
    }
    m->next = xp->mems;
    xp->mems = m;
    *out = m;
    return FERRY_OK;
}

ferry_status_t ferry_xport_mem_register(ferry_xport_t *xp, void *ptr, size_t size, ferry_mem_type_t type,
                                        ferry_xport_access_t access, ferry_xport_mem_t **out) {
    if (!xp || !out) return FERRY_ERR_INVALID_ARGUMENT;
    if (!ptr) return ferry_fail(&xp->err, FERRY_ERR_INVALID_ARGUMENT, "xport: cannot register a NULL pointer");
    for (ferry_xport_mem_t *m = xp->mems; m; m = m->next) { /* the registration cache */
        if (!m->allocated && m->ptr == ptr && m->size == size && m->type == type && m->access == access) {
            m->refs++;
            *out = m;
            return FERRY_OK;
        }
    }
    ferry_xport_mem_t *m = NULL;
    ferry_status_t st = new_mem(xp, size, type, access, &m);
    if (st) return st;
    m->ptr = ptr;
    if ((st = xp->ops->mem_register(xp, m)) != FERRY_OK) {
        ferry_free(xp->ctx, m);
        return st;
    }
    m->next = xp->mems;
    xp->mems = m;
    *out = m;
    return FERRY_OK;
}

void ferry_xport_mem_deregister(ferry_xport_mem_t *m) {
    if (!m || --m->refs > 0) return;
    ferry_xport_t *xp = m->xp;
    for (ferry_xport_mem_t **pp = &xp->mems; *pp; pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    }
    xp->ops->mem_deregister(xp, m);
    ferry_free(xp->ctx, m);
}

void *ferry_xport_mem_ptr(const ferry_xport_mem_t *m) { return m->ptr; }
size_t ferry_xport_mem_size(const ferry_xport_mem_t *m) { return m->size; }

ferry_status_t ferry_xport_mem_pack(const ferry_xport_mem_t *m, void *buf, size_t size, size_t *len) {
    if (!m || !buf || !len) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_xport_t *xp = m->xp;
    uint8_t tmp[FERRY_XPORT_DESC_MAX];
    size_t body = 0;
    ferry_status_t st = xp->ops->mem_pack(m, tmp + DESC_HEAD, sizeof tmp - DESC_HEAD - DESC_TAIL, &body);
    if (st) return st;
    size_t total = DESC_HEAD + body + DESC_TAIL;
    if (total > size)
        return ferry_fail(&xp->err, FERRY_ERR_LIMIT, "xport: a descriptor needs %zu bytes, the buffer has %zu",
                          total, size);
    memcpy(tmp, DESC_MAGIC, 3);
    tmp[3] = DESC_VERSION;
    tmp[4] = (uint8_t)xp->kind;
    tmp[5] = m->access == FERRY_XPORT_ACCESS_WRITE ? DESC_FLAG_WRITE : 0;
    ferry_put_le(tmp + 6, body, 2);
    ferry_put_le(tmp + DESC_HEAD + body, XXH3_64bits(tmp, DESC_HEAD + body), 8);
    memcpy(buf, tmp, total);
    *len = total;
    return FERRY_OK;
}

ferry_status_t ferry_xport_rmem_unpack(ferry_xport_t *xp, const void *desc, size_t len, ferry_xport_rmem_t **out) {
    if (!xp || !out) return FERRY_ERR_INVALID_ARGUMENT;
    const uint8_t *d = desc;
    if (!d || len < DESC_HEAD + DESC_TAIL || len > FERRY_XPORT_DESC_MAX)
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT, "xport descriptor: %zu bytes is not a descriptor's length", len);
    size_t body = (size_t)d[6] | (size_t)d[7] << 8;
    if (memcmp(d, DESC_MAGIC, 3) != 0 || d[3] != DESC_VERSION)
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT, "xport descriptor: bad magic or version %u", d[3]);
    if (DESC_HEAD + body + DESC_TAIL != len)
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT, "xport descriptor: body of %zu bytes in %zu", body, len);
    if (ferry_get_le(d + DESC_HEAD + body, 8) != XXH3_64bits(d, DESC_HEAD + body))
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT, "xport descriptor: checksum mismatch");
    if (d[5] & ~DESC_FLAG_WRITE)
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT, "xport descriptor: unknown flags 0x%02x", d[5]);
    if (d[4] != (uint8_t)xp->kind)
        return ferry_fail(&xp->err, FERRY_ERR_MISMATCH, "xport descriptor: made by a %s transport, this is %s",
                          d[4] == FERRY_XPORT_SHM ? "shm" : d[4] == FERRY_XPORT_UCX ? "ucx" : "different", xp->ops->name);
    ferry_xport_rmem_t *r = ferry_calloc(xp->ctx, 1, sizeof *r);
    if (!r) return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory unpacking a descriptor");
    r->xp = xp;
    r->writable = (d[5] & DESC_FLAG_WRITE) != 0; /* a backend may know better (shm: the memfd's mode) */
    ferry_status_t st = xp->ops->rmem_unpack(xp, d + DESC_HEAD, body, r);
    if (st) {
        ferry_free(xp->ctx, r);
        return st;
    }
    r->next = xp->rmems;
    xp->rmems = r;
    *out = r;
    return FERRY_OK;
}

void ferry_xport_rmem_release(ferry_xport_rmem_t *r) {
    if (!r) return;
    ferry_xport_t *xp = r->xp;
    for (ferry_xport_rmem_t **pp = &xp->rmems; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    xp->ops->rmem_release(xp, r);
    ferry_free(xp->ctx, r);
}

size_t ferry_xport_rmem_size(const ferry_xport_rmem_t *r) { return r->size; }
ferry_mem_type_t ferry_xport_rmem_mem_type(const ferry_xport_rmem_t *r) { return r->type; }

ferry_status_t ferry_xport_rmem_view(const ferry_xport_rmem_t *r, uint64_t offset, size_t len, const void **out) {
    if (!r || !out) return FERRY_ERR_INVALID_ARGUMENT;
    if (offset > r->size || len > r->size - offset) return FERRY_ERR_INVALID_ARGUMENT;
    if (!r->mapped) return FERRY_ERR_UNSUPPORTED;
    *out = r->base + offset;
    return FERRY_OK;
}

static const char *rmem_state(ferry_status_t st) {
    return st == FERRY_ERR_STALE         ? "the registration has ended (stale descriptor)"
           : st == FERRY_ERR_TIMEOUT     ? "the owner did not answer within the timeout"
           : st == FERRY_ERR_INTERRUPTED ? "interrupted while waiting for the owner's answer"
                                         : "the owner of the memory is gone";
}

ferry_status_t ferry_xport_rmem_check(ferry_xport_rmem_t *r) {
    if (!r) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_status_t st = r->xp->ops->rmem_check(r->xp, r);
    return st ? ferry_fail(&r->xp->err, st, "xport: %s", rmem_state(st)) : FERRY_OK;
}

static ferry_status_t transfer(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n, bool put,
                               ferry_xport_req_t **out) {
    if (!xp || !out || (n && !runs)) return FERRY_ERR_INVALID_ARGUMENT;
    const char *what = put ? "put" : "get";
    for (size_t i = 0; i < n; i++) { /* every run checked before any byte moves */
        const ferry_xport_run_t *r = &runs[i];
        if (!r->rmem || r->rmem->xp != xp || (!r->local && r->len))
            return ferry_fail(&xp->err, FERRY_ERR_INVALID_ARGUMENT, "xport %s: run %zu has no %s", what, i,
                              !r->rmem || r->rmem->xp != xp ? "remote region of this endpoint" : "local buffer");
        if (r->remote_offset > r->rmem->size || r->len > r->rmem->size - r->remote_offset)
            return ferry_fail(&xp->err, FERRY_ERR_INVALID_ARGUMENT,
                              "xport %s: run %zu [%llu, +%zu) is outside the %zu-byte registration", what, i,
                              (unsigned long long)r->remote_offset, r->len, r->rmem->size);
        if (put && !r->rmem->writable)
            return ferry_fail(&xp->err, FERRY_ERR_INVALID_ARGUMENT,
                              "xport put: run %zu writes a read-only registration (its owner registered it "
                              "without FERRY_XPORT_ACCESS_WRITE)", i);
        if (i > 0 && r->rmem == runs[i - 1].rmem) continue; /* one check per region and batch */
        ferry_status_t st = xp->ops->rmem_check(xp, r->rmem);
        if (st)
            return ferry_fail(&xp->err, st, "xport %s: run %zu: %s", what, i, rmem_state(st));
    }
    ferry_xport_req_t *req = ferry_calloc(xp->ctx, 1, sizeof *req);
    if (!req) return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory for a request");
    req->xp = xp;
    ferry_status_t st = xp->ops->transfer(xp, runs, n, put, req);
    if (st) {
        ferry_free(xp->ctx, req);
        return st;
    }
    *out = req;
    return FERRY_OK;
}

ferry_status_t ferry_xport_get(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n, ferry_xport_req_t **req) {
    return transfer(xp, runs, n, false, req);
}

ferry_status_t ferry_xport_put(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n, ferry_xport_req_t **req) {
    return transfer(xp, runs, n, true, req);
}

ferry_status_t ferry_xport_progress(ferry_xport_t *xp) {
    if (!xp) return FERRY_ERR_INVALID_ARGUMENT;
    return xp->ops->progress(xp);
}

ferry_status_t ferry_xport_req_wait(ferry_xport_req_t *req, int timeout_ms) {
    if (!req) return FERRY_ERR_INVALID_ARGUMENT;
    if (!req->done && req->xp->ops->req_wait) return req->xp->ops->req_wait(req->xp, req, timeout_ms);
    return req->status; /* shm finishes its copies inside get/put */
}

void ferry_xport_req_free(ferry_xport_req_t *req) {
    if (!req) return;
    if (!req->done) ferry_xport_req_wait(req, -1); /* nothing may still write into the caller's buffers */
    ferry_free(req->xp->ctx, req);
}

/* ---- parallel copy ------------------------------------------------------ */

typedef struct {
    ferry_xport_t *xp;
    const ferry_xport_run_t *runs;
    size_t n;
    bool put;
    xport_copy_fn copy;
    uint64_t from, to; /* bytes of the concatenated runs this worker moves */
    ferry_status_t status;
} slice_t;

static void *copy_slice(void *arg) {
    slice_t *s = arg;
    uint64_t at = 0;
    for (size_t i = 0; i < s->n && at < s->to && s->status == FERRY_OK; i++) {
        uint64_t lo = at, hi = at + s->runs[i].len;
        at = hi;
        if (hi <= s->from || lo >= s->to) continue;
        uint64_t a = lo > s->from ? lo : s->from, b = hi < s->to ? hi : s->to;
        s->status = s->copy(s->xp, &s->runs[i], (size_t)(a - lo), (size_t)(b - a), s->put);
    }
    return NULL;
}

ferry_status_t xport_copy_parallel(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n, bool put,
                                   xport_copy_fn copy) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += runs[i].len;
    uint32_t nt = total >= xp->split_bytes ? xp->threads : 1;
    if (nt > 1 && total / nt < (1u << 20)) nt = (uint32_t)(total >> 20) + 1; /* at least 1 MiB a thread */
    slice_t slices[64];
    pthread_t tids[64];
    bool started[64] = {false};
    for (uint32_t t = 0; t < nt; t++) {
        /* 4 KiB-aligned cuts: threads never share a page */
        uint64_t from = total * t / nt, to = total * (t + 1) / nt;
        if (t > 0) from &= ~(uint64_t)4095;
        if (t + 1 < nt) to &= ~(uint64_t)4095;
        slices[t] = (slice_t){xp, runs, n, put, copy, from, to, FERRY_OK};
    }
    for (uint32_t t = 1; t < nt; t++) started[t] = pthread_create(&tids[t], NULL, copy_slice, &slices[t]) == 0;
    for (uint32_t t = 1; t < nt; t++)
        if (!started[t]) copy_slice(&slices[t]); /* no thread: do it here */
    copy_slice(&slices[0]);
    ferry_status_t st = slices[0].status;
    for (uint32_t t = 1; t < nt; t++) {
        if (started[t]) pthread_join(tids[t], NULL);
        if (st == FERRY_OK) st = slices[t].status;
    }
    return st;
}
