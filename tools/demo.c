/* The parent side of `ferry demo` / `ferry bench sync`: runs the metadata
 * service, spawns the writer and reader processes, gathers their reports
 * into per-version figures. See demo.h. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "demo.h"
#include "demo_gpu.h"
#include "demo_watch.h"

/* After SIGTERM, a worker that has not ended by then gets SIGKILL. */
#define STOP_GRACE_S 3.0
/* How often the parent looks at its workers' state while they run. */
#define WATCH_S 0.25
/* Beyond twice the sync timeout, what a healthy worker may spend on local
 * work (filling or checking weights) with no report: a hang guard only, as
 * CPU time used counts as progress. */
#define HANG_SLACK_S 10.0

demo_opts_t demo_defaults(void) {
    demo_opts_t o = {.model = "qwen3-0.6b",
                     .train = "tp=2,pp=2",
                     .infer = "tp=2,replicas=2",
                     .steps = 5,
                     .mode = FERRY_SYNC_MODE_SYNC,
                     .transport = FERRY_XPORT_SHM,
                     .verify = true,
                     .lr = 1e-6,
                     .seed = 1,
                     .timeout_ms = 60000,
                     .slots = 2,
                     .device = DEMO_DEVICE_CPU};
    return o;
}

int demo_common_opt(int argc, char **argv, int *i, demo_opts_t *o, uint32_t steps_lo, uint32_t steps_hi) {
    const char *v;
    if (cli_opt(argc, argv, i, "--model", &v)) o->model = v;
    else if (cli_opt(argc, argv, i, "--train", &v)) o->train = v;
    else if (cli_opt(argc, argv, i, "--infer", &v)) o->infer = v;
    else if (cli_opt(argc, argv, i, "--steps", &v)) return cli_u32("--steps", v, steps_lo, steps_hi, &o->steps) ? 1 : -1;
    else if (cli_opt(argc, argv, i, "--device", &v)) return v && demo_gpu_parse(v, &o->device) ? 1 : -1;
    else if (cli_opt(argc, argv, i, "--pack-limit", &v))
        return v && cli_size("--pack-limit", v, 0, 1ull << 50, &o->pack_limit) ? 1 : -1;
    else return 0;
    return v ? 1 : -1;
}

static pid_t spawn_worker(const demo_opts_t *o, bool writer, uint32_t rank, int report_fd, int stdin_fd) {
    char a_rank[16], a_steps[16], a_mode[8], a_tr[8], a_staged[4], a_verify[4], a_lr[32], a_seed[32], a_to[16],
        a_slots[8], a_deltas[8], a_dev[16], a_pack[24], a_chain[16], a_quant[8];
    snprintf(a_rank, sizeof a_rank, "%u", rank);
    snprintf(a_steps, sizeof a_steps, "%u", o->steps);
    snprintf(a_mode, sizeof a_mode, "%d", (int)o->mode);
    snprintf(a_tr, sizeof a_tr, "%d", (int)o->transport);
    snprintf(a_staged, sizeof a_staged, "%d", o->staged);
    snprintf(a_verify, sizeof a_verify, "%d", o->verify);
    snprintf(a_lr, sizeof a_lr, "%.17g", o->lr);
    snprintf(a_seed, sizeof a_seed, "%llu", (unsigned long long)o->seed);
    snprintf(a_to, sizeof a_to, "%u", o->timeout_ms);
    snprintf(a_slots, sizeof a_slots, "%u", o->slots);
    snprintf(a_deltas, sizeof a_deltas, "%d", (int)o->deltas);
    snprintf(a_pack, sizeof a_pack, "%llu", (unsigned long long)o->pack_limit);
    snprintf(a_chain, sizeof a_chain, "%u", o->delta_chain);
    snprintf(a_quant, sizeof a_quant, "%d", (int)o->quant);
    if (o->device >= 0) snprintf(a_dev, sizeof a_dev, "cuda:%d", o->device);
    else snprintf(a_dev, sizeof a_dev, "%s", o->device == DEMO_DEVICE_CPU ? "cpu" : "cuda");
    char *argv[] = {"ferry", "_sync-worker", writer ? "writer" : "reader", a_rank, (char *)o->model,
                    (char *)o->train, (char *)o->infer, a_steps, a_mode, a_tr, a_staged, a_verify, a_lr, a_seed,
                    a_to, a_slots, a_deltas, a_dev, a_pack, a_chain, a_quant, NULL};
    const int map[] = {stdin_fd, 0, report_fd, 3};
    return cli_spawn(argv, map, 2);
}

