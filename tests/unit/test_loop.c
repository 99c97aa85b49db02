/*
 * The transport's state machines over the loop rail (loop/loop.c): two
 * contexts in this process, rails loop@a,loop@b on each, driven by calling
 * their progress in turn.  No sockets, no threads: every case is the same
 * sequence of events on every run.
 *
 *   stream, switch        messages both ways, in order, exactly once, with
 *                         switches between the two rails in the middle
 *   failover, resend      RAILOVER_FAULT fails rail 0's channel mid-stream:
 *                         the connection moves to rail 1 and resends what
 *                         the peer lacks; duplicates are dropped
 *   quiesce               with data in flight both ways: every message
 *                         delivered, the peer's connection quiesces too,
 *                         sends made meanwhile held; twice is harmless
 *   close, reopen         the rails closed with sends held, reopened: the
 *                         held sends delivered once, in order, after
 *                         everything before them
 *   close during a stage  the application's close waits for the stage's
 *                         end; a peer's close ends a drain, and completes
 *                         across a close and reopen of the rails
 *   refused               close-rails without a quiesce, a connect while
 *                         closed, a quiesce while closed
 *   reopen unreachable    reopened while the peer stays closed: fails as
 *                         unreachable after RAILOVER_UNREACHABLE_TIMEOUT
 *   hooks                 the stage hook: before and once after quiesce,
 *                         close, reopen (and a resume), in order, with the
 *                         stage's status; none after a hook is removed
 *   prefix                sends with a prefix (rov_send_params_t), copied
 *                         and zero-copy, across a switch: in order, whole;
 *                         a prefix too long or missing is refused
 *   hand over             a second connection's sends, made before it
 *                         connected, handed to the first: delivered there
 *                         after the first's, once; an established one is
 *                         refused (it may have reached the peer)
 *   tables                every transition of every machine: allowed ones
 *                         pass, every other one is refused and counted
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "railover/railover.h"
#include "transport/core.h" /* the contexts' state counters */
#include "transport/states.h"

#define MSGS 2000

struct side {
    const char *name;
    rov_context_t *ctx;
    rov_endpoint_t *ep;
    rov_conn_t *conn;
    uint64_t sent, rcvd;   /* message numbers: the next to send, to receive */
    int bad;
    int quiesced, resumed, address, errors, switches, closed;
    rov_status_t error_status;
    char error_reason[256];
    bool close_on_peer;    /* rov_conn_close() on ROV_EVENT_CONN_PEER_CLOSED */
};

static struct side A = {.name = "A"}, B = {.name = "B"};

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    struct side *s = arg;
    uint64_t v;

    (void)conn;
    if (len < sizeof(v) || (memcpy(&v, data, sizeof(v)), v != s->rcvd) || tag != (uint32_t)v) {
        fprintf(stderr, "%s: message %llu out of order or damaged\n", s->name,
                (unsigned long long)s->rcvd);
        s->bad++;
    }
    s->rcvd++;
}

static void on_event(void *arg, const rov_event_t *ev)
{
    struct side *s = arg;

    switch (ev->type) {
    case ROV_EVENT_CONN_ACCEPTED: s->conn = ev->conn; break;
    case ROV_EVENT_CONN_ERROR:
        s->errors++;
        s->error_status = ev->status;
        snprintf(s->error_reason, sizeof(s->error_reason), "%s", ev->reason ? ev->reason : "");
        break;
    case ROV_EVENT_CONN_RAIL_SWITCH: s->switches++; break;
    case ROV_EVENT_CONTEXT_QUIESCED: s->quiesced++; break;
    case ROV_EVENT_CONTEXT_RESUMED: s->resumed++; break;
    case ROV_EVENT_CONN_BOND: break;
    case ROV_EVENT_ENDPOINT_ADDRESS: s->address++; break;
    case ROV_EVENT_CONN_CLOSED: s->closed++; break;
    case ROV_EVENT_CONN_PEER_CLOSED:
        if (s->close_on_peer)
            rov_conn_close(ev->conn);
        break;
    default: break;
    }
}

