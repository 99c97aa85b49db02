/*
 * The failover engine: policy on top of the transport's switch primitive.
 *
 * It watches every channel of every connection through the rail's own
 * liveness (rov_rail_ops.chan_health: the remote transport's acknowledgements,
 * never the peer application), probes idle channels, turns rail errors and
 * stalls into moves to the next rail with a reason code, announces a failure
 * seen by one side to the other, retries a failed preferred rail with
 * backoff and moves traffic back after it has stayed healthy for the dwell,
 * and serves operator requests (a hold: force / release).  It knows no
 * particular rail: it sees rails by index and channels by their health.
 *
 * It is a policy (transport/policy.h): the transport tells it of
 * connections and channels through the hooks of its ops table, it reads
 * them through the policy accessors, and it moves them with the
 * transport's switch primitive.  Its state lives in the areas the
 * transport keeps for it in each context and connection (below).
 *
 * One side of a connection leads the recovery of a failed rail (the smaller
 * endpoint id, as for connect races): it reconnects the rail and decides the
 * move back; the other follows, which keeps the two sides from racing and a
 * flapping path from ping-ponging.  Either side moves away from a failed
 * rail at once.
 */
#ifndef ROV_FAILOVER_H
#define ROV_FAILOVER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "transport/policy.h"

/* What the engine knows of one rail of one connection. */
enum rov_fo_rail_state {
    ROV_FO_UP = 0,   /* usable (or never tried) */
    ROV_FO_DOWN,     /* failed: retry at retry_ns (the leader reconnects) */
};
#define ROV_FO_NSTATES (ROV_FO_DOWN + 1)

/* The engine's settings (RAILOVER_FAILBACK*; transport/settings.h). */
struct rov_fo_settings {
    int failback;                  /* move back to a preferred rail once it heals */
    uint64_t failback_dwell_ns;    /* healthy this long before traffic moves back */
    uint64_t failback_retry_ns;    /* first retry of a failed rail; doubles ... */
    uint64_t failback_retry_max_ns; /* ... up to this */
};

struct rov_fo_rail {
    uint8_t state;
    bool probe_sent;          /* keepalive probe outstanding on the channel */
    bool path_ok;             /* DOWN: another connection to the peer passed its
                               * probe on this rail: reconnect now, outside the
                               * context's budget (path_up()) */
    rov_reason_t pending;     /* reason of a failure the engine is reporting */
    uint64_t chan_serial;     /* channel the fields below describe */
    uint64_t busy_since_ns;   /* channel seen busy since, 0: idle */
    uint64_t healthy_since_ns; /* channel handshaken and healthy since */
    uint64_t path_since_ns;   /* DOWN: another connection's probe on this path
                               * passed then (path_up()), 0: none */
    uint64_t path;            /* rov_conn_path_key() when it came up, 0: none */
    uint64_t heard_ago_ns;    /* at the last check: since the rail last answered */
    uint64_t probe_ns;        /* last keepalive probe sent */
    uint64_t down_since_ns;
    uint64_t link_up_ns;      /* DOWN: the rail's link came back then, since it
                               * failed (rov_fo_rail_up()), 0: not */
    rov_status_t down_status; /* DOWN: what its last failure was */
    uint64_t retry_ns;        /* DOWN: next reconnect attempt */
    uint64_t backoff_ns;      /* current retry interval */
    uint64_t opened_ns;       /* the channel's connect started */
    uint64_t connect_ns;      /* the last connect that completed took this, 0: none yet */
};

struct rov_fo_conn {
    struct rov_fo_rail rails[ROV_MAX_RAILS];
    unsigned flaps;           /* failures soon after a failback: longer dwell */
    uint64_t back_ns;         /* when we last moved to a better rail */
    /* A move that must wait for the target rail's retry time or for the
     * context's reconnect budget: to that rail + 1 at wait_ns (0: none). */
    uint8_t wait_to;
    uint8_t wait_failed;      /* the rail it leaves, failed */
    rov_reason_t wait_reason;
    uint64_t wait_ns;
    uint64_t check_due_ns;    /* the tick checks it then (0: not yet placed) */
};

struct rov_fo_ctx {
    bool active;              /* watching connections: ticks due */
    uint64_t next_ns;         /* when the next tick is due (active) */
    uint64_t tick_ns;
    uint64_t siblings_ns;     /* the tick that last made a stall's siblings due */
    /* Reconnect budget (a token bucket as a theoretical arrival time): at
     * most ROV_FO_CONNECT_BURST at once, then one per
     * ROV_FO_CONNECT_INTERVAL_NS, whatever the connections and rails. */
    uint64_t connect_tat_ns;
    uint64_t connects_limited; /* reconnects that waited for the budget */
    uint64_t entered[ROV_FO_NSTATES]; /* rail states entered (fo_set_state()) */
    uint64_t illegal_transitions;
};

#endif
