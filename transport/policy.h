/*
 * The policy contract: what a policy above the transport (failover/, ccp/)
 * is told, what it may read, and what it may ask for.
 *
 * A policy is an ops table of cold-path hooks, registered from a
 * constructor with one line (ROV_POLICY_REGISTER); hooks it leaves NULL get
 * stubs, so the transport calls every hook without a check.  Nothing here
 * runs per message: the hooks come on connection and channel events, on
 * the context's tick (at most every few milliseconds, from progress or
 * from the sleeper's timer) and for the status command.
 *
 * A policy sees connections and channels only through the read-only
 * accessors below, never through transport/core.h, and changes them only
 * through the transport's mechanisms (move, open a rail, probe, fail a
 * channel, fail the connection), each of which keeps the transport's state
 * machines and wire protocol whole.  Of the configuration it reads its own
 * settings block (rov_policy_settings()) and the policy environment
 * (struct rov_policy_env), never the transport's struct rov_config.  It
 * keeps its own state per context and per connection in areas the
 * transport allocates for it (ctx_size, conn_size: zeroed; rov_policy_ctx(),
 * rov_policy_conn()).
 */
#ifndef ROV_POLICY_H
#define ROV_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "railover/railover.h"
#include "transport/config.h"
#include "transport/states.h"

/* What a policy reads of the transport's settings (as a rail reads struct
 * rov_rail_env): the failure detection's and where the control sockets
 * live.  The context's, fixed for its life (rov_policy_env()). */
struct rov_policy_env {
    bool failover;                   /* RAILOVER_FAILOVER: detect failures and move connections */
    uint64_t failover_timeout_ns;    /* RAILOVER_FAILOVER_TIMEOUT: no rail-level completion
                                      * this long is a stall */
    uint64_t connect_timeout_ns;     /* RAILOVER_CONNECT_TIMEOUT: a rail's first connect per
                                      * connection; 0: failover_timeout_ns */
    uint64_t keepalive_ns;           /* RAILOVER_KEEPALIVE: probe an idle channel; 0: never */
    uint64_t unreachable_timeout_ns; /* RAILOVER_UNREACHABLE_TIMEOUT: every rail down this long
                                      * fails the connection; 0: never */
    const char *run_dir;             /* RAILOVER_RUN_DIR: "" for the per-user default
                                      * (rov_ctl_run_dir()) */
    bool bond;                       /* RAILOVER_BOND: keep every healthy rail open and in
                                      * the connection's bond (rov_policy_bond()) */
};

struct rov_policy_ops {
    const char *name;
    /* The policy's own RAILOVER_* variables (transport/settings.h),
     * registered with it; NULL: none.  Read with rov_policy_settings(). */
    struct rov_settings *settings;
    size_t ctx_size;  /* per-context state (rov_policy_ctx()) */
    size_t conn_size; /* per-connection state (rov_policy_conn()) */

    /** The context was created (its rails are not open yet). */
    void (*ctx_init)(rov_context_t *ctx);
    /** The context's rails and control socket are open: it is about to be
     * returned to the application. */
    void (*ctx_open)(rov_context_t *ctx);
    /** The context is being destroyed (its control socket still open). */
    void (*ctx_fini)(rov_context_t *ctx);
    /** The endpoint listens at a new address (its creation, a reopen): the
     * blob rov_endpoint_address() returns now. */
    void (*endpoint_address)(rov_context_t *ctx, const void *blob, size_t len);
    /** rov_conn_connect() started a connection (its first rail's connect). */
    void (*conn_connecting)(rov_conn_t *conn);
    /** A connection became established (its first handshake completed), or
     * sends again after a quiesce (its peer's address may have changed). */
    void (*conn_up)(rov_conn_t *conn);
    /** A channel of conn on `rail` failed, with the classified reason.  When
     * it was the transmit channel (rov_policy_tx_rail() == rail, and the
     * connection has no channel there any more), a policy that moves the
     * connection (or will, rov_conn_move() now or later from its tick)
     * returns true; when no policy does, the connection fails. */
    bool (*chan_failed)(rov_conn_t *conn, int rail, rov_status_t status, rov_reason_t reason,
                        const char *why);
    /** The peer moved conn away from `rail`, which failed on its side for
     * `reason` (the peer's own: ROV_REASON_FAIL_LINK when its link there
     * went down). */
    void (*peer_failed)(rov_conn_t *conn, int rail, rov_reason_t reason);
    /** The local link of `rail` came back (rov_rail_link_up()). */
    void (*rail_up)(rov_context_t *ctx, int rail);
    /** An operator's hold on conn changed (rov_conn_force_fallback()): on,
     * move it off the preferred rail; off, let it come back.  Called for
     * established connections only.  ROV_ERR_UNREACHABLE: no other rail
     * (the hold is then dropped). */
    rov_status_t (*hold)(rov_conn_t *conn, bool on);
    /** The context's tick, from progress or the sleeper's timer. */
    void (*tick)(rov_context_t *ctx, uint64_t now);
    /** When the next tick is due (monotonic ns), 0: none. */
    uint64_t (*due_ns)(const rov_context_t *ctx);
    /** Status command: the policy's settings, on the context's line
     * (" key=value" pairs). */
    void (*status_ctx)(rov_context_t *ctx, FILE *out);
    /** Status command: conn's rail `rail`, which has a channel (chan true)
     * or not: " health=..." fields, or for a rail without a channel, a
     * whole line or nothing. */
    void (*status_rail)(rov_conn_t *conn, int rail, bool chan, uint64_t now, FILE *out);
};

