/* Internal objects of the transport: context, endpoint, connection. */
#ifndef ROV_CORE_H
#define ROV_CORE_H

#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>

#include "railover/railover.h"
#include "transport/config.h"
#include "transport/fault.h"
#include "transport/policy.h"
#include "transport/rail.h"
#include "transport/retain.h"
#include "transport/wire.h"


struct rov_endpoint {
    rov_context_t *ctx;
    uint8_t blob[512];     /* with the key: given out of band only */
    size_t blob_len;
    uint8_t pub_blob[512]; /* the same with the key zeroed: a first HELLO's */
};

/* Fields in the order the per-message paths touch them (send, receive,
 * acknowledge), so that a message touches a few cache lines of its
 * connection; what only handshakes, switches and the tools read comes last. */
struct rov_conn {
    rov_context_t *ctx;
    enum rov_conn_state state;
    int tx_rail;                      /* rail we send on */
    bool tx_sync;                     /* wait for the peer's last-received before data */
    bool peer_closed;                 /* its CLOSE came: the receive half's end */
    bool in_ack_list;
    bool push_more;                   /* rov_conn_push() stopped at its budget */
    struct rov_chan *chans[ROV_MAX_RAILS]; /* adopted channel per rail */
    struct rov_split_get *splits, *splits_tail; /* its reads in pieces, oldest first (mem.c) */
    size_t max_send;                  /* RAILOVER_MAX_MSG here and at the peer */
    struct rov_retain tx;             /* retained sends */
    uint64_t rx_seq;                  /* last delivered in order */
    uint64_t rx_acked;                /* last ack value we sent */
    uint64_t rx_unacked_msgs, rx_unacked_bytes;
    uint64_t ack_deadline_ns;
    uint64_t ack_defer_end_ns;        /* owed while reads from the peer run: held until
                                       * they end or this (0: not held) */
    struct rov_conn *ack_next, *ack_prev;
    struct rov_reorder reorder;
    rov_conn_stats_t stats;
    uint64_t id;                      /* ours, non-zero */
    uint64_t peer_id;                 /* the peer's, 0 until known */
    uint64_t tx_chan_serial;          /* channel we rewound on and send on since, or 0 */
    uint32_t switch_tag;              /* tag of our pending switch request (ROV_HF_*) */
    uint64_t resend_asked;            /* rx_seq when we last asked for a resend */
    uint64_t rx_seen;                 /* highest sequence number that arrived (held or not) */
    uint64_t gap_ns;                  /* rx_seq + 1 missing since (rx_seen beyond it), 0: no gap */
    uint64_t reorder_max;             /* bytes the reorder buffer may hold (rov_conn_new()) */
    /* A message a bond split into fragments (ROV_DF_MORE), reassembled. */
    bool frag_open;
    uint32_t frag_tag;
    uint8_t *frag;
    size_t frag_len, frag_cap;
    bool hold;                        /* an operator keeps it off the preferred rail */
    uint8_t bond_mask;                /* rails in its bond (rov_policy_bond()), bit per rail */
    bool peer_hold;                   /* the peer's operator does (its switch requests) */
    void *user;
    struct rov_conn *next, *prev;     /* context's list */
    struct rov_wire_addr peer;        /* decoded peer address (points into peer_blob) */
    uint8_t peer_blob[512];
    size_t peer_blob_len;
    /* Handshake authentication (auth.h). */
    bool has_secret;                  /* secret agreed (first HELLO_ACK) */
    uint8_t secret[ROV_KEY_LEN];
    uint64_t hello_tx_ctr;            /* last counter of a reconnect HELLO we sent */
    struct rov_replay hello_rx;       /* counters of the peer's we accepted */
    uint64_t peer_max_msg;            /* the peer's RAILOVER_MAX_MSG, 0 until known */
    bool msgsize_said;                /* a send refused for it was logged */
    bool peer_aborted;                /* the peer's CLOSE|ABORT failed it */
    rov_status_t fail_status;         /* FAILED: why (the answer to a HELLO for it) */
    uint64_t connect_ns;              /* rov_conn_connect() at */
    uint8_t data[ROV_CONN_DATA_MAX];  /* connect-time data: ours, or the connector's */
    uint8_t data_len;
    rov_status_t tried[ROV_MAX_RAILS]; /* first connect, reconnect after a reopen:
                                        * each rail's last answer */
    uint64_t connect_again_ns;        /* first connect: next try after a reset, 0: none */
    /* Quiesce (stage.c): DRAINING, QUIESCED, REOPENING. */
    bool eoc_sent;                    /* our end marker went out (again after a switch) */
    bool peer_eoc;                    /* the peer's end marker came */
    bool close_pending;               /* rov_conn_close() during a stage: at its end */
    uint64_t peer_eoc_seq;            /* ... after its message of this sequence */
    struct rov_msg *held, *held_tail; /* sends made meanwhile, in order */
    uint64_t held_msgs, held_bytes;
    uint64_t reopen_ns;               /* REOPENING since */
    uint64_t backoff_ns;              /* the last wait between connect tries (first
                                       * connect after a reset, reconnect after a
                                       * reopen: rov_backoff_next()), 0: none yet */
    uint64_t resend_from, resend_to;  /* the range we last resent on a RESEND ... */
    uint64_t resend_ns;               /* ... then (honour_resend()) */
    uint64_t resend_ignored;          /* RESENDs for what was resent already */
    uint64_t bond_seen_ns;            /* members' queues last sampled on an ack (bond.c) */
};

