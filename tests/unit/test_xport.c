/* Every transport between two processes (fork): byte-exact gets and puts of
 * random and batched ranges, large (multi-threaded) reads, out-of-range and
 * corrupt-descriptor rejection, stale descriptors after deregistration, the
 * owner killed (-9) mid-session turning into FERRY_ERR_PEER_LOST within the
 * timeout, registered user memory, the registration cache, puts refused on
 * read-only registrations, and (shm) sealed memfds that a peer can neither
 * resize nor map writable. Runs for shm, and for UCX over TCP and over its
 * shared-memory transports. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "blob_pipe.h"
#include "check.h"
#include "common/copy.h"
#include "ferry/xport.h"

static uint8_t pattern(uint64_t off, uint32_t seed) {
    uint64_t x = (off + seed) * 0x9e3779b97f4a7c15ull;
    return (uint8_t)(x >> 56);
}

static ferry_xport_kind_t g_kind = FERRY_XPORT_SHM;

static ferry_xport_t *endpoint_timeout(ferry_ctx_t *ctx, uint32_t threads, uint32_t timeout_ms) {
    ferry_xport_params_t p = {.field_mask = FERRY_XPORT_PARAM_THREADS | FERRY_XPORT_PARAM_SPLIT_BYTES |
                                            FERRY_XPORT_PARAM_TIMEOUT_MS | FERRY_XPORT_PARAM_KIND,
                              .kind = g_kind, .threads = threads, .split_bytes = 1u << 20, .timeout_ms = timeout_ms};
    ferry_xport_t *xp = NULL;
    CHECK_OK(ferry_xport_create(ctx, &p, &xp), ferry_ctx_error(ctx));
    return xp;
}

static ferry_xport_t *endpoint(ferry_ctx_t *ctx, uint32_t threads) { return endpoint_timeout(ctx, threads, 3000); }

static void signal_byte(int fd) { CHECK(write(fd, "x", 1) == 1); }
static void await_byte(int fd) {
    char c;
    CHECK(read(fd, &c, 1) == 1);
}

static ferry_status_t get1(ferry_xport_t *xp, ferry_xport_rmem_t *r, uint64_t off, void *dst, size_t len) {
    ferry_xport_run_t run = {r, off, dst, len};
    ferry_xport_req_t *req = NULL;
    ferry_status_t st = ferry_xport_get(xp, &run, 1, &req);
    if (st) return st;
    st = ferry_xport_req_wait(req, -1);
    ferry_xport_req_free(req);
    return st;
}

/* UCX with FERRY_UCX_STAGE_HOST=1: the owner serves reads through host
 * staging (GPU memory's path, run here on host memory), which moves gets
 * only: every put into such memory must be refused, nothing moved. */
static bool g_staged;

static ferry_status_t staged_put_refused(ferry_xport_t *xp, ferry_status_t st) {
    CHECK(st == FERRY_ERR_UNSUPPORTED);
    CHECK(strstr(ferry_xport_error(xp), "staging moves gets only"));
    return FERRY_OK;
}

static ferry_status_t put1(ferry_xport_t *xp, ferry_xport_rmem_t *r, uint64_t off, const void *src, size_t len) {
    ferry_xport_run_t run = {r, off, (void *)src, len};
    ferry_xport_req_t *req = NULL;
    ferry_status_t st = ferry_xport_put(xp, &run, 1, &req);
    if (g_staged && st != FERRY_ERR_STALE) return staged_put_refused(xp, st);
    if (st) return st;
    st = ferry_xport_req_wait(req, -1);
    ferry_xport_req_free(req);
    return st;
}

/* Runs a role of this program in a fresh process (fork, then exec of
 * ourselves): a forked copy of a process that already has threads (UCX's,
 * the endpoint's) may inherit a lock held by one of them. The pipe ends a
 * and b stay open across exec; the transport kind travels in the
 * environment. */
