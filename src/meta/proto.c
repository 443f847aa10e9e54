/* Metadata protocol, message layer: see proto.h. */
#include <string.h>

#include "meta/frame.h"
#include "meta/proto.h"

static const struct {
    const char *name;
    const ProtobufCMessageDescriptor *desc;
} types[META_TYPE_END] = {
    [META_HELLO] = {"HELLO", &ferry_meta__hello__descriptor},
    [META_WELCOME] = {"WELCOME", &ferry_meta__welcome__descriptor},
    [META_ERROR] = {"ERROR", &ferry_meta__error__descriptor},
    [META_OK] = {"OK", &ferry_meta__ok__descriptor},
    [META_HEARTBEAT] = {"HEARTBEAT", &ferry_meta__ok__descriptor},
    [META_BYE] = {"BYE", &ferry_meta__ok__descriptor},
    [META_COMMIT] = {"COMMIT", &ferry_meta__commit__descriptor},
    [META_GET_LAYOUTS] = {"GET_LAYOUTS", &ferry_meta__get_layouts__descriptor},
    [META_LAYOUTS] = {"LAYOUTS", &ferry_meta__layouts__descriptor},
    [META_PUBLISH] = {"PUBLISH", &ferry_meta__publish__descriptor},
    [META_PUBLISHED] = {"PUBLISHED", &ferry_meta__published__descriptor},
    [META_RECLAIM] = {"RECLAIM", &ferry_meta__reclaim__descriptor},
    [META_RETIRE] = {"RETIRE", &ferry_meta__retire__descriptor},
    [META_READ_BEGIN] = {"READ_BEGIN", &ferry_meta__read_begin__descriptor},
    [META_GRANT] = {"GRANT", &ferry_meta__grant__descriptor},
    [META_READ_END] = {"READ_END", &ferry_meta__read_end__descriptor},
    [META_READ_ENDED] = {"READ_ENDED", &ferry_meta__read_ended__descriptor},
    [META_GET_STATUS] = {"GET_STATUS", &ferry_meta__get_status__descriptor},
    [META_STATUS] = {"STATUS", &ferry_meta__status__descriptor},
    [META_EVENT] = {"EVENT", &ferry_meta__event__descriptor},
    [META_SUMS] = {"SUMS", &ferry_meta__sums__descriptor},
    [META_GET_SUMS] = {"GET_SUMS", &ferry_meta__get_sums__descriptor},
    [META_TABLE_COMPLETE] = {"TABLE_COMPLETE", &ferry_meta__table_complete__descriptor},
    [META_TABLE_GET] = {"TABLE_GET", &ferry_meta__table_get__descriptor},
    [META_TABLE_CONTENTS] = {"TABLE_CONTENTS", &ferry_meta__table_contents__descriptor},
    [META_TABLE_DROP] = {"TABLE_DROP", &ferry_meta__table_drop__descriptor},
};

const char *meta_type_name(uint8_t type) {
    return type < META_TYPE_END && types[type].name ? types[type].name : "UNKNOWN";
}

const ProtobufCMessageDescriptor *meta_descriptor(uint8_t type) {
    return type < META_TYPE_END ? types[type].desc : NULL;
}

static void *pa_alloc(void *opaque, size_t size) { return ferry_alloc(opaque, size ? size : 1); }
static void pa_free(void *opaque, void *ptr) { ferry_free(opaque, ptr); }

ProtobufCAllocator meta_allocator(ferry_ctx_t *ctx) {
    return (ProtobufCAllocator){.alloc = pa_alloc, .free = pa_free, .allocator_data = ctx};
}

ferry_status_t meta_encode(ferry_ctx_t *ctx, uint8_t type, const ProtobufCMessage *msg, uint8_t **out,
                           size_t *len, ferry_errbuf_t *err) {
    const ProtobufCMessageDescriptor *d = meta_descriptor(type);
    if (!d || msg->descriptor != d)
        return ferry_fail(err, FERRY_ERR_INTERNAL, "meta: frame type %u does not carry %s", type,
                          msg->descriptor->name);
    size_t body = protobuf_c_message_get_packed_size(msg);
    if (body > UINT32_MAX)
        return ferry_fail(err, FERRY_ERR_LIMIT, "meta: a %s of %zu bytes does not fit a frame", meta_type_name(type),
                          body);
    uint8_t *buf = ferry_alloc(ctx, FRAME_HEADER + body);
    if (!buf) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "meta: out of memory encoding a %zu-byte %s", body,
                                meta_type_name(type));
    size_t packed = protobuf_c_message_pack(msg, buf + FRAME_HEADER);
    if (packed != body) {
        ferry_free(ctx, buf);
        return ferry_fail(err, FERRY_ERR_INTERNAL, "meta: %s packed to %zu bytes, expected %zu", meta_type_name(type),
                          packed, body);
    }
    frame_header(type, buf + FRAME_HEADER, (uint32_t)body, buf);
    *out = buf;
    *len = FRAME_HEADER + body;
    return FERRY_OK;
}

