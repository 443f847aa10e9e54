/* The metadata service: one thread, one poll loop over the listening socket,
 * the members' connections and a wake pipe. Requests that must wait
 * (layouts not complete, no version ready, readers not done) are parked on
 * their connection and answered when a change makes them answerable or
 * their deadline passes; the poll timeout is the nearest deadline, so
 * nothing here polls on a timer. See docs/protocol.md. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/config.h"
#include "ferry/meta.h"
#include "meta/conn.h"
#include "meta/peers.h"
#include "meta/proto.h"
#include "meta/token.h"

#define HELLO_WAIT_S 5.0 /* a connection must introduce itself this fast */
#define MAX_RECORDS 64   /* versions a writer may keep published at once */
#define ACCEPT_BACKOFF_S 0.1 /* accept failing for want of memory or descriptors: pause listening this long */
#define ACCEPTS_PER_TURN 1024 /* then members' frames get a turn */
#define FD_RESERVE 128        /* descriptors the default connection cap leaves to the rest of the process */

typedef struct svc_conn {
    int fd;
    uint8_t peer[16];     /* the peer's address (meta_sockaddr_key), counted in s->peers */
    bool pending;         /* accepted, no HELLO yet: counted in s->npending */
    frame_reader_t rd;
    uint8_t *out;
    size_t out_len, out_cap, out_off;
    bool dead;            /* closed at the end of this loop turn */
    bool bye;             /* it said BYE: it left the job on purpose */
    bool joined;          /* HELLO accepted */
    uint32_t role, rank;
    uint64_t incarnation;
    double deadline;      /* lease (or HELLO) deadline */
    uint32_t lease_ms;
    uint8_t parked;       /* META_* type of a parked request, 0 if none */
    ProtobufCMessage *parked_msg;
    double parked_deadline;
    uint64_t pin_version; /* reader: version of its read grant (0: none) */
    double pin_deadline;
} svc_conn_t;

typedef struct svc_member {
    svc_conn_t *conn;    /* NULL while absent */
    uint8_t *commit;     /* encoded RankLayout, kept across reconnects */
    size_t commit_len;
    uint64_t commit_digest;
    char host[META_MAX_NAME + 1];
    uint32_t pid;
    uint64_t acked, published;
    bool seen;           /* connected to this service at some point */
    double left_at;      /* when it last left (0: never, or back since) */
    char left_why[200];  /* how it left and what it was doing then */
    uint64_t retired_max; /* writer: newest version it retired or reclaimed */
    FerryMeta__Publish *recs[MAX_RECORDS]; /* writer: published versions still readable */
    FerryMeta__Sums *sums[MAX_RECORDS];    /* their checksums when they followed the PUBLISH */
    FerryMeta__TableComplete *tseq[MAX_RECORDS]; /* table member: completed sequence ids */
    size_t ntseq;
    size_t nrecs;
} svc_member_t;

struct ferry_meta_service {
    ferry_ctx_t *ctx;
    ferry_errbuf_t err;
    pthread_t thread;
    int listen_fd, wake[2];
    atomic_bool stop;
    char address[META_HOST_MAX + 16];
    char token[META_MAX_TOKEN + 1];
    char token_path[META_TOKEN_PATH]; /* the generated token's file, removed at the end ("" if none) */
    uint32_t lease_ms, max_body;
    uint32_t max_conns, max_peer_conns, max_pending;
    meta_peers_t peers;      /* connections per peer address */
    size_t npending;         /* connections that have not said HELLO */
    int spare_fd;            /* held open so that an accept can succeed when out of descriptors */
    bool fd_short;           /* accept is failing for want of descriptors (logged once per episode) */
    bool cap_logged;         /* the connection cap was reached (logged once) */
    double accept_resume;    /* the listening socket is not polled before this */
    uint64_t service_id;
    bool have_job;
    char job[META_MAX_NAME + 1];
    uint32_t world[META_ROLE_END];   /* by role: [1] writers, [2] readers, [4] table members */
    svc_member_t *members[META_ROLE_END];
    svc_conn_t **conns;
    size_t nconns, cap_conns;
    uint64_t epoch;          /* digest of every member's layout; 0 until all committed */
    double grace_end;        /* until then, members known only from a replayed epoch count as live */
    uint64_t plan_digest;    /* first plan digest reported in this epoch */
};

static const char *role_name(uint32_t role) {
    return role == META_ROLE_WRITER   ? "writer"
           : role == META_ROLE_READER ? "reader"
           : role == META_ROLE_TABLE  ? "table member"
                                      : "observer";
}

/* ---- sending ------------------------------------------------------------------ */

static void conn_flush(svc_conn_t *c) {
    while (!c->dead && c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN) c->dead = true;
            return;
        }
        c->out_off += (size_t)w;
    }
    if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
}

static void send_msg(ferry_meta_service_t *s, svc_conn_t *c, uint8_t type, const ProtobufCMessage *msg) {
    if (c->dead) return;
    uint8_t *buf;
    size_t len;
    ferry_errbuf_t err;
    if (meta_encode(s->ctx, type, msg, &buf, &len, &err) != FERRY_OK) {
        ferry_log(s->ctx, FERRY_LOG_ERROR, "meta service: %s", err.text);
        c->dead = true;
        return;
    }
    if (c->out_off > 0 && c->out_off == c->out_len) c->out_off = c->out_len = 0;
    if (ferry_grow(s->ctx, (void **)&c->out, 1, &c->out_cap, c->out_len + len) != 0) {
        c->dead = true;
    } else {
        memcpy(c->out + c->out_len, buf, len);
        c->out_len += len;
        conn_flush(c);
    }
    ferry_free(s->ctx, buf);
}

static void send_error(ferry_meta_service_t *s, svc_conn_t *c, ferry_status_t st, const char *fmt, ...)
    FERRY_PRINTF(4, 5);
static void send_error(ferry_meta_service_t *s, svc_conn_t *c, ferry_status_t st, const char *fmt, ...) {
    char detail[META_MAX_DETAIL];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    ferry_log(s->ctx, FERRY_LOG_DEBUG, "meta service: error to %s %u: %s", role_name(c->role), c->rank, detail);
    FerryMeta__Error e = FERRY_META__ERROR__INIT;
    e.status = (uint32_t)st;
    e.detail = detail;
    send_msg(s, c, META_ERROR, &e.base);
}

static void send_ok(ferry_meta_service_t *s, svc_conn_t *c) {
    FerryMeta__Ok ok = FERRY_META__OK__INIT;
    send_msg(s, c, META_OK, &ok.base);
}

static void broadcast_event(ferry_meta_service_t *s, uint32_t kind, uint32_t role, uint32_t rank,
                            uint64_t version, const char *detail) {
    FerryMeta__Event ev = FERRY_META__EVENT__INIT;
    ev.kind = kind;
    ev.role = role;
    ev.rank = rank;
    ev.version = version;
    ev.detail = (char *)(detail ? detail : "");
    for (size_t i = 0; i < s->nconns; i++) {
        svc_conn_t *c = s->conns[i];
        if (c->joined && !(c->role == role && c->rank == rank)) send_msg(s, c, META_EVENT, &ev.base);
    }
}

/* ---- state ------------------------------------------------------------------------ */


static svc_member_t *member_of(ferry_meta_service_t *s, const svc_conn_t *c) {
    if (!c->joined || c->role == META_ROLE_OBSERVER) return NULL;
    return &s->members[c->role][c->rank];
}

static void drop_record(ferry_meta_service_t *s, svc_member_t *m, size_t i) {
    meta_free(s->ctx, &m->recs[i]->base);
    meta_free(s->ctx, m->sums[i] ? &m->sums[i]->base : NULL);
    m->nrecs--;
    m->recs[i] = m->recs[m->nrecs];
    m->sums[i] = m->sums[m->nrecs];
    m->sums[m->nrecs] = NULL;
}

static void drop_table_seq(ferry_meta_service_t *s, svc_member_t *m, uint64_t seq_id, bool all) {
    for (size_t i = m->ntseq; i-- > 0;)
        if (all || m->tseq[i]->seq_id == seq_id) {
            meta_free(s->ctx, &m->tseq[i]->base);
            m->tseq[i] = m->tseq[--m->ntseq];
        }
}

