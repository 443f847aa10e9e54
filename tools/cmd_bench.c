/* ferry bench xport: two processes, one-sided reads of a registered buffer,
 * against baselines measured in the same run, interleaved round by round
 * with the gets: memcpy with 1 and with the same number of threads, or a
 * plain TCP stream between the same two processes when UCX runs over TCP
 * alone; with GPU memory, a GPU copy between the same two GPUs. Every
 * figure is a median with its range over the rounds. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_gpu.h"
#include "cli.h"
#include "demo_gpu.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry bench sync --help   (end-to-end sync vs files, TCP broadcast, memcpy)\n"
            "       ferry bench delta --help  (sparse delta size and speed vs TRL, zstd, memcpy)\n"
            "       ferry bench fp8-delta --help  (what an RL step changes in an FP8 engine's weights)\n"
            "       ferry bench xport [--backend shm|ucx] [--size 64M,1G] [--threads N]\n"
            "                         [--memory alloc|user] [--repeat R] [--tls LIST]\n"
            "                         [--device cpu|cuda|cuda:N]\n"
            "  Two processes: the owner registers a buffer and publishes its descriptor;\n"
            "  the reader gets it, one-sided, in R rounds per size after a warm-up. Each\n"
            "  round first times the baselines (memcpy of the same size with 1 and N\n"
            "  threads; or the TCP stream below), then the get: interleaved, so drift on\n"
            "  a shared host hits both alike. Each figure is the median GB/s of the R\n"
            "  rounds with its range [min-max]; ratios are median against median.\n"
            "  Then many 4 KiB runs (batched 1024 a request, and one a request) as runs/s.\n"
            "  --memory alloc  the owner's buffer comes from ferry_xport_mem_alloc (shared mapping)\n"
            "  --memory user   the owner registers its own malloc'd buffer (shm: process_vm_readv)\n"
            "  --tls LIST      ucx: UCX_TLS for both processes (e.g. tcp, or sm,self,tcp); with\n"
            "                  tcp alone the baseline is a plain TCP stream between the same two\n"
            "                  processes over loopback (one connection, 8 MiB socket buffers,\n"
            "                  TCP_NODELAY; the owner sends from the registered buffer, the\n"
            "                  reader receives into the get's buffer), timed from the request\n"
            "                  to the last byte\n"
            "  --device cuda   GPU memory (a ferry built with CUDA): the owner's on GPU 0, the\n"
            "                  reader's on GPU 1 (on GPU 0 where there is one GPU); cuda:N: both on\n"
            "                  GPU N. The baseline is then a copy of the same size between the same\n"
            "                  GPUs (cudaMemcpyPeer, or cudaMemcpy within one GPU), timed in the\n"
            "                  same rounds; the owner fills its buffer with a pattern and the\n"
            "                  reader checks bytes of every size's last get against it\n");
}

typedef struct {
    uint8_t *dst;
    const uint8_t *src;
    size_t len;
} cp_t;

static void *cp_thread(void *a) {
    cp_t *c = a;
    memcpy(c->dst, c->src, c->len);
    return NULL;
}

/* memcpy of len bytes with nt threads (the same 4 KiB-aligned split the transport uses) */
void cli_memcpy_threads(uint8_t *dst, const uint8_t *src, size_t len, uint32_t nt) {
    if (nt < 1) nt = 1;
    if (nt > 64) nt = 64;
    cp_t c[64] = {{0}};
    pthread_t t[64];
    for (uint32_t i = 0; i < nt; i++) {
        size_t from = len * i / nt, to = len * (i + 1) / nt;
        if (i > 0) from &= ~(size_t)4095;
        if (i + 1 < nt) to &= ~(size_t)4095;
        c[i] = (cp_t){dst + from, src + from, to - from};
    }
    for (uint32_t i = 1; i < nt; i++) pthread_create(&t[i], NULL, cp_thread, &c[i]);
    cp_thread(&c[0]);
    for (uint32_t i = 1; i < nt; i++) pthread_join(t[i], NULL);
}

/* The rounds' median rate and its range. Sorts t. */
typedef struct {
    double med, lo, hi;
} rate_t;

