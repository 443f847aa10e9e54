/* The metadata service's token, safe by default: a service given no token
 * generates one into a 0600 file of a 0700 directory before it listens and
 * removes it at the end; it refuses HELLOs without it (loopback included);
 * a same-user client with no token finds the file by the address it
 * connected to; unsafe token files and directories are refused, naming
 * them; a service on a non-loopback address says where its token is, and a
 * client of another host without a token fails at once; FERRY_TOKEN and
 * FERRY_TOKEN_FILE still work; a process of another uid cannot join.
 *
 * Every section runs in a fresh temporary FERRY_TOKEN_DIR and HOME (the
 * user's real token directory is never touched). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ferry/meta.h"
#include "meta/client_msg.h"
#include "meta/conn.h"
#include "meta/proto.h"

static char base[256];     /* this run's temporary directory */
static char tokdir[512];   /* FERRY_TOKEN_DIR inside it */

/* warn-level log lines of the current context */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char warned[8192];

static void log_fn(void *opaque, ferry_log_level_t level, const char *msg) {
    (void)opaque;
    if (level < FERRY_LOG_WARN) return;
    pthread_mutex_lock(&log_lock);
    size_t n = strlen(warned);
    snprintf(warned + n, sizeof warned - n, "%s\n", msg);
    pthread_mutex_unlock(&log_lock);
}

/* A context reading the environment as it is now (FERRY_* are read once). */
static ferry_ctx_t *new_ctx(void) {
    ferry_ctx_params_t p = {.field_mask = FERRY_CTX_PARAM_LOG_FN, .log_fn = log_fn};
    ferry_ctx_t *c = NULL;
    char detail[512];
    if (ferry_ctx_create(&p, &c, detail, sizeof detail) != FERRY_OK) {
        fprintf(stderr, "ferry_ctx_create: %s\n", detail);
        exit(1);
    }
    return c;
}

static void rm_rf(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                char p[1024];
                snprintf(p, sizeof p, "%s/%s", path, e->d_name);
                rm_rf(p);
            }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* A fresh environment: no token variables, the token directory (not yet
 * created) and HOME inside base. */
static void fresh_env(const char *name) {
    snprintf(tokdir, sizeof tokdir, "%s/%s-tokens", base, name);
    char home[512];
    snprintf(home, sizeof home, "%s/%s-home", base, name);
    CHECK(mkdir(home, 0700) == 0);
    setenv("FERRY_TOKEN_DIR", tokdir, 1);
    setenv("HOME", home, 1);
    unsetenv("XDG_RUNTIME_DIR");
    unsetenv("FERRY_TOKEN");
    unsetenv("FERRY_TOKEN_FILE");
    warned[0] = '\0';
}

static ferry_meta_service_t *svc_start(ferry_ctx_t *c, const char *listen) {
    ferry_meta_params_t p = {.field_mask = FERRY_META_PARAM_LISTEN, .listen = listen};
    ferry_meta_service_t *s = NULL;
    CHECK_OK(ferry_meta_service_create(c, &p, &s), ferry_ctx_error(c));
    return s;
}

static uint16_t port_of(const char *addr) {
    char host[META_HOST_MAX];
    uint16_t port = 0;
    ferry_errbuf_t err;
    CHECK_OK(meta_addr_parse(addr, host, &port, &err), err.text);
    return port;
}

static ferry_status_t client_try(ferry_ctx_t *c, const char *address, const char *token, uint32_t timeout_ms,
                                 meta_client_t **out, ferry_errbuf_t *err) {
    meta_client_params_t p = {.address = address,
                              .token = token,
                              .job = "job",
                              .role = META_ROLE_OBSERVER,
                              .lease_ms = 5000,
                              .timeout_ms = timeout_ms};
    err->text[0] = '\0';
    *out = NULL;
    return meta_client_create(c, &p, out, err);
}

static void read_file(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, size - 1);
    CHECK(n >= 0);
    buf[n] = '\0';
    close(fd);
}

static void write_file(const char *path, const char *text, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    CHECK(fchmod(fd, mode) == 0);
    close(fd);
}

