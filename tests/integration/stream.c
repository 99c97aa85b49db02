/*
 * rov_stream: one side of a two-process stream test.
 *
 *   rov_stream --listen FILE  [options]   write the endpoint address to FILE,
 *                                         accept --conns connections
 *   rov_stream --connect FILE [options]   open --conns connections to the
 *                                         address in FILE (one endpoint)
 *
 * On every connection both sides send and receive at the same time.  Message
 * k of each direction of connection i has a size, tag (k's low 32 bits) and
 * content that both sides derive from (--seed, i), so the receiver verifies
 * each one and reports any loss, duplicate, reorder or corruption precisely.
 * The listener cannot tell its accepted connections apart, so the connector's
 * first message on connection i is a hello (tag HELLO_TAG | i) naming i and
 * the options both sides must share; it is not part of the checked stream.
 *
 * Fixed mode (default): each direction of each connection carries --count
 * messages; a side closes a connection once it has sent and received them
 * all.  Continuous mode (--stop-file PATH): each side sends until PATH exists
 * (or the peer has closed; --count, if given, caps the number sent), then
 * closes.  rov_conn_close() delivers everything sent before the peer learns
 * of the close, so what a receiver has when the peer's close arrives is the
 * whole stream; the ROV_STREAM_CONN lines let a driver check that each
 * side's sent equals the other side's recv.
 *
 * With --switch-every MS both sides independently move each connection to
 * another rail (RAILOVER_RAILS needs two or more) at random intervals around
 * MS.
 *
 * Output: stderr is for people.  stdout gets, once the run is over,
 *
 *   ROV_STREAM_RESULT role=R rc=N seed=S count=C sent=N sent_bytes=N recv=N
 *       recv_bytes=N elapsed_s=F resent=N dups_dropped=N switches=N
 *       switch_events=N failures=N
 *   ROV_STREAM_CONN role=R conn=I rc=N sent=N sent_bytes=N recv=N recv_bytes=N
 *       resent=N dups_dropped=N switches=N rail=N reasons=NAME:N,... errors=N
 *
 * each on one line: RESULT once, with totals over all connections (run_pair.sh
 * reads it; count is per connection, 18446744073709551615 for no cap), then
 * one CONN line per connection in index order (reasons lists the non-zero
 * rov_conn_stats_t.reasons[], empty if none; rail is -1 when unknown).
 * Library figures are taken at ROV_EVENT_CONN_CLOSED, so they are final.
 *
 * --events FILE appends one JSON object per line (flushed at once) for every
 * connection event, with t = CLOCK_MONOTONIC in ns, side and conn (the index
 * i, -1 while unknown):
 *
 *   {"t":T,"side":"listener","conn":0,"ev":"switch","from":0,"to":1,
 *    "reason":"failover.stall","text":"..."}
 *   {..,"ev":"rail_down","rail":0,"status":"...","reason":"...","text":"..."}
 *   {..,"ev":"error","status":"...","text":"..."}
 *   {..,"ev":"first_rx","rail":R}   first delivery after a switch event
 *   {..,"ev":"established","rail":R}   the rail it connected on
 *   {..,"ev":"accepted"|"peer_closed"|"closed"}
 *   {..,"ev":"start"}   the program's start: t_s = 0 of --rate-csv (conn -1)
 *   {..,"ev":"stop"}    the stop file was seen (conn -1)
 *
 * --rate-csv FILE gets the header t_s,side,conn,rail,rx_msgs,rx_bytes,
 * rx_mb_s,tx_msgs,tx_bytes and, every --rate-ms and once at the end, one row
 * per connection with the interval's counts (rail -1: no open connection).
 *
 * Exit status: 0 success on every connection, 1 verification failure (any
 * connection), 2 library or system error, 3 timeout or stall (nothing moved
 * for --stall seconds), 64 usage; a CONN line's rc is the status that
 * connection alone would give.  Only the public API is used.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
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
#define MAX_CONNS 1024
#define MAX_REPORTS 20 /* failures outside the flows printed; the rest are counted */
#define STATUS_EVERY_NS (5ull * 1000000000ull)
#define ERROR_GRACE_NS (1ull * 1000000000ull) /* collect more reports, then stop */
#define STOP_POLL_NS (10ull * 1000000ull)     /* how often to look for the stop file */

/* The connector's first message on connection i: tag HELLO_TAG | i, payload
 * (little-endian) u32 index, u32 conns, u32 flags, u32 zero, u64 seed,
 * u64 count, u64 max_size. */
#define HELLO_TAG 0xC0DE0000u
#define HELLO_TAG_MASK 0xFFFF0000u
#define HELLO_LEN 40
#define HELLO_CONTINUOUS 1u /* --stop-file */

struct hello {
    uint32_t index, conns, flags;
    uint64_t seed, count, max_size;
};

enum sconn_state {
    SC_HELLO,   /* listener: accepted, the connector's hello not yet here */
    SC_STREAM,  /* sending and receiving the flow */
    SC_CLOSING, /* rov_conn_close() called, waiting for ROV_EVENT_CONN_CLOSED */
    SC_DONE,    /* closed (final statistics taken) or failed */
};

struct app;

/* The application's side of one connection. */
struct sconn {
    struct app *app;
    char name[48];
    int index;                /* i; -1 on the listener until the hello */
    int announced;            /* listener: i as the connect-time data gave it, or -1
                               * (events before the hello are attributed to it) */
    rov_conn_t *conn;         /* NULL once closed */
    enum sconn_state state;
    struct it_flow flow;      /* set up once index is known */

    bool hello_sent;          /* connector */
    bool established;         /* connector: ESTABLISHED; listener: ACCEPTED */
    bool peer_closed;
    bool closed;              /* CLOSED seen: final_stats are final */
    bool conn_error;          /* CONN_ERROR seen: the handle is still to be freed */
    bool lib_failure;         /* exit status 2 */
    bool first_rx_pending;    /* a RAIL_SWITCH event not yet followed by a delivery */
    rov_conn_stats_t final_stats;
    uint64_t unexpected;      /* failures outside the flow (hello, events) */
    uint64_t switch_events, rail_down;
    uint64_t next_switch_ns;  /* 0: not scheduled yet */
    uint64_t mark_tx_msgs, mark_tx_bytes, mark_rx_msgs, mark_rx_bytes; /* at the last CSV row */
};

struct app {
    /* options */
    bool listen;
    const char *file;
    uint64_t count;           /* per direction and connection; IT_UNLIMITED: no cap */
    bool count_given;
    uint64_t seed;
    size_t max_size;
    unsigned nconns;
    unsigned switch_ms;
    bool busy_poll;
    int wait_ms;              /* rov_context_wait() timeout when idle */
    bool in_wait;             /* inside rov_context_wait() */
    uint64_t wait_cb_ns;      /* when a callback last ran inside it (0: none) */
    bool late_wake;           /* a wait slept on after its callbacks (a stall) */
    unsigned timeout_s;
    unsigned stall_s;
    unsigned linger_s;        /* --linger: a failed run keeps serving this long */
    const char *compute_file; /* --compute-file: compute while it exists */
    const char *stop_file;
    const char *events_path;
    const char *rate_path;
    unsigned rate_ms;
    const char *pid_path;
    bool quiet_status;
    bool renew_buffers;
    bool listener_second;     /* the listener closes only on the peer's CLOSE */
    bool verbose;
    const char *role;

    rov_context_t *ctx;
    rov_endpoint_t *ep;
    struct sconn *conns;      /* connector: by index; listener: in accept order */
    unsigned nrecs;           /* entries of conns in use */
    bool stopping;            /* the stop file exists */
    bool tearing_down;        /* destroying the context: events are expected */
    uint64_t next_stop_poll_ns;
    uint64_t unexpected;      /* failures not tied to a known connection */
    uint64_t first_unexpected_ns;
    uint64_t fail_reports;    /* of fail(), printed up to MAX_REPORTS */

