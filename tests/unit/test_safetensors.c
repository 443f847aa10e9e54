/* safetensors: the writer's files parse back to the same tensors and
 * metadata; every malformed header or range is refused with a detail. */
#include "check.h"

static ferry_ctx_t *ctx;

/* a file from a literal header (padded by nothing) and n data bytes */
static uint8_t *file_of(const char *header, size_t data, size_t *len) {
    size_t hl = strlen(header);
    uint8_t *f = calloc(1, 8 + hl + data + 1);
    for (int i = 0; i < 8; i++) f[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(f + 8, header, hl);
    *len = 8 + hl + data;
    return f;
}

static void refused(const char *header, size_t data, ferry_status_t want, const char *needle) {
    size_t len;
    uint8_t *f = file_of(header, data, &len);
    ferry_safetensors_t *st = (ferry_safetensors_t *)1;
    CHECK_FAILS(ferry_safetensors_parse(ctx, f, len, &st), want, ferry_ctx_error(ctx), needle);
    CHECK(st == NULL);
    free(f);
}

static void test_round_trip(void) {
    ferry_safetensors_writer_t *w;
    CHECK_OK(ferry_safetensors_writer_create(ctx, &w), ferry_ctx_error(ctx));
    uint16_t a[6] = {1, 2, 3, 4, 5, 6};
    float b[3] = {1.5f, -2.0f, 0.0f};
    int64_t sa[2] = {2, 3}, sb[1] = {3}, s0[1] = {0};
    CHECK_OK(ferry_safetensors_writer_add(w, "layer.a", FERRY_DTYPE_BF16, 2, sa, a, sizeof a), ferry_ctx_error(ctx));
    CHECK_OK(ferry_safetensors_writer_add(w, "b", FERRY_DTYPE_F32, 1, sb, b, sizeof b), ferry_ctx_error(ctx));
    CHECK_OK(ferry_safetensors_writer_add(w, "empty", FERRY_DTYPE_I64, 1, s0, NULL, 0), ferry_ctx_error(ctx));
    CHECK_OK(ferry_safetensors_writer_add(w, "scalar", FERRY_DTYPE_F32, 0, NULL, b, 4), ferry_ctx_error(ctx));
    CHECK_OK(ferry_safetensors_writer_meta(w, "format", "pt"), ferry_ctx_error(ctx));
    CHECK_OK(ferry_safetensors_writer_meta(w, "note", "caf\xc3\xa9"), ferry_ctx_error(ctx));
    CHECK_FAILS(ferry_safetensors_writer_add(w, "b", FERRY_DTYPE_F32, 1, sb, b, sizeof b), FERRY_ERR_INVALID_ARGUMENT,
                ferry_ctx_error(ctx), "added twice");
    CHECK_FAILS(ferry_safetensors_writer_add(w, "c", FERRY_DTYPE_F32, 1, sb, b, 8), FERRY_ERR_INVALID_ARGUMENT,
                ferry_ctx_error(ctx), "need 12");
    CHECK_FAILS(ferry_safetensors_writer_add(w, "__metadata__", FERRY_DTYPE_F32, 1, sb, b, 12),
                FERRY_ERR_INVALID_ARGUMENT, ferry_ctx_error(ctx), "bad name");
    uint64_t size = ferry_safetensors_writer_size(w);
    uint8_t *f = malloc(size);
    size_t len;
    CHECK_FAILS(ferry_safetensors_writer_write(w, f, size - 1, &len), FERRY_ERR_LIMIT, ferry_ctx_error(ctx), "room");
    CHECK_OK(ferry_safetensors_writer_write(w, f, size, &len), ferry_ctx_error(ctx));
    CHECK(len == size && (len - 8 - 28) % 8 == 0); /* the header is padded to 8 */
    ferry_safetensors_t *st;
    CHECK_OK(ferry_safetensors_parse(ctx, f, len, &st), ferry_ctx_error(ctx));
    CHECK_EQ_INT(ferry_safetensors_count(st), 4);
    const ferry_safetensors_tensor_t *t = ferry_safetensors_find(st, "layer.a");
    CHECK(t && t->dtype == FERRY_DTYPE_BF16 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->elems == 6);
    CHECK(t->bytes == sizeof a && memcmp(t->data, a, sizeof a) == 0);
    t = ferry_safetensors_find(st, "b");
    CHECK(t && memcmp(t->data, b, sizeof b) == 0);
    t = ferry_safetensors_find(st, "empty");
    CHECK(t && t->elems == 0 && t->bytes == 0);
    t = ferry_safetensors_find(st, "scalar");
    CHECK(t && t->ndim == 0 && t->elems == 1);
    CHECK(ferry_safetensors_at(st, 0) == ferry_safetensors_find(st, "layer.a")); /* data order */
    CHECK(!strcmp(ferry_safetensors_meta(st, "format"), "pt"));
    CHECK(!strcmp(ferry_safetensors_meta(st, "note"), "caf\xc3\xa9"));
    CHECK(!strcmp(ferry_safetensors_meta_key(st, 1), "note") && !ferry_safetensors_meta_key(st, 2));
    CHECK(!ferry_safetensors_meta(st, "absent") && !ferry_safetensors_find(st, "absent"));
    ferry_safetensors_destroy(st);
    /* every truncation is refused */
    for (size_t cut = 0; cut < len; cut++) {
        st = NULL;
        CHECK(ferry_safetensors_parse(ctx, f, cut, &st) != FERRY_OK && st == NULL);
    }
    free(f);
    ferry_safetensors_writer_destroy(w);
}

static void test_refusals(void) {
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t len;
    uint8_t *f = file_of(ok, 8, &len);
    ferry_safetensors_t *st;
    CHECK_OK(ferry_safetensors_parse(ctx, f, len, &st), ferry_ctx_error(ctx));
    ferry_safetensors_destroy(st);
    free(f);
    refused(ok, 7, FERRY_ERR_CORRUPT, "inside the 7 data bytes");
    refused(ok, 9, FERRY_ERR_CORRUPT, "cover 8 of 9");
    refused("[1,2]", 0, FERRY_ERR_CORRUPT, "does not start with '{'");
    refused("{\"a\":", 0, FERRY_ERR_CORRUPT, "header JSON");
    refused("{} x", 0, FERRY_ERR_CORRUPT, "not a space");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{}}", 8, FERRY_ERR_CORRUPT,
            "header JSON");
    refused("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, FERRY_ERR_UNSUPPORTED, "\"Q7\"");
    refused("{\"a\":{\"dtype\":\"bfloat16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, FERRY_ERR_UNSUPPORTED,
            "bfloat16");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, FERRY_ERR_CORRUPT, "need 12");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}", 8, FERRY_ERR_CORRUPT,
            "not a non-negative");
    refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
            FERRY_ERR_CORRUPT, "overflows");
    refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, FERRY_ERR_LIMIT,
            "9 dimensions");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, FERRY_ERR_CORRUPT, "not a range");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, FERRY_ERR_CORRUPT, "two data_offsets");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, FERRY_ERR_CORRUPT,
            "keys beside");
    refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
            6, FERRY_ERR_CORRUPT, "overlap");
    refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
            "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}",
            6, FERRY_ERR_CORRUPT, "a hole");
    refused("{\"__metadata__\":{\"k\":1}}", 0, FERRY_ERR_CORRUPT, "not a string");
    refused("{\"__metadata__\":[]}", 0, FERRY_ERR_CORRUPT, "not an object");
    /* a header length beyond the file, or beyond the limit */
    uint8_t big[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    CHECK_FAILS(ferry_safetensors_parse(ctx, big, sizeof big, &st), FERRY_ERR_LIMIT, ferry_ctx_error(ctx),
                "at most");
    big[3] = 0;
    big[2] = 0;
    big[1] = 0;
    big[0] = 200;
    CHECK_FAILS(ferry_safetensors_parse(ctx, big, sizeof big, &st), FERRY_ERR_CORRUPT, ferry_ctx_error(ctx),
                "header of 200 bytes in a 16-byte file");
}

int main(void) {
    CHECK_OK(ferry_ctx_create(NULL, &ctx, NULL, 0), "ctx");
    test_round_trip();
    test_refusals();
    ferry_ctx_destroy(ctx);
    return 0;
}
