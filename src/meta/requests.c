/* Metadata protocol, typed requests: see requests.h. Each call builds its
 * request message from the plain struct field by field (so the bytes on
 * the wire are what a hand-built message gave), sends it with the client's
 * message-level call, and turns the decoded reply into a plain struct
 * whose pointers lead into the decoded message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "meta/client_msg.h"
#include "meta/requests.h"

/* ---- shared pieces -------------------------------------------------------------- */

static ferry_status_t no_memory(ferry_errbuf_t *err, const char *what) {
    return ferry_fail(err, FERRY_ERR_NO_MEMORY, "meta: out of memory building a %s", what);
}

/* A request the interrupt hook cut short: the detail says what the caller
 * was waiting for ("interrupted while waiting for version 3 to be ready");
 * the client's own account is kept where it stopped elsewhere than in the
 * wait for the reply (connecting again). Any other status passes through. */
static ferry_status_t interrupted(ferry_status_t st, ferry_errbuf_t *err, const char *fmt, ...) FERRY_PRINTF(3, 4);
static ferry_status_t interrupted(ferry_status_t st, ferry_errbuf_t *err, const char *fmt, ...) {
    if (st != FERRY_ERR_INTERRUPTED) return st;
    char what[200], low[FERRY_ERR_TEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(low, sizeof low, "%s", err->text);
    bool connecting = strstr(low, "connecting") != NULL;
    return ferry_fail(err, st, "interrupted while %s%s%.280s%s", what, connecting ? " (" : "", connecting ? low : "",
                      connecting ? ")" : "");
}

/* Byte strings as protobuf sees them; *out: free with ferry_free. */
static ferry_status_t pb_bytes(ferry_ctx_t *ctx, const meta_bytes_t *in, size_t n, ProtobufCBinaryData **out,
                               ferry_errbuf_t *err, const char *what) {
    ProtobufCBinaryData *b = ferry_calloc(ctx, n ? n : 1, sizeof *b);
    if (!b) return no_memory(err, what);
    for (size_t i = 0; i < n; i++) b[i] = (ProtobufCBinaryData){in[i].len, (uint8_t *)in[i].data};
    *out = b;
    return FERRY_OK;
}

static void plain_bytes(const ProtobufCBinaryData *in, size_t n, meta_bytes_t *out) {
    for (size_t i = 0; i < n; i++) out[i] = (meta_bytes_t){in[i].data, in[i].len};
}

/* A SlotMap from a plain one; regions: n_regions entries of storage. */
static void pb_slot_map(const meta_slot_map_t *in, FerryMeta__SlotMap *out, ProtobufCBinaryData *regions) {
    ferry_meta__slot_map__init(out);
    for (size_t i = 0; i < in->n_regions; i++) regions[i] = (ProtobufCBinaryData){in->regions[i].len, (uint8_t *)in->regions[i].data};
    out->n_regions = in->n_regions;
    out->regions = regions;
    out->n_buffer_region = out->n_buffer_offset = in->n_buffers;
    out->buffer_region = (uint32_t *)in->buffer_region;
    out->buffer_offset = (uint64_t *)in->buffer_offset;
    out->has_pack = in->has_pack;
    out->pack_region = in->pack_region;
    out->pack_offset = in->pack_offset;
    out->has_delta = in->has_delta;
    out->delta_region = in->delta_region;
}

/* A plain SlotMap from a decoded (checked) one; regions: storage. */
static void plain_slot_map(const FerryMeta__SlotMap *in, meta_slot_map_t *out, meta_bytes_t *regions) {
    plain_bytes(in->regions, in->n_regions, regions);
    *out = (meta_slot_map_t){.regions = regions,
                             .n_regions = in->n_regions,
                             .buffer_region = in->buffer_region,
                             .buffer_offset = in->buffer_offset,
                             .n_buffers = in->n_buffer_region,
                             .has_pack = in->has_pack,
                             .pack_region = in->pack_region,
                             .pack_offset = in->pack_offset,
                             .has_delta = in->has_delta,
                             .delta_region = in->delta_region};
}

/* PairSums from plain ones; *arr and *ptrs: free with ferry_free. */
static ferry_status_t pb_pair_sums(ferry_ctx_t *ctx, const meta_pair_sums_t *in, size_t n, FerryMeta__PairSums **arr,
                                   FerryMeta__PairSums ***ptrs, ferry_errbuf_t *err) {
    *arr = ferry_calloc(ctx, n ? n : 1, sizeof **arr);
    *ptrs = ferry_calloc(ctx, n ? n : 1, sizeof **ptrs);
    if (!*arr || !*ptrs) {
        ferry_free(ctx, *arr);
        ferry_free(ctx, *ptrs);
        *arr = NULL;
        *ptrs = NULL;
        return no_memory(err, "checksum list");
    }
    for (size_t i = 0; i < n; i++) {
        ferry_meta__pair_sums__init(&(*arr)[i]);
        (*arr)[i].dst_rank = in[i].dst_rank;
        (*arr)[i].n_sums = in[i].n_sums;
        (*arr)[i].sums = (uint64_t *)in[i].sums;
        (*ptrs)[i] = &(*arr)[i];
    }
    return FERRY_OK;
}

/* A request whose reply is OK. */
static ferry_status_t call_ok(meta_client_t *c, uint8_t type, const ProtobufCMessage *req, uint32_t wait_ms,
                              ferry_errbuf_t *err) {
    ProtobufCMessage *reply = NULL;
    ferry_status_t st = meta_client_call(c, type, req, META_OK, wait_ms, &reply, err);
    meta_free(meta_client_ctx(c), reply);
    return st;
}

/* A carved reply block: the struct first, its priv, then arrays. */
typedef struct carve {
    uint8_t *block, *at;
    const uint8_t *end;
} carve_t;

static bool carve_start(ferry_ctx_t *ctx, carve_t *cv, size_t total) {
    cv->block = total < SIZE_MAX ? ferry_calloc(ctx, 1, total) : NULL;
    cv->at = cv->block;
    cv->end = cv->block ? cv->block + total : NULL;
    return cv->block != NULL;
}

static struct meta_reply_priv *carve_priv(carve_t *cv, ferry_ctx_t *ctx, ProtobufCMessage *msg) {
    struct meta_reply_priv *p = meta_carve(&cv->at, cv->end, sizeof *p);
    p->ctx = ctx;
    p->msg = msg;
    return p;
}

static void reply_free(void *reply, struct meta_reply_priv *priv) {
    ferry_ctx_t *ctx = priv->ctx;
    meta_free(ctx, priv->msg);
    ferry_free(ctx, reply);
}

/* ---- layouts -------------------------------------------------------------------- */

ferry_status_t meta_commit(meta_client_t *c, const meta_commit_req_t *req, ferry_errbuf_t *err) {
    ferry_ctx_t *ctx = meta_client_ctx(c);
    FerryMeta__Commit m = FERRY_META__COMMIT__INIT;
    ProtobufCBinaryData *ew = NULL, *er = NULL;
    ferry_status_t st = pb_bytes(ctx, req->epoch_writers, req->n_epoch_writers, &ew, err, "COMMIT");
    if (st == FERRY_OK) st = pb_bytes(ctx, req->epoch_readers, req->n_epoch_readers, &er, err, "COMMIT");
    if (st == FERRY_OK) {
        m.layout = (ProtobufCBinaryData){req->layout.len, (uint8_t *)req->layout.data};
        m.n_epoch_writers = req->n_epoch_writers;
        m.epoch_writers = req->n_epoch_writers ? ew : NULL;
        m.n_epoch_readers = req->n_epoch_readers;
        m.epoch_readers = req->n_epoch_readers ? er : NULL;
        st = interrupted(call_ok(c, META_COMMIT, &m.base, 0, err), err, "committing the layout");
    }
    ferry_free(ctx, ew);
    ferry_free(ctx, er);
    return st;
}

ferry_status_t meta_get_layouts(meta_client_t *c, uint32_t wait_ms, uint64_t known_epoch, meta_layouts_t **out,
                                ferry_errbuf_t *err) {
    ferry_ctx_t *ctx = meta_client_ctx(c);
    FerryMeta__GetLayouts g = FERRY_META__GET_LAYOUTS__INIT;
    g.wait_ms = wait_ms;
    g.known_epoch = known_epoch;
    ProtobufCMessage *reply = NULL;
    ferry_status_t st = meta_client_call(c, META_GET_LAYOUTS, &g.base, META_LAYOUTS, wait_ms, &reply, err);
    if (st != FERRY_OK)
        return interrupted(st, err, "waiting for the layout epoch (every writer and reader to commit its layout)");
    FerryMeta__Layouts *l = (void *)reply;
    size_t total = meta_carve_size(0, 1, sizeof(meta_layouts_t));
    total = meta_carve_size(total, 1, sizeof(struct meta_reply_priv));
    total = meta_carve_size(total, l->n_writers, sizeof(meta_bytes_t));
    total = meta_carve_size(total, l->n_readers, sizeof(meta_bytes_t));
    carve_t cv;
    if (!carve_start(ctx, &cv, total)) {
        meta_free(ctx, reply);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "meta: out of memory reading LAYOUTS");
    }
    meta_layouts_t *o = meta_carve(&cv.at, cv.end, sizeof *o);
    o->priv = carve_priv(&cv, ctx, reply);
    meta_bytes_t *w = meta_carve(&cv.at, cv.end, l->n_writers * sizeof *w);
    meta_bytes_t *r = meta_carve(&cv.at, cv.end, l->n_readers * sizeof *r);
    plain_bytes(l->writers, l->n_writers, w);
    plain_bytes(l->readers, l->n_readers, r);
    o->epoch = l->epoch;
    o->writers = w;
    o->n_writers = l->n_writers;
    o->readers = r;
    o->n_readers = l->n_readers;
    *out = o;
    return FERRY_OK;
}