static FerryMeta__TableComplete *find_table_seq(svc_member_t *m, uint64_t seq_id) {
    for (size_t i = 0; i < m->ntseq; i++)
        if (m->tseq[i]->seq_id == seq_id) return m->tseq[i];
    return NULL;
}

static FerryMeta__Publish *find_record(svc_member_t *m, uint64_t version) {
    for (size_t i = 0; i < m->nrecs; i++)
        if (m->recs[i]->version == version) return m->recs[i];
    return NULL;
}

/* The checksums a writer's record holds for reader `rank`: *pending if they
 * are still to come; NULL with !*pending if there are none for it. */
static const FerryMeta__PairSums *record_sums(svc_member_t *m, uint64_t version, uint32_t rank, bool *pending) {
    *pending = false;
    for (size_t i = 0; i < m->nrecs; i++) {
        if (m->recs[i]->version != version) continue;
        FerryMeta__PairSums **ps = m->recs[i]->sums;
        size_t n = m->recs[i]->n_sums;
        if (m->recs[i]->sums_follow) {
            if (!m->sums[i]) {
                *pending = true;
                return NULL;
            }
            ps = m->sums[i]->sums;
            n = m->sums[i]->n_sums;
        }
        for (size_t k = 0; k < n; k++)
            if (ps[k]->dst_rank == rank) return ps[k];
        return NULL;
    }
    return NULL;
}

static void drop_version(ferry_meta_service_t *s, svc_member_t *m, uint64_t version) {
    for (size_t i = 0; i < m->nrecs; i++)
        if (m->recs[i]->version == version) {
            drop_record(s, m, i);
            return;
        }
}

/* Every writer has published `version` in the current epoch. */
static bool version_ready(ferry_meta_service_t *s, uint64_t version) {
    if (s->epoch == 0 || !s->have_job) return false;
    for (uint32_t w = 0; w < s->world[META_ROLE_WRITER]; w++) {
        FerryMeta__Publish *p = find_record(&s->members[META_ROLE_WRITER][w], version);
        if (!p || p->epoch != s->epoch) return false;
    }
    return true;
}

/* Newest ready version in [lo, hi] (hi 0: unbounded); 0 if none. */
static uint64_t newest_ready(ferry_meta_service_t *s, uint64_t lo, uint64_t hi) {
    if (!s->have_job || s->world[META_ROLE_WRITER] == 0) return 0;
    svc_member_t *w0 = &s->members[META_ROLE_WRITER][0];
    uint64_t best = 0;
    for (size_t i = 0; i < w0->nrecs; i++) {
        uint64_t v = w0->recs[i]->version;
        if (v >= lo && (hi == 0 || v <= hi) && v > best && version_ready(s, v)) best = v;
    }
    return best;
}

static void recompute_epoch(ferry_meta_service_t *s) {
    uint64_t old = s->epoch;
    s->epoch = 0;
    if (!s->have_job) return;
    XXH3_state_t *h = XXH3_createState();
    if (!h) return;
    XXH3_64bits_reset(h);
    /* both sides must be known: a side none of whose members said HELLO has world 0 */
    bool complete = s->world[META_ROLE_WRITER] > 0 && s->world[META_ROLE_READER] > 0;
    for (uint32_t role = META_ROLE_WRITER; role <= META_ROLE_READER && complete; role++)
        for (uint32_t r = 0; r < s->world[role]; r++) {
            svc_member_t *m = &s->members[role][r];
            if (!m->commit) {
                complete = false;
                break;
            }
            XXH3_64bits_update(h, &m->commit_digest, sizeof m->commit_digest);
        }
    if (complete) s->epoch = XXH3_64bits_digest(h) | 1; /* never 0 */
    XXH3_freeState(h);
    if (s->epoch != old) s->plan_digest = 0;
}

/* ---- departures: errors that follow a member's leaving name it ---------------------- */

/* What c's member was doing as it left (" while ..."), for its departure. */
static void conn_activity(const svc_conn_t *c, const svc_member_t *m, double now, char *buf, size_t size) {
    const ProtobufCMessage *pm = c->parked_msg;
    buf[0] = '\0';
    if (c->parked == META_PUBLISH)
        snprintf(buf, size, " while waiting for readers to acknowledge version %llu",
                 (unsigned long long)((const FerryMeta__Publish *)pm)->version);
    else if (c->parked == META_RECLAIM)
        snprintf(buf, size, " while reclaiming version %llu", (unsigned long long)((const FerryMeta__Reclaim *)pm)->version);
    else if (c->parked == META_GET_SUMS)
        snprintf(buf, size, " while reading version %llu", (unsigned long long)((const FerryMeta__GetSums *)pm)->version);
    else if (c->pin_version && c->pin_deadline > now)
        snprintf(buf, size, " while reading version %llu", (unsigned long long)c->pin_version);
    else if (c->parked == META_READ_BEGIN)
        snprintf(buf, size, " while waiting for a version >= %llu",
                 (unsigned long long)((const FerryMeta__ReadBegin *)pm)->min_version);
    else if (!m->commit && (c->role == META_ROLE_WRITER || c->role == META_ROLE_READER))
        snprintf(buf, size, " before committing its layout");
    else if (c->role == META_ROLE_WRITER && m->nrecs)
        snprintf(buf, size, " while version %llu was published", (unsigned long long)m->recs[m->nrecs - 1]->version);
    else if (c->role == META_ROLE_WRITER && m->published)
        snprintf(buf, size, " after publishing version %llu", (unsigned long long)m->published);
    else if (c->role == META_ROLE_READER && m->acked)
        snprintf(buf, size, " holding version %llu", (unsigned long long)m->acked);
}

/* A member for an error: "writer 0" while it is there; one that left also
 * with its host, pid, when and how it left: "writer 0 (host h, pid 12, left
 * 3.1 s ago: its connection closed while version 4 was published)"; now < 0
 * leaves out when. */
static void member_text(ferry_meta_service_t *s, uint32_t role, uint32_t rank, double now, char *buf, size_t size) {
    const svc_member_t *m = &s->members[role][rank];
    if (!m->conn && m->left_at > 0 && now < 0) /* as it leaves (the event): no "ago" */
        snprintf(buf, size, "%s %u (host %s, pid %u, left: %s)", role_name(role), rank, m->host, m->pid, m->left_why);
    else if (!m->conn && m->left_at > 0)
        snprintf(buf, size, "%s %u (host %s, pid %u, left %.1f s ago: %s)", role_name(role), rank, m->host, m->pid,
                 now - m->left_at, m->left_why);
    else if (!m->conn && !m->seen)
        snprintf(buf, size, "%s %u (not connected to this service)", role_name(role), rank);
    else
        snprintf(buf, size, "%s %u", role_name(role), rank);
}

/* Newest version in [lo, hi] (hi 0: unbounded) some writer holds published;
 * lo if none. */
static uint64_t newest_published(ferry_meta_service_t *s, uint64_t lo, uint64_t hi) {
    uint64_t best = lo;
    for (uint32_t w = 0; w < s->world[META_ROLE_WRITER]; w++) {
        const svc_member_t *m = &s->members[META_ROLE_WRITER][w];
        for (size_t i = 0; i < m->nrecs; i++) {
            uint64_t v = m->recs[i]->version;
            if (v > best && (hi == 0 || v <= hi)) best = v;
        }
    }
    return best;
}

/* Why `version` is not ready: each writer that does not hold it, those that
 * left first (they are the cause; the others may only have let it go). */
static void not_ready_text(ferry_meta_service_t *s, uint64_t version, double now, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = '\0';
    for (int gone = 1; gone >= 0; gone--)
        for (uint32_t w = 0; w < s->world[META_ROLE_WRITER] && at + 64 < size; w++) {
            const svc_member_t *m = &s->members[META_ROLE_WRITER][w];
            if (find_record((svc_member_t *)m, version) || (m->conn == NULL) != gone) continue;
            char who[META_MAX_NAME + 320];
            member_text(s, META_ROLE_WRITER, w, now, who, sizeof who);
            const char *what = gone ? (m->published >= version ? "no longer holds it" : "has not published it")
                               : m->retired_max >= version ? "let it go"
                                                           : "has not published it yet";
            int k = snprintf(buf + at, size - at, "%s%s %s", at ? "; " : "", who, what);
            at += k > 0 ? (size_t)k : 0;
            if (at >= size) at = size - 1;
        }
}

