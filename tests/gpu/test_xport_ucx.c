/* GPU memory over the UCX transport, between two processes (owner on GPU 0,
 * reader on GPU 1 where there are two), in both of its ways:
 *  - native: this UCX has CUDA support (FERRY_UCX_CUDA=native; skipped,
 *    said so, where it has none);
 *  - staged: ferry's host staging (FERRY_UCX_CUDA=staged), the path of a
 *    UCX without CUDA;
 *  - auto against a UCX without CUDA (FERRY_TEST_UCX_PLAIN_LIB: the program
 *    runs itself again with that UCX loaded), where auto means staged.
 * Gets of cudaMalloc'd and transport-allocated GPU memory into device and
 * host memory: whole, random ranges at any alignment, batches of small and
 * large runs, requests in flight together; a range outside the
 * registration refused; a deregistered region stale; the owner's death
 * FERRY_ERR_PEER_LOST. Every byte checked. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ferry/xport.h"
#include "blob_pipe.h"
#include "gpu_check.h"

#define A_BYTES (64u << 20)
#define B_BYTES (8u << 20)

static ferry_xport_t *endpoint(ferry_ctx_t **ctx, ferry_status_t *st) {
    CHECK_OK(ferry_ctx_create(NULL, ctx, NULL, 0), "ctx");
    ferry_xport_params_t p = {.field_mask = FERRY_XPORT_PARAM_KIND | FERRY_XPORT_PARAM_TIMEOUT_MS,
                              .kind = FERRY_XPORT_UCX, .timeout_ms = 5000};
    ferry_xport_t *xp = NULL;
    *st = ferry_xport_create(*ctx, &p, &xp);
    return xp;
}

static void send_desc(int sock, ferry_xport_mem_t *m) {
    uint8_t d[FERRY_XPORT_DESC_MAX];
    size_t n = 0;
    CHECK_EQ_INT(ferry_xport_mem_pack(m, d, sizeof d, &n), FERRY_OK);
    send_blob(sock, d, n);
}

static void owner(int sock) {
    gpu_require();
    CUDA_OK(cudaSetDevice(0));
    ferry_ctx_t *ctx;
    ferry_status_t st;
    ferry_xport_t *xp = endpoint(&ctx, &st);
    if (!xp) {
        send_blob(sock, ferry_ctx_error(ctx), strlen(ferry_ctx_error(ctx)) + 1);
        _exit(0);
    }
    send_blob(sock, "ok", 3);
    void *a = NULL;
    CUDA_OK(cudaMalloc(&a, A_BYTES));
    gpu_fill(a, A_BYTES, 0, 1);
    ferry_xport_mem_t *ma, *mb;
    CHECK_OK(ferry_xport_mem_register(xp, a, A_BYTES, FERRY_MEM_CUDA, FERRY_XPORT_ACCESS_READ, &ma), ferry_xport_error(xp));
    CHECK_OK(ferry_xport_mem_alloc(xp, B_BYTES, FERRY_MEM_CUDA, FERRY_XPORT_ACCESS_READ, &mb), ferry_xport_error(xp));
    gpu_fill(ferry_xport_mem_ptr(mb), B_BYTES, 0, 2);
    CUDA_OK(cudaDeviceSynchronize());
    send_desc(sock, ma);
    send_desc(sock, mb);
    char cmd[16];
    for (;;) {
        size_t n = recv_blob(sock, cmd, sizeof cmd);
        if (n == 0 || !strcmp(cmd, "die")) _exit(0); /* no clean-up: a death */
        if (!strcmp(cmd, "dereg")) {
            ferry_xport_mem_deregister(ma);
            send_blob(sock, "done", 5);
        }
    }
}

static ferry_status_t get_runs(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n) {
    ferry_xport_req_t *req = NULL;
    ferry_status_t st = ferry_xport_get(xp, runs, n, &req);
    if (st) return st;
    st = ferry_xport_req_wait(req, -1);
    ferry_xport_req_free(req);
    return st;
}

static ferry_status_t get(ferry_xport_t *xp, ferry_xport_rmem_t *r, uint64_t off, void *dst, size_t len) {
    ferry_xport_run_t run = {r, off, dst, len};
    return get_runs(xp, &run, 1);
}

