/*
 * rov_timers: the library's timer serves sleepers only.
 *
 * Two contexts in one process, one connection between them over the rails
 * of RAILOVER_RAILS (the test sets tcp@lo), failover on.  Three cases:
 *
 *  busy_poll_arms_no_timer   traffic both ways and idle stretches for
 *      300 ms (many failover ticks and ack deadlines), both sides calling
 *      only rov_progress(): no timerfd in either context's epoll set may
 *      have been set (/proc/self/fdinfo: "settime flags: 00", it_value,
 *      it_interval and ticks zero).  A busy-polling process takes no timer
 *      interrupts from the library (docs/architecture.md, "Progress").
 *  sleep_wakes_for_owed_ack  B receives a message, then sleeps in
 *      rov_context_wait(-1) owing its ack: the timer must wake it, the
 *      ack go out, and A learn that B has the message.
 *  sleep_wakes_for_failover_tick  nothing owed, the connection up: a
 *      rov_context_wait(-1) must still return, woken for the failover
 *      engine's tick; the timer is one-shot (no interval).
 *
 * A wait that never returns is caught by alarm(): the process exits with a
 * message naming the case.  Exit 0 success, 1 failure.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "railover/railover.h"

#define CASE_TIMEOUT_S 20
#define BUSY_NS (300 * 1000000ull)

enum { SIDE_A, SIDE_B };

static struct {
    rov_context_t *ctx[2];
    rov_endpoint_t *ep[2];
    rov_conn_t *conn[2];
    bool established[2];
    uint64_t received[2];
    uint64_t delivered;     /* A's sends that B is known to have */
    uint64_t errors;
    unsigned failures;
    const char *case_name;
} g;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fail(const char *why)
{
    fprintf(stderr, "FAIL [%s]: %s\n", g.case_name, why);
    g.failures++;
}

static void on_alarm(int sig)
{
    static const char msg[] = "FAIL: a case did not finish in time (a wait that was never "
                              "woken?)\n";

    (void)sig;
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(1);
}

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    (void)conn, (void)tag, (void)data, (void)len;
    g.received[(intptr_t)arg]++;
}

static void on_event(void *arg, const rov_event_t *ev)
{
    int side = (int)(intptr_t)arg;

    switch (ev->type) {
    case ROV_EVENT_CONN_ACCEPTED: /* the accepting side's only news of it */
        g.conn[side] = ev->conn;
        g.established[side] = true;
        break;
    case ROV_EVENT_CONN_ESTABLISHED:
        g.established[side] = true;
        break;
    case ROV_EVENT_CONN_ERROR:
        fprintf(stderr, "side %c: connection error: %s\n", "AB"[side],
                ev->reason ? ev->reason : rov_status_str(ev->status));
        g.errors++;
        break;
    default:
        break;
    }
}

static void on_delivered(void *arg, rov_status_t status)
{
    (void)arg;
    if (status == ROV_OK)
        g.delivered++;
    else
        g.errors++;
}

static void progress_both(void)
{
    rov_progress(g.ctx[SIDE_A]);
    rov_progress(g.ctx[SIDE_B]);
}

/* Progress both sides until *flag, or fail after CASE_TIMEOUT_S. */
static bool busy_until(const bool *flag, const char *what)
{
    uint64_t t0 = now_ns();

    while (!*flag) {
        if (now_ns() - t0 > CASE_TIMEOUT_S * 1000000000ull) {
            fail(what);
            return false;
        }
        progress_both();
    }
    return true;
}

/* What the kernel says about the timerfds in a context's epoll set. */
struct timer_state {
    int timers;          /* timerfds found */
    int ever_set;        /* of them, set at least once (flags, values or ticks) */
    int periodic;        /* of them, with an interval */
};

static bool read_fdinfo(int fd, char *buf, size_t cap)
{
    char path[64];
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
    f = fopen(path, "r");
    if (!f)
        return false;
    n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return true;
}

static bool fd_is(int fd, const char *what)
{
    char path[64], target[64];
    ssize_t n;

    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return false;
    target[n] = '\0';
    return strcmp(target, what) == 0;
}

