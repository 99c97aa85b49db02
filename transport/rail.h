/*
 * The rail-ops interface: what a rail (TCP, verbs, UCX, ...) provides to the
 * transport, and the upcalls through which it reports back.
 *
 * A rail is a message pipe to a peer that is reliable and ordered while it is
 * healthy and may lose the tail of its traffic when it fails.  It knows
 * nothing of sequence numbers, acknowledgements or failover: it carries whole
 * frames (see wire.h) and reports what happens to its channels.
 *
 * Objects: a rail instance (struct rov_rail, one per RAILOVER_RAILS entry)
 * and its channels (struct rov_chan, one connection to one peer).  A rail
 * embeds struct rov_rail / struct rov_chan first in its own structures and
 * recovers them with rov_container_of().
 *
 * Every op runs in the progress thread.  No op blocks.
 */
#ifndef ROV_RAIL_H
#define ROV_RAIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "railover/railover.h"
#include "transport/bond.h"
#include "transport/compiler.h"
#include "transport/config.h"
#include "transport/states.h"
#include "transport/wire.h"

#define rov_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#define ROV_RAIL_ADDR_MAX 128
#define ROV_RAIL_MAX_IOV 2

struct rov_conn;

/* Called by the progress engine when a watched descriptor is ready. */
struct rov_watch {
    int fd;
    void (*cb)(struct rov_watch *watch, uint32_t events);
    bool urgent; /* in the context's urgent set (rov_ctx_watch_urgent()) */
};

/* A channel.  `rail` is shared: a rail may set it when it makes the channel
 * (and read it), and the transport sets it when the channel is handed over
 * (connect's *chan_p, rov_rail_accepted()).  Everything after it is the
 * transport's: a rail writes none of it and reads it only through the
 * accessors below (rov_chan_authed(), rov_chan_handshaken(),
 * rov_chan_rx_max_payload()).  tests/layering.sh checks that no rail names
 * these fields. */
struct rov_chan {
    struct rov_rail *rail;
    /* The transport's part. */
    enum rov_chan_state state;
    struct rov_conn *conn;     /* bound connection, NULL until HELLO */
    uint64_t serial;           /* unique in the context, never reused */
    unsigned outbound : 1;     /* we connected it */
    unsigned handshaken : 1;   /* HELLO/HELLO_ACK exchange complete */
    unsigned parked : 1;       /* lost a connect race; kept in reserve */
    unsigned authed : 1;       /* the peer proved its key (HELLO or HELLO_ACK
                                * MAC): frames up to RAILOVER_MAX_MSG accepted */
    unsigned awaiting_hello : 1; /* accepted, peer not yet authenticated
                                  * (handshake timeout and cap: context.c) */
    unsigned silent : 1;       /* RAILOVER_FAULT: drops every frame both ways */
    unsigned challenged : 1;   /* outbound: the acceptor's CHALLENGE came (our
                                * HELLO goes once the channel is also open) */
    rov_status_t send_error;   /* a send failed (or RAILOVER_FAULT fired) inside
                                * rov_conn_send(): the channel fails at the
                                * next progress, with send_reason */
    rov_reason_t send_reason;
    uint64_t silent_since_ns;
    uint32_t hello_flags;      /* parked: the HELLO that came on it */
    uint64_t hello_ack;
    uint64_t born_ns;          /* accepted or connected at (handshake timeout) */
    uint8_t nonce[ROV_NONCE_LEN]; /* outbound: the acceptor's CHALLENGE until our
                                   * HELLO goes, then that HELLO's nonce;
                                   * accepted: our CHALLENGE until the HELLO,
                                   * then the HELLO's nonce */
    struct rov_bond_chan bond; /* a bond's measure of it (transport/bond.c) */
    uint32_t gets_out;         /* our reads on it the rail has not answered */
    struct rov_chan *next;     /* context's list of channels */
    struct rov_chan **pprev;   /* what points at it there: unlinked in O(1) */
};


/* What the transport's settings say to every rail at open; a rail's own
 * settings come in its block (rov_rail_ops.settings). */
