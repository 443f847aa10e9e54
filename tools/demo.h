/* `ferry demo` and `ferry bench sync`: a real multi-process sync on this
 * machine. The parent runs the metadata service and spawns W writer and R
 * reader processes (this executable, hidden command `_sync-worker`); they
 * report each step on a pipe and the parent assembles the figures. */
#ifndef FERRY_TOOLS_DEMO_H
#define FERRY_TOOLS_DEMO_H

#include <stdbool.h>
#include <stdint.h>

#include "ferry/ferry.h"

/* The demo's transport beside ferry_xport_kind_t's: the file channel, each
 * trainer rank publishing into its own directory under $FERRY_DEMO_DIR. */
#define DEMO_TRANSPORT_FILE 100

typedef struct demo_opts {
    const char *model, *train, *infer;
    uint32_t steps;
    ferry_sync_mode_t mode;
    ferry_xport_kind_t transport;
    bool staged;
    bool verify;          /* readers check every element against the reference */
    double lr;
    uint64_t seed;
    uint32_t timeout_ms;  /* per update / publish */
    uint32_t slots;
    ferry_sync_deltas_t deltas;
    bool verbose;         /* per-process lines on stderr */
    int device;           /* DEMO_DEVICE_CPU, DEMO_DEVICE_SPREAD, or every worker on GPU N (demo_gpu.h) */
    uint64_t pack_limit;  /* every member's (ferry_sync_params_t); 0: none */
    uint32_t delta_chain; /* every member's (ferry_sync_params_t); 0: the default */
    ferry_model_quant_t quant; /* the engines' spec (trainers' is bf16): FERRY_MODEL_QUANT_AUTO/FP8 for fp8 engines */
} demo_opts_t;

typedef struct demo_step {
    uint64_t version;
    uint64_t bytes;       /* pulled by all readers */
    double seconds;       /* sync latency: the longest any reader took from the moment it asked and
                           * the first writer started publishing, to holding the version */
    double publish_max;   /* slowest writer's publish call */
    double update_max;    /* slowest reader's update call */
    uint32_t writers;     /* writers that published it */
    uint32_t filled;      /* writers that computed it and wait to publish */
    uint32_t readers;     /* readers that hold this version */
    uint32_t verified;    /* of them, matched the reference everywhere */
    uint64_t mismatches;
    uint64_t changed;     /* bf16 elements that differ from the previous version (reader 0s of each replica) */
    uint64_t elements;
    uint32_t delta_updates; /* readers that applied deltas for this version */
    bool complete;        /* every writer published it and every reader holds it: seconds is set */
} demo_step_t;

typedef struct demo_result {
    uint32_t writers, readers;
    uint64_t model_bytes;
    double total_seconds;
    bool ok;              /* every process succeeded and every step verified */
    uint64_t writer_device_max, reader_device_max; /* GPU memory ferry held for one writer / reader, at most */
    char error[512];
} demo_result_t;

demo_opts_t demo_defaults(void);
/* Takes one of the options `ferry demo` and `ferry bench sync` share
 * (--model, --train, --infer, --steps in [steps_lo, steps_hi], --device) at argv[*i]:
 * 1 taken, 0 it is none of them, -1 a bad or missing value (said on stderr). */
int demo_common_opt(int argc, char **argv, int *i, demo_opts_t *o, uint32_t steps_lo, uint32_t steps_hi);
/* What a caller of demo_run hears about; any member may be NULL. */
typedef struct demo_hooks {
    /* a step completed (every writer published it, every reader holds it): a progress row */
    void (*row)(const demo_step_t *step, void *opaque);
    /* version v is about to be published (v >= 2): every writer has computed
     * it and every process is idle, so the machine is quiet for a moment */
    void (*before_go)(uint64_t version, void *opaque);
    void *opaque;
} demo_hooks_t;

/* What the workers would refuse, refused before any starts: the model
 * loads (*model, the caller destroys it, also on failure), the specs parse,
 * both layouts build, every tensor is bf16 or f32; with quant, the
 * engines' spec has fp8 tensors and the plan into them builds (no trainer
 * split cuts a 128 x 128 block). CLI_OK, or CLI_USAGE
 * with the reason in err (empty when cli_load_model printed it). */
int demo_check(ferry_ctx_t *ctx, const demo_opts_t *o, ferry_model_t **model, ferry_parallel_t *tp,
               ferry_parallel_t *ip, char *err, size_t size);

/* Runs the whole thing; steps[] has o->steps entries. hooks may be NULL. */
int demo_run(const demo_opts_t *o, demo_step_t *steps, demo_result_t *res, const demo_hooks_t *hooks);

/* The hidden worker command. */
int demo_worker_main(int argc, char **argv);



#endif
