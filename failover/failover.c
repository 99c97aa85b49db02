/*
 * The failover engine (see failover.h): detection, reroute, failback and
 * operator control, on top of the transport's switch primitive.
 *
 * Everything runs from a periodic timer in the context's epoll set (every
 * RAILOVER_FAILOVER_TIMEOUT / 50, between 1 and 5 ms, while connections
 * exist) and from the transport's failure upcalls.  Nothing here runs per
 * message: the busy-poll fast path does not know the engine exists.
 */
#include "failover/failover.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "transport/control.h"
#include "transport/core.h"
#include "transport/log.h"

#define MS UINT64_C(1000000)
#define TICK_MIN_NS (1 * MS)
#define TICK_MAX_NS (5 * MS)
#define FLAPS_MAX 4         /* the dwell grows to 16x on a flapping path */
#define STABLE_DWELLS 8     /* this many dwells on the rail: forgive its past */
#define CHECK_MAX_NS (20 * MS) /* each connection is checked this often at least */
#define LINK_UP_QUICK_NS (2000 * MS) /* after link up, failed reconnects retry at once */
/* Reconnects per process: a burst as large as a big job's connection count
 * (a switch that dies under every connection at once), then 500 a second.
 * Each connection's own rails back off (RAILOVER_FAILBACK_RETRY doubling
 * to _RETRY_MAX) besides. */
#define ROV_FO_CONNECT_BURST 1024
#define ROV_FO_CONNECT_INTERVAL_NS (2 * MS)

/* Classification ------------------------------------------------------------ */

rov_reason_t rov_fo_classify(rov_status_t status, rov_reason_t reason)
{
    if (reason != ROV_REASON_NONE)
        return reason;
    switch (status) {
    case ROV_ERR_RESET: return ROV_REASON_FAIL_RESET;
    case ROV_ERR_CLOSED: return ROV_REASON_FAIL_CLOSED;
    case ROV_ERR_UNREACHABLE:
    case ROV_ERR_REFUSED: return ROV_REASON_FAIL_UNREACH;
    case ROV_ERR_TIMEDOUT: return ROV_REASON_FAIL_STALL;
    default: return ROV_REASON_FAIL_ERROR;
    }
}

rov_reason_t rov_fo_peer_reason(rov_reason_t reason)
{
    switch (reason) {
    case ROV_REASON_FAIL_ERROR:
    case ROV_REASON_FAIL_RESET:
    case ROV_REASON_FAIL_CLOSED:
    case ROV_REASON_FAIL_UNREACH:
    case ROV_REASON_FAIL_STALL:
    case ROV_REASON_FAIL_KEEPALIVE:
    case ROV_REASON_FAIL_INJECTED: return ROV_REASON_PEER_FAILOVER;
    case ROV_REASON_FAILBACK: return ROV_REASON_PEER_FAILBACK;
    case ROV_REASON_API: return ROV_REASON_PEER_API;
    default: return ROV_REASON_PEER_ADMIN; /* admin.*, and hold announcements */
    }
}

/* Errors that mean a bug (ours, the rail's or the provider's), not a path
 * failure: reported loudly, and the connection is not moved to hide them. */
static bool is_bug(rov_status_t status)
{
    return status == ROV_ERR_INVAL || status == ROV_ERR_PROTO || status == ROV_ERR_MSGSIZE;
}

/* Helpers -------------------------------------------------------------------- */

static const struct rov_config *cfg(const struct rov_conn *conn)
{
    return &conn->ctx->config;
}

static bool live(const struct rov_conn *conn)
{
    return conn->state == ROV_CONN_ESTABLISHED || conn->state == ROV_CONN_CLOSING;
}

/* The side with the smaller endpoint id reconnects failed rails and decides
 * the move back; the other follows. */
static bool leads(const struct rov_conn *conn)
{
    return rov_conn_ep_cmp(conn) < 0;
}

static bool held(const struct rov_conn *conn)
{
    return conn->fo.hold || conn->fo.peer_hold || conn->ctx->fo.hold_all;
}

/* The most preferred rail both sides have, or -1. */
static int best_rail(const struct rov_conn *conn)
{
    for (int i = 0; i < conn->ctx->nrails; i++)
        if (rov_conn_peer_has_rail(conn, i))
            return i;
    return -1;
}

/* Where to go from rail `from`: the next rail in RAILOVER_RAILS order that
 * both sides have and that is not down (never failed, or passed its probe
 * since: a handshake on a new channel); with `any` (an operator's move),
 * else one whose retry is due, else any.  -1 when none. */
static int next_rail(const struct rov_conn *conn, int from, uint64_t now, bool any)
{
    int n = conn->ctx->nrails;

    for (int pass = 0; pass < (any ? 3 : 1); pass++) {
        for (int k = 1; k < n; k++) {
            int i = (from + k) % n;
            const struct rov_fo_rail *r = &conn->fo.rails[i];

            if (!rov_conn_peer_has_rail(conn, i))
                continue;
            if (r->state != ROV_FO_DOWN || (pass == 1 && now >= r->retry_ns) || pass == 2)
                return i;
        }
    }
    return -1;
}

static uint64_t dwell_ns(const struct rov_conn *conn)
{
    unsigned f = conn->fo.flaps < FLAPS_MAX ? conn->fo.flaps : FLAPS_MAX;

    return cfg(conn)->failback_dwell_ns << f;
}

static void forget_chan(struct rov_fo_rail *r, uint64_t serial)
{
    r->chan_serial = serial;
    r->busy_since_ns = 0;
    r->healthy_since_ns = 0;
    r->probe_sent = false;
}