struct rov_rail_env {
    const char *default_if; /* RAILOVER_TCP_IF: the Ethernet-side interface when the
                             * spec names none ("": first non-loopback IPv4) */
    uint64_t keepalive_ns;  /* RAILOVER_KEEPALIVE: probe an idle channel; 0: never */
    uint64_t stall_ns;      /* RAILOVER_FAILOVER_TIMEOUT when failover is on; else 0 */
};

struct rov_rail_ops {
    const char *name; /* kind in RAILOVER_RAILS, e.g. "tcp" */
    /* The rail's own RAILOVER_* variables (transport/settings.h), registered
     * with the rail; NULL: none. */
    struct rov_settings *settings;

    /** Open an instance for spec (spec->arg selects interface/device), with
     * the rail's settings block (NULL when it has no table).  Allocates and
     * returns the rail object with base fields left for the caller.
     * ROV_ERR_NOT_FOUND for a missing device or interface. */
    rov_status_t (*open)(rov_context_t *ctx, const struct rov_rail_spec *spec,
                         const struct rov_rail_env *env, const void *settings,
                         struct rov_rail **rail_p);

    /** Close every channel (without upcalls) and free the rail. */
    void (*close)(struct rov_rail *rail);

    /** Start listening (idempotent) and write this rail's address, at most
     * ROV_RAIL_ADDR_MAX bytes, into addr.  Inbound channels are reported
     * with rov_rail_accepted(). */
    rov_status_t (*listen)(struct rov_rail *rail, void *addr, size_t *len_p);

    /** Stop listening.  Optional. */
    void (*unlisten)(struct rov_rail *rail);

    /** Accept connections again after rov_rail_accept_ok() refused one.
     * Optional (a rail that never asks). */
    void (*accept_resume)(struct rov_rail *rail);

    /** Start connecting to a peer address (from the peer's listen).  Never
     * blocks: completion is rov_rail_connected() or rov_rail_failed().
     * ROV_ERR_INVAL for a malformed address. */
    rov_status_t (*connect)(struct rov_rail *rail, const void *addr, size_t len,
                            struct rov_chan **chan_p);

    /** Close a channel and free it.  Frames still queued are dropped and
     * their cookies released with rov_rail_send_done() before it returns.
     * May be called from inside an upcall on the same channel. */
    void (*chan_close)(struct rov_chan *chan);

    /** A caller is about to sleep on the context's epoll set: make the
     * rail's descriptors there signal whatever arrives from now on (arm a
     * completion queue, ucp_worker_arm()), and handle what arrived before,
     * as progress does.  Returns ROV_ERR_BUSY when that found work (the
     * caller must not sleep yet), else ROV_OK.  Called only before blocking,
     * never on the busy-poll path, so a busy-polling application pays for no
     * arming; the descriptor's event disarms it again.  Optional: rails whose
     * descriptors are level-triggered sockets need none. */
    rov_status_t (*arm)(struct rov_rail *rail);

    /** Learn when everything sent on an OPEN channel so far has reached the
     * peer's rail (is in the peer's receive queue, not merely in our own
     * stack) and our closing the channel can no longer destroy it.
     * ROV_INPROGRESS: the rail calls rov_rail_flushed(chan) once it has,
     * from a later progress or completion, never from inside this call
     * (and not if the channel fails first).  A rail whose close can destroy
     * what the peer has not yet read waits for the peer to close its end
     * (TCP: a socket closed with unread input is reset, and the peer, whose
     * next write then fails, drops the channel with what it had not read;
     * the flush ends our stream and completes at the peer's end of stream;
     * UCX: a message the peer's rail answers once it has handed up what came
     * before, since UCX's own flush ends when the data is in the peer's
     * receive queue, which a peer that exits at once may never read).  The transport
     * sends nothing more on the channel after a flush; a rail may drop
     * what it is still given (TCP: the stream has ended).
     * ROV_ERR_UNSUPPORTED: the rail cannot tell; its chan_close then still
     * delivers what was sent.  The close
     * handshake uses it: the side that answers the peer's CLOSE closes the
     * channel only once the answer is at the peer, so that a rail that
     * drops what is posted when it closes (a verbs QP moved to the error
     * state, a TCP socket reset) does not lose it; the peer, finishing on
     * the answer, closes its end.  Optional (stub: ROV_ERR_UNSUPPORTED). */
    rov_status_t (*chan_flush)(struct rov_chan *chan);

