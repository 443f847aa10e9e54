/* Length-prefixed messages between a test's processes (a pipe or a
 * socket): a 4-byte length, then the bytes. Any failure fails the test. */
#ifndef FERRY_TESTS_BLOB_PIPE_H
#define FERRY_TESTS_BLOB_PIPE_H

#include <stdint.h>
#include <unistd.h>

#include "check.h"

static inline void send_blob(int fd, const void *b, size_t n) {
    uint32_t len = (uint32_t)n;
    CHECK(write(fd, &len, 4) == 4 && (n == 0 || write(fd, b, n) == (ssize_t)n));
}

/* Returns the message's length (at most cap). */
static inline size_t recv_blob(int fd, void *b, size_t cap) {
    uint32_t len = 0;
    CHECK(read(fd, &len, 4) == 4 && len <= cap);
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, (char *)b + got, len - got);
        CHECK(r > 0);
        got += (size_t)r;
    }
    return len;
}

#endif
