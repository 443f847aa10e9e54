/* ferry bench sync: end-to-end resharded updates of a model from W trainer
 * processes to R engine processes (the demo topology), through ferry (shm,
 * ucx), beside memcpy and two baselines, all measured in the same rounds:
 *   files: the full model written as one safetensors file, every engine
 *          process maps it and copies out its shards (the file stays in the
 *          page cache: the most favourable case for this approach);
 *   tcp:   the full model sent whole over loopback TCP to every engine
 *          process at once (one sender thread each), which copies out its
 *          shards (naive broadcast).
 * Like is compared with like: before each ferry update, while every ferry
 * process is idle, one update by each baseline and one memcpy are timed, so
 * every method has one sample per round under the same load; each is
 * reported as the median (min-max) over its rounds and ratios are ratios of
 * medians. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
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
#include "demo_gpu.h"
#include "demo_weights.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry bench sync [--model M] [--train SPEC] [--infer SPEC] [--steps N]\n"
            "                        [--transports shm,ucx] [--dir PATH] [--no-baselines]\n"
            "                        [--device cpu|cuda|cuda:N] [--pack-limit BYTES] [--deltas auto|always|off]\n"
            "  N ferry updates through each transport (2..1000, default 6); the first, which\n"
            "  connects and plans, is not counted. Before each later one, while every ferry\n"
            "  process is idle, one round: a memcpy of 256 MiB with 1 and with all cores, one\n"
            "  update by files (a safetensors file in --dir, default $TMPDIR or /tmp, mapped by\n"
            "  every engine process) and one by tcp (the full model to every engine process).\n"
            "  Each method is reported as the median (min-max) over the same N-1 interleaved\n"
            "  rounds; every ratio is a ratio of medians. Seconds are per update of the same\n"
            "  bytes (those landing in engine buffers; memcpy: those bytes at its rate).\n"
            "  Defaults: the demo topology (qwen3-0.6b, tp=2,pp=2 -> tp=2,replicas=2).\n"
            "  --device cuda|cuda:N: every buffer in GPU memory (as `ferry demo --device`; default --transports shm);\n"
            "  the rounds then time, instead of memcpy, files and tcp, a 1 GiB peer copy from GPU 0 to\n"
            "  GPU 1 (cudaMemcpyPeer, with two GPUs or more) and a 1 GiB copy within GPU 0 (or N), and\n"
            "  \"of limit\" is the share of the peer copy's rate (of the same-GPU copy's when colocated).\n"
            "  --pack-limit: as `ferry demo --pack-limit` (the trainer ranks' pack areas, at most).\n"
            "  --deltas: as `ferry demo --deltas` (default auto: none on one host). With always, engines one\n"
            "  version behind apply sparse deltas of the demo's RL-like steps; every method is still timed\n"
            "  for the whole version's bytes (version 1's, which moves whole), and the bytes the deltas\n"
            "  moved are said beside them.\n");
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
    uint32_t rank, port = 0;
    if (argc != 6 || (strcmp(argv[1], "file") && strcmp(argv[1], "tcp")) ||
        !cli_u32("RANK", argv[5], 0, UINT32_MAX, &rank) ||
        (!strcmp(argv[1], "tcp") && !cli_u32("PORT", argv[2], 1, 65535, &port))) {
        fprintf(stderr, "ferry _bench-reader: internal command (used by `ferry bench sync`): bad arguments\n");
        return CLI_USAGE;
    }
    bool file = !strcmp(argv[1], "file");
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_FAIL;
    full_model_t fm;
    ferry_parallel_t par;
    ferry_layout_t *lay = NULL;
    int rc = CLI_FAIL;
    uint32_t nb = 0;
    uint8_t **bufs = NULL, *all = NULL;
    size_t mapped = 0; /* file: the length of the mapping all points into */
    json_t *hdr = NULL;
    uint64_t data_at = 0;
    int fd = -1;
    if (!full_build(ctx, argv[3], &fm, false) || ferry_parallel_parse(ctx, FERRY_SIDE_INFER, argv[4], &par) != FERRY_OK ||
        ferry_layout_build(ctx, fm.model, &par, rank, &lay) != FERRY_OK)
        goto out;
    /* the engine's parameters, allocated and touched before the clock starts */
    nb = ferry_layout_buffer_count(lay);
    bufs = calloc(nb + 1, sizeof *bufs);
    if (!bufs) goto out;
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(lay, b, &bi);
        if (bi.rank == rank && !(bufs[b] = calloc(1, bi.size))) goto out;
    }
    if (!file) {
        all = malloc(fm.bytes);
        if (!all) goto out;
        memset(all, 0, fm.bytes);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int b = 8 << 20;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
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
        fd = open(argv[2], O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        struct stat stt;
        uint8_t len8[8];
        if (fd < 0 || fstat(fd, &stt) != 0 || !S_ISREG(stt.st_mode) || pread(fd, len8, 8, 0) != 8) goto out;
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
        if (all == MAP_FAILED) all = NULL;
        else mapped = (size_t)stt.st_size;
        if (!hdr || !all) goto out;
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
    if (file && all) munmap(all, mapped);
    else free(all);
    json_decref(hdr);
    if (fd >= 0) close(fd);
    for (uint32_t b = 0; bufs && b < nb; b++) free(bufs[b]);
    free(bufs);
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

/* A reader gets only its own two pipe ends (as stdin and stdout), and every
 * descriptor here is close-on-exec besides: closing a reader's stdin is an
 * EOF it sees while other readers live (before, each inherited the others'
 * pipes, and a failed baseline waited forever). */
static bool spawn_reader(proc_t *p, const char *kind, const char *where, const demo_opts_t *o, uint32_t rank) {
    int so[2] = {-1, -1}, si[2] = {-1, -1};
    p->pid = -1;
    p->out = NULL;
    p->in = -1;
    if (pipe2(so, O_CLOEXEC) != 0 || pipe2(si, O_CLOEXEC) != 0) {
        for (int i = 0; i < 2; i++) {
            if (so[i] >= 0) close(so[i]);
            if (si[i] >= 0) close(si[i]);
        }
        return false;
    }
    char r[16];
    snprintf(r, sizeof r, "%u", rank);
    char *argv[] = {"ferry", "_bench-reader", (char *)kind, (char *)where, (char *)o->model, (char *)o->infer, r, NULL};
    const int map[] = {si[0], 0, so[1], 1};
    p->pid = cli_spawn(argv, map, 2);
    int rc = p->pid < 0 ? -1 : 0;
    close(so[1]);
    close(si[0]);
    p->out = fdopen(so[0], "r");
    if (!p->out) close(so[0]);
    p->in = si[1];
    return rc == 0 && p->out;
}

static bool expect_line(proc_t *p, const char *word, double *t) {
    static const cli_range_t any = {0, 1e300, false, false};
    char line[128];
    if (!p->out || !fgets(line, sizeof line, p->out)) return false;
    size_t n = strlen(word), len = strlen(line);
    if (strncmp(line, word, n) != 0) return false;
    if (len && line[len - 1] == '\n') line[len - 1] = '\0';
    if (!t) return line[n] == '\0';
    return line[n] == ' ' && !cli_scan_f64(line + n + 1, any, t);
}

static void reap(proc_t *ps, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        if (ps[i].in >= 0) close(ps[i].in);
        if (ps[i].out) fclose(ps[i].out);
        if (ps[i].pid > 0) waitpid(ps[i].pid, NULL, 0);
    }
}

/* One update by the files approach: seconds from starting to write the file
 * to the last engine process holding its shards; < 0 on failure (why says
 * what failed). */
static double run_files(const demo_opts_t *o, const full_model_t *fm, uint32_t readers, const char *dir, char *why,
                        size_t why_size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/ferry-bench-%d.safetensors", dir, (int)getpid());
    proc_t *ps = calloc(readers, sizeof *ps);
    double result = -1, last = 0;
    char *text = NULL;
    if (!ps) return -1;
    for (uint32_t r = 0; r < readers; r++) ps[r] = (proc_t){.pid = -1, .in = -1};
    snprintf(why, why_size, "an engine process failed");
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
    text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    double t0 = cli_now_s();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, why_size, "cannot create %.150s: %s", path, strerror(errno));
        goto out;
    }
    uint64_t hl = text ? strlen(text) : 0;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(hl >> (8 * i));
    bool ok = text && write(fd, len8, 8) == 8 && write(fd, text, hl) == (ssize_t)hl;
    for (uint64_t at = 0; ok && at < fm->bytes;) {
        ssize_t k = write(fd, fm->data + at, fm->bytes - at > (1u << 30) ? (1u << 30) : fm->bytes - at);
        if (k <= 0) ok = false;
        else at += (uint64_t)k;
    }
    if (!ok) snprintf(why, why_size, "writing %.150s: %s", path, errno ? strerror(errno) : "short write");
    close(fd);
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
    free(text);
    reap(ps, readers);
    free(ps);
    unlink(path);
    return result;
}

