/*
 * Channels: their state machine, one table and one setter; admission before
 * a channel's handshake (the pre-channel proofs of rov_rail_preauth_*, the
 * accepted channels waiting for a HELLO, their deadline and cap, the
 * descriptor reserve: "Who may join a connection" in docs/architecture.md);
 * and the rail upcalls (transport/rail.h), from which every frame goes to
 * the connection protocol (rov_conn_on_frame()).
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "transport/core.h"
#include "transport/log.h"

/* An accepted channel whose peer has not authenticated within
 * HELLO_TIMEOUT_NS (or twice the connect timeout, if longer) is closed, and
 * at most HELLO_PENDING_MAX wait at once: a peer's HELLO follows its
 * connect at once, so only a stranger or a broken peer holds a channel open
 * without one (half-open connections, slowloris).  At the cap, a rail that
 * asks (rov_rail_accept_ok()) leaves new connections in the kernel's
 * backlog while the waiting ones are younger than HELLO_GRACE_NS, and those
 * older go first: a storm of 1024 real connects (whose HELLOs are merely
 * not read yet) is admitted as fast as it authenticates, a flood of
 * strangers holds a slot for HELLO_GRACE_NS instead of the timeout.  (Drop
 * the oldest at once, as before, and a storm of 1024 connects lost half its
 * channels before their HELLOs were read.) */
#define HELLO_TIMEOUT_NS (5ull * 1000000000ull)
#define HELLO_GRACE_NS (1ull * 1000000000ull)
#define HELLO_PENDING_MAX 512


/* Deadlines (owed acks, the failover engine's tick): a busy caller meets
 * them in progress(), from the clock reads it makes anyway; a caller about
 * to sleep arms the context's timerfd, one-shot, for the earliest of them
 * (arm_timer()).  A process that busy-polls takes no timer interrupts from
 * the library: noise on its core, and under emulation (a VM without
 * hardware virtualisation) tens of microseconds each. */
static uint64_t hello_timeout_ns(const rov_context_t *ctx)
{
    uint64_t t = 2 * ctx->config.connect_timeout_ns;

    return t > HELLO_TIMEOUT_NS ? t : HELLO_TIMEOUT_NS;
}

static void preauth_drop(struct rov_preauth *p, const char *why)
{
    rov_log_ratelimited(ROV_LOG_WARN, "core", "dropping a peer of %s before its channel: %s",
                        p->rail->spec->name, why);
    rov_rail_preauth_end(p);
    p->expire(p, why);
}

/* Close chan, which has not authenticated its peer; why names the bound. */
static void drop_unauthed(struct rov_chan *chan, const char *why)
{
    char where[128];

    chan->rail->ops.chan_str(chan, where, sizeof(where));
    rov_log_ratelimited(ROV_LOG_WARN, "core", "closing %s channel %s: %s",
                        chan->rail->spec->name, where, why);
    rov_ctx_chan_close(chan);
}

/* Accepted channels still without an authenticated HELLO: close those past
 * the timeout (past the grace while a listener waits for a slot), and
 * learn when the next one is due. */
void rov_ctx_sweep_unauthed(rov_context_t *ctx, uint64_t now)
{
    uint64_t timeout = ctx->accept_paused ? HELLO_GRACE_NS : hello_timeout_ns(ctx), due = 0;
    struct rov_chan *c = ctx->chans, *next;

    const char *why = ctx->accept_paused ? "no authenticated hello within 1 s while others "
                                           "wait to connect"
                                         : "no authenticated hello within the handshake timeout";
    struct rov_preauth *p = ctx->preauth, *pnext;

    for (; c && ctx->awaiting_hello; c = next) {
        next = c->next;
        if (!c->awaiting_hello)
            continue;
        if (now - c->born_ns >= timeout)
            drop_unauthed(c, why);
        else if (due == 0 || c->born_ns + timeout < due)
            due = c->born_ns + timeout;
    }
    for (; p; p = pnext) {
        pnext = p->next;
        if (now - p->born_ns >= timeout)
            preauth_drop(p, why);
        else if (due == 0 || p->born_ns + timeout < due)
            due = p->born_ns + timeout;
    }
    ctx->hello_due_ns = due;
}

