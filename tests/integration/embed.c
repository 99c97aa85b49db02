/*
 * rov_embed: what an embedder (the Open MPI BTL) relies on, through the
 * public header only.
 *
 * Two contexts in one process over the rails of RAILOVER_RAILS (the test
 * sets tcp@lo).  B listens; A connects three times:
 *
 *  identity    rov_conn_connect_ex() with 8 bytes of connect-time data and a
 *      user pointer: the user pointer is set from the start (before any
 *      event), B's accepted connection carries the 8 bytes when
 *      ROV_EVENT_CONN_ACCEPTED reports it, A's own connection returns what
 *      it gave, and a message crosses after it.
 *  no_data     rov_conn_connect() (no data): B sees a length of 0.
 *  max_data    ROV_CONN_DATA_MAX bytes arrive whole; one byte more is
 *      refused at the call (ROV_ERR_INVAL), with no connection made.
 *
 *  send_failure  a third context whose rail fails at its 3rd data frame
 *      (RAILOVER_FAULT=...,mode=error): sends go on returning, no callback
 *      (event or completion) runs inside rov_conn_send() (railover.h:
 *      callbacks only inside progress), and the failure is reported from
 *      the next progress (ROV_EVENT_CONN_RAIL_DOWN, failover.injected).
 *
 * And rov_context_limits() reports the configuration the context was made
 * with (RAILOVER_MAX_MSG, RAILOVER_EAGER_LIMIT set by the test through
 * rov_config_set(), as an embedder passes its own parameters).
 *
 * Exit 0 success, 1 failure (each failure printed).
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "railover/railover.h"

#define CASE_TIMEOUT_NS (20 * 1000000000ull)

enum { SIDE_A, SIDE_B, SIDE_F };

static struct {
    rov_context_t *ctx[3];
    rov_endpoint_t *ep[3];
    rov_conn_t *accepted;       /* B's latest */
    uint8_t accepted_data[ROV_CONN_DATA_MAX];
    size_t accepted_len;
    void *user_at_event;        /* A's user pointer when ESTABLISHED came */
    bool accepted_seen, established, received;
    bool in_send;               /* inside rov_conn_send() */
    unsigned callbacks_in_send; /* callbacks that ran there */
    bool f_failed;              /* SIDE_F's connection reported its failure */
    unsigned failures;
    const char *case_name;
} g;

static void fail(const char *why, const char *detail)
{
    fprintf(stderr, "FAIL [%s]: %s%s%s\n", g.case_name, why, detail ? ": " : "",
            detail ? detail : "");
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
    (void)arg, (void)conn, (void)data;
    g.callbacks_in_send += g.in_send;
    g.received = tag == 7 && len == 5;
}

static void on_event(void *arg, const rov_event_t *ev)
{
    int side = (int)(intptr_t)arg;

    g.callbacks_in_send += g.in_send;
    if (side == SIDE_F) {
        if (ev->type == ROV_EVENT_CONN_ESTABLISHED)
            g.established = true;
        /* Its only rail fails: RAIL_DOWN, then it reconnects that rail. */
        g.f_failed |= ev->type == ROV_EVENT_CONN_RAIL_DOWN && ev->code == ROV_REASON_FAIL_INJECTED;
        g.f_failed |= ev->type == ROV_EVENT_CONN_ERROR;
        return;
    }
    switch (ev->type) {
    case ROV_EVENT_CONN_ACCEPTED: {
        /* The identity is there when the connection is first reported. */
        const void *d = rov_conn_data(ev->conn, &g.accepted_len);

        g.accepted = ev->conn;
        g.accepted_seen = true;
        if (d && g.accepted_len <= sizeof(g.accepted_data))
            memcpy(g.accepted_data, d, g.accepted_len);
        break;
    }
    case ROV_EVENT_CONN_ESTABLISHED:
        g.established = true;
        g.user_at_event = rov_conn_get_user(ev->conn);
        break;
    case ROV_EVENT_CONN_ERROR:
        fail("connection error on side", side == SIDE_A ? "A" : "B");
        break;
    default:
        break;
    }
}