/* ---- limits ------------------------------------------------------------------ */

#define CHECK_STR(s, max, what)                                                                            \
    do {                                                                                                   \
        if ((s) && strlen(s) > (max))                                                                      \
            return ferry_fail(err, FERRY_ERR_LIMIT, "meta: %s of %zu bytes exceeds %u", what, strlen(s), \
                              (unsigned)(max));                                                            \
    } while (0)
#define CHECK_N(n, max, what)                                                                             \
    do {                                                                                                  \
        if ((size_t)(n) > (size_t)(max))                                                                  \
            return ferry_fail(err, FERRY_ERR_LIMIT, "meta: %zu %s exceed the limit of %zu", (size_t)(n), \
                              what, (size_t)(max));                                                       \
    } while (0)

ferry_status_t meta_check_slot_map(const FerryMeta__SlotMap *map, ferry_errbuf_t *err) {
    if (!map) return ferry_fail(err, FERRY_ERR_CORRUPT, "meta: slot map missing");
    CHECK_N(map->n_regions, META_MAX_REGIONS, "slot map regions");
    CHECK_N(map->n_buffer_region, META_MAX_BUFFERS, "slot map buffers");
    if (map->n_buffer_offset != map->n_buffer_region)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "meta: slot map has %zu buffer regions but %zu offsets",
                          map->n_buffer_region, map->n_buffer_offset);
    for (size_t i = 0; i < map->n_regions; i++)
        if (map->regions[i].len == 0 || map->regions[i].len > 1024)
            return ferry_fail(err, FERRY_ERR_LIMIT, "meta: slot map region %zu has a %zu-byte descriptor", i,
                              map->regions[i].len);
    for (size_t i = 0; i < map->n_buffer_region; i++)
        if (map->buffer_region[i] >= map->n_regions)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "meta: slot map buffer %zu names region %u of %zu", i,
                              map->buffer_region[i], map->n_regions);
    if (map->has_pack && map->pack_region >= map->n_regions)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "meta: slot map pack area names region %u of %zu",
                          map->pack_region, map->n_regions);
    return FERRY_OK;
}

static ferry_status_t check_table_complete(const FerryMeta__TableComplete *t, ferry_errbuf_t *err) {
    CHECK_N(t->n_regions, META_MAX_REGIONS, "table regions");
    CHECK_N(t->n_entries, META_MAX_BUFFERS, "table entries");
    for (size_t i = 0; i < t->n_regions; i++)
        if (t->regions[i].len == 0 || t->regions[i].len > 1024)
            return ferry_fail(err, FERRY_ERR_LIMIT, "meta: table region %zu has a %zu-byte descriptor", i, t->regions[i].len);
    for (size_t i = 0; i < t->n_entries; i++) {
        const FerryMeta__TableEntry *e = t->entries[i];
        CHECK_STR(e->name, 4096, "tensor name");
        if (!e->name || !*e->name || e->n_shape > 8 || e->n_offset != e->n_shape || e->n_extent != e->n_shape ||
            e->region >= t->n_regions)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "meta: table entry %zu is malformed", i);
    }
    return FERRY_OK;
}

