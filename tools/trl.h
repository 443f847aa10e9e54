/* Hugging Face TRL's sparse weight patches (docs/delta-format.md, "Hugging
 * Face TRL sparse patches"): made from two checkpoints, applied onto one.
 * Per changed tensor X, "X.idx" (I32 indices, or U16/U32 gaps) and "X.val"
 * (the new values), metadata format "sparse_weight_patch". Public API only,
 * so the CLI and the fuzz target (tests/fuzz/fuzz_trl.c) share it. */
#ifndef FERRY_TOOLS_TRL_H
#define FERRY_TOOLS_TRL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry/ferry.h"

#define TRL_FORMAT_NAME "sparse_weight_patch"

/* Buffers a patch's tensors point into until it is written (trl_bufs_free). */
typedef struct trl_bufs {
    void **p;
    size_t n, cap;
} trl_bufs_t;
void trl_bufs_free(trl_bufs_t *b);

typedef struct trl_stats {
    uint64_t elems, changed, tensors_changed;
} trl_stats_t;

/* Adds to w the patch tensors and metadata turning base into next (the same
 * names, dtypes and shapes; the caller checked): gap selects gap_delta,
 * else raw indices. The tensors' buffers go to *bufs. Returns 0, or -1
 * with why in err. */
int trl_encode(const ferry_safetensors_t *base, const ferry_safetensors_t *next, bool gap, uint64_t next_version,
               ferry_safetensors_writer_t *w, trl_bufs_t *bufs, trl_stats_t *s, char *err, size_t errlen);

/* Applies patch onto regions[i], which holds base tensor i's bytes (base's
 * order). Every index is bounds-checked and must increase strictly; every
 * patch tensor must be one of a pair naming a tensor of base, with that
 * tensor's dtype for values. Returns 0, or -1 with why in err (regions may
 * then be partly written: the caller discards them). TRL patches carry no
 * checksum, so the result cannot be verified. Thread-safety: any thread on
 * its own regions. */
int trl_apply(const ferry_safetensors_t *base, const ferry_safetensors_t *patch, uint8_t *const *regions, char *err,
              size_t errlen);

#endif