static pid_t spawn(const char *role, int a, int b) {
    char sa[16], sb[16];
    snprintf(sa, sizeof sa, "%d", a);
    snprintf(sb, sizeof sb, "%d", b);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_xport", "--role", role, sa, sb, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Allocates size bytes on xp and packs their descriptor into desc. */
static ferry_xport_mem_t *alloc_packed(ferry_xport_t *xp, size_t size, ferry_xport_access_t access, uint8_t *desc,
                                       size_t *dlen) {
    ferry_xport_mem_t *m = NULL;
    CHECK_OK(ferry_xport_mem_alloc(xp, size, FERRY_MEM_HOST, access, &m), ferry_xport_error(xp));
    CHECK_OK(ferry_xport_mem_pack(m, desc, FERRY_XPORT_DESC_MAX, dlen), ferry_xport_error(xp));
    return m;
}

static int wait_child(pid_t pid) {
    int ws = 0;
    CHECK(waitpid(pid, &ws, 0) == pid);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

#define SIZE (8u << 20)

/* The reader side of test_reads_and_writes, in the child. */
static void reader(int rfd, int wfd) {
    alarm(60);
    ferry_ctx_t *ctx = test_ctx();
    ferry_xport_t *xp = endpoint(ctx, 4);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen = recv_blob(rfd, desc, sizeof desc);
    ferry_xport_rmem_t *r = NULL;
    CHECK_OK(ferry_xport_rmem_unpack(xp, desc, dlen, &r), ferry_xport_error(xp));
    CHECK(ferry_xport_rmem_size(r) == SIZE);
    uint8_t *buf = malloc(SIZE);
    CHECK(buf);
    for (int i = 0; i < 300; i++) { /* random single ranges */
        uint64_t off = rng_next() % SIZE, len = rng_next() % (SIZE - off + 1);
        if (i % 3) len %= 65536;
        if (len > SIZE - off) len = SIZE - off;
        CHECK_OK(get1(xp, r, off, buf, (size_t)len), ferry_xport_error(xp));
        for (uint64_t k = 0; k < len; k++)
            if (buf[k] != pattern(off + k, 1)) CHECK(!"get returned wrong bytes");
    }
    /* the whole region, split over threads */
    CHECK_OK(get1(xp, r, 0, buf, SIZE), ferry_xport_error(xp));
    for (uint64_t k = 0; k < SIZE; k++)
        if (buf[k] != pattern(k, 1)) CHECK(!"large get returned wrong bytes");
    /* a view: shm maps allocated memory here, UCX does not */
    const void *view = NULL;
    ferry_status_t vst = ferry_xport_rmem_view(r, 4096, SIZE - 4096, &view);
    if (g_kind == FERRY_XPORT_SHM) {
        CHECK_OK(vst, "view of mapped memory");
        const uint8_t *v = view;
        for (uint64_t k = 0; k < SIZE - 4096; k += 4093)
            if (v[k] != pattern(4096 + k, 1)) CHECK(!"a view shows wrong bytes");
        /* streaming copies out of it, at every alignment and around the 4 KiB cut-over */
        static const size_t lens[] = {0, 1, 63, 4095, 4096, 4097, 5000, 65536 + 77, 3u << 20};
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (size_t mis = 0; mis < 67; mis += 11) {
                memset(buf, 0xA5, lens[li] + 200);
                ferry_copy_stream(buf + mis, v + mis * 3, lens[li]);
                for (size_t k = 0; k < lens[li]; k++)
                    if (buf[mis + k] != pattern(4096 + mis * 3 + k, 1)) CHECK(!"streaming copy wrong");
                for (size_t k = 0; k < mis; k++) CHECK(buf[k] == 0xA5);
                for (size_t k = mis + lens[li]; k < mis + lens[li] + 64; k++) CHECK(buf[k] == 0xA5);
            }
    } else {
        CHECK(vst == FERRY_ERR_UNSUPPORTED);
    }
    CHECK(ferry_xport_rmem_view(r, 4096, SIZE - 4095, &view) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_xport_rmem_view(r, UINT64_MAX, 1, &view) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK_OK(ferry_xport_rmem_check(r), ferry_xport_error(xp));
    /* a batch of 256 runs of 4 KiB from scattered offsets */
    ferry_xport_run_t runs[256];
    for (int i = 0; i < 256; i++) runs[i] = (ferry_xport_run_t){r, (uint64_t)(i * 7919 % 2048) * 4096, buf + i * 4096, 4096};
    ferry_xport_req_t *req = NULL;
    CHECK_OK(ferry_xport_get(xp, runs, 256, &req), ferry_xport_error(xp));
    CHECK_OK(ferry_xport_req_wait(req, -1), ferry_xport_error(xp));
    ferry_xport_req_free(req);
    for (int i = 0; i < 256; i++)
        for (int k = 0; k < 4096; k++)
            if (buf[i * 4096 + k] != pattern(runs[i].remote_offset + (uint64_t)k, 1)) CHECK(!"batched get wrong");
    /* four requests in flight at once, waited afterwards; a fifth freed unwaited */
    ferry_xport_req_t *many[5] = {NULL};
    for (int i = 0; i < 5; i++) {
        ferry_xport_run_t one = {r, (uint64_t)i * (1u << 20), buf + (size_t)i * (1u << 20), 1u << 20};
        CHECK_OK(ferry_xport_get(xp, &one, 1, &many[i]), ferry_xport_error(xp));
    }
    for (int i = 0; i < 4; i++) {
        CHECK_OK(ferry_xport_req_wait(many[i], -1), ferry_xport_error(xp));
        ferry_xport_req_free(many[i]);
    }
    ferry_xport_req_free(many[4]); /* waits first */
    for (uint64_t k = 0; k < (5u << 20); k++)
        if (buf[k] != pattern(k, 1)) CHECK(!"overlapping gets returned wrong bytes");
    /* puts: [1 MiB, 3 MiB) gets pattern 2, in one put and a batch */
    for (uint64_t k = 0; k < (2u << 20); k++) buf[k] = pattern((1u << 20) + k, 2);
    CHECK_OK(put1(xp, r, 1u << 20, buf, 1u << 20), ferry_xport_error(xp));
    for (int i = 0; i < 256; i++)
        runs[i] = (ferry_xport_run_t){r, (2u << 20) + (uint64_t)i * 4096, buf + (1u << 20) + i * 4096, 4096};
    if (g_staged) {
        staged_put_refused(xp, ferry_xport_put(xp, runs, 256, &req));
    } else {
        CHECK_OK(ferry_xport_put(xp, runs, 256, &req), ferry_xport_error(xp));
        CHECK_OK(ferry_xport_req_wait(req, -1), ferry_xport_error(xp));
        ferry_xport_req_free(req);
    }
    /* out of range, one byte past the end, and a batch with one bad run: nothing moves */
    CHECK(get1(xp, r, SIZE - 10, buf, 11) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferry_xport_error(xp), "outside the 8388608-byte registration"));
    CHECK(get1(xp, r, UINT64_MAX - 3, buf, 8) == FERRY_ERR_INVALID_ARGUMENT);
    memset(buf, 0xEE, 8192);
    ferry_xport_run_t bad[2] = {{r, 0, buf, 4096}, {r, SIZE, buf + 4096, 1}};
    CHECK(ferry_xport_get(xp, bad, 2, &req) == FERRY_ERR_INVALID_ARGUMENT && buf[0] == 0xEE);
    CHECK(strstr(ferry_xport_error(xp), "run 1"));
    /* corrupt and truncated descriptors are refused before use */
    ferry_xport_rmem_t *r2 = NULL;
    for (size_t i = 0; i < dlen; i++) {
        desc[i] ^= 0x40;
        CHECK(ferry_xport_rmem_unpack(xp, desc, dlen, &r2) == FERRY_ERR_CORRUPT);
        desc[i] ^= 0x40;
    }
    CHECK(ferry_xport_rmem_unpack(xp, desc, dlen - 1, &r2) == FERRY_ERR_CORRUPT);
    CHECK(r2 == NULL);
    free(buf);
    ferry_xport_rmem_release(r);
    ferry_xport_destroy(xp);
    ferry_ctx_destroy(ctx);
    signal_byte(wfd);
    _exit(0);
}

static void test_reads_and_writes(ferry_ctx_t *ctx) {
    ferry_xport_t *xp = endpoint(ctx, 1);
    ferry_xport_mem_t *m = NULL;
    CHECK_OK(ferry_xport_mem_alloc(xp, SIZE, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_WRITE, &m), ferry_xport_error(xp));
    uint8_t *p = ferry_xport_mem_ptr(m);
    for (uint64_t k = 0; k < SIZE; k++) p[k] = pattern(k, 1);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen;
    CHECK_OK(ferry_xport_mem_pack(m, desc, sizeof desc, &dlen), ferry_xport_error(xp));
    int to_child[2], to_parent[2];
    CHECK(pipe(to_child) == 0 && pipe(to_parent) == 0);
    pid_t pid = spawn("reader", to_child[0], to_parent[1]);
    close(to_child[0]), close(to_parent[1]); /* the child's ends: its death reads as EOF here */
    send_blob(to_child[1], desc, dlen);
    CHECK(wait_child(pid) == 0);
    for (uint64_t k = 0; k < SIZE; k++) {
        uint32_t seed = k >= (1u << 20) && k < (3u << 20) && !g_staged ? 2 : 1;
        if (p[k] != pattern(k, seed)) CHECK(!"the owner's memory does not hold what the peer put");
    }
    ferry_xport_mem_deregister(m);
    ferry_xport_destroy(xp);
    close(to_child[1]), close(to_parent[0]);
    printf("  two processes: 300 random gets, 8 MiB threaded get, 256-run batches, 5 requests in flight, %s, range "
           "and descriptor checks\n", g_staged ? "puts refused" : "puts");
}

static void stale_child(int in, int out) {
    alarm(30);
    ferry_ctx_t *c = test_ctx();
    ferry_xport_t *x = endpoint(c, 1);
    uint8_t desc[FERRY_XPORT_DESC_MAX], buf[64];
    size_t dlen = recv_blob(in, desc, sizeof desc);
    ferry_xport_rmem_t *r = NULL;
    CHECK_OK(ferry_xport_rmem_unpack(x, desc, dlen, &r), ferry_xport_error(x));
    CHECK_OK(get1(x, r, 0, buf, sizeof buf), ferry_xport_error(x));
    signal_byte(out);
    await_byte(in); /* the owner deregistered */
    CHECK(get1(x, r, 0, buf, sizeof buf) == FERRY_ERR_STALE);
    CHECK(strstr(ferry_xport_error(x), "stale"));
    CHECK(ferry_xport_rmem_check(r) == FERRY_ERR_STALE);
    CHECK(strstr(ferry_xport_error(x), "stale"));
    CHECK(put1(x, r, 0, buf, sizeof buf) == FERRY_ERR_STALE);
    ferry_xport_rmem_t *r2 = NULL;
    CHECK(ferry_xport_rmem_unpack(x, desc, dlen, &r2) == FERRY_ERR_STALE);
    ferry_xport_destroy(x);
    ferry_ctx_destroy(c);
    _exit(0);
}

/* Deregistration makes descriptors stale for peers that already mapped them. */
static void test_stale(ferry_ctx_t *ctx) {
    ferry_xport_t *xp = endpoint(ctx, 1);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen;
    ferry_xport_mem_t *m = alloc_packed(xp, 65536, FERRY_XPORT_ACCESS_WRITE, desc, &dlen);
    int a[2], b[2];
    CHECK(pipe(a) == 0 && pipe(b) == 0);
    pid_t pid = spawn("stale", a[0], b[1]);
    close(a[0]), close(b[1]);
    send_blob(a[1], desc, dlen);
    await_byte(b[0]);
    ferry_xport_mem_deregister(m);
    /* a new registration may reuse the slot; the old descriptor stays stale */
    CHECK_OK(ferry_xport_mem_alloc(xp, 65536, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_WRITE, &m), ferry_xport_error(xp));
    signal_byte(a[1]);
    CHECK(wait_child(pid) == 0);
    ferry_xport_mem_deregister(m);
    ferry_xport_destroy(xp);
    close(a[1]), close(b[0]);
    printf("  stale: gets, puts and unpacking of a deregistered region refused\n");
}

/* mib: the region's size in MiB (at least 1) */
static void idle_owner(int out, int mib) {
    alarm(60);
    ferry_ctx_t *c = test_ctx();
    ferry_xport_t *x = endpoint(c, 1);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen;
    (void)alloc_packed(x, (size_t)(mib > 0 ? mib : 1) << 20, FERRY_XPORT_ACCESS_READ, desc, &dlen);
    send_blob(out, desc, dlen);
    for (;;) pause();
}

/* An idle_owner child with a region of mib MiB: its pid; *desc, *dlen its
 * descriptor; *fd the pipe to close once it is stopped (idle_owner_stop). */
static pid_t idle_owner_start(int mib, uint8_t *desc, size_t *dlen, int *fd) {
    int a[2];
    CHECK(pipe(a) == 0);
    pid_t pid = spawn("idle_owner", a[1], mib);
    close(a[1]);
    *dlen = recv_blob(a[0], desc, FERRY_XPORT_DESC_MAX);
    *fd = a[0];
    return pid;
}

static void idle_owner_stop(pid_t pid, int fd) {
    CHECK(kill(pid, SIGKILL) == 0);
    CHECK(wait_child(pid) == 128 + SIGKILL);
    close(fd);
}

/* The owner killed with SIGKILL: the reader's next request fails, fast. */
static void test_owner_killed(ferry_ctx_t *ctx) {
    int a[2];
    CHECK(pipe(a) == 0);
    pid_t pid = spawn("idle_owner", a[1], 1);
    close(a[1]);
    ferry_xport_t *xp = endpoint(ctx, 1);
    uint8_t desc[FERRY_XPORT_DESC_MAX], buf[4096];
    size_t dlen = recv_blob(a[0], desc, sizeof desc);
    ferry_xport_rmem_t *r = NULL;
    CHECK_OK(ferry_xport_rmem_unpack(xp, desc, dlen, &r), ferry_xport_error(xp));
    CHECK_OK(get1(xp, r, 0, buf, sizeof buf), ferry_xport_error(xp));
    CHECK(kill(pid, SIGKILL) == 0);
    CHECK(wait_child(pid) == 128 + SIGKILL);
    double t0 = now_s();
    ferry_status_t st = get1(xp, r, 0, buf, sizeof buf);
    double dt = now_s() - t0;
    CHECK(st == FERRY_ERR_PEER_LOST);
    CHECK(strstr(ferry_xport_error(xp), "gone"));
    CHECK(dt < 3.0);
    if (g_kind == FERRY_XPORT_SHM) { /* what a reader copying from a view checks afterwards */
        const void *view = NULL;
        CHECK_OK(ferry_xport_rmem_view(r, 0, sizeof buf, &view), "view of a dead owner's memory");
        CHECK(ferry_xport_rmem_check(r) == FERRY_ERR_PEER_LOST);
        CHECK(strstr(ferry_xport_error(xp), "gone"));
    }
    /* a fresh descriptor of the dead owner: refused, not hung */
    ferry_xport_rmem_t *r2 = NULL;
    t0 = now_s();
    st = ferry_xport_rmem_unpack(xp, desc, dlen, &r2);
    CHECK(st == FERRY_ERR_PEER_LOST && now_s() - t0 < 3.0);
    ferry_xport_destroy(xp);
    close(a[0]);
    printf("  owner killed: PEER_LOST in %.1f ms\n", dt * 1e3);
}

static void user_owner(int out, int in) {
    alarm(60);
    ferry_ctx_t *c = test_ctx();
    ferry_xport_t *x = endpoint(c, 1);
    size_t n = 3u << 20;
    uint8_t *mem = malloc(n);
    CHECK(mem);
    for (size_t k = 0; k < n; k++) mem[k] = pattern(k, 3);
    ferry_xport_mem_t *m = NULL, *again = NULL;
    CHECK_OK(ferry_xport_mem_register(x, mem, n, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_WRITE, &m), ferry_xport_error(x));
    CHECK_OK(ferry_xport_mem_register(x, mem, n, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_WRITE, &again),
             ferry_xport_error(x));
    CHECK(again == m); /* the registration cache */
    ferry_xport_mem_deregister(again);
    /* the same range read-only is another registration: its descriptor must not let peers write */
    CHECK_OK(ferry_xport_mem_register(x, mem, n, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_READ, &again),
             ferry_xport_error(x));
    CHECK(again != m);
    ferry_xport_mem_deregister(again);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen;
    CHECK_OK(ferry_xport_mem_pack(m, desc, sizeof desc, &dlen), ferry_xport_error(x));
    send_blob(out, desc, dlen);
    await_byte(in);
    for (size_t k = 0; k < 4096; k++) CHECK(mem[100 + k] == pattern(k, 4)); /* the parent's put */
    ferry_xport_mem_deregister(m);
    signal_byte(out);
    await_byte(in);
    _exit(0);
}

typedef struct {
    pid_t pid;
    int delay_ms;
    double at;
} killer_t;

static void *kill_later(void *arg) {
    killer_t *k = arg;
    usleep((useconds_t)k->delay_ms * 1000);
    k->at = now_s();
    kill(k->pid, SIGKILL);
    return NULL;
}

/* The owner killed while the reader streams 64 MiB gets: the request in
 * flight (or the next) fails within the timeout; none returns bad data as
 * good (the region holds a pattern that every successful get is checked
 * against). */
static void test_owner_killed_midstream(ferry_ctx_t *ctx) {
    int a[2];
    CHECK(pipe(a) == 0);
    pid_t pid = spawn("idle_owner", a[1], 64);
    close(a[1]);
    ferry_xport_t *xp = endpoint(ctx, 1);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen = recv_blob(a[0], desc, sizeof desc);
    ferry_xport_rmem_t *r = NULL;
    CHECK_OK(ferry_xport_rmem_unpack(xp, desc, dlen, &r), ferry_xport_error(xp));
    size_t n = 64u << 20;
    uint8_t *buf = malloc(n);
    CHECK(buf);
    CHECK_OK(get1(xp, r, 0, buf, n), ferry_xport_error(xp)); /* warm: the connection is up */
    killer_t k = {pid, 20, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, kill_later, &k) == 0);
    ferry_status_t st = FERRY_OK;
    int good = 0;
    while (st == FERRY_OK && good < 100000) {
        st = get1(xp, r, 0, buf, n);
        good += st == FERRY_OK;
    }
    double failed = now_s();
    pthread_join(t, NULL);
    CHECK(wait_child(pid) == 128 + SIGKILL);
    CHECK(st == FERRY_ERR_PEER_LOST || st == FERRY_ERR_TIMEOUT);
    CHECK(failed - k.at < 3.0 + 1.0); /* the endpoint's timeout is 3 s */
    printf("  owner killed mid-stream: %d good 64 MiB gets, then %s %.1f ms after the kill\n", good,
           ferry_status_name(st), (failed - k.at) * 1e3);
    free(buf);
    ferry_xport_destroy(xp);
    close(a[0]);
}

/* Memory the caller owns, read and written with process_vm_*; the parent
 * reads the child (an ancestor may, whatever the ptrace policy). Returns
 * false when shm could not use process_vm_* here (ctest entry
 * unit/test_xport_user_memory then reports the case skipped). */
static bool test_user_memory(ferry_ctx_t *ctx) {
    int a[2], b[2];
    CHECK(pipe(a) == 0 && pipe(b) == 0);
    pid_t pid = spawn("user_owner", a[1], b[0]);
    close(a[1]), close(b[0]);
    ferry_xport_t *xp = endpoint(ctx, 2);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen = recv_blob(a[0], desc, sizeof desc);
    ferry_xport_rmem_t *r = NULL;
    CHECK_OK(ferry_xport_rmem_unpack(xp, desc, dlen, &r), ferry_xport_error(xp));
    size_t n = ferry_xport_rmem_size(r);
    uint8_t *buf = malloc(n);
    CHECK(buf);
    ferry_status_t st = get1(xp, r, 0, buf, n);
    bool ran = !(st == FERRY_ERR_UNSUPPORTED && g_kind == FERRY_XPORT_SHM);
    if (!ran) {
        printf("  user memory: skipped, process_vm_readv not permitted here (%s)\n", ferry_xport_error(xp));
    } else {
        CHECK_OK(st, ferry_xport_error(xp));
        for (size_t k = 0; k < n; k++)
            if (buf[k] != pattern(k, 3)) CHECK(!"process_vm get returned wrong bytes");
        const void *view = NULL; /* nothing of the owner's own memory is mapped here */
        CHECK(ferry_xport_rmem_view(r, 0, n, &view) == FERRY_ERR_UNSUPPORTED);
        for (size_t k = 0; k < 4096; k++) buf[k] = pattern(k, 4);
        CHECK_OK(put1(xp, r, 100, buf, 4096), ferry_xport_error(xp));
        printf("  user memory: 3 MiB read and 4 KiB written%s, registration cache hit\n",
               g_kind == FERRY_XPORT_SHM ? " with process_vm_*" : "");
    }
    signal_byte(b[1]);
    await_byte(a[0]); /* deregistered */
    CHECK(get1(xp, r, 0, buf, 16) == FERRY_ERR_STALE);
    signal_byte(b[1]);
    CHECK(wait_child(pid) == 0);
    free(buf);
    ferry_xport_destroy(xp);
    close(a[0]), close(b[1]);
    return ran;
}

/* Rewrites 8 bytes of a descriptor's body and its checksum: a descriptor a
 * peer could forge (the checksum catches corruption, not forgery). */
static void forge(uint8_t *desc, size_t len, size_t body_off, uint64_t value) {
    for (int i = 0; i < 8; i++) desc[8 + body_off + (size_t)i] = (uint8_t)(value >> (8 * i));
    uint64_t h = XXH3_64bits(desc, len - 8);
    for (int i = 0; i < 8; i++) desc[len - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
}

/* shm: a reader of another user, or one without the endpoint's secret, is
 * refused; a descriptor that overstates the region's size is refused. */
static void forger(int in, int out) {
    alarm(30);
    ferry_ctx_t *c = test_ctx();
    ferry_xport_t *x = endpoint(c, 1);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen = recv_blob(in, desc, sizeof desc);
    ferry_xport_rmem_t *r = NULL;
    uint8_t good[FERRY_XPORT_DESC_MAX];
    memcpy(good, desc, dlen);
    forge(desc, dlen, 41, 0x1234); /* a guessed secret */
    CHECK(ferry_xport_rmem_unpack(x, desc, dlen, &r) == FERRY_ERR_PEER_LOST && r == NULL);
    CHECK(strstr(ferry_xport_error(x), "refused"));
    memcpy(desc, good, dlen);
    forge(desc, dlen, 25, 64u << 20); /* 64 MiB claimed for a 64 KiB region */
    CHECK(ferry_xport_rmem_unpack(x, desc, dlen, &r) == FERRY_ERR_CORRUPT && r == NULL);
    CHECK(strstr(ferry_xport_error(x), "claims"));
    if (getuid() == 0) { /* another user with the right descriptor */
        ferry_xport_destroy(x);
        CHECK(setgid(65534) == 0 && setuid(65534) == 0);
        x = endpoint(c, 1);
        CHECK(ferry_xport_rmem_unpack(x, good, dlen, &r) == FERRY_ERR_PEER_LOST && r == NULL);
    }
    ferry_xport_destroy(x);
    ferry_ctx_destroy(c);
    signal_byte(out);
    _exit(0);
}

static void test_shm_access(ferry_ctx_t *ctx) {
    if (g_kind != FERRY_XPORT_SHM) return;
    ferry_xport_t *xp = endpoint(ctx, 1);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen;
    ferry_xport_mem_t *m = alloc_packed(xp, 65536, FERRY_XPORT_ACCESS_READ, desc, &dlen);
    int a[2], b[2];
    CHECK(pipe(a) == 0 && pipe(b) == 0);
    pid_t pid = spawn("forger", a[0], b[1]);
    close(a[0]), close(b[1]);
    send_blob(a[1], desc, dlen);
    await_byte(b[0]);
    CHECK(wait_child(pid) == 0);
    ferry_xport_mem_deregister(m);
    ferry_xport_destroy(xp);
    close(a[1]), close(b[0]);
    printf("  access: a wrong secret, an overstated size%s refused\n", getuid() == 0 ? " and another user" : "");
}

/* Sets a descriptor's flags byte and its checksum: a peer claiming write
 * access the owner did not give. */
static void forge_flags(uint8_t *desc, size_t len, uint8_t flags) {
    desc[5] = flags;
    uint64_t h = XXH3_64bits(desc, len - 8);
    for (int i = 0; i < 8; i++) desc[len - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
}

#define ACC_SIZE 65536u

/* The peer of test_access: descriptors of a read-only allocation, a
 * writable one and read-only user memory, in that order. */
static void access_peer(int in, int out) {
    alarm(60);
    ferry_ctx_t *c = test_ctx();
    ferry_xport_t *x = endpoint(c, 1);
    uint8_t desc[3][FERRY_XPORT_DESC_MAX], buf[ACC_SIZE];
    size_t dlen[3];
    ferry_xport_rmem_t *r[3] = {NULL};
    for (int i = 0; i < 3; i++) {
        dlen[i] = recv_blob(in, desc[i], sizeof desc[i]);
        CHECK_OK(ferry_xport_rmem_unpack(x, desc[i], dlen[i], &r[i]), ferry_xport_error(x));
    }
    /* reads work on all three */
    CHECK_OK(get1(x, r[0], 0, buf, ACC_SIZE), ferry_xport_error(x));
    for (size_t k = 0; k < ACC_SIZE; k++)
        if (buf[k] != pattern(k, 5)) CHECK(!"get of a read-only registration returned wrong bytes");
    CHECK_OK(get1(x, r[2], 0, buf, 4096), ferry_xport_error(x));
    for (size_t k = 0; k < 4096; k++) CHECK(buf[k] == pattern(k, 7));
    /* a put into a read-only registration is refused before anything moves */
    for (size_t k = 0; k < ACC_SIZE; k++) buf[k] = 0xEE;
    CHECK(put1(x, r[0], 0, buf, 4096) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferry_xport_error(x), "run 0 writes a read-only registration"));
    CHECK(put1(x, r[2], 0, buf, 4096) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(strstr(ferry_xport_error(x), "read-only"));
    /* a batch with one read-only run: its writable run does not move either */
    ferry_xport_run_t mixed[2] = {{r[1], 0, buf, 4096}, {r[0], 8192, buf, 4096}};
    ferry_xport_req_t *req = NULL;
    CHECK(ferry_xport_put(x, mixed, 2, &req) == FERRY_ERR_INVALID_ARGUMENT && req == NULL);
    CHECK(strstr(ferry_xport_error(x), "run 1"));
    if (g_kind == FERRY_XPORT_SHM) {
        /* the peer's own mapping of it is read-only, and cannot be made writable */
        const void *view = NULL;
        CHECK_OK(ferry_xport_rmem_view(r[0], 0, 4096, &view), "view");
        CHECK(mprotect((void *)(uintptr_t)view, 4096, PROT_READ | PROT_WRITE) != 0 && errno == EACCES);
        /* a descriptor forged to claim write access: the owner still hands
         * out a read-only memfd, so the put is refused all the same */
        forge_flags(desc[0], dlen[0], 1);
        ferry_xport_rmem_t *forged = NULL;
        CHECK_OK(ferry_xport_rmem_unpack(x, desc[0], dlen[0], &forged), ferry_xport_error(x));
        CHECK(put1(x, forged, 0, buf, 4096) == FERRY_ERR_INVALID_ARGUMENT);
        CHECK(strstr(ferry_xport_error(x), "read-only"));
        ferry_xport_rmem_release(forged);
    }
    /* unknown flags are refused as corrupt */
    forge_flags(desc[0], dlen[0], 0x80);
    ferry_xport_rmem_t *bad = NULL;
    CHECK(ferry_xport_rmem_unpack(x, desc[0], dlen[0], &bad) == FERRY_ERR_CORRUPT && bad == NULL);
    CHECK(strstr(ferry_xport_error(x), "unknown flags"));
    /* the writable registration takes puts */
    for (size_t k = 0; k < 4096; k++) buf[k] = pattern(4096 + k, 8);
    CHECK_OK(put1(x, r[1], 4096, buf, 4096), ferry_xport_error(x));
    for (int i = 0; i < 3; i++) ferry_xport_rmem_release(r[i]);
    ferry_xport_destroy(x);
    ferry_ctx_destroy(c);
    signal_byte(out);
    _exit(0);
}

/* Registrations are read-only for peers unless registered with
 * FERRY_XPORT_ACCESS_WRITE: a peer's put into one is refused and leaves
 * the memory as it was; a put into a writable one lands. */
static void test_access(ferry_ctx_t *ctx) {
    ferry_xport_t *xp = endpoint(ctx, 1);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen;
    ferry_xport_mem_t *ro = NULL, *rw = NULL, *user = NULL;
    CHECK_OK(ferry_xport_mem_alloc(xp, ACC_SIZE, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_READ, &ro), ferry_xport_error(xp));
    CHECK_OK(ferry_xport_mem_alloc(xp, ACC_SIZE, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_WRITE, &rw), ferry_xport_error(xp));
    uint8_t *mem = malloc(ACC_SIZE);
    CHECK(mem);
    uint8_t *p0 = ferry_xport_mem_ptr(ro), *p1 = ferry_xport_mem_ptr(rw);
    for (size_t k = 0; k < ACC_SIZE; k++) p0[k] = pattern(k, 5), p1[k] = pattern(k, 6), mem[k] = pattern(k, 7);
    CHECK_OK(ferry_xport_mem_register(xp, mem, ACC_SIZE, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_READ, &user),
             ferry_xport_error(xp));
    int a[2], b[2];
    CHECK(pipe(a) == 0 && pipe(b) == 0);
    pid_t pid = spawn("access_peer", a[0], b[1]);
    close(a[0]), close(b[1]);
    ferry_xport_mem_t *ms[3] = {ro, rw, user};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(ferry_xport_mem_pack(ms[i], desc, sizeof desc, &dlen), ferry_xport_error(xp));
        send_blob(a[1], desc, dlen);
    }
    await_byte(b[0]);
    CHECK(wait_child(pid) == 0);
    for (size_t k = 0; k < ACC_SIZE; k++) {
        if (p0[k] != pattern(k, 5) || mem[k] != pattern(k, 7)) CHECK(!"a read-only registration was written");
        uint32_t seed = k >= 4096 && k < 8192 ? 8 : 6;
        if (p1[k] != pattern(k, seed)) CHECK(!"the writable registration does not hold exactly the peer's put");
    }
    ferry_xport_mem_deregister(user);
    ferry_xport_mem_deregister(rw);
    ferry_xport_mem_deregister(ro);
    ferry_xport_destroy(xp);
    free(mem);
    close(a[1]), close(b[0]);
    printf("  access: puts into read-only registrations refused (memory unchanged), a mixed batch refused whole, "
           "a writable registration written%s\n",
           g_kind == FERRY_XPORT_SHM ? "; read-only mapping, forged write flag refused" : "");
}

/* ---- shm: what a rogue peer can do with the memfds it is handed ---------- */

/* shm.c's wire format, spoken here the way a peer holding a descriptor could:
 * auth (magic, pad, secret), hello (magic, pid, nonce, slots, status) with
 * the control memfd, then fd requests (slot, pad, gen) answered by a status
 * with the registration's memfd. */
typedef struct {
    uint32_t magic, pad;
    uint64_t secret;
} rogue_auth_t;
typedef struct {
    uint32_t magic, pid;
    uint64_t nonce;
    uint32_t slots;
    int32_t status;
} rogue_hello_t;
typedef struct {
    uint32_t slot, pad;
    uint64_t gen;
} rogue_req_t;

static uint64_t body_le(const uint8_t *desc, size_t off, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)desc[8 + off + (size_t)i] << (8 * i);
    return v;
}

/* Receives len bytes and the fd that comes with them. */
static int recv_with_fd(int sock, void *buf, size_t len) {
    struct iovec iov = {buf, len};
    union {
        char raw[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.raw, .msg_controllen = sizeof ctl.raw};
    CHECK(recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) == (ssize_t)len);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    CHECK(c && c->cmsg_type == SCM_RIGHTS);
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

/* Connects to the owner a descriptor names and asks for its memfd; *control
 * gets the control page's memfd. */
static int rogue_fetch(const uint8_t *desc, int *control) {
    uint32_t pid = (uint32_t)body_le(desc, 0, 4), slot = (uint32_t)body_le(desc, 13, 4);
    uint64_t nonce = body_le(desc, 4, 8), gen = body_le(desc, 17, 8), secret = body_le(desc, 41, 8);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "ferry-shm-%u-%016llx", pid, (unsigned long long)nonce);
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(sock >= 0 && connect(sock, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                                                                        (size_t)n)) == 0);
    rogue_auth_t au = {0x46524d48u, 0, secret};
    CHECK(send(sock, &au, sizeof au, 0) == (ssize_t)sizeof au);
    rogue_hello_t hello;
    *control = recv_with_fd(sock, &hello, sizeof hello);
    CHECK(hello.status == 0 && hello.pid == pid);
    rogue_req_t rq = {slot, 0, gen};
    CHECK(send(sock, &rq, sizeof rq, 0) == (ssize_t)sizeof rq);
    int32_t status = -1;
    int fd = recv_with_fd(sock, &status, sizeof status);
    CHECK(status == 0);
    close(sock);
    return fd;
}

