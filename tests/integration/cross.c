/*
 * rov_cross: one of two processes that connect to each other at once, the
 * way two MPI ranks do on their first messages to each other, and keep one
 * connection as the Open MPI BTL does (mpi-btl/btl_railover_endpoint.c):
 * the connection the lower name made wins; the higher side, on accepting
 * the winner, gives up its own (rov_conn_hand_over() while its own has not
 * connected yet, else rov_conn_close(); --close-only: always close).
 *
 *   rov_cross --name N --addr-file MINE --peer-file THEIRS [--count C]
 *             [--timeout S] [--close-only]
 *
 * Each side writes its address to MINE, waits for THEIRS, connects, and at
 * once sends C messages (tag = index; every 16th one zero-copy, 64 KiB,
 * the others 100 bytes; each filled from (sender, index)).  It checks what
 * it receives: every index exactly once, in order, content right, on
 * whichever connection.  It is done when it has all C of the peer's and
 * the peer has acknowledged all of its own (ROV_SEND_NOTIFY_DELIVERED);
 * then it closes what it holds and prints
 *
 *   ROV_CROSS name=N rc=R recv=C delivered=C handed_over=0|1 closed_own=0|1
 *       elapsed_s=F
 *
 * rc: 0 done, 1 a check failed (said on stderr), 3 not done within
 * --timeout seconds (default 60), 64 usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <railover/railover.h>

#define SMALL 100
#define LARGE (64 * 1024)
#define LARGE_EVERY 16

struct app {
    uint64_t name, count, timeout_s;
    int close_only;
    rov_conn_t *own, *accepted;
    uint64_t next_rx, delivered;
    int handed_over, closed_own, failed, conns_open;
    unsigned char *large;
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned char byte_of(uint64_t sender, uint64_t idx, size_t i)
{
    return (unsigned char)(sender * 131 + idx * 31 + i * 7);
}

static void fill(unsigned char *buf, size_t len, uint64_t sender, uint64_t idx)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = byte_of(sender, idx, i);
}

static size_t size_of(uint64_t idx)
{
    return idx % LARGE_EVERY == LARGE_EVERY - 1 ? LARGE : SMALL;
}

static void on_delivered(void *arg, rov_status_t status)
{
    struct app *app = arg;

    if (status != ROV_OK) {
        fprintf(stderr, "rov_cross %llu: a send completed with %s\n",
                (unsigned long long)app->name, rov_status_str(status));
        app->failed = 1;
        return;
    }
    app->delivered++;
}

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    struct app *app = arg;
    const unsigned char *p = data;
    uint64_t peer = app->name == 1 ? 2 : 1;

    (void)conn;
    if (tag != app->next_rx || len != size_of(tag)) {
        fprintf(stderr, "rov_cross %llu: message %u (%zu bytes) where %llu was expected: %s\n",
                (unsigned long long)app->name, tag, len, (unsigned long long)app->next_rx,
                tag < app->next_rx ? "duplicate" : "lost or reordered");
        app->failed = 1;
        return;
    }
    for (size_t i = 0; i < len; i++) {
        if (p[i] != byte_of(peer, tag, i)) {
            fprintf(stderr, "rov_cross %llu: message %u corrupt at byte %zu\n",
                    (unsigned long long)app->name, tag, i);
            app->failed = 1;
            return;
        }
    }
    app->next_rx++;
}

/* The BTL's rule: the lower name's connection wins. */
static void on_accepted(struct app *app, rov_conn_t *conn)
{
    uint64_t peer = 0;
    size_t len = 0;
    const void *data = rov_conn_data(conn, &len);

    if (len == sizeof(peer))
        memcpy(&peer, data, sizeof(peer));
    if (len != sizeof(peer) || peer == app->name || app->accepted) {
        fprintf(stderr, "rov_cross %llu: unexpected connection (peer name %llu)\n",
                (unsigned long long)app->name, (unsigned long long)peer);
        app->failed = 1;
        rov_conn_close(conn);
        return;
    }
    app->accepted = conn;
    app->conns_open++;
    if (peer > app->name || !app->own)
        return; /* ours wins; the peer's receives until it closes it */
    rov_status_t st = app->close_only ? ROV_ERR_BUSY : rov_conn_hand_over(app->own, conn);

    if (st == ROV_OK || st == ROV_INPROGRESS) {
        app->handed_over = 1;
        if (st == ROV_OK)
            app->conns_open--; /* ended at once: no CLOSED event */
    } else {
        rov_conn_close(app->own);
        app->closed_own = 1;
    }
}

static void on_event(void *arg, const rov_event_t *e)
{
    struct app *app = arg;

    switch (e->type) {
    case ROV_EVENT_CONN_ACCEPTED:
        on_accepted(app, e->conn);
        break;
    case ROV_EVENT_CONN_PEER_CLOSED:
        rov_conn_close(e->conn);
        break;
    case ROV_EVENT_CONN_CLOSED:
        app->conns_open--;
        break;
    case ROV_EVENT_CONN_ERROR:
        fprintf(stderr, "rov_cross %llu: a connection failed: %s (%s)\n",
                (unsigned long long)app->name, e->reason ? e->reason : "",
                rov_status_str(e->status));
        app->failed = 1;
        rov_conn_close(e->conn);
        app->conns_open--;
        break;
    default:
        break;
    }
}

static char *read_file(const char *path, size_t *len_p, double deadline)
{
    static char buf[4096];
    FILE *f;

    while (!(f = fopen(path, "rb"))) {
        if (now_s() > deadline)
            return NULL;
        usleep(10000);
    }
    *len_p = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    return buf;
}

