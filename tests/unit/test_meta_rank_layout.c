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
 *   buffers, bytes that are no RankLayout;
 * - fp8 pairs (quant kind, partner, flags) travel both ways: a weight brings
 *   its scale along, the rebuilt side links them, a second round trip gives
 *   the same bytes and digest, and every inconsistent pairing is refused. */
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

/* ---- fp8 pairs on the wire ------------------------------------------------ */

/* Two ranks over "x.weight" (BF16 [256, 300] declared fp8 with UE8M0: F8_E4M3
 * and "x.weight_scale_inv" F32 [2, 3]), a plain "b" and "x.weight.a" (sorts
 * between the pair). Rank 0: weight rows 0..128, scale row 0, "b"; rank 1:
 * weight rows 128..256 and "x.weight.a" only (its scale row is on no
 * piece: the encoder carries the partner anyway). */
static ferry_layout_t *fp8_layout(ferry_ctx_t *ctx, ferry_model_t **model) {
    ferry_model_t *m;
    CHECK_OK(ferry_model_create(ctx, "q", &m), ferry_ctx_error(ctx));
    int64_t sw[2] = {256, 300}, sb[1] = {5};
    uint32_t w, b, z, s;
    CHECK_OK(ferry_model_add_tensor(m, "x.weight", FERRY_DTYPE_BF16, 2, sw, &w), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "b", FERRY_DTYPE_F32, 1, sb, &b), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "x.weight.a", FERRY_DTYPE_F32, 1, sb, &z), ferry_model_error(m));
    CHECK_OK(ferry_model_add_fp8(m, w, FERRY_FP8_UE8M0, &s), ferry_model_error(m));
    ferry_layout_t *l;
    CHECK_OK(ferry_layout_create(ctx, m, 2, &l), ferry_ctx_error(ctx));
    uint32_t bw0, bs0, bb0, bw1, bz1;
    CHECK_OK(ferry_layout_add_buffer(l, 0, "w", FERRY_DTYPE_F8_E4M3, 128 * 300, &bw0), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 0, "s", FERRY_DTYPE_F32, 3 * 4, &bs0), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 0, "b", FERRY_DTYPE_F32, 20, &bb0), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 1, "w", FERRY_DTYPE_F8_E4M3, 128 * 300, &bw1), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 1, "z", FERRY_DTYPE_F32, 20, &bz1), ferry_layout_error(l));
    ferry_piece_t pw = {.tensor = w, .rank = 0, .buffer = bw0, .box = {.ndim = 2, .extent = {128, 300}},
                        .strides = {300, 1}};
    CHECK_OK(ferry_layout_add_piece(l, &pw), ferry_layout_error(l));
    ferry_piece_t ps = {.tensor = s, .rank = 0, .buffer = bs0, .box = {.ndim = 2, .extent = {1, 3}}, .strides = {3, 1}};
    CHECK_OK(ferry_layout_add_piece(l, &ps), ferry_layout_error(l));
    ferry_piece_t pb = {.tensor = b, .rank = 0, .buffer = bb0, .box = {.ndim = 1, .extent = {5}}, .strides = {1}};
    CHECK_OK(ferry_layout_add_piece(l, &pb), ferry_layout_error(l));
    pw.rank = 1;
    pw.buffer = bw1;
    pw.box.offset[0] = 128;
    CHECK_OK(ferry_layout_add_piece(l, &pw), ferry_layout_error(l));
    ferry_piece_t pz = {.tensor = z, .rank = 1, .buffer = bz1, .box = {.ndim = 1, .extent = {5}}, .strides = {1}};
    CHECK_OK(ferry_layout_add_piece(l, &pz), ferry_layout_error(l));
    *model = m;
    return l;
}

static void free_hosts(ferry_ctx_t *ctx, char **hosts, size_t n) {
    for (size_t r = 0; hosts && r < n; r++) ferry_free(ctx, hosts[r]);
    ferry_free(ctx, hosts);
}

