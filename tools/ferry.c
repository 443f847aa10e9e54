/* ferry — command-line entry point. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "demo.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  layout   pieces of a trainer or engine layout: per-rank bytes, fused tensors,\n"
            "           padding, and a check that every element is covered exactly once\n"
            "  plan     the copies from a trainer layout to an engine layout: bytes per rank,\n"
            "           balance, ops, packing, and a check that every byte lands exactly once\n"
            "  model    a model spec from a Hugging Face config.json: tensors and parameters\n"
            "  bench    benchmarks: sync (end-to-end updates vs files, TCP broadcast, memcpy),\n"
            "           xport (one-sided reads between two processes vs memcpy), delta (sizes\n"
            "           and speeds of sparse deltas vs TRL, zstd, memcpy)\n"
            "  demo     a real multi-process sync: trainer processes publish RL-like updates,\n"
            "           engine processes pull them in place and verify every element\n"
            "  meta     a standalone metadata service (--listen), or a running job's status\n"
            "  delta    sparse deltas between safetensors checkpoints: encode, apply, inspect\n"
            "           (ferry's format or TRL's sparse patches), and synthetic checkpoints\n"
            "  info     version, dependencies and (--config) the FERRY_* variables\n"
            "\n"
            "`ferry COMMAND --help` describes each command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    static char who[64];
    snprintf(who, sizeof who, "ferry %s", cmd);
    cli_parse_set_who(who);
    if (!strcmp(cmd, "layout")) return cmd_layout(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "model")) return cmd_model(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo")) return cmd_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "meta")) return cmd_meta(argc - 1, argv + 1);
    if (!strcmp(cmd, "delta")) return cmd_delta(argc - 1, argv + 1);
    if (!strcmp(cmd, "_sync-worker")) return demo_worker_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "_bench-reader")) return bench_sync_reader_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("ferry %s\n", ferry_version_string());
        return CLI_OK;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return CLI_OK;
    }
    fprintf(stderr, "ferry: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return CLI_USAGE;
}