/* A retry's wait: anywhere in [backoff / 2, backoff], differently for each
 * connection and attempt.  Connections that failed together (a switch died
 * under all of them) would otherwise retry together, at the instants of one
 * doubling schedule: after a repair all of them waited for the next instant,
 * up to RAILOVER_FAILBACK_RETRY_MAX (5 s) away (256 connections came back a
 * median 6.8 s after the heal).  Spread, one of N retries within about
 * backoff / N of the repair, and its successful handshake brings the
 * others to the same peer along at once (path_up()). */
static uint64_t jittered(const struct rov_conn *conn, int rail, uint64_t backoff, uint64_t now)
{
    uint64_t x = now ^ (conn->id * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)rail << 56);

    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return backoff / 2 + x % (backoff / 2 + 1);
}

static void mark_down(struct rov_conn *conn, int rail, rov_status_t status, uint64_t now)
{
    struct rov_fo_rail *r = &conn->fo.rails[rail];
    const struct rov_config *c = cfg(conn);

    if (r->state != ROV_FO_DOWN)
        r->down_since_ns = now;
    r->state = ROV_FO_DOWN;
    r->path_ok = false;
    r->path_since_ns = 0;
    r->down_status = status;
    forget_chan(r, 0);
    if (r->link_up_ns && now - r->link_up_ns < LINK_UP_QUICK_NS) {
        /* A reconnect soon after the link came back failed: its SYN waited
         * for the kernel's neighbour entry, which the fault left unresolved
         * until its next probe (ARP and ND: 1 s, retrans_time_ms), or that
         * ran out of probes under it (host unreachable).  The next attempt
         * goes at once, not after a step the fault doubled, and one then
         * starts a new resolution.  (Letting the first attempt wait for the
         * probe instead cost 1,024 connections 0.1-0.6 s more: the entry
         * queues few packets, and the SYNs it dropped waited for TCP's 1 s
         * retransmission.) */
        r->retry_ns = now;
        return;
    }
    r->link_up_ns = 0;
    r->backoff_ns = r->backoff_ns ? r->backoff_ns * 2 : c->failback_retry_ns;
    if (r->backoff_ns > c->failback_retry_max_ns)
        r->backoff_ns = c->failback_retry_max_ns;
    r->retry_ns = now + jittered(conn, rail, r->backoff_ns, now);
}

/* Whether a new channel may be connected now, from the context's reconnect
 * budget; if not, *when_p says when. */
static bool connect_allowed(rov_context_t *ctx, uint64_t now, uint64_t *when_p)
{
    const uint64_t burst = ROV_FO_CONNECT_BURST * ROV_FO_CONNECT_INTERVAL_NS;
    uint64_t tat = ctx->fo.connect_tat_ns > now ? ctx->fo.connect_tat_ns : now;

    if (tat - now >= burst) {
        *when_p = tat - burst + ROV_FO_CONNECT_INTERVAL_NS;
        if (!ctx->fo.connects_limited++)
            rov_warn("failover", "reconnects limited to %llu a second after a burst of %d: "
                     "connections wait their turn", 1000000000ull / ROV_FO_CONNECT_INTERVAL_NS,
                     ROV_FO_CONNECT_BURST);
        return false;
    }
    ctx->fo.connect_tat_ns = tat + ROV_FO_CONNECT_INTERVAL_NS;
    return true;
}

/* Move conn to rail `to`, leaving `failed` (or -1).  A move that needs a
 * new channel goes through the backoff of the target rail (a rail that
 * failed is retried no sooner than its retry time) and through the
 * context's reconnect budget; until then the connection waits (sends are
 * retained, check_conn() makes the move when it is due).  Without this, a
 * peer that drops every new channel before its handshake had a connection
 * bounce between two rails tens of thousands of times a second.  False when
 * the move failed. */
static bool move_or_wait(struct rov_conn *conn, int to, rov_reason_t reason, const char *why,
                         int failed, uint64_t now)
{
    struct rov_fo_rail *r = &conn->fo.rails[to];
    struct rov_chan *chan = conn->chans[to];
    uint64_t when = 0;
    rov_status_t st;

    if (!chan || chan->state == ROV_CHAN_CLOSED) {
        if (r->state == ROV_FO_DOWN && now < r->retry_ns)
            when = r->retry_ns;
        else if (!r->path_ok)
            connect_allowed(conn->ctx, now, &when);
        r->path_ok = false;
    }
    if (!when) {
        conn->fo.wait_to = 0;
        st = rov_conn_move(conn, to, reason, why, failed >= 0 ? ROV_HF_FAILED : 0, failed);
        if (st == ROV_OK || st == ROV_INPROGRESS)
            return true;
        if (!rov_conn_peer_has_rail(conn, to) ||
            (st != ROV_ERR_UNREACHABLE && st != ROV_ERR_REFUSED && st != ROV_ERR_RESET &&
             st != ROV_ERR_TIMEDOUT && st != ROV_ERR_CLOSED)) {
            rov_warn("failover", "conn %llu: cannot move to %s: %s",
                     (unsigned long long)conn->id, rov_context_rail_name(conn->ctx, to),
                     rov_status_str(st));
            return false;
        }
        /* The rail cannot even start a connect (its link is down here: no
         * route): it failed; the move waits for its next retry. */
        rov_debug("failover", "conn %llu: %s: %s", (unsigned long long)conn->id,
                  rov_context_rail_name(conn->ctx, to), rov_status_str(st));
        mark_down(conn, to, st, now);
        when = r->retry_ns;
    }
    rov_debug("failover", "conn %llu: moves to %s in %.1f ms (backoff)",
              (unsigned long long)conn->id, rov_context_rail_name(conn->ctx, to),
              (double)(when - now) / 1e6);
    conn->fo.wait_to = (uint8_t)(to + 1);
    conn->fo.wait_failed = (uint8_t)(failed + 1);
    conn->fo.wait_reason = reason;
    conn->fo.wait_ns = when;
    return true;
}