void rov_policy_register(const struct rov_policy_ops *ops);

#define ROV_POLICY_REGISTER(ops)                                               \
    static void __attribute__((constructor)) rov_policy_register_##ops(void) \
    {                                                                          \
        rov_policy_register(&ops);                                             \
    }

/* A policy's own state (ops: its registered table). */
void *rov_policy_ctx(const rov_context_t *ctx, const struct rov_policy_ops *ops);
void *rov_policy_conn(const rov_conn_t *conn, const struct rov_policy_ops *ops);
/* A policy's settings block in the context's configuration. */
const void *rov_policy_settings(const rov_context_t *ctx, const struct rov_policy_ops *ops);

/* Reason codes: the transport's, on the wire in switch requests. */
/** The reason code of a rail failure: reason if set, else from status. */
rov_reason_t rov_reason_classify(rov_status_t status, rov_reason_t reason);
/** Reason the follower records for a move the peer made for `reason`. */
rov_reason_t rov_reason_of_peer(rov_reason_t reason);

/* Read-only accessors ------------------------------------------------------ */

const struct rov_policy_env *rov_policy_env(const rov_context_t *ctx);
int rov_policy_nrails(const rov_context_t *ctx);
/** The context's connections, in no particular order, DEAD ones included. */
rov_conn_t *rov_policy_first(const rov_context_t *ctx);
rov_conn_t *rov_policy_next(const rov_conn_t *conn);

rov_context_t *rov_policy_ctx_of(const rov_conn_t *conn);
uint64_t rov_policy_id(const rov_conn_t *conn);
/** The peer's connection id, 0 until the first handshake. */
uint64_t rov_policy_peer_id(const rov_conn_t *conn);
/** Whether a and b go to the same peer endpoint (both handshaken). */
bool rov_policy_same_peer(const rov_conn_t *a, const rov_conn_t *b);
enum rov_conn_state rov_policy_state(const rov_conn_t *conn);
/** The rail conn sends on, -1 before its first connect. */
int rov_policy_tx_rail(const rov_conn_t *conn);
/** A switch is under way: the peer has not yet said what it received. */
bool rov_policy_tx_sync(const rov_conn_t *conn);
/** Operator holds: ours, the peer's (announced), the context's (all). */
bool rov_policy_hold(const rov_conn_t *conn);
bool rov_policy_peer_hold(const rov_conn_t *conn);
bool rov_policy_hold_all(const rov_context_t *ctx);
/** Whether the peer has `rail` (same index and kind). */
bool rov_conn_peer_has_rail(const rov_conn_t *conn, int rail);
/** The path `rail` takes to the peer (rail.h: path_key), 0: none. */
uint64_t rov_conn_path_key(const rov_conn_t *conn, int rail);
/** Whether blob (an endpoint address, rov_endpoint_address()) is conn's
 * peer's, at another address than conn knows (other rail addresses, or a
 * later rail generation): the peer reopened or was restored elsewhere. */
bool rov_policy_peer_moved(const rov_conn_t *conn, const void *blob, size_t len);
/** Endpoint id order: negative when this side leads the connection. */
int rov_conn_ep_cmp(const rov_conn_t *conn);

