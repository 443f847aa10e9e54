/* Metadata protocol, the token: see token.h. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meta/conn.h"
#include "meta/token.h"

static const char *cfg(ferry_ctx_t *ctx, const char *name) {
    const char *v = ferry_ctx_config_value(ctx, name, NULL);
    return v ? v : "";
}

#define DIR_MAX (META_TOKEN_PATH - 256) /* leaves room for a file name */
#define NAME_MAX_LEN 200

/* The token directory: FERRY_TOKEN_DIR, else $XDG_RUNTIME_DIR/ferry, else
 * ~/.ferry. */
static ferry_status_t token_dir(ferry_ctx_t *ctx, char dir[DIR_MAX], ferry_errbuf_t *err) {
    const char *d = cfg(ctx, "FERRY_TOKEN_DIR"), *base = NULL, *leaf = "";
    struct passwd pw, *found = NULL;
    char pwbuf[4096];
    if (!*d) {
        const char *xdg = getenv("XDG_RUNTIME_DIR"), *home = getenv("HOME");
        if (xdg && xdg[0] == '/') {
            base = xdg;
            leaf = "/ferry";
        } else {
            if ((!home || home[0] != '/') && getpwuid_r(geteuid(), &pw, pwbuf, sizeof pwbuf, &found) == 0 && found)
                home = found->pw_dir;
            if (!home || home[0] != '/')
                return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                                  "meta token: no token directory ($XDG_RUNTIME_DIR and $HOME unset): set "
                                  "FERRY_TOKEN, FERRY_TOKEN_FILE or FERRY_TOKEN_DIR");
            base = home;
            leaf = "/.ferry";
        }
        d = base;
    }
    if ((size_t)snprintf(dir, DIR_MAX, "%s%s", d, leaf) >= DIR_MAX)
        return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta token: token directory %s%s is too long", d, leaf);
    return FERRY_OK;
}

/* Creates the directory (0700) if missing and checks it is this user's and
 * closed to group and others: the service writes tokens only there. */
static ferry_status_t dir_ready(const char *dir, ferry_errbuf_t *err) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return ferry_fail(err, FERRY_ERR_IO, "meta token: cannot create the token directory %s: %s", dir,
                          strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0)
        return ferry_fail(err, FERRY_ERR_IO, "meta token: token directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta token: token directory %s is not a directory", dir);
    if (st.st_uid != geteuid())
        return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                          "meta token: token directory %s is owned by uid %u, not by this user (uid %u): refused",
                          dir, (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & 077)
        return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                          "meta token: token directory %s is open to group or others (mode %04o): refused; chmod "
                          "700 it or set FERRY_TOKEN_DIR",
                          dir, (unsigned)(st.st_mode & 07777));
    return FERRY_OK;
}

/* The file name for a service bound at `sa` on this host: the host name
 * keeps hosts sharing a home directory apart. */
static void token_name(const struct sockaddr *sa, char *buf, size_t size) {
    char host[65] = "localhost", addr[80];
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *p = host; *p; p++)
        if (*p == '/') *p = '_';
    meta_sockaddr_text(sa, addr, sizeof addr);
    snprintf(buf, size, "meta-%s-%s.token", host, addr);
}

/* Reads a token file, refusing one that is not this user's alone.
 * FERRY_ERR_NOT_FOUND if it does not exist. */
static ferry_status_t read_token(const char *path, char token[META_MAX_TOKEN + 1], ferry_errbuf_t *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) /* not ours to read (EACCES): no retry cures it */
        return ferry_fail(err, errno == ENOENT ? FERRY_ERR_NOT_FOUND
                               : errno == EACCES || errno == EPERM ? FERRY_ERR_INVALID_CONFIG
                                                                   : FERRY_ERR_IO,
                          "meta token: token file %s: %s", path, strerror(errno));
    struct stat st;
    ferry_status_t s = FERRY_OK;
    if (fstat(fd, &st) != 0)
        s = ferry_fail(err, FERRY_ERR_IO, "meta token: token file %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        s = ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta token: token file %s is not a regular file: refused", path);
    else if (st.st_uid != geteuid())
        s = ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                       "meta token: token file %s is owned by uid %u, not by this user (uid %u): refused", path,
                       (unsigned)st.st_uid, (unsigned)geteuid());
    else if (st.st_mode & 077)
        s = ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                       "meta token: token file %s is readable or writable by group or others (mode %04o): refused; "
                       "chmod 600 it",
                       path, (unsigned)(st.st_mode & 07777));
    char buf[META_MAX_TOKEN + 2];
    ssize_t n = 0;
    if (s == FERRY_OK) {
        do n = read(fd, buf, sizeof buf);
        while (n < 0 && errno == EINTR);
        if (n < 0) s = ferry_fail(err, FERRY_ERR_IO, "meta token: reading %s: %s", path, strerror(errno));
    }
    close(fd);
    if (s != FERRY_OK) return s;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t')) n--;
    if (n == 0) return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta token: token file %s is empty", path);
    if (n > META_MAX_TOKEN || memchr(buf, '\n', (size_t)n))
        return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta token: token file %s holds more than one token of at most %d bytes",
                          path, META_MAX_TOKEN);
    memcpy(token, buf, (size_t)n);
    token[n] = '\0';
    return FERRY_OK;
}