/* Text naming the members that have not committed (for a timeout); how many. */
static unsigned missing_commits(ferry_meta_service_t *s, char *buf, size_t size) {
    size_t at = 0;
    unsigned n = 0;
    buf[0] = '\0';
    for (uint32_t role = META_ROLE_WRITER; role <= META_ROLE_READER; role++)
        for (uint32_t r = 0; r < s->world[role] && at + 32 < size; r++)
            if (!s->members[role][r].commit) {
                n++;
                char who[META_MAX_NAME + 320];
                member_text(s, role, r, ferry_mono_s(), who, sizeof who);
                at += (size_t)snprintf(buf + at, size - at, "%s%s", at ? ", " : "", who);
            }
    return n;
}

/* ---- parked requests ---------------------------------------------------------------- */

static void unpark(ferry_meta_service_t *s, svc_conn_t *c) {
    meta_free(s->ctx, c->parked_msg);
    c->parked_msg = NULL;
    c->parked = 0;
}

static bool try_layouts(ferry_meta_service_t *s, svc_conn_t *c, bool expired) {
    if (s->epoch == 0) {
        if (!expired) return false;
        char miss[1024];
        if (!s->world[META_ROLE_WRITER] || !s->world[META_ROLE_READER]) {
            send_error(s, c, FERRY_ERR_TIMEOUT, "layouts incomplete: no %s has connected",
                       !s->world[META_ROLE_WRITER] ? "writer" : "reader");
            return true;
        }
        unsigned n = missing_commits(s, miss, sizeof miss);
        send_error(s, c, FERRY_ERR_TIMEOUT, "layouts incomplete: %s %s not committed", miss, n > 1 ? "have" : "has");
        return true;
    }
    FerryMeta__Layouts l = FERRY_META__LAYOUTS__INIT;
    if (((const FerryMeta__GetLayouts *)c->parked_msg)->known_epoch == s->epoch) {
        l.epoch = s->epoch; /* unchanged: the caller has them */
        send_msg(s, c, META_LAYOUTS, &l.base);
        return true;
    }
    uint32_t nw = s->world[META_ROLE_WRITER], nr = s->world[META_ROLE_READER];
    ProtobufCBinaryData *bw = ferry_calloc(s->ctx, nw ? nw : 1, sizeof *bw);
    ProtobufCBinaryData *br = ferry_calloc(s->ctx, nr ? nr : 1, sizeof *br);
    if (!bw || !br) {
        send_error(s, c, FERRY_ERR_NO_MEMORY, "out of memory answering GET_LAYOUTS");
    } else {
        for (uint32_t r = 0; r < nw; r++)
            bw[r] = (ProtobufCBinaryData){s->members[META_ROLE_WRITER][r].commit_len,
                                          s->members[META_ROLE_WRITER][r].commit};
        for (uint32_t r = 0; r < nr; r++)
            br[r] = (ProtobufCBinaryData){s->members[META_ROLE_READER][r].commit_len,
                                          s->members[META_ROLE_READER][r].commit};
        l.epoch = s->epoch;
        l.n_writers = nw;
        l.writers = bw;
        l.n_readers = nr;
        l.readers = br;
        send_msg(s, c, META_LAYOUTS, &l.base);
    }
    ferry_free(s->ctx, bw);
    ferry_free(s->ctx, br);
    return true;
}

static bool try_publish_acks(ferry_meta_service_t *s, svc_conn_t *c, bool expired) {
    const FerryMeta__Publish *p = (const void *)c->parked_msg;
    uint32_t nr = s->world[META_ROLE_READER], acked = 0, missing = 0;
    uint32_t *miss = ferry_calloc(s->ctx, nr ? nr : 1, sizeof *miss);
    if (!miss) {
        send_error(s, c, FERRY_ERR_NO_MEMORY, "out of memory answering PUBLISH");
        return true;
    }
    double now = ferry_mono_s();
    for (uint32_t r = 0; r < nr; r++) {
        svc_member_t *m = &s->members[META_ROLE_READER][r];
        /* live readers are waited for; after a restart, also those the replayed
         * epoch names that have not had a lease's time to come back */
        bool live = m->conn || (!m->seen && m->commit && now < s->grace_end);
        if (m->acked >= p->version) acked++;
        else if (live) miss[missing++] = r;
    }
    if (missing > 0 && !expired) {
        ferry_free(s->ctx, miss);
        return false;
    }
    FerryMeta__Published out = FERRY_META__PUBLISHED__INIT;
    out.ready = version_ready(s, p->version);
    out.acked = acked;
    out.n_missing = missing;
    out.missing = miss;
    send_msg(s, c, META_PUBLISHED, &out.base);
    ferry_free(s->ctx, miss);
    return true;
}

static bool try_reclaim(ferry_meta_service_t *s, svc_conn_t *c, bool expired, double now) {
    const FerryMeta__Reclaim *r = (const void *)c->parked_msg;
    char holders[512];
    size_t at = 0;
    holders[0] = '\0';
    for (size_t i = 0; i < s->nconns; i++) {
        svc_conn_t *o = s->conns[i];
        if (o->joined && o->role == META_ROLE_READER && o->pin_version == r->version && o->pin_deadline > now &&
            at + 16 < sizeof holders)
            at += (size_t)snprintf(holders + at, sizeof holders - at, "%s%u", at ? ", " : "", o->rank);
    }
    if (at == 0) {
        send_ok(s, c);
        return true;
    }
    if (!expired) return false;
    send_error(s, c, FERRY_ERR_BUSY, "version %llu is still being read by reader(s) %s",
               (unsigned long long)r->version, holders);
    return true;
}

/* Sends a GRANT of `version` from the named writers (which hold it): their
 * checksums for c's rank, and with_map their slot maps (READ_BEGIN) or not
 * (GET_SUMS). False if it sent an ERROR instead. */
static bool send_grant(ferry_meta_service_t *s, svc_conn_t *c, uint64_t version, const uint32_t *writers, size_t n,
                       bool with_map) {
    for (size_t i = 0; i < n; i++)
        if (writers[i] >= s->world[META_ROLE_WRITER]) {
            send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "%s names writer %u of %u", meta_type_name(c->parked),
                       writers[i], s->world[META_ROLE_WRITER]);
            return false;
        }
    FerryMeta__WriterGrant *wg = ferry_calloc(s->ctx, n ? n : 1, sizeof *wg);
    FerryMeta__WriterGrant **wp = ferry_calloc(s->ctx, n ? n : 1, sizeof *wp);
    bool ok = wg && wp;
    if (!ok) {
        send_error(s, c, FERRY_ERR_NO_MEMORY, "out of memory answering %s", meta_type_name(c->parked));
    } else {
        for (size_t i = 0; i < n; i++) {
            svc_member_t *m = &s->members[META_ROLE_WRITER][writers[i]];
            ferry_meta__writer_grant__init(&wg[i]);
            wg[i].rank = writers[i];
            if (with_map) {
                const FerryMeta__Publish *p = find_record(m, version);
                wg[i].incarnation = m->conn ? m->conn->incarnation : 0;
                wg[i].slot = p->slot;
                wg[i].map = p->map;
            }
            bool pending;
            const FerryMeta__PairSums *ps = record_sums(m, version, c->rank, &pending);
            wg[i].sums_pending = pending;
            if (ps) {
                wg[i].n_sums = ps->n_sums;
                wg[i].sums = ps->sums;
            }
            wp[i] = &wg[i];
        }
        FerryMeta__Grant g = FERRY_META__GRANT__INIT;
        g.version = version;
        g.n_writers = n;
        g.writers = wp;
        send_msg(s, c, META_GRANT, &g.base);
    }
    ferry_free(s->ctx, wg);
    ferry_free(s->ctx, wp);
    return ok;
}

