/* The metadata service end to end, in process: a service on 127.0.0.1:0
 * talked to with the internal client (meta/client.h) and, where a test must
 * misbehave, with raw sockets and meta_encode. Covers the handshake (token,
 * job, world), layouts (parked GET_LAYOUTS, epochs), versions (PUBLISH,
 * READ_BEGIN grants, READ_END acknowledgements, wait_acks), checksums that
 * follow a PUBLISH (SUMS, GET_SUMS), what the service relays, RECLAIM
 * against read grants, lease expiry with its LEFT event, bad first frames,
 * a client reconnecting (with replay) to a restarted service, and what a
 * reconnecting client sends first. Each section starts its own service;
 * waits are short (the whole test takes about 4 s under ASan).
 *
 * Checks that expose a bug in the service are BUG_CHECKs: they report and
 * make the test fail at the end, but let the remaining sections run. */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "ferry/meta.h"
#include "meta/client_msg.h"
#include "meta/conn.h"
#include "meta/proto.h"

#define TOKEN "s3cret-token"
#define JOB "job-under-test"
#define PLAN 0xfeedf00dull

static ferry_ctx_t *ctx;
static int bugs;

#define BUG_CHECK(cond, ...)                                                              \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: BUG: check failed: %s\n    ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
            bugs++;                                                                       \
        }                                                                                 \
    } while (0)

/* ---- service and clients --------------------------------------------------------- */

static ferry_meta_service_t *svc_start(const char *listen) {
    ferry_meta_params_t p = {.field_mask = FERRY_META_PARAM_LISTEN | FERRY_META_PARAM_TOKEN,
                             .listen = listen,
                             .token = TOKEN};
    ferry_meta_service_t *s = NULL;
    CHECK_OK(ferry_meta_service_create(ctx, &p, &s), ferry_ctx_error(ctx));
    CHECK_STR_HAS(ferry_meta_service_address(s), "127.0.0.1:");
    return s;
}

static uint16_t svc_port(const ferry_meta_service_t *s) {
    char host[META_HOST_MAX];
    uint16_t port = 0;
    ferry_errbuf_t err;
    CHECK_OK(meta_addr_parse(ferry_meta_service_address(s), host, &port, &err), err.text);
    CHECK(port != 0);
    return port;
}

static ferry_status_t client_try(const ferry_meta_service_t *s, const char *token, const char *job, uint32_t role,
                                 uint32_t rank, uint32_t world, uint32_t lease_ms, meta_client_t **out,
                                 ferry_errbuf_t *err) {
    meta_client_params_t p = {.address = ferry_meta_service_address(s),
                              .token = token,
                              .job = job,
                              .role = role,
                              .rank = rank,
                              .world = world,
                              .lease_ms = lease_ms ? lease_ms : 3000,
                              .timeout_ms = 3000};
    err->text[0] = '\0';
    return meta_client_create(ctx, &p, out, err);
}

static meta_client_t *client(const ferry_meta_service_t *s, uint32_t role, uint32_t rank, uint32_t world) {
    meta_client_t *c = NULL;
    ferry_errbuf_t err;
    CHECK_OK(client_try(s, TOKEN, JOB, role, rank, world, 0, &c, &err), err.text);
    return c;
}

static ferry_status_t call(meta_client_t *c, uint8_t type, const ProtobufCMessage *req, uint8_t reply_type,
                           uint32_t wait_ms, ProtobufCMessage **reply, ferry_errbuf_t *err) {
    *reply = NULL;
    err->text[0] = '\0';
    return meta_client_call(c, type, req, reply_type, wait_ms, reply, err);
}

static void commit(meta_client_t *c, const char *layout) {
    FerryMeta__Commit cm = FERRY_META__COMMIT__INIT;
    cm.layout = (ProtobufCBinaryData){strlen(layout), (uint8_t *)layout};
    ProtobufCMessage *r;
    ferry_errbuf_t err;
    CHECK_OK(call(c, META_COMMIT, &cm.base, META_OK, 0, &r, &err), err.text);
    meta_free(ctx, r);
}

static ferry_status_t get_layouts(meta_client_t *c, uint32_t wait_ms, uint64_t known, FerryMeta__Layouts **out,
                                  ferry_errbuf_t *err) {
    FerryMeta__GetLayouts g = FERRY_META__GET_LAYOUTS__INIT;
    g.wait_ms = wait_ms;
    g.known_epoch = known;
    return call(c, META_GET_LAYOUTS, &g.base, META_LAYOUTS, wait_ms, (ProtobufCMessage **)out, err);
}

static FerryMeta__Status *get_status(meta_client_t *c) {
    FerryMeta__GetStatus g = FERRY_META__GET_STATUS__INIT;
    ProtobufCMessage *r;
    ferry_errbuf_t err;
    CHECK_OK(call(c, META_GET_STATUS, &g.base, META_STATUS, 0, &r, &err), err.text);
    return (FerryMeta__Status *)r;
}

static const FerryMeta__MemberStatus *member(const FerryMeta__Status *st, uint32_t role, uint32_t rank) {
    for (size_t i = 0; i < st->n_members; i++)
        if (st->members[i]->role == role && st->members[i]->rank == rank) return st->members[i];
    fprintf(stderr, "status lists no %u/%u\n", role, rank);
    exit(1);
}

/* Waits for every writer and reader to have committed; returns the epoch. */
static uint64_t epoch_of(meta_client_t *c) {
    FerryMeta__Layouts *l;
    ferry_errbuf_t err;
    CHECK_OK(get_layouts(c, 2000, 0, &l, &err), err.text);
    uint64_t e = l->epoch;
    CHECK(e != 0);
    meta_free(ctx, &l->base);
    return e;
}

/* A writer's publication of version v: one region, two buffers, a pack
 * area, and per reader rank r < nreaders the sums {v, r, 0xabc} shifted. */
typedef struct pub {
    FerryMeta__Publish p;
    FerryMeta__SlotMap map;
    ProtobufCBinaryData regions[1];
    char region_desc[32];
    uint32_t buffer_region[2];
    uint64_t buffer_offset[2];
    FerryMeta__PairSums ps[4], *psp[4];
    uint64_t sums[4][3];
} pub_t;

static void pub_init(pub_t *b, uint64_t epoch, uint64_t version, uint32_t nreaders) {
    memset(b, 0, sizeof *b);
    ferry_meta__publish__init(&b->p);
    ferry_meta__slot_map__init(&b->map);
    snprintf(b->region_desc, sizeof b->region_desc, "region-v%llu", (unsigned long long)version);
    b->regions[0] = (ProtobufCBinaryData){strlen(b->region_desc), (uint8_t *)b->region_desc};
    b->map.n_regions = 1;
    b->map.regions = b->regions;
    b->buffer_region[0] = b->buffer_region[1] = 0;
    b->buffer_offset[0] = 0;
    b->buffer_offset[1] = 4096 * version;
    b->map.n_buffer_region = b->map.n_buffer_offset = 2;
    b->map.buffer_region = b->buffer_region;
    b->map.buffer_offset = b->buffer_offset;
    b->map.has_pack = 1;
    b->map.pack_region = 0;
    b->map.pack_offset = 1u << 20;
    for (uint32_t r = 0; r < nreaders && r < 4; r++) {
        ferry_meta__pair_sums__init(&b->ps[r]);
        b->ps[r].dst_rank = r;
        b->sums[r][0] = version << 32 | r;
        b->sums[r][1] = 0x1000u + r;
        b->sums[r][2] = 0xabcull << 40 | version;
        b->ps[r].n_sums = 3;
        b->ps[r].sums = b->sums[r];
        b->psp[r] = &b->ps[r];
    }
    b->p.epoch = epoch;
    b->p.plan_digest = PLAN;
    b->p.version = version;
    b->p.slot = (uint32_t)(version % 2);
    b->p.map = &b->map;
    b->p.n_sums = nreaders;
    b->p.sums = b->psp;
}

static ferry_status_t publish(meta_client_t *c, pub_t *b, FerryMeta__Published **out, ferry_errbuf_t *err) {
    return call(c, META_PUBLISH, &b->p.base, META_PUBLISHED, b->p.wait_ms, (ProtobufCMessage **)out, err);
}

static void publish_ok(meta_client_t *c, uint64_t epoch, uint64_t version, uint32_t nreaders) {
    pub_t b;
    pub_init(&b, epoch, version, nreaders);
    FerryMeta__Published *r;
    ferry_errbuf_t err;
    CHECK_OK(publish(c, &b, &r, &err), err.text);
    meta_free(ctx, &r->base);
}

typedef struct rb {
    FerryMeta__ReadBegin m;
    uint32_t writers[1];
} rb_t;

static void rb_init(rb_t *b, uint64_t epoch, uint64_t min_v, uint64_t max_v, uint32_t wait_ms, uint32_t grant_ms) {
    ferry_meta__read_begin__init(&b->m);
    b->m.epoch = epoch;
    b->m.plan_digest = PLAN;
    b->m.min_version = min_v;
    b->m.max_version = max_v;
    b->m.wait_ms = wait_ms;
    b->m.grant_ms = grant_ms;
    b->writers[0] = 0;
    b->m.n_writers = 1;
    b->m.writers = b->writers;
}