    /**
     * Rail-level liveness of an OPEN channel, for the failover engine's
     * lack-of-progress detector.  Optional: a rail without it is judged by
     * its errors only.  Fills *h from the rail's own completions (TCP: the
     * kernel's send queue and the peer kernel's ACKs; verbs: outstanding work
     * requests and their completions), never from the peer application, so a
     * peer that computes without calling into the library looks healthy.
     * Also asked for CONNECTING channels: busy while the rail's own connect
     * is under way, peer_turn when it waits for the peer's application (the
     * engine times a connect only while it is not the peer's turn, as it
     * does not time the transport's own HELLO).
     * Returns ROV_OK, or an error status when the query shows the channel
     * broken (the caller treats that like rov_rail_failed()).
     */
    rov_status_t (*chan_health)(struct rov_chan *chan, struct rov_chan_health *h);

    /** Bytes handed to the channel (ops.send) that its remote transport has
     * not acknowledged yet: the rail's own queue and what it gave the
     * kernel or the device (TCP: SIOCOUTQ; verbs, UCX: sends not yet
     * completed).  A bond (docs/architecture.md, Bonding) sends a large
     * message on the member whose queue drains first and measures each
     * member's rate from how fast this falls.  Optional: a rail without it
     * is bonded only as the preferred rail. */
    uint64_t (*chan_queued)(struct rov_chan *chan);

    /** The rail's link speed in Mbit/s (TCP: its interface's, from sysfs;
     * verbs: the port's active speed times its width), 0 when unknown.
     * What an MPI library is told the connections' bandwidth is
     * (rov_limits_t.bandwidth_mbps).  Optional (stub: 0). */
    uint64_t (*link_mbps)(struct rov_rail *rail);

    /** Local and remote address of a channel ("192.0.2.1:40000>192.0.2.2:
     * 5000"), for status output and for log lines about a peer.  Optional
     * (stub: "?"). */
    void (*chan_str)(struct rov_chan *chan, char *buf, size_t len);

    /** Human-readable form of a rail address, for logs.  Optional. */
    void (*addr_str)(const void *addr, size_t len, char *buf, size_t buf_len);

    /** The path a peer's rail address names, as a key: connections whose
     * peers' addresses on this rail give the same key reach them through
     * the same remote interface (an IP address without its port), so one
     * probe and one dwell answer for all of them (failover's path_up()).
     * Never 0.  Optional (stub: the whole address, whose port differs per
     * peer endpoint: one path per peer). */
    uint64_t (*path_key)(const void *addr, size_t len);

    /** Whether progress would find anything, asked without touching what
     * the peer's traffic needs: rov_context_wait() runs this, and progress
     * only when it answers nonzero, while it spins before a sleep.  A busy
     * receiver's progress on an empty TCP socket is a recv() that takes the
     * socket lock, which the delivery of the peer's next segments then
     * waits for (on one host, the sending process itself); poll() with no
     * timeout reads the socket's state without it.  Optional (stub: 1,
     * progress on every turn of the spin). */
    int (*ready)(struct rov_rail *rail);

    /** Register [addr, addr + len) for one-sided reads: readable by the
     * peers of this rail's channels and writable by this rail's reads.
     * *handle_p is the rail's, *key_p what a peer's get names it by.
     * Optional (stub: ROV_ERR_UNSUPPORTED, the rail has no get). */
    rov_status_t (*mem_reg)(struct rov_rail *rail, void *addr, size_t len, void **handle_p,
                            uint32_t *key_p);
    /** Release a registration of mem_reg.  Optional (with mem_reg). */
    void (*mem_dereg)(struct rov_rail *rail, void *handle);

