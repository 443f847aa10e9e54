/* ferry bench sync: end-to-end resharded updates of a model from W trainer
 * processes to R engine processes (the demo topology), through ferry (shm,
 * ucx), beside memcpy bandwidth and two baselines measured in the same run:
 *   files: the full model written as one safetensors file, every engine
 *          process maps it and copies out its shards (the file stays in the
 *          page cache: the most favourable case for this approach);
 *   tcp:   the full model sent whole over loopback TCP to every engine
 *          process at once (one sender thread each), which copies out its
 *          shards (naive broadcast).
 * Each figure is the median over repeated updates. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "demo.h"
#include "demo_weights.h"

extern char **environ;

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry bench sync [--model M] [--train SPEC] [--infer SPEC] [--steps N]\n"
            "                        [--transports shm,ucx] [--repeat R] [--dir PATH] [--no-baselines]\n"
            "  ferry: N updates (the first, which connects and plans, is not counted) through\n"
            "  each transport; baselines: R updates each of files (a safetensors file in\n"
            "  --dir, default $TMPDIR or /tmp) and tcp (full model to every engine process).\n"
            "  Also memcpy bandwidth with 1 and all cores. Medians are reported.\n"
            "  Defaults: the demo topology (qwen3-0.6b, tp=2,pp=2 -> tp=2,replicas=2), N 6, R 3.\n");
}

/* ---- the full model, as a trainer would gather it --------------------------------- */

typedef struct full_model {
    ferry_model_t *model;
    uint64_t *offset; /* per tensor, in data */
    uint8_t *data;
    uint64_t bytes;
} full_model_t;

static bool full_build(ferry_ctx_t *ctx, const char *name, full_model_t *fm, bool fill) {
    memset(fm, 0, sizeof *fm);
    fm->model = cli_load_model(ctx, name, false);
    if (!fm->model) return false;
    uint32_t nt = ferry_model_tensor_count(fm->model);
    fm->offset = calloc(nt + 1, sizeof *fm->offset);
    if (!fm->offset) return false;
    for (uint32_t t = 0; t < nt; t++) {
        ferry_tensor_info_t ti;
        ferry_model_tensor(fm->model, t, &ti);
        fm->offset[t] = fm->bytes;
        uint64_t n = 1;
        for (uint32_t d = 0; d < ti.ndim; d++) n *= (uint64_t)ti.shape[d];
        fm->bytes += n * ferry_dtype_size(ti.dtype);
    }
    fm->offset[nt] = fm->bytes;
    if (!fill) return true;
    fm->data = malloc(fm->bytes ? fm->bytes : 1);
    if (!fm->data) return false;
    for (uint32_t t = 0; t < nt; t++) {
        ferry_tensor_info_t ti;
        ferry_model_tensor(fm->model, t, &ti);
        demo_tensor_t dt = demo_tensor(1, ti.name, 1e-6, 1);
        uint64_t n = (fm->offset[t + 1] - fm->offset[t]) / ferry_dtype_size(ti.dtype);
        for (uint64_t i = 0; i < n; i++) {
            float f = demo_master(&dt, i);
            if (ti.dtype == FERRY_DTYPE_BF16) ((uint16_t *)(fm->data + fm->offset[t]))[i] = demo_bf16(f);
            else if (ti.dtype == FERRY_DTYPE_F32) memcpy(fm->data + fm->offset[t] + 4 * i, &f, 4);
        }
    }
    return true;
}

static void full_free(full_model_t *fm) {
    free(fm->data);
    free(fm->offset);
    ferry_model_destroy(fm->model);
}

