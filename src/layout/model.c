#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "layout/model_internal.h"

#define MODEL_MAX_TENSORS (1u << 24)

static ferry_status_t model_new(ferry_ctx_t *ctx, const char *name, ferry_model_t **out) {
    if (!ctx || !out || !name)
        return ctx ? ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_INVALID_ARGUMENT,
                                "ferry_model_create: name and out must not be NULL")
                   : FERRY_ERR_INVALID_ARGUMENT;
    ferry_model_t *m = ferry_calloc(ctx, 1, sizeof *m);
    if (!m) return ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_NO_MEMORY, "out of memory");
    m->ctx = ctx;
    m->name = ferry_strdup(ctx, name);
    if (!m->name) {
        ferry_free(ctx, m);
        return ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_NO_MEMORY, "out of memory");
    }
    *out = m;
    return FERRY_OK;
}

ferry_status_t ferry_model_create(ferry_ctx_t *ctx, const char *name, ferry_model_t **out) {
    ferry_model_t *m = NULL;
    ferry_status_t st = model_new(ctx, name, out ? &m : NULL);
    if (st != FERRY_OK) return st;
    m->arch.family = FERRY_FAMILY_CUSTOM;
    m->arch.dtype = FERRY_DTYPE_BF16;
    *out = m;
    return FERRY_OK;
}

ferry_status_t ferry_model_create_arch(ferry_ctx_t *ctx, const char *name, const ferry_arch_t *arch,
                                       ferry_model_t **out) {
    ferry_model_t *m = NULL;
    ferry_status_t st = model_new(ctx, name, out ? &m : NULL);
    if (st != FERRY_OK) return st;
    m->arch = *arch;
    *out = m;
    return FERRY_OK;
}

void ferry_model_destroy(ferry_model_t *m) {
    if (!m) return;
    ferry_ctx_t *ctx = m->ctx;
    ferry_free(ctx, m->name);
    ferry_free(ctx, m->tensors);
    ferry_free(ctx, m->names);
    ferry_free(ctx, m->slots);
    ferry_free(ctx, m);
}

static size_t slot_of(const ferry_model_t *m, const char *name, size_t len) {
    return (size_t)XXH3_64bits(name, len) & (m->nslots - 1);
}

static int rehash(ferry_model_t *m, size_t nslots) {
    uint32_t *slots = ferry_calloc(m->ctx, nslots, sizeof *slots);
    if (!slots) return -1;
    ferry_free(m->ctx, m->slots);
    m->slots = slots;
    m->nslots = nslots;
    for (size_t i = 0; i < m->ntensors; i++) {
        const char *n = model_tensor_name(m, (uint32_t)i);
        size_t s = slot_of(m, n, strlen(n));
        while (m->slots[s]) s = (s + 1) & (nslots - 1);
        m->slots[s] = (uint32_t)i + 1;
    }
    return 0;
}

bool ferry_model_find(const ferry_model_t *m, const char *name, uint32_t *index) {
    if (!m || !name || !m->nslots) return false;
    size_t s = slot_of(m, name, strlen(name));
    while (m->slots[s]) {
        uint32_t i = m->slots[s] - 1;
        if (strcmp(model_tensor_name(m, i), name) == 0) {
            if (index) *index = i;
            return true;
        }
        s = (s + 1) & (m->nslots - 1);
    }
    return false;
}

ferry_status_t ferry_model_add_tensor(ferry_model_t *m, const char *name, ferry_dtype_t dtype,
                                      uint32_t ndim, const int64_t *shape, uint32_t *index) {
    if (!m) return FERRY_ERR_INVALID_ARGUMENT;
    if (!name || !name[0])
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "tensor name is empty");
    if (ferry_dtype_size(dtype) == 0)
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "tensor %s: invalid dtype %d", name,
                          (int)dtype);
    if (ndim > FERRY_MAX_DIMS || (ndim && !shape))
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT,
                          "tensor %s: %u dimensions (at most %d)", name, ndim, FERRY_MAX_DIMS);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        if (shape[d] <= 0)
            return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT,
                              "tensor %s: dimension %u has size %lld (must be positive)", name, d,
                              (long long)shape[d]);
        if (ferry_mul_u64(numel, (uint64_t)shape[d], &numel) || numel > (1ull << 48))
            return ferry_fail(&m->err, FERRY_ERR_LIMIT, "tensor %s: more than 2^48 elements", name);
    }
    if (m->ntensors >= MODEL_MAX_TENSORS)
        return ferry_fail(&m->err, FERRY_ERR_LIMIT, "model %s: more than %u tensors", m->name,
                          MODEL_MAX_TENSORS);
    if (ferry_model_find(m, name, NULL))
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "tensor %s is already in model %s",
                          name, m->name);
    size_t len = strlen(name) + 1;
    if (ferry_grow(m->ctx, (void **)&m->names, 1, &m->names_cap, m->names_len + len) ||
        ferry_grow(m->ctx, (void **)&m->tensors, sizeof *m->tensors, &m->cap_tensors,
                   m->ntensors + 1))
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory adding tensor %s", name);
    if ((m->ntensors + 1) * 2 > m->nslots &&
        rehash(m, m->nslots ? m->nslots * 2 : 64) != 0)
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory adding tensor %s", name);
    model_tensor_t *t = &m->tensors[m->ntensors];
    memset(t, 0, sizeof *t);
    t->name_off = m->names_len;
    t->dtype = dtype;
    t->ndim = ndim;
    t->quant = FERRY_QUANT_NONE;
    t->partner = UINT32_MAX;
    for (uint32_t d = 0; d < ndim; d++) t->shape[d] = shape[d];
    memcpy(m->names + m->names_len, name, len);
    m->names_len += len;
    uint32_t idx = (uint32_t)m->ntensors++;
    size_t s = slot_of(m, name, len - 1);
    while (m->slots[s]) s = (s + 1) & (m->nslots - 1);
    m->slots[s] = idx + 1;
    if (index) *index = idx;
    return FERRY_OK;
}

