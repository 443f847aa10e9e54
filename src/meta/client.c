/* Metadata protocol, client side: see client.h. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "meta/client_msg.h"
#include "meta/conn.h"
#include "meta/token.h"

/* A member the service said left (EVENT left) and that has not come back
 * (EVENT joined) since. */
typedef struct meta_departure {
    uint32_t role, rank;
    char detail[META_MAX_DETAIL];
} meta_departure_t;

struct meta_client {
    ferry_ctx_t *ctx;
    meta_client_params_t p;
    char address[META_HOST_MAX + 16], token[META_MAX_TOKEN + 1], job[META_MAX_NAME + 1];
    char host[META_MAX_NAME + 1];
    bool token_given;                /* else each connection finds it (meta_token_client) */
    char token_from[META_TOKEN_PATH]; /* the file it came from */
    uint16_t port;
    char service_host[META_HOST_MAX];
    uint64_t incarnation, service_id;
    atomic_uint_fast64_t events;
    bool service_error;  /* the last failure was an ERROR the service sent (the stream is in step) */
    meta_departure_t *gone; /* read and written by the calling thread only (it reads the frames) */
    size_t ngone, cap_gone;
    meta_replay_fn replay;
    void *replay_opaque;
    const ferry_intr_t *intr; /* the context's interrupt hook: calling thread's waits only, never the heartbeat's */
    bool replaying;
    /* the connection: fd and reader are used by the calling thread; sends
     * (calls and heartbeats) hold send_lock */
    int fd;
    frame_reader_t rd;
    pthread_mutex_t send_lock;
    /* heartbeat thread */
    pthread_t hb;
    bool hb_started;
    pthread_mutex_t hb_lock;
    pthread_cond_t hb_cond;
    bool hb_stop;
};

static ferry_status_t send_frame(meta_client_t *c, uint8_t type, const ProtobufCMessage *msg, const ferry_intr_t *intr,
                                 ferry_errbuf_t *err) {
    uint8_t *buf;
    size_t len;
    ferry_status_t st = meta_encode(c->ctx, type, msg, &buf, &len, err);
    if (st != FERRY_OK) return st;
    pthread_mutex_lock(&c->send_lock);
    if (c->fd < 0) st = ferry_fail(err, FERRY_ERR_PEER_LOST, "meta: not connected to the service");
    else st = meta_write_all(c->fd, buf, len, ferry_mono_s() + c->p.timeout_ms / 1000.0, intr, err);
    pthread_mutex_unlock(&c->send_lock);
    ferry_free(c->ctx, buf);
    return st;
}

/* An EVENT: counted; a member that left is remembered until it joins again. */
static void absorb_event(meta_client_t *c, const uint8_t *body, uint32_t len) {
    atomic_fetch_add(&c->events, 1);
    ProtobufCMessage *m;
    ferry_errbuf_t err;
    if (meta_decode(c->ctx, META_EVENT, body, len, &m, &err) != FERRY_OK) return; /* only news: never fatal */
    const FerryMeta__Event *e = (const void *)m;
    size_t k = 0;
    while (k < c->ngone && !(c->gone[k].role == e->role && c->gone[k].rank == e->rank)) k++;
    if (e->kind == META_EVENT_JOINED && k < c->ngone) {
        c->gone[k] = c->gone[--c->ngone];
    } else if (e->kind == META_EVENT_LEFT) {
        if (k == c->ngone && ferry_grow(c->ctx, (void **)&c->gone, sizeof *c->gone, &c->cap_gone, c->ngone + 1) == 0)
            c->ngone++;
        if (k < c->ngone) {
            c->gone[k].role = e->role;
            c->gone[k].rank = e->rank;
            snprintf(c->gone[k].detail, sizeof c->gone[k].detail, "%s", e->detail ? e->detail : "");
        }
    }
    meta_free(c->ctx, m);
}

/* Reads frames until one of `want` (or an ERROR) arrives; events are
 * absorbed. */
