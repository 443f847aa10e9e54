/* `ferry demo`: the README's main job. Trainer processes publish versions
 * of a model's weights after RL-like steps; engine processes sync them in
 * place through ferry and check every element against an independent
 * reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "demo.h"
#include "demo_gpu.h"

/* What the table's columns and the summary mean: printed above the table and by --help. */
static const char legend[] =
    "columns: version; changed = share of the engine's elements that differ from the previous version\n"
    "  (engine replica 0; bf16, or with --quant its fp8 bytes and scales too); bytes moved = bytes landed in all engine processes; seconds = sync latency,\n"
    "  from the first trainer starting to publish to the last engine process holding the version;\n"
    "  GB/s = bytes moved / seconds of that version; publish, update = the slowest trainer's publish\n"
    "  call and engine's update call, s; verified = engine processes that matched the reference / that\n"
    "  hold the version. The summary line: version 1 also connects and plans, so the steady state is\n"
    "  over versions 2..N: the median of each column (seconds, bytes moved, GB/s) over the same\n"
    "  versions, those that finished (every engine process holds them); a version that did not finish\n"
    "  is counted nowhere, n/a if none did.\n";

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry demo [--model M] [--train SPEC] [--infer SPEC] [--steps N]\n"
            "                  [--mode sync|async] [--transport shm|ucx|file] [--staged] [--slots K]\n"
            "                  [--lr X] [--seed N] [--timeout-ms T] [--deltas auto|always|off] [--delta-chain N]\n"
            "                  [--device cpu|cuda|cuda:N] [--pack-limit BYTES] [--quant none|auto|fp8]\n"
            "                  [--no-verify] [--verbose]\n"
            "       ferry demo --rl [--device cpu|cuda] [--mode sync|async] [--steps N] ... (--rl --help)\n"
            "\n"
            "Runs a metadata service, W trainer processes (Megatron-style layout, weights\n"
            "from RL-like Adam steps on fp32 masters cast to bf16) and R engine processes\n"
            "(vLLM-style layout); after every step the engines pull the new version in\n"
            "place through ferry and check every element against their own reference.\n"
            "Defaults: --model qwen3-0.6b --train tp=2,pp=2 --infer tp=2,replicas=2\n"
            "          --steps 5 --mode sync --transport shm --slots 2 --lr 1e-6 --seed 1\n"
            "          --timeout-ms 60000 --deltas auto\n"
            "Ranges: --steps 1..100000, --slots 1..16, --lr 0..1, --timeout-ms 1..86400000.\n"
            "--timeout-ms: each update and publish; a process stopped (SIGSTOP) that long, or\n"
            "making no progress for twice that and 10 s, ends the run, named as the cause\n"
            "(after SIGTERM, SIGKILL follows in 3 s).\n"
            "--deltas: sync mode, readers one version behind apply sparse deltas instead of\n"
            "pulling whole: auto between hosts only, always also on one host, or off. With\n"
            "--device cuda they are encoded and applied on the GPUs.\n"
            "--delta-chain: most versions behind a reader may be and still get deltas (a chain\n"
            "of steps, while it is smaller than the whole), 1..64, default 8. The demo's readers\n"
            "hold every version, so they apply one step each.\n"
            "--device: where every process's buffers live. cuda: on the GPUs, writers from GPU 0\n"
            "up and readers from GPU 1 up (with two GPUs, trainer and engine ranks of the same\n"
            "number sit on different GPUs); cuda:N: all on GPU N (colocated). Needs a ferry built\n"
            "with CUDA; shm moves GPU memory through CUDA IPC, ucx natively where UCX has CUDA\n"
            "support and through ferry's host staging where not (docs/transport.md). Trainers\n"
            "compute each step on their GPU (the same bits as the host's reference); engines check\n"
            "host copies of what landed.\n"
            "--pack-limit: most bytes of a trainer rank's pack area (where it gathers strided\n"
            "sources for readers; on its GPU with --device cuda); past it readers read them run by\n"
            "run. Default 0: no limit.\n"
            "--quant: the engines serve FP8 (float8_e4m3fn, 128 x 128 block scales) as the model's\n"
            "quantization_config says (auto) or regardless (fp8; DeepSeek-V3-type models): trainers\n"
            "quantize each block once per version, engines check every fp8 byte and scale against\n"
            "their own quantization of the reference. Example: --model tests/golden/tiny-mla-fp8.json\n"
            "--train tp=2 --infer tp=2,ep=2 --quant auto.\n"
            "--verbose: each process's pid and events on stderr.\n"
            "--rl: instead, the RL loop with a real model: a transformers Qwen3 trained with AdamW\n"
            "on GPU 0 (or the CPU), an engine process in vLLM's fused layout on GPU 1 updated in\n"
            "place after every step, its logits compared with the trainer's at every version,\n"
            "beside a torch.distributed broadcast of the same weights. Runs python/ferry/rl_loop.py\n"
            "with $FERRY_PYTHON (default python3), which needs torch and transformers.\n"
            "\n%s",
            legend);
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