/* A channel stopped waiting for its HELLO: listeners paused at the cap
 * accept again. */
static void unauthed_gone(rov_context_t *ctx)
{
    uint32_t paused = ctx->accept_paused;

    ctx->awaiting_hello--;
    if (__builtin_expect(paused == 0, 1))
        return;
    ctx->accept_paused = 0;
    for (int i = 0; i < ctx->nrails; i++)
        if (paused & (1u << i))
            ctx->rails[i]->ops.accept_resume(ctx->rails[i]);
}

/* Channels and upcalls -------------------------------------------------------- */

#define B ROV_STATE_BIT
const struct rov_state_info rov_chan_states[ROV_CHAN_NSTATES] = {
    [ROV_CHAN_CONNECTING] = {"connecting", B(ROV_CHAN_OPEN) | B(ROV_CHAN_CLOSED)},
    [ROV_CHAN_OPEN] = {"open", B(ROV_CHAN_CLOSED)},
    [ROV_CHAN_CLOSED] = {"closed", 0},
};
#undef B

/* The one place a channel's state changes: a channel the rail just made
 * (fresh) takes its first state; later ones must be in the table (else a
 * bug: logged loudly and counted, the state kept).  Each state entered is
 * counted. */
static bool chan_set_state(struct rov_chan *chan, enum rov_chan_state state, const char *why,
                           bool fresh)
{
    rov_context_t *ctx = chan->rail->ctx;
    char what[40];

    snprintf(what, sizeof(what), "channel %llu", (unsigned long long)chan->serial);
    if (fresh)
        rov_debug("core", "%s: new -> %s (%s)", what, rov_chan_states[state].name, why);
    else if (!rov_state_change(rov_chan_states, chan->state, state, "core", what, why,
                               &ctx->illegal_transitions))
        return false;
    chan->state = state;
    ctx->chan_entered[state]++;
    return true;
}

/* A channel the rail just made (connected, or accepted) joins the
 * context, in its first state, with the transport's part of it fresh. */
static void chan_track(struct rov_rail *rail, struct rov_chan *chan, bool outbound)
{
    rov_context_t *ctx = rail->ctx;

    chan->rail = rail;
    chan->conn = NULL;
    chan->outbound = outbound;
    chan->handshaken = 0;
    chan->parked = 0;
    chan->authed = 0;
    chan->awaiting_hello = 0;
    chan->silent = 0;
    chan->challenged = 0;
    chan->born_ns = rov_now_ns();
    chan->serial = ++ctx->next_chan_serial;
    chan_set_state(chan, outbound ? ROV_CHAN_CONNECTING : ROV_CHAN_OPEN,
                   outbound ? "connecting" : "accepted", true);
    chan->send_error = ROV_OK;
    chan->send_reason = ROV_REASON_NONE;
    chan->next = ctx->chans;
    if (chan->next)
        chan->next->pprev = &chan->next;
    chan->pprev = &ctx->chans;
    ctx->chans = chan;
}

void rov_ctx_chan_close(struct rov_chan *chan)
{
    rov_context_t *ctx = chan->rail->ctx;
    struct rov_conn *conn = chan->conn;

    /* Unlinked in O(1): a link that goes down fails every channel on it,
     * and a walk per channel made that quadratic (1,024 connections, 2,048
     * channels). */
    *chan->pprev = chan->next;
    if (chan->next)
        chan->next->pprev = chan->pprev;
    rov_ctx_chan_park(chan, false);
    if (conn && conn->chans[chan->rail->index] == chan)
        conn->chans[chan->rail->index] = NULL;
    if (chan->awaiting_hello) {
        chan->awaiting_hello = 0;
        unauthed_gone(ctx);
    }
    chan_set_state(chan, ROV_CHAN_CLOSED, "closed", false);
    chan->conn = NULL;
    chan->rail->ops.chan_close(chan);
}

