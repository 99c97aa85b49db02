/*
 * The failover engine (see failover.h): detection, reroute, failback and
 * operator control, on top of the transport's switch primitive.
 *
 * Everything runs from the context's tick (the policy's tick hook: every
 * RAILOVER_FAILOVER_TIMEOUT / 100, between 1 and 5 ms, while connections
 * exist, from progress or the sleeper's timer; the engine owns no timer)
 * and from the transport's failure upcalls.  Nothing here runs per
 * message: the busy-poll fast path does not know the engine exists.
 */
#include "failover/failover.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "transport/backoff.h"
#include "transport/log.h"

static const struct rov_policy_ops failover_policy;

/* The engine's state in a connection, and in a context. */
static struct rov_fo_conn *F(const rov_conn_t *conn)
{
    return rov_policy_conn(conn, &failover_policy);
}

static struct rov_fo_ctx *E(const rov_context_t *ctx)
{
    return rov_policy_ctx(ctx, &failover_policy);
}

#define CTX(conn) rov_policy_ctx_of(conn)

static const struct rov_fo_settings *S(const rov_context_t *ctx)
{
    return rov_policy_settings(ctx, &failover_policy);
}

static bool has_chan(const rov_conn_t *conn, int rail)
{
    struct rov_policy_chan chan;

    return rov_policy_chan(conn, rail, &chan);
}

#define MS UINT64_C(1000000)
#define SEC (1000 * MS)
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

/* Errors that mean a bug (ours, the rail's or the provider's), not a path
 * failure: reported loudly, and the connection is not moved to hide them. */
static bool is_bug(rov_status_t status)
{
    return status == ROV_ERR_INVAL || status == ROV_ERR_PROTO || status == ROV_ERR_MSGSIZE;
}

/* Helpers -------------------------------------------------------------------- */

static const struct rov_policy_env *env_of(const rov_conn_t *conn)
{
    return rov_policy_env(CTX(conn));
}

/* The side with the smaller endpoint id reconnects failed rails and decides
 * the move back; the other follows. */
static bool leads(const rov_conn_t *conn)
{
    return rov_conn_ep_cmp(conn) < 0;
}

static bool held(const rov_conn_t *conn)
{
    return rov_policy_hold(conn) || rov_policy_peer_hold(conn) || rov_policy_hold_all(CTX(conn));
}

/* A rail's health, per connection: one table, one setter.  DOWN -> DOWN is
 * a failed retry (allowed, not a transition: neither logged nor counted). */
static const struct rov_state_info fo_states[] = {
    [ROV_FO_UP] = {"up", ROV_STATE_BIT(ROV_FO_DOWN) | ROV_STATE_BIT(ROV_FO_UP)},
    [ROV_FO_DOWN] = {"down", ROV_STATE_BIT(ROV_FO_UP) | ROV_STATE_BIT(ROV_FO_DOWN)},
};

static void fo_set_state(rov_conn_t *conn, int rail, enum rov_fo_rail_state state,
                         const char *why)
{
    struct rov_fo_rail *r = &F(conn)->rails[rail];
    char what[64];

    snprintf(what, sizeof(what), "conn %llu: %s", (unsigned long long)rov_policy_id(conn),
             rov_context_rail_name(CTX(conn), rail));
    if (!rov_state_change(fo_states, r->state, state, "failover", what, why,
                          &E(CTX(conn))->illegal_transitions))
        return;
    if (r->state != state)
        E(CTX(conn))->entered[state]++;
    r->state = (uint8_t)state;
}

/* The most preferred rail both sides have, or -1. */
static int best_rail(const rov_conn_t *conn)
{
    for (int i = 0; i < rov_policy_nrails(CTX(conn)); i++)
        if (rov_conn_peer_has_rail(conn, i))
            return i;
    return -1;
}

/* Where to go from rail `from`: the next rail in RAILOVER_RAILS order that
 * both sides have and that is not down (never failed, or passed its probe
 * since: a handshake on a new channel); with `any` (an operator's move),
 * else one whose retry is due, else any.  -1 when none. */
static int next_rail(const rov_conn_t *conn, int from, uint64_t now, bool any)
{
    int n = rov_policy_nrails(CTX(conn));

    for (int pass = 0; pass < (any ? 3 : 1); pass++) {
        for (int k = 1; k < n; k++) {
            int i = (from + k) % n;
            const struct rov_fo_rail *r = &F(conn)->rails[i];

            if (!rov_conn_peer_has_rail(conn, i))
                continue;
            if (r->state != ROV_FO_DOWN || (pass == 1 && now >= r->retry_ns) || pass == 2)
                return i;
        }
    }
    return -1;
}

