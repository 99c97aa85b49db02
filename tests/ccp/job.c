/*
 * rov_job: one rank of an N-process job exchanging checked traffic all to
 * all, the application under the ccp tier's stages (tests/ccp/test_ccp.py
 * drives them with cprclient: drain, close, reopen).
 *
 * Each process is one rank, started with RAILOVER_JOBID, RAILOVER_RANK,
 * RAILOVER_JOB_DIR, RAILOVER_RAILS and RAILOVER_CCP_ADDR.  Creating the
 * context and its endpoint registers the rank in the job registry (the
 * library does that); the rank then reads its peers' addresses from the
 * registry (rov_job_open(), railover/ccp.h), connects to every lower rank
 * (the connect-time data carries its rank) and accepts every higher one.
 *
 * It sends --msgs messages to each peer at --rate per second while it
 * receives theirs.  Message seq from src to dst (tag TAG_DATA) is a header,
 * little-endian u32 src, u32 dst, u64 seq, u32 CRC-32 of the body, then a
 * body derived from (src, dst, seq): the receiver checks the ranks, the
 * length, the CRC and the body itself, and that each peer's seqs come
 * exactly once and in order.  Every send asks for its delivery
 * notification.  A peer is done when all --msgs sent to it were delivered
 * (acked), all of its messages arrived, and the connection closed
 * (rov_conn_close() ends it only once both sides have everything).
 *
 * stderr (timestamps are CLOCK_REALTIME seconds):
 *   rank=R t=T sent=S acked=A received=V stage=STAGE   about once a second;
 *       sent counts the sends the library took, which go on (held) while
 *       the context is drained until the window is full: that nothing
 *       flows shows in acked and received
 *   rank=R t=T event=quiesced|resumed|address|switch|rail_down ...
 *   [rank R]: computing (no library call) while PATH exists / computed X s
 *   [rank R]: PATH exists: the rest as fast as the window allows (--hurry-file)
 *   FAIL [rank R]: ...
 * stdout, once at the end:
 *   rank=R size=N sent=S received=V bad=B lost=L dup=D ooo=O result=ok|FAIL
 * Exit status: 0 only with result=ok; 1 otherwise (also --timeout); 64
 * usage.  Public API only (railover.h, ccp.h).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "railover/ccp.h"
#include "railover/railover.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 64

#define TAG_DATA 0x10B0u
#define HDR_LEN 20              /* u32 src, u32 dst, u64 seq, u32 crc */
#define BLOB_MAX 8192           /* an endpoint address */
#define MAX_SIZE 1024           /* ranks */
#define PUMP_BATCH 64           /* sends per peer per loop, at most */
#define REPORT_NS 1000000000ull /* the progress line */
#define COMPUTE_POLL_NS 10000000ull
#define REGISTRY_POLL_MS 50
#define WAIT_MS 5               /* longest sleep in rov_context_wait */

struct peer {
    int rank;
    rov_conn_t *conn;         /* NULL before the connect/accept and once closed */
    uint64_t t_start;         /* the rate's time zero for this peer */
    uint64_t sent, acked, nacked; /* sends taken; completions ok / not ok */
    uint64_t received;        /* distinct seqs that arrived intact */
    uint64_t rx_calls;        /* deliveries of any kind (rov_conn_stats cross-check) */
    uint64_t bad, dup, ooo, next_seq;
    uint8_t *seen;            /* bitmap of the seqs received */
    bool closing, closed, peer_closed, failed;
};

static struct {
    long rank;
    int size;
    uint64_t msgs;
    size_t msg_size;
    double rate;              /* per peer per second; 0: as fast as the window allows */
    const char *compute_file;
    const char *hurry_file;   /* once it exists: the rest at rate 0 */
    const char *die_at;       /* --die-at STAGE: end the process as it begins */
    unsigned linger_s, timeout_s;

