/* The context's interrupt hook (FERRY_CTX_PARAM_INTERRUPT): a blocking call
 * whose hook starts returning nonzero fails with FERRY_ERR_INTERRUPTED long
 * before its timeout, says what it was waiting for, and leaves its object
 * usable. In one process: a metadata service, and writers, readers and
 * table members each on a context of its own, so that each hook belongs to
 * one member; a hook counts calls made on any thread but the one blocked in
 * the call (heartbeats run every 667 ms meanwhile: they must never call it).
 *
 *   a  ferry_reader_update waiting for a version nobody publishes; then the
 *      writer publishes it and the same reader updates to it.
 *   b  a sync ferry_writer_publish waiting for the acknowledgement of a
 *      committed reader that never updates; then the writer's next publish
 *      works (the reader updating meanwhile acknowledges it).
 *   c  ferry_writer_publish waiting for the layout epoch (a reader that
 *      never commits); once it commits, the same version publishes.
 *   d  ferry_table_get waiting for a sequence nobody else completes; once
 *      the other member completes it, the get returns every put.
 *   e  a hook that returns 0 changes nothing: a sync round trip while the
 *      reader's hook runs in its wait.
 *   f  ferry_reader_create retrying to connect to a service that is not
 *      listening; then the context creates a reader of a running service.
 *   g  transports, with the owner of the memory stopped (SIGSTOP; its own
 *      process): shm and UCX (over TCP, where the owner serves every read)
 *      ferry_xport_rmem_unpack waiting for the owner's answer; UCX
 *      ferry_xport_get waiting for the registration's check. Once the owner
 *      runs again (and UCX's late answer landed where it may), the same
 *      endpoint and registration read its bytes.
 *
 * The flag is set by a timer thread FIRE_MS after the call starts (the call
 * may not even be waiting yet on a loaded machine: the hook is asked in its
 * first wait then); the call must be back within BOUND_S of the flag, a
 * bound far below the members' TIMEOUT_MS that only a call ignoring the
 * hook would miss. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "layout_check.h"

#define TIMEOUT_MS 30000u
#define LEASE_MS 2000u
#define FIRE_MS 200
#define BOUND_S 5.0

/* ---- the hook ------------------------------------------------------------------ */

typedef struct hook {
    atomic_int fire;      /* what the hook returns */
    atomic_int calls;
    atomic_int wrong;     /* calls on another thread than the owner */
    atomic_bool owned;
    pthread_t owner;      /* the thread making the blocking calls */
    _Atomic double fired; /* when fire was set */
} hook_t;

static int hook_fn(void *opaque) {
    hook_t *h = opaque;
    atomic_fetch_add(&h->calls, 1);
    if (!atomic_load(&h->owned) || !pthread_equal(pthread_self(), h->owner)) atomic_fetch_add(&h->wrong, 1);
    return atomic_load(&h->fire);
}

/* Makes the calling thread the one allowed to call the hook. */
static void own(hook_t *h) {
    h->owner = pthread_self();
    atomic_store(&h->owned, true);
}

static ferry_ctx_t *make_ctx(hook_t *h) {
    ferry_ctx_params_t p = {.field_mask = FERRY_CTX_PARAM_INTERRUPT, .interrupt_fn = hook_fn, .interrupt_opaque = h};
    ferry_ctx_t *ctx = NULL;
    char detail[512];
    if (ferry_ctx_create(h ? &p : NULL, &ctx, detail, sizeof detail) != FERRY_OK) {
        fprintf(stderr, "ferry_ctx_create: %s\n", detail);
        exit(1);
    }
    return ctx;
}

static void *timer_main(void *arg) {
    hook_t *h = arg;
    sleep_ms(FIRE_MS);
    atomic_store(&h->fired, now_s());
    atomic_store(&h->fire, 1);
    return NULL;
}

/* Starts the timer that sets h's flag; the caller makes its blocking call next. */
static pthread_t arm(hook_t *h) {
    atomic_store(&h->fire, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, timer_main, h) == 0);
    return t;
}

