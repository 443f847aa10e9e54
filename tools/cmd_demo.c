/* `ferry demo`: the README's main job. Trainer processes publish versions
 * of a model's weights after RL-like steps; engine processes sync them in
 * place through ferry and check every element against an independent
 * reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "demo.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry demo [--model M] [--train SPEC] [--infer SPEC] [--steps N]\n"
            "                  [--mode sync|async] [--transport shm|ucx|file] [--staged] [--slots K]\n"
            "                  [--lr X] [--seed N] [--timeout-ms T] [--deltas auto|always|off]\n"
            "                  [--no-verify] [--verbose]\n"
            "\n"
            "Runs a metadata service, W trainer processes (Megatron-style layout, weights\n"
            "from RL-like Adam steps on fp32 masters cast to bf16) and R engine processes\n"
            "(vLLM-style layout); after every step the engines pull the new version in\n"
            "place through ferry and check every element against their own reference.\n"
            "Defaults: --model qwen3-0.6b --train tp=2,pp=2 --infer tp=2,replicas=2\n"
            "          --steps 5 --mode sync --transport shm --lr 1e-6 --deltas auto\n"
            "--deltas: sync mode, readers one version behind apply sparse deltas instead of\n"
            "pulling whole: auto between hosts only, always also on one host, or off.\n");
}

static void print_row(const demo_step_t *s, void *opaque) {
    (void)opaque;
    char b[32];
    char changed[32] = "-";
    if (s->elements) snprintf(changed, sizeof changed, "%.2f%%", 100.0 * (double)s->changed / (double)s->elements);
    printf("%7llu  %8s  %12s  %8.3f  %7.2f  %8.3f  %8.3f  %u/%u%s\n", (unsigned long long)s->version,
           s->version > 1 ? changed : "-", cli_bytes(s->bytes, b, sizeof b), s->seconds,
           s->seconds > 0 ? (double)s->bytes / s->seconds / 1e9 : 0.0, s->publish_max, s->update_max, s->verified,
           s->readers, s->mismatches ? "  MISMATCH" : "");
    fflush(stdout);
}

int cmd_demo(int argc, char **argv) {
    demo_opts_t o = demo_defaults();
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return CLI_OK;
        } else if (demo_common_opt(argc, argv, &i, &o)) {
            continue; /* --model, --train, --infer, --steps */
        } else if (cli_opt(argc, argv, &i, "--slots", &v)) o.slots = (uint32_t)strtoul(v, NULL, 10);
        else if (cli_opt(argc, argv, &i, "--lr", &v)) o.lr = strtod(v, NULL);
        else if (cli_opt(argc, argv, &i, "--seed", &v)) o.seed = strtoull(v, NULL, 10);
        else if (cli_opt(argc, argv, &i, "--timeout-ms", &v)) o.timeout_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (cli_opt(argc, argv, &i, "--mode", &v)) {
            if (!strcmp(v, "sync")) o.mode = FERRY_SYNC_MODE_SYNC;
            else if (!strcmp(v, "async")) o.mode = FERRY_SYNC_MODE_ASYNC;
            else {
                fprintf(stderr, "ferry demo: --mode must be sync or async, not \"%s\"\n", v);
                return CLI_USAGE;
            }
        } else if (cli_opt(argc, argv, &i, "--transport", &v)) {
            if (!strcmp(v, "shm")) o.transport = FERRY_XPORT_SHM;
            else if (!strcmp(v, "ucx")) o.transport = FERRY_XPORT_UCX;
            else if (!strcmp(v, "file")) o.transport = (ferry_xport_kind_t)DEMO_TRANSPORT_FILE;
            else {
                fprintf(stderr, "ferry demo: --transport must be shm, ucx or file, not \"%s\"\n", v);
                return CLI_USAGE;
            }
        } else if (cli_opt(argc, argv, &i, "--deltas", &v)) {
            if (!strcmp(v, "auto")) o.deltas = FERRY_SYNC_DELTAS_AUTO;
            else if (!strcmp(v, "always")) o.deltas = FERRY_SYNC_DELTAS_ALWAYS;
            else if (!strcmp(v, "off")) o.deltas = FERRY_SYNC_DELTAS_OFF;
            else {
                fprintf(stderr, "ferry demo: --deltas must be auto, always or off, not \"%s\"\n", v);
                return CLI_USAGE;
            }
        } else if (!strcmp(argv[i], "--staged")) o.staged = true;
        else if (!strcmp(argv[i], "--no-verify")) o.verify = false;
        else if (!strcmp(argv[i], "--verbose")) o.verbose = true;
        else {
            fprintf(stderr, "ferry demo: unknown option \"%s\"\n\n", argv[i]);
            usage(stderr);
            return CLI_USAGE;
        }
    }
    if (o.steps < 1 || o.steps > 100000 || o.slots < 1 || o.slots > 16 || !(o.lr >= 0) || o.timeout_ms == 0) {
        fprintf(stderr, "ferry demo: --steps must be 1..100000, --slots 1..16, --lr >= 0, --timeout-ms > 0\n");
        return CLI_USAGE;
    }
    demo_step_t *steps = calloc(o.steps, sizeof *steps);
    if (!steps) return CLI_FAIL;
    printf("ferry demo: %s, trainer %s -> engine %s, %s mode%s, %s, %u steps at lr %g\n", o.model, o.train, o.infer,
           o.mode == FERRY_SYNC_MODE_SYNC ? "sync" : "async", o.staged ? " (staged)" : "",
           o.transport == FERRY_XPORT_SHM ? "shm" : o.transport == FERRY_XPORT_UCX ? "ucx" : "file", o.steps, o.lr);
    printf("%7s  %8s  %12s  %8s  %7s  %8s  %8s  %s\n", "version", "changed", "bytes moved", "seconds", "GB/s",
           "publish", "update", "verified");
    fflush(stdout);
    demo_result_t res;
    demo_hooks_t hooks = {.row = print_row};
    int rc = demo_run(&o, steps, &res, &hooks);
    if (rc == CLI_USAGE) {
        fprintf(stderr, "ferry demo: %s\n", res.error);
        free(steps);
        return CLI_USAGE;
    }
    /* version 1 also connects and plans: the steady state is the median of the others */
    double bytes = 0, *secs = calloc(o.steps, sizeof *secs);
    uint32_t n = 0;
    for (uint32_t v = 1; v < o.steps && secs; v++)
        if (steps[v].readers) {
            secs[n++] = steps[v].seconds;
            bytes = (double)steps[v].bytes;
        }
    double med = 0;
    if (n) {
        qsort(secs, n, sizeof *secs, cli_cmp_dbl);
        med = secs[n / 2];
    }
    free(secs);
    char b[32], b2[32];
    printf("summary: %u writers -> %u readers, model %s; first version (connect, plan, sync) %.2f s", res.writers,
           res.readers, cli_bytes(res.model_bytes, b, sizeof b), steps[0].seconds);
    if (n) printf("; later versions: median %.3f s for %s (%.2f GB/s)", med, cli_bytes((uint64_t)bytes, b2, sizeof b2),
                  med > 0 ? bytes / med / 1e9 : 0.0);
    uint32_t du = 0;
    for (uint32_t v = 0; v < o.steps; v++) du += steps[v].delta_updates;
    if (du) printf("; %u reader updates applied sparse deltas", du);
    printf("; run %.1f s; %s\n", res.total_seconds,
           res.ok ? (o.verify ? "every reader verified every version bit-exactly" : "verification off") : res.error);
    free(steps);
    return rc == CLI_OK && res.ok ? CLI_OK : CLI_FAIL;
}
