/* The ferry command-line tool: shared helpers. Tools use only the public API. */
#ifndef FERRY_TOOLS_CLI_H
#define FERRY_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cli_parse.h"
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
int cmd_demo_rl(int argc, char **argv); /* `ferry demo --rl`: Python runs the RL loop (demo_rl.c) */
int cmd_meta(int argc, char **argv);
int bench_sync(int argc, char **argv);
int bench_sync_reader_main(int argc, char **argv);
int bench_delta(int argc, char **argv);
int bench_fp8(int argc, char **argv);
int cmd_delta(int argc, char **argv);

/* A file mapped read-only (cli_map_file prints why it failed and returns -1).
 * Only regular files: a FIFO, directory or device is refused without
 * blocking. */
typedef struct cli_map {
    const void *data;
    size_t len;
} cli_map_t;
int cli_map_file(const char *path, cli_map_t *m);
void cli_unmap_file(cli_map_t *m);
/* Writes a whole file atomically: temporary file, fsync, rename. Prints why
 * it failed and returns -1. */
int cli_write_atomic(const char *path, const void *data, size_t len);
/* Checks before any work that path can be written as an output (what names
 * it in errors, e.g. "-o"): it is a regular file or does not exist, and its
 * directory exists and takes new files (tried by creating one). Prints why
 * not and returns -1. */
int cli_check_output(const char *path, const char *what);
/* Checks that path is a directory that takes new files; as above. */
int cli_check_dir(const char *path, const char *what);
/* "a directory", "a FIFO", ... for a st_mode. */
const char *cli_file_kind(mode_t mode);

/* memcpy of len bytes split over nt threads (4 KiB-aligned parts). */
void cli_memcpy_threads(uint8_t *dst, const uint8_t *src, size_t len, uint32_t nt);

/* Creates a context or prints why not; returns NULL on failure. */
ferry_ctx_t *cli_ctx(void);

/* Resolves --model: an existing path, else $FERRY_MODELS_DIR/NAME.json,
 * else the source tree's models/NAME.json. Prints errors. */
ferry_model_t *cli_load_model(ferry_ctx_t *ctx, const char *arg, bool mtp);
/* Same, with quantization (FERRY_MODEL_QUANT_NONE is cli_load_model). */
ferry_model_t *cli_load_model_quant(ferry_ctx_t *ctx, const char *arg, bool mtp, ferry_model_quant_t quant);

/* Parses --quant none|auto|fp8; prints why not and returns false. */
bool cli_quant(const char *s, ferry_model_quant_t *out);

/* "16.38 GiB"-style sizes into buf. */
const char *cli_bytes(uint64_t bytes, char *buf, size_t size);
/* "8.19 B"-style counts into buf. */
const char *cli_count(uint64_t n, char *buf, size_t size);

/* Starts this executable with argv. The child gets stderr and exactly the
 * descriptors of map (n pairs: map[2k] becomes the child's map[2k+1]),
 * whatever else is open here. Returns the pid, or -1 with errno set. */
pid_t cli_spawn(char *const argv[], const int *map, size_t n);

/* Seconds on the monotonic clock. */
double cli_now_s(void);
/* qsort comparators, ascending. */
int cli_cmp_u64(const void *x, const void *y);
int cli_cmp_dbl(const void *x, const void *y);
/* Median of v[0..n) (sorts v; the mean of the middle two when n is even; 0 when n is 0). */
double cli_median(double *v, size_t n);

/* Value of "--name value" or "--name=value" at argv[*i]; advances *i. */
bool cli_opt(int argc, char **argv, int *i, const char *name, const char **value);

#endif