void meta_layouts_free(meta_layouts_t *l) {
    if (l) reply_free(l, l->priv);
}

/* ---- versions ------------------------------------------------------------------- */

ferry_status_t meta_publish(meta_client_t *c, const meta_publish_req_t *req, meta_between_fn between, void *opaque,
                            meta_published_t *out, ferry_errbuf_t *err) {
    ferry_ctx_t *ctx = meta_client_ctx(c);
    FerryMeta__Publish p = FERRY_META__PUBLISH__INIT;
    FerryMeta__SlotMap map;
    FerryMeta__PairSums *sums = NULL, **sump = NULL;
    ProtobufCBinaryData *regions = ferry_calloc(ctx, req->map->n_regions + 1, sizeof *regions);
    if (!regions) return no_memory(err, "PUBLISH");
    ferry_status_t st = pb_pair_sums(ctx, req->sums, req->n_sums, &sums, &sump, err);
    if (st != FERRY_OK) {
        ferry_free(ctx, regions);
        return st;
    }
    pb_slot_map(req->map, &map, regions);
    p.epoch = req->epoch;
    p.plan_digest = req->plan_digest;
    p.version = req->version;
    p.slot = req->slot;
    p.map = &map;
    p.n_sums = req->n_sums;
    p.sums = req->n_sums ? sump : NULL;
    p.wait_acks = req->wait_acks;
    p.wait_ms = req->wait_ms;
    p.sums_follow = req->sums_follow;
    ProtobufCMessage *reply = NULL;
    st = meta_client_call_between(c, META_PUBLISH, &p.base, META_PUBLISHED, req->wait_acks ? req->wait_ms : 0, &reply,
                                  between, opaque, err);
    st = interrupted(st, err,
                     req->wait_acks ? "waiting for readers to acknowledge version %llu" : "publishing version %llu",
                     (unsigned long long)req->version);
    if (st == FERRY_OK && out) {
        const FerryMeta__Published *pub = (const void *)reply;
        out->ready = pub->ready;
        out->acked = pub->acked;
        out->n_missing = (uint32_t)pub->n_missing; /* at most META_MAX_WORLD */
    }
    meta_free(ctx, reply);
    ferry_free(ctx, regions);
    ferry_free(ctx, sums);
    ferry_free(ctx, sump);
    return st;
}