/* The summary's steady state: each column's median over the same versions,
 * 2..N that finished. */
static void print_later(const demo_step_t *steps, uint32_t nsteps) {
    if (nsteps < 2) {
        printf("; no later versions (--steps 1)");
        return;
    }
    double *secs = calloc(3 * (size_t)nsteps, sizeof *secs), *bytes = secs + nsteps, *rate = bytes + nsteps;
    uint32_t n = 0;
    for (uint32_t v = 1; v < nsteps && secs; v++)
        if (steps[v].complete && steps[v].seconds > 0) {
            secs[n] = steps[v].seconds;
            bytes[n] = (double)steps[v].bytes;
            rate[n] = (double)steps[v].bytes / steps[v].seconds / 1e9;
            n++;
        }
    printf("; versions 2-%u: %u of %u finished", nsteps, n, nsteps - 1);
    if (n) {
        char b[32];
        double ms = cli_median(secs, n), mb = cli_median(bytes, n), mr = cli_median(rate, n);
        printf(", median seconds %.3f, median bytes moved %s, median GB/s %.2f (each over those %u)", ms,
               cli_bytes((uint64_t)(mb + 0.5), b, sizeof b), mr, n);
    } else {
        printf(", medians n/a");
    }
    free(secs);
}

static const char *const modes[] = {"sync", "async"}, *const transports[] = {"shm", "ucx", "file"},
                         *const deltas[] = {"auto", "always", "off"};