/* One HELLO on a raw socket: WELCOME (returns FERRY_OK) or the ERROR's status and detail. */
static ferry_status_t raw_hello(ferry_ctx_t *c, uint16_t port, const char *token, char *detail, size_t size) {
    int fd;
    ferry_errbuf_t err;
    CHECK_OK(meta_connect("127.0.0.1", port, ferry_mono_s() + 10, NULL, &fd, &err), err.text);
    FerryMeta__Hello h = FERRY_META__HELLO__INIT;
    h.protocol = META_PROTOCOL;
    h.token = (ProtobufCBinaryData){strlen(token), (uint8_t *)token};
    h.job = (char *)"job";
    h.role = META_ROLE_OBSERVER;
    h.host = (char *)"h";
    uint8_t *buf;
    size_t len;
    CHECK_OK(meta_encode(c, META_HELLO, &h.base, &buf, &len, &err), err.text);
    CHECK_OK(meta_write_all(fd, buf, len, ferry_mono_s() + 10, NULL, &err), err.text);
    ferry_free(c, buf);
    frame_reader_t rd;
    frame_reader_init(&rd, c, 0);
    uint8_t type;
    const uint8_t *body;
    uint32_t blen;
    CHECK_OK(meta_read_frame(fd, &rd, ferry_mono_s() + 10, NULL, &type, &body, &blen, &err), err.text);
    ferry_status_t st = FERRY_OK;
    detail[0] = '\0';
    if (type == META_ERROR) {
        ProtobufCMessage *m;
        CHECK_OK(meta_decode(c, type, body, blen, &m, &err), err.text);
        st = (ferry_status_t)((FerryMeta__Error *)m)->status;
        snprintf(detail, size, "%s", ((FerryMeta__Error *)m)->detail);
        meta_free(c, m);
        /* a refusal closes the connection */
        CHECK_FAILS(meta_read_frame(fd, &rd, ferry_mono_s() + 10, NULL, &type, &body, &blen, &err), FERRY_ERR_PEER_LOST,
                    err.text, "closed");
    } else {
        CHECK_EQ_INT(type, META_WELCOME);
    }
    frame_reader_free(&rd);
    close(fd);
    return st;
}

/* ---- 1. generated: file, refusals, same-user clients, removal ------------------------- */

static void test_generated(void) {
    fresh_env("gen");
    ferry_ctx_t *c = new_ctx();
    ferry_meta_service_t *s = svc_start(c, "127.0.0.1:0");
    CHECK_EQ_INT(warned[0], '\0'); /* loopback: nothing to say at warn */
    const char *addr = ferry_meta_service_address(s);
    uint16_t port = port_of(addr);
    char path[1024];
    snprintf(path, sizeof path, "%s", ferry_meta_service_token_file(s));
    CHECK(strncmp(path, tokdir, strlen(tokdir)) == 0);
    char want[64];
    snprintf(want, sizeof want, "-127.0.0.1:%u.token", port);
    CHECK_STR_HAS(path, want);
    struct stat st;
    CHECK(stat(tokdir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid());
    CHECK_EQ_INT(st.st_mode & 07777, 0700);
    CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid());
    CHECK_EQ_INT(st.st_mode & 07777, 0600);
    char token[512];
    read_file(path, token, sizeof token);
    CHECK_EQ_INT(strlen(token), 65); /* 256 bits in hex, and a newline */
    CHECK(token[64] == '\n');
    token[64] = '\0';
    CHECK(strspn(token, "0123456789abcdef") == 64);
    CHECK_EQ_INT(count_entries(tokdir), 1); /* no temporary left behind */

    /* no token, or a wrong one: refused, loopback or not */
    char detail[512];
    CHECK_EQ_INT(raw_hello(c, port, "", detail, sizeof detail), FERRY_ERR_INVALID_ARGUMENT);
    CHECK_STR_HAS(detail, "no token presented");
    CHECK_STR_HAS(detail, "FERRY_TOKEN");
    char wrong[65];
    memcpy(wrong, token, 65);
    wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
    CHECK_EQ_INT(raw_hello(c, port, wrong, detail, sizeof detail), FERRY_ERR_INVALID_ARGUMENT);
    CHECK_STR_HAS(detail, "token mismatch");
    CHECK_EQ_INT(raw_hello(c, port, token, detail, sizeof detail), FERRY_OK);

    /* a same-user client with no token finds the file; so does the status call */
    meta_client_t *cl;
    ferry_errbuf_t err;
    CHECK_OK(client_try(c, addr, "", 10000, &cl, &err), err.text);
    meta_client_destroy(cl);
    CHECK_OK(client_try(c, addr, NULL, 10000, &cl, &err), err.text);
    meta_client_destroy(cl);
    char *json = NULL;
    CHECK_OK(ferry_meta_status_json(c, addr, NULL, 10000, &json), ferry_ctx_error(c));
    CHECK_STR_HAS(json, "\"members\"");
    free(json);
    /* by "localhost" too (which may resolve to ::1 first: nothing listens there) */
    char local[64];
    snprintf(local, sizeof local, "localhost:%u", port);
    CHECK_OK(ferry_meta_status_json(c, local, NULL, 10000, &json), ferry_ctx_error(c));
    free(json);

    ferry_meta_service_destroy(s);
    CHECK(stat(path, &st) != 0 && errno == ENOENT);
    CHECK_EQ_INT(count_entries(tokdir), 0);
    ferry_ctx_destroy(c);
    printf("  generated: 64 hex digits in a 0600 file of a 0700 directory, removed at the end; no or a wrong "
           "token refused, same-user clients without a token connect\n");
}