static rate_t rate_of(double *t, uint64_t n, double units) {
    qsort(t, (size_t)n, sizeof *t, cli_cmp_dbl);
    double mid = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
    return (rate_t){units / mid, units / t[n - 1], units / t[0]};
}

/* "12.34 [11.90-12.80]" with dec decimals */
static const char *rate_str(rate_t r, double scale, int dec, char *buf, size_t size) {
    snprintf(buf, size, "%.*f [%.*f-%.*f]", dec, r.med * scale, dec, r.lo * scale, dec, r.hi * scale);
    return buf;
}

static int tcp_buffers(int fd) {
    int b = 8 << 20, one = 1;
    return setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b) | setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b) |
           setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* "cuda" or "cuda:N", as given to --device */
static const char *device_name(int device, char *buf, size_t size) {
    if (device >= 0) snprintf(buf, size, "cuda:%d", device);
    else snprintf(buf, size, "%s", device == DEMO_DEVICE_CPU ? "cpu" : "cuda");
    return buf;
}

/* Why a process could not use its GPU, naming the --device given (once). */
static void bench_device_error(int device, const char *who, const char *err) {
    char name[16];
    if (!strncmp(err, "--device", 8)) fprintf(stderr, "ferry bench: %s: %s\n", who, err);
    else fprintf(stderr, "ferry bench: --device %s: %s: %s\n", device_name(device, name, sizeof name), who, err);
}

/* The owner: registers the buffer, publishes its descriptor, then serves
 * commands: 'C' port(2) connects to the reader over TCP (once); 'S' size(8)
 * sends size bytes of the buffer on that connection (the baseline); 'x'
 * ends. */
static void owner(ferry_xport_kind_t kind, uint64_t size, bool user, int device, int desc_fd, int cmd_fd) {
    char err[256];
    bool gpu = device != DEMO_DEVICE_CPU;
    /* this process's first CUDA call: the parent made none before the fork */
    if (gpu && demo_gpu_pick(device, true, 0, err, sizeof err) < 0) {
        bench_device_error(device, "owner", err);
        _exit(3);
    }
    ferry_mem_type_t type = gpu ? FERRY_MEM_CUDA : FERRY_MEM_HOST;
    ferry_ctx_t *ctx = cli_ctx();
    ferry_xport_t *xp = NULL;
    ferry_xport_params_t xpar = {.field_mask = FERRY_XPORT_PARAM_KIND, .kind = kind};
    if (!ctx || ferry_xport_create(ctx, &xpar, &xp) != FERRY_OK) _exit(3);
    ferry_xport_mem_t *m = NULL;
    uint8_t *p = NULL;
    ferry_status_t st;
    if (user) {
        p = gpu ? bench_gpu_alloc(size, err, sizeof err) : malloc(size);
        st = p ? ferry_xport_mem_register(xp, p, size, type, FERRY_XPORT_ACCESS_READ, &m) : FERRY_ERR_NO_MEMORY;
    } else {
        st = ferry_xport_mem_alloc(xp, size, type, FERRY_XPORT_ACCESS_READ, &m);
        if (st == FERRY_OK) p = ferry_xport_mem_ptr(m);
    }
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry bench: owner: %s\n", p || !gpu ? ferry_xport_error(xp) : err);
        _exit(3);
    }
    if (gpu) {
        if (!bench_gpu_fill(p, size, err, sizeof err)) {
            fprintf(stderr, "ferry bench: owner: %s\n", err);
            _exit(3);
        }
    } else {
        for (uint64_t k = 0; k < size; k += 4096) p[k] = (uint8_t)(k >> 12); /* resident pages */
    }
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t len = 0;
    ferry_xport_mem_pack(m, desc, sizeof desc, &len);
    uint32_t l32 = (uint32_t)len;
    if (write(desc_fd, &l32, 4) != 4 || write(desc_fd, desc, len) != (ssize_t)len) _exit(3);
    int fd = -1;
    for (;;) {
        uint8_t cmd[9];
        if (read(cmd_fd, cmd, 1) != 1) break;
        if (cmd[0] == 'C' && fd < 0 && read(cmd_fd, cmd + 1, 2) == 2) {
            uint16_t port;
            memcpy(&port, cmd + 1, 2);
            fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            if (fd < 0 || tcp_buffers(fd) || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) _exit(3);
        } else if (cmd[0] == 'S' && fd >= 0 && !gpu && read(cmd_fd, cmd + 1, 8) == 8) {
            uint64_t n;
            memcpy(&n, cmd + 1, 8);
            if (n > size) _exit(3);
            for (uint64_t sent = 0; sent < n;) {
                ssize_t w = send(fd, p + sent, n - sent, MSG_NOSIGNAL);
                if (w <= 0) _exit(3);
                sent += (uint64_t)w;
            }
        } else {
            break;
        }
    }
    if (fd >= 0) close(fd);
    ferry_xport_destroy(xp);
    if (user && gpu) bench_gpu_free(p);
    ferry_ctx_destroy(ctx);
    _exit(0);
}