static rov_context_t *context(struct side *s, const char *fault)
{
    rov_config_t *cfg;
    rov_context_params_t p = {.recv_cb = on_recv, .event_cb = on_event, .arg = s};
    char err[256];
    rov_context_t *ctx;

    ck_assert_int_eq(rov_config_read(err, sizeof(err), &cfg), ROV_OK);
    ck_assert_int_eq(rov_config_set(cfg, "RAILOVER_RAILS", "loop@a,loop@b", err, sizeof(err)),
                     ROV_OK);
    ck_assert_int_eq(rov_config_set(cfg, "RAILOVER_CONTROL", "off", err, sizeof(err)), ROV_OK);
    /* One thread drives both contexts, in turn (the loop rail's queues are
     * not locked, loop.c): no progress helper beside it. */
    ck_assert_int_eq(rov_config_set(cfg, "RAILOVER_PROGRESS_THREAD", "off", err, sizeof(err)),
                     ROV_OK);
    ck_assert_int_eq(rov_config_set(cfg, "RAILOVER_LOG", "warn", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(cfg, "RAILOVER_FAILBACK", "off", err, sizeof(err)), ROV_OK);
    if (fault)
        ck_assert_int_eq(rov_config_set(cfg, "RAILOVER_FAULT", fault, err, sizeof(err)), ROV_OK);
    p.config = cfg;
    ck_assert_int_eq(rov_context_create(&p, &ctx), ROV_OK);
    rov_config_free(cfg);
    return ctx;
}

static void spin(int rounds)
{
    for (int i = 0; i < rounds; i++) {
        rov_progress(A.ctx);
        rov_progress(B.ctx);
    }
}

/* Progress until cond holds (a bounded number of rounds: a hang fails). */
#define SPIN_UNTIL(cond)                                                     \
    do {                                                                     \
        int n_ = 0;                                                          \
        while (!(cond) && n_++ < 200000)                                     \
            spin(1);                                                         \
        ck_assert_msg((cond), "not reached after %d rounds: %s", n_, #cond); \
    } while (0)

static void setup_fault(const char *fault_a)
{
    uint8_t addr[512];
    size_t len = sizeof(addr);

    memset(&A, 0, sizeof(A));
    memset(&B, 0, sizeof(B));
    A.name = "A";
    B.name = "B";
    A.ctx = context(&A, fault_a);
    B.ctx = context(&B, NULL);
    ck_assert_int_eq(rov_endpoint_create(A.ctx, &A.ep), ROV_OK);
    ck_assert_int_eq(rov_endpoint_create(B.ctx, &B.ep), ROV_OK);
    ck_assert_int_eq(rov_endpoint_address(B.ep, addr, &len), ROV_OK);
    ck_assert_int_eq(rov_conn_connect(A.ep, addr, len, &A.conn), ROV_OK);
    SPIN_UNTIL(B.conn != NULL && rov_conn_rail(A.conn) == 0);
}

static void setup(void)
{
    setup_fault(NULL);
}

static void teardown(void)
{
    rov_context_destroy(A.ctx);
    rov_context_destroy(B.ctx);
}

/* Send up to n more messages from s (numbered), as far as the window lets. */
static void pump(struct side *s, uint64_t upto)
{
    while (s->sent < upto) {
        uint8_t buf[256];
        size_t len = 8 + s->sent % 200;
        rov_status_t st;

        memset(buf, (int)(s->sent & 0xff), sizeof(buf));
        memcpy(buf, &s->sent, sizeof(s->sent));
        st = rov_conn_send(s->conn, (uint32_t)s->sent, buf, len, NULL);
        if (st == ROV_ERR_AGAIN)
            return;
        ck_assert_msg(st == ROV_OK, "%s: send %llu: %s", s->name, (unsigned long long)s->sent,
                      rov_status_str(st));
        s->sent++;
    }
}

static void stream(uint64_t upto)
{
    int n = 0;

    while ((A.rcvd < upto || B.rcvd < upto) && n++ < 200000) {
        pump(&A, upto);
        pump(&B, upto);
        spin(1);
    }
    ck_assert_uint_eq(A.rcvd, upto);
    ck_assert_uint_eq(B.rcvd, upto);
    ck_assert_int_eq(A.bad + B.bad, 0);
}

static rov_conn_stats_t stats(const struct side *s)
{
    rov_conn_stats_t st;

    rov_conn_stats(s->conn, &st);
    return st;
}

START_TEST(test_stream_switch)
{
    stream(MSGS / 4);
    ck_assert_int_eq(rov_conn_switch(A.conn, 1, "test"), ROV_INPROGRESS);
    stream(MSGS / 2);
    ck_assert_int_eq(rov_conn_rail(A.conn), 1);
    ck_assert_int_eq(rov_conn_rail(B.conn), 1);
    ck_assert_int_eq(rov_conn_switch(B.conn, 0, "test"), ROV_INPROGRESS);
    stream(MSGS);
    ck_assert_int_eq(rov_conn_rail(A.conn), 0);
    ck_assert_int_eq(A.switches, 2);
    ck_assert_int_eq(B.switches, 2);
    ck_assert_int_eq(A.errors + B.errors, 0);
}
END_TEST

START_TEST(test_failover_resend)
{
    teardown();
    setup_fault("rail=0,mode=error,after=300");
    stream(MSGS);
    ck_assert_int_eq(rov_conn_rail(A.conn), 1);
    ck_assert_int_eq(rov_conn_rail(B.conn), 1);
    ck_assert_uint_ge(stats(&A).switches, 1);
    ck_assert_uint_ge(stats(&A).reasons[ROV_REASON_FAIL_INJECTED] +
                          stats(&A).reasons[ROV_REASON_FAIL_RESET] +
                          stats(&A).reasons[ROV_REASON_FAIL_CLOSED] +
                          stats(&A).reasons[ROV_REASON_FAIL_ERROR] +
                          stats(&A).reasons[ROV_REASON_PEER_FAILOVER],
                      1);
    ck_assert_int_eq(A.errors + B.errors, 0);
}
END_TEST

/* Sends queued without progress, then a quiesce: everything before it is
 * delivered, the peer's connection quiesces, sends made meanwhile wait. */
START_TEST(test_quiesce_in_flight)
{
    uint64_t before;

    stream(100);
    pump(&A, 400);
    pump(&B, 400);
    ck_assert_uint_gt(stats(&A).retained_msgs, 0);
    ck_assert_int_eq(rov_context_quiesce(A.ctx), ROV_INPROGRESS);
    ck_assert_int_eq(rov_context_stage(A.ctx), ROV_CONTEXT_QUIESCING);
    ck_assert_int_eq(rov_context_quiesce(A.ctx), ROV_INPROGRESS); /* twice: harmless */
    SPIN_UNTIL(A.quiesced == 1);
    ck_assert_int_eq(rov_context_stage(A.ctx), ROV_CONTEXT_QUIESCED);
    ck_assert_int_eq(rov_context_quiesce(A.ctx), ROV_OK);
    ck_assert_uint_eq(A.rcvd, B.sent);
    ck_assert_uint_eq(B.rcvd, A.sent);
    ck_assert_uint_eq(stats(&A).retained_msgs, 0);
    ck_assert_uint_eq(stats(&B).retained_msgs, 0);
    ck_assert_int_eq(rov_context_stage(B.ctx), ROV_CONTEXT_RUNNING);
    /* Sends on both sides are held now. */
    before = B.rcvd;
    pump(&A, A.sent + 50);
    pump(&B, B.sent + 50);
    spin(200);
    ck_assert_uint_eq(B.rcvd, before);
    ck_assert_uint_eq(A.rcvd, B.sent - 50);
    /* Resume without closing: the held sends go. */
    ck_assert_int_eq(rov_context_reopen(A.ctx), ROV_OK);
    SPIN_UNTIL(A.resumed == 1 && A.rcvd == B.sent && B.rcvd == A.sent);
    stream(A.sent + 200);
    ck_assert_int_eq(A.errors + B.errors, 0);
}
END_TEST

/* Quiesce, close the rails with sends held (and more made while closed),
 * reopen: every held send delivered once, in order, after the rest. */
START_TEST(test_close_reopen)
{
    uint8_t addr[512];
    size_t len = sizeof(addr);

    ck_assert_int_eq(rov_endpoint_address(B.ep, addr, &len), ROV_OK);
    stream(100);
    pump(&A, 300);
    pump(&B, 300);
    rov_context_quiesce(A.ctx);
    SPIN_UNTIL(A.quiesced == 1);
    pump(&A, A.sent + 40);
    pump(&B, B.sent + 40);
    ck_assert_int_eq(rov_context_close_rails(A.ctx), ROV_OK);
    ck_assert_int_eq(rov_context_stage(A.ctx), ROV_CONTEXT_CLOSED);
    ck_assert_int_eq(rov_context_rail_count(A.ctx), 0);
    ck_assert_int_eq(rov_conn_connect(A.ep, addr, len, &(rov_conn_t *){NULL}), ROV_ERR_BUSY);
    pump(&A, A.sent + 40); /* held while closed, too */
    spin(200);
    ck_assert_int_eq(B.errors + A.errors, 0);
    ck_assert_uint_eq(B.rcvd, A.sent - 80);
    ck_assert_int_eq(rov_context_reopen(A.ctx), ROV_INPROGRESS);
    ck_assert_int_eq(rov_context_rail_count(A.ctx), 2);
    SPIN_UNTIL(A.resumed == 1 && A.address == 1);
    ck_assert_int_eq(rov_context_stage(A.ctx), ROV_CONTEXT_RUNNING);
    SPIN_UNTIL(A.rcvd == B.sent && B.rcvd == A.sent);
    ck_assert_uint_eq(stats(&A).reasons[ROV_REASON_REOPEN], 1);
    stream(A.sent + 300);
    ck_assert_int_eq(A.errors + B.errors, 0);
}
END_TEST

/* Reopened while the peer stays closed: the reconnects are refused, tried
 * again after a backoff, and the connection fails as unreachable once
 * RAILOVER_UNREACHABLE_TIMEOUT has passed since the reopen, naming each
 * rail's last answer (the one bound, rov_conn_fail_unreachable()). */
START_TEST(test_reopen_unreachable)
{
    struct timespec t0, t;

    teardown();
    setenv("RAILOVER_UNREACHABLE_TIMEOUT", "300ms", 1);
    setup();
    unsetenv("RAILOVER_UNREACHABLE_TIMEOUT");
    stream(100);
    rov_context_quiesce(A.ctx);
    SPIN_UNTIL(A.quiesced == 1);
    rov_context_quiesce(B.ctx);
    SPIN_UNTIL(B.quiesced == 1);
    ck_assert_int_eq(rov_context_close_rails(A.ctx), ROV_OK);
    ck_assert_int_eq(rov_context_close_rails(B.ctx), ROV_OK);
    ck_assert_int_eq(rov_context_reopen(A.ctx), ROV_INPROGRESS);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        spin(1);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (A.errors == 0 && t.tv_sec - t0.tv_sec < 20);
    ck_assert_int_eq(A.errors, 1);
    ck_assert_int_eq(A.error_status, ROV_ERR_UNREACHABLE);
    ck_assert_msg(strstr(A.error_reason, "no rail has reached the peer since the reopen for ") &&
                      strstr(A.error_reason, "RAILOVER_UNREACHABLE_TIMEOUT)"),
                  "reason: %s", A.error_reason);
    ck_assert_msg(t.tv_sec - t0.tv_sec < 20, "still reconnecting after 20 s");
}
END_TEST

/* The stage hook's calls, as "stage:before|after:status" lines. */
static char hook_log[1024];

static void on_hook(void *arg, rov_context_t *ctx, const char *stage, int after,
                    rov_status_t status)
{
    size_t n = strlen(hook_log);

    ck_assert_ptr_eq(ctx, A.ctx);
    ck_assert_ptr_eq(arg, &A);
    snprintf(hook_log + n, sizeof(hook_log) - n, "%s:%s:%s\n", stage,
             after ? "after" : "before", rov_status_str(status));
}

START_TEST(test_hooks)
{
    hook_log[0] = '\0';
    rov_context_set_stage_hook(A.ctx, on_hook, &A);
    stream(100);
    pump(&A, 300);
    rov_context_quiesce(A.ctx);
    SPIN_UNTIL(A.quiesced == 1);
    ck_assert_int_eq(rov_context_quiesce(A.ctx), ROV_OK); /* a second: no hook */
    ck_assert_int_eq(rov_context_close_rails(A.ctx), ROV_OK);
    ck_assert_int_eq(rov_context_reopen(A.ctx), ROV_INPROGRESS);
    SPIN_UNTIL(A.resumed == 1);
    ck_assert_str_eq(hook_log, "quiesce:before:ok\nquiesce:after:ok\n"
                               "close:before:ok\nclose:after:ok\n"
                               "reopen:before:ok\nreopen:after:ok\n");
    hook_log[0] = '\0';
    rov_context_quiesce(A.ctx);
    SPIN_UNTIL(A.quiesced == 2);
    ck_assert_int_eq(rov_context_reopen(A.ctx), ROV_OK); /* a resume */
    ck_assert_str_eq(hook_log, "quiesce:before:ok\nquiesce:after:ok\n"
                               "reopen:before:ok\nreopen:after:ok\n");
    hook_log[0] = '\0';
    rov_context_set_stage_hook(A.ctx, NULL, NULL);
    rov_context_quiesce(A.ctx);
    SPIN_UNTIL(A.quiesced == 3);
    rov_context_reopen(A.ctx);
    ck_assert_str_eq(hook_log, "");
    stream(A.sent + 100);
    ck_assert_int_eq(A.errors + B.errors, 0);
}
END_TEST

/* The application closes during a stage: the close waits for its end. */
START_TEST(test_close_during_quiesce)
{
    stream(100);
    B.close_on_peer = true;
    rov_context_quiesce(A.ctx);
    SPIN_UNTIL(A.quiesced == 1);
    ck_assert_int_eq(rov_conn_close(A.conn), ROV_INPROGRESS);
    ck_assert_int_eq(rov_conn_send(A.conn, 1, "x", 1, NULL), ROV_ERR_CLOSED);
    ck_assert_int_eq(rov_context_reopen(A.ctx), ROV_OK);
    SPIN_UNTIL(A.closed == 1 && B.closed == 1);
    ck_assert_int_eq(A.errors + B.errors, 0);
    ck_assert_int_eq(A.bad + B.bad, 0);
}
END_TEST

/* The peer closes while this side drains: its CLOSE ends the drain; this
 * side's rails close and reopen under the peer's pending close, which
 * completes after the reconnect, on both sides, without a failure. */
START_TEST(test_peer_closes_during_quiesce)
{
    stream(100);
    A.close_on_peer = true;
    ck_assert_int_eq(rov_context_quiesce(A.ctx), ROV_INPROGRESS);
    ck_assert_int_eq(rov_conn_close(B.conn), ROV_INPROGRESS);
    SPIN_UNTIL(A.quiesced == 1);
    ck_assert_int_eq(rov_context_close_rails(A.ctx), ROV_OK);
    spin(200);
    ck_assert_int_eq(A.errors + B.errors, 0);
    ck_assert_int_eq(rov_context_reopen(A.ctx), ROV_INPROGRESS);
    SPIN_UNTIL(A.closed == 1 && B.closed == 1);
    ck_assert_int_eq(A.errors + B.errors, 0);
}
END_TEST

/* The close handshake as states: the closer's CLOSE goes out (CLOSING ->
 * CLOSE_SENT), the peer closes on its PEER_CLOSED event and its CLOSE
 * crosses or follows; whoever gets the other's CLOSE after sending its own
 * answers it (CLOSE_ANSWERED); both end DEAD, nothing refused.  Then the
 * same with data in flight both ways when A closes. */
START_TEST(test_close_handshake)
{
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            teardown();
            setup();
            pump(&A, 300);
            pump(&B, 300);
        } else {
            stream(100);
        }
        B.close_on_peer = true;
        ck_assert_int_eq(rov_conn_close(A.conn), ROV_INPROGRESS);
        ck_assert_int_eq(rov_conn_close(A.conn), ROV_INPROGRESS); /* again: harmless */
        SPIN_UNTIL(A.closed == 1 && B.closed == 1);
        ck_assert_uint_ge(A.ctx->conn_entered[ROV_CONN_CLOSE_SENT], 1);
        ck_assert_uint_ge(B.ctx->conn_entered[ROV_CONN_CLOSE_SENT], 1);
        ck_assert_uint_ge(A.ctx->conn_entered[ROV_CONN_CLOSE_ANSWERED] +
                          B.ctx->conn_entered[ROV_CONN_CLOSE_ANSWERED], 1);
        ck_assert_uint_eq(A.ctx->illegal_transitions + B.ctx->illegal_transitions, 0);
        ck_assert_int_eq(A.errors + B.errors + A.bad + B.bad, 0);
        ck_assert_uint_eq(A.rcvd, B.sent);
        ck_assert_uint_eq(B.rcvd, A.sent);
        A.closed = B.closed = 0;
    }
}
END_TEST

