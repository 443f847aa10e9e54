/* The UCX transport's staging protocol (src/xport/ucx_stage.c) against a
 * rogue reader: raw UCX active messages, crafted by hand, at an owner that
 * serves its memory through staging (FERRY_UCX_STAGE_HOST=1: host memory,
 * the protocol GPU memory uses where UCX has no CUDA). Every request is
 * checked against the registration before a byte is read: an unknown slot,
 * an old generation, a range outside the registration (overflowing ones
 * too) come back as errors with no bytes; malformed requests (a short
 * header, an address that does not fit) get no answer; and the owner goes
 * on serving good requests, whose bytes are right. */
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "check.h"
#include "common/bytes.h"

#define SIZE (3u << 20) /* more than one 8 MiB chunk is not needed: the checks come first */
enum { AM_REQ = 7, AM_DATA = 8 };

typedef struct {
    ucp_worker_h worker;
    bool got;
    uint64_t req_id, off, len;
    uint32_t run;
    int32_t status;
    uint8_t *bytes; /* the reply's data */
    size_t nbytes;
    bool receiving;
} rogue_t;

static void on_recv(void *request, ucs_status_t status, size_t length, void *user_data) {
    rogue_t *r = user_data;
    CHECK(status == UCS_OK);
    r->nbytes = length;
    r->receiving = false;
    ucp_request_free(request);
}

static ucs_status_t on_data(void *arg, const void *header, size_t hlen, void *data, size_t len,
                            const ucp_am_recv_param_t *param) {
    rogue_t *r = arg;
    CHECK(hlen == 32);
    const uint8_t *h = header;
    r->req_id = ferry_get_le(h, 8);
    r->run = (uint32_t)ferry_get_le(h + 8, 4);
    r->status = (int32_t)ferry_get_le(h + 12, 4);
    r->off = ferry_get_le(h + 16, 8);
    r->len = ferry_get_le(h + 24, 8);
    r->got = true;
    free(r->bytes);
    r->bytes = malloc(len ? len : 1);
    CHECK(r->bytes);
    r->nbytes = 0;
    if (len == 0) return UCS_OK;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        memcpy(r->bytes, data, len);
        r->nbytes = len;
        return UCS_OK;
    }
    r->receiving = true;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.recv_am = on_recv,
                             .user_data = r};
    ucs_status_ptr_t q = ucp_am_recv_data_nbx(r->worker, data, r->bytes, len, &p);
    CHECK(!UCS_PTR_IS_ERR(q));
    if (q == NULL) {
        r->nbytes = len;
        r->receiving = false;
    }
    return UCS_INPROGRESS;
}

static void wait_sent(ucp_worker_h w, ucs_status_ptr_t q) {
    CHECK(!UCS_PTR_IS_ERR(q));
    if (!q) return;
    while (ucp_request_check_status(q) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(q);
}

/* Sends one REQ (hdr_len bytes of header, the data as given) and waits up
 * to wait_s for an answer; returns whether one came. */
static bool ask(rogue_t *r, ucp_ep_h ep, const uint8_t *who, size_t who_len, uint64_t id, uint32_t slot, uint64_t gen,
                uint64_t off, uint64_t len, size_t hdr_len, double wait_s) {
    uint8_t h[40];
    ferry_put_le(h, id, 8);
    ferry_put_le(h + 8, 0, 4);
    ferry_put_le(h + 12, slot, 4);
    ferry_put_le(h + 16, gen, 8);
    ferry_put_le(h + 24, off, 8);
    ferry_put_le(h + 32, len, 8);
    r->got = false;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_AM_SEND_FLAG_EAGER};
    wait_sent(r->worker, ucp_am_send_nbx(ep, AM_REQ, h, hdr_len, who, who_len, &p));
    double until = now_s() + wait_s;
    while ((!r->got || r->receiving) && now_s() < until) ucp_worker_progress(r->worker);
    return r->got && !r->receiving;
}

