/* The shm transport: one host, one-sided.
 *
 * Owner: each endpoint has a control memfd (a page of registration
 * generations that peers map read-only) and an abstract unix socket served by
 * one thread. A peer connects once, receives the control memfd, and asks for
 * the memfd of each allocated registration it reads (SCM_RIGHTS); from then
 * on a get or put is a memcpy on a shared mapping, which the owner's code
 * never sees. Memory the caller registers (not allocated here) is read with
 * process_vm_readv instead.
 *
 * Checks: a registration's generation in the control page must equal the
 * descriptor's before and after each copy (else FERRY_ERR_STALE); the
 * connection must not have hung up (else FERRY_ERR_PEER_LOST: the owner is
 * gone, and its memory may be half written).
 *
 * Access: only processes of the owner's user that present the endpoint's
 * secret (a random 64-bit value carried by its descriptors, never by the
 * socket name) are answered. The pid used for process_vm is the one the
 * kernel reports for the connected socket, so it is right across pid
 * namespaces.
 *
 * Sealing: every memfd is sealed against shrinking and growing (a peer that
 * could truncate it would SIGBUS the owner and every other reader), and
 * peers refuse a memfd without those seals. A read-only registration (and
 * the control page) is also sealed against new writable mappings
 * (F_SEAL_FUTURE_WRITE: the owner's own mapping, made before, stays
 * writable), and peers get it through a read-only reopening, so no process
 * can map it writable, not even by reopening its descriptor through /proc.
 *
 * Descriptor body: pid(4) nonce(8) mode(1) slot(4) gen(8) size(8) addr(8)
 * secret(8). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/cuda.h"
#include "xport/cuda_ipc.h"
#include "xport/xport_internal.h"

#define SHM_SLOTS 4096          /* registrations an endpoint holds at once */
#define SHM_BODY 49
#define SHM_HELLO_MAGIC 0x46524d48u /* "FRMH" */

enum { MODE_MAPPED = 1, MODE_VM = 2, MODE_CUDA = 3 };
#define WHAT_CUDA 0x80000000u /* an fd_request for chunk (what & ~WHAT_CUDA) of CUDA memory */

typedef struct {
    uint32_t magic;
    uint32_t pid;
    uint64_t nonce;
    uint32_t slots;
    int32_t status;          /* FERRY_OK, or why the connection is refused */
} hello_t;

typedef struct {
    uint32_t magic;
    uint32_t pad;
    uint64_t secret;
} auth_t;

typedef struct {
    uint32_t slot;
    uint32_t what;           /* 0: the memfd; WHAT_CUDA | i: chunk i of CUDA memory */
    uint64_t gen;
} fd_request_t;

/* A connection to another endpoint, shared by its descriptors. */
typedef struct shm_peer_t {
    uint32_t pid;            /* as the descriptor says (identifies the endpoint) */
    pid_t vm_pid;            /* as the kernel reports the socket's peer (for process_vm) */
    uint64_t nonce;
    int sock;
    const uint64_t *gens;    /* the owner's control page, read-only */
    xcuda_cache_t *cuda;     /* its CUDA allocations opened here */
    uint32_t refs;
    bool lost;
    struct shm_peer_t *next;
} shm_peer_t;

typedef struct {
    uint32_t pid;
    uint64_t nonce;
    uint64_t secret;
    int listen_fd;
    int wake[2];             /* tells the service thread to stop */
    pthread_t thread;
    bool running;
    int control_fd;
    uint64_t *gens;          /* SHM_SLOTS generations, shared read-only with peers */
    pthread_mutex_t lock;    /* slot table, between the owner and the service thread */
    int slot_fd[SHM_SLOTS];  /* memfd of each mapped registration, -1 if none */
    xcuda_export_t *slot_cuda[SHM_SLOTS]; /* export of each CUDA registration */
    xcuda_stream_t *stream;  /* copies of CUDA memory */
    uint8_t slot_used[SHM_SLOTS];
    shm_peer_t *peers;
} shm_t;

static void sock_name(struct sockaddr_un *a, socklen_t *len, uint32_t pid, uint64_t nonce) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* abstract namespace: nothing in the file system to clean up */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "ferry-shm-%u-%016llx", pid,
                     (unsigned long long)nonce);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static uint64_t make_nonce(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 12);
    x ^= (uint64_t)(uintptr_t)&x;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    return x ^ (x >> 29);
}

/* Sends buf (and fd, if >= 0) in one message. */
static int send_msg(int sock, const void *buf, size_t len, int fd) {
    struct iovec iov = {(void *)buf, len};
    union {
        char raw[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        msg.msg_control = ctl.raw;
        msg.msg_controllen = sizeof ctl.raw;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    ssize_t n;
    do n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)len ? 0 : -1;
}

/* Receives exactly len bytes (and an fd if one comes) within timeout_ms;
 * the caller's interrupt hook (NULL on the service thread) may cut the
 * wait short. Returns 0, or -1 (hang-up or error), -2 (timeout) or -3
 * (interrupted). */
static int recv_msg(int sock, void *buf, size_t len, int *fd, uint32_t timeout_ms, const ferry_intr_t *intr) {
    if (fd) *fd = -1;
    struct pollfd pf = {sock, POLLIN, 0};
    int r;
    do r = ferry_intr_poll(intr, &pf, 1, (int)timeout_ms);
    while (r == -1 && errno == EINTR);
    if (r == FERRY_INTR_POLL_STOPPED) return -3;
    if (r == 0) return -2;
    if (r < 0) return -1;
    struct iovec iov = {buf, len};
    union {
        char raw[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.raw;
    msg.msg_controllen = sizeof ctl.raw;
    ssize_t n;
    do n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0) msg.msg_controllen = 0; /* nothing was received: no descriptors to take */
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int got;
            memcpy(&got, CMSG_DATA(c), sizeof got);
            if (fd && *fd < 0) *fd = got;
            else close(got);
        }
    }
    if (n != (ssize_t)len) {
        if (fd && *fd >= 0) close(*fd), *fd = -1;
        return -1;
    }
    return 0;
}

