/*
 * Internals of the verbs rail shared by verbs.c (data path, channels),
 * oob.c (connection setup over a TCP handshake) and cm.c (connection setup
 * through librdmacm).
 */
#ifndef ROV_VERBS_H
#define ROV_VERBS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>

#include "transport/netaddr.h"
#include "transport/rail.h"

struct rdma_cm_id;
struct rdma_event_channel;

#define VB "verbs"

#define VB_NCTRL 4          /* receive buffers for credit-only messages */
#define VB_POLL_BATCH 16
#define VB_MAX_RD_ATOMIC 4
#define VB_OOB_MAGIC 0x52564230u /* "RVB0" */
#define VB_OOB_VERSION 2
#define VB_OOB_READY 0x52545321u /* "RTS!" */

/* Message types (immediate data bits 24-31).  FRAME: a whole frame.  RTS:
 * a large frame is ready (length + inline header).  CTS: the receiver's
 * staging buffer for the oldest RTS.  DONE: the RDMA WRITE WITH IMM that
 * filled it.  CREDIT: credits only. */
enum vb_msg {
    VB_MSG_FRAME = 0, VB_MSG_RTS = 1, VB_MSG_CTS = 2, VB_MSG_CREDIT = 3, VB_MSG_DONE = 4,
};
#define VB_STAGES 4 /* large frames in flight per channel (staging buffers) */

/* wr_id: kind in the top byte, then (sends of a frame) the frame's bytes
 * that its completion takes off vb_chan.queued (24 bits: a SEND carries at
 * most RAILOVER_VERBS_EAGER, 1 MiB), the slot index in the low 32 bits. */
enum vb_wr {
    VB_WR_RECV = 1,
    VB_WR_SEND = 2,   /* used a send slot */
    VB_WR_INLINE = 3, /* no slot */
    VB_WR_WRITE = 4,  /* a large frame's RDMA WRITE WITH IMM */
    VB_WR_PROBE = 5,
    VB_WR_READ = 6,   /* an RDMA READ of rov_conn_get() */
};
#define WR_ID(kind, idx) (((uint64_t)(kind) << 56) | (uint64_t)(idx))
#define WR_KIND(id) ((unsigned)((id) >> 56))
#define WR_IDX(id) ((uint32_t)(id))
#define WR_BYTES(n) ((uint64_t)(n) << 32)
#define WR_ID_BYTES(id) ((size_t)(((id) >> 32) & 0xffffff))

#define IMM(type, data, ctrl) \
    (((uint32_t)(type) << 24) | ((uint32_t)(ctrl) << 16) | (uint32_t)(data))
#define IMM_TYPE(imm) ((imm) >> 24)
#define IMM_CTRL(imm) (((imm) >> 16) & 0xff)
#define IMM_DATA(imm) ((imm) & 0xffff)

/* The out-of-band handshake message, all fields in network order. */
struct vb_oob {
    uint32_t magic;
    uint16_t version;
    uint16_t lid;
    uint32_t qpn;
    uint32_t psn;
    uint8_t gid[16];
    uint32_t nrecv;   /* data receive buffers = credits granted */
    uint32_t eager;   /* bytes per receive buffer */
    uint32_t mtu;     /* enum ibv_mtu */
    uint32_t ka_rkey; /* keepalive target */
    uint64_t ka_addr;
};

/* RTS payload (network order), followed by the inline part of the frame. */
struct vb_rts {
    uint32_t len;   /* bytes the sender will write */
    uint32_t inl;   /* bytes of the frame carried inline, first */
};

/* CTS payload (network order): where to write the oldest announced frame. */
struct vb_cts {
    uint64_t addr;
    uint32_t rkey;
    uint32_t len;
};

/* A message waiting for a credit (copied), or a received one waiting for
 * its turn to be delivered (copied, so that its receive buffer is reposted
 * and credits keep flowing). */
struct vb_pend {
    struct vb_pend *next;
    enum vb_msg type;
    size_t len;
    uint8_t data[];
};

/* A large frame announced with an RTS: written into the peer's staging
 * buffer once its CTS arrives, released when the write completes. */
struct vb_big {
    struct vb_big *next;
    void *cookie;             /* transport's, or NULL when we own copy */
    struct rov_reg *reg;
    void *copy;
    size_t frame;             /* the whole frame's bytes, counted in vb_chan.queued */
    const void *base;         /* what is written */
    size_t len;
    uint64_t raddr;           /* from the CTS */
    uint32_t rkey;
    bool cts, posted;
};

/* A read (ops.get): posted in order while fewer than VB_MAX_RD_ATOMIC are
 * outstanding (the send queue has room for that many besides the sends);
 * RC completes a queue's work in order. */
struct vb_get {
    struct vb_get *next;
    void *cookie;
    void *local;
    uint32_t lkey, rkey, len;
    uint64_t raddr;
    bool posted;
};

/* Receiver side of a large frame: where the peer writes it. */
struct vb_stage {
    uint8_t *buf;
    size_t cap;
    struct ibv_mr *mr;
    size_t len;               /* whole frame (inline header + written part) */
    size_t wlen;              /* the written part */
};

