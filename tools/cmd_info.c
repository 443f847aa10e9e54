#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "cli.h"

int cmd_info(int argc, char **argv) {
    bool config = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config")) {
            config = true;
        } else if (!strcmp(argv[i], "--help")) {
            printf("usage: ferry info [--config]\n"
                   "  version and dependencies; --config prints every FERRY_* variable,\n"
                   "  its value in force, where the value came from, and what it does\n");
            return CLI_OK;
        } else {
            fprintf(stderr, "ferry info: unknown option %s\n", argv[i]);
            return CLI_USAGE;
        }
    }
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_USAGE;
    if (!config) {
        unsigned x = XXH_versionNumber();
        printf("ferry %s\n", ferry_version_string());
        printf("  libxxhash %u.%u.%u, jansson %s\n", x / 10000, x / 100 % 100, x % 100,
               jansson_version_str());
        printf("  `ferry info --config` lists the FERRY_* environment variables\n");
        ferry_ctx_destroy(ctx);
        return CLI_OK;
    }
    printf("FERRY_* environment variables (value in force, and where it came from):\n");
    for (size_t i = 0; i < ferry_config_var_count(); i++) {
        const ferry_config_var_t *v = ferry_config_var(i);
        int from_env = 0;
        const char *val = ferry_ctx_config_value(ctx, v->name, &from_env);
        printf("\n  %s=%s  (%s)\n", v->name, val, from_env ? "from the environment" : "default");
        printf("      %s\n", v->description);
        printf("      type %s; default %s\n", v->type, v->default_value);
    }
    ferry_ctx_destroy(ctx);
    return CLI_OK;
}