/* ---- the service thread ------------------------------------------------- */

#define MAX_CLIENTS 1024

/* Sends without blocking: a client that does not read its answers is dropped
 * rather than allowed to stall the thread every other peer depends on. */
static int send_now(int sock, const void *buf, size_t len, int fd) {
    int fl = fcntl(sock, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK)) fcntl(sock, F_SETFL, fl | O_NONBLOCK);
    return send_msg(sock, buf, len, fd);
}

/* Chunk i of a CUDA registration (its fd, for VMM memory, goes along). */
static bool serve_cuda(shm_t *s, int sock, const fd_request_t *rq) {
    xcuda_chunk_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.status = FERRY_ERR_STALE;
    uint32_t i = rq->what & ~WHAT_CUDA;
    int fd = -1;
    pthread_mutex_lock(&s->lock);
    if (rq->slot < SHM_SLOTS && s->slot_used[rq->slot] && s->slot_cuda[rq->slot] &&
        __atomic_load_n(&s->gens[rq->slot], __ATOMIC_ACQUIRE) == rq->gen) {
        const xcuda_export_t *e = s->slot_cuda[rq->slot];
        msg.n = e->n;
        msg.index = i;
        msg.vmm = e->vmm;
        msg.status = i < e->n ? FERRY_OK : FERRY_ERR_INVALID_ARGUMENT;
        if (i < e->n) {
            const xcuda_chunk_t *c = &e->chunks[i];
            msg.off = c->off;
            msg.size = c->size;
            msg.id = c->id;
            memcpy(msg.handle, c->handle, sizeof msg.handle);
            if (c->fd >= 0 && (fd = dup(c->fd)) < 0) msg.status = FERRY_ERR_NO_MEMORY;
        }
    }
    pthread_mutex_unlock(&s->lock);
    int r = send_now(sock, &msg, sizeof msg, fd);
    if (fd >= 0) close(fd);
    return r == 0;
}

static bool serve_request(shm_t *s, int sock) {
    fd_request_t rq;
    if (recv_msg(sock, &rq, sizeof rq, NULL, 0, NULL) != 0) return false;
    if (rq.what & WHAT_CUDA) return serve_cuda(s, sock, &rq);
    int32_t status = FERRY_ERR_STALE;
    int fd = -1;
    pthread_mutex_lock(&s->lock);
    if (rq.slot < SHM_SLOTS && s->slot_used[rq.slot] && s->slot_fd[rq.slot] >= 0 &&
        __atomic_load_n(&s->gens[rq.slot], __ATOMIC_ACQUIRE) == rq.gen) {
        fd = dup(s->slot_fd[rq.slot]); /* the owner may close its copy meanwhile */
        status = fd >= 0 ? FERRY_OK : FERRY_ERR_NO_MEMORY;
    }
    pthread_mutex_unlock(&s->lock);
    int r = send_now(sock, &status, sizeof status, fd);
    if (fd >= 0) close(fd);
    return r == 0;
}

/* The first message of a client: the endpoint's secret, from a process of
 * our user. Then the hello and the control page. */
static bool serve_auth(shm_t *s, int sock) {
    auth_t au;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (recv_msg(sock, &au, sizeof au, NULL, 0, NULL) != 0 || au.magic != SHM_HELLO_MAGIC || au.secret != s->secret ||
        getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != getuid())
        return false;
    hello_t hello = {SHM_HELLO_MAGIC, s->pid, s->nonce, SHM_SLOTS, FERRY_OK};
    return send_now(sock, &hello, sizeof hello, s->control_fd) == 0;
}

static void *service(void *arg) {
    shm_t *s = arg;
    struct pollfd fds[MAX_CLIENTS + 2];
    bool authed[MAX_CLIENTS + 2] = {false};
    size_t n = 2;
    fds[0] = (struct pollfd){s->wake[0], POLLIN, 0};
    fds[1] = (struct pollfd){s->listen_fd, POLLIN, 0};
    for (;;) {
        int r = poll(fds, n, -1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 || (fds[0].revents & POLLIN)) break;
        if (fds[1].revents & POLLIN) {
            int c = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (c >= 0 && n < MAX_CLIENTS + 2) {
                authed[n] = false;
                fds[n++] = (struct pollfd){c, POLLIN, 0};
            } else if (c >= 0) { /* full: say so, so the peer reports a limit, not a death */
                hello_t busy = {SHM_HELLO_MAGIC, s->pid, s->nonce, SHM_SLOTS, FERRY_ERR_LIMIT};
                send_now(c, &busy, sizeof busy, -1);
                close(c);
            }
        }
        for (size_t i = 2; i < n; i++) {
            bool keep = true;
            if (fds[i].revents & (POLLHUP | POLLERR)) keep = false;
            else if (fds[i].revents & POLLIN) keep = authed[i] ? serve_request(s, fds[i].fd) : serve_auth(s, fds[i].fd);
            if (keep && (fds[i].revents & POLLIN)) authed[i] = true;
            if (!keep) {
                close(fds[i].fd);
                --n;
                fds[i] = fds[n];
                authed[i] = authed[n];
                i--;
            }
        }
    }
    for (size_t i = 2; i < n; i++) close(fds[i].fd);
    return NULL;
}