/* A connection freed here, remembered so that its peer's late HELLO (it
 * missed how the connection ended) gets an answer once it proves the
 * connection's secret (conn.c, hello_for_ended()). */
#define ROV_ENDED_MAX 64
struct rov_ended {
    uint64_t id, peer_id;
    uint8_t peer_ep[ROV_EP_ID_LEN];
    uint8_t secret[ROV_KEY_LEN];
};

/* Hot fields first (the progress call, the per-message paths).  Allocated
 * on a cache line (rov_zalloc_lines()): what an idle rov_progress() reads is
 * in the first line, through rails[1]. */
struct rov_context {
    char job[ROV_JOB_MAX + 1];        /* rov_context_params_t.job, or RAILOVER_JOBID; "" none */
    long rank;                        /* in the job, -1: none */
    rov_recv_cb_t recv_cb;
    void *arg;
    bool threaded;                    /* the progress helper runs: calls take the lock */
    bool in_helper;                   /* a helper pass: callbacks are kept (helper.c) */
    struct rov_deferred *deferred_head; /* kept by the helper for the next progress */
    unsigned poll_count;
    int frames;                       /* frames handled in this progress call */
    int events;                       /* events delivered in this progress call */
    bool reap;                        /* dead objects wait to be freed */
    bool fault_armed;
    int nrails;
    unsigned push_pending;            /* conns with push_more set */
    bool in_send;                     /* inside rov_conn_send(): no callbacks (railover.h) */
    bool gets_ready;                  /* gets_done is not empty (a hot-line flag) */
    uint64_t engine_seen_ns;          /* the failover engine's last chance to run */
    struct rov_conn *ack_head;        /* conns owing an ack, by deadline */
    struct rov_rail *rails[ROV_MAX_RAILS];
    unsigned rails_cold;              /* rails polled on every COLD_EVERY-th call (context.c) */
    unsigned used_any;                /* poll_count when a rail last handed up or took a frame */
    unsigned used[ROV_MAX_RAILS];     /* ... when rail i did */
    struct rov_conn *ack_tail;
    uint64_t epoll_due_ns;            /* busy polling: check epoll by then */
    struct rov_conn *ack_unstamped;   /* the list's tail from here: no deadline yet */
    unsigned ack_unstamped_poll;      /* poll_count when the first of those came */
    struct rov_msg_cache msg_cache;
    struct rov_get_op *gets_done;     /* reads over, callbacks not yet run (mem.c) */
    struct rov_get_op *gets_tail;
    uint64_t tx_bytes;                /* retained by every connection (window_total) */
    uint64_t tx_cap;                  /* ... at most this (window_update()) */
    uint64_t acked_bytes;             /* released by acks since rate_ns */
    uint64_t rate_ns;                 /* the ack rate's measuring interval began */
    uint64_t ack_rate;                /* bytes acknowledged per second, estimate */
    struct rov_config config;
    rov_event_cb_t event_cb;
    int epfd;
    struct rov_watch urgent;          /* the urgent set, an epoll set in epfd */
    struct rov_watch timer;           /* timerfd: a sleeper's deadlines */
    uint64_t timer_set_ns;            /* when it fires (monotonic), 0: not set */
    uint8_t ep_id[ROV_EP_ID_LEN];
    uint8_t ep_key[ROV_KEY_LEN];      /* in the endpoint's blob (auth.h) */
    rov_endpoint_t *endpoint;         /* at most one listening endpoint */
    struct rov_conn *conns;           /* all live connections */
    struct rov_chan *chans;           /* every channel not yet closed */
    unsigned nparked;                 /* of them parked (rov_ctx_chan_park()) */
    uint64_t next_conn_id;
    uint64_t next_chan_serial;
    bool hold_all;                    /* an operator holds every connection, present and future */
    struct rov_fault fault;           /* RAILOVER_FAULT */
    struct rov_ctl *ctl;              /* control endpoint (control.c), NULL: none */
    unsigned awaiting_hello;          /* accepted channels (and rails' pre-channel peers,
                                       * preauth) not yet authenticated */
    struct rov_preauth *preauth;      /* rails' peers before their channel, newest first */
    uint64_t hello_due_ns;            /* check them for the timeout then */
    uint64_t connect_again_ns;        /* earliest conn->connect_again_ns, 0: none */
    uint64_t gap_check_ns;            /* earliest conn->gap_ns + the timeout, 0: none */
    uint32_t accept_paused;           /* rails whose listener waits for a slot */
    uint64_t fd_count;                /* descriptors open (rov_rail_fd_short()) ... */
    uint64_t fd_count_ns;             /* ... counted in /proc/self/fd then */
    rov_context_stage_t stage;        /* checkpoint stage (stage.c) */
    unsigned stage_news;              /* stage events due at the next progress (stage.c) */
    bool timer_fired;                 /* its work runs after the epoll batch */
    bool ctl_ready;                   /* control requests, served after the batch */
    rov_stage_hook_t stage_hook;      /* rov_context_set_stage_hook() */
    void *stage_hook_arg;
    const char *hook_pending;         /* the stage its hook was told began, NULL: none */
    struct rov_mem *mems;             /* memory registrations (mem.c) */
    uint32_t rails_gen;               /* times the rails were closed (mem.c, the address) */
    /* State machines (states.h): states entered, transitions refused. */
    uint64_t conn_entered[ROV_CONN_NSTATES];
    unsigned conn_now[ROV_CONN_NSTATES]; /* connections in each state now */
    uint64_t chan_entered[ROV_CHAN_NSTATES];
    uint64_t illegal_transitions;
    /* Each rail's own link as its rail last reported it (rov_rail_link_down(),
     * _up()): seen 0 no news yet, -1 down, 1 up; times it went down, up. */
    struct {
        int8_t seen;
        uint32_t downs, ups;
    } link[ROV_MAX_RAILS];
    /* The progress helper (helper.c) */
    pthread_mutex_t lock;             /* held by every public call while threaded */
    struct rov_helper *helper;        /* NULL: RAILOVER_PROGRESS_THREAD=off */
    bool helper_gone;                 /* renewed: the owner's progress starts another */
    int app_wake;                     /* eventfd: a sleeping rov_context_wait(), -1: none */
    bool app_sleeping;                /* ... sleeps now (without the lock) */
    struct rov_deferred *deferred_tail;
    struct rov_ended ended[ROV_ENDED_MAX]; /* the last connections freed (cold: last) */
    unsigned ended_next;
    struct rov_policy_env policy_env; /* rov_policy_env(), from config */
};