struct rov_chan *rov_ctx_chan_connect(struct rov_rail *rail, const void *addr, size_t len,
                                      rov_status_t *st_p)
{
    struct rov_chan *chan = NULL;

    *st_p = rail->ops.connect(rail, addr, len, &chan);
    if (*st_p != ROV_OK)
        return NULL;
    chan_track(rail, chan, true);
    return chan;
}

void rov_ctx_chan_park(struct rov_chan *chan, bool parked)
{
    if (chan->parked != parked)
        chan->rail->ctx->nparked += parked ? 1u : -1u;
    chan->parked = parked;
}

void rov_ctx_chan_authed(struct rov_chan *chan)
{
    chan->authed = 1;
    if (chan->awaiting_hello) {
        chan->awaiting_hello = 0;
        unauthed_gone(chan->rail->ctx);
    }
}

/* The channel that has waited longest for its HELLO (the list is newest
 * first). */
static struct rov_chan *oldest_unauthed(rov_context_t *ctx)
{
    struct rov_chan *oldest = NULL;

    for (struct rov_chan *c = ctx->chans; c; c = c->next)
        if (c->awaiting_hello)
            oldest = c;
    return oldest;
}

/* The rails' peer before its channel that has waited longest. */
static struct rov_preauth *oldest_preauth(rov_context_t *ctx)
{
    struct rov_preauth *p = ctx->preauth;

    while (p && p->next)
        p = p->next;
    return p;
}

/* When the oldest of them all began waiting (UINT64_MAX: none waits). */
static uint64_t oldest_unauthed_ns(rov_context_t *ctx)
{
    struct rov_chan *c = oldest_unauthed(ctx);
    struct rov_preauth *p = oldest_preauth(ctx);
    uint64_t t = c ? c->born_ns : UINT64_MAX;

    return p && p->born_ns < t ? p->born_ns : t;
}

/* Close the peer (a channel, or a rail's peer before its channel) that has
 * waited longest for its handshake; false when none waits. */
#define TOO_MANY_WAIT "too many peers waiting for their handshake (the oldest is closed)"
static bool drop_oldest_unauthed(rov_context_t *ctx, const char *why)
{
    struct rov_chan *c = oldest_unauthed(ctx);
    struct rov_preauth *p = oldest_preauth(ctx);

    if (p && (!c || p->born_ns < c->born_ns))
        preauth_drop(p, why);
    else if (c)
        drop_unauthed(c, why);
    return p || c;
}

void rov_rail_preauth_begin(struct rov_rail *rail, struct rov_preauth *p)
{
    rov_context_t *ctx = rail->ctx;

    if (ctx->awaiting_hello >= HELLO_PENDING_MAX)
        drop_oldest_unauthed(ctx, TOO_MANY_WAIT);
    p->rail = rail;
    p->born_ns = rov_now_ns();
    p->prev = NULL;
    p->next = ctx->preauth;
    if (p->next)
        p->next->prev = p;
    ctx->preauth = p;
    p->live = true;
    if (ctx->awaiting_hello++ == 0)
        ctx->hello_due_ns = p->born_ns + hello_timeout_ns(ctx);
}

void rov_rail_preauth_end(struct rov_preauth *p)
{
    rov_context_t *ctx;

    if (!p->live)
        return;
    ctx = p->rail->ctx;
    p->live = false;
    if (p->prev)
        p->prev->next = p->next;
    else
        ctx->preauth = p->next;
    if (p->next)
        p->next->prev = p->prev;
    unauthed_gone(ctx);
}

/* Descriptors kept free of channels that wait for their handshake
 * (rov_rail_fd_short()); how long a count of them is used, adjusted by
 * what rov_rail_fd_short() itself saw come and go. */
#define FD_RESERVE_MIN 16
#define FD_RESERVE_MAX 256
#define FD_COUNT_NS (10ull * 1000000ull)

/* Descriptors open in this process, 0 when /proc is not there. */
static uint64_t fd_census(void)
{
    DIR *d = opendir("/proc/self/fd");
    uint64_t n = 0;

    if (!d)
        return 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n > 3 ? n - 3 : 0; /* ".", ".." and the directory's own */
}

