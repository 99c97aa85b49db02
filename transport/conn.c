/*
 * The connection protocol: sequence numbers, retention until acknowledged,
 * acknowledgements, in-order exactly-once delivery and the rail switch; a
 * connection's close and failure, and the dispatch of every frame a
 * channel brings.  Rail-agnostic: it sees channels, never sockets or QPs.
 * The handshake, the first connect and the checkpoint stages are beside it
 * (transport/conn_int.h lists who owns what).
 *
 * Switch invariant: a side sends data on a channel only after it has learnt
 * the peer's last-received sequence on that channel (HELLO/HELLO_ACK/SWITCH
 * carry it in their ack field) and rewound its transmit pointer there.  Every
 * channel therefore carries a contiguous run of sequence numbers starting at
 * or below what the receiver expects, so duplicates are dropped and nothing
 * is early; the reorder buffer and RESEND cover anything else.  A bond
 * (RAILOVER_BOND, bond.c) breaks the contiguity on purpose: its members
 * carry interleaved runs, early frames are the rule, and the receiver's
 * reorder buffer puts them in order (handle_data()).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/auth.h"
#include "transport/conn_int.h"
#include "transport/log.h"

/* What one rov_conn_push() call hands to the rail at most (one message at
 * least): a resend of a 16 MiB window takes 45 ms in one go on the TCP rail
 * (one sendmsg per frame), during which this side would not receive. */
#define PUSH_BUDGET_BYTES (256u * 1024)
#define PUSH_BUDGET_MSGS 64u

const struct rov_state_info rov_conn_states[ROV_CONN_NSTATES] = {
    [ROV_CONN_CONNECTING] = {"connecting", B(ROV_CONN_ESTABLISHED) | B(ROV_CONN_CLOSING) |
                                           B(ROV_CONN_FAILED) | B(ROV_CONN_DEAD)},
    [ROV_CONN_ESTABLISHED] = {"established", B(ROV_CONN_CLOSING) | B(ROV_CONN_FAILED) |
                                             B(ROV_CONN_DRAINING)},
    [ROV_CONN_CLOSING] = {"closing", B(ROV_CONN_CLOSE_SENT) | B(ROV_CONN_DEAD) |
                                     B(ROV_CONN_FAILED)},
    [ROV_CONN_FAILED] = {"failed", B(ROV_CONN_DEAD)},
    [ROV_CONN_DEAD] = {"dead", 0},
    [ROV_CONN_DRAINING] = {"draining", B(ROV_CONN_QUIESCED) | B(ROV_CONN_ESTABLISHED) |
                                       B(ROV_CONN_FAILED)},
    [ROV_CONN_QUIESCED] = {"quiesced", B(ROV_CONN_ESTABLISHED) | B(ROV_CONN_REOPENING) |
                                       B(ROV_CONN_FAILED)},
    [ROV_CONN_REOPENING] = {"reopening", B(ROV_CONN_ESTABLISHED) | B(ROV_CONN_FAILED)},
    [ROV_CONN_CLOSE_SENT] = {"close-sent", B(ROV_CONN_CLOSING) | B(ROV_CONN_CLOSE_ANSWERED) |
                                           B(ROV_CONN_DEAD) | B(ROV_CONN_FAILED)},
    [ROV_CONN_CLOSE_ANSWERED] = {"close-answered", B(ROV_CONN_DEAD) | B(ROV_CONN_FAILED)},
};

const char *rov_conn_state_name(enum rov_conn_state state)
{
    return rov_conn_states[state].name;
}

/* The one place a connection's state changes: refuses a transition the
 * table does not allow (a bug: logged loudly and counted, the state kept),
 * logs the others with their reason and counts each state entered. */
bool conn_set_state(struct rov_conn *conn, enum rov_conn_state state, const char *why)
{
    rov_context_t *ctx = conn->ctx;
    char what[32];

    snprintf(what, sizeof(what), "conn %llu", (unsigned long long)conn->id);
    if (!rov_state_change(rov_conn_states, conn->state, state, "conn", what, why,
                          &ctx->illegal_transitions))
        return false;
    ctx->conn_now[conn->state]--;
    ctx->conn_now[state]++;
    conn->state = state;
    ctx->conn_entered[state]++;
    if (state == ROV_CONN_DEAD)
        ctx->reap = true;
    if (ctx->stage != ROV_CONTEXT_RUNNING)
        rov_stage_conn_changed(ctx);
    return true;
}

static int ep_cmp(const struct rov_conn *conn)
{
    return memcmp(conn->ctx->ep_id, conn->peer.ep_id, ROV_EP_ID_LEN);
}

int rov_conn_ep_cmp(const struct rov_conn *conn)
{
    return ep_cmp(conn);
}

static bool chan_ready(const struct rov_chan *chan)
{
    return chan && chan->state == ROV_CHAN_OPEN && chan->handshaken;
}

bool rov_conn_chan_ready(const struct rov_chan *chan)
{
    return chan_ready(chan);
}

/* Every send goes through here; a channel silenced by RAILOVER_FAULT drops
 * what it is given, as a dead path does. */
static inline rov_status_t chan_send(struct rov_chan *chan, const struct iovec *iov, int iovcnt,
                                     void *cookie)
{
    if (__builtin_expect(chan->silent, 0))
        return ROV_OK;
    rov_ctx_rail_used(chan->rail->ctx, chan->rail->index);
    return chan->rail->ops.send(chan, iov, iovcnt, cookie);
}

int conn_peer_rail(const struct rov_conn *conn, int rail)
{
    const char *kind = conn->ctx->rails[rail]->ops.name;

    for (unsigned i = 0; i < conn->peer.nrails; i++)
        if ((int)conn->peer.rails[i].index == rail && strcmp(conn->peer.rails[i].kind, kind) == 0)
            return (int)i;
    return -1;
}

bool rov_conn_peer_has_rail(const struct rov_conn *conn, int rail)
{
    return rail >= 0 && rail < conn->ctx->nrails && conn_peer_rail(conn, rail) >= 0;
}

uint64_t rov_conn_path_key(const struct rov_conn *conn, int rail)
{
    int pr = conn_peer_rail(conn, rail);

    return pr < 0 ? 0 : conn->ctx->rails[rail]->ops.path_key(conn->peer.rails[pr].addr,
                                                              conn->peer.rails[pr].addr_len);
}

struct rov_conn *rov_conn_new(rov_context_t *ctx)
{
    struct rov_conn *conn = calloc(1, rov_policy_conn_size());
    const struct rov_config *cfg = &ctx->config;

    if (!conn)
        return NULL;
    /* In a bond every message the peer has in flight may overtake one on a
     * slower member: room for all of them, the peer's window (as ours; a
     * frame dropped beyond it costs a RESEND, and a bond's stream waits for
     * it).  Without one, RAILOVER_REORDER_MSGS and _BYTES. */
    conn->reorder_max = cfg->bond && cfg->window_bytes > cfg->reorder_bytes ? cfg->window_bytes
                                                                           : cfg->reorder_bytes;
    if (rov_reorder_init(&conn->reorder, cfg->bond && cfg->window_msgs > cfg->reorder_msgs
                                             ? cfg->window_msgs
                                             : cfg->reorder_msgs) != ROV_OK) {
        free(conn);
        return NULL;
    }
    conn->ctx = ctx;
    conn->id = ctx->next_conn_id++;
    conn->tx_rail = -1;
    conn->max_send = ctx->config.max_msg;
    ctx->conn_entered[ROV_CONN_CONNECTING]++; /* (calloc: state 0) */
    ctx->conn_now[ROV_CONN_CONNECTING]++;
    rov_retain_init(&conn->tx, ctx->config.window_msgs, ctx->config.window_bytes);
    conn->next = ctx->conns;
    if (ctx->conns)
        ctx->conns->prev = conn;
    ctx->conns = conn;
    return conn;
}

/* Frames out ----------------------------------------------------------------- */

static void ack_unlink(struct rov_conn *conn)
{
    rov_context_t *ctx = conn->ctx;

    if (ctx->ack_unstamped == conn)
        ctx->ack_unstamped = conn->ack_next;
    if (conn->ack_prev)
        conn->ack_prev->ack_next = conn->ack_next;
    else
        ctx->ack_head = conn->ack_next;
    if (conn->ack_next)
        conn->ack_next->ack_prev = conn->ack_prev;
    else
        ctx->ack_tail = conn->ack_prev;
    conn->ack_next = conn->ack_prev = NULL;
    conn->in_ack_list = false;
}

static void ack_sent(struct rov_conn *conn)
{
    conn->rx_acked = conn->rx_seq;
    conn->rx_unacked_msgs = 0;
    conn->rx_unacked_bytes = 0;
    conn->ack_defer_end_ns = 0;
    if (conn->in_ack_list)
        ack_unlink(conn);
}

static void ack_schedule(struct rov_conn *conn)
{
    rov_context_t *ctx = conn->ctx;

    if (conn->in_ack_list)
        return;
    /* The deadline is stamped when the context next looks at the list
     * (stamp_acks() in context.c): a reply sent before then carries the
     * ack, and a ping-pong reads no clock for it. */
    conn->ack_deadline_ns = 0;
    if (!ctx->ack_unstamped) {
        ctx->ack_unstamped = conn;
        ctx->ack_unstamped_poll = ctx->poll_count;
    }
    conn->ack_prev = ctx->ack_tail;
    conn->ack_next = NULL;
    if (ctx->ack_tail)
        ctx->ack_tail->ack_next = conn;
    else
        ctx->ack_head = conn;
    ctx->ack_tail = conn;
    conn->in_ack_list = true;
}