static bool progress_until(const bool *flag, const char *what)
{
    uint64_t t0 = now_ns();

    while (!*flag) {
        if (now_ns() - t0 > CASE_TIMEOUT_NS) {
            fail("timed out waiting for", what);
            return false;
        }
        for (int i = 0; i < 3; i++)
            if (g.ctx[i])
                rov_progress(g.ctx[i]);
    }
    return true;
}

/* Connect A to B with the given parameters (NULL: rov_conn_connect()),
 * wait until both ends have it, and close both. */
static rov_conn_t *connect_ab(const void *blob, size_t blob_len, const rov_connect_params_t *p)
{
    rov_conn_t *c = NULL;
    rov_status_t st;

    g.accepted = NULL;
    g.accepted_len = SIZE_MAX;
    g.accepted_seen = g.established = g.received = false;
    g.user_at_event = NULL;
    st = p ? rov_conn_connect_ex(g.ep[SIDE_A], blob, blob_len, p, &c)
           : rov_conn_connect(g.ep[SIDE_A], blob, blob_len, &c);
    if (st != ROV_OK) {
        fail("connect", rov_status_str(st));
        return NULL;
    }
    if (p && rov_conn_get_user(c) != p->user)
        fail("the user pointer is not set before the first event", NULL);
    if (!progress_until(&g.established, "ESTABLISHED") ||
        !progress_until(&g.accepted_seen, "ACCEPTED"))
        return NULL;
    return c;
}

static void close_both(rov_conn_t *c)
{
    rov_conn_close(c);
    if (g.accepted)
        rov_conn_close(g.accepted);
    for (int i = 0; i < 200; i++) {
        rov_progress(g.ctx[SIDE_A]);
        rov_progress(g.ctx[SIDE_B]);
    }
}

static void case_identity(const void *blob, size_t blob_len)
{
    static const uint8_t id[8] = {'r', 'a', 'n', 'k', 0, 0, 0, 42};
    int marker;
    rov_connect_params_t p = {.data = id, .data_len = sizeof(id), .user = &marker};
    const void *mine;
    size_t len;
    rov_conn_t *c;

    g.case_name = "identity";
    c = connect_ab(blob, blob_len, &p);
    if (!c)
        return;
    if (g.user_at_event != &marker)
        fail("ESTABLISHED: rov_conn_get_user() is not the pointer given at connect", NULL);
    if (g.accepted_len != sizeof(id) || memcmp(g.accepted_data, id, sizeof(id)) != 0)
        fail("the accepted connection does not carry the connector's 8 bytes", NULL);
    mine = rov_conn_data(c, &len);
    if (len != sizeof(id) || memcmp(mine, id, sizeof(id)) != 0)
        fail("the connector's own connection does not return the data it gave", NULL);
    if (rov_conn_send(c, 7, "hello", 5, NULL) != ROV_OK)
        fail("send refused", NULL);
    else
        progress_until(&g.received, "the message");
    close_both(c);
}

static void case_no_data(const void *blob, size_t blob_len)
{
    rov_conn_t *c;
    const void *d;
    size_t len = 99;

    g.case_name = "no_data";
    c = connect_ab(blob, blob_len, NULL);
    if (!c)
        return;
    if (g.accepted_len != 0)
        fail("an accepted connection without data reports a length", NULL);
    d = rov_conn_data(c, &len);
    if (!d || len != 0)
        fail("rov_conn_data() of a connection made without data: not (ptr, 0)", NULL);
    close_both(c);
}

static void case_max_data(const void *blob, size_t blob_len)
{
    uint8_t big[ROV_CONN_DATA_MAX + 1];
    rov_connect_params_t p = {.data = big, .data_len = sizeof(big)};
    rov_conn_t *c = NULL;

    g.case_name = "max_data";
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 13 + 5);
    if (rov_conn_connect_ex(g.ep[SIDE_A], blob, blob_len, &p, &c) != ROV_ERR_INVAL || c)
        fail("ROV_CONN_DATA_MAX + 1 bytes of data accepted", NULL);
    p.data_len = ROV_CONN_DATA_MAX;
    c = connect_ab(blob, blob_len, &p);
    if (!c)
        return;
    if (g.accepted_len != ROV_CONN_DATA_MAX || memcmp(g.accepted_data, big, ROV_CONN_DATA_MAX))
        fail("ROV_CONN_DATA_MAX bytes did not arrive whole", NULL);
    close_both(c);
}