    /** Read len bytes (at most rail->get_max) at the peer's raddr,
     * registered there under key, into local (inside the registration
     * handle of ours) on an OPEN channel.  ROV_INPROGRESS: the rail calls
     * rov_rail_get_done(chan, cookie, status) when the data is in local,
     * or with an error when the channel fails or closes first (from
     * chan_close at the latest).  Reads queue in the rail when it has no
     * room, never ROV_ERR_AGAIN.  Other negative: nothing was started.
     * Optional (with mem_reg; stub: ROV_ERR_UNSUPPORTED). */
    rov_status_t (*get)(struct rov_chan *chan, void *local, void *handle, uint64_t raddr,
                        uint32_t key, size_t len, void *cookie);

    /* The two per-message calls last: in struct rov_rail the ops come last,
     * so these two share a cache line with the rail's own first fields
     * (struct rov_rail). */

    /**
     * Send one frame (iov[0] starts with the header; at most ROV_RAIL_MAX_IOV
     * pieces) on an OPEN channel.
     * ROV_OK: sent or copied; the memory is free again.
     * ROV_INPROGRESS: the rail still references the memory; it calls
     *   rov_rail_send_done(chan, cookie) when done.  Never returned when
     *   cookie is NULL (the rail copies what it cannot send at once).
     * ROV_ERR_AGAIN: the rail's queue is full; nothing was taken; the rail
     *   calls rov_rail_writable() when it can take more.
     * other negative: the channel failed; the rail reports nothing more for
     *   it except send_done for frames it still referenced.
     * Frames without a cookie are control frames: a rail may send them ahead
     * of data frames it has queued, but keeps them in order among themselves.
     */
    rov_status_t (*send)(struct rov_chan *chan, const struct iovec *iov, int iovcnt,
                         void *cookie);

    /** Busy-poll fast path, called on every rov_progress(): handle what is
     * ready without waiting.  Optional.  Returns how many channels it polled
     * directly; 0 tells the engine to rely on epoll for this rail. */
    int (*progress)(struct rov_rail *rail);
};

struct rov_rail {
    rov_context_t *ctx;
    const struct rov_rail_spec *spec; /* kind, argument, display name */
    int index;                        /* position in RAILOVER_RAILS */
    size_t max_frame;                 /* header + RAILOVER_MAX_MSG */
    size_t get_max;                   /* largest get (ops.get), 0: none */
    /* At a reopen (rov_context_reopen()), set before listen: the address
     * this rail's kind listened on at this index before, which the rail
     * binds again if it can (so that peers that closed their rails too
     * find it where they knew it); any address is fine otherwise.  NULL:
     * none. */
    const void *listen_hint;
    size_t listen_hint_len;
    /* A copy of the rail's ops, filled in by the context at open: the per-
     * message calls (send, progress, the last two) find them in the object
     * they already touch, not in a table on another page, and in the cache
     * line of the fields a rail puts first after this struct, when it
     * allocates its object on a line (rov_zalloc_lines();
     * transport/compiler.h). */
    struct rov_rail_ops ops;
};

/* What a rail may read of the transport's part of a channel ----------------- */

/** Whether the peer proved its key on chan (its HELLO or HELLO_ACK MAC):
 * before that a rail accepts only handshake frames and one-sided reads
 * are refused. */
static inline bool rov_chan_authed(const struct rov_chan *chan)
{
    return chan->authed;
}

/** Whether chan's HELLO/HELLO_ACK exchange is complete (a rail stops
 * watching the handshake's progress then). */
static inline bool rov_chan_handshaken(const struct rov_chan *chan)
{
    return chan->handshaken;
}

/** Largest payload a rail may accept, and buffer, for the next frame on
 * chan: RAILOVER_MAX_MSG once the peer is authenticated, before that only
 * a handshake frame (ROV_WIRE_HELLO_MAX), so that nobody who has not
 * proved the address blob's key makes a rail hold more memory than that.
 * Rails evaluate it per frame (the handshake's own frame raises it). */
