/*
 * rov_stream: one side of a two-process stream test.
 *
 *   rov_stream --listen FILE  [options]   write the endpoint address to FILE,
 *                                         accept one connection
 *   rov_stream --connect FILE [options]   connect to the address in FILE
 *
 * Both sides send --count messages and receive --count messages at the same
 * time.  Message k of each direction has a size, tag (k's low 32 bits) and
 * content that both sides derive from --seed, so the receiver verifies each
 * one and reports any loss, duplicate, reorder or corruption precisely.  With
 * --switch-every MS both sides independently move the connection to another
 * rail (RAILOVER_RAILS needs two or more) at random intervals around MS.
 *
 * Exit status: 0 success, 1 verification failure, 2 library or system error,
 * 3 timeout or stall (nothing moved for --stall seconds), 64 usage.  Only the public API is used.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flow.h"
#include "railover/railover.h"

#define EXIT_VERIFY 1
#define EXIT_LIB 2
#define EXIT_TIMEOUT 3
#define EXIT_USAGE 64

#define PUMP_BATCH 256
#define STATUS_EVERY_NS (5ull * 1000000000ull)
#define ERROR_GRACE_NS (1ull * 1000000000ull) /* collect more reports, then stop */

struct app {
    /* options */
    bool listen;
    const char *file;
    uint64_t count;
    uint64_t seed;
    size_t max_size;
    unsigned switch_ms;
    bool busy_poll;
    unsigned timeout_s;
    unsigned stall_s;
    bool verbose;
    const char *role;

    rov_context_t *ctx;
    rov_endpoint_t *ep;
    rov_conn_t *conn;
    struct it_flow flow;

    bool established;      /* connector: ESTABLISHED; listener: ACCEPTED */
    bool peer_closed;
    bool closed;
    bool conn_error;
    rov_status_t error_status;
    bool have_final;
    rov_conn_stats_t final_stats;
    uint64_t unexpected;   /* events that must not happen here */
    uint64_t rail_down;

    uint64_t switch_calls, switch_started, switch_already, switch_busy, switch_events;
    uint64_t next_switch_ns;
    uint64_t rng;

    uint64_t t_start, t_done;
    uint64_t last_progress_ns; /* when anything last moved */
    uint64_t progress_sig;     /* what had moved by then */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rov_stream (--listen FILE | --connect FILE) [options]\n"
            "  --count N          messages each way (default 1000000)\n"
            "  --seed S           seed of both directions' content (default 1)\n"
            "  --max-size BYTES   largest message (default 1048576)\n"
            "  --switch-every MS  switch rails at random intervals around MS\n"
            "  --busy             busy-poll rov_progress instead of rov_context_wait\n"
            "  --timeout SEC      give up (dumping state) after SEC seconds (default 0: never)\n"
            "  --stall SEC        give up when nothing moves for SEC seconds (default 30, 0: never)\n"
            "  --verbose          report every rail switch\n"
            "Both sides must be given the same --count, --seed and --max-size.\n");
}

static uint64_t parse_u64(const char *opt, const char *s)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 0);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "rov_stream: %s: '%s' is not a non-negative integer\n", opt, s);
        exit(EXIT_USAGE);
    }
    return v;
}