/* Removes the file transport's directory and everything in it. */
static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}
static void remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void close_go(int *go, uint32_t n) {
    for (uint32_t w = 0; w < n; w++) {
        if (go[w] >= 0) close(go[w]);
        go[w] = -1;
    }
}

/* The fields of a report line as numbers; false if any is malformed. */
static bool report_u64(const char *f, uint64_t *v) { return !cli_scan_u64(f, 0, UINT64_MAX, v); }
static bool report_f64(const char *f, double *v) {
    static const cli_range_t any = {-1e300, 1e300, false, false};
    return !cli_scan_f64(f, any, v);
}

/* One report line: updates the step table and what is known of its sender
 * (kids: the writers, then the readers). A malformed line is an error: the
 * workers are this program. */
static void take_line(char *line, demo_step_t *steps, const demo_opts_t *o, double *first_pub, double *rt,
                      demo_child_t *kids, uint32_t nwriters, uint32_t nreaders, demo_result_t *res) {
    char kind = line[0];
    if (kind == 'E' && line[1] == ' ') {
        fprintf(stderr, "ferry demo: %s\n", line + 2);
        if (!res->error[0]) snprintf(res->error, sizeof res->error, "%.400s", line + 2);
        return;
    }
    char copy[1024];
    snprintf(copy, sizeof copy, "%.1023s", line); /* the start of a long line is enough to show */
    char *f[16];
    size_t nf = line[0] && line[1] == ' ' ? cli_fields(line + 2, f, 16) : SIZE_MAX;
    uint64_t rank, v;
    bool ok = nf != SIZE_MAX && nf >= 2 && report_u64(f[0], &rank) && report_u64(f[1], &v) && v >= 1 &&
              v <= o->steps;
    bool writer = kind == 'F' || kind == 'W';
    ok = ok && rank < (writer ? nwriters : nreaders);
    double t0 = 0, t1 = 0;
    if (kind == 'F') {
        ok = ok && nf == 2;
        if (ok) {
            steps[v - 1].filled++;
            kids[rank].progress = cli_now_s();
        }
    } else if (kind == 'W') {
        uint64_t served, dev;
        double pk, hs, sn;
        ok = ok && nf == 9 && report_f64(f[2], &t0) && report_f64(f[3], &t1) && report_u64(f[4], &served) &&
             report_f64(f[5], &pk) && report_f64(f[6], &hs) && report_f64(f[7], &sn) && report_u64(f[8], &dev);
        if (ok) {
            if (dev > res->writer_device_max) res->writer_device_max = dev;
            char gpu[48] = "";
            if (dev) {
                char b[32];
                snprintf(gpu, sizeof gpu, "; %s of GPU memory", cli_bytes(dev, b, sizeof b));
            }
            demo_step_t *s = &steps[v - 1];
            if (first_pub[v - 1] == 0 || t0 < first_pub[v - 1]) first_pub[v - 1] = t0;
            s->writers++;
            if (t1 - t0 > s->publish_max) s->publish_max = t1 - t0;
            if (v > kids[rank].version) kids[rank].version = v;
            kids[rank].progress = cli_now_s();
            if (o->verbose)
                fprintf(stderr, "  writer %llu published %llu in %.3f s (pack %.3f, checksums %.3f, snapshot %.3f%s)\n",
                        (unsigned long long)rank, (unsigned long long)v, t1 - t0, pk, hs, sn,
                        gpu);
        }
    } else if (kind == 'R') {
        uint64_t bytes, good, bad, changed, elements, deltas, dev;
        double ws, ps, vs;
        ok = ok && nf == 14 && report_u64(f[13], &dev) && report_f64(f[2], &t0) && report_f64(f[3], &t1) && report_u64(f[4], &bytes) &&
             report_u64(f[5], &good) && good <= 1 && report_u64(f[6], &bad) && report_u64(f[7], &changed) &&
             report_u64(f[8], &elements) && report_f64(f[9], &ws) && report_f64(f[10], &ps) &&
             report_f64(f[11], &vs) && report_u64(f[12], &deltas);
        if (ok) {
            demo_step_t *s = &steps[v - 1];
            if (dev > res->reader_device_max) res->reader_device_max = dev;
            s->version = v;
            s->bytes += bytes;
            s->readers++;
            s->verified += good != 0;
            s->mismatches += bad;
            s->changed += changed;
            s->elements += elements;
            s->delta_updates += deltas > 0;
            rt[2 * ((v - 1) * nreaders + rank)] = t0;
            rt[2 * ((v - 1) * nreaders + rank) + 1] = t1;
            if (t1 - t0 > s->update_max) s->update_max = t1 - t0;
            demo_child_t *k = &kids[nwriters + rank];
            if (v > k->version) k->version = v;
            k->progress = cli_now_s();
            if (o->verbose)
                fprintf(stderr,
                        "  reader %llu holds %llu after %.3f s (waiting %.3f, pulling %.3f, checksums %.3f; %llu bytes, "
                        "%llu writers' as deltas, %s)\n",
                        (unsigned long long)rank, (unsigned long long)v, t1 - t0, ws, ps, vs,
                        (unsigned long long)bytes, (unsigned long long)deltas,
                        good ? "verified" : bad ? "MISMATCH" : "not checked");
        }
    } else {
        ok = false;
    }
    if (!ok && !res->error[0]) snprintf(res->error, sizeof res->error, "a malformed report from a worker: \"%.200s\"", copy);
}

