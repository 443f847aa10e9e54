/* UCX across "hosts": the owner and the reader live in two network
 * namespaces joined by a veth pair, so UCX can only use TCP over that link.
 * The reader's gets must be byte-exact; then the link is cut (ip link set
 * down) while the reader keeps reading, and its next request must fail
 * within the timeout, not hang. Needs root and iproute2; skipped otherwise. */
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "ferry/xport.h"

#define SIZE (64u << 20)
#define TIMEOUT_MS 2000

static char ns_a[32], ns_b[32], veth_a[16], veth_b[16];

static uint8_t pattern(uint64_t off) { return (uint8_t)((off * 0x9e3779b97f4a7c15ull) >> 56); }

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

static void cleanup(void) {
    sh("ip netns del %s 2>/dev/null", ns_a);
    sh("ip netns del %s 2>/dev/null", ns_b);
}

static void enter(const char *ns, const char *dev) {
    char path[64];
    snprintf(path, sizeof path, "/var/run/netns/%s", ns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0 && setns(fd, CLONE_NEWNET) == 0);
    close(fd);
    /* what `ip netns exec` does: a private /sys showing this namespace's
     * devices, where UCX looks for them */
    CHECK(unshare(CLONE_NEWNS) == 0);
    CHECK(mount("", "/", NULL, MS_SLAVE | MS_REC, NULL) == 0);
    umount2("/sys", MNT_DETACH);
    CHECK(mount(ns, "/sys", "sysfs", 0, NULL) == 0);
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", dev, 1);
    setenv("UCX_LOG_LEVEL", "fatal", 1); /* the cut link makes UCX complain; the test judges */
}

static ferry_xport_t *endpoint(ferry_ctx_t *ctx) {
    ferry_xport_params_t p = {.field_mask = FERRY_XPORT_PARAM_KIND | FERRY_XPORT_PARAM_TIMEOUT_MS,
                              .kind = FERRY_XPORT_UCX, .timeout_ms = TIMEOUT_MS};
    ferry_xport_t *xp = NULL;
    CHECK_OK(ferry_xport_create(ctx, &p, &xp), ferry_ctx_error(ctx));
    return xp;
}

static void owner(int desc_fd, int done_fd) {
    alarm(120);
    enter(ns_a, veth_a);
    ferry_ctx_t *ctx = test_ctx();
    ferry_xport_t *xp = endpoint(ctx);
    ferry_xport_mem_t *m = NULL;
    CHECK_OK(ferry_xport_mem_alloc(xp, SIZE, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_READ, &m), ferry_xport_error(xp));
    uint8_t *p = ferry_xport_mem_ptr(m);
    for (uint64_t k = 0; k < SIZE; k++) p[k] = pattern(k);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t len;
    CHECK_OK(ferry_xport_mem_pack(m, desc, sizeof desc, &len), ferry_xport_error(xp));
    uint32_t l32 = (uint32_t)len;
    CHECK(write(desc_fd, &l32, 4) == 4 && write(desc_fd, desc, len) == (ssize_t)len);
    char c;
    CHECK(read(done_fd, &c, 1) >= 0);
    _exit(0);
}

/* Reports: 'o' after the exact reads; then, once a get fails, its status and
 * the time it failed (CLOCK_MONOTONIC is shared by the processes). */