static bool try_read_begin(ferry_meta_service_t *s, svc_conn_t *c, bool expired, double now) {
    const FerryMeta__ReadBegin *rb = (const void *)c->parked_msg;
    if (rb->epoch != s->epoch || s->epoch == 0) {
        send_error(s, c, FERRY_ERR_STALE, "layout epoch %016llx is not the job's current one (%016llx)",
                   (unsigned long long)rb->epoch, (unsigned long long)s->epoch);
        return true;
    }
    if (s->plan_digest && rb->plan_digest != s->plan_digest) { /* set while this request waited */
        send_error(s, c, FERRY_ERR_MISMATCH, "reader %u planned digest %016llx, the writers %016llx (members plan alike from the same layouts and pack_limit)", c->rank,
                   (unsigned long long)rb->plan_digest, (unsigned long long)s->plan_digest);
        return true;
    }
    uint64_t v = newest_ready(s, rb->min_version, rb->max_version);
    if (v == 0 && rb->max_version) /* an exact version some writer already let go of never comes back */
        for (uint32_t w = 0; w < s->world[META_ROLE_WRITER]; w++) {
            svc_member_t *m = &s->members[META_ROLE_WRITER][w];
            if (m->retired_max >= rb->max_version && !find_record(m, rb->max_version)) {
                char why[1024];
                not_ready_text(s, rb->max_version, now, why, sizeof why);
                send_error(s, c, FERRY_ERR_STALE, "version %llu is no longer available: %s",
                           (unsigned long long)rb->max_version, why);
                return true;
            }
        }
    if (v == 0) {
        uint64_t any = newest_ready(s, 1, 0);
        if (rb->max_version && any > rb->max_version) {
            send_error(s, c, FERRY_ERR_STALE, "version %llu is no longer available (newest ready: %llu)",
                       (unsigned long long)rb->max_version, (unsigned long long)any);
            return true;
        }
        if (!expired) return false;
        char why[1024];
        not_ready_text(s, newest_published(s, rb->min_version, rb->max_version), now, why, sizeof why);
        send_error(s, c, FERRY_ERR_TIMEOUT, "no version >= %llu became ready within %u ms (newest ready: %llu)%s%s",
                   (unsigned long long)rb->min_version, rb->wait_ms, (unsigned long long)any, why[0] ? ": " : "",
                   why);
        return true;
    }
    if (!send_grant(s, c, v, rb->writers, rb->n_writers, true)) return true;
    c->pin_version = v;
    c->pin_deadline = now + (rb->grant_ms ? rb->grant_ms : 60000) / 1000.0;
    return true;
}

static bool try_get_sums(ferry_meta_service_t *s, svc_conn_t *c, bool expired) {
    const FerryMeta__GetSums *gs = (const void *)c->parked_msg;
    size_t n = gs->n_writers;
    for (size_t i = 0; i < n; i++) {
        uint32_t w = gs->writers[i];
        if (w >= s->world[META_ROLE_WRITER] || !find_record(&s->members[META_ROLE_WRITER][w], gs->version)) {
            char who[META_MAX_NAME + 320];
            if (w < s->world[META_ROLE_WRITER]) member_text(s, META_ROLE_WRITER, w, ferry_mono_s(), who, sizeof who);
            else snprintf(who, sizeof who, "writer %u of %u", w, s->world[META_ROLE_WRITER]);
            send_error(s, c, FERRY_ERR_STALE, "version %llu is no longer held by %s", (unsigned long long)gs->version,
                       who);
            return true;
        }
        bool pending;
        record_sums(&s->members[META_ROLE_WRITER][w], gs->version, c->rank, &pending);
        if (pending) {
            if (!expired) return false;
            send_error(s, c, FERRY_ERR_TIMEOUT, "writer %u sent no checksums for version %llu within %u ms", w,
                       (unsigned long long)gs->version, gs->wait_ms);
            return true;
        }
    }
    send_grant(s, c, gs->version, gs->writers, n, false);
    return true;
}

static bool try_table_get(ferry_meta_service_t *s, svc_conn_t *c, bool expired) {
    const FerryMeta__TableGet *tg = (const void *)c->parked_msg;
    uint32_t n = s->world[META_ROLE_TABLE];
    char miss[512];
    size_t at = 0;
    miss[0] = '\0';
    for (uint32_t r = 0; r < n; r++)
        if (!find_table_seq(&s->members[META_ROLE_TABLE][r], tg->seq_id) && at + 16 < sizeof miss)
            at += (size_t)snprintf(miss + at, sizeof miss - at, "%s%u", at ? ", " : "", r);
    if (at) {
        if (!expired) return false;
        send_error(s, c, FERRY_ERR_TIMEOUT, "sequence %llu is not complete within %u ms: table member(s) %s did not complete it",
                   (unsigned long long)tg->seq_id, tg->wait_ms, miss);
        return true;
    }
    FerryMeta__TableMember *tm = ferry_calloc(s->ctx, n ? n : 1, sizeof *tm);
    FerryMeta__TableMember **tp = ferry_calloc(s->ctx, n ? n : 1, sizeof *tp);
    if (!tm || !tp) {
        send_error(s, c, FERRY_ERR_NO_MEMORY, "out of memory answering TABLE_GET");
    } else {
        for (uint32_t r = 0; r < n; r++) {
            svc_member_t *m = &s->members[META_ROLE_TABLE][r];
            ferry_meta__table_member__init(&tm[r]);
            tm[r].rank = r;
            tm[r].incarnation = m->conn ? m->conn->incarnation : 0;
            tm[r].seq = find_table_seq(m, tg->seq_id);
            tp[r] = &tm[r];
        }
        FerryMeta__TableContents tc = FERRY_META__TABLE_CONTENTS__INIT;
        tc.seq_id = tg->seq_id;
        tc.n_members = n;
        tc.members = tp;
        send_msg(s, c, META_TABLE_CONTENTS, &tc.base);
    }
    ferry_free(s->ctx, tm);
    ferry_free(s->ctx, tp);
    return true;
}

/* Answers c's parked request if it can (or its deadline passed). */
static void evaluate(ferry_meta_service_t *s, svc_conn_t *c, double now) {
    if (!c->parked || c->dead) return;
    bool expired = now >= c->parked_deadline, done = false;
    switch (c->parked) {
    case META_GET_LAYOUTS: done = try_layouts(s, c, expired); break;
    case META_PUBLISH: done = try_publish_acks(s, c, expired); break;
    case META_RECLAIM: done = try_reclaim(s, c, expired, now); break;
    case META_READ_BEGIN: done = try_read_begin(s, c, expired, now); break;
    case META_GET_SUMS: done = try_get_sums(s, c, expired); break;
    case META_TABLE_GET: done = try_table_get(s, c, expired); break;
    default: done = true;
    }
    if (done) unpark(s, c);
}

static void evaluate_all(ferry_meta_service_t *s, double now) {
    for (size_t i = 0; i < s->nconns; i++) evaluate(s, s->conns[i], now);
}

static void park(ferry_meta_service_t *s, svc_conn_t *c, uint8_t type, ProtobufCMessage **msg, uint32_t wait_ms,
                 double now) {
    c->parked = type;
    c->parked_msg = *msg;
    *msg = NULL; /* the connection owns it now */
    c->parked_deadline = now + wait_ms / 1000.0;
    evaluate(s, c, now);
}

/* ---- requests ------------------------------------------------------------------------ */

/* Sizes a role's member table (first member of the role, or a replayed epoch). */
static bool ensure_world(ferry_meta_service_t *s, uint32_t role, uint32_t world) {
    if (s->world[role]) return s->world[role] == world;
    s->members[role] = ferry_calloc(s->ctx, world, sizeof(svc_member_t));
    if (!s->members[role]) return false;
    s->world[role] = world;
    return true;
}

static bool set_commit(ferry_meta_service_t *s, svc_member_t *m, const ProtobufCBinaryData *b) {
    uint8_t *copy = ferry_alloc(s->ctx, b->len ? b->len : 1);
    if (!copy) return false;
    if (b->len) memcpy(copy, b->data, b->len);
    ferry_free(s->ctx, m->commit);
    m->commit = copy;
    m->commit_len = b->len;
    m->commit_digest = XXH3_64bits(copy, b->len);
    return true;
}

