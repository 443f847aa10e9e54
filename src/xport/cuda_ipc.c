/* CUDA memory across processes of one host (xport/cuda_ipc.h). */
#include "xport/cuda_ipc.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cuda.h"

#ifndef FERRY_CUDA

ferry_status_t xcuda_export(ferry_ctx_t *ctx, ferry_errbuf_t *err, void *ptr, size_t size, xcuda_export_t **out) {
    (void)ctx, (void)ptr, (void)size, (void)out;
    return ferry_cuda_init(err);
}
void xcuda_export_free(ferry_ctx_t *ctx, xcuda_export_t *e) { (void)ctx, (void)e; }
ferry_status_t xcuda_alloc(ferry_errbuf_t *err, size_t size, void **out) {
    (void)size, (void)out;
    return ferry_cuda_init(err);
}
void xcuda_free(void *ptr) { (void)ptr; }
xcuda_cache_t *xcuda_cache_create(ferry_ctx_t *ctx) {
    (void)ctx;
    return NULL;
}
void xcuda_cache_destroy(xcuda_cache_t *c) { (void)c; }
ferry_status_t xcuda_import(xcuda_cache_t *c, ferry_errbuf_t *err, xcuda_chunk_t *chunks, uint32_t n, bool vmm,
                            uint64_t size, bool writable, xcuda_import_t **out, uint8_t **base) {
    (void)c, (void)vmm, (void)size, (void)writable, (void)out, (void)base;
    for (uint32_t i = 0; i < n; i++)
        if (chunks[i].fd >= 0) close(chunks[i].fd), chunks[i].fd = -1;
    return ferry_cuda_init(err);
}
void xcuda_import_release(xcuda_cache_t *c, xcuda_import_t *imp) { (void)c, (void)imp; }
ferry_status_t xcuda_copy_start(xcuda_stream_t **stream, ferry_errbuf_t *err, const xcuda_copy_t *runs, size_t n,
                                 xcuda_event_t **ev) {
    (void)stream, (void)runs, (void)n, (void)ev;
    return ferry_cuda_init(err);
}
ferry_status_t xcuda_event_wait(xcuda_event_t *ev, ferry_errbuf_t *err) {
    (void)ev;
    return ferry_cuda_init(err);
}
void xcuda_stream_destroy(xcuda_stream_t *s) { (void)s; }
bool xcuda_is_device(const void *ptr) {
    (void)ptr;
    return false;
}

#else

/* ---- owner --------------------------------------------------------------- */

static ferry_status_t add_chunk(ferry_ctx_t *ctx, ferry_errbuf_t *err, xcuda_export_t *e, uint32_t *cap) {
    if (e->n == XCUDA_MAX_CHUNKS)
        return ferry_fail(err, FERRY_ERR_LIMIT, "cuda: a registration over more than %d allocations", XCUDA_MAX_CHUNKS);
    if (e->n == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 4;
        xcuda_chunk_t *c = ferry_realloc(ctx, e->chunks, nc * sizeof *c);
        if (!c) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory exporting CUDA memory");
        e->chunks = c;
        *cap = nc;
    }
    memset(&e->chunks[e->n], 0, sizeof e->chunks[e->n]);
    e->chunks[e->n].fd = -1;
    e->n++;
    return FERRY_OK;
}