/* Everything a same-user peer could try on a read-only memfd it holds:
 * a writable mapping (of its fd, and of a writable reopening through /proc),
 * resizing, writing, punching holes, changing the seals. All must fail. */
static void attack_read_only(int fd, size_t size) {
    CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
    CHECK(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
    void *ro = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(ro != MAP_FAILED);
    CHECK(mprotect(ro, size, PROT_READ | PROT_WRITE) != 0);
    munmap(ro, size);
    CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int rw = open(path, O_RDWR | O_CLOEXEC); /* the inode lets its user reopen it writable */
    CHECK(rw >= 0);
    errno = 0;
    CHECK(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0) == MAP_FAILED && errno == EPERM);
    CHECK(ftruncate(rw, 0) != 0 && errno == EPERM);
    CHECK(ftruncate(rw, (off_t)size * 2) != 0 && errno == EPERM);
    CHECK(pwrite(rw, "x", 1, 0) != 1);
    CHECK(fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)size) != 0);
    CHECK(fcntl(rw, F_ADD_SEALS, F_SEAL_WRITE) != 0 && errno == EPERM); /* F_SEAL_SEAL */
    close(rw);
}

static void rogue(int in, int out) {
    alarm(30);
    uint8_t desc[2][FERRY_XPORT_DESC_MAX];
    for (int i = 0; i < 2; i++) (void)recv_blob(in, desc[i], sizeof desc[i]);
    int control = -1, control2 = -1;
    int ro = rogue_fetch(desc[0], &control);
    int rw = rogue_fetch(desc[1], &control2);
    /* the writable registration maps writable (puts need it) but cannot be resized */
    CHECK((fcntl(rw, F_GETFL) & O_ACCMODE) == O_RDWR);
    CHECK(ftruncate(rw, 0) != 0 && errno == EPERM);
    CHECK(ftruncate(rw, ACC_SIZE * 2) != 0 && errno == EPERM);
    uint8_t *p = mmap(NULL, ACC_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
    CHECK(p != MAP_FAILED);
    p[0] = 0x5A; /* the owner checks that this is its memory */
    munmap(p, ACC_SIZE);
    attack_read_only(control, 4096);
    attack_read_only(ro, ACC_SIZE);
    close(ro), close(rw), close(control), close(control2);
    signal_byte(out);
    _exit(0);
}

/* A peer process holding the memfds it is handed tries to resize them (which
 * would SIGBUS the owner) and to map the read-only ones writable; the owner
 * then reads all of its memory. */
static void test_shm_seals(ferry_ctx_t *ctx) {
    if (g_kind != FERRY_XPORT_SHM) return;
    ferry_xport_t *xp = endpoint(ctx, 1);
    uint8_t desc[2][FERRY_XPORT_DESC_MAX];
    size_t dlen[2];
    ferry_xport_mem_t *ro = alloc_packed(xp, ACC_SIZE, FERRY_XPORT_ACCESS_READ, desc[0], &dlen[0]);
    ferry_xport_mem_t *rw = alloc_packed(xp, ACC_SIZE, FERRY_XPORT_ACCESS_WRITE, desc[1], &dlen[1]);
    uint8_t *p0 = ferry_xport_mem_ptr(ro), *p1 = ferry_xport_mem_ptr(rw);
    for (size_t k = 0; k < ACC_SIZE; k++) p0[k] = pattern(k, 9), p1[k] = pattern(k, 10);
    int a[2], b[2];
    CHECK(pipe(a) == 0 && pipe(b) == 0);
    pid_t pid = spawn("rogue", a[0], b[1]);
    close(a[0]), close(b[1]);
    for (int i = 0; i < 2; i++) send_blob(a[1], desc[i], dlen[i]);
    await_byte(b[0]);
    CHECK(wait_child(pid) == 0);
    /* a shrunk memfd would raise SIGBUS here */
    for (size_t k = 0; k < ACC_SIZE; k++) {
        if (p0[k] != pattern(k, 9)) CHECK(!"the read-only registration changed");
        if (k > 0 && p1[k] != pattern(k, 10)) CHECK(!"the writable registration changed beyond the peer's byte");
    }
    CHECK(p1[0] == 0x5A);
    p0[0] ^= 1; /* the owner's own mapping stays writable */
    CHECK(p0[0] == (pattern(0, 9) ^ 1));
    ferry_xport_mem_deregister(rw);
    ferry_xport_mem_deregister(ro);
    ferry_xport_destroy(xp);
    close(a[1]), close(b[0]);
    printf("  seals: a peer holding the memfds cannot resize them, map read-only ones writable (nor via /proc), "
           "write, punch holes or reseal them; the owner reads all its memory\n");
}

static void test_bad_arguments(ferry_ctx_t *ctx) {
    ferry_xport_t *xp = NULL;
    ferry_xport_params_t p = {.field_mask = FERRY_XPORT_PARAM_THREADS, .threads = 0};
    CHECK(ferry_xport_create(ctx, &p, &xp) == FERRY_ERR_INVALID_ARGUMENT && xp == NULL);
    CHECK(strstr(ferry_ctx_error(ctx), "threads"));
    p = (ferry_xport_params_t){.field_mask = FERRY_XPORT_PARAM_KIND, .kind = (ferry_xport_kind_t)77};
    CHECK(ferry_xport_create(ctx, &p, &xp) == FERRY_ERR_UNSUPPORTED);
    xp = endpoint(ctx, 1);
    ferry_xport_mem_t *m = NULL;
    CHECK(ferry_xport_mem_alloc(xp, 0, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_READ, &m) == FERRY_ERR_INVALID_ARGUMENT &&
          m == NULL);
    CHECK(ferry_xport_mem_register(xp, NULL, 16, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_READ, &m) ==
          FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_xport_mem_alloc(xp, 4096, FERRY_MEM_HOST, (ferry_xport_access_t)2, &m) == FERRY_ERR_INVALID_ARGUMENT &&
          m == NULL);
    CHECK(strstr(ferry_xport_error(xp), "access 2"));
    CHECK_OK(ferry_xport_mem_alloc(xp, 4096, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_READ, &m), ferry_xport_error(xp));
    uint8_t small[8];
    size_t len = 0;
    CHECK(ferry_xport_mem_pack(m, small, sizeof small, &len) == FERRY_ERR_LIMIT && len == 0);
    ferry_xport_mem_deregister(m);
    ferry_xport_destroy(xp);
    printf("  bad arguments refused\n");
}

static void suite(ferry_ctx_t *ctx, ferry_xport_kind_t kind, const char *ucx_tls) {
    g_kind = kind;
    setenv("FERRY_TEST_XPORT_KIND", kind == FERRY_XPORT_UCX ? "ucx" : "shm", 1);
    if (ucx_tls) setenv("UCX_TLS", ucx_tls, 1); /* the forked peers inherit it */
    printf("%s%s%s:\n", kind == FERRY_XPORT_SHM ? "shm" : "ucx", ucx_tls ? ", UCX_TLS=" : "", ucx_tls ? ucx_tls : "");
    test_bad_arguments(ctx);
    test_reads_and_writes(ctx);
    test_shm_access(ctx);
    test_access(ctx);
    test_shm_seals(ctx);
    test_stale(ctx);
    test_owner_killed(ctx);
    test_owner_killed_midstream(ctx);
    if (kind == FERRY_XPORT_UCX) test_user_memory(ctx); /* shm's needs ptrace: its own ctest entry */
    unsetenv("UCX_TLS");
}

typedef struct {
    ferry_xport_t *xp;
    ferry_xport_rmem_t *r;
    uint8_t *buf;
    size_t len;
    ferry_status_t st;
} slow_get_t;

static void *slow_get(void *arg) {
    slow_get_t *g = arg;
    g->st = get1(g->xp, g->r, 0, g->buf, g->len);
    return NULL;
}

/* Two readers of one owner through staging, the first capped at 8 MB/s
 * and asking for 64 MiB (8 chunks, twice the owner's 4 buffers; it times
 * out after 6 s): the second's 8 MiB arrives once one of the first's
 * chunks is through (about 1 s at that rate), since a free chunk serves
 * the reader holding the fewest; first come, first served kept every
 * chunk with the first reader until its timeout. */
static void test_stage_share(ferry_ctx_t *ctx) {
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen;
    int fd;
    pid_t pid = idle_owner_start(64, desc, &dlen, &fd);
    setenv("FERRY_UCX_STAGE_RATE", "8M", 1);
    ferry_xport_t *slow = endpoint_timeout(ctx, 1, 6000);
    unsetenv("FERRY_UCX_STAGE_RATE");
    ferry_xport_t *fast = endpoint(ctx, 1);
    slow_get_t g = {slow, NULL, malloc((size_t)64 << 20), (size_t)64 << 20, FERRY_OK};
    uint8_t *buf = malloc((size_t)8 << 20);
    ferry_xport_rmem_t *rf = NULL;
    CHECK(g.buf && buf);
    CHECK_OK(ferry_xport_rmem_unpack(slow, desc, dlen, &g.r), ferry_xport_error(slow));
    CHECK_OK(ferry_xport_rmem_unpack(fast, desc, dlen, &rf), ferry_xport_error(fast));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, slow_get, &g) == 0);
    usleep(300 * 1000); /* the slow reader's chunks are out */
    double t0 = now_s();
    CHECK_OK(get1(fast, rf, 0, buf, (size_t)8 << 20), ferry_xport_error(fast));
    double dt = now_s() - t0;
    pthread_join(t, NULL);
    CHECK(g.st == FERRY_ERR_TIMEOUT); /* 64 MiB at 8 MB/s outlasts the 6 s timeout */
    CHECK(dt < 3.0);
    ferry_xport_destroy(fast);
    ferry_xport_destroy(slow);
    idle_owner_stop(pid, fd);
    free(g.buf);
    free(buf);
    printf("  share: 8 MiB in %.3f s beside a reader capped at 8 MB/s\n", dt);
}

