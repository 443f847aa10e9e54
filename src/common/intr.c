/* Interruptible waits: see intr.h. */
#include <errno.h>
#include <time.h>

#include "common/internal.h"
#include "common/intr.h"

int ferry_intr_poll(const ferry_intr_t *in, struct pollfd *fds, nfds_t n, int timeout_ms) {
    if (!ferry_intr_set(in)) return poll(fds, n, timeout_ms);
    double end = timeout_ms < 0 ? -1.0 : ferry_mono_s() + timeout_ms / 1000.0;
    for (;;) {
        int slice = FERRY_INTR_SLICE_MS;
        if (end >= 0) {
            double left = end - ferry_mono_s();
            if (left <= 0) slice = 0;
            else if (left * 1000.0 < slice) slice = (int)(left * 1000.0) + 1;
        }
        int r = poll(fds, n, slice);
        if (r > 0) return r;
        if (r < 0 && errno != EINTR) return r;
        if (r == 0 && end >= 0 && ferry_mono_s() >= end) return 0;
        int e = errno;
        if (in->fn(in->opaque)) return FERRY_INTR_POLL_STOPPED;
        if (r < 0) {
            errno = e; /* the caller retries an interrupted poll as it always did */
            return r;
        }
    }
}

bool ferry_intr_sleep(const ferry_intr_t *in, double seconds) {
    if (seconds <= 0) return false;
    if (!ferry_intr_set(in)) {
        struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
        nanosleep(&ts, NULL);
        return false;
    }
    double end = ferry_mono_s() + seconds;
    for (;;) {
        double left = end - ferry_mono_s();
        if (left <= 0) return false;
        double s = left < FERRY_INTR_SLICE_MS / 1000.0 ? left : FERRY_INTR_SLICE_MS / 1000.0;
        struct timespec ts = {0, (long)(s * 1e9)};
        nanosleep(&ts, NULL); /* EINTR: a signal, the hook is asked at once */
        if (in->fn(in->opaque)) return true;
    }
}

bool ferry_intr_due(const ferry_intr_t *in, double *next) {
    if (!ferry_intr_set(in)) return false;
    double now = ferry_mono_s();
    if (*next == 0) {
        *next = now + FERRY_INTR_SLICE_MS / 1000.0;
        return false;
    }
    if (now < *next) return false;
    *next = now + FERRY_INTR_SLICE_MS / 1000.0;
    return in->fn(in->opaque) != 0;
}
