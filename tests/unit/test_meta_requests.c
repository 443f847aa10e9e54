/* The typed requests of meta/requests.h against a scripted service (a
 * thread on a loopback socket that records every frame and answers with
 * replies the test chose):
 * - every request goes out as the message a hand-built protobuf gives,
 *   byte for byte (the wire does not change with the typed API);
 * - every reply comes back as a plain struct holding each field (grants with
 *   and without slot maps, layouts, table contents, published counts), and
 *   an ERROR reply as its status and detail;
 * - a connection lost under a PUBLISH reconnects, runs the replay callback
 *   (which may make requests itself), sends the PUBLISH again and runs the
 *   between callback again, so the checksums follow the new PUBLISH. */
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "meta/conn.h"
#include "meta/proto.h"
#include "meta/requests.h"

#define MAX_RECS 64
#define HANG_GUARD_S 60.0 /* a stuck exchange fails the test instead of hanging it */

static ferry_ctx_t *ctx;

typedef struct rec {
    uint8_t type;
    uint8_t *body;
    size_t len;
    bool dropped; /* the service closed the connection instead of answering */
} rec_t;

/* The scripted service. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int lfd, cfd;
    uint16_t port;
    frame_reader_t rd;
    rec_t recs[MAX_RECS];
    size_t nrecs, hellos;
    ProtobufCMessage *reply[META_TYPE_END]; /* the answer to each request type */
    uint8_t reply_type[META_TYPE_END];
    bool drop_next; /* close the connection on the next request */
    bool stop;
} fk = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .lfd = -1, .cfd = -1};

static void fk_send(uint8_t type, const ProtobufCMessage *m) {
    uint8_t *buf;
    size_t len;
    ferry_errbuf_t err;
    CHECK_OK(meta_encode(ctx, type, m, &buf, &len, &err), err.text);
    (void)meta_write_all(fk.cfd, buf, len, ferry_mono_s() + HANG_GUARD_S, NULL, &err); /* a gone client shows on read */
    ferry_free(ctx, buf);
}

static void fk_close(void) {
    close(fk.cfd);
    fk.cfd = -1;
    frame_reader_free(&fk.rd);
}

static void *fk_main(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&fk.mu);
        bool stop = fk.stop;
        pthread_mutex_unlock(&fk.mu);
        if (stop) break;
        if (fk.cfd < 0) { /* wait for a connection, looking at stop now and then */
            struct pollfd p = {.fd = fk.lfd, .events = POLLIN};
            if (poll(&p, 1, 50) <= 0) continue;
            fk.cfd = accept4(fk.lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fk.cfd < 0) continue;
            frame_reader_init(&fk.rd, ctx, 0);
        }
        uint8_t type;
        const uint8_t *body;
        uint32_t len;
        ferry_errbuf_t err;
        ferry_status_t st = meta_read_frame(fk.cfd, &fk.rd, ferry_mono_s() + 0.05, NULL, &type, &body, &len, &err);
        if (st == FERRY_ERR_TIMEOUT) continue;
        if (st != FERRY_OK) {
            fk_close();
            continue;
        }
        if (type == META_HEARTBEAT || type == META_BYE) continue;
        pthread_mutex_lock(&fk.mu);
        if (type == META_HELLO) {
            fk.hellos++;
            FerryMeta__Welcome w = FERRY_META__WELCOME__INIT;
            w.service_id = 42;
            fk_send(META_WELCOME, &w.base);
        } else {
            CHECK(fk.nrecs < MAX_RECS);
            rec_t *r = &fk.recs[fk.nrecs++];
            r->type = type;
            r->len = len;
            r->body = malloc(len + 1);
            CHECK(r->body);
            memcpy(r->body, body, len);
            if (fk.drop_next) {
                fk.drop_next = false;
                r->dropped = true;
                fk_close();
            } else if (fk.reply[type]) {
                fk_send(fk.reply_type[type], fk.reply[type]);
            }
        }
        pthread_cond_broadcast(&fk.cv);
        pthread_mutex_unlock(&fk.mu);
    }
    if (fk.cfd >= 0) fk_close();
    return NULL;
}

static void script(uint8_t req, uint8_t reply_type, ProtobufCMessage *reply) {
    pthread_mutex_lock(&fk.mu);
    fk.reply[req] = reply;
    fk.reply_type[req] = reply_type;
    pthread_mutex_unlock(&fk.mu);
}

