/* Fuzz target: transport descriptors as a peer receives them. The first
 * byte chooses how the rest is used: 0, as a whole descriptor (framing,
 * lengths, checksum); 1, as the body of an shm descriptor that the harness
 * frames with a valid header and checksum, so the backend's own parsing is
 * reached. Either way: FERRY_OK or an error with a detail, never a crash,
 * and a descriptor that names no live endpoint is refused, not waited on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ferry/ferry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ferry_ctx_t *g_ctx;
static ferry_xport_t *g_xp;

static void cleanup(void) {
    ferry_xport_destroy(g_xp);
    ferry_ctx_destroy(g_ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > FERRY_XPORT_DESC_MAX) return 0;
    if (!g_xp) { /* one endpoint for the whole run: its service thread stays up */
        ferry_xport_params_t p = {.field_mask = FERRY_XPORT_PARAM_TIMEOUT_MS, .timeout_ms = 200};
        if (ferry_ctx_create(NULL, &g_ctx, NULL, 0) != FERRY_OK || ferry_xport_create(g_ctx, &p, &g_xp) != FERRY_OK)
            abort();
        atexit(cleanup);
    }
    uint8_t desc[FERRY_XPORT_DESC_MAX + 16];
    size_t len;
    if (data[0] == 1 && size - 1 + 16 <= sizeof desc) {
        size_t body = size - 1;
        memcpy(desc, "FXD", 3);
        desc[3] = 1;               /* version */
        desc[4] = FERRY_XPORT_SHM; /* kind */
        desc[5] = 0;
        desc[6] = (uint8_t)body;
        desc[7] = (uint8_t)(body >> 8);
        memcpy(desc + 8, data + 1, body);
        uint64_t h = XXH3_64bits(desc, 8 + body);
        for (int i = 0; i < 8; i++) desc[8 + body + (size_t)i] = (uint8_t)(h >> (8 * i));
        len = 16 + body;
    } else {
        len = size - 1;
        memcpy(desc, data + 1, len);
    }
    ferry_xport_rmem_t *r = NULL;
    ferry_status_t st = ferry_xport_rmem_unpack(g_xp, desc, len, &r);
    if (st == FERRY_OK) {
        /* only a live endpoint can answer; none exists in this process but ours */
        if (!r || ferry_xport_rmem_size(r) == 0) abort();
        ferry_xport_rmem_release(r);
    } else if (r != NULL || ferry_xport_error(g_xp)[0] == '\0') {
        abort();
    }
    return 0;
}
