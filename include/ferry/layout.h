/* ferry: the data model — dtypes, boxes, logical tensors, model specs,
 * pieces and layouts, and the builders that turn a parallel configuration
 * into pieces.
 *
 * A piece says: "box B of logical tensor T lives in buffer F of rank R,
 * starting at byte offset O, with element strides S (one per box dimension)".
 * Every trainer or engine layout is a list of pieces; fused, padded,
 * replicated and transposed storage are all just pieces.
 */
#ifndef FERRY_LAYOUT_H
#define FERRY_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry/ctx.h"
#include "ferry/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Public symbols are exported from libferry; everything else is hidden. */
#pragma GCC visibility push(default)

/* ---- dtypes ------------------------------------------------------------ */

/* Values are pinned. Names are the safetensors names. */
typedef enum ferry_dtype {
    FERRY_DTYPE_BOOL = 0,
    FERRY_DTYPE_U8 = 1,
    FERRY_DTYPE_I8 = 2,
    FERRY_DTYPE_U16 = 3,
    FERRY_DTYPE_I16 = 4,
    FERRY_DTYPE_U32 = 5,
    FERRY_DTYPE_I32 = 6,
    FERRY_DTYPE_U64 = 7,
    FERRY_DTYPE_I64 = 8,
    FERRY_DTYPE_F16 = 9,
    FERRY_DTYPE_BF16 = 10,
    FERRY_DTYPE_F32 = 11,
    FERRY_DTYPE_F64 = 12,
    FERRY_DTYPE_F8_E4M3 = 13,
    FERRY_DTYPE_F8_E5M2 = 14,
    FERRY_DTYPE_COUNT = 15
} ferry_dtype_t;

/* Bytes per element; 0 for an invalid dtype. Thread-safe. */
size_t ferry_dtype_size(ferry_dtype_t dtype);

/* Safetensors name ("BF16"); "?" for an invalid dtype. Thread-safe, static. */
const char *ferry_dtype_name(ferry_dtype_t dtype);

/* Parses a safetensors name ("BF16", "F8_E4M3") or a torch name ("bfloat16",
 * "float8_e4m3fn"). Returns false if unknown; *out is written only on success.
 * Thread-safe. */
bool ferry_dtype_parse(const char *name, ferry_dtype_t *out);

/* bf16 <-> f32. f32->bf16 rounds to nearest even; NaN stays NaN (quiet).
 * Thread-safe. */
uint16_t ferry_bf16_from_f32(float value);
float ferry_bf16_to_f32(uint16_t bits);

/* fp8 (OCP e4m3fn: max 448, no infinities; e5m2: IEEE-like) <-> f32.
 * f32->fp8 rounds to nearest even and saturates to the largest finite value;
 * NaN maps to NaN. Thread-safe. */
uint8_t ferry_fp8_e4m3_from_f32(float value);
float ferry_fp8_e4m3_to_f32(uint8_t bits);
uint8_t ferry_fp8_e5m2_from_f32(float value);
float ferry_fp8_e5m2_to_f32(uint8_t bits);

/* ---- boxes ------------------------------------------------------------- */

#define FERRY_MAX_DIMS 8

/* A half-open N-d box: dimension d spans [offset[d], offset[d] + extent[d]).
 * Entries at d >= ndim are ignored. */
typedef struct ferry_box {
    uint32_t ndim;
    int64_t offset[FERRY_MAX_DIMS];
    int64_t extent[FERRY_MAX_DIMS];
} ferry_box_t;

/* Product of extents (1 for ndim 0); 0 if any extent is <= 0. Thread-safe. */
int64_t ferry_box_numel(const ferry_box_t *box);

/* True if the boxes share at least one element; writes the intersection to
 * *out (if not NULL) only then. Boxes of different ndim never intersect.
 * Thread-safe. */
bool ferry_box_intersect(const ferry_box_t *a, const ferry_box_t *b, ferry_box_t *out);

/* True if every element of inner lies in outer (an empty inner is contained
 * in any outer of the same ndim). Thread-safe. */
bool ferry_box_contains(const ferry_box_t *outer, const ferry_box_t *inner);

/* True if both boxes have the same ndim, offsets and extents. Thread-safe. */
bool ferry_box_equal(const ferry_box_t *a, const ferry_box_t *b);

/* The box covering a whole tensor of this shape. Thread-safe. */
ferry_box_t ferry_box_of_shape(uint32_t ndim, const int64_t *shape);

