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
    ferry_quant_t quant;   /* FERRY_QUANT_NONE unless declared fp8 */
    uint32_t partner;      /* FP8_BLOCK: its scale; FP8_SCALE: its weight */
    uint32_t quant_flags;  /* FERRY_FP8_UE8M0 */
} model_tensor_t;

/* What quantization_config asked for, once the options said to read it. */
typedef struct model_qcfg {
    bool fp8;          /* declare the linears fp8 */
    uint32_t flags;    /* FERRY_FP8_UE8M0 */
    char *ignore;      /* ctx allocation: nignore NUL-terminated module prefixes, back to back */
    size_t nignore;
} model_qcfg_t;

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
    uint32_t nquant; /* FP8_BLOCK tensors */
    ferry_errbuf_t err;
};

/* Creates a spec with an architecture (set by the config.json generator). */
ferry_status_t ferry_model_create_arch(ferry_ctx_t *ctx, const char *name, const ferry_arch_t *arch,
                                       ferry_model_t **out);

static inline const char *model_tensor_name(const ferry_model_t *m, uint32_t i) {
    return m->names + m->tensors[i].name_off;
}

/* Emits the Hugging Face tensor list of m->arch into m, then declares the
 * linears fp8 as q says (q may be NULL: none). */
ferry_status_t ferry_model_generate(ferry_model_t *m, const model_qcfg_t *q);

/* Parses config.json text into an architecture and (q not NULL) what its
 * quantization_config asks for under the options; errors name the field.
 * q->ignore is allocated from ctx (model_qcfg_free) only on success. */
ferry_status_t ferry_arch_from_hf_config(ferry_ctx_t *ctx, const char *json, size_t len,
                                         const ferry_model_options_t *opts, ferry_arch_t *arch,
                                         model_qcfg_t *q, ferry_errbuf_t *err);
void model_qcfg_free(ferry_ctx_t *ctx, model_qcfg_t *q);

/* True if module prefix `prefix` covers tensor `name`: equal, or a prefix
 * ending where one of name's dotted components ends. */
bool model_prefix_covers(const char *prefix, const char *name);

#endif
