/* Metadata protocol, socket side: see conn.h. */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "meta/conn.h"

ferry_status_t meta_addr_parse(const char *addr, char host[META_HOST_MAX], uint16_t *port,
                               ferry_errbuf_t *err) {
    if (!addr || !*addr) return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta address is empty (want HOST:PORT)");
    const char *colon, *h = addr;
    size_t hl;
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':')
            return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta address '%s': want [V6ADDR]:PORT", addr);
        h = addr + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon) return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta address '%s': want HOST:PORT", addr);
        hl = (size_t)(colon - addr);
    }
    if (hl == 0 || hl >= META_HOST_MAX)
        return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta address '%s': bad host part", addr);
    char *end;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno || p > 65535)
        return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "meta address '%s': port must be 0..65535", addr);
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (uint16_t)p;
    return FERRY_OK;
}

static ferry_status_t resolve(const char *host, uint16_t port, bool passive, struct addrinfo **res,
                              ferry_errbuf_t *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = getaddrinfo(host, ps, &hints, res);
    if (rc != 0) return ferry_fail(err, FERRY_ERR_NOT_FOUND, "meta: cannot resolve '%s': %s", host, gai_strerror(rc));
    return FERRY_OK;
}

ferry_status_t meta_bind(const char *host, uint16_t port, int *fd_out, struct sockaddr_storage *bound,
                         ferry_errbuf_t *err) {
    struct addrinfo *res;
    ferry_status_t st = resolve(host, port, true, &res, err);
    if (st != FERRY_OK) return st;
    int fd = -1, last = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        last = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return ferry_fail(err, FERRY_ERR_IO, "meta: cannot listen on %s:%u: %s", host, port, strerror(last));
    socklen_t sl = sizeof *bound;
    memset(bound, 0, sizeof *bound);
    if (getsockname(fd, (struct sockaddr *)bound, &sl) != 0) {
        int e = errno;
        close(fd);
        return ferry_fail(err, FERRY_ERR_IO, "meta: getsockname on %s:%u: %s", host, port, strerror(e));
    }
    *fd_out = fd;
    return FERRY_OK;
}

ferry_status_t meta_listen_fd(int fd, ferry_errbuf_t *err) {
    if (listen(fd, 1024) != 0) return ferry_fail(err, FERRY_ERR_IO, "meta: listen: %s", strerror(errno));
    return FERRY_OK;
}

ferry_status_t meta_listen(const char *host, uint16_t port, int *fd_out, uint16_t *bound_port,
                           ferry_errbuf_t *err) {
    struct sockaddr_storage ss;
    int fd;
    ferry_status_t st = meta_bind(host, port, &fd, &ss, err);
    if (st == FERRY_OK && (st = meta_listen_fd(fd, err)) != FERRY_OK) close(fd);
    if (st != FERRY_OK) return st;
    uint8_t a[16];
    meta_sockaddr_key((const struct sockaddr *)&ss, a, bound_port);
    *fd_out = fd;
    return FERRY_OK;
}

void meta_sockaddr_key(const struct sockaddr *sa, uint8_t addr[16], uint16_t *port) {
    memset(addr, 0, 16);
    *port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)sa;
        addr[10] = addr[11] = 0xff;
        memcpy(addr + 12, &in->sin_addr, 4);
        *port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const void *)sa;
        memcpy(addr, &in6->sin6_addr, 16);
        *port = ntohs(in6->sin6_port);
    }
}

static bool key_is_v4(const uint8_t a[16]) {
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(a, mapped, 12) == 0;
}

void meta_sockaddr_text(const struct sockaddr *sa, char *buf, size_t size) {
    uint8_t a[16];
    uint16_t port;
    meta_sockaddr_key(sa, a, &port);
    char ip[INET6_ADDRSTRLEN];
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) snprintf(buf, size, "(family %d)", sa->sa_family);
    else if (key_is_v4(a) && inet_ntop(AF_INET, a + 12, ip, sizeof ip)) snprintf(buf, size, "%s:%u", ip, port);
    else if (inet_ntop(AF_INET6, a, ip, sizeof ip)) snprintf(buf, size, "[%s]:%u", ip, port);
    else snprintf(buf, size, "(unprintable address)");
}