static int write_addr(rov_endpoint_t *ep, const char *path)
{
    unsigned char buf[4096];
    size_t len = sizeof(buf);
    char tmp[4200];
    FILE *f;

    if (rov_endpoint_address(ep, buf, &len) != ROV_OK)
        return -1;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

static void usage(void)
{
    fprintf(stderr, "usage: rov_cross --name 1|2 --addr-file MINE --peer-file THEIRS "
                    "[--count C] [--timeout S] [--close-only]\n");
    exit(64);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"name", required_argument, NULL, 'n'},  {"addr-file", required_argument, NULL, 'a'},
        {"peer-file", required_argument, NULL, 'p'}, {"count", required_argument, NULL, 'c'},
        {"timeout", required_argument, NULL, 't'}, {"close-only", no_argument, NULL, 'C'},
        {NULL, 0, NULL, 0},
    };
    struct app app = {.count = 200, .timeout_s = 60};
    const char *mine = NULL, *theirs = NULL;
    rov_context_params_t params = {.recv_cb = on_recv, .event_cb = on_event, .arg = &app};
    rov_connect_params_t cp = {.data = &app.name, .data_len = sizeof(app.name)};
    unsigned char small[SMALL];
    rov_context_t *ctx;
    rov_endpoint_t *ep;
    double t0, deadline;
    size_t len;
    char *addr;
    int c, rc;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'n': app.name = strtoull(optarg, NULL, 10); break;
        case 'a': mine = optarg; break;
        case 'p': theirs = optarg; break;
        case 'c': app.count = strtoull(optarg, NULL, 10); break;
        case 't': app.timeout_s = strtoull(optarg, NULL, 10); break;
        case 'C': app.close_only = 1; break;
        default: usage();
        }
    }
    if ((app.name != 1 && app.name != 2) || !mine || !theirs || !app.count || app.count > UINT32_MAX)
        usage();
    app.large = malloc(LARGE);
    if (!app.large || rov_context_create(&params, &ctx) != ROV_OK ||
        rov_endpoint_create(ctx, &ep) != ROV_OK || write_addr(ep, mine) != 0) {
        fprintf(stderr, "rov_cross: setup failed: %s\n", strerror(errno));
        return 1;
    }
    t0 = now_s();
    deadline = t0 + (double)app.timeout_s;
    addr = read_file(theirs, &len, deadline);
    if (!addr || rov_conn_connect_ex(ep, addr, len, &cp, &app.own) != ROV_OK) {
        fprintf(stderr, "rov_cross %llu: cannot connect to the peer\n",
                (unsigned long long)app.name);
        return 1;
    }
    app.conns_open++;
    /* Sent at once, while the connect is under way: what a rank's first
     * messages to a peer are.  The large buffer is shared: its content
     * depends on the index, so each large send waits for the last. */
    for (uint64_t i = 0; i < app.count && !app.failed && now_s() < deadline;) {
        size_t n = size_of(i);
        unsigned char *buf = n == LARGE ? app.large : small;
        rov_send_params_t sp = {.flags = ROV_SEND_NOTIFY_DELIVERED, .cb = on_delivered,
                                .arg = &app};
        rov_conn_t *to = app.accepted && app.name == 2 ? app.accepted : app.own;

        if (n == LARGE && app.delivered < i) {
            rov_context_wait(ctx, 10);
            continue;
        }
        fill(buf, n, app.name, i);
        rc = rov_conn_send(to, (uint32_t)i, buf, n, &sp);
        if (rc == ROV_ERR_AGAIN) {
            rov_context_wait(ctx, 10);
            continue;
        }
        if (rc != ROV_OK && rc != ROV_INPROGRESS) {
            fprintf(stderr, "rov_cross %llu: send %llu: %s\n", (unsigned long long)app.name,
                    (unsigned long long)i, rov_status_str(rc));
            app.failed = 1;
            break;
        }
        i++;
    }
    while (!app.failed && (app.next_rx < app.count || app.delivered < app.count) &&
           now_s() < deadline)
        rov_context_wait(ctx, 10);
    rc = app.failed ? 1 : app.next_rx < app.count || app.delivered < app.count ? 3 : 0;
    if (rc == 3)
        fprintf(stderr, "rov_cross %llu: not done within %llu s: %llu of %llu received, "
                "%llu of %llu delivered\n", (unsigned long long)app.name,
                (unsigned long long)app.timeout_s, (unsigned long long)app.next_rx,
                (unsigned long long)app.count, (unsigned long long)app.delivered,
                (unsigned long long)app.count);
    printf("ROV_CROSS name=%llu rc=%d recv=%llu delivered=%llu handed_over=%d closed_own=%d "
           "elapsed_s=%.3f\n", (unsigned long long)app.name, rc,
           (unsigned long long)app.next_rx, (unsigned long long)app.delivered,
           app.handed_over, app.closed_own, now_s() - t0);
    fflush(stdout);
    /* Stay until the peer is done too: it closes what it holds, and so do
     * we on its close (or at the end of a bounded wait). */
    if (rc == 0) {
        /* The winner, from both sides; the peer closes its loser (our
         * PEER_CLOSED closes our end). */
        rov_conn_close(app.name == 2 && app.accepted ? app.accepted : app.own);
        deadline = now_s() + 10;
        while (app.conns_open > 0 && now_s() < deadline)
            rov_context_wait(ctx, 10);
    }
    rov_endpoint_destroy(ep);
    rov_context_destroy(ctx);
    free(app.large);
    return rc;
}