ferry_status_t meta_publish_sums(meta_client_t *c, uint64_t version, const meta_pair_sums_t *sums, size_t n,
                                 ferry_errbuf_t *err) {
    ferry_ctx_t *ctx = meta_client_ctx(c);
    FerryMeta__PairSums *arr = NULL, **ptrs = NULL;
    ferry_status_t st = pb_pair_sums(ctx, sums, n, &arr, &ptrs, err);
    if (st != FERRY_OK) return st;
    FerryMeta__Sums sm = FERRY_META__SUMS__INIT;
    sm.version = version;
    sm.n_sums = n;
    sm.sums = n ? ptrs : NULL;
    st = interrupted(meta_client_send_raw(c, META_SUMS, &sm.base, err), err, "sending the checksums of version %llu",
                     (unsigned long long)version);
    ferry_free(ctx, arr);
    ferry_free(ctx, ptrs);
    return st;
}

ferry_status_t meta_reclaim(meta_client_t *c, uint64_t version, uint32_t wait_ms, ferry_errbuf_t *err) {
    FerryMeta__Reclaim rc = FERRY_META__RECLAIM__INIT;
    rc.version = version;
    rc.wait_ms = wait_ms;
    return interrupted(call_ok(c, META_RECLAIM, &rc.base, wait_ms, err), err,
                       "waiting for readers to let version %llu go (reusing its slot)", (unsigned long long)version);
}