/* Copies one piece's box out of the full row-major tensor into buf. */
static void copy_piece(uint8_t *buf, const ferry_piece_t *p, const ferry_tensor_info_t *ti, const uint8_t *tensor) {
    size_t esz = ferry_dtype_size(ti->dtype);
    int64_t ts[FERRY_MAX_DIMS], idx[FERRY_MAX_DIMS] = {0}, acc = 1;
    uint32_t nd = p->box.ndim;
    for (int d = (int)nd - 1; d >= 0; d--) {
        ts[d] = acc;
        acc *= ti->shape[d];
    }
    if (nd == 0) {
        memcpy(buf + p->byte_offset, tensor, esz);
        return;
    }
    int64_t inner = p->box.extent[nd - 1];
    bool contig = p->strides[nd - 1] == 1;
    for (;;) {
        uint64_t src = 0, dst = p->byte_offset;
        for (uint32_t d = 0; d < nd; d++) {
            src += (uint64_t)((p->box.offset[d] + idx[d]) * ts[d]) * esz;
            dst += (uint64_t)(idx[d] * p->strides[d]) * esz;
        }
        if (contig) memcpy(buf + dst, tensor + src, (size_t)inner * esz);
        else
            for (int64_t k = 0; k < inner; k++)
                memcpy(buf + dst + (uint64_t)(k * p->strides[nd - 1]) * esz, tensor + src + (uint64_t)k * esz, esz);
        int d = (int)nd - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < p->box.extent[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

/* ---- the engine side of the baselines (hidden command) ------------------------------ */

static int recv_all(int fd, uint8_t *p, uint64_t n) {
    while (n > 0) {
        ssize_t k = recv(fd, p, n > (1u << 30) ? (1u << 30) : n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (uint64_t)k;
    }
    return 0;
}

/* _bench-reader file|tcp PATH|PORT MODEL INFER RANK: lands the rank's shards
 * from the full model, prints "done <t>" on stdout. */
int bench_sync_reader_main(int argc, char **argv) {
    if (argc != 6) return CLI_USAGE;
    bool file = !strcmp(argv[1], "file");
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_FAIL;
    full_model_t fm;
    ferry_parallel_t par;
    ferry_layout_t *lay = NULL;
    uint32_t rank = (uint32_t)strtoul(argv[5], NULL, 10);
    int rc = CLI_FAIL;
    if (!full_build(ctx, argv[3], &fm, false) || ferry_parallel_parse(ctx, FERRY_SIDE_INFER, argv[4], &par) != FERRY_OK ||
        ferry_layout_build(ctx, fm.model, &par, rank, &lay) != FERRY_OK)
        goto out;
    /* the engine's parameters, allocated and touched before the clock starts */
    uint32_t nb = ferry_layout_buffer_count(lay);
    uint8_t **bufs = calloc(nb + 1, sizeof *bufs);
    for (uint32_t b = 0; bufs && b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(lay, b, &bi);
        if (bi.rank == rank && !(bufs[b] = calloc(1, bi.size))) goto out;
    }
    uint8_t *all = NULL;
    json_t *hdr = NULL;
    uint64_t data_at = 0;
    int fd = -1;
    if (!file) {
        all = malloc(fm.bytes);
        if (!all) goto out;
        memset(all, 0, fm.bytes);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        int b = 8 << 20;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) goto out;
        printf("ready\n");
        fflush(stdout);
        if (recv_all(fd, all, fm.bytes) != 0) goto out;
    } else {
        printf("ready\n");
        fflush(stdout);
        char go[8];
        if (read(0, go, 1) != 1) goto out; /* the file is written */
        fd = open(argv[2], O_RDONLY);
        struct stat stt;
        uint8_t len8[8];
        if (fd < 0 || fstat(fd, &stt) != 0 || pread(fd, len8, 8, 0) != 8) goto out;
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
        if (hl > (uint64_t)stt.st_size - 8) goto out;
        char *h = malloc(hl + 1);
        if (!h || pread(fd, h, hl, 8) != (ssize_t)hl) goto out;
        h[hl] = '\0';
        hdr = json_loads(h, 0, NULL);
        free(h);
        data_at = 8 + hl;
        all = mmap(NULL, (size_t)stt.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (!hdr || all == MAP_FAILED) goto out;
    }
    size_t first, count;
    ferry_layout_rank_pieces(lay, rank, &first, &count);
    for (size_t i = first; i < first + count; i++) {
        const ferry_piece_t *p = &ferry_layout_pieces(lay)[i];
        ferry_tensor_info_t ti;
        ferry_model_tensor(fm.model, p->tensor, &ti);
        const uint8_t *src = all + fm.offset[p->tensor];
        if (file) { /* the header says where the tensor is */
            json_t *e = json_object_get(hdr, ti.name);
            json_t *off = e ? json_array_get(json_object_get(e, "data_offsets"), 0) : NULL;
            if (!off) goto out;
            src = all + data_at + (uint64_t)json_integer_value(off);
        }
        copy_piece(bufs[p->buffer], p, &ti, src);
    }
    printf("done %.6f\n", cli_now_s());
    fflush(stdout);
    rc = CLI_OK;
out:
    ferry_layout_destroy(lay);
    full_free(&fm);
    ferry_ctx_destroy(ctx);
    return rc;
}

/* ---- the baselines' parent side -------------------------------------------------------- */

typedef struct {
    int fd;
    const uint8_t *data;
    uint64_t bytes;
} sender_t;

static void *send_thread(void *arg) {
    sender_t *s = arg;
    const uint8_t *p = s->data;
    uint64_t n = s->bytes;
    while (n > 0) {
        ssize_t k = send(s->fd, p, n > (1u << 30) ? (1u << 30) : n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        p += k;
        n -= (uint64_t)k;
    }
    return NULL;
}

typedef struct {
    pid_t pid;
    FILE *out;  /* its stdout */
    int in;     /* its stdin */
} proc_t;

static bool spawn_reader(proc_t *p, const char *kind, const char *where, const demo_opts_t *o, uint32_t rank) {
    int so[2], si[2];
    if (pipe(so) != 0 || pipe(si) != 0) return false;
    char r[16];
    snprintf(r, sizeof r, "%u", rank);
    char *argv[] = {"ferry", "_bench-reader", (char *)kind, (char *)where, (char *)o->model, (char *)o->infer, r, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, so[1], 1);
    posix_spawn_file_actions_adddup2(&fa, si[0], 0);
    posix_spawn_file_actions_addclose(&fa, so[0]);
    posix_spawn_file_actions_addclose(&fa, si[1]);
    int rc = posix_spawn(&p->pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(so[1]);
    close(si[0]);
    p->out = fdopen(so[0], "r");
    p->in = si[1];
    return rc == 0 && p->out;
}

static bool expect_line(proc_t *p, const char *word, double *t) {
    char line[128];
    if (!fgets(line, sizeof line, p->out)) return false;
    if (strncmp(line, word, strlen(word)) != 0) return false;
    if (t) *t = strtod(line + strlen(word), NULL);
    return true;
}

static void reap(proc_t *ps, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        if (ps[i].in >= 0) close(ps[i].in);
        if (ps[i].out) fclose(ps[i].out);
        if (ps[i].pid > 0) waitpid(ps[i].pid, NULL, 0);
    }
}

/* One update by the files approach: seconds from starting to write the file
 * to the last engine process holding its shards; < 0 on failure. */
static double run_files(const demo_opts_t *o, const full_model_t *fm, uint32_t readers, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/ferry-bench-%d.safetensors", dir, (int)getpid());
    proc_t *ps = calloc(readers, sizeof *ps);
    double result = -1, last = 0;
    for (uint32_t r = 0; r < readers; r++)
        if (!spawn_reader(&ps[r], "file", path, o, r) || !expect_line(&ps[r], "ready", NULL)) goto out;
    /* header: every tensor with its offsets */
    json_t *h = json_object();
    uint32_t nt = ferry_model_tensor_count(fm->model);
    for (uint32_t t = 0; t < nt; t++) {
        ferry_tensor_info_t ti;
        ferry_model_tensor(fm->model, t, &ti);
        json_t *shape = json_array();
        for (uint32_t d = 0; d < ti.ndim; d++) json_array_append_new(shape, json_integer(ti.shape[d]));
        json_object_set_new(h, ti.name,
                            json_pack("{s:s, s:o, s:[I,I]}", "dtype", ferry_dtype_name(ti.dtype), "shape", shape,
                                      "data_offsets", (json_int_t)fm->offset[t], (json_int_t)fm->offset[t + 1]));
    }
    char *text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    double t0 = cli_now_s();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    uint64_t hl = strlen(text);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(hl >> (8 * i));
    bool ok = fd >= 0 && write(fd, len8, 8) == 8 && write(fd, text, hl) == (ssize_t)hl;
    for (uint64_t at = 0; ok && at < fm->bytes;) {
        ssize_t k = write(fd, fm->data + at, fm->bytes - at > (1u << 30) ? (1u << 30) : fm->bytes - at);
        if (k <= 0) ok = false;
        else at += (uint64_t)k;
    }
    if (fd >= 0) close(fd);
    free(text);
    if (!ok) goto out;
    for (uint32_t r = 0; r < readers; r++) {
        ssize_t k = write(ps[r].in, "g", 1);
        (void)k;
    }
    for (uint32_t r = 0; r < readers; r++) {
        double t;
        if (!expect_line(&ps[r], "done", &t)) goto out;
        if (t > last) last = t;
    }
    result = last - t0;
out:
    reap(ps, readers);
    free(ps);
    unlink(path);
    return result;
}

/* One update by TCP broadcast of the full model to every engine process. */
static double run_tcp(const demo_opts_t *o, const full_model_t *fm, uint32_t readers) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 64) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &al) != 0)
        return -1;
    char port[16];
    snprintf(port, sizeof port, "%u", ntohs(a.sin_port));
    proc_t *ps = calloc(readers, sizeof *ps);
    sender_t *ss = calloc(readers, sizeof *ss);
    pthread_t *th = calloc(readers, sizeof *th);
    double result = -1, last = 0;
    for (uint32_t r = 0; r < readers; r++)
        if (!spawn_reader(&ps[r], "tcp", port, o, r) || !expect_line(&ps[r], "ready", NULL)) goto out;
    for (uint32_t r = 0; r < readers; r++) {
        ss[r].fd = accept(lfd, NULL, NULL);
        int b = 8 << 20, one = 1;
        setsockopt(ss[r].fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
        setsockopt(ss[r].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        ss[r].data = fm->data;
        ss[r].bytes = fm->bytes;
    }
    double t0 = cli_now_s();
    for (uint32_t r = 0; r < readers; r++) pthread_create(&th[r], NULL, send_thread, &ss[r]);
    for (uint32_t r = 0; r < readers; r++) pthread_join(th[r], NULL);
    for (uint32_t r = 0; r < readers; r++) {
        double t;
        if (!expect_line(&ps[r], "done", &t)) goto out;
        if (t > last) last = t;
    }
    result = last - t0;
out:
    for (uint32_t r = 0; r < readers; r++)
        if (ss[r].fd > 0) close(ss[r].fd);
    close(lfd);
    reap(ps, readers);
    free(ps);
    free(ss);
    free(th);
    return result;
}

/* memcpy, the physical limit for moving bytes on one host: measured at the
 * start, and again before each update while every process is idle */
typedef struct mem_probe {
    uint32_t threads;
    size_t len;
    uint8_t *a, *b;
    double *gbps; /* by version: all threads, measured just before it went out */
} mem_probe_t;

static double median(double *v, int n);

static double memcpy_gbps(mem_probe_t *mp, uint32_t threads) {
    double t[3];
    for (int k = 0; k < 3; k++) {
        double t0 = cli_now_s();
        cli_memcpy_threads(mp->b, mp->a, mp->len, threads);
        t[k] = cli_now_s() - t0;
    }
    return (double)mp->len / median(t, 3) / 1e9;
}

static void probe_before_go(uint64_t version, void *opaque) {
    mem_probe_t *mp = opaque;
    mp->gbps[version] = memcpy_gbps(mp, mp->threads);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cli_cmp_dbl);
    return n ? v[n / 2] : 0;
}

int bench_sync(int argc, char **argv) {
    demo_opts_t o = demo_defaults();
    o.steps = 6;
    o.verify = false;
    const char *transports = "shm,ucx", *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    int repeat = 3;
    bool baselines = true;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return CLI_OK;
        } else if (demo_common_opt(argc, argv, &i, &o)) {
            continue; /* --model, --train, --infer, --steps */
        } else if (cli_opt(argc, argv, &i, "--repeat", &v)) repeat = atoi(v);
        else if (cli_opt(argc, argv, &i, "--transports", &v)) transports = v;
        else if (cli_opt(argc, argv, &i, "--dir", &v)) dir = v;
        else if (!strcmp(argv[i], "--no-baselines")) baselines = false;
        else {
            fprintf(stderr, "ferry bench sync: unknown option \"%s\"\n\n", argv[i]);
            usage(stderr);
            return CLI_USAGE;
        }
    }
    if (o.steps < 2 || o.steps > 1000 || repeat < 1 || repeat > 100) {
        fprintf(stderr, "ferry bench sync: --steps must be 2..1000 and --repeat 1..100\n");
        return CLI_USAGE;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    mem_probe_t mp = {.threads = ncpu > 0 && ncpu <= 64 ? (uint32_t)ncpu : 1, .len = 256u << 20};
    mp.a = malloc(mp.len);
    mp.b = malloc(mp.len);
    mp.gbps = calloc(o.steps + 1, sizeof *mp.gbps);
    int rc = CLI_OK;
    if (!mp.a || !mp.b || !mp.gbps) {
        rc = CLI_FAIL;
        goto out;
    }
    memset(mp.a, 1, mp.len);
    memset(mp.b, 2, mp.len);
    double mem1 = memcpy_gbps(&mp, 1), memn = memcpy_gbps(&mp, mp.threads);
    printf("ferry bench sync: %s, trainer %s -> engine %s, sync mode; medians over %u updates (ferry) and %d (baselines)\n",
           o.model, o.train, o.infer, o.steps - 1, repeat);
    printf("memcpy: %.2f GB/s one core, %.2f GB/s %u cores\n", mem1, memn, mp.threads);
    printf("%-22s %10s %12s %9s %10s %11s\n", "method", "seconds", "bytes/update", "GB/s", "vs memcpy", "ferry is");
    double ferry_best = 0;
    uint64_t ferry_bytes = 0;
    char tl[64];
    snprintf(tl, sizeof tl, "%s", transports);
    for (char *save = NULL, *tok = strtok_r(tl, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        o.transport = !strcmp(tok, "ucx") ? FERRY_XPORT_UCX : FERRY_XPORT_SHM;
        if (strcmp(tok, "ucx") && strcmp(tok, "shm")) {
            fprintf(stderr, "ferry bench sync: unknown transport \"%s\" (shm, ucx)\n", tok);
            rc = CLI_USAGE;
            goto out;
        }
        /* per update: its step, then seconds, ratio to memcpy and that memcpy */
        demo_step_t *steps = calloc(o.steps, sizeof *steps);
        double *secs = calloc(3 * (size_t)o.steps, sizeof *secs), *ratio = secs + o.steps, *mem = ratio + o.steps;
        demo_result_t res;
        if (!steps || !secs) {
            free(steps);
            free(secs);
            rc = CLI_FAIL;
            goto out;
        }
        demo_hooks_t hooks = {.before_go = probe_before_go, .opaque = &mp};
        if (demo_run(&o, steps, &res, &hooks) != CLI_OK) {
            fprintf(stderr, "ferry bench sync: %s run failed: %s\n", tok, res.error);
            free(steps);
            free(secs);
            rc = CLI_FAIL;
            continue;
        }
        /* each update against the memcpy bandwidth measured just before it:
         * the load of a shared host drifts over a run */
        ferry_bytes = steps[1].bytes;
        for (uint32_t v = 1; v < o.steps; v++) {
            secs[v - 1] = steps[v].seconds;
            mem[v - 1] = mp.gbps[v + 1];
            ratio[v - 1] = (double)steps[v].bytes / steps[v].seconds / 1e9 / mp.gbps[v + 1];
        }
        double s = median(secs, (int)o.steps - 1), r = median(ratio, (int)o.steps - 1);
        double gbps = (double)ferry_bytes / s / 1e9, m = median(mem, (int)o.steps - 1);
        if (ferry_best == 0 || s < ferry_best) ferry_best = s;
        char b[32], name[64];
        snprintf(name, sizeof name, "ferry (%s)", tok);
        printf("%-22s %10.3f %12s %9.2f %9.2fx %11s   (memcpy before each update: median %.2f GB/s)\n", name, s,
               cli_bytes(ferry_bytes, b, sizeof b), gbps, r, "-", m);
        free(secs);
        free(steps);
    }
    if (baselines && ferry_best > 0) {
        ferry_ctx_t *ctx = cli_ctx();
        full_model_t fm;
        ferry_parallel_t ip;
        if (!ctx || !full_build(ctx, o.model, &fm, true) ||
            ferry_parallel_parse(ctx, FERRY_SIDE_INFER, o.infer, &ip) != FERRY_OK) {
            fprintf(stderr, "ferry bench sync: cannot prepare the baselines\n");
            ferry_ctx_destroy(ctx);
            rc = CLI_FAIL;
            goto out;
        }
        uint32_t readers = ferry_parallel_world_size(&ip);
        double *ft = calloc((size_t)repeat, sizeof *ft), *tt = calloc((size_t)repeat, sizeof *tt);
        int okf = 0, okt = 0;
        for (int k = 0; k < repeat; k++) {
            double f = run_files(&o, &fm, readers, dir), t = run_tcp(&o, &fm, readers);
            if (f > 0) ft[okf++] = f;
            if (t > 0) tt[okt++] = t;
        }
        char b[32];
        if (okf) {
            double s = median(ft, okf);
            printf("%-22s %10.3f %12s %9.2f %9.2fx %10.1fx\n", "files (safetensors)", s,
                   cli_bytes(ferry_bytes, b, sizeof b), (double)ferry_bytes / s / 1e9,
                   (double)ferry_bytes / s / 1e9 / memn, s / ferry_best);
        } else {
            fprintf(stderr, "ferry bench sync: the files baseline failed (--dir %s)\n", dir);
            rc = CLI_FAIL;
        }
        if (okt) {
            double s = median(tt, okt);
            printf("%-22s %10.3f %12s %9.2f %9.2fx %10.1fx\n", "tcp broadcast", s, cli_bytes(ferry_bytes, b, sizeof b),
                   (double)ferry_bytes / s / 1e9, (double)ferry_bytes / s / 1e9 / memn, s / ferry_best);
        } else {
            fprintf(stderr, "ferry bench sync: the tcp baseline failed\n");
            rc = CLI_FAIL;
        }
        printf("(\"ferry is\" = baseline seconds / best ferry seconds; GB/s counts the bytes that land in engine\n"
               " buffers per update, the same for every method; the files baseline reads from the page cache;\n"
               " ferry's \"vs memcpy\" is the median over updates of each against memcpy measured just before it)\n");
        free(ft);
        free(tt);
        full_free(&fm);
        ferry_ctx_destroy(ctx);
    }
out:
    free(mp.a);
    free(mp.b);
    free(mp.gbps);
    return rc;
}