static ferry_status_t read_reply(meta_client_t *c, uint8_t want, double deadline, ProtobufCMessage **reply,
                                 ferry_errbuf_t *err) {
    for (;;) {
        uint8_t type;
        const uint8_t *body;
        uint32_t len;
        ferry_status_t st = meta_read_frame(c->fd, &c->rd, deadline, c->intr, &type, &body, &len, err);
        if (st != FERRY_OK) return st;
        if (type == META_EVENT) {
            absorb_event(c, body, len);
            continue;
        }
        if (type != want && type != META_ERROR)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "meta: expected %s from the service, got %s",
                              meta_type_name(want), meta_type_name(type));
        ProtobufCMessage *m;
        st = meta_decode(c->ctx, type, body, len, &m, err);
        if (st != FERRY_OK) return st;
        if (type == META_ERROR) {
            c->service_error = true;
            FerryMeta__Error *e = (void *)m;
            ferry_status_t es = e->status >= FERRY_ERR_INVALID_ARGUMENT ? (ferry_status_t)e->status : FERRY_ERR_INTERNAL;
            st = ferry_fail(err, es, "meta service: %s", e->detail ? e->detail : "");
            meta_free(c->ctx, m);
            return st;
        }
        *reply = m;
        return FERRY_OK;
    }
}

static void disconnect(meta_client_t *c) {
    pthread_mutex_lock(&c->send_lock);
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    pthread_mutex_unlock(&c->send_lock);
    frame_reader_free(&c->rd);
    frame_reader_init(&c->rd, c->ctx, META_MAX_REPLY);
}

/* Refusals that reconnecting cannot cure. */
static bool permanent(ferry_status_t st) {
    return st == FERRY_ERR_INVALID_ARGUMENT || st == FERRY_ERR_MISMATCH || st == FERRY_ERR_UNSUPPORTED ||
           st == FERRY_ERR_INVALID_CONFIG || st == FERRY_ERR_NOT_FOUND;
}

/* One connection attempt: connect, HELLO, WELCOME. */
static ferry_status_t connect_once(meta_client_t *c, double deadline, ferry_errbuf_t *err) {
    int fd;
    ferry_status_t st = meta_connect(c->service_host, c->port, deadline, c->intr, &fd, err);
    if (st != FERRY_OK) return st;
    if (!c->token_given && (st = meta_token_client(c->ctx, fd, c->token, c->token_from, err)) != FERRY_OK) {
        close(fd);
        return st;
    }
    FerryMeta__Hello h = FERRY_META__HELLO__INIT;
    h.protocol = META_PROTOCOL;
    h.token = (ProtobufCBinaryData){strlen(c->token), (uint8_t *)c->token};
    h.job = c->job;
    h.role = c->p.role;
    h.rank = c->p.rank;
    h.world = c->p.world;
    h.host = c->host;
    h.pid = (uint32_t)getpid();
    h.incarnation = c->incarnation;
    h.lease_ms = c->p.lease_ms;
    /* HELLO goes out before the heartbeat thread can see the socket: the
     * service wants it first */
    uint8_t *buf;
    size_t len;
    st = meta_encode(c->ctx, META_HELLO, &h.base, &buf, &len, err);
    if (st == FERRY_OK) {
        st = meta_write_all(fd, buf, len, deadline, c->intr, err);
        ferry_free(c->ctx, buf);
    }
    if (st != FERRY_OK) {
        close(fd);
        return st;
    }
    pthread_mutex_lock(&c->send_lock);
    c->fd = fd;
    pthread_mutex_unlock(&c->send_lock);
    ProtobufCMessage *w = NULL;
    if (st == FERRY_OK) st = read_reply(c, META_WELCOME, deadline, &w, err);
    if (st != FERRY_OK) {
        size_t n = strlen(err->text);
        if (st == FERRY_ERR_INVALID_ARGUMENT && c->service_error && c->token_from[0])
            snprintf(err->text + n, sizeof err->text - n, " (the token was read from %s)", c->token_from);
        disconnect(c);
        return st;
    }
    c->service_id = ((FerryMeta__Welcome *)w)->service_id;
    meta_free(c->ctx, w);
    return FERRY_OK;
}

/* Connects, retrying while the service is not (yet, or again) there. The
 * pause between attempts grows to 200 ms: a TCP listener cannot announce
 * itself, so this is the one place that retries on a timer. */
static ferry_status_t connect_retry(meta_client_t *c, ferry_errbuf_t *err) {
    double deadline = ferry_mono_s() + c->p.timeout_ms / 1000.0;
    long pause_ms = 5;
    ferry_status_t refused = FERRY_OK;
    ferry_errbuf_t why;
    for (;;) {
        c->service_error = false;
        ferry_status_t st = connect_once(c, deadline, err);
        if (st != FERRY_OK && c->service_error) { /* the service said no: the most telling answer */
            refused = st;
            why = *err;
        }
        if (st == FERRY_OK || permanent(st) || st == FERRY_ERR_INTERRUPTED) return st;
        if (ferry_mono_s() >= deadline) {
            if (refused != FERRY_OK) *err = why;
            return refused != FERRY_OK ? refused : st;
        }
        if (ferry_intr_sleep(c->intr, pause_ms / 1000.0)) {
            char last[FERRY_ERR_TEXT];
            snprintf(last, sizeof last, "%s", err->text);
            return ferry_fail(err, FERRY_ERR_INTERRUPTED,
                              "meta: interrupted while connecting to the service at %s (the last attempt: %.300s)",
                              c->address, last);
        }
        if (pause_ms < 200) pause_ms *= 2;
    }
}