START_TEST(test_refused)
{
    stream(50);
    ck_assert_int_eq(rov_context_close_rails(A.ctx), ROV_ERR_BUSY);
    ck_assert_int_eq(rov_context_stage(A.ctx), ROV_CONTEXT_RUNNING);
    ck_assert_int_eq(rov_context_quiesce(A.ctx), ROV_INPROGRESS);
    SPIN_UNTIL(A.quiesced == 1);
    ck_assert_int_eq(rov_context_close_rails(A.ctx), ROV_OK);
    ck_assert_int_eq(rov_context_quiesce(A.ctx), ROV_ERR_BUSY); /* closed: reopen first */
    ck_assert_int_eq(rov_context_close_rails(A.ctx), ROV_OK);   /* again: nothing to do */
    ck_assert_int_eq(rov_context_reopen(A.ctx), ROV_INPROGRESS);
    SPIN_UNTIL(rov_context_stage(A.ctx) == ROV_CONTEXT_RUNNING);
    stream(100);
}
END_TEST

static unsigned prefixed_done;

static void prefixed_sent(void *arg, rov_status_t status)
{
    (void)arg;
    ck_assert_int_eq(status, ROV_OK);
    prefixed_done++;
}

/* A's messages carry their number as a prefix and a body of 100 bytes
 * (copied) or 20 KiB (referenced, above the 8 KiB eager limit). */