/* Writes token to path (0600) atomically: a reader sees no file or all of it. */
static ferry_status_t write_token(const char *path, const char *token, ferry_errbuf_t *err) {
    char tmp[META_TOKEN_PATH + 32];
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r) r = (uint32_t)getpid();
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.%u.%08x.tmp", path, (unsigned)getpid(), r) >= sizeof tmp)
        return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta token: token file path %s is too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return ferry_fail(err, FERRY_ERR_IO, "meta token: cannot create %s: %s", tmp, strerror(errno));
    size_t len = strlen(token);
    bool ok = fchmod(fd, 0600) == 0 && write(fd, token, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
    int e = errno;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0) return FERRY_OK;
    if (ok) e = errno;
    unlink(tmp);
    return ferry_fail(err, FERRY_ERR_IO, "meta token: cannot write the token file %s: %s", path, strerror(e));
}

static ferry_status_t generate(char token[META_MAX_TOKEN + 1], ferry_errbuf_t *err) {
    uint8_t rnd[META_TOKEN_BYTES];
    size_t got = 0;
    while (got < sizeof rnd) {
        ssize_t n = getrandom(rnd + got, sizeof rnd - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return ferry_fail(err, FERRY_ERR_IO, "meta token: getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof rnd; i++) snprintf(token + 2 * i, 3, "%02x", rnd[i]);
    return FERRY_OK;
}

ferry_status_t meta_token_service(ferry_ctx_t *ctx, const char *given, const struct sockaddr *bound,
                                  char token[META_MAX_TOKEN + 1], char path[META_TOKEN_PATH], ferry_errbuf_t *err) {
    path[0] = '\0';
    if (given && *given) {
        if (strlen(given) > META_MAX_TOKEN)
            return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta token is %zu bytes; at most %d", strlen(given),
                              META_MAX_TOKEN);
        snprintf(token, META_MAX_TOKEN + 1, "%s", given);
        return FERRY_OK;
    }
    char where[80];
    meta_sockaddr_text(bound, where, sizeof where);
    bool local = meta_sockaddr_is_loopback(bound); /* a wildcard takes other hosts too */
    const char *file = cfg(ctx, "FERRY_TOKEN_FILE");
    char target[META_TOKEN_PATH];
    if (*file) {
        ferry_status_t st = read_token(file, token, err);
        if (st != FERRY_ERR_NOT_FOUND) {
            if (st == FERRY_OK) ferry_log(ctx, FERRY_LOG_INFO, "meta service: token from FERRY_TOKEN_FILE=%s", file);
            return st;
        }
        if (strlen(file) >= sizeof target)
            return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta token: FERRY_TOKEN_FILE is too long");
        snprintf(target, sizeof target, "%s", file);
    } else {
        char dir[DIR_MAX], name[NAME_MAX_LEN];
        ferry_status_t st = token_dir(ctx, dir, err);
        if (st == FERRY_OK) st = dir_ready(dir, err);
        if (st != FERRY_OK) return st;
        token_name(bound, name, sizeof name);
        snprintf(target, sizeof target, "%s/%s", dir, name);
    }
    ferry_status_t st = generate(token, err);
    if (st == FERRY_OK) st = write_token(target, token, err);
    if (st != FERRY_OK) return st;
    snprintf(path, META_TOKEN_PATH, "%s", target);
    if (local)
        ferry_log(ctx, FERRY_LOG_INFO, "meta service on %s: generated its token into %s", where, target);
    else
        ferry_log(ctx, FERRY_LOG_WARN,
                  "meta service on %s (reachable from other hosts): no token was given, so it generated one into %s; "
                  "members on other hosts present it with FERRY_TOKEN_FILE=%s (a copy, 0600) or FERRY_TOKEN=<its "
                  "content>",
                  where, target, target);
    return FERRY_OK;
}

void meta_token_remove(const char *path, const char *token) {
    if (!path || !*path) return;
    char now[META_MAX_TOKEN + 1];
    ferry_errbuf_t err;
    if (read_token(path, now, &err) == FERRY_OK && strcmp(now, token) == 0) unlink(path);
}

/* An address of this host: loopback, unspecified, or one a socket can bind
 * (an interface's). Only for those is the token directory consulted, so no
 * token of ours ever goes to another host. */
static bool addr_is_ours(const struct sockaddr *sa) {
    if (meta_sockaddr_is_local(sa)) return true;
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) return false;
    int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    struct sockaddr_storage ss;
    socklen_t sl = sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    memcpy(&ss, sa, sl);
    if (sa->sa_family == AF_INET) ((struct sockaddr_in *)&ss)->sin_port = 0;
    else ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    bool ours = bind(fd, (struct sockaddr *)&ss, sl) == 0;
    close(fd);
    return ours;
}

/* The token directory's file for a service of this host reachable at
 * `peer`: the exact address, else a wildcard listener of its family (a
 * dual-stack [::] also takes IPv4). FERRY_ERR_NOT_FOUND when there is none
 * or the address is another host's. */
static ferry_status_t find_token(ferry_ctx_t *ctx, const struct sockaddr *peer, char token[META_MAX_TOKEN + 1],
                                 char from[META_TOKEN_PATH], ferry_errbuf_t *err) {
    char dir[DIR_MAX];
    if (!addr_is_ours(peer)) return FERRY_ERR_NOT_FOUND;
    ferry_status_t st = token_dir(ctx, dir, err);
    if (st != FERRY_OK) return FERRY_ERR_NOT_FOUND;
    uint8_t a[16];
    uint16_t port;
    meta_sockaddr_key(peer, a, &port);
    struct sockaddr_in any4 = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct sockaddr_in6 any6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
    bool v4 = a[10] == 0xff && a[11] == 0xff && !memcmp(a, (uint8_t[10]){0}, 10);
    const struct sockaddr *cand[3] = {peer, v4 ? (const struct sockaddr *)&any4 : (const struct sockaddr *)&any6,
                                      v4 ? (const struct sockaddr *)&any6 : NULL};
    for (int i = 0; i < 3 && cand[i]; i++) {
        char name[NAME_MAX_LEN];
        token_name(cand[i], name, sizeof name);
        snprintf(from, META_TOKEN_PATH, "%s/%s", dir, name);
        st = read_token(from, token, err);
        if (st != FERRY_ERR_NOT_FOUND) return st;
    }
    from[0] = '\0';
    return FERRY_ERR_NOT_FOUND;
}

static ferry_status_t no_token(const char *where, ferry_errbuf_t *err) {
    return ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                      "meta: no token for the service at %s, which is not a loopback address: set FERRY_TOKEN to the "
                      "service's token or FERRY_TOKEN_FILE to a file holding it (the service logs where it wrote one)",
                      where);
}