/* Tick ------------------------------------------------------------------------- */

/* The engine runs every tick_ns while it watches a connection: from the
 * context's progress when the caller polls, from the context's timer when
 * it sleeps (rov_fo_poll(), rov_fo_due_ns()).  It owns no timer: a process
 * that busy-polls takes no timer interrupts from it. */
static void start_ticks(rov_context_t *ctx)
{
    if (!ctx->config.failover || ctx->fo.active)
        return;
    ctx->fo.active = true;
    ctx->fo.next_ns = rov_now_ns() + ctx->fo.tick_ns;
}

/* Failure handling --------------------------------------------------------------- */

bool rov_fo_chan_failed(struct rov_conn *conn, int rail, rov_status_t status,
                        rov_reason_t reason, const char *why)
{
    uint64_t now = rov_now_ns();
    int to;

    if (!cfg(conn)->failover)
        return false;
    if (is_bug(status)) {
        rov_error("failover", "conn %llu: %s channel failed with '%s' (%s): this is a bug, "
                  "not a path failure; not moving the connection",
                  (unsigned long long)conn->id, rov_context_rail_name(conn->ctx, rail), why,
                  rov_status_str(status));
        return false;
    }
    /* Failing the rail we came back to soon after: the path flaps. */
    if (rail == conn->tx_rail && conn->fo.back_ns && now - conn->fo.back_ns < 4 * dwell_ns(conn) &&
        conn->fo.flaps < FLAPS_MAX)
        conn->fo.flaps++;
    mark_down(conn, rail, status, now);
    if (rail != conn->tx_rail || !conn->peer_id)
        return true;
    to = next_rail(conn, rail, now, false);
    if (to < 0 && status == ROV_ERR_REFUSED) {
        /* Every other rail failed and this one refuses: nothing listens
         * for us any more (the peer process is gone).  Moving on would
         * only spin between refusing rails. */
        rov_warn("failover", "conn %llu: %s refused and no other rail reaches the peer",
                 (unsigned long long)conn->id, rov_context_rail_name(conn->ctx, rail));
        return false;
    }
    if (to < 0) {
        /* Every other rail is down and has not passed a probe since: the
         * connection never goes back to one of those (with a fallback
         * rail wrongly judged stalled, connections bounced between it and
         * a fabric still dead, ~1,150 switches per side in 32 s at 256
         * connections).  It reconnects this rail after its backoff, a new
         * channel; the leader keeps probing the better rails, and a rail
         * whose probe passes is up again. */
        return move_or_wait(conn, rail, reason, why, -1, now);
    }
    return move_or_wait(conn, to, reason, why, rail, now);
}

void rov_fo_peer_failed(struct rov_conn *conn, int rail)
{
    struct rov_chan *chan = conn->chans[rail];

    if (!cfg(conn)->failover)
        return;
    rov_debug("failover", "conn %llu: peer reports %s failed", (unsigned long long)conn->id,
              rov_context_rail_name(conn->ctx, rail));
    /* Through the normal failure path: if we were still sending there (our
     * own move there crossed the peer's move away), we move on too. */
    if (chan)
        rov_conn_chan_failed_reason(chan, ROV_ERR_RESET, "the peer reports this rail failed",
                                    ROV_REASON_PEER_FAILOVER);
    else
        mark_down(conn, rail, ROV_ERR_RESET, rov_now_ns());
}

/* Periodic checks -------------------------------------------------------------------- */

/* A rail that was down for conn passed its probe (a new channel's
 * handshake): the path works again (rail.h, path_key: the peer's remote
 * interface, which the connections to every process on that host share,
 * an MPI rank's to each remote rank), whatever the backoff of the other
 * connections on it says.  Their reconnects (the leader's) and
 * their waiting moves are due now, and outside the context's reconnect
 * budget (path_ok): a thousand connections come back within one probe of
 * the path, not each within its own doubled step, nor at the budget's 500
 * a second (which the retries of a long fault leave empty: 1,024
 * connections came back spread evenly over two seconds after the heal). */
/* c's reconnect of rail, or its move waiting for rail, is due now. */
static void wake(struct rov_conn *c, int rail, uint64_t now)
{
    struct rov_fo_rail *r = &c->fo.rails[rail];

    if (r->state == ROV_FO_DOWN && r->retry_ns > now)
        r->retry_ns = c->fo.check_due_ns = now;
    if (c->fo.wait_to == rail + 1 && c->fo.wait_ns > now)
        c->fo.wait_ns = c->fo.check_due_ns = now;
}

static void path_up(struct rov_conn *conn, int rail, uint64_t now)
{
    uint64_t path = conn->fo.rails[rail].path;

    if (!path)
        return;
    for (struct rov_conn *c = conn->ctx->conns; c; c = c->next) {
        struct rov_fo_rail *r = &c->fo.rails[rail];

        if (c == conn || !c->peer_id || r->path != path)
            continue;
        if (r->state == ROV_FO_DOWN || c->fo.wait_to == rail + 1)
            r->path_ok = true;
        if (r->state == ROV_FO_DOWN && !r->path_since_ns)
            r->path_since_ns = now;
        wake(c, rail, now);
    }
}