/* A control frame's header: the connection's cumulative ack in it. */
void conn_ctrl_hdr(const struct rov_chan *chan, uint8_t type, uint32_t flags, size_t len,
                     uint8_t hdrbuf[ROV_WIRE_HDR_LEN])
{
    struct rov_wire_hdr hdr = {
        .type = type, .len = (uint32_t)len, .seq = 0,
        .ack = chan->conn ? chan->conn->rx_seq : 0, .tag = flags,
    };

    rov_wire_encode(hdrbuf, &hdr);
}

/* Send an encoded control frame; the rail copies it if it cannot go out at
 * once. */
rov_status_t conn_ctrl_send(struct rov_chan *chan, const uint8_t *hdrbuf, const void *payload,
                              size_t len)
{
    struct rov_conn *conn = chan->conn;
    struct iovec iov[2] = {{(void *)hdrbuf, ROV_WIRE_HDR_LEN}, {(void *)payload, len}};
    rov_status_t st = chan_send(chan, iov, len ? 2 : 1, NULL);

    if (st < 0) {
        rov_conn_chan_failed(chan, st, "send of a control frame failed");
        return st;
    }
    if (conn)
        ack_sent(conn);
    return ROV_OK;
}

rov_status_t conn_send_ctrl(struct rov_chan *chan, uint8_t type, uint32_t flags,
                              const void *payload, size_t len)
{
    uint8_t hdrbuf[ROV_WIRE_HDR_LEN];

    conn_ctrl_hdr(chan, type, flags, len, hdrbuf);
    return conn_ctrl_send(chan, hdrbuf, payload, len);
}

/* Any open, handshaken channel of the connection, the sending one first. */
static struct rov_chan *any_ready_chan(struct rov_conn *conn)
{
    if (conn->tx_rail >= 0 && chan_ready(conn->chans[conn->tx_rail]))
        return conn->chans[conn->tx_rail];
    for (int i = 0; i < conn->ctx->nrails; i++)
        if (chan_ready(conn->chans[i]))
            return conn->chans[i];
    return NULL;
}

/* An ack owed this long may wait for reads of ours from the peer to end
 * (rov_conn_ack_due()), in ack delays. */
#define ACK_HOLD_DELAYS 8

/* An ack is due (its RAILOVER_ACK_DELAY is over, the context's list).  While
 * reads of ours from the peer are in flight the peer is answering them, and
 * a stand-alone ack cuts into that answer: on a TCP rail it is a segment
 * into the middle of the peer's stream.  Under the kernel's BBR, where a
 * 1 MiB answer takes longer than the delay, an MPI 1 MiB ping-pong took
 * 1.15-1.16 times btl tcp's time with it, 1.05 with the ack held
 * (bench/README.md, "an ack inside a read's answer").  So the ack goes back in the list while the reads run,
 * for at most ACK_HOLD_DELAYS delays in all: the frame that follows their
 * end usually carries it (ob1's FIN does). */
void rov_conn_ack_due(struct rov_conn *conn, uint64_t now)
{
    bool reading = false;

    for (int i = 0; i < ROV_MAX_RAILS && !reading; i++)
        reading = conn->chans[i] && conn->chans[i]->gets_out;
    if (reading) {
        if (!conn->ack_defer_end_ns)
            conn->ack_defer_end_ns = now + ACK_HOLD_DELAYS * conn->ctx->config.ack_delay_ns;
        if (now < conn->ack_defer_end_ns) {
            ack_unlink(conn);
            ack_schedule(conn); /* at the tail, stamped at the context's next look */
            return;
        }
    }
    rov_conn_send_ack(conn);
}

void rov_conn_send_ack(struct rov_conn *conn)
{
    struct rov_chan *chan = any_ready_chan(conn);

    if (chan && conn_send_ctrl(chan, ROV_FT_ACK, 0, NULL, 0) == ROV_OK)
        conn->stats.acks_sent++;
    else if (conn->in_ack_list)
        ack_unlink(conn); /* piggybacks on the next frame instead */
}

rov_status_t rov_conn_probe(struct rov_chan *chan)
{
    return conn_send_ctrl(chan, ROV_FT_ACK, 0, NULL, 0);
}

/* Everything retained went out on chan: what ends the stream follows (a
 * CLOSE, or a quiesce's end marker). */
static ROV_COLD void push_end(struct rov_conn *conn, struct rov_chan *chan)
{
    uint8_t last[ROV_QUIESCE_PAYLOAD];

    if (conn->state == ROV_CONN_DRAINING) {
        if (!conn->eoc_sent && !conn->tx.next_tx) {
            rov_put64(last, conn->tx.next_seq - 1);
            if (conn_send_ctrl(chan, ROV_FT_QUIESCE, 0, last, sizeof(last)) == ROV_OK)
                conn->eoc_sent = true;
        }
        conn_drained_check(conn);
        return;
    }
    if (conn->state != ROV_CONN_CLOSING || conn->tx.count)
        return; /* not closing, or the CLOSE is out, or data goes first */
    if (__builtin_expect(conn->ctx->fault_armed, 0)) {
        rov_fault_close_sending(&conn->ctx->fault, chan,
                                conn->peer_closed ? ROV_FAULT_CLOSE_SECOND : ROV_FAULT_CLOSE_FIRST);
        if (chan->state == ROV_CHAN_CLOSED)
            return;
    }
    if (conn_send_ctrl(chan, ROV_FT_CLOSE, 0, NULL, 0) != ROV_OK)
        return;
    conn_set_state(conn, ROV_CONN_CLOSE_SENT, "close sent");
    if (conn->ctx->stage == ROV_CONTEXT_QUIESCING)
        rov_stage_conn_changed(conn->ctx); /* it sends nothing more */
}

/* A send on chan failed.  Inside rov_conn_send() the failure waits for
 * the next progress (the context's push list brings the connection back
 * here): the events and cancelled completions it causes must not run inside
 * the caller's send (railover.h: callbacks run only inside progress). */
static ROV_COLD void push_failed(struct rov_conn *conn, struct rov_chan *chan)
{
    if (conn->ctx->in_send) {
        rov_conn_push_later(conn);
        return;
    }
    rov_conn_chan_failed_reason(chan, chan->send_error,
                                chan->send_reason == ROV_REASON_FAIL_INJECTED
                                    ? "injected fault (RAILOVER_FAULT)" : "send failed",
                                chan->send_reason);
}

/* A bond member other than the transmit rail whose failure waits for
 * progress: only an injected fault on a read it completed leaves one
 * (rov_rail_get_done()); every other failed send fails at once.  True when
 * one failed (the push comes again). */
static ROV_COLD bool member_failed(struct rov_conn *conn)
{
    for (int i = 0; i < conn->ctx->nrails; i++) {
        struct rov_chan *c = conn->chans[i];

        if (i != conn->tx_rail && (conn->bond_mask & 1u << i) && c && c->send_error) {
            rov_conn_push_later(conn);
            push_failed(conn, c);
            return true;
        }
    }
    return false;
}

/* rov_conn_push(), inlined into rov_conn_send(): it makes the rail's send
 * call, and so the system call (transport/compiler.h). */
static ROV_INLINE void conn_push(struct rov_conn *conn)
{
    struct rov_chan *chan;
    struct rov_msg *m;
    size_t budget_bytes = PUSH_BUDGET_BYTES;
    unsigned budget_msgs = PUSH_BUDGET_MSGS;

    if (conn->push_more) {
        conn->push_more = false;
        conn->ctx->push_pending--;
    }
    if (!(B(conn->state) & PUSH_STATES))
        return;
    if (conn->tx_rail < 0 || conn->tx_sync)
        return;
    chan = conn->chans[conn->tx_rail];
    if (__builtin_expect(chan && chan->send_error, 0)) {
        push_failed(conn, chan);
        return;
    }
    if (__builtin_expect(conn->ctx->fault_armed, 0) && conn->bond_mask && member_failed(conn))
        return;
    if (!chan_ready(chan))
        return;
    while ((m = conn->tx.next_tx) != NULL) {
        struct rov_wire_hdr hdr = {
            .type = ROV_FT_DATA, .len = (uint32_t)m->len, .seq = m->seq,
            .ack = conn->rx_seq, .tag = m->tag,
            .flags = (m->flags & ROV_MSG_MORE) ? ROV_DF_MORE : 0,
        };
        struct iovec iov[2];
        int iovcnt;
        rov_status_t st;
        struct rov_chan *on = chan; /* this message's channel */

        bool fresh = m->rail_refs == 0;

        /* A bond: a large message goes on the member that drains first. */
        if (__builtin_expect(conn->bond_mask != 0, 0) &&
            m->len >= conn->ctx->config.bond_min) {
            bool full;
            struct rov_chan *b = rov_bond_pick(conn, m->len, rov_now_ns(), &full);

            if (full) {
                rov_conn_push_later(conn); /* again at the next progress */
                return;
            }
            on = b ? b : chan;
        }

        /* The budget is spent (one message goes, however large). */
        if ((budget_msgs == 0 || budget_bytes < m->len) && budget_msgs < PUSH_BUDGET_MSGS) {
            rov_conn_push_later(conn); /* the context's progress goes on */
            return;
        }
        if (!fresh && m->queued_serial == on->serial) {
            /* Still queued on this very channel: it will go out in order. */
            conn->tx.next_tx = m->next;
            continue;
        }

        /* A rail may still be writing an earlier transmission of this frame:
         * then resend the header as it is (its older ack is still valid)
         * rather than rewrite bytes under the rail. */
        if (fresh)
            rov_wire_encode(m->hdr, &hdr);
        if (m->flags & ROV_MSG_COPIED) {
            /* hdr and payload are adjacent: one contiguous frame */
            iov[0].iov_base = m->hdr;
            iov[0].iov_len = ROV_WIRE_HDR_LEN + m->len;
            iovcnt = 1;
        } else {
            /* hdr and the caller's prefix (if any) are adjacent too */
            iov[0].iov_base = m->hdr;
            iov[0].iov_len = ROV_WIRE_HDR_LEN + m->prefix_len;
            iov[1].iov_base = (void *)m->data;
            iov[1].iov_len = m->len - m->prefix_len;
            iovcnt = iov[1].iov_len ? 2 : 1;
        }
        st = chan_send(on, iov, iovcnt, m);
        if (st == ROV_ERR_AGAIN)
            break;
        if (st < 0) {
            on->send_error = st;
            push_failed(conn, on);
            return;
        }
        if (st == ROV_INPROGRESS) {
            m->rail_refs++;
            m->queued_serial = on->serial;
        }
        if (__builtin_expect(conn->bond_mask != 0, 0))
            rov_bond_sent(on, ROV_WIRE_HDR_LEN + m->len);
        if (m->flags & ROV_MSG_SENT_ONCE) {
            conn->stats.msgs_resent++;
            conn->stats.bytes_resent += m->len;
        }
        m->flags |= ROV_MSG_SENT_ONCE;
        conn->tx.next_tx = m->next;
        budget_msgs--;
        budget_bytes = budget_bytes > m->len ? budget_bytes - m->len : 0;
        if (fresh)
            ack_sent(conn);
        if (__builtin_expect(conn->ctx->fault_armed, 0)) {
            rov_fault_data_sent(&conn->ctx->fault, on);
            if (on->send_error) {
                push_failed(conn, on);
                return;
            }
        }
    }
    if (__builtin_expect(conn->state != ROV_CONN_ESTABLISHED, 0))
        push_end(conn, chan);
}

