/* The file channel: a reader following every version applies one delta
 * each; a late reader, one that missed versions and one a few behind take
 * the cheapest way and end bit-exact; garbage collection keeps only what
 * readers can need; damaged files are refused with the buffers left at a
 * whole, verified version; a writer killed mid-publish never leaves a torn
 * or dangling file visible, and a new writer continues the channel. */
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "synth.h"

enum { ELEMS = 65536, VERSIONS = 12, NT = 3 };

static ferry_ctx_t *ctx;
static char dir[200];
/* each version's contents: two bf16 weights and a step counter (I64, which
   the codec does not take, so it travels whole) */
static uint16_t ref_w[VERSIONS + 1][2][ELEMS];
static int64_t ref_step[VERSIONS + 1][4];

static void make_refs(void) {
    float *w = malloc(ELEMS * 4), *m = malloc(ELEMS * 4), *v = malloc(ELEMS * 4), *d = malloc(ELEMS * 4);
    for (int k = 0; k < 2; k++) {
        delta_synth_t s;
        delta_synth_init(&s, ELEMS, k == 1, 3e-6, 77 + (uint64_t)k, w, m, v, d);
        for (int ver = 1; ver <= VERSIONS; ver++) {
            delta_synth_step_range(&s, 0, ELEMS);
            delta_synth_next(&s);
            delta_synth_bf16(&s, ref_w[ver][k], 0, ELEMS);
        }
    }
    for (int ver = 1; ver <= VERSIONS; ver++)
        for (int i = 0; i < 4; i++) ref_step[ver][i] = ver * 10 + i;
    free(w), free(m), free(v), free(d);
}

/* tensors pointing at version ver's reference (writer) or at buffers (reader) */
static void tensors(ferry_channel_tensor_t *t, void *w0, void *w1, void *step) {
    memset(t, 0, NT * sizeof *t);
    t[0] = (ferry_channel_tensor_t){.name = "layers.0.weight", .dtype = FERRY_DTYPE_BF16, .ndim = 2,
                                    .shape = {256, 256}, .data = w0, .bytes = ELEMS * 2};
    t[1] = (ferry_channel_tensor_t){.name = "norm.weight", .dtype = FERRY_DTYPE_BF16, .ndim = 1, .shape = {ELEMS},
                                    .data = w1, .bytes = ELEMS * 2};
    t[2] = (ferry_channel_tensor_t){.name = "step", .dtype = FERRY_DTYPE_I64, .ndim = 1, .shape = {4}, .data = step,
                                    .bytes = 32};
}

typedef struct reader_bufs {
    uint16_t w0[ELEMS], w1[ELEMS];
    int64_t step[4];
    uint64_t version;
    ferry_channel_tensor_t t[NT];
} reader_bufs_t;

static void bufs_init(reader_bufs_t *b) {
    memset(b, 0, sizeof *b);
    b->version = FERRY_CHANNEL_NONE;
    tensors(b->t, b->w0, b->w1, b->step);
}

static void bufs_set(reader_bufs_t *b, int ver) {
    memcpy(b->w0, ref_w[ver][0], sizeof b->w0);
    memcpy(b->w1, ref_w[ver][1], sizeof b->w1);
    memcpy(b->step, ref_step[ver], sizeof b->step);
    b->version = (uint64_t)ver;
}

static bool bufs_hold(const reader_bufs_t *b, int ver) {
    return !memcmp(b->w0, ref_w[ver][0], sizeof b->w0) && !memcmp(b->w1, ref_w[ver][1], sizeof b->w1) &&
           !memcmp(b->step, ref_step[ver], sizeof b->step);
}

static ferry_channel_update_info_t update(reader_bufs_t *b) {
    ferry_channel_reader_t *r;
    CHECK_OK(ferry_channel_reader_create(ctx, dir, &r), ferry_ctx_error(ctx));
    ferry_channel_update_info_t info;
    CHECK_OK(ferry_channel_update(r, b->t, NT, &b->version, &info), ferry_ctx_error(ctx));
    ferry_channel_reader_destroy(r);
    return info;
}

static int count_files(const char *suffix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), s = strlen(suffix);
        if (l >= s && !strcmp(e->d_name + l - s, suffix)) n++;
    }
    closedir(d);
    return n;
}

static void publish(ferry_channel_writer_t *w, int ver) {
    ferry_channel_tensor_t t[NT];
    tensors(t, ref_w[ver][0], ref_w[ver][1], ref_step[ver]);
    CHECK_OK(ferry_channel_publish(w, (uint64_t)ver, t, NT), ferry_ctx_error(ctx));
}