/* Writes "[0:128, 256:512]" (offset:end per dim) into buf; returns the
 * length it needed, like snprintf. Thread-safe. */
int ferry_box_format(const ferry_box_t *box, char *buf, size_t size);

/* ---- model specs ------------------------------------------------------- */

/* The architecture a model spec was generated from. Layout builders need it;
 * a spec built tensor by tensor has family FERRY_FAMILY_CUSTOM. */
typedef enum ferry_family {
    FERRY_FAMILY_CUSTOM = 0,
    FERRY_FAMILY_DENSE = 1,    /* llama, qwen2, qwen3 */
    FERRY_FAMILY_QWEN3_MOE = 2,
    FERRY_FAMILY_DEEPSEEK = 3  /* deepseek_v3, kimi_k2: MLA + shared/routed experts */
} ferry_family_t;

#define FERRY_MAX_LAYERS 1024

typedef struct ferry_arch {
    ferry_family_t family;
    char model_type[32];       /* config.json "model_type" */
    ferry_dtype_t dtype;       /* dtype of the weights (torch_dtype) */
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t num_layers;        /* decoder layers, not counting MTP layers */
    int64_t num_mtp_layers;    /* MTP layers included in the spec (0 unless asked for) */
    int64_t num_heads;
    int64_t num_kv_heads;      /* == num_heads for MLA */
    int64_t head_dim;          /* dense/qwen3_moe attention head size */
    int64_t intermediate_size; /* dense MLP */
    bool tie_embeddings;
    bool qkv_bias;             /* q/k/v projections have biases */
    bool o_bias;               /* o_proj has a bias */
    bool mlp_bias;
    bool qk_norm;              /* qwen3: per-head q_norm/k_norm */
    /* mixture of experts */
    int64_t num_experts;       /* routed experts; 0 for dense models */
    int64_t experts_per_token;
    int64_t moe_intermediate_size;
    int64_t num_shared_experts;
    bool expert_bias;          /* router has e_score_correction_bias */
    /* multi-head latent attention (deepseek) */
    int64_t q_lora_rank;       /* 0: plain q_proj */
    int64_t kv_lora_rank;
    int64_t qk_nope_head_dim;
    int64_t qk_rope_head_dim;
    int64_t v_head_dim;
    /* which decoder layers are MoE: layer l is when num_experts > 0,
     * l >= first_k_dense, l % moe_layer_freq == 0, (l + 1) % sparse_step == 0
     * and bit l of dense_layers is clear (qwen3_moe mlp_only_layers) */
    int64_t first_k_dense;
    int64_t moe_layer_freq;
    int64_t sparse_step;
    uint64_t dense_layers[FERRY_MAX_LAYERS / 64];
} ferry_arch_t;

/* True if decoder layer `layer` has routed experts. Thread-safe. */
bool ferry_arch_layer_is_moe(const ferry_arch_t *arch, int64_t layer);

typedef struct ferry_tensor_info {
    const char *name;          /* canonical (Hugging Face) name */
    ferry_dtype_t dtype;
    uint32_t ndim;
    int64_t shape[FERRY_MAX_DIMS];
} ferry_tensor_info_t;

typedef struct ferry_model ferry_model_t;

/* Options for specs generated from config.json. */
enum {
    FERRY_MODEL_OPT_DTYPE = 1u << 0,    /* override torch_dtype */
    FERRY_MODEL_OPT_MTP = 1u << 1,      /* include multi-token-prediction layers */
    FERRY_MODEL_OPT_QUANT = 1u << 2     /* quant and quant_flags */
};

/* Which tensors a generated spec declares quantized (FERRY_MODEL_OPT_QUANT).
 * Values are pinned. */
typedef enum ferry_model_quant {
    /* the default: every tensor as torch_dtype says; quantization_config is
     * not read at all (a trainer's spec) */
    FERRY_MODEL_QUANT_NONE = 0,
    /* as config.json's quantization_config says: with quant_method "fp8" the
     * engine's linears are FP8 block-quantized (docs/fp8.md), without one
     * the spec is NONE's */
    FERRY_MODEL_QUANT_AUTO = 1,
    /* FP8 block quantization whether or not config.json asks for it (a
     * quantization_config present must still be a supported fp8 one) */
    FERRY_MODEL_QUANT_FP8 = 2
} ferry_model_quant_t;