/* ---- endpoint ------------------------------------------------------------ */

/* Seals a memfd that the owner has sized and mapped, and replaces *fd with
 * the descriptor peers get: sealed against shrinking and growing; read-only
 * access also against new writable mappings, and handed out as a read-only
 * reopening. On failure *fd is closed. */
static ferry_status_t seal_for_peers(ferry_xport_t *xp, int *fd, ferry_xport_access_t access, const char *what) {
    int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (access == FERRY_XPORT_ACCESS_READ) seals |= F_SEAL_FUTURE_WRITE;
    if (fcntl(*fd, F_ADD_SEALS, seals) != 0) {
        int e = errno;
        close(*fd);
        *fd = -1;
        return ferry_fail(&xp->err, e == EINVAL ? FERRY_ERR_UNSUPPORTED : FERRY_ERR_IO,
                          "shm: sealing the memfd of %s: %s%s", what, strerror(e),
                          e == EINVAL ? " (F_SEAL_FUTURE_WRITE needs Linux 5.1)" : "");
    }
    if (access == FERRY_XPORT_ACCESS_WRITE) return FERRY_OK;
    /* peers get a read-only reopening, and map it read-only. The seal is
     * what enforces it: a peer may reopen that writable through /proc, and
     * still cannot map it writable. Without /proc the sealed descriptor
     * goes out (peers see the seal and map read-only). */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", *fd);
    int ro = open(path, O_RDONLY | O_CLOEXEC);
    if (ro >= 0) {
        close(*fd);
        *fd = ro;
    }
    return FERRY_OK;
}

static ferry_status_t shm_init(ferry_xport_t *xp) {
    shm_t *s = ferry_calloc(xp->ctx, 1, sizeof *s);
    if (!s) return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory creating an shm endpoint");
    s->listen_fd = s->control_fd = s->wake[0] = s->wake[1] = -1;
    for (int i = 0; i < SHM_SLOTS; i++) s->slot_fd[i] = -1;
    pthread_mutex_init(&s->lock, NULL);
    xp->backend = s;
    s->pid = (uint32_t)getpid();
    s->nonce = make_nonce();
    if (getrandom(&s->secret, sizeof s->secret, 0) != (ssize_t)sizeof s->secret)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "shm: no randomness for the endpoint's secret: %s", strerror(errno));
    size_t ctl = SHM_SLOTS * sizeof(uint64_t);
    int cfd = memfd_create("ferry-shm-control", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (cfd < 0 || ftruncate(cfd, (off_t)ctl) != 0) {
        int e = errno;
        if (cfd >= 0) close(cfd);
        return ferry_fail(&xp->err, FERRY_ERR_IO, "shm: control memfd: %s", strerror(e));
    }
    s->gens = mmap(NULL, ctl, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
    if (s->gens == MAP_FAILED) {
        s->gens = NULL;
        close(cfd);
        return ferry_fail(&xp->err, FERRY_ERR_IO, "shm: mapping the control page: %s", strerror(errno));
    }
    ferry_status_t st = seal_for_peers(xp, &cfd, FERRY_XPORT_ACCESS_READ, "the control page");
    if (st) return st;
    s->control_fd = cfd;
    s->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a;
    socklen_t alen;
    sock_name(&a, &alen, s->pid, s->nonce);
    if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&a, alen) != 0 || listen(s->listen_fd, 128) != 0)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "shm: listening on %s: %s", a.sun_path + 1, strerror(errno));
    if (pipe2(s->wake, O_CLOEXEC) != 0)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "shm: wake pipe: %s", strerror(errno));
    if (pthread_create(&s->thread, NULL, service, s) != 0)
        return ferry_fail(&xp->err, FERRY_ERR_IO, "shm: starting the service thread failed");
    s->running = true;
    return FERRY_OK;
}

static void shm_fini(ferry_xport_t *xp) {
    shm_t *s = xp->backend;
    if (!s) return;
    if (s->running) {
        char b = 1;
        ssize_t w = write(s->wake[1], &b, 1);
        (void)w;
        pthread_join(s->thread, NULL);
    }
    while (s->peers) { /* every rmem is released before fini: only unreferenced peers remain */
        shm_peer_t *p = s->peers;
        s->peers = p->next;
        if (p->gens) munmap((void *)p->gens, SHM_SLOTS * sizeof(uint64_t));
        xcuda_cache_destroy(p->cuda);
        close(p->sock);
        ferry_free(xp->ctx, p);
    }
    xcuda_stream_destroy(s->stream);
    if (s->gens) munmap(s->gens, SHM_SLOTS * sizeof(uint64_t));
    for (int i = 0; i < 2; i++)
        if (s->wake[i] >= 0) close(s->wake[i]);
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->control_fd >= 0) close(s->control_fd);
    pthread_mutex_destroy(&s->lock);
    ferry_free(xp->ctx, s);
    xp->backend = NULL;
}