/* --quant: the engines' fp8 spec declares fp8 tensors, and a plan from the
 * trainers' layout into the engines' builds (it refuses splits that cut
 * 128 x 128 blocks, naming the tensor). */
static int check_quant(ferry_ctx_t *ctx, const demo_opts_t *o, const ferry_model_t *m, const ferry_parallel_t *tp,
                       const ferry_parallel_t *ip, char *err, size_t size) {
    ferry_model_t *em = cli_load_model_quant(ctx, o->model, false, o->quant);
    if (!em) return CLI_USAGE; /* it said why */
    ferry_layout_t *src = NULL, *dst = NULL;
    ferry_plan_t *plan = NULL;
    int rc = CLI_USAGE;
    if (ferry_model_quant_count(em) == 0)
        snprintf(err, size, "--quant: model %s declares no fp8 tensors (no fp8 quantization_config; --quant fp8 "
                            "forces it where the model type supports it)", o->model);
    else if (ferry_layout_build(ctx, m, tp, FERRY_ALL_RANKS, &src) != FERRY_OK ||
             ferry_layout_build(ctx, em, ip, FERRY_ALL_RANKS, &dst) != FERRY_OK ||
             ferry_plan_build(ctx, src, dst, NULL, &plan) != FERRY_OK)
        snprintf(err, size, "fp8 engine: %s", ferry_ctx_error(ctx));
    else
        rc = CLI_OK;
    ferry_plan_destroy(plan);
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(em);
    return rc;
}