typedef struct ferry_model_options {
    uint64_t field_mask;
    ferry_dtype_t dtype;
    bool include_mtp;
    ferry_model_quant_t quant;  /* default FERRY_MODEL_QUANT_NONE */
    uint32_t quant_flags;       /* FERRY_FP8_UE8M0, or-ed with scale_fmt's; default 0 */
} ferry_model_options_t;

/* ---- quantized tensors ------------------------------------------------- */

/* FP8 block quantization, as DeepSeek-V3, Kimi-K2 and vLLM hold weights: a
 * weight W of [..., rows, cols] is float8_e4m3fn (FERRY_DTYPE_F8_E4M3, same
 * shape) and its F32 partner `<W's name>_scale_inv` is [..., ceil(rows /
 * 128), ceil(cols / 128)] (leading dims kept: one scale per 128 x 128 block
 * of each [rows, cols] matrix). ferry/fp8.h holds the arithmetic. */
#define FERRY_FP8_BLOCK 128u /* rows and columns of a scale block */

enum {
    FERRY_FP8_UE8M0 = 1u << 0, /* scales rounded up to powers of two (UE8M0, as DeepSeek-V3.1 and Blackwell use) */
};

/* What a tensor of a spec is. Values are pinned (they travel in layouts). */
typedef enum ferry_quant {
    FERRY_QUANT_NONE = 0,      /* a plain tensor */
    FERRY_QUANT_FP8_BLOCK = 1, /* float8_e4m3fn, scaled per 128 x 128 block by its partner */
    FERRY_QUANT_FP8_SCALE = 2  /* the F32 weight_scale_inv of its partner */
} ferry_quant_t;

typedef struct ferry_tensor_quant {
    ferry_quant_t kind;
    uint32_t partner;  /* FP8_BLOCK: its scale tensor; FP8_SCALE: the weight it scales; NONE: UINT32_MAX */
    uint32_t block[2]; /* rows, cols of a block of the last two dims (128, 128); NONE: 0, 0 */
    uint32_t flags;    /* FERRY_FP8_UE8M0 */
} ferry_tensor_quant_t;

/* Creates an empty custom spec to fill with ferry_model_add_tensor.
 * Ownership: caller owns *out (ferry_model_destroy); name is copied.
 * Thread-safety: one thread at a time per ctx. Errors: detail on ctx. */
ferry_status_t ferry_model_create(ferry_ctx_t *ctx, const char *name, ferry_model_t **out);

/* Generates a spec from the text of a Hugging Face config.json; dispatches on
 * model_type (llama, qwen2, qwen3, qwen3_moe, deepseek_v3, kimi_k2). Every
 * missing, mistyped or absurd field is reported by name.
 * Quantization (opts->quant, FERRY_MODEL_OPT_QUANT): with AUTO (and a
 * quantization_config of quant_method "fp8") or FP8, a deepseek_v3 /
 * kimi_k2 spec has its attention and MLP/expert linears FP8 block-quantized
 * (ferry_model_add_fp8; the scale tensors follow every generated tensor, in
 * their weights' order), except modules under a prefix in
 * quantization_config's ignored_layers / modules_to_not_convert
 * ("model.layers.3.mlp" covers that module and everything in it); embeddings,
 * norms, lm_head, the router gate and its bias and the MTP eh_proj stay as
 * torch_dtype says. scale_fmt "ue8m0" sets FERRY_FP8_UE8M0. A
 * quantization_config ferry cannot honour (another quant_method, fmt,
 * activation_scheme, weight_block_size or scale_fmt; other model types)
 * fails with FERRY_ERR_UNSUPPORTED naming the field and its value; NONE never
 * reads quantization_config.
 * Ownership: caller owns *out; json is only read. opts may be NULL.
 * Thread-safety: one thread at a time per ctx. Errors: detail on ctx. */
ferry_status_t ferry_model_from_hf_config(ferry_ctx_t *ctx, const char *name, const char *json,
                                          size_t json_len, const ferry_model_options_t *opts,
                                          ferry_model_t **out);

/* Same, reading the file at path; name defaults to the file's base name
 * without ".json". Errors: detail on ctx. */
ferry_status_t ferry_model_from_hf_config_file(ferry_ctx_t *ctx, const char *path,
                                               const ferry_model_options_t *opts,
                                               ferry_model_t **out);

/* Destroys a spec; NULL is accepted. Layouts made from it must be destroyed first. */
void ferry_model_destroy(ferry_model_t *model);

/* Adds a logical tensor; names must be unique, shapes positive.
 * *index (if not NULL) gets its index. Errors: detail on the model.
 * Thread-safety: one thread at a time per model. */