static void *heartbeat_main(void *arg) {
    meta_client_t *c = arg;
    pthread_mutex_lock(&c->hb_lock);
    while (!c->hb_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)c->p.lease_ms * 1000000ull / 3;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        pthread_cond_timedwait(&c->hb_cond, &c->hb_lock, &ts);
        if (c->hb_stop) break;
        pthread_mutex_unlock(&c->hb_lock);
        FerryMeta__Ok ok = FERRY_META__OK__INIT;
        ferry_errbuf_t err;
        (void)send_frame(c, META_HEARTBEAT, &ok.base, NULL, &err); /* a lost service shows on the next request */
        pthread_mutex_lock(&c->hb_lock);
    }
    pthread_mutex_unlock(&c->hb_lock);
    return NULL;
}

ferry_status_t meta_client_create(ferry_ctx_t *ctx, const meta_client_params_t *params, meta_client_t **out,
                                  ferry_errbuf_t *err) {
    if (strlen(params->token ? params->token : "") > META_MAX_TOKEN || strlen(params->job ? params->job : "") > META_MAX_NAME)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "meta: token or job name too long");
    meta_client_t *c = ferry_calloc(ctx, 1, sizeof *c);
    if (!c) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory creating a meta client");
    c->ctx = ctx;
    c->intr = ferry_ctx_intr(ctx);
    c->p = *params;
    if (!c->p.lease_ms) c->p.lease_ms = 10000;
    if (!c->p.timeout_ms) c->p.timeout_ms = 10000;
    c->fd = -1;
    snprintf(c->address, sizeof c->address, "%s", params->address ? params->address : "");
    snprintf(c->token, sizeof c->token, "%s", params->token ? params->token : "");
    c->token_given = c->token[0] != '\0';
    snprintf(c->job, sizeof c->job, "%s", params->job ? params->job : "");
    if (gethostname(c->host, sizeof c->host - 1) != 0) snprintf(c->host, sizeof c->host, "localhost");
    if (getrandom(&c->incarnation, sizeof c->incarnation, 0) != sizeof c->incarnation)
        c->incarnation = (uint64_t)getpid() << 32 ^ (uint64_t)(ferry_mono_s() * 1e9);
    c->p.address = c->address;
    c->p.token = c->token;
    c->p.job = c->job;
    pthread_mutex_init(&c->send_lock, NULL);
    pthread_mutex_init(&c->hb_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->hb_cond, &ca);
    pthread_condattr_destroy(&ca);
    frame_reader_init(&c->rd, ctx, META_MAX_REPLY);
    ferry_status_t st = meta_addr_parse(c->address, c->service_host, &c->port, err);
    if (st == FERRY_OK && !c->token_given) st = meta_token_precheck(ctx, c->service_host, c->port, err);
    if (st == FERRY_OK) st = connect_retry(c, err);
    if (st == FERRY_OK && pthread_create(&c->hb, NULL, heartbeat_main, c) != 0)
        st = ferry_fail(err, FERRY_ERR_IO, "meta: cannot start the heartbeat thread");
    if (st != FERRY_OK) {
        meta_client_destroy(c);
        return st;
    }
    c->hb_started = true;
    *out = c;
    return FERRY_OK;
}

void meta_client_destroy(meta_client_t *c) {
    if (!c) return;
    if (c->hb_started) {
        pthread_mutex_lock(&c->hb_lock);
        c->hb_stop = true;
        pthread_cond_signal(&c->hb_cond);
        pthread_mutex_unlock(&c->hb_lock);
        pthread_join(c->hb, NULL);
    }
    if (c->fd >= 0) {
        FerryMeta__Ok ok = FERRY_META__OK__INIT;
        ferry_errbuf_t err;
        (void)send_frame(c, META_BYE, &ok.base, NULL, &err); /* a goodbye is not worth interrupting */
        close(c->fd);
    }
    frame_reader_free(&c->rd);
    ferry_free(c->ctx, c->gone);
    pthread_mutex_destroy(&c->send_lock);
    pthread_mutex_destroy(&c->hb_lock);
    pthread_cond_destroy(&c->hb_cond);
    ferry_free(c->ctx, c);
}