/* The scale shape of a 2-d or 3-d weight: blocks of its last two dims. */
static void scale_shape(const model_tensor_t *w, int64_t *shape) {
    for (uint32_t d = 0; d < w->ndim; d++) shape[d] = w->shape[d];
    for (uint32_t d = w->ndim - 2; d < w->ndim; d++)
        shape[d] = (w->shape[d] + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK;
}

/* What a weight must be to be declared fp8 (beyond its dtype). */
static ferry_status_t check_fp8_weight(ferry_model_t *m, uint32_t w, uint32_t flags, const char *call) {
    if (w >= m->ntensors)
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "%s: tensor %u is not in model %s (%zu tensors)",
                          call, w, m->name, m->ntensors);
    const model_tensor_t *t = &m->tensors[w];
    const char *name = model_tensor_name(m, w);
    if (flags & ~(uint32_t)FERRY_FP8_UE8M0)
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "%s: tensor %s: unknown flags 0x%x", call, name,
                          flags);
    if (t->quant != FERRY_QUANT_NONE)
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "%s: tensor %s is already %s", call, name,
                          t->quant == FERRY_QUANT_FP8_BLOCK ? "fp8 block-quantized" : "an fp8 scale tensor");
    if (t->ndim != 2 && t->ndim != 3)
        return ferry_fail(&m->err, FERRY_ERR_UNSUPPORTED,
                          "%s: tensor %s has %u dimensions; fp8 block quantization takes 2-d [rows, cols] or "
                          "3-d [experts, rows, cols] weights",
                          call, name, t->ndim);
    return FERRY_OK;
}

static void link_pair(ferry_model_t *m, uint32_t w, uint32_t s, uint32_t flags) {
    model_tensor_t *tw = &m->tensors[w], *ts = &m->tensors[s];
    tw->dtype = FERRY_DTYPE_F8_E4M3;
    tw->quant = FERRY_QUANT_FP8_BLOCK;
    tw->partner = s;
    tw->quant_flags = flags;
    ts->quant = FERRY_QUANT_FP8_SCALE;
    ts->partner = w;
    ts->quant_flags = flags;
    m->nquant++;
}

ferry_status_t ferry_model_add_fp8(ferry_model_t *m, uint32_t weight, uint32_t flags, uint32_t *scale) {
    if (!m) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_status_t st = check_fp8_weight(m, weight, flags, "ferry_model_add_fp8");
    if (st != FERRY_OK) return st;
    const model_tensor_t *t = &m->tensors[weight];
    if (t->dtype != FERRY_DTYPE_BF16 && t->dtype != FERRY_DTYPE_F32 && t->dtype != FERRY_DTYPE_F8_E4M3)
        return ferry_fail(&m->err, FERRY_ERR_UNSUPPORTED,
                          "ferry_model_add_fp8: tensor %s is %s; fp8 weights are quantized from BF16 or F32 "
                          "(or declared F8_E4M3)",
                          model_tensor_name(m, weight), ferry_dtype_name(t->dtype));
    int64_t shape[FERRY_MAX_DIMS];
    scale_shape(t, shape);
    uint32_t ndim = t->ndim;
    size_t len = strlen(model_tensor_name(m, weight));
    char *name = ferry_alloc(m->ctx, len + sizeof "_scale_inv");
    if (!name)
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory adding the scale of %s",
                          model_tensor_name(m, weight));
    memcpy(name, model_tensor_name(m, weight), len);
    memcpy(name + len, "_scale_inv", sizeof "_scale_inv");
    uint32_t s;
    st = ferry_model_add_tensor(m, name, FERRY_DTYPE_F32, ndim, shape, &s); /* may move m->tensors */
    ferry_free(m->ctx, name);
    if (st != FERRY_OK) return st;
    link_pair(m, weight, s, flags);
    if (scale) *scale = s;
    return FERRY_OK;
}