/* Where an application callback goes: the context, to be kept, inside a
 * helper pass; NULL (call it now) otherwise (retain.h). */
#define KEEP(ctx) ((ctx)->in_helper ? (ctx) : NULL)

/* helper.c: the progress helper and the context's lock.  A public call
 * holds the lock for its whole body (ROV_CTX_GUARD at its top; the lock is
 * recursive, for callbacks and control commands that call in again); with
 * RAILOVER_PROGRESS_THREAD=off nothing is locked. */
static inline rov_context_t *rov_ctx_enter(rov_context_t *ctx)
{
    if (!ctx->threaded)
        return NULL;
    pthread_mutex_lock(&ctx->lock);
    return ctx;
}

static inline void rov_ctx_leave(rov_context_t **held)
{
    if (*held)
        pthread_mutex_unlock(&(*held)->lock);
}

#define ROV_CTX_GUARD(ctx)                                                          \
    rov_context_t *rov_ctx_held_ __attribute__((cleanup(rov_ctx_leave), unused)) = \
        rov_ctx_enter(ctx)

/* The context's lock, and the helper if RAILOVER_PROGRESS_THREAD (a
 * warning when it cannot start: the context runs without it). */
void rov_helper_start(rov_context_t *ctx);
/* Stop and join it; free what it kept (destroy). */
void rov_helper_stop(rov_context_t *ctx);
/* End the helper thread; the application's next progress starts another
 * (rov_helper_respawn(), from its own thread), which shares its
 * credentials (policy.h, rov_policy_renew_threads()). */