/* A channel's connection setup, either way (oob.c's handshake, cm.c's
 * rdma_cm events); changed only by vb_oob_set_state() (oob.c: its table). */
enum vb_oob_state {
    OOB_NONE,          /* handshake over (or never: chan is OPEN) */
    OOB_CONNECTING,    /* connector: TCP connect in progress */
    OOB_WAIT_CHALLENGE, /* connector: connected, waiting for the acceptor's challenge */
    OOB_WAIT_INFO,     /* connector: sent ours with its proof, waiting for the peer's */
    OOB_ACCEPTED,      /* acceptor: challenge sent, waiting for the connector's info
                        * and proof; no QP or registered memory yet (the RDMA CM
                        * path: QP made, waiting for ESTABLISHED) */
    OOB_WAIT_READY,    /* acceptor: sent ours, waiting for READY */
};

struct vb_chan {
    struct rov_chan base;
    struct vb_rail *rail;
    struct vb_chan *next;      /* rail's list (live or graveyard) */
    bool dead;                 /* failed or closed: no more upcalls */
    bool closed;               /* chan_close called: waiting to be freed */
    bool armed;                /* CQ notification requested, its event not yet read */
    bool active;               /* we connect it (RDMA CM's active side); the
                                * transport keeps its own record (rail.h) */
    bool accepted;             /* reported to the transport (acceptor side) */
    bool linked;               /* on the rail's list of live channels */

    /* out-of-band setup */
    enum vb_oob_state oob;
    int oob_fd;
    struct rov_watch oob_watch;
    uint8_t oob_buf[sizeof(struct vb_oob) + ROV_RAIL_PROOF_LEN]; /* info and its proof */
    size_t oob_have;
    uint8_t oob_challenge[ROV_NONCE_LEN]; /* what the proof covers: the acceptor's
                                           * (oob.c: ours; cm.c: the connector's copy) */
    struct rov_preauth preauth; /* acceptor: admitted with the transport's
                                 * unauthenticated channels until established */

    struct rdma_cm_id *cm_id;  /* RAILOVER_VERBS_CM=rdmacm (cm.c) */
    struct sockaddr_storage cm_peer; /* connector: the listener (asked again) */
    uint16_t cm_slot;          /* connector: the listener's challenge slot */
    bool cm_challenged;        /* connector: has the challenge it answers */

    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint32_t psn;
    struct vb_oob peer;        /* host order */

    /* receive side */
    uint8_t *rbufs;            /* (nrecv + VB_NCTRL) * eager */
    struct ibv_mr *rmr;
    uint32_t nrecv;
    struct vb_pend *held_head, *held_tail; /* received, waiting for their turn */
    struct vb_stage stage[VB_STAGES];      /* large frames being written to us */
    uint32_t stage_head, stage_count;      /* in RTS order */
    uint32_t owed_data, owed_ctrl; /* credits to return */

    /* send side */
    uint8_t *sbufs;            /* nsend * eager */
    struct ibv_mr *smr;
    uint32_t nsend;
    uint32_t *sfree;           /* stack of free send slots */
    uint32_t nfree;
    uint32_t credits, ctrl_credits;
    uint32_t sq_out, sq_max;   /* work requests outstanding on the send queue */
    uint64_t queued;           /* frame bytes taken, send completion not yet seen
                                * (ops.chan_queued) */
    size_t eager_max;          /* largest frame sent eagerly (peer's buffers) */
    struct vb_pend *pend_head, *pend_tail;
    bool want_writable;
    bool want_flush;           /* chan_flush: report when nothing is outstanding */
    struct vb_big *big_head, *big_tail; /* RTS sent, write not complete, in order */
    struct vb_get *get_head, *get_tail; /* reads, oldest first */
    uint32_t rd_out;           /* reads posted, not complete (<= VB_MAX_RD_ATOMIC) */

    /* keepalive */
    uint64_t *ka_local;        /* the peer writes here */
    uint64_t *ka_src;          /* we write from here */
    struct ibv_mr *ka_mr;      /* covers both */
    uint64_t last_post_ns, last_heard_ns;
};

struct vb_rail {
    struct rov_rail base;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct rov_watch cc_watch, async_watch, listen_watch;
    char dev_name[64];
    uint8_t port;
    int gid_index;
    bool gid_fixed;            /* RAILOVER_VERBS_GID_INDEX given */
    union ibv_gid gid;
    uint16_t lid;
    bool global;               /* RoCE or GRH needed */
    enum ibv_mtu mtu;
    uint32_t max_inline;
    bool port_down, device_dead;
    bool accept_paused;        /* listener out of epoll: the transport's budget is full */
    const char *down_why;

    /* settings */
    uint32_t nrecv;
    size_t eager;
    uint8_t timeout, retry;
    uint64_t keepalive_ns;

    struct sockaddr_storage oob_local;
    socklen_t oob_local_len;
    int listen_fd;
    uint8_t addr[ROV_NET_ADDR_MAX];
    size_t addr_len;

    struct rov_regcache *regcache;
    struct vb_chan *chans, *graveyard;