static ferry_status_t read_begin(meta_client_t *c, rb_t *b, FerryMeta__Grant **out, ferry_errbuf_t *err) {
    return call(c, META_READ_BEGIN, &b->m.base, META_GRANT, b->m.wait_ms, (ProtobufCMessage **)out, err);
}

static FerryMeta__Grant *read_begin_ok(meta_client_t *c, uint64_t epoch, uint64_t min_v, uint64_t max_v,
                                       uint32_t grant_ms) {
    rb_t b;
    rb_init(&b, epoch, min_v, max_v, 1000, grant_ms);
    FerryMeta__Grant *g;
    ferry_errbuf_t err;
    CHECK_OK(read_begin(c, &b, &g, &err), err.text);
    return g;
}

/* READ_END; returns the reply's `retired`. */
static bool read_end(meta_client_t *c, uint64_t version, bool ok) {
    FerryMeta__ReadEnd re = FERRY_META__READ_END__INIT;
    re.version = version;
    re.ok = ok;
    ProtobufCMessage *r;
    ferry_errbuf_t err;
    CHECK_OK(call(c, META_READ_END, &re.base, META_READ_ENDED, 0, &r, &err), err.text);
    bool retired = ((FerryMeta__ReadEnded *)r)->retired;
    meta_free(ctx, r);
    return retired;
}

/* A request made on another thread, so the main thread can act while the
 * service holds it (parked). */
typedef struct async_call {
    meta_client_t *c;
    uint8_t type, reply_type;
    const ProtobufCMessage *req;
    uint32_t wait_ms;
    ProtobufCMessage *reply;
    ferry_status_t st;
    ferry_errbuf_t err;
    atomic_int done;
    double t_start, t_done;
    pthread_t th;
} async_call_t;

static void *async_main(void *arg) {
    async_call_t *a = arg;
    a->st = call(a->c, a->type, a->req, a->reply_type, a->wait_ms, &a->reply, &a->err);
    a->t_done = ferry_mono_s();
    atomic_store(&a->done, 1);
    return NULL;
}

static void async_start(async_call_t *a, meta_client_t *c, uint8_t type, const ProtobufCMessage *req,
                        uint8_t reply_type, uint32_t wait_ms) {
    memset(a, 0, sizeof *a);
    a->c = c;
    a->type = type;
    a->req = req;
    a->reply_type = reply_type;
    a->wait_ms = wait_ms;
    a->t_start = ferry_mono_s();
    CHECK(pthread_create(&a->th, NULL, async_main, a) == 0);
}

static void async_join(async_call_t *a) { CHECK(pthread_join(a->th, NULL) == 0); }

/* ---- raw sockets ------------------------------------------------------------------- */

typedef struct raw {
    int fd;
    frame_reader_t rd;
} raw_t;

static void raw_open(raw_t *r, uint16_t port) {
    ferry_errbuf_t err;
    CHECK_OK(meta_connect("127.0.0.1", port, ferry_mono_s() + 3, NULL, &r->fd, &err), err.text);
    frame_reader_init(&r->rd, ctx, 0);
}

static void raw_close(raw_t *r) {
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
    frame_reader_free(&r->rd);
}

static void raw_bytes(raw_t *r, const void *buf, size_t len) {
    ferry_errbuf_t err;
    CHECK_OK(meta_write_all(r->fd, buf, len, ferry_mono_s() + 3, NULL, &err), err.text);
}

static void raw_send(raw_t *r, uint8_t type, const ProtobufCMessage *m) {
    uint8_t *buf;
    size_t len;
    ferry_errbuf_t err;
    CHECK_OK(meta_encode(ctx, type, m, &buf, &len, &err), err.text);
    raw_bytes(r, buf, len);
    ferry_free(ctx, buf);
}

/* The next frame within timeout_s, decoded; its status is returned (EOF is
 * FERRY_ERR_PEER_LOST). */
static ferry_status_t raw_recv(raw_t *r, double timeout_s, uint8_t *type, ProtobufCMessage **m, ferry_errbuf_t *err) {
    const uint8_t *body;
    uint32_t len;
    err->text[0] = '\0';
    ferry_status_t st = meta_read_frame(r->fd, &r->rd, ferry_mono_s() + timeout_s, NULL, type, &body, &len, err);
    if (st != FERRY_OK) return st;
    return meta_decode(ctx, *type, body, len, m, err);
}

static void raw_hello(raw_t *r, const char *token, uint32_t role, uint32_t rank, uint32_t world, uint32_t lease_ms,
                      uint32_t pid, const char *host) {
    FerryMeta__Hello h = FERRY_META__HELLO__INIT;
    h.protocol = META_PROTOCOL;
    h.token = (ProtobufCBinaryData){strlen(token), (uint8_t *)token};
    h.job = (char *)JOB;
    h.role = role;
    h.rank = rank;
    h.world = world;
    h.host = (char *)host;
    h.pid = pid;
    h.incarnation = 0x1234;
    h.lease_ms = lease_ms;
    raw_send(r, META_HELLO, &h.base);
}

/* Expects WELCOME next (events are skipped); returns its lease. */
static uint32_t raw_welcome(raw_t *r) {
    for (;;) {
        uint8_t type;
        ProtobufCMessage *m;
        ferry_errbuf_t err;
        CHECK_OK(raw_recv(r, 3, &type, &m, &err), err.text);
        if (type == META_EVENT) {
            meta_free(ctx, m);
            continue;
        }
        if (type == META_ERROR) fprintf(stderr, "ERROR: %s\n", ((FerryMeta__Error *)m)->detail);
        CHECK_EQ_INT(type, META_WELCOME);
        uint32_t lease = ((FerryMeta__Welcome *)m)->lease_ms;
        meta_free(ctx, m);
        return lease;
    }
}

/* Expects an ERROR of status `want` whose detail contains needle, then the
 * connection closed by the service. */
static void raw_expect_error_close(raw_t *r, ferry_status_t want, const char *needle) {
    uint8_t type;
    ProtobufCMessage *m = NULL;
    ferry_errbuf_t err;
    CHECK_OK(raw_recv(r, 3, &type, &m, &err), err.text);
    CHECK_EQ_INT(type, META_ERROR);
    FerryMeta__Error *e = (FerryMeta__Error *)m;
    if (e->status != (uint32_t)want || !strstr(e->detail, needle)) {
        fprintf(stderr, "ERROR %s \"%s\"; expected %s containing \"%s\"\n", ferry_status_name((ferry_status_t)e->status),
                e->detail, ferry_status_name(want), needle);
        exit(1);
    }
    meta_free(ctx, m);
    CHECK_FAILS(raw_recv(r, 3, &type, &m, &err), FERRY_ERR_PEER_LOST, err.text, "closed");
}

/* ---- 1. token ------------------------------------------------------------------------ */

static void test_token(void) {
    ferry_meta_service_t *s = svc_start("127.0.0.1:0");
    meta_client_t *c = NULL;
    ferry_errbuf_t err;
    const char *bad[] = {"wrong", "s3cret-toke", "s3cret-token2", ""};
    for (int i = 0; i < 4; i++) {
        double t0 = ferry_mono_s();
        CHECK_FAILS(client_try(s, bad[i], JOB, META_ROLE_WRITER, 0, 1, 0, &c, &err), FERRY_ERR_INVALID_ARGUMENT,
                    err.text, "token mismatch");
        CHECK(ferry_mono_s() - t0 < 1.5); /* a refusal is final: no retrying until the timeout */
    }
    /* raw: the refusal closes the connection */
    raw_t r;
    raw_open(&r, svc_port(s));
    raw_hello(&r, "nope", META_ROLE_READER, 0, 1, 0, 1, "h");
    raw_expect_error_close(&r, FERRY_ERR_INVALID_ARGUMENT, "token");
    raw_close(&r);
    /* the right token is welcomed, with the lease asked for */
    CHECK_OK(client_try(s, TOKEN, JOB, META_ROLE_WRITER, 0, 1, 0, &c, &err), err.text);
    raw_open(&r, svc_port(s));
    raw_hello(&r, TOKEN, META_ROLE_READER, 0, 1, 2500, 1, "h");
    CHECK_EQ_INT(raw_welcome(&r), 2500);
    FerryMeta__Status *st = get_status(c);
    CHECK_STR_HAS(st->job, JOB);
    CHECK(member(st, META_ROLE_WRITER, 0)->pid == (uint32_t)getpid());
    CHECK(member(st, META_ROLE_READER, 0)->pid == 1);
    meta_free(ctx, &st->base);
    raw_close(&r);
    meta_client_destroy(c);
    ferry_meta_service_destroy(s);
    printf("  token: wrong tokens refused at once (INVALID_ARGUMENT, 'token mismatch'), right one welcomed\n");
}

/* ---- 2. job and world -------------------------------------------------------------- */