static void handle_hello(ferry_meta_service_t *s, svc_conn_t *c, FerryMeta__Hello *h, double now) {
    size_t tl = strlen(s->token);
    unsigned diff = (unsigned)(h->token.len != tl);
    for (size_t i = 0; i < h->token.len && i < tl; i++) diff |= h->token.data[i] ^ (uint8_t)s->token[i];
    if (h->protocol != META_PROTOCOL) {
        send_error(s, c, FERRY_ERR_UNSUPPORTED, "protocol %u, this service speaks %u", h->protocol, META_PROTOCOL);
        c->dead = true;
        return;
    }
    if (diff) {
        if (h->token.len == 0)
            send_error(s, c, FERRY_ERR_INVALID_ARGUMENT,
                       "token mismatch: no token presented; this service requires one (set FERRY_TOKEN or "
                       "FERRY_TOKEN_FILE to its token)");
        else
            send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "token mismatch: FERRY_TOKEN differs from the service's");
        ferry_log(s->ctx, FERRY_LOG_WARN, "meta service: refused %s %u (pid %u): token mismatch", role_name(h->role),
                  h->rank, h->pid);
        c->dead = true;
        return;
    }
    if (h->role != META_ROLE_OBSERVER) {
        if (!s->have_job) {
            snprintf(s->job, sizeof s->job, "%s", h->job ? h->job : "");
            s->have_job = true;
        }
        if (strcmp(s->job, h->job ? h->job : "") != 0) {
            send_error(s, c, FERRY_ERR_MISMATCH, "this service runs job '%s', not '%s'", s->job, h->job);
            c->dead = true;
            return;
        }
        if (s->world[h->role] == 0) {
            if (!ensure_world(s, h->role, h->world)) {
                send_error(s, c, FERRY_ERR_NO_MEMORY, "out of memory for %u members", h->world);
                c->dead = true;
                return;
            }
        } else if (s->world[h->role] != h->world) {
            send_error(s, c, FERRY_ERR_MISMATCH, "%s %u says %u %ss, the job has %u", role_name(h->role), h->rank,
                       h->world, role_name(h->role), s->world[h->role]);
            c->dead = true;
            return;
        }
        svc_member_t *m = &s->members[h->role][h->rank];
        if (m->conn && m->conn->incarnation != h->incarnation) {
            /* another process claims a live rank: it waits for the holder to
             * go (connection closed or lease expired); BUSY makes it retry */
            send_error(s, c, FERRY_ERR_BUSY, "%s %u is held by another live process (pid %u); retry once it is gone",
                       role_name(h->role), h->rank, m->pid);
            c->dead = true;
            return;
        }
        if (m->conn) { /* the same process reconnected: its new connection replaces the old one */
            ferry_log(s->ctx, FERRY_LOG_INFO, "meta service: %s %u reconnected; dropping its old connection",
                      role_name(h->role), h->rank);
            svc_conn_t *old = m->conn;
            send_error(s, old, FERRY_ERR_STALE, "%s %u connected again from pid %u", role_name(h->role), h->rank,
                       h->pid);
            old->dead = true;
            old->joined = false;
            if (h->role == META_ROLE_WRITER)
                while (m->nrecs) drop_record(s, m, m->nrecs - 1);
            drop_table_seq(s, m, 0, true);
        }
        m->conn = c;
        m->seen = true;
        m->left_at = 0; /* back: what it did before is no longer news */
        m->left_why[0] = '\0';
        snprintf(m->host, sizeof m->host, "%s", h->host ? h->host : "");
        m->pid = h->pid;
    }
    c->joined = true;
    if (c->pending) {
        c->pending = false;
        s->npending--;
    }
    c->role = h->role;
    c->rank = h->rank;
    c->incarnation = h->incarnation;
    c->lease_ms = h->lease_ms ? h->lease_ms : s->lease_ms;
    c->deadline = now + c->lease_ms / 1000.0;
    c->rd.max_body = s->max_body;
    FerryMeta__Welcome w = FERRY_META__WELCOME__INIT;
    w.service_id = s->service_id;
    w.lease_ms = c->lease_ms;
    send_msg(s, c, META_WELCOME, &w.base);
    if (h->role != META_ROLE_OBSERVER) broadcast_event(s, META_EVENT_JOINED, h->role, h->rank, 0, NULL);
}

static void handle_publish(ferry_meta_service_t *s, svc_conn_t *c, svc_member_t *m, FerryMeta__Publish **pp,
                           double now) {
    FerryMeta__Publish *p = *pp;
    if (s->epoch == 0 || p->epoch != s->epoch) {
        send_error(s, c, FERRY_ERR_STALE, "layout epoch %016llx is not the job's current one (%016llx)",
                   (unsigned long long)p->epoch, (unsigned long long)s->epoch);
        return;
    }
    if (p->plan_digest != s->plan_digest && s->plan_digest) {
        send_error(s, c, FERRY_ERR_MISMATCH, "writer %u planned digest %016llx, the job's members %016llx (members plan alike from the same layouts and pack_limit)", c->rank,
                   (unsigned long long)p->plan_digest, (unsigned long long)s->plan_digest);
        return;
    }
    for (size_t i = 0; i < p->n_sums; i++)
        if (p->sums[i]->dst_rank >= s->world[META_ROLE_READER]) {
            send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "checksums for reader %u of %u", p->sums[i]->dst_rank,
                       s->world[META_ROLE_READER]);
            return;
        }
    s->plan_digest = p->plan_digest; /* the first valid PUBLISH of the epoch fixes it */
    drop_version(s, m, p->version);
    if (m->nrecs == MAX_RECORDS) { /* forget the oldest */
        size_t oldest = 0;
        for (size_t i = 1; i < m->nrecs; i++)
            if (m->recs[i]->version < m->recs[oldest]->version) oldest = i;
        drop_record(s, m, oldest);
    }
    m->sums[m->nrecs] = NULL;
    m->recs[m->nrecs++] = p;
    *pp = NULL;
    if (p->version > m->published) m->published = p->version;
    bool ready = version_ready(s, p->version);
    if (ready) broadcast_event(s, META_EVENT_READY, META_ROLE_WRITER, c->rank, p->version, NULL);
    if (p->wait_acks) {
        /* park a copy of what the wait needs; the record itself stays in m->recs */
        FerryMeta__Publish *w = ferry_calloc(s->ctx, 1, sizeof *w);
        if (!w) {
            send_error(s, c, FERRY_ERR_NO_MEMORY, "out of memory parking PUBLISH");
            return;
        }
        ferry_meta__publish__init(w);
        w->version = p->version;
        ProtobufCMessage *pm = &w->base;
        park(s, c, META_PUBLISH, &pm, p->wait_ms, now);
    } else {
        FerryMeta__Published out = FERRY_META__PUBLISHED__INIT;
        out.ready = ready;
        send_msg(s, c, META_PUBLISHED, &out.base);
    }
}

static void handle_status(ferry_meta_service_t *s, svc_conn_t *c) {
    FerryMeta__Status st = FERRY_META__STATUS__INIT;
    size_t n = (size_t)s->world[1] + s->world[2], k = 0;
    FerryMeta__MemberStatus *ms = ferry_calloc(s->ctx, n ? n : 1, sizeof *ms);
    FerryMeta__MemberStatus **mp = ferry_calloc(s->ctx, n ? n : 1, sizeof *mp);
    if (!ms || !mp) {
        send_error(s, c, FERRY_ERR_NO_MEMORY, "out of memory answering GET_STATUS");
    } else {
        for (uint32_t role = META_ROLE_WRITER; role <= META_ROLE_READER; role++)
            for (uint32_t r = 0; r < s->world[role]; r++, k++) {
                svc_member_t *m = &s->members[role][r];
                ferry_meta__member_status__init(&ms[k]);
                ms[k].role = role;
                ms[k].rank = r;
                ms[k].host = m->conn ? m->host : "";
                ms[k].pid = m->conn ? m->pid : 0;
                ms[k].committed = m->commit != NULL;
                ms[k].acked = m->acked;
                ms[k].published = m->published;
                mp[k] = &ms[k];
            }
        st.job = s->job;
        st.writers = s->world[1];
        st.readers = s->world[2];
        st.epoch = s->epoch;
        st.ready = newest_ready(s, 1, 0);
        st.n_members = n;
        st.members = mp;
        st.service_id = s->service_id;
        send_msg(s, c, META_STATUS, &st.base);
    }
    ferry_free(s->ctx, ms);
    ferry_free(s->ctx, mp);
}