static void test_follow(void) {
    ferry_channel_params_t p = {.field_mask = FERRY_CHANNEL_PARAM_SNAPSHOT_EVERY | FERRY_CHANNEL_PARAM_KEEP,
                                .snapshot_every = 5, .keep = 3};
    /* leftovers of a killed writer go when a writer opens the directory; other files stay */
    CHECK(mkdir(dir, 0755) == 0);
    char path[300];
    const char *junk[] = {"v00000000000000000099.delta", "manifest.json.tmp.123", "notes.tmp.txt"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, junk[i]);
        FILE *jf = fopen(path, "w");
        CHECK(jf && fputs("x", jf) >= 0 && fclose(jf) == 0);
    }
    ferry_channel_writer_t *w;
    CHECK_OK(ferry_channel_writer_create(ctx, dir, &p, &w), ferry_ctx_error(ctx));
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, junk[i]);
        CHECK((access(path, F_OK) == 0) == (i == 2));
    }
    static reader_bufs_t follower, at3, at10;
    bufs_init(&follower);
    ferry_channel_reader_t *r;
    CHECK_OK(ferry_channel_reader_create(ctx, dir, &r), ferry_ctx_error(ctx));
    uint64_t none = FERRY_CHANNEL_NONE;
    CHECK_FAILS(ferry_channel_update(r, follower.t, NT, &none, NULL), FERRY_ERR_NOT_FOUND, ferry_ctx_error(ctx),
                "nothing published");
    ferry_channel_reader_destroy(r);
    for (int ver = 1; ver <= VERSIONS; ver++) {
        publish(w, ver);
        ferry_channel_update_info_t info = update(&follower);
        CHECK_EQ_INT(follower.version, ver);
        CHECK(bufs_hold(&follower, ver));
        if (ver == 1) {
            CHECK(info.snapshots == 1 && info.deltas == 0);
        } else {
            CHECK(info.snapshots == 0 && info.deltas == 1); /* one delta is always cheaper */
        }
        if (ver == 3) at3 = follower;
        if (ver == 10) at10 = follower;
    }
    tensors(at3.t, at3.w0, at3.w1, at3.step);
    tensors(at10.t, at10.w0, at10.w1, at10.step);
    /* a late reader: the newest snapshot (1, 6 and 11 are snapshots) and one delta */
    static reader_bufs_t late;
    bufs_init(&late);
    ferry_channel_update_info_t info = update(&late);
    CHECK(late.version == VERSIONS && bufs_hold(&late, VERSIONS));
    CHECK(info.snapshots == 1 && info.deltas == 1 && info.from == FERRY_CHANNEL_NONE);
    /* one that missed versions beyond the kept ones: snapshot path too */
    info = update(&at3);
    CHECK(at3.version == VERSIONS && bufs_hold(&at3, VERSIONS) && info.snapshots == 1);
    /* one two behind: two deltas, no snapshot */
    info = update(&at10);
    CHECK(at10.version == VERSIONS && bufs_hold(&at10, VERSIONS) && info.snapshots == 0 && info.deltas == 2);
    /* garbage collection: versions 10..12 remain (keep 3; the snapshot at 11) */
    CHECK_EQ_INT(count_files(".safetensors"), 1);
    CHECK_EQ_INT(count_files(".delta"), 3);
    CHECK_EQ_INT(count_files(".tmp"), 0);
    CHECK_EQ_INT(count_files(".txt"), 1); /* notes.tmp.txt, not ours */
    /* bad input */
    ferry_channel_tensor_t t[NT];
    tensors(t, ref_w[1][0], ref_w[1][1], ref_step[1]);
    CHECK_FAILS(ferry_channel_publish(w, VERSIONS, t, NT), FERRY_ERR_INVALID_ARGUMENT, ferry_ctx_error(ctx),
                "is not after 12");
    CHECK_FAILS(ferry_channel_publish(w, (1ull << 63) + 5, t, NT), FERRY_ERR_INVALID_ARGUMENT, ferry_ctx_error(ctx),
                "above 2^63 - 1");
    t[0].shape[0] = 128;
    t[0].bytes = 128 * 256 * 2;
    CHECK_FAILS(ferry_channel_publish(w, VERSIONS + 1, t, NT), FERRY_ERR_MISMATCH, ferry_ctx_error(ctx),
                "differ from the last version");
    ferry_channel_writer_destroy(w);
    /* a reader whose buffers are shaped differently */
    static reader_bufs_t odd;
    bufs_init(&odd);
    odd.t[0].shape[0] = 128, odd.t[0].shape[1] = 512;
    CHECK_OK(ferry_channel_reader_create(ctx, dir, &r), ferry_ctx_error(ctx));
    CHECK_FAILS(ferry_channel_update(r, odd.t, NT, &odd.version, NULL), FERRY_ERR_MISMATCH, ferry_ctx_error(ctx),
                "shaped differently");
    ferry_channel_reader_destroy(r);
}