ferry_status_t ferry_model_add_tensor(ferry_model_t *model, const char *name, ferry_dtype_t dtype,
                                      uint32_t ndim, const int64_t *shape, uint32_t *index);

/* Declares tensor `weight` FP8 block-quantized: its dtype becomes
 * FERRY_DTYPE_F8_E4M3 (same shape) and an F32 tensor named `<weight's
 * name>_scale_inv`, shape as above, is appended as its partner; *scale (if
 * not NULL) gets the scale tensor's index. The weight must be 2-d [rows,
 * cols] or 3-d [experts, rows, cols], of dtype BF16 or F32 (what it is
 * quantized from; an engine spec's dtype only says what lands) or already
 * F8_E4M3, and not quantized or a scale already. flags: 0 or
 * FERRY_FP8_UE8M0. Errors (detail on the model; a failed call changes
 * nothing): FERRY_ERR_INVALID_ARGUMENT (index out of range, unknown flags,
 * already quantized, the scale's name taken),
 * FERRY_ERR_UNSUPPORTED (other ndim or dtype).
 * Thread-safety: one thread at a time per model. */
ferry_status_t ferry_model_add_fp8(ferry_model_t *model, uint32_t weight, uint32_t flags,
                                   uint32_t *scale);

/* Declares two tensors already in the spec an FP8 pair: `weight`
 * (F8_E4M3, 2-d or 3-d) and `scale` (F32, the shape above), for specs whose
 * tensor list already holds both (a checkpoint's, a layout received from
 * another process). Names are not checked. flags as ferry_model_add_fp8.
 * Errors (detail on the model; a failed call changes nothing):
 * FERRY_ERR_INVALID_ARGUMENT (an index out of range, the same tensor twice,
 * either already quantized, unknown flags, a dtype or shape that does not
 * fit), FERRY_ERR_UNSUPPORTED (a weight that is not 2-d or 3-d).
 * Thread-safety: one thread at a time per model. */
ferry_status_t ferry_model_link_fp8(ferry_model_t *model, uint32_t weight, uint32_t scale,
                                    uint32_t flags);

/* Accessors. Strings belong to the model. Thread-safety: any number of
 * readers while nobody modifies the model. */
const char *ferry_model_name(const ferry_model_t *model);
const ferry_arch_t *ferry_model_arch(const ferry_model_t *model);
uint32_t ferry_model_tensor_count(const ferry_model_t *model);
/* Returns false if index is out of range. */
bool ferry_model_tensor(const ferry_model_t *model, uint32_t index, ferry_tensor_info_t *out);
/* Returns false if no tensor has that name. */
bool ferry_model_find(const ferry_model_t *model, const char *name, uint32_t *index);
/* What tensor `index` is (kind FERRY_QUANT_NONE for a plain tensor). Returns
 * false if index is out of range; *out is written only on success. */
bool ferry_model_tensor_quant(const ferry_model_t *model, uint32_t index, ferry_tensor_quant_t *out);
/* Tensors of kind FERRY_QUANT_FP8_BLOCK (each has one FP8_SCALE partner). */
uint32_t ferry_model_quant_count(const ferry_model_t *model);
/* Elements of every tensor, scales included. */
uint64_t ferry_model_param_count(const ferry_model_t *model);
uint64_t ferry_model_byte_size(const ferry_model_t *model);
/* Detail text of the last failed call on this model ("" if none). */
const char *ferry_model_error(const ferry_model_t *model);

/* ---- parallel configurations ------------------------------------------- */

typedef enum ferry_side {
    FERRY_SIDE_TRAIN = 1, /* Megatron-style trainer */
    FERRY_SIDE_INFER = 2  /* vLLM/SGLang-style engine */
} ferry_side_t;

typedef enum ferry_buffer_mode {
    FERRY_BUFFERS_PER_PARAM = 0, /* one buffer per parameter (engine parameters, Megatron params) */
    FERRY_BUFFERS_FLAT = 1       /* one contiguous buffer per rank (a DDP/FSDP flat param buffer) */
} ferry_buffer_mode_t;

#define FERRY_MAX_PP 256

