/* The caller's interrupt hook (ferry_ctx_params_t.interrupt_fn), as the
 * waits of every module see it: a small descriptor handed down from the
 * context, so meta and xport need nothing of the objects above them.
 *
 * Only waits on the thread that called into ferry use it; ferry's own
 * threads (service, heartbeat, transport) pass NULL. With no hook (NULL, or
 * fn NULL) every helper below does exactly what the plain call would: one
 * poll(), one nanosleep(), no clock read. With one, a wait is cut into
 * slices of at most FERRY_INTR_SLICE_MS and the hook is called between
 * them; nonzero stops the wait (FERRY_ERR_INTERRUPTED for the caller). */
#ifndef FERRY_COMMON_INTR_H
#define FERRY_COMMON_INTR_H

#include <poll.h>
#include <stdbool.h>

#include "ferry/ctx.h"

typedef struct ferry_intr {
    int (*fn)(void *opaque);
    void *opaque;
} ferry_intr_t;

#define FERRY_INTR_SLICE_MS 100

/* poll()'s result when the hook asked to stop. */
#define FERRY_INTR_POLL_STOPPED (-2)

/* The context's hook, or NULL when it has none. */
const ferry_intr_t *ferry_ctx_intr(const ferry_ctx_t *ctx);

static inline bool ferry_intr_set(const ferry_intr_t *in) { return in && in->fn; }

/* Calls the hook: true when it asks to stop (false without one). */
static inline bool ferry_intr_check(const ferry_intr_t *in) { return in && in->fn && in->fn(in->opaque) != 0; }

/* poll(fds, n, timeout_ms) (timeout_ms < 0: no limit). With a hook: slices
 * of at most 100 ms, the hook called after each empty one and after a
 * signal (EINTR: a Ctrl-C is seen at once); FERRY_INTR_POLL_STOPPED when it
 * asked to stop, else what poll returned (events, 0 at the timeout, -1 with
 * errno, EINTR included, as the plain call would). */
int ferry_intr_poll(const ferry_intr_t *in, struct pollfd *fds, nfds_t n, int timeout_ms);

/* Sleeps `seconds` (a retry's pause); with a hook in slices, calling it
 * between them. Returns true when it asked to stop (the sleep is cut short). */
bool ferry_intr_sleep(const ferry_intr_t *in, double seconds);

/* For loops that keep busy while they wait (a transfer driven by polling,
 * copies in slices): calls the hook when `*next` (ferry_mono_s seconds; 0
 * at the start of the wait) has passed, and sets it 100 ms ahead. True when
 * the hook asked to stop. Without a hook: false, no clock read. */
bool ferry_intr_due(const ferry_intr_t *in, double *next);

#endif
