/* `ferry meta`: a standalone metadata service, or the status of one. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry meta --listen HOST:PORT [--lease-ms N (1..86400000, default 10000)]\n"
            "       ferry meta --status [--meta HOST:PORT]\n"
            "  --listen  runs the metadata service in the foreground until SIGINT/SIGTERM;\n"
            "            members find it with FERRY_META=HOST:PORT and present its token:\n"
            "            FERRY_TOKEN, else FERRY_TOKEN_FILE; with neither set it generates one\n"
            "            into a 0600 file (printed) that this user's processes on this host\n"
            "            find by themselves; members on other hosts need a copy of it\n"
            "  --status  prints, as JSON, the job, its members and versions\n"
            "            (address: --meta, else FERRY_META)\n");
}

int cmd_meta(int argc, char **argv) {
    const char *listen = NULL, *addr = NULL;
    bool status = false;
    uint32_t lease = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool ok = true;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return CLI_OK;
        } else if (cli_opt(argc, argv, &i, "--listen", &v)) listen = v;
        else if (cli_opt(argc, argv, &i, "--meta", &v)) addr = v;
        else if (cli_opt(argc, argv, &i, "--lease-ms", &v)) ok = cli_u32("--lease-ms", v, 1, 86400000, &lease);
        else if (!strcmp(argv[i], "--status")) {
            status = true;
            continue;
        } else {
            fprintf(stderr, "ferry meta: unknown option \"%s\"\n\n", argv[i]);
            usage(stderr);
            return CLI_USAGE;
        }
        if (!v || !ok) return CLI_USAGE;
    }
    if (!!listen == status) {
        usage(stderr);
        return CLI_USAGE;
    }
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_FAIL;
    int rc = CLI_OK;
    if (status) {
        if (!addr) addr = ferry_ctx_config_value(ctx, "FERRY_META", NULL);
        char *json;
        if (ferry_meta_status_json(ctx, addr, NULL, 5000, &json) != FERRY_OK) {
            fprintf(stderr, "ferry meta: %s\n", ferry_ctx_error(ctx));
            rc = CLI_FAIL;
        } else {
            printf("%s\n", json);
            free(json);
        }
    } else {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set, NULL); /* the service thread inherits the mask */
        /* this process is the service: every descriptor it may open is for
         * connections (the service's cap follows the soft limit) */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        ferry_meta_params_t mp = {.field_mask = FERRY_META_PARAM_LISTEN | (lease ? FERRY_META_PARAM_LEASE_MS : 0),
                                  .listen = listen,
                                  .lease_ms = lease};
        ferry_meta_service_t *svc;
        if (ferry_meta_service_create(ctx, &mp, &svc) != FERRY_OK) {
            fprintf(stderr, "ferry meta: %s\n", ferry_ctx_error(ctx));
            rc = CLI_FAIL;
        } else {
            printf("ferry meta: listening on %s (stop with SIGINT or SIGTERM)\n", ferry_meta_service_address(svc));
            const char *tf = ferry_meta_service_token_file(svc);
            if (*tf) printf("ferry meta: token generated into %s (removed on exit)\n", tf);
            fflush(stdout);
            int sig;
            sigwait(&set, &sig);
            ferry_meta_service_destroy(svc);
        }
    }
    ferry_ctx_destroy(ctx);
    return rc;
}