    rov_context_t *ctx;
    rov_endpoint_t *ep;
    struct peer *peers;       /* by rank; peers[rank] is this rank */
    uint8_t *tx, *expect;     /* a message being built; a body to compare with */
    uint32_t crc_table[256];
    uint64_t t0, deadline, next_report, next_compute_poll, next_hurry_poll;
    uint64_t failures;        /* not tied to one message: events, statistics, setup */
    bool tearing_down;
} g;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double wall_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void __attribute__((format(printf, 1, 2))) fail(const char *fmt, ...)
{
    va_list ap;

    g.failures++;
    fprintf(stderr, "FAIL [rank %ld]: ", g.rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* A peer's failure is counted on the peer (its verdict), reported here. */
static void __attribute__((format(printf, 2, 3))) peer_fail(struct peer *p, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "FAIL [rank %ld, peer %d]: ", g.rank, p->rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void __attribute__((format(printf, 2, 3))) event_log(const char *event, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "rank=%ld t=%.3f event=%s ", g.rank, wall_s(), event);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- message content ------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;

        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        g.crc_table[i] = c;
    }
}

static uint32_t crc32(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;

    while (n--)
        c = g.crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
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

/* The body of message seq from src to dst: a message delivered to the wrong
 * rank, or as another seq, has the wrong body even with a right CRC. */
static void fill_body(uint8_t *p, size_t n, uint32_t src, uint32_t dst, uint64_t seq)
{
    uint64_t s = mix64(((uint64_t)src << 32 | dst) ^ mix64(seq ^ 0x5bd1e9955bd1e995ull));

    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = mix64(s += 0x9e3779b97f4a7c15ull);
        size_t k = n - i < 8 ? n - i : 8;

        for (size_t b = 0; b < k; b++)
            p[i + b] = (uint8_t)(v >> (8 * b));
    }
}

static void build(uint32_t dst, uint64_t seq)
{
    size_t body = g.msg_size - HDR_LEN;

    fill_body(g.tx + HDR_LEN, body, (uint32_t)g.rank, dst, seq);
    put_le(g.tx, (uint64_t)g.rank, 4);
    put_le(g.tx + 4, dst, 4);
    put_le(g.tx + 8, seq, 8);
    put_le(g.tx + 16, crc32(g.tx + HDR_LEN, body), 4);
}

/* ---- callbacks -------------------------------------------------------------- */

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    struct peer *p = rov_conn_get_user(conn);
    const uint8_t *d = data;
    uint64_t seq;
    size_t body = g.msg_size - HDR_LEN;

    (void)arg;
    if (!p) {
        fail("message (tag 0x%x, %zu bytes) on a connection of no known rank", tag, len);
        return;
    }
    p->rx_calls++;
    if (tag != TAG_DATA || len != g.msg_size) {
        if (p->bad++ < 5)
            peer_fail(p, "message with tag 0x%x and %zu bytes (expected 0x%x, %zu)", tag, len,
                      TAG_DATA, g.msg_size);
        return;
    }
    seq = get_le(d + 8, 8);
    if (get_le(d, 4) != (uint64_t)p->rank || get_le(d + 4, 4) != (uint64_t)g.rank ||
        seq >= g.msgs || (uint32_t)get_le(d + 16, 4) != crc32(d + HDR_LEN, body)) {
        if (p->bad++ < 5)
            peer_fail(p, "bad message: src %" PRIu64 " dst %" PRIu64 " seq %" PRIu64 " (of %"
                      PRIu64 "), checksum %s", get_le(d, 4), get_le(d + 4, 4), seq, g.msgs,
                      (uint32_t)get_le(d + 16, 4) == crc32(d + HDR_LEN, body) ? "right" : "WRONG");
        return;
    }
    fill_body(g.expect, body, (uint32_t)p->rank, (uint32_t)g.rank, seq);
    if (memcmp(d + HDR_LEN, g.expect, body) != 0) {
        if (p->bad++ < 5)
            peer_fail(p, "message seq %" PRIu64 ": checksum right, content not that of seq %"
                      PRIu64 " from rank %d to rank %ld", seq, seq, p->rank, g.rank);
        return;
    }
    if (p->seen[seq / 8] & (1u << (seq % 8))) {
        if (p->dup++ < 5)
            peer_fail(p, "duplicate: seq %" PRIu64 " again (expected %" PRIu64 ")", seq,
                      p->next_seq);
        return;
    }
    p->seen[seq / 8] |= (uint8_t)(1u << (seq % 8));
    if (seq != p->next_seq && p->ooo++ < 5)
        peer_fail(p, "out of order: seq %" PRIu64 " where %" PRIu64 " was due", seq, p->next_seq);
    if (seq >= p->next_seq)
        p->next_seq = seq + 1;
    p->received++;
}