int demo_check(ferry_ctx_t *ctx, const demo_opts_t *o, ferry_model_t **model, ferry_parallel_t *tp,
               ferry_parallel_t *ip, char *err, size_t size) {
    err[0] = '\0';
    *model = NULL;
    if (o->device != DEMO_DEVICE_CPU && o->transport != FERRY_XPORT_SHM && o->transport != FERRY_XPORT_UCX) {
        snprintf(err, size, "--device cuda works with --transport shm or ucx (the file channel holds host memory)");
        return CLI_USAGE;
    }
    if (o->pack_limit && o->transport == (ferry_xport_kind_t)DEMO_TRANSPORT_FILE) {
        snprintf(err, size, "--pack-limit bounds a writer's pack area; the file channel has none (use --transport shm or ucx)");
        return CLI_USAGE;
    }
    if (o->quant != FERRY_MODEL_QUANT_NONE && o->transport == (ferry_xport_kind_t)DEMO_TRANSPORT_FILE) {
        snprintf(err, size, "--quant: fp8 engines are fed by the writers' quant ops; the file channel has none "
                            "(use --transport shm or ucx)");
        return CLI_USAGE;
    }
    if (!(*model = cli_load_model(ctx, o->model, false))) return CLI_USAGE; /* it said why */
    if (ferry_parallel_parse(ctx, FERRY_SIDE_TRAIN, o->train, tp) != FERRY_OK ||
        ferry_parallel_parse(ctx, FERRY_SIDE_INFER, o->infer, ip) != FERRY_OK) {
        snprintf(err, size, "%s", ferry_ctx_error(ctx));
        return CLI_USAGE;
    }
    for (int side = 0; side < 2; side++) {
        ferry_layout_t *l = NULL;
        if (ferry_layout_build(ctx, *model, side ? ip : tp, 0, &l) != FERRY_OK) {
            snprintf(err, size, "%s layout: %s", side ? "engine" : "trainer", ferry_ctx_error(ctx));
            return CLI_USAGE;
        }
        ferry_layout_destroy(l);
    }
    if (o->quant != FERRY_MODEL_QUANT_NONE) {
        int c = check_quant(ctx, o, *model, tp, ip, err, size);
        if (c != CLI_OK) return c;
    }
    for (uint32_t t = 0; t < ferry_model_tensor_count(*model); t++) {
        ferry_tensor_info_t ti;
        ferry_model_tensor(*model, t, &ti);
        if (ti.dtype != FERRY_DTYPE_BF16 && ti.dtype != FERRY_DTYPE_F32) {
            snprintf(err, size, "model %s: tensor %s is %s; the demo generates bf16 and f32 tensors only", o->model,
                     ti.name, ferry_dtype_name(ti.dtype));
            return CLI_USAGE;
        }
    }
    return CLI_OK;
}

/* Stops every live worker: SIGTERM now (and SIGCONT, so a stopped one acts
 * on it), SIGKILL once the grace period is over (stop_workers(.., true)). */
static void stop_workers(demo_child_t *kids, uint32_t n, bool hard) {
    for (uint32_t i = 0; i < n; i++) {
        if (kids[i].done) continue;
        kill(kids[i].pid, hard ? SIGKILL : SIGTERM);
        if (!hard) kill(kids[i].pid, SIGCONT);
    }
}

/* Version v's sync latency, once every reader holds it: from the first
 * writer starting to publish to the last reader holding it. */
static void finish_step(demo_step_t *s, uint64_t v, const double *rt, const double *first_pub, uint32_t nreaders) {
    for (uint32_t r = 0; r < nreaders; r++) {
        const double *t = &rt[2 * ((v - 1) * nreaders + r)];
        if (t[1] - first_pub[v - 1] > s->seconds) s->seconds = t[1] - first_pub[v - 1];
    }
    s->complete = true;
}