/* Packs the two hand-edited RankLayouts and expects sync_wire_decode to refuse them. */
static void side_refused(ferry_ctx_t *ctx, FerryMeta__RankLayout **rl, ferry_status_t want, const char *needle) {
    meta_bytes_t blobs[2];
    for (int r = 0; r < 2; r++) {
        size_t n = protobuf_c_message_get_packed_size(&rl[r]->base);
        uint8_t *buf = malloc(n + 1);
        CHECK(buf);
        protobuf_c_message_pack(&rl[r]->base, buf);
        blobs[r] = (meta_bytes_t){buf, n};
    }
    sync_side_t side;
    char **hosts = NULL;
    ferry_errbuf_t err;
    err.text[0] = '\0';
    CHECK_FAILS(sync_wire_decode(ctx, blobs, 2, "writer", &side, &hosts, &err), want, err.text, needle);
    CHECK(!side.model && !side.layout && !hosts);
    for (int r = 0; r < 2; r++) free((void *)blobs[r].data);
}

static FerryMeta__Tensor *wire_tensor(FerryMeta__RankLayout *rl, const char *name) {
    for (size_t t = 0; t < rl->n_tensors; t++)
        if (!strcmp(rl->tensors[t]->name, name)) return rl->tensors[t];
    fprintf(stderr, "no wire tensor %s\n", name);
    exit(1);
}

