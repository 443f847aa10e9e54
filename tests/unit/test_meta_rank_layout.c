/* A member's layout on the wire (meta/rank_layout.h):
 * - sync's encoder (sync_wire_encode, through meta_rank_layout_encode) gives
 *   the bytes the protocol has always carried: a small layout with an
 *   unused tensor, a strided piece and a rank with no pieces is pinned
 *   byte for byte (captured from the encoder before the columns moved into
 *   meta);
 * - decoding gives back every column;
 * - every check the decoder makes refuses what it must, naming the member
 *   and what is wrong: the rank, the host's length, column lengths, dims,
 *   tensor and buffer indices, box and stride columns, malformed tensors and
 *   buffers, bytes that are no RankLayout. */
#include "check.h"
#include "meta/proto.h"
#include "meta/rank_layout.h"
#include "sync/sync_internal.h"

/* RankLayout of rank 1 below, host "node-7", as encoded before the typed
 * requests (the protocol's bytes: they must never change). */
static const char golden_hex[] =
    "080112066e6f64652d371a100a08612e776569676874100a1a0204061a080a01"
    "62100b1a0105220b0a04666c6174100a18c801220a0a0462696173100b18142a"
    "270a0300000112030000011a0300300022030202012a0a000002060200020600"
    "0532050601010201";

static ferry_layout_t *small_layout(ferry_ctx_t *ctx, ferry_model_t **model) {
    ferry_model_t *m;
    CHECK_OK(ferry_model_create(ctx, "t", &m), ferry_ctx_error(ctx));
    int64_t sa[2] = {4, 6}, sb[1] = {5};
    CHECK_OK(ferry_model_add_tensor(m, "a.weight", FERRY_DTYPE_BF16, 2, sa, NULL), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "b", FERRY_DTYPE_F32, 1, sb, NULL), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "unused", FERRY_DTYPE_F32, 1, sb, NULL), ferry_model_error(m));
    ferry_layout_t *l;
    CHECK_OK(ferry_layout_create(ctx, m, 2, &l), ferry_ctx_error(ctx));
    uint32_t b0, b1, b2;
    CHECK_OK(ferry_layout_add_buffer(l, 0, "other", FERRY_DTYPE_U8, 64, &b0), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 1, "flat", FERRY_DTYPE_BF16, 200, &b1), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 1, "bias", FERRY_DTYPE_F32, 20, &b2), ferry_layout_error(l));
    ferry_piece_t p = {.tensor = 0, .rank = 1, .buffer = b1, .byte_offset = 0,
                       .box = {.ndim = 2, .offset = {0, 0}, .extent = {2, 6}}, .strides = {6, 1}};
    CHECK_OK(ferry_layout_add_piece(l, &p), ferry_layout_error(l));
    p.byte_offset = 48;
    p.box.offset[0] = 2;
    p.strides[0] = 1;
    p.strides[1] = 2;
    CHECK_OK(ferry_layout_add_piece(l, &p), ferry_layout_error(l));
    ferry_piece_t q = {.tensor = 1, .rank = 1, .buffer = b2, .box = {.ndim = 1, .extent = {5}}, .strides = {1}};
    CHECK_OK(ferry_layout_add_piece(l, &q), ferry_layout_error(l));
    *model = m;
    return l;
}

/* Packs a hand-made RankLayout and expects the decoder to refuse it. */
static void refused(ferry_ctx_t *ctx, FerryMeta__RankLayout *rl, uint32_t want_rank, ferry_status_t want,
                    const char *needle) {
    size_t n = protobuf_c_message_get_packed_size(&rl->base);
    uint8_t *buf = malloc(n + 1);
    CHECK(buf);
    protobuf_c_message_pack(&rl->base, buf);
    meta_rank_layout_t *out = (meta_rank_layout_t *)buf; /* a sentinel: a refusal leaves it */
    ferry_errbuf_t err;
    CHECK_FAILS(meta_rank_layout_decode(ctx, buf, n, want_rank, "reader", &out, &err), want, err.text, needle);
    CHECK(out == (meta_rank_layout_t *)buf);
    CHECK(strstr(err.text, "reader"));
    free(buf);
}