/* The pending cap alone (HELLO_PENDING_MAX) ignored the descriptors: with
 * RLIMIT_NOFILE 1024 and 600 live connections, 600 half-open ones took the
 * rest, accept() failed, and the TCP rail closed what it could accept, the
 * real peers' connections among them (9 handshakes of 9 failed in 10 s).
 * The oldest waiting channel is the one least likely to be a peer (whose
 * HELLO follows its connect at once), so it makes room, and it does so
 * before the limit, so that a reconnect of ours still finds a descriptor.
 * The lowest free descriptor alone says too little once channels closed
 * below it (the shedding itself leaves such holes), so with channels
 * waiting the descriptors are counted, at most every FD_COUNT_NS. */
bool rov_rail_fd_short(struct rov_rail *rail, int fd)
{
    rov_context_t *ctx = rail->ctx;
    unsigned long long limit = 0, reserve = FD_RESERVE_MIN, used;
    struct rlimit rl;
    char why[160];
    uint64_t now;

    if (!ctx->awaiting_hello)
        return false; /* nothing to make room with */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        limit = rl.rlim_cur;
        reserve = limit / 16 < FD_RESERVE_MIN   ? FD_RESERVE_MIN
                  : limit / 16 > FD_RESERVE_MAX ? FD_RESERVE_MAX
                                                : limit / 16;
    }
    if (fd >= 0) {
        if (limit == 0)
            return false;
        now = rov_now_ns();
        if (now - ctx->fd_count_ns >= FD_COUNT_NS) {
            ctx->fd_count = fd_census();
            ctx->fd_count_ns = now;
        } else {
            ctx->fd_count++;
        }
        used = ctx->fd_count > (unsigned long long)fd + 1 ? ctx->fd_count
                                                          : (unsigned long long)fd + 1;
        if (used + reserve <= limit)
            return false;
    }
    if (fd < 0)
        snprintf(why, sizeof(why), "out of file descriptors (RLIMIT_NOFILE %llu reached): "
                 "the peer that has waited longest for its handshake is closed", limit);
    else
        snprintf(why, sizeof(why), "out of file descriptors (RLIMIT_NOFILE %llu, fewer than "
                 "%llu free): the peer that has waited longest for its handshake is "
                 "closed", limit, reserve);
    if (!drop_oldest_unauthed(ctx, why))
        return false;
    if (ctx->fd_count)
        ctx->fd_count--;
    return true;
}

bool rov_rail_accept_ok(struct rov_rail *rail)
{
    rov_context_t *ctx = rail->ctx;
    uint64_t oldest, now;

    if (ctx->awaiting_hello < HELLO_PENDING_MAX)
        return true;
    oldest = oldest_unauthed_ns(ctx);
    now = rov_now_ns();
    if (oldest != UINT64_MAX && now - oldest >= HELLO_GRACE_NS) {
        drop_oldest_unauthed(ctx, TOO_MANY_WAIT);
        return true;
    }
    if (!(ctx->accept_paused & (1u << rail->index)))
        rov_log_ratelimited(ROV_LOG_INFO, "core", "rail %s: %d channels wait for their "
                            "handshake: new connections wait in the backlog",
                            rail->spec->name, HELLO_PENDING_MAX);
    ctx->accept_paused |= 1u << rail->index;
    if (oldest != UINT64_MAX && oldest + HELLO_GRACE_NS < ctx->hello_due_ns)
        ctx->hello_due_ns = oldest + HELLO_GRACE_NS;
    return false;
}

void rov_rail_accepted(struct rov_rail *rail, struct rov_chan *chan)
{
    rov_context_t *ctx = rail->ctx;

    if (ctx->awaiting_hello >= HELLO_PENDING_MAX)
        drop_oldest_unauthed(ctx, TOO_MANY_WAIT);
    chan_track(rail, chan, false);
    chan->awaiting_hello = 1;
    if (ctx->awaiting_hello++ == 0)
        ctx->hello_due_ns = chan->born_ns + hello_timeout_ns(ctx);
    rov_conn_chan_accepted(chan);
}