ROV_HOT void rov_conn_push(struct rov_conn *conn)
{
    conn_push(conn);
}

/* Connection life cycle ------------------------------------------------------- */

/* Every channel of the connection, parked ones included. */
static void close_all_chans(struct rov_conn *conn)
{
    struct rov_chan *c = conn->ctx->chans;

    while (c) {
        if (c->conn == conn) {
            rov_ctx_chan_close(c);
            c = conn->ctx->chans; /* the list changed */
        } else {
            c = c->next;
        }
    }
}

static void cancel_retained(struct rov_conn *conn, rov_status_t status)
{
    conn->ctx->tx_bytes -= conn->tx.bytes + conn->held_bytes;
    rov_msg_release_list(rov_retain_drain(&conn->tx), status, KEEP(conn->ctx));
    rov_msg_release_list(conn->held, status, KEEP(conn->ctx));
    conn->held = conn->held_tail = NULL;
    conn->held_msgs = conn->held_bytes = 0;
}

void rov_conn_abort(struct rov_conn *conn, rov_status_t status)
{
    close_all_chans(conn);
    cancel_retained(conn, status);
    if (conn->in_ack_list)
        ack_unlink(conn);
}

static void conn_finish_close(struct rov_conn *conn)
{
    rov_conn_abort(conn, ROV_ERR_CLOSED);
    conn_set_state(conn, ROV_CONN_DEAD, "closed");
    rov_ctx_event(conn->ctx, ROV_EVENT_CONN_CLOSED, conn, ROV_OK, conn->tx_rail, -1, "closed");
}

void conn_fail(struct rov_conn *conn, rov_status_t status, const char *why)
{
    struct rov_chan *chan;

    if (conn->state == ROV_CONN_FAILED || conn->state == ROV_CONN_DEAD)
        return;
    if (CLOSING(conn) && conn->peer_closed && !conn->tx.count && status != ROV_ERR_PROTO) {
        /* Closing, the peer's CLOSE here and everything we sent acknowledged:
         * nothing is lost whatever our CLOSE's fate.  A peer that can no
         * longer be reached has finished (it had our CLOSE, and its answer
         * was lost) or failed. */
        rov_debug("conn", "conn %llu: %s after the CLOSEs crossed: closed",
                  (unsigned long long)conn->id, why);
        conn_finish_close(conn);
        return;
    }
    rov_warn("conn", "conn %llu failed: %s (%s)", (unsigned long long)conn->id, why,
             rov_status_str(status));
    conn_set_state(conn, ROV_CONN_FAILED, why);
    conn->fail_status = status;
    /* Tell the peer, on a channel that still works, rather than leave it
     * reconnecting to a connection that is gone (best effort: a HELLO of
     * its later gets the same answer, conn_abort_hello()). */
    chan = conn->peer_aborted ? NULL : any_ready_chan(conn);
    if (chan)
        conn_send_ctrl(chan, ROV_FT_CLOSE, rov_close_abort(status), NULL, 0);
    rov_conn_abort(conn, ROV_ERR_CLOSED);
    rov_ctx_event(conn->ctx, ROV_EVENT_CONN_ERROR, conn, status, conn->tx_rail, -1, why);
}

void rov_conn_fail(struct rov_conn *conn, rov_status_t status, const char *why)
{
    conn_fail(conn, status, why);
}

/* conn fails as unreachable, the reason `what`, then each rail's last
 * answer (last[i]; ROV_OK: not named) and the setting that bounded the
 * tries (NULL: none) in parentheses. */
void conn_fail_unreachable(struct rov_conn *conn, const rov_status_t last[ROV_MAX_RAILS],
                           const char *what, const char *setting)
{
    char why[256];
    size_t off = (size_t)snprintf(why, sizeof(why), "%s (", what);

    for (int i = 0; i < conn->ctx->nrails && off < sizeof(why); i++)
        if (last[i] != ROV_OK)
            off += (size_t)snprintf(why + off, sizeof(why) - off, "%s%s: %s",
                                    why[off - 1] == '(' ? "" : ", ",
                                    rov_context_rail_name(conn->ctx, i),
                                    rov_status_str(last[i]));
    if (off < sizeof(why))
        snprintf(why + off, sizeof(why) - off, "%s%s)",
                 !setting || why[off - 1] == '(' ? "" : "; ", setting ? setting : "");
    conn_fail(conn, ROV_ERR_UNREACHABLE, why);
}

bool rov_conn_fail_unreachable(struct rov_conn *conn, uint64_t since_ns, uint64_t now,
                               uint64_t limit_ns, const rov_status_t last[ROV_MAX_RAILS],
                               const char *what, const char *setting)
{
    char head[160];

    if (!limit_ns || !since_ns || now < since_ns || now - since_ns < limit_ns)
        return false;
    snprintf(head, sizeof(head), "%s for %.1f s", what, (double)(now - since_ns) / 1e9);
    conn_fail_unreachable(conn, last, head, setting);
    return true;
}

void rov_conn_free(struct rov_conn *conn)
{
    rov_context_t *ctx = conn->ctx;

    if (conn->has_secret && conn->peer_id) {
        struct rov_ended *e = &ctx->ended[ctx->ended_next++ % ROV_ENDED_MAX];

        e->id = conn->id;
        e->peer_id = conn->peer_id;
        memcpy(e->peer_ep, conn->peer.ep_id, ROV_EP_ID_LEN);
        memcpy(e->secret, conn->secret, ROV_KEY_LEN);
    }
    ctx->conn_now[conn->state]--;
    rov_conn_abort(conn, ROV_ERR_CANCELED);
    rov_conn_splits_orphan(conn);
    explicit_bzero(conn->secret, ROV_KEY_LEN);
    conn->has_secret = false;
    if (conn->push_more)
        ctx->push_pending--;
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        ctx->conns = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    rov_reorder_fini(&conn->reorder);
    free(conn->frag);
    free(conn);
}

rov_status_t rov_conn_close(rov_conn_t *conn)
{
    ROV_CTX_GUARD(conn->ctx);
    switch (conn->state) {
    case ROV_CONN_FAILED:
        conn_set_state(conn, ROV_CONN_DEAD, "closed after failure");
        return ROV_OK;
    case ROV_CONN_CONNECTING:
    case ROV_CONN_ESTABLISHED:
        conn_set_state(conn, ROV_CONN_CLOSING, "close requested");
        rov_conn_push(conn);
        return ROV_INPROGRESS;
    case ROV_CONN_CLOSING:
    case ROV_CONN_CLOSE_SENT:
    case ROV_CONN_CLOSE_ANSWERED:
        return ROV_INPROGRESS;
    case ROV_CONN_DRAINING:
    case ROV_CONN_QUIESCED:
    case ROV_CONN_REOPENING:
        /* A checkpoint stage: the close starts when the connection sends
         * again (conn_running()), after the sends held before it. */
        rov_debug("conn", "conn %llu: close waits for the end of the stage (%s)",
                  (unsigned long long)conn->id, rov_conn_states[conn->state].name);
        conn->close_pending = true;
        return ROV_INPROGRESS;
    case ROV_CONN_DEAD:
        break;
    }
    return ROV_ERR_BUSY;
}

/* m joins the connection's held sends, last. */
static void held_append(struct rov_conn *conn, struct rov_msg *m)
{
    m->next = NULL;
    if (conn->held_tail)
        conn->held_tail->next = m;
    else
        conn->held = m;
    conn->held_tail = m;
    conn->held_msgs++;
    conn->held_bytes += m->len;
}