/* Takes a free slot and publishes a new generation for it. */
static ferry_status_t take_slot(ferry_xport_t *xp, ferry_xport_mem_t *m, int fd, xcuda_export_t *cuda) {
    shm_t *s = xp->backend;
    pthread_mutex_lock(&s->lock);
    uint32_t slot = 0;
    while (slot < SHM_SLOTS && s->slot_used[slot]) slot++;
    if (slot == SHM_SLOTS) {
        pthread_mutex_unlock(&s->lock);
        return ferry_fail(&xp->err, FERRY_ERR_LIMIT, "shm: more than %d registrations on one endpoint", SHM_SLOTS);
    }
    s->slot_used[slot] = 1;
    s->slot_fd[slot] = fd;
    s->slot_cuda[slot] = cuda;
    m->slot = slot;
    m->gen = __atomic_add_fetch(&s->gens[slot], 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->lock);
    return FERRY_OK;
}

/* CUDA memory: exported for peers (CUDA IPC), from the caller or allocated. */
static ferry_status_t cuda_slot(ferry_xport_t *xp, ferry_xport_mem_t *m) {
    if (m->allocated) {
        ferry_status_t st = xcuda_alloc(&xp->err, m->size, &m->ptr);
        if (st) return st;
    }
    xcuda_export_t *e = NULL;
    ferry_status_t st = xcuda_export(xp->ctx, &xp->err, m->ptr, m->size, &e);
    if (st == FERRY_OK && (st = take_slot(xp, m, -1, e)) != FERRY_OK) xcuda_export_free(xp->ctx, e);
    if (st == FERRY_OK) m->cuda = e;
    else if (m->allocated) xcuda_free(m->ptr);
    return st;
}

static ferry_status_t shm_mem_alloc(ferry_xport_t *xp, ferry_xport_mem_t *m) {
    if (m->type == FERRY_MEM_CUDA) return cuda_slot(xp, m);
    /* the name shows in /proc/PID/fd and maps: which access peers have */
    bool rw = m->access == FERRY_XPORT_ACCESS_WRITE;
    int fd = memfd_create(rw ? "ferry-shm-rw" : "ferry-shm-ro", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return ferry_fail(&xp->err, FERRY_ERR_IO, "shm: memfd_create: %s", strerror(errno));
    if (ftruncate(fd, (off_t)m->size) != 0) {
        int e = errno;
        close(fd);
        return ferry_fail(&xp->err, e == ENOMEM || e == ENOSPC ? FERRY_ERR_NO_MEMORY : FERRY_ERR_IO,
                          "shm: sizing a %zu-byte memfd: %s", m->size, strerror(e));
    }
    /* populated now: the pages are about to be written, and faulting them in
     * one by one later costs more than the copy (seconds per GiB here) */
    void *p = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "shm: mapping %zu bytes: %s", m->size, strerror(e));
    }
    ferry_status_t st = seal_for_peers(xp, &fd, m->access, "a registration");
    if (st) {
        munmap(p, m->size);
        return st;
    }
    m->ptr = p;
    m->fd = fd; /* what peers get: the owner writes through its mapping */
    st = take_slot(xp, m, fd, NULL);
    if (st) {
        munmap(p, m->size);
        close(fd);
    }
    return st;
}

static ferry_status_t shm_mem_register(ferry_xport_t *xp, ferry_xport_mem_t *m) {
    return m->type == FERRY_MEM_CUDA ? cuda_slot(xp, m) : take_slot(xp, m, -1, NULL);
}

static void shm_mem_deregister(ferry_xport_t *xp, ferry_xport_mem_t *m) {
    shm_t *s = xp->backend;
    pthread_mutex_lock(&s->lock);
    __atomic_add_fetch(&s->gens[m->slot], 1, __ATOMIC_RELEASE); /* every descriptor of it is stale now */
    s->slot_used[m->slot] = 0;
    s->slot_fd[m->slot] = -1;
    s->slot_cuda[m->slot] = NULL;
    pthread_mutex_unlock(&s->lock);
    if (m->type == FERRY_MEM_CUDA) {
        xcuda_export_free(xp->ctx, m->cuda);
        if (m->allocated) xcuda_free(m->ptr);
    } else if (m->allocated) {
        munmap(m->ptr, m->size);
        close(m->fd);
    }
}

static ferry_status_t shm_mem_pack(const ferry_xport_mem_t *m, uint8_t *b, size_t cap, size_t *len) {
    shm_t *s = m->xp->backend;
    if (cap < SHM_BODY) return FERRY_ERR_LIMIT;
    ferry_put_le(b, s->pid, 4);
    ferry_put_le(b + 4, s->nonce, 8);
    b[12] = m->type == FERRY_MEM_CUDA ? MODE_CUDA : m->allocated ? MODE_MAPPED : MODE_VM;
    ferry_put_le(b + 13, m->slot, 4);
    ferry_put_le(b + 17, m->gen, 8);
    ferry_put_le(b + 25, m->size, 8);
    ferry_put_le(b + 33, (uint64_t)(uintptr_t)m->ptr, 8);
    ferry_put_le(b + 41, s->secret, 8);
    *len = SHM_BODY;
    return FERRY_OK;
}

/* Whether a memfd from an owner can neither shrink nor grow: only then is a
 * mapping of it safe to read (a shrunk one raises SIGBUS). */
static bool sealed(int fd) {
    int seals = fcntl(fd, F_GET_SEALS);
    return seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW);
}

/* Whether this process may map a memfd from an owner writable. */
static bool mappable_writable(int fd) {
    int fl = fcntl(fd, F_GETFL), seals = fcntl(fd, F_GET_SEALS);
    return fl >= 0 && (fl & O_ACCMODE) == O_RDWR && seals >= 0 && !(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE));
}

