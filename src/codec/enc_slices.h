/* How ferry_delta_cuda_encode (delta_cuda_enc.c) cuts a batch's chunks
 * with changes into slices whose change list and sub-block tables fit its
 * scratch budget: the plan and write passes run a slice at a time, so the
 * encoder's device memory is bounded by the budget, not by how much of
 * the batch changed (10 bytes per change: a batch whose every element
 * changed had taken 5x its bf16 bytes). Pure arithmetic on counts the scan
 * gave, apart from the CUDA code so that CPU tests check it
 * (test_enc_slices.c). */
#ifndef FERRY_CODEC_ENC_SLICES_H
#define FERRY_CODEC_ENC_SLICES_H

#include <stddef.h>
#include <stdint.h>

/* The end (exclusive) of the slice that starts at busy chunk `from` (<
 * n): the chunks from there on while their changes add up to at most
 * max_changes and their sub-blocks to at most max_blks, and always the
 * first, however large (a chunk's own list cannot be cut). changed[i] and
 * nsub[i] are busy chunk i's changes and sub-blocks. */
static inline size_t enc_slice_end(const uint32_t *changed, const uint32_t *nsub, size_t from, size_t n,
                                   uint64_t max_changes, uint64_t max_blks) {
    uint64_t ch = changed[from], bl = nsub[from];
    size_t i = from + 1;
    while (i < n && ch + changed[i] <= max_changes && bl + nsub[i] <= max_blks) ch += changed[i], bl += nsub[i++];
    return i;
}

#endif
