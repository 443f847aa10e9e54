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