/* The connection to the endpoint (pid, nonce), made on first use. */
static ferry_status_t get_peer(ferry_xport_t *xp, uint32_t pid, uint64_t nonce, uint64_t secret, shm_peer_t **out) {
    shm_t *s = xp->backend;
    for (shm_peer_t *p = s->peers; p; p = p->next) {
        if (p->pid == pid && p->nonce == nonce && !p->lost) {
            *out = p;
            return FERRY_OK;
        }
    }
    struct sockaddr_un a;
    socklen_t alen;
    sock_name(&a, &alen, pid, nonce);
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (sock < 0) return ferry_fail(&xp->err, FERRY_ERR_IO, "shm: socket: %s", strerror(errno));
    /* never blocks: a full backlog is retried until the timeout */
    const ferry_intr_t *intr = ferry_ctx_intr(xp->ctx);
    double deadline = ferry_mono_s() + xp->timeout_ms / 1e3, tick = 0;
    int rc;
    while ((rc = connect(sock, (struct sockaddr *)&a, alen)) != 0 && errno == EAGAIN && ferry_mono_s() < deadline) {
        if (ferry_intr_due(intr, &tick)) {
            close(sock);
            return ferry_fail(&xp->err, FERRY_ERR_INTERRUPTED,
                              "shm: interrupted while connecting to endpoint %s (its backlog is full)", a.sun_path + 1);
        }
        usleep(1000);
    }
    if (rc != 0) {
        int e = errno;
        close(sock);
        return ferry_fail(&xp->err, e == EAGAIN ? FERRY_ERR_TIMEOUT : FERRY_ERR_PEER_LOST,
                          "shm: cannot reach endpoint %s (%s): %s", a.sun_path + 1, strerror(e),
                          e == EAGAIN ? "it accepts no connection within the timeout"
                                      : "the owner is gone or on another host");
    }
    auth_t au = {SHM_HELLO_MAGIC, 0, secret};
    hello_t hello;
    int cfd = -1;
    int r = send_msg(sock, &au, sizeof au, -1) == 0 ? recv_msg(sock, &hello, sizeof hello, &cfd, xp->timeout_ms, intr)
                                                    : -1;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    bool ok = r == 0 && hello.magic == SHM_HELLO_MAGIC && hello.pid == pid && hello.nonce == nonce &&
              hello.slots == SHM_SLOTS && hello.status == FERRY_OK && cfd >= 0 &&
              getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0;
    if (!ok) {
        if (cfd >= 0) close(cfd);
        close(sock);
        if (r == 0 && hello.magic == SHM_HELLO_MAGIC && hello.status == FERRY_ERR_LIMIT)
            return ferry_fail(&xp->err, FERRY_ERR_LIMIT, "shm: endpoint %s serves %d peers already", a.sun_path + 1,
                              MAX_CLIENTS);
        if (r == -3)
            return ferry_fail(&xp->err, FERRY_ERR_INTERRUPTED,
                              "shm: interrupted while waiting for endpoint %s to answer", a.sun_path + 1);
        return ferry_fail(&xp->err, r == -2 ? FERRY_ERR_TIMEOUT : FERRY_ERR_PEER_LOST, "shm: endpoint %s %s",
                          a.sun_path + 1,
                          r == -2 ? "did not answer within the timeout"
                                  : "refused the connection (another user, a wrong secret, or a bad hello)");
    }
    int fl = fcntl(sock, F_GETFL); /* requests wait with poll; the socket itself may block */
    if (fl >= 0) fcntl(sock, F_SETFL, fl & ~O_NONBLOCK);
    struct stat sb;
    if (!sealed(cfd) || fstat(cfd, &sb) != 0 || (uint64_t)sb.st_size < SHM_SLOTS * sizeof(uint64_t)) {
        close(cfd);
        close(sock);
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT,
                          "shm: endpoint %s sent a control page that is not a sealed memfd of %zu bytes",
                          a.sun_path + 1, SHM_SLOTS * sizeof(uint64_t));
    }
    const uint64_t *gens = mmap(NULL, SHM_SLOTS * sizeof(uint64_t), PROT_READ, MAP_SHARED, cfd, 0);
    close(cfd);
    if (gens == MAP_FAILED) {
        close(sock);
        return ferry_fail(&xp->err, FERRY_ERR_IO, "shm: mapping a peer's control page: %s", strerror(errno));
    }
    shm_peer_t *p = ferry_calloc(xp->ctx, 1, sizeof *p);
    if (!p) {
        munmap((void *)gens, SHM_SLOTS * sizeof(uint64_t));
        close(sock);
        return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory connecting");
    }
    p->pid = pid;
    p->vm_pid = cred.pid;
    p->nonce = nonce;
    p->sock = sock;
    p->gens = gens;
    p->next = s->peers;
    s->peers = p;
    *out = p;
    return FERRY_OK;
}