static void on_delivered(void *arg, rov_status_t status)
{
    struct peer *p = arg;

    if (status == ROV_OK) {
        p->acked++;
        return;
    }
    p->nacked++;
    if (!g.tearing_down && p->nacked <= 5)
        peer_fail(p, "a send completed with %s", rov_status_str(status));
}

static void on_accepted(rov_conn_t *conn)
{
    size_t n;
    const uint8_t *d = rov_conn_data(conn, &n);
    long r = n == 4 ? (long)get_le(d, 4) : -1;
    struct peer *p;

    if (r <= g.rank || r >= g.size || g.peers[r].conn || g.peers[r].closed) {
        fail("connection accepted with connect-time data of %zu bytes naming rank %ld; "
             "expected one from each of ranks %ld..%d", n, r, g.rank + 1, g.size - 1);
        rov_conn_close(conn);
        return;
    }
    p = &g.peers[r];
    p->conn = conn;
    p->t_start = now_ns();
    rov_conn_set_user(conn, p);
}

static void on_closed(struct peer *p, rov_conn_t *conn)
{
    rov_conn_stats_t s;

    rov_conn_stats(conn, &s); /* still valid during the call */
    p->closed = true;
    p->conn = NULL;
    if (g.tearing_down)
        return;
    if (!p->closing)
        peer_fail(p, "connection closed before the stream ended");
    if (s.msgs_sent != p->sent || s.msgs_recv != p->rx_calls || s.retained_msgs) {
        peer_fail(p, "library counts %" PRIu64 " sent, %" PRIu64 " received, %" PRIu64
                  " retained at the close; the application sent %" PRIu64 " and received %"
                  PRIu64, s.msgs_sent, s.msgs_recv, s.retained_msgs, p->sent, p->rx_calls);
        p->failed = true;
    }
}

static void on_event(void *arg, const rov_event_t *e)
{
    struct peer *p = e->conn ? rov_conn_get_user(e->conn) : NULL;
    int pr = p ? p->rank : -1;

    (void)arg;
    switch (e->type) {
    case ROV_EVENT_CONN_ACCEPTED:
        on_accepted(e->conn);
        return;
    case ROV_EVENT_CONN_ESTABLISHED:
        return;
    case ROV_EVENT_CONN_RAIL_SWITCH:
        event_log("switch", "peer=%d from=%d to=%d reason=%s", pr, e->rail_from, e->rail_to,
                  rov_reason_str(e->code));
        return;
    case ROV_EVENT_CONN_RAIL_DOWN:
        event_log("rail_down", "peer=%d rail=%d status=\"%s\" reason=%s", pr, e->rail_from,
                  rov_status_str(e->status), rov_reason_str(e->code));
        return;
    case ROV_EVENT_CONN_PEER_CLOSED:
        if (!p || g.tearing_down)
            return;
        p->peer_closed = true;
        /* The close delivered everything the peer sent before it. */
        if (p->received != g.msgs)
            peer_fail(p, "the peer closed after %" PRIu64 " of %" PRIu64 " messages",
                      p->received, g.msgs);
        if (!p->closing) {
            p->closing = true;
            if (rov_conn_close(e->conn) == ROV_OK)
                p->closed = true, p->conn = NULL;
        }
        return;
    case ROV_EVENT_CONN_CLOSED:
        if (p)
            on_closed(p, e->conn);
        return;
    case ROV_EVENT_CONN_ERROR:
        if (!p) {
            rov_conn_close(e->conn);
            return;
        }
        if (!g.tearing_down) {
            peer_fail(p, "connection failed: %s (%s)", rov_status_str(e->status),
                      e->reason ? e->reason : "no reason given");
            p->failed = true;
        }
        p->closing = p->closed = true;
        p->conn = NULL;
        rov_conn_close(e->conn); /* frees it */
        return;
    case ROV_EVENT_CONTEXT_QUIESCED:
        event_log("quiesced", "stage=%s", rov_context_stage_str(rov_context_stage(g.ctx)));
        return;
    case ROV_EVENT_ENDPOINT_ADDRESS:
        event_log("address", "stage=%s", rov_context_stage_str(rov_context_stage(g.ctx)));
        return;
    case ROV_EVENT_CONTEXT_RESUMED:
        event_log("resumed", "stage=%s", rov_context_stage_str(rov_context_stage(g.ctx)));
        return;
    case ROV_EVENT_CONN_BOND:
        return; /* no bond in these jobs' settings */
    }
    fail("unknown event type %d", (int)e->type);
}