ferry_status_t meta_retire(meta_client_t *c, uint64_t version, ferry_errbuf_t *err) {
    FerryMeta__Retire rt = FERRY_META__RETIRE__INIT;
    rt.version = version;
    return interrupted(meta_client_send(c, META_RETIRE, &rt.base, err), err, "retiring version %llu",
                       (unsigned long long)version);
}

/* A decoded GRANT (checked: slot maps, counts) as a plain one. */
static ferry_status_t plain_grant(ferry_ctx_t *ctx, ProtobufCMessage *reply, meta_grant_t **out, ferry_errbuf_t *err) {
    const FerryMeta__Grant *g = (const void *)reply;
    size_t nregions = 0;
    for (size_t i = 0; i < g->n_writers; i++)
        if (g->writers[i]->map) nregions += g->writers[i]->map->n_regions; /* each at most META_MAX_REGIONS */
    size_t total = meta_carve_size(0, 1, sizeof(meta_grant_t));
    total = meta_carve_size(total, 1, sizeof(struct meta_reply_priv));
    total = meta_carve_size(total, g->n_writers, sizeof(meta_writer_grant_t));
    total = meta_carve_size(total, nregions, sizeof(meta_bytes_t));
    carve_t cv;
    if (!carve_start(ctx, &cv, total)) {
        meta_free(ctx, reply);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "meta: out of memory reading a GRANT");
    }
    meta_grant_t *o = meta_carve(&cv.at, cv.end, sizeof *o);
    o->priv = carve_priv(&cv, ctx, reply);
    meta_writer_grant_t *ws = meta_carve(&cv.at, cv.end, g->n_writers * sizeof *ws);
    meta_bytes_t *regions = meta_carve(&cv.at, cv.end, nregions * sizeof *regions);
    for (size_t i = 0; i < g->n_writers; i++) {
        const FerryMeta__WriterGrant *wg = g->writers[i];
        ws[i] = (meta_writer_grant_t){.rank = wg->rank,
                                      .incarnation = wg->incarnation,
                                      .slot = wg->slot,
                                      .has_map = wg->map != NULL,
                                      .sums = wg->sums,
                                      .n_sums = wg->n_sums,
                                      .sums_pending = wg->sums_pending};
        if (wg->map) {
            plain_slot_map(wg->map, &ws[i].map, regions);
            regions += wg->map->n_regions;
        }
    }
    o->version = g->version;
    o->writers = ws;
    o->n_writers = g->n_writers;
    *out = o;
    return FERRY_OK;
}

ferry_status_t meta_read_begin(meta_client_t *c, const meta_read_begin_req_t *req, meta_grant_t **out,
                               ferry_errbuf_t *err) {
    FerryMeta__ReadBegin rb = FERRY_META__READ_BEGIN__INIT;
    rb.epoch = req->epoch;
    rb.plan_digest = req->plan_digest;
    rb.min_version = req->min_version;
    rb.max_version = req->max_version;
    rb.wait_ms = req->wait_ms;
    rb.grant_ms = req->grant_ms;
    rb.n_writers = req->n_writers;
    rb.writers = (uint32_t *)req->writers;
    ProtobufCMessage *reply = NULL;
    ferry_status_t st = meta_client_call(c, META_READ_BEGIN, &rb.base, META_GRANT, req->wait_ms, &reply, err);
    if (st == FERRY_ERR_INTERRUPTED) {
        unsigned long long lo = req->min_version, hi = req->max_version;
        if (lo == hi) return interrupted(st, err, "waiting for version %llu to be ready", lo);
        if (hi == 0) return interrupted(st, err, "waiting for a version of at least %llu to be ready", lo);
        return interrupted(st, err, "waiting for a version from %llu to %llu to be ready", lo, hi);
    }
    return st != FERRY_OK ? st : plain_grant(meta_client_ctx(c), reply, out, err);
}