static void handle_frame(ferry_meta_service_t *s, svc_conn_t *c, uint8_t type, const uint8_t *body, uint32_t len,
                         double now) {
    ProtobufCMessage *msg = NULL;
    ferry_errbuf_t err;
    ferry_status_t st = meta_decode(s->ctx, type, body, len, &msg, &err);
    if (st != FERRY_OK) {
        bool one_way = type == META_HEARTBEAT || type == META_BYE || type == META_RETIRE || type == META_SUMS ||
                       type == META_TABLE_DROP;
        if (one_way) { /* nobody waits for an answer: an ERROR would be read as the next reply */
            ferry_log(s->ctx, FERRY_LOG_WARN, "meta service: dropping %s %u: %s", role_name(c->role), c->rank, err.text);
        } else {
            send_error(s, c, st, "%s", err.text);
        }
        if (!c->joined || one_way) c->dead = true;
        return;
    }
    if (!c->joined) {
        if (type == META_HELLO) {
            handle_hello(s, c, (FerryMeta__Hello *)msg, now);
            evaluate_all(s, now); /* a replaced connection may have taken records with it */
        }
        else {
            send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "expected HELLO first, got %s", meta_type_name(type));
            c->dead = true;
        }
        meta_free(s->ctx, msg);
        return;
    }
    c->deadline = now + c->lease_ms / 1000.0; /* any frame renews the lease */
    if (type != META_HEARTBEAT) ferry_log(s->ctx, FERRY_LOG_DEBUG, "meta service: %s from %s %u", meta_type_name(type), role_name(c->role), c->rank);
    svc_member_t *m = member_of(s, c);
    bool writer = c->role == META_ROLE_WRITER, reader = c->role == META_ROLE_READER;
    bool table = c->role == META_ROLE_TABLE;
    if (c->parked && type != META_HEARTBEAT && type != META_RETIRE && type != META_BYE && type != META_SUMS &&
        type != META_TABLE_DROP) {
        send_error(s, c, FERRY_ERR_BUSY, "%s while a %s is pending", meta_type_name(type), meta_type_name(c->parked));
        meta_free(s->ctx, msg);
        return;
    }
    switch (type) {
    case META_HEARTBEAT: break;
    case META_BYE:
        c->dead = true;
        c->bye = true;
        break;
    case META_COMMIT:
        if (!m) {
            send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "observers do not commit layouts");
            break;
        } else {
            FerryMeta__Commit *cm = (void *)msg;
            if ((cm->n_epoch_writers && s->world[META_ROLE_WRITER] && s->world[META_ROLE_WRITER] != cm->n_epoch_writers) ||
                (cm->n_epoch_readers && s->world[META_ROLE_READER] && s->world[META_ROLE_READER] != cm->n_epoch_readers)) {
                send_error(s, c, FERRY_ERR_MISMATCH, "the replayed epoch has %zu writers and %zu readers, the job %u and %u",
                           cm->n_epoch_writers, cm->n_epoch_readers, s->world[META_ROLE_WRITER], s->world[META_ROLE_READER]);
                break;
            }
            if (!set_commit(s, m, &cm->layout)) {
                send_error(s, c, FERRY_ERR_NO_MEMORY, "out of memory storing a %zu-byte layout", cm->layout.len);
                break;
            }
            /* a restarted service: the epoch as this member saw it stands in for members not back yet */
            for (uint32_t role = META_ROLE_WRITER; role <= META_ROLE_READER; role++) {
                size_t n = role == META_ROLE_WRITER ? cm->n_epoch_writers : cm->n_epoch_readers;
                ProtobufCBinaryData *b = role == META_ROLE_WRITER ? cm->epoch_writers : cm->epoch_readers;
                if (!n || !ensure_world(s, role, (uint32_t)n)) continue;
                for (size_t r = 0; r < n; r++)
                    if (!s->members[role][r].commit) set_commit(s, &s->members[role][r], &b[r]);
            }
            recompute_epoch(s);
            send_ok(s, c);
        }
        break;
    case META_GET_LAYOUTS: park(s, c, type, &msg, ((FerryMeta__GetLayouts *)msg)->wait_ms, now); break;
    case META_PUBLISH:
        if (!writer) send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "only writers publish");
        else handle_publish(s, c, m, (FerryMeta__Publish **)&msg, now);
        break;
    case META_RECLAIM:
        if (!writer) {
            send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "only writers reclaim");
            break;
        }
        drop_version(s, m, ((FerryMeta__Reclaim *)msg)->version); /* no new grants from here on */
        if (((FerryMeta__Reclaim *)msg)->version > m->retired_max) m->retired_max = ((FerryMeta__Reclaim *)msg)->version;
        park(s, c, type, &msg, ((FerryMeta__Reclaim *)msg)->wait_ms, now);
        break;
    case META_RETIRE:
        if (writer) {
            drop_version(s, m, ((FerryMeta__Retire *)msg)->version);
            if (((FerryMeta__Retire *)msg)->version > m->retired_max) m->retired_max = ((FerryMeta__Retire *)msg)->version;
        }
        break;
    case META_SUMS: /* one-way: an error cannot be answered while a PUBLISH is pending, so bad sums are dropped */
        if (writer) {
            FerryMeta__Sums *sm = (void *)msg;
            for (size_t i = 0; i < m->nrecs; i++) {
                if (m->recs[i]->version != sm->version || !m->recs[i]->sums_follow) continue;
                bool ok = true;
                for (size_t k = 0; k < sm->n_sums; k++) ok &= sm->sums[k]->dst_rank < s->world[META_ROLE_READER];
                if (!ok) {
                    ferry_log(s->ctx, FERRY_LOG_WARN, "meta service: writer %u sent checksums for unknown readers",
                              c->rank);
                    break;
                }
                meta_free(s->ctx, m->sums[i] ? &m->sums[i]->base : NULL);
                m->sums[i] = sm;
                msg = NULL;
                break;
            }
        }
        break;
    case META_GET_SUMS:
        if (!reader) send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "only readers ask for checksums");
        else park(s, c, type, &msg, ((FerryMeta__GetSums *)msg)->wait_ms, now);
        break;
    case META_READ_BEGIN:
        if (!reader) send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "only readers read");
        else if (s->plan_digest && ((FerryMeta__ReadBegin *)msg)->plan_digest != s->plan_digest)
            send_error(s, c, FERRY_ERR_MISMATCH, "reader %u planned digest %016llx, the writers %016llx (members plan alike from the same layouts and pack_limit)", c->rank,
                       (unsigned long long)((FerryMeta__ReadBegin *)msg)->plan_digest,
                       (unsigned long long)s->plan_digest);
        else park(s, c, type, &msg, ((FerryMeta__ReadBegin *)msg)->wait_ms, now);
        break;
    case META_READ_END:
        if (!reader) {
            send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "only readers end reads");
        } else {
            FerryMeta__ReadEnd *re = (void *)msg;
            if (c->pin_version == re->version) c->pin_version = 0;
            if (re->ok && re->version > m->acked) m->acked = re->version;
            FerryMeta__ReadEnded out = FERRY_META__READ_ENDED__INIT;
            out.retired = !version_ready(s, re->version);
            send_msg(s, c, META_READ_ENDED, &out.base);
        }
        break;
    case META_GET_STATUS: handle_status(s, c); break;
    case META_TABLE_COMPLETE:
        if (!table) {
            send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "only table members complete sequences");
        } else {
            FerryMeta__TableComplete *tc = (void *)msg;
            drop_table_seq(s, m, tc->seq_id, false);
            if (m->ntseq == MAX_RECORDS) {
                send_error(s, c, FERRY_ERR_LIMIT, "table member %u holds %d sequences; drop some first", c->rank,
                           MAX_RECORDS);
                break;
            }
            m->tseq[m->ntseq++] = tc;
            msg = NULL;
            send_ok(s, c);
        }
        break;
    case META_TABLE_GET:
        if (!table) send_error(s, c, FERRY_ERR_INVALID_ARGUMENT, "only table members get");
        else park(s, c, type, &msg, ((FerryMeta__TableGet *)msg)->wait_ms, now);
        break;
    case META_TABLE_DROP:
        if (table) drop_table_seq(s, m, ((FerryMeta__TableDrop *)msg)->seq_id, false);
        break;
    default:
        send_error(s, c, FERRY_ERR_UNSUPPORTED, "unexpected %s from a client", meta_type_name(type));
    }
    meta_free(s->ctx, msg);
    evaluate_all(s, now);
}

/* ---- connections ------------------------------------------------------------------------ */