typedef struct ferry_parallel {
    ferry_side_t side;
    /* both sides */
    uint32_t tp;             /* tensor parallel size (infer: ranks per engine instance) */
    uint32_t ep;             /* expert parallel size */
    uint32_t dp;             /* train: data-parallel replicas; infer: DP-attention groups */
    ferry_buffer_mode_t buffers;
    uint32_t vocab_multiple; /* vocab padded to a multiple of this (train: times tp) */
    /* train only */
    uint32_t pp;             /* pipeline stages */
    uint32_t vpp;            /* virtual pipeline chunks per stage */
    uint32_t cp;             /* context parallel (weights replicated) */
    uint32_t etp;            /* expert tensor parallel */
    uint32_t pp_first;       /* layers on the first stage (0: even split) */
    uint32_t pp_last;        /* layers on the last stage (0: even split) */
    uint32_t num_pp_layers;  /* explicit per-stage layer counts, if non-zero */
    uint32_t pp_layers[FERRY_MAX_PP];
    bool experts_transposed; /* legacy GroupedMLP: weight1 [hidden, E*2I], weight2 [E*I, hidden] */
    /* infer only */
    uint32_t replicas;       /* engine instances */
    char transpose[128];     /* glob of buffer names stored transposed ("" = none) */
} ferry_parallel_t;

/* Defaults for a side: every size 1, per-parameter buffers, vocab_multiple
 * 128 (train) or 64 (infer). Thread-safe. */
ferry_parallel_t ferry_parallel_defaults(ferry_side_t side);

/* Parses "tp=4,pp=2,ep=1,dp=2" (keys: tp pp vpp cp ep etp dp pp_first
 * pp_last pp_layers=a+b+.. experts=grouped|grouped_t buffers=param|flat
 * vocab_multiple; infer: tp ep dp replicas transpose=GLOB buffers
 * vocab_multiple) on top of the side's defaults. A key given twice and an
 * empty entry ("tp=2,,pp=2", a trailing comma) are refused; "" is the
 * defaults. *out is written only on success. Errors name the offending key;
 * detail on ctx. Thread-safety: one
 * thread at a time per ctx. */
ferry_status_t ferry_parallel_parse(ferry_ctx_t *ctx, ferry_side_t side, const char *spec,
                                    ferry_parallel_t *out);

/* Formats a configuration back into the spec syntax; returns the length it
 * needed, like snprintf. Thread-safe. */
int ferry_parallel_format(const ferry_parallel_t *p, char *buf, size_t size);

/* Number of ranks the configuration spans (train: tp*cp*dp*pp; infer:
 * tp*replicas). Thread-safe. */
uint32_t ferry_parallel_world_size(const ferry_parallel_t *p);

/* ---- layouts ----------------------------------------------------------- */

typedef struct ferry_piece {
    uint32_t tensor;                  /* index into the model */
    ferry_box_t box;                  /* in the tensor's index space */
    uint32_t rank;
    uint32_t buffer;                  /* index into the layout's buffers */
    uint64_t byte_offset;             /* of the box's first element in the buffer */
    int64_t strides[FERRY_MAX_DIMS];  /* elements between neighbours along each box dim */
} ferry_piece_t;

typedef struct ferry_buffer_info {
    const char *name;   /* engine/trainer parameter name, or "flat" */
    uint32_t rank;
    uint64_t size;      /* bytes */
    ferry_dtype_t dtype;
    uint32_t ndim;      /* storage shape, as the owner sees the buffer */
    int64_t shape[FERRY_MAX_DIMS];
} ferry_buffer_info_t;

/* Where a rank sits in its parallel configuration. */
typedef struct ferry_rank_info {
    uint32_t replica;   /* train: dp index; infer: engine instance */
    uint32_t tp, pp, cp, ep, etp, edp, dp_attn;
    uint32_t num_layers;       /* decoder layers this rank holds */
    uint32_t first_layer;      /* first of them (chunks may make the set non-contiguous) */
} ferry_rank_info_t;

typedef struct ferry_layout ferry_layout_t;

/* Creates an empty layout over world_size ranks, for pieces added by hand.
 * The model must outlive the layout. Errors: detail on ctx. */
ferry_status_t ferry_layout_create(ferry_ctx_t *ctx, const ferry_model_t *model,
                                   uint32_t world_size, ferry_layout_t **out);

/* Which ranks a builder emits pieces for. */
#define FERRY_ALL_RANKS UINT32_MAX

