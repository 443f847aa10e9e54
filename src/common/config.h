/* The FERRY_* environment variables: one table, read once per context. */
#ifndef FERRY_COMMON_CONFIG_H
#define FERRY_COMMON_CONFIG_H

#include "common/internal.h"

enum {
    FERRY_CFG_LOG = 0,
    FERRY_CFG_MODELS_DIR,
    FERRY_CFG_META,
    FERRY_CFG_TOKEN,
    FERRY_CFG_TOKEN_FILE,
    FERRY_CFG_TOKEN_DIR,
    FERRY_CFG_COUNT
};

typedef struct ferry_config {
    char *value[FERRY_CFG_COUNT]; /* owned copies; never NULL once loaded */
    int from_env[FERRY_CFG_COUNT];
    ferry_log_level_t log_level;
} ferry_config_t;

/* Reads and checks every variable; on a malformed one fails with
 * FERRY_ERR_INVALID_CONFIG naming it. */
ferry_status_t ferry_config_load(ferry_ctx_t *ctx, ferry_config_t *cfg, ferry_errbuf_t *err);
void ferry_config_release(ferry_ctx_t *ctx, ferry_config_t *cfg);

/* Parses a log level name ("debug", "info", "warn", "error", "off"). */
int ferry_log_level_parse(const char *s, ferry_log_level_t *out);

#endif
