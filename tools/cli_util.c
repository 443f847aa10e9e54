#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

ferry_ctx_t *cli_ctx(void) {
    ferry_ctx_t *ctx = NULL;
    char detail[512];
    ferry_status_t st = ferry_ctx_create(NULL, &ctx, detail, sizeof detail);
    if (st != FERRY_OK) {
        fprintf(stderr, "%s: %s (%s)\n", cli_parse_who(), detail, ferry_status_name(st));
        return NULL;
    }
    return ctx;
}

ferry_model_t *cli_load_model(ferry_ctx_t *ctx, const char *arg, bool mtp) {
    return cli_load_model_quant(ctx, arg, mtp, FERRY_MODEL_QUANT_NONE);
}

ferry_model_t *cli_load_model_quant(ferry_ctx_t *ctx, const char *arg, bool mtp, ferry_model_quant_t quant) {
    ferry_model_options_t opts = {.field_mask = FERRY_MODEL_OPT_MTP | FERRY_MODEL_OPT_QUANT,
                                  .include_mtp = mtp,
                                  .quant = quant};
    char path[4096];
    const char *dirs[2] = {ferry_ctx_config_value(ctx, "FERRY_MODELS_DIR", NULL),
                           FERRY_SOURCE_MODELS_DIR};
    const char *use = arg;
    if (access(arg, F_OK) != 0 && !strchr(arg, '/')) {
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/%s.json", dirs[i], arg);
            if (access(path, F_OK) == 0) {
                use = path;
                break;
            }
        }
        if (use == arg) {
            fprintf(stderr,
                    "%s: model \"%s\" is neither a file nor NAME.json in %s or %s\n"
                    "       (bundled: qwen3-0.6b qwen3-8b qwen3-30b-a3b deepseek-v3 kimi-k2)\n",
                    cli_parse_who(), arg, dirs[0], dirs[1]);
            return NULL;
        }
    }
    ferry_model_t *m = NULL;
    ferry_status_t st = ferry_model_from_hf_config_file(ctx, use, &opts, &m);
    if (st != FERRY_OK) {
        fprintf(stderr, "%s: %s (%s)\n", cli_parse_who(), ferry_ctx_error(ctx), ferry_status_name(st));
        return NULL;
    }
    return m;
}

bool cli_quant(const char *s, ferry_model_quant_t *out) {
    if (s && !strcmp(s, "none")) *out = FERRY_MODEL_QUANT_NONE;
    else if (s && !strcmp(s, "auto")) *out = FERRY_MODEL_QUANT_AUTO;
    else if (s && !strcmp(s, "fp8")) *out = FERRY_MODEL_QUANT_FP8;
    else {
        fprintf(stderr, "%s: --quant must be none, auto or fp8, not \"%s\"\n", cli_parse_who(), s ? s : "");
        return false;
    }
    return true;
}

const char *cli_bytes(uint64_t b, char *buf, size_t size) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, size, "%llu B", (unsigned long long)b);
    else snprintf(buf, size, "%.2f %s", v, units[u]);
    return buf;
}

const char *cli_count(uint64_t n, char *buf, size_t size) {
    if (n >= 1000000000000ull) snprintf(buf, size, "%.3f T", (double)n / 1e12);
    else if (n >= 1000000000ull) snprintf(buf, size, "%.2f B", (double)n / 1e9);
    else if (n >= 1000000ull) snprintf(buf, size, "%.1f M", (double)n / 1e6);
    else snprintf(buf, size, "%llu", (unsigned long long)n);
    return buf;
}

bool cli_opt(int argc, char **argv, int *i, const char *name, const char **value) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return false;
    if (argv[*i][n] == '=') {
        *value = argv[*i] + n + 1;
        return true;
    }
    if (argv[*i][n] != '\0') return false;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value\n", cli_parse_who(), name);
        *value = NULL;
        return true;
    }
    *value = argv[++*i];
    return true;
}

double cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

int cli_cmp_dbl(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

double cli_median(double *v, size_t n) {
    if (!n) return 0;
    qsort(v, n, sizeof *v, cli_cmp_dbl);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

extern char **environ;

pid_t cli_spawn(char *const argv[], const int *map, size_t n) {
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa) != 0) return -1;
    int top = 2; /* stderr is shared */
    for (size_t k = 0; k < n; k++) {
        posix_spawn_file_actions_adddup2(&fa, map[2 * k], map[2 * k + 1]);
        if (map[2 * k + 1] > top) top = map[2 * k + 1];
    }
    /* whatever else is open here, close-on-exec or not, stays here */
    posix_spawn_file_actions_addclosefrom_np(&fa, top + 1);
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return pid;
}