static void on_sent(void *arg, rov_status_t status)
{
    (void)arg, (void)status;
    g.callbacks_in_send += g.in_send;
}

static rov_context_t *make_context(int side, rov_config_t *cfg);

static void case_send_failure(const void *blob, size_t blob_len)
{
    static uint8_t big[64 * 1024]; /* zero-copy: a completion is owed */
    rov_send_params_t p = {.flags = ROV_SEND_NOTIFY_DELIVERED, .cb = on_sent};
    char err[256];
    rov_config_t *cfg;
    rov_conn_t *c = NULL;

    g.case_name = "send_failure";
    if (rov_config_read(err, sizeof(err), &cfg) != ROV_OK ||
        rov_config_set(cfg, "RAILOVER_FAULT", "rail=0,mode=error,after=3", err, sizeof(err))) {
        fail("configuration", err);
        return;
    }
    g.ctx[SIDE_F] = make_context(SIDE_F, cfg);
    rov_config_free(cfg);
    g.established = false;
    if (rov_conn_connect(g.ep[SIDE_F], blob, blob_len, &c) != ROV_OK ||
        !progress_until(&g.established, "ESTABLISHED"))
        return;
    for (int i = 0; i < 8; i++) {
        rov_status_t st;

        g.in_send = true;
        st = rov_conn_send(c, 1, big, i % 2 ? sizeof(big) : 16, &p);
        g.in_send = false;
        if (st != ROV_OK && st != ROV_INPROGRESS && st != ROV_ERR_CLOSED)
            fail("send", rov_status_str(st));
    }
    if (g.callbacks_in_send)
        fail("callbacks ran inside rov_conn_send()", NULL);
    progress_until(&g.f_failed, "the injected failure's ROV_EVENT_CONN_RAIL_DOWN");
    rov_conn_close(c);
}

static rov_context_t *make_context(int side, rov_config_t *cfg)
{
    rov_context_params_t prm = {
        .config = cfg, .recv_cb = on_recv, .event_cb = on_event, .arg = (void *)(intptr_t)side,
    };
    rov_context_t *ctx = NULL;

    if (rov_context_create(&prm, &ctx) != ROV_OK || rov_endpoint_create(ctx, &g.ep[side]) != ROV_OK) {
        fprintf(stderr, "FAIL: cannot create context %c\n", "ABF"[side]);
        exit(1);
    }
    return ctx;
}

int main(void)
{
    char err[256];
    uint8_t blob[1024];
    size_t blob_len = sizeof(blob);
    rov_config_t *cfg;
    rov_limits_t lim;

    if (rov_config_read(err, sizeof(err), &cfg) != ROV_OK ||
        rov_config_set(cfg, "RAILOVER_MAX_MSG", "3m", err, sizeof(err)) != ROV_OK ||
        rov_config_set(cfg, "RAILOVER_EAGER_LIMIT", "12k", err, sizeof(err)) != ROV_OK) {
        fprintf(stderr, "FAIL: configuration: %s\n", err);
        return 1;
    }
    g.ctx[SIDE_A] = make_context(SIDE_A, cfg);
    g.ctx[SIDE_B] = make_context(SIDE_B, cfg);
    rov_config_free(cfg);

    g.case_name = "limits";
    rov_context_limits(g.ctx[SIDE_A], &lim);
    if (lim.max_msg != 3u << 20 || lim.eager_limit != 12u << 10 ||
        lim.conn_data_max != ROV_CONN_DATA_MAX)
        fail("rov_context_limits() does not report the configuration", NULL);

    if (rov_endpoint_address(g.ep[SIDE_B], blob, &blob_len) != ROV_OK) {
        fprintf(stderr, "FAIL: no address\n");
        return 1;
    }
    case_identity(blob, blob_len);
    case_no_data(blob, blob_len);
    case_max_data(blob, blob_len);
    case_send_failure(blob, blob_len);
    rov_context_destroy(g.ctx[SIDE_F]);

    rov_context_destroy(g.ctx[SIDE_A]);
    rov_context_destroy(g.ctx[SIDE_B]);
    if (g.failures) {
        fprintf(stderr, "rov_embed: %u failure(s)\n", g.failures);
        return 1;
    }
    printf("rov_embed: identity, no_data, max_data, send_failure, limits: ok\n");
    return 0;
}