ferry_status_t ferry_model_link_fp8(ferry_model_t *m, uint32_t weight, uint32_t scale, uint32_t flags) {
    if (!m) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_status_t st = check_fp8_weight(m, weight, flags, "ferry_model_link_fp8");
    if (st != FERRY_OK) return st;
    const char *wn = model_tensor_name(m, weight);
    if (scale >= m->ntensors || scale == weight)
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT,
                          "ferry_model_link_fp8: scale tensor %u of %s is %s", scale, wn,
                          scale == weight ? "the weight itself" : "not in the model");
    const model_tensor_t *t = &m->tensors[weight], *s = &m->tensors[scale];
    const char *sn = model_tensor_name(m, scale);
    if (t->dtype != FERRY_DTYPE_F8_E4M3)
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "ferry_model_link_fp8: weight %s is %s, not F8_E4M3",
                          wn, ferry_dtype_name(t->dtype));
    if (s->quant != FERRY_QUANT_NONE)
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "ferry_model_link_fp8: tensor %s is already %s", sn,
                          s->quant == FERRY_QUANT_FP8_BLOCK ? "fp8 block-quantized" : "an fp8 scale tensor");
    int64_t want[FERRY_MAX_DIMS];
    scale_shape(t, want);
    bool fits = s->dtype == FERRY_DTYPE_F32 && s->ndim == t->ndim;
    for (uint32_t d = 0; fits && d < t->ndim; d++) fits = s->shape[d] == want[d];
    if (!fits) {
        char got[96], exp[96];
        int at = 0, at2 = 0;
        for (uint32_t d = 0; d < s->ndim && at < (int)sizeof got - 24; d++)
            at += snprintf(got + at, sizeof got - (size_t)at, "%s%lld", d ? ", " : "", (long long)s->shape[d]);
        got[at] = '\0';
        for (uint32_t d = 0; d < t->ndim; d++)
            at2 += snprintf(exp + at2, sizeof exp - (size_t)at2, "%s%lld", d ? ", " : "", (long long)want[d]);
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT,
                          "ferry_model_link_fp8: scale tensor %s of %s is %s [%s]; expected F32 [%s]", sn, wn,
                          ferry_dtype_name(s->dtype), got, exp);
    }
    link_pair(m, weight, scale, flags);
    return FERRY_OK;
}

bool ferry_model_tensor_quant(const ferry_model_t *m, uint32_t index, ferry_tensor_quant_t *out) {
    if (!m || index >= m->ntensors || !out) return false;
    const model_tensor_t *t = &m->tensors[index];
    memset(out, 0, sizeof *out);
    out->kind = t->quant;
    out->partner = t->partner;
    out->flags = t->quant_flags;
    if (t->quant != FERRY_QUANT_NONE) out->block[0] = out->block[1] = FERRY_FP8_BLOCK;
    return true;
}

uint32_t ferry_model_quant_count(const ferry_model_t *m) { return m ? m->nquant : 0; }

const char *ferry_model_name(const ferry_model_t *m) { return m->name; }
const ferry_arch_t *ferry_model_arch(const ferry_model_t *m) { return &m->arch; }
uint32_t ferry_model_tensor_count(const ferry_model_t *m) { return (uint32_t)m->ntensors; }
const char *ferry_model_error(const ferry_model_t *m) { return m ? m->err.text : ""; }

bool ferry_model_tensor(const ferry_model_t *m, uint32_t index, ferry_tensor_info_t *out) {
    if (!m || index >= m->ntensors || !out) return false;
    const model_tensor_t *t = &m->tensors[index];
    memset(out, 0, sizeof *out);
    out->name = model_tensor_name(m, index);
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    for (uint32_t d = 0; d < t->ndim; d++) out->shape[d] = t->shape[d];
    return true;
}

static uint64_t tensor_numel(const model_tensor_t *t) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

uint64_t ferry_model_param_count(const ferry_model_t *m) {
    uint64_t n = 0;
    for (size_t i = 0; i < m->ntensors; i++) n += tensor_numel(&m->tensors[i]);
    return n;
}

uint64_t ferry_model_byte_size(const ferry_model_t *m) {
    uint64_t n = 0;
    for (size_t i = 0; i < m->ntensors; i++)
        n += tensor_numel(&m->tensors[i]) * ferry_dtype_size(m->tensors[i].dtype);
    return n;
}