/* One update by TCP broadcast of the full model to every engine process. */
static double run_tcp(const demo_opts_t *o, const full_model_t *fm, uint32_t readers, char *why, size_t why_size) {
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 64) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &al) != 0) {
        snprintf(why, why_size, "a loopback listening socket: %s", strerror(errno));
        if (lfd >= 0) close(lfd);
        return -1;
    }
    char port[16];
    snprintf(port, sizeof port, "%u", ntohs(a.sin_port));
    proc_t *ps = calloc(readers, sizeof *ps);
    sender_t *ss = calloc(readers, sizeof *ss);
    pthread_t *th = calloc(readers, sizeof *th);
    double result = -1, last = 0;
    snprintf(why, why_size, "an engine process failed");
    if (!ps || !ss || !th) goto out;
    for (uint32_t r = 0; r < readers; r++) {
        ps[r] = (proc_t){.pid = -1, .in = -1};
        ss[r].fd = -1;
    }
    for (uint32_t r = 0; r < readers; r++)
        if (!spawn_reader(&ps[r], "tcp", port, o, r) || !expect_line(&ps[r], "ready", NULL)) goto out;
    for (uint32_t r = 0; r < readers; r++) { /* each printed "ready" once connected: accept does not wait */
        ss[r].fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
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
    for (uint32_t r = 0; ss && r < readers; r++)
        if (ss[r].fd >= 0) close(ss[r].fd);
    close(lfd);
    if (ps) reap(ps, readers);
    free(ps);
    free(ss);
    free(th);
    return result;
}

