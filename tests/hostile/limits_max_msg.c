/*
 * limits_max_msg: peers configured with different RAILOVER_MAX_MSG (issue
 * 19, part 2a).  Before the limits were exchanged in the handshake, a
 * message larger than the receiver's limit was a protocol error there: the
 * receiver closed the channel, the sender reconnected and sent it again,
 * and the connection bounced between its rails for ever.
 *
 * One process, two contexts on two TCP rails over loopback: A listens with
 * RAILOVER_MAX_MSG=64KiB, B connects with 1MiB.
 *   1. B sends before the handshake completes a message A would refuse:
 *      that connection fails once on each side, with ROV_ERR_MSGSIZE (B
 *      tells A: CLOSE|ABORT), and never switches.
 *   2. On a second connection, after the handshake: a send of 100 KiB is
 *      refused at once with ROV_ERR_MSGSIZE (nothing taken), a 64 KiB one
 *      and a small one are delivered, and the connection never switches.
 * Public API only.  Exit 0 pass, 1 fail, 2 setup error.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "railover/railover.h"

static struct {
    int established, errors, failures;
    int errors_side[2];
    rov_status_t last_error, last_error_side[2];
    unsigned delivered;
    size_t delivered_bytes;
} g;

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failf(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    g.failures++;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    (void)arg, (void)conn, (void)tag, (void)data;
    g.delivered++;
    g.delivered_bytes += len;
}

static void on_event(void *arg, const rov_event_t *e)
{
    int side = (int)(intptr_t)arg;

    if (e->type == ROV_EVENT_CONN_ESTABLISHED)
        g.established++;
    if (e->type == ROV_EVENT_CONN_ERROR) {
        g.errors++;
        g.errors_side[side]++;
        g.last_error = e->status;
        g.last_error_side[side] = e->status;
        fprintf(stderr, "limits_max_msg: connection error: %s (%s)\n", rov_status_str(e->status),
                e->reason ? e->reason : "");
    }
}

static void pump(rov_context_t **ctx, bool (*done)(void), double seconds)
{
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);

    while (!done() && now_ns() < end) {
        rov_progress(ctx[0]);
        rov_progress(ctx[1]);
    }
}

static bool both_errors(void) { return g.errors_side[0] > 0 && g.errors_side[1] > 0; }
static bool established(void) { return g.established > 0; }
static bool two_delivered(void) { return g.delivered >= 2; }
static bool never(void) { return false; }

static rov_context_t *make_ctx(int side, const char *max_msg)
{
    rov_config_t *cfg;
    rov_context_params_t p = {.recv_cb = on_recv, .event_cb = on_event,
                              .arg = (void *)(intptr_t)side};
    rov_context_t *ctx = NULL;
    char err[256];

    if (rov_config_read(err, sizeof(err), &cfg) != ROV_OK)
        return NULL;
    if (rov_config_set(cfg, "RAILOVER_MAX_MSG", max_msg, err, sizeof(err)) != ROV_OK ||
        rov_config_set(cfg, "RAILOVER_CONTROL", "off", err, sizeof(err)) != ROV_OK) {
        fprintf(stderr, "limits_max_msg: %s\n", err);
        rov_config_free(cfg);
        return NULL;
    }
    p.config = cfg;
    if (rov_context_create(&p, &ctx) != ROV_OK)
        ctx = NULL;
    rov_config_free(cfg);
    return ctx;
}

int main(void)
{
    static uint8_t big[100 * 1024], fits[64 * 1024];
    rov_context_t *ctx[2] = {make_ctx(0, "64KiB"), make_ctx(1, "1MiB")};
    rov_endpoint_t *ep[2] = {NULL, NULL};
    rov_conn_t *c1, *c2;
    rov_conn_stats_t st;
    uint8_t blob[1024];
    size_t len = sizeof(blob);
    rov_status_t s;

    setvbuf(stderr, NULL, _IOLBF, 0);
    if (!ctx[0] || !ctx[1] || rov_endpoint_create(ctx[0], &ep[0]) != ROV_OK ||
        rov_endpoint_create(ctx[1], &ep[1]) != ROV_OK ||
        rov_endpoint_address(ep[0], blob, &len) != ROV_OK) {
        fprintf(stderr, "limits_max_msg: setup failed\n");
        return 2;
    }

    /* 1. Queued before the handshake, larger than A accepts. */
    if (rov_conn_connect(ep[1], blob, len, &c1) != ROV_OK)
        return 2;
    s = rov_conn_send(c1, 1, big, sizeof(big), &(rov_send_params_t){.flags = ROV_SEND_COPY});
    if (s != ROV_OK)
        failf("send before the handshake: %s, want it queued (the peer's limit is unknown yet)",
              rov_status_str(s));
    pump(ctx, both_errors, 10);
    for (int i = 0; i < 2; i++)
        if (g.errors_side[i] != 1 || g.last_error_side[i] != ROV_ERR_MSGSIZE)
            failf("connection 1 at %s: %d errors, last %s; want one, %s", i ? "B" : "A",
                  g.errors_side[i], rov_status_str(g.last_error_side[i]),
                  rov_status_str(ROV_ERR_MSGSIZE));
    pump(ctx, never, 0.5); /* nothing more: no reconnect loop */
    rov_conn_stats(c1, &st);
    if (g.errors != 2 || st.switches != 0)
        failf("connection 1 after its failure: %d errors, %llu switches; want 2 and 0", g.errors,
              (unsigned long long)st.switches);
    if (g.delivered)
        failf("%u messages delivered to A from the failed connection", g.delivered);
    rov_conn_close(c1);
    fprintf(stderr, "limits_max_msg: a queued message too large for the peer failed its "
            "connection once (%s)\n", rov_status_str(g.last_error));

    /* 2. After the handshake: refused at the send. */
    g.errors = 0;
    if (rov_conn_connect(ep[1], blob, len, &c2) != ROV_OK)
        return 2;
    pump(ctx, established, 10);
    if (!g.established) {
        failf("connection 2 not established");
    } else {
        s = rov_conn_send(c2, 2, big, sizeof(big), &(rov_send_params_t){.flags = ROV_SEND_COPY});
        if (s != ROV_ERR_MSGSIZE)
            failf("send of %zu bytes to a peer with RAILOVER_MAX_MSG=64KiB: %s, want %s",
                  sizeof(big), rov_status_str(s), rov_status_str(ROV_ERR_MSGSIZE));
        s = rov_conn_send(c2, 3, fits, sizeof(fits), &(rov_send_params_t){.flags = ROV_SEND_COPY});
        if (s != ROV_OK)
            failf("send of 64 KiB: %s", rov_status_str(s));
        s = rov_conn_send(c2, 4, "small", 5, NULL);
        if (s != ROV_OK)
            failf("send of 5 bytes: %s", rov_status_str(s));
        pump(ctx, two_delivered, 10);
        rov_conn_stats(c2, &st);
        if (g.delivered != 2 || g.delivered_bytes != sizeof(fits) + 5)
            failf("delivered %u messages (%zu bytes), want 2 (%zu)", g.delivered,
                  g.delivered_bytes, sizeof(fits) + 5);
        if (g.errors || st.switches)
            failf("connection 2: %d errors, %llu switches; want none", g.errors,
                  (unsigned long long)st.switches);
    }
    rov_endpoint_destroy(ep[0]);
    rov_endpoint_destroy(ep[1]);
    rov_context_destroy(ctx[1]);
    rov_context_destroy(ctx[0]);
    fprintf(stderr, "limits_max_msg: %s\n", g.failures ? "FAIL" : "PASS");
    return g.failures ? 1 : 0;
}