static uint8_t pattern(uint64_t k) { return (uint8_t)(k * 131 + (k >> 9)); }

int main(int argc, char **argv) {
    (void)argc;
    test_ucx_tsan_setup(argv);
    setenv("FERRY_UCX_STAGE_HOST", "1", 1);
    setenv("UCX_TLS", "tcp", 1);
    ferry_ctx_t *ctx = test_ctx();
    ferry_xport_params_t xpar = {.field_mask = FERRY_XPORT_PARAM_KIND | FERRY_XPORT_PARAM_TIMEOUT_MS,
                                 .kind = FERRY_XPORT_UCX, .timeout_ms = 5000};
    ferry_xport_t *xp = NULL;
    CHECK_OK(ferry_xport_create(ctx, &xpar, &xp), ferry_ctx_error(ctx));
    uint8_t *mem = malloc(SIZE);
    CHECK(mem);
    for (uint64_t k = 0; k < SIZE; k++) mem[k] = pattern(k);
    ferry_xport_mem_t *m = NULL;
    CHECK_OK(ferry_xport_mem_register(xp, mem, SIZE, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_READ, &m), ferry_xport_error(xp));
    uint8_t desc[FERRY_XPORT_DESC_MAX];
    size_t dlen = 0;
    CHECK_OK(ferry_xport_mem_pack(m, desc, sizeof desc, &dlen), ferry_xport_error(xp));
    /* the descriptor's body (docs in src/xport/ucx.c): host pid addr_len address slot gen size ... */
    const uint8_t *b = desc + 8;
    size_t alen = (size_t)ferry_get_le(b + 12, 2);
    const uint8_t *owner_addr = b + 14;
    uint32_t slot = (uint32_t)ferry_get_le(b + 14 + alen, 4);
    uint64_t gen = ferry_get_le(b + 18 + alen, 8);
    CHECK(ferry_get_le(b + 26 + alen, 8) == SIZE);
    CHECK(ferry_get_le(b + 35 + alen + 8, 2) == 0); /* no rkey: staging serves it */

    /* the rogue: a UCX worker of its own */
    rogue_t r = {0};
    ucp_config_t *cfg = NULL;
    CHECK(ucp_config_read(NULL, NULL, &cfg) == UCS_OK);
    ucp_params_t up = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_context_h uctx;
    CHECK(ucp_init(&up, cfg, &uctx) == UCS_OK);
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE};
    CHECK(ucp_worker_create(uctx, &wp, &r.worker) == UCS_OK);
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
                                 .id = AM_DATA, .flags = UCP_AM_FLAG_WHOLE_MSG, .cb = on_data, .arg = &r};
    CHECK(ucp_worker_set_am_recv_handler(r.worker, &hp) == UCS_OK);
    ucp_address_t *my = NULL;
    size_t my_len = 0;
    CHECK(ucp_worker_get_address(r.worker, &my, &my_len) == UCS_OK);
    uint8_t *who = malloc(14 + my_len);
    CHECK(who);
    ferry_put_le(who, 0, 8); /* another host: the owner connects in peer-failure mode */
    ferry_put_le(who + 8, 0, 4);
    ferry_put_le(who + 12, my_len, 2);
    memcpy(who + 14, my, my_len);
    /* peer-failure mode on both sides, as between hosts (UCX wants the two
       endpoints of a pair in the same mode) */
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                          .address = (const ucp_address_t *)owner_addr,
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER};
    ucp_ep_h e;
    CHECK(ucp_ep_create(r.worker, &ep, &e) == UCS_OK);

    /* a good read, at an odd offset */
    CHECK(ask(&r, e, who, 14 + my_len, 1, slot, gen, 12345, 100000, 40, 10.0));
    CHECK(r.req_id == 1 && r.status == 0 && r.off == 0 && r.len == 100000 && r.nbytes == 100000);
    for (size_t k = 0; k < r.nbytes; k++) CHECK(r.bytes[k] == pattern(12345 + k));
    /* refused, each with its status and no bytes */
    struct {
        uint32_t slot;
        uint64_t gen, off, len;
        int32_t want;
        const char *what;
    } bad[] = {
        {5000, gen, 0, 10, FERRY_ERR_STALE, "a slot past the table"},
        {slot + 1, gen, 0, 10, FERRY_ERR_STALE, "a slot not in use"},
        {slot, gen + 1, 0, 10, FERRY_ERR_STALE, "another generation"},
        {slot, gen, SIZE - 9, 10, FERRY_ERR_INVALID_ARGUMENT, "one byte past the end"},
        {slot, gen, SIZE + 1, 1, FERRY_ERR_INVALID_ARGUMENT, "past the end"},
        {slot, gen, UINT64_MAX - 3, 10, FERRY_ERR_INVALID_ARGUMENT, "an offset that wraps"},
        {slot, gen, 10, UINT64_MAX - 3, FERRY_ERR_INVALID_ARGUMENT, "a length that wraps"},
        {slot, gen, 0, 0, FERRY_ERR_INVALID_ARGUMENT, "no bytes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(ask(&r, e, who, 14 + my_len, 100 + i, bad[i].slot, bad[i].gen, bad[i].off, bad[i].len, 40, 10.0));
        if (r.status != bad[i].want || r.len != 0 || r.nbytes != 0 || r.req_id != 100 + i) {
            fprintf(stderr, "%s: status %d, %llu bytes\n", bad[i].what, r.status, (unsigned long long)r.nbytes);
            CHECK(!"a bad request was not refused as it should be");
        }
    }
    /* malformed: no answer at all (nowhere to send one, or not ours) */
    CHECK(!ask(&r, e, who, 14 + my_len, 200, slot, gen, 0, 10, 39, 0.3)); /* short header */
    uint8_t lie[14 + 64];
    memcpy(lie, who, 14);
    ferry_put_le(lie + 12, 5000, 2); /* says 5000 bytes of address, has 64 */
    memcpy(lie + 14, who + 14, 64 < my_len ? 64 : my_len);
    CHECK(!ask(&r, e, lie, sizeof lie, 201, slot, gen, 0, 10, 40, 0.3));
    CHECK(!ask(&r, e, who, 10, 202, slot, gen, 0, 10, 40, 0.3)); /* shorter than its own fields */
    /* and the owner goes on serving good reads */
    CHECK(ask(&r, e, who, 14 + my_len, 300, slot, gen, 0, SIZE, 40, 10.0));
    CHECK(r.status == 0 && r.nbytes == SIZE);
    for (size_t k = 0; k < SIZE; k++)
        if (r.bytes[k] != pattern(k)) CHECK(!"a staged read after the bad ones returned wrong bytes");
    /* a deregistered region: stale */
    ferry_xport_mem_deregister(m);
    CHECK(ask(&r, e, who, 14 + my_len, 400, slot, gen, 0, 10, 40, 10.0));
    CHECK(r.status == FERRY_ERR_STALE && r.nbytes == 0);
    printf("staging owner: good reads served and checked; 8 bad ranges, slots and generations refused with their "
           "status; 3 malformed requests unanswered; a deregistered region stale\n");

    ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t q = ucp_ep_close_nbx(e, &cp);
    if (UCS_PTR_IS_PTR(q)) {
        while (ucp_request_check_status(q) == UCS_INPROGRESS) ucp_worker_progress(r.worker);
        ucp_request_free(q);
    }
    ferry_xport_destroy(xp);
    ucp_worker_release_address(r.worker, my);
    ucp_worker_destroy(r.worker);
    ucp_cleanup(uctx);
    free(who);
    free(r.bytes);
    free(mem);
    ferry_ctx_destroy(ctx);
    printf("xport staging: all checks passed\n");
    return 0;
}