static rov_status_t send_prefixed(const uint8_t *body, uint64_t n)
{
    rov_send_params_t p = {.cb = prefixed_sent, .prefix = &n, .prefix_len = sizeof(n),
                           .flags = ROV_SEND_NOTIFY_DELIVERED};

    return rov_conn_send(A.conn, (uint32_t)n, body, n % 3 ? 100 : 20 * 1024, &p);
}

START_TEST(test_prefix)
{
    static uint8_t body[20 * 1024];
    rov_send_params_t bad = {.cb = prefixed_sent, .prefix = body,
                             .prefix_len = ROV_SEND_PREFIX_MAX + 1};

    memset(body, 0x5a, sizeof(body));
    ck_assert_int_eq(rov_conn_send(A.conn, 0, body, 100, &bad), ROV_ERR_INVAL);
    bad.prefix = NULL;
    bad.prefix_len = 8;
    ck_assert_int_eq(rov_conn_send(A.conn, 0, body, 100, &bad), ROV_ERR_INVAL);
    for (uint64_t n = 0; n < 300; n++) {
        if (n == 150)
            ck_assert_int_eq(rov_conn_switch(A.conn, 1, "test"), ROV_INPROGRESS);
        ck_assert_int_ge(send_prefixed(body, n), ROV_OK);
        A.sent++;
        spin(1);
    }
    SPIN_UNTIL(B.rcvd == 300 && prefixed_done == 300);
    ck_assert_int_eq(B.bad, 0);
    ck_assert_uint_eq(stats(&A).bytes_sent, 100 * 200 + 20 * 1024 * 100 + 8 * 300);
    ck_assert_int_eq(rov_conn_rail(A.conn), 1);
}
END_TEST