void meta_client_set_replay(meta_client_t *c, meta_replay_fn fn, void *opaque) {
    c->replay = fn;
    c->replay_opaque = opaque;
}

static ferry_status_t reconnect(meta_client_t *c, ferry_errbuf_t *err) {
    disconnect(c);
    ferry_log(c->ctx, FERRY_LOG_INFO, "meta: lost the service at %s; reconnecting", c->address);
    ferry_status_t st = connect_retry(c, err);
    if (st == FERRY_OK && c->replay) {
        c->replaying = true;
        st = c->replay(c, c->replay_opaque, err);
        c->replaying = false;
    }
    return st;
}

ferry_status_t meta_client_call_between(meta_client_t *c, uint8_t type, const ProtobufCMessage *req, uint8_t reply_type,
                                        uint32_t wait_ms, ProtobufCMessage **reply, meta_between_fn between,
                                        void *opaque, ferry_errbuf_t *err) {
    for (int attempt = 0;; attempt++) {
        c->service_error = false;
        ferry_status_t st = c->fd >= 0 ? send_frame(c, type, req, c->intr, err)
                                       : ferry_fail(err, FERRY_ERR_PEER_LOST, "meta: not connected");
        if (st == FERRY_OK && between) st = between(c, opaque, err);
        if (st == FERRY_OK)
            st = read_reply(c, reply_type, ferry_mono_s() + (wait_ms + (double)c->p.timeout_ms) / 1000.0, reply, err);
        if (st != FERRY_ERR_PEER_LOST || c->replaying || attempt > 0) {
            /* any failure but the service's own ERROR leaves the stream out of
             * step (a reply may still come, a frame was lost): start afresh */
            if (st != FERRY_OK && !c->service_error) disconnect(c);
            return st;
        }
        st = reconnect(c, err);
        if (st != FERRY_OK) return st;
    }
}

ferry_status_t meta_client_call(meta_client_t *c, uint8_t type, const ProtobufCMessage *req, uint8_t reply_type,
                                uint32_t wait_ms, ProtobufCMessage **reply, ferry_errbuf_t *err) {
    return meta_client_call_between(c, type, req, reply_type, wait_ms, reply, NULL, NULL, err);
}

/* A one-way message from inside a call (no reconnection there: the call's
 * own retry covers it). */
ferry_status_t meta_client_send_raw(meta_client_t *c, uint8_t type, const ProtobufCMessage *msg, ferry_errbuf_t *err) {
    return send_frame(c, type, msg, c->intr, err);
}

ferry_status_t meta_client_send(meta_client_t *c, uint8_t type, const ProtobufCMessage *msg, ferry_errbuf_t *err) {
    ferry_status_t st = send_frame(c, type, msg, c->intr, err);
    if (st == FERRY_ERR_PEER_LOST && !c->replaying) {
        st = reconnect(c, err);
        if (st == FERRY_OK) st = send_frame(c, type, msg, c->intr, err);
    }
    if (st == FERRY_ERR_INTERRUPTED) disconnect(c); /* a frame may be half sent: start afresh */
    return st;
}

uint64_t meta_client_incarnation(const meta_client_t *c) { return c->incarnation; }
uint64_t meta_client_events(const meta_client_t *c) { return atomic_load(&c->events); }
const char *meta_client_host(const meta_client_t *c) { return c->host; }
ferry_ctx_t *meta_client_ctx(const meta_client_t *c) { return c->ctx; }

/* Between requests only what the service pushed can arrive: events. */
static void poll_events(meta_client_t *c) {
    while (c->fd >= 0) {
        uint8_t type;
        const uint8_t *body;
        uint32_t len;
        ferry_errbuf_t err;
        ferry_status_t st = meta_read_frame(c->fd, &c->rd, ferry_mono_s(), NULL, &type, &body, &len, &err);
        if (st == FERRY_ERR_TIMEOUT) return; /* nothing more for now */
        if (st != FERRY_OK || type != META_EVENT) { /* out of step: the next request starts afresh */
            disconnect(c);
            return;
        }
        absorb_event(c, body, len);
    }
}

bool meta_client_departed(meta_client_t *c, uint32_t role, uint32_t rank, char *buf, size_t size) {
    poll_events(c);
    for (size_t k = 0; k < c->ngone; k++)
        if (c->gone[k].role == role && c->gone[k].rank == rank) {
            snprintf(buf, size, "%s", c->gone[k].detail);
            return true;
        }
    return false;
}
