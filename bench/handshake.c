/*
 * rov_handshake: what a connection's handshake costs.
 *
 * One process, two contexts on the same rail (RAILOVER_RAILS, e.g. tcp@lo):
 * a listener and a connector, both progressed by this thread.  Each round
 * makes N connections one after another, each timed from rov_conn_connect()
 * to ROV_EVENT_CONN_ESTABLISHED on the connector (the rail's connect, the
 * HELLO, its check and the HELLO_ACK's), then closes them all.  It uses the
 * public API only, so the same binary measures another build of the library
 * (LD_LIBRARY_PATH) with the same code around it: bench/handshake-compare.sh
 * alternates two builds per round.
 *
 * Prints the median and 90th percentile of the round in microseconds and a
 * machine-readable line; asserts nothing.
 *
 * Usage: rov_handshake [--conns N] [--rounds R] [--json]
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "railover/railover.h"

static struct {
    int established, accepted, closed, errors;
} ev;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    (void)arg, (void)conn, (void)tag, (void)data, (void)len;
}

static void on_event(void *arg, const rov_event_t *e)
{
    (void)arg;
    switch (e->type) {
    case ROV_EVENT_CONN_ESTABLISHED: ev.established++; break;
    case ROV_EVENT_CONN_ACCEPTED: ev.accepted++; break;
    case ROV_EVENT_CONN_PEER_CLOSED: rov_conn_close(e->conn); break;
    case ROV_EVENT_CONN_CLOSED: ev.closed++; break;
    case ROV_EVENT_CONN_ERROR:
        ev.errors++;
        fprintf(stderr, "rov_handshake: connection error: %s (%s)\n",
                rov_status_str(e->status), e->reason ? e->reason : "");
        rov_conn_close(e->conn);
        break;
    default: break;
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static bool pump_until(rov_context_t **ctx, const int *counter, int want)
{
    uint64_t t0 = now_ns();

    while (*counter < want) {
        rov_progress(ctx[0]);
        rov_progress(ctx[1]);
        if (ev.errors || now_ns() - t0 > 10000000000ull)
            return false;
    }
    return true;
}

int main(int argc, char **argv)
{
    int conns = 200, rounds = 1;
    bool json = false;
    rov_context_params_t p = {.recv_cb = on_recv, .event_cb = on_event};
    rov_context_t *ctx[2] = {NULL, NULL};
    rov_endpoint_t *ep[2] = {NULL, NULL};
    uint8_t blob[1024];
    size_t len = sizeof(blob);
    uint64_t *t;
    rov_status_t st;
    int rc = 1;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--conns") == 0 && i + 1 < argc)
            conns = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0)
            json = true;
        else {
            fprintf(stderr, "usage: %s [--conns N] [--rounds R] [--json]\n", argv[0]);
            return 2;
        }
    }
    if (conns < 1 || rounds < 1)
        return 2;
    t = calloc((size_t)conns, sizeof(*t));
    for (int s = 0; s < 2; s++) {
        st = rov_context_create(&p, &ctx[s]);
        if (st == ROV_OK)
            st = rov_endpoint_create(ctx[s], &ep[s]);
        if (st != ROV_OK) {
            fprintf(stderr, "rov_handshake: setup: %s\n", rov_status_str(st));
            goto out;
        }
    }
    st = rov_endpoint_address(ep[0], blob, &len);
    if (st != ROV_OK || !t)
        goto out;
    for (int r = 0; r < rounds; r++) {
        rov_conn_t **c = calloc((size_t)conns, sizeof(*c));
        int closed0 = ev.closed;

        if (!c)
            goto out;
        for (int i = 0; i < conns; i++) {
            int want = ev.established + 1;
            uint64_t t0 = now_ns();

            st = rov_conn_connect(ep[1], blob, len, &c[i]);
            if (st != ROV_OK || !pump_until(ctx, &ev.established, want)) {
                fprintf(stderr, "rov_handshake: connection %d not established: %s\n", i,
                        rov_status_str(st));
                free(c);
                goto out;
            }
            t[i] = now_ns() - t0;
        }
        for (int i = 0; i < conns; i++)
            rov_conn_close(c[i]);
        free(c);
        if (!pump_until(ctx, &ev.closed, closed0 + 2 * conns)) {
            fprintf(stderr, "rov_handshake: connections not closed\n");
            goto out;
        }
        qsort(t, (size_t)conns, sizeof(*t), cmp_u64);
        if (json)
            printf("{\"bench\":\"handshake\",\"round\":%d,\"conns\":%d,\"median_us\":%.2f,"
                   "\"p90_us\":%.2f}\n", r, conns, t[conns / 2] / 1e3, t[conns * 9 / 10] / 1e3);
        else
            printf("round %d: %d handshakes, median %.2f us, p90 %.2f us\n", r, conns,
                   t[conns / 2] / 1e3, t[conns * 9 / 10] / 1e3);
        fflush(stdout);
    }
    rc = 0;
out:
    for (int s = 1; s >= 0; s--)
        if (ctx[s]) {
            if (ep[s])
                rov_endpoint_destroy(ep[s]);
            rov_context_destroy(ctx[s]);
        }
    free(t);
    return rc;
}