START_TEST(test_hand_over)
{
    uint8_t addr[512];
    size_t len = sizeof(addr);
    rov_conn_t *second, *b_first;

    stream(100);
    b_first = B.conn;
    ck_assert_int_eq(rov_endpoint_address(B.ep, addr, &len), ROV_OK);
    ck_assert_int_eq(rov_conn_connect(A.ep, addr, len, &second), ROV_OK);
    /* Sent on the second before it connected: messages 100..149. */
    for (; A.sent < 150; A.sent++) {
        uint8_t buf[64];

        memset(buf, 0, sizeof(buf));
        memcpy(buf, &A.sent, sizeof(A.sent));
        ck_assert_int_eq(rov_conn_send(second, (uint32_t)A.sent, buf, sizeof(buf), NULL), ROV_OK);
    }
    ck_assert_int_eq(rov_conn_hand_over(A.conn, second), ROV_ERR_BUSY); /* established */
    ck_assert_int_eq(rov_conn_hand_over(second, second), ROV_ERR_INVAL);
    ck_assert_int_ge(rov_conn_hand_over(second, A.conn), ROV_OK);
    SPIN_UNTIL(B.rcvd == 150);
    B.conn = b_first; /* (an accept of the second, if its HELLO went out) */
    stream(200);
    ck_assert_int_eq(A.errors + B.errors + B.bad, 0);
}
END_TEST