/* FERRY_UCX_STAGE_RATE caps what a reader receives through staging: a
 * 32 MiB get (four 8 MiB chunks, the first started at once) at 100 MB/s
 * takes at least three chunks' time; at 4 MB/s it outlasts the timeout,
 * which names the rate and leaves the owner's connection usable; a value
 * that is not a rate refuses the endpoint, naming the variable. */
static void test_stage_rate(ferry_ctx_t *ctx) {
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen, len = (size_t)32 << 20;
    int fd;
    pid_t pid = idle_owner_start(32, desc, &dlen, &fd);
    uint8_t *buf = malloc(len);
    CHECK(buf);
    double dt[2];
    for (int paced = 0; paced < 2; paced++) {
        if (paced) setenv("FERRY_UCX_STAGE_RATE", "100M", 1);
        ferry_xport_t *xp = endpoint(ctx, 1);
        ferry_xport_rmem_t *r = NULL;
        CHECK_OK(ferry_xport_rmem_unpack(xp, desc, dlen, &r), ferry_xport_error(xp));
        memset(buf, 0xAB, len);
        double t0 = now_s();
        CHECK_OK(get1(xp, r, 0, buf, len), ferry_xport_error(xp));
        dt[paced] = now_s() - t0;
        for (size_t i = 0; i < len; i += 4096) CHECK(buf[i] == 0); /* the owner's zeroed region arrived */
        ferry_xport_destroy(xp);
        unsetenv("FERRY_UCX_STAGE_RATE");
    }
    CHECK(dt[1] >= 3.0 * (8 << 20) / 100e6 * 0.99);
    { /* a rate too slow for the timeout (3 s): TIMEOUT naming the rate; the owner's connection is kept */
        setenv("FERRY_UCX_STAGE_RATE", "4M", 1);
        ferry_xport_t *xp = endpoint(ctx, 1);
        unsetenv("FERRY_UCX_STAGE_RATE");
        ferry_xport_rmem_t *r = NULL;
        CHECK_OK(ferry_xport_rmem_unpack(xp, desc, dlen, &r), ferry_xport_error(xp));
        CHECK(get1(xp, r, 0, buf, len) == FERRY_ERR_TIMEOUT);
        CHECK(strstr(ferry_xport_error(xp), "FERRY_UCX_STAGE_RATE=4000000"));
        CHECK_OK(get1(xp, r, 0, buf, 4096), ferry_xport_error(xp));
        ferry_xport_destroy(xp);
    }
    static const char *bad[] = {"fast", "-1G", "1T", "1.5Gbit", "nan", "inf", "1e-9", "999", "5m"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("FERRY_UCX_STAGE_RATE", bad[i], 1);
        ferry_xport_params_t p = {.field_mask = FERRY_XPORT_PARAM_KIND, .kind = FERRY_XPORT_UCX};
        ferry_xport_t *xp = NULL;
        CHECK(ferry_xport_create(ctx, &p, &xp) == FERRY_ERR_INVALID_CONFIG && !xp);
        CHECK(strstr(ferry_ctx_error(ctx), "FERRY_UCX_STAGE_RATE") && strstr(ferry_ctx_error(ctx), bad[i]));
    }
    unsetenv("FERRY_UCX_STAGE_RATE");
    idle_owner_stop(pid, fd);
    free(buf);
    printf("  rate: 32 MiB in %.3f s at FERRY_UCX_STAGE_RATE=100M (%.3f s without); at 4M a timeout naming it; bad "
           "values refused\n",
           dt[1], dt[0]);
}