/* ---- 2. a restarted service: clients re-read the new token ------------------------------ */

static void test_restart(void) {
    fresh_env("restart");
    ferry_ctx_t *c = new_ctx();
    ferry_meta_service_t *s = svc_start(c, "127.0.0.1:0");
    char listen[64], old[512], now[512];
    snprintf(listen, sizeof listen, "%s", ferry_meta_service_address(s));
    read_file(ferry_meta_service_token_file(s), old, sizeof old);
    meta_client_t *cl;
    ferry_errbuf_t err;
    CHECK_OK(client_try(c, listen, "", 10000, &cl, &err), err.text);
    ferry_meta_service_destroy(s);
    s = svc_start(c, listen);
    read_file(ferry_meta_service_token_file(s), now, sizeof now);
    CHECK(strcmp(old, now) != 0);
    FerryMeta__GetStatus g = FERRY_META__GET_STATUS__INIT;
    ProtobufCMessage *reply = NULL;
    CHECK_OK(meta_client_call(cl, META_GET_STATUS, &g.base, META_STATUS, 0, &reply, &err), err.text);
    meta_free(c, reply);
    meta_client_destroy(cl);
    ferry_meta_service_destroy(s);
    ferry_ctx_destroy(c);
    printf("  restart: a client without a token reconnects to a new service on the same port with its new token\n");
}

/* ---- 3. unsafe files and directories ----------------------------------------------------- */