/* Every (from, to) pair of a machine: the table's answer, and a refusal
 * counted for each pair it does not allow. */
static void every_transition(const struct rov_state_info *table, int n)
{
    uint64_t illegal = 0, want = 0;
    int allowed = 0;

    for (int from = 0; from < n; from++) {
        for (int to = 0; to < n; to++) {
            bool ok = rov_state_change(table, from, to, "test", "machine", "test", &illegal);

            ck_assert_int_eq(ok, rov_state_allowed(table, from, to) != 0);
            want += !ok;
            allowed += ok;
        }
    }
    ck_assert_uint_eq(illegal, want);
    ck_assert_int_gt(allowed, 0);
    ck_assert_uint_gt(want, 0);
}

START_TEST(test_tables)
{
    every_transition(rov_conn_states, ROV_CONN_NSTATES);
    every_transition(rov_chan_states, ROV_CHAN_NSTATES);
    every_transition(rov_stage_states, ROV_STAGE_NSTATES);
    /* A few that matter: */
    ck_assert(rov_state_allowed(rov_conn_states, ROV_CONN_ESTABLISHED, ROV_CONN_DRAINING));
    ck_assert(!rov_state_allowed(rov_conn_states, ROV_CONN_DEAD, ROV_CONN_ESTABLISHED));
    ck_assert(!rov_state_allowed(rov_conn_states, ROV_CONN_QUIESCED, ROV_CONN_CLOSING));
    ck_assert(!rov_state_allowed(rov_chan_states, ROV_CHAN_CLOSED, ROV_CHAN_OPEN));
    ck_assert(!rov_state_allowed(rov_stage_states, ROV_CONTEXT_RUNNING, ROV_CONTEXT_CLOSED));
    ck_assert(rov_state_allowed(rov_stage_states, ROV_CONTEXT_QUIESCED, ROV_CONTEXT_CLOSED));
}
END_TEST

