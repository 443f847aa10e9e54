#include "common/config.h"

#include <stdlib.h>
#include <string.h>

#ifndef FERRY_DEFAULT_MODELS_DIR
#define FERRY_DEFAULT_MODELS_DIR "/usr/local/share/ferry/models"
#endif

/* The one table of FERRY_* variables; `ferry info --config` prints it.
 * Order matches the FERRY_CFG_* enum. */
static const ferry_config_var_t config_vars[FERRY_CFG_COUNT] = {
    {"FERRY_LOG", "debug|info|warn|error|off", "warn",
     "least severe log level written (to stderr unless the context has a log callback)"},
    {"FERRY_MODELS_DIR", "path", FERRY_DEFAULT_MODELS_DIR,
     "where a bare model name such as `qwen3-8b` is looked up as NAME.json"},
    {"FERRY_META", "host:port", "127.0.0.1:7470",
     "address of the metadata service that writers, readers and `ferry meta` use"},
    {"FERRY_TOKEN", "string", "",
     "shared secret every member of a job presents to the metadata service; unset (and no "
     "FERRY_TOKEN_FILE): the service generates one into FERRY_TOKEN_DIR"},
    {"FERRY_TOKEN_FILE", "path", "",
     "file holding the token (0600, owned by the user): read by members; a service writes a generated "
     "token there if it does not exist"},
    {"FERRY_TOKEN_DIR", "path", "",
     "directory (0700) where a service without a token writes its generated one and where members of "
     "the same user on the same host find it; unset: $XDG_RUNTIME_DIR/ferry, else ~/.ferry"},
};

size_t ferry_config_var_count(void) { return FERRY_CFG_COUNT; }

const ferry_config_var_t *ferry_config_var(size_t i) {
    return i < FERRY_CFG_COUNT ? &config_vars[i] : NULL;
}

int ferry_log_level_parse(const char *s, ferry_log_level_t *out) {
    static const struct {
        const char *name;
        ferry_log_level_t level;
    } names[] = {{"debug", FERRY_LOG_DEBUG}, {"info", FERRY_LOG_INFO}, {"warn", FERRY_LOG_WARN},
                 {"warning", FERRY_LOG_WARN}, {"error", FERRY_LOG_ERROR}, {"off", FERRY_LOG_OFF}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].level;
            return 0;
        }
    }
    return -1;
}

ferry_status_t ferry_config_load(ferry_ctx_t *ctx, ferry_config_t *cfg, ferry_errbuf_t *err) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < FERRY_CFG_COUNT; i++) {
        const char *env = getenv(config_vars[i].name);
        cfg->from_env[i] = env != NULL && env[0] != '\0';
        cfg->value[i] = ferry_strdup(ctx, cfg->from_env[i] ? env : config_vars[i].default_value);
        if (!cfg->value[i]) {
            ferry_config_release(ctx, cfg);
            return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory reading %s",
                              config_vars[i].name);
        }
    }
    if (ferry_log_level_parse(cfg->value[FERRY_CFG_LOG], &cfg->log_level) != 0) {
        ferry_status_t st = ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                                       "FERRY_LOG=%s is not one of debug, info, warn, error, off",
                                       cfg->value[FERRY_CFG_LOG]);
        ferry_config_release(ctx, cfg);
        return st;
    }
    return FERRY_OK;
}

void ferry_config_release(ferry_ctx_t *ctx, ferry_config_t *cfg) {
    for (int i = 0; i < FERRY_CFG_COUNT; i++) {
        ferry_free(ctx, cfg->value[i]);
        cfg->value[i] = NULL;
    }
}