ferry_status_t xcuda_export(ferry_ctx_t *ctx, ferry_errbuf_t *err, void *ptr, size_t size, xcuda_export_t **out) {
    ferry_cuda_ptr_t pi;
    ferry_status_t st = ferry_cuda_ptr_query(ptr, size, &pi, err);
    if (st) return st;
    const ferry_cuda_driver_t *d = ferry_cuda_driver();
    xcuda_export_t *e = ferry_calloc(ctx, 1, sizeof *e);
    if (!e) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory exporting CUDA memory");
    e->device = pi.device;
    e->vmm = pi.vmm;
    uint32_t cap = 0;
    uint64_t start = (uint64_t)(uintptr_t)ptr, end = start + size;
    if (!pi.vmm) {
        if ((st = add_chunk(ctx, err, e, &cap)) != FERRY_OK) goto fail;
        xcuda_chunk_t *c = &e->chunks[0];
        cudaIpcMemHandle_t h;
        int cur = -1;
        cudaGetDevice(&cur);
        if (cur != pi.device) cudaSetDevice(pi.device); /* the handle is made in the memory's context */
        cudaError_t ce = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)pi.alloc_base);
        if (cur >= 0 && cur != pi.device) cudaSetDevice(cur);
        if (ce != cudaSuccess) {
            st = ferry_cuda_fail(err, FERRY_ERR_UNSUPPORTED, ce, "cuda: cudaIpcGetMemHandle (is this cudaMalloc memory?)");
            goto fail;
        }
        memcpy(c->handle, &h, sizeof h < XCUDA_HANDLE_BYTES ? sizeof h : XCUDA_HANDLE_BYTES);
        c->off = (int64_t)(pi.alloc_base - start);
        c->size = pi.alloc_size;
        c->id = pi.buffer_id;
        *out = e;
        return FERRY_OK;
    }
    /* VMM: every allocation mapped across the range, in address order */
    for (uint64_t at = start; at < end;) {
        CUdeviceptr base = 0;
        size_t len = 0;
        CUresult r = d->MemGetAddressRange(&base, &len, (CUdeviceptr)at);
        if (r != CUDA_SUCCESS || len == 0 || base > at || base + len <= at) {
            st = r != CUDA_SUCCESS ? ferry_cuda_fail_drv(err, FERRY_ERR_INVALID_ARGUMENT, r, "cuda: cuMemGetAddressRange")
                                   : ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "cuda: no mapping at %p", (void *)at);
            goto fail;
        }
        CUmemGenericAllocationHandle h;
        if ((r = d->MemRetainAllocationHandle(&h, (void *)(uintptr_t)at)) != CUDA_SUCCESS) {
            st = ferry_cuda_fail_drv(err, FERRY_ERR_INVALID_ARGUMENT, r, "cuda: cuMemRetainAllocationHandle");
            goto fail;
        }
        unsigned long long id = 0;
        d->PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)at);
        int fd = -1;
        r = d->MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        d->MemRelease(h);
        if (r != CUDA_SUCCESS) {
            st = ferry_fail(err, FERRY_ERR_UNSUPPORTED,
                            "cuda: the VMM allocation at %p cannot be exported as a file descriptor (CUDA driver "
                            "error %d): it was created without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR",
                            (void *)(uintptr_t)base, (int)r);
            goto fail;
        }
        if ((st = add_chunk(ctx, err, e, &cap)) != FERRY_OK) {
            close(fd);
            goto fail;
        }
        xcuda_chunk_t *c = &e->chunks[e->n - 1];
        c->off = (int64_t)(base - start);
        c->size = len;
        c->id = id;
        c->fd = fd;
        at = base + len;
    }
    *out = e;
    return FERRY_OK;
fail:
    xcuda_export_free(ctx, e);
    return st;
}

void xcuda_export_free(ferry_ctx_t *ctx, xcuda_export_t *e) {
    if (!e) return;
    for (uint32_t i = 0; i < e->n; i++)
        if (e->chunks[i].fd >= 0) close(e->chunks[i].fd);
    ferry_free(ctx, e->chunks);
    ferry_free(ctx, e);
}

