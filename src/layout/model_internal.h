/* Internal view of model specs for the layout module. */
#ifndef FERRY_LAYOUT_MODEL_INTERNAL_H
#define FERRY_LAYOUT_MODEL_INTERNAL_H

#include "common/internal.h"
#include "ferry/layout.h"

typedef struct model_tensor {
    size_t name_off; /* into the model's name arena */
    ferry_dtype_t dtype;
    uint32_t ndim;
    int64_t shape[FERRY_MAX_DIMS];
} model_tensor_t;

struct ferry_model {
    ferry_ctx_t *ctx;
    char *name;
    ferry_arch_t arch;
    model_tensor_t *tensors;
    size_t ntensors, cap_tensors;
    char *names; /* arena of NUL-terminated names */
    size_t names_len, names_cap;
    uint32_t *slots; /* open-addressing name index: tensor index + 1, 0 = empty */
    size_t nslots;
    ferry_errbuf_t err;
};

/* Creates a spec with an architecture (set by the config.json generator). */
ferry_status_t ferry_model_create_arch(ferry_ctx_t *ctx, const char *name, const ferry_arch_t *arch,
                                       ferry_model_t **out);

static inline const char *model_tensor_name(const ferry_model_t *m, uint32_t i) {
    return m->names + m->tensors[i].name_off;
}

/* Emits the Hugging Face tensor list of m->arch into m. */
ferry_status_t ferry_model_generate(ferry_model_t *m);

/* Parses config.json text into an architecture; errors name the field. */
ferry_status_t ferry_arch_from_hf_config(const char *json, size_t len,
                                         const ferry_model_options_t *opts, ferry_arch_t *arch,
                                         ferry_errbuf_t *err);

#endif