static void parse_args(struct app *app, int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"connect", required_argument, NULL, 'c'},
        {"count", required_argument, NULL, 'n'},
        {"seed", required_argument, NULL, 's'},
        {"max-size", required_argument, NULL, 'm'},
        {"switch-every", required_argument, NULL, 'w'},
        {"busy", no_argument, NULL, 'b'},
        {"timeout", required_argument, NULL, 't'},
        {"stall", required_argument, NULL, 'S'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, modes = 0;

    app->count = 1000000;
    app->seed = 1;
    app->max_size = IT_MiB;
    app->stall_s = 30;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
        case 'c':
            app->listen = c == 'l';
            app->file = optarg;
            modes++;
            break;
        case 'n': app->count = parse_u64("--count", optarg); break;
        case 's': app->seed = parse_u64("--seed", optarg); break;
        case 'm': app->max_size = (size_t)parse_u64("--max-size", optarg); break;
        case 'w': app->switch_ms = (unsigned)parse_u64("--switch-every", optarg); break;
        case 'b': app->busy_poll = true; break;
        case 't': app->timeout_s = (unsigned)parse_u64("--timeout", optarg); break;
        case 'S': app->stall_s = (unsigned)parse_u64("--stall", optarg); break;
        case 'v': app->verbose = true; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(EXIT_USAGE);
        }
    }
    if (modes != 1 || optind != argc) {
        usage(stderr);
        exit(EXIT_USAGE);
    }
    if (app->max_size == 0 || app->max_size > 64 * IT_MiB) {
        fprintf(stderr, "rov_stream: --max-size must be in [1, 64 MiB]\n");
        exit(EXIT_USAGE);
    }
    app->role = app->listen ? "listener" : "connector";
}

/* ---- callbacks ------------------------------------------------------------ */

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    struct app *app = arg;
    struct it_flow *flow = rov_conn_get_user(conn);

    if (!flow) {
        fprintf(stderr, "FAIL [%s]: message (tag %" PRIu32 ", %zu bytes) on a connection "
                "the application does not know (before its ACCEPTED event?)\n", app->role,
                tag, len);
        app->unexpected++;
        return;
    }
    it_flow_recv(flow, tag, data, len);
}

static void on_event(void *arg, const rov_event_t *ev)
{
    struct app *app = arg;
    bool ours = ev->conn && ev->conn == app->conn;

    switch (ev->type) {
    case ROV_EVENT_CONN_ACCEPTED:
        if (app->listen && !app->conn) {
            app->conn = ev->conn;
            app->flow.conn = ev->conn;
            rov_conn_set_user(ev->conn, &app->flow);
            app->established = true;
            app->t_start = it_now_ns();
            return;
        }
        fprintf(stderr, "FAIL [%s]: unexpected second connection accepted; closing it\n",
                app->role);
        app->unexpected++;
        rov_conn_close(ev->conn);
        return;
    case ROV_EVENT_CONN_ESTABLISHED:
        if (ours)
            app->established = true;
        break;
    case ROV_EVENT_CONN_RAIL_SWITCH:
        app->switch_events++;
        if (app->verbose)
            fprintf(stderr, "[%s]: rail switch %d -> %d (%s)\n", app->role, ev->rail_from,
                    ev->rail_to, ev->reason ? ev->reason : "");
        return;
    case ROV_EVENT_CONN_RAIL_DOWN:
        app->rail_down++;
        fprintf(stderr, "[%s]: rail %d down: %s (%s)\n", app->role, ev->rail_from,
                rov_status_str(ev->status), ev->reason ? ev->reason : "");
        return;
    case ROV_EVENT_CONN_PEER_CLOSED:
        if (!ours)
            break;
        app->peer_closed = true;
        if (!it_flow_rx_done(&app->flow))
            it_flow_fail(&app->flow, "peer closed the connection after delivering only %"
                         PRIu64 " of %" PRIu64 " messages", app->flow.rx_next,
                         app->flow.rx_count);
        return;
    case ROV_EVENT_CONN_CLOSED:
        if (!ours)
            return; /* the extra connection we closed */
        rov_conn_stats(ev->conn, &app->final_stats); /* still valid during the call */
        app->have_final = true;
        app->closed = true;
        app->conn = NULL;
        app->flow.conn = NULL;
        return;
    case ROV_EVENT_CONN_ERROR:
        if (!ours)
            return;
        fprintf(stderr, "FAIL [%s]: connection failed: %s (%s)\n", app->role,
                rov_status_str(ev->status), ev->reason ? ev->reason : "no reason given");
        app->conn_error = true;
        app->error_status = ev->status;
        return;
    }
    if (!ours) {
        fprintf(stderr, "[%s]: event %d for an unknown connection\n", app->role, (int)ev->type);
        app->unexpected++;
    }
}