ferry_status_t xcuda_alloc(ferry_errbuf_t *err, size_t size, void **out) {
    ferry_status_t st = ferry_cuda_init(err);
    if (st) return st;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, size);
    if (e != cudaSuccess) return ferry_cuda_fail(err, FERRY_ERR_NO_MEMORY, e, "cuda: cudaMalloc");
    /* waited for: cudaMemset returns before it is done, and the streams
       that copy into this memory later do not wait for the default one */
    if ((e = cudaMemset(p, 0, size)) != cudaSuccess || (e = cudaStreamSynchronize(0)) != cudaSuccess) {
        cudaFree(p);
        return ferry_cuda_fail(err, FERRY_ERR_IO, e, "cuda: cudaMemset");
    }
    *out = p;
    return FERRY_OK;
}

void xcuda_free(void *ptr) {
    if (ptr) cudaFree(ptr);
}

/* ---- peer ---------------------------------------------------------------- */

typedef struct xcuda_open { /* one allocation of the owner, opened here */
    uint64_t id, size;
    bool vmm;
    uint8_t handle[XCUDA_HANDLE_BYTES];
    int device;
    void *ptr;                        /* legacy: the opened base */
    CUmemGenericAllocationHandle mem; /* VMM: the imported allocation */
    uint32_t refs;
    struct xcuda_open *next;
} xcuda_open_t;

struct xcuda_cache {
    ferry_ctx_t *ctx;
    xcuda_open_t *opens;
};

struct xcuda_import {
    uint32_t n;
    xcuda_open_t **opens;
    CUdeviceptr va;  /* VMM: the range the chunks are mapped into here */
    size_t va_size;
};

xcuda_cache_t *xcuda_cache_create(ferry_ctx_t *ctx) {
    xcuda_cache_t *c = ferry_calloc(ctx, 1, sizeof *c);
    if (c) c->ctx = ctx;
    return c;
}

static void open_put(xcuda_cache_t *c, xcuda_open_t *o) {
    if (--o->refs > 0) return;
    for (xcuda_open_t **pp = &c->opens; *pp; pp = &(*pp)->next)
        if (*pp == o) {
            *pp = o->next;
            break;
        }
    if (o->vmm) ferry_cuda_driver()->MemRelease(o->mem);
    else cudaIpcCloseMemHandle(o->ptr);
    ferry_free(c->ctx, o);
}

void xcuda_cache_destroy(xcuda_cache_t *c) {
    if (!c) return;
    while (c->opens) {
        c->opens->refs = 1;
        open_put(c, c->opens);
    }
    ferry_free(c->ctx, c);
}