/* The call armed with `timer` returned st with this detail. */
static void expect_interrupted(const char *what, ferry_status_t st, const char *detail, const char *needle, hook_t *h,
                               pthread_t timer) {
    double back = now_s();
    pthread_join(timer, NULL);
    CHECK_FAILS(st, FERRY_ERR_INTERRUPTED, detail, needle);
    double late = back - atomic_load(&h->fired);
    printf("%s: FERRY_ERR_INTERRUPTED %.3f s after the flag, %d hook calls: %s\n", what, late, atomic_load(&h->calls),
           detail);
    CHECK(late < BOUND_S);
    CHECK(atomic_load(&h->calls) > 0);
    CHECK_EQ_INT(atomic_load(&h->wrong), 0);
    atomic_store(&h->fire, 0);
}

/* ---- a job: service, model, one writer and one reader (tp=1) --------------------- */

typedef struct job {
    ferry_ctx_t *ctx; /* no hook: the service, the model, the layouts */
    ferry_meta_service_t *svc;
    ferry_model_t *model;
    ferry_layout_t *src, *dst;
    uint32_t nb;
    char name[32];
} job_t;

static void job_start(job_t *j, const char *name) {
    memset(j, 0, sizeof *j);
    snprintf(j->name, sizeof j->name, "%s", name);
    j->ctx = make_ctx(NULL);
    ferry_meta_params_t mp = {.field_mask = FERRY_META_PARAM_LISTEN | FERRY_META_PARAM_TOKEN |
                                            FERRY_META_PARAM_LEASE_MS,
                              .listen = "127.0.0.1:0",
                              .token = "intr",
                              .lease_ms = LEASE_MS};
    CHECK_OK(ferry_meta_service_create(j->ctx, &mp, &j->svc), ferry_ctx_error(j->ctx));
    CHECK_OK(ferry_model_from_hf_config_file(j->ctx, FERRY_TEST_GOLDEN "/tiny-qwen3.json", NULL, &j->model),
             ferry_ctx_error(j->ctx));
    j->src = build_layout(j->ctx, j->model, FERRY_SIDE_TRAIN, "tp=1");
    j->dst = build_layout(j->ctx, j->model, FERRY_SIDE_INFER, "tp=1");
    j->nb = ferry_layout_buffer_count(j->src);
    CHECK_EQ_INT(j->nb, ferry_layout_buffer_count(j->dst));
}

static void job_end(job_t *j) {
    ferry_layout_destroy(j->src);
    ferry_layout_destroy(j->dst);
    ferry_model_destroy(j->model);
    ferry_meta_service_destroy(j->svc);
    ferry_ctx_destroy(j->ctx);
}

static ferry_sync_params_t member_params(const job_t *j, ferry_sync_mode_t mode) {
    return (ferry_sync_params_t){.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN |
                                               FERRY_SYNC_PARAM_TIMEOUT_MS | FERRY_SYNC_PARAM_LEASE_MS |
                                               FERRY_SYNC_PARAM_MODE | FERRY_SYNC_PARAM_SERVE,
                                 .job = j->name,
                                 .rank = 0,
                                 .world = 1,
                                 .meta = ferry_meta_service_address(j->svc),
                                 .token = "intr",
                                 .timeout_ms = TIMEOUT_MS,
                                 .lease_ms = LEASE_MS,
                                 .mode = mode,
                                 .serve = false};
}

/* A writer whose buffers ferry allocates (wb gets them). */
static ferry_writer_t *make_writer(ferry_ctx_t *ctx, const job_t *j, ferry_sync_mode_t mode, void **wb) {
    ferry_sync_params_t p = member_params(j, mode);
    ferry_writer_t *w;
    CHECK_OK(ferry_writer_create(ctx, j->model, &p, &w), ferry_ctx_error(ctx));
    CHECK_OK(ferry_writer_add_layout(w, j->src, 0, wb, j->nb), ferry_writer_error(w));
    return w;
}

static ferry_reader_t *make_reader(ferry_ctx_t *ctx, const job_t *j, void **rb) {
    ferry_sync_params_t p = member_params(j, FERRY_SYNC_MODE_SYNC);
    ferry_reader_t *r;
    CHECK_OK(ferry_reader_create(ctx, j->model, &p, &r), ferry_ctx_error(ctx));
    CHECK_OK(ferry_reader_add_layout(r, j->dst, 0, rb, j->nb), ferry_reader_error(r));
    return r;
}