/* The reader's end of the TCP baseline: a connection from the owner, made
 * once. Returns the socket, or -1. */
static int tcp_connect_owner(int cmd_fd) {
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (lfd < 0 || tcp_buffers(lfd) || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &al) != 0) {
        if (lfd >= 0) close(lfd);
        return -1;
    }
    uint8_t cmd[3] = {'C'};
    uint16_t port = ntohs(a.sin_port);
    memcpy(cmd + 1, &port, 2);
    int fd = write(cmd_fd, cmd, sizeof cmd) == (ssize_t)sizeof cmd ? accept4(lfd, NULL, NULL, SOCK_CLOEXEC) : -1;
    close(lfd);
    return fd;
}

/* Seconds from asking the owner for n bytes to the last of them received. */
static double tcp_stream(int cmd_fd, int fd, uint8_t *buf, uint64_t n) {
    uint8_t cmd[9] = {'S'};
    memcpy(cmd + 1, &n, 8);
    double t0 = cli_now_s();
    if (write(cmd_fd, cmd, sizeof cmd) != (ssize_t)sizeof cmd) return -1;
    for (uint64_t got = 0; got < n;) {
        ssize_t r = recv(fd, buf + got, n - got, 0);
        if (r <= 0) return -1;
        got += (uint64_t)r;
    }
    return cli_now_s() - t0;
}

/* Seconds for one get of run, or -1 (the error is printed). */
static double timed_get(ferry_xport_t *xp, const ferry_xport_run_t *runs, size_t n) {
    ferry_xport_req_t *req = NULL;
    double t0 = cli_now_s();
    ferry_status_t st = ferry_xport_get(xp, runs, n, &req);
    if (st == FERRY_OK) st = ferry_xport_req_wait(req, -1);
    double t = cli_now_s() - t0;
    ferry_xport_req_free(req);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry bench: get: %s\n", ferry_xport_error(xp));
        return -1;
    }
    return t;
}

static double timed_memcpy(uint8_t *dst, const uint8_t *src, size_t n, uint32_t nt) {
    double t0 = cli_now_s();
    cli_memcpy_threads(dst, src, n, nt);
    return cli_now_s() - t0;
}

/* Seconds for one GPU copy of the baseline's n bytes (timed by CUDA events), or -1. */
static double timed_gpu_copy(demo_gpu_copy_bench_t *b, uint64_t n) {
    double gbps = demo_gpu_bench_run(b);
    return gbps > 0 ? (double)n / (gbps * 1e9) : -1;
}

static const char *const backends[] = {"shm", "ucx"}, *const memories[] = {"alloc", "user"};