/* ---- the job ------------------------------------------------------------------ */

/* --compute-file: a compute phase, in which the program calls nothing of the
 * library (a spin on the clock); the stages must complete meanwhile, by the
 * library's progress helper. */
static void compute(void)
{
    uint64_t t0, t;

    if (!g.compute_file || now_ns() < g.next_compute_poll)
        return;
    g.next_compute_poll = now_ns() + COMPUTE_POLL_NS;
    if (access(g.compute_file, F_OK) != 0)
        return;
    t0 = now_ns();
    fprintf(stderr, "[rank %ld]: computing (no library call) while %s exists\n", g.rank,
            g.compute_file);
    do {
        t = now_ns();
        while (now_ns() - t < COMPUTE_POLL_NS)
            ;
    } while (access(g.compute_file, F_OK) == 0);
    fprintf(stderr, "[rank %ld]: computed %.2f s\n", g.rank, (double)(now_ns() - t0) / 1e9);
}

/* --hurry-file: once PATH exists, what is left goes as fast as the window
 * allows (a test that needs the job running through its cases, however
 * slow the machine, then ends it without waiting for the rate). */
static void hurry(void)
{
    if (!g.hurry_file || g.rate == 0 || now_ns() < g.next_hurry_poll)
        return;
    g.next_hurry_poll = now_ns() + REPORT_NS / 4;
    if (access(g.hurry_file, F_OK) != 0)
        return;
    g.rate = 0;
    fprintf(stderr, "[rank %ld]: %s exists: the rest as fast as the window allows\n", g.rank,
            g.hurry_file);
}

static void report(uint64_t now, bool force)
{
    uint64_t sent = 0, acked = 0, received = 0;

    if (!force && now < g.next_report)
        return;
    g.next_report = now + REPORT_NS;
    for (int r = 0; r < g.size; r++) {
        sent += g.peers[r].sent;
        acked += g.peers[r].acked;
        received += g.peers[r].received;
    }
    fprintf(stderr, "rank=%ld t=%.3f sent=%" PRIu64 " acked=%" PRIu64 " received=%" PRIu64
            " stage=%s\n", g.rank, wall_s(), sent, acked, received,
            rov_context_stage_str(rov_context_stage(g.ctx)));
}

/* Whether the registry holds every rank 0..size-1 with an address. */
static bool job_complete(rov_job_t *job, char *why, size_t len)
{
    size_t n = rov_job_size(job);
    uint8_t blob[BLOB_MAX];

    if (n != (size_t)g.size) {
        snprintf(why, len, "%zu of %d ranks registered", n, g.size);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        const rov_job_rank_t *jr = rov_job_rank(job, i);
        size_t blen = sizeof(blob);
        rov_status_t st;

        if (!jr || jr->rank != (long)i) {
            snprintf(why, len, "registry entry %zu is rank %ld, expected %zu", i,
                     jr ? jr->rank : -1, i);
            return false;
        }
        if ((st = rov_job_address(job, jr->rank, blob, &blen)) != ROV_OK) {
            snprintf(why, len, "rank %ld has no address yet (%s)", jr->rank, rov_status_str(st));
            return false;
        }
    }
    return true;
}