/* The trainer's weights at version v. */
static void fill(const job_t *j, void **wb, uint64_t v) {
    for (uint32_t b = 0; b < j->nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(j->src, b, &bi);
        for (uint64_t k = 0; k < bi.size; k++) ((uint8_t *)wb[b])[k] = (uint8_t)(k * 31 + b * 7 + v * 13);
    }
}

/* An update on a thread of its own (the writer's publish waits for it). */
typedef struct update {
    ferry_reader_t *r;
    uint64_t version;
    hook_t *h; /* the reader's hook, owned by this thread; NULL if none */
    ferry_status_t st;
    ferry_update_info_t info;
    pthread_t th;
} update_t;

static void *update_main(void *arg) {
    update_t *u = arg;
    if (u->h) own(u->h);
    u->st = ferry_reader_update(u->r, u->version, TIMEOUT_MS, &u->info);
    return NULL;
}

static void update_start(update_t *u, ferry_reader_t *r, uint64_t version, hook_t *h) {
    *u = (update_t){.r = r, .version = version, .h = h};
    CHECK(pthread_create(&u->th, NULL, update_main, u) == 0);
}

/* Joins the update and checks it brought every element of version v. */
static void update_check(update_t *u, const job_t *j, void **wb, void **rb, uint64_t v) {
    pthread_join(u->th, NULL);
    CHECK_OK(u->st, ferry_reader_error(u->r));
    CHECK_EQ_INT(u->info.version, v);
    CHECK_EQ_INT(ferry_reader_version(u->r), v);
    CHECK(check_layout_copy(j->model, j->src, j->dst, wb, rb) > 0);
}

/* A writer and a reader of one job, each on a context of its own; the
 * writer's always has a hook, the reader's when `reader_hook`. */
typedef struct pair {
    job_t j;
    hook_t hw, hr;
    ferry_ctx_t *cw, *cr;
    void **wb, **rb;
    ferry_writer_t *w;
    ferry_reader_t *r;
} pair_t;

static void pair_start(pair_t *p, const char *name, ferry_sync_mode_t mode, bool reader_hook) {
    memset(p, 0, sizeof *p);
    job_start(&p->j, name);
    own(&p->hw);
    own(&p->hr); /* until an update's thread takes it */
    p->cw = make_ctx(&p->hw);
    p->cr = make_ctx(reader_hook ? &p->hr : NULL);
    p->wb = calloc(p->j.nb, sizeof *p->wb);
    p->rb = calloc(p->j.nb, sizeof *p->rb);
    CHECK(p->wb && p->rb);
    p->w = make_writer(p->cw, &p->j, mode, p->wb);
    p->r = make_reader(p->cr, &p->j, p->rb);
}

/* Checks neither hook ran on a thread it should not have, and ends it all. */
static void pair_end(pair_t *p) {
    CHECK_EQ_INT(atomic_load(&p->hw.wrong), 0);
    CHECK_EQ_INT(atomic_load(&p->hr.wrong), 0);
    ferry_reader_destroy(p->r);
    ferry_writer_destroy(p->w);
    ferry_ctx_destroy(p->cr);
    ferry_ctx_destroy(p->cw);
    free(p->wb), free(p->rb);
    job_end(&p->j);
}

/* ---- a: a reader waiting for a version nobody publishes -------------------------- */

static void case_a(void) {
    pair_t p;
    /* async: a published version stays ready whether or not the reader is there */
    pair_start(&p, "intr-a", FERRY_SYNC_MODE_ASYNC, true);
    CHECK_OK(ferry_writer_commit(p.w), ferry_writer_error(p.w));
    CHECK_OK(ferry_reader_commit(p.r), ferry_reader_error(p.r));

    pthread_t t = arm(&p.hr);
    ferry_status_t st = ferry_reader_update(p.r, 1, TIMEOUT_MS, NULL);
    expect_interrupted("a: reader update", st, ferry_reader_error(p.r),
                       "interrupted while waiting for version 1 to be ready", &p.hr, t);
    CHECK_EQ_INT(ferry_reader_version(p.r), 0);
    CHECK(!ferry_reader_torn(p.r));

    /* the reader still works: it reconnects, and gets version 1 once published */
    fill(&p.j, p.wb, 1);
    CHECK_OK(ferry_writer_publish(p.w, 1, NULL), ferry_writer_error(p.w));
    ferry_update_info_t ui;
    CHECK_OK(ferry_reader_update(p.r, 1, TIMEOUT_MS, &ui), ferry_reader_error(p.r));
    CHECK_EQ_INT(ui.version, 1);
    CHECK(check_layout_copy(p.j.model, p.j.src, p.j.dst, p.wb, p.rb) > 0);
    fill(&p.j, p.wb, 2);
    CHECK_OK(ferry_writer_publish(p.w, 2, NULL), ferry_writer_error(p.w));
    CHECK_OK(ferry_reader_update(p.r, FERRY_VERSION_NEXT, TIMEOUT_MS, &ui), ferry_reader_error(p.r));
    CHECK_EQ_INT(ui.version, 2);
    CHECK(check_layout_copy(p.j.model, p.j.src, p.j.dst, p.wb, p.rb) > 0);
    pair_end(&p);
}