/* Whether the peer may have anything of conn's: a first handshake done, or
 * a message of it transmitted (tx_sync holds every message back until the
 * first HELLO_ACK, so the second is a net under the first). */
static bool conn_reached_peer(const struct rov_conn *conn)
{
    if (conn->peer_id || conn->held)
        return true;
    for (const struct rov_msg *m = conn->tx.head; m; m = m->next)
        if (m->flags & ROV_MSG_SENT_ONCE)
            return true;
    return false;
}

rov_status_t rov_conn_hand_over(rov_conn_t *from, rov_conn_t *into)
{
    ROV_CTX_GUARD(from->ctx);
    struct rov_msg *m;
    uint64_t msgs = 0, bytes = 0;
    bool hold, started = false;

    if (from == into || from->ctx != into->ctx ||
        memcmp(from->peer.ep_id, into->peer.ep_id, ROV_EP_ID_LEN) != 0)
        return ROV_ERR_INVAL;
    if ((from->state != ROV_CONN_CONNECTING && from->state != ROV_CONN_CLOSING) ||
        conn_reached_peer(from))
        return ROV_ERR_BUSY;
    hold = B(into->state) & HOLD_STATES;
    if ((into->state != ROV_CONN_ESTABLISHED && into->state != ROV_CONN_CONNECTING && !hold) ||
        into->peer_closed || into->close_pending)
        return ROV_ERR_CLOSED;
    /* In order, behind what into has: as if sent there.  They stay in the
     * context's retained bytes (ctx->tx_bytes); into's window may be
     * exceeded by them once, as the peer's window is by a resend. */
    m = rov_retain_drain(&from->tx);
    while (m) {
        struct rov_msg *next = m->next;

        m->next = NULL;
        msgs++;
        bytes += m->len;
        if (hold)
            held_append(into, m);
        else
            rov_retain_push(&into->tx, m);
        m = next;
    }
    from->stats.msgs_sent -= msgs;
    from->stats.bytes_sent -= bytes;
    into->stats.msgs_sent += msgs;
    into->stats.bytes_sent += bytes;
    rov_debug("conn", "conn %llu: %llu message(s) handed over to conn %llu before its first "
              "connect completed", (unsigned long long)from->id, (unsigned long long)msgs,
              (unsigned long long)into->id);
    /* No channel of from past its rail's connect: no HELLO went out, so
     * the peer knows nothing of it and it ends here.  Else the peer may
     * have accepted it: it closes gracefully, with nothing to deliver. */
    for (struct rov_chan *c = from->ctx->chans; c && !started; c = c->next)
        started = c->conn == from && c->state != ROV_CHAN_CONNECTING;
    if (!started) {
        rov_conn_abort(from, ROV_ERR_CANCELED);
        conn_set_state(from, ROV_CONN_DEAD, "handed over before its rail connected");
    } else if (from->state == ROV_CONN_CONNECTING) {
        conn_set_state(from, ROV_CONN_CLOSING, "handed over");
    }
    /* No callbacks inside this call (railover.h): a failed send waits for
     * the next progress, as in rov_conn_send(). */
    into->ctx->in_send = true;
    conn_push(into);
    into->ctx->in_send = false;
    return started ? ROV_INPROGRESS : ROV_OK;
}

/* A send larger than this side or the peer accepts is refused; said once
 * per connection when it is the peer's limit that refuses it. */
static ROV_COLD rov_status_t send_too_large(struct rov_conn *conn, size_t len)
{
    size_t own = conn->ctx->config.max_msg;

    if (len <= own && !conn->msgsize_said) {
        conn->msgsize_said = true;
        rov_warn("conn", "conn %llu: send of %zu bytes refused: the peer's RAILOVER_MAX_MSG is "
                 "%llu (ours %zu)", (unsigned long long)conn->id, len,
                 (unsigned long long)conn->peer_max_msg, own);
    }
    return ROV_ERR_MSGSIZE;
}

/* Whether a send is copied (up to RAILOVER_EAGER_LIMIT, or asked) or
 * referenced until acknowledged. */
static ROV_INLINE int send_copies(const struct rov_conn *conn, size_t len,
                                  const rov_send_params_t *params)
{
    return len <= conn->ctx->config.eager_limit ||
           (params && (params->flags & ROV_SEND_COPY));
}

/* The message's length: the caller's prefix and buf (rov_send_params_t). */
static ROV_INLINE size_t send_len(size_t len, const rov_send_params_t *params)
{
    return params ? len + params->prefix_len : len;
}

/* What every send checks before it takes the message (len: send_len()). */
static ROV_INLINE rov_status_t send_check(struct rov_conn *conn, const void *buf, size_t len,
                                          const rov_send_params_t *params, int copy)
{
    unsigned flags = params ? params->flags : 0;

    if (len > conn->max_send)
        return send_too_large(conn, len);
    if (__builtin_expect(params && params->prefix_len, 0) &&
        (params->prefix_len > ROV_SEND_PREFIX_MAX || !params->prefix))
        return ROV_ERR_INVAL;
    if ((!copy || (flags & ROV_SEND_NOTIFY_DELIVERED)) && (!params || !params->cb))
        return ROV_ERR_INVAL;
    if (len > send_len(0, params) && !buf)
        return ROV_ERR_INVAL;
    return ROV_OK;
}

/* A message with the caller's prefix (cold: an MPI library's large
 * fragments, one per 256 KiB or so): copied whole, or the prefix copied
 * and buf referenced (conn_push() sends the header and the prefix as one
 * piece, buf as the next). */
static ROV_COLD struct rov_msg *msg_prefixed(struct rov_conn *conn, const void *buf, size_t len,
                                             const rov_send_params_t *params, int copy)
{
    size_t plen = params->prefix_len;
    struct rov_msg *m = rov_msg_cache_take(&conn->ctx->msg_cache, copy ? plen + len : plen);

    if (!m)
        return NULL;
    rov_msg_init(m, params->prefix, plen, 1);
    if (copy) {
        if (len)
            memcpy(m->payload + plen, buf, len);
    } else {
        m->flags &= ~ROV_MSG_COPIED;
        m->data = buf;
        m->prefix_len = (uint32_t)plen;
    }
    m->len = plen + len;
    return m;
}

/* The message of a send: buf copied or referenced (send_copies()). */
static ROV_INLINE struct rov_msg *msg_new(struct rov_conn *conn, const void *buf, size_t len,
                                          const rov_send_params_t *params, int copy)
{
    if (__builtin_expect(params && params->prefix_len, 0))
        return msg_prefixed(conn, buf, len, params, copy);
    return rov_msg_cache_alloc(&conn->ctx->msg_cache, buf, len, copy);
}

/* The message's completion fields (rov_conn_send()). */
static ROV_INLINE void msg_params(struct rov_msg *m, uint32_t tag,
                                  const rov_send_params_t *params)
{
    m->tag = tag;
    if (params) {
        m->cb = params->cb;
        m->arg = params->arg;
        if (params->flags & ROV_SEND_NOTIFY_DELIVERED)
            m->flags |= ROV_MSG_NOTIFY;
    }
}

/* Whether a send of len bytes must wait (counted): the connection's window
 * covers what it retains and what it holds in a stage (held_msgs,
 * held_bytes) together, and one message always fits when there is
 * neither; the per-context bound (tx_cap, window_update(); ctx->tx_bytes
 * counts held bytes too) as well.  A thousand connections times a 16 MiB
 * window is more memory than a rank has: 1,024 connecting connections
 * filled with 2 GiB of queued sends took the process's CPU in page faults
 * for seconds, and their handshakes timed out.  In a bond the per-context
 * bound lets one message per member go (not only one): at 125 MB/s the
 * bound (2.5 MB) is below one 4 MiB message, and a 4 MiB stream went one
 * message at a time over one member of two. */
static ROV_INLINE bool window_full(struct rov_conn *conn, size_t len, uint64_t held_msgs,
                                    uint64_t held_bytes)
{
    uint64_t always = conn->bond_mask ? (uint64_t)__builtin_popcount(conn->bond_mask) : 1;

    if (rov_retain_has_room(&conn->tx, held_msgs, held_bytes, len) &&
        (conn->ctx->tx_bytes + len <= conn->ctx->tx_cap || conn->tx.count + held_msgs < always))
        return false;
    conn->stats.window_full++;
    return true;
}

/* A send while the connection is not open for it: held in order while it
 * quiesces, is quiesced or reconnects after a reopen (railover.h,
 * "Checkpoint stages"), within the window the retained and held messages
 * share; refused otherwise. */
static ROV_COLD rov_status_t send_held(struct rov_conn *conn, uint32_t tag, const void *buf,
                                       size_t blen, const rov_send_params_t *params)
{
    size_t len = send_len(blen, params);
    int copy = send_copies(conn, len, params);
    struct rov_msg *m;
    rov_status_t st;

    if (!(B(conn->state) & HOLD_STATES) || conn->peer_closed || conn->close_pending)
        return ROV_ERR_CLOSED;
    st = send_check(conn, buf, len, params, copy);
    if (st != ROV_OK)
        return st;
    if (window_full(conn, len, conn->held_msgs, conn->held_bytes))
        return ROV_ERR_AGAIN;
    m = msg_new(conn, buf, blen, params, copy);
    if (!m)
        return ROV_ERR_NOMEM;
    msg_params(m, tag, params);
    held_append(conn, m);
    conn->ctx->tx_bytes += len;
    conn->stats.msgs_sent++;
    conn->stats.bytes_sent += len;
    return copy ? ROV_OK : ROV_INPROGRESS;
}