static int connect_lower(rov_job_t *job)
{
    for (long r = 0; r < g.rank; r++) {
        struct peer *p = &g.peers[r];
        uint8_t blob[BLOB_MAX], id[4];
        size_t len = sizeof(blob);
        rov_connect_params_t cp = {.data = id, .data_len = sizeof(id), .user = p};
        rov_status_t st = rov_job_address(job, r, blob, &len);

        if (st != ROV_OK) {
            fail("rov_job_address(rank %ld): %s", r, rov_status_str(st));
            return -1;
        }
        put_le(id, (uint64_t)g.rank, 4);
        st = rov_conn_connect_ex(g.ep, blob, len, &cp, &p->conn);
        if (st != ROV_OK && st != ROV_INPROGRESS) {
            fail("connect to rank %ld: %s", r, rov_status_str(st));
            p->conn = NULL;
            return -1;
        }
        rov_conn_set_user(p->conn, p);
        p->t_start = now_ns();
    }
    return 0;
}

/* Read the registry until every rank is there, progressing meanwhile (the
 * higher ranks may connect already), then connect to the lower ranks. */
static int discover(void)
{
    const char *jobid = rov_context_jobid(g.ctx);
    uint64_t next_log = now_ns() + REPORT_NS;
    char err[256] = "";

    for (;;) {
        rov_job_t *job = NULL;
        rov_status_t st = rov_job_open(jobid, &job, err, sizeof(err));
        uint64_t now;

        if (st == ROV_OK) {
            if (rov_job_size(job) > (size_t)g.size) {
                fail("job %s has %zu ranks in the registry, more than --size %d", jobid,
                     rov_job_size(job), g.size);
                rov_job_close(job);
                return -1;
            }
            if (job_complete(job, err, sizeof(err))) {
                int rc = connect_lower(job);

                rov_job_close(job);
                fprintf(stderr, "[rank %ld]: all %d ranks registered after %.2f s\n", g.rank,
                        g.size, (double)(now_ns() - g.t0) / 1e9);
                return rc;
            }
            rov_job_close(job);
        } else if (!err[0]) {
            snprintf(err, sizeof(err), "%s", rov_status_str(st));
        }
        now = now_ns();
        if (g.deadline && now > g.deadline) {
            fail("the job's ranks not all in the registry after %u s: %s", g.timeout_s, err);
            return -1;
        }
        if (now > next_log) {
            fprintf(stderr, "[rank %ld]: waiting for the registry of job %s: %s\n", g.rank,
                    jobid, err);
            next_log = now + REPORT_NS;
        }
        rov_context_wait(g.ctx, REGISTRY_POLL_MS);
    }
}

/* The seq due now at --rate, counted from the peer's start. */
static uint64_t due(const struct peer *p, uint64_t now)
{
    uint64_t n;

    if (g.rate <= 0)
        return g.msgs;
    n = (uint64_t)((double)(now - p->t_start) / 1e9 * g.rate) + 1;
    return n < g.msgs ? n : g.msgs;
}

enum pumped {
    PUMP_IDLE,    /* nothing more due now */
    PUMP_MORE,    /* the batch ended with more due: progress, do not sleep */
    PUMP_BLOCKED, /* window full (or held sends while drained): the wait wakes on acks */
};

/* Send what is due at --rate, at most a batch. */
static enum pumped pump(struct peer *p, uint64_t now)
{
    rov_send_params_t sp = {
        .flags = ROV_SEND_COPY | ROV_SEND_NOTIFY_DELIVERED,
        .cb = on_delivered,
        .arg = p,
    };
    uint64_t limit = due(p, now);

    for (int k = 0; k < PUMP_BATCH; k++) {
        rov_status_t st;

        if (p->sent >= limit)
            return PUMP_IDLE;
        build((uint32_t)p->rank, p->sent);
        st = rov_conn_send(p->conn, TAG_DATA, g.tx, g.msg_size, &sp);
        if (st == ROV_ERR_AGAIN)
            return PUMP_BLOCKED;
        if (st != ROV_OK && st != ROV_INPROGRESS) {
            peer_fail(p, "rov_conn_send of seq %" PRIu64 ": %s", p->sent, rov_status_str(st));
            p->failed = true;
            return PUMP_IDLE;
        }
        p->sent++;
    }
    return p->sent < limit ? PUMP_MORE : PUMP_IDLE;
}

/* Close once both directions are complete: everything sent is delivered
 * and everything due has arrived. */