/* Builds the layout of a parallel configuration: all ranks, or only `rank`
 * (the others then hold nothing; rank infos are filled for all). Fails with
 * a detail naming the model field and parallel size that do not fit.
 * An fp8 spec (FERRY_MODEL_QUANT_AUTO/FP8) lays out as vLLM loads it on the
 * engine side: each fp8 parameter's `<param>_scale_inv` (F32, 128-blocks)
 * holds the blocks of the boxes the parameter holds, in the same order;
 * shards vLLM refuses (a split cutting a 128-block; transpose= on an fp8
 * parameter; a fused layer's shards at two precisions) and trainer layouts
 * of an fp8 spec are FERRY_ERR_UNSUPPORTED (docs/layouts.md).
 * Ownership: caller owns *out; model must outlive it. Errors: detail on ctx.
 * Thread-safety: one thread at a time per ctx. */
ferry_status_t ferry_layout_build(ferry_ctx_t *ctx, const ferry_model_t *model,
                                  const ferry_parallel_t *parallel, uint32_t rank,
                                  ferry_layout_t **out);

/* Destroys a layout; NULL is accepted. */
void ferry_layout_destroy(ferry_layout_t *layout);

/* Adds a buffer of size bytes on rank; *index gets its index. name is copied.
 * Errors: detail on the layout. Thread-safety: one thread at a time per layout. */
ferry_status_t ferry_layout_add_buffer(ferry_layout_t *layout, uint32_t rank, const char *name,
                                       ferry_dtype_t dtype, uint64_t size, uint32_t *index);

/* Adds a piece. Checked: tensor exists, box non-empty and inside the tensor,
 * buffer on the piece's rank with the tensor's dtype, every addressed byte
 * inside the buffer. Errors: detail on the layout. */
ferry_status_t ferry_layout_add_piece(ferry_layout_t *layout, const ferry_piece_t *piece);

/* Accessors; pointers belong to the layout and stay valid until it changes.
 * Thread-safety: any number of readers while nobody modifies the layout. */
const ferry_model_t *ferry_layout_model(const ferry_layout_t *layout);
uint32_t ferry_layout_world_size(const ferry_layout_t *layout);
size_t ferry_layout_piece_count(const ferry_layout_t *layout);
const ferry_piece_t *ferry_layout_pieces(const ferry_layout_t *layout);
uint32_t ferry_layout_buffer_count(const ferry_layout_t *layout);
bool ferry_layout_buffer(const ferry_layout_t *layout, uint32_t index, ferry_buffer_info_t *out);
/* The pieces of one rank are contiguous: [*first, *first + *count). */
void ferry_layout_rank_pieces(const ferry_layout_t *layout, uint32_t rank, size_t *first,
                              size_t *count);
/* Filled by ferry_layout_build; zeros for hand-made layouts. False if rank >= world. */
bool ferry_layout_rank_info(const ferry_layout_t *layout, uint32_t rank, ferry_rank_info_t *out);
/* The parallel configuration it was built from; NULL for hand-made layouts. */
const ferry_parallel_t *ferry_layout_parallel(const ferry_layout_t *layout);
/* xxh3-64 digest of the model's tensor list (names, dtypes, shapes, fp8
 * kinds, partners and flags) and every piece and buffer: equal digests mean
 * identical layouts. */
uint64_t ferry_layout_digest(const ferry_layout_t *layout);
const char *ferry_layout_error(const ferry_layout_t *layout);

/* ---- validation -------------------------------------------------------- */

typedef struct ferry_coverage {
    uint64_t tensors;        /* logical tensors checked */
    uint64_t pieces;
    uint64_t distinct_boxes; /* pieces after merging replicas */
    uint64_t elements;       /* logical elements covered (once each) */
    uint32_t min_replicas;   /* fewest ranks holding some element */
    uint32_t max_replicas;   /* most ranks holding some element */
} ferry_coverage_t;

/* Checks, per rank, that the pieces of each fp8 block-quantized tensor hold
 * whole 128 x 128 blocks (a box may end in a partial block only at the
 * tensor's end) and pair one for one with pieces of its scale tensor whose
 * box is the blocks of theirs (scales mirror weights). Then checks that the
 * pieces cover every element of every tensor exactly once,
 * counting pieces with identical (tensor, box) as replicas of one another:
 * every element must be held, and all elements of a tensor equally often
 * (so the distinct boxes tile each copy with no gap and no partial overlap;
 * a tensor that every holder keeps whole cannot reveal a missing holder).
 * Also checks that no two
 * pieces of a rank write the same bytes of a buffer. On failure the detail
 * names the tensor and the uncovered or overlapping box. *out (if not NULL) is
 * written on success. Thread-safety: one thread at a time per layout. */
ferry_status_t ferry_layout_validate(ferry_layout_t *layout, ferry_coverage_t *out);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