static void reader(int desc_fd, int out_fd) {
    alarm(120);
    enter(ns_b, veth_b);
    ferry_ctx_t *ctx = test_ctx();
    ferry_xport_t *xp = endpoint(ctx);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    uint32_t l32;
    CHECK(read(desc_fd, &l32, 4) == 4 && l32 <= sizeof desc && read(desc_fd, desc, l32) == (ssize_t)l32);
    ferry_xport_rmem_t *r = NULL;
    CHECK_OK(ferry_xport_rmem_unpack(xp, desc, l32, &r), ferry_xport_error(xp));
    uint8_t *buf = malloc(SIZE);
    CHECK(buf);
    for (int i = 0; i < 40; i++) {
        uint64_t off = rng_next() % SIZE, len = rng_next() % (SIZE - off + 1);
        if (i % 2) len %= 1u << 20;
        ferry_xport_run_t run = {r, off, buf, (size_t)len};
        ferry_xport_req_t *req = NULL;
        CHECK_OK(ferry_xport_get(xp, &run, 1, &req), ferry_xport_error(xp));
        CHECK_OK(ferry_xport_req_wait(req, -1), ferry_xport_error(xp));
        ferry_xport_req_free(req);
        for (uint64_t k = 0; k < len; k++)
            if (buf[k] != pattern(off + k)) CHECK(!"a get over the veth link returned wrong bytes");
    }
    CHECK(write(out_fd, "o", 1) == 1);
    ferry_status_t st = FERRY_OK;
    while (st == FERRY_OK) { /* keep reading until the cut link stops us */
        ferry_xport_run_t run = {r, 0, buf, 16u << 20};
        ferry_xport_req_t *req = NULL;
        st = ferry_xport_get(xp, &run, 1, &req);
        if (st == FERRY_OK) {
            st = ferry_xport_req_wait(req, -1);
            ferry_xport_req_free(req);
        }
    }
    double t = now_s();
    int32_t code = st;
    CHECK(write(out_fd, &code, 4) == 4 && write(out_fd, &t, sizeof t) == sizeof t);
    _exit(0);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    test_ucx_tsan_setup(argv);
    if (geteuid() != 0 || sh("ip -V >/dev/null 2>&1") != 0) {
        printf("xport netns: skipped (needs root and iproute2)\n");
        return 77;
    }
    int id = getpid() % 100000;
    snprintf(ns_a, sizeof ns_a, "ferry-a-%d", id);
    snprintf(ns_b, sizeof ns_b, "ferry-b-%d", id);
    snprintf(veth_a, sizeof veth_a, "fva%d", id);
    snprintf(veth_b, sizeof veth_b, "fvb%d", id);
    if (sh("ip netns add %s && ip netns add %s && ip link add %s type veth peer name %s && "
           "ip link set %s netns %s && ip link set %s netns %s && "
           "ip -n %s addr add 10.231.77.1/24 dev %s && ip -n %s addr add 10.231.77.2/24 dev %s && "
           "ip -n %s link set %s up && ip -n %s link set %s up && "
           "ip -n %s link set lo up && ip -n %s link set lo up",
           ns_a, ns_b, veth_a, veth_b, veth_a, ns_a, veth_b, ns_b, ns_a, veth_a, ns_b, veth_b, ns_a, veth_a, ns_b,
           veth_b, ns_a, ns_b) != 0) {
        cleanup();
        printf("xport netns: skipped (cannot create network namespaces here)\n");
        return 77;
    }
    atexit(cleanup); /* the namespaces go away even when a check fails */
    int desc[2], done[2], out[2];
    CHECK(pipe(desc) == 0 && pipe(done) == 0 && pipe(out) == 0);
    pid_t po = fork();
    CHECK(po >= 0);
    if (po == 0) owner(desc[1], done[0]);
    pid_t pr = fork();
    CHECK(pr >= 0);
    if (pr == 0) reader(desc[0], out[1]);
    close(desc[0]), close(desc[1]), close(done[0]), close(out[1]); /* a dead child ends our reads */
    char c = 0;
    alarm(120);
    CHECK(read(out[0], &c, 1) == 1 && c == 'o');
    usleep(200 * 1000); /* the reader is mid-stream */
    double cut = now_s();
    CHECK(sh("ip -n %s link set %s down", ns_a, veth_a) == 0);
    int32_t code = 0;
    double failed = 0;
    CHECK(read(out[0], &code, 4) == 4 && read(out[0], &failed, sizeof failed) == sizeof failed);
    double dt = failed - cut;
    printf("xport netns: 40 exact gets over UCX TCP across namespaces; link cut -> %s after %.2f s (timeout %.1f s)\n",
           ferry_status_name(code), dt, TIMEOUT_MS / 1e3);
    CHECK(code == FERRY_ERR_TIMEOUT || code == FERRY_ERR_PEER_LOST);
    CHECK(dt < TIMEOUT_MS / 1e3 + 2.0);
    CHECK(write(done[1], "x", 1) == 1);
    int ws;
    waitpid(pr, &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    waitpid(po, &ws, 0);
    return 0;
}
