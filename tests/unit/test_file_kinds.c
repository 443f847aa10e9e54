/* Library calls that read a file by path refuse anything but a regular
 * file, at once and with a message naming the path: a FIFO (opening one for
 * reading waits for a writer forever), a directory, a character device
 * (/dev/zero never ends). An alarm turns a regression into a failure
 * instead of a hang. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_file_kinds: a call blocked on a file that is not a regular file\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

static void config_refused(ferry_ctx_t *ctx, const char *path, const char *kind) {
    ferry_model_t *m = NULL;
    alarm(10);
    ferry_status_t st = ferry_model_from_hf_config_file(ctx, path, NULL, &m);
    alarm(0);
    CHECK_FAILS(st, FERRY_ERR_INVALID_ARGUMENT, ferry_ctx_error(ctx), path);
    CHECK(strstr(ferry_ctx_error(ctx), kind) != NULL);
    CHECK(m == NULL);
}

static void channel_refused(ferry_ctx_t *ctx, const char *dir) {
    ferry_channel_reader_t *r = NULL;
    CHECK_OK(ferry_channel_reader_create(ctx, dir, &r), ferry_ctx_error(ctx));
    uint64_t version = FERRY_CHANNEL_NONE;
    ferry_channel_update_info_t info;
    alarm(10);
    uint16_t data[4] = {0};
    ferry_channel_tensor_t t = {.name = "w", .dtype = FERRY_DTYPE_BF16, .ndim = 1, .shape = {4}, .data = data,
                                .bytes = sizeof data};
    ferry_status_t st = ferry_channel_update(r, &t, 1, &version, &info);
    alarm(0);
    CHECK(st != FERRY_OK);
    CHECK(strstr(ferry_ctx_error(ctx), "manifest.json") != NULL);
    CHECK(strstr(ferry_ctx_error(ctx), "not a regular file") != NULL);
    CHECK(version == FERRY_CHANNEL_NONE);
    ferry_channel_reader_destroy(r);
}

int main(void) {
    signal(SIGALRM, on_alarm);
    ferry_ctx_t *ctx = test_ctx();
    char dir[] = "/tmp/ferry-file-kinds-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char fifo[256], sub[256], chan[256], manifest[512];
    snprintf(fifo, sizeof fifo, "%s/config.json", dir);
    snprintf(sub, sizeof sub, "%s/dir.json", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(mkdir(sub, 0700) == 0);

    config_refused(ctx, fifo, "a FIFO");
    config_refused(ctx, sub, "a directory");
    config_refused(ctx, "/dev/zero", "a character device");
    /* a missing file is still NOT_FOUND, and a regular one still loads */
    ferry_model_t *m = NULL;
    char missing[256], good[1024];
    snprintf(missing, sizeof missing, "%s/missing.json", dir);
    CHECK_FAILS(ferry_model_from_hf_config_file(ctx, missing, NULL, &m), FERRY_ERR_NOT_FOUND, ferry_ctx_error(ctx),
                missing);
    snprintf(good, sizeof good, "%s/qwen3-0.6b.json", FERRY_TEST_MODELS);
    CHECK_OK(ferry_model_from_hf_config_file(ctx, good, NULL, &m), ferry_ctx_error(ctx));
    ferry_model_destroy(m);

    /* a channel directory whose manifest is a FIFO */
    snprintf(chan, sizeof chan, "%s/chan", dir);
    snprintf(manifest, sizeof manifest, "%s/manifest.json", chan);
    CHECK(mkdir(chan, 0700) == 0);
    CHECK(mkfifo(manifest, 0600) == 0);
    channel_refused(ctx, chan);

    unlink(manifest);
    rmdir(chan);
    unlink(fifo);
    rmdir(sub);
    rmdir(dir);
    ferry_ctx_destroy(ctx);
    return 0;
}