/* UCX's host staging (the path of GPU memory where a UCX has no CUDA), on
 * host memory: reads in chunks through active messages, errors carried
 * back, dead owners, the rate cap. */
static void staged_suite(ferry_ctx_t *ctx, const char *ucx_tls) {
    g_kind = FERRY_XPORT_UCX;
    g_staged = true;
    setenv("FERRY_TEST_XPORT_KIND", "ucx", 1);
    setenv("FERRY_UCX_STAGE_HOST", "1", 1);
    setenv("UCX_TLS", ucx_tls, 1);
    printf("ucx, UCX_TLS=%s, reads through host staging:\n", ucx_tls);
    test_reads_and_writes(ctx);
    test_stale(ctx);
    test_owner_killed(ctx);
    test_owner_killed_midstream(ctx);
    test_stage_rate(ctx);
    test_stage_share(ctx);
    unsetenv("UCX_TLS");
    unsetenv("FERRY_UCX_STAGE_HOST");
    g_staged = false;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    test_ucx_tsan_setup(argv);
    if (argc == 5 && !strcmp(argv[1], "--role")) { /* a peer process, see spawn() */
        const char *k = getenv("FERRY_TEST_XPORT_KIND");
        g_kind = k && !strcmp(k, "ucx") ? FERRY_XPORT_UCX : FERRY_XPORT_SHM;
        g_staged = getenv("FERRY_UCX_STAGE_HOST") != NULL;
        int a = atoi(argv[3]), b = atoi(argv[4]);
        if (!strcmp(argv[2], "reader")) reader(a, b);
        if (!strcmp(argv[2], "stale")) stale_child(a, b);
        if (!strcmp(argv[2], "idle_owner")) idle_owner(a, b);
        if (!strcmp(argv[2], "user_owner")) user_owner(a, b);
        if (!strcmp(argv[2], "forger")) forger(a, b);
        if (!strcmp(argv[2], "access_peer")) access_peer(a, b);
        if (!strcmp(argv[2], "rogue")) rogue(a, b);
        return 2;
    }
    ferry_ctx_t *ctx = test_ctx();
    if (argc == 2 && !strcmp(argv[1], "--shm-user-memory")) { /* exit 77: skipped, not passed */
        g_kind = FERRY_XPORT_SHM;
        setenv("FERRY_TEST_XPORT_KIND", "shm", 1);
        printf("shm, caller's memory:\n");
        bool ran = test_user_memory(ctx);
        ferry_ctx_destroy(ctx);
        return ran ? 0 : 77;
    }
    suite(ctx, FERRY_XPORT_SHM, NULL);
    suite(ctx, FERRY_XPORT_UCX, "tcp");
    /* shared memory carries the RMA; TCP the keepalive that detects a dead peer */
    suite(ctx, FERRY_XPORT_UCX, "sm,self,tcp");
    staged_suite(ctx, "tcp");
    ferry_ctx_destroy(ctx);
    printf("xport: all checks passed\n");
    return 0;
}
