/* CUDA memory over the shm transport, between two processes (one per GPU
 * where there are two): cudaMalloc memory through legacy IPC handles and
 * VMM memory (cuMemCreate with POSIX fds, as PyTorch's expandable_segments
 * makes it) over several allocations; gets into device and host memory,
 * batched runs, puts into a writable registration and refusal of a
 * read-only one; registrations in one allocation opened once; a freed and
 * reallocated address opened anew (never a stale mapping); stale
 * descriptors; the owner's death turning into FERRY_ERR_PEER_LOST. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ferry/xport.h"
#include "blob_pipe.h"
#include "gpu_check.h"

#define A_BYTES (64u << 20)
#define W_BYTES (8u << 20)

static ferry_xport_t *endpoint(ferry_ctx_t **ctx) {
    CHECK_OK(ferry_ctx_create(NULL, ctx, NULL, 0), "ctx");
    ferry_xport_params_t p = {.field_mask = FERRY_XPORT_PARAM_KIND | FERRY_XPORT_PARAM_TIMEOUT_MS,
                              .kind = FERRY_XPORT_SHM, .timeout_ms = 5000};
    ferry_xport_t *xp = NULL;
    CHECK_OK(ferry_xport_create(*ctx, &p, &xp), ferry_ctx_error(*ctx));
    return xp;
}

static void send_desc(int sock, ferry_xport_mem_t *m) {
    uint8_t d[FERRY_XPORT_DESC_MAX];
    size_t n = 0;
    CHECK_EQ_INT(ferry_xport_mem_pack(m, d, sizeof d, &n), FERRY_OK);
    send_blob(sock, d, n);
}

static void owner(int sock) {
    int ngpu = gpu_require();
    (void)ngpu;
    CUDA_OK(cudaSetDevice(0));
    ferry_ctx_t *ctx;
    ferry_xport_t *xp = endpoint(&ctx);
    /* cudaMalloc memory: the whole allocation, a part of it, a writable one */
    void *a = NULL, *w = NULL;
    CUDA_OK(cudaMalloc(&a, A_BYTES));
    CUDA_OK(cudaMalloc(&w, W_BYTES));
    gpu_fill(a, A_BYTES, 0, 1);
    CUDA_OK(cudaMemset(w, 0, W_BYTES));
    ferry_xport_mem_t *ma, *ma2, *mw, *mv;
    CHECK_OK(ferry_xport_mem_register(xp, a, A_BYTES, FERRY_MEM_CUDA, FERRY_XPORT_ACCESS_READ, &ma), ferry_xport_error(xp));
    CHECK_OK(ferry_xport_mem_register(xp, (uint8_t *)a + (1u << 20), 2u << 20, FERRY_MEM_CUDA, FERRY_XPORT_ACCESS_READ, &ma2),
             ferry_xport_error(xp));
    CHECK_OK(ferry_xport_mem_register(xp, w, W_BYTES, FERRY_MEM_CUDA, FERRY_XPORT_ACCESS_WRITE, &mw), ferry_xport_error(xp));
    /* VMM memory: three allocations mapped side by side, registered from
       the middle of the first to the middle of the third */
    const ferry_cuda_driver_t *d = ferry_cuda_driver();
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t g = 0;
    CU_OK(d->MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va = 0;
    CU_OK(d->MemAddressReserve(&va, 3 * g, 0, 0, 0));
    for (int i = 0; i < 3; i++) {
        CUmemGenericAllocationHandle h;
        CU_OK(d->MemCreate(&h, g, &prop, 0));
        CU_OK(d->MemMap(va + (CUdeviceptr)i * g, g, 0, h, 0));
        CU_OK(d->MemRelease(h));
    }
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_OK(d->MemSetAccess(va, 3 * g, &acc, 1));
    gpu_fill((void *)(uintptr_t)va, 3 * g, 0, 2);
    CHECK_OK(ferry_xport_mem_register(xp, (void *)(uintptr_t)(va + g / 2), 2 * g, FERRY_MEM_CUDA, FERRY_XPORT_ACCESS_READ, &mv),
             ferry_xport_error(xp));
    uint64_t gran = g;
    send_blob(sock, &gran, sizeof gran);
    send_desc(sock, ma);
    send_desc(sock, ma2);
    send_desc(sock, mw);
    send_desc(sock, mv);
    char cmd[16];
    for (;;) {
        size_t n = recv_blob(sock, cmd, sizeof cmd - 1);
        cmd[n] = 0;
        if (!strcmp(cmd, "check-w")) {
            int ok = gpu_matches(w, W_BYTES, 0, 4, "owner: W after the peer's put");
            send_blob(sock, &ok, sizeof ok);
        } else if (!strcmp(cmd, "recycle")) {
            /* end A's registrations, free A, allocate at (likely) the same address */
            ferry_xport_mem_deregister(ma2);
            ferry_xport_mem_deregister(ma);
            void *old = a;
            CUDA_OK(cudaFree(a));
            CUDA_OK(cudaMalloc(&a, A_BYTES));
            gpu_fill(a, A_BYTES, 0, 3);
            CHECK_OK(ferry_xport_mem_register(xp, a, A_BYTES, FERRY_MEM_CUDA, FERRY_XPORT_ACCESS_READ, &ma),
                     ferry_xport_error(xp));
            int same = a == old;
            send_blob(sock, &same, sizeof same);
            send_desc(sock, ma);
        } else if (!strcmp(cmd, "die")) {
            _exit(0); /* no clean-up: as a crash */
        } else {
            CHECK(0);
        }
    }
}