/* The timerfds in the epoll set epfd and in the sets nested in it (the
 * context's urgent set holds its timer). */
static bool scan_set(int epfd, struct timer_state *ts, int depth)
{
    char info[8192], tinfo[1024];
    const char *p;

    if (!read_fdinfo(epfd, info, sizeof(info))) {
        fail("cannot read the epoll descriptor's fdinfo");
        return false;
    }
    for (p = info; (p = strstr(p, "tfd:")) != NULL; p += 4) {
        int fd = atoi(p + 4);

        if (depth < 2 && fd_is(fd, "anon_inode:[eventpoll]")) {
            if (!scan_set(fd, ts, depth + 1))
                return false;
            continue;
        }
        if (!fd_is(fd, "anon_inode:[timerfd]"))
            continue;
        if (!read_fdinfo(fd, tinfo, sizeof(tinfo))) {
            fail("cannot read a timerfd's fdinfo");
            return false;
        }
        ts->timers++;
        if (!strstr(tinfo, "settime flags: 00\n") || !strstr(tinfo, "it_value: (0, 0)") ||
            !strstr(tinfo, "it_interval: (0, 0)") || !strstr(tinfo, "ticks: 0\n"))
            ts->ever_set++;
        if (!strstr(tinfo, "it_interval: (0, 0)"))
            ts->periodic++;
    }
    return true;
}

static bool timer_state(rov_context_t *ctx, struct timer_state *ts)
{
    memset(ts, 0, sizeof(*ts));
    return scan_set(rov_context_fd(ctx), ts, 0);
}

static void case_busy(void)
{
    static const uint8_t msg[64];
    uint64_t t0 = now_ns(), next = t0, sent = 0;
    unsigned failures0 = g.failures;

    g.case_name = "busy_poll_arms_no_timer";
    while (now_ns() - t0 < BUSY_NS) {
        uint64_t now = now_ns();

        /* A burst every 20 ms, both ways, then silence: acks owed, and
         * stretches with nothing but the engine's ticks due. */
        if (now >= next) {
            for (int i = 0; i < 8; i++) {
                if (rov_conn_send(g.conn[SIDE_A], 1, msg, sizeof(msg), NULL) == ROV_OK)
                    sent++;
                rov_conn_send(g.conn[SIDE_B], 2, msg, sizeof(msg), NULL);
            }
            next = now + 20 * 1000000ull;
        }
        progress_both();
    }
    for (int s = SIDE_A; s <= SIDE_B; s++) {
        struct timer_state ts;

        if (!timer_state(g.ctx[s], &ts))
            return;
        if (ts.timers == 0)
            fail("no timerfd in the context's epoll set (fdinfo layout changed?)");
        if (ts.ever_set) {
            char why[160];

            snprintf(why, sizeof(why), "side %c: %d timer(s) set while the application only "
                     "busy-polled (%d periodic)", "AB"[s], ts.ever_set, ts.periodic);
            fail(why);
        }
    }
    if (sent == 0 || g.received[SIDE_B] == 0 || g.received[SIDE_A] == 0)
        fail("no traffic in the busy phase");
    if (g.failures == failures0)
        printf("busy_poll_arms_no_timer: %llu messages A->B, %llu B->A, no timer set\n",
           (unsigned long long)g.received[SIDE_B], (unsigned long long)g.received[SIDE_A]);
}