void rov_helper_renew(rov_context_t *ctx);
void rov_helper_respawn(rov_context_t *ctx);
/* A renewal is under way: the helper told to end has not been replaced by
 * the application's progress yet (false without a helper). */
bool rov_helper_renewing(const rov_context_t *ctx);
/* stage.c: the stage hook, before a stage (after false) and once after it
 * (status: ROV_OK or why it failed); stage is one of the ROV_STAGE_* names. */
void rov_ctx_stage_hook(rov_context_t *ctx, const char *stage, bool after, rov_status_t status);
/* A stage began or changed: the helper looks again. */
void rov_helper_kick(rov_context_t *ctx);
void rov_helper_status(const rov_context_t *ctx, FILE *out);
/* Inside a helper pass: keep a delivery or an event for the application. */
void rov_ctx_defer_recv(struct rov_conn *conn, uint32_t tag, const void *data, size_t len);
void rov_ctx_defer_event(rov_context_t *ctx, const rov_event_t *ev);
/* The application's progress: deliver what the helper kept, in order. */
void rov_ctx_deferred_deliver(rov_context_t *ctx);
/* context.c: run the callbacks of the watches ready in the epoll set epfd,
 * waiting up to timeout_ms; how many ran (the context's set, and the
 * control socket's own, control.c). */
int rov_watch_run(int epfd, int timeout_ms);
/* context.c: one pass of the engine for the helper, under the lock. */
enum { ROV_PASS_TOLD = 1, ROV_PASS_BUSY = 2 };
int rov_ctx_helper_pass(rov_context_t *ctx);

/* conn.c: the connection protocol */
const char *rov_conn_state_name(enum rov_conn_state state);
struct rov_conn *rov_conn_new(rov_context_t *ctx);
void rov_conn_on_frame(struct rov_chan *chan, const struct rov_wire_hdr *hdr,
                       const uint8_t *payload);
void rov_conn_chan_connected(struct rov_chan *chan);
void rov_conn_chan_accepted(struct rov_chan *chan);
void rov_conn_chan_flushed(struct rov_chan *chan);
ROV_COLD
void rov_conn_chan_failed(struct rov_chan *chan, rov_status_t status, const char *why);
/* The same with a reason code for the failover engine (RAILOVER_FAULT, the
 * engine's own stall detector). */
ROV_COLD
void rov_conn_chan_failed_reason(struct rov_chan *chan, rov_status_t status, const char *why,
                                 rov_reason_t reason);
/* Send a keepalive probe (a stand-alone ACK) on chan. */
rov_status_t rov_conn_probe(struct rov_chan *chan);
bool rov_conn_chan_ready(const struct rov_chan *chan);
/* Hand retained messages from tx.next_tx on to the transmit channel, until
 * the rail pushes back or a budget (PUSH_BUDGET_*) is spent: a resend of a
 * whole window after a switch then goes out over several progress calls, so
 * that this side keeps receiving (and other connections keep moving)
 * meanwhile.  The context's progress sends the rest (context.c). */
void rov_conn_push(struct rov_conn *conn);
/* rov_conn_push() at the next progress (not inside the caller's call). */
static inline void rov_conn_push_later(struct rov_conn *conn)
{
    if (!conn->push_more) {
        conn->push_more = true;
        conn->ctx->push_pending++;
    }
}
/* conn's bond members become mask (one bit per rail), why: what changed it. */
void rov_conn_set_bond(struct rov_conn *conn, unsigned mask, const char *why);
void rov_conn_send_ack(struct rov_conn *conn);
void rov_conn_ack_due(struct rov_conn *conn, uint64_t now);
void rov_conn_abort(struct rov_conn *conn, rov_status_t status);
/* First connects whose try after a reset is due, and reconnects after a
 * reopen (ctx->connect_again_ns). */
void rov_conn_connect_again(rov_context_t *ctx, uint64_t now);
/* Gaps in what arrived that made no progress for RAILOVER_FAILOVER_TIMEOUT:
 * asked for again (ctx->gap_check_ns; conn.c). */
void rov_conn_gap_check(rov_context_t *ctx, uint64_t now);
void rov_conn_free(struct rov_conn *conn);

/* policy.c: the registered policies' hooks (policy.h), and the size of an
 * object with every policy's state after it */