static uint64_t dwell_ns(const rov_conn_t *conn)
{
    unsigned f = F(conn)->flaps < FLAPS_MAX ? F(conn)->flaps : FLAPS_MAX;

    return S(CTX(conn))->failback_dwell_ns << f;
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
static uint64_t jittered(const rov_conn_t *conn, int rail, uint64_t backoff, uint64_t now)
{
    uint64_t x = now ^ (rov_policy_id(conn) * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)rail << 56);

    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return backoff / 2 + x % (backoff / 2 + 1);
}

static void mark_down(rov_conn_t *conn, int rail, rov_status_t status, uint64_t now)
{
    struct rov_fo_rail *r = &F(conn)->rails[rail];
    const struct rov_fo_settings *s = S(CTX(conn));

    if (r->state != ROV_FO_DOWN)
        r->down_since_ns = now;
    fo_set_state(conn, rail, ROV_FO_DOWN, rov_status_str(status));
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
    r->retry_ns = now + jittered(conn, rail, rov_backoff_next(&r->backoff_ns, s->failback_retry_ns,
                                                              s->failback_retry_max_ns), now);
}

/* Whether a new channel may be connected now, from the context's reconnect
 * budget; if not, *when_p says when. */
static bool connect_allowed(rov_context_t *ctx, uint64_t now, uint64_t *when_p)
{
    const uint64_t burst = ROV_FO_CONNECT_BURST * ROV_FO_CONNECT_INTERVAL_NS;
    uint64_t tat = E(ctx)->connect_tat_ns > now ? E(ctx)->connect_tat_ns : now;

    if (tat - now >= burst) {
        *when_p = tat - burst + ROV_FO_CONNECT_INTERVAL_NS;
        if (!E(ctx)->connects_limited++)
            rov_warn("failover", "reconnects limited to %llu a second after a burst of %d: "
                     "connections wait their turn", 1000000000ull / ROV_FO_CONNECT_INTERVAL_NS,
                     ROV_FO_CONNECT_BURST);
        return false;
    }
    E(ctx)->connect_tat_ns = tat + ROV_FO_CONNECT_INTERVAL_NS;
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
static bool move_or_wait(rov_conn_t *conn, int to, rov_reason_t reason, const char *why,
                         int failed, uint64_t now)
{
    struct rov_fo_rail *r = &F(conn)->rails[to];
    struct rov_policy_chan chan;
    uint64_t when = 0;
    rov_status_t st;

    if (!rov_policy_chan(conn, to, &chan) || chan.state == ROV_CHAN_CLOSED) {
        if (r->state == ROV_FO_DOWN && now < r->retry_ns)
            when = r->retry_ns;
        else if (!r->path_ok)
            connect_allowed(CTX(conn), now, &when);
        r->path_ok = false;
    }
    if (!when) {
        F(conn)->wait_to = 0;
        st = rov_conn_move(conn, to, reason, why, failed);
        if (st == ROV_OK || st == ROV_INPROGRESS)
            return true;
        if (!rov_conn_peer_has_rail(conn, to) ||
            (st != ROV_ERR_UNREACHABLE && st != ROV_ERR_REFUSED && st != ROV_ERR_RESET &&
             st != ROV_ERR_TIMEDOUT && st != ROV_ERR_CLOSED)) {
            rov_warn("failover", "conn %llu: cannot move to %s: %s",
                     (unsigned long long)rov_policy_id(conn), rov_context_rail_name(CTX(conn), to),
                     rov_status_str(st));
            return false;
        }
        /* The rail cannot even start a connect (its link is down here: no
         * route): it failed; the move waits for its next retry. */
        rov_debug("failover", "conn %llu: %s: %s", (unsigned long long)rov_policy_id(conn),
                  rov_context_rail_name(CTX(conn), to), rov_status_str(st));
        mark_down(conn, to, st, now);
        when = r->retry_ns;
    }
    rov_debug("failover", "conn %llu: moves to %s in %.1f ms (backoff)",
              (unsigned long long)rov_policy_id(conn), rov_context_rail_name(CTX(conn), to),
              (double)(when - now) / 1e6);
    F(conn)->wait_to = (uint8_t)(to + 1);
    F(conn)->wait_failed = (uint8_t)(failed + 1);
    F(conn)->wait_reason = reason;
    F(conn)->wait_ns = when;
    return true;
}

/* Tick ------------------------------------------------------------------------- */

/* The engine runs every tick_ns while it watches a connection: from the
 * context's progress when the caller polls, from the context's timer when
 * it sleeps (rov_fo_poll(), rov_fo_due_ns()).  It owns no timer: a process
 * that busy-polls takes no timer interrupts from it. */
static void start_ticks(rov_context_t *ctx)
{
    if (!rov_policy_env(ctx)->failover || E(ctx)->active)
        return;
    E(ctx)->active = true;
    E(ctx)->next_ns = rov_now_ns() + E(ctx)->tick_ns;
}

/* Failure handling --------------------------------------------------------------- */

static bool fo_chan_failed(rov_conn_t *conn, int rail, rov_status_t status,
                           rov_reason_t reason, const char *why)
{
    uint64_t now = rov_now_ns();
    int to;

    if (!env_of(conn)->failover)
        return false;
    if (is_bug(status)) {
        rov_error("failover", "conn %llu: %s channel failed with '%s' (%s): this is a bug, "
                  "not a path failure; not moving the connection",
                  (unsigned long long)rov_policy_id(conn), rov_context_rail_name(CTX(conn), rail), why,
                  rov_status_str(status));
        return false;
    }
    /* Failing the rail we came back to soon after: the path flaps. */
    if (rail == rov_policy_tx_rail(conn) && F(conn)->back_ns && now - F(conn)->back_ns < 4 * dwell_ns(conn) &&
        F(conn)->flaps < FLAPS_MAX)
        F(conn)->flaps++;
    mark_down(conn, rail, status, now);
    if (rail != rov_policy_tx_rail(conn) || !rov_policy_peer_id(conn))
        return true;
    to = next_rail(conn, rail, now, false);
    if (to < 0 && status == ROV_ERR_REFUSED) {
        /* Every other rail failed and this one refuses: nothing listens
         * for us any more (the peer process is gone).  Moving on would
         * only spin between refusing rails. */
        rov_warn("failover", "conn %llu: %s refused and no other rail reaches the peer",
                 (unsigned long long)rov_policy_id(conn), rov_context_rail_name(CTX(conn), rail));
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

/* The peer's link on rail went down: so did the path of every connection
 * that takes the same path to that host (rail.h, path_key).  They leave it
 * now, not each when its own news comes: the peer tells each connection
 * on its surviving channel, and with 1,024 of them those news wait behind
 * the other channels' data (they moved over 150 ms, their own link's
 * carrier loss reaching them later still: failover-scale.py). */
static void path_down(rov_conn_t *conn, int rail)
{
    uint64_t path = F(conn)->rails[rail].path;
    struct rov_policy_chan chan;

    if (!path)
        return;
    for (rov_conn_t *c = rov_policy_first(CTX(conn)), *next; c; c = next) {
        next = rov_policy_next(c); /* (c may fail) */
        if (c != conn && rov_policy_peer_id(c) && F(c)->rails[rail].path == path &&
            rov_policy_chan(c, rail, &chan))
            rov_policy_chan_fail(c, rail, ROV_ERR_RESET, "the peer's link on this rail went "
                                 "down", ROV_REASON_PEER_FAILOVER);
    }
}

static void fo_peer_failed(rov_conn_t *conn, int rail, rov_reason_t reason)
{
    struct rov_policy_chan chan;

    if (!env_of(conn)->failover)
        return;
    rov_debug("failover", "conn %llu: peer reports %s failed (%s)",
              (unsigned long long)rov_policy_id(conn), rov_context_rail_name(CTX(conn), rail),
              rov_reason_str(reason));
    /* Through the normal failure path: if we were still sending there (our
     * own move there crossed the peer's move away), we move on too.  The
     * first connection to hear of the peer's link takes the others on its
     * path along. */
    if (rov_policy_chan(conn, rail, &chan)) {
        rov_policy_chan_fail(conn, rail, ROV_ERR_RESET, "the peer reports this rail failed",
                             ROV_REASON_PEER_FAILOVER);
        if (reason == ROV_REASON_FAIL_LINK)
            path_down(conn, rail);
    } else {
        mark_down(conn, rail, ROV_ERR_RESET, rov_now_ns());
    }
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
static void wake(rov_conn_t *c, int rail, uint64_t now)
{
    struct rov_fo_rail *r = &F(c)->rails[rail];

    if (r->state == ROV_FO_DOWN && r->retry_ns > now)
        r->retry_ns = F(c)->check_due_ns = now;
    if (F(c)->wait_to == rail + 1 && F(c)->wait_ns > now)
        F(c)->wait_ns = F(c)->check_due_ns = now;
}

static void path_up(rov_conn_t *conn, int rail, uint64_t now)
{
    uint64_t path = F(conn)->rails[rail].path;

    if (!path)
        return;
    for (rov_conn_t *c = rov_policy_first(CTX(conn)); c; c = rov_policy_next(c)) {
        struct rov_fo_rail *r = &F(c)->rails[rail];

        if (c == conn || !rov_policy_peer_id(c) || r->path != path)
            continue;
        if (r->state == ROV_FO_DOWN || F(c)->wait_to == rail + 1)
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
static void fo_rail_up(rov_context_t *ctx, int rail)
{
    uint64_t now = rov_now_ns();

    for (rov_conn_t *c = rov_policy_first(ctx); c; c = rov_policy_next(c)) {
        struct rov_fo_rail *r = &F(c)->rails[rail];

        if (r->state == ROV_FO_DOWN) {
            r->link_up_ns = now;
            r->backoff_ns = 0;
        }
        wake(c, rail, now);
    }
    if (E(ctx)->active)
        E(ctx)->next_ns = now;
}

/* A stall on one connection to a peer is news for every other connection to
 * that peer endpoint (they share the path): they are checked at the next
 * tick instead of at their turn (check_ns()), each on its own evidence.
 * Once per tick: when a path dies, its 1,024 connections stall in the same
 * tick, and a walk of every connection for each was quadratic; a stall of
 * another peer in that tick leaves its siblings to their turn, at most a
 * check period later. */
static void check_siblings_now(rov_conn_t *conn, uint64_t now)
{
    if (E(CTX(conn))->siblings_ns == now)
        return;
    E(CTX(conn))->siblings_ns = now;
    for (rov_conn_t *c = rov_policy_first(CTX(conn)); c; c = rov_policy_next(c))
        if (c != conn && F(c)->check_due_ns > now && rov_policy_peer_id(c) &&
            rov_policy_same_peer(c, conn))
            F(c)->check_due_ns = now;
}

/* Check one channel; false when it failed (the connection may have moved). */
static bool check_chan(rov_conn_t *conn, int rail, uint64_t now)
{
    struct rov_fo_rail *r = &F(conn)->rails[rail];
    const struct rov_policy_env *env = env_of(conn);
    struct rov_chan_health h;
    struct rov_policy_chan chan;
    rov_status_t st;

    rov_policy_chan(conn, rail, &chan);
    if (chan.serial != r->chan_serial) {
        forget_chan(r, chan.serial);
        r->busy_since_ns = now; /* connect or handshake started */
        r->opened_ns = now;
    }
    if (chan.state == ROV_CHAN_CONNECTING) {
        /* The rail's own connect (TCP handshake, RC connection) is due
         * within the timeout; what needs the peer's application to progress
         * (the HELLO_ACK, a rail's out-of-band handshake) is not timed. */
        if (rov_policy_chan_health(conn, rail, now, &h) == ROV_OK && h.peer_turn) {
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
        uint64_t limit = env->failover_timeout_ns;
        bool retry = false, first = false;

        if (!r->connect_ns && env->connect_timeout_ns > limit) {
            /* No connect of this rail has completed for this connection
             * yet: connection setup may take longer than a stall. */
            limit = env->connect_timeout_ns;
            first = true;
        } else if (r->state == ROV_FO_DOWN && r->connect_ns) {
            uint64_t rmax = S(CTX(conn))->failback_retry_max_ns;
            uint64_t l = 4 * r->connect_ns > rmax ? 4 * r->connect_ns : rmax;
            retry = l < limit;
            limit = retry ? l : limit;
        }

        if (now - r->busy_since_ns >= limit) {
            rov_policy_chan_fail(conn, rail, ROV_ERR_TIMEDOUT,
                                 retry ? "reconnect did not complete as soon as the last "
                                         "connect did"
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
    /* An open channel whose HELLO is still unanswered is not healthy yet,
     * but its rail must still deliver the HELLO: a lost one (the path died
     * during the handshake) shows as busy with no completion. */
    if (chan.handshaken && !r->healthy_since_ns) {
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
            path_up(conn, rail, now);
        fo_set_state(conn, rail, ROV_FO_UP, "passed its probe (handshake)");
    }
    st = rov_policy_chan_health(conn, rail, now, &h);
    if (st == ROV_ERR_UNSUPPORTED)
        return true; /* the rail gives no verdict */
    if (st != ROV_OK) {
        rov_policy_chan_fail(conn, rail, st, "the rail reports the channel broken",
                             ROV_REASON_NONE);
        return false;
    }
    r->heard_ago_ns = h.busy ? h.heard_ago_ns : 0;
    if (!h.busy) {
        r->busy_since_ns = 0;
        r->probe_sent = false;
        if (!chan.handshaken)
            return true;
        /* Probe an idle channel; one held back by flow control has data
         * waiting already, and a probe would only queue behind it. */
        if (env->keepalive_ns && !h.queued && h.sent_ago_ns >= env->keepalive_ns &&
            now - r->probe_ns >= env->keepalive_ns && rov_policy_probe(conn, rail) == ROV_OK) {
            r->probe_sent = true;
            r->probe_ns = now;
            r->busy_since_ns = now;
        }
        return rov_policy_chan(conn, rail, &chan) && chan.state != ROV_CHAN_CLOSED;
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
    if (now - r->busy_since_ns >= env->failover_timeout_ns &&
        h.heard_ago_ns >= env->failover_timeout_ns &&
        (!h.retransmits || h.sent_ago_ns >= env->failover_timeout_ns / 4)) {
        check_siblings_now(conn, now);
        if (r->probe_sent)
            rov_policy_chan_fail(conn, rail, ROV_ERR_TIMEDOUT,
                                 "keepalive probe not acknowledged by the rail within "
                                 "RAILOVER_FAILOVER_TIMEOUT", ROV_REASON_FAIL_KEEPALIVE);
        else
            rov_policy_chan_fail(conn, rail, ROV_ERR_TIMEDOUT,
                                 "posted work not completed by the rail within "
                                 "RAILOVER_FAILOVER_TIMEOUT", ROV_REASON_FAIL_STALL);
        return false;
    }
    return true;
}

/* The leader reconnects a better rail that has no channel, with backoff. */
static void retry_rail(rov_conn_t *conn, int rail, uint64_t now)
{
    struct rov_fo_rail *r = &F(conn)->rails[rail];
    rov_status_t st;

    uint64_t when;

    if (r->state == ROV_FO_DOWN && now < r->retry_ns)
        return;
    if (!r->path_ok && !connect_allowed(CTX(conn), now, &when)) {
        r->retry_ns = when;
        return;
    }
    r->path_ok = false;
    rov_debug("failover", "conn %llu: retrying %s", (unsigned long long)rov_policy_id(conn),
              rov_context_rail_name(CTX(conn), rail));
    st = rov_conn_open_rail(conn, rail);
    if (st != ROV_OK) {
        rov_debug("failover", "conn %llu: %s: %s", (unsigned long long)rov_policy_id(conn),
                  rov_context_rail_name(CTX(conn), rail), rov_status_str(st));
        mark_down(conn, rail, st, now);
    }
}

static void maybe_failback(rov_conn_t *conn, uint64_t now)
{
    int best = best_rail(conn);
    struct rov_fo_rail *r;
    struct rov_policy_chan chan;

    if (best < 0 || best >= rov_policy_tx_rail(conn) || rov_policy_tx_sync(conn) || held(conn) ||
        !S(CTX(conn))->failback || rov_policy_state(conn) != ROV_CONN_ESTABLISHED || !leads(conn))
        return;
    r = &F(conn)->rails[best];
    if (!rov_policy_chan(conn, best, &chan)) {
        retry_rail(conn, best, now);
        return;
    }
    if (!chan.ready || !r->healthy_since_ns ||
        now - r->healthy_since_ns < dwell_ns(conn))
        return;
    F(conn)->back_ns = now;
    rov_conn_move(conn, best, ROV_REASON_FAILBACK, "preferred rail healthy for the dwell", -1);
}

/* The leader also probes the rails below the best that failed: a failure
 * moves a connection only onto a rail that is up, so a fallback rail that
 * failed once must pass a probe again before it can take the traffic (the
 * best rail is maybe_failback()'s).  Without it, a connection whose
 * fallback had failed once reconnected its failing rail for ever. */
static void probe_fallbacks(rov_conn_t *conn, uint64_t now)
{
    int best = best_rail(conn);

    if (!leads(conn) || rov_policy_state(conn) != ROV_CONN_ESTABLISHED)
        return;
    for (int i = 0; i < rov_policy_nrails(CTX(conn)); i++)
        if (i != best && i != rov_policy_tx_rail(conn) && !has_chan(conn, i) &&
            F(conn)->rails[i].state == ROV_FO_DOWN && rov_conn_peer_has_rail(conn, i))
            retry_rail(conn, i, now);
}

/* RAILOVER_BOND: the leader keeps a channel open on every rail the peer
 * has (through the backoff and the reconnect budget, as its probes); a rail
 * is in the bond once its channel has passed its handshake, and, if it
 * failed before on this connection, has been healthy for the dwell since,
 * the evidence a failback waits for; it leaves when its channel fails (the
 * transport drops it at once, rov_policy_bond()).  Held connections and
 * connections not established have no bond. */
static void update_bond(rov_conn_t *conn, uint64_t now)
{
    int tx = rov_policy_tx_rail(conn);
    unsigned mask = 1u << tx;
    struct rov_policy_chan chan;

    if (rov_policy_state(conn) != ROV_CONN_ESTABLISHED || held(conn) || rov_policy_tx_sync(conn)) {
        rov_policy_bond(conn, 0);
        return;
    }
    for (int i = 0; i < rov_policy_nrails(CTX(conn)); i++) {
        const struct rov_fo_rail *r = &F(conn)->rails[i];

        if (i == tx || !rov_conn_peer_has_rail(conn, i))
            continue;
        if (!rov_policy_chan(conn, i, &chan)) {
            if (leads(conn))
                retry_rail(conn, i, now);
            continue;
        }
        if (chan.ready && r->healthy_since_ns &&
            (!r->down_since_ns || now - r->healthy_since_ns >= dwell_ns(conn)))
            mask |= 1u << i;
    }
    rov_policy_bond(conn, mask);
}

/* Every rail the peer has is down, the last of them for
 * RAILOVER_UNREACHABLE_TIMEOUT: the peer is unreachable (gone, stopped, or
 * cut off on every path), and the connection fails, naming each rail and
 * its last failure, instead of reconnecting for ever.  A rail passing its
 * probe (a handshake) is up again and ends the count.  False: not so. */
static bool unreachable(rov_conn_t *conn, uint64_t now)
{
    rov_status_t last[ROV_MAX_RAILS] = {0};
    uint64_t since = 0;

    for (int i = 0; i < rov_policy_nrails(CTX(conn)); i++) {
        const struct rov_fo_rail *r = &F(conn)->rails[i];

        if (!rov_conn_peer_has_rail(conn, i))
            continue;
        if (r->state != ROV_FO_DOWN)
            return false;
        since = r->down_since_ns > since ? r->down_since_ns : since;
        last[i] = r->down_status;
    }
    /* now is the tick's; a rail marked down since then is newer. */
    return rov_conn_fail_unreachable(conn, since, now, env_of(conn)->unreachable_timeout_ns, last,
                                     "no rail has reached the peer",
                                     "RAILOVER_UNREACHABLE_TIMEOUT");
}

static void check_conn(rov_conn_t *conn, uint64_t now)
{
    if (unreachable(conn, now))
        return;
    if (F(conn)->wait_to) {
        int to = F(conn)->wait_to - 1;

        if (has_chan(conn, rov_policy_tx_rail(conn))) {
            F(conn)->wait_to = 0; /* moved meanwhile (the peer's move) */
        } else if (now < F(conn)->wait_ns) {
            return;
        } else {
            F(conn)->wait_to = 0;
            if (!move_or_wait(conn, to, F(conn)->wait_reason, "retry after backoff",
                              F(conn)->wait_failed - 1, now))
                rov_conn_fail(conn, ROV_ERR_UNREACHABLE, "no rail reaches the peer");
            return;
        }
    }
    if (!has_chan(conn, rov_policy_tx_rail(conn))) {
        /* Every path that closes the transmit channel moves the connection;
         * this is the net under them. */
        rov_error("failover", "conn %llu: no channel on its transmit rail %s; moving it",
                  (unsigned long long)rov_policy_id(conn), rov_context_rail_name(CTX(conn), rov_policy_tx_rail(conn)));
        fo_chan_failed(conn, rov_policy_tx_rail(conn), ROV_ERR_RESET, ROV_REASON_FAIL_CLOSED,
                       "no channel on the transmit rail");
        return;
    }
    for (int i = 0; i < rov_policy_nrails(CTX(conn)); i++) {
        if (has_chan(conn, i) && !check_chan(conn, i, now))
            return; /* a failure changed the connection: look again next tick */
    }
    /* A path that stayed up long after the move back is forgiven. */
    if (F(conn)->back_ns && rov_policy_tx_rail(conn) == best_rail(conn) &&
        now - F(conn)->back_ns > STABLE_DWELLS * dwell_ns(conn)) {
        F(conn)->flaps = 0;
        F(conn)->back_ns = 0;
        F(conn)->rails[rov_policy_tx_rail(conn)].backoff_ns = 0;
    }
    probe_fallbacks(conn, now);
    maybe_failback(conn, now);
    if (env_of(conn)->bond)
        update_bond(conn, now);
}

/* How often each connection is checked: a sixteenth of the timeout, at
 * least a tick, at most CHECK_MAX_NS.  Checking every connection on every
 * tick cost two system calls per channel each 2.5 ms: with 1,024
 * connections, over 1.6 million a second, a core's worth. */
static uint64_t check_ns(const rov_context_t *ctx)
{
    uint64_t t = rov_policy_env(ctx)->failover_timeout_ns / 16;

    return t < E(ctx)->tick_ns ? E(ctx)->tick_ns : t > CHECK_MAX_NS ? CHECK_MAX_NS : t;
}

/* Whether conn's turn has come; connections new to the engine are spread
 * over the ticks of one period. */
static bool check_due(rov_conn_t *c, uint64_t now, uint64_t period, uint64_t tick)
{
    if (!F(c)->check_due_ns)
        F(c)->check_due_ns = now + rov_policy_id(c) % (period / tick) * tick;
    if (now < F(c)->check_due_ns)
        return false;
    F(c)->check_due_ns = now + period;
    return true;
}

static void fo_tick(rov_context_t *ctx, uint64_t now)
{
    struct rov_fo_ctx *e = E(ctx);
    uint64_t period = check_ns(ctx);
    bool any = false;

    if (!e->active || now < e->next_ns)
        return;
    e->next_ns = now + e->tick_ns;
    for (rov_conn_t *c = rov_policy_first(ctx); c; c = rov_policy_next(c)) {
        enum rov_conn_state state = rov_policy_state(c);

        if (state == ROV_CONN_CONNECTING ||
            (ROV_CONN_IS_CLOSING(state) && !rov_policy_peer_id(c))) {
            /* First connect: a rail whose connect hangs (a blackholed
             * address) gives way to the next rail after the timeout.  So
             * does one closed before its first connect went through (it
             * still delivers what was sent on it, rov_conn_close()): the
             * side that loses a simultaneous connect closes its own, and
             * until stop 40 that connect then waited for the kernel's SYN
             * retries (127 s) with the sends queued on it. */
            int tx = rov_policy_tx_rail(c);

            if (!has_chan(c, tx))
                continue;
            any = true;
            if (check_due(c, now, period, e->tick_ns))
                check_chan(c, tx, now);
            continue;
        }
        if ((state != ROV_CONN_ESTABLISHED && !ROV_CONN_IS_CLOSING(state) &&
             state != ROV_CONN_DRAINING) || !rov_policy_peer_id(c))
            continue; /* (quiesced or reopening: the stage's, not failover's) */
        any = true;
        if (check_due(c, now, period, e->tick_ns))
            check_conn(c, now);
    }
    if (!any)
        e->active = false;
}

static uint64_t fo_due_ns(const rov_context_t *ctx)
{
    const struct rov_fo_ctx *e = E(ctx);

    return e->active ? e->next_ns : 0;
}

/* Life cycle -------------------------------------------------------------------------- */

static void fo_ctx_init(rov_context_t *ctx)
{
    uint64_t tick = rov_policy_env(ctx)->failover_timeout_ns / 100;

    E(ctx)->tick_ns = tick < TICK_MIN_NS ? TICK_MIN_NS : tick > TICK_MAX_NS ? TICK_MAX_NS : tick;
}

static void fo_conn_connecting(rov_conn_t *conn)
{
    start_ticks(CTX(conn));
}

static void fo_conn_up(rov_conn_t *conn)
{
    rov_context_t *ctx = CTX(conn);

    for (int i = 0; i < rov_policy_nrails(ctx); i++)
        F(conn)->rails[i].path = rov_conn_path_key(conn, i);
    start_ticks(ctx);
}

/* Operator control: an established connection's hold changed (the
 * transport keeps the flag, announces it and applies one set early). */
static rov_status_t fo_hold(rov_conn_t *conn, bool on)
{
    int best = best_rail(conn), tx = rov_policy_tx_rail(conn), to;
    struct rov_policy_chan chan;

    if (on) {
        if (tx != best) {
            rov_conn_announce(conn); /* already off it: tell the peer to stay */
            return ROV_OK;
        }
        to = next_rail(conn, tx, rov_now_ns(), true);
        if (to < 0 || to == best)
            return ROV_ERR_UNREACHABLE;
        rov_info("failover", "conn %llu: forced off %s by an operator",
                 (unsigned long long)rov_policy_id(conn), rov_context_rail_name(CTX(conn), best));
        rov_conn_move(conn, to, ROV_REASON_ADMIN_FORCE, "forced onto a fallback rail", -1);
        return ROV_OK;
    }
    rov_info("failover", "conn %llu: released by an operator", (unsigned long long)rov_policy_id(conn));
    if (best >= 0 && best < tx && rov_policy_chan(conn, best, &chan) && chan.ready &&
        F(conn)->rails[best].healthy_since_ns && !rov_policy_peer_hold(conn) &&
        !rov_policy_hold_all(CTX(conn))) {
        rov_conn_move(conn, best, ROV_REASON_ADMIN_RELEASE, "released by an operator", -1);
        return ROV_OK;
    }
    rov_conn_announce(conn);
    if (best >= 0)
        F(conn)->rails[best].retry_ns = 0; /* the leader retries at once */
    return ROV_OK;
}

/* Status -------------------------------------------------------------------------------- */

static void fo_status_ctx(rov_context_t *ctx, FILE *out)
{
    const struct rov_policy_env *env = rov_policy_env(ctx);
    const struct rov_fo_settings *s = S(ctx);

    fprintf(out, " failover=%s timeout_ms=%" PRIu64 " keepalive_ms=%" PRIu64 " failback=%s "
            "dwell_ms=%" PRIu64, env->failover ? "on" : "off", env->failover_timeout_ns / MS,
            env->keepalive_ns / MS, s->failback ? "on" : "off", s->failback_dwell_ns / MS);
}

static void fo_status_rail(rov_conn_t *conn, int rail, bool chan, uint64_t now, FILE *out)
{
    const struct rov_fo_rail *r = &F(conn)->rails[rail];
    struct rov_policy_chan ch;

    if (!chan) {
        if (r->state == ROV_FO_DOWN)
            fprintf(out, "  chan rail=%s(%d) state=none health=down retry_in_ms=%lld\n",
                    rov_context_rail_name(CTX(conn), rail), rail,
                    (long long)((int64_t)(r->retry_ns - now) / (int64_t)MS));
        return;
    }
    rov_policy_chan(conn, rail, &ch);
    if (!r->healthy_since_ns || r->chan_serial != ch.serial)
        fputs(" health=unknown", out);
    else
        fprintf(out, " health=up_ms=%" PRIu64 " busy=%s unanswered_ms=%" PRIu64,
                (now - r->healthy_since_ns) / MS, r->busy_since_ns ? "yes" : "no",
                r->heard_ago_ns / MS);
}

/* Settings ------------------------------------------------------------------ */

static void fo_defaults(void *block)
{
    struct rov_fo_settings *s = block;

    s->failback = 1;
    s->failback_dwell_ns = 2 * SEC;
    s->failback_retry_ns = 50 * MS;
    s->failback_retry_max_ns = 5 * SEC;
}

static rov_status_t fo_check(const void *block, char *err, size_t err_len)
{
    const struct rov_fo_settings *s = block;

    if (s->failback_retry_ns <= s->failback_retry_max_ns)
        return ROV_OK;
    snprintf(err, err_len, "RAILOVER_FAILBACK_RETRY exceeds RAILOVER_FAILBACK_RETRY_MAX");
    return ROV_ERR_INVAL;
}

#define FO_OFF(f) offsetof(struct rov_fo_settings, f)

static const struct rov_var fo_vars[] = {
    {"RAILOVER_FAILBACK", ROV_VAR_BOOL, FO_OFF(failback), 0, 0, 0, NULL,
     "move back to a preferred rail once it has healed (on/off)"},
    {"RAILOVER_FAILBACK_DWELL", ROV_VAR_DURATION, FO_OFF(failback_dwell_ns), 0, 0, 3600 * SEC,
     NULL, "a healed rail must stay healthy this long before traffic moves back"},
    {"RAILOVER_FAILBACK_RETRY", ROV_VAR_DURATION, FO_OFF(failback_retry_ns), 0, 1 * MS,
     3600 * SEC, NULL, "first retry of a failed rail after this; the wait doubles per failure"},
    {"RAILOVER_FAILBACK_RETRY_MAX", ROV_VAR_DURATION, FO_OFF(failback_retry_max_ns), 0, 1 * MS,
     3600 * SEC, NULL, "longest wait between retries of a failed rail"},
};

static struct rov_settings fo_settings = {
    .layer = "failover",
    .vars = fo_vars,
    .nvars = sizeof(fo_vars) / sizeof(fo_vars[0]),
    .size = sizeof(struct rov_fo_settings),
    .defaults = fo_defaults,
    .check = fo_check,
};

static const struct rov_policy_ops failover_policy = {
    .name = "failover",
    .settings = &fo_settings,
    .ctx_size = sizeof(struct rov_fo_ctx),
    .conn_size = sizeof(struct rov_fo_conn),
    .ctx_init = fo_ctx_init,
    .conn_connecting = fo_conn_connecting,
    .conn_up = fo_conn_up,
    .chan_failed = fo_chan_failed,
    .peer_failed = fo_peer_failed,
    .rail_up = fo_rail_up,
    .hold = fo_hold,
    .tick = fo_tick,
    .due_ns = fo_due_ns,
    .status_ctx = fo_status_ctx,
    .status_rail = fo_status_rail,
};

ROV_POLICY_REGISTER(failover_policy)