/* The held sends join the retention queue, in order (the connection sends
 * again). */
void conn_release_held(struct rov_conn *conn)
{
    struct rov_msg *m = conn->held;

    while (m) {
        struct rov_msg *next = m->next;

        m->next = NULL;
        rov_retain_push(&conn->tx, m); /* (in ctx->tx_bytes since held) */
        m = next;
    }
    conn->held = conn->held_tail = NULL;
    conn->held_msgs = conn->held_bytes = 0;
}

/* A send of len bytes was taken (rov_conn_send()): counted, and out. */
static ROV_INLINE void sent(struct rov_conn *conn, size_t len)
{
    conn->ctx->tx_bytes += len;
    conn->stats.msgs_sent++;
    conn->stats.bytes_sent += len;
    conn->ctx->in_send = true;
    conn_push(conn);
    conn->ctx->in_send = false;
}

/* A bond splits a large message (at least twice RAILOVER_BOND_MIN, sent
 * without a copy) into fragments, each its own sequence number, so that one
 * message uses every member: as many as four per member, none smaller than
 * BOND_MIN, at most FRAGS_MAX.  Every fragment but the last carries
 * ROV_MSG_MORE (ROV_DF_MORE on the wire); the receiver delivers the message
 * whole at the last one (deliver()).  The caller's prefix goes with the
 * first, its callback with the last: acknowledgements release in order, so
 * it runs when the peer has all of them.  The window takes them as the one
 * message they are (its count may be exceeded by FRAGS_MAX - 1). */
#define FRAGS_MAX 64

static ROV_COLD rov_status_t send_fragments(struct rov_conn *conn, uint32_t tag, const void *buf,
                                            size_t blen, const rov_send_params_t *params,
                                            size_t len)
{
    uint64_t members = (uint64_t)__builtin_popcount(conn->bond_mask);
    size_t plen = len - blen, piece = len / (4 * members), n, off = 0;
    struct rov_msg *first = NULL, **tail = &first;

    if (piece < conn->ctx->config.bond_min)
        piece = conn->ctx->config.bond_min;
    n = (len + piece - 1) / piece;
    if (n > FRAGS_MAX) {
        n = FRAGS_MAX;
        piece = (len + n - 1) / n;
    }
    if (window_full(conn, len, 0, 0)) /* as one message: one always fits when none waits */
        return ROV_ERR_AGAIN;
    for (size_t i = 0; i < n; i++) {
        /* The first fragment: the prefix and piece - plen bytes of buf. */
        size_t take = i + 1 == n ? blen - off : (i == 0 ? piece - plen : piece);
        struct rov_msg *m = i == 0 ? msg_new(conn, buf, take, params, 0)
                                   : rov_msg_cache_alloc(&conn->ctx->msg_cache,
                                                         (const uint8_t *)buf + off, take, 0);

        if (!m) {
            while (first) {
                struct rov_msg *next = first->next;

                rov_msg_free(first);
                first = next;
            }
            return ROV_ERR_NOMEM;
        }
        msg_params(m, tag, i + 1 == n ? params : NULL);
        if (i + 1 < n)
            m->flags |= ROV_MSG_MORE;
        m->next = NULL;
        *tail = m;
        tail = &m->next;
        off += take;
    }
    while (first) {
        struct rov_msg *next = first->next;

        first->next = NULL;
        rov_retain_push(&conn->tx, first);
        first = next;
    }
    sent(conn, len);
    return ROV_INPROGRESS;
}

ROV_HOT_FIRST rov_status_t rov_conn_send(rov_conn_t *conn, uint32_t tag, const void *buf,
                                         size_t blen, const rov_send_params_t *params)
{
    ROV_CTX_GUARD(conn->ctx);
    size_t len = send_len(blen, params);
    int copy = send_copies(conn, len, params);
    struct rov_msg *m;
    rov_status_t st;

    if (__builtin_expect((conn->state != ROV_CONN_ESTABLISHED &&
                          conn->state != ROV_CONN_CONNECTING) || conn->peer_closed, 0))
        return send_held(conn, tag, buf, blen, params);
    st = send_check(conn, buf, len, params, copy);
    if (__builtin_expect(st != ROV_OK, 0))
        return st;
    if (__builtin_expect(conn->bond_mask & (conn->bond_mask - 1), 0) && !copy &&
        blen >= 2 * conn->ctx->config.bond_min)
        return send_fragments(conn, tag, buf, blen, params, len);
    /* Nothing is held outside a stage: the send path reads no held count. */
    if (__builtin_expect(window_full(conn, len, 0, 0), 0))
        return ROV_ERR_AGAIN;
    m = msg_new(conn, buf, blen, params, copy);
    if (!m)
        return ROV_ERR_NOMEM;
    msg_params(m, tag, params);
    rov_retain_push(&conn->tx, m);
    sent(conn, len);
    return copy ? ROV_OK : ROV_INPROGRESS;
}

/* The switch ----------------------------------------------------------------- */

static uint64_t realtime_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void move_tx(struct rov_conn *conn, int rail, rov_reason_t reason, const char *text)
{
    int from = conn->tx_rail;

    conn->tx_rail = rail;
    conn->tx_chan_serial = 0;
    conn->stats.switches++;
    conn->stats.reasons[reason]++;
    conn->stats.last_reason = reason;
    conn->stats.last_switch_ns = realtime_ns();
    rov_info("conn", "conn %llu: rail %s -> %s (%s: %s)", (unsigned long long)conn->id,
             rov_context_rail_name(conn->ctx, from), rov_context_rail_name(conn->ctx, rail),
             rov_reason_str(reason), text);
    rov_ctx_event_code(conn->ctx, ROV_EVENT_CONN_RAIL_SWITCH, conn, ROV_OK, from, rail, text,
                       reason);
}

uint32_t conn_hold_flag(const struct rov_conn *conn)
{
    return conn->hold ? ROV_HF_HOLD : 0;
}

static void send_switch_request(struct rov_conn *conn, struct rov_chan *chan)
{
    conn_send_ctrl(chan, ROV_FT_SWITCH, conn->switch_tag | conn_hold_flag(conn), NULL, 0);
}

void rov_conn_announce(struct rov_conn *conn)
{
    struct rov_chan *chan = conn->tx_rail >= 0 ? conn->chans[conn->tx_rail] : NULL;

    if (!chan_ready(chan) || conn->tx_sync)
        return; /* the pending switch request carries the hold state */
    conn->switch_tag = rov_hf_make(ROV_HF_SWITCH | ROV_HF_REPLY, ROV_REASON_NONE, 0);
    send_switch_request(conn, chan);
}

rov_status_t rov_conn_move(struct rov_conn *conn, int rail, rov_reason_t reason,
                           const char *text, int failed_rail)
{
    struct rov_chan *chan;
    rov_status_t st;

    /* The engine also moves a connection that is flushing for close or
     * draining for a quiesce; a reopen moves one that reconnects. */
    if (conn->state != ROV_CONN_ESTABLISHED &&
        !((CLOSING(conn) || conn->state == ROV_CONN_DRAINING ||
           conn->state == ROV_CONN_REOPENING) && conn->peer_id && reason != ROV_REASON_API))
        return ROV_ERR_BUSY;
    if (!rov_conn_peer_has_rail(conn, rail))
        return ROV_ERR_UNREACHABLE;
    chan = conn->chans[rail];
    /* Onto the transmit rail itself: a no-op, unless its channel is gone
     * (the engine reconnects the rail it was on when no other is up). */
    if (conn->tx_rail == rail && chan && chan->state != ROV_CHAN_CLOSED)
        return conn->tx_sync ? ROV_INPROGRESS : ROV_OK;
    if (!chan || chan->state == ROV_CHAN_CLOSED) {
        st = rov_conn_open_rail(conn, rail);
        if (st != ROV_OK)
            return st;
    }
    move_tx(conn, rail, reason, text);
    conn->tx_sync = true;
    conn->switch_tag = rov_hf_make(ROV_HF_SWITCH | ROV_HF_REPLY |
                                   (failed_rail >= 0 ? ROV_HF_FAILED : 0), reason,
                                   failed_rail >= 0 ? (unsigned)failed_rail : 0);
    chan = conn->chans[rail];
    /* A channel still connecting announces the move in its HELLO. */
    if (chan_ready(chan))
        send_switch_request(conn, chan);
    return ROV_INPROGRESS;
}

rov_status_t rov_conn_switch(rov_conn_t *conn, int rail, const char *reason)
{
    ROV_CTX_GUARD(conn->ctx);
    return rov_conn_move(conn, rail, ROV_REASON_API, reason ? reason : "requested", -1);
}

/* The peer has everything up to `last` and receives on chan's rail now.
 * Resend from there, unless chan is the channel we already rewound on and
 * have sent on ever since: it is FIFO, so what we sent on it will arrive. */
void conn_peer_synced(struct rov_conn *conn, struct rov_chan *chan, uint64_t last)
{
    if (conn->tx_chan_serial != chan->serial) {
        rov_retain_rewind(&conn->tx, last);
        conn->tx_chan_serial = chan->serial;
        /* A CLOSE or an end marker sent on the old channel may have died
         * with it; the push below sends it again (a duplicate is ignored). */
        if (conn->state == ROV_CONN_CLOSE_SENT)
            conn_set_state(conn, ROV_CONN_CLOSING, "a switch: the close goes again");
        conn->eoc_sent = false;
    }
    conn->tx_sync = false;
    rov_conn_push(conn);
}