/* Whether n bytes of device memory hold the pattern from offset off. */
static void check_dev(const void *dev, size_t n, uint64_t off, uint32_t seed, const char *what) {
    uint8_t *h = malloc(n ? n : 1);
    CHECK(h);
    CUDA_OK(cudaMemcpy(h, dev, n, cudaMemcpyDeviceToHost));
    CHECK(host_matches(h, n, off, seed, what));
    free(h);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int reader(int sock, const char *mode) {
    int ngpu = gpu_require();
    CUDA_OK(cudaSetDevice(ngpu > 1 ? 1 : 0));
    char first[512];
    recv_blob(sock, first, sizeof first);
    if (strcmp(first, "ok") != 0) { /* the owner could not make an endpoint in this mode */
        CHECK(!strcmp(mode, "native") && strstr(first, "no CUDA support"));
        printf("%s: skipped: %s\n", mode, first);
        return 77;
    }
    ferry_ctx_t *ctx;
    ferry_status_t cst;
    ferry_xport_t *xp = endpoint(&ctx, &cst);
    CHECK_OK(cst, ferry_ctx_error(ctx));
    uint8_t d[FERRY_XPORT_DESC_MAX];
    size_t n = recv_blob(sock, d, sizeof d);
    ferry_xport_rmem_t *ra = NULL, *rb = NULL;
    CHECK_OK(ferry_xport_rmem_unpack(xp, d, n, &ra), ferry_xport_error(xp));
    n = recv_blob(sock, d, sizeof d);
    CHECK_OK(ferry_xport_rmem_unpack(xp, d, n, &rb), ferry_xport_error(xp));
    CHECK(ferry_xport_rmem_mem_type(ra) == FERRY_MEM_CUDA && ferry_xport_rmem_size(ra) == A_BYTES);
    uint8_t *dev = NULL, *host = malloc(A_BYTES);
    CHECK(host);
    CUDA_OK(cudaMalloc((void **)&dev, A_BYTES));
    /* whole, into device and into host memory; the second device get timed */
    CHECK_OK(get(xp, ra, 0, dev, A_BYTES), ferry_xport_error(xp));
    check_dev(dev, A_BYTES, 0, 1, "whole get into GPU memory");
    CUDA_OK(cudaMemset(dev, 0, A_BYTES));
    double t0 = now_s();
    CHECK_OK(get(xp, ra, 0, dev, A_BYTES), ferry_xport_error(xp));
    double dt = now_s() - t0;
    check_dev(dev, A_BYTES, 0, 1, "second whole get");
    CHECK_OK(get(xp, ra, 0, host, A_BYTES), ferry_xport_error(xp));
    CHECK(host_matches(host, A_BYTES, 0, 1, "whole get into host memory"));
    /* random ranges, any alignment, both destinations */
    for (int i = 0; i < 60; i++) {
        uint64_t off = next_rand() % A_BYTES, len = next_rand() % (A_BYTES - off) + 1;
        if (i % 3) len = len % 100000 + 1;
        if (len > A_BYTES - off) len = A_BYTES - off;
        size_t at = (size_t)(next_rand() % 64);
        if (at + len > A_BYTES) at = 0;
        if (i % 2) {
            CHECK_OK(get(xp, ra, off, dev + at, (size_t)len), ferry_xport_error(xp));
            check_dev(dev + at, (size_t)len, off, 1, "random range into GPU memory");
        } else {
            CHECK_OK(get(xp, ra, off, host + at, (size_t)len), ferry_xport_error(xp));
            CHECK(host_matches(host + at, (size_t)len, off, 1, "random range into host memory"));
        }
    }
    /* a batch: 256 runs of 4 KiB and 4 of 3 MiB, scattered, into GPU memory */
    ferry_xport_run_t runs[260];
    for (int i = 0; i < 256; i++)
        runs[i] = (ferry_xport_run_t){ra, (uint64_t)(i * 7919 % 4096) * 4096, dev + (size_t)i * 4096, 4096};
    for (int i = 0; i < 4; i++)
        runs[256 + i] = (ferry_xport_run_t){ra, (uint64_t)(13 * i + 1) * (1u << 20) + 5, dev + (2u << 20) + (size_t)i * (3u << 20),
                                            3u << 20};
    CHECK_OK(get_runs(xp, runs, 260), ferry_xport_error(xp));
    for (int i = 0; i < 260; i++) check_dev(runs[i].local, runs[i].len, runs[i].remote_offset, 1, "batched run");
    /* four requests in flight at once, and the transport's own allocation */
    ferry_xport_req_t *reqs[4];
    for (int i = 0; i < 4; i++) {
        ferry_xport_run_t one = {i < 3 ? ra : rb, (uint64_t)i << 20, dev + ((size_t)i << 22), 2u << 20};
        CHECK_OK(ferry_xport_get(xp, &one, 1, &reqs[i]), ferry_xport_error(xp));
    }
    for (int i = 0; i < 4; i++) {
        CHECK_OK(ferry_xport_req_wait(reqs[i], -1), ferry_xport_error(xp));
        ferry_xport_req_free(reqs[i]);
        check_dev(dev + ((size_t)i << 22), 2u << 20, (uint64_t)i << 20, i < 3 ? 1 : 2, "request in flight");
    }
    /* outside the registration: refused, nothing moved */
    CHECK(get(xp, ra, A_BYTES - 10, dev, 11) == FERRY_ERR_INVALID_ARGUMENT);
    /* stale after the owner's deregistration */
    send_blob(sock, "dereg", 6);
    char ack[8];
    recv_blob(sock, ack, sizeof ack);
    ferry_status_t st = get(xp, ra, 0, dev, 4096);
    CHECK(st == FERRY_ERR_STALE);
    /* the owner dies */
    send_blob(sock, "die", 4);
    char c;
    CHECK(read(sock, &c, 1) == 0);
    double t1 = now_s();
    st = get(xp, rb, 0, dev, 4096);
    CHECK(st == FERRY_ERR_PEER_LOST);
    printf("%s: whole, 60 random ranges, 260-run batch, 4 in flight into GPU %d and host memory: bytes right; "
           "64 MiB get %.2f GB/s; stale and out-of-range refused; owner's death: %s in %.0f ms\n",
           mode, ngpu > 1 ? 1 : 0, A_BYTES / dt / 1e9, ferry_status_name(st), (now_s() - t1) * 1e3);
    ferry_xport_rmem_release(ra);
    ferry_xport_rmem_release(rb);
    ferry_xport_destroy(xp);
    ferry_ctx_destroy(ctx);
    CUDA_OK(cudaFree(dev));
    free(host);
    return 0;
}

/* Owner and reader in processes of their own (no CUDA before a fork). */
static int run_mode(const char *mode) {
    if (strcmp(mode, "auto") != 0) setenv("FERRY_UCX_CUDA", mode, 1);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    pid_t o = fork();
    CHECK(o >= 0);
    if (o == 0) {
        close(sv[1]);
        alarm(120);
        owner(sv[0]);
        _exit(0);
    }
    pid_t r = fork();
    CHECK(r >= 0);
    if (r == 0) {
        close(sv[0]);
        alarm(120);
        _exit(reader(sv[1], mode));
    }
    close(sv[0]), close(sv[1]);
    int ws = 0, rc;
    CHECK(waitpid(r, &ws, 0) == r);
    rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    kill(o, SIGKILL);
    waitpid(o, &ws, 0);
    return rc;
}

/* FERRY_TEST_UCX_PLAIN_LIB (scripts/gpu-test.sh): a UCX without CUDA. This
 * program runs again against it (LD_LIBRARY_PATH wins over the build's
 * RUNPATH), where the default way must be staging. */
static int run_plain(const char *self, const char *plain) {
    char ld[4096], mod[4096];
    const char *old = getenv("LD_LIBRARY_PATH");
    snprintf(ld, sizeof ld, "%s%s%s", plain, old ? ":" : "", old ? old : "");
    snprintf(mod, sizeof mod, "%s/ucx", plain);
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) {
        setenv("LD_LIBRARY_PATH", ld, 1);
        setenv("UCX_MODULE_DIR", mod, 1);
        unsetenv("FERRY_TEST_UCX_PLAIN_LIB");
        execl(self, self, "--auto", (char *)NULL);
        _exit(127);
    }
    int ws = 0;
    CHECK(waitpid(p, &ws, 0) == p);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--auto")) { /* the default way of whatever UCX is loaded */
        unsetenv("FERRY_UCX_CUDA");
        int rc = run_mode("auto");
        return rc;
    }
    int staged = run_mode("staged");
    int native = run_mode("native");
    const char *plain = getenv("FERRY_TEST_UCX_PLAIN_LIB");
    int autorc = plain && *plain ? run_plain("/proc/self/exe", plain) : 0;
    if (autorc != 0 && autorc != 77) return autorc;
    if (staged != 0 && staged != 77) return staged;
    if (native != 0 && native != 77) return native;
    if (staged == 77) return 77; /* no GPU */
    if (native == 77 && getenv("FERRY_TEST_REQUIRE_UCX_CUDA")) { /* scripts/gpu-test.sh with a CUDA UCX */
        fprintf(stderr, "native: skipped, but FERRY_TEST_REQUIRE_UCX_CUDA is set\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
