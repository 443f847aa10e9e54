/* Fuzz target: delta files (ferry_delta_file_apply and its metadata:
 * format, base_version, the "dense" list, "dense_sums", "next_metadata"),
 * which a decoupled reader takes from a file channel and `ferry delta
 * apply` from disk.
 *
 * Input layout (bytes past the end read as 0):
 *   [0]     bits 0-1 mode: 0 the tail is the file as is; 1 a file built from
 *           the tensors below, then byte edits; 2 a built file whose metadata
 *           entries are replaced, dropped or added from the tail; 3 as 1,
 *           with NEXT's metadata in the file. bits 2-3 the base version
 *           passed: any, the file's, another, any
 *   [1..2]  elements of "a" (bf16, % 3000), [3] of "b" (f32), [4] of "c"
 *           (i32, shipped whole), [5] bit 0: "b" and "c" left out
 *   [6..9]  seed of the contents and of the changes
 *   mode 1, 3: 4-byte edits (op, pos lo, pos hi, val): xor, set, truncate,
 *           extend
 *   mode 2: per edit [key index (of 8 keys), length, that many bytes]: the
 *           value (length 255: the key removed)
 *
 * Checked: apply never crashes, leaks or reads outside the file (an exact
 * allocation) or the tensors (exact allocations); a refusal leaves a detail
 * and every tensor bit-identical; a success leaves each frame's tensor with
 * that frame's next region sum and each dense tensor equal to the file's
 * bytes; a file built from base and next, untouched and applied with a
 * fitting version, applies and gives next exactly. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"
#include "fuzz_ctx.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(why)                                                                        \
    do {                                                                                 \
        fprintf(stderr, "fuzz_delta_file: %s (detail: %s)\n", (why), ferry_ctx_error(fuzz_ctx())); \
        abort();                                                                         \
    } while (0)

/* The tensors: base contents, and next with a few percent changed. */
typedef struct {
    ferry_tensor_ref_t base[3], next[3];
    size_t n;
} tensors_t;

static void make_tensors(tensors_t *t, uint32_t na, uint32_t nb, uint32_t nc, bool only_a, uint64_t seed) {
    static const char *names[3] = {"a", "b", "c"};
    static const ferry_dtype_t dts[3] = {FERRY_DTYPE_BF16, FERRY_DTYPE_F32, FERRY_DTYPE_I32};
    uint32_t elems[3] = {na, nb, nc};
    t->n = only_a ? 1 : 3;
    for (size_t i = 0; i < t->n; i++) {
        size_t esz = ferry_dtype_size(dts[i]), bytes = (size_t)elems[i] * esz;
        uint8_t *b = malloc(bytes ? bytes : 1), *x = malloc(bytes ? bytes : 1);
        if (!b || !x) abort();
        for (size_t k = 0; k < bytes; k++) {
            uint64_t r = mix(seed ^ (i << 40) ^ k);
            /* weight-like bytes for bf16: exponent bytes near 0x3C */
            b[k] = i == 0 && k % 2 ? (uint8_t)(0x3A + r % 4 + (r & 0x80)) : (uint8_t)r;
            x[k] = b[k];
            if ((r >> 20) % 29 == 0) x[k] ^= (uint8_t)(1u << ((r >> 8) % (i == 0 && k % 2 ? 1 : 8)));
        }
        t->base[i] = (ferry_tensor_ref_t){.name = names[i], .dtype = dts[i], .ndim = 1, .shape = {elems[i]},
                                          .data = b, .bytes = bytes};
        t->next[i] = t->base[i];
        t->next[i].data = x;
    }
}

static void free_tensors(tensors_t *t) {
    for (size_t i = 0; i < t->n; i++) free(t->base[i].data), free(t->next[i].data);
}

/* A copy of the file with metadata key replaced by value (NULL: removed);
 * NULL when the file does not parse. */
static uint8_t *with_meta(const uint8_t *f, size_t len, const char *key, const char *value, size_t *out_len) {
    ferry_ctx_t *ctx = fuzz_ctx();
    ferry_safetensors_t *st = NULL;
    ferry_safetensors_writer_t *w = NULL;
    uint8_t *o = NULL;
    if (ferry_safetensors_parse(ctx, f, len, &st) != FERRY_OK || ferry_safetensors_writer_create(ctx, &w) != FERRY_OK)
        goto out;
    for (size_t i = 0; i < ferry_safetensors_count(st); i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(st, i);
        if (ferry_safetensors_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->bytes) != FERRY_OK)
            goto out;
    }
    for (size_t k = 0; ferry_safetensors_meta_key(st, k); k++) {
        const char *mk = ferry_safetensors_meta_key(st, k);
        if (strcmp(mk, key)) ferry_safetensors_writer_meta(w, mk, ferry_safetensors_meta(st, mk));
    }
    if (value && ferry_safetensors_writer_meta(w, key, value) != FERRY_OK) goto out;
    size_t cap = ferry_safetensors_writer_size(w);
    o = cap ? malloc(cap) : NULL;
    if (o && ferry_safetensors_writer_write(w, o, cap, out_len) != FERRY_OK) {
        free(o);
        o = NULL;
    }
out:
    ferry_safetensors_writer_destroy(w);
    ferry_safetensors_destroy(st);
    return o;
}

/* What a successful apply must have left: each frame's tensor has that
 * frame's next region sum, each dense tensor the file's bytes. */
