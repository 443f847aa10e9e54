/* CUDA, as the library uses it: one place that loads the runtime and the
 * driver functions ferry needs, and says what a pointer is.
 *
 * Builds with FERRY_CUDA link the CUDA runtime statically; it loads the
 * driver on first use, so those builds run on hosts without a GPU, where
 * ferry_cuda_init fails with FERRY_ERR_UNSUPPORTED and a detail saying why.
 * Builds without CUDA compile this too: every call fails the same way
 * ("built without CUDA"). Driver functions come through
 * cudaGetDriverEntryPointByVersion, so nothing links libcuda.
 * Thread-safety: every function may be called from any thread. */
#ifndef FERRY_COMMON_CUDA_H
#define FERRY_COMMON_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/internal.h"

/* Loads the runtime and the driver entry points once per process.
 * FERRY_OK, or FERRY_ERR_UNSUPPORTED (no CUDA in the build, no driver, no
 * device, a driver too old for an entry point) with detail on err. */
ferry_status_t ferry_cuda_init(ferry_errbuf_t *err);

/* Whether ferry_cuda_init has succeeded in this process (never initializes). */
bool ferry_cuda_loaded(void);

/* What a pointer range is, from the driver. */
typedef struct ferry_cuda_ptr {
    int device;              /* ordinal of the GPU holding the memory */
    uint64_t alloc_base;     /* start of the allocation containing ptr (the mapping, for VMM) */
    uint64_t alloc_size;
    uint64_t buffer_id;      /* the driver's process-wide unique id of that allocation (never reused) */
    bool vmm;                /* cuMemCreate/cuMemMap memory (e.g. torch expandable_segments), not cudaMalloc */
} ferry_cuda_ptr_t;

/* Describes [ptr, ptr + size): it must be device memory (not host,
 * pinned-host or managed memory) on one device. A VMM range may span several
 * mapped allocations; *out describes the one holding ptr.
 * Errors: FERRY_ERR_INVALID_ARGUMENT naming what the memory is instead,
 * FERRY_ERR_UNSUPPORTED (no CUDA). */
ferry_status_t ferry_cuda_ptr_query(const void *ptr, size_t size, ferry_cuda_ptr_t *out, ferry_errbuf_t *err);

/* Makes device memory of this process at ptr usable by kernels on the
 * calling thread's current device: nothing when it is that device's memory,
 * else peer access from the current device to the memory's (enabled once per
 * pair, process-wide). Memory of another process is opened through IPC
 * instead (xport/cuda_ipc.h), which maps it for the opener.
 * Errors: FERRY_ERR_UNSUPPORTED (the devices have no peer access, or the
 * memory is VMM memory, whose access the owner's mapping sets),
 * FERRY_ERR_INVALID_ARGUMENT (not device memory). */
ferry_status_t ferry_cuda_reach(const void *ptr, ferry_errbuf_t *err);

/* The calling thread's current device (-1 with an error if none). */
int ferry_cuda_current_device(ferry_errbuf_t *err);

#ifdef FERRY_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

/* Driver functions used outside the runtime API (VMM export/import and
 * pointer queries). Valid after ferry_cuda_init returned FERRY_OK. */
typedef struct ferry_cuda_driver {
    CUresult (*PointerGetAttribute)(void *data, CUpointer_attribute attr, CUdeviceptr ptr);
    CUresult (*MemGetAddressRange)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
    CUresult (*MemRetainAllocationHandle)(CUmemGenericAllocationHandle *handle, void *addr);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle handle);
    CUresult (*MemGetAllocationPropertiesFromHandle)(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle);
    CUresult (*MemExportToShareableHandle)(void *shareable, CUmemGenericAllocationHandle handle,
                                           CUmemAllocationHandleType type, unsigned long long flags);
    CUresult (*MemImportFromShareableHandle)(CUmemGenericAllocationHandle *handle, void *shareable,
                                             CUmemAllocationHandleType type);
    CUresult (*MemAddressReserve)(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                  unsigned long long flags);
    CUresult (*MemAddressFree)(CUdeviceptr ptr, size_t size);
    CUresult (*MemMap)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                       unsigned long long flags);
    CUresult (*MemUnmap)(CUdeviceptr ptr, size_t size);
    CUresult (*MemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
    CUresult (*GetErrorString)(CUresult error, const char **str);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                          unsigned long long flags);
    CUresult (*MemGetAllocationGranularity)(size_t *granularity, const CUmemAllocationProp *prop,
                                            CUmemAllocationGranularity_flags option);
    /* the calling thread's context, as it was (none included), around work on another device */
    CUresult (*CtxGetCurrent)(CUcontext *ctx);
    CUresult (*CtxSetCurrent)(CUcontext ctx);
} ferry_cuda_driver_t;

const ferry_cuda_driver_t *ferry_cuda_driver(void);

/* Records a failed runtime call: "what: cudaErrorX (message)". */
ferry_status_t ferry_cuda_fail(ferry_errbuf_t *err, ferry_status_t status, cudaError_t e, const char *what);
/* The same for a driver call. */
ferry_status_t ferry_cuda_fail_drv(ferry_errbuf_t *err, ferry_status_t status, CUresult r, const char *what);
#endif

#endif