static void test_fp8_wire(ferry_ctx_t *ctx) {
    ferry_model_t *model;
    ferry_layout_t *l = fp8_layout(ctx, &model);
    ferry_errbuf_t err;
    meta_bytes_t blobs[2];
    for (uint32_t r = 0; r < 2; r++) {
        uint8_t *enc;
        size_t len;
        CHECK_OK(sync_wire_encode(ctx, l, r, "h", &enc, &len, &err), err.text);
        blobs[r] = (meta_bytes_t){enc, len};
    }
    /* rank 1 names the weight: its scale travels along, with kind, partner, flags */
    meta_rank_layout_t *rl;
    CHECK_OK(meta_rank_layout_decode(ctx, blobs[1].data, blobs[1].len, 1, "writer", &rl, &err), err.text);
    CHECK_EQ_INT(rl->n_tensors, 3);
    bool seen_w = false, seen_s = false;
    for (size_t t = 0; t < rl->n_tensors; t++) {
        const meta_rank_tensor_t *mt = &rl->tensors[t];
        if (!strcmp(mt->name, "x.weight")) {
            seen_w = mt->quant == FERRY_QUANT_FP8_BLOCK && !strcmp(mt->quant_partner, "x.weight_scale_inv") &&
                     mt->quant_flags == FERRY_FP8_UE8M0 && mt->dtype == FERRY_DTYPE_F8_E4M3;
        } else if (!strcmp(mt->name, "x.weight_scale_inv")) {
            seen_s = mt->quant == FERRY_QUANT_FP8_SCALE && !strcmp(mt->quant_partner, "x.weight") &&
                     mt->quant_flags == FERRY_FP8_UE8M0 && mt->dtype == FERRY_DTYPE_F32 && mt->shape[0] == 2 &&
                     mt->shape[1] == 3;
        } else {
            CHECK(!strcmp(mt->name, "x.weight.a") && mt->quant == 0 && mt->quant_flags == 0);
        }
    }
    CHECK(seen_w && seen_s);
    meta_rank_layout_free(rl);

    /* the side rebuilt: sorted, the pair linked (x.weight.a between them) */
    sync_side_t side;
    char **hosts = NULL;
    CHECK_OK(sync_wire_decode(ctx, blobs, 2, "writer", &side, &hosts, &err), err.text);
    const ferry_model_t *m = side.model;
    CHECK_EQ_INT(ferry_model_tensor_count(m), 4);
    CHECK_EQ_INT(ferry_model_quant_count(m), 1);
    uint32_t w, s, z;
    CHECK(ferry_model_find(m, "x.weight", &w) && ferry_model_find(m, "x.weight_scale_inv", &s) &&
          ferry_model_find(m, "x.weight.a", &z));
    CHECK(w < z && z < s);
    ferry_tensor_quant_t q;
    CHECK(ferry_model_tensor_quant(m, w, &q) && q.kind == FERRY_QUANT_FP8_BLOCK && q.partner == s &&
          q.flags == FERRY_FP8_UE8M0);
    CHECK(ferry_model_tensor_quant(m, s, &q) && q.kind == FERRY_QUANT_FP8_SCALE && q.partner == w);
    CHECK(ferry_model_tensor_quant(m, z, &q) && q.kind == FERRY_QUANT_NONE);
    /* rank 1 lacks the scale rows of its weight rows: the scales-mirror-weights rule says so */
    CHECK_FAILS(ferry_layout_validate(side.layout, NULL), FERRY_ERR_COVERAGE, ferry_layout_error(side.layout),
                "rank 1: fp8 tensor x.weight [128:256, 0:300] has no piece of its scale x.weight_scale_inv [1:2, 0:3]");
    /* a second round trip: the same bytes and digest */
    meta_bytes_t again[2];
    for (uint32_t r = 0; r < 2; r++) {
        uint8_t *enc;
        size_t len;
        CHECK_OK(sync_wire_encode(ctx, side.layout, r, hosts[r], &enc, &len, &err), err.text);
        again[r] = (meta_bytes_t){enc, len};
    }
    sync_side_t side2;
    char **hosts2 = NULL;
    CHECK_OK(sync_wire_decode(ctx, again, 2, "writer", &side2, &hosts2, &err), err.text);
    CHECK(ferry_layout_digest(side.layout) == ferry_layout_digest(side2.layout));
    for (uint32_t r = 0; r < 2; r++) {
        uint8_t *enc;
        size_t len;
        CHECK_OK(sync_wire_encode(ctx, side2.layout, r, hosts2[r], &enc, &len, &err), err.text);
        CHECK(len == again[r].len && !memcmp(enc, again[r].data, len));
        ferry_free(ctx, enc);
        ferry_free(ctx, (void *)again[r].data);
    }
    sync_side_free(ctx, &side2);
    free_hosts(ctx, hosts2, 2);

    /* edits of the wire: what a peer must not be able to slip in */
    ProtobufCAllocator pa = meta_allocator(ctx);
    FerryMeta__RankLayout *rls[2];
    for (int r = 0; r < 2; r++) CHECK((rls[r] = ferry_meta__rank_layout__unpack(&pa, blobs[r].len, blobs[r].data)));
    FerryMeta__Tensor *w1 = wire_tensor(rls[1], "x.weight"), *s1 = wire_tensor(rls[1], "x.weight_scale_inv");
    FerryMeta__Tensor *z1 = wire_tensor(rls[1], "x.weight.a"), *w0 = wire_tensor(rls[0], "x.weight");
    /* unchanged, it decodes (the harness itself is sound) */
    {
        meta_bytes_t b2[2];
        for (int r = 0; r < 2; r++) {
            size_t n = protobuf_c_message_get_packed_size(&rls[r]->base);
            uint8_t *buf = malloc(n);
            CHECK(buf);
            protobuf_c_message_pack(&rls[r]->base, buf);
            b2[r] = (meta_bytes_t){buf, n};
        }
        sync_side_t s3;
        char **h3 = NULL;
        CHECK_OK(sync_wire_decode(ctx, b2, 2, "writer", &s3, &h3, &err), err.text);
        CHECK(ferry_layout_digest(s3.layout) == ferry_layout_digest(side.layout));
        sync_side_free(ctx, &s3);
        free_hosts(ctx, h3, 2);
        for (int r = 0; r < 2; r++) free((void *)b2[r].data);
    }
    char *name;
    uint32_t u;
    /* a kind no one knows */
    u = w1->quant;
    w1->quant = w0->quant = 3;
    side_refused(ctx, rls, FERRY_ERR_CORRUPT, "writer tensor x.weight: quant 3");
    w1->quant = w0->quant = u;
    /* quant without a partner, a partner without quant, flags on a plain tensor */
    name = w1->quant_partner;
    w1->quant_partner = "";
    side_refused(ctx, rls, FERRY_ERR_CORRUPT, "tensor x.weight has a malformed quant 1");
    w1->quant_partner = name;
    name = z1->quant_partner; /* protobuf-c's empty default: must be put back as is */
    z1->quant_partner = "b";
    side_refused(ctx, rls, FERRY_ERR_CORRUPT, "tensor x.weight.a has a malformed quant 0");
    z1->quant_partner = name;
    z1->quant_flags = 1;
    side_refused(ctx, rls, FERRY_ERR_CORRUPT, "tensor x.weight.a has a malformed quant 0");
    z1->quant_flags = 0;
    /* ranks disagreeing */
    w0->quant_flags = 0;
    side_refused(ctx, rls, FERRY_ERR_MISMATCH, "writers disagree on tensor x.weight's fp8 quantization");
    w0->quant_flags = FERRY_FP8_UE8M0;
    /* a partner no rank names */
    char *nw0 = w0->quant_partner;
    name = w1->quant_partner;
    w1->quant_partner = w0->quant_partner = "x.nothing";
    side_refused(ctx, rls, FERRY_ERR_CORRUPT, "writer tensor x.weight is fp8 with partner x.nothing, which no writer names");
    /* a weight whose partner is a plain tensor, a scale whose weight names another */
    w1->quant_partner = w0->quant_partner = "x.weight.a";
    side_refused(ctx, rls, FERRY_ERR_CORRUPT, "writer tensor x.weight: ferry_model_link_fp8: scale tensor x.weight.a");
    w1->quant_partner = name;
    w0->quant_partner = nw0;
    /* the scale (on both ranks) names another weight, says plain, has other flags */
    FerryMeta__Tensor *s0 = wire_tensor(rls[0], "x.weight_scale_inv");
    char *ns0 = s0->quant_partner;
    name = s1->quant_partner;
    s1->quant_partner = s0->quant_partner = "b";
    side_refused(ctx, rls, FERRY_ERR_CORRUPT, "writer tensor x.weight_scale_inv: the fp8 pairs do not match");
    s1->quant = s0->quant = 0;
    s1->quant_partner = s0->quant_partner = "";
    s1->quant_flags = s0->quant_flags = 0;
    side_refused(ctx, rls, FERRY_ERR_CORRUPT, "writer tensor x.weight_scale_inv: the fp8 pairs do not match");
    s1->quant = s0->quant = FERRY_QUANT_FP8_SCALE;
    s1->quant_partner = name;
    s0->quant_partner = ns0;
    side_refused(ctx, rls, FERRY_ERR_CORRUPT, "writer tensor x.weight_scale_inv: the fp8 pairs do not match");
    s1->quant_flags = s0->quant_flags = FERRY_FP8_UE8M0;
    /* dtype and shape that do not fit an fp8 pair */
    s1->shape[1] = s0->shape[1] = 4;
    side_refused(ctx, rls, FERRY_ERR_CORRUPT,
                 "scale tensor x.weight_scale_inv of x.weight is F32 [2, 4]; expected F32 [2, 3]");
    s1->shape[1] = s0->shape[1] = 3;
    s1->dtype = s0->dtype = FERRY_DTYPE_BF16;
    side_refused(ctx, rls, FERRY_ERR_CORRUPT, "is BF16 [2, 3]");
    s1->dtype = s0->dtype = FERRY_DTYPE_F32;
    for (int r = 0; r < 2; r++) ferry_meta__rank_layout__free_unpacked(rls[r], &pa);

    sync_side_free(ctx, &side);
    free_hosts(ctx, hosts, 2);
    for (int r = 0; r < 2; r++) ferry_free(ctx, (void *)blobs[r].data);
    ferry_layout_destroy(l);
    ferry_model_destroy(model);
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
    test_fp8_wire(ctx);
    ferry_ctx_destroy(ctx);
    printf("test_meta_rank_layout: encoding pinned byte for byte, columns decoded, 14 malformed layouts refused; "
           "fp8 pairs round trip, 12 bad ones refused\n");
    return 0;
}
