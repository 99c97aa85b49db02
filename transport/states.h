/*
 * The transport's state machines, as the rails and the policies see them:
 * a connection's state, a channel's state, and what a rail says of a
 * channel's health.  Each machine is one const table (name, the states it
 * may go to) and one setter that checks, logs and counts every transition
 * with rov_state_change() (conn.c: conn_set_state(), context.c:
 * chan_set_state(), stage.c: stage_set()).  The policies' machines and the
 * rails' own (through rov_rail_state_change(), rail.h) are built the same
 * way; docs/architecture.md lists them all.
 */
#ifndef ROV_STATES_H
#define ROV_STATES_H

#include <stdbool.h>
#include <stdint.h>

#include "railover/railover.h"

enum rov_conn_state {
    ROV_CONN_CONNECTING,  /* HELLO sent, waiting for HELLO_ACK */
    ROV_CONN_ESTABLISHED, /* data flows */
    ROV_CONN_CLOSING,     /* rov_conn_close(): flushing, then CLOSE */
    ROV_CONN_FAILED,      /* unrecoverable; waiting for rov_conn_close() */
    ROV_CONN_DEAD,        /* freed at the next safe point */
    /* Quiesce (transport/stage.c): */
    ROV_CONN_DRAINING,    /* sends held; what was sent before goes out and is
                           * acknowledged; end-of-channel markers exchanged */
    ROV_CONN_QUIESCED,    /* both markers exchanged, nothing in flight: the
                           * channels may end (rails closed, peer checkpointed)
                           * without a failover */
    ROV_CONN_REOPENING,   /* after rails reopened: reconnecting to the peer,
                           * preferred rail first */
    /* The close handshake after CLOSING (rov_conn_close(): flushing, our
     * CLOSE not sent yet): */
    ROV_CONN_CLOSE_SENT,  /* our CLOSE out, everything before it acknowledged;
                           * waiting for the peer's answer or its own CLOSE
                           * (back to CLOSING when a switch may have lost it) */
    ROV_CONN_CLOSE_ANSWERED, /* we answered the peer's CLOSE: both sides have
                              * everything; finishing once the answer is out */
};
#define ROV_CONN_NSTATES (ROV_CONN_CLOSE_ANSWERED + 1)
/* Closing, in any step of the handshake.  (The peer's half, whether its
 * CLOSE came, is conn->peer_closed: the receive direction's end, which may
 * come in any state, as a TCP FIN does.) */
#define ROV_CONN_CLOSING_STATES                                               \
    (ROV_STATE_BIT(ROV_CONN_CLOSING) | ROV_STATE_BIT(ROV_CONN_CLOSE_SENT) |      \
     ROV_STATE_BIT(ROV_CONN_CLOSE_ANSWERED))
#define ROV_CONN_IS_CLOSING(s) ((ROV_STATE_BIT(s) & ROV_CONN_CLOSING_STATES) != 0)

enum rov_chan_state {
    ROV_CHAN_CONNECTING, /* outbound, connect in progress */
    ROV_CHAN_OPEN,       /* frames flow */
    ROV_CHAN_CLOSED,     /* failed or closed; only chan_close is allowed */
};
#define ROV_CHAN_NSTATES (ROV_CHAN_CLOSED + 1)

/** CLOCK_MONOTONIC in nanoseconds (the clock of every transport timer). */
uint64_t rov_now_ns(void);

/* A context's checkpoint stage: rov_context_stage_t (railover.h). */
#define ROV_STAGE_NSTATES (ROV_CONTEXT_REOPENING + 1)

/* One state of a machine: its name (logs, status) and the states it may
 * go to (a bit per state). */
struct rov_state_info {
    const char *name;
    uint32_t next;
};

#define ROV_STATE_BIT(s) (UINT32_C(1) << (s))

extern const struct rov_state_info rov_conn_states[ROV_CONN_NSTATES];
extern const struct rov_state_info rov_chan_states[ROV_CHAN_NSTATES];
extern const struct rov_state_info rov_stage_states[ROV_STAGE_NSTATES];

/* Whether a machine may go from `from` to `to` (table: its states). */
static inline int rov_state_allowed(const struct rov_state_info *table, int from, int to)
{
    return (table[from].next & ROV_STATE_BIT(to)) != 0;
}

/** A setter's check of a transition from -> to of one machine (table), for
 * the object named `what` in log lines ("conn 7"): true when the table
 * allows it (logged, with why, at debug level when the state changes);
 * false when it does not (a bug: logged at error level, counted in
 * *illegal, and the caller keeps the state). */
bool rov_state_change(const struct rov_state_info *table, int from, int to, const char *subsys,
                      const char *what, const char *why, uint64_t *illegal);

/* See rov_rail_ops.chan_health (rail.h). */
struct rov_chan_health {
    int busy;              /* work handed to the remote transport, not yet acknowledged */
    int queued;            /* work accepted but not yet handed over (flow control) */
    uint64_t heard_ago_ns; /* since the remote transport last acknowledged anything */
    uint64_t sent_ago_ns;  /* since the rail last transmitted anything on the channel */
    int retransmits;       /* the rail's transport retransmits by itself, and
                            * sent_ago_ns counts its retransmissions (TCP) */
    int peer_turn;         /* CONNECTING: the rail's setup waits for the peer's
                            * application (e.g. an out-of-band handshake that the
                            * peer's kernel has acknowledged), or for this process
                            * to run a completion the path already delivered,
                            * not for the path */
};

#endif
