/* Loading CUDA once, and pointer queries (common/cuda.h). */
#include "common/cuda.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifndef FERRY_CUDA

ferry_status_t ferry_cuda_init(ferry_errbuf_t *err) {
    return ferry_fail(err, FERRY_ERR_UNSUPPORTED,
                      "GPU memory needs a ferry built with CUDA (this one was built without nvcc: FERRY_CUDA)");
}

ferry_status_t ferry_cuda_ptr_query(const void *ptr, size_t size, ferry_cuda_ptr_t *out, ferry_errbuf_t *err) {
    (void)ptr, (void)size, (void)out;
    return ferry_cuda_init(err);
}

ferry_status_t ferry_cuda_reach(const void *ptr, ferry_errbuf_t *err) {
    (void)ptr;
    return ferry_cuda_init(err);
}

int ferry_cuda_current_device(ferry_errbuf_t *err) {
    ferry_cuda_init(err);
    return -1;
}

bool ferry_cuda_loaded(void) { return false; }

#else

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded; /* 1 once load() succeeded (read without the once) */
static ferry_cuda_driver_t drv;
static ferry_status_t init_status;
static char init_error[FERRY_ERR_TEXT];

const ferry_cuda_driver_t *ferry_cuda_driver(void) { return &drv; }

ferry_status_t ferry_cuda_fail(ferry_errbuf_t *err, ferry_status_t status, cudaError_t e, const char *what) {
    return ferry_fail(err, status, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

ferry_status_t ferry_cuda_fail_drv(ferry_errbuf_t *err, ferry_status_t status, CUresult r, const char *what) {
    const char *s = NULL;
    if (!drv.GetErrorString || drv.GetErrorString(r, &s) != CUDA_SUCCESS || !s) s = "unknown error";
    return ferry_fail(err, status, "%s: CUDA driver error %d (%s)", what, (int)r, s);
}

static void load(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        init_status = FERRY_ERR_UNSUPPORTED;
        snprintf(init_error, sizeof init_error, "no usable CUDA device: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
        return;
    }
    struct {
        const char *name;
        void **fn;
        int version; /* the driver API version whose signature the pointer has */
    } syms[] = {
        {"cuPointerGetAttribute", (void **)&drv.PointerGetAttribute, 4000},
        {"cuMemGetAddressRange", (void **)&drv.MemGetAddressRange, 3020},
        {"cuMemRetainAllocationHandle", (void **)&drv.MemRetainAllocationHandle, 11000},
        {"cuMemRelease", (void **)&drv.MemRelease, 10020},
        {"cuMemGetAllocationPropertiesFromHandle", (void **)&drv.MemGetAllocationPropertiesFromHandle, 10020},
        {"cuMemExportToShareableHandle", (void **)&drv.MemExportToShareableHandle, 10020},
        {"cuMemImportFromShareableHandle", (void **)&drv.MemImportFromShareableHandle, 10020},
        {"cuMemAddressReserve", (void **)&drv.MemAddressReserve, 10020},
        {"cuMemAddressFree", (void **)&drv.MemAddressFree, 10020},
        {"cuMemMap", (void **)&drv.MemMap, 10020},
        {"cuMemUnmap", (void **)&drv.MemUnmap, 10020},
        {"cuMemSetAccess", (void **)&drv.MemSetAccess, 10020},
        {"cuGetErrorString", (void **)&drv.GetErrorString, 6000},
        {"cuMemCreate", (void **)&drv.MemCreate, 10020},
        {"cuMemGetAllocationGranularity", (void **)&drv.MemGetAllocationGranularity, 10020},
        {"cuCtxGetCurrent", (void **)&drv.CtxGetCurrent, 4000},
        {"cuCtxSetCurrent", (void **)&drv.CtxSetCurrent, 4000},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        e = cudaGetDriverEntryPointByVersion(syms[i].name, syms[i].fn, (unsigned)syms[i].version, cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*syms[i].fn) {
            init_status = FERRY_ERR_UNSUPPORTED;
            snprintf(init_error, sizeof init_error, "the CUDA driver lacks %s (version %d): %s", syms[i].name,
                     syms[i].version, e != cudaSuccess ? cudaGetErrorString(e) : "symbol not found");
            return;
        }
    }
    init_status = FERRY_OK;
    __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
}

bool ferry_cuda_loaded(void) { return __atomic_load_n(&loaded, __ATOMIC_ACQUIRE) != 0; }

ferry_status_t ferry_cuda_init(ferry_errbuf_t *err) {
    pthread_once(&once, load);
    if (init_status != FERRY_OK) return ferry_fail(err, init_status, "%s", init_error);
    return FERRY_OK;
}

int ferry_cuda_current_device(ferry_errbuf_t *err) {
    if (ferry_cuda_init(err)) return -1;
    int d = -1;
    cudaError_t e = cudaGetDevice(&d);
    if (e != cudaSuccess) {
        ferry_cuda_fail(err, FERRY_ERR_UNSUPPORTED, e, "cudaGetDevice");
        return -1;
    }
    return d;
}

ferry_status_t ferry_cuda_reach(const void *ptr, ferry_errbuf_t *err) {
    ferry_cuda_ptr_t pi;
    ferry_status_t st = ferry_cuda_ptr_query(ptr, 0, &pi, err);
    if (st) return st;
    int cur = ferry_cuda_current_device(err);
    if (cur < 0) return FERRY_ERR_UNSUPPORTED;
    if (cur == pi.device) return FERRY_OK;
    if (pi.vmm)
        return ferry_fail(err, FERRY_ERR_UNSUPPORTED,
                          "%p is VMM memory of device %d in this process, not mapped for device %d: put both "
                          "sides on one device or in separate processes", ptr, pi.device, cur);
    int can = 0;
    cudaError_t e = cudaDeviceCanAccessPeer(&can, cur, pi.device);
    if (e != cudaSuccess) return ferry_cuda_fail(err, FERRY_ERR_UNSUPPORTED, e, "cudaDeviceCanAccessPeer");
    if (!can)
        return ferry_fail(err, FERRY_ERR_UNSUPPORTED, "%p is memory of device %d, which device %d has no peer access to",
                          ptr, pi.device, cur);
    e = cudaDeviceEnablePeerAccess(pi.device, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError(); /* not sticky, but cleared so later checks don't see it */
        e = cudaSuccess;
    }
    return e == cudaSuccess ? FERRY_OK : ferry_cuda_fail(err, FERRY_ERR_UNSUPPORTED, e, "cudaDeviceEnablePeerAccess");
}

static const char *mem_kind(CUmemorytype t) {
    switch (t) {
    case CU_MEMORYTYPE_HOST: return "pinned host memory";
    case CU_MEMORYTYPE_ARRAY: return "a CUDA array";
    case CU_MEMORYTYPE_UNIFIED: return "managed memory";
    default: return "device memory";
    }
}

ferry_status_t ferry_cuda_ptr_query(const void *ptr, size_t size, ferry_cuda_ptr_t *out, ferry_errbuf_t *err) {
    ferry_status_t st = ferry_cuda_init(err);
    if (st) return st;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    unsigned int mt = 0, managed = 0;
    int dev = -1;
    CUresult r = drv.PointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
    if (r == CUDA_ERROR_INVALID_VALUE || (r == CUDA_SUCCESS && mt == 0))
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%p is not CUDA memory (pageable host memory?)", ptr);
    if (r != CUDA_SUCCESS) return ferry_cuda_fail_drv(err, FERRY_ERR_INVALID_ARGUMENT, r, "cuPointerGetAttribute");
    drv.PointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
    if (mt != CU_MEMORYTYPE_DEVICE || managed)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%p is %s, not device memory", ptr,
                          managed ? "managed memory" : mem_kind((CUmemorytype)mt));
    if ((r = drv.PointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p)) != CUDA_SUCCESS)
        return ferry_cuda_fail_drv(err, FERRY_ERR_INVALID_ARGUMENT, r, "cuPointerGetAttribute(DEVICE_ORDINAL)");
    /* cuMemGetAddressRange finds only allocations of the current context:
       ask in the memory's own device (a process may hold several GPUs) */
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess) cur = -1;
    if (cur != dev) cudaSetDevice(dev);
    CUdeviceptr base = 0;
    size_t asize = 0;
    r = drv.MemGetAddressRange(&base, &asize, p);
    if (cur >= 0 && cur != dev) cudaSetDevice(cur);
    if (r != CUDA_SUCCESS) return ferry_cuda_fail_drv(err, FERRY_ERR_INVALID_ARGUMENT, r, "cuMemGetAddressRange");
    unsigned long long id = 0;
    if ((r = drv.PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p)) != CUDA_SUCCESS)
        return ferry_cuda_fail_drv(err, FERRY_ERR_INVALID_ARGUMENT, r, "cuPointerGetAttribute(BUFFER_ID)");
    /* cuMemCreate'd memory has an allocation handle to retain; cudaMalloc's has none */
    CUmemGenericAllocationHandle h;
    bool vmm = drv.MemRetainAllocationHandle(&h, (void *)(uintptr_t)p) == CUDA_SUCCESS;
    if (vmm) drv.MemRelease(h);
    if (size > 0) { /* the last byte: same device; one allocation unless VMM */
        CUdeviceptr last = p + size - 1;
        int dev2 = -1;
        unsigned int mt2 = 0;
        if (drv.PointerGetAttribute(&mt2, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, last) != CUDA_SUCCESS ||
            mt2 != CU_MEMORYTYPE_DEVICE ||
            drv.PointerGetAttribute(&dev2, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, last) != CUDA_SUCCESS || dev2 != dev)
            return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT,
                              "%zu bytes at %p run past the device memory there (they end outside device %d's memory)",
                              size, ptr, dev);
        if (!vmm && last >= base + asize)
            return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT,
                              "%zu bytes at %p run past the end of their allocation (%zu bytes at %p)", size, ptr,
                              asize, (void *)(uintptr_t)base);
    }
    out->device = dev;
    out->alloc_base = base;
    out->alloc_size = asize;
    out->buffer_id = id;
    out->vmm = vmm;
    return FERRY_OK;
}

#endif