static void maybe_close(struct peer *p)
{
    if (p->closing || p->sent < g.msgs || p->acked + p->nacked < g.msgs ||
        p->received < g.msgs)
        return;
    p->closing = true;
    switch (rov_conn_close(p->conn)) {
    case ROV_INPROGRESS:
        return;
    case ROV_OK: /* freed at once: only a failed connection is */
        peer_fail(p, "rov_conn_close returned ok (freed at once) on a healthy connection");
        p->failed = p->closed = true;
        p->conn = NULL;
        return;
    default:
        peer_fail(p, "rov_conn_close failed");
        p->failed = true;
        return;
    }
}

static bool all_done(void)
{
    for (int r = 0; r < g.size; r++)
        if (r != g.rank && !g.peers[r].closed && !g.peers[r].failed)
            return false;
    return true;
}

static int run(void)
{
    for (;;) {
        uint64_t now, next = UINT64_MAX;
        bool more = false;

        compute();
        hurry();
        now = now_ns();
        for (int r = 0; r < g.size; r++) {
            struct peer *p = &g.peers[r];
            enum pumped pumped;

            if (r == g.rank || !p->conn || p->closing || p->failed)
                continue;
            pumped = pump(p, now);
            more |= pumped == PUMP_MORE;
            maybe_close(p);
            if (pumped == PUMP_IDLE && p->sent < g.msgs && g.rate > 0) {
                uint64_t t = p->t_start + (uint64_t)((double)p->sent / g.rate * 1e9);

                if (t < next)
                    next = t;
            }
        }
        report(now, false);
        if (all_done())
            return 0;
        if (g.deadline && now > g.deadline) {
            fail("timeout: not done after %u s", g.timeout_s);
            return -1;
        }
        /* Sleep until the next send is due at the latest; events and acks
         * wake the wait earlier. */
        if (more || next <= now + 1000000ull)
            rov_progress(g.ctx);
        else
            rov_context_wait(g.ctx, next - now < WAIT_MS * 1000000ull
                                        ? (int)((next - now) / 1000000ull) : WAIT_MS);
    }
}

/* --linger: stay, progressing (the control endpoint answers, the stages
 * still run), so that a test can look at the rank after its run. */
static void linger(void)
{
    uint64_t end = now_ns() + (uint64_t)g.linger_s * 1000000000ull;

    fprintf(stderr, "[rank %ld]: lingering %u s (--linger)\n", g.rank, g.linger_s);
    while (now_ns() < end) {
        compute();
        report(now_ns(), false);
        rov_context_wait(g.ctx, 100);
    }
}

static void dump(void)
{
    for (int r = 0; r < g.size; r++) {
        const struct peer *p = &g.peers[r];

        if (r == g.rank)
            continue;
        fprintf(stderr, "[rank %ld]: peer %d: sent %" PRIu64 ", acked %" PRIu64 " (%" PRIu64
                " failed), received %" PRIu64 " (next seq %" PRIu64 "), bad %" PRIu64
                ", dup %" PRIu64 ", ooo %" PRIu64 ", %s%s%s\n", g.rank, r, p->sent, p->acked,
                p->nacked, p->received, p->next_seq, p->bad, p->dup, p->ooo,
                !p->conn && !p->closed ? "never connected" : p->closed ? "closed" :
                p->closing ? "closing" : "open", p->peer_closed ? ", peer closed" : "",
                p->failed ? ", FAILED" : "");
    }
}

/* The final line; true when the run is ok. */
static bool verdict(void)
{
    uint64_t sent = 0, received = 0, bad = 0, lost = 0, dup = 0, ooo = 0;
    bool ok = g.failures == 0;

    for (int r = 0; r < g.size; r++) {
        const struct peer *p = &g.peers[r];

        if (r == g.rank)
            continue;
        sent += p->sent;
        received += p->received;
        bad += p->bad;
        dup += p->dup;
        ooo += p->ooo;
        lost += g.msgs - p->received;
        if (p->failed || !p->closed || p->sent != g.msgs || p->acked != g.msgs || p->nacked)
            ok = false;
    }
    ok = ok && !bad && !lost && !dup && !ooo;
    if (!ok)
        dump();
    printf("rank=%ld size=%d sent=%" PRIu64 " received=%" PRIu64 " bad=%" PRIu64
           " lost=%" PRIu64 " dup=%" PRIu64 " ooo=%" PRIu64 " result=%s\n", g.rank, g.size,
           sent, received, bad, lost, dup, ooo, ok ? "ok" : "FAIL");
    fflush(stdout);
    return ok;
}