static void case_sleep_ack(void)
{
    static const uint8_t msg[32];
    rov_send_params_t p = {.flags = ROV_SEND_NOTIFY_DELIVERED, .cb = on_delivered};
    uint64_t got = g.received[SIDE_B], t0;
    rov_conn_stats_t before, after;
    rov_status_t st;

    g.case_name = "sleep_wakes_for_owed_ack";
    /* Everything of the busy phase acknowledged first. */
    for (t0 = now_ns(); now_ns() - t0 < 50 * 1000000ull;)
        progress_both();
    g.delivered = 0;
    st = rov_conn_send(g.conn[SIDE_A], 3, msg, sizeof(msg), &p);
    if (st != ROV_OK && st != ROV_INPROGRESS) {
        fail("send failed");
        return;
    }
    /* B takes the message, A not called meanwhile: B now owes the ack. */
    rov_progress(g.ctx[SIDE_A]);
    for (t0 = now_ns(); g.received[SIDE_B] == got;) {
        if (now_ns() - t0 > CASE_TIMEOUT_S * 1000000000ull) {
            fail("B did not receive the message");
            return;
        }
        rov_context_wait(g.ctx[SIDE_B], 100);
    }
    rov_conn_stats(g.conn[SIDE_B], &before);
    /* Nothing else will wake B: only its timer, for the ack's deadline. */
    alarm(CASE_TIMEOUT_S);
    while (1) {
        rov_context_wait(g.ctx[SIDE_B], -1);
        rov_conn_stats(g.conn[SIDE_B], &after);
        if (after.acks_sent > before.acks_sent)
            break;
    }
    alarm(0);
    for (t0 = now_ns(); g.delivered == 0;) {
        if (now_ns() - t0 > CASE_TIMEOUT_S * 1000000000ull) {
            fail("A never learnt that B has the message");
            return;
        }
        rov_progress(g.ctx[SIDE_A]);
    }
    printf("sleep_wakes_for_owed_ack: B sent its ack from a sleep, A has the delivery\n");
}

static void case_sleep_tick(void)
{
    struct timer_state ts;

    g.case_name = "sleep_wakes_for_failover_tick";
    for (uint64_t t0 = now_ns(); now_ns() - t0 < 50 * 1000000ull;)
        progress_both(); /* nothing owed any more */
    alarm(CASE_TIMEOUT_S);
    for (int i = 0; i < 3; i++)
        rov_context_wait(g.ctx[SIDE_B], -1);
    alarm(0);
    if (!timer_state(g.ctx[SIDE_B], &ts))
        return;
    if (ts.ever_set == 0)
        fail("B slept and woke, yet no timer was set");
    if (ts.periodic) {
        fail("a timer set for a sleep has an interval (it would fire on while busy)");
        return;
    }
    printf("sleep_wakes_for_failover_tick: three sleeps of B ended by its timer\n");
}

static int setup(void)
{
    uint8_t blob[1024];
    size_t len = sizeof(blob);
    rov_status_t st;

    g.case_name = "setup";
    for (int s = SIDE_A; s <= SIDE_B; s++) {
        rov_context_params_t p = {.recv_cb = on_recv, .event_cb = on_event,
                                  .arg = (void *)(intptr_t)s};

        st = rov_context_create(&p, &g.ctx[s]);
        if (st != ROV_OK) {
            fprintf(stderr, "rov_context_create: %s\n", rov_status_str(st));
            return -1;
        }
    }
    st = rov_endpoint_create(g.ctx[SIDE_B], &g.ep[SIDE_B]);
    if (st == ROV_OK)
        st = rov_endpoint_create(g.ctx[SIDE_A], &g.ep[SIDE_A]);
    if (st == ROV_OK)
        st = rov_endpoint_address(g.ep[SIDE_B], blob, &len);
    if (st == ROV_OK)
        st = rov_conn_connect(g.ep[SIDE_A], blob, len, &g.conn[SIDE_A]);
    if (st != ROV_OK && st != ROV_INPROGRESS) {
        fprintf(stderr, "setup: %s\n", rov_status_str(st));
        return -1;
    }
    if (!busy_until(&g.established[SIDE_A], "A's connection not established") ||
        !busy_until(&g.established[SIDE_B], "B's connection not established"))
        return -1;
    return 0;
}

int main(void)
{
    signal(SIGALRM, on_alarm);
    if (setup() != 0)
        return 1;
    case_busy();
    case_sleep_ack();
    case_sleep_tick();
    if (g.errors)
        fail("connection errors (above)");
    rov_context_destroy(g.ctx[SIDE_A]);
    rov_context_destroy(g.ctx[SIDE_B]);
    if (g.failures) {
        fprintf(stderr, "rov_timers: %u failure(s)\n", g.failures);
        return 1;
    }
    printf("rov_timers: all cases passed\n");
    return 0;
}