/* The peer asks us to move to chan's rail (HELLO or SWITCH with SWITCH flag;
 * tag carries its reason and hold state).  Returns whether we follow; the
 * caller answers, then calls conn_peer_synced() and conn_peer_request_done(). */
bool conn_peer_moves(struct rov_conn *conn, struct rov_chan *chan, uint32_t tag)
{
    int rail = chan->rail->index;

    if (tag & ROV_HF_REPLY)
        conn->peer_hold = (tag & ROV_HF_HOLD) != 0;
    if (conn->tx_rail != rail) {
        /* Both sides moving to different rails at once: the smaller endpoint
         * id wins, the other follows it. */
        if (conn->tx_sync && chan_ready(conn->chans[conn->tx_rail]) && ep_cmp(conn) < 0)
            return false;
        move_tx(conn, rail, rov_reason_of_peer(rov_hf_reason(tag)), "peer moved");
    }
    return true;
}

/* After answering a peer's switch request: a rail it left because it failed
 * is dead for us too, even if we have not noticed yet. */
void conn_peer_request_done(struct rov_conn *conn, struct rov_chan *chan, uint32_t tag)
{
    int failed = (int)rov_hf_failed_rail(tag);

    if ((tag & ROV_HF_FAILED) && failed != chan->rail->index && failed < conn->ctx->nrails &&
        chan->conn == conn && conn->state != ROV_CONN_DEAD && conn->state != ROV_CONN_FAILED)
        rov_policies_peer_failed(conn, failed, rov_hf_reason(tag));
}

/* A connection is established: the policies watch it from now, and an
 * operator's hold set before (on it, or on every connection) applies. */
void conn_up(struct rov_conn *conn)
{
    rov_policies_conn_up(conn);
    if (conn->ctx->hold_all || conn->hold) {
        conn->hold = false;
        rov_conn_force_fallback(conn, 1);
    }
    if (conn->ctx->stage == ROV_CONTEXT_QUIESCING || conn->ctx->stage == ROV_CONTEXT_QUIESCED)
        rov_conn_quiesce(conn); /* up during a quiesce: it drains too */
}

/* Frames in ------------------------------------------------------------------ */

/* A fragment (ROV_DF_MORE, or the last one of a message being put
 * together) joins conn->frag.  NULL when the message goes on, or with *why_p
 * set when the peer broke the rules (another tag, longer than
 * RAILOVER_MAX_MSG); else the whole message, *len_p long. */
static ROV_COLD const uint8_t *frag_add(struct rov_conn *conn, uint32_t tag, const void *data,
                                        size_t len, uint32_t flags, size_t *len_p,
                                        const char **why_p)
{
    if (!conn->frag_open) {
        conn->frag_open = true;
        conn->frag_tag = tag;
        conn->frag_len = 0;
    }
    if (tag != conn->frag_tag) {
        *why_p = "a fragment of another message before the last fragment of one";
        return NULL;
    }
    if (len > conn->ctx->config.max_msg - conn->frag_len) {
        *why_p = "fragments of a message longer than RAILOVER_MAX_MSG";
        return NULL;
    }
    if (conn->frag_len + len > conn->frag_cap) {
        size_t cap = conn->frag_cap ? conn->frag_cap : 64 * 1024;
        uint8_t *p;

        while (cap < conn->frag_len + len)
            cap *= 2;
        if (!(p = realloc(conn->frag, cap))) {
            *why_p = "no memory to put a fragmented message together";
            return NULL;
        }
        conn->frag = p;
        conn->frag_cap = cap;
    }
    if (len)
        memcpy(conn->frag + conn->frag_len, data, len);
    conn->frag_len += len;
    if (flags & ROV_DF_MORE)
        return NULL;
    conn->frag_open = false;
    *len_p = conn->frag_len;
    return conn->frag;
}

/* Frame rx_seq + 1 arrived: the application gets its message (the whole
 * message at its last fragment).  False when the peer broke the rules
 * (*why_p). */
static bool deliver(struct rov_conn *conn, uint32_t tag, const void *data, size_t len,
                    uint32_t flags, const char **why_p)
{
    conn->rx_seq++;
    conn->rx_unacked_msgs++;
    conn->rx_unacked_bytes += len;
    if (__builtin_expect((flags & ROV_DF_MORE) || conn->frag_open, 0)) {
        *why_p = NULL;
        if (!(data = frag_add(conn, tag, data, len, flags, &len, why_p)))
            return *why_p == NULL;
    }
    conn->stats.msgs_recv++;
    conn->stats.bytes_recv += len;
    if (__builtin_expect(conn->ctx->in_helper, 0))
        rov_ctx_defer_recv(conn, tag, data, len); /* acknowledged, delivered at progress */
    else
        conn->ctx->recv_cb(conn->ctx->arg, conn, tag, data, len);
    if (__builtin_expect(data == conn->frag, 0) &&
        conn->frag_cap > conn->ctx->config.window_bytes) {
        /* Kept for the next message up to the window (what a connection
         * retains anyway): freed after every 4 MiB message, each one was put
         * together through a chain of reallocs from 64 KiB. */
        free(conn->frag);
        conn->frag = NULL;
        conn->frag_cap = 0;
    }
    return true;
}

/* The bond's one setter (its members: the policy's rov_policy_bond(), and a
 * member's failure here): each rail that joins or leaves is counted and
 * reported (ROV_EVENT_CONN_BOND); a new member may take what waits. */
void rov_conn_set_bond(struct rov_conn *conn, unsigned mask, const char *why)
{
    uint8_t was = conn->bond_mask, now = (uint8_t)mask;

    conn->bond_mask = now;
    for (int i = 0; i < conn->ctx->nrails; i++) {
        unsigned bit = 1u << i;
        bool joined = now & bit;

        if (!((was ^ now) & bit))
            continue;
        if (joined)
            conn->stats.bond_joins++;
        else
            conn->stats.bond_leaves++;
        rov_debug("conn", "conn %llu: rail %s %s the bond (%s)", (unsigned long long)conn->id,
                  rov_context_rail_name(conn->ctx, i), joined ? "joins" : "leaves", why);
        rov_ctx_event(conn->ctx, ROV_EVENT_CONN_BOND, conn, ROV_OK, joined ? -1 : i,
                      joined ? i : -1, why);
    }
    if (now & ~was)
        rov_conn_push(conn);
}

/* Gaps.  A frame beyond rx_seq + 1 opens one; it closes when rx_seq
 * reaches the highest sequence number seen.  The receiver asks for a RESEND
 * when a frame it had to drop shows the gap (once per gap), and again when
 * the gap has made no progress for RAILOVER_FAILOVER_TIMEOUT
 * (rov_conn_gap_check()): in a bond the missing frame may have been dropped
 * after that one RESEND (it was resent on a member and overtaken again),
 * and nothing else would ever ask for it: its sender waits for an ack with
 * every channel healthy. */
static void ask_resend(struct rov_conn *conn)
{
    struct rov_chan *chan = any_ready_chan(conn);

    if (!chan)
        return;
    conn->resend_asked = conn->rx_seq + 1;
    conn->stats.resends_asked++;
    conn_send_ctrl(chan, ROV_FT_RESEND, 0, NULL, 0);
}

static void gap_opened(struct rov_conn *conn, uint64_t now)
{
    rov_context_t *ctx = conn->ctx;
    uint64_t due = now + ctx->config.failover_timeout_ns;

    conn->gap_ns = now;
    if (!ctx->gap_check_ns || due < ctx->gap_check_ns)
        ctx->gap_check_ns = due;
}

void rov_conn_gap_check(rov_context_t *ctx, uint64_t now)
{
    uint64_t timeout = ctx->config.failover_timeout_ns, next = 0;

    ctx->gap_check_ns = 0;
    for (struct rov_conn *c = ctx->conns; c; c = c->next) {
        if (!c->gap_ns)
            continue;
        if (c->state == ROV_CONN_FAILED || c->state == ROV_CONN_DEAD) {
            c->gap_ns = 0; /* nothing more will come */
            continue;
        }
        if (now - c->gap_ns >= timeout) {
            rov_log_ratelimited(ROV_LOG_INFO, "conn", "conn %llu: message %llu still missing "
                                "after RAILOVER_FAILOVER_TIMEOUT (%llu later ones came): "
                                "asked for it again", (unsigned long long)c->id,
                                (unsigned long long)c->rx_seq + 1,
                                (unsigned long long)(c->rx_seen - c->rx_seq - 1));
            ask_resend(c);
            c->gap_ns = now;
        }
        if (!next || c->gap_ns + timeout < next)
            next = c->gap_ns + timeout;
    }
    ctx->gap_check_ns = next;
}