static inline size_t rov_chan_rx_max_payload(const struct rov_chan *chan)
{
    return chan->authed ? chan->rail->max_frame - ROV_WIRE_HDR_LEN : ROV_WIRE_HELLO_MAX;
}

/* Registry ----------------------------------------------------------------- */

/** Register a rail kind; mandatory ops are checked here, optional ones get
 * stubs.  Rails register from a constructor (ROV_RAIL_REGISTER). */
void rov_rail_register(const struct rov_rail_ops *ops);
const struct rov_rail_ops *rov_rail_lookup(const char *kind);
/* rov_rail_kinds() (the registered kinds) is public: railover.h. */

#define ROV_RAIL_REGISTER(ops)                                               \
    static void __attribute__((constructor)) rov_rail_register_##ops(void) \
    {                                                                        \
        rov_rail_register(&ops);                                             \
    }

/* Services of the progress engine for rails -------------------------------- */

/** Watch fd for EPOLLIN/EPOLLOUT (level-triggered); events may be changed
 * with rov_ctx_watch_mod and removed with rov_ctx_unwatch before close(). */
rov_status_t rov_ctx_watch(rov_context_t *ctx, struct rov_watch *watch, uint32_t events);
/** The same for a descriptor that must not wait behind the channels' (a
 * listener, link or port events, a timer): it is served within one epoll
 * batch however many channels are ready (context.c, dispatch()). */
rov_status_t rov_ctx_watch_urgent(rov_context_t *ctx, struct rov_watch *watch, uint32_t events);
rov_status_t rov_ctx_watch_mod(rov_context_t *ctx, struct rov_watch *watch, uint32_t events);
void rov_ctx_unwatch(rov_context_t *ctx, struct rov_watch *watch);

/* Upcalls: rail -> transport ------------------------------------------------ */

/** New inbound channel, already OPEN.  The rail allocated it. */
void rov_rail_accepted(struct rov_rail *rail, struct rov_chan *chan);
/** Asked before taking a connection from the listen queue: false while as
 * many accepted channels as the context keeps wait for their handshake.
 * The rail then leaves connections in the queue and stops watching its
 * listener until its accept_resume op is called.  (A rail that does not
 * ask has the oldest waiting channel closed for each one it accepts.) */
bool rov_rail_accept_ok(struct rov_rail *rail);
/* A peer that a rail's listener talks to before it becomes a channel (the
 * verbs rail's out-of-band setup, before any QP or registered memory is
 * made for it).  It is admitted, timed and shed together with the
 * accepted channels still waiting for their HELLO (context.c): one budget,
 * one deadline, one oldest-first shedding for every listener.  The rail
 * embeds the record and fills rail and expire; the rest is the
 * transport's. */
struct rov_preauth {
    struct rov_rail *rail;
    /** The transport drops the peer (past the handshake timeout, or the
     * oldest when the budget is full), already untracked; why is static.
     * The rail closes what it holds for the peer. */
    void (*expire)(struct rov_preauth *p, const char *why);
    uint64_t born_ns;
    struct rov_preauth *next, *prev;
    bool live;
};
/** Track p from now (call it after rov_rail_accept_ok() said yes). */
void rov_rail_preauth_begin(struct rov_rail *rail, struct rov_preauth *p);
/** Stop tracking p (it proved the key, failed or was expired).  Idempotent. */
void rov_rail_preauth_end(struct rov_preauth *p);
/* A rail's proof that a peer may connect (rov_rail_preauth_prove()): the
 * acceptor's connection id it reconnects to (0 on a connection's first
 * channel), then an HMAC-SHA256 (PROOF_LEN), or its first 128 bits
 * (PROOF_SHORT_LEN: for a setup message with no room for more, rdma_cm's
 * 56 bytes of private data in a connect request). */
