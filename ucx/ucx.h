/*
 * Internals of the UCX rail shared by ucx.c (endpoints, channels, the data
 * path, progress, the rail ops) and probe.c (the liveness probes that
 * ucx_chan_health() issues: probe endpoints, the probe listener and the
 * setup the two ends exchange).
 */
#ifndef ROV_UCX_H
#define ROV_UCX_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#include "transport/netaddr.h"
#include "transport/netlink.h"
#include "transport/rail.h"

/* The AM id of every frame: the frame header says what the frame is. */
#define UCX_AM_FRAME 0x52
#define UCX_AM_HDR_LEN 8
/* Probe setup (ucx_chan_health), never frames; a peer without probes
 * ignores them.  UCX_AM_PROBE: what a channel's ends send each other once
 * authenticated, 8-byte header = the address of the sender rail's keepalive
 * word, data = u16 length, the address of the sender rail's probe listener
 * (netaddr.h form), the word's packed remote key.  UCX_AM_PROBE_GO, empty:
 * the leading side's probe endpoint is wired up, the other side may now
 * connect its own. */
#define UCX_AM_PROBE 0x53
#define UCX_AM_PROBE_GO 0x54
/* The close handshake's flush (ucx_chan_flush): UCX_AM_FLUSH, 8-byte header =
 * the channel sequence number of the last frame sent before it; the peer's
 * rail answers UCX_AM_FLUSH_ACK with the same header once it has handed up
 * every frame up to that one.  No data. */
#define UCX_AM_FLUSH 0x55
#define UCX_AM_FLUSH_ACK 0x56
#define UCX_PROBE_BLOB_MAX 4096
/* Endpoints our probe listener keeps for peers' probe endpoints, at most. */
#define UCX_SERVED_MAX 4096
/* Control frames are copied into the op; larger ones into a buffer. */
#define UCX_OP_INLINE 256

/* What a UCX request's user_data points to: a frame being sent, a frame
 * received out of turn or being fetched (rendezvous), or the flush that
 * completes a connect or drains a closing channel.  Owned by the rail: a
 * channel that closes orphans its ops (chan = NULL) and an orphan goes back
 * to the free list when UCX completes its request; all are freed with the
 * rail. */
struct ucx_op {
    struct ucx_op *next, *prev; /* channel's sends or held frames; free list */
    struct ucx_op *all_next;    /* every op of the rail */
    struct ucx_rail *rail;
    struct ucx_chan *chan;      /* NULL once the channel let go of it */
    bool done;                  /* recv: the frame is complete */
    void *cookie;               /* send: the transport's, NULL for a copy */
    uint64_t seq;               /* channel sequence number */
    uint8_t hdr[UCX_AM_HDR_LEN];
    ucp_dt_iov_t iov[ROV_RAIL_MAX_IOV];
    uint8_t *buf;               /* copy or receive buffer: small or malloc'd */
    size_t len;
    uint8_t small[UCX_OP_INLINE];
};

/* A probe endpoint: a client-server UCP endpoint to a peer rail's probe
 * listener (not its channel listener) that carries nothing but probes,
 * shared by every channel to that rail and kept for the rail's life, or
 * until it fails.  Its own endpoint because a probe on the channel's
 * endpoint waits behind the channel's queued sends, which wait for the
 * peer process (measured: docs/rdma.md).  Client-server, not created from
 * the peer's worker address: a worker-address endpoint arriving at a worker
 * that has client-server endpoints crashed that process in UCX 1.13's tcp
 * transport (SIGSEGV in uct_tcp_iface_progress, 2 of about 40 pairs of
 * processes in the VMs).  The two rails never connect theirs at the same
 * time: the one with the smaller probe listener address leads, the other
 * waits for its UCX_AM_PROBE_GO. */
enum ucx_probe_state { /* changed only by probe_set_state() (probe.c: its table) */
    PROBE_WIRING,  /* wire-up flush in flight: needs the peer's worker */
    PROBE_READY,   /* reads of the peer's word are RDMA READs */
    PROBE_SOFT,    /* UCX would emulate them with messages the peer process
                    * answers (UCX's tcp transport): no probes */
    PROBE_FAILED,  /* the endpoint reported an error */
};