/* ---- setup ---------------------------------------------------------------- */

static int write_address(struct app *app)
{
    uint8_t blob[4096];
    size_t len = sizeof(blob);
    char tmp[4096];
    FILE *f;
    rov_status_t st = rov_endpoint_address(app->ep, blob, &len);

    if (st != ROV_OK) {
        fprintf(stderr, "rov_stream: rov_endpoint_address: %s\n", rov_status_str(st));
        return -1;
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", app->file, (long)getpid());
    f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "rov_stream: cannot create %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    if (fwrite(blob, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "rov_stream: cannot write %s: %s\n", tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, app->file) != 0) {
        fprintf(stderr, "rov_stream: cannot rename %s to %s: %s\n", tmp, app->file,
                strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int read_address(const char *file, uint8_t *blob, size_t cap, size_t *len_p)
{
    FILE *f = fopen(file, "rb");
    size_t n;

    if (!f) {
        fprintf(stderr, "rov_stream: cannot open %s: %s\n", file, strerror(errno));
        return -1;
    }
    n = fread(blob, 1, cap, f);
    if (ferror(f) || n == 0 || n == cap) {
        fprintf(stderr, "rov_stream: %s: unreadable, empty or too large\n", file);
        fclose(f);
        return -1;
    }
    fclose(f);
    *len_p = n;
    return 0;
}

static int setup(struct app *app)
{
    rov_context_params_t params = {
        .config = NULL,
        .recv_cb = on_recv,
        .event_cb = on_event,
        .arg = app,
    };
    rov_status_t st;

    st = rov_context_create(&params, &app->ctx);
    if (st != ROV_OK) {
        fprintf(stderr, "rov_stream: rov_context_create: %s (check RAILOVER_RAILS=%s)\n",
                rov_status_str(st), getenv("RAILOVER_RAILS") ? getenv("RAILOVER_RAILS") : "");
        return -1;
    }
    fprintf(stderr, "[%s]: railover %s, rails:", app->role, rov_version());
    for (int i = 0; i < rov_context_rail_count(app->ctx); i++)
        fprintf(stderr, " %d=%s", i, rov_context_rail_name(app->ctx, i));
    fputc('\n', stderr);
    if (app->switch_ms && rov_context_rail_count(app->ctx) < 2) {
        fprintf(stderr, "rov_stream: --switch-every needs two or more rails in "
                "RAILOVER_RAILS\n");
        return -1;
    }
    st = rov_endpoint_create(app->ctx, &app->ep);
    if (st != ROV_OK) {
        fprintf(stderr, "rov_stream: rov_endpoint_create: %s\n", rov_status_str(st));
        return -1;
    }
    if (app->listen)
        return write_address(app);

    uint8_t blob[4096];
    size_t len;

    if (read_address(app->file, blob, sizeof(blob), &len))
        return -1;
    app->t_start = it_now_ns();
    st = rov_conn_connect(app->ep, blob, len, &app->conn);
    if (st != ROV_OK && st != ROV_INPROGRESS) {
        fprintf(stderr, "rov_stream: rov_conn_connect: %s\n", rov_status_str(st));
        return -1;
    }
    app->flow.conn = app->conn;
    rov_conn_set_user(app->conn, &app->flow);
    return 0;
}

/* ---- main loop ------------------------------------------------------------ */

static void schedule_switch(struct app *app, uint64_t now)
{
    /* uniform in [MS/2, 3MS/2] */
    uint64_t span = (uint64_t)app->switch_ms * 1000000ull;

    app->next_switch_ns = now + span / 2 + it_rand(&app->rng) % (span + 1);
}

static void maybe_switch(struct app *app, uint64_t now)
{
    int n, cur, to;
    rov_status_t st;

    if (!app->switch_ms || !app->conn || !app->established || now < app->next_switch_ns)
        return;
    schedule_switch(app, now);
    n = rov_context_rail_count(app->ctx);
    cur = rov_conn_rail(app->conn);
    to = (int)(((uint64_t)(cur < 0 ? 0 : cur) + 1 + it_rand(&app->rng) % (uint64_t)(n - 1)) %
               (uint64_t)n);
    st = rov_conn_switch(app->conn, to, "rov_stream --switch-every");
    app->switch_calls++;
    switch (st) {
    case ROV_INPROGRESS: app->switch_started++; break;
    case ROV_OK: app->switch_already++; break;
    case ROV_ERR_BUSY: app->switch_busy++; break;
    default:
        it_flow_fail(&app->flow, "rov_conn_switch(rail %d -> %d) failed: %s", cur, to,
                     rov_status_str(st));
        break;
    }
}

static void progress(struct app *app, bool idle)
{
    if (app->busy_poll || !idle)
        rov_progress(app->ctx);
    else
        rov_context_wait(app->ctx, 10);
}

static void print_status(const struct app *app, const char *what)
{
    fprintf(stderr, "[%s]: %s after %.1f s\n", app->role, what,
            (double)(it_now_ns() - app->t_start) / 1e9);
    it_flow_dump(&app->flow);
    fprintf(stderr, "[%s]: established %d, peer closed %d, closed %d, switch calls %" PRIu64
            " (started %" PRIu64 ", busy %" PRIu64 "), switch events %" PRIu64 "\n",
            app->role, app->established, app->peer_closed, app->closed, app->switch_calls,
            app->switch_started, app->switch_busy, app->switch_events);
}

/* A number that changes whenever the stream or the close moves on. */
static uint64_t progress_signature(const struct app *app)
{
    const struct it_flow *f = &app->flow;
    uint64_t v[] = {f->tx_next, f->tx_inflight, f->tx_notify_pending, f->rx_next,
                    app->peer_closed, app->closed, app->established};
    uint64_t h = 0;

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        h = it_mix64(h ^ v[i]) + i;
    return h;
}

/* 0 while running, else the exit status to leave with. */
static int check_abort(struct app *app, uint64_t now, uint64_t deadline)
{
    uint64_t sig = progress_signature(app);

    if (sig != app->progress_sig || !app->last_progress_ns) {
        app->progress_sig = sig;
        app->last_progress_ns = now;
    } else if (app->stall_s && now - app->last_progress_ns > app->stall_s * 1000000000ull) {
        char what[64];

        snprintf(what, sizeof(what), "STALLED (nothing moved for %u s)", app->stall_s);
        print_status(app, what);
        return EXIT_TIMEOUT;
    }
    if (app->conn_error)
        return EXIT_LIB;
    if (app->flow.failed)
        return app->flow.errors ? EXIT_VERIFY : EXIT_LIB;
    if ((app->flow.errors || app->unexpected) &&
        now - (app->flow.errors ? app->flow.first_error_ns : 0) > ERROR_GRACE_NS)
        return EXIT_VERIFY;
    if (deadline && now > deadline) {
        print_status(app, "TIMEOUT");
        return EXIT_TIMEOUT;
    }
    return 0;
}

static int run(struct app *app)
{
    uint64_t start = it_now_ns(), deadline = 0, last_status = start;
    int rc;

    if (app->timeout_s)
        deadline = start + (uint64_t)app->timeout_s * 1000000000ull;
    app->rng = it_mix64(app->seed ^ (uint64_t)getpid() ^ start);
    schedule_switch(app, start);

    if (app->listen) {
        while (!app->conn) {
            rov_context_wait(app->ctx, 100);
            if ((rc = check_abort(app, it_now_ns(), deadline)))
                return rc;
        }
        fprintf(stderr, "[%s]: connection accepted\n", app->role);
    }

    while (!(it_flow_tx_done(&app->flow) && it_flow_rx_done(&app->flow))) {
        uint64_t now = it_now_ns();
        unsigned sent = it_flow_pump(&app->flow, PUMP_BATCH);

        maybe_switch(app, now);
        progress(app, sent == 0);
        if (app->closed) {
            fprintf(stderr, "FAIL [%s]: connection closed before the stream finished\n",
                    app->role);
            return EXIT_LIB;
        }
        if ((rc = check_abort(app, now, deadline)))
            return rc;
        if (now - last_status > STATUS_EVERY_NS) {
            print_status(app, "status");
            last_status = now;
        }
    }
    app->t_done = it_now_ns();
    fprintf(stderr, "[%s]: stream complete after %.3f s, closing\n", app->role,
            (double)(app->t_done - app->t_start) / 1e9);

    /* Snapshot before close, in case the library gives no CLOSED event. */
    rov_conn_stats(app->conn, &app->final_stats);
    rov_status_t st = rov_conn_close(app->conn);

    if (st == ROV_OK) {
        fprintf(stderr, "FAIL [%s]: rov_conn_close returned ROV_OK (freed at once) on a "
                "healthy connection; expected ROV_INPROGRESS\n", app->role);
        app->conn = NULL;
        app->flow.conn = NULL;
        return EXIT_LIB;
    }
    if (st != ROV_INPROGRESS) {
        fprintf(stderr, "FAIL [%s]: rov_conn_close: %s\n", app->role, rov_status_str(st));
        return EXIT_LIB;
    }
    while (!app->closed) {
        progress(app, true);
        if ((rc = check_abort(app, it_now_ns(), deadline)))
            return rc;
    }
    return 0;
}

static int check_final(struct app *app)
{
    const rov_conn_stats_t *s = &app->final_stats;
    struct it_flow *f = &app->flow;
    int bad = 0;

    if (!app->have_final) {
        fprintf(stderr, "[%s]: no ROV_EVENT_CONN_CLOSED seen; statistics from before close\n",
                app->role);
        return 0;
    }
    if (s->msgs_sent != f->tx_next || s->bytes_sent != f->tx_bytes) {
        it_flow_fail(f, "library counts %" PRIu64 " messages / %" PRIu64 " bytes sent, the "
                     "application sent %" PRIu64 " / %" PRIu64, s->msgs_sent, s->bytes_sent,
                     f->tx_next, f->tx_bytes);
        bad = 1;
    }
    if (s->msgs_recv != f->rx_next || s->bytes_recv != f->rx_bytes) {
        it_flow_fail(f, "library counts %" PRIu64 " messages / %" PRIu64 " bytes received, "
                     "the application got %" PRIu64 " / %" PRIu64, s->msgs_recv, s->bytes_recv,
                     f->rx_next, f->rx_bytes);
        bad = 1;
    }
    if (s->retained_msgs || s->retained_bytes) {
        it_flow_fail(f, "connection closed with %" PRIu64 " messages / %" PRIu64
                     " bytes still retained", s->retained_msgs, s->retained_bytes);
        bad = 1;
    }
    return bad;
}

static void summary(const struct app *app, int rc)
{
    const rov_conn_stats_t *s = &app->final_stats;
    const struct it_flow *f = &app->flow;
    double secs = (double)((app->t_done ? app->t_done : it_now_ns()) - app->t_start) / 1e9;
    char b1[32], b2[32], b3[32];

    if (secs <= 0)
        secs = 1e-9;
    fprintf(stderr, "[%s]: sent %" PRIu64 " msgs (%s), received %" PRIu64 " msgs (%s) in %.3f s"
            ": %.0f msgs/s and %.1f MiB/s each way\n",
            app->role, f->tx_next, it_bytes_str(f->tx_bytes, b1, sizeof(b1)), f->rx_next,
            it_bytes_str(f->rx_bytes, b2, sizeof(b2)), secs, (double)f->rx_next / secs,
            (double)f->rx_bytes / secs / (1024.0 * 1024.0));
    fprintf(stderr, "[%s]: sends: %" PRIu64 " zero-copy, %" PRIu64 " copied, %" PRIu64
            " delivery notifications, %" PRIu64 " ROV_ERR_AGAIN\n",
            app->role, f->tx_zcopy, f->tx_copied, f->tx_notified, f->tx_again);
    fprintf(stderr, "[%s]: stats: resent %" PRIu64 " msgs (%s), dups_dropped %" PRIu64
            ", reordered %" PRIu64 ", switches %" PRIu64 ", window_full %" PRIu64
            ", acks sent/recv %" PRIu64 "/%" PRIu64 ", rail %d\n",
            app->role, s->msgs_resent, it_bytes_str(s->bytes_resent, b3, sizeof(b3)),
            s->dups_dropped, s->reordered, s->switches, s->window_full, s->acks_sent,
            s->acks_recv, s->rail);
    if (app->switch_ms)
        fprintf(stderr, "[%s]: switch calls %" PRIu64 ": %" PRIu64 " started, %" PRIu64
                " already there, %" PRIu64 " busy; %" PRIu64 " RAIL_SWITCH events, %" PRIu64
                " RAIL_DOWN events\n",
                app->role, app->switch_calls, app->switch_started, app->switch_already,
                app->switch_busy, app->switch_events, app->rail_down);
    /* one machine-readable line, read by run_pair.sh */
    printf("ROV_STREAM_RESULT role=%s rc=%d seed=%" PRIu64 " count=%" PRIu64 " sent=%" PRIu64
           " sent_bytes=%" PRIu64 " recv=%" PRIu64 " recv_bytes=%" PRIu64 " elapsed_s=%.3f"
           " resent=%" PRIu64 " dups_dropped=%" PRIu64 " switches=%" PRIu64
           " switch_events=%" PRIu64 " failures=%" PRIu64 "\n",
           app->role, rc, app->seed, app->count, f->tx_next, f->tx_bytes, f->rx_next,
           f->rx_bytes, secs, s->msgs_resent, s->dups_dropped, s->switches, app->switch_events,
           f->errors + app->unexpected);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    struct app app = {0};
    uint64_t seed_l, seed_c;
    int rc;

    parse_args(&app, argc, argv);
    setvbuf(stderr, NULL, _IOLBF, 0);
    /* each direction has its own stream, both derived from --seed */
    seed_l = it_mix64(app.seed ^ 0x6c697374656e6572ull);
    seed_c = it_mix64(app.seed ^ 0x636f6e6e6563746full);
    if (it_flow_init(&app.flow, app.role, app.listen ? seed_l : seed_c,
                     app.listen ? seed_c : seed_l, app.count, app.count, app.max_size))
        return EXIT_LIB;
    fprintf(stderr, "[%s]: %" PRIu64 " messages each way, seed %" PRIu64 ", max %zu bytes%s\n",
            app.role, app.count, app.seed, app.max_size,
            app.switch_ms ? ", switching rails" : "");

    if (setup(&app))
        rc = EXIT_LIB;
    else
        rc = run(&app);
    if (rc == 0 && check_final(&app))
        rc = EXIT_VERIFY;
    if (rc == 0 && (app.flow.errors || app.unexpected))
        rc = EXIT_VERIFY;
    if (rc != 0 && rc != EXIT_TIMEOUT)
        print_status(&app, "FAILED");
    if (!app.have_final && app.conn)
        rov_conn_stats(app.conn, &app.final_stats); /* still valid: not closed */
    summary(&app, rc);

    if (app.conn_error && app.conn) {
        rov_conn_close(app.conn); /* frees a failed connection */
        app.conn = NULL;
        app.flow.conn = NULL;
    }
    app.flow.draining = true;
    if (app.ep)
        rov_endpoint_destroy(app.ep);
    if (app.ctx)
        rov_context_destroy(app.ctx); /* cancels what is left; callbacks may run */
    app.flow.conn = NULL;
    it_flow_free(&app.flow);
    fprintf(stderr, "[%s]: %s (exit %d)\n", app.role, rc ? "FAILED" : "OK", rc);
    return rc;
}