static ferry_status_t check_limits(uint8_t type, const ProtobufCMessage *m, ferry_errbuf_t *err) {
    switch (type) {
    case META_HELLO: {
        const FerryMeta__Hello *h = (const void *)m;
        CHECK_N(h->token.len, META_MAX_TOKEN, "token bytes");
        CHECK_STR(h->job, META_MAX_NAME, "job name");
        CHECK_STR(h->host, META_MAX_NAME, "host name");
        if (h->role < META_ROLE_WRITER || h->role >= META_ROLE_END)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "meta: role %u is not writer, reader, observer or table", h->role);
        if (h->role != META_ROLE_OBSERVER && (h->world == 0 || h->world > META_MAX_WORLD || h->rank >= h->world))
            return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "meta: rank %u of world %u", h->rank, h->world);
        return FERRY_OK;
    }
    case META_ERROR: CHECK_STR(((const FerryMeta__Error *)m)->detail, META_MAX_DETAIL, "error detail"); return FERRY_OK;
    case META_EVENT: CHECK_STR(((const FerryMeta__Event *)m)->detail, META_MAX_DETAIL, "event detail"); return FERRY_OK;
    case META_LAYOUTS: {
        const FerryMeta__Layouts *l = (const void *)m;
        CHECK_N(l->n_writers, META_MAX_WORLD, "writer layouts");
        CHECK_N(l->n_readers, META_MAX_WORLD, "reader layouts");
        return FERRY_OK;
    }
    case META_PUBLISH: {
        const FerryMeta__Publish *p = (const void *)m;
        CHECK_N(p->n_sums, META_MAX_WORLD, "per-reader checksum lists");
        if (p->version == 0) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "meta: version 0 is reserved");
        return meta_check_slot_map(p->map, err);
    }
    case META_COMMIT: {
        const FerryMeta__Commit *c = (const void *)m;
        CHECK_N(c->n_epoch_writers, META_MAX_WORLD, "epoch writer layouts");
        CHECK_N(c->n_epoch_readers, META_MAX_WORLD, "epoch reader layouts");
        return FERRY_OK;
    }
    case META_SUMS: CHECK_N(((const FerryMeta__Sums *)m)->n_sums, META_MAX_WORLD, "per-reader checksum lists"); return FERRY_OK;
    case META_GET_SUMS: CHECK_N(((const FerryMeta__GetSums *)m)->n_writers, META_MAX_WORLD, "writers"); return FERRY_OK;
    case META_TABLE_COMPLETE: return check_table_complete((const FerryMeta__TableComplete *)m, err);
    case META_TABLE_CONTENTS: {
        const FerryMeta__TableContents *tc = (const void *)m;
        CHECK_N(tc->n_members, META_MAX_WORLD, "table members");
        for (size_t i = 0; i < tc->n_members; i++) {
            if (!tc->members[i]->seq) return ferry_fail(err, FERRY_ERR_CORRUPT, "meta: table member %zu without puts", i);
            ferry_status_t st = check_table_complete(tc->members[i]->seq, err);
            if (st != FERRY_OK) return st;
        }
        return FERRY_OK;
    }
    case META_PUBLISHED: CHECK_N(((const FerryMeta__Published *)m)->n_missing, META_MAX_WORLD, "missing readers"); return FERRY_OK;
    case META_READ_BEGIN: CHECK_N(((const FerryMeta__ReadBegin *)m)->n_writers, META_MAX_WORLD, "writers"); return FERRY_OK;
    case META_GRANT: {
        const FerryMeta__Grant *g = (const void *)m;
        CHECK_N(g->n_writers, META_MAX_WORLD, "writer grants");
        for (size_t i = 0; i < g->n_writers; i++) {
            if (!g->writers[i]->map) continue; /* an answer to GET_SUMS carries checksums only */
            ferry_status_t st = meta_check_slot_map(g->writers[i]->map, err);
            if (st != FERRY_OK) return st;
        }
        return FERRY_OK;
    }
    case META_STATUS: {
        const FerryMeta__Status *s = (const void *)m;
        CHECK_STR(s->job, META_MAX_NAME, "job name");
        for (size_t i = 0; i < s->n_members; i++) CHECK_STR(s->members[i]->host, META_MAX_NAME, "host name");
        return FERRY_OK;
    }
    default: return FERRY_OK;
    }
}

/* Drops the fields this side does not know, in m and every message inside
 * it: they are never relayed (protobuf-c keeps some it could not encode
 * back, e.g. field number 0 behind a two-byte tag). */
static void strip_unknown(ProtobufCMessage *m, ProtobufCAllocator *a) {
    for (unsigned i = 0; i < m->n_unknown_fields; i++) a->free(a->allocator_data, m->unknown_fields[i].data);
    if (m->unknown_fields) a->free(a->allocator_data, m->unknown_fields);
    m->unknown_fields = NULL;
    m->n_unknown_fields = 0;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned f = 0; f < d->n_fields; f++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[f];
        if (fd->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        char *at = (char *)m + fd->offset;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(size_t *)((char *)m + fd->quantifier_offset);
            ProtobufCMessage **subs = *(ProtobufCMessage ***)at;
            for (size_t k = 0; k < n; k++)
                if (subs[k]) strip_unknown(subs[k], a);
        } else {
            ProtobufCMessage *sub = *(ProtobufCMessage **)at;
            if (sub) strip_unknown(sub, a);
        }
    }
}

ferry_status_t meta_decode(ferry_ctx_t *ctx, uint8_t type, const uint8_t *body, size_t len,
                           ProtobufCMessage **out, ferry_errbuf_t *err) {
    const ProtobufCMessageDescriptor *d = meta_descriptor(type);
    if (!d) return ferry_fail(err, FERRY_ERR_UNSUPPORTED, "meta: unknown message type %u", type);
    ProtobufCAllocator a = meta_allocator(ctx);
    ProtobufCMessage *m = protobuf_c_message_unpack(d, &a, len, len ? body : (const uint8_t *)"");
    if (!m)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "meta: a %zu-byte %s body is not a valid %s message", len,
                          meta_type_name(type), d->short_name);
    strip_unknown(m, &a);
    ferry_status_t st = check_limits(type, m, err);
    if (st != FERRY_OK) {
        protobuf_c_message_free_unpacked(m, &a);
        return st;
    }
    *out = m;
    return FERRY_OK;
}

void meta_free(ferry_ctx_t *ctx, ProtobufCMessage *msg) {
    if (!msg) return;
    ProtobufCAllocator a = meta_allocator(ctx);
    protobuf_c_message_free_unpacked(msg, &a);
}