static void test_unsafe(void) {
    fresh_env("unsafe");
    ferry_ctx_t *c = new_ctx();
    ferry_meta_service_t *s = svc_start(c, "127.0.0.1:0");
    const char *addr = ferry_meta_service_address(s);
    const char *path = ferry_meta_service_token_file(s);
    meta_client_t *cl;
    ferry_errbuf_t err;
    /* group-readable, then other-readable: refused at once, naming the file and why */
    mode_t modes[2] = {0640, 0604};
    for (int i = 0; i < 2; i++) {
        CHECK(chmod(path, modes[i]) == 0);
        double t0 = ferry_mono_s();
        CHECK_FAILS(client_try(c, addr, "", 20000, &cl, &err), FERRY_ERR_INVALID_CONFIG, err.text, path);
        CHECK_STR_HAS(err.text, "group or others");
        CHECK(ferry_mono_s() - t0 < 10); /* not retried until the timeout */
    }
    CHECK(chmod(path, 0600) == 0);
    CHECK_OK(client_try(c, addr, "", 10000, &cl, &err), err.text);
    meta_client_destroy(cl);
    /* owned by another uid (only root can make one) */
    if (geteuid() == 0) {
        CHECK(chown(path, 65534, 65534) == 0);
        CHECK_FAILS(client_try(c, addr, "", 20000, &cl, &err), FERRY_ERR_INVALID_CONFIG, err.text,
                    "owned by uid 65534");
        CHECK(chown(path, 0, 0) == 0);
    } else {
        printf("  (not root: the token file of another uid is not tried)\n");
    }
    ferry_meta_service_destroy(s);
    ferry_ctx_destroy(c);

    /* a token directory open to others: a service refuses to write there */
    char open_dir[600];
    snprintf(open_dir, sizeof open_dir, "%s/open-dir", base);
    CHECK(mkdir(open_dir, 0700) == 0 && chmod(open_dir, 0755) == 0);
    setenv("FERRY_TOKEN_DIR", open_dir, 1);
    c = new_ctx();
    ferry_meta_params_t p = {.field_mask = FERRY_META_PARAM_LISTEN, .listen = "127.0.0.1:0"};
    CHECK_FAILS(ferry_meta_service_create(c, &p, &s), FERRY_ERR_INVALID_CONFIG, ferry_ctx_error(c), open_dir);
    CHECK_STR_HAS(ferry_ctx_error(c), "mode 0755");
    CHECK_EQ_INT(count_entries(open_dir), 0);
    ferry_ctx_destroy(c);

    /* FERRY_TOKEN_FILE readable by others: refused by service and client */
    char tf[600];
    snprintf(tf, sizeof tf, "%s/shared.token", base);
    write_file(tf, "sharedsecret\n", 0644);
    setenv("FERRY_TOKEN_DIR", tokdir, 1);
    setenv("FERRY_TOKEN_FILE", tf, 1);
    c = new_ctx();
    CHECK_FAILS(ferry_meta_service_create(c, &p, &s), FERRY_ERR_INVALID_CONFIG, ferry_ctx_error(c), tf);
    CHECK_STR_HAS(ferry_ctx_error(c), "mode 0644");
    ferry_ctx_destroy(c);
    unlink(tf);
    unsetenv("FERRY_TOKEN_FILE");
    printf("  unsafe: group/other-readable or foreign token files refused naming the file; a 0755 token "
           "directory refused\n");
}

/* ---- 4. FERRY_TOKEN and FERRY_TOKEN_FILE ------------------------------------------------- */