static void check_applied(const uint8_t *f, size_t len, const ferry_tensor_ref_t *t, size_t n) {
    ferry_ctx_t *ctx = fuzz_ctx();
    ferry_safetensors_t *st;
    ferry_delta_codec_t *codec;
    if (ferry_safetensors_parse(ctx, f, len, &st) != FERRY_OK) FAIL("an applied file does not parse");
    if (ferry_delta_codec_create(ctx, &codec) != FERRY_OK) abort();
    for (size_t i = 0; i < ferry_safetensors_count(st); i++) {
        const ferry_safetensors_tensor_t *d = ferry_safetensors_at(st, i);
        const ferry_tensor_ref_t *x = NULL;
        for (size_t j = 0; j < n; j++)
            if (!strcmp(t[j].name, d->name)) x = &t[j];
        if (!x) FAIL("a file naming an unknown tensor applied");
        ferry_delta_info_t info;
        if (d->dtype == FERRY_DTYPE_U8 && d->ndim == 1 && ferry_delta_peek(codec, d->data, d->bytes, &info) == FERRY_OK &&
            info.dtype == x->dtype) {
            uint64_t sum;
            if (ferry_delta_region_sum(x->dtype, x->data, info.elems, info.chunk_elems, &sum) != FERRY_OK ||
                sum != info.next_sum)
                FAIL("an applied frame's tensor does not have its next sum");
        } else if (d->bytes != x->bytes || memcmp(d->data, x->data, x->bytes) != 0) {
            FAIL("an applied dense tensor is not the file's bytes");
        }
    }
    ferry_delta_codec_destroy(codec);
    ferry_safetensors_destroy(st);
}

static const char *const keys[8] = {"format", "format_version", "base_version", "next_version",
                                    "dense", "dense_sums", "next_metadata", "x"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input_t in = {data, size};
    uint32_t b0 = take8(&in), na = take8(&in);
    na |= take8(&in) << 8;
    uint32_t nb = take8(&in), nc = take8(&in) % 64, b5 = take8(&in);
    uint64_t seed = 0;
    for (int i = 0; i < 4; i++) seed |= (uint64_t)take8(&in) << (8 * i);
    unsigned mode = b0 & 3, ver = (b0 >> 2) & 3;
    ferry_ctx_t *ctx = fuzz_ctx();
    tensors_t t;
    make_tensors(&t, na % 3000, nb, nc, b5 & 1, seed);
    const uint64_t bv = 7 + (seed & 0xFF), nv = bv + 1;

    uint8_t *file = NULL;
    size_t len = 0;
    bool intact = false;
    if (mode == 0) {
        file = exact_copy(in.p, in.n);
        len = in.n;
    } else {
        const ferry_delta_meta_t meta[2] = {{"step", "8"}, {"format", "pt"}};
        size_t cap = ferry_delta_file_bound_meta(t.next, t.n, meta, 2);
        uint8_t *buf = malloc(cap ? cap : 1);
        if (!buf || !cap ||
            ferry_delta_file_build_meta(ctx, t.base, t.next, t.n, bv, nv, meta, mode == 3 ? 2 : 0, buf, cap, &len,
                                        NULL) != FERRY_OK)
            FAIL("building a delta file failed");
        intact = true;
        if (mode == 2) {
            while (in.n >= 2) {
                uint32_t k = take8(&in) % 8, l = take8(&in);
                char value[256];
                size_t vl = l == 255 ? 0 : (l < in.n ? l : in.n);
                memcpy(value, in.p, vl);
                value[vl] = '\0';
                in.p += vl, in.n -= vl;
                size_t nl;
                uint8_t *x = with_meta(buf, len, keys[k], l == 255 ? NULL : value, &nl);
                if (!x) continue; /* not UTF-8: the writer refuses it */
                free(buf);
                buf = x, len = nl;
                intact = false;
            }
        } else {
            while (in.n >= 4) {
                uint32_t op = take8(&in), pos = take8(&in);
                pos |= take8(&in) << 8;
                uint32_t val = take8(&in);
                if (len == 0) break;
                intact = false;
                switch (op % 4) {
                case 0: buf[pos % len] ^= (uint8_t)(val ? val : 1); break;
                case 1: buf[pos % len] = (uint8_t)val; break;
                case 2: len = pos % len; break;
                default: { /* extend with val bytes of val */
                    uint8_t *x = realloc(buf, len + val + 1);
                    if (!x) abort();
                    buf = x;
                    memset(buf + len, (int)val, val);
                    len += val;
                    break;
                }
                }
            }
        }
        file = exact_copy(buf, len);
        free(buf);
    }

    /* the region: exact copies of base */
    ferry_tensor_ref_t reg[3];
    for (size_t i = 0; i < t.n; i++) {
        reg[i] = t.base[i];
        reg[i].data = exact_copy(t.base[i].data, t.base[i].bytes);
    }
    uint64_t pass = ver == 1 ? bv : ver == 2 ? bv + 1 + (seed >> 8) % 3 : FERRY_DELTA_ANY_BASE;
    ferry_status_t st = ferry_delta_file_apply(ctx, file, len, reg, t.n, pass);
    if (st != FERRY_OK) {
        if (!ferry_ctx_error(ctx)[0]) FAIL("a refused file left no detail");
        for (size_t i = 0; i < t.n; i++)
            if (memcmp(reg[i].data, t.base[i].data, t.base[i].bytes) != 0) FAIL("a refused file changed a tensor");
        if (intact && ver != 2) FAIL("a valid file was refused");
        if (intact && st != FERRY_ERR_MISMATCH) FAIL("a valid file for another version was not a mismatch");
    } else {
        if (intact && ver == 2) FAIL("a file applied to another version");
        check_applied(file, len, reg, t.n);
        for (size_t i = 0; intact && i < t.n; i++)
            if (memcmp(reg[i].data, t.next[i].data, t.next[i].bytes) != 0) FAIL("a valid file did not give next");
    }
    for (size_t i = 0; i < t.n; i++) free(reg[i].data);
    free(file);
    free_tensors(&t);
    return 0;
}