static void put_peer(ferry_xport_t *xp, shm_peer_t *p) {
    shm_t *s = xp->backend;
    if (--p->refs > 0) return;
    for (shm_peer_t **pp = &s->peers; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    munmap((void *)p->gens, SHM_SLOTS * sizeof(uint64_t));
    xcuda_cache_destroy(p->cuda);
    close(p->sock);
    ferry_free(xp->ctx, p);
}

/* Opens CUDA memory of the owner: asks for each chunk (the allocations
 * holding it) and opens them, cached per allocation (xport/cuda_ipc.h). In
 * the owner's own process the pointer is used as it is. */
static ferry_status_t cuda_unpack(ferry_xport_t *xp, shm_peer_t *peer, ferry_xport_rmem_t *r) {
    r->type = FERRY_MEM_CUDA;
    if (peer->pid == (uint32_t)getpid()) {
        ferry_status_t st = ferry_cuda_init(&xp->err);
        if (st) return st;
        /* kernels of this side's device may read or write it (another GPU's memory: peer access) */
        if ((st = ferry_cuda_reach((void *)(uintptr_t)r->remote_addr, &xp->err))) return st;
        r->mapped = true;
        r->base = (uint8_t *)(uintptr_t)r->remote_addr;
        return FERRY_OK;
    }
    if (!peer->cuda && !(peer->cuda = xcuda_cache_create(xp->ctx)))
        return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory");
    xcuda_chunk_t *chunks = NULL;
    uint32_t n = 1, vmm = 0;
    ferry_status_t st = FERRY_OK;
    for (uint32_t i = 0; i < n && st == FERRY_OK; i++) {
        fd_request_t rq = {r->slot, WHAT_CUDA | i, r->gen};
        xcuda_chunk_msg_t msg;
        int fd = -1, rr = -1;
        if (send_msg(peer->sock, &rq, sizeof rq, -1) == 0)
            rr = recv_msg(peer->sock, &msg, sizeof msg, &fd, xp->timeout_ms, ferry_ctx_intr(xp->ctx));
        if (rr != 0) {
            peer->lost = true;
            st = ferry_fail(&xp->err, rr == -3 ? FERRY_ERR_INTERRUPTED : rr == -2 ? FERRY_ERR_TIMEOUT : FERRY_ERR_PEER_LOST,
                            "shm: opening CUDA registration %u of pid %u: %s", r->slot, peer->pid,
                            rr == -3 ? "interrupted while waiting for the owner's answer"
                            : rr == -2 ? "no answer within the timeout" : "the owner is gone");
        } else if (msg.status != FERRY_OK) {
            st = ferry_fail(&xp->err, msg.status == FERRY_ERR_STALE ? FERRY_ERR_STALE : FERRY_ERR_CORRUPT,
                            "shm: the owner refused CUDA registration %u (%s)", r->slot,
                            msg.status == FERRY_ERR_STALE ? "stale descriptor" : "bad request");
        } else if (msg.index != i || msg.n == 0 || msg.n > XCUDA_MAX_CHUNKS || (i > 0 && (msg.n != n || msg.vmm != vmm))) {
            st = ferry_fail(&xp->err, FERRY_ERR_CORRUPT, "shm: CUDA registration %u: inconsistent answer for chunk %u", r->slot, i);
        } else {
            if (i == 0) {
                n = msg.n;
                vmm = msg.vmm;
                if (!(chunks = ferry_calloc(xp->ctx, n, sizeof *chunks))) st = ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory");
            }
            if (st == FERRY_OK) {
                chunks[i] = (xcuda_chunk_t){.off = msg.off, .size = msg.size, .id = msg.id, .fd = fd};
                memcpy(chunks[i].handle, msg.handle, sizeof chunks[i].handle);
                fd = -1;
            }
        }
        if (fd >= 0) close(fd);
    }
    if (st == FERRY_OK)
        st = xcuda_import(peer->cuda, &xp->err, chunks, n, vmm != 0, r->size, r->writable,
                          (xcuda_import_t **)&r->backend, &r->base);
    else
        for (uint32_t i = 0; chunks && i < n; i++)
            if (chunks[i].fd >= 0) close(chunks[i].fd);
    ferry_free(xp->ctx, chunks);
    if (st == FERRY_OK) r->mapped = true;
    return st;
}

static ferry_status_t shm_rmem_unpack(ferry_xport_t *xp, const uint8_t *b, size_t len, ferry_xport_rmem_t *r) {
    if (len != SHM_BODY)
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT, "shm descriptor: body of %zu bytes, not %d", len, SHM_BODY);
    uint32_t pid = (uint32_t)ferry_get_le(b, 4), slot = (uint32_t)ferry_get_le(b + 13, 4);
    uint64_t nonce = ferry_get_le(b + 4, 8), gen = ferry_get_le(b + 17, 8), size = ferry_get_le(b + 25, 8), addr = ferry_get_le(b + 33, 8),
             secret = ferry_get_le(b + 41, 8);
    uint8_t mode = b[12];
    if ((mode != MODE_MAPPED && mode != MODE_VM && mode != MODE_CUDA) || slot >= SHM_SLOTS || size == 0 ||
        size > (uint64_t)SIZE_MAX || ((mode == MODE_VM || mode == MODE_CUDA) && addr + size < addr))
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT, "shm descriptor: mode %u, slot %u, size %llu make no sense",
                          mode, slot, (unsigned long long)size);
    shm_peer_t *peer = NULL;
    ferry_status_t st = get_peer(xp, pid, nonce, secret, &peer);
    if (st) return st;
    peer->refs++;
    r->peer = peer;
    r->slot = slot;
    r->gen = gen;
    r->size = (size_t)size;
    r->remote_addr = addr;
    if (__atomic_load_n(&peer->gens[slot], __ATOMIC_ACQUIRE) != gen) {
        put_peer(xp, peer);
        return ferry_fail(&xp->err, FERRY_ERR_STALE, "shm descriptor: registration %u has ended (stale)", slot);
    }
    if (mode == MODE_VM) return FERRY_OK;
    if (mode == MODE_CUDA) {
        st = cuda_unpack(xp, peer, r);
        if (st) put_peer(xp, peer);
        return st;
    }
    fd_request_t rq = {slot, 0, gen};
    int32_t status = FERRY_ERR_PEER_LOST;
    int fd = -1;
    int rr = -1;
    if (send_msg(peer->sock, &rq, sizeof rq, -1) == 0)
        rr = recv_msg(peer->sock, &status, sizeof status, &fd, xp->timeout_ms, ferry_ctx_intr(xp->ctx));
    if (rr != 0 || status != FERRY_OK || fd < 0) {
        if (fd >= 0) close(fd);
        if (rr != 0) peer->lost = true; /* (a late answer would put the socket out of step: a new one next time) */
        put_peer(xp, peer);
        return ferry_fail(&xp->err,
                          rr == -3   ? FERRY_ERR_INTERRUPTED
                          : rr == -2 ? FERRY_ERR_TIMEOUT
                          : rr != 0  ? FERRY_ERR_PEER_LOST
                                     : (ferry_status_t)status,
                          "shm: mapping registration %u of pid %u: %s", slot, pid,
                          rr == -3   ? "interrupted while waiting for the owner's answer"
                          : rr == -2 ? "no answer within the timeout"
                          : rr != 0 ? "the owner is gone"
                                    : "the owner refused (stale descriptor)");
    }
    if (!sealed(fd)) {
        close(fd);
        put_peer(xp, peer);
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT,
                          "shm: registration %u of pid %u is not sealed against resizing (F_SEAL_SHRINK, "
                          "F_SEAL_GROW): refused, a shrink would crash this reader", slot, pid);
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != size) { /* the descriptor's size is not trusted */
        close(fd);
        put_peer(xp, peer);
        return ferry_fail(&xp->err, FERRY_ERR_CORRUPT,
                          "shm descriptor: registration %u claims %llu bytes, the owner's memory has %lld", slot,
                          (unsigned long long)size, (long long)sb.st_size);
    }
    /* the owner decides: a read-only registration comes as a read-only fd,
     * whatever the descriptor says */
    r->writable = r->writable && mappable_writable(fd);
    /* page tables filled once here, not by faults during the first reads */
    void *base = mmap(NULL, (size_t)size, r->writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED | MAP_POPULATE,
                      fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        put_peer(xp, peer);
        return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "shm: mapping %llu remote bytes: %s",
                          (unsigned long long)size, strerror(errno));
    }
    r->mapped = true;
    r->base = base;
    return FERRY_OK;
}

