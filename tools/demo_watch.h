/* The worker processes of `ferry demo` / `ferry bench sync` as the parent
 * sees them, and the watch that finds one that stopped (SIGSTOP, a
 * debugger) or makes no progress, so the run ends soon after the sync
 * timeout and its error names that process rather than the peers that
 * timed out waiting for it. State and CPU time come from /proc/PID/stat. */
#ifndef FERRY_TOOLS_DEMO_WATCH_H
#define FERRY_TOOLS_DEMO_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct demo_child {
    pid_t pid;
    int pidfd;            /* readable once the process ends */
    bool writer, done;
    uint32_t rank;
    int status;
    uint64_t version;     /* highest version reported: published (writer) or held (reader) */
    double progress;      /* last report line or CPU time used, on cli_now_s()'s clock */
    uint64_t cpu;         /* CPU ticks (user + system) at the last look */
    char state;           /* /proc state letter at the last look, 0 unknown */
    double stopped_since; /* when first seen stopped; 0 while it runs */
} demo_child_t;

/* Reads each live child's state and CPU time at time now; CPU time used
 * since the last look counts as progress. */
void demo_watch_look(demo_child_t *kids, uint32_t n, double now);

/* After demo_watch_look: a child stopped for at least stop_s, else one that
 * owes version v (due since due_at: every process could work on it) and
 * made no progress for hang_s. Describes it in buf and returns true. */
bool demo_watch_stuck(const demo_child_t *kids, uint32_t n, double now, double stop_s, uint64_t v, double due_at,
                      double hang_s, char *buf, size_t size);

/* The first child stopped now, described in buf (for the error when a peer
 * fails first, timing out on it); false when none is. */
bool demo_watch_stopped(demo_child_t *kids, uint32_t n, double now, char *buf, size_t size);

#endif
