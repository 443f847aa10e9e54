/* Fuzz target: ferry_safetensors_parse on arbitrary bytes (the files ferry
 * reads: checkpoints, delta files, TRL patches). The input is the file,
 * in an allocation of exactly its length.
 *
 * A refusal must leave a detail and no object. An accepted file must hold
 * together: every tensor's bytes lie inside the buffer, equal its element
 * count times its dtype's size, and the tensors tile the data; names are
 * found by ferry_safetensors_find; metadata keys list back their values.
 * Writing the parsed tensors and metadata with the writer and parsing again
 * must give the same tensors (names, dtypes, shapes, bytes) and metadata.
 * Never a crash or a leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"
#include "fuzz_ctx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(why)                                                                   \
    do {                                                                            \
        fprintf(stderr, "fuzz_safetensors: %s (%zu-byte input)\n", (why), size);   \
        abort();                                                                    \
    } while (0)

static void check_same(const ferry_safetensors_t *a, const ferry_safetensors_t *b, size_t size) {
    if (ferry_safetensors_count(a) != ferry_safetensors_count(b)) FAIL("rewrite changed the tensor count");
    for (size_t i = 0; i < ferry_safetensors_count(a); i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(a, i), *u = ferry_safetensors_find(b, t->name);
        if (!u || u->dtype != t->dtype || u->ndim != t->ndim || u->bytes != t->bytes ||
            memcmp(u->shape, t->shape, t->ndim * sizeof t->shape[0]) ||
            (t->bytes && memcmp(u->data, t->data, t->bytes)))
            FAIL("rewrite changed a tensor");
    }
    for (size_t k = 0; ferry_safetensors_meta_key(a, k); k++) {
        const char *key = ferry_safetensors_meta_key(a, k), *v = ferry_safetensors_meta(b, key);
        if (!v || strcmp(v, ferry_safetensors_meta(a, key))) FAIL("rewrite changed the metadata");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ferry_ctx_t *ctx = fuzz_ctx();
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    ferry_safetensors_t *st = NULL;
    if (ferry_safetensors_parse(ctx, buf, size, &st) != FERRY_OK) {
        if (st) FAIL("a refused file left an object");
        if (!ferry_ctx_error(ctx)[0]) FAIL("a refused file left no detail");
        free(buf);
        return 0;
    }
    uint64_t covered = 0;
    for (size_t i = 0; i < ferry_safetensors_count(st); i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(st, i);
        const uint8_t *p = t->data;
        if (p < buf || p + t->bytes > buf + size) FAIL("a tensor lies outside the file");
        if (t->elems * ferry_dtype_size(t->dtype) != t->bytes) FAIL("bytes differ from elements times size");
        if (ferry_safetensors_find(st, t->name) != t) FAIL("find does not return the tensor");
        covered += t->bytes;
    }
    if (covered > size) FAIL("tensors cover more than the file");
    ferry_safetensors_writer_t *w;
    if (ferry_safetensors_writer_create(ctx, &w) != FERRY_OK) abort();
    for (size_t i = 0; i < ferry_safetensors_count(st); i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(st, i);
        if (ferry_safetensors_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->bytes) != FERRY_OK)
            FAIL("the writer refused a parsed tensor");
    }
    for (size_t k = 0; ferry_safetensors_meta_key(st, k); k++) {
        const char *key = ferry_safetensors_meta_key(st, k);
        if (ferry_safetensors_writer_meta(w, key, ferry_safetensors_meta(st, key)) != FERRY_OK)
            FAIL("the writer refused parsed metadata");
    }
    uint64_t n = ferry_safetensors_writer_size(w);
    uint8_t *out = malloc(n ? n : 1);
    size_t len;
    if (!out || ferry_safetensors_writer_write(w, out, n, &len) != FERRY_OK) FAIL("the rewrite failed");
    ferry_safetensors_t *st2 = NULL;
    if (ferry_safetensors_parse(ctx, out, len, &st2) != FERRY_OK) FAIL("the rewrite does not parse");
    check_same(st, st2, size);
    ferry_safetensors_destroy(st2);
    free(out);
    ferry_safetensors_writer_destroy(w);
    ferry_safetensors_destroy(st);
    free(buf);
    return 0;
}