static void shm_rmem_release(ferry_xport_t *xp, ferry_xport_rmem_t *r) {
    if (r->type == FERRY_MEM_CUDA) xcuda_import_release(((shm_peer_t *)r->peer)->cuda, r->backend);
    else if (r->mapped) munmap(r->base, r->size);
    put_peer(xp, (shm_peer_t *)r->peer);
}

static bool peer_alive(shm_peer_t *p) {
    if (p->lost) return false;
    struct pollfd pf = {p->sock, POLLRDHUP, 0};
    if (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLRDHUP | POLLERR))) p->lost = true;
    return !p->lost;
}

static ferry_status_t shm_rmem_check(ferry_xport_t *xp, const ferry_xport_rmem_t *r) {
    (void)xp;
    if (__atomic_load_n(&((shm_peer_t *)r->peer)->gens[r->slot], __ATOMIC_ACQUIRE) != r->gen) return FERRY_ERR_STALE;
    return peer_alive(r->peer) ? FERRY_OK : FERRY_ERR_PEER_LOST;
}

static ferry_status_t copy_run(ferry_xport_t *xp, const ferry_xport_run_t *run, size_t off, size_t len, bool put) {
    (void)xp;
    ferry_xport_rmem_t *r = run->rmem;
    uint8_t *local = (uint8_t *)run->local + off;
    uint64_t at = run->remote_offset + off;
    if (r->mapped) {
        if (put) memcpy(r->base + at, local, len);
        else memcpy(local, r->base + at, len);
        return FERRY_OK;
    }
    while (len > 0) { /* process_vm_*: may move less than asked */
        struct iovec l = {local, len}, rv = {(void *)(uintptr_t)(r->remote_addr + at), len};
        pid_t pid = ((shm_peer_t *)r->peer)->vm_pid;
        ssize_t n = put ? process_vm_writev(pid, &l, 1, &rv, 1, 0) : process_vm_readv(pid, &l, 1, &rv, 1, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == ESRCH) return FERRY_ERR_PEER_LOST;
            if (n < 0 && errno == EPERM) return FERRY_ERR_UNSUPPORTED;
            return FERRY_ERR_STALE; /* EFAULT: the memory is no longer there */
        }
        local += n;
        at += (uint64_t)n;
        len -= (size_t)n;
    }
    return FERRY_OK;
}

/* Runs that touch GPU memory (either side) go to the GPUs' copy engines,
 * left in flight with *ev marking their end; the others are copied as host
 * memory. */