ferry_status_t meta_get_sums(meta_client_t *c, uint64_t version, const uint32_t *writers, size_t n, uint32_t wait_ms,
                             meta_grant_t **out, ferry_errbuf_t *err) {
    FerryMeta__GetSums gs = FERRY_META__GET_SUMS__INIT;
    gs.version = version;
    gs.n_writers = n;
    gs.writers = (uint32_t *)writers;
    gs.wait_ms = wait_ms;
    ProtobufCMessage *reply = NULL;
    ferry_status_t st = meta_client_call(c, META_GET_SUMS, &gs.base, META_GRANT, wait_ms, &reply, err);
    if (st != FERRY_OK)
        return interrupted(st, err, "waiting for the writers' checksums of version %llu", (unsigned long long)version);
    return plain_grant(meta_client_ctx(c), reply, out, err);
}

void meta_grant_free(meta_grant_t *g) {
    if (g) reply_free(g, g->priv);
}

ferry_status_t meta_read_end(meta_client_t *c, uint64_t version, bool ok, bool *retired, ferry_errbuf_t *err) {
    FerryMeta__ReadEnd re = FERRY_META__READ_END__INIT;
    re.version = version;
    re.ok = ok;
    ProtobufCMessage *reply = NULL;
    ferry_status_t st = meta_client_call(c, META_READ_END, &re.base, META_READ_ENDED, 0, &reply, err);
    st = interrupted(st, err, "ending the read of version %llu", (unsigned long long)version);
    if (st == FERRY_OK && retired) *retired = ((const FerryMeta__ReadEnded *)reply)->retired;
    meta_free(meta_client_ctx(c), reply);
    return st;
}

/* ---- TensorTable ---------------------------------------------------------------- */

ferry_status_t meta_table_complete(meta_client_t *c, const meta_table_seq_t *seq, ferry_errbuf_t *err) {
    ferry_ctx_t *ctx = meta_client_ctx(c);
    size_t n = seq->n_entries;
    FerryMeta__TableEntry *es = ferry_calloc(ctx, n + 1, sizeof *es);
    FerryMeta__TableEntry **ep = ferry_calloc(ctx, n + 1, sizeof *ep);
    ProtobufCBinaryData *regions = NULL;
    ferry_status_t st = !es || !ep ? no_memory(err, "TABLE_COMPLETE")
                                   : pb_bytes(ctx, seq->regions, seq->n_regions, &regions, err, "TABLE_COMPLETE");
    if (st == FERRY_OK) {
        for (size_t i = 0; i < n; i++) {
            const meta_table_entry_t *e = &seq->entries[i];
            ferry_meta__table_entry__init(&es[i]);
            es[i].name = (char *)e->name;
            es[i].dtype = e->dtype;
            es[i].n_shape = es[i].n_offset = es[i].n_extent = e->ndim;
            es[i].shape = (int64_t *)e->shape;
            es[i].offset = (int64_t *)e->offset;
            es[i].extent = (int64_t *)e->extent;
            es[i].region = e->region;
            es[i].byte_offset = e->byte_offset;
            es[i].n_tile_sums = e->n_tile_sums;
            es[i].tile_sums = (uint64_t *)e->tile_sums;
            ep[i] = &es[i];
        }
        FerryMeta__TableComplete tc = FERRY_META__TABLE_COMPLETE__INIT;
        tc.seq_id = seq->seq_id;
        tc.n_regions = seq->n_regions;
        tc.regions = seq->n_regions ? regions : NULL;
        tc.n_entries = n;
        tc.entries = n ? ep : NULL;
        st = interrupted(call_ok(c, META_TABLE_COMPLETE, &tc.base, 0, err), err, "completing table sequence %llu",
                         (unsigned long long)seq->seq_id);
    }
    ferry_free(ctx, es);
    ferry_free(ctx, ep);
    ferry_free(ctx, regions);
    return st;
}