int cmd_demo(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--rl")) return cmd_demo_rl(argc, argv);
    demo_opts_t o = demo_defaults();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rl")) {
            fprintf(stderr, "ferry demo: --rl comes first (ferry demo --rl [its options]; --rl --help lists them)\n");
            return CLI_USAGE;
        }
        const char *v = NULL;
        size_t k = 0;
        bool ok = true;
        int c = demo_common_opt(argc, argv, &i, &o, 1, 100000);
        if (c < 0) return CLI_USAGE;
        if (c > 0) continue; /* --model, --train, --infer, --steps */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return CLI_OK;
        } else if (cli_opt(argc, argv, &i, "--slots", &v)) ok = cli_u32("--slots", v, 1, 16, &o.slots);
        else if (cli_opt(argc, argv, &i, "--lr", &v)) ok = cli_f64("--lr", v, (cli_range_t){0, 1, false, false}, &o.lr);
        else if (cli_opt(argc, argv, &i, "--seed", &v)) ok = cli_u64("--seed", v, 0, UINT64_MAX, &o.seed);
        else if (cli_opt(argc, argv, &i, "--timeout-ms", &v))
            ok = cli_u32("--timeout-ms", v, 1, 86400000, &o.timeout_ms);
        else if (cli_opt(argc, argv, &i, "--mode", &v)) {
            if ((ok = cli_word("--mode", v, modes, 2, &k))) o.mode = k ? FERRY_SYNC_MODE_ASYNC : FERRY_SYNC_MODE_SYNC;
        } else if (cli_opt(argc, argv, &i, "--transport", &v)) {
            if ((ok = cli_word("--transport", v, transports, 3, &k)))
                o.transport = k == 0 ? FERRY_XPORT_SHM : k == 1 ? FERRY_XPORT_UCX : (ferry_xport_kind_t)DEMO_TRANSPORT_FILE;
        } else if (cli_opt(argc, argv, &i, "--deltas", &v)) {
            if ((ok = cli_word("--deltas", v, deltas, 3, &k)))
                o.deltas = k == 0 ? FERRY_SYNC_DELTAS_AUTO : k == 1 ? FERRY_SYNC_DELTAS_ALWAYS : FERRY_SYNC_DELTAS_OFF;
        } else if (cli_opt(argc, argv, &i, "--delta-chain", &v)) {
            ok = cli_u32("--delta-chain", v, 1, FERRY_SYNC_DELTA_CHAIN_MAX, &o.delta_chain);
        } else if (cli_opt(argc, argv, &i, "--quant", &v)) {
            ok = v && cli_quant(v, &o.quant);
        } else if (!strcmp(argv[i], "--staged")) o.staged = true;
        else if (!strcmp(argv[i], "--no-verify")) o.verify = false;
        else if (!strcmp(argv[i], "--verbose")) o.verbose = true;
        else {
            fprintf(stderr, "ferry demo: unknown option \"%s\"\n\n", argv[i]);
            usage(stderr);
            return CLI_USAGE;
        }
        if (!ok) return CLI_USAGE;
    }
    { /* bad input is said before the table starts (demo_run checks again) */
        ferry_ctx_t *ctx = cli_ctx();
        ferry_model_t *m = NULL;
        ferry_parallel_t tp, ip;
        char err[512];
        int c = ctx ? demo_check(ctx, &o, &m, &tp, &ip, err, sizeof err) : CLI_FAIL;
        ferry_model_destroy(m);
        ferry_ctx_destroy(ctx);
        if (c != CLI_OK) {
            if (ctx && err[0]) fprintf(stderr, "ferry demo: %s\n", err);
            return c;
        }
    }
    demo_step_t *steps = calloc(o.steps, sizeof *steps);
    if (!steps) return CLI_FAIL;
    printf("ferry demo: %s, trainer %s -> engine %s%s, %s mode%s, %s, %u steps at lr %g\n", o.model, o.train, o.infer,
           o.quant != FERRY_MODEL_QUANT_NONE ? " (fp8)" : "",
           o.mode == FERRY_SYNC_MODE_SYNC ? "sync" : "async", o.staged ? " (staged)" : "",
           o.transport == FERRY_XPORT_SHM ? "shm" : o.transport == FERRY_XPORT_UCX ? "ucx" : "file", o.steps, o.lr);
    printf("%s", legend);
    printf("%7s  %8s  %12s  %8s  %7s  %8s  %8s  %s\n", "version", "changed", "bytes moved", "seconds", "GB/s",
           "publish", "update", "verified");
    fflush(stdout);
    demo_result_t res;
    demo_hooks_t hooks = {.row = print_row};
    int rc = demo_run(&o, steps, &res, &hooks);
    if (rc == CLI_USAGE) {
        if (res.error[0]) fprintf(stderr, "ferry demo: %s\n", res.error);
        free(steps);
        return CLI_USAGE;
    }
    char b[32];
    printf("summary: %u writers -> %u readers, model %s; version 1 (connect, plan, sync) ", res.writers, res.readers,
           cli_bytes(res.model_bytes, b, sizeof b));
    if (steps[0].complete) printf("%.2f s", steps[0].seconds);
    else printf("n/a (did not finish)");
    print_later(steps, o.steps);
    uint32_t du = 0;
    for (uint32_t v = 0; v < o.steps; v++) du += steps[v].delta_updates;
    if (du) printf("; %u reader updates applied sparse deltas", du);
    if (o.device != DEMO_DEVICE_CPU) {
        char w[32], r[32];
        printf("; GPU memory ferry held: %s per writer, %s per reader at most", cli_bytes(res.writer_device_max, w, sizeof w),
               cli_bytes(res.reader_device_max, r, sizeof r));
    }
    printf("; run %.1f s; %s\n", res.total_seconds,
           res.ok ? (o.verify ? "every reader verified every version bit-exactly" : "verification off") : res.error);
    free(steps);
    return rc == CLI_OK && res.ok ? CLI_OK : CLI_FAIL;
}