int demo_run(const demo_opts_t *o, demo_step_t *steps, demo_result_t *res, const demo_hooks_t *hooks) {
    static const demo_hooks_t none = {0};
    if (!hooks) hooks = &none;
    memset(res, 0, sizeof *res);
    memset(steps, 0, o->steps * sizeof *steps);
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_FAIL;
    int rc = CLI_FAIL;
    ferry_model_t *model = NULL;
    ferry_parallel_t tp, ip;
    ferry_meta_service_t *svc = NULL;
    demo_child_t *kids = NULL;
    double *first_pub = calloc(o->steps + 1, sizeof(double)), *rt = NULL;
    double *due = calloc(o->steps + 1, sizeof(double)); /* per version: when every process could work on it */
    int rep[2] = {-1, -1};
    int null_fd = -1; /* readers' stdin, except with the file transport */
    int *go = NULL; /* per writer: the write end of its stdin (a byte = publish the next version; EOF = leave) */
    int *rgo = NULL; /* file transport, per reader: a byte = the next version is published */
    bool file = o->transport == (ferry_xport_kind_t)DEMO_TRANSPORT_FILE;
    char file_dir[256] = "";
    uint32_t nk = 0;
    struct pollfd *pf = NULL;
    if (!first_pub || !due) goto out;
    rc = demo_check(ctx, o, &model, &tp, &ip, res->error, sizeof res->error);
    if (rc != CLI_OK) goto out;
    rc = CLI_FAIL;
    res->writers = ferry_parallel_world_size(&tp);
    res->readers = ferry_parallel_world_size(&ip);
    res->model_bytes = ferry_model_byte_size(model);
    rt = calloc(2 * (size_t)o->steps * res->readers + 1, sizeof *rt); /* each reader's update start, end */
    if (!rt) goto out;
    if (file) { /* the channel directories live under one fresh directory */
        const char *tmp = getenv("TMPDIR");
        snprintf(file_dir, sizeof file_dir, "%s/ferry-demo-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(file_dir)) {
            snprintf(res->error, sizeof res->error, "--transport file: cannot create %s (TMPDIR): %s", file_dir,
                     strerror(errno));
            file_dir[0] = '\0';
            rc = CLI_USAGE;
            goto out;
        }
        setenv("FERRY_DEMO_DIR", file_dir, 1);
    }
    /* a fresh token per run: only our children join */
    uint8_t rnd[16];
    char token[40];
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd) memset(rnd, 7, sizeof rnd);
    for (int i = 0; i < 16; i++) snprintf(token + 2 * i, 3, "%02x", rnd[i]);
    ferry_meta_params_t mp = {.field_mask = FERRY_META_PARAM_LISTEN | FERRY_META_PARAM_TOKEN,
                              .listen = "127.0.0.1:0",
                              .token = token};
    if (ferry_meta_service_create(ctx, &mp, &svc) != FERRY_OK) {
        snprintf(res->error, sizeof res->error, "meta service: %s", ferry_ctx_error(ctx));
        goto out;
    }
    setenv("FERRY_META", ferry_meta_service_address(svc), 1);
    setenv("FERRY_TOKEN", token, 1);
    kids = calloc(res->writers + res->readers, sizeof *kids);
    go = malloc((res->writers + 1) * sizeof *go);
    rgo = malloc((res->readers + 1) * sizeof *rgo);
    pf = calloc(res->writers + res->readers + 1, sizeof *pf);
    /* every descriptor is close-on-exec: a worker gets only its report pipe
     * (fd 3) and its stdin, so no worker holds another's pipe open */
    if (!kids || !go || !rgo || !pf || pipe2(rep, O_CLOEXEC) != 0 ||
        (null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
        goto out;
    for (uint32_t w = 0; w < res->writers; w++) go[w] = -1;
    for (uint32_t r = 0; r < res->readers; r++) rgo[r] = -1;
    double t_start = cli_now_s();
    due[0] = t_start;
    for (uint32_t i = 0; i < res->writers + res->readers; i++) {
        bool writer = i < res->writers;
        uint32_t rank = writer ? i : i - res->writers;
        int in[2] = {-1, -1};
        bool piped = writer || file;
        if (piped && pipe2(in, O_CLOEXEC) != 0) goto out;
        pid_t pid = spawn_worker(o, writer, rank, rep[1], piped ? in[0] : null_fd);
        int e = errno;
        if (piped) {
            close(in[0]);
            (writer ? go : rgo)[rank] = in[1];
        }
        if (pid < 0) {
            snprintf(res->error, sizeof res->error, "cannot start a worker: %s", strerror(e));
            goto out;
        }
        kids[nk++] = (demo_child_t){.pid = pid, .pidfd = (int)syscall(SYS_pidfd_open, pid, 0), .writer = writer,
                                    .rank = rank, .progress = t_start};
        if (o->verbose) fprintf(stderr, "  %s %u is pid %d\n", writer ? "writer" : "reader", rank, (int)pid);
    }
    close(rep[1]);
    rep[1] = -1;
    /* gather reports until every process is gone */
    char buf[1 << 16];
    size_t have = 0;
    uint32_t alive = nk, readers_left = res->readers;
    uint64_t next_row = 1, go_sent = 1; /* version 1 needs no go */
    uint64_t rgo_sent = 0;               /* file transport: versions announced to readers */
    double timeout_s = (double)o->timeout_ms / 1000.0;
    /* the last guard, for a worker that keeps using CPU and never reports */
    double deadline = t_start + timeout_s * (o->steps + 2) + 60.0;
    double next_look = t_start + WATCH_S, kill_at = 1e300;
    bool reading = true, stopping = false, watched = false; /* watched: the watch found the cause */
    while (alive > 0) {
        /* wake on a report, a process ending (pidfds), the next look at the
         * workers, or the end of the grace period after SIGTERM */
        pf[0] = (struct pollfd){.fd = reading ? rep[0] : -1, .events = POLLIN};
        for (uint32_t i = 0; i < nk; i++)
            pf[1 + i] = (struct pollfd){.fd = kids[i].done ? -1 : kids[i].pidfd, .events = POLLIN};
        double wake = deadline < kill_at ? deadline : kill_at;
        if (!stopping && next_look < wake) wake = next_look;
        double wait_s = wake - cli_now_s();
        int n = poll(pf, nk + 1, wait_s > 1e6 ? -1 : wait_s > 0 ? (int)(wait_s * 1000) + 1 : 0);
        if (n > 0 && (pf[0].revents & (POLLIN | POLLHUP))) {
            ssize_t k = read(rep[0], buf + have, sizeof buf - have - 1);
            if (k <= 0) reading = false;
            else have += (size_t)k;
            char *nl;
            while ((nl = memchr(buf, '\n', have))) {
                *nl = '\0';
                take_line(buf, steps, o, first_pub, rt, kids, res->writers, res->readers, res);
                size_t used = (size_t)(nl + 1 - buf);
                memmove(buf, nl + 1, have - used);
                have -= used;
            }
            if (have == sizeof buf - 1) { /* no line fits: not our workers' reports */
                if (!res->error[0]) snprintf(res->error, sizeof res->error, "a report line longer than %zu bytes", have);
                have = 0;
            }
            while (next_row <= o->steps && steps[next_row - 1].readers == res->readers &&
                   steps[next_row - 1].writers == res->writers) {
                finish_step(&steps[next_row - 1], next_row, rt, first_pub, res->readers);
                if (hooks->row) hooks->row(&steps[next_row - 1], hooks->opaque);
                next_row++;
            }
            /* version g goes out once every reader checked g - 1 and waits, and
             * every writer has computed g: the figures then time the sync alone */
            while (!stopping && go_sent < o->steps && next_row > go_sent && steps[go_sent].filled == res->writers) {
                if (hooks->before_go) hooks->before_go(go_sent + 1, hooks->opaque);
                for (uint32_t w = 0; w < res->writers; w++) {
                    ssize_t wr = go[w] >= 0 ? write(go[w], "g", 1) : 0;
                    (void)wr;
                }
                due[go_sent] = cli_now_s();
                go_sent++;
            }
            /* file transport: a reader may read version g once every writer published it */
            while (!stopping && file && rgo_sent < o->steps && steps[rgo_sent].writers == res->writers) {
                for (uint32_t r = 0; r < res->readers; r++) {
                    ssize_t wr = rgo[r] >= 0 ? write(rgo[r], "g", 1) : 0;
                    (void)wr;
                }
                rgo_sent++;
            }
        }
        for (uint32_t i = 0; i < nk; i++) {
            if (kids[i].done) continue;
            int ws;
            pid_t p = waitpid(kids[i].pid, &ws, kids[i].pidfd < 0 ? 0 : WNOHANG);
            if (p != kids[i].pid) continue;
            kids[i].done = true;
            kids[i].status = ws;
            alive--;
            if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) && !stopping && !res->error[0])
                snprintf(res->error, sizeof res->error, "%s %u (pid %d) %s %d", kids[i].writer ? "writer" : "reader",
                         kids[i].rank, (int)kids[i].pid, WIFSIGNALED(ws) ? "was killed by signal" : "exited with",
                         WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
            if (!kids[i].writer && --readers_left == 0) close_go(go, res->writers); /* writers may leave */
        }
        double now = cli_now_s();
        if (!stopping && !res->error[0] && now >= next_look) {
            demo_watch_look(kids, nk, now);
            next_look = now + WATCH_S;
            /* a worker stopped for a sync timeout, or owing the version due
             * with no report and no CPU time for twice that and some */
            uint64_t v = next_row <= o->steps ? next_row : 0;
            watched = demo_watch_stuck(kids, nk, now, timeout_s, v, v ? due[v - 1] : 0, 2 * timeout_s + HANG_SLACK_S,
                                       res->error, sizeof res->error);
        }
        if (!stopping && now > deadline) {
            snprintf(res->error, sizeof res->error, "the run took longer than %.0f s; stopping it", deadline - t_start);
        }
        if (res->error[0] && !stopping) {
            /* the run is lost: name a stopped worker as the cause when there
             * is one (its peers fail first, timing out on it), stop everyone */
            char cause[256];
            if (!watched && demo_watch_stopped(kids, nk, now, cause, sizeof cause)) {
                char first[sizeof res->error];
                snprintf(first, sizeof first, "%s", res->error);
                snprintf(res->error, sizeof res->error, "%s; first error reported: %.*s", cause,
                         (int)(sizeof res->error - strlen(cause) - 32), first);
            }
            close_go(go, res->writers);
            close_go(rgo, res->readers);
            stop_workers(kids, nk, false);
            kill_at = now + STOP_GRACE_S;
            deadline = 1e300;
            stopping = true;
        }
        if (stopping && now >= kill_at) {
            stop_workers(kids, nk, true);
            kill_at = 1e300;
        }
    }
    res->total_seconds = cli_now_s() - t_start;
    res->ok = !res->error[0];
    for (uint32_t v = 0; v < o->steps; v++)
        if (!steps[v].complete || (o->verify && steps[v].verified != res->readers)) res->ok = false;
    if (res->ok) rc = CLI_OK;
    else if (!res->error[0]) snprintf(res->error, sizeof res->error, "not every reader verified every version");
out:
    for (uint32_t i = 0; i < nk; i++) {
        if (!kids[i].done) {
            kill(kids[i].pid, SIGKILL);
            waitpid(kids[i].pid, NULL, 0);
        }
        if (kids[i].pidfd >= 0) close(kids[i].pidfd);
    }
    for (int i = 0; i < 2; i++)
        if (rep[i] >= 0) close(rep[i]);
    if (null_fd >= 0) close(null_fd);
    if (go) close_go(go, res->writers);
    if (rgo) close_go(rgo, res->readers);
    free(go);
    free(rgo);
    free(pf);
    if (file_dir[0]) remove_tree(file_dir);
    free(kids);
    free(first_pub);
    free(due);
    free(rt);
    ferry_meta_service_destroy(svc);
    ferry_model_destroy(model);
    ferry_ctx_destroy(ctx);
    return rc;
}
