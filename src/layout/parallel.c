/* Parallel configuration strings: "tp=4,pp=2,ep=1,dp=2". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/internal.h"
#include "ferry/layout.h"

#define PAR_MAX_SIZE 65536u /* no parallel size beyond this */

ferry_parallel_t ferry_parallel_defaults(ferry_side_t side) {
    ferry_parallel_t p;
    memset(&p, 0, sizeof p);
    p.side = side;
    p.tp = p.ep = p.dp = 1;
    p.pp = p.vpp = p.cp = p.etp = 1;
    p.replicas = 1;
    p.buffers = FERRY_BUFFERS_PER_PARAM;
    p.vocab_multiple = side == FERRY_SIDE_TRAIN ? 128 : 64;
    return p;
}

uint32_t ferry_parallel_world_size(const ferry_parallel_t *p) {
    uint64_t w = p->side == FERRY_SIDE_TRAIN ? (uint64_t)p->tp * p->cp * p->dp * p->pp
                                             : (uint64_t)p->tp * p->replicas;
    return w > UINT32_MAX ? 0 : (uint32_t)w;
}

static int parse_u32(const char *s, size_t len, uint32_t lo, uint32_t hi, uint32_t *out) {
    if (len == 0 || len > 9) return -1;
    uint32_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (uint32_t)(s[i] - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

typedef struct {
    const char *key;
    size_t offset; /* of a uint32_t field */
    uint32_t lo, sides;
} size_key_t;

#define TRAIN_ONLY 1u
#define INFER_ONLY 2u
#define BOTH 3u

static const size_key_t size_keys[] = {
    {"tp", offsetof(ferry_parallel_t, tp), 1, BOTH},
    {"ep", offsetof(ferry_parallel_t, ep), 1, BOTH},
    {"dp", offsetof(ferry_parallel_t, dp), 1, BOTH},
    {"vocab_multiple", offsetof(ferry_parallel_t, vocab_multiple), 1, BOTH},
    {"pp", offsetof(ferry_parallel_t, pp), 1, TRAIN_ONLY},
    {"vpp", offsetof(ferry_parallel_t, vpp), 1, TRAIN_ONLY},
    {"cp", offsetof(ferry_parallel_t, cp), 1, TRAIN_ONLY},
    {"etp", offsetof(ferry_parallel_t, etp), 1, TRAIN_ONLY},
    {"pp_first", offsetof(ferry_parallel_t, pp_first), 1, TRAIN_ONLY},
    {"pp_last", offsetof(ferry_parallel_t, pp_last), 1, TRAIN_ONLY},
    {"replicas", offsetof(ferry_parallel_t, replicas), 1, INFER_ONLY},
};

static const char *side_name(ferry_side_t side) {
    return side == FERRY_SIDE_TRAIN ? "train" : "infer";
}

ferry_status_t ferry_parallel_parse(ferry_ctx_t *ctx, ferry_side_t side, const char *spec,
                                    ferry_parallel_t *out) {
    if (!ctx) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    if (!spec || !out)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry_parallel_parse: NULL argument");
    if (side != FERRY_SIDE_TRAIN && side != FERRY_SIDE_INFER)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "parallel spec: side must be train or infer");
    if (strlen(spec) > 4096)
        return ferry_fail(err, FERRY_ERR_LIMIT, "parallel spec longer than 4096 characters");
    ferry_parallel_t p = ferry_parallel_defaults(side);
    uint32_t sidebit = side == FERRY_SIDE_TRAIN ? TRAIN_ONLY : INFER_ONLY;
    const char *s = spec;
    /* a key given twice would silently take its last value: refused */
    uint32_t seen = 0;
    static const char *const other_keys[] = {"pp_layers", "experts", "buffers", "transpose"};
    while (*s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        const char *eq = memchr(s, '=', len);
        if (len == 0)
            return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                              "parallel spec \"%s\": an empty entry (two commas, or one at an end)", spec);
        if (!eq)
            return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                              "parallel spec \"%s\": \"%.*s\" is not key=value", spec, (int)len, s);
        size_t klen = (size_t)(eq - s);
        const char *val = eq + 1;
        size_t vlen = len - klen - 1;
        size_t nsize = sizeof size_keys / sizeof size_keys[0];
        for (size_t i = 0; i < nsize + sizeof other_keys / sizeof other_keys[0]; i++) {
            const char *key = i < nsize ? size_keys[i].key : other_keys[i - nsize];
            if (strlen(key) != klen || strncmp(key, s, klen) != 0) continue;
            if (seen & (1u << i))
                return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "parallel spec \"%s\": key \"%s\" is given twice",
                                  spec, key);
            seen |= 1u << i;
        }
        bool done = false;
        for (size_t i = 0; i < nsize; i++) {
            const size_key_t *k = &size_keys[i];
            if (strlen(k->key) != klen || strncmp(k->key, s, klen) != 0) continue;
            if (!(k->sides & sidebit))
                return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                                  "parallel spec \"%s\": key \"%s\" does not apply to the %s side",
                                  spec, k->key, side_name(side));
            uint32_t v;
            if (parse_u32(val, vlen, k->lo, PAR_MAX_SIZE, &v) != 0)
                return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                                  "parallel spec \"%s\": %s=%.*s is not an integer in [%u, %u]", spec,
                                  k->key, (int)vlen, val, k->lo, PAR_MAX_SIZE);
            memcpy((char *)&p + k->offset, &v, sizeof v);
            done = true;
        }
        if (done) {
            /* handled */
        } else if (klen == 9 && strncmp(s, "pp_layers", 9) == 0 && side == FERRY_SIDE_TRAIN) {
            p.num_pp_layers = 0;
            const char *v = val, *vend = val + vlen;
            while (v < vend) {
                const char *plus = memchr(v, '+', (size_t)(vend - v));
                size_t n = plus ? (size_t)(plus - v) : (size_t)(vend - v);
                uint32_t x;
                if (p.num_pp_layers >= FERRY_MAX_PP || parse_u32(v, n, 0, FERRY_MAX_LAYERS, &x) != 0)
                    return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                                      "parallel spec \"%s\": pp_layers must be up to %d layer counts "
                                      "joined by '+', e.g. pp_layers=7+8+8+5",
                                      spec, FERRY_MAX_PP);
                p.pp_layers[p.num_pp_layers++] = x;
                v = plus ? plus + 1 : vend;
                if (plus && v == vend)
                    return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                                      "parallel spec \"%s\": pp_layers ends with '+'", spec);
            }
        } else if (klen == 7 && strncmp(s, "experts", 7) == 0 && side == FERRY_SIDE_TRAIN) {
            if (vlen == 7 && strncmp(val, "grouped", 7) == 0)
                p.experts_transposed = false;
            else if (vlen == 9 && strncmp(val, "grouped_t", 9) == 0)
                p.experts_transposed = true;
            else
                return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                                  "parallel spec \"%s\": experts must be grouped or grouped_t", spec);
        } else if (klen == 7 && strncmp(s, "buffers", 7) == 0) {
            if (vlen == 5 && strncmp(val, "param", 5) == 0)
                p.buffers = FERRY_BUFFERS_PER_PARAM;
            else if (vlen == 4 && strncmp(val, "flat", 4) == 0)
                p.buffers = FERRY_BUFFERS_FLAT;
            else
                return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                                  "parallel spec \"%s\": buffers must be param or flat", spec);
        } else if (klen == 9 && strncmp(s, "transpose", 9) == 0 && side == FERRY_SIDE_INFER) {
            if (vlen == 0 || vlen >= sizeof p.transpose)
                return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                                  "parallel spec \"%s\": transpose needs a glob of 1 to %zu characters",
                                  spec, sizeof p.transpose - 1);
            memcpy(p.transpose, val, vlen);
            p.transpose[vlen] = '\0';
        } else {
            return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                              "parallel spec \"%s\": unknown key \"%.*s\" for the %s side (%s)", spec,
                              (int)klen, s, side_name(side),
                              side == FERRY_SIDE_TRAIN
                                  ? "tp pp vpp cp ep etp dp pp_first pp_last pp_layers experts "
                                    "buffers vocab_multiple"
                                  : "tp ep dp replicas transpose buffers vocab_multiple");
        }
        if (!end) break;
        s = end + 1;
        if (!*s)
            return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "parallel spec \"%s\": an empty entry (a comma at the end)",
                              spec);
    }
    if (ferry_parallel_world_size(&p) == 0 || ferry_parallel_world_size(&p) > (1u << 24))
        return ferry_fail(err, FERRY_ERR_LIMIT, "parallel spec \"%s\": more than 2^24 ranks", spec);
    *out = p;
    return FERRY_OK;
}