/* Waits until the service recorded n requests (one-way ones arrive after
 * the call returned). */
static void wait_recs(size_t n) {
    double guard = ferry_mono_s() + HANG_GUARD_S;
    pthread_mutex_lock(&fk.mu);
    while (fk.nrecs < n) {
        CHECK(ferry_mono_s() < guard);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&fk.cv, &fk.mu, &ts);
    }
    pthread_mutex_unlock(&fk.mu);
}

/* The request recorded at index i must be of type `type` and carry exactly
 * the bytes of the hand-built message m. */
static void expect_rec(size_t i, uint8_t type, const ProtobufCMessage *m) {
    wait_recs(i + 1);
    pthread_mutex_lock(&fk.mu);
    rec_t r = fk.recs[i];
    pthread_mutex_unlock(&fk.mu);
    if (r.type != type) {
        fprintf(stderr, "request %zu: %s, expected %s\n", i, meta_type_name(r.type), meta_type_name(type));
        exit(1);
    }
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *want = malloc(n + 1);
    CHECK(want);
    protobuf_c_message_pack(m, want);
    if (n != r.len || memcmp(want, r.body, n) != 0) {
        fprintf(stderr, "request %zu (%s): %zu bytes on the wire differ from the %zu-byte hand-built message\n", i,
                meta_type_name(type), r.len, n);
        exit(1);
    }
    free(want);
}

static meta_client_t *client_open(void) {
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", fk.port);
    meta_client_params_t p = {.address = addr, .token = "t", .job = "j", .role = META_ROLE_WRITER, .rank = 0,
                              .world = 1, .lease_ms = 600000, .timeout_ms = 20000};
    meta_client_t *c = NULL;
    ferry_errbuf_t err;
    CHECK_OK(meta_client_create(ctx, &p, &c, &err), err.text);
    return c;
}

/* ---- the calls -------------------------------------------------------------- */

static const uint8_t desc_a[] = {1, 2, 3}, desc_b[] = {9, 8, 7, 6, 5};
static const uint32_t buf_region[] = {0, 0, 1};
static const uint64_t buf_offset[] = {0, 4096, 64};
static const uint64_t sums0[] = {0x1111, 0x2222}, sums1[] = {0x3333};

/* The slot map both sides of the publish test use, plain and as protobuf. */
static meta_slot_map_t plain_map(const meta_bytes_t *regions) {
    return (meta_slot_map_t){.regions = regions, .n_regions = 2, .buffer_region = buf_region,
                             .buffer_offset = buf_offset, .n_buffers = 3, .has_pack = true, .pack_region = 1,
                             .pack_offset = 128, .has_delta = true, .delta_region = 1};
}
static void pb_map(FerryMeta__SlotMap *m, ProtobufCBinaryData *regions) {
    ferry_meta__slot_map__init(m);
    regions[0] = (ProtobufCBinaryData){sizeof desc_a, (uint8_t *)desc_a};
    regions[1] = (ProtobufCBinaryData){sizeof desc_b, (uint8_t *)desc_b};
    m->n_regions = 2;
    m->regions = regions;
    m->n_buffer_region = m->n_buffer_offset = 3;
    m->buffer_region = (uint32_t *)buf_region;
    m->buffer_offset = (uint64_t *)buf_offset;
    m->has_pack = true;
    m->pack_region = 1;
    m->pack_offset = 128;
    m->has_delta = true;
    m->delta_region = 1;
}

static void check_map(const meta_slot_map_t *m) {
    CHECK(m->n_regions == 2 && m->regions[0].len == sizeof desc_a && !memcmp(m->regions[0].data, desc_a, 3));
    CHECK(m->regions[1].len == sizeof desc_b && !memcmp(m->regions[1].data, desc_b, 5));
    CHECK(m->n_buffers == 3 && !memcmp(m->buffer_region, buf_region, sizeof buf_region) &&
          !memcmp(m->buffer_offset, buf_offset, sizeof buf_offset));
    CHECK(m->has_pack && m->pack_region == 1 && m->pack_offset == 128 && m->has_delta && m->delta_region == 1);
}

typedef struct between_ctx {
    int runs;
    uint64_t version;
    meta_pair_sums_t sums[2];
} between_ctx_t;

