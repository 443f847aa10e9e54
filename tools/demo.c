/* The parent side of `ferry demo` / `ferry bench sync`: runs the metadata
 * service, spawns the writer and reader processes, gathers their reports
 * into per-version figures. See demo.h. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "demo.h"

extern char **environ;

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
                     .slots = 2};
    return o;
}

bool demo_common_opt(int argc, char **argv, int *i, demo_opts_t *o) {
    const char *v;
    if (cli_opt(argc, argv, i, "--model", &v)) o->model = v;
    else if (cli_opt(argc, argv, i, "--train", &v)) o->train = v;
    else if (cli_opt(argc, argv, i, "--infer", &v)) o->infer = v;
    else if (cli_opt(argc, argv, i, "--steps", &v)) o->steps = (uint32_t)strtoul(v, NULL, 10);
    else return false;
    return true;
}

typedef struct child {
    pid_t pid;
    int pidfd;          /* readable once the process ends */
    bool writer, done;
    uint32_t rank;
    int status;
} child_t;

static pid_t spawn_worker(const demo_opts_t *o, bool writer, uint32_t rank, int report_fd, int stdin_fd) {
    char a_rank[16], a_steps[16], a_mode[8], a_tr[8], a_staged[4], a_verify[4], a_lr[32], a_seed[32], a_to[16],
        a_slots[8], a_deltas[8];
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
    char *argv[] = {"ferry", "_sync-worker", writer ? "writer" : "reader", a_rank, (char *)o->model,
                    (char *)o->train, (char *)o->infer, a_steps, a_mode, a_tr, a_staged, a_verify, a_lr, a_seed,
                    a_to, a_slots, a_deltas, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, report_fd, 3);
    posix_spawn_file_actions_adddup2(&fa, stdin_fd, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc == 0 ? pid : -1;
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

/* One report line: updates the step table. */
static void take_line(char *line, demo_step_t *steps, const demo_opts_t *o, double *first_pub, double *rt,
                      uint32_t nreaders, demo_result_t *res) {
    char kind = line[0];
    if (kind == 'E') {
        fprintf(stderr, "ferry demo: %s\n", line + 2);
        if (!res->error[0]) snprintf(res->error, sizeof res->error, "%.400s", line + 2);
        return;
    }
    unsigned rank;
    unsigned long long v;
    double t0, t1;
    if (kind == 'F') {
        if (sscanf(line + 2, "%u %llu", &rank, &v) == 2 && v >= 1 && v <= o->steps) steps[v - 1].filled++;
        return;
    }
    if (kind == 'W') {
        unsigned long long served;
        double pk, hs, sn;
        if (sscanf(line + 2, "%u %llu %lf %lf %llu %lf %lf %lf", &rank, &v, &t0, &t1, &served, &pk, &hs, &sn) != 8 ||
            v < 1 || v > o->steps)
            return;
        demo_step_t *s = &steps[v - 1];
        if (first_pub[v - 1] == 0 || t0 < first_pub[v - 1]) first_pub[v - 1] = t0;
        s->writers++;
        if (t1 - t0 > s->publish_max) s->publish_max = t1 - t0;
        if (o->verbose)
            fprintf(stderr, "  writer %u published %llu in %.3f s (pack %.3f, checksums %.3f, snapshot %.3f)\n", rank, v,
                    t1 - t0, pk, hs, sn);
    } else if (kind == 'R') {
        unsigned long long bytes, bad, changed, elements;
        int ok;
        double ws, ps, vs;
        unsigned deltas;
        if (sscanf(line + 2, "%u %llu %lf %lf %llu %d %llu %llu %llu %lf %lf %lf %u", &rank, &v, &t0, &t1, &bytes, &ok,
                   &bad, &changed, &elements, &ws, &ps, &vs, &deltas) != 13 ||
            v < 1 || v > o->steps)
            return;
        demo_step_t *s = &steps[v - 1];
        s->version = v;
        s->bytes += bytes;
        s->readers++;
        s->verified += ok != 0;
        s->mismatches += bad;
        s->changed += changed;
        s->elements += elements;
        s->delta_updates += deltas > 0;
        if (rank < nreaders) {
            rt[2 * ((v - 1) * nreaders + rank)] = t0;
            rt[2 * ((v - 1) * nreaders + rank) + 1] = t1;
        }
        if (t1 - t0 > s->update_max) s->update_max = t1 - t0;
        if (o->verbose)
            fprintf(stderr,
                    "  reader %u holds %llu after %.3f s (waiting %.3f, pulling %.3f, checksums %.3f; %llu bytes, %u "
                    "writers' as deltas, %s)\n",
                    rank, v, t1 - t0, ws, ps, vs, bytes, deltas, ok ? "verified" : bad ? "MISMATCH" : "not checked");
    }
}

int demo_run(const demo_opts_t *o, demo_step_t *steps, demo_result_t *res, const demo_hooks_t *hooks) {
    static const demo_hooks_t none = {0};
    if (!hooks) hooks = &none;
    memset(res, 0, sizeof *res);
    memset(steps, 0, o->steps * sizeof *steps);
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_FAIL;
    int rc = CLI_FAIL;
    ferry_model_t *model = cli_load_model(ctx, o->model, false);
    ferry_parallel_t tp, ip;
    ferry_meta_service_t *svc = NULL;
    child_t *kids = NULL;
    double *first_pub = calloc(o->steps + 1, sizeof(double)), *rt = NULL;
    int rep[2] = {-1, -1};
    int *go = NULL; /* per writer: the write end of its stdin (a byte = publish the next version; EOF = leave) */
    int *rgo = NULL; /* file transport, per reader: a byte = the next version is published */
    bool file = o->transport == (ferry_xport_kind_t)DEMO_TRANSPORT_FILE;
    char file_dir[256] = "";
    uint32_t nk = 0;
    if (!model || !first_pub) goto out;
    if (ferry_parallel_parse(ctx, FERRY_SIDE_TRAIN, o->train, &tp) != FERRY_OK ||
        ferry_parallel_parse(ctx, FERRY_SIDE_INFER, o->infer, &ip) != FERRY_OK) {
        snprintf(res->error, sizeof res->error, "%s", ferry_ctx_error(ctx));
        rc = CLI_USAGE;
        goto out;
    }
    /* refuse a layout that cannot be built before starting anything */
    for (int side = 0; side < 2; side++) {
        ferry_layout_t *l = NULL;
        if (ferry_layout_build(ctx, model, side ? &ip : &tp, 0, &l) != FERRY_OK) {
            snprintf(res->error, sizeof res->error, "%s layout: %s", side ? "engine" : "trainer", ferry_ctx_error(ctx));
            rc = CLI_USAGE;
            goto out;
        }
        ferry_layout_destroy(l);
    }
    res->writers = ferry_parallel_world_size(&tp);
    res->readers = ferry_parallel_world_size(&ip);
    res->model_bytes = ferry_model_byte_size(model);
    rt = calloc(2 * (size_t)o->steps * res->readers + 1, sizeof *rt); /* each reader's update start, end */
    if (!rt) goto out;
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
    if (file) { /* the channel directories live under one fresh directory */
        const char *tmp = getenv("TMPDIR");
        snprintf(file_dir, sizeof file_dir, "%s/ferry-demo-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(file_dir)) {
            snprintf(res->error, sizeof res->error, "cannot create %s: %s", file_dir, strerror(errno));
            file_dir[0] = '\0';
            goto out;
        }
        setenv("FERRY_DEMO_DIR", file_dir, 1);
    }
    kids = calloc(res->writers + res->readers, sizeof *kids);
    go = malloc((res->writers + 1) * sizeof *go);
    rgo = malloc((res->readers + 1) * sizeof *rgo);
    if (!kids || !go || !rgo || pipe2(rep, O_CLOEXEC) != 0) goto out;
    for (uint32_t w = 0; w < res->writers; w++) go[w] = -1;
    for (uint32_t r = 0; r < res->readers; r++) rgo[r] = -1;
    double t_start = cli_now_s();
    for (uint32_t i = 0; i < res->writers + res->readers; i++) {
        bool writer = i < res->writers;
        uint32_t rank = writer ? i : i - res->writers;
        int in[2] = {-1, -1};
        bool piped = writer || file;
        if (piped && pipe2(in, O_CLOEXEC) != 0) goto out;
        pid_t pid = spawn_worker(o, writer, rank, rep[1], piped ? in[0] : rep[0]);
        if (piped) {
            close(in[0]);
            (writer ? go : rgo)[rank] = in[1];
        }
        if (pid < 0) {
            snprintf(res->error, sizeof res->error, "cannot start a worker: %s", strerror(errno));
            goto out;
        }
        kids[nk++] = (child_t){.pid = pid, .pidfd = (int)syscall(SYS_pidfd_open, pid, 0), .writer = writer, .rank = rank};
    }
    close(rep[1]);
    rep[1] = -1;
    /* gather reports until every process is gone */
    char buf[1 << 16];
    size_t have = 0;
    uint32_t alive = nk, readers_left = res->readers;
    uint64_t next_row = 1, go_sent = 1; /* version 1 needs no go */
    uint64_t rgo_sent = 0;               /* file transport: versions announced to readers */
    double deadline = t_start + (double)o->timeout_ms / 1000.0 * (o->steps + 2) + 60.0;
    bool reading = true, stopping = false;
    struct pollfd *pf = calloc(nk + 1, sizeof *pf);
    if (!pf) goto out;
    while (alive > 0) {
        /* wake on a report or a process ending (pidfds); no timers */
        pf[0] = (struct pollfd){.fd = reading ? rep[0] : -1, .events = POLLIN};
        for (uint32_t i = 0; i < nk; i++)
            pf[1 + i] = (struct pollfd){.fd = kids[i].done ? -1 : kids[i].pidfd, .events = POLLIN};
        double wait_s = deadline - cli_now_s();
        int n = poll(pf, nk + 1, wait_s > 1e6 ? -1 : wait_s > 0 ? (int)(wait_s * 1000) + 1 : 0);
        if (n > 0 && (pf[0].revents & (POLLIN | POLLHUP))) {
            ssize_t k = read(rep[0], buf + have, sizeof buf - have - 1);
            if (k <= 0) reading = false;
            else have += (size_t)k;
            char *nl;
            while ((nl = memchr(buf, '\n', have))) {
                *nl = '\0';
                take_line(buf, steps, o, first_pub, rt, res->readers, res);
                size_t used = (size_t)(nl + 1 - buf);
                memmove(buf, nl + 1, have - used);
                have -= used;
            }
            while (next_row <= o->steps && steps[next_row - 1].readers == res->readers &&
                   steps[next_row - 1].writers == res->writers) {
                demo_step_t *s = &steps[next_row - 1];
                for (uint32_t r = 0; r < res->readers; r++) {
                    const double *t = &rt[2 * ((next_row - 1) * res->readers + r)];
                    if (t[1] - first_pub[next_row - 1] > s->seconds) s->seconds = t[1] - first_pub[next_row - 1];
                }
                if (hooks->row) hooks->row(s, hooks->opaque);
                next_row++;
            }
            /* version g goes out once every reader checked g - 1 and waits, and
             * every writer has computed g: the figures then time the sync alone */
            while (go_sent < o->steps && next_row > go_sent && steps[go_sent].filled == res->writers) {
                if (hooks->before_go) hooks->before_go(go_sent + 1, hooks->opaque);
                for (uint32_t w = 0; w < res->writers; w++) {
                    ssize_t wr = go[w] >= 0 ? write(go[w], "g", 1) : 0;
                    (void)wr;
                }
                go_sent++;
            }
            /* file transport: a reader may read version g once every writer published it */
            while (file && rgo_sent < o->steps && steps[rgo_sent].writers == res->writers) {
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
            if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)) {
                if (!res->error[0])
                    snprintf(res->error, sizeof res->error, "%s %u %s %d", kids[i].writer ? "writer" : "reader",
                             kids[i].rank, WIFSIGNALED(ws) ? "killed by signal" : "exited with",
                             WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
            }
            if (!kids[i].writer && --readers_left == 0) close_go(go, res->writers); /* writers may leave */
        }
        if (cli_now_s() > deadline) {
            snprintf(res->error, sizeof res->error, "the run took longer than %.0f s; stopping it", deadline - t_start);
            for (uint32_t i = 0; i < nk; i++)
                if (!kids[i].done) kill(kids[i].pid, SIGKILL);
            deadline = 1e300;
        }
        if (res->error[0] && !stopping) { /* something failed: the run is lost, stop everyone now */
            close_go(go, res->writers);
            close_go(rgo, res->readers);
            for (uint32_t i = 0; i < nk; i++)
                if (!kids[i].done) kill(kids[i].pid, SIGTERM);
            stopping = true;
        }
    }
    free(pf);
    res->total_seconds = cli_now_s() - t_start;
    res->ok = !res->error[0];
    for (uint32_t v = 0; v < o->steps; v++)
        if (steps[v].readers != res->readers || (o->verify && steps[v].verified != res->readers)) res->ok = false;
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
    if (go) close_go(go, res->writers);
    if (rgo) close_go(rgo, res->readers);
    free(go);
    free(rgo);
    if (file_dir[0]) remove_tree(file_dir);
    free(kids);
    free(first_pub);
    free(rt);
    ferry_meta_service_destroy(svc);
    ferry_model_destroy(model);
    ferry_ctx_destroy(ctx);
    return rc;
}