static void handle_data(struct rov_conn *conn, struct rov_chan *chan,
                        const struct rov_wire_hdr *hdr, const uint8_t *payload)
{
    const struct rov_config *cfg = &conn->ctx->config;
    const char *why = NULL;

    if (hdr->seq <= conn->rx_seq) {
        conn->stats.dups_dropped++;
        ack_schedule(conn); /* the peer resent: it may lack our ack */
        return;
    }
    if (hdr->seq > conn->rx_seq + 1) {
        /* Held within RAILOVER_REORDER_MSGS and conn->reorder_max; beyond,
         * dropped: the RESEND below (one per gap) rewinds the peer to
         * before it. */
        rov_status_t st = rov_reorder_insert(&conn->reorder, conn->rx_seq + 1, hdr->seq,
                                             hdr->tag, hdr->flags, payload, hdr->len,
                                             conn->reorder_max);

        if (st == ROV_OK)
            conn->stats.reordered++;
        rov_debug("conn", "conn %llu: early seq %llu, expected %llu%s",
                  (unsigned long long)conn->id, (unsigned long long)hdr->seq,
                  (unsigned long long)conn->rx_seq + 1,
                  st == ROV_ERR_AGAIN ? ", beyond the reorder buffer: dropped" : "");
        if (hdr->seq > conn->rx_seen)
            conn->rx_seen = hdr->seq;
        if (!conn->gap_ns)
            gap_opened(conn, rov_now_ns());
        /* In a bond early frames are the rule (the members' queues differ):
         * one held (or held already) asks for nothing; one dropped beyond
         * the buffer does. */
        if ((st == ROV_OK || st == ROV_INPROGRESS) && cfg->bond)
            return;
        if (conn->resend_asked != conn->rx_seq + 1)
            ask_resend(conn);
        return;
    }
    if (!deliver(conn, hdr->tag, payload, hdr->len, hdr->flags, &why))
        return conn_protocol_error(chan, why);
    while (conn->reorder.count && conn->state != ROV_CONN_DEAD) {
        struct rov_reorder_slot s;
        bool ok;

        if (!rov_reorder_take(&conn->reorder, conn->rx_seq + 1, &s))
            break;
        ok = deliver(conn, s.tag, s.data, s.len, s.flags, &why);
        free(s.data);
        if (!ok)
            return conn_protocol_error(chan, why);
    }
    if (conn->state == ROV_CONN_DEAD || conn->state == ROV_CONN_FAILED)
        return;
    if (conn->gap_ns) /* closed, or moved on to a later message: its clock restarts */
        conn->gap_ns = 0;
    if (conn->rx_seen > conn->rx_seq)
        gap_opened(conn, rov_now_ns());
    if (conn->rx_unacked_msgs >= (cfg->window_msgs + 3) / 4 ||
        conn->rx_unacked_bytes >= cfg->window_bytes / 4)
        rov_conn_send_ack(conn);
    else if (conn->rx_seq != conn->rx_acked)
        ack_schedule(conn);
}

ROV_COLD void conn_protocol_error(struct rov_chan *chan, const char *why)
{
    rov_conn_chan_failed(chan, ROV_ERR_PROTO, why);
}

/* Release what the peer's cumulative ack covers.  False when the channel or
 * connection is gone afterwards (protocol error, or a callback closed it). */
ROV_HOT bool conn_apply_ack(struct rov_conn *conn, struct rov_chan *chan, uint64_t ack)
{
    uint64_t bytes = conn->tx.bytes;
    struct rov_msg *acked;

    if (ack <= rov_retain_acked(&conn->tx))
        return true;
    if (rov_retain_ack(&conn->tx, ack, &acked) != ROV_OK) {
        conn_protocol_error(chan, "acknowledgement of data never sent");
        return false;
    }
    conn->ctx->tx_bytes -= bytes - conn->tx.bytes;
    conn->ctx->acked_bytes += bytes - conn->tx.bytes;
    if (__builtin_expect(conn->bond_mask & (conn->bond_mask - 1), 0))
        rov_bond_acked(conn, rov_now_ns());
    rov_msg_release_list(acked, ROV_OK, KEEP(conn->ctx));
    return conn->state != ROV_CONN_DEAD && chan->conn == conn;
}

/* A RESEND asks for everything after its ack again, once per gap (the
 * receiver asks again only for a new gap, handle_data()).  Honoured at once,
 * as before; one that asks only for what this side resent on a RESEND less
 * than RAILOVER_FAILOVER_TIMEOUT ago is ignored: what it asks for is on its
 * way (the channel is FIFO), and a resend that stopped arriving is a stall
 * the failure detector handles, not a reason to send the window again.
 * Unbounded, 111,744 RESEND frames (3.6 MB) made a rank send 5.3 GB back
 * in 5 s. */
static bool honour_resend(struct rov_conn *conn, uint64_t ack)
{
    uint64_t now = rov_now_ns(), from = ack + 1;

    if (conn->resend_ns && now - conn->resend_ns < conn->ctx->config.failover_timeout_ns &&
        from >= conn->resend_from && from <= conn->resend_to) {
        conn->resend_ignored++;
        rov_log_ratelimited(ROV_LOG_WARN, "conn", "conn %llu: the peer asked again for "
                            "messages from %llu, resent less than RAILOVER_FAILOVER_TIMEOUT "
                            "ago: ignored (%llu such requests so far)",
                            (unsigned long long)conn->id, (unsigned long long)from,
                            (unsigned long long)conn->resend_ignored);
        return false;
    }
    conn->resend_from = from;
    conn->resend_to = conn->tx.next_seq - 1;
    conn->resend_ns = now;
    return true;
}

/* The peer's CLOSE|ABORT: the connection failed there (or no longer
 * exists).  Fail it here too, naming what the peer said and, for a message
 * the peer could not send us, our own limit. */
static ROV_COLD void peer_aborted(struct rov_conn *conn, uint32_t tag)
{
    rov_status_t st = rov_close_status(tag);
    char why[192];

    if (st == ROV_ERR_MSGSIZE)
        snprintf(why, sizeof(why), "the peer failed the connection: a message queued there "
                 "is larger than our RAILOVER_MAX_MSG (%zu; the peer's is %llu)",
                 conn->ctx->config.max_msg, (unsigned long long)conn->peer_max_msg);
    else
        snprintf(why, sizeof(why), "the peer failed or ended the connection");
    if (st >= 0)
        st = ROV_ERR_RESET;
    conn->peer_aborted = true;
    conn_fail(conn, st, why);
}

static ROV_COLD void handle_switch(struct rov_conn *conn, struct rov_chan *chan,
                                   const struct rov_wire_hdr *hdr)
{
    int rail = chan->rail->index;

    if (hdr->tag & ROV_HF_REPLY) {
        /* Always answer, even when we do not follow: the asker must not wait
         * on an answer that depends on our own switches crossing its own.
         * Extra answers are harmless (a sync on the same channel is a no-op). */
        bool follow = conn_peer_moves(conn, chan, hdr->tag);

        if (conn_send_ctrl(chan, ROV_FT_SWITCH, follow ? ROV_HF_SWITCH : 0, NULL, 0) != ROV_OK)
            return;
        if (follow)
            conn_peer_synced(conn, chan, hdr->ack);
        conn_peer_request_done(conn, chan, hdr->tag);
        return;
    }
    /* An answer: the peer's last-received on this channel. */
    if (conn->tx_rail == rail && conn->tx_sync)
        conn_peer_synced(conn, chan, hdr->ack);
}

/* The close handshake.  Each side sends CLOSE once everything it sent is
 * acknowledged.  A side that receives the peer's CLOSE after sending its own
 * has everything and the peer has everything: it answers with CLOSE |
 * ROV_CLOSE_ACKED and finishes once the answer is at the peer (chan_flush)
 * or, on a rail that cannot tell, at once (closing such a channel delivers
 * what it took).  The side whose CLOSE went second finishes on that answer, and
 * not on the channel's end, which cannot tell the peer finishing from the
 * peer's rail failing under the CLOSE: then it moves and sends the CLOSE
 * again (rov_conn_chan_failed()).  Two CLOSEs that cross are both answered. */
static void answer_close(struct rov_conn *conn, struct rov_chan *chan)
{
    rov_status_t st;

    if (conn->state != ROV_CONN_CLOSE_ANSWERED)
        conn_set_state(conn, ROV_CONN_CLOSE_ANSWERED, "the peer's close answered");
    if (__builtin_expect(conn->ctx->fault_armed, 0))
        rov_fault_close_sending(&conn->ctx->fault, chan, ROV_FAULT_CLOSE_ANSWER);
    st = chan->state == ROV_CHAN_CLOSED ? ROV_ERR_RESET
                                        : conn_send_ctrl(chan, ROV_FT_CLOSE, ROV_CLOSE_ACKED, NULL, 0);
    /* A channel that failed under the answer finished the connection
     * already (rov_conn_chan_failed()): it must not close twice. */
    if (conn->state != ROV_CONN_CLOSE_ANSWERED)
        return;
    if (st == ROV_OK && chan->rail->ops.chan_flush(chan) == ROV_INPROGRESS)
        return; /* rov_conn_chan_flushed() */
    conn_finish_close(conn);
}

void rov_conn_chan_flushed(struct rov_chan *chan)
{
    struct rov_conn *conn = chan->conn;

    if (conn->state == ROV_CONN_CLOSE_ANSWERED)
        conn_finish_close(conn);
}

static ROV_COLD void handle_close(struct rov_conn *conn, struct rov_chan *chan, uint32_t flags)
{
    bool again = conn->peer_closed; /* resent after a switch */

    if (flags & ROV_CLOSE_ACKED) {
        /* The peer answers our CLOSE: it sent its own and had all of ours. */
        if (!CLOSING(conn) || conn->tx.count)
            return conn_protocol_error(chan, "close answered before we closed");
        conn->peer_closed = true;
        conn_finish_close(conn);
        return;
    }
    conn->peer_closed = true;
    if (conn->state == ROV_CONN_DRAINING) {
        /* A CLOSE ends the peer's stream as an end marker would: everything
         * it sent is here (it closes only once all of it is acknowledged). */
        conn->peer_eoc = true;
        conn->peer_eoc_seq = conn->rx_seq;
    }
    if (conn->state == ROV_CONN_CLOSE_ANSWERED || (conn->state == ROV_CONN_CLOSE_SENT && !again)) {
        answer_close(conn, chan);
        return;
    }
    if (again)
        return;
    rov_ctx_event(conn->ctx, ROV_EVENT_CONN_PEER_CLOSED, conn, ROV_OK, conn->tx_rail, -1,
                  "peer closed");
    /* Already closing: the CLOSE's ack may have released our last message;
     * draining: the CLOSE may have been what it waited for. */
    if (CLOSING(conn) || conn->state == ROV_CONN_DRAINING)
        rov_conn_push(conn);
}