#define ROV_RAIL_PROOF_LEN (8 + ROV_MAC_LEN)
#define ROV_RAIL_PROOF_SHORT_LEN (8 + 16)
/** Connector: the proof, over the listener's challenge (ROV_NONCE_LEN
 * bytes) and msg (and the connection it names), that we may connect: under
 * the listener's address key on a connection's first channel, under the
 * connection's secret on any later one (the side that accepted a
 * connection never holds the other's key).  proof: proof_len bytes,
 * ROV_RAIL_PROOF_SHORT_LEN to ROV_RAIL_PROOF_LEN. */
void rov_rail_preauth_prove(const struct rov_chan *chan, const uint8_t *challenge,
                            const void *msg, size_t len, uint8_t *proof, size_t proof_len);
/** Listener: whether proof (proof_len bytes) is one that
 * rov_rail_preauth_prove() made over challenge and msg with our address key,
 * or with the secret of the connection it names (live, or among the last
 * ended). */
bool rov_rail_preauth_check(struct rov_rail *rail, const uint8_t *challenge, const void *msg,
                            size_t len, const uint8_t *proof, size_t proof_len);
/** Descriptors for accepted connections, asked by a rail that accepts with
 * accept(): fd is the descriptor accept() just returned, or -1 when it
 * failed for want of one (EMFILE, ENFILE).  Channels that wait for their
 * handshake may take descriptors only down to a reserve kept for connects,
 * failover reconnects and the application (a sixteenth of RLIMIT_NOFILE,
 * 16 to 256): when fewer remain (the kernel hands out the lowest free
 * descriptor, so all below fd are taken), or none did, the context closes
 * the peer that has waited longest for its handshake (a channel, or a
 * rail's peer before its channel), on any rail, with a rate-limited
 * warning.  Returns true when it closed one (after -1, the
 * rail may accept again).  Never blocks; a getrlimit() per call. */
bool rov_rail_fd_short(struct rov_rail *rail, int fd);
/** Outbound connect completed. */
void rov_rail_connected(struct rov_chan *chan);
/** One whole frame (header + payload), valid during the call.  The frame has
 * passed rov_wire_peek(). */
void rov_rail_recv(struct rov_chan *chan, const void *frame, size_t len);
/** A frame sent with ROV_INPROGRESS is no longer referenced. */
void rov_rail_send_done(struct rov_chan *chan, void *cookie);
/** Everything sent on the channel before chan_flush() has reached the peer. */
void rov_rail_flushed(struct rov_chan *chan);
/** A get (ops.get) is over: status ROV_OK when its data is in place. */
void rov_rail_get_done(struct rov_chan *chan, void *cookie, rov_status_t status);
/** The rail can take sends again after ROV_ERR_AGAIN. */
void rov_rail_writable(struct rov_chan *chan);
/** The rail's own link came back (an interface up and running again, an
 * RDMA port active): connections whose channel on it failed retry it now
 * rather than after their backoff (transport/netlink.h watches IP links). */
void rov_rail_link_up(struct rov_rail *rail);
/** The rail's own link went down (an interface no longer running, an RDMA
 * port error): every connection's channel on it fails now, reason
 * "failover.link", without waiting for each one's own stall timer. */
void rov_rail_link_down(struct rov_rail *rail, const char *why);
/** The channel failed (EOF, reset, protocol error, provider error).  The rail
 * sends and receives nothing more on it; the transport will chan_close it.
 * why is a static string naming the cause precisely. */
void rov_rail_failed(struct rov_chan *chan, rov_status_t status, const char *why);

/** The check of a rail's own state machine (its setup, its probes): one
 * const table and one setter per machine, as the transport's (states.h).
 * rov_state_change() for the move from -> to of the object named what,
 * logged under the rail kind's name; an illegal move is refused (false,
 * logged at error level) and counted with the context's
 * illegal_transitions, as the transport's own are. */
bool rov_rail_state_change(struct rov_rail *rail, const struct rov_state_info *table, int from,
                           int to, const char *what, const char *why);

/** FNV-1a of len bytes at p, continuing from h (start: ROV_HASH_INIT). */
#define ROV_HASH_INIT 0xcbf29ce484222325ull
static inline uint64_t rov_hash_bytes(uint64_t h, const void *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

#endif