/* --die-at STAGE: the process ends (exit 3) as the stage begins here, in
 * the middle of the client's request: a rank that dies during a stage. */
static void die_at_stage(void *arg, rov_context_t *ctx, const char *stage, int after,
                         rov_status_t status)
{
    (void)arg;
    (void)ctx;
    (void)status;
    fprintf(stderr, "rank=%ld t=%.3f event=hook stage=%s %s\n", g.rank, wall_s(), stage,
            after ? "after" : "before");
    if (!after && strcmp(stage, g.die_at) == 0) {
        fprintf(stderr, "[rank %ld]: dying as %s begins (--die-at)\n", g.rank, stage);
        _exit(3);
    }
}

static int setup(void)
{
    rov_context_params_t params = {.recv_cb = on_recv, .event_cb = on_event};
    const char *env_rank = getenv("RAILOVER_RANK");
    rov_limits_t lim;
    rov_status_t st;

    if ((st = rov_context_create(&params, &g.ctx)) != ROV_OK) {
        fail("rov_context_create: %s (RAILOVER_RAILS=%s)", rov_status_str(st),
             getenv("RAILOVER_RAILS") ? getenv("RAILOVER_RAILS") : "");
        return -1;
    }
    g.rank = rov_context_rank(g.ctx);
    if (!env_rank || strtol(env_rank, NULL, 10) != g.rank || g.rank < 0 || g.rank >= g.size) {
        fail("the context's rank is %ld; RAILOVER_RANK=%s, --size %d", g.rank,
             env_rank ? env_rank : "(unset)", g.size);
        return -1;
    }
    rov_context_limits(g.ctx, &lim);
    if (g.msg_size > lim.max_msg) {
        fail("--msg-size %zu exceeds RAILOVER_MAX_MSG (%zu)", g.msg_size, lim.max_msg);
        return -1;
    }
    if ((st = rov_endpoint_create(g.ctx, &g.ep)) != ROV_OK) {
        fail("rov_endpoint_create: %s", rov_status_str(st));
        return -1;
    }
    if (g.die_at)
        rov_context_set_stage_hook(g.ctx, die_at_stage, NULL);
    fprintf(stderr, "[rank %ld]: job %s, %d ranks, %" PRIu64 " messages of %zu bytes to each "
            "peer at %g/s, railover %s, rails:", g.rank, rov_context_jobid(g.ctx), g.size,
            g.msgs, g.msg_size, g.rate, rov_version());
    for (int i = 0; i < rov_context_rail_count(g.ctx); i++)
        fprintf(stderr, " %d=%s", i, rov_context_rail_name(g.ctx, i));
    fputc('\n', stderr);
    return discover();
}

static void teardown(void)
{
    g.tearing_down = true;
    if (g.ep)
        rov_endpoint_destroy(g.ep);
    if (g.ctx)
        rov_context_destroy(g.ctx); /* cancels what is left; callbacks may run */
    for (int r = 0; g.peers && r < g.size; r++)
        free(g.peers[r].seen);
    free(g.peers);
    free(g.tx);
    free(g.expect);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rov_job --size N [options]   (one rank; RAILOVER_JOBID, RAILOVER_RANK,\n"
            "       RAILOVER_JOB_DIR, RAILOVER_RAILS, RAILOVER_CCP_ADDR in the environment)\n"
            "  --size N           ranks in the job (2..%d)\n"
            "  --msgs M           messages to each peer (default 1000)\n"
            "  --msg-size BYTES   bytes per message, header included (%d..1048576, default 4096)\n"
            "  --rate R           messages per second to each peer (default 200; 0: as fast as\n"
            "                     the window allows)\n"
            "  --compute-file PATH  while PATH exists, compute: call no rov_* function\n"
            "  --hurry-file PATH  once PATH exists, send the rest at --rate 0\n"
            "  --linger S         stay S seconds after the run, progressing\n"
            "  --die-at STAGE     exit 3 as STAGE (quiesce, close, checkpoint, reopen) begins:\n"
            "                     its stage hook ends the process inside the client's request\n"
            "  --timeout S        give up after S seconds (exit 1; default 0: never)\n"
            "stdout: rank=R size=N sent=S received=V bad=B lost=L dup=D ooo=O result=ok|FAIL\n"
            "Exit status: 0 result=ok, 1 failure or timeout, 64 usage.\n",
            MAX_SIZE, HDR_LEN);
}