static bool addr_kind(const struct sockaddr *sa, bool unspecified_too) {
    uint8_t a[16];
    uint16_t port;
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) return false;
    meta_sockaddr_key(sa, a, &port);
    static const uint8_t zero[16], one[16] = {[15] = 1};
    if (key_is_v4(a)) return a[12] == 127 || (unspecified_too && (a[12] | a[13] | a[14] | a[15]) == 0);
    return memcmp(a, one, 16) == 0 || (unspecified_too && memcmp(a, zero, 16) == 0);
}

bool meta_sockaddr_is_loopback(const struct sockaddr *sa) { return addr_kind(sa, false); }
bool meta_sockaddr_is_local(const struct sockaddr *sa) { return addr_kind(sa, true); }

static int remaining_ms(double deadline) {
    if (deadline < 0) return -1;
    double left = deadline - ferry_mono_s();
    if (left > 2e6) return -1; /* beyond int milliseconds: as good as forever */
    return left <= 0 ? 0 : (int)(left * 1000.0) + 1;
}

ferry_status_t meta_connect(const char *host, uint16_t port, double deadline, const ferry_intr_t *intr, int *fd_out,
                            ferry_errbuf_t *err) {
    struct addrinfo *res;
    ferry_status_t st = resolve(host, port, false, &res, err);
    if (st != FERRY_OK) return st;
    int fd = -1, last = ECONNREFUSED;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int n;
            do n = ferry_intr_poll(intr, &p, 1, remaining_ms(deadline));
            while (n == -1 && errno == EINTR);
            if (n == FERRY_INTR_POLL_STOPPED) {
                close(fd);
                freeaddrinfo(res);
                return ferry_fail(err, FERRY_ERR_INTERRUPTED, "meta: interrupted while connecting to %s:%u", host,
                                  port);
            }
            int soerr = ETIMEDOUT;
            socklen_t sl = sizeof soerr;
            if (n == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            rc = soerr == 0 ? 0 : -1;
            errno = soerr;
        }
        if (rc != 0) {
            last = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return ferry_fail(err, last == ETIMEDOUT ? FERRY_ERR_TIMEOUT : FERRY_ERR_PEER_LOST,
                          "meta: cannot connect to %s:%u: %s", host, port, strerror(last));
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *fd_out = fd;
    return FERRY_OK;
}

ferry_status_t meta_write_all(int fd, const void *buf, size_t len, double deadline, const ferry_intr_t *intr,
                              ferry_errbuf_t *err) {
    const uint8_t *p = buf;
    while (len > 0) {
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int n = ferry_intr_poll(intr, &pf, 1, remaining_ms(deadline));
        if (n == FERRY_INTR_POLL_STOPPED)
            return ferry_fail(err, FERRY_ERR_INTERRUPTED, "meta: interrupted while sending to the service");
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) return ferry_fail(err, FERRY_ERR_TIMEOUT, "meta: timed out sending to the service");
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return ferry_fail(err, FERRY_ERR_PEER_LOST, "meta: send failed: %s", strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
    return FERRY_OK;
}

ferry_status_t meta_read_frame(int fd, frame_reader_t *r, double deadline, const ferry_intr_t *intr, uint8_t *type,
                               const uint8_t **body, uint32_t *len, ferry_errbuf_t *err) {
    for (;;) {
        ferry_status_t fst = FERRY_OK;
        int got = frame_reader_next(r, type, body, len, &fst);
        if (got == 1) return FERRY_OK;
        if (fst != FERRY_OK) return ferry_fail(err, fst, "%s", r->err.text);
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int n = ferry_intr_poll(intr, &pf, 1, remaining_ms(deadline));
        if (n == FERRY_INTR_POLL_STOPPED)
            return ferry_fail(err, FERRY_ERR_INTERRUPTED, "meta: interrupted while waiting for the service");
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) return ferry_fail(err, FERRY_ERR_TIMEOUT, "meta: timed out waiting for the service");
        uint8_t buf[65536];
        ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0)
            return ferry_fail(err, FERRY_ERR_PEER_LOST, "meta: the service closed the connection%s%s",
                              k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
        fst = frame_reader_feed(r, buf, (size_t)k);
        if (fst != FERRY_OK) return ferry_fail(err, fst, "%s", r->err.text);
    }
}