ferry_status_t meta_token_precheck(ferry_ctx_t *ctx, const char *host, uint16_t port, ferry_errbuf_t *err) {
    if (*cfg(ctx, "FERRY_TOKEN_FILE")) return FERRY_OK;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0) return FERRY_OK; /* connecting says why */
    bool ours = false;
    char where[80];
    meta_sockaddr_text(res->ai_addr, where, sizeof where);
    for (struct addrinfo *ai = res; ai && !ours; ai = ai->ai_next) ours = addr_is_ours(ai->ai_addr);
    freeaddrinfo(res);
    return ours ? FERRY_OK : no_token(where, err);
}

ferry_status_t meta_token_client(ferry_ctx_t *ctx, int fd, char token[META_MAX_TOKEN + 1],
                                 char from[META_TOKEN_PATH], ferry_errbuf_t *err) {
    const char *file = cfg(ctx, "FERRY_TOKEN_FILE");
    token[0] = from[0] = '\0';
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    const struct sockaddr *peer = (const struct sockaddr *)&ss;
    if (*file) {
        ferry_status_t st = read_token(file, token, err);
        if (st == FERRY_ERR_NOT_FOUND)
            return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta: FERRY_TOKEN_FILE=%s does not exist", file);
        if (st == FERRY_OK) snprintf(from, META_TOKEN_PATH, "%s", file);
        return st;
    }
    memset(&ss, 0, sizeof ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return ferry_fail(err, FERRY_ERR_PEER_LOST, "meta: getpeername: %s", strerror(errno));
    ferry_status_t st = find_token(ctx, peer, token, from, err);
    if (st != FERRY_ERR_NOT_FOUND) return st;
    token[0] = '\0';
    if (meta_sockaddr_is_local(peer)) return FERRY_OK; /* the service says what it wants */
    char where[80];
    meta_sockaddr_text(peer, where, sizeof where);
    return no_token(where, err);
}