static uint64_t parse_u64(const char *opt, const char *s)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "rov_job: %s: '%s' is not a non-negative integer\n", opt, s);
        exit(EXIT_USAGE);
    }
    return v;
}

static void parse_args(int argc, char **argv)
{
    static const struct option opts[] = {
        {"size", required_argument, NULL, 'n'},
        {"msgs", required_argument, NULL, 'm'},
        {"msg-size", required_argument, NULL, 's'},
        {"rate", required_argument, NULL, 'r'},
        {"compute-file", required_argument, NULL, 'c'},
        {"hurry-file", required_argument, NULL, 'u'},
        {"die-at", required_argument, NULL, 'd'},
        {"linger", required_argument, NULL, 'l'},
        {"timeout", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t size = 0, msg_size = 4096;
    char *end;
    int c;

    g.msgs = 1000;
    g.rate = 200;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'n': size = parse_u64("--size", optarg); break;
        case 'm': g.msgs = parse_u64("--msgs", optarg); break;
        case 's': msg_size = parse_u64("--msg-size", optarg); break;
        case 'r':
            g.rate = strtod(optarg, &end);
            if (end == optarg || *end || !(g.rate >= 0)) {
                fprintf(stderr, "rov_job: --rate: '%s' is not a non-negative number\n", optarg);
                exit(EXIT_USAGE);
            }
            break;
        case 'c': g.compute_file = optarg; break;
        case 'u': g.hurry_file = optarg; break;
        case 'd': g.die_at = optarg; break;
        case 'l': g.linger_s = (unsigned)parse_u64("--linger", optarg); break;
        case 't': g.timeout_s = (unsigned)parse_u64("--timeout", optarg); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(EXIT_USAGE);
        }
    }
    if (optind != argc || size < 2 || size > MAX_SIZE || msg_size < HDR_LEN ||
        msg_size > 1048576 || g.msgs > (1ull << 32)) {
        usage(stderr);
        exit(EXIT_USAGE);
    }
    g.size = (int)size;
    g.msg_size = (size_t)msg_size;
}

int main(int argc, char **argv)
{
    int rc;

    g.t0 = now_ns();
    g.rank = -1;
    parse_args(argc, argv);
    setvbuf(stderr, NULL, _IOLBF, 0);
    crc_init();
    if (g.timeout_s)
        g.deadline = g.t0 + (uint64_t)g.timeout_s * 1000000000ull;
    g.peers = calloc((size_t)g.size, sizeof(*g.peers));
    g.tx = malloc(g.msg_size);
    g.expect = malloc(g.msg_size);
    if (!g.peers || !g.tx || !g.expect) {
        fprintf(stderr, "rov_job: out of memory\n");
        return EXIT_FAIL;
    }
    for (int r = 0; r < g.size; r++) {
        g.peers[r].rank = r;
        if (!(g.peers[r].seen = calloc(g.msgs / 8 + 1, 1))) {
            fprintf(stderr, "rov_job: out of memory\n");
            return EXIT_FAIL;
        }
    }
    rc = setup() == 0 && run() == 0 ? 0 : EXIT_FAIL;
    if (g.ctx && g.rank >= 0) {
        report(now_ns(), true);
        if (!verdict())
            rc = EXIT_FAIL;
        fprintf(stderr, "[rank %ld]: %s after %.2f s\n", g.rank, rc ? "FAILED" : "done",
                (double)(now_ns() - g.t0) / 1e9);
    }
    if (g.ctx && g.linger_s)
        linger();
    teardown();
    return rc;
}