int main(void) {
    ferry_ctx_t *ctx = test_ctx();
    ferry_errbuf_t err;

    /* the pinned bytes */
    ferry_model_t *model;
    ferry_layout_t *l = small_layout(ctx, &model);
    uint8_t *enc;
    size_t len;
    CHECK_OK(sync_wire_encode(ctx, l, 1, "node-7", &enc, &len, &err), err.text);
    size_t glen = strlen(golden_hex) / 2;
    uint8_t *golden = malloc(glen);
    CHECK(golden);
    for (size_t i = 0; i < glen; i++) CHECK(sscanf(golden_hex + 2 * i, "%2hhx", &golden[i]) == 1);
    CHECK_EQ_INT(len, glen);
    CHECK(memcmp(enc, golden, len) == 0);

    /* every column back */
    meta_rank_layout_t *rl = NULL;
    CHECK_OK(meta_rank_layout_decode(ctx, enc, len, 1, "writer", &rl, &err), err.text);
    CHECK(rl->rank == 1 && !strcmp(rl->host, "node-7"));
    CHECK(rl->n_tensors == 2 && !strcmp(rl->tensors[0].name, "a.weight") && rl->tensors[0].ndim == 2 &&
          rl->tensors[0].shape[1] == 6 && rl->tensors[0].dtype == FERRY_DTYPE_BF16 &&
          !strcmp(rl->tensors[1].name, "b"));
    CHECK(rl->n_buffers == 2 && !strcmp(rl->buffers[0].name, "flat") && rl->buffers[0].size == 200 &&
          rl->buffers[1].dtype == FERRY_DTYPE_F32);
    CHECK(rl->n_pieces == 3 && rl->tensor[2] == 1 && rl->buffer[2] == 1 && rl->byte_offset[1] == 48 &&
          rl->ndim[0] == 2 && rl->n_box == 10 && rl->n_strides == 5);
    static const int64_t want_box[] = {0, 0, 2, 6, 2, 0, 2, 6, 0, 5}, want_strides[] = {6, 1, 1, 2, 1};
    CHECK(!memcmp(rl->box, want_box, sizeof want_box) && !memcmp(rl->strides, want_strides, sizeof want_strides));
    meta_rank_layout_free(rl);
    meta_rank_layout_free(NULL);

    /* a rank with no pieces encodes (its buffer, no tensors) and decodes */
    uint8_t *enc0;
    size_t len0;
    CHECK_OK(sync_wire_encode(ctx, l, 0, NULL, &enc0, &len0, &err), err.text);
    CHECK_OK(meta_rank_layout_decode(ctx, enc0, len0, 0, "writer", &rl, &err), err.text);
    CHECK(rl->n_pieces == 0 && rl->n_tensors == 0 && rl->n_buffers == 1 && !strcmp(rl->host, ""));
    meta_rank_layout_free(rl);
    ferry_free(ctx, enc0);

    /* refusals */
    {
        meta_rank_layout_t *out = NULL;
        CHECK_FAILS(meta_rank_layout_decode(ctx, enc, len, 0, "writer", &out, &err), FERRY_ERR_CORRUPT, err.text,
                    "writer layout 0 says it is rank 1");
        static const uint8_t junk[] = {0xff, 0xff, 0xff};
        CHECK_FAILS(meta_rank_layout_decode(ctx, junk, sizeof junk, 3, "writer", &out, &err), FERRY_ERR_CORRUPT,
                    err.text, "writer 3's layout (3 bytes) does not decode");
        CHECK(out == NULL);
    }
    ProtobufCAllocator pa = meta_allocator(ctx);
    FerryMeta__RankLayout *good = ferry_meta__rank_layout__unpack(&pa, len, enc);
    CHECK(good);
    char longname[META_MAX_TENSOR_NAME + 2];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    {
        char *host = good->host;
        good->host = longname;
        refused(ctx, good, 1, FERRY_ERR_LIMIT, "reader 1: host name too long");
        good->host = host;
    }
    FerryMeta__Pieces *pc = good->pieces;
    {
        pc->n_buffer--;
        refused(ctx, good, 1, FERRY_ERR_CORRUPT, "piece columns of different lengths");
        pc->n_buffer++;
        pc->n_ndim--;
        refused(ctx, good, 1, FERRY_ERR_CORRUPT, "piece columns of different lengths");
        pc->n_ndim++;
    }
    {
        uint32_t nd = pc->ndim[0];
        pc->ndim[0] = 9;
        refused(ctx, good, 1, FERRY_ERR_CORRUPT, "piece 0 has 9 dims");
        pc->ndim[0] = nd;
    }
    {
        pc->tensor[1] = 2;
        refused(ctx, good, 1, FERRY_ERR_CORRUPT, "piece 1 names tensor 2 of 2");
        pc->tensor[1] = 0;
        pc->buffer[2] = 7;
        refused(ctx, good, 1, FERRY_ERR_CORRUPT, "buffer 7 of 2");
        pc->buffer[2] = 1;
    }
    {
        pc->n_box--;
        refused(ctx, good, 1, FERRY_ERR_CORRUPT, "box/stride columns do not match the dims");
        pc->n_box++;
        pc->n_strides--;
        refused(ctx, good, 1, FERRY_ERR_CORRUPT, "box/stride columns do not match the dims");
        pc->n_strides++;
    }
    {
        char *name = good->tensors[1]->name;
        good->tensors[1]->name = "";
        refused(ctx, good, 1, FERRY_ERR_CORRUPT, "tensor 1 is malformed");
        good->tensors[1]->name = longname;
        refused(ctx, good, 1, FERRY_ERR_CORRUPT, "tensor 1 is malformed");
        good->tensors[1]->name = name;
        size_t ns = good->tensors[0]->n_shape;
        int64_t shape9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
        int64_t *shape = good->tensors[0]->shape;
        good->tensors[0]->n_shape = 9;
        good->tensors[0]->shape = shape9;
        refused(ctx, good, 1, FERRY_ERR_CORRUPT, "tensor 0 is malformed");
        good->tensors[0]->n_shape = ns;
        good->tensors[0]->shape = shape;
    }
    {
        char *name = good->buffers[0]->name;
        good->buffers[0]->name = longname;
        refused(ctx, good, 1, FERRY_ERR_CORRUPT, "buffer 0 is malformed");
        good->buffers[0]->name = name;
    }
    /* put back as it was, it still decodes */
    {
        size_t n = protobuf_c_message_get_packed_size(&good->base);
        uint8_t *buf = malloc(n);
        CHECK(buf);
        protobuf_c_message_pack(&good->base, buf);
        CHECK(n == len && !memcmp(buf, enc, n));
        free(buf);
    }
    ferry_meta__rank_layout__free_unpacked(good, &pa);

    free(golden);
    ferry_free(ctx, enc);
    ferry_layout_destroy(l);
    ferry_model_destroy(model);
    ferry_ctx_destroy(ctx);
    printf("test_meta_rank_layout: encoding pinned byte for byte, columns decoded, 14 malformed layouts refused\n");
    return 0;
}