static void test_given(void) {
    fresh_env("given");
    setenv("FERRY_TOKEN", "given-token", 1);
    ferry_ctx_t *c = new_ctx();
    ferry_meta_service_t *s = svc_start(c, "127.0.0.1:0");
    const char *addr = ferry_meta_service_address(s);
    CHECK_EQ_INT(ferry_meta_service_token_file(s)[0], '\0'); /* nothing written */
    CHECK(count_entries(tokdir) <= 0);
    char *json = NULL;
    CHECK_OK(ferry_meta_status_json(c, addr, NULL, 10000, &json), ferry_ctx_error(c)); /* FERRY_TOKEN */
    free(json);
    meta_client_t *cl;
    ferry_errbuf_t err;
    CHECK_FAILS(client_try(c, addr, "other", 10000, &cl, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "token mismatch");
    unsetenv("FERRY_TOKEN");
    ferry_ctx_t *c2 = new_ctx(); /* no token anywhere: presents none, refused */
    CHECK_FAILS(client_try(c2, addr, "", 10000, &cl, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "no token presented");
    ferry_ctx_destroy(c2);
    ferry_meta_service_destroy(s);
    ferry_ctx_destroy(c);

    /* FERRY_TOKEN_FILE that exists: the service uses it and leaves it */
    char tf[600];
    snprintf(tf, sizeof tf, "%s/job.token", base);
    write_file(tf, "file-token\n", 0600);
    setenv("FERRY_TOKEN_FILE", tf, 1);
    c = new_ctx();
    s = svc_start(c, "127.0.0.1:0");
    addr = ferry_meta_service_address(s);
    CHECK_EQ_INT(ferry_meta_service_token_file(s)[0], '\0');
    CHECK_OK(client_try(c, addr, "", 10000, &cl, &err), err.text); /* the client reads it too */
    meta_client_destroy(cl);
    CHECK_OK(client_try(c, addr, "file-token", 10000, &cl, &err), err.text);
    meta_client_destroy(cl);
    ferry_meta_service_destroy(s);
    struct stat st;
    CHECK(stat(tf, &st) == 0);
    ferry_ctx_destroy(c);
    /* FERRY_TOKEN_FILE that does not exist: generated there, removed at the end */
    unlink(tf);
    c = new_ctx();
    s = svc_start(c, "127.0.0.1:0");
    CHECK(!strcmp(ferry_meta_service_token_file(s), tf));
    CHECK(stat(tf, &st) == 0);
    CHECK_EQ_INT(st.st_mode & 07777, 0600);
    CHECK_OK(client_try(c, ferry_meta_service_address(s), "", 10000, &cl, &err), err.text);
    meta_client_destroy(cl);
    ferry_meta_service_destroy(s);
    CHECK(stat(tf, &st) != 0);
    ferry_ctx_destroy(c);
    unsetenv("FERRY_TOKEN_FILE");
    printf("  given: FERRY_TOKEN used as is (no file), FERRY_TOKEN_FILE read, or generated into and removed\n");
}

/* ---- 5. a non-loopback service, and clients of other hosts ----------------------------- */

/* An IPv4 address of this host that is not loopback, or "" if it has none. */
static void host_address(char *buf, size_t size) {
    buf[0] = '\0';
    struct ifaddrs *ifa;
    if (getifaddrs(&ifa) != 0) return;
    for (struct ifaddrs *i = ifa; i && !buf[0]; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            const struct sockaddr_in *in = (const void *)i->ifa_addr;
            if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) inet_ntop(AF_INET, &in->sin_addr, buf, (socklen_t)size);
        }
    freeifaddrs(ifa);
}

static void test_remote(void) {
    fresh_env("remote");
    ferry_ctx_t *c = new_ctx();
    ferry_meta_service_t *s = svc_start(c, "0.0.0.0:0");
    uint16_t port = port_of(ferry_meta_service_address(s));
    const char *path = ferry_meta_service_token_file(s);
    char want[64];
    snprintf(want, sizeof want, "-0.0.0.0:%u.token", port);
    CHECK_STR_HAS(path, want);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK_EQ_INT(st.st_mode & 07777, 0600);
    /* said once, at warn (shown by default): where, and how members get it */
    CHECK_STR_HAS(warned, path);
    CHECK_STR_HAS(warned, "FERRY_TOKEN_FILE");
    CHECK_STR_HAS(warned, "other hosts");
    /* a client of this host by loopback finds the wildcard's file */
    char addr[128];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    meta_client_t *cl;
    ferry_errbuf_t err;
    CHECK_OK(client_try(c, addr, "", 10000, &cl, &err), err.text);
    meta_client_destroy(cl);
    /* a client of another host without a token fails at once with what to set,
     * before connecting (203.0.113.1, TEST-NET-3, documentation only) */
    snprintf(addr, sizeof addr, "203.0.113.1:%u", port);
    double t0 = ferry_mono_s();
    CHECK_FAILS(client_try(c, addr, "", 60000, &cl, &err), FERRY_ERR_INVALID_CONFIG, err.text, "FERRY_TOKEN");
    CHECK_STR_HAS(err.text, "FERRY_TOKEN_FILE");
    CHECK_STR_HAS(err.text, "203.0.113.1");
    CHECK(ferry_mono_s() - t0 < 30);
    char *json = NULL;
    CHECK_FAILS(ferry_meta_status_json(c, addr, NULL, 60000, &json), FERRY_ERR_INVALID_CONFIG, ferry_ctx_error(c),
                "FERRY_TOKEN_FILE");
    /* this host's own address: the same user on this host finds the file; a
     * member given FERRY_TOKEN_FILE (a copy of it, as on another host) connects */
    char host[64];
    host_address(host, sizeof host);
    if (host[0]) {
        snprintf(addr, sizeof addr, "%s:%u", host, port);
        CHECK_OK(client_try(c, addr, "", 10000, &cl, &err), err.text);
        meta_client_destroy(cl);
        char copy[600], tok[512];
        snprintf(copy, sizeof copy, "%s/copy.token", base);
        read_file(path, tok, sizeof tok);
        write_file(copy, tok, 0600);
        setenv("FERRY_TOKEN_FILE", copy, 1);
        setenv("FERRY_TOKEN_DIR", base, 1); /* not where the service wrote: only the copy can help */
        ferry_ctx_t *c2 = new_ctx();
        CHECK_OK(client_try(c2, addr, "", 10000, &cl, &err), err.text);
        meta_client_destroy(cl);
        ferry_ctx_destroy(c2);
        unsetenv("FERRY_TOKEN_FILE");
        setenv("FERRY_TOKEN_DIR", tokdir, 1);
        printf("  remote: by this host's address %s, with the token dir and with a FERRY_TOKEN_FILE copy\n", host);
    } else {
        printf("  remote: this host has no non-loopback IPv4 address; connecting by one is not tried\n");
    }
    ferry_meta_service_destroy(s);
    CHECK(stat(path, &st) != 0);
    ferry_ctx_destroy(c);
    printf("  remote: 0.0.0.0 without a token generates one and says where at warn; a client of another host "
           "without a token fails at once naming FERRY_TOKEN and FERRY_TOKEN_FILE\n");
}

/* ---- 6. another uid ----------------------------------------------------------------------- */

static void test_other_uid(void) {
    if (geteuid() != 0) {
        printf("  other uid: not root, cannot become another user; not tried\n");
        return;
    }
    fresh_env("uid");
    ferry_ctx_t *c = new_ctx();
    ferry_meta_service_t *s = svc_start(c, "127.0.0.1:0");
    uint16_t port = port_of(ferry_meta_service_address(s));
    char path[1024];
    snprintf(path, sizeof path, "%s", ferry_meta_service_token_file(s));
    /* what the stranger will send: an empty HELLO, encoded here (the child
     * only makes system calls: this process has threads) */
    FerryMeta__Hello h = FERRY_META__HELLO__INIT;
    h.protocol = META_PROTOCOL;
    h.job = (char *)"job";
    h.role = META_ROLE_WRITER;
    h.world = 1;
    h.host = (char *)"h";
    uint8_t *hello;
    size_t hello_len;
    ferry_errbuf_t err;
    CHECK_OK(meta_encode(c, META_HELLO, &h.base, &hello, &hello_len, &err), err.text);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* exit codes: 0 refused as it should be; 2 could read the token; 3 was welcomed; 4 setup */
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(4);
        if (open(path, O_RDONLY) >= 0) _exit(2);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) _exit(4);
        if (write(fd, hello, hello_len) != (ssize_t)hello_len) _exit(4);
        uint8_t hdr[FRAME_HEADER];
        size_t got = 0;
        while (got < sizeof hdr) {
            ssize_t n = read(fd, hdr + got, sizeof hdr - got);
            if (n <= 0) _exit(0); /* closed without a word: refused too */
            got += (size_t)n;
        }
        _exit(hdr[3] == META_WELCOME ? 3 : hdr[3] == META_ERROR ? 0 : 4);
    }
    int ws;
    CHECK(waitpid(pid, &ws, 0) == pid);
    ferry_free(c, hello);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fprintf(stderr, "another uid: child ended with wait status %d (2: read the token, 3: welcomed)\n", ws);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    ferry_meta_service_destroy(s);
    ferry_ctx_destroy(c);
    printf("  other uid: cannot read the token file, and its HELLO without one is refused\n");
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(base, sizeof base, "%s/ferry-token-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK(mkdtemp(base) != NULL);
    CHECK(chmod(base, 0711) == 0); /* the other-uid child must reach the token directory to be refused by it */
    double t0 = ferry_mono_s();
    test_generated();
    test_restart();
    test_unsafe();
    test_given();
    test_remote();
    test_other_uid();
    rm_rf(base);
    printf("meta token: all sections ran in %.2f s\n", ferry_mono_s() - t0);
    return 0;
}