static ferry_status_t copy_runs(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n, bool put, bool *explained,
                                xcuda_event_t **ev) {
    shm_t *s = xp->backend;
    *explained = false;
    uint8_t *dev = NULL; /* per run: it touches GPU memory (asked once; nothing allocated for host-only requests) */
    size_t ndev = 0;
    for (size_t i = 0; i < n; i++) {
        if (runs[i].rmem->type != FERRY_MEM_CUDA && !xcuda_is_device(runs[i].local)) continue;
        if (!dev && !(dev = ferry_calloc(xp->ctx, n, 1))) return ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory");
        dev[i] = 1;
        ndev++;
    }
    if (ndev == 0) return xport_copy_parallel(xp, runs, n, put, copy_run);
    xcuda_copy_t *cp = ferry_calloc(xp->ctx, ndev, sizeof *cp);
    ferry_xport_run_t *host = ferry_calloc(xp->ctx, n - ndev + 1, sizeof *host);
    ferry_status_t st = FERRY_OK;
    if (!cp || !host) st = ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory");
    size_t nc = 0, nh = 0;
    for (size_t i = 0; i < n && st == FERRY_OK; i++) {
        const ferry_xport_run_t *run = &runs[i];
        ferry_xport_rmem_t *r = run->rmem;
        if (!dev[i]) {
            host[nh++] = *run;
            continue;
        }
        if (!r->mapped) { /* process_vm cannot reach device memory */
            st = ferry_fail(&xp->err, FERRY_ERR_UNSUPPORTED,
                            "shm: run %zu moves device memory to or from host memory the owner registered as its own "
                            "(process_vm); the owner must allocate it (ferry_xport_mem_alloc)", i);
            break;
        }
        uint8_t *remote = r->base + run->remote_offset;
        cp[nc++] = put ? (xcuda_copy_t){remote, run->local, run->len} : (xcuda_copy_t){run->local, remote, run->len};
    }
    if (st == FERRY_OK && nc) st = xcuda_copy_start(&s->stream, &xp->err, cp, nc, ev);
    *explained = st != FERRY_OK; /* the detail is on the endpoint */
    if (st == FERRY_OK && nh) st = xport_copy_parallel(xp, host, nh, put, copy_run);
    ferry_free(xp->ctx, dev);
    ferry_free(xp->ctx, cp);
    ferry_free(xp->ctx, host);
    return st;
}

/* A request whose GPU copies are in flight: the regions to check once they end. */
typedef struct shm_pending {
    xcuda_event_t *ev;
    size_t n;
    ferry_xport_rmem_t *rmems[];
} shm_pending_t;

/* A request's end: its status, with the detail of what went wrong. */
static void finish(ferry_xport_t *xp, ferry_status_t st, ferry_xport_req_t *req) {
    if (st == FERRY_ERR_UNSUPPORTED)
        ferry_fail(&xp->err, st, "shm: process_vm_readv/writev is not permitted on the owner (ptrace policy); "
                                 "allocate with ferry_xport_mem_alloc instead");
    else if (st == FERRY_ERR_STALE)
        ferry_fail(&xp->err, st, "shm: a registration ended during the transfer");
    else if (st == FERRY_ERR_PEER_LOST)
        ferry_fail(&xp->err, st, "shm: the owner of the memory died during the transfer");
    req->status = st;
    req->done = true;
}

static ferry_status_t shm_transfer(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n, bool put,
                                   ferry_xport_req_t *req) {
    bool explained = false;
    xcuda_event_t *ev = NULL;
    ferry_status_t st = copy_runs(xp, runs, n, put, &explained, &ev);
    shm_pending_t *pend = NULL;
    if (ev && st == FERRY_OK && !(pend = ferry_alloc(xp->ctx, sizeof *pend + n * sizeof pend->rmems[0])))
        st = ferry_fail(&xp->err, FERRY_ERR_NO_MEMORY, "out of memory for a request");
    if (ev && st != FERRY_OK) { /* the host part failed: the GPU part ends first */
        ferry_errbuf_t ignored;
        xcuda_event_wait(ev, &ignored);
        ev = NULL;
    }
    if (explained) {
        req->status = st;
        req->done = true;
    } else if (!ev) {
        /* the registration may have ended, or its owner died, during the copy */
        for (size_t i = 0; i < n && st == FERRY_OK; i++)
            if (i == 0 || runs[i].rmem != runs[i - 1].rmem) st = shm_rmem_check(xp, runs[i].rmem);
        finish(xp, st, req);
    } else { /* GPU copies in flight: checked in the wait, once they end */
        pend->ev = ev;
        pend->n = n;
        for (size_t i = 0; i < n; i++) pend->rmems[i] = runs[i].rmem;
        req->backend = pend;
        req->done = false;
    }
    return FERRY_OK;
}

static ferry_status_t shm_req_wait(ferry_xport_t *xp, ferry_xport_req_t *req, int timeout_ms) {
    (void)timeout_ms; /* copies between GPUs and host memory of this host end */
    shm_pending_t *pend = req->backend;
    req->backend = NULL;
    ferry_status_t st = xcuda_event_wait(pend->ev, &xp->err);
    if (st != FERRY_OK) {
        req->status = st;
        req->done = true;
    } else {
        for (size_t i = 0; i < pend->n && st == FERRY_OK; i++)
            if (i == 0 || pend->rmems[i] != pend->rmems[i - 1]) st = shm_rmem_check(xp, pend->rmems[i]);
        finish(xp, st, req);
    }
    ferry_free(xp->ctx, pend);
    return req->status;
}

static ferry_status_t shm_progress(ferry_xport_t *xp) {
    (void)xp; /* requests complete in get/put */
    return FERRY_OK;
}

const xport_ops_t xport_shm_ops = {
    .name = "shm",
    .init = shm_init,
    .fini = shm_fini,
    .mem_alloc = shm_mem_alloc,
    .mem_register = shm_mem_register,
    .mem_deregister = shm_mem_deregister,
    .mem_pack = shm_mem_pack,
    .rmem_unpack = shm_rmem_unpack,
    .rmem_release = shm_rmem_release,
    .rmem_check = shm_rmem_check,
    .transfer = shm_transfer,
    .progress = shm_progress,
    .req_wait = shm_req_wait,
};