/* ---- b: a sync publish waiting for a reader's acknowledgement -------------------- */

static void case_b(void) {
    pair_t p;
    pair_start(&p, "intr-b", FERRY_SYNC_MODE_SYNC, false);
    CHECK_OK(ferry_writer_commit(p.w), ferry_writer_error(p.w));
    CHECK_OK(ferry_reader_commit(p.r), ferry_reader_error(p.r));

    /* the reader is committed and connected, and never updates */
    fill(&p.j, p.wb, 1);
    pthread_t t = arm(&p.hw);
    ferry_status_t st = ferry_writer_publish(p.w, 1, NULL);
    expect_interrupted("b: sync publish (acknowledgements)", st, ferry_writer_error(p.w),
                       "interrupted while waiting for readers to acknowledge version 1", &p.hw, t);

    /* the writer still works: its next publish is read and acknowledged */
    update_t u;
    update_start(&u, p.r, 2, NULL);
    fill(&p.j, p.wb, 2);
    ferry_publish_info_t pi;
    CHECK_OK(ferry_writer_publish(p.w, 2, &pi), ferry_writer_error(p.w));
    CHECK_EQ_INT(pi.readers_acked, 1);
    update_check(&u, &p.j, p.wb, p.rb, 2);
    pair_end(&p);
}

/* ---- c: a publish waiting for the layout epoch ----------------------------------- */

static void case_c(void) {
    pair_t p;
    pair_start(&p, "intr-c", FERRY_SYNC_MODE_SYNC, false); /* the reader: connected, not committed */
    CHECK_OK(ferry_writer_commit(p.w), ferry_writer_error(p.w));

    fill(&p.j, p.wb, 1);
    pthread_t t = arm(&p.hw);
    ferry_status_t st = ferry_writer_publish(p.w, 1, NULL);
    expect_interrupted("c: publish (layout epoch)", st, ferry_writer_error(p.w),
                       "interrupted while waiting for the layout epoch", &p.hw, t);

    /* nothing was published: once the reader commits, version 1 goes out */
    CHECK_OK(ferry_reader_commit(p.r), ferry_reader_error(p.r));
    update_t u;
    update_start(&u, p.r, 1, NULL);
    ferry_publish_info_t pi;
    CHECK_OK(ferry_writer_publish(p.w, 1, &pi), ferry_writer_error(p.w));
    CHECK_EQ_INT(pi.readers_acked, 1);
    update_check(&u, &p.j, p.wb, p.rb, 1);
    pair_end(&p);
}

/* ---- d: a table get waiting for a sequence nobody else completes ----------------- */

#define ROWS 64
#define COLS 96

static void put_rows(ferry_table_t *t, uint64_t seq, int64_t r0, int64_t r1) {
    static const int64_t shape[2] = {ROWS, COLS};
    uint16_t *data = malloc((size_t)(r1 - r0) * COLS * 2);
    CHECK(data);
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 0; c < COLS; c++) data[(r - r0) * COLS + c] = (uint16_t)(r * 1000 + c);
    ferry_table_entry_t e = {.name = "opt.m", .dtype = FERRY_DTYPE_BF16, .ndim = 2, .shape = shape,
                             .box = {.ndim = 2, .offset = {r0, 0}, .extent = {r1 - r0, COLS}}, .data = data};
    CHECK_OK(ferry_table_put(t, seq, &e), ferry_table_error(t));
    free(data);
}