ferry_status_t meta_table_get(meta_client_t *c, uint64_t seq_id, uint32_t wait_ms, meta_table_contents_t **out,
                              ferry_errbuf_t *err) {
    ferry_ctx_t *ctx = meta_client_ctx(c);
    FerryMeta__TableGet tg = FERRY_META__TABLE_GET__INIT;
    tg.seq_id = seq_id;
    tg.wait_ms = wait_ms;
    ProtobufCMessage *reply = NULL;
    ferry_status_t st = meta_client_call(c, META_TABLE_GET, &tg.base, META_TABLE_CONTENTS, wait_ms, &reply, err);
    if (st != FERRY_OK)
        return interrupted(st, err, "waiting for every table member to complete sequence %llu",
                           (unsigned long long)seq_id);
    const FerryMeta__TableContents *tc = (const void *)reply;
    size_t nentries = 0, nregions = 0; /* every member has its puts (checked at decoding) */
    for (size_t i = 0; i < tc->n_members; i++) {
        nentries += tc->members[i]->seq->n_entries;
        nregions += tc->members[i]->seq->n_regions;
    }
    size_t total = meta_carve_size(0, 1, sizeof(meta_table_contents_t));
    total = meta_carve_size(total, 1, sizeof(struct meta_reply_priv));
    total = meta_carve_size(total, tc->n_members, sizeof(meta_table_member_t));
    total = meta_carve_size(total, nentries, sizeof(meta_table_entry_t));
    total = meta_carve_size(total, nregions, sizeof(meta_bytes_t));
    carve_t cv;
    if (!carve_start(ctx, &cv, total)) {
        meta_free(ctx, reply);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "meta: out of memory reading TABLE_CONTENTS");
    }
    meta_table_contents_t *o = meta_carve(&cv.at, cv.end, sizeof *o);
    o->priv = carve_priv(&cv, ctx, reply);
    meta_table_member_t *ms = meta_carve(&cv.at, cv.end, tc->n_members * sizeof *ms);
    meta_table_entry_t *es = meta_carve(&cv.at, cv.end, nentries * sizeof *es);
    meta_bytes_t *regions = meta_carve(&cv.at, cv.end, nregions * sizeof *regions);
    for (size_t i = 0; i < tc->n_members; i++) {
        const FerryMeta__TableMember *mb = tc->members[i];
        const FerryMeta__TableComplete *sq = mb->seq;
        plain_bytes(sq->regions, sq->n_regions, regions);
        for (size_t e = 0; e < sq->n_entries; e++) {
            const FerryMeta__TableEntry *te = sq->entries[e];
            es[e] = (meta_table_entry_t){.name = te->name,
                                         .dtype = te->dtype,
                                         .ndim = (uint32_t)te->n_shape, /* offset and extent: as many (checked) */
                                         .shape = te->shape,
                                         .offset = te->offset,
                                         .extent = te->extent,
                                         .region = te->region,
                                         .byte_offset = te->byte_offset,
                                         .tile_sums = te->tile_sums,
                                         .n_tile_sums = te->n_tile_sums};
        }
        ms[i] = (meta_table_member_t){.rank = mb->rank,
                                      .incarnation = mb->incarnation,
                                      .seq = {.seq_id = sq->seq_id,
                                              .regions = regions,
                                              .n_regions = sq->n_regions,
                                              .entries = es,
                                              .n_entries = sq->n_entries}};
        regions += sq->n_regions;
        es += sq->n_entries;
    }
    o->seq_id = tc->seq_id;
    o->members = ms;
    o->n_members = tc->n_members;
    *out = o;
    return FERRY_OK;
}

void meta_table_contents_free(meta_table_contents_t *tc) {
    if (tc) reply_free(tc, tc->priv);
}

ferry_status_t meta_table_drop(meta_client_t *c, uint64_t seq_id, ferry_errbuf_t *err) {
    FerryMeta__TableDrop d = FERRY_META__TABLE_DROP__INIT;
    d.seq_id = seq_id;
    return interrupted(meta_client_send(c, META_TABLE_DROP, &d.base, err), err, "dropping table sequence %llu",
                       (unsigned long long)seq_id);
}
