/*
 * rov_compute: a peer that computes without calling into the library must
 * not be failed over (DESIGN.md section 3: stalls are judged on the rail's
 * own completions, never on the peer application's replies).
 *
 *   rov_compute --listen FILE  [--pause-ms MS] [--count N]
 *   rov_compute --connect FILE [--count N]
 *
 * The connector streams --count 64 KiB messages; the listener takes the
 * first one, then "computes" for --pause-ms without any library call, while
 * the connector keeps sending until its window and the socket buffers are
 * full, then drains everything.  Meanwhile both sides' failover engines run
 * with a short RAILOVER_FAILOVER_TIMEOUT (set by the test).  Success: every
 * message arrives in order, and neither side switched rails or saw a rail
 * go down.  Exit 0 success, 1 failure, 64 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "railover/railover.h"

#define MSG_SIZE (64 * 1024)

struct app {
    bool listen;
    const char *file;
    uint64_t count;
    unsigned pause_ms;
    rov_conn_t *conn;
    uint64_t sent, recv;
    uint64_t switches, rail_down, errors;
    bool closed, peer_closed;
    uint8_t buf[MSG_SIZE];
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    struct app *app = arg;

    (void)conn;
    (void)data;
    if (tag != (uint32_t)app->recv || len != MSG_SIZE) {
        fprintf(stderr, "FAIL: message %" PRIu64 ": tag %" PRIu32 ", %zu bytes\n", app->recv,
                tag, len);
        app->errors++;
    }
    app->recv++;
}

static void on_event(void *arg, const rov_event_t *ev)
{
    struct app *app = arg;

    switch (ev->type) {
    case ROV_EVENT_CONN_ACCEPTED:
        app->conn = ev->conn;
        break;
    case ROV_EVENT_CONN_RAIL_SWITCH:
        fprintf(stderr, "FAIL: rail switch %d -> %d (%s: %s)\n", ev->rail_from, ev->rail_to,
                rov_reason_str(ev->code), ev->reason);
        app->switches++;
        break;
    case ROV_EVENT_CONN_RAIL_DOWN:
        fprintf(stderr, "FAIL: rail %d down (%s: %s)\n", ev->rail_from,
                rov_reason_str(ev->code), ev->reason);
        app->rail_down++;
        break;
    case ROV_EVENT_CONN_ERROR:
        fprintf(stderr, "FAIL: connection error: %s\n", ev->reason);
        app->errors++;
        break;
    case ROV_EVENT_CONN_PEER_CLOSED:
        app->peer_closed = true;
        rov_conn_close(ev->conn);
        break;
    case ROV_EVENT_CONN_CLOSED:
        app->closed = true;
        break;
    default:
        break;
    }
}

static int run(struct app *app, rov_context_t *ctx, rov_endpoint_t *ep)
{
    uint8_t blob[1024];
    size_t len = sizeof(blob);
    uint64_t deadline = now_ms() + 120000;
    char tmp[4096];
    FILE *f;

    if (app->listen) {
        /* written whole, then renamed: the connector never reads half */
        snprintf(tmp, sizeof(tmp), "%s.tmp", app->file);
        if (rov_endpoint_address(ep, blob, &len) != ROV_OK || !(f = fopen(tmp, "wb")))
            return 1;
        if (fwrite(blob, 1, len, f) != len || fclose(f) != 0 || rename(tmp, app->file) != 0)
            return 1;
        while (app->recv == 0 && now_ms() < deadline)
            rov_context_wait(ctx, 100);
        fprintf(stderr, "[listener]: computing for %u ms without calling the library\n",
                app->pause_ms);
        usleep(app->pause_ms * 1000u);
        while (!app->closed && now_ms() < deadline && !app->errors)
            rov_context_wait(ctx, 100);
        return 0;
    }
    f = fopen(app->file, "rb");
    if (!f)
        return 1;
    len = fread(blob, 1, sizeof(blob), f);
    fclose(f);
    if (rov_conn_connect(ep, blob, len, &app->conn) != ROV_OK)
        return 1;
    while (app->sent < app->count && now_ms() < deadline && !app->errors) {
        rov_send_params_t p = {.flags = ROV_SEND_COPY};

        if (rov_conn_send(app->conn, (uint32_t)app->sent, app->buf, MSG_SIZE, &p) == ROV_OK)
            app->sent++;
        else
            rov_context_wait(ctx, 10);
        rov_progress(ctx);
    }
    rov_conn_close(app->conn);
    while (!app->closed && now_ms() < deadline && !app->errors)
        rov_context_wait(ctx, 100);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'}, {"connect", required_argument, NULL, 'c'},
        {"count", required_argument, NULL, 'n'},  {"pause-ms", required_argument, NULL, 'p'},
        {NULL, 0, NULL, 0},
    };
    static struct app app = {.count = 2000, .pause_ms = 3000};
    rov_context_params_t params = {.recv_cb = on_recv, .event_cb = on_event, .arg = &app};
    rov_context_t *ctx;
    rov_endpoint_t *ep;
    int c, rc;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l': app.listen = true; app.file = optarg; break;
        case 'c': app.file = optarg; break;
        case 'n': app.count = strtoull(optarg, NULL, 10); break;
        case 'p': app.pause_ms = (unsigned)strtoul(optarg, NULL, 10); break;
        default:
            fprintf(stderr, "usage: rov_compute (--listen|--connect) FILE [--count N] "
                    "[--pause-ms MS]\n");
            return 64;
        }
    }
    if (!app.file || app.count == 0)
        return 64;
    setvbuf(stderr, NULL, _IOLBF, 0);
    if (rov_context_create(&params, &ctx) != ROV_OK || rov_endpoint_create(ctx, &ep) != ROV_OK) {
        fprintf(stderr, "FAIL: cannot create the context or endpoint\n");
        return 1;
    }
    rc = run(&app, ctx, ep);
    if (!app.closed) {
        fprintf(stderr, "FAIL: the connection did not close (sent %" PRIu64 ", received %"
                PRIu64 ")\n", app.sent, app.recv);
        rc = 1;
    }
    if (app.listen && app.recv != app.count) {
        fprintf(stderr, "FAIL: received %" PRIu64 " of %" PRIu64 " messages\n", app.recv,
                app.count);
        rc = 1;
    }
    if (app.switches || app.rail_down || app.errors)
        rc = 1;
    fprintf(stderr, "[%s]: sent %" PRIu64 ", received %" PRIu64 ", switches %" PRIu64
            ", rails down %" PRIu64 ": %s\n", app.listen ? "listener" : "connector", app.sent,
            app.recv, app.switches, app.rail_down, rc ? "FAILED" : "OK");
    /* the result line run_pair.sh reads */
    printf("ROV_STREAM_RESULT role=%s rc=%d sent=%" PRIu64 " recv=%" PRIu64 " switches=%" PRIu64
           " failures=%" PRIu64 "\n", app.listen ? "listener" : "connector", rc, app.sent,
           app.recv, app.switches, app.errors + app.rail_down);
    fflush(stdout);
    rov_endpoint_destroy(ep);
    rov_context_destroy(ctx);
    return rc;
}