static ferry_status_t get_all(ferry_table_t *t, uint64_t seq, uint16_t *got) {
    memset(got, 0, ROWS * COLS * 2);
    ferry_table_entry_t e = {.name = "opt.m", .box = {.ndim = 2, .offset = {0, 0}, .extent = {ROWS, COLS}},
                             .data = got};
    return ferry_table_get(t, seq, &e, TIMEOUT_MS);
}

static void check_all(const uint16_t *got) {
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t c = 0; c < COLS; c++) CHECK_EQ_INT(got[r * COLS + c], (uint16_t)(r * 1000 + c));
}

static void case_d(void) {
    ferry_ctx_t *ctx = make_ctx(NULL);
    ferry_meta_params_t mp = {.field_mask = FERRY_META_PARAM_LISTEN | FERRY_META_PARAM_TOKEN |
                                            FERRY_META_PARAM_LEASE_MS,
                              .listen = "127.0.0.1:0",
                              .token = "intr",
                              .lease_ms = LEASE_MS};
    ferry_meta_service_t *svc;
    CHECK_OK(ferry_meta_service_create(ctx, &mp, &svc), ferry_ctx_error(ctx));
    hook_t h0 = {0};
    own(&h0);
    ferry_ctx_t *c0 = make_ctx(&h0), *c1 = make_ctx(NULL);
    ferry_table_t *t[2];
    for (uint32_t i = 0; i < 2; i++) {
        ferry_sync_params_t p = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN |
                                               FERRY_SYNC_PARAM_TIMEOUT_MS | FERRY_SYNC_PARAM_LEASE_MS,
                                 .job = "intr-d",
                                 .rank = i,
                                 .world = 2,
                                 .meta = ferry_meta_service_address(svc),
                                 .token = "intr",
                                 .timeout_ms = TIMEOUT_MS,
                                 .lease_ms = LEASE_MS};
        CHECK_OK(ferry_table_create(i ? c1 : c0, &p, &t[i]), ferry_ctx_error(i ? c1 : c0));
    }
    uint16_t *got = malloc(ROWS * COLS * 2);
    CHECK(got);
    put_rows(t[0], 5, 0, ROWS / 2);
    CHECK_OK(ferry_table_complete(t[0], 5), ferry_table_error(t[0]));

    pthread_t timer = arm(&h0);
    ferry_status_t st = get_all(t[0], 5, got);
    expect_interrupted("d: table get", st, ferry_table_error(t[0]),
                       "interrupted while waiting for every table member to complete sequence 5", &h0, timer);

    /* member 0 still works: it reconnects (replaying its completed sequence)
     * and gets every put once member 1 completed */
    put_rows(t[1], 5, ROWS / 2, ROWS);
    CHECK_OK(ferry_table_complete(t[1], 5), ferry_table_error(t[1]));
    CHECK_OK(get_all(t[0], 5, got), ferry_table_error(t[0]));
    check_all(got);
    CHECK_OK(get_all(t[1], 5, got), ferry_table_error(t[1]));
    check_all(got);
    CHECK_EQ_INT(atomic_load(&h0.wrong), 0);

    free(got);
    ferry_table_destroy(t[0]);
    ferry_table_destroy(t[1]);
    ferry_ctx_destroy(c0);
    ferry_ctx_destroy(c1);
    ferry_meta_service_destroy(svc);
    ferry_ctx_destroy(ctx);
}

/* ---- e: a hook that returns 0 ------------------------------------------------------ */

static void case_e(void) {
    pair_t p;
    pair_start(&p, "intr-e", FERRY_SYNC_MODE_SYNC, true);
    CHECK_OK(ferry_writer_commit(p.w), ferry_writer_error(p.w));
    CHECK_OK(ferry_reader_commit(p.r), ferry_reader_error(p.r));

    update_t u;
    update_start(&u, p.r, 1, &p.hr);
    /* publish once the reader's hook ran in its wait (twice: >= 100 ms in) */
    double guard = now_s() + TIMEOUT_MS / 1000.0;
    while (atomic_load(&p.hr.calls) < 2 && now_s() < guard) sleep_ms(5);
    CHECK(atomic_load(&p.hr.calls) >= 2);
    fill(&p.j, p.wb, 1);
    ferry_publish_info_t pi;
    CHECK_OK(ferry_writer_publish(p.w, 1, &pi), ferry_writer_error(p.w));
    CHECK_EQ_INT(pi.readers_acked, 1);
    update_check(&u, &p.j, p.wb, p.rb, 1);
    CHECK_EQ_INT(u.info.retries, 0);
    printf("e: a hook returning 0: sync round trip of version 1, reader's hook called %d times, writer's %d\n",
           atomic_load(&p.hr.calls), atomic_load(&p.hw.calls));
    pair_end(&p);
}