    FILE *events, *rate;
    uint64_t last_rate_ns, next_rate_ns;

    uint64_t switch_calls, switch_started, switch_already, switch_busy;
    uint64_t rng;

    uint64_t t0;              /* program start */
    uint64_t t_start, t_done; /* first connection made / last stream finished */
    uint64_t last_progress_ns; /* when anything last moved */
    uint64_t progress_sig;     /* what had moved by then */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rov_stream (--listen FILE | --connect FILE) [options]\n"
            "  --listen FILE      write the endpoint address to FILE, accept --conns connections\n"
            "  --connect FILE     open --conns connections to the address in FILE\n"
            "  --count N          messages each way per connection (default 1000000); with\n"
            "                     --stop-file, a cap on the number sent (default none)\n"
            "  --seed S           seed of every connection's content (default 1)\n"
            "  --max-size BYTES   largest message (default 1048576)\n"
            "  --conns N          connections, all pumped by one loop (default 1, max %d)\n"
            "  --switch-every MS  switch each connection's rail at random intervals around MS\n"
            "  --busy             busy-poll rov_progress instead of rov_context_wait\n"
            "  --wait-ms MS       when idle, sleep in rov_context_wait up to MS (default 10):\n"
            "                     with a long wait, only the library's wake-up moves things\n"
            "  --listener-closes-second  the listener closes a finished connection\n"
            "                     only once the peer's CLOSE is here (PEER_CLOSED): its\n"
            "                     CLOSE goes second, as a server's does\n"
            "  --renew-buffers    after each zero-copy send, put new pages\n"
            "                     under its buffer at the same address (munmap + mmap, or\n"
            "                     madvise DONTNEED, in turn): stale registrations send poison\n"
            "  --timeout SEC      give up (dumping state) after SEC seconds (default 0: never)\n"
            "  --stall SEC        give up when nothing moves for SEC seconds (default 30, 0: never;\n"
            "                     waiting for --stop-file with --count all sent is no stall);\n"
            "                     fail when rov_context_wait returns SEC seconds after it ran\n"
            "                     a callback\n"
            "  --stop-file PATH   continuous mode: send until PATH exists, then close; the\n"
            "                     receiver takes what it has at the peer's close as the stream\n"
            "  --events FILE      append one JSON line per connection event (CLOCK_MONOTONIC ns)\n"
            "  --rate-csv FILE    write per-interval throughput, one CSV row per connection\n"
            "  --rate-ms MS       --rate-csv interval (default 50)\n"
            "  --pid-file PATH    write the process id to PATH\n"
            "  --linger SEC       after a failed run, keep calling progress (the control\n"
            "                     socket answers) until --stop-file exists or SEC seconds\n"
            "  --compute-file PATH  while PATH exists, compute: call no rov_* function (a\n"
            "                     checkpoint stage must complete meanwhile, by the library's\n"
            "                     progress helper)\n"
            "  --quiet-status     no status dump every 5 s (dumps on failure remain)\n"
            "  --verbose          report every rail switch\n"
            "Both sides must be given the same --count (unless --stop-file), --seed,\n"
            "--max-size, --conns and --stop-file or not; the hello checks it.\n"
            "stdout: ROV_STREAM_RESULT (totals) and one ROV_STREAM_CONN line per connection.\n"
            "Exit status: 0 ok, 1 verification failure, 2 library or system error,\n"
            "3 timeout or stall, 64 usage.\n",
            MAX_CONNS);
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
    enum {
        OPT_CONNS = 256, OPT_STOP_FILE, OPT_EVENTS, OPT_RATE_CSV, OPT_RATE_MS, OPT_PID_FILE,
        OPT_LINGER, OPT_COMPUTE,
        OPT_QUIET_STATUS, OPT_RENEW, OPT_LISTENER_SECOND,
    };
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"connect", required_argument, NULL, 'c'},
        {"count", required_argument, NULL, 'n'},
        {"seed", required_argument, NULL, 's'},
        {"max-size", required_argument, NULL, 'm'},
        {"conns", required_argument, NULL, OPT_CONNS},
        {"switch-every", required_argument, NULL, 'w'},
        {"busy", no_argument, NULL, 'b'},
        {"wait-ms", required_argument, NULL, 'W'},
        {"timeout", required_argument, NULL, 't'},
        {"stall", required_argument, NULL, 'S'},
        {"stop-file", required_argument, NULL, OPT_STOP_FILE},
        {"events", required_argument, NULL, OPT_EVENTS},
        {"rate-csv", required_argument, NULL, OPT_RATE_CSV},
        {"rate-ms", required_argument, NULL, OPT_RATE_MS},
        {"linger", required_argument, NULL, OPT_LINGER},
        {"compute-file", required_argument, NULL, OPT_COMPUTE},
        {"pid-file", required_argument, NULL, OPT_PID_FILE},
        {"quiet-status", no_argument, NULL, OPT_QUIET_STATUS},
        {"renew-buffers", no_argument, NULL, OPT_RENEW},
        {"listener-closes-second", no_argument, NULL, OPT_LISTENER_SECOND},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t conns = 1, rate_ms = 50;
    int c, modes = 0;

    app->count = 1000000;
    app->seed = 1;
    app->max_size = IT_MiB;
    app->stall_s = 30;
    app->wait_ms = 10;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
        case 'c':
            app->listen = c == 'l';
            app->file = optarg;
            modes++;
            break;
        case 'n':
            app->count = parse_u64("--count", optarg);
            app->count_given = true;
            break;
        case 's': app->seed = parse_u64("--seed", optarg); break;
        case 'm': app->max_size = (size_t)parse_u64("--max-size", optarg); break;
        case OPT_CONNS: conns = parse_u64("--conns", optarg); break;
        case 'w': app->switch_ms = (unsigned)parse_u64("--switch-every", optarg); break;
        case 'b': app->busy_poll = true; break;
        case 'W': {
            uint64_t ms = parse_u64("--wait-ms", optarg);

            if (ms > INT_MAX) {
                fprintf(stderr, "rov_stream: --wait-ms: %" PRIu64 " exceeds %d\n", ms, INT_MAX);
                exit(EXIT_USAGE);
            }
            app->wait_ms = (int)ms;
            break;
        }
        case 't': app->timeout_s = (unsigned)parse_u64("--timeout", optarg); break;
        case 'S': app->stall_s = (unsigned)parse_u64("--stall", optarg); break;
        case OPT_STOP_FILE: app->stop_file = optarg; break;
        case OPT_EVENTS: app->events_path = optarg; break;
        case OPT_RATE_CSV: app->rate_path = optarg; break;
        case OPT_RATE_MS: rate_ms = parse_u64("--rate-ms", optarg); break;
        case OPT_PID_FILE: app->pid_path = optarg; break;
        case OPT_LINGER: app->linger_s = (unsigned)parse_u64("--linger", optarg); break;
        case OPT_COMPUTE: app->compute_file = optarg; break;
        case OPT_QUIET_STATUS: app->quiet_status = true; break;
        case OPT_RENEW: app->renew_buffers = true; break;
        case OPT_LISTENER_SECOND: app->listener_second = true; break;
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
    if (conns == 0 || conns > MAX_CONNS) {
        fprintf(stderr, "rov_stream: --conns must be in [1, %d]\n", MAX_CONNS);
        exit(EXIT_USAGE);
    }
    if (rate_ms == 0 || rate_ms > 3600000) {
        fprintf(stderr, "rov_stream: --rate-ms must be in [1, 3600000]\n");
        exit(EXIT_USAGE);
    }
    app->nconns = (unsigned)conns;
    app->rate_ms = (unsigned)rate_ms;
    if (app->stop_file && !app->count_given)
        app->count = IT_UNLIMITED;
    app->role = app->listen ? "listener" : "connector";
}