struct ucx_probe {
    struct ucx_probe *next;     /* rail's probes or closing probes */
    struct ucx_rail *rail;
    ucp_ep_h ep;
    ucp_rkey_h rkey;            /* the peer's keepalive word, once wired up */
    uint8_t *key;               /* its packed form until then */
    size_t klen;
    uint64_t raddr;
    enum ucx_probe_state state;
    bool hw;                    /* was READY: its silence means a dead path */
    bool flushing;              /* the wire-up flush's callback is due */
    bool close_done;
    int nchans;                 /* channels using it */
    size_t alen;
    uint8_t addr[ROV_NET_ADDR_MAX]; /* the peer's probe listener */
};

/* What our probe listener accepted for a peer's probe endpoint: it only
 * keeps the peer's queue pair to us; nothing is sent on it. */
struct ucx_served {
    struct ucx_served *next;    /* rail's served or closing list */
    struct ucx_rail *rail;
    ucp_ep_h ep;
    bool failed, close_done;
};

struct ucx_chan {
    struct rov_chan base;
    struct ucx_rail *rail;
    ucp_ep_h ep;
    struct ucx_chan *next;      /* rail's live or closing list */
    struct ucx_chan *hnext;     /* endpoint hash chain */
    bool connected;             /* wire-up done (outbound) or accepted */
    bool dead;                  /* closed by the transport */
    bool failed;                /* failure reported: nothing more goes out */
    bool fail_due;              /* UCX reported a failure: report it (run_due()) */
    ucs_status_t fail_status;   /* ... this one */
    bool force;                 /* close the endpoint without flushing */
    bool close_due;             /* dead, endpoint close not issued yet */
    bool close_done;            /* endpoint closed: may be freed */
    bool connect_due;           /* connect completed: report it */
    bool writable_due;          /* sends drained after ROV_ERR_AGAIN: report it */
    bool refused;
    struct ucx_op *flush_op;    /* connect or closing flush in flight */
    struct ucx_op *sends;       /* in flight, newest first */
    size_t nsend, send_bytes;
    struct ucx_op *held, *held_tail; /* received, by sequence, not yet handed up */
    size_t nheld;
    uint64_t tx_seq, rx_seq;    /* next to send, next to hand up */
    bool flush_wait;            /* chan_flush: the peer's UCX_AM_FLUSH_ACK is due */
    uint64_t flush_ack_seq;     /* the peer's UCX_AM_FLUSH: answer once frames up
                                 * to this one are handed up (0: none) */
    /* Liveness for chan_health: counters on the data path, times taken only
     * when the failover engine asks. */
    uint64_t n_sent, n_heard, seen_sent, seen_heard, sent_ns, heard_ns;
    bool unconfirmed;           /* sent since the remote transport was last heard */
    bool blob_sent;             /* our probe setup went to the peer */
    bool probe_go;              /* the peer leads and has its probe endpoint */
    bool go_due;                /* we lead: tell the peer once ours is wired up */
    uint8_t *peer_blob;         /* the peer's probe setup, until used */
    size_t peer_blob_len;
    uint64_t peer_word;
    struct ucx_probe *probe;
    struct ucx_op *probe_op;    /* a probe in flight */
    uint64_t probe_ns;          /* when the last one went out */
};