/* The rail's own link came back (rov_rail_link_up(): an interface up and
 * running again, an RDMA port active): every connection whose channel on it
 * failed retries now with its backoff restarted, instead of at the end of
 * a step that a long fault has doubled up to RAILOVER_FAILBACK_RETRY_MAX.
 * Through the reconnect budget: the local link says nothing of the far
 * side.  A retry that fails within LINK_UP_QUICK_NS goes again at once
 * (mark_down()), later ones back off from the first step. */
void rov_fo_rail_up(rov_context_t *ctx, int rail)
{
    uint64_t now = rov_now_ns();

    for (struct rov_conn *c = ctx->conns; c; c = c->next) {
        struct rov_fo_rail *r = &c->fo.rails[rail];

        if (r->state == ROV_FO_DOWN) {
            r->link_up_ns = now;
            r->backoff_ns = 0;
        }
        wake(c, rail, now);
    }
    if (ctx->fo.active)
        ctx->fo.next_ns = now;
}

static rov_status_t health(struct rov_chan *chan, uint64_t now, struct rov_chan_health *h)
{
    memset(h, 0, sizeof(*h));
    if (chan->silent) {
        h->busy = 1;
        h->queued = 0;
        h->heard_ago_ns = now - chan->silent_since_ns;
        h->sent_ago_ns = 0;
        return ROV_OK;
    }
    return chan->rail->ops.chan_health(chan, h);
}

/* A stall on one connection to a peer is news for every other connection to
 * that peer endpoint (they share the path): they are checked at the next
 * tick instead of at their turn (check_ns()), each on its own evidence. */
static void check_siblings_now(struct rov_conn *conn, uint64_t now)
{
    for (struct rov_conn *c = conn->ctx->conns; c; c = c->next)
        if (c != conn && c->fo.check_due_ns > now && c->peer_id &&
            memcmp(c->peer.ep_id, conn->peer.ep_id, ROV_EP_ID_LEN) == 0)
            c->fo.check_due_ns = now;
}

/* Check one channel; false when it failed (the connection may have moved). */
static bool check_chan(struct rov_conn *conn, struct rov_chan *chan, uint64_t now)
{
    struct rov_fo_rail *r = &conn->fo.rails[chan->rail->index];
    const struct rov_config *c = cfg(conn);
    struct rov_chan_health h;
    rov_status_t st;

    if (chan->serial != r->chan_serial) {
        forget_chan(r, chan->serial);
        r->busy_since_ns = now; /* connect or handshake started */
        r->opened_ns = now;
    }
    if (chan->state == ROV_CHAN_CONNECTING) {
        /* The rail's own connect (TCP handshake, RC connection) is due
         * within the timeout; what needs the peer's application to progress
         * (the HELLO_ACK, a rail's out-of-band handshake) is not timed. */
        if (chan->rail->ops.chan_health && health(chan, now, &h) == ROV_OK && h.peer_turn) {
            r->busy_since_ns = now;
            return true;
        }
        /* A retry of a failed rail gives up sooner: one whose SYN (or
         * SYN-ACK) was lost while the path was still broken would wait for
         * the kernel's retransmission (1 s, then 3 s) although the path may
         * have healed since; a fresh attempt, due at once, goes out now.
         * Sooner means RETRY_MAX, or four times what the rail's last
         * completed connect took if that is longer (a UCX wire-up under
         * TCG takes hundreds of ms); the full timeout before any did. */
        uint64_t limit = c->failover_timeout_ns;
        bool retry = false, first = false;

        if (!r->connect_ns && c->connect_timeout_ns > limit) {
            /* No connect of this rail has completed for this connection
             * yet: connection setup may take longer than a stall. */
            limit = c->connect_timeout_ns;
            first = true;
        } else if (r->state == ROV_FO_DOWN && r->connect_ns) {
            uint64_t l = 4 * r->connect_ns > c->failback_retry_max_ns ? 4 * r->connect_ns
                                                                      : c->failback_retry_max_ns;
            retry = l < limit;
            limit = retry ? l : limit;
        }

        if (now - r->busy_since_ns >= limit) {
            rov_conn_chan_failed_reason(chan, ROV_ERR_TIMEDOUT,
                                        retry ? "reconnect did not complete as soon as "
                                                "the last connect did"
                                        : first ? "connect did not complete within "
                                                  "RAILOVER_CONNECT_TIMEOUT"
                                                : "connect did not complete within "
                                                  "RAILOVER_FAILOVER_TIMEOUT",
                                        ROV_REASON_FAIL_STALL);
            if (retry)
                r->retry_ns = now; /* the attempt was the wait */
            return false;
        }
        return true;
    }
    if (!chan->rail->ops.chan_health)
        return true;
    /* An open channel whose HELLO is still unanswered is not healthy yet,
     * but its rail must still deliver the HELLO: a lost one (the path died
     * during the handshake) shows as busy with no completion. */
    if (chan->handshaken && !r->healthy_since_ns) {
        r->connect_ns = (now - r->opened_ns) | 1; /* (0: none yet) */
        /* Passed its probe: the handshake.  One that another connection's
         * probe on the same path brought along counts the path's time,
         * not its own (one verdict per path): 1,024 handshakes after a
         * heal take some 100 ms, and each waited its own dwell after. */
        uint64_t path_since = r->path_since_ns;

        r->healthy_since_ns = path_since && path_since < now ? path_since : now;
        r->path_since_ns = 0;
        r->busy_since_ns = 0;
        r->link_up_ns = 0;
        if (r->state == ROV_FO_DOWN && !path_since) /* (else woken already) */
            path_up(conn, chan->rail->index, now);
        r->state = ROV_FO_UP;
    }
    st = health(chan, now, &h);
    if (st != ROV_OK) {
        rov_conn_chan_failed(chan, st, "the rail reports the channel broken");
        return false;
    }
    r->heard_ago_ns = h.busy ? h.heard_ago_ns : 0;
    if (!h.busy) {
        r->busy_since_ns = 0;
        r->probe_sent = false;
        if (!chan->handshaken)
            return true;
        /* Probe an idle channel; one held back by flow control has data
         * waiting already, and a probe would only queue behind it. */
        if (c->keepalive_ns && !h.queued && h.sent_ago_ns >= c->keepalive_ns &&
            now - r->probe_ns >= c->keepalive_ns && rov_conn_probe(chan) == ROV_OK) {
            r->probe_sent = true;
            r->probe_ns = now;
            r->busy_since_ns = now;
        }
        return chan->state != ROV_CHAN_CLOSED;
    }
    if (!r->busy_since_ns)
        r->busy_since_ns = now;
    /* A transport that retransmits by itself (TCP) gets a quarter of the
     * timeout for the answer to its latest retransmission: its own
     * recovery of a lost segment waits for its RTO (200 ms at least), so
     * a loss near the end of a 250 ms timeout is not a dead path.  With
     * 1,024 connections on one host, TCP's memory pressure drops segments
     * (TcpExtPruneCalled 9,940 in 6 s) and 72 of them were judged stalled
     * on loopback; a dead path leaves the retransmission unanswered. */
    if (now - r->busy_since_ns >= c->failover_timeout_ns &&
        h.heard_ago_ns >= c->failover_timeout_ns &&
        (!h.retransmits || h.sent_ago_ns >= c->failover_timeout_ns / 4)) {
        check_siblings_now(conn, now);
        if (r->probe_sent)
            rov_conn_chan_failed_reason(chan, ROV_ERR_TIMEDOUT,
                                        "keepalive probe not acknowledged by the rail within "
                                        "RAILOVER_FAILOVER_TIMEOUT", ROV_REASON_FAIL_KEEPALIVE);
        else
            rov_conn_chan_failed_reason(chan, ROV_ERR_TIMEDOUT,
                                        "posted work not completed by the rail within "
                                        "RAILOVER_FAILOVER_TIMEOUT", ROV_REASON_FAIL_STALL);
        return false;
    }
    return true;
}