/* The opening of chunk ch (consuming its fd), shared when already open. */
static ferry_status_t open_get(xcuda_cache_t *c, ferry_errbuf_t *err, xcuda_chunk_t *ch, bool vmm, int device,
                               xcuda_open_t **out) {
    for (xcuda_open_t *o = c->opens; o; o = o->next) {
        if (o->id == ch->id && o->size == ch->size && o->vmm == vmm && o->device == device &&
            (vmm || memcmp(o->handle, ch->handle, XCUDA_HANDLE_BYTES) == 0)) {
            if (ch->fd >= 0) close(ch->fd), ch->fd = -1;
            o->refs++;
            *out = o;
            return FERRY_OK;
        }
    }
    xcuda_open_t *o = ferry_calloc(c->ctx, 1, sizeof *o);
    if (!o) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory opening CUDA memory");
    o->id = ch->id;
    o->size = ch->size;
    o->vmm = vmm;
    o->device = device;
    memcpy(o->handle, ch->handle, XCUDA_HANDLE_BYTES);
    if (vmm) {
        CUresult r = ferry_cuda_driver()->MemImportFromShareableHandle(&o->mem, (void *)(uintptr_t)ch->fd,
                                                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(ch->fd);
        ch->fd = -1;
        if (r != CUDA_SUCCESS) {
            ferry_free(c->ctx, o);
            return ferry_cuda_fail_drv(err, FERRY_ERR_IO, r, "cuda: cuMemImportFromShareableHandle");
        }
    } else {
        cudaIpcMemHandle_t h;
        memcpy(&h, ch->handle, sizeof h);
        cudaError_t e = cudaIpcOpenMemHandle(&o->ptr, h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
            ferry_free(c->ctx, o);
            return ferry_cuda_fail(err, FERRY_ERR_IO, e, "cuda: cudaIpcOpenMemHandle");
        }
    }
    o->refs = 1;
    o->next = c->opens;
    c->opens = o;
    *out = o;
    return FERRY_OK;
}

void xcuda_import_release(xcuda_cache_t *c, xcuda_import_t *imp) {
    if (!imp) return;
    const ferry_cuda_driver_t *d = ferry_cuda_driver();
    if (imp->va) {
        d->MemUnmap(imp->va, imp->va_size);
        d->MemAddressFree(imp->va, imp->va_size);
    }
    for (uint32_t i = 0; i < imp->n; i++)
        if (imp->opens[i]) open_put(c, imp->opens[i]);
    ferry_free(c->ctx, imp->opens);
    ferry_free(c->ctx, imp);
}

ferry_status_t xcuda_import(xcuda_cache_t *c, ferry_errbuf_t *err, xcuda_chunk_t *chunks, uint32_t n, bool vmm,
                            uint64_t size, bool writable, xcuda_import_t **out, uint8_t **base) {
    ferry_status_t st = FERRY_OK;
    xcuda_import_t *imp = NULL;
    int device = ferry_cuda_current_device(err);
    if (device < 0) {
        st = FERRY_ERR_UNSUPPORTED;
        goto done;
    }
    /* the chunks must tile the registration: first at or before its start,
       each where the last ended, the last at or past its end */
    if (n == 0 || (!vmm && n != 1) || chunks[0].off > 0) {
        st = ferry_fail(err, FERRY_ERR_CORRUPT, "cuda: the owner described %u allocations that do not start the region", n);
        goto done;
    }
    uint64_t span = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (chunks[i].size == 0 || (vmm && chunks[i].fd < 0) || (!vmm && chunks[i].fd >= 0) ||
            (i > 0 && chunks[i].off != chunks[i - 1].off + (int64_t)chunks[i - 1].size) ||
            ferry_add_u64(span, chunks[i].size, &span) != 0) {
            st = ferry_fail(err, FERRY_ERR_CORRUPT, "cuda: allocation %u of the owner's description is inconsistent", i);
            goto done;
        }
    }
    if ((uint64_t)(-chunks[0].off) > span || span - (uint64_t)(-chunks[0].off) < size) {
        st = ferry_fail(err, FERRY_ERR_CORRUPT, "cuda: the owner's allocations (%llu bytes) do not cover its %llu-byte region",
                        (unsigned long long)span, (unsigned long long)size);
        goto done;
    }
    imp = ferry_calloc(c->ctx, 1, sizeof *imp);
    if (imp) imp->opens = ferry_calloc(c->ctx, n, sizeof *imp->opens);
    if (!imp || !imp->opens) {
        st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory opening CUDA memory");
        goto done;
    }
    imp->n = n;
    for (uint32_t i = 0; i < n && st == FERRY_OK; i++) st = open_get(c, err, &chunks[i], vmm, device, &imp->opens[i]);
    if (st) goto done;
    if (!vmm) {
        *base = (uint8_t *)imp->opens[0]->ptr - chunks[0].off;
    } else {
        const ferry_cuda_driver_t *d = ferry_cuda_driver();
        CUresult r = d->MemAddressReserve(&imp->va, span, 0, 0, 0);
        if (r != CUDA_SUCCESS) {
            imp->va = 0;
            st = ferry_cuda_fail_drv(err, FERRY_ERR_NO_MEMORY, r, "cuda: cuMemAddressReserve");
            goto done;
        }
        imp->va_size = span;
        uint64_t at = 0;
        for (uint32_t i = 0; i < n; i++) {
            if ((r = d->MemMap(imp->va + at, chunks[i].size, 0, imp->opens[i]->mem, 0)) != CUDA_SUCCESS) {
                if (at) d->MemUnmap(imp->va, at);
                d->MemAddressFree(imp->va, span);
                imp->va = 0;
                st = ferry_cuda_fail_drv(err, FERRY_ERR_IO, r, "cuda: cuMemMap");
                goto done;
            }
            at += chunks[i].size;
        }
        CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
                               .flags = writable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ};
        if ((r = d->MemSetAccess(imp->va, span, &acc, 1)) != CUDA_SUCCESS) {
            st = ferry_cuda_fail_drv(err, FERRY_ERR_IO, r, "cuda: cuMemSetAccess");
            goto done;
        }
        *base = (uint8_t *)(uintptr_t)imp->va - chunks[0].off;
    }