ROV_HOT void rov_conn_on_frame(struct rov_chan *chan, const struct rov_wire_hdr *hdr,
                               const uint8_t *payload)
{
    struct rov_conn *conn = chan->conn;

    if (chan->parked)
        return;
    if (!conn) {
        if (hdr->type != ROV_FT_HELLO)
            return conn_protocol_error(chan, "first frame on a channel is not a hello");
        return conn_handle_hello(chan, hdr, payload);
    }
    if (conn->state == ROV_CONN_DEAD || conn->state == ROV_CONN_FAILED)
        return;
    if (hdr->type == ROV_FT_HELLO)
        return conn_protocol_error(chan, "second hello on a channel");
    if (__builtin_expect(hdr->type == ROV_FT_CHALLENGE, 0))
        return conn_handle_challenge(chan, payload);
    if (__builtin_expect(hdr->type == ROV_FT_CLOSE && (hdr->tag & ROV_CLOSE_ABORT), 0) &&
        (chan->handshaken || chan->outbound))
        return peer_aborted(conn, hdr->tag); /* also the answer to our HELLO */
    if (hdr->type != ROV_FT_HELLO_ACK && !chan->handshaken)
        return conn_protocol_error(chan, "frame before the handshake");

    /* Cumulative ack, valid whichever channel it came on. */
    if (!conn_apply_ack(conn, chan, hdr->ack))
        return;

    /* Data first, outside the switch: the switch's jump table is on a page
     * of its own (transport/compiler.h). */
    if (hdr->type == ROV_FT_DATA) {
        handle_data(conn, chan, hdr, payload);
    } else {
        switch (hdr->type) {
        case ROV_FT_ACK:
            conn->stats.acks_recv++;
            break;
        case ROV_FT_HELLO_ACK:
            conn_handle_hello_ack(conn, chan, hdr, payload);
            return;
        case ROV_FT_SWITCH:
            handle_switch(conn, chan, hdr);
            return;
        case ROV_FT_RESEND:
            if (!honour_resend(conn, hdr->ack))
                return;
            rov_retain_rewind(&conn->tx, hdr->ack);
            break;
        case ROV_FT_CLOSE:
            handle_close(conn, chan, hdr->tag);
            return;
        case ROV_FT_QUIESCE:
            conn_handle_quiesce(conn, chan, hdr, payload);
            return;
        }
    }
    if (conn->tx.next_tx || conn->state != ROV_CONN_ESTABLISHED)
        rov_conn_push(conn);
}

void rov_conn_chan_failed(struct rov_chan *chan, rov_status_t status, const char *why)
{
    rov_conn_chan_failed_reason(chan, status, why, ROV_REASON_NONE);
}

void rov_conn_chan_failed_reason(struct rov_chan *chan, rov_status_t status, const char *why,
                                 rov_reason_t reason)
{
    struct rov_conn *conn = chan->conn;
    int rail = chan->rail->index;
    bool parked = chan->parked, handshaken = chan->handshaken;

    if (chan->state == ROV_CHAN_CLOSED)
        return;
    if (status == ROV_ERR_PROTO) {
        /* Rate-limited: anyone who reaches a port can cause it. */
        char where[128];

        chan->rail->ops.chan_str(chan, where, sizeof(where));
        rov_log_ratelimited(ROV_LOG_WARN, "conn", "closing %s channel %s%s: protocol error: %s",
                            chan->rail->spec->name, where,
                            conn ? "" : " (no connection yet)", why);
    } else if (status == ROV_ERR_TIMEDOUT && chan->outbound && chan->state == ROV_CHAN_OPEN &&
               !chan->challenged) {
        /* Connected, and the acceptor never said a word: a Railover older
         * than wire version 5 waits for our HELLO instead of challenging. */
        rov_log_ratelimited(ROV_LOG_WARN, "conn", "%s channel of conn %llu closed: %s (%s); "
                            "the peer never sent its challenge: is it a Railover of an "
                            "older protocol (wire version < %d)?", chan->rail->spec->name,
                            conn ? (unsigned long long)conn->id : 0ull, why,
                            rov_status_str(status), ROV_WIRE_VERSION);
    } else {
        /* At debug level: the switch it causes, or the connection's
         * failure, is the one line an operator sees. */
        rov_debug("conn", "%s channel of conn %llu closed: %s (%s)", chan->rail->spec->name,
                  conn ? (unsigned long long)conn->id : 0ull, why, rov_status_str(status));
    }
    rov_ctx_chan_close(chan);
    if (!conn || parked || conn->state == ROV_CONN_DEAD || conn->state == ROV_CONN_FAILED)
        return;
    for (struct rov_chan *c = conn->ctx->nparked ? conn->ctx->chans : NULL; c; c = c->next) {
        if (c->parked && c->conn == conn && c->rail->index == rail) {
            conn_adopt(conn, c, c->hello_flags, c->hello_ack);
            return;
        }
    }
    if (conn->state == ROV_CONN_QUIESCED ||
        ((conn->state == ROV_CONN_CLOSE_SENT || conn->state == ROV_CONN_CLOSE_ANSWERED) &&
         conn->peer_eoc && !conn->tx.count))
        return; /* nothing in flight: the peer closed its rails, or the path
                 * ended; a resume or a reopen reconnects (a closing one then
                 * sends its CLOSE again) */
    if (conn->state == ROV_CONN_DRAINING && conn->peer_eoc && conn->eoc_sent &&
        conn->rx_seq >= conn->peer_eoc_seq)
        return; /* the peer's drain is over (both markers, its last message
                 * here): it may close its rails before its ack of our last
                 * reaches us (a switch was under way); what is unacknowledged
                 * is retained and settled when it reconnects after its reopen */
    if (conn->state == ROV_CONN_REOPENING) {
        if (rail == conn->tx_rail && !handshaken)
            conn_reopen_failed(conn, rail, status);
        return;
    }
    if (conn->state == ROV_CONN_CLOSE_ANSWERED) {
        /* We answered the peer's CLOSE: both sides have everything. */
        conn_finish_close(conn);
        return;
    }
    if (conn->state == ROV_CONN_CLOSE_SENT && rail != conn->tx_rail) {
        /* A side channel ending: wait on the transmit channel. */
        if (!any_ready_chan(conn))
            conn_finish_close(conn);
        return;
    }
    /* Otherwise our transmit path ended under a CLOSE the peer may never have
     * received or answered: the peer may have ended the channel only because
     * it failed there (a stall on its side).  Move on like any failure; the
     * CLOSE goes again once the move is through (conn_peer_synced()).  A peer
     * that is gone fails the connection, or, if its CLOSE is here and all we
     * sent acknowledged, closes it (conn_fail()); so then does a peer that
     * refuses or drops the new channel before its handshake: it finished and
     * no longer knows the connection. */
    if (status == ROV_ERR_PROTO ||
        (CLOSING(conn) && conn->peer_closed && !conn->tx.count &&
         chan->outbound && !chan->handshaken)) {
        conn_fail(conn, status, why);
        return;
    }
    if (!conn->peer_id && rail == conn->tx_rail) {
        conn_first_connect_failed(conn, rail, status);
        return;
    }
    reason = rov_reason_classify(status, reason);
    if (rail != conn->tx_rail) {
        if (conn->bond_mask & (1u << rail)) {
            /* A member of the bond: what it carried and the peer has not
             * acknowledged goes again on the others (the receiver drops
             * what it already has). */
            rov_retain_rewind(&conn->tx, rov_retain_acked(&conn->tx));
            rov_conn_set_bond(conn, conn->bond_mask & ~(1u << rail), why);
            rov_conn_push(conn);
        }
        rov_policies_chan_failed(conn, rail, status, reason, why); /* bookkeeping only */
        return;
    }
    rov_ctx_event_code(conn->ctx, ROV_EVENT_CONN_RAIL_DOWN, conn, status, rail, -1, why, reason);
    /* The event handler may have moved the connection; if not, the failover
     * engine does; if it cannot, the connection is lost. */
    if (conn->state != ROV_CONN_DEAD && conn->state != ROV_CONN_FAILED &&
        conn->tx_rail == rail && !conn->chans[rail] &&
        !rov_policies_chan_failed(conn, rail, status, reason, why))
        conn_fail(conn, status, why);
}

int rov_conn_rail(const rov_conn_t *conn)
{
    ROV_CTX_GUARD(conn->ctx);
    return conn->tx_rail;
}

const void *rov_conn_data(const rov_conn_t *conn, size_t *len_p)
{
    *len_p = conn->data_len;
    return conn->data;
}

void rov_conn_set_user(rov_conn_t *conn, void *user)
{
    conn->user = user;
}

void *rov_conn_get_user(const rov_conn_t *conn)
{
    return conn->user;
}

void rov_conn_stats(const rov_conn_t *conn, rov_conn_stats_t *st)
{
    ROV_CTX_GUARD(conn->ctx);
    *st = conn->stats;
    st->retained_msgs = conn->tx.count;
    st->retained_bytes = conn->tx.bytes;
    st->tx_seq = conn->tx.next_seq - 1;
    st->rx_seq = conn->rx_seq;
    st->rail = conn->tx_rail;
    st->forced = conn->hold;
}