/* The leader reconnects a better rail that has no channel, with backoff. */
static void retry_rail(struct rov_conn *conn, int rail, uint64_t now)
{
    struct rov_fo_rail *r = &conn->fo.rails[rail];
    rov_status_t st;

    uint64_t when;

    if (r->state == ROV_FO_DOWN && now < r->retry_ns)
        return;
    if (!r->path_ok && !connect_allowed(conn->ctx, now, &when)) {
        r->retry_ns = when;
        return;
    }
    r->path_ok = false;
    rov_debug("failover", "conn %llu: retrying %s", (unsigned long long)conn->id,
              rov_context_rail_name(conn->ctx, rail));
    st = rov_conn_open_rail(conn, rail);
    if (st != ROV_OK) {
        rov_debug("failover", "conn %llu: %s: %s", (unsigned long long)conn->id,
                  rov_context_rail_name(conn->ctx, rail), rov_status_str(st));
        mark_down(conn, rail, st, now);
    }
}

static void maybe_failback(struct rov_conn *conn, uint64_t now)
{
    int best = best_rail(conn);
    struct rov_fo_rail *r;
    struct rov_chan *chan;

    if (best < 0 || best >= conn->tx_rail || conn->tx_sync || held(conn) ||
        !cfg(conn)->failback || conn->state != ROV_CONN_ESTABLISHED || !leads(conn))
        return;
    chan = conn->chans[best];
    r = &conn->fo.rails[best];
    if (!chan) {
        retry_rail(conn, best, now);
        return;
    }
    if (!rov_conn_chan_ready(chan) || !r->healthy_since_ns ||
        now - r->healthy_since_ns < dwell_ns(conn))
        return;
    conn->fo.back_ns = now;
    rov_conn_move(conn, best, ROV_REASON_FAILBACK, "preferred rail healthy for the dwell", 0, -1);
}

/* The leader also probes the rails below the best that failed: a failure
 * moves a connection only onto a rail that is up, so a fallback rail that
 * failed once must pass a probe again before it can take the traffic (the
 * best rail is maybe_failback()'s).  Without it, a connection whose
 * fallback had failed once reconnected its failing rail for ever. */
static void probe_fallbacks(struct rov_conn *conn, uint64_t now)
{
    int best = best_rail(conn);

    if (!leads(conn) || conn->state != ROV_CONN_ESTABLISHED)
        return;
    for (int i = 0; i < conn->ctx->nrails; i++)
        if (i != best && i != conn->tx_rail && !conn->chans[i] &&
            conn->fo.rails[i].state == ROV_FO_DOWN && rov_conn_peer_has_rail(conn, i))
            retry_rail(conn, i, now);
}

/* Every rail the peer has is down, the last of them for
 * RAILOVER_UNREACHABLE_TIMEOUT: the peer is unreachable (gone, stopped, or
 * cut off on every path), and the connection fails, naming each rail and
 * its last failure, instead of reconnecting for ever.  A rail passing its
 * probe (a handshake) is up again and ends the count.  False: not so. */