/* ---- f: connecting to a service that is not listening --------------------------- */

static void case_f(void) {
    job_t j;
    job_start(&j, "intr-f");
    /* a bound socket that does not listen: connections are refused, and
     * the client retries until its timeout */
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &al) == 0);
    char addr[64], want[160];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", ntohs(a.sin_port));
    snprintf(want, sizeof want, "interrupted while connecting to the service at %s", addr);
    hook_t h = {0};
    own(&h);
    ferry_ctx_t *ctx = make_ctx(&h);
    ferry_sync_params_t p = member_params(&j, FERRY_SYNC_MODE_SYNC);
    p.meta = addr;
    ferry_reader_t *r = NULL;
    pthread_t t = arm(&h);
    ferry_status_t st = ferry_reader_create(ctx, j.model, &p, &r);
    expect_interrupted("f: reader create (connecting)", st, ferry_ctx_error(ctx), want, &h, t);
    CHECK(r == NULL);
    /* the context still makes readers */
    r = make_reader(ctx, &j, (void *[64]){0});
    ferry_reader_destroy(r);
    close(s);
    ferry_ctx_destroy(ctx);
    job_end(&j);
}

/* ---- g: transports, the owner stopped -------------------------------------------- */

#define OWNED (1u << 20)

static uint8_t owned_byte(uint64_t k) { return (uint8_t)(k * 131 + (k >> 9)); }

static ferry_xport_t *endpoint(ferry_ctx_t *ctx, ferry_xport_kind_t kind) {
    ferry_xport_params_t p = {.field_mask = FERRY_XPORT_PARAM_KIND | FERRY_XPORT_PARAM_TIMEOUT_MS,
                              .kind = kind,
                              .timeout_ms = TIMEOUT_MS};
    ferry_xport_t *xp = NULL;
    CHECK_OK(ferry_xport_create(ctx, &p, &xp), ferry_ctx_error(ctx));
    return xp;
}

/* The owner (this program again, --owner KIND OUT IN): registers OWNED
 * bytes, writes their descriptor to OUT, and serves them until IN closes. */
static int owner_main(const char *kind, int out, int in) {
    alarm(120);
    ferry_ctx_t *ctx = make_ctx(NULL);
    ferry_xport_t *xp = endpoint(ctx, !strcmp(kind, "ucx") ? FERRY_XPORT_UCX : FERRY_XPORT_SHM);
    ferry_xport_mem_t *m = NULL;
    CHECK_OK(ferry_xport_mem_alloc(xp, OWNED, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_READ, &m), ferry_xport_error(xp));
    uint8_t *p = ferry_xport_mem_ptr(m);
    for (uint64_t k = 0; k < OWNED; k++) p[k] = owned_byte(k);
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t len = 0;
    CHECK_OK(ferry_xport_mem_pack(m, desc, sizeof desc, &len), ferry_xport_error(xp));
    uint32_t n = (uint32_t)len;
    CHECK(write(out, &n, 4) == 4 && write(out, desc, len) == (ssize_t)len);
    char c;
    while (read(in, &c, 1) > 0) {
    }
    ferry_xport_mem_deregister(m);
    ferry_xport_destroy(xp);
    ferry_ctx_destroy(ctx);
    return 0;
}

static void stop_owner(pid_t pid) {
    CHECK(kill(pid, SIGSTOP) == 0);
    int ws = 0;
    CHECK(waitpid(pid, &ws, WUNTRACED) == pid && WIFSTOPPED(ws));
}

static void cont_owner(pid_t pid) { CHECK(kill(pid, SIGCONT) == 0); }

