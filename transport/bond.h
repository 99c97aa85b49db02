/*
 * Bonding (RAILOVER_BOND; docs/architecture.md, Bonding): a connection's large
 * messages spread over the members of its bond, each member's rate
 * measured (transport/bond.c).
 */
#ifndef ROV_BOND_H
#define ROV_BOND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rov_conn;
struct rov_chan;

/* What the bond keeps per channel (in struct rov_chan). */
struct rov_bond_chan {
    uint64_t sent;      /* bytes handed to the channel since it opened */
    uint64_t acked;     /* ... of which acknowledged by its transport at sample_ns */
    uint64_t sample_ns; /* the current measuring interval began, 0: none yet */
    uint64_t rate;      /* bytes per second its transport acknowledges, 0: unknown */
    bool busy;          /* queued something throughout the current interval */
    uint64_t read_rate; /* bytes per second our reads' pieces came at, 0: unknown */
    uint64_t read_mark_ns; /* the last piece ended, or the first began (mem.c) */
    uint64_t read_bytes, read_ns; /* pieces and reading time since the last sample */
};

/** conn's channel on rail when that rail is in its bond and the channel
 * is ready to send (open, handshaken, no send failed); NULL otherwise. */
struct rov_chan *rov_bond_member(const struct rov_conn *conn, int rail);
/** The member of conn's bond (conn->bond_mask) whose queue drains first
 * with len more bytes; NULL when fewer than two members are ready (the
 * message goes on the transmit rail, as without a bond), or, with *full
 * set, when every member holds its share of the peer's reorder buffer
 * (the push waits). */
struct rov_chan *rov_bond_pick(struct rov_conn *conn, size_t len, uint64_t now, bool *full);
/** bytes were handed to chan (ops.send accepted them). */
void rov_bond_sent(struct rov_chan *chan, size_t bytes);
/** The peer acknowledged data of conn (a bond of two or more members):
 * sample the members' queues, at most every BOND_SAMPLE_NS / 4. */
void rov_bond_acked(struct rov_conn *conn, uint64_t now);

#endif