static bool unreachable(struct rov_conn *conn, uint64_t now)
{
    uint64_t limit = cfg(conn)->unreachable_timeout_ns, since = 0;
    char why[256];
    size_t off;

    if (!limit)
        return false;
    for (int i = 0; i < conn->ctx->nrails; i++) {
        const struct rov_fo_rail *r = &conn->fo.rails[i];

        if (!rov_conn_peer_has_rail(conn, i))
            continue;
        if (r->state != ROV_FO_DOWN)
            return false;
        since = r->down_since_ns > since ? r->down_since_ns : since;
    }
    /* now is the tick's; a rail marked down since then is newer. */
    if (!since || now < since || now - since < limit)
        return false;
    off = (size_t)snprintf(why, sizeof(why), "no rail has reached the peer for %.1f s (",
                           (double)(now - since) / 1e9);
    for (int i = 0; i < conn->ctx->nrails && off < sizeof(why); i++)
        if (rov_conn_peer_has_rail(conn, i))
            off += (size_t)snprintf(why + off, sizeof(why) - off, "%s%s: %s",
                                    why[off - 1] == '(' ? "" : ", ",
                                    rov_context_rail_name(conn->ctx, i),
                                    rov_status_str(conn->fo.rails[i].down_status));
    if (off < sizeof(why))
        snprintf(why + off, sizeof(why) - off, "; RAILOVER_UNREACHABLE_TIMEOUT)");
    rov_conn_fail(conn, ROV_ERR_UNREACHABLE, why);
    return true;
}

static void check_conn(struct rov_conn *conn, uint64_t now)
{
    if (unreachable(conn, now))
        return;
    if (conn->fo.wait_to) {
        int to = conn->fo.wait_to - 1;

        if (conn->chans[conn->tx_rail]) {
            conn->fo.wait_to = 0; /* moved meanwhile (the peer's move) */
        } else if (now < conn->fo.wait_ns) {
            return;
        } else {
            conn->fo.wait_to = 0;
            if (!move_or_wait(conn, to, conn->fo.wait_reason, "retry after backoff",
                              conn->fo.wait_failed - 1, now))
                rov_conn_fail(conn, ROV_ERR_UNREACHABLE, "no rail reaches the peer");
            return;
        }
    }
    if (!conn->chans[conn->tx_rail]) {
        /* Every path that closes the transmit channel moves the connection;
         * this is the net under them. */
        rov_error("failover", "conn %llu: no channel on its transmit rail %s; moving it",
                  (unsigned long long)conn->id, rov_context_rail_name(conn->ctx, conn->tx_rail));
        rov_fo_chan_failed(conn, conn->tx_rail, ROV_ERR_RESET, ROV_REASON_FAIL_CLOSED,
                           "no channel on the transmit rail");
        return;
    }
    for (int i = 0; i < conn->ctx->nrails; i++) {
        struct rov_chan *chan = conn->chans[i];

        if (chan && !check_chan(conn, chan, now))
            return; /* a failure changed the connection: look again next tick */
    }
    /* A path that stayed up long after the move back is forgiven. */
    if (conn->fo.back_ns && conn->tx_rail == best_rail(conn) &&
        now - conn->fo.back_ns > STABLE_DWELLS * dwell_ns(conn)) {
        conn->fo.flaps = 0;
        conn->fo.back_ns = 0;
        conn->fo.rails[conn->tx_rail].backoff_ns = 0;
    }
    probe_fallbacks(conn, now);
    maybe_failback(conn, now);
}

/* How often each connection is checked: a sixteenth of the timeout, at
 * least a tick, at most CHECK_MAX_NS.  Checking every connection on every
 * tick cost two system calls per channel each 2.5 ms: with 1,024
 * connections, over 1.6 million a second, a core's worth. */
static uint64_t check_ns(const rov_context_t *ctx)
{
    uint64_t t = ctx->config.failover_timeout_ns / 16;

    return t < ctx->fo.tick_ns ? ctx->fo.tick_ns : t > CHECK_MAX_NS ? CHECK_MAX_NS : t;
}

/* Whether conn's turn has come; connections new to the engine are spread
 * over the ticks of one period. */
static bool check_due(struct rov_conn *c, uint64_t now, uint64_t period, uint64_t tick)
{
    if (!c->fo.check_due_ns)
        c->fo.check_due_ns = now + c->id % (period / tick) * tick;
    if (now < c->fo.check_due_ns)
        return false;
    c->fo.check_due_ns = now + period;
    return true;
}

void rov_fo_poll(rov_context_t *ctx, uint64_t now)
{
    uint64_t period = check_ns(ctx);
    bool any = false;

    if (!ctx->fo.active || now < ctx->fo.next_ns)
        return;
    ctx->fo.next_ns = now + ctx->fo.tick_ns;
    for (struct rov_conn *c = ctx->conns; c; c = c->next) {
        if (c->state == ROV_CONN_CONNECTING && c->tx_rail >= 0 && c->chans[c->tx_rail]) {
            /* First connect: a rail whose connect hangs (a blackholed
             * address) gives way to the next rail after the timeout. */
            any = true;
            if (check_due(c, now, period, ctx->fo.tick_ns))
                check_chan(c, c->chans[c->tx_rail], now);
            continue;
        }
        if (!live(c) || !c->peer_id)
            continue;
        any = true;
        if (check_due(c, now, period, ctx->fo.tick_ns))
            check_conn(c, now);
    }
    if (!any)
        ctx->fo.active = false;
}

