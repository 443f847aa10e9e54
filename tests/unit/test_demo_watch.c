/* The demo's worker watch (tools/demo_watch.c): a real child process seen
 * running, stopped (SIGSTOP) and continued through /proc, its CPU time
 * counted as progress; and the rules that name a stuck worker, on children
 * whose state is set by hand (a hung worker cannot be made on demand). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "demo_watch.h"

static void pause_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Looks until the child's state is `want` (the kernel stops and continues
 * asynchronously); fails after 10 s. */
static void look_until(demo_child_t *c, char want, double *now) {
    for (int i = 0; i < 1000; i++) {
        *now += 1;
        demo_watch_look(c, 1, *now);
        if (want == 'T' ? c->state == 'T' : c->state != 'T' && c->state != 0) return;
        pause_s(0.01);
    }
    fprintf(stderr, "child state %c, never %c\n", c->state, want);
    exit(1);
}

static void real_child(void) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) { /* spins: CPU time grows */
        for (volatile unsigned long x = 0;; x++) {
        }
    }
    demo_child_t c = {.pid = pid, .writer = false, .rank = 3, .version = 7};
    double now = 100;
    look_until(&c, 'R', &now);
    CHECK(c.stopped_since == 0);
    uint64_t cpu0 = c.cpu;
    /* a spinning child shows progress once a clock tick has passed */
    for (int i = 0; i < 1000 && c.cpu == cpu0; i++) {
        pause_s(0.01);
        demo_watch_look(&c, 1, ++now);
    }
    CHECK(c.cpu > cpu0 && c.progress == now);

    kill(pid, SIGSTOP);
    look_until(&c, 'T', &now);
    double stopped_at = c.stopped_since;
    CHECK(stopped_at > 0);
    char buf[256];
    /* stopped, but not yet for stop_s */
    CHECK(!demo_watch_stuck(&c, 1, stopped_at + 1, 5, 0, 0, 1e9, buf, sizeof buf));
    CHECK(demo_watch_stuck(&c, 1, stopped_at + 5, 5, 0, 0, 1e9, buf, sizeof buf));
    char want[128];
    snprintf(want, sizeof want, "reader 3 (pid %d) stopped responding: state T (stopped) for 5.0 s, holding version 7",
             (int)pid);
    if (!strstr(buf, want)) {
        fprintf(stderr, "\"%s\" does not say \"%s\"\n", buf, want);
        exit(1);
    }
    CHECK(demo_watch_stopped(&c, 1, ++now, buf, sizeof buf) && strstr(buf, "state T (stopped)"));

    kill(pid, SIGCONT);
    look_until(&c, 'R', &now);
    CHECK(c.stopped_since == 0);
    CHECK(!demo_watch_stopped(&c, 1, ++now, buf, sizeof buf));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void rules(void) {
    /* writer 0 published version 5; reader 1 holds 4 and owes 5, due at 100 */
    demo_child_t k[3] = {
        {.pid = 11, .writer = true, .rank = 0, .version = 5, .progress = 90, .state = 'S'},
        {.pid = 12, .writer = false, .rank = 1, .version = 4, .progress = 90, .state = 'S'},
        {.pid = 13, .writer = false, .rank = 2, .version = 5, .progress = 90, .state = 'S', .done = true},
    };
    char buf[256] = "";
    /* quiet since the version fell due at 100: stuck after hang_s (20) */
    CHECK(!demo_watch_stuck(k, 3, 119, 5, 5, 100, 20, buf, sizeof buf));
    CHECK(demo_watch_stuck(k, 3, 121, 5, 5, 100, 20, buf, sizeof buf));
    CHECK(strstr(buf, "reader 1 (pid 12) stopped responding: no report and no CPU time for 21.0 s while version 5 "
                      "was due (state S, sleeping)") != NULL);
    /* CPU time used at 110 is progress: quiet only from then */
    k[1].progress = 110;
    CHECK(!demo_watch_stuck(k, 3, 121, 5, 5, 100, 20, buf, sizeof buf));
    CHECK(demo_watch_stuck(k, 3, 131, 5, 5, 100, 20, buf, sizeof buf));
    /* a version not yet due (0) names nobody; nor does one every live child reported */
    CHECK(!demo_watch_stuck(k, 3, 1000, 5, 5, 0, 20, buf, sizeof buf));
    k[1].version = 5;
    CHECK(!demo_watch_stuck(k, 3, 1000, 5, 5, 100, 20, buf, sizeof buf));
    /* a stopped child is named first, by its stop alone; a finished one never */
    k[2].stopped_since = 10;
    CHECK(!demo_watch_stuck(k, 3, 1000, 5, 5, 100, 20, buf, sizeof buf));
    k[0].state = 'T';
    k[0].stopped_since = 990;
    CHECK(demo_watch_stuck(k, 3, 995, 5, 5, 100, 20, buf, sizeof buf));
    CHECK(strstr(buf, "writer 0 (pid 11) stopped responding: state T (stopped) for 5.0 s") != NULL);
}

int main(void) {
    rules();
    real_child();
    return 0;
}