int ferry_parallel_format(const ferry_parallel_t *p, char *buf, size_t size) {
    char tmp[2048];
    int n;
    if (p->side == FERRY_SIDE_TRAIN) {
        n = snprintf(tmp, sizeof tmp, "tp=%u,pp=%u,ep=%u,dp=%u", p->tp, p->pp, p->ep, p->dp);
        if (p->vpp > 1) n += snprintf(tmp + n, sizeof tmp - (size_t)n, ",vpp=%u", p->vpp);
        if (p->cp > 1) n += snprintf(tmp + n, sizeof tmp - (size_t)n, ",cp=%u", p->cp);
        if (p->etp > 1) n += snprintf(tmp + n, sizeof tmp - (size_t)n, ",etp=%u", p->etp);
        if (p->pp_first) n += snprintf(tmp + n, sizeof tmp - (size_t)n, ",pp_first=%u", p->pp_first);
        if (p->pp_last) n += snprintf(tmp + n, sizeof tmp - (size_t)n, ",pp_last=%u", p->pp_last);
        for (uint32_t i = 0; i < p->num_pp_layers && n < (int)sizeof tmp - 16; i++)
            n += snprintf(tmp + n, sizeof tmp - (size_t)n, "%s%u", i ? "+" : ",pp_layers=",
                          p->pp_layers[i]);
        if (p->experts_transposed) n += snprintf(tmp + n, sizeof tmp - (size_t)n, ",experts=grouped_t");
        if (p->vocab_multiple != 128)
            n += snprintf(tmp + n, sizeof tmp - (size_t)n, ",vocab_multiple=%u", p->vocab_multiple);
    } else {
        n = snprintf(tmp, sizeof tmp, "tp=%u,ep=%u,dp=%u,replicas=%u", p->tp, p->ep, p->dp,
                     p->replicas);
        if (p->transpose[0]) n += snprintf(tmp + n, sizeof tmp - (size_t)n, ",transpose=%s", p->transpose);
        if (p->vocab_multiple != 64)
            n += snprintf(tmp + n, sizeof tmp - (size_t)n, ",vocab_multiple=%u", p->vocab_multiple);
    }
    if (p->buffers == FERRY_BUFFERS_FLAT) n += snprintf(tmp + n, sizeof tmp - (size_t)n, ",buffers=flat");
    return snprintf(buf, size, "%s", tmp);
}