uint64_t rov_fo_due_ns(const rov_context_t *ctx)
{
    return ctx->fo.active ? ctx->fo.next_ns : 0;
}

/* Life cycle -------------------------------------------------------------------------- */

void rov_fo_init(rov_context_t *ctx)
{
    uint64_t tick = ctx->config.failover_timeout_ns / 100;

    ctx->fo.tick_ns = tick < TICK_MIN_NS ? TICK_MIN_NS : tick > TICK_MAX_NS ? TICK_MAX_NS : tick;
}

static rov_status_t force(struct rov_conn *conn, bool on);

void rov_fo_conn_connecting(struct rov_conn *conn)
{
    start_ticks(conn->ctx);
}

void rov_fo_conn_up(struct rov_conn *conn)
{
    rov_context_t *ctx = conn->ctx;

    for (int i = 0; i < ctx->nrails; i++)
        conn->fo.rails[i].path = rov_conn_path_key(conn, i);

    if (ctx->fo.hold_all || conn->fo.hold) {
        conn->fo.hold = false;
        force(conn, true);
    }
    start_ticks(ctx);
}

/* Operator control ---------------------------------------------------------------------- */

static rov_status_t force(struct rov_conn *conn, bool on)
{
    int best = best_rail(conn), to;
    struct rov_chan *chan;

    if (conn->fo.hold == on)
        return ROV_OK;
    conn->fo.hold = on;
    if (conn->state != ROV_CONN_ESTABLISHED || !conn->peer_id)
        return ROV_ERR_BUSY; /* applied when it is (rov_fo_conn_up) */
    if (on) {
        if (conn->tx_rail != best) {
            rov_conn_announce(conn); /* already off it: tell the peer to stay */
            return ROV_OK;
        }
        to = next_rail(conn, conn->tx_rail, rov_now_ns(), true);
        if (to < 0 || to == best) {
            conn->fo.hold = false;
            return ROV_ERR_UNREACHABLE;
        }
        rov_info("failover", "conn %llu: forced off %s by an operator",
                 (unsigned long long)conn->id, rov_context_rail_name(conn->ctx, best));
        rov_conn_move(conn, to, ROV_REASON_ADMIN_FORCE, "forced onto a fallback rail", 0, -1);
        return ROV_OK;
    }
    rov_info("failover", "conn %llu: released by an operator", (unsigned long long)conn->id);
    chan = best >= 0 ? conn->chans[best] : NULL;
    if (best >= 0 && best < conn->tx_rail && rov_conn_chan_ready(chan) &&
        conn->fo.rails[best].healthy_since_ns && !conn->fo.peer_hold && !conn->ctx->fo.hold_all) {
        rov_conn_move(conn, best, ROV_REASON_ADMIN_RELEASE, "released by an operator", 0, -1);
        return ROV_OK;
    }
    rov_conn_announce(conn);
    if (best >= 0)
        conn->fo.rails[best].retry_ns = 0; /* the leader retries at once */
    return ROV_OK;
}

rov_status_t rov_conn_force_fallback(rov_conn_t *conn, int on)
{
    return force(conn, on != 0);
}

int rov_context_force_fallback(rov_context_t *ctx, const char *peer, int on)
{
    uint8_t id[ROV_EP_ID_LEN];
    int n = 0;

    if (peer && rov_wire_ep_id_parse(peer, id) != ROV_OK)
        return ROV_ERR_INVAL;
    if (!peer)
        ctx->fo.hold_all = on != 0;
    for (struct rov_conn *c = ctx->conns; c; c = c->next) {
        if (c->state == ROV_CONN_DEAD || c->state == ROV_CONN_FAILED)
            continue;
        if (peer && (!c->peer_id || memcmp(c->peer.ep_id, id, ROV_EP_ID_LEN) != 0))
            continue;
        force(c, on != 0);
        n++;
    }
    return n;
}

/* Control commands: status, force, release ------------------------------------------------ */

static void print_time(FILE *out, uint64_t realtime_ns)
{
    time_t secs = (time_t)(realtime_ns / 1000000000ull);
    struct tm tm;
    char buf[32];

    if (!realtime_ns) {
        fputc('-', out);
        return;
    }
    gmtime_r(&secs, &tm);
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(out, "%s.%03uZ", buf, (unsigned)(realtime_ns / 1000000ull % 1000));
}