static void test_job_world(void) {
    ferry_meta_service_t *s = svc_start("127.0.0.1:0");
    meta_client_t *w0 = NULL, *c = NULL;
    ferry_errbuf_t err;
    /* a long lease: no heartbeat may hit w0's connection once the service closed it (its
     * next request must find the STALE error there rather than a reset, and not reconnect) */
    CHECK_OK(client_try(s, TOKEN, JOB, META_ROLE_WRITER, 0, 2, 60000, &w0, &err), err.text);
    CHECK_FAILS(client_try(s, TOKEN, "other-job", META_ROLE_WRITER, 1, 2, 0, &c, &err), FERRY_ERR_MISMATCH, err.text,
                "other-job");
    CHECK_STR_HAS(err.text, JOB);
    CHECK_FAILS(client_try(s, TOKEN, "other-job", META_ROLE_READER, 0, 1, 0, &c, &err), FERRY_ERR_MISMATCH, err.text,
                "runs job '" JOB "'");
    CHECK_FAILS(client_try(s, TOKEN, JOB, META_ROLE_WRITER, 1, 3, 0, &c, &err), FERRY_ERR_MISMATCH, err.text,
                "writer 1 says 3 writers, the job has 2");
    CHECK_FAILS(client_try(s, TOKEN, JOB, META_ROLE_WRITER, 2, 2, 0, &c, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "rank 2 of world 2");
    meta_client_t *r0 = client(s, META_ROLE_READER, 0, 2); /* the first reader sets the readers' world */
    CHECK_FAILS(client_try(s, TOKEN, JOB, META_ROLE_READER, 1, 4, 0, &c, &err), FERRY_ERR_MISMATCH, err.text,
                "reader 1 says 4 readers, the job has 2");
    meta_client_t *w1 = client(s, META_ROLE_WRITER, 1, 2);
    FerryMeta__Status *st = get_status(w1);
    CHECK_EQ_INT(st->writers, 2);
    CHECK_EQ_INT(st->readers, 2);
    CHECK_EQ_INT(st->n_members, 4);
    meta_free(ctx, &st->base);
    /* another process claiming a live rank is refused (BUSY, retried until
     * its timeout); once the holder is gone it gets the rank */
    meta_client_params_t p2 = {.address = ferry_meta_service_address(s), .token = TOKEN, .job = JOB,
                               .role = META_ROLE_WRITER, .rank = 0, .world = 2, .lease_ms = 3000, .timeout_ms = 300};
    meta_client_t *w0b = NULL;
    CHECK_FAILS(meta_client_create(ctx, &p2, &w0b, &err), FERRY_ERR_BUSY, err.text, "held by another live process");
    FerryMeta__GetStatus gs = FERRY_META__GET_STATUS__INIT;
    ProtobufCMessage *rep = NULL;
    CHECK_OK(call(w0, META_GET_STATUS, &gs.base, META_STATUS, 0, &rep, &err), err.text); /* the holder is untouched */
    meta_free(ctx, rep);
    meta_client_destroy(w0);
    CHECK_OK(meta_client_create(ctx, &p2, &w0b, &err), err.text);
    st = get_status(w0b);
    CHECK_EQ_INT(st->n_members, 4);
    meta_free(ctx, &st->base);
    meta_client_destroy(w0b);
    meta_client_destroy(w1);
    meta_client_destroy(r0);
    ferry_meta_service_destroy(s);
    printf("  job/world: other job and disagreeing worlds refused (MISMATCH), rank >= world refused, "
           "another process claiming a live rank refused (BUSY) until the holder is gone\n");
}

/* ---- 3. layouts ---------------------------------------------------------------------- */

static void test_layouts(void) {
    ferry_meta_service_t *s = svc_start("127.0.0.1:0");
    meta_client_t *w = client(s, META_ROLE_WRITER, 0, 1);
    FerryMeta__Layouts *l;
    ferry_errbuf_t err;
    commit(w, "writer-0-layout");
    CHECK_FAILS(get_layouts(w, 50, 0, &l, &err), FERRY_ERR_TIMEOUT, err.text, "no reader has connected");
    meta_client_t *r = client(s, META_ROLE_READER, 0, 1);
    double t0 = ferry_mono_s();
    CHECK_FAILS(get_layouts(w, 150, 0, &l, &err), FERRY_ERR_TIMEOUT, err.text, "reader 0 has not committed");
    CHECK(ferry_mono_s() - t0 >= 0.14);
    /* an observer may not commit; a raw one shows a parked request blocks others on its connection */
    meta_client_t *o = client(s, META_ROLE_OBSERVER, 0, 0);
    FerryMeta__Commit cm = FERRY_META__COMMIT__INIT;
    ProtobufCMessage *rep;
    CHECK_FAILS(call(o, META_COMMIT, &cm.base, META_OK, 0, &rep, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "observers do not commit");
    raw_t ro;
    raw_open(&ro, svc_port(s));
    raw_hello(&ro, TOKEN, META_ROLE_OBSERVER, 0, 0, 0, 7, "h");
    raw_welcome(&ro);
    FerryMeta__GetLayouts gl = FERRY_META__GET_LAYOUTS__INIT;
    gl.wait_ms = 3000;
    raw_send(&ro, META_GET_LAYOUTS, &gl.base);
    FerryMeta__GetStatus gs = FERRY_META__GET_STATUS__INIT;
    raw_send(&ro, META_GET_STATUS, &gs.base);
    uint8_t type;
    ProtobufCMessage *m;
    CHECK_OK(raw_recv(&ro, 3, &type, &m, &err), err.text);
    CHECK_EQ_INT(type, META_ERROR);
    CHECK_EQ_INT(((FerryMeta__Error *)m)->status, FERRY_ERR_BUSY);
    CHECK_STR_HAS(((FerryMeta__Error *)m)->detail, "GET_STATUS while a GET_LAYOUTS is pending");
    meta_free(ctx, m);
    /* the writer's GET_LAYOUTS parks until the reader commits */
    async_call_t a;
    FerryMeta__GetLayouts g = FERRY_META__GET_LAYOUTS__INIT;
    g.wait_ms = 3000;
    async_start(&a, w, META_GET_LAYOUTS, &g.base, META_LAYOUTS, g.wait_ms);
    sleep_ms(120);
    CHECK(!atomic_load(&a.done));
    double t_commit = ferry_mono_s();
    commit(r, "reader-0-layout, arbitrary bytes");
    async_join(&a);
    CHECK_OK(a.st, a.err.text);
    CHECK(a.t_done >= t_commit && a.t_done - a.t_start >= 0.1);
    l = (FerryMeta__Layouts *)a.reply;
    uint64_t epoch = l->epoch;
    CHECK(epoch != 0);
    CHECK_EQ_INT(l->n_writers, 1);
    CHECK_EQ_INT(l->n_readers, 1);
    CHECK(l->writers[0].len == 15 && memcmp(l->writers[0].data, "writer-0-layout", 15) == 0);
    CHECK(l->readers[0].len == 32 && memcmp(l->readers[0].data, "reader-0-layout, arbitrary bytes", 32) == 0);
    meta_free(ctx, a.reply);
    /* the raw observer's parked GET_LAYOUTS was answered too */
    CHECK_OK(raw_recv(&ro, 3, &type, &m, &err), err.text);
    while (type == META_EVENT) {
        meta_free(ctx, m);
        CHECK_OK(raw_recv(&ro, 3, &type, &m, &err), err.text);
    }
    CHECK_EQ_INT(type, META_LAYOUTS);
    CHECK(((FerryMeta__Layouts *)m)->epoch == epoch && ((FerryMeta__Layouts *)m)->n_readers == 1);
    meta_free(ctx, m);
    raw_close(&ro);
    /* known epoch: the epoch alone, at once */
    t0 = ferry_mono_s();
    CHECK_OK(get_layouts(r, 30000, epoch, &l, &err), err.text);
    CHECK(ferry_mono_s() - t0 < 15); /* at once, not after wait_ms */
    CHECK(l->epoch == epoch && l->n_writers == 0 && l->n_readers == 0);
    meta_free(ctx, &l->base);
    CHECK_OK(get_layouts(r, 0, epoch ^ 2, &l, &err), err.text); /* another known epoch: everything */
    CHECK(l->epoch == epoch && l->n_writers == 1 && l->n_readers == 1);
    meta_free(ctx, &l->base);
    /* a new layout makes a new epoch */
    commit(w, "writer-0-layout-v2");
    CHECK_OK(get_layouts(r, 0, epoch, &l, &err), err.text);
    CHECK(l->epoch != epoch && l->epoch != 0 && l->n_writers == 1);
    CHECK(l->writers[0].len == 18 && memcmp(l->writers[0].data, "writer-0-layout-v2", 18) == 0);
    meta_free(ctx, &l->base);
    FerryMeta__Status *st = get_status(o);
    CHECK(member(st, META_ROLE_WRITER, 0)->committed && member(st, META_ROLE_READER, 0)->committed);
    meta_free(ctx, &st->base);
    meta_client_destroy(o);
    meta_client_destroy(r);
    meta_client_destroy(w);
    ferry_meta_service_destroy(s);
    printf("  layouts: GET_LAYOUTS parks until every member committed, times out naming who has not, "
           "known epoch answered with the epoch alone\n");
}

/* ---- 4. versions --------------------------------------------------------------------- */

static void check_grant(const FerryMeta__Grant *g, uint64_t version, uint32_t reader, uint64_t incarnation) {
    CHECK(g->version == version);
    CHECK_EQ_INT(g->n_writers, 1);
    const FerryMeta__WriterGrant *wg = g->writers[0];
    CHECK_EQ_INT(wg->rank, 0);
    CHECK(wg->incarnation == incarnation);
    CHECK_EQ_INT(wg->slot, version % 2);
    CHECK(wg->map && wg->map->n_regions == 1);
    char desc[32];
    snprintf(desc, sizeof desc, "region-v%llu", (unsigned long long)version);
    CHECK(wg->map->regions[0].len == strlen(desc) && memcmp(wg->map->regions[0].data, desc, strlen(desc)) == 0);
    CHECK(wg->map->n_buffer_region == 2 && wg->map->n_buffer_offset == 2);
    CHECK(wg->map->buffer_offset[1] == 4096 * version);
    CHECK(wg->map->has_pack && wg->map->pack_offset == 1u << 20);
    CHECK_EQ_INT(wg->n_sums, 3);
    CHECK(wg->sums[0] == (version << 32 | reader) && wg->sums[1] == 0x1000u + reader &&
          wg->sums[2] == (0xabcull << 40 | version));
}

static void test_versions(void) {
    ferry_meta_service_t *s = svc_start("127.0.0.1:0");
    meta_client_t *w = client(s, META_ROLE_WRITER, 0, 1);
    meta_client_t *r0 = client(s, META_ROLE_READER, 0, 2), *r1 = client(s, META_ROLE_READER, 1, 2);
    commit(w, "W");
    commit(r0, "R0");
    commit(r1, "R1");
    uint64_t epoch = epoch_of(w);
    ferry_errbuf_t err;
    pub_t b;
    FerryMeta__Published *pd;
    FerryMeta__Grant *g;
    /* a wrong epoch is stale, for writers and readers */
    pub_init(&b, epoch ^ 2, 1, 2);
    CHECK_FAILS(publish(w, &b, &pd, &err), FERRY_ERR_STALE, err.text, "is not the job's current one");
    rb_t rb;
    rb_init(&rb, epoch ^ 2, 1, 0, 100, 1000);
    CHECK_FAILS(read_begin(r0, &rb, &g, &err), FERRY_ERR_STALE, err.text, "is not the job's current one");
    /* each side may only do its own part */
    pub_init(&b, epoch, 1, 2);
    CHECK_FAILS(publish(r0, &b, &pd, &err), FERRY_ERR_INVALID_ARGUMENT, err.text, "only writers publish");
    rb_init(&rb, epoch, 1, 0, 100, 1000);
    CHECK_FAILS(read_begin(w, &rb, &g, &err), FERRY_ERR_INVALID_ARGUMENT, err.text, "only readers read");
    FerryMeta__ReadEnd re = FERRY_META__READ_END__INIT;
    FerryMeta__Reclaim rcl = FERRY_META__RECLAIM__INIT;
    ProtobufCMessage *rep;
    CHECK_FAILS(call(w, META_READ_END, &re.base, META_READ_ENDED, 0, &rep, &err), FERRY_ERR_INVALID_ARGUMENT,
                err.text, "only readers end reads");
    CHECK_FAILS(call(r0, META_RECLAIM, &rcl.base, META_OK, 0, &rep, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "only writers reclaim");
    pub_init(&b, epoch, 1, 2);
    b.ps[1].dst_rank = 5;
    CHECK_FAILS(publish(w, &b, &pd, &err), FERRY_ERR_INVALID_ARGUMENT, err.text, "checksums for reader 5 of 2");
    /* READ_BEGIN parks until a version is ready */
    async_call_t a;
    rb_init(&rb, epoch, 1, 0, 3000, 5000);
    async_start(&a, r1, META_READ_BEGIN, &rb.m.base, META_GRANT, rb.m.wait_ms);
    sleep_ms(120);
    CHECK(!atomic_load(&a.done));
    pub_init(&b, epoch, 1, 2);
    double t_pub = ferry_mono_s();
    CHECK_OK(publish(w, &b, &pd, &err), err.text);
    CHECK(pd->ready);
    meta_free(ctx, &pd->base);
    async_join(&a);
    CHECK_OK(a.st, a.err.text);
    CHECK(a.t_done >= t_pub);
    check_grant((FerryMeta__Grant *)a.reply, 1, 1, meta_client_incarnation(w)); /* reader 1's sums */
    meta_free(ctx, a.reply);
    g = read_begin_ok(r0, epoch, 1, 0, 5000);
    check_grant(g, 1, 0, meta_client_incarnation(w)); /* reader 0's sums */
    meta_free(ctx, &g->base);
    CHECK(!read_end(r0, 1, true));
    CHECK(!read_end(r1, 1, true));
    /* a retired version: READ_BEGIN bounded by it is stale once a newer one is ready */
    publish_ok(w, epoch, 2, 2);
    FerryMeta__Retire rt = FERRY_META__RETIRE__INIT;
    rt.version = 1;
    CHECK_OK(meta_client_send(w, META_RETIRE, &rt.base, &err), err.text);
    FerryMeta__Status *st = get_status(w); /* RETIRE has no reply: a request behind it orders it */
    CHECK(st->ready == 2);
    meta_free(ctx, &st->base);
    rb_init(&rb, epoch, 1, 1, 30000, 1000);
    double t0 = ferry_mono_s();
    CHECK_FAILS(read_begin(r0, &rb, &g, &err), FERRY_ERR_STALE, err.text, "version 1 is no longer available");
    CHECK(ferry_mono_s() - t0 < 15); /* at once, not after wait_ms (half of it: a bound no machine reaches) */
    CHECK(read_end(r0, 1, false)); /* ending a read of a retired version says so */
    g = read_begin_ok(r0, epoch, 1, 0, 5000);
    CHECK(g->version == 2);
    meta_free(ctx, &g->base);
    CHECK(!read_end(r0, 2, true));
    /* nothing newer than the newest: a timeout naming the versions */
    rb_init(&rb, epoch, 3, 0, 100, 1000);
    CHECK_FAILS(read_begin(r0, &rb, &g, &err), FERRY_ERR_TIMEOUT, err.text,
                "no version >= 3 became ready within 100 ms (newest ready: 2)");
    /* reader 1 leaves: from here on only reader 0 is live and waited for */
    meta_client_destroy(r1);
    /* PUBLISH with wait_acks answers once the live reader acknowledged */
    pub_init(&b, epoch, 3, 2);
    b.p.wait_acks = 1;
    b.p.wait_ms = 3000;
    async_start(&a, w, META_PUBLISH, &b.p.base, META_PUBLISHED, b.p.wait_ms);
    sleep_ms(100);
    CHECK(!atomic_load(&a.done));
    g = read_begin_ok(r0, epoch, 3, 0, 5000);
    CHECK(g->version == 3);
    meta_free(ctx, &g->base);
    sleep_ms(50);
    CHECK(!atomic_load(&a.done)); /* a grant is not an acknowledgement */
    double t_end = ferry_mono_s();
    CHECK(!read_end(r0, 3, true));
    async_join(&a);
    CHECK_OK(a.st, a.err.text);
    CHECK(a.t_done >= t_end);
    pd = (FerryMeta__Published *)a.reply;
    CHECK(pd->ready);
    CHECK_EQ_INT(pd->acked, 1);
    CHECK_EQ_INT(pd->n_missing, 0);
    meta_free(ctx, a.reply);
    /* READ_END(ok = false) is no acknowledgement either; after wait_ms the reply lists reader 0 */
    pub_init(&b, epoch, 4, 2);
    b.p.wait_acks = 1;
    b.p.wait_ms = 250;
    async_start(&a, w, META_PUBLISH, &b.p.base, META_PUBLISHED, b.p.wait_ms);
    sleep_ms(30);
    g = read_begin_ok(r0, epoch, 4, 0, 5000);
    CHECK(g->version == 4);
    meta_free(ctx, &g->base);
    CHECK(!read_end(r0, 4, false));
    async_join(&a);
    CHECK_OK(a.st, a.err.text);
    CHECK(a.t_done - a.t_start >= 0.24);
    pd = (FerryMeta__Published *)a.reply;
    CHECK(pd->ready);
    CHECK_EQ_INT(pd->acked, 0);
    CHECK_EQ_INT(pd->n_missing, 1); /* reader 1 is gone: not waited for, not listed */
    CHECK_EQ_INT(pd->missing[0], 0);
    meta_free(ctx, a.reply);
    st = get_status(w);
    CHECK(member(st, META_ROLE_READER, 0)->acked == 3);
    CHECK(member(st, META_ROLE_READER, 1)->acked == 1);
    CHECK(member(st, META_ROLE_WRITER, 0)->published == 4);
    CHECK(st->ready == 4);
    meta_free(ctx, &st->base);
    meta_client_destroy(r0);
    meta_client_destroy(w);
    ferry_meta_service_destroy(s);

    /* A reader that parks READ_BEGIN before the first PUBLISH (which fixes the
     * plan digest) must still be held to it. */
    s = svc_start("127.0.0.1:0");
    w = client(s, META_ROLE_WRITER, 0, 1);
    r0 = client(s, META_ROLE_READER, 0, 1);
    commit(w, "W");
    commit(r0, "R0");
    epoch = epoch_of(r0);
    rb_init(&rb, epoch, 1, 0, 2000, 1000);
    rb.m.plan_digest = PLAN ^ 0xbad;
    async_start(&a, r0, META_READ_BEGIN, &rb.m.base, META_GRANT, rb.m.wait_ms);
    sleep_ms(80);
    publish_ok(w, epoch, 1, 1);
    async_join(&a);
    BUG_CHECK(a.st == FERRY_ERR_MISMATCH,
              "a READ_BEGIN parked before the first PUBLISH with plan digest %llx was answered %s (%s) after "
              "the writer published with plan digest %llx: try_read_begin() never compares plan digests",
              (unsigned long long)(PLAN ^ 0xbad), ferry_status_name(a.st), a.st ? a.err.text : "a GRANT",
              (unsigned long long)PLAN);
    meta_free(ctx, a.reply);
    rb_init(&rb, epoch, 1, 0, 100, 1000); /* once fixed, the unparked path checks it */
    rb.m.plan_digest = PLAN ^ 0xbad;
    CHECK_FAILS(read_begin(r0, &rb, &g, &err), FERRY_ERR_MISMATCH, err.text, "planned digest");
    meta_client_destroy(r0);
    meta_client_destroy(w);
    ferry_meta_service_destroy(s);
    printf("  versions: wrong epoch STALE, READ_BEGIN parks until ready and grants the writer's map and this "
           "reader's sums, retired max_version STALE, wait_acks waits for READ_END(ok) or lists the missing\n");
}

/* ---- 4b. checksums that follow the PUBLISH --------------------------------------------- */

static ferry_status_t get_sums(meta_client_t *c, uint64_t version, uint32_t wait_ms, FerryMeta__Grant **out,
                               ferry_errbuf_t *err) {
    FerryMeta__GetSums g = FERRY_META__GET_SUMS__INIT;
    uint32_t writers[1] = {0};
    g.version = version;
    g.n_writers = 1;
    g.writers = writers;
    g.wait_ms = wait_ms;
    return call(c, META_GET_SUMS, &g.base, META_GRANT, wait_ms, (ProtobufCMessage **)out, err);
}

static void test_sums_follow(void) {
    ferry_meta_service_t *s = svc_start("127.0.0.1:0");
    meta_client_t *w = client(s, META_ROLE_WRITER, 0, 1);
    meta_client_t *r0 = client(s, META_ROLE_READER, 0, 2), *r1 = client(s, META_ROLE_READER, 1, 2);
    commit(w, "W");
    commit(r0, "R0");
    commit(r1, "R1");
    uint64_t epoch = epoch_of(w);
    ferry_errbuf_t err;
    pub_t b;
    pub_init(&b, epoch, 1, 2);
    b.p.sums_follow = 1;
    b.p.n_sums = 0;
    FerryMeta__Published *pd;
    CHECK_OK(publish(w, &b, &pd, &err), err.text);
    CHECK(pd->ready); /* ready before its checksums */
    meta_free(ctx, &pd->base);
    FerryMeta__Grant *g = read_begin_ok(r0, epoch, 1, 0, 5000);
    CHECK(g->version == 1 && g->n_writers == 1);
    CHECK(g->writers[0]->sums_pending && g->writers[0]->n_sums == 0);
    CHECK(g->writers[0]->map && g->writers[0]->map->n_regions == 1);
    meta_free(ctx, &g->base);
    CHECK_FAILS(get_sums(r0, 1, 100, &g, &err), FERRY_ERR_TIMEOUT, err.text,
                "writer 0 sent no checksums for version 1 within 100 ms");
    CHECK_FAILS(get_sums(w, 1, 100, &g, &err), FERRY_ERR_INVALID_ARGUMENT, err.text, "only readers ask");
    /* GET_SUMS parks until the writer's SUMS come */
    FerryMeta__GetSums gs = FERRY_META__GET_SUMS__INIT;
    uint32_t writers[1] = {0};
    gs.version = 1;
    gs.n_writers = 1;
    gs.writers = writers;
    gs.wait_ms = 3000;
    async_call_t a;
    async_start(&a, r1, META_GET_SUMS, &gs.base, META_GRANT, gs.wait_ms);
    sleep_ms(100);
    CHECK(!atomic_load(&a.done));
    /* checksums naming a reader the job does not have are dropped whole */
    FerryMeta__Sums sm = FERRY_META__SUMS__INIT;
    pub_t sb;
    pub_init(&sb, epoch, 1, 2);
    sb.ps[1].dst_rank = 9;
    sm.version = 1;
    sm.n_sums = 2;
    sm.sums = sb.psp;
    CHECK_OK(meta_client_send(w, META_SUMS, &sm.base, &err), err.text);
    FerryMeta__Status *st = get_status(w); /* orders the SUMS before what follows */
    meta_free(ctx, &st->base);
    CHECK(!atomic_load(&a.done));
    sb.ps[1].dst_rank = 1;
    double t_sums = ferry_mono_s();
    CHECK_OK(meta_client_send(w, META_SUMS, &sm.base, &err), err.text);
    async_join(&a);
    CHECK_OK(a.st, a.err.text);
    CHECK(a.t_done >= t_sums);
    g = (FerryMeta__Grant *)a.reply;
    CHECK(g->version == 1 && g->n_writers == 1 && g->writers[0]->rank == 0 && !g->writers[0]->sums_pending);
    CHECK(g->writers[0]->n_sums == 3 && g->writers[0]->sums[0] == (1ull << 32 | 1) && g->writers[0]->sums[1] == 0x1001);
    meta_free(ctx, a.reply);
    /* now they are in: at once, and in later grants */
    CHECK_OK(get_sums(r0, 1, 1000, &g, &err), err.text);
    CHECK(g->writers[0]->n_sums == 3 && g->writers[0]->sums[0] == 1ull << 32);
    meta_free(ctx, &g->base);
    g = read_begin_ok(r1, epoch, 1, 0, 5000);
    check_grant(g, 1, 1, meta_client_incarnation(w));
    CHECK(!g->writers[0]->sums_pending);
    meta_free(ctx, &g->base);
    /* a version the writer no longer holds */
    FerryMeta__Retire rt = FERRY_META__RETIRE__INIT;
    rt.version = 1;
    CHECK_OK(meta_client_send(w, META_RETIRE, &rt.base, &err), err.text);
    st = get_status(w);
    meta_free(ctx, &st->base);
    CHECK_FAILS(get_sums(r0, 1, 1000, &g, &err), FERRY_ERR_STALE, err.text, "version 1 is no longer held by writer 0");
    meta_client_destroy(r0);
    meta_client_destroy(r1);
    meta_client_destroy(w);
    ferry_meta_service_destroy(s);
    printf("  sums follow: a grant says sums_pending, GET_SUMS parks until SUMS (bad ones dropped), times out "
           "naming the writer, STALE once the version is gone\n");
}

/* ---- 4c. what the service relays must decode ------------------------------------------ */

/* A writer's slot map reaches readers as the service decoded it, unknown
 * fields included. protobuf-c accepts an unknown field numbered 0 when its
 * tag is spelled in two bytes (80 00) and writes it back as 00, which no
 * decoder accepts: the service must refuse such a PUBLISH (meta_decode) or
 * relay something readers can decode. */
static void test_relay(void) {
    ferry_meta_service_t *s = svc_start("127.0.0.1:0");
    raw_t w;
    raw_open(&w, svc_port(s));
    raw_hello(&w, TOKEN, META_ROLE_WRITER, 0, 1, 5000, 99, "h");
    raw_welcome(&w);
    meta_client_t *r = client(s, META_ROLE_READER, 0, 1);
    FerryMeta__Commit cm = FERRY_META__COMMIT__INIT;
    cm.layout = (ProtobufCBinaryData){1, (uint8_t *)"W"};
    raw_send(&w, META_COMMIT, &cm.base);
    uint8_t type;
    ProtobufCMessage *m;
    ferry_errbuf_t err;
    do {
        CHECK_OK(raw_recv(&w, 3, &type, &m, &err), err.text);
        meta_free(ctx, m);
    } while (type == META_EVENT);
    CHECK_EQ_INT(type, META_OK);
    commit(r, "R");
    uint64_t epoch = epoch_of(r);
    /* PUBLISH = its fields without the map, then field 5 (the map) by hand */
    pub_t b;
    pub_init(&b, epoch, 1, 1);
    uint8_t body[512], mapb[256];
    size_t ml = protobuf_c_message_pack(&b.map.base, mapb);
    memcpy(mapb + ml, "\x80\x00\x01", 3); /* field 0, varint 1, in a two-byte tag */
    ml += 3;
    CHECK(ml < 128);
    b.p.map = NULL;
    size_t n = protobuf_c_message_pack(&b.p.base, body);
    body[n++] = 0x2a; /* field 5, length-delimited */
    body[n++] = (uint8_t)ml;
    memcpy(body + n, mapb, ml);
    n += ml;
    uint8_t frame_buf[600];
    frame_header(META_PUBLISH, body, (uint32_t)n, frame_buf);
    memcpy(frame_buf + FRAME_HEADER, body, n);
    raw_bytes(&w, frame_buf, FRAME_HEADER + n);
    do {
        CHECK_OK(raw_recv(&w, 3, &type, &m, &err), err.text);
        if (type == META_ERROR) CHECK_EQ_INT(((FerryMeta__Error *)m)->status, FERRY_ERR_CORRUPT);
        meta_free(ctx, m);
    } while (type == META_EVENT);
    if (type == META_PUBLISHED) { /* accepted: then readers must be able to read the grant */
        rb_t rb;
        rb_init(&rb, epoch, 1, 0, 1000, 1000);
        FerryMeta__Grant *g = NULL;
        ferry_status_t st = read_begin(r, &rb, &g, &err);
        BUG_CHECK(st == FERRY_OK,
                  "the service accepted a PUBLISH whose slot map holds an unknown field numbered 0 (tag bytes 80 "
                  "00) and relayed it in a GRANT that the reader refuses: %s (%s). meta_decode (proto.c) should "
                  "refuse unknown fields numbered 0 (or drop unknown fields) so the service never stores them",
                  ferry_status_name(st), err.text);
        if (st == FERRY_OK) meta_free(ctx, &g->base);
    } else {
        CHECK_EQ_INT(type, META_ERROR);
    }
    raw_close(&w);
    meta_client_destroy(r);
    ferry_meta_service_destroy(s);
    printf("  relay: a slot map the service stores is one readers can decode\n");
}

/* ---- 5. reclaim ------------------------------------------------------------------------ */

static void test_reclaim(void) {
    ferry_meta_service_t *s = svc_start("127.0.0.1:0");
    meta_client_t *w = client(s, META_ROLE_WRITER, 0, 1), *r = client(s, META_ROLE_READER, 0, 1);
    commit(w, "W");
    commit(r, "R");
    uint64_t epoch = epoch_of(w);
    for (uint64_t v = 1; v <= 5; v++) publish_ok(w, epoch, v, 1);
    ferry_errbuf_t err;
    FerryMeta__Reclaim rc = FERRY_META__RECLAIM__INIT;
    ProtobufCMessage *rep;
    async_call_t a;
    /* a version nobody reads: at once */
    rc.version = 5;
    rc.wait_ms = 2000;
    double t0 = ferry_mono_s();
    CHECK_OK(call(w, META_RECLAIM, &rc.base, META_OK, rc.wait_ms, &rep, &err), err.text);
    CHECK(ferry_mono_s() - t0 < 1.0);
    meta_free(ctx, rep);
    /* held until READ_END */
    FerryMeta__Grant *g = read_begin_ok(r, epoch, 1, 1, 5000);
    CHECK(g->version == 1);
    meta_free(ctx, &g->base);
    rc.version = 1;
    rc.wait_ms = 3000;
    async_start(&a, w, META_RECLAIM, &rc.base, META_OK, rc.wait_ms);
    sleep_ms(120);
    CHECK(!atomic_load(&a.done));
    double t_end = ferry_mono_s();
    CHECK(read_end(r, 1, true)); /* reclaimed meanwhile: retired */
    async_join(&a);
    CHECK_OK(a.st, a.err.text);
    CHECK(a.t_done >= t_end);
    meta_free(ctx, a.reply);
    /* a reclaimed version is granted no more */
    rb_t rb;
    rb_init(&rb, epoch, 1, 1, 100, 1000);
    CHECK_FAILS(read_begin(r, &rb, &g, &err), FERRY_ERR_STALE, err.text, "version 1 is no longer available");
    /* held until the grant's deadline */
    g = read_begin_ok(r, epoch, 2, 2, 300);
    CHECK(g->version == 2);
    meta_free(ctx, &g->base);
    rc.version = 2;
    rc.wait_ms = 3000;
    t0 = ferry_mono_s();
    CHECK_OK(call(w, META_RECLAIM, &rc.base, META_OK, rc.wait_ms, &rep, &err), err.text);
    double took = ferry_mono_s() - t0;
    CHECK(took >= 0.2 && took < 2.0);
    meta_free(ctx, rep);
    CHECK(read_end(r, 2, true));
    /* the reclaim's own wait runs out first: BUSY naming the reader */
    g = read_begin_ok(r, epoch, 3, 3, 5000);
    CHECK(g->version == 3);
    meta_free(ctx, &g->base);
    rc.version = 3;
    rc.wait_ms = 200;
    t0 = ferry_mono_s();
    CHECK_FAILS(call(w, META_RECLAIM, &rc.base, META_OK, rc.wait_ms, &rep, &err), FERRY_ERR_BUSY, err.text,
                "version 3 is still being read by reader(s) 0");
    CHECK(ferry_mono_s() - t0 >= 0.19);
    CHECK(read_end(r, 3, true));
    /* held until the reader leaves */
    g = read_begin_ok(r, epoch, 4, 4, 5000);
    CHECK(g->version == 4);
    meta_free(ctx, &g->base);
    rc.version = 4;
    rc.wait_ms = 3000;
    async_start(&a, w, META_RECLAIM, &rc.base, META_OK, rc.wait_ms);
    sleep_ms(100);
    CHECK(!atomic_load(&a.done));
    meta_client_destroy(r);
    async_join(&a);
    CHECK_OK(a.st, a.err.text);
    CHECK(a.t_done - a.t_start < 2.0);
    meta_free(ctx, a.reply);
    meta_client_destroy(w);
    ferry_meta_service_destroy(s);
    printf("  reclaim: waits for READ_END, the grant's deadline or the reader leaving; BUSY naming the reader "
           "when its own wait runs out; no grants for a reclaimed version\n");
}

/* ---- 6. leases ------------------------------------------------------------------------- */

static void test_lease(void) {
    ferry_meta_service_t *s = svc_start("127.0.0.1:0");
    uint16_t port = svc_port(s);
    raw_t a, b;
    raw_open(&a, port);
    raw_hello(&a, TOKEN, META_ROLE_WRITER, 0, 1, 5000, 1001, "writer-host");
    CHECK_EQ_INT(raw_welcome(&a), 5000);
    meta_client_t *o = client(s, META_ROLE_OBSERVER, 0, 0);
    meta_client_t *h = NULL; /* a reader with a short lease that heartbeats keeps it */
    ferry_errbuf_t err;
    CHECK_OK(client_try(s, TOKEN, JOB, META_ROLE_READER, 1, 2, 500, &h, &err), err.text);
    raw_open(&b, port);
    raw_hello(&b, TOKEN, META_ROLE_READER, 0, 2, 300, 4242, "silent-host");
    CHECK_EQ_INT(raw_welcome(&b), 300);
    double t_joined = ferry_mono_s();
    FerryMeta__Status *st = get_status(o);
    CHECK(member(st, META_ROLE_READER, 0)->pid == 4242);
    CHECK_STR_HAS(member(st, META_ROLE_READER, 0)->host, "silent-host");
    meta_free(ctx, &st->base);
    /* the writer hears reader 1 and reader 0 join, then reader 0 leave */
    int joined = 0;
    for (;;) {
        uint8_t type;
        ProtobufCMessage *m;
        CHECK_OK(raw_recv(&a, 3, &type, &m, &err), err.text);
        CHECK_EQ_INT(type, META_EVENT);
        FerryMeta__Event *ev = (FerryMeta__Event *)m;
        CHECK_EQ_INT(ev->role, META_ROLE_READER);
        if (ev->kind == META_EVENT_JOINED) {
            joined++;
            meta_free(ctx, m);
            continue;
        }
        CHECK_EQ_INT(ev->kind, META_EVENT_LEFT);
        CHECK_EQ_INT(ev->rank, 0);
        CHECK_STR_HAS(ev->detail, "lease expired");
        meta_free(ctx, m);
        break;
    }
    double took = ferry_mono_s() - t_joined;
    CHECK_EQ_INT(joined, 2);
    CHECK(took >= 0.25 && took < 30); /* after the lease; the upper bound only stops a hang */
    /* the silent one's connection is closed */
    uint8_t type;
    ProtobufCMessage *m;
    CHECK_FAILS(raw_recv(&b, 3, &type, &m, &err), FERRY_ERR_PEER_LOST, err.text, "closed");
    raw_close(&b);
    sleep_ms(450); /* the heartbeating reader outlives its lease */
    st = get_status(o);
    const FerryMeta__MemberStatus *gone = member(st, META_ROLE_READER, 0), *kept = member(st, META_ROLE_READER, 1);
    CHECK(gone->pid == 0 && gone->host[0] == '\0'); /* absent */
    CHECK(kept->pid == (uint32_t)getpid());
    CHECK(member(st, META_ROLE_WRITER, 0)->pid == 1001);
    meta_free(ctx, &st->base);
    CHECK(meta_client_events(o) >= 3); /* the observer heard them too: 2 joined, 1 left */
    st = get_status(h); /* the client absorbs pushed events while it reads a reply */
    meta_free(ctx, &st->base);
    CHECK(meta_client_events(h) >= 2); /* reader 0 joined and left */
    /* a member that says BYE leaves at once, with an event */
    meta_client_destroy(h);
    for (;;) {
        CHECK_OK(raw_recv(&a, 3, &type, &m, &err), err.text);
        CHECK_EQ_INT(type, META_EVENT);
        FerryMeta__Event *ev = (FerryMeta__Event *)m;
        bool done = ev->kind == META_EVENT_LEFT && ev->role == META_ROLE_READER && ev->rank == 1;
        meta_free(ctx, m);
        if (done) break;
    }
    raw_close(&a);
    meta_client_destroy(o);
    ferry_meta_service_destroy(s);
    printf("  lease: a silent member is dropped after its lease (LEFT event 'lease expired', absent from "
           "status), a heartbeating one stays\n");
}

/* ---- 7. bad first frames --------------------------------------------------------------- */

static size_t frame(uint8_t type, const void *body, uint32_t len, uint8_t *out) {
    frame_header(type, body, len, out);
    memcpy(out + FRAME_HEADER, body, len);
    return FRAME_HEADER + len;
}

static void test_bad_frames(void) {
    ferry_meta_service_t *s = svc_start("127.0.0.1:0");
    uint16_t port = svc_port(s);
    meta_client_t *w = client(s, META_ROLE_WRITER, 0, 1);
    static uint8_t buf[1 << 16];
    uint8_t *enc;
    size_t n, enc_len;
    ferry_errbuf_t err;
    FerryMeta__Hello h = FERRY_META__HELLO__INIT;
    h.protocol = META_PROTOCOL;
    h.token = (ProtobufCBinaryData){strlen(TOKEN), (uint8_t *)TOKEN};
    h.job = (char *)JOB;
    h.role = META_ROLE_READER;
    h.world = 1;
    h.host = (char *)"h";
    CHECK_OK(meta_encode(ctx, META_HELLO, &h.base, &enc, &enc_len, &err), err.text);
    struct {
        const char *what;
        ferry_status_t want;
        const char *needle;
    } cases[] = {
        {"http", FERRY_ERR_CORRUPT, "bad magic"},
        {"magic", FERRY_ERR_CORRUPT, "bad magic 0x464e"},
        {"version", FERRY_ERR_UNSUPPORTED, "protocol version 9"},
        {"checksum", FERRY_ERR_CORRUPT, "checksum mismatch"},
        {"huge header", FERRY_ERR_LIMIT, "1048576-byte body exceeds the 4096-byte limit"},
        {"big hello", FERRY_ERR_LIMIT, "exceeds the 4096-byte limit"},
        {"not hello", FERRY_ERR_INVALID_ARGUMENT, "expected HELLO first, got GET_STATUS"},
        {"bad body", FERRY_ERR_CORRUPT, "not a valid Hello message"},
        {"protocol", FERRY_ERR_UNSUPPORTED, "protocol 2, this service speaks 1"},
        {"role", FERRY_ERR_CORRUPT, "role 7 is not writer, reader"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *what = cases[i].what;
        if (!strcmp(what, "http")) {
            n = (size_t)snprintf((char *)buf, sizeof buf, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        } else if (!strcmp(what, "magic") || !strcmp(what, "version") || !strcmp(what, "checksum")) {
            memcpy(buf, enc, enc_len);
            n = enc_len;
            if (!strcmp(what, "magic")) buf[1] = 'N';
            else if (!strcmp(what, "version")) buf[2] = 9;
            else buf[n - 1] ^= 1;
        } else if (!strcmp(what, "huge header")) {
            uint8_t body[64] = {0};
            frame_header(META_HELLO, body, 64, buf);
            buf[4] = 0, buf[5] = 0, buf[6] = 0x10, buf[7] = 0; /* 1 MiB, announced: nothing follows */
            n = FRAME_HEADER;
        } else if (!strcmp(what, "big hello")) {
            static char host[5000];
            memset(host, 'x', sizeof host - 1);
            FerryMeta__Hello big = h;
            big.host = host; /* would fail the name limit too, but the frame is refused first */
            uint8_t *b2;
            size_t l2;
            CHECK_OK(meta_encode(ctx, META_HELLO, &big.base, &b2, &l2, &err), err.text);
            CHECK(l2 > 4096 + FRAME_HEADER && l2 <= sizeof buf);
            memcpy(buf, b2, l2);
            n = l2;
            ferry_free(ctx, b2);
        } else if (!strcmp(what, "not hello")) {
            n = frame(META_GET_STATUS, "", 0, buf);
        } else if (!strcmp(what, "bad body")) {
            n = frame(META_HELLO, "\xff\xff\xff\xff\xff", 5, buf);
        } else {
            FerryMeta__Hello bad = h;
            if (!strcmp(what, "protocol")) bad.protocol = 2;
            else bad.role = 7;
            uint8_t *b2;
            size_t l2;
            CHECK_OK(meta_encode(ctx, META_HELLO, &bad.base, &b2, &l2, &err), err.text);
            memcpy(buf, b2, l2);
            n = l2;
            ferry_free(ctx, b2);
        }
        raw_t r;
        raw_open(&r, port);
        raw_bytes(&r, buf, n);
        raw_expect_error_close(&r, cases[i].want, cases[i].needle);
        raw_close(&r);
        /* the service keeps serving the others */
        FerryMeta__Status *st = get_status(w);
        CHECK(member(st, META_ROLE_WRITER, 0)->pid == (uint32_t)getpid());
        meta_free(ctx, &st->base);
    }
    /* after HELLO the limit is the service's (256 MiB by default): a 16 KiB layout is fine */
    raw_t r;
    raw_open(&r, port);
    raw_bytes(&r, enc, enc_len);
    raw_welcome(&r);
    static uint8_t layout[16384];
    memset(layout, 'L', sizeof layout);
    FerryMeta__Commit cm = FERRY_META__COMMIT__INIT;
    cm.layout = (ProtobufCBinaryData){sizeof layout, layout};
    raw_send(&r, META_COMMIT, &cm.base);
    uint8_t type;
    ProtobufCMessage *m;
    do {
        CHECK_OK(raw_recv(&r, 3, &type, &m, &err), err.text);
        if (type == META_EVENT) meta_free(ctx, m);
    } while (type == META_EVENT);
    CHECK_EQ_INT(type, META_OK);
    meta_free(ctx, m);
    /* a bad request after HELLO gets an ERROR and the connection stays */
    n = frame(META_READ_END, "\xff\xff\xff", 3, buf);
    raw_bytes(&r, buf, n);
    CHECK_OK(raw_recv(&r, 3, &type, &m, &err), err.text);
    CHECK_EQ_INT(type, META_ERROR);
    CHECK_EQ_INT(((FerryMeta__Error *)m)->status, FERRY_ERR_CORRUPT);
    CHECK_STR_HAS(((FerryMeta__Error *)m)->detail, "not a valid ReadEnd message");
    meta_free(ctx, m);
    FerryMeta__GetStatus gs = FERRY_META__GET_STATUS__INIT;
    raw_send(&r, META_GET_STATUS, &gs.base);
    CHECK_OK(raw_recv(&r, 3, &type, &m, &err), err.text);
    CHECK_EQ_INT(type, META_STATUS);
    CHECK(((FerryMeta__Status *)m)->n_members == 2);
    meta_free(ctx, m);
    n = frame(META_WELCOME, "", 0, buf); /* a service's message from a client */
    raw_bytes(&r, buf, n);
    CHECK_OK(raw_recv(&r, 3, &type, &m, &err), err.text);
    CHECK_EQ_INT(type, META_ERROR);
    CHECK_STR_HAS(((FerryMeta__Error *)m)->detail, "unexpected WELCOME");
    meta_free(ctx, m);
    raw_close(&r);
    ferry_free(ctx, enc);
    /* and new members are still welcome */
    meta_client_t *o = client(s, META_ROLE_OBSERVER, 0, 0);
    meta_client_destroy(o);
    meta_client_destroy(w);
    ferry_meta_service_destroy(s);
    printf("  bad first frames: garbage, wrong magic/version/checksum, > 4 KiB, not HELLO, bad HELLO: ERROR "
           "then closed, the service serving on\n");
}

/* ---- 8. restart ---------------------------------------------------------------------- */

typedef struct replay_state {
    atomic_int calls;
    uint64_t service_id; /* as seen from inside the replay */
    ferry_status_t st;
} replay_state_t;

static ferry_status_t replay(meta_client_t *c, void *opaque, ferry_errbuf_t *err) {
    replay_state_t *rs = opaque;
    atomic_fetch_add(&rs->calls, 1);
    FerryMeta__GetStatus gs = FERRY_META__GET_STATUS__INIT;
    ProtobufCMessage *r;
    ferry_status_t st = meta_client_call(c, META_GET_STATUS, &gs.base, META_STATUS, 0, &r, err);
    if (st != FERRY_OK) return rs->st = st;
    rs->service_id = ((FerryMeta__Status *)r)->service_id;
    bool committed = member((FerryMeta__Status *)r, META_ROLE_WRITER, 0)->committed;
    meta_free(ctx, r);
    if (committed) return rs->st = ferry_fail(err, FERRY_ERR_INTERNAL, "a new service already has the layout");
    FerryMeta__Commit cm = FERRY_META__COMMIT__INIT;
    cm.layout = (ProtobufCBinaryData){8, (uint8_t *)"replayed"};
    st = meta_client_call(c, META_COMMIT, &cm.base, META_OK, 0, &r, err);
    if (st == FERRY_OK) meta_free(ctx, r);
    return rs->st = st;
}

typedef struct later {
    char listen[64];
    long delay_ms;
    ferry_meta_service_t *svc;
} later_t;

static void *start_later(void *arg) {
    later_t *l = arg;
    sleep_ms(l->delay_ms);
    l->svc = svc_start(l->listen);
    return NULL;
}

static void test_restart(void) {
    ferry_meta_service_t *s = svc_start("127.0.0.1:0");
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%u", svc_port(s));
    meta_client_t *w = client(s, META_ROLE_WRITER, 0, 1);
    replay_state_t rs = {0};
    meta_client_set_replay(w, replay, &rs);
    commit(w, "original");
    FerryMeta__Status *st = get_status(w);
    uint64_t id1 = st->service_id;
    meta_free(ctx, &st->base);
    /* the service goes away and another comes up on the same port */
    ferry_meta_service_destroy(s);
    s = svc_start(listen);
    CHECK(!strcmp(ferry_meta_service_address(s), listen));
    st = get_status(w); /* reconnects, replays, then asks again */
    CHECK_EQ_INT(atomic_load(&rs.calls), 1);
    CHECK_OK(rs.st, "replay");
    CHECK(st->service_id != id1 && st->service_id == rs.service_id);
    CHECK(member(st, META_ROLE_WRITER, 0)->committed); /* the replay's commit came before this answer */
    CHECK(member(st, META_ROLE_WRITER, 0)->pid == (uint32_t)getpid());
    meta_free(ctx, &st->base);
    /* the port is taken: a second service there is refused */
    ferry_meta_params_t dup = {.field_mask = FERRY_META_PARAM_LISTEN | FERRY_META_PARAM_TOKEN,
                               .listen = listen,
                               .token = TOKEN};
    ferry_meta_service_t *s2 = NULL;
    CHECK_FAILS(ferry_meta_service_create(ctx, &dup, &s2), FERRY_ERR_IO, ferry_ctx_error(ctx), "cannot listen");
    CHECK(s2 == NULL);
    /* gone again, and back only while the next request is already retrying */
    ferry_meta_service_destroy(s);
    later_t l = {.delay_ms = 300};
    snprintf(l.listen, sizeof l.listen, "%s", listen);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, start_later, &l) == 0);
    double t0 = ferry_mono_s();
    meta_client_t *r = NULL;
    st = get_status(w);
    double took = ferry_mono_s() - t0;
    CHECK(pthread_join(th, NULL) == 0);
    s = l.svc;
    CHECK(took >= 0.25 && took < 3.0);
    CHECK_EQ_INT(atomic_load(&rs.calls), 2);
    CHECK(st->service_id == rs.service_id && st->service_id != id1);
    CHECK(member(st, META_ROLE_WRITER, 0)->committed);
    meta_free(ctx, &st->base);
    /* a restart while a request is parked: it is replayed and sent again to the new service */
    async_call_t a;
    FerryMeta__GetLayouts gl = FERRY_META__GET_LAYOUTS__INIT;
    gl.wait_ms = 4000;
    async_start(&a, w, META_GET_LAYOUTS, &gl.base, META_LAYOUTS, gl.wait_ms);
    sleep_ms(100);
    CHECK(!atomic_load(&a.done));
    ferry_meta_service_destroy(s);
    s = svc_start(listen);
    r = client(s, META_ROLE_READER, 0, 1);
    for (int i = 0; i < 200 && atomic_load(&rs.calls) < 3; i++) sleep_ms(10);
    CHECK_EQ_INT(atomic_load(&rs.calls), 3);
    CHECK(!atomic_load(&a.done));
    commit(r, "reader");
    async_join(&a);
    CHECK_OK(a.st, a.err.text);
    FerryMeta__Layouts *lay = (FerryMeta__Layouts *)a.reply;
    /* the replayed layout is the one the new service hands out */
    CHECK(lay->n_writers == 1 && lay->writers[0].len == 8 && !memcmp(lay->writers[0].data, "replayed", 8));
    CHECK(lay->n_readers == 1 && lay->readers[0].len == 6);
    meta_free(ctx, a.reply);
    meta_client_destroy(r);
    meta_client_destroy(w);
    ferry_meta_service_destroy(s);
    printf("  restart: a client reconnects to a new service on the same port (also one that comes up while "
           "it retries) and replays before its request is answered\n");
}

/* ---- 9. heartbeats while reconnecting ------------------------------------------------ */

/* The client's context allocates slowly on the main thread while `slow` is
 * set: that stretches the moment between a reconnection's connect() and its
 * HELLO, in which the heartbeat thread must not use the new connection. */
static atomic_bool slow;
static pthread_t main_thread;

static void *slow_alloc(void *opaque, size_t size) {
    (void)opaque;
    if (atomic_load(&slow) && pthread_equal(pthread_self(), main_thread)) sleep_ms(150);
    return malloc(size);
}
static void *slow_realloc(void *opaque, void *ptr, size_t size) {
    (void)opaque;
    return realloc(ptr, size);
}
static void slow_free(void *opaque, void *ptr) {
    (void)opaque;
    free(ptr);
}

/* Stands in for the service on its port: accepts one connection and notes
 * the type of the first frame it receives. */
typedef struct fake_service {
    int lfd;
    int first_type; /* -1: none */
} fake_service_t;

static void *fake_main(void *arg) {
    fake_service_t *f = arg;
    struct pollfd p = {.fd = f->lfd, .events = POLLIN};
    if (poll(&p, 1, 3000) != 1) return NULL;
    int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return NULL;
    frame_reader_t rd;
    frame_reader_init(&rd, ctx, 0);
    uint8_t type;
    const uint8_t *body;
    uint32_t len;
    ferry_errbuf_t err;
    if (meta_read_frame(fd, &rd, ferry_mono_s() + 3, NULL, &type, &body, &len, &err) == FERRY_OK) f->first_type = type;
    frame_reader_free(&rd);
    close(fd);
    return NULL;
}

static void test_heartbeat_reconnect(void) {
    main_thread = pthread_self();
    ferry_ctx_params_t cp = {.field_mask = FERRY_CTX_PARAM_ALLOCATOR,
                             .allocator = {slow_alloc, slow_realloc, slow_free, NULL}};
    ferry_ctx_t *cctx = NULL;
    char detail[256];
    CHECK_OK(ferry_ctx_create(&cp, &cctx, detail, sizeof detail), detail);
    ferry_meta_service_t *s = svc_start("127.0.0.1:0");
    uint16_t port = svc_port(s);
    char listen[64];
    snprintf(listen, sizeof listen, "%s", ferry_meta_service_address(s));
    meta_client_params_t p = {.address = listen, .token = TOKEN, .job = JOB, .role = META_ROLE_WRITER,
                              .rank = 0, .world = 1, .lease_ms = 90, /* a heartbeat every 30 ms */
                              .timeout_ms = 500};
    meta_client_t *c = NULL;
    ferry_errbuf_t err;
    CHECK_OK(meta_client_create(cctx, &p, &c, &err), err.text);
    ferry_meta_service_destroy(s);
    /* what the client sends first when it reconnects */
    fake_service_t f = {.lfd = -1, .first_type = -1};
    uint16_t bound;
    CHECK_OK(meta_listen("127.0.0.1", port, &f.lfd, &bound, &err), err.text);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, fake_main, &f) == 0);
    atomic_store(&slow, true);
    FerryMeta__GetStatus gs = FERRY_META__GET_STATUS__INIT;
    ProtobufCMessage *r = NULL;
    err.text[0] = '\0';
    ferry_status_t st = meta_client_call(c, META_GET_STATUS, &gs.base, META_STATUS, 0, &r, &err);
    atomic_store(&slow, false);
    CHECK(st != FERRY_OK); /* the stand-in never answers */
    CHECK(pthread_join(th, NULL) == 0);
    close(f.lfd);
    CHECK(f.first_type != -1);
    BUG_CHECK(f.first_type == META_HELLO,
              "the first frame on a reconnection was %s, not HELLO: connect_once() (client.c) stores the new fd "
              "where the heartbeat thread sends before it sends HELLO; a service refuses such a connection "
              "(\"expected HELLO first, got HEARTBEAT\", a permanent INVALID_ARGUMENT for the client)",
              meta_type_name((uint8_t)f.first_type));
    meta_client_destroy(c);
    ferry_ctx_destroy(cctx);
    printf("  heartbeat vs reconnect: the first frame of a reconnection, with a heartbeat due before HELLO\n");
}

int main(void) {
    ctx = test_ctx();
    double t0 = ferry_mono_s();
    test_token();
    test_job_world();
    test_layouts();
    test_versions();
    test_sums_follow();
    test_relay();
    test_reclaim();
    test_lease();
    test_bad_frames();
    test_restart();
    test_heartbeat_reconnect();
    printf("meta service: all sections ran in %.2f s%s\n", ferry_mono_s() - t0,
           bugs ? "; BUG_CHECKs failed (see above)" : "");
    ferry_ctx_destroy(ctx);
    return bugs ? 1 : 0;
}