/* ---- interleaved rounds ------------------------------------------------------------------ */

enum { M_FERRY, M_FILES, M_TCP, M_MEMN, M_MEM1, M_PEER, M_SAME, M_COUNT };
static const char *const method_names[M_COUNT] = {"ferry",          "files (safetensors)", "tcp broadcast",
                                                  "memcpy, all cores", "memcpy, 1 core",     "GPU peer copy",
                                                  "same-GPU copy"};

/* What one transport's run measures, per version (index v, v >= 2). */
typedef struct rounds {
    const demo_opts_t *o;
    const full_model_t *fm; /* NULL: no baselines */
    uint32_t readers, threads;
    const char *dir;
    size_t mem_len;
    uint8_t *mem_a, *mem_b;
    double *sec[M_COUNT];   /* seconds (memcpy, GPU copies: GB/s until converted), < 0 failed */
    char why_files[256], why_tcp[256];
    bool gpu;                /* --device cuda: GPU copies instead of memcpy */
    demo_gpu_copy_bench_t *peer, *same;
} rounds_t;

static double memcpy_gbps(rounds_t *r, uint32_t threads) {
    double t0 = cli_now_s();
    cli_memcpy_threads(r->mem_b, r->mem_a, r->mem_len, threads);
    return (double)r->mem_len / (cli_now_s() - t0) / 1e9;
}