static void conn_close(ferry_meta_service_t *s, size_t i, const char *why, double now) {
    svc_conn_t *c = s->conns[i];
    bool joined = c->joined;
    uint32_t role = c->role, rank = c->rank;
    char event[META_MAX_NAME + 320] = "";
    if (joined && role != META_ROLE_OBSERVER) {
        svc_member_t *m = &s->members[role][rank];
        if (m->conn == c) {
            char doing[120];
            conn_activity(c, m, now, doing, sizeof doing);
            snprintf(m->left_why, sizeof m->left_why, "%s%s", c->bye ? "it left the job" : why, doing);
            m->left_at = now;
            m->conn = NULL;
            if (role == META_ROLE_WRITER) /* its memory is gone with it */
                while (m->nrecs) drop_record(s, m, m->nrecs - 1);
            drop_table_seq(s, m, 0, true);
            member_text(s, role, rank, -1, event, sizeof event);
        } else {
            snprintf(event, sizeof event, "%s %u: %s", role_name(role), rank, why); /* an old connection */
        }
    }
    unpark(s, c);
    close(c->fd);
    meta_peers_remove(&s->peers, c->peer);
    if (c->pending) s->npending--;
    frame_reader_free(&c->rd);
    ferry_free(s->ctx, c->out);
    ferry_free(s->ctx, c);
    s->conns[i] = s->conns[--s->nconns];
    if (joined && role != META_ROLE_OBSERVER) {
        broadcast_event(s, META_EVENT_LEFT, role, rank, 0, event);
        ferry_log(s->ctx, FERRY_LOG_INFO, "meta service: %s", event); /* once the others were told */
        evaluate_all(s, now);
    }
}

/* Closes a connection the service will not take, after a best-effort
 * ERROR saying why (a client reads it as the answer to its HELLO). */
static void refuse(ferry_meta_service_t *s, int fd, const struct sockaddr *peer, ferry_status_t st, const char *fmt,
                   ...) FERRY_PRINTF(5, 6);
static void refuse(ferry_meta_service_t *s, int fd, const struct sockaddr *peer, ferry_status_t st, const char *fmt,
                   ...) {
    char detail[256], who[80];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    meta_sockaddr_text(peer, who, sizeof who);
    ferry_log(s->ctx, FERRY_LOG_DEBUG, "meta service: refused a connection from %s: %s", who, detail);
    FerryMeta__Error e = FERRY_META__ERROR__INIT;
    e.status = (uint32_t)st;
    e.detail = detail;
    uint8_t *buf;
    size_t len;
    ferry_errbuf_t err;
    if (meta_encode(s->ctx, META_ERROR, &e.base, &buf, &len, &err) == FERRY_OK) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
        ferry_free(s->ctx, buf);
    }
    close(fd);
}

/* accept failed with EMFILE or ENFILE. Not accepting would leave the
 * listening socket readable and the loop spinning, so one pending
 * connection is taken with the spare descriptor and refused; when even
 * that fails the listening socket rests for ACCEPT_BACKOFF_S. True if a
 * connection was taken (try the next). */
static bool out_of_fds(ferry_meta_service_t *s, int why, double now) {
    if (!s->fd_short) {
        s->fd_short = true;
        ferry_log(s->ctx, FERRY_LOG_WARN,
                  "meta service on %s: out of file descriptors (%s) with %zu connections: refusing new ones until "
                  "some close (raise the open-file limit, ulimit -n)",
                  s->address, strerror(why), s->nconns);
    }
    if (s->spare_fd < 0) s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    bool took = false;
    if (s->spare_fd >= 0) {
        close(s->spare_fd);
        struct sockaddr_storage ss = {0};
        socklen_t sl = sizeof ss;
        int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            refuse(s, fd, (struct sockaddr *)&ss, FERRY_ERR_LIMIT,
                   "the service is out of file descriptors (%zu connections); retry later", s->nconns);
            took = true;
        }
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    if (!took || s->spare_fd < 0) s->accept_resume = now + ACCEPT_BACKOFF_S;
    return took && s->spare_fd >= 0;
}

static void conn_accept(ferry_meta_service_t *s, double now) {
    for (int turn = 0; turn < ACCEPTS_PER_TURN; turn++) {
        struct sockaddr_storage ss = {0};
        socklen_t sl = sizeof ss;
        int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EAGAIN || e == EWOULDBLOCK) return;
            if (e == EINTR || e == ECONNABORTED) continue;
            if (e == EMFILE || e == ENFILE) {
                if (out_of_fds(s, e, now)) continue;
                return;
            }
            /* ENOBUFS, ENOMEM, anything unforeseen: rest instead of spinning */
            ferry_log(s->ctx, FERRY_LOG_WARN, "meta service: accept: %s", strerror(e));
            s->accept_resume = now + ACCEPT_BACKOFF_S;
            return;
        }
        if (s->fd_short) {
            s->fd_short = false;
            ferry_log(s->ctx, FERRY_LOG_WARN, "meta service on %s: accepting connections again (%zu open)",
                      s->address, s->nconns);
        }
        const struct sockaddr *peer = (const struct sockaddr *)&ss;
        uint8_t key[16];
        uint16_t port;
        meta_sockaddr_key(peer, key, &port);
        uint32_t from_peer = meta_peers_count(&s->peers, key);
        if (s->nconns >= s->max_conns) {
            if (!s->cap_logged)
                ferry_log(s->ctx, FERRY_LOG_WARN, "meta service on %s: %zu connections, its limit; refusing more",
                          s->address, s->nconns);
            s->cap_logged = true;
            refuse(s, fd, peer, FERRY_ERR_LIMIT, "the service holds %zu connections, its limit; retry later",
                   s->nconns);
            continue;
        }
        if (from_peer >= s->max_peer_conns) {
            char who[80];
            meta_sockaddr_text(peer, who, sizeof who);
            refuse(s, fd, peer, FERRY_ERR_LIMIT, "%u connections from this peer's address (%.*s), the per-peer limit",
                   from_peer, (int)(strrchr(who, ':') - who), who);
            continue;
        }
        if (s->npending >= s->max_pending) {
            refuse(s, fd, peer, FERRY_ERR_LIMIT, "%zu connections are waiting to say HELLO, the limit; retry later",
                   s->npending);
            continue;
        }
        svc_conn_t *c = ferry_calloc(s->ctx, 1, sizeof *c);
        if (!c || ferry_grow(s->ctx, (void **)&s->conns, sizeof *s->conns, &s->cap_conns, s->nconns + 1) != 0 ||
            meta_peers_add(&s->peers, key) != 0) {
            ferry_free(s->ctx, c);
            refuse(s, fd, peer, FERRY_ERR_NO_MEMORY, "the service is out of memory");
            continue;
        }
        int one = 1; /* replies are small and awaited: no Nagle delay */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        memcpy(c->peer, key, sizeof key);
        c->pending = true;
        s->npending++;
        frame_reader_init(&c->rd, s->ctx, META_MAX_HELLO_BODY);
        c->deadline = now + HELLO_WAIT_S;
        s->conns[s->nconns++] = c;
    }
}

static void conn_read(ferry_meta_service_t *s, svc_conn_t *c, double now) {
    uint8_t buf[65536];
    for (;;) {
        ssize_t k = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EAGAIN) return;
        if (k <= 0) {
            c->dead = true;
            return;
        }
        if (frame_reader_feed(&c->rd, buf, (size_t)k) != FERRY_OK) {
            send_error(s, c, c->rd.failed, "%s", c->rd.err.text);
            c->dead = true;
            return;
        }
        for (;;) {
            uint8_t type;
            const uint8_t *body;
            uint32_t len;
            ferry_status_t fst;
            int got = frame_reader_next(&c->rd, &type, &body, &len, &fst);
            if (got != 1) {
                if (fst != FERRY_OK) {
                    send_error(s, c, fst, "%s", c->rd.err.text);
                    c->dead = true;
                    return;
                }
                break;
            }
            handle_frame(s, c, type, body, len, now);
            if (c->dead) return;
        }
    }
}