static ferry_xport_rmem_t *unpack(ferry_xport_t *xp, int sock) {
    uint8_t d[FERRY_XPORT_DESC_MAX];
    size_t n = recv_blob(sock, d, sizeof d);
    ferry_xport_rmem_t *r = NULL;
    CHECK_OK(ferry_xport_rmem_unpack(xp, d, n, &r), ferry_xport_error(xp));
    CHECK_EQ_INT(ferry_xport_rmem_mem_type(r), FERRY_MEM_CUDA);
    return r;
}

static ferry_status_t get(ferry_xport_t *xp, ferry_xport_rmem_t *r, uint64_t off, void *local, size_t len) {
    ferry_xport_run_t run = {.rmem = r, .remote_offset = off, .local = local, .len = len};
    ferry_xport_req_t *req = NULL;
    ferry_status_t st = ferry_xport_get(xp, &run, 1, &req);
    if (st == FERRY_OK) st = ferry_xport_req_wait(req, -1);
    ferry_xport_req_free(req);
    return st;
}

static int peer(int sock) {
    int ngpu = gpu_require();
    int dev = ngpu > 1 ? 1 : 0;
    CUDA_OK(cudaSetDevice(dev));
    printf("owner on GPU 0, peer on GPU %d\n", dev);
    ferry_ctx_t *ctx;
    ferry_xport_t *xp = endpoint(&ctx);
    uint64_t g = 0;
    CHECK(recv_blob(sock, &g, sizeof g) == sizeof g);
    ferry_xport_rmem_t *ra = unpack(xp, sock), *ra2 = unpack(xp, sock), *rw = unpack(xp, sock), *rv = unpack(xp, sock);
    CHECK_EQ_INT(ferry_xport_rmem_size(rv), 2 * g);

    /* whole allocation into device memory, and into pageable host memory */
    void *dbuf = NULL;
    CUDA_OK(cudaMalloc(&dbuf, A_BYTES));
    CHECK_OK(get(xp, ra, 0, dbuf, A_BYTES), ferry_xport_error(xp));
    CHECK(gpu_matches(dbuf, A_BYTES, 0, 1, "A into device memory"));
    uint8_t *hbuf = malloc(A_BYTES);
    CHECK(hbuf);
    CHECK_OK(get(xp, ra, 0, hbuf, A_BYTES), ferry_xport_error(xp));
    CHECK(host_matches(hbuf, A_BYTES, 0, 1, "A into host memory"));
    /* a batch of odd runs */
    ferry_xport_run_t runs[64];
    uint64_t at = 0, rs = 12345;
    for (int i = 0; i < 64; i++) {
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t off = (rs >> 20) % (A_BYTES - 70000), len = 1 + (rs >> 7) % 65536;
        runs[i] = (ferry_xport_run_t){.rmem = ra, .remote_offset = off, .local = (uint8_t *)dbuf + at, .len = len};
        at += len;
    }
    ferry_xport_req_t *req = NULL;
    CHECK_OK(ferry_xport_get(xp, runs, 64, &req), ferry_xport_error(xp));
    CHECK_OK(ferry_xport_req_wait(req, -1), ferry_xport_error(xp));
    ferry_xport_req_free(req);
    for (int i = 0; i < 64; i++) CHECK(gpu_matches(runs[i].local, runs[i].len, runs[i].remote_offset, 1, "a batched run"));
    /* a part of the same allocation: the same opening, not a second one */
    const void *va = NULL, *va2 = NULL;
    CHECK_EQ_INT(ferry_xport_rmem_view(ra, 0, 1, &va), FERRY_OK);
    CHECK_EQ_INT(ferry_xport_rmem_view(ra2, 0, 1, &va2), FERRY_OK);
    CHECK((const uint8_t *)va2 - (const uint8_t *)va == (1 << 20));
    CHECK_OK(get(xp, ra2, 0, hbuf, 2u << 20), ferry_xport_error(xp));
    CHECK(host_matches(hbuf, 2u << 20, 1u << 20, 1, "A's part"));
    /* VMM over three allocations, from the middle of the first */
    CHECK_OK(get(xp, rv, 0, dbuf, 2 * g), ferry_xport_error(xp));
    CHECK(gpu_matches(dbuf, 2 * g, g / 2, 2, "VMM memory"));
    CHECK_OK(get(xp, rv, g - 100, hbuf, 200), ferry_xport_error(xp)); /* across an allocation boundary */
    CHECK(host_matches(hbuf, 200, g / 2 + g - 100, 2, "VMM across allocations"));
    /* puts: into the writable registration; refused into a read-only one */
    gpu_fill(dbuf, W_BYTES, 0, 4);
    ferry_xport_run_t pr = {.rmem = rw, .remote_offset = 0, .local = dbuf, .len = W_BYTES};
    CHECK_OK(ferry_xport_put(xp, &pr, 1, &req), ferry_xport_error(xp));
    CHECK_OK(ferry_xport_req_wait(req, -1), ferry_xport_error(xp));
    ferry_xport_req_free(req);
    send_blob(sock, "check-w", 7);
    int ok = 0;
    recv_blob(sock, &ok, sizeof ok);
    CHECK(ok);
    pr.rmem = ra;
    CHECK_EQ_INT(ferry_xport_put(xp, &pr, 1, &req), FERRY_ERR_INVALID_ARGUMENT);
    /* the owner frees A and allocates again: old descriptors are stale, the
       new registration is opened anew even at the same address */
    send_blob(sock, "recycle", 7);
    int same = 0;
    recv_blob(sock, &same, sizeof same);
    ferry_xport_rmem_t *rb = unpack(xp, sock);
    CHECK_EQ_INT(get(xp, ra2, 0, hbuf, 1024), FERRY_ERR_STALE);
    CHECK_OK(get(xp, rb, 0, dbuf, A_BYTES), ferry_xport_error(xp));
    CHECK(gpu_matches(dbuf, A_BYTES, 0, 3, "the reallocated A"));
    printf("reallocation at the same address: %s\n", same ? "yes (the stale-mapping case was exercised)" : "no");
    ferry_xport_rmem_release(ra);
    ferry_xport_rmem_release(ra2);
    /* the owner dies */
    send_blob(sock, "die", 3);
    char c;
    CHECK(read(sock, &c, 1) == 0); /* its end of the socket closed: it is gone */
    ferry_status_t st = get(xp, rb, 0, hbuf, 4096);
    CHECK(st == FERRY_ERR_PEER_LOST);
    printf("after the owner's death: %s (%s)\n", ferry_status_name(st), ferry_xport_error(xp));
    ferry_xport_rmem_release(rb);
    ferry_xport_rmem_release(rw);
    ferry_xport_rmem_release(rv);
    ferry_xport_destroy(xp);
    ferry_ctx_destroy(ctx);
    CUDA_OK(cudaFree(dbuf));
    free(hbuf);
    return 0;
}

int main(void) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    pid_t o = fork();
    CHECK(o >= 0);
    if (o == 0) {
        close(sv[1]);
        owner(sv[0]);
        _exit(0);
    }
    close(sv[0]);
    int rc = peer(sv[1]);
    int ws = 0;
    kill(o, SIGKILL);
    waitpid(o, &ws, 0);
    if (rc == 0) printf("ok\n");
    return rc;
}