void rov_rail_connected(struct rov_chan *chan)
{
    if (chan->state != ROV_CHAN_CONNECTING)
        return;
    chan_set_state(chan, ROV_CHAN_OPEN, "connected", false);
    rov_conn_chan_connected(chan);
}

/* A frame on a channel we connected that its rail has not yet reported
 * connected: the acceptor speaks first (its CHALLENGE, wire.h), and on
 * some rails (UCX) its frame can overtake the connect's completion.  The
 * CHALLENGE is taken (the HELLO waits for the connect); nothing else may
 * come before our HELLO. */
static ROV_COLD void early_frame(struct rov_chan *chan, const void *frame, size_t len)
{
    struct rov_wire_hdr hdr;
    const char *why = "a frame other than the challenge before our hello";

    if (rov_wire_decode(frame, len, ROV_WIRE_HELLO_MAX, &hdr, &why) == ROV_OK &&
        ROV_WIRE_HDR_LEN + (size_t)hdr.len == len && hdr.type == ROV_FT_CHALLENGE) {
        rov_conn_on_frame(chan, &hdr, (const uint8_t *)frame + ROV_WIRE_HDR_LEN);
        return;
    }
    rov_conn_chan_failed(chan, ROV_ERR_PROTO, why);
}

ROV_HOT void rov_rail_recv(struct rov_chan *chan, const void *frame, size_t len)
{
    rov_context_t *ctx = chan->rail->ctx;
    size_t max_payload = rov_chan_rx_max_payload(chan);
    struct rov_wire_hdr hdr;
    const char *why = "";

    if (__builtin_expect(chan->state != ROV_CHAN_OPEN || chan->silent, 0)) {
        if (chan->state == ROV_CHAN_CONNECTING && !chan->silent)
            early_frame(chan, frame, len);
        return;
    }
    ctx->frames++;
    if (!rov_wire_decode_data(frame, len, max_payload, &hdr) &&
        (rov_wire_decode(frame, len, max_payload, &hdr, &why) != ROV_OK ||
         ROV_WIRE_HDR_LEN + (size_t)hdr.len != len || hdr.type >= ROV_FT_RAIL_FIRST_)) {
        rov_conn_chan_failed(chan, ROV_ERR_PROTO, why[0] ? why
                             : hdr.type >= ROV_FT_RAIL_FIRST_ ? "a read frame on a rail that "
                                                                "does not read by message"
                             : "frame length mismatch");
        return;
    }
    rov_conn_on_frame(chan, &hdr, (const uint8_t *)frame + ROV_WIRE_HDR_LEN);
}

void rov_rail_send_done(struct rov_chan *chan, void *cookie)
{
    rov_msg_rail_done(cookie, chan->serial, KEEP(chan->rail->ctx));
}

void rov_rail_flushed(struct rov_chan *chan)
{
    if (chan->conn && chan->state == ROV_CHAN_OPEN)
        rov_conn_chan_flushed(chan);
}

void rov_rail_writable(struct rov_chan *chan)
{
    if (chan->conn && chan->state == ROV_CHAN_OPEN)
        rov_conn_push(chan->conn);
}

void rov_rail_link_up(struct rov_rail *rail)
{
    rail->ctx->link[rail->index].seen = 1;
    rail->ctx->link[rail->index].ups++;
    rov_policies_rail_up(rail->ctx, rail->index);
}

void rov_rail_link_down(struct rov_rail *rail, const char *why)
{
    rail->ctx->link[rail->index].seen = -1;
    rail->ctx->link[rail->index].downs++;
    for (struct rov_conn *c = rail->ctx->conns, *next; c; c = next) {
        struct rov_chan *chan = c->chans[rail->index];

        next = c->next; /* (c may fail, and be freed if it was closing) */
        if (chan && chan->state != ROV_CHAN_CLOSED)
            rov_conn_chan_failed_reason(chan, ROV_ERR_UNREACHABLE, why, ROV_REASON_FAIL_LINK);
    }
}

void rov_rail_failed(struct rov_chan *chan, rov_status_t status, const char *why)
{
    if (chan->state == ROV_CHAN_CLOSED)
        return;
    rov_conn_chan_failed(chan, status, why);
}