static void *service_main(void *arg) {
    ferry_meta_service_t *s = arg;
    struct pollfd *pfds = NULL;
    size_t cap = 0;
    while (!atomic_load(&s->stop)) {
        double now = ferry_mono_s(), next = now + 3600;
        if (now < s->grace_end) next = s->grace_end; /* waits on absent members end then */
        bool listening = now >= s->accept_resume;
        if (!listening && s->accept_resume < next) next = s->accept_resume;
        for (size_t i = 0; i < s->nconns; i++) {
            svc_conn_t *c = s->conns[i];
            if (c->deadline < next) next = c->deadline;
            if (c->parked && c->parked_deadline < next) next = c->parked_deadline;
            if (c->pin_version && c->pin_deadline > now && c->pin_deadline < next) next = c->pin_deadline;
        }
        if (ferry_grow(s->ctx, (void **)&pfds, sizeof *pfds, &cap, s->nconns + 2) != 0) break;
        pfds[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        pfds[1] = (struct pollfd){.fd = listening ? s->listen_fd : -1, .events = POLLIN};
        size_t n = s->nconns;
        for (size_t i = 0; i < n; i++)
            pfds[2 + i] = (struct pollfd){.fd = s->conns[i]->fd,
                                          .events = (short)(POLLIN | (s->conns[i]->out_len ? POLLOUT : 0))};
        int ms = (int)((next - now) * 1000.0) + 1;
        int rc = poll(pfds, n + 2, ms < 0 ? 0 : ms);
        if (rc < 0 && errno != EINTR) break;
        now = ferry_mono_s();
        if (rc > 0) {
            for (size_t i = 0; i < n; i++) {
                svc_conn_t *c = s->conns[i];
                if (pfds[2 + i].revents & POLLOUT) conn_flush(c);
                if (pfds[2 + i].revents & (POLLIN | POLLHUP | POLLERR)) conn_read(s, c, now);
            }
        }
        /* deadlines: leases, parked requests, grants that ran out */
        for (size_t i = 0; i < s->nconns; i++) {
            svc_conn_t *c = s->conns[i];
            if (c->pin_version && c->pin_deadline <= now) c->pin_version = 0;
            if (c->parked && c->parked_deadline <= now) evaluate(s, c, now);
        }
        evaluate_all(s, now); /* an expired grant may free a reclaim */
        for (size_t i = s->nconns; i-- > 0;) {
            svc_conn_t *c = s->conns[i];
            if (c->dead) conn_close(s, i, "its connection closed", now);
            else if (c->deadline <= now) conn_close(s, i, c->joined ? "its lease expired" : "no HELLO in time", now);
        }
        /* after the closes: the descriptors they freed are there for newcomers */
        if (rc > 0 && (pfds[1].revents & POLLIN)) conn_accept(s, now);
    }
    ferry_free(s->ctx, pfds);
    return NULL;
}

/* ---- lifetime ---------------------------------------------------------------------------- */

static const char *cfg(ferry_ctx_t *ctx, const char *name) {
    const char *v = ferry_ctx_config_value(ctx, name, NULL);
    return v ? v : "";
}

/* The default connection cap: 65536, or what RLIMIT_NOFILE leaves once the
 * rest of the process has FD_RESERVE descriptors. */
static uint32_t default_max_conns(void) {
    struct rlimit rl;
    uint64_t lim = 65536;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < lim + FD_RESERVE)
        lim = rl.rlim_cur > 2 * FD_RESERVE ? rl.rlim_cur - FD_RESERVE : rl.rlim_cur / 2;
    return lim ? (uint32_t)lim : 1;
}

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

ferry_status_t ferry_meta_service_create(ferry_ctx_t *ctx, const ferry_meta_params_t *params,
                                         ferry_meta_service_t **out) {
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    uint64_t mask = params ? params->field_mask : 0;
    const char *listen_at = (mask & FERRY_META_PARAM_LISTEN) && params->listen ? params->listen : cfg(ctx, "FERRY_META");
    const char *token = (mask & FERRY_META_PARAM_TOKEN) && params->token ? params->token : cfg(ctx, "FERRY_TOKEN");
    if (strlen(token) > META_MAX_TOKEN)
        return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta token is %zu bytes; at most %u", strlen(token),
                          META_MAX_TOKEN);
    char host[META_HOST_MAX];
    uint16_t port;
    ferry_status_t st = meta_addr_parse(listen_at, host, &port, err);
    if (st != FERRY_OK) return st;
    ferry_meta_service_t *s = ferry_calloc(ctx, 1, sizeof *s);
    if (!s) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory creating the meta service");
    s->ctx = ctx;
    s->wake[0] = s->wake[1] = s->listen_fd = -1;
    s->lease_ms = (mask & FERRY_META_PARAM_LEASE_MS) && params->lease_ms ? params->lease_ms : 10000;
    s->grace_end = ferry_mono_s() + s->lease_ms / 1000.0;
    s->max_body = (mask & FERRY_META_PARAM_MAX_FRAME) && params->max_frame ? params->max_frame : 256u << 20;
    s->max_conns = (mask & FERRY_META_PARAM_MAX_CONNS) && params->max_conns ? params->max_conns : default_max_conns();
    s->max_peer_conns = min_u32(s->max_conns, (mask & FERRY_META_PARAM_MAX_PEER_CONNS) && params->max_peer_conns
                                                  ? params->max_peer_conns
                                                  : 4096);
    s->max_pending = min_u32(s->max_conns,
                             (mask & FERRY_META_PARAM_MAX_PENDING) && params->max_pending ? params->max_pending : 4096);
    meta_peers_init(&s->peers, ctx);
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (getrandom(&s->service_id, sizeof s->service_id, 0) != sizeof s->service_id)
        s->service_id = (uint64_t)ferry_mono_s() ^ (uint64_t)getpid() << 32;
    /* bound, then the token (and its file) in place, then listening: a
     * client that gets in finds the file */
    struct sockaddr_storage bound;
    st = meta_bind(host, port, &s->listen_fd, &bound, err);
    if (st == FERRY_OK) st = meta_token_service(ctx, token, (struct sockaddr *)&bound, s->token, s->token_path, err);
    if (st == FERRY_OK) st = meta_listen_fd(s->listen_fd, err);
    if (st == FERRY_OK && pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        st = ferry_fail(err, FERRY_ERR_IO, "meta service: pipe: %s", strerror(errno));
    if (st == FERRY_OK) {
        uint8_t a[16];
        uint16_t bound_port;
        meta_sockaddr_key((struct sockaddr *)&bound, a, &bound_port);
        snprintf(s->address, sizeof s->address, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, bound_port);
        if (pthread_create(&s->thread, NULL, service_main, s) != 0)
            st = ferry_fail(err, FERRY_ERR_IO, "meta service: cannot start its thread");
    }
    if (st != FERRY_OK) {
        meta_token_remove(s->token_path, s->token);
        if (s->listen_fd >= 0) close(s->listen_fd);
        if (s->wake[0] >= 0) close(s->wake[0]), close(s->wake[1]);
        if (s->spare_fd >= 0) close(s->spare_fd);
        ferry_free(ctx, s);
        return st;
    }
    ferry_log(ctx, FERRY_LOG_INFO, "meta service listening on %s (at most %u connections, %u per peer address)",
              s->address, s->max_conns, s->max_peer_conns);
    *out = s;
    return FERRY_OK;
}

const char *ferry_meta_service_address(const ferry_meta_service_t *svc) { return svc ? svc->address : ""; }

const char *ferry_meta_service_token_file(const ferry_meta_service_t *svc) { return svc ? svc->token_path : ""; }

void ferry_meta_service_destroy(ferry_meta_service_t *s) {
    if (!s) return;
    atomic_store(&s->stop, true);
    ssize_t w = write(s->wake[1], "x", 1);
    (void)w;
    pthread_join(s->thread, NULL);
    /* the token file goes while the port is still ours (a successor cannot
     * have bound it), then the port: members that reconnect find no
     * listener, or the successor and its file */
    meta_token_remove(s->token_path, s->token);
    close(s->listen_fd);
    double now = ferry_mono_s();
    while (s->nconns) {
        s->conns[s->nconns - 1]->joined = false; /* no events on the way out */
        conn_close(s, s->nconns - 1, "the service stopped", now);
    }
    for (int role = META_ROLE_WRITER; role < META_ROLE_END; role++) {
        for (uint32_t r = 0; r < s->world[role]; r++) {
            svc_member_t *m = &s->members[role][r];
            ferry_free(s->ctx, m->commit);
            while (m->nrecs) drop_record(s, m, m->nrecs - 1);
            drop_table_seq(s, m, 0, true);
        }
        ferry_free(s->ctx, s->members[role]);
    }
    ferry_free(s->ctx, s->conns);
    meta_peers_free(&s->peers);
    if (s->spare_fd >= 0) close(s->spare_fd);
    close(s->wake[0]);
    close(s->wake[1]);
    ferry_free(s->ctx, s);
}