/* A context's job and rank: the caller's, else the configuration's
 * RAILOVER_JOBID and RAILOVER_RANK, else a fresh UUID and the pid.  A job
 * the caller names badly is refused; an empty one means a fresh UUID. */
START_TEST(test_job_identity)
{
    rov_context_params_t p = {.recv_cb = on_recv, .rank = -1};
    rov_config_t *cfg;
    rov_context_t *ctx;
    char err[256];

    ck_assert_int_eq(rov_config_read(err, sizeof(err), &cfg), ROV_OK);
    ck_assert_int_eq(rov_config_set(cfg, "RAILOVER_RAILS", "loop@id", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(cfg, "RAILOVER_CONTROL", "off", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(cfg, "RAILOVER_PROGRESS_THREAD", "off", err, sizeof(err)),
                     ROV_OK);
    p.config = cfg;
    ck_assert_int_eq(rov_context_create(&p, &ctx), ROV_OK);
    ck_assert_uint_eq(strlen(rov_context_jobid(ctx)), 36); /* a UUID */
    ck_assert_int_eq(rov_context_rank(ctx), getpid());
    rov_context_destroy(ctx);

    ck_assert_int_eq(rov_config_set(cfg, "RAILOVER_JOBID", "j-cfg", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_set(cfg, "RAILOVER_RANK", "7", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_context_create(&p, &ctx), ROV_OK);
    ck_assert_str_eq(rov_context_jobid(ctx), "j-cfg");
    ck_assert_int_eq(rov_context_rank(ctx), 7);
    rov_context_destroy(ctx);

    p.job = "j-caller";
    p.rank = 3;
    ck_assert_int_eq(rov_context_create(&p, &ctx), ROV_OK);
    ck_assert_str_eq(rov_context_jobid(ctx), "j-caller");
    ck_assert_int_eq(rov_context_rank(ctx), 3);
    rov_context_destroy(ctx);

    p.rank = -1; /* a job without a rank: the configuration's */
    ck_assert_int_eq(rov_context_create(&p, &ctx), ROV_OK);
    ck_assert_int_eq(rov_context_rank(ctx), 7);
    rov_context_destroy(ctx);

    p.job = "";
    ck_assert_int_eq(rov_context_create(&p, &ctx), ROV_OK);
    ck_assert_uint_eq(strlen(rov_context_jobid(ctx)), 36);
    rov_context_destroy(ctx);

    p.job = "../up";
    ck_assert_int_eq(rov_context_create(&p, &ctx), ROV_ERR_INVAL);
    rov_config_free(cfg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loop");
    TCase *tc = tcase_create("machines");
    SRunner *sr;
    int failed;

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_stream_switch);
    tcase_add_test(tc, test_failover_resend);
    tcase_add_test(tc, test_quiesce_in_flight);
    tcase_add_test(tc, test_close_reopen);
    tcase_add_test(tc, test_reopen_unreachable);
    tcase_add_test(tc, test_close_during_quiesce);
    tcase_add_test(tc, test_peer_closes_during_quiesce);
    tcase_add_test(tc, test_close_handshake);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_hooks);
    tcase_add_test(tc, test_prefix);
    tcase_add_test(tc, test_hand_over);
    tcase_add_test(tc, test_tables);
    suite_add_tcase(s, tc);
    tc = tcase_create("identity");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_job_identity);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