static void print_conn(FILE *out, const struct rov_conn *conn, uint64_t now)
{
    rov_context_t *ctx = conn->ctx;
    rov_conn_stats_t st;
    char peer[ROV_EP_ID_HEX_LEN + 1] = "-";
    bool first = true;

    rov_conn_stats(conn, &st);
    if (conn->peer_id || conn->peer_blob_len)
        rov_wire_ep_id_hex(conn->peer.ep_id, peer);
    fprintf(out, "conn id=%llu peer=%s:%llu state=%s rail=%s(%d) forced=%s peer_forced=%s "
            "switches=%" PRIu64 " last_reason=%s last_switch=",
            (unsigned long long)conn->id, peer, (unsigned long long)conn->peer_id,
            rov_conn_state_name(conn->state), rov_context_rail_name(ctx, conn->tx_rail), conn->tx_rail,
            conn->fo.hold ? "yes" : "no", conn->fo.peer_hold ? "yes" : "no", st.switches,
            rov_reason_str(st.last_reason));
    print_time(out, st.last_switch_ns);
    fprintf(out, " retained_msgs=%" PRIu64 " retained_bytes=%" PRIu64 " tx_seq=%" PRIu64
            " rx_seq=%" PRIu64 " resent=%" PRIu64 " reasons=",
            st.retained_msgs, st.retained_bytes, st.tx_seq, st.rx_seq, st.msgs_resent);
    for (int i = 1; i < ROV_REASON_COUNT; i++) {
        if (!st.reasons[i])
            continue;
        fprintf(out, "%s%s:%" PRIu64, first ? "" : ",", rov_reason_str((rov_reason_t)i),
                st.reasons[i]);
        first = false;
    }
    if (first)
        fputc('-', out);
    fputc('\n', out);
    for (int i = 0; i < ctx->nrails; i++) {
        const struct rov_fo_rail *r = &conn->fo.rails[i];
        struct rov_chan *chan = conn->chans[i];
        char where[160] = "";

        if (!chan) {
            if (r->state == ROV_FO_DOWN)
                fprintf(out, "  chan rail=%s(%d) state=none health=down retry_in_ms=%lld\n",
                        rov_context_rail_name(ctx, i), i,
                        (long long)((int64_t)(r->retry_ns - now) / (int64_t)MS));
            continue;
        }
        if (chan->state == ROV_CHAN_OPEN)
            chan->rail->ops.chan_str(chan, where, sizeof(where));
        fprintf(out, "  chan rail=%s(%d) state=%s tx=%s health=", rov_context_rail_name(ctx, i), i,
                chan->state == ROV_CHAN_CONNECTING ? "connecting"
                : chan->handshaken                 ? "open" : "handshake",
                i == conn->tx_rail ? "yes" : "no");
        if (chan->silent)
            fputs("silenced", out);
        else if (!r->healthy_since_ns || r->chan_serial != chan->serial)
            fputs("unknown", out);
        else
            fprintf(out, "up_ms=%" PRIu64 " busy=%s unanswered_ms=%" PRIu64,
                    (now - r->healthy_since_ns) / MS, r->busy_since_ns ? "yes" : "no",
                    r->heard_ago_ns / MS);
        fprintf(out, " %s\n", where);
    }
}

static int cmd_status(rov_context_t *ctx, int argc, char **argv, FILE *out, char *err,
                      size_t err_len)
{
    const struct rov_config *c = &ctx->config;
    uint64_t now = rov_now_ns();
    int n = 0;

    (void)argv;
    if (argc > 1) {
        snprintf(err, err_len, "status takes no arguments");
        return 1;
    }
    for (struct rov_conn *conn = ctx->conns; conn; conn = conn->next)
        n++;
    fprintf(out, "failover=%s timeout_ms=%" PRIu64 " keepalive_ms=%" PRIu64 " failback=%s "
            "dwell_ms=%" PRIu64 " forced_all=%s conns=%d\n", c->failover ? "on" : "off",
            c->failover_timeout_ns / MS, c->keepalive_ns / MS, c->failback ? "on" : "off",
            c->failback_dwell_ns / MS, ctx->fo.hold_all ? "yes" : "no", n);
    for (struct rov_conn *conn = ctx->conns; conn; conn = conn->next)
        print_conn(out, conn, now);
    return 0;
}

/* force|release all | conn ID | peer EPID */
static int cmd_force(rov_context_t *ctx, int argc, char **argv, FILE *out, char *err,
                     size_t err_len)
{
    bool on = strcmp(argv[0], "force") == 0;
    int n = 0;

    if (argc == 2 && strcmp(argv[1], "all") == 0) {
        n = rov_context_force_fallback(ctx, NULL, on);
    } else if (argc == 3 && strcmp(argv[1], "peer") == 0) {
        n = rov_context_force_fallback(ctx, argv[2], on);
        if (n < 0) {
            snprintf(err, err_len, "'%s' is not an endpoint id (32 hex digits)", argv[2]);
            return 1;
        }
    } else if (argc == 3 && strcmp(argv[1], "conn") == 0) {
        char why[128];
        uint64_t id;
        struct rov_conn *conn = NULL;

        /* Digits only: strtoull() alone read "-1" as 2^64-1. */
        if (rov_parse_u64(argv[2], 1, UINT64_MAX, &id, why, sizeof(why)) != ROV_OK) {
            snprintf(err, err_len, "not a connection id: %s", why);
            return 1;
        }
        for (conn = ctx->conns; conn && conn->id != id; conn = conn->next)
            ;
        if (!conn || conn->state == ROV_CONN_DEAD) {
            snprintf(err, err_len, "no connection %llu", (unsigned long long)id);
            return 1;
        }
        rov_status_t st = force(conn, on);

        if (st == ROV_ERR_UNREACHABLE) {
            snprintf(err, err_len, "connection %llu has no other rail to go to", (unsigned long long)id);
            return 1;
        }
        n = 1;
    } else {
        snprintf(err, err_len, "usage: %s all | conn ID | peer EPID", argv[0]);
        return 1;
    }
    fprintf(out, "%s %d connection%s\n", on ? "forced" : "released", n, n == 1 ? "" : "s");
    return 0;
}

static const struct rov_ctl_cmd status_cmd = {
    "status", "status", "connections: rail, state, switches and reasons, retained data",
    cmd_status,
};
static const struct rov_ctl_cmd force_cmd = {
    "force", "force all|conn ID|peer EPID",
    "move connections to a fallback rail and keep them there (fabric maintenance)", cmd_force,
};
static const struct rov_ctl_cmd release_cmd = {
    "release", "release all|conn ID|peer EPID", "let forced connections move back", cmd_force,
};

ROV_CTL_REGISTER(status_cmd)
ROV_CTL_REGISTER(force_cmd)
ROV_CTL_REGISTER(release_cmd)
