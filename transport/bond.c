/*
 * Bonding (RAILOVER_BOND; docs/architecture.md, Bonding): which channel of a
 * connection's bond a large message goes on, and each member's measured
 * rate.  The policy decides membership (rov_policy_bond()); this file only
 * chooses among the members that are ready now.
 *
 * The choice: the member whose queue drains first with the message added,
 * (queued + len) / rate, so that every member's frames wait about as long
 * and the receiver's reorder buffer holds about one message per member.
 * queued comes from the rail (ops.chan_queued: bytes its remote transport
 * has not acknowledged); the rate from how fast it falls: bytes handed to
 * the channel minus bytes still queued, sampled at most every
 * BOND_SAMPLE_NS, counted only over intervals in which the member had
 * something queued throughout (an idle member's rate is its offered load,
 * not what it can carry), smoothed (1/4 of each new sample).  A member not
 * measured yet counts at the best measured rate, or, with none measured,
 * all are equal: the shortest queue wins.
 *
 * The receiver holds what overtakes a slower member in its reorder buffer
 * (in a bond as large as the window, conn->reorder_max, so that nothing the
 * sender may have in flight is dropped there).  What keeps the members'
 * queues near their rates is the share: a member whose queue already holds
 * its share of that buffer (half of it over the members) takes nothing
 * more; when every member holds its share the push waits (rov_bond_pick()'s
 * *full).  A member below its share takes a message of any size: the
 * TCP rail's queue is rarely empty (an ack frame of 32 bytes waits there
 * for the peer's delayed ACK), and "only an empty member takes a message
 * larger than the share" kept 4 MiB messages on one member at a time.
 */
#include "transport/bond.h"
#include "transport/conn_int.h"

#define BOND_SAMPLE_NS (1000ull * 1000ull) /* 1 ms */

struct rov_chan *rov_bond_member(const struct rov_conn *conn, int rail)
{
    struct rov_chan *chan = conn->chans[rail];

    return (conn->bond_mask & (1u << rail)) && rov_conn_chan_ready(chan) && !chan->send_error
               ? chan : NULL;
}

/* What the bond counts chan's rate as: its measured rate, the best
 * member's (top) while it has none, or 1 for all while none is measured. */
static uint64_t bond_rate(const struct rov_chan *chan, uint64_t top)
{
    return top ? (chan->bond.rate ? chan->bond.rate : top) : 1;
}

/* Sample chan's queue; update its rate when an interval is over.  Only an
 * interval in which the member had something queued throughout counts: an
 * interval in which it ran dry says what it was given, not what it can
 * carry.  Taken as a lower bound of the rate (raising it at once), such
 * intervals measured the faster member of a 1:3 pair in a 4 MiB stream,
 * but on equal links that only two cores limit they fed themselves: the
 * member measured higher got more and measured higher again (95/5 splits
 * in failover_bond), so they are not used. */
static uint64_t member_queued(struct rov_chan *chan, uint64_t now)
{
    struct rov_bond_chan *b = &chan->bond;
    uint64_t queued = chan->rail->ops.chan_queued(chan);
    uint64_t acked = b->sent > queued ? b->sent - queued : 0;

    if (!b->sample_ns) {
        b->sample_ns = now;
        b->acked = acked;
        b->busy = queued > 0;
        return queued;
    }
    if (now - b->sample_ns >= BOND_SAMPLE_NS) {
        if (b->busy && queued > 0 && acked > b->acked) {
            uint64_t r = (acked - b->acked) * 1000000000ull / (now - b->sample_ns);

            b->rate = b->rate ? b->rate - b->rate / 4 + r / 4 : r;
        }
        b->sample_ns = now;
        b->acked = acked;
        b->busy = queued > 0;
    } else if (!queued) {
        b->busy = false; /* it ran dry within the interval */
    }
    return queued;
}

struct rov_chan *rov_bond_pick(struct rov_conn *conn, size_t len, uint64_t now, bool *full)
{
    struct rov_chan *best = NULL, *chans[ROV_MAX_RAILS];
    uint64_t queued[ROV_MAX_RAILS], top = 0, share;
    int n = 0;

    for (int i = 0; i < conn->ctx->nrails; i++) {
        struct rov_chan *chan = rov_bond_member(conn, i);

        if (!chan || !chan->rail->ops.chan_queued)
            continue;
        chans[n] = chan;
        queued[n] = member_queued(chans[n], now);
        if (chans[n]->bond.rate > top)
            top = chans[n]->bond.rate;
        n++;
    }
    *full = false;
    if (n < 2)
        return NULL; /* no bond now: the transmit rail, as without one */
    share = conn->reorder_max / 2 / (uint64_t)n;
    if (!share)
        share = 1;
    /* Smallest (queued + len) / rate, compared as cross products. */
    unsigned __int128 best_t = 0, best_r = 1;
    for (int k = 0; k < n; k++) {
        uint64_t r = bond_rate(chans[k], top);
        unsigned __int128 t = (unsigned __int128)(queued[k] + len);

        if (queued[k] >= share)
            continue;
        if (!best || t * best_r < best_t * r) {
            best = chans[k];
            best_t = t;
            best_r = r;
        }
    }
    *full = best == NULL;
    return best;
}

void rov_bond_sent(struct rov_chan *chan, size_t bytes)
{
    chan->bond.sent += bytes;
}

/* Samples taken only when a message is placed miss every interval of a
 * ping-pong: the members are busy while the message crosses and dry when
 * the next is placed, so their rates stayed unmeasured and a 4 MiB message
 * on 1:3 links was split as if they were equal.  The peer's acks arrive
 * while the members are busy (each within RAILOVER_ACK_DELAY of data
 * delivered in order), so the queues are sampled there too, by the same
 * rule (an interval counts only if the member was busy throughout). */
void rov_bond_acked(struct rov_conn *conn, uint64_t now)
{
    if (now - conn->bond_seen_ns < BOND_SAMPLE_NS / 4)
        return;
    conn->bond_seen_ns = now;
    for (int i = 0; i < conn->ctx->nrails; i++) {
        struct rov_chan *chan = rov_bond_member(conn, i);

        if (chan && chan->rail->ops.chan_queued)
            member_queued(chan, now);
    }
}