/* ---- machine-readable output --------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* Start an event line; NULL when there is no --events file.  Fields follow
 * with ev_int()/ev_str(), then ev_end(). */
static FILE *ev_begin(const struct app *app, const struct sconn *sc, const char *ev)
{
    FILE *f = app->events;

    if (!f)
        return NULL;
    fprintf(f, "{\"t\":%" PRIu64 ",\"side\":\"%s\",\"conn\":%d,\"ev\":\"%s\"", it_now_ns(),
            app->role, !sc ? -1 : sc->index >= 0 ? sc->index : sc->announced, ev);
    return f;
}

static void ev_int(FILE *f, const char *key, long long v)
{
    fprintf(f, ",\"%s\":%lld", key, v);
}

static void ev_str(FILE *f, const char *key, const char *v)
{
    fprintf(f, ",\"%s\":", key);
    json_str(f, v);
}

/* Lines leave in batches of whole lines, EV_BATCH at most (and at every
 * progress call, progress()), far below the stream's buffer (EV_BUF): each
 * batch in one write(), which O_APPEND keeps whole when both sides share
 * the file.  A flush per line cost a fifth of the time in which a link's
 * failure moved 1,024 connections (bench/failover-scale.py). */
#define EV_BUF (64 * 1024)
#define EV_BATCH 32 /* lines, each well under 1 KiB */

static void ev_end(FILE *f)
{
    static unsigned lines;

    fputs("}\n", f);
    if (++lines >= EV_BATCH) {
        fflush(f);
        lines = 0;
    }
}

static void ev_simple(const struct app *app, const struct sconn *sc, const char *ev)
{
    FILE *f = ev_begin(app, sc, ev);

    if (f)
        ev_end(f);
}

static struct sconn *sconn_by_index(const struct app *app, int index)
{
    for (unsigned r = 0; r < app->nrecs; r++)
        if (app->conns[r].index == index)
            return &app->conns[r];
    return NULL;
}

/* One CSV row per connection with the counts since the last row. */
static void rate_rows(struct app *app, uint64_t now)
{
    double interval = (double)(now - app->last_rate_ns) / 1e9;

    if (interval <= 0)
        return;
    for (unsigned i = 0; i < app->nconns; i++) {
        struct sconn *sc = sconn_by_index(app, (int)i);
        uint64_t tx_msgs = 0, tx_bytes = 0, rx_msgs = 0, rx_bytes = 0;
        int rail = -1;

        if (sc) {
            const struct it_flow *fl = &sc->flow;

            tx_msgs = fl->tx_next - sc->mark_tx_msgs;
            tx_bytes = fl->tx_bytes - sc->mark_tx_bytes;
            rx_msgs = fl->rx_next - sc->mark_rx_msgs;
            rx_bytes = fl->rx_bytes - sc->mark_rx_bytes;
            sc->mark_tx_msgs = fl->tx_next;
            sc->mark_tx_bytes = fl->tx_bytes;
            sc->mark_rx_msgs = fl->rx_next;
            sc->mark_rx_bytes = fl->rx_bytes;
            if (sc->conn)
                rail = rov_conn_rail(sc->conn);
        }
        fprintf(app->rate, "%.6f,%s,%u,%d,%" PRIu64 ",%" PRIu64 ",%.3f,%" PRIu64 ",%" PRIu64 "\n",
                (double)(now - app->t0) / 1e9, app->role, i, rail, rx_msgs, rx_bytes,
                (double)rx_bytes / interval / 1e6, tx_msgs, tx_bytes);
    }
    fflush(app->rate);
    app->last_rate_ns = now;
}

static void rate_tick(struct app *app, uint64_t now)
{
    if (!app->rate || now < app->next_rate_ns)
        return;
    rate_rows(app, now);
    app->next_rate_ns += (uint64_t)app->rate_ms * 1000000ull;
    if (app->next_rate_ns <= now) /* fell behind: skip, do not burst */
        app->next_rate_ns = now + (uint64_t)app->rate_ms * 1000000ull;
}

static int open_outputs(struct app *app)
{
    if (app->pid_path) {
        char tmp[4096];
        FILE *f;

        snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", app->pid_path, (long)getpid());
        f = fopen(tmp, "w");
        if (!f || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f) != 0 ||
            rename(tmp, app->pid_path) != 0) {
            fprintf(stderr, "rov_stream: cannot write %s: %s\n", app->pid_path, strerror(errno));
            unlink(tmp);
            return -1;
        }
    }
    if (app->events_path) {
        app->events = fopen(app->events_path, "a");
        if (!app->events) {
            fprintf(stderr, "rov_stream: cannot open %s: %s\n", app->events_path,
                    strerror(errno));
            return -1;
        }
        setvbuf(app->events, NULL, _IOFBF, EV_BUF);
        ev_simple(app, NULL, "start");
    }
    if (app->rate_path) {
        app->rate = fopen(app->rate_path, "w");
        if (!app->rate) {
            fprintf(stderr, "rov_stream: cannot create %s: %s\n", app->rate_path,
                    strerror(errno));
            return -1;
        }
        fputs("t_s,side,conn,rail,rx_msgs,rx_bytes,rx_mb_s,tx_msgs,tx_bytes\n", app->rate);
        fflush(app->rate);
        app->last_rate_ns = app->t0;
        app->next_rate_ns = app->t0 + (uint64_t)app->rate_ms * 1000000ull;
    }
    return 0;
}

static void close_outputs(struct app *app)
{
    if (app->events)
        fclose(app->events);
    if (app->rate)
        fclose(app->rate);
    app->events = app->rate = NULL;
}

/* ---- connections ---------------------------------------------------------- */