/* Every ferry process is idle: one sample of each method but ferry. */
static void round_before_go(uint64_t v, void *opaque) {
    rounds_t *r = opaque;
    if (r->gpu) {
        r->sec[M_PEER][v] = demo_gpu_bench_run(r->peer);
        r->sec[M_SAME][v] = demo_gpu_bench_run(r->same);
        return;
    }
    r->sec[M_MEMN][v] = memcpy_gbps(r, r->threads);
    r->sec[M_MEM1][v] = memcpy_gbps(r, 1);
    if (!r->fm) return;
    r->sec[M_FILES][v] = run_files(r->o, r->fm, r->readers, r->dir, r->why_files, sizeof r->why_files);
    r->sec[M_TCP][v] = run_tcp(r->o, r->fm, r->readers, r->why_tcp, sizeof r->why_tcp);
}

typedef struct stat3 {
    double median, min, max;
    uint32_t n;
} stat3_t;

static stat3_t stats(const double *v, uint32_t n) {
    stat3_t s = {0, 0, 0, 0};
    double *c = malloc((n + 1) * sizeof *c);
    if (!c) return s;
    for (uint32_t i = 0; i < n; i++)
        if (v[i] > 0) c[s.n++] = v[i];
    if (s.n) {
        s.median = cli_median(c, s.n); /* sorts c */
        s.min = c[0];
        s.max = c[s.n - 1];
    }
    free(c);
    return s;
}

/* One transport: the ferry run with its interleaved rounds, and its table. */
static int bench_transport(demo_opts_t o, const char *name, rounds_t *r) {
    demo_step_t *steps = calloc(o.steps, sizeof *steps);
    bool have = steps != NULL;
    for (int m = 0; m < M_COUNT; m++) {
        r->sec[m] = calloc(o.steps + 1, sizeof(double));
        have = have && r->sec[m];
    }
    int rc = CLI_FAIL;
    if (!have) goto out;
    demo_result_t res;
    demo_hooks_t hooks = {.before_go = round_before_go, .opaque = r};
    if (demo_run(&o, steps, &res, &hooks) != CLI_OK) {
        fprintf(stderr, "ferry bench sync: %s run failed: %s\n", name, res.error);
        goto out;
    }
    /* per round k (version k + 2): seconds per update of the bytes a whole
       version lands (version 1's: it never arrives as deltas) */
    uint32_t n = o.steps - 1;
    double bytes = (double)steps[0].bytes;
    double *sec[M_COUNT];
    for (int m = 0; m < M_COUNT; m++) sec[m] = r->sec[m] + 2;
    uint64_t moved_min = UINT64_MAX, moved_max = 0, delta_updates = 0;
    for (uint32_t k = 0; k < n; k++) {
        sec[M_FERRY][k] = steps[k + 1].seconds;
        for (int m = M_MEMN; m < M_COUNT; m++) /* the same bytes at the copy's rate measured in that round */
            sec[m][k] = sec[m][k] > 0 ? bytes / (sec[m][k] * 1e9) : -1;
        moved_min = steps[k + 1].bytes < moved_min ? steps[k + 1].bytes : moved_min;
        moved_max = steps[k + 1].bytes > moved_max ? steps[k + 1].bytes : moved_max;
        delta_updates += steps[k + 1].delta_updates;
    }
    stat3_t st[M_COUNT];
    for (int m = 0; m < M_COUNT; m++) st[m] = stats(sec[m], n);
    char b[32];
    printf("\ntransport %s: %u rounds, %s landing in engine buffers per update\n", name, n,
           cli_bytes((uint64_t)bytes, b, sizeof b));
    if (delta_updates) {
        char lo[32], hi[32];
        printf("deltas: %llu reader updates applied them; ferry moved %s - %s per update\n",
               (unsigned long long)delta_updates, cli_bytes(moved_min, lo, sizeof lo), cli_bytes(moved_max, hi, sizeof hi));
    }
    if (r->gpu) {
        char w[32], rd[32];
        printf("GPU memory ferry held beside the buffers: %s per writer, %s per reader at most%s\n",
               cli_bytes(res.writer_device_max, w, sizeof w), cli_bytes(res.reader_device_max, rd, sizeof rd),
               o.pack_limit ? " (--pack-limit)" : "");
    }
    int limit = !r->gpu ? M_MEMN : r->peer ? M_PEER : M_SAME;
    printf("  %-22s %9s %21s %8s %10s %10s\n", "method", "median s", "(min - max) s", "GB/s",
           r->gpu ? "of limit" : "of memcpy", "ferry is");
    rc = CLI_OK;
    for (int m = 0; m < M_COUNT; m++) {
        char label[64];
        snprintf(label, sizeof label, m == M_FERRY ? "ferry (%s)" : "%s", m == M_FERRY ? name : method_names[m]);
        if ((m == M_FILES || m == M_TCP) && !r->fm) continue;
        if ((m == M_MEMN || m == M_MEM1) && r->gpu) continue;
        if ((m == M_PEER && !r->peer) || (m == M_SAME && !r->same)) continue;
        if (st[m].n < n) {
            printf("  %-22s failed in %u of %u rounds: %s\n", label, n - st[m].n, n,
                   m == M_FILES ? r->why_files : m == M_TCP ? r->why_tcp : "no sample");
            rc = CLI_FAIL;
            continue;
        }
        char spread[48], faster[16] = "-";
        snprintf(spread, sizeof spread, "(%.3g - %.3g)", st[m].min, st[m].max);
        if (m == M_FILES || m == M_TCP) snprintf(faster, sizeof faster, "%.1fx", st[m].median / st[M_FERRY].median);
        printf("  %-22s %9.3g %21s %8.2f %9.2fx %10s\n", label, st[m].median, spread, bytes / st[m].median / 1e9,
               st[limit].n ? st[limit].median / st[m].median : 0.0, faster);
    }
out:
    for (int m = 0; m < M_COUNT; m++) {
        free(r->sec[m]);
        r->sec[m] = NULL;
    }
    free(steps);
    return rc;
}

