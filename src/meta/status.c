/* ferry_meta_status_json: one GET_STATUS as an observer, as JSON. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/meta.h"
#include "meta/client_msg.h"

ferry_status_t ferry_meta_status_json(ferry_ctx_t *ctx, const char *address, const char *token,
                                      uint32_t timeout_ms, char **json) {
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    if (!address || !json) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "address and json are required");
    if (!token) token = ferry_ctx_config_value(ctx, "FERRY_TOKEN", NULL);
    meta_client_params_t cp = {.address = address,
                               .token = token ? token : "",
                               .job = "",
                               .role = META_ROLE_OBSERVER,
                               .lease_ms = 10000,
                               .timeout_ms = timeout_ms ? timeout_ms : 5000};
    meta_client_t *c;
    ferry_status_t st = meta_client_create(ctx, &cp, &c, err);
    if (st != FERRY_OK) return st;
    FerryMeta__GetStatus g = FERRY_META__GET_STATUS__INIT;
    ProtobufCMessage *reply = NULL;
    st = meta_client_call(c, META_GET_STATUS, &g.base, META_STATUS, 0, &reply, err);
    meta_client_destroy(c);
    if (st != FERRY_OK) return st;
    const FerryMeta__Status *s = (const void *)reply;
    json_t *o = json_object(), *ms = json_array();
    json_object_set_new(o, "job", json_string(s->job ? s->job : ""));
    json_object_set_new(o, "writers", json_integer(s->writers));
    json_object_set_new(o, "readers", json_integer(s->readers));
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)s->epoch);
    json_object_set_new(o, "epoch", s->epoch ? json_string(hex) : json_null());
    json_object_set_new(o, "ready", json_integer((json_int_t)s->ready));
    for (size_t i = 0; i < s->n_members; i++) {
        const FerryMeta__MemberStatus *m = s->members[i];
        json_array_append_new(ms, json_pack("{s:s, s:I, s:s, s:I, s:b, s:b, s:I, s:I}", "role",
                                            m->role == META_ROLE_WRITER ? "writer" : "reader", "rank",
                                            (json_int_t)m->rank, "host", m->host ? m->host : "", "pid",
                                            (json_int_t)m->pid, "present", m->pid != 0, "committed", m->committed,
                                            "published", (json_int_t)m->published, "acked", (json_int_t)m->acked));
    }
    json_object_set_new(o, "members", ms);
    char *text = json_dumps(o, JSON_INDENT(2));
    json_decref(o);
    meta_free(ctx, reply);
    if (!text) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory formatting the status");
    *json = text;
    return FERRY_OK;
}
