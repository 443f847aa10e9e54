/* Finding the worker that holds a run up (see demo_watch.h). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "demo_watch.h"

/* The state letter and CPU ticks (user + system) of a process. */
static bool proc_stat(pid_t pid, char *state, uint64_t *cpu) {
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    char *nl = strchr(buf, '\n');
    if (nl) *nl = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses */
    char *p = strrchr(buf, ')');
    char *f[64];
    size_t k = p && p[1] == ' ' ? cli_fields(p + 2, f, 64) : SIZE_MAX;
    uint64_t ut, st; /* fields 14 and 15 of proc(5), 12 and 13 after the name */
    if (k == SIZE_MAX || k < 13 || cli_scan_u64(f[11], 0, UINT64_MAX / 2, &ut) ||
        cli_scan_u64(f[12], 0, UINT64_MAX / 2, &st))
        return false;
    *state = f[0][0];
    *cpu = ut + st;
    return true;
}

static const char *state_name(char s) {
    switch (s) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "uninterruptible wait";
    case 'T': return "stopped";
    case 't': return "stopped by a tracer";
    case 'Z': return "zombie";
    case 'X': return "dead";
    case 'I': return "idle";
    default: return "unknown";
    }
}

static bool is_stopped(char s) { return s == 'T' || s == 't'; }

void demo_watch_look(demo_child_t *kids, uint32_t n, double now) {
    for (uint32_t i = 0; i < n; i++) {
        demo_child_t *c = &kids[i];
        if (c->done) continue;
        char state;
        uint64_t cpu;
        if (!proc_stat(c->pid, &state, &cpu)) continue;
        if (cpu != c->cpu) {
            c->cpu = cpu;
            c->progress = now;
        }
        c->state = state;
        if (!is_stopped(state)) c->stopped_since = 0;
        else if (c->stopped_since == 0) c->stopped_since = now;
    }
}

static void describe_stopped(const demo_child_t *c, double now, char *buf, size_t size) {
    snprintf(buf, size, "%s %u (pid %d) stopped responding: state %c (%s) for %.1f s, holding version %llu",
             c->writer ? "writer" : "reader", c->rank, (int)c->pid, c->state, state_name(c->state),
             now - c->stopped_since, (unsigned long long)c->version);
}

bool demo_watch_stuck(const demo_child_t *kids, uint32_t n, double now, double stop_s, uint64_t v, double due_at,
                      double hang_s, char *buf, size_t size) {
    for (uint32_t i = 0; i < n; i++)
        if (!kids[i].done && kids[i].stopped_since > 0 && now - kids[i].stopped_since >= stop_s) {
            describe_stopped(&kids[i], now, buf, size);
            return true;
        }
    if (due_at <= 0) return false;
    for (uint32_t i = 0; i < n; i++) {
        const demo_child_t *c = &kids[i];
        if (c->done || c->version >= v) continue;
        double since = c->progress > due_at ? c->progress : due_at;
        if (now - since < hang_s) continue;
        snprintf(buf, size,
                 "%s %u (pid %d) stopped responding: no report and no CPU time for %.1f s while version %llu was due "
                 "(state %c, %s)",
                 c->writer ? "writer" : "reader", c->rank, (int)c->pid, now - since, (unsigned long long)v,
                 c->state ? c->state : '?', state_name(c->state));
        return true;
    }
    return false;
}

bool demo_watch_stopped(demo_child_t *kids, uint32_t n, double now, char *buf, size_t size) {
    demo_watch_look(kids, n, now);
    for (uint32_t i = 0; i < n; i++)
        if (!kids[i].done && kids[i].stopped_since > 0) {
            describe_stopped(&kids[i], now, buf, size);
            return true;
        }
    return false;
}