/* conn's channel on a rail, as a policy sees it. */
struct rov_policy_chan {
    enum rov_chan_state state;
    uint64_t serial;  /* unique in the context, never reused */
    bool handshaken;  /* HELLO / HELLO_ACK done: it carries the connection */
    bool ready;       /* open and handshaken: a move there goes at once */
    bool silenced;    /* RAILOVER_FAULT silenced it */
};
/** False when conn has no channel on rail. */
bool rov_policy_chan(const rov_conn_t *conn, int rail, struct rov_policy_chan *v);
/** The rail's health verdict on conn's channel on rail (which exists):
 * ROV_OK with h filled, ROV_ERR_UNSUPPORTED when the rail gives none, or
 * the error the rail reports the channel broken with. */
rov_status_t rov_policy_chan_health(const rov_conn_t *conn, int rail, uint64_t now,
                                    struct rov_chan_health *h);
/** The channel's addresses ("local>remote"), for status output. */
void rov_policy_chan_str(const rov_conn_t *conn, int rail, char *buf, size_t len);

/* Mechanisms ------------------------------------------------------------------ */

/** The process's threads may no longer share their credentials (CRIU
 * restores each thread's on its own), which the kernel's RDMA interface
 * refuses: a descriptor opened by one thread cannot be written by another
 * (uverbs: "changed security contexts").  The progress helper ends, and
 * the application's next progress call starts it again from its own
 * thread, sharing its credentials; until then stages advance in that
 * progress only.  Call it before the rails reopen. */
void rov_policy_renew_threads(rov_context_t *ctx);
/** A renewal (rov_policy_renew_threads()) is under way: the helper told to
 * end may still be the thread running this (the pass in which it was told
 * ends first), and has not been replaced yet.  Once false, whatever thread
 * runs the context's work shares the application's credentials: a rail
 * opened then is usable by both. */
bool rov_policy_threads_renewing(const rov_context_t *ctx);
/** The application's stage hook (railover.h, rov_context_set_stage_hook())
 * for a stage of the policy's (ROV_STAGE_CHECKPOINT): before it (after 0),
 * and once after it with its status. */
void rov_policy_stage_hook(rov_context_t *ctx, const char *stage, int after,
                           rov_status_t status);

/** The switch primitive with a reason code; failed_rail (or -1) is the
 * rail the connection leaves because it failed, which the peer's request
 * names (it marks the rail failed too).  Returns like rov_conn_switch(). */
rov_status_t rov_conn_move(rov_conn_t *conn, int rail, rov_reason_t reason, const char *text,
                           int failed_rail);
/** Tell the peer our hold state (a switch request for the rail we are on). */
void rov_conn_announce(rov_conn_t *conn);
/** Connect a channel of conn on rail (a probe); replaces any other. */
rov_status_t rov_conn_open_rail(rov_conn_t *conn, int rail);
/** Send a keepalive probe on conn's channel on rail. */
rov_status_t rov_policy_probe(rov_conn_t *conn, int rail);
/** Fail conn's channel on rail (a stall the policy detected): the channel
 * closes and chan_failed follows, as for a rail's own error. */
/** The rails of conn's bond, a bit per rail (its transmit rail's among
 * them): its large messages spread over those whose channels are ready
 * (transport/bond.c).  Fewer than two bits: no bond.  The transport drops a
 * member whose channel fails by itself; the policy adds it back. */
void rov_policy_bond(rov_conn_t *conn, unsigned mask);
void rov_policy_chan_fail(rov_conn_t *conn, int rail, rov_status_t status, const char *why,
                          rov_reason_t reason);
/** The connection failed for good (ROV_EVENT_CONN_ERROR). */
void rov_conn_fail(rov_conn_t *conn, rov_status_t status, const char *why);
/** The one bound on a connection that reaches its peer on no rail (the
 * failover engine's rails all down, a reconnect after a reopen): once
 * limit_ns (0: never) has passed since since_ns (0: not counting), conn
 * fails with ROV_ERR_UNREACHABLE, the reason saying `what`, for how long,
 * each rail's last answer (last[i]; ROV_OK: not named) and the setting
 * that bounds it.  True when it failed. */
bool rov_conn_fail_unreachable(rov_conn_t *conn, uint64_t since_ns, uint64_t now,
                               uint64_t limit_ns, const rov_status_t last[ROV_MAX_RAILS],
                               const char *what, const char *setting);

#endif