void rov_policies_ctx_init(rov_context_t *ctx);
void rov_policies_ctx_open(rov_context_t *ctx);
void rov_policies_ctx_fini(rov_context_t *ctx);
void rov_policies_endpoint_address(rov_context_t *ctx, const void *blob, size_t len);
void rov_policies_conn_connecting(struct rov_conn *conn);
void rov_policies_conn_up(struct rov_conn *conn);
bool rov_policies_chan_failed(struct rov_conn *conn, int rail, rov_status_t status,
                              rov_reason_t reason, const char *why);
void rov_policies_peer_failed(struct rov_conn *conn, int rail, rov_reason_t reason);
void rov_policies_rail_up(rov_context_t *ctx, int rail);
rov_status_t rov_policies_hold(struct rov_conn *conn, bool on);
void rov_policies_tick(rov_context_t *ctx, uint64_t now);
uint64_t rov_policies_due_ns(const rov_context_t *ctx);
void rov_policies_status_ctx(rov_context_t *ctx, FILE *out);
void rov_policies_status_rail(struct rov_conn *conn, int rail, bool chan, uint64_t now,
                              FILE *out);
size_t rov_policy_ctx_size(void);
size_t rov_policy_conn_size(void);

/* conn.c: the connection's part of a quiesce (stage.c drives them) */
/* ESTABLISHED: start draining (hold sends, end marker after the rest). */
void rov_conn_quiesce(struct rov_conn *conn);
/* DRAINING/QUIESCED: send again (the peer is told when a channel is up). */
void rov_conn_resume(struct rov_conn *conn);
/* QUIESCED, rails reopened: reconnect, preferred rail first. */
void rov_conn_reopen(struct rov_conn *conn);

/* stage.c: a connection's state changed during a stage */
void rov_stage_conn_changed(rov_context_t *ctx);
/* progress: stage work and events that are due */
void rov_stage_progress(rov_context_t *ctx);
/* Rails: open every configured rail (context create, reopen) and close them. */
rov_status_t rov_ctx_open_rails(rov_context_t *ctx);
void rov_ctx_close_rails(rov_context_t *ctx);
/* The endpoint listens on every rail and encodes its address blob. */
rov_status_t rov_endpoint_listen(rov_endpoint_t *ep);

/* context.c: rail i handed up a frame or took one to send now: it is polled
 * on every progress call again (COLD_POLLS, context.c). */
static inline void rov_ctx_rail_used(rov_context_t *ctx, int i)
{
    ctx->used[i] = ctx->used_any = ctx->poll_count;
    ctx->rails_cold &= ~(1u << i);
}

/* chan.c: channel bookkeeping; close accepted channels whose peer did not
 * authenticate in time (from the context's timer and epoll check). */
void rov_ctx_chan_close(struct rov_chan *chan);
void rov_ctx_sweep_unauthed(rov_context_t *ctx, uint64_t now);
/* mem.c: run the callbacks of finished reads; the largest read a rail does;
 * release every registration's rail part before the rails close, and make
 * it again once they are open (its key changes). */
void rov_ctx_gets_deliver(rov_context_t *ctx);
void rov_ctx_mem_unregister(rov_context_t *ctx);
void rov_ctx_mem_reregister(rov_context_t *ctx);
size_t rov_ctx_get_max(const rov_context_t *ctx);
/* The connection is being freed: its reads in pieces start no more. */
void rov_conn_splits_orphan(rov_conn_t *conn);
/* A channel that lost a connect race is kept in reserve (parked) for its
 * connection, or leaves the reserve; the context counts them, so that a
 * failing channel looks for a parked sibling only when there is one. */
void rov_ctx_chan_park(struct rov_chan *chan, bool parked);
/* The peer of an accepted channel proved its key (handshake timeout and cap
 * no longer apply to it). */
void rov_ctx_chan_authed(struct rov_chan *chan);
/* Connect a new outbound channel on rail; NULL with *st_p set on failure. */
struct rov_chan *rov_ctx_chan_connect(struct rov_rail *rail, const void *addr, size_t len,
                                      rov_status_t *st_p);
void rov_ctx_event(rov_context_t *ctx, rov_event_type_t type, struct rov_conn *conn,
                   rov_status_t status, int from, int to, const char *reason);
void rov_ctx_event_code(rov_context_t *ctx, rov_event_type_t type, struct rov_conn *conn,
                        rov_status_t status, int from, int to, const char *reason,
                        rov_reason_t code);

#endif