done:
    for (uint32_t i = 0; i < n; i++)
        if (chunks[i].fd >= 0) close(chunks[i].fd), chunks[i].fd = -1;
    if (st) {
        xcuda_import_release(c, imp);
        return st;
    }
    *out = imp;
    return FERRY_OK;
}

/* ---- copies -------------------------------------------------------------- */

struct xcuda_stream {
    cudaStream_t s;
    int device;
};

struct xcuda_event {
    cudaEvent_t e;
    int device;
};

ferry_status_t xcuda_copy_start(xcuda_stream_t **stream, ferry_errbuf_t *err, const xcuda_copy_t *runs, size_t n,
                                 xcuda_event_t **ev) {
    ferry_status_t st = ferry_cuda_init(err);
    if (st) return st;
    int dev = -1;
    cudaGetDevice(&dev);
    xcuda_stream_t *s = *stream;
    if (s && s->device != dev) { /* the thread moved to another device: a stream there */
        xcuda_stream_destroy(s);
        *stream = s = NULL;
    }
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory for a CUDA stream");
        cudaError_t e = cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            free(s);
            return ferry_cuda_fail(err, FERRY_ERR_IO, e, "cuda: cudaStreamCreate");
        }
        s->device = dev;
        *stream = s;
    }
    for (size_t i = 0; i < n; i++) {
        if (!runs[i].len) continue;
        cudaError_t e = cudaMemcpyAsync(runs[i].dst, runs[i].src, runs[i].len, cudaMemcpyDefault, s->s);
        if (e != cudaSuccess) {
            cudaStreamSynchronize(s->s);
            return ferry_cuda_fail(err, FERRY_ERR_IO, e, "cuda: cudaMemcpyAsync");
        }
    }
    xcuda_event_t *x = calloc(1, sizeof *x);
    cudaError_t e = x ? cudaEventCreateWithFlags(&x->e, cudaEventDisableTiming) : cudaErrorMemoryAllocation;
    if (e == cudaSuccess && (e = cudaEventRecord(x->e, s->s)) != cudaSuccess) cudaEventDestroy(x->e);
    if (e != cudaSuccess) {
        free(x);
        cudaStreamSynchronize(s->s); /* nothing may be left in flight untracked */
        return ferry_cuda_fail(err, FERRY_ERR_IO, e, "cuda: recording the copies' end");
    }
    x->device = dev;
    *ev = x;
    return FERRY_OK;
}

ferry_status_t xcuda_event_wait(xcuda_event_t *ev, ferry_errbuf_t *err) {
    cudaError_t e = cudaEventSynchronize(ev->e);
    cudaEventDestroy(ev->e);
    free(ev);
    return e == cudaSuccess ? FERRY_OK : ferry_cuda_fail(err, FERRY_ERR_IO, e, "cuda: copying");
}

void xcuda_stream_destroy(xcuda_stream_t *s) {
    if (!s) return;
    cudaStreamDestroy(s->s);
    free(s);
}

bool xcuda_is_device(const void *ptr) {
    if (!ferry_cuda_loaded()) return false;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
        cudaGetLastError(); /* not sticky, but clear it */
        return false;
    }
    return a.type == cudaMemoryTypeDevice;
}

#endif
