/* The ferry command-line tool: shared helpers. Tools use only the public API. */
#ifndef FERRY_TOOLS_CLI_H
#define FERRY_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ferry/ferry.h"

/* Exit codes: 0 success, 1 the operation failed (e.g. validation), 2 usage
 * or input error. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

int cmd_info(int argc, char **argv);
int cmd_model(int argc, char **argv);
int cmd_layout(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_meta(int argc, char **argv);
int bench_sync(int argc, char **argv);
int bench_sync_reader_main(int argc, char **argv);
int bench_delta(int argc, char **argv);
int cmd_delta(int argc, char **argv);

/* A file mapped read-only (cli_map_file prints why it failed and returns -1). */
typedef struct cli_map {
    const void *data;
    size_t len;
} cli_map_t;
int cli_map_file(const char *path, cli_map_t *m);
void cli_unmap_file(cli_map_t *m);
/* Writes a whole file atomically: temporary file, fsync, rename. Prints why
 * it failed and returns -1. */
int cli_write_atomic(const char *path, const void *data, size_t len);

/* memcpy of len bytes split over nt threads (4 KiB-aligned parts). */
void cli_memcpy_threads(uint8_t *dst, const uint8_t *src, size_t len, uint32_t nt);

/* Creates a context or prints why not; returns NULL on failure. */
ferry_ctx_t *cli_ctx(void);

/* Resolves --model: an existing path, else $FERRY_MODELS_DIR/NAME.json,
 * else the source tree's models/NAME.json. Prints errors. */
ferry_model_t *cli_load_model(ferry_ctx_t *ctx, const char *arg, bool mtp);

/* "16.38 GiB"-style sizes into buf. */
const char *cli_bytes(uint64_t bytes, char *buf, size_t size);
/* "8.19 B"-style counts into buf. */
const char *cli_count(uint64_t n, char *buf, size_t size);

/* Seconds on the monotonic clock. */
double cli_now_s(void);
/* qsort comparators, ascending. */
int cli_cmp_u64(const void *x, const void *y);
int cli_cmp_dbl(const void *x, const void *y);

/* Value of "--name value" or "--name=value" at argv[*i]; advances *i. */
bool cli_opt(int argc, char **argv, int *i, const char *name, const char **value);

#endif