static ferry_status_t send_sums(meta_client_t *c, void *opaque, ferry_errbuf_t *err) {
    between_ctx_t *b = opaque;
    b->runs++;
    return meta_publish_sums(c, b->version, b->sums, 2, err);
}

static int replays;
static ferry_status_t replay_commit(meta_client_t *c, void *opaque, ferry_errbuf_t *err) {
    (void)opaque;
    replays++;
    static const uint8_t layout[] = {0xAA, 0xBB};
    meta_commit_req_t req = {.layout = {layout, sizeof layout}};
    return meta_commit(c, &req, err);
}

int main(void) {
    ctx = test_ctx();
    ferry_errbuf_t err;
    CHECK_OK(meta_listen("127.0.0.1", 0, &fk.lfd, &fk.port, &err), err.text);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, fk_main, NULL) == 0);
    FerryMeta__Ok ok = FERRY_META__OK__INIT;
    script(META_COMMIT, META_OK, &ok.base);
    script(META_RECLAIM, META_OK, &ok.base);
    script(META_TABLE_COMPLETE, META_OK, &ok.base);
    meta_client_t *c = client_open();
    size_t at = 0; /* requests recorded so far */

    /* COMMIT with the epoch's layouts */
    static const uint8_t mine[] = {1, 2, 3, 4}, w0[] = {5}, w1[] = {6, 7}, r0[] = {8};
    meta_bytes_t ew[2] = {{w0, 1}, {w1, 2}}, er[1] = {{r0, 1}};
    meta_commit_req_t cr = {.layout = {mine, sizeof mine}, .epoch_writers = ew, .n_epoch_writers = 2,
                            .epoch_readers = er, .n_epoch_readers = 1};
    CHECK_OK(meta_commit(c, &cr, &err), err.text);
    {
        FerryMeta__Commit m = FERRY_META__COMMIT__INIT;
        ProtobufCBinaryData pw[2] = {{1, (uint8_t *)w0}, {2, (uint8_t *)w1}}, pr[1] = {{1, (uint8_t *)r0}};
        m.layout = (ProtobufCBinaryData){sizeof mine, (uint8_t *)mine};
        m.n_epoch_writers = 2;
        m.epoch_writers = pw;
        m.n_epoch_readers = 1;
        m.epoch_readers = pr;
        expect_rec(at++, META_COMMIT, &m.base);
    }

    /* GET_LAYOUTS -> LAYOUTS */
    {
        FerryMeta__Layouts l = FERRY_META__LAYOUTS__INIT;
        ProtobufCBinaryData pw[2] = {{1, (uint8_t *)w0}, {2, (uint8_t *)w1}}, pr[1] = {{1, (uint8_t *)r0}};
        l.epoch = 0xE90C;
        l.n_writers = 2;
        l.writers = pw;
        l.n_readers = 1;
        l.readers = pr;
        script(META_GET_LAYOUTS, META_LAYOUTS, &l.base);
        meta_layouts_t *got = NULL;
        CHECK_OK(meta_get_layouts(c, 1500, 77, &got, &err), err.text);
        CHECK(got->epoch == 0xE90C && got->n_writers == 2 && got->n_readers == 1);
        CHECK(got->writers[1].len == 2 && !memcmp(got->writers[1].data, w1, 2) && got->readers[0].data[0] == 8);
        meta_layouts_free(got);
        FerryMeta__GetLayouts g = FERRY_META__GET_LAYOUTS__INIT;
        g.wait_ms = 1500;
        g.known_epoch = 77;
        expect_rec(at++, META_GET_LAYOUTS, &g.base);
    }

    /* PUBLISH with sums inline -> PUBLISHED; then one with sums_follow whose
     * SUMS the between callback sends */
    meta_bytes_t regions[2] = {{desc_a, sizeof desc_a}, {desc_b, sizeof desc_b}};
    meta_slot_map_t map = plain_map(regions);
    between_ctx_t bc = {.version = 8, .sums = {{3, sums0, 2}, {5, sums1, 1}}};
    FerryMeta__Published pubd = FERRY_META__PUBLISHED__INIT;
    uint32_t missing[] = {4, 6};
    pubd.ready = true;
    pubd.acked = 3;
    pubd.n_missing = 2;
    pubd.missing = missing;
    script(META_PUBLISH, META_PUBLISHED, &pubd.base);
    FerryMeta__SlotMap pmap;
    ProtobufCBinaryData pregions[2];
    pb_map(&pmap, pregions);
    FerryMeta__PairSums ps[2] = {FERRY_META__PAIR_SUMS__INIT, FERRY_META__PAIR_SUMS__INIT}, *psp[2] = {&ps[0], &ps[1]};
    ps[0].dst_rank = 3;
    ps[0].n_sums = 2;
    ps[0].sums = (uint64_t *)sums0;
    ps[1].dst_rank = 5;
    ps[1].n_sums = 1;
    ps[1].sums = (uint64_t *)sums1;
    {
        meta_publish_req_t pr = {.epoch = 11, .plan_digest = 22, .version = 7, .slot = 1, .map = &map,
                                 .sums = bc.sums, .n_sums = 2, .wait_acks = true, .wait_ms = 900};
        meta_published_t out = {0};
        CHECK_OK(meta_publish(c, &pr, NULL, NULL, &out, &err), err.text);
        CHECK(out.ready && out.acked == 3 && out.n_missing == 2);
        FerryMeta__Publish m = FERRY_META__PUBLISH__INIT;
        m.epoch = 11;
        m.plan_digest = 22;
        m.version = 7;
        m.slot = 1;
        m.map = &pmap;
        m.n_sums = 2;
        m.sums = psp;
        m.wait_acks = true;
        m.wait_ms = 900;
        expect_rec(at++, META_PUBLISH, &m.base);
    }
    FerryMeta__Publish follow = FERRY_META__PUBLISH__INIT;
    follow.epoch = 11;
    follow.plan_digest = 22;
    follow.version = 8;
    follow.map = &pmap;
    follow.wait_ms = 900;
    follow.sums_follow = true;
    FerryMeta__Sums sm = FERRY_META__SUMS__INIT;
    sm.version = 8;
    sm.n_sums = 2;
    sm.sums = psp;
    meta_publish_req_t fr = {.epoch = 11, .plan_digest = 22, .version = 8, .map = &map, .wait_ms = 900,
                             .sums_follow = true};
    CHECK_OK(meta_publish(c, &fr, send_sums, &bc, NULL, &err), err.text);
    CHECK(bc.runs == 1);
    expect_rec(at++, META_PUBLISH, &follow.base);
    expect_rec(at++, META_SUMS, &sm.base);

    /* RECLAIM, RETIRE (one-way) */
    CHECK_OK(meta_reclaim(c, 7, 250, &err), err.text);
    {
        FerryMeta__Reclaim m = FERRY_META__RECLAIM__INIT;
        m.version = 7;
        m.wait_ms = 250;
        expect_rec(at++, META_RECLAIM, &m.base);
    }
    CHECK_OK(meta_retire(c, 8, &err), err.text);
    {
        FerryMeta__Retire m = FERRY_META__RETIRE__INIT;
        m.version = 8;
        expect_rec(at++, META_RETIRE, &m.base);
    }

    /* READ_BEGIN -> GRANT: one writer with a map and sums, one without a
     * map (as GET_SUMS answers) with sums pending */
    {
        FerryMeta__WriterGrant wg[2] = {FERRY_META__WRITER_GRANT__INIT, FERRY_META__WRITER_GRANT__INIT};
        FerryMeta__WriterGrant *wgp[2] = {&wg[0], &wg[1]};
        wg[0].rank = 1;
        wg[0].incarnation = 0xABC;
        wg[0].slot = 2;
        wg[0].map = &pmap;
        wg[0].n_sums = 2;
        wg[0].sums = (uint64_t *)sums0;
        wg[1].rank = 0;
        wg[1].sums_pending = true;
        FerryMeta__Grant g = FERRY_META__GRANT__INIT;
        g.version = 8;
        g.n_writers = 2;
        g.writers = wgp;
        script(META_READ_BEGIN, META_GRANT, &g.base);
        script(META_GET_SUMS, META_GRANT, &g.base);
        uint32_t writers[] = {0, 1};
        meta_read_begin_req_t rb = {.epoch = 11, .plan_digest = 22, .min_version = 5, .max_version = 9,
                                    .wait_ms = 300, .grant_ms = 20300, .writers = writers, .n_writers = 2};
        meta_grant_t *got = NULL;
        CHECK_OK(meta_read_begin(c, &rb, &got, &err), err.text);
        CHECK(got->version == 8 && got->n_writers == 2);
        const meta_writer_grant_t *a = &got->writers[0], *b = &got->writers[1];
        CHECK(a->rank == 1 && a->incarnation == 0xABC && a->slot == 2 && a->has_map && !a->sums_pending);
        check_map(&a->map);
        CHECK(a->n_sums == 2 && a->sums[0] == 0x1111 && a->sums[1] == 0x2222);
        CHECK(b->rank == 0 && !b->has_map && b->sums_pending && b->n_sums == 0);
        meta_grant_free(got);
        FerryMeta__ReadBegin m = FERRY_META__READ_BEGIN__INIT;
        m.epoch = 11;
        m.plan_digest = 22;
        m.min_version = 5;
        m.max_version = 9;
        m.wait_ms = 300;
        m.grant_ms = 20300;
        m.n_writers = 2;
        m.writers = writers;
        expect_rec(at++, META_READ_BEGIN, &m.base);

        got = NULL;
        CHECK_OK(meta_get_sums(c, 8, writers + 1, 1, 450, &got, &err), err.text);
        CHECK(got->n_writers == 2 && got->writers[0].n_sums == 2);
        meta_grant_free(got);
        FerryMeta__GetSums gs = FERRY_META__GET_SUMS__INIT;
        gs.version = 8;
        gs.n_writers = 1;
        gs.writers = writers + 1;
        gs.wait_ms = 450;
        expect_rec(at++, META_GET_SUMS, &gs.base);
    }

    /* READ_END -> READ_ENDED */
    {
        FerryMeta__ReadEnded re = FERRY_META__READ_ENDED__INIT;
        re.retired = true;
        script(META_READ_END, META_READ_ENDED, &re.base);
        bool retired = false;
        CHECK_OK(meta_read_end(c, 8, true, &retired, &err), err.text);
        CHECK(retired);
        FerryMeta__ReadEnd m = FERRY_META__READ_END__INIT;
        m.version = 8;
        m.ok = true;
        expect_rec(at++, META_READ_END, &m.base);
    }

    /* TABLE_COMPLETE, TABLE_GET -> TABLE_CONTENTS, TABLE_DROP */
    {
        static const int64_t shape[] = {300, 1100}, off[] = {0, 0}, ext[] = {170, 1100};
        static const uint64_t tsums[] = {7, 8, 9};
        meta_table_entry_t te = {.name = "model.w", .dtype = 10, .ndim = 2, .shape = shape, .offset = off,
                                 .extent = ext, .region = 0, .byte_offset = 64, .tile_sums = tsums, .n_tile_sums = 3};
        meta_table_seq_t seq = {.seq_id = 5, .regions = regions, .n_regions = 1, .entries = &te, .n_entries = 1};
        CHECK_OK(meta_table_complete(c, &seq, &err), err.text);
        FerryMeta__TableEntry pe = FERRY_META__TABLE_ENTRY__INIT, *pep = &pe;
        pe.name = "model.w";
        pe.dtype = 10;
        pe.n_shape = pe.n_offset = pe.n_extent = 2;
        pe.shape = (int64_t *)shape;
        pe.offset = (int64_t *)off;
        pe.extent = (int64_t *)ext;
        pe.byte_offset = 64;
        pe.n_tile_sums = 3;
        pe.tile_sums = (uint64_t *)tsums;
        FerryMeta__TableComplete tc = FERRY_META__TABLE_COMPLETE__INIT;
        tc.seq_id = 5;
        tc.n_regions = 1;
        tc.regions = pregions;
        tc.n_entries = 1;
        tc.entries = &pep;
        expect_rec(at++, META_TABLE_COMPLETE, &tc.base);

        FerryMeta__TableMember mb[2] = {FERRY_META__TABLE_MEMBER__INIT, FERRY_META__TABLE_MEMBER__INIT};
        FerryMeta__TableMember *mbp[2] = {&mb[0], &mb[1]};
        FerryMeta__TableComplete empty = FERRY_META__TABLE_COMPLETE__INIT;
        empty.seq_id = 5;
        mb[0].rank = 2;
        mb[0].incarnation = 0x77;
        mb[0].seq = &tc;
        mb[1].rank = 0;
        mb[1].seq = &empty;
        FerryMeta__TableContents cts = FERRY_META__TABLE_CONTENTS__INIT;
        cts.seq_id = 5;
        cts.n_members = 2;
        cts.members = mbp;
        script(META_TABLE_GET, META_TABLE_CONTENTS, &cts.base);
        meta_table_contents_t *got = NULL;
        CHECK_OK(meta_table_get(c, 5, 700, &got, &err), err.text);
        CHECK(got->seq_id == 5 && got->n_members == 2);
        const meta_table_member_t *m0 = &got->members[0];
        CHECK(m0->rank == 2 && m0->incarnation == 0x77 && m0->seq.seq_id == 5 && m0->seq.n_regions == 1 &&
              m0->seq.regions[0].len == sizeof desc_a && m0->seq.n_entries == 1);
        const meta_table_entry_t *e = &m0->seq.entries[0];
        CHECK(!strcmp(e->name, "model.w") && e->dtype == 10 && e->ndim == 2 && e->shape[1] == 1100 &&
              e->extent[0] == 170 && e->byte_offset == 64 && e->n_tile_sums == 3 && e->tile_sums[2] == 9);
        CHECK(got->members[1].rank == 0 && got->members[1].seq.n_entries == 0 && got->members[1].seq.n_regions == 0);
        meta_table_contents_free(got);
        FerryMeta__TableGet tg = FERRY_META__TABLE_GET__INIT;
        tg.seq_id = 5;
        tg.wait_ms = 700;
        expect_rec(at++, META_TABLE_GET, &tg.base);

        CHECK_OK(meta_table_drop(c, 5, &err), err.text);
        FerryMeta__TableDrop td = FERRY_META__TABLE_DROP__INIT;
        td.seq_id = 5;
        expect_rec(at++, META_TABLE_DROP, &td.base);
    }

    /* an ERROR reply: its status and detail; *out untouched */
    {
        FerryMeta__Error e = FERRY_META__ERROR__INIT;
        e.status = FERRY_ERR_STALE;
        e.detail = "epoch 0000000000000b is not the current one";
        script(META_READ_BEGIN, META_ERROR, &e.base);
        meta_read_begin_req_t rb = {.epoch = 11};
        meta_grant_t *got = (meta_grant_t *)&rb; /* a sentinel: must stay as it is */
        CHECK_FAILS(meta_read_begin(c, &rb, &got, &err), FERRY_ERR_STALE, err.text, "is not the current one");
        CHECK(got == (meta_grant_t *)&rb);
        at++;
    }

    /* a connection lost under a PUBLISH: reconnect, replay (a COMMIT), the
     * PUBLISH again, the between callback again, then the reply */
    {
        meta_client_set_replay(c, replay_commit, NULL);
        wait_recs(at);
        pthread_mutex_lock(&fk.mu);
        fk.drop_next = true;
        size_t hellos = fk.hellos;
        pthread_mutex_unlock(&fk.mu);
        bc.runs = 0;
        meta_published_t out = {0};
        CHECK_OK(meta_publish(c, &fr, send_sums, &bc, &out, &err), err.text);
        CHECK(bc.runs == 2 && replays == 1 && out.acked == 3);
        pthread_mutex_lock(&fk.mu);
        CHECK(fk.hellos == hellos + 1);
        CHECK(fk.recs[at].type == META_PUBLISH && fk.recs[at].dropped);
        pthread_mutex_unlock(&fk.mu);
        at++;
        /* the SUMS sent after the dropped PUBLISH went down with its
         * connection; on the new one: the replay, the PUBLISH, its SUMS */
        size_t k = at;
        static const uint8_t layout[] = {0xAA, 0xBB};
        FerryMeta__Commit m = FERRY_META__COMMIT__INIT;
        m.layout = (ProtobufCBinaryData){sizeof layout, (uint8_t *)layout};
        expect_rec(k, META_COMMIT, &m.base);
        expect_rec(k + 1, META_PUBLISH, &follow.base);
        expect_rec(k + 2, META_SUMS, &sm.base);
    }

    meta_client_destroy(c);
    pthread_mutex_lock(&fk.mu);
    fk.stop = true;
    pthread_mutex_unlock(&fk.mu);
    pthread_join(th, NULL);
    close(fk.lfd);
    for (size_t i = 0; i < fk.nrecs; i++) free(fk.recs[i].body);
    ferry_ctx_destroy(ctx);
    printf("test_meta_requests: every typed request byte-identical to its hand-built message, every reply field "
           "read back, errors passed on, reconnect + replay + between under a PUBLISH\n");
    return 0;
}