struct ucx_rail {
    struct rov_rail base;
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_listener_h listener;
    bool listening;             /* accept what the listener reports */
    uint64_t request_ns;        /* when the listener last reported a request */
    struct rov_watch watch;     /* the worker's event fd */
    struct sockaddr_storage local;
    socklen_t local_len;
    struct rov_net_links links; /* the interface with our address comes back */
    uint8_t addr[ROV_RAIL_ADDR_MAX];
    size_t addr_len;
    int in_ucx;                 /* inside ucp_worker_progress(): defer closes */
    uint64_t drives, seen_drives; /* drive() calls; as chan_health last saw them */
    uint64_t drive_ns;          /* when chan_health first saw the latest */
    bool armed;                 /* the event fd will signal the next event */
    bool work_due;              /* some channel has a deferred action */
    struct ucx_chan *chans, *closing;
    int nchans;
    struct ucx_chan **hash;     /* live channels by endpoint */
    size_t hash_size;
    struct ucx_op *free_ops, *all_ops;
    /* Probes (NULL blob: none, e.g. RAILOVER_FAILOVER=off): our keepalive
     * word, the listener peers' probe endpoints connect to, and what a peer
     * needs to read the word. */
    ucp_mem_h ka_memh;
    uint8_t ka_hdr[8];          /* the word's address */
    ucp_listener_h probe_listener;
    uint8_t probe_addr[ROV_NET_ADDR_MAX]; /* its address */
    size_t probe_alen;
    uint8_t *blob;              /* u16 length, probe_addr, packed rkey */
    size_t blob_len;
    uint64_t probe_quiet_ns;    /* probe after this long with nothing heard */
    struct ucx_probe *probes, *probes_closing;
    struct ucx_served *served, *served_closing;
    int nserved;
    bool probe_open;            /* accept peers' probe endpoints */
    bool probe_sweep;           /* something failed: close what is unused */
};

/* The remote transport answered: a frame arrived, a send completed later
 * than it was posted (what held it back came from the peer), or a probe
 * was answered. */
static inline void heard(struct ucx_chan *c)
{
    c->n_heard++;
    c->unconfirmed = false;
}

/* Whether the channel has handed UCX anything the peer has not answered:
 * sends outstanding or refused, or sent since the peer was last heard. */
static inline bool unanswered(const struct ucx_chan *c)
{
    return c->nsend > 0 || c->refused || c->unconfirmed;
}

/* ucx.c, for probe.c ---------------------------------------------------------- */

/** An op for c (NULL: the rail's own), from the free list or new; NULL
 * without memory. */
struct ucx_op *ucx_op_get(struct ucx_rail *r, struct ucx_chan *c);
/** Back to the free list. */
void ucx_op_put(struct ucx_op *op);
/** A request of a one-shot op (flush, probe) is done: the op goes back,
 * the request is freed; the channel it was for, NULL if that channel has
 * let go of it. */
struct ucx_chan *ucx_op_done(void *request, struct ucx_op *op);
/** Close an endpoint, forced, never from inside a UCX callback: cb(arg) once
 * UCX is done with it; false when it is closed already (no callback). */
bool ucx_ep_close_forced(ucp_ep_h ep, ucp_send_nbx_callback_t cb, void *arg);
/** The live channel an active message came on, NULL if none. */
struct ucx_chan *ucx_chan_of(struct ucx_rail *r, const ucp_am_recv_param_t *param);

/* probe.c, for ucx.c ---------------------------------------------------------- */

/** Our keepalive word, the listener for peers' probe endpoints, and the
 * setup a peer needs (r->blob); without them (logged at debug level) the
 * rail has no probes. */
void ucx_probe_init(struct ucx_rail *r, const struct rov_rail_env *env);
/** Active-message handlers of UCX_AM_PROBE and UCX_AM_PROBE_GO (arg: the
 * rail). */
ucs_status_t ucx_probe_am_cb(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param);
ucs_status_t ucx_probe_go_cb(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param);
/** From chan_health on an authenticated channel: exchange probe setups,
 * probe a quiet peer. */
void ucx_probe_tick(struct ucx_chan *c, uint64_t now);
/** The channel lets go of its probe endpoint and probe in flight. */
void ucx_probe_detach(struct ucx_chan *c);
/** Close failed probe endpoints no channel uses and served endpoints whose
 * peer is gone (never from inside a UCX callback). */
void ucx_probe_sweep(struct ucx_rail *r);
/** Close a probe endpoint, or a served one, for good: onto the rail's
 * closing lists, freed once UCX is done with it. */
void ucx_probe_close(struct ucx_rail *r, struct ucx_probe *p);
void ucx_served_close(struct ucx_rail *r, struct ucx_served *v);

#endif