static int bench_xport(int argc, char **argv) {
    const char *tls = NULL;
    size_t backend = 0, memory = 0;
    int device = DEMO_DEVICE_CPU;
    uint64_t threads = 1, repeat = 7;
    uint64_t list[16] = {64ull << 20, 1ull << 30}, max = 0;
    size_t nsizes = 2;
    for (int i = 2; i < argc; i++) {
        const char *v = NULL;
        bool ok = true;
        if (cli_opt(argc, argv, &i, "--backend", &v)) ok = cli_word("--backend", v, backends, 2, &backend);
        else if (cli_opt(argc, argv, &i, "--size", &v)) ok = cli_size_list("--size", v, 1, 1ull << 40, list, 16, &nsizes);
        else if (cli_opt(argc, argv, &i, "--memory", &v)) ok = cli_word("--memory", v, memories, 2, &memory);
        else if (cli_opt(argc, argv, &i, "--tls", &v)) tls = v;
        else if (cli_opt(argc, argv, &i, "--threads", &v)) ok = cli_u64("--threads", v, 1, 64, &threads);
        else if (cli_opt(argc, argv, &i, "--device", &v)) ok = demo_gpu_parse(v, &device);
        else if (cli_opt(argc, argv, &i, "--repeat", &v)) ok = cli_u64("--repeat", v, 1, 1000, &repeat);
        else if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return CLI_OK;
        } else {
            fprintf(stderr, "ferry bench: unknown option %s\n", argv[i]);
            usage(stderr);
            return CLI_USAGE;
        }
        if (!v || !ok) return CLI_USAGE;
    }
    ferry_xport_kind_t kind = backend ? FERRY_XPORT_UCX : FERRY_XPORT_SHM;
    const char *backend_name = backends[backend];
    if (tls) {
        if (kind != FERRY_XPORT_UCX) {
            fprintf(stderr, "ferry bench: --tls applies to --backend ucx\n");
            return CLI_USAGE;
        }
        setenv("UCX_TLS", tls, 1); /* before the fork: both processes */
    }
    bool gpu = device != DEMO_DEVICE_CPU;
    char devname[16];
    device_name(device, devname, sizeof devname);
#ifndef FERRY_CUDA
    if (gpu) {
        fprintf(stderr, "ferry bench: --device %s needs a ferry built with CUDA\n", devname);
        return CLI_USAGE;
    }