static const char *const transport_names[] = {"shm", "ucx"};

int bench_sync(int argc, char **argv) {
    demo_opts_t o = demo_defaults();
    o.steps = 6;
    o.verify = false;
    const char *transports = NULL, *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    bool baselines = true;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int c = demo_common_opt(argc, argv, &i, &o, 2, 1000);
        if (c < 0) return CLI_USAGE;
        if (c > 0) continue; /* --model, --train, --infer, --steps */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return CLI_OK;
        } else if (cli_opt(argc, argv, &i, "--transports", &v)) transports = v;
        else if (cli_opt(argc, argv, &i, "--dir", &v)) dir = v;
        else if (cli_opt(argc, argv, &i, "--deltas", &v)) {
            static const char *const modes[] = {"auto", "always", "off"};
            size_t k;
            if (!cli_word("--deltas", v, modes, 3, &k)) return CLI_USAGE;
            o.deltas = k == 0 ? FERRY_SYNC_DELTAS_AUTO : k == 1 ? FERRY_SYNC_DELTAS_ALWAYS : FERRY_SYNC_DELTAS_OFF;
        } else if (!strcmp(argv[i], "--no-baselines")) {
            baselines = false;
            continue;
        } else {
            fprintf(stderr, "ferry bench sync: unknown option \"%s\"\n\n", argv[i]);
            usage(stderr);
            return CLI_USAGE;
        }
        if (!v) return CLI_USAGE;
    }
    bool gpu = o.device != DEMO_DEVICE_CPU;
    if (gpu) baselines = false; /* files and tcp move host memory: GPU copies stand in */
    if (!transports) transports = gpu ? "shm" : "shm,ucx";
    size_t tr[2], ntr;
    if (!cli_word_list("--transports", transports, transport_names, 2, tr, &ntr)) return CLI_USAGE;
    /* a directory the files baseline cannot use fails now, not after the ferry runs */
    if (baselines && cli_check_dir(dir, "--dir") != 0) return CLI_USAGE;
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_FAIL;
    full_model_t fm = {0};
    ferry_parallel_t tp, ip;
    int rc = CLI_OK;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    rounds_t r = {.o = &o, .dir = dir, .threads = ncpu > 0 && ncpu <= 64 ? (uint32_t)ncpu : 1, .mem_len = 256u << 20};
    { /* the model and specs fail now, not in each transport's run */
        ferry_model_t *m = NULL;
        char err[512];
        rc = demo_check(ctx, &o, &m, &tp, &ip, err, sizeof err);
        ferry_model_destroy(m);
        if (rc != CLI_OK) {
            if (err[0]) fprintf(stderr, "ferry bench sync: %s\n", err);
            goto out;
        }
    }
    if (baselines) {
        if (!full_build(ctx, o.model, &fm, true) || ferry_parallel_parse(ctx, FERRY_SIDE_INFER, o.infer, &ip) != FERRY_OK) {
            if (fm.model) fprintf(stderr, "ferry bench sync: %s\n", ferry_ctx_error(ctx));
            rc = CLI_USAGE;
            goto out;
        }
        r.fm = &fm;
        r.readers = ferry_parallel_world_size(&ip);
    }
    if (gpu) { /* the GPU copies this host can do, timed in the same rounds */
        char err[256] = "";
        int n = demo_gpu_count(), home = o.device >= 0 ? o.device : 0;
        if (n == 0 || home >= n) {
            fprintf(stderr, "ferry bench sync: --device %s: %s\n", o.device >= 0 ? "cuda:N" : "cuda",
                    n == 0 ? "no usable GPU (or a ferry built without CUDA)" : "no such GPU");
            rc = CLI_USAGE;
            goto out;
        }
        r.gpu = true;
        if (o.device == DEMO_DEVICE_SPREAD && n >= 2 && !(r.peer = demo_gpu_bench_create(0, 1, 1u << 30, err, sizeof err)))
            fprintf(stderr, "ferry bench sync: %s\n", err);
        if (!(r.same = demo_gpu_bench_create(home, home, 1u << 30, err, sizeof err)))
            fprintf(stderr, "ferry bench sync: %s\n", err);
    } else {
        r.mem_a = malloc(r.mem_len);
        r.mem_b = malloc(r.mem_len);
        if (!r.mem_a || !r.mem_b) {
            rc = CLI_FAIL;
            goto out;
        }
        memset(r.mem_a, 1, r.mem_len);
        memset(r.mem_b, 2, r.mem_len);
    }
    char devname[64];
    printf("ferry bench sync: %s, trainer %s -> engine %s, sync mode, %u cores, buffers: %s\n", o.model, o.train,
           o.infer, r.threads, demo_gpu_name(o.device, devname, sizeof devname));
    if (gpu)
        printf("Interleaved rounds: before each ferry update but the first (which connects and plans), while\n"
               "every ferry process is idle, one 1 GiB copy from GPU 0 to GPU 1 (with two GPUs or more) and\n"
               "one within GPU %d. Each method is the median (min - max) over the same rounds; every ratio is a\n"
               "ratio of medians.\n", o.device >= 0 ? o.device : 0);
    else
        printf("Interleaved rounds: before each ferry update but the first (which connects and plans), while\n"
               "every ferry process is idle, one memcpy of 256 MiB with all cores and with one%s.\n"
               "Each method is the median (min - max) over the same rounds; every ratio is a ratio of medians.\n",
               baselines ? ",\none update by files and one by tcp" : "");
    for (size_t t = 0; t < ntr; t++) {
        o.transport = tr[t] == 0 ? FERRY_XPORT_SHM : FERRY_XPORT_UCX;
        if (bench_transport(o, transport_names[tr[t]], &r) != CLI_OK) rc = CLI_FAIL;
    }
    printf("\n(seconds: per update of the same bytes, those landing in engine buffers; memcpy: those bytes at the\n"
           " rate it reached in that round. GB/s: those bytes / median seconds. \"of memcpy\": memcpy with all\n"
           " cores' median seconds / the method's (its share of memcpy bandwidth). \"ferry is\": the baseline's\n"
           " median seconds / ferry's (how many times faster ferry is). The files baseline reads from the page\n"
           " cache.)\n");
out:
    demo_gpu_bench_destroy(r.peer);
    demo_gpu_bench_destroy(r.same);
    free(r.mem_a);
    free(r.mem_b);
    if (fm.model || fm.offset) full_free(&fm);
    ferry_ctx_destroy(ctx);
    return rc;
}