/* damage the newest delta: a reader at 11 is refused and keeps version 11 */
static void test_damage(void) {
    static reader_bufs_t b;
    bufs_init(&b);
    bufs_set(&b, 11);
    char path[300];
    snprintf(path, sizeof path, "%s/v%020d.delta", dir, 12);
    FILE *f = fopen(path, "r+b");
    CHECK(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size - 40, SEEK_SET);
    int c = fgetc(f);
    fseek(f, size - 40, SEEK_SET);
    fputc(c ^ 0x5A, f);
    fclose(f);
    ferry_channel_reader_t *r;
    CHECK_OK(ferry_channel_reader_create(ctx, dir, &r), ferry_ctx_error(ctx));
    ferry_status_t st = ferry_channel_update(r, b.t, NT, &b.version, NULL);
    CHECK(st == FERRY_ERR_CORRUPT || st == FERRY_ERR_MISMATCH);
    CHECK(strstr(ferry_ctx_error(ctx), "v00000000000000000012.delta"));
    CHECK(b.version == 11 && bufs_hold(&b, 11));
    ferry_channel_reader_destroy(r);
}

/* SIGKILL a writer at moments spread over its publishing; after each, a
 * reader finds a consistent channel holding whole versions, and the next
 * writer carries on from the last published one */
static void test_killed_writer(void) {
    char saved[200];
    snprintf(saved, sizeof saved, "%s", dir);
    snprintf(dir, sizeof dir, "%.150s-kill", saved);
    ferry_channel_params_t p = {.field_mask = FERRY_CHANNEL_PARAM_SNAPSHOT_EVERY, .snapshot_every = 3};
    uint64_t next_ver = 1;
    int published_rounds = 0;
    for (int round = 0; round < 8; round++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            ferry_ctx_t *c2;
            if (ferry_ctx_create(NULL, &c2, NULL, 0) != FERRY_OK) _exit(2);
            ferry_channel_writer_t *w;
            if (ferry_channel_writer_create(c2, dir, &p, &w) != FERRY_OK) _exit(3);
            for (uint64_t ver = next_ver;; ver++) {
                ferry_channel_tensor_t t[NT];
                int src = 1 + (int)(ver % VERSIONS);
                tensors(t, ref_w[src][0], ref_w[src][1], ref_step[src]);
                if (ferry_channel_publish(w, ver, t, NT) != FERRY_OK) _exit(4);
            }
        }
        usleep(5000 + 23000 * (useconds_t)round);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status));
        static reader_bufs_t b;
        bufs_init(&b);
        ferry_channel_reader_t *r;
        CHECK_OK(ferry_channel_reader_create(ctx, dir, &r), ferry_ctx_error(ctx));
        ferry_status_t st = ferry_channel_update(r, b.t, NT, &b.version, NULL);
        ferry_channel_reader_destroy(r);
        if (st == FERRY_ERR_NOT_FOUND && next_ver == 1) continue; /* killed before its first manifest */
        CHECK_OK(st, ferry_ctx_error(ctx));
        CHECK(b.version >= next_ver - (next_ver > 1) && b.version != FERRY_CHANNEL_NONE);
        CHECK(bufs_hold(&b, 1 + (int)(b.version % VERSIONS)));
        next_ver = b.version + 1;
        published_rounds++;
    }
    CHECK(published_rounds >= 4);
    /* a new writer removes the leftovers and continues; a reader one behind follows with a delta */
    ferry_channel_writer_t *w;
    CHECK_OK(ferry_channel_writer_create(ctx, dir, &p, &w), ferry_ctx_error(ctx));
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d))) CHECK(!strstr(e->d_name, ".tmp."));
    closedir(d);
    static reader_bufs_t b;
    bufs_init(&b);
    update(&b);
    CHECK_EQ_INT(b.version, next_ver - 1);
    for (int k = 0; k < 2; k++) {
        ferry_channel_tensor_t t[NT];
        int src = 1 + (int)(next_ver % VERSIONS);
        tensors(t, ref_w[src][0], ref_w[src][1], ref_step[src]);
        CHECK_OK(ferry_channel_publish(w, next_ver, t, NT), ferry_ctx_error(ctx));
        ferry_channel_update_info_t info = update(&b);
        CHECK(b.version == next_ver && bufs_hold(&b, src));
        /* the restarted writer's first version is a snapshot without a delta */
        CHECK(k == 0 ? info.snapshots == 1 : info.deltas == 1);
        next_ver++;
    }
    ferry_channel_writer_destroy(w);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    snprintf(dir, sizeof dir, "%s", saved);
}

int main(void) {
    CHECK_OK(ferry_ctx_create(NULL, &ctx, NULL, 0), "ctx");
    snprintf(dir, sizeof dir, "/tmp/ferry-test-channel-%d", (int)getpid());
    make_refs();
    test_follow();
    test_damage();
    test_killed_writer();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    ferry_ctx_destroy(ctx);
    return 0;
}