/* A failure that is not the flow's: counted, and reported like the flow's. */
static void fail(struct app *app, struct sconn *sc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(struct app *app, struct sconn *sc, const char *fmt, ...)
{
    va_list ap;

    if (!app->first_unexpected_ns)
        app->first_unexpected_ns = it_now_ns();
    if (sc)
        sc->unexpected++;
    else
        app->unexpected++;
    if (++app->fail_reports > MAX_REPORTS) {
        if (app->fail_reports == MAX_REPORTS + 1)
            fprintf(stderr, "FAIL [%s]: further failures outside the streams are counted, "
                    "not printed\n", app->role);
        return;
    }
    fprintf(stderr, "FAIL [%s]: ", sc ? sc->name : app->role);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Names in reports: the role alone when there is one connection. */
static void sconn_name(struct sconn *sc, const char *what, unsigned n)
{
    const struct app *app = sc->app;

    if (app->nconns == 1)
        snprintf(sc->name, sizeof(sc->name), "%s", app->role);
    else
        snprintf(sc->name, sizeof(sc->name), "%s %s%u", app->role, what, n);
}

/* Each connection's two directions have their own content; connection 0's
 * is what rov_stream has always sent. */
static uint64_t stream_seed(uint64_t seed, bool from_listener, unsigned index)
{
    uint64_t dir = from_listener ? 0x6c697374656e6572ull : 0x636f6e6e6563746full;

    return it_mix64(seed ^ dir ^ ((uint64_t)index * 0x9e3779b97f4a7c15ull));
}

/* The connection is connection `index`: set up its flow and start streaming. */
static int sconn_start(struct sconn *sc, unsigned index)
{
    struct app *app = sc->app;
    uint64_t from_l = stream_seed(app->seed, true, index);
    uint64_t from_c = stream_seed(app->seed, false, index);
    uint64_t rx_count = app->stop_file ? IT_UNLIMITED : app->count;

    sc->index = (int)index;
    sconn_name(sc, "conn ", index);
    if (it_flow_init(&sc->flow, sc->name, app->listen ? from_l : from_c,
                     app->listen ? from_c : from_l, app->count, rx_count, app->max_size))
        return -1;
    sc->flow.conn = sc->conn;
    sc->flow.renew_buffers = app->renew_buffers;
    sc->state = SC_STREAM;
    return 0;
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int b = 0; b < bytes; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;

    for (int b = 0; b < bytes; b++)
        v |= (uint64_t)p[b] << (8 * b);
    return v;
}

static void hello_encode(const struct hello *h, uint8_t buf[HELLO_LEN])
{
    put_le(buf, h->index, 4);
    put_le(buf + 4, h->conns, 4);
    put_le(buf + 8, h->flags, 4);
    put_le(buf + 12, 0, 4);
    put_le(buf + 16, h->seed, 8);
    put_le(buf + 24, h->count, 8);
    put_le(buf + 32, h->max_size, 8);
}

static void hello_decode(const uint8_t buf[HELLO_LEN], struct hello *h)
{
    h->index = (uint32_t)get_le(buf, 4);
    h->conns = (uint32_t)get_le(buf + 4, 4);
    h->flags = (uint32_t)get_le(buf + 8, 4);
    h->seed = get_le(buf + 16, 8);
    h->count = get_le(buf + 24, 8);
    h->max_size = get_le(buf + 32, 8);
}

/* Connector: the hello, before the flow's first message.  0 once sent. */
static int send_hello(struct sconn *sc)
{
    struct app *app = sc->app;
    struct hello h = {
        .index = (uint32_t)sc->index,
        .conns = app->nconns,
        .flags = app->stop_file ? HELLO_CONTINUOUS : 0,
        .seed = app->seed,
        .count = app->count,
        .max_size = app->max_size,
    };
    rov_send_params_t params = {.flags = ROV_SEND_COPY};
    uint8_t buf[HELLO_LEN];
    rov_status_t st;

    hello_encode(&h, buf);
    st = rov_conn_send(sc->conn, HELLO_TAG | h.index, buf, sizeof(buf), &params);
    if (st == ROV_ERR_AGAIN)
        return -1;
    if (st != ROV_OK) {
        it_flow_fail(&sc->flow, "rov_conn_send of the hello failed: %s%s", rov_status_str(st),
                     st == ROV_INPROGRESS ? " (a ROV_SEND_COPY send must return ROV_OK)" : "");
        sc->flow.failed = true;
        return -1;
    }
    sc->hello_sent = true;
    return 0;
}

/* Listener: the first message of an accepted connection must be the hello. */
static void recv_hello(struct sconn *sc, uint32_t tag, const void *data, size_t len)
{
    struct app *app = sc->app;
    struct hello h;
    unsigned index = tag & ~HELLO_TAG_MASK;
    bool continuous = app->stop_file != NULL;

    if ((tag & HELLO_TAG_MASK) != HELLO_TAG || len != HELLO_LEN) {
        fail(app, sc, "message (tag 0x%08" PRIx32 ", %zu bytes) before the connector's hello",
             tag, len);
        return;
    }
    hello_decode(data, &h);
    if (h.index != index || index >= app->nconns ||
        (sc->announced >= 0 && (unsigned)sc->announced != index)) {
        fail(app, sc, "hello names connection %" PRIu32 " (tag 0x%08" PRIx32 "); this side "
             "has --conns %u", h.index, tag, app->nconns);
        return;
    }
    if (h.conns != app->nconns || h.seed != app->seed || h.max_size != app->max_size ||
        !(h.flags & HELLO_CONTINUOUS) != !continuous ||
        (!continuous && h.count != app->count)) {
        fail(app, sc, "the connector was started with other options: --conns %" PRIu32
             " --seed %" PRIu64 " --max-size %" PRIu64 " --count %" PRIu64 "%s; this side "
             "has --conns %u --seed %" PRIu64 " --max-size %zu --count %" PRIu64 "%s",
             h.conns, h.seed, h.max_size, h.count,
             h.flags & HELLO_CONTINUOUS ? " --stop-file" : "", app->nconns, app->seed,
             app->max_size, app->count, continuous ? " --stop-file" : "");
        return;
    }
    if (sconn_by_index(app, (int)index)) {
        fail(app, sc, "second hello for connection %u", index);
        return;
    }
    if (sconn_start(sc, index)) {
        sc->lib_failure = true;
        return;
    }
    if (app->verbose)
        fprintf(stderr, "[%s]: hello received\n", sc->name);
}

/* ---- callbacks ------------------------------------------------------------ */

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    struct app *app = arg;
    struct sconn *sc = rov_conn_get_user(conn);

    if (app->in_wait)
        app->wait_cb_ns = it_now_ns();
    if (!sc) {
        fail(app, NULL, "message (tag %" PRIu32 ", %zu bytes) on a connection the "
             "application does not know (before its ACCEPTED event?)", tag, len);
        return;
    }
    if (sc->state == SC_HELLO)
        recv_hello(sc, tag, data, len);
    else
        it_flow_recv(&sc->flow, tag, data, len);
    if (sc->first_rx_pending) {
        FILE *f = ev_begin(app, sc, "first_rx");

        sc->first_rx_pending = false;
        if (f) {
            ev_int(f, "rail", rov_conn_rail(conn));
            ev_end(f);
        }
    }
}

/* The connector names each connection at connect (its index, 4 bytes
 * little-endian, rov_conn_connect_ex()): the switches and failures that
 * come before its hello are counted for the right one.  -1: none given. */
static int announced_index(const struct app *app, rov_conn_t *conn)
{
    size_t n;
    const uint8_t *d = rov_conn_data(conn, &n);
    uint32_t i;

    if (n != sizeof(i))
        return -1;
    i = (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
    return i < app->nconns ? (int)i : -1;
}

static void on_accepted(struct app *app, rov_conn_t *conn)
{
    struct sconn *sc;

    if (app->nrecs == app->nconns) {
        ev_simple(app, NULL, "accepted");
        fail(app, NULL, "unexpected connection accepted beyond --conns %u; closing it",
             app->nconns);
        rov_conn_close(conn);
        return;
    }
    sc = &app->conns[app->nrecs++];
    sc->conn = conn;
    sc->established = true;
    sc->announced = announced_index(app, conn);
    sconn_name(sc, "accepted #", app->nrecs);
    rov_conn_set_user(conn, sc);
    if (!app->t_start)
        app->t_start = it_now_ns();
    ev_simple(app, NULL, "accepted");
    if (app->verbose || app->nconns == 1)
        fprintf(stderr, "[%s]: connection accepted\n", sc->name);
}

static void on_switch(struct app *app, struct sconn *sc, const rov_event_t *ev)
{
    FILE *f = ev_begin(app, sc, "switch");

    if (f) {
        ev_int(f, "from", ev->rail_from);
        ev_int(f, "to", ev->rail_to);
        ev_str(f, "reason", rov_reason_str(ev->code));
        ev_str(f, "text", ev->reason);
        ev_end(f);
    }
    if (!sc)
        return;
    sc->switch_events++;
    sc->first_rx_pending = true;
    if (app->verbose)
        fprintf(stderr, "[%s]: rail switch %d -> %d (%s: %s)\n", sc->name, ev->rail_from,
                ev->rail_to, rov_reason_str(ev->code), ev->reason ? ev->reason : "");
}

static void on_rail_down(struct app *app, struct sconn *sc, const rov_event_t *ev)
{
    FILE *f = ev_begin(app, sc, "rail_down");

    if (f) {
        ev_int(f, "rail", ev->rail_from);
        ev_str(f, "status", rov_status_str(ev->status));
        ev_str(f, "reason", rov_reason_str(ev->code));
        ev_str(f, "text", ev->reason);
        ev_end(f);
    }
    fprintf(stderr, "[%s]: rail %d down: %s (%s: %s)\n", sc ? sc->name : app->role,
            ev->rail_from, rov_status_str(ev->status), rov_reason_str(ev->code),
            ev->reason ? ev->reason : "");
    if (sc)
        sc->rail_down++;
}

static void on_peer_closed(struct app *app, struct sconn *sc)
{
    ev_simple(app, sc, "peer_closed");
    if (!sc || app->tearing_down)
        return;
    sc->peer_closed = true;
    if (sc->state == SC_HELLO) {
        fail(app, sc, "peer closed the connection before its hello");
        return;
    }
    if (app->stop_file) {
        it_flow_end_rx(&sc->flow); /* the close came after everything the peer sent */
        return;
    }
    if (!it_flow_rx_done(&sc->flow))
        it_flow_fail(&sc->flow, "peer closed the connection after delivering only %" PRIu64
                     " of %" PRIu64 " messages", sc->flow.rx_next, sc->flow.rx_count);
}

static void on_closed(struct app *app, struct sconn *sc, rov_conn_t *conn)
{
    ev_simple(app, sc, "closed");
    if (!sc)
        return; /* an extra connection we closed */
    rov_conn_stats(conn, &sc->final_stats); /* still valid during the call */
    if (sc->state != SC_CLOSING && !app->tearing_down) {
        fprintf(stderr, "FAIL [%s]: connection closed before the stream finished\n", sc->name);
        sc->lib_failure = true;
    }
    /* Without a PEER_CLOSED (our CLOSE went first), the peer's CLOSE came
     * after everything it sent. */
    if (app->stop_file && sc->index >= 0 && !sc->peer_closed)
        it_flow_end_rx(&sc->flow);
    sc->closed = true;
    sc->state = SC_DONE;
    sc->conn = NULL;
    sc->flow.conn = NULL;
}

static int write_address(struct app *app);

static void on_event(void *arg, const rov_event_t *ev)
{
    struct app *app = arg;
    struct sconn *sc = ev->conn ? rov_conn_get_user(ev->conn) : NULL;

    if (app->in_wait)
        app->wait_cb_ns = it_now_ns();
    switch (ev->type) {
    case ROV_EVENT_CONN_ACCEPTED:
        on_accepted(app, ev->conn);
        return;
    case ROV_EVENT_CONN_ESTABLISHED: {
        FILE *f = ev_begin(app, sc, "established");

        if (f) {
            ev_int(f, "rail", rov_conn_rail(ev->conn));
            ev_end(f);
        }
        if (sc)
            sc->established = true;
        return;
    }
    case ROV_EVENT_CONN_RAIL_SWITCH:
        on_switch(app, sc, ev);
        return;
    case ROV_EVENT_CONN_RAIL_DOWN:
        on_rail_down(app, sc, ev);
        return;
    case ROV_EVENT_CONN_PEER_CLOSED:
        on_peer_closed(app, sc);
        return;
    case ROV_EVENT_CONN_CLOSED:
        on_closed(app, sc, ev->conn);
        return;
    case ROV_EVENT_CONN_ERROR: {
        FILE *f = ev_begin(app, sc, "error");

        if (f) {
            ev_str(f, "status", rov_status_str(ev->status));
            ev_str(f, "text", ev->reason);
            ev_end(f);
        }
        if (!sc)
            return;
        if (!app->tearing_down)
            fprintf(stderr, "FAIL [%s]: connection failed: %s (%s)\n", sc->name,
                    rov_status_str(ev->status), ev->reason ? ev->reason : "no reason given");
        sc->conn_error = true;
        sc->lib_failure = !app->tearing_down;
        sc->state = SC_DONE;
        return;
    }
    case ROV_EVENT_CONTEXT_QUIESCED:
        ev_simple(app, NULL, "quiesced");
        return;
    case ROV_EVENT_ENDPOINT_ADDRESS:
        /* Reopened with new ports: a connector started later (or a test
         * that re-addresses) reads the new address. */
        ev_simple(app, NULL, "address");
        if (app->listen && write_address(app) != 0)
            fail(app, NULL, "cannot rewrite the address file after the reopen");
        return;
    case ROV_EVENT_CONTEXT_RESUMED:
        ev_simple(app, NULL, "resumed");
        return;
    case ROV_EVENT_CONN_BOND: {
        FILE *f = ev_begin(app, sc, "bond");

        if (f) {
            ev_int(f, "joined", ev->rail_to);
            ev_int(f, "left", ev->rail_from);
            ev_str(f, "text", ev->reason);
            ev_end(f);
        }
        return;
    }
    }
    fail(app, sc, "unknown event type %d", (int)ev->type);
}

/* ---- setup ---------------------------------------------------------------- */

static int write_address(struct app *app)
{
    uint8_t blob[4096];
    size_t len = sizeof(blob);
    char tmp[4096];
    FILE *f;
    int fd;
    rov_status_t st = rov_endpoint_address(app->ep, blob, &len);

    if (st != ROV_OK) {
        fprintf(stderr, "rov_stream: rov_endpoint_address: %s\n", rov_status_str(st));
        return -1;
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", app->file, (long)getpid());
    /* The blob holds the endpoint's key: readable by its owner only. */
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (!f) {
        if (fd >= 0)
            close(fd);
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

static int connect_all(struct app *app)
{
    uint8_t blob[4096];
    size_t len;

    if (read_address(app->file, blob, sizeof(blob), &len))
        return -1;
    app->t_start = it_now_ns();
    for (unsigned i = 0; i < app->nconns; i++) {
        struct sconn *sc = &app->conns[i];
        uint8_t id[4] = {(uint8_t)i, (uint8_t)(i >> 8), (uint8_t)(i >> 16), (uint8_t)(i >> 24)};
        rov_connect_params_t cp = {.data = id, .data_len = sizeof(id), .user = sc};
        rov_status_t st = rov_conn_connect_ex(app->ep, blob, len, &cp, &sc->conn);

        if (st != ROV_OK && st != ROV_INPROGRESS) {
            fprintf(stderr, "rov_stream: rov_conn_connect (connection %u): %s\n", i,
                    rov_status_str(st));
            sc->conn = NULL;
            return -1;
        }
        app->nrecs++;
        rov_conn_set_user(sc->conn, sc);
        if (sconn_start(sc, i))
            return -1;
    }
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

    app->conns = calloc(app->nconns, sizeof(*app->conns));
    if (!app->conns) {
        fprintf(stderr, "rov_stream: out of memory\n");
        return -1;
    }
    for (unsigned r = 0; r < app->nconns; r++) {
        app->conns[r].app = app;
        app->conns[r].index = -1;
        app->conns[r].announced = -1;
    }
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
    return app->listen ? write_address(app) : connect_all(app);
}

/* ---- main loop ------------------------------------------------------------ */

static void schedule_switch(struct app *app, struct sconn *sc, uint64_t now)
{
    /* uniform in [MS/2, 3MS/2] */
    uint64_t span = (uint64_t)app->switch_ms * 1000000ull;

    sc->next_switch_ns = now + span / 2 + it_rand(&app->rng) % (span + 1);
}

static void maybe_switch(struct app *app, struct sconn *sc, uint64_t now)
{
    int n, cur, to;
    rov_status_t st;

    if (!app->switch_ms || !sc->established)
        return;
    if (!sc->next_switch_ns)
        schedule_switch(app, sc, now);
    if (now < sc->next_switch_ns)
        return;
    schedule_switch(app, sc, now);
    n = rov_context_rail_count(app->ctx);
    cur = rov_conn_rail(sc->conn);
    to = (int)(((uint64_t)(cur < 0 ? 0 : cur) + 1 + it_rand(&app->rng) % (uint64_t)(n - 1)) %
               (uint64_t)n);
    st = rov_conn_switch(sc->conn, to, "rov_stream --switch-every");
    app->switch_calls++;
    switch (st) {
    case ROV_INPROGRESS: app->switch_started++; break;
    case ROV_OK: app->switch_already++; break;
    case ROV_ERR_BUSY: app->switch_busy++; break;
    default:
        it_flow_fail(&sc->flow, "rov_conn_switch(rail %d -> %d) failed: %s", cur, to,
                     rov_status_str(st));
        break;
    }
}

static void poll_stop_file(struct app *app, uint64_t now)
{
    if (!app->stop_file || app->stopping || now < app->next_stop_poll_ns)
        return;
    app->next_stop_poll_ns = now + STOP_POLL_NS;
    if (access(app->stop_file, F_OK) != 0)
        return;
    app->stopping = true;
    ev_simple(app, NULL, "stop");
    fprintf(stderr, "[%s]: %s exists after %.3f s: stop sending, close\n", app->role,
            app->stop_file, (double)(now - app->t0) / 1e9);
}

/* Send the hello if due, then up to PUMP_BATCH messages of the flow. */
static unsigned pump(struct sconn *sc)
{
    if (!sc->app->listen && !sc->hello_sent && send_hello(sc))
        return 0;
    return it_flow_pump(&sc->flow, PUMP_BATCH);
}

/* Continuous mode: this side sends no more on the connection. */
static bool stop_sending(const struct app *app, const struct sconn *sc)
{
    return app->stop_file && (app->stopping || sc->peer_closed);
}

/* Whether the connection's stream is over on this side, so it may close.
 * In continuous mode the close need not wait for send completions: it
 * delivers everything first (check_final() verifies they all came). */
static bool stream_finished(const struct app *app, const struct sconn *sc)
{
    if (!app->listen && !sc->hello_sent)
        return false;
    if (app->stop_file)
        return stop_sending(app, sc);
    return it_flow_tx_done(&sc->flow) && it_flow_rx_done(&sc->flow);
}

/* 0, or the exit status to leave with. */
static int start_close(struct app *app, struct sconn *sc)
{
    rov_status_t st;

    app->t_done = it_now_ns();
    fprintf(stderr, "[%s]: stream complete after %.3f s (sent %" PRIu64 ", received %" PRIu64
            "), closing\n", sc->name, (double)(app->t_done - app->t_start) / 1e9,
            sc->flow.tx_next, sc->flow.rx_next);
    /* Snapshot before close, in case the library gives no CLOSED event. */
    rov_conn_stats(sc->conn, &sc->final_stats);
    sc->state = SC_CLOSING;
    st = rov_conn_close(sc->conn);
    if (st == ROV_OK) {
        fprintf(stderr, "FAIL [%s]: rov_conn_close returned ROV_OK (freed at once) on a "
                "healthy connection; expected ROV_INPROGRESS\n", sc->name);
        sc->conn = NULL;
        sc->flow.conn = NULL;
        sc->state = SC_DONE;
        sc->lib_failure = true;
        return EXIT_LIB;
    }
    if (st != ROV_INPROGRESS) {
        fprintf(stderr, "FAIL [%s]: rov_conn_close: %s\n", sc->name, rov_status_str(st));
        sc->lib_failure = true;
        return EXIT_LIB;
    }
    return 0;
}

/* A wait that goes on sleeping after it ran our callbacks hides their news
 * from the loop (a closed connection, a failure) until its timeout: with
 * --stall S, one that returns S seconds after its last callback is a stall. */
/* --compute-file: a compute phase, in which the program calls nothing of
 * the library (a spin on the clock, looking for the file every 10 ms). */
static void compute(struct app *app)
{
    uint64_t t0, t;

    if (!app->compute_file || access(app->compute_file, F_OK) != 0)
        return;
    t0 = it_now_ns();
    fprintf(stderr, "[%s]: computing (no library call) while %s exists\n", app->role,
            app->compute_file);
    do {
        t = it_now_ns();
        while (it_now_ns() - t < 10000000ull)
            ;
    } while (access(app->compute_file, F_OK) == 0);
    fprintf(stderr, "[%s]: computed %.2f s\n", app->role, (double)(it_now_ns() - t0) / 1e9);
    app->last_progress_ns = it_now_ns(); /* computing is not a stall */
}

static void progress(struct app *app, bool idle)
{
    uint64_t late;

    compute(app);
    if (app->events)
        fflush(app->events); /* what the last call wrote (ev_end()) */

    if (app->busy_poll || !idle) {
        rov_progress(app->ctx);
        return;
    }
    app->in_wait = true;
    app->wait_cb_ns = 0;
    rov_context_wait(app->ctx, app->wait_ms);
    app->in_wait = false;
    late = app->wait_cb_ns ? it_now_ns() - app->wait_cb_ns : 0;
    if (app->stall_s && late > app->stall_s * 1000000000ull && !app->late_wake) {
        fprintf(stderr, "FAIL [%s]: STALLED: rov_context_wait slept %.1f s after running "
                "callbacks\n", app->role, (double)late / 1e9);
        app->late_wake = true;
    }
}

static const char *state_name(enum sconn_state state)
{
    switch (state) {
    case SC_HELLO: return "waiting for the hello";
    case SC_STREAM: return "streaming";
    case SC_CLOSING: return "closing";
    case SC_DONE: return "done";
    }
    return "?";
}

static void print_status(const struct app *app, const char *what)
{
    fprintf(stderr, "[%s]: %s after %.1f s; %u of %u connections %s\n", app->role, what,
            (double)(it_now_ns() - (app->t_start ? app->t_start : app->t0)) / 1e9, app->nrecs,
            app->nconns, app->listen ? "accepted" : "opened");
    for (unsigned r = 0; r < app->nrecs; r++) {
        const struct sconn *sc = &app->conns[r];

        if (sc->index >= 0)
            it_flow_dump(&sc->flow);
        fprintf(stderr, "[%s]: %s, established %d, peer closed %d, closed %d, switch events %"
                PRIu64 "\n", sc->name, state_name(sc->state), sc->established, sc->peer_closed,
                sc->closed, sc->switch_events);
    }
    if (app->switch_ms)
        fprintf(stderr, "[%s]: switch calls %" PRIu64 " (started %" PRIu64 ", busy %" PRIu64
                ")\n", app->role, app->switch_calls, app->switch_started, app->switch_busy);
}

/* A number that changes whenever a stream or a close moves on. */
static uint64_t progress_signature(const struct app *app)
{
    uint64_t h = it_mix64(app->nrecs ^ ((uint64_t)app->stopping << 32));

    for (unsigned r = 0; r < app->nrecs; r++) {
        const struct sconn *sc = &app->conns[r];
        const struct it_flow *f = &sc->flow;
        uint64_t v[] = {f->tx_next, f->tx_inflight, f->tx_notify_pending, f->rx_next,
                        sc->state, sc->peer_closed, sc->established};

        for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
            h = it_mix64(h ^ v[i]) + i;
    }
    return h;
}

/* Continuous mode with every connection's --count sent and acknowledged:
 * waiting for the stop file is no stall (a peer whose own sends stall sees
 * that itself). */
static bool idle_until_stop(const struct app *app)
{
    if (!app->stop_file || app->stopping || app->nrecs < app->nconns)
        return false;
    for (unsigned r = 0; r < app->nrecs; r++)
        if (app->conns[r].state != SC_STREAM || !it_flow_tx_done(&app->conns[r].flow))
            return false;
    return true;
}

/* 0 while running, else the exit status to leave with. */
static int check_abort(struct app *app, uint64_t now, uint64_t deadline)
{
    uint64_t sig = progress_signature(app);
    uint64_t first_error = app->unexpected ? app->first_unexpected_ns : UINT64_MAX;

    if (sig != app->progress_sig || !app->last_progress_ns || idle_until_stop(app)) {
        app->progress_sig = sig;
        app->last_progress_ns = now;
    } else if (app->stall_s && now - app->last_progress_ns > app->stall_s * 1000000000ull) {
        char what[64];

        snprintf(what, sizeof(what), "STALLED (nothing moved for %u s)", app->stall_s);
        print_status(app, what);
        return EXIT_TIMEOUT;
    }
    for (unsigned r = 0; r < app->nrecs; r++) {
        const struct sconn *sc = &app->conns[r];

        if (sc->lib_failure)
            return EXIT_LIB;
        if (sc->flow.failed)
            return sc->flow.errors ? EXIT_VERIFY : EXIT_LIB;
        if (sc->flow.errors && sc->flow.first_error_ns < first_error)
            first_error = sc->flow.first_error_ns;
        if (sc->unexpected && app->first_unexpected_ns < first_error)
            first_error = app->first_unexpected_ns;
    }
    /* first_error may be later than now: failures found during progress */
    if (first_error != UINT64_MAX && now > first_error && now - first_error > ERROR_GRACE_NS)
        return EXIT_VERIFY;
    if (deadline && now > deadline) {
        print_status(app, "TIMEOUT");
        return EXIT_TIMEOUT;
    }
    return 0;
}

static bool all_closed(const struct app *app)
{
    if (app->nrecs < app->nconns)
        return false;
    for (unsigned r = 0; r < app->nrecs; r++)
        if (!app->conns[r].closed)
            return false;
    return true;
}

static int run(struct app *app)
{
    uint64_t start = it_now_ns(), deadline = 0, last_status = start;
    int rc;

    if (app->timeout_s)
        deadline = start + (uint64_t)app->timeout_s * 1000000000ull;
    app->rng = it_mix64(app->seed ^ (uint64_t)getpid() ^ start);

    while (!all_closed(app)) {
        uint64_t now = it_now_ns();
        unsigned sent = 0;

        poll_stop_file(app, now);
        for (unsigned r = 0; r < app->nrecs; r++) {
            struct sconn *sc = &app->conns[r];

            if (sc->state != SC_STREAM)
                continue;
            if (stop_sending(app, sc))
                it_flow_stop_tx(&sc->flow);
            sent += pump(sc);
            if (stream_finished(app, sc)) {
                if ((!app->listener_second || !app->listen || sc->peer_closed) &&
                    (rc = start_close(app, sc)))
                    return rc;
            } else {
                maybe_switch(app, sc, now);
            }
        }
        progress(app, sent == 0);
        rate_tick(app, now);
        if ((rc = check_abort(app, now, deadline)))
            return rc;
        if (!app->quiet_status && now - last_status > STATUS_EVERY_NS) {
            print_status(app, "status");
            last_status = now;
        }
    }
    if (app->rate)
        rate_rows(app, it_now_ns()); /* the last, shorter interval */
    return 0;
}

/* --linger: a failed run keeps serving its control socket (a test reads
 * the stage of a process whose peer it killed) until the stop file exists
 * or the time is up. */
static void linger(struct app *app)
{
    uint64_t end = it_now_ns() + (uint64_t)app->linger_s * 1000000000ull;

    fprintf(stderr, "[%s]: lingering up to %u s (--linger)\n", app->role, app->linger_s);
    while (it_now_ns() < end && !(app->stop_file && access(app->stop_file, F_OK) == 0))
        progress(app, true);
}

/* The library's final counts against the application's (after CLOSED).
 * The connector's hello is the library's message, not the flow's. */
static int check_final(struct sconn *sc)
{
    const rov_conn_stats_t *s = &sc->final_stats;
    struct it_flow *f = &sc->flow;
    bool listen = sc->app->listen;
    uint64_t hello_tx = listen ? 0 : 1, hello_rx = listen ? 1 : 0;
    int bad = 0;

    if (s->msgs_sent != f->tx_next + hello_tx ||
        s->bytes_sent != f->tx_bytes + hello_tx * HELLO_LEN) {
        it_flow_fail(f, "library counts %" PRIu64 " messages / %" PRIu64 " bytes sent, the "
                     "application sent %" PRIu64 " / %" PRIu64 " (hello included)",
                     s->msgs_sent, s->bytes_sent, f->tx_next + hello_tx,
                     f->tx_bytes + hello_tx * HELLO_LEN);
        bad = 1;
    }
    if (s->msgs_recv != f->rx_next + hello_rx ||
        s->bytes_recv != f->rx_bytes + hello_rx * HELLO_LEN) {
        it_flow_fail(f, "library counts %" PRIu64 " messages / %" PRIu64 " bytes received, "
                     "the application got %" PRIu64 " / %" PRIu64 " (hello included)",
                     s->msgs_recv, s->bytes_recv, f->rx_next + hello_rx,
                     f->rx_bytes + hello_rx * HELLO_LEN);
        bad = 1;
    }
    if (s->retained_msgs || s->retained_bytes) {
        it_flow_fail(f, "connection closed with %" PRIu64 " messages / %" PRIu64
                     " bytes still retained", s->retained_msgs, s->retained_bytes);
        bad = 1;
    }
    if (!it_flow_tx_done(f)) {
        it_flow_fail(f, "connection closed with %" PRIu64 " zero-copy sends and %" PRIu64
                     " delivery notifications not completed", f->tx_inflight,
                     f->tx_notify_pending);
        bad = 1;
    }
    return bad;
}

/* The exit status this connection alone would give. */
static int sconn_rc(const struct sconn *sc, int rc)
{
    if (sc->flow.errors || sc->unexpected)
        return EXIT_VERIFY;
    if (sc->lib_failure || sc->flow.failed)
        return EXIT_LIB;
    if (!sc->closed)
        return rc ? rc : EXIT_LIB;
    return 0;
}

static const char *reasons_str(const rov_conn_stats_t *s, char *buf, size_t len)
{
    size_t at = 0;

    buf[0] = '\0';
    for (int r = 0; r < ROV_REASON_COUNT; r++) {
        int n;

        if (!s->reasons[r])
            continue;
        n = snprintf(buf + at, len - at, "%s%s:%" PRIu64, at ? "," : "",
                     rov_reason_str((rov_reason_t)r), s->reasons[r]);
        if (n < 0 || (size_t)n >= len - at)
            break;
        at += (size_t)n;
    }
    return buf;
}

/* One ROV_STREAM_CONN line; a connection never identified (the listener got
 * no hello for it) has only zeros. */
static void print_conn_line(const struct app *app, unsigned index, int rc)
{
    static const struct sconn never = {.final_stats = {.rail = -1}};
    const struct sconn *sc = sconn_by_index(app, (int)index);
    const struct sconn *c = sc ? sc : &never;
    const rov_conn_stats_t *s = &c->final_stats;
    char reasons[512];

    printf("ROV_STREAM_CONN role=%s conn=%u rc=%d sent=%" PRIu64 " sent_bytes=%" PRIu64
           " recv=%" PRIu64 " recv_bytes=%" PRIu64 " resent=%" PRIu64 " dups_dropped=%" PRIu64
           " switches=%" PRIu64 " rail=%d reasons=%s errors=%" PRIu64 "\n",
           app->role, index, sc ? sconn_rc(sc, rc) : (rc ? rc : EXIT_LIB), c->flow.tx_next,
           c->flow.tx_bytes, c->flow.rx_next, c->flow.rx_bytes, s->msgs_resent,
           s->dups_dropped, s->switches, s->rail, reasons_str(s, reasons, sizeof(reasons)),
           c->flow.errors + c->unexpected);
}

static void summary(const struct app *app, int rc)
{
    uint64_t tx = 0, tx_bytes = 0, rx = 0, rx_bytes = 0, resent = 0, dups = 0, switches = 0;
    uint64_t switch_events = 0, rail_down = 0, failures = app->unexpected;
    uint64_t end = app->t_done ? app->t_done : it_now_ns();
    double secs = app->t_start ? (double)(end - app->t_start) / 1e9 : 0;
    char b1[32], b2[32], b3[32];

    if (secs <= 0)
        secs = 1e-9;
    for (unsigned r = 0; r < app->nrecs; r++) {
        const struct sconn *sc = &app->conns[r];
        const rov_conn_stats_t *s = &sc->final_stats;
        const struct it_flow *f = &sc->flow;

        if (sc->index < 0)
            continue;
        tx += f->tx_next;
        tx_bytes += f->tx_bytes;
        rx += f->rx_next;
        rx_bytes += f->rx_bytes;
        resent += s->msgs_resent;
        dups += s->dups_dropped;
        switches += s->switches;
        switch_events += sc->switch_events;
        rail_down += sc->rail_down;
        failures += f->errors + sc->unexpected;
        fprintf(stderr, "[%s]: sends: %" PRIu64 " zero-copy, %" PRIu64 " copied, %" PRIu64
                " delivery notifications, %" PRIu64 " ROV_ERR_AGAIN, %" PRIu64
                " buffers renewed\n",
                sc->name, f->tx_zcopy, f->tx_copied, f->tx_notified, f->tx_again, f->renewals);
        fprintf(stderr, "[%s]: stats: resent %" PRIu64 " msgs (%s), dups_dropped %" PRIu64
                ", reordered %" PRIu64 ", switches %" PRIu64 ", window_full %" PRIu64
                ", acks sent/recv %" PRIu64 "/%" PRIu64 ", rail %d\n",
                sc->name, s->msgs_resent, it_bytes_str(s->bytes_resent, b3, sizeof(b3)),
                s->dups_dropped, s->reordered, s->switches, s->window_full, s->acks_sent,
                s->acks_recv, s->rail);
    }
    for (unsigned r = 0; r < app->nrecs; r++)
        if (app->conns[r].index < 0)
            failures += app->conns[r].unexpected;
    fprintf(stderr, "[%s]: sent %" PRIu64 " msgs (%s), received %" PRIu64 " msgs (%s) in %.3f s"
            ": %.0f msgs/s and %.1f MiB/s each way\n",
            app->role, tx, it_bytes_str(tx_bytes, b1, sizeof(b1)), rx,
            it_bytes_str(rx_bytes, b2, sizeof(b2)), secs, (double)rx / secs,
            (double)rx_bytes / secs / (1024.0 * 1024.0));
    if (app->switch_ms)
        fprintf(stderr, "[%s]: switch calls %" PRIu64 ": %" PRIu64 " started, %" PRIu64
                " already there, %" PRIu64 " busy; %" PRIu64 " RAIL_SWITCH events, %" PRIu64
                " RAIL_DOWN events\n",
                app->role, app->switch_calls, app->switch_started, app->switch_already,
                app->switch_busy, switch_events, rail_down);

    /* machine-readable lines; run_pair.sh reads the first */
    printf("ROV_STREAM_RESULT role=%s rc=%d seed=%" PRIu64 " count=%" PRIu64 " sent=%" PRIu64
           " sent_bytes=%" PRIu64 " recv=%" PRIu64 " recv_bytes=%" PRIu64 " elapsed_s=%.3f"
           " resent=%" PRIu64 " dups_dropped=%" PRIu64 " switches=%" PRIu64
           " switch_events=%" PRIu64 " failures=%" PRIu64 "\n",
           app->role, rc, app->seed, app->count, tx, tx_bytes, rx, rx_bytes, secs, resent, dups,
           switches, switch_events, failures);
    for (unsigned i = 0; i < app->nconns; i++)
        print_conn_line(app, i, rc);
    fflush(stdout);
}

static void teardown(struct app *app)
{
    app->tearing_down = true;
    for (unsigned r = 0; r < app->nrecs; r++) {
        struct sconn *sc = &app->conns[r];

        if (sc->conn_error && sc->conn) {
            rov_conn_close(sc->conn); /* frees a failed connection */
            sc->conn = NULL;
            sc->flow.conn = NULL;
        }
        sc->flow.draining = true;
    }
    if (app->ep)
        rov_endpoint_destroy(app->ep);
    if (app->ctx)
        rov_context_destroy(app->ctx); /* cancels what is left; callbacks may run */
    for (unsigned r = 0; app->conns && r < app->nconns; r++) {
        app->conns[r].flow.conn = NULL;
        it_flow_free(&app->conns[r].flow);
    }
    free(app->conns);
    close_outputs(app);
}

static void print_plan(const struct app *app)
{
    char what[4200];

    if (!app->stop_file)
        snprintf(what, sizeof(what), "%" PRIu64 " messages each way", app->count);
    else if (app->count == IT_UNLIMITED)
        snprintf(what, sizeof(what), "sending until %s exists", app->stop_file);
    else
        snprintf(what, sizeof(what), "sending until %s exists (at most %" PRIu64 " messages)",
                 app->stop_file, app->count);
    fprintf(stderr, "[%s]: %s%s, seed %" PRIu64 ", max %zu bytes%s\n", app->role, what,
            app->nconns > 1 ? " on each connection" : "", app->seed, app->max_size,
            app->switch_ms ? ", switching rails" : "");
    if (app->nconns > 1)
        fprintf(stderr, "[%s]: %u connections\n", app->role, app->nconns);
}

int main(int argc, char **argv)
{
    struct app app = {0};
    int rc;

    app.t0 = it_now_ns();
    parse_args(&app, argc, argv);
    setvbuf(stderr, NULL, _IOLBF, 0);
    if (open_outputs(&app)) {
        close_outputs(&app);
        return EXIT_LIB;
    }
    print_plan(&app);

    if (setup(&app))
        rc = EXIT_LIB;
    else
        rc = run(&app);
    if (rc != 0 && app.linger_s)
        linger(&app);
    if (rc == 0) {
        for (unsigned r = 0; r < app.nrecs; r++)
            if (check_final(&app.conns[r]))
                rc = EXIT_VERIFY;
    }
    if (rc == 0 && app.unexpected)
        rc = EXIT_VERIFY;
    if (rc == 0 && app.late_wake)
        rc = EXIT_TIMEOUT;
    for (unsigned r = 0; rc == 0 && r < app.nrecs; r++)
        if (app.conns[r].flow.errors || app.conns[r].unexpected)
            rc = EXIT_VERIFY;
    if (rc != 0 && rc != EXIT_TIMEOUT)
        print_status(&app, "FAILED");
    for (unsigned r = 0; r < app.nrecs; r++) {
        struct sconn *sc = &app.conns[r];

        if (!sc->closed && sc->conn)
            rov_conn_stats(sc->conn, &sc->final_stats); /* still valid: not closed */
    }
    summary(&app, rc);
    teardown(&app);
    fprintf(stderr, "[%s]: %s (exit %d)\n", app.role, rc ? "FAILED" : "OK", rc);
    return rc;
}