    /* RAILOVER_VERBS_CM=rdmacm (cm.c) */
    bool cm;
    struct ibv_context **cm_devices;     /* librdmacm's; ctx is one of them */
    struct rdma_event_channel *cm_ec;
    struct rdma_cm_id *cm_listen;
    struct rov_watch cm_watch;
    struct vb_cm_slot *cm_slots;         /* the listener's challenges (cm.c) */
    uint16_t cm_next;                    /* the slot the next one takes */
};

/* verbs.c, for oob.c and cm.c ------------------------------------------------ */

/** A channel with nothing of the device yet (an acceptor's before the peer
 * proved its key); NULL without memory. */
struct vb_chan *vb_chan_shell(struct vb_rail *r, bool outbound);
/** Its CQ, rings and their registrations; false (logged) when they cannot
 * be had. */
bool vb_chan_buffers(struct vb_chan *c);
/** A channel with its buffers, registrations and CQ, on the rail's list;
 * no QP yet. */
struct vb_chan *vb_chan_alloc(struct vb_rail *r, bool outbound);
/** Free a channel and all it holds now (no upcalls; not on the rail's list). */
void vb_chan_free(struct vb_chan *c);
/** The chan_close op: the QP to error, sends released, freed by vb_bury(). */
void vb_chan_close(struct rov_chan *chan);
/** Free a channel the transport never saw (no upcalls). */
void vb_chan_discard(struct vb_chan *c);
/** Put it on the rail's list (polled, failed with the others); idempotent. */
void vb_chan_link(struct vb_chan *c);
/** The QP attributes every channel uses. */
void vb_qp_init_attr(struct vb_chan *c, struct ibv_qp_init_attr *qia);
/** Adopt a QP (created by cm.c with rdma_create_qp, already in INIT) and post
 * the receive buffers.  0 or -1 (logged). */
int vb_chan_use_qp(struct vb_chan *c, struct ibv_qp *qp);
/** Our half of the connection parameters (private data in cm mode). */
void vb_fill_info(struct vb_chan *c, struct vb_oob *m);
/** Check the peer's half and take its credits; ROV_ERR_PROTO with *why. */
rov_status_t vb_take_info(struct vb_chan *c, const struct vb_oob *m, const char **why);
/** The QP is connected: tell the transport (connected / accepted). */
void vb_chan_established(struct vb_chan *c);
void vb_preauth_begin(struct vb_chan *c);
/** The peer ended the connection (rdma_cm DISCONNECTED): first hand up
 * what completed before (the peer's last CLOSE may be among it: the peer
 * finishes when its CLOSE completed here), then fail the channel. */
void vb_chan_ended(struct vb_chan *c, rov_status_t st, const char *why);
/** Setup failed: upcall for outbound channels, silent drop for inbound. */
void vb_setup_failed(struct vb_chan *c, rov_status_t st, const char *why);
void vb_fail_all(struct vb_rail *r, rov_status_t st, const char *why);
/** Re-read the port's GID table and attributes: a link that went down and up
 * may come back with its GIDs at other indexes.  Before each connection. */
void vb_refresh_port(struct vb_rail *r);
/** Use port of ctx if it exists and (when require_active) is up. */
bool vb_use_port(struct vb_rail *r, struct ibv_context *ctx, unsigned port, bool require_active);
void vb_bury(struct vb_rail *r);
int vb_set_nonblock(int fd); /* 0 or -1 */

/* oob.c ------------------------------------------------------------------------ */

/** The one setter of c->oob: checked against the table, logged. */
void vb_oob_set_state(struct vb_chan *c, enum vb_oob_state state, const char *why);
/** Close the handshake socket, if any; the setup is over (OOB_NONE). */
void vb_oob_close(struct vb_chan *c);
/** Listen for handshakes on the RDMA port's IP address; r->addr is the
 * listener's.  ROV_ERR_IO (logged) when it cannot. */
rov_status_t vb_oob_listen(struct vb_rail *r);
/** The unlisten and accept_resume ops. */
void vb_unlisten(struct rov_rail *rail);
void vb_accept_resume(struct rov_rail *rail);
/** Start a channel's setup to the peer's handshake listener (the connect
 * op without rdma_cm). */
rov_status_t vb_oob_connect(struct vb_rail *r, const struct sockaddr_storage *peer,
                            socklen_t pl, struct vb_chan **chan_p);
/** chan_health of a channel whose setup is under way. */
void vb_oob_health(struct vb_chan *c, struct rov_chan_health *h);

/* cm.c (only with librdmacm) ---------------------------------------------------- */

rov_status_t vb_cm_open(struct vb_rail *r, const char *dev, unsigned port, bool require_active);
void vb_cm_close(struct vb_rail *r);
rov_status_t vb_cm_listen(struct vb_rail *r);
rov_status_t vb_cm_connect(struct vb_rail *r, const struct sockaddr_storage *peer,
                           struct vb_chan **chan_p);
void vb_cm_chan_close(struct vb_chan *c);  /* disconnect (the QP is in error) */
void vb_cm_chan_free(struct vb_chan *c);   /* destroy QP and id */

#endif
