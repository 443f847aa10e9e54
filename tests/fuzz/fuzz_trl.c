/* Fuzz target: the CLI's reader of Hugging Face TRL sparse patches
 * (tools/trl.c, trl_apply), which `ferry delta apply` runs on files from
 * elsewhere.
 *
 * Input layout (bytes past the end read as 0):
 *   [0]     tensors of the base, 1 to 4 ("t0".."t3")
 *   per tensor: [dtype (% 6: BF16, F16, F32, I32, U8, I64)] [elements lo, hi
 *           (% 600)]
 *   the rest: the patch, a safetensors file as is
 *
 * Checked: trl_apply never crashes or writes outside the tensors (exact
 * allocations); a refusal says why; it accepts exactly the patches a
 * second, plain reading of the format (below, written from
 * docs/delta-format.md) accepts, and then both give the same tensors. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"
#include "fuzz_ctx.h"
#include "trl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(why)                                      \
    do {                                               \
        fprintf(stderr, "fuzz_trl: %s\n", (why));      \
        abort();                                       \
    } while (0)

static const ferry_dtype_t dtypes[6] = {FERRY_DTYPE_BF16, FERRY_DTYPE_F16, FERRY_DTYPE_F32,
                                        FERRY_DTYPE_I32,  FERRY_DTYPE_U8,  FERRY_DTYPE_I64};

/* The plain reading: per base tensor X, both or neither of X.idx and X.val;
 * idx I32/I64 (raw: strictly increasing, non-negative) or U16/U32
 * (gap_delta: the first index, then differences of at least 1), val of X's
 * dtype and idx's length; every index inside X; no other tensor; encoding
 * absent (raw), "raw" or "gap_delta". */
static bool reference(const ferry_safetensors_t *base, const ferry_safetensors_t *patch, uint8_t **out) {
    const char *enc = ferry_safetensors_meta(patch, "encoding");
    bool gap = enc && !strcmp(enc, "gap_delta");
    if (enc && !gap && strcmp(enc, "raw")) return false;
    size_t matched = 0;
    for (size_t i = 0; i < ferry_safetensors_count(base); i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(base, i);
        char in[64], vn[64];
        snprintf(in, sizeof in, "%s.idx", t->name);
        snprintf(vn, sizeof vn, "%s.val", t->name);
        const ferry_safetensors_tensor_t *ix = ferry_safetensors_find(patch, in), *vx = ferry_safetensors_find(patch, vn);
        if (!ix && !vx) continue;
        if (!ix || !vx || vx->dtype != t->dtype || ix->elems != vx->elems || ix->ndim != 1 || vx->ndim != 1)
            return false;
        bool ok_dt = gap ? ix->dtype == FERRY_DTYPE_U16 || ix->dtype == FERRY_DTYPE_U32
                         : ix->dtype == FERRY_DTYPE_I32 || ix->dtype == FERRY_DTYPE_I64;
        if (!ok_dt) return false;
        matched += 2;
        size_t esz = ferry_dtype_size(t->dtype);
        int64_t pos = -1;
        for (uint64_t k = 0; k < ix->elems; k++) {
            int64_t v = 0;
            const uint8_t *p = (const uint8_t *)ix->data;
            if (ix->dtype == FERRY_DTYPE_U16) v = (int64_t)(p[2 * k] | p[2 * k + 1] << 8);
            else if (ix->dtype == FERRY_DTYPE_U32 || ix->dtype == FERRY_DTYPE_I32) {
                uint32_t u = (uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 | (uint32_t)p[4 * k + 2] << 16 |
                             (uint32_t)p[4 * k + 3] << 24;
                v = ix->dtype == FERRY_DTYPE_I32 ? (int64_t)(int32_t)u : (int64_t)u;
            } else {
                uint64_t u = 0;
                for (int b = 7; b >= 0; b--) u = u << 8 | p[8 * k + (unsigned)b];
                v = (int64_t)u;
            }
            if (v < 0) return false;
            int64_t next = gap ? (k ? pos + v : v) : v;
            if ((k && next <= pos) || (uint64_t)next >= t->elems) return false;
            pos = next;
            memcpy(out[i] + (uint64_t)pos * esz, (const uint8_t *)vx->data + k * esz, esz);
        }
    }
    return matched == ferry_safetensors_count(patch);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t at = 0;
#define TAKE() (at < size ? data[at++] : 0u)
    uint32_t nt = TAKE() % 4 + 1;
    ferry_ctx_t *ctx = fuzz_ctx();
    ferry_safetensors_writer_t *w;
    if (ferry_safetensors_writer_create(ctx, &w) != FERRY_OK) abort();
    uint8_t *bdata[4] = {0};
    for (uint32_t i = 0; i < nt; i++) {
        ferry_dtype_t dt = dtypes[TAKE() % 6];
        uint32_t e = TAKE();
        e = (e | TAKE() << 8) % 600;
        size_t bytes = (size_t)e * ferry_dtype_size(dt);
        bdata[i] = malloc(bytes ? bytes : 1);
        if (!bdata[i]) abort();
        for (size_t k = 0; k < bytes; k++) bdata[i][k] = (uint8_t)(k * 7 + i);
        char name[3] = {'t', (char)('0' + i), '\0'};
        int64_t shape[1] = {e};
        if (ferry_safetensors_writer_add(w, name, dt, 1, shape, bdata[i], bytes) != FERRY_OK) abort();
    }
#undef TAKE
    size_t cap = ferry_safetensors_writer_size(w), blen = 0;
    uint8_t *bfile = malloc(cap);
    ferry_safetensors_t *base = NULL, *patch = NULL;
    if (!bfile || ferry_safetensors_writer_write(w, bfile, cap, &blen) != FERRY_OK ||
        ferry_safetensors_parse(ctx, bfile, blen, &base) != FERRY_OK)
        abort();
    uint8_t *pfile = malloc(size - at ? size - at : 1);
    if (!pfile) abort();
    memcpy(pfile, data + at, size - at);
    if (ferry_safetensors_parse(ctx, pfile, size - at, &patch) == FERRY_OK) {
        uint8_t *got[4] = {0}, *want[4] = {0};
        for (uint32_t i = 0; i < nt; i++) {
            const ferry_safetensors_tensor_t *t = ferry_safetensors_at(base, i);
            got[i] = malloc(t->bytes ? t->bytes : 1), want[i] = malloc(t->bytes ? t->bytes : 1);
            if (!got[i] || !want[i]) abort();
            memcpy(got[i], t->data, t->bytes);
            memcpy(want[i], t->data, t->bytes);
        }
        char err[512] = "";
        int rc = trl_apply(base, patch, got, err, sizeof err);
        bool ok = reference(base, patch, want);
        if (rc != 0 && !err[0]) FAIL("a refused patch left no reason");
        if ((rc == 0) != ok) FAIL(ok ? "trl_apply refused a patch the plain reading takes"
                                     : "trl_apply took a patch the plain reading refuses");
        for (uint32_t i = 0; ok && i < nt; i++)
            if (memcmp(got[i], want[i], ferry_safetensors_at(base, i)->bytes) != 0)
                FAIL("trl_apply and the plain reading give different tensors");
        for (uint32_t i = 0; i < nt; i++) free(got[i]), free(want[i]);
    }
    ferry_safetensors_destroy(patch);
    ferry_safetensors_destroy(base);
    ferry_safetensors_writer_destroy(w);
    for (uint32_t i = 0; i < nt; i++) free(bdata[i]);
    free(bfile);
    free(pfile);
    return 0;
}