static ferry_status_t get_all_owned(ferry_xport_t *xp, ferry_xport_rmem_t *rm, uint8_t *buf) {
    memset(buf, 0, OWNED);
    ferry_xport_run_t run = {rm, 0, buf, OWNED};
    ferry_xport_req_t *req = NULL;
    ferry_status_t st = ferry_xport_get(xp, &run, 1, &req);
    if (st == FERRY_OK) st = ferry_xport_req_wait(req, -1);
    ferry_xport_req_free(req);
    return st;
}

static void check_owned(const uint8_t *buf) {
    for (uint64_t k = 0; k < OWNED; k++)
        if (buf[k] != owned_byte(k)) {
            fprintf(stderr, "byte %llu of the owner's memory is %u, expected %u\n", (unsigned long long)k, buf[k],
                    owned_byte(k));
            exit(1);
        }
}

static void case_g(ferry_xport_kind_t kind) {
    const char *name = kind == FERRY_XPORT_UCX ? "ucx" : "shm";
    if (kind == FERRY_XPORT_UCX) setenv("UCX_TLS", "tcp", 1); /* the owner serves every read (the child inherits it) */
    int down[2], up[2];
    CHECK(pipe(down) == 0 && pipe(up) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) { /* exec: a forked copy of a threaded process may inherit a held lock */
        char o[16], i[16];
        snprintf(o, sizeof o, "%d", up[1]);
        snprintf(i, sizeof i, "%d", down[0]);
        close(up[0]);
        close(down[1]);
        execl("/proc/self/exe", "test_interrupt", "--owner", name, o, i, (char *)NULL);
        _exit(127);
    }
    close(up[1]);
    close(down[0]);
    uint32_t n = 0;
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    CHECK(read(up[0], &n, 4) == 4 && n <= sizeof desc);
    for (uint32_t got = 0; got < n;) {
        ssize_t k = read(up[0], desc + got, n - got);
        CHECK(k > 0);
        got += (uint32_t)k;
    }
    hook_t h = {0};
    own(&h);
    ferry_ctx_t *ctx = make_ctx(&h);
    ferry_xport_t *xp = endpoint(ctx, kind);
    uint8_t *buf = malloc(OWNED);
    CHECK(buf);
    char what[64];

    /* resolving a descriptor: the owner must answer (shm: its mapping; UCX:
     * the registration's generation) */
    stop_owner(pid);
    ferry_xport_rmem_t *rm = NULL;
    pthread_t t = arm(&h);
    ferry_status_t st = ferry_xport_rmem_unpack(xp, desc, n, &rm);
    snprintf(what, sizeof what, "g: %s rmem_unpack", name);
    expect_interrupted(what, st, ferry_xport_error(xp), "interrupted while waiting for", &h, t);
    CHECK(rm == NULL);
    cont_owner(pid);
    CHECK_OK(ferry_xport_rmem_unpack(xp, desc, n, &rm), ferry_xport_error(xp));
    CHECK_OK(get_all_owned(xp, rm, buf), ferry_xport_error(xp));
    check_owned(buf);

    if (kind == FERRY_XPORT_UCX) { /* shm reads mapped memory: nothing to wait for */
        stop_owner(pid);
        t = arm(&h);
        st = get_all_owned(xp, rm, buf);
        expect_interrupted("g: ucx get", st, ferry_xport_error(xp), "interrupted while waiting for", &h, t);
        cont_owner(pid);
        CHECK_OK(get_all_owned(xp, rm, buf), ferry_xport_error(xp)); /* the connection is still good */
        check_owned(buf);
    }
    ferry_xport_rmem_release(rm);
    ferry_xport_destroy(xp);
    close(down[1]); /* the owner ends */
    int ws = 0;
    CHECK(waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    close(up[0]);
    free(buf);
    CHECK_EQ_INT(atomic_load(&h.wrong), 0);
    ferry_ctx_destroy(ctx);
    unsetenv("UCX_TLS");
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--owner")) return owner_main(argv[2], atoi(argv[3]), atoi(argv[4]));
    test_ucx_tsan_setup(argv);
    case_a();
    case_b();
    case_c();
    case_d();
    case_e();
    case_f();
    case_g(FERRY_XPORT_SHM);
    case_g(FERRY_XPORT_UCX);
    printf("test_interrupt: reader update, sync publish (acks), publish (epoch), table get, connecting, transports "
           "(shm, UCX) interrupted and usable after; a hook returning 0 changes nothing\n");
    return 0;
}