#endif
    const char *tls_now = getenv("UCX_TLS");
    /* GPU memory cannot go through the socket: the GPU copy is its baseline */
    bool tcp_only = !gpu && kind == FERRY_XPORT_UCX && tls_now && !strcmp(tls_now, "tcp");
    bool user = memory == 1;
    for (size_t s = 0; s < nsizes; s++)
        if (list[s] > max) max = list[s];
    if (max < (4u << 20)) max = 4u << 20; /* room for the 4 KiB runs */
    /* the reader's last word to the owner ('x') finds it gone when it failed
     * (no GPU, say): an error from write, not a SIGPIPE that kills the bench */
    signal(SIGPIPE, SIG_IGN);
    int dp[2], fp[2];
    if (pipe2(dp, O_CLOEXEC) != 0 || pipe2(fp, O_CLOEXEC) != 0) return CLI_FAIL;
    pid_t pid = fork();
    if (pid < 0) return CLI_FAIL;
    if (pid == 0) { /* each side keeps only its ends, so either sees the other leave */
        close(dp[0]), close(fp[1]);
        owner(kind, max, user, device, dp[1], fp[0]);
    }
    close(dp[1]), close(fp[0]);
    int rc = CLI_FAIL, tcp_fd = -1;
    ferry_ctx_t *ctx = NULL;
    ferry_xport_t *xp = NULL;
    ferry_xport_rmem_t *r = NULL;
    uint8_t *local = NULL, *src = NULL;
    demo_gpu_copy_bench_t *copy = NULL;
    char err[256];
    /* the GPUs: the owner's as it picks it (GPU 0, or N), the reader's its
     * own pick, this process's first CUDA call (after the fork) */
    int odev = device >= 0 ? device : 0, rdev = -1;
    if (gpu && (rdev = demo_gpu_pick(device, false, 0, err, sizeof err)) < 0) {
        bench_device_error(device, "reader", err);
        rc = CLI_USAGE;
        goto out;
    }
    ctx = cli_ctx();
    ferry_xport_params_t xpar = {.field_mask = FERRY_XPORT_PARAM_THREADS | FERRY_XPORT_PARAM_KIND,
                                 .threads = (uint32_t)threads, .kind = kind};
    uint32_t l32 = 0;
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    if (!ctx || read(dp[0], &l32, 4) != 4 || l32 > sizeof desc || read(dp[0], desc, l32) != (ssize_t)l32) {
        fprintf(stderr, "ferry bench: the owner process failed\n");
        goto out;
    }
    if (ferry_xport_create(ctx, &xpar, &xp) != FERRY_OK) {
        fprintf(stderr, "ferry bench: %s\n", ferry_ctx_error(ctx));
        goto out;
    }
    if (ferry_xport_rmem_unpack(xp, desc, l32, &r) != FERRY_OK) {
        fprintf(stderr, "ferry bench: %s\n", ferry_xport_error(xp));
        goto out;
    }
    if (gpu) {
        if (!(local = bench_gpu_alloc(max, err, sizeof err))) {
            fprintf(stderr, "ferry bench: reader: %s\n", err);
            goto out;
        }
    } else {
        local = malloc(max);
        src = malloc(max);
        if (!local || !src) goto out;
        memset(local, 1, max); /* resident, so page faults do not count */
        memset(src, 2, max);
    }
    if (tcp_only && (tcp_fd = tcp_connect_owner(fp[1])) < 0) {
        fprintf(stderr, "ferry bench: the TCP baseline could not connect\n");
        goto out;
    }
    const char *ucx_cuda = getenv("FERRY_UCX_CUDA");
    printf("ferry bench xport: backend %s%s%s%s%s, memory %s, %llu thread(s)\n", backend_name,
           kind == FERRY_XPORT_UCX ? ", UCX_TLS=" : "", kind == FERRY_XPORT_UCX ? (tls_now ? tls_now : "(all)") : "",
           kind == FERRY_XPORT_UCX && gpu ? ", FERRY_UCX_CUDA=" : "",
           kind == FERRY_XPORT_UCX && gpu ? (ucx_cuda ? ucx_cuda : "(auto)") : "",
           user ? "user-registered" : "allocated by the transport", (unsigned long long)threads);
    if (gpu) {
        char copy_name[64];
        snprintf(copy_name, sizeof copy_name, odev == rdev ? "a copy within GPU %d" : "cudaMemcpyPeer GPU %d -> %d",
                 odev, rdev);
        printf("GPU memory: the owner's on GPU %d, the reader's on GPU %d.\n"
               "%llu rounds per size after a warm-up, each: %s of the same size, then the get\n"
               "(interleaved). GB/s as median [min-max] over the rounds; get/copy is median get / median copy.\n",
               odev, rdev, (unsigned long long)repeat, copy_name);
        printf("%10s %22s %22s %11s\n", "size", "get", odev == rdev ? "GPU copy" : "peer copy", "get/copy");
    } else {
        printf("%llu rounds per size after a warm-up, each: memcpy 1t, %s, then the get (interleaved).\n"
               "GB/s as median [min-max] over the rounds; %s is median get / median %s.\n",
               (unsigned long long)repeat, tcp_only ? "a TCP stream of the same bytes" : "memcpy Nt",
               tcp_only ? "get/TCP" : "get/memcpy", tcp_only ? "TCP stream" : "memcpy Nt");
        printf("%10s %22s %22s %22s %11s\n", "size", "get", "memcpy 1t", tcp_only ? "TCP stream" : "memcpy Nt",
               tcp_only ? "get/TCP" : "get/memcpy");
    }
    double *t = calloc(3 * repeat, sizeof *t);
    if (!t) goto out;
    double *tm1 = t, *tb = t + repeat, *tg = t + 2 * repeat;
    for (size_t s = 0; s < nsizes; s++) {
        uint64_t n = list[s];
        ferry_xport_run_t run = {r, 0, local, n};
        bool ok = true;
        /* the GPU copy's own buffers of this size, on the same two GPUs (it leaves the reader's current) */
        if (gpu && !(copy = demo_gpu_bench_create(odev, rdev, n, err, sizeof err))) {
            fprintf(stderr, "ferry bench: %s\n", err);
            free(t);
            goto out;
        }
        for (uint64_t i = 0; i <= repeat && ok; i++) { /* round 0 is a warm-up */
            double m1 = gpu ? 0 : timed_memcpy(local, src, n, 1);
            double b = gpu        ? timed_gpu_copy(copy, n)
                       : tcp_only ? tcp_stream(fp[1], tcp_fd, local, n)
                                  : timed_memcpy(local, src, n, (uint32_t)threads);
            double g = timed_get(xp, &run, 1);
            if (b < 0 && g >= 0) fprintf(stderr, "ferry bench: the %s baseline failed\n", gpu ? "GPU copy" : "TCP");
            ok = b >= 0 && g >= 0;
            if (i) tm1[i - 1] = m1, tb[i - 1] = b, tg[i - 1] = g;
        }
        demo_gpu_bench_destroy(copy);
        copy = NULL;
        if (ok && gpu && !bench_gpu_check(local, n, err, sizeof err)) {
            fprintf(stderr, "ferry bench: the get of %llu bytes read wrong bytes: %s\n", (unsigned long long)n, err);
            ok = false;
        }
        if (!ok) {
            free(t);
            goto out;
        }
        rate_t get = rate_of(tg, repeat, (double)n), base = rate_of(tb, repeat, (double)n);
        char sz[32], c1[48], c2[48], c3[48];
        if (gpu) {
            printf("%10s %22s %22s %11.2f\n", cli_bytes(n, sz, sizeof sz), rate_str(get, 1e-9, 2, c1, sizeof c1),
                   rate_str(base, 1e-9, 2, c3, sizeof c3), get.med / base.med);
        } else {
            rate_t m1 = rate_of(tm1, repeat, (double)n);
            printf("%10s %22s %22s %22s %11.2f\n", cli_bytes(n, sz, sizeof sz), rate_str(get, 1e-9, 2, c1, sizeof c1),
                   rate_str(m1, 1e-9, 2, c2, sizeof c2), rate_str(base, 1e-9, 2, c3, sizeof c3), get.med / base.med);
        }
    }
    /* many small runs: 4 KiB at scattered offsets */
    enum { RUNS = 1024 };
    ferry_xport_run_t runs[RUNS];
    uint64_t slots = max / 4096;
    for (int i = 0; i < RUNS; i++)
        runs[i] = (ferry_xport_run_t){r, (uint64_t)(i * 7919) % slots * 4096, local + (size_t)i * 4096, 4096};
    for (int mode = 0; mode < 2; mode++) {
        for (uint64_t i = 0; i < repeat; i++) {
            tg[i] = 0;
            for (int k = 0; k < (mode ? RUNS : 1); k++) {
                double g = timed_get(xp, mode ? &runs[k] : runs, mode ? 1 : RUNS);
                if (g < 0) {
                    free(t);
                    goto out;
                }
                tg[i] += g;
            }
        }
        rate_t runs_s = rate_of(tg, repeat, RUNS);
        char c1[48], c2[48];
        printf("4 KiB runs, %s: %s k runs/s, %s GB/s\n", mode ? "one per request" : "1024 per request",
               rate_str(runs_s, 1e-3, 1, c1, sizeof c1), rate_str(runs_s, 4096e-9, 3, c2, sizeof c2));
    }
    free(t);
    rc = CLI_OK;
out:
    if (tcp_fd >= 0) close(tcp_fd);
    if (write(fp[1], "x", 1) != 1) kill(pid, SIGKILL);
    int ws;
    waitpid(pid, &ws, 0);
    demo_gpu_bench_destroy(copy);
    free(src);
    ferry_xport_rmem_release(r);
    ferry_xport_destroy(xp); /* before freeing local: the transport may hold it registered */
    if (gpu) bench_gpu_free(local);
    else free(local);
    ferry_ctx_destroy(ctx);
    close(dp[0]), close(fp[1]);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    static char who[64];
    snprintf(who, sizeof who, "ferry bench %s", argv[1]);
    cli_parse_set_who(who);
    if (!strcmp(argv[1], "xport")) return bench_xport(argc, argv);
    if (!strcmp(argv[1], "sync")) return bench_sync(argc - 1, argv + 1);
    if (!strcmp(argv[1], "delta")) return bench_delta(argc - 1, argv + 1);
    if (!strcmp(argv[1], "fp8-delta")) return bench_fp8(argc - 1, argv + 1);
    fprintf(stderr, "ferry bench: unknown benchmark \"%s\" (xport, sync, delta, fp8-delta)\n", argv[1]);
    return CLI_USAGE;
}
