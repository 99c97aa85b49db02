/*
 * The verbs rail: reliable-connected queue pairs over libibverbs.
 *
 * Connection setup: oob.c (RAILOVER_VERBS_CM=oob, the default: a TCP
 * handshake, CRIU can dump the process after the rail closes) or cm.c
 * (librdmacm); both end in vb_chan_established().
 *
 * Data path.  Each channel has its own CQ (one completion channel per rail,
 * watched by the progress engine; a CQ is armed only when the application is
 * about to sleep, vb_arm(), so busy polling makes no notification system
 * calls and rxe raises no completion events), a ring of pre-posted receive buffers of
 * RAILOVER_VERBS_EAGER bytes and as many registered send slots.
 *  - Frames up to the eager size go as one SEND (inline when small enough,
 *    otherwise copied into a send slot): the caller's memory is free at once.
 *  - Larger frames are not copied: the sender registers the payload (through
 *    the registration cache) and SENDs an RTS with its length and header;
 *    the receiver stages a buffer and answers with a CTS naming it; the
 *    sender RDMA-WRITEs the payload there WITH IMM; that completion tells
 *    the receiver the frame is complete, and the sender's own completion
 *    (the peer's HCA has it) releases the buffer (rov_rail_send_done).  Up
 *    to VB_STAGES large frames are in flight per channel.  RDMA WRITE, not
 *    READ, chosen when ib_read_bw on Soft-RoCE reached a tenth of
 *    ib_write_bw; that was the VM link losing packets (docs/rdma.md), and
 *    without the loss READ is as fast.
 *  - Messages that cannot be delivered yet (after a large frame still being
 *    written) are copied aside, so their receive buffers go back at once.
 *  - Credit-based flow control: a sender posts a SEND only with a credit,
 *    i.e. for a receive buffer the peer is known to have posted; credits come
 *    back in the immediate data of every SEND, or in a credit-only SEND that
 *    uses a small separate pool of receive buffers when there is nothing to
 *    piggyback on.  rnr_retry is 0: a receiver-not-ready is a bug here, never
 *    a retry storm, and shows up as an error.
 *  - Immediate data: bits 0-15 data credits returned, 16-23 credit-only
 *    buffers returned, 24-31 the message type (frame, RTS, CTS, credit,
 *    done).
 *  - Liveness: the health query (failover engine, every few ms) posts, on a
 *    channel that has posted nothing for half the keepalive interval, an
 *    8-byte RDMA WRITE of a counter into the peer's memory.  The peer's HCA
 *    acknowledges it without the peer's CPU; an unanswered probe shows as
 *    busy with no completion, and a dead path as RETRY_EXC_ERR.
 *
 * Bonding (ops.chan_queued): vb_chan.queued counts the bytes of the frames
 * taken, posted or copied behind missing credits, whose send completion
 * has not been seen (a small frame's SEND carries its length in the wr_id;
 * a large frame counts until its RDMA WRITE completes).
 *
 * Failures become rail events with a precise reason: work-completion errors
 * (status named), QP/CQ async events on the channel, port and device events
 * on every channel of the rail.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "transport/log.h"
#include "transport/netaddr.h"
#include "transport/rail.h"
#include "transport/wire.h"
#include "verbs/regcache.h"
#include "verbs/verbs.h"

static const char *mtu_str(enum ibv_mtu m)
{
    static const char *s[] = {"?", "256", "512", "1024", "2048", "4096"};
    return (unsigned)m < 6 ? s[m] : "?";
}

/* Failures ------------------------------------------------------------------ */

static void fail(struct vb_chan *c, rov_status_t st, const char *why)
{
    if (c->dead)
        return;
    c->dead = true;
    rov_debug(VB, "channel qp %u failed: %s", c->qp ? c->qp->qp_num : 0, why);
    if (!c->active && !c->accepted) {
        /* An inbound handshake the transport never saw: just drop it. */
        vb_chan_close(&c->base);
        return;
    }
    rov_rail_failed(&c->base, st, why);
}

/* The transport knows the channel: its messages may be delivered. */
static bool known(const struct vb_chan *c)
{
    return c->active || c->accepted;
}

/* Work completion status -> status and a precise, static reason. */
static rov_status_t wc_status(enum ibv_wc_status s, const char **why)
{
    switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
        *why = "verbs: transport retry counter exceeded (IBV_WC_RETRY_EXC_ERR): peer unreachable";
        return ROV_ERR_TIMEDOUT;
    case IBV_WC_RNR_RETRY_EXC_ERR:
        *why = "verbs: receiver not ready (IBV_WC_RNR_RETRY_EXC_ERR): credit accounting bug";
        return ROV_ERR_PROTO;
    case IBV_WC_LOC_QP_OP_ERR:
        *why = "verbs: local QP operation error (IBV_WC_LOC_QP_OP_ERR): port or path down";
        return ROV_ERR_UNREACHABLE;
    case IBV_WC_WR_FLUSH_ERR:
        *why = "verbs: work request flushed (IBV_WC_WR_FLUSH_ERR): QP in error state";
        return ROV_ERR_RESET;
    case IBV_WC_REM_ABORT_ERR:
        *why = "verbs: remote aborted (IBV_WC_REM_ABORT_ERR)";
        return ROV_ERR_RESET;
    case IBV_WC_REM_OP_ERR:
        *why = "verbs: remote operation error (IBV_WC_REM_OP_ERR)";
        return ROV_ERR_RESET;
    case IBV_WC_FATAL_ERR:
        *why = "verbs: fatal device error (IBV_WC_FATAL_ERR)";
        return ROV_ERR_IO;
    case IBV_WC_REM_ACCESS_ERR:
        *why = "verbs: remote access error (IBV_WC_REM_ACCESS_ERR): bad rkey from peer";
        return ROV_ERR_PROTO;
    case IBV_WC_REM_INV_REQ_ERR:
        *why = "verbs: remote invalid request (IBV_WC_REM_INV_REQ_ERR)";
        return ROV_ERR_PROTO;
    case IBV_WC_LOC_LEN_ERR:
        *why = "verbs: local length error (IBV_WC_LOC_LEN_ERR): message larger than buffer";
        return ROV_ERR_PROTO;
    case IBV_WC_LOC_PROT_ERR:
        *why = "verbs: local protection error (IBV_WC_LOC_PROT_ERR)";
        return ROV_ERR_PROTO;
    default:
        *why = "verbs: work completion error";
        return ROV_ERR_IO;
    }
}

/* Posting -------------------------------------------------------------------- */

static uint8_t *rslot(struct vb_chan *c, uint32_t i) { return c->rbufs + (size_t)i * c->rail->eager; }
static uint8_t *sslot(struct vb_chan *c, uint32_t i) { return c->sbufs + (size_t)i * c->rail->eager; }

static int post_recv(struct vb_chan *c, uint32_t i)
{
    struct ibv_sge sge = {(uintptr_t)rslot(c, i), (uint32_t)c->rail->eager, c->rmr->lkey};
    struct ibv_recv_wr wr = {.wr_id = WR_ID(VB_WR_RECV, i), .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad;

    return ibv_post_recv(c->qp, &wr, &bad);
}

/* Post one message carrying `type` and the owed credits in its immediate
 * data: a SEND_WITH_IMM, or with big != NULL the RDMA WRITE WITH IMM of a
 * large frame into the peer's staging buffer.  0 or errno.  sge may be NULL
 * (no payload). */
static int post_msg(struct vb_chan *c, enum vb_msg type, struct ibv_sge *sge, int nsge,
                    uint64_t wr_id, bool inl, const struct vb_big *big)
{
    struct ibv_send_wr wr = {0}, *bad;
    uint32_t d = c->owed_data > 0xffff ? 0xffff : c->owed_data;
    uint32_t k = c->owed_ctrl > 0xff ? 0xff : c->owed_ctrl;
    int rc;

    wr.wr_id = wr_id;
    wr.sg_list = sge;
    wr.num_sge = nsge;
    wr.opcode = big ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_SEND_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0);
    wr.imm_data = htonl(IMM(type, d, k));
    if (big) {
        wr.wr.rdma.remote_addr = big->raddr;
        wr.wr.rdma.rkey = big->rkey;
    }
    rc = ibv_post_send(c->qp, &wr, &bad);
    if (rc == 0) {
        c->owed_data -= d;
        c->owed_ctrl -= k;
        c->sq_out++;
        c->last_post_ns = rov_now_ns();
    }
    return rc;
}

static int post_send(struct vb_chan *c, enum vb_msg type, struct ibv_sge *sge, int nsge,
                     uint64_t wr_id, bool inl)
{
    return post_msg(c, type, sge, nsge, wr_id, inl, NULL);
}

static bool can_send(struct vb_chan *c, enum vb_msg type)
{
    if (c->sq_out >= c->sq_max)
        return false;
    return type == VB_MSG_CREDIT ? c->ctrl_credits > 0 : c->credits > 0;
}

/* Copy len bytes of iov (skipping nothing) into dst. */
static void iov_copy(uint8_t *dst, const struct iovec *iov, int iovcnt)
{
    for (int i = 0; i < iovcnt; i++) {
        memcpy(dst, iov[i].iov_base, iov[i].iov_len);
        dst += iov[i].iov_len;
    }
}

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
    size_t n = 0;

    for (int i = 0; i < iovcnt; i++)
        n += iov[i].iov_len;
    return n;
}

/* Send a small message now (caller checked can_send and that a slot is
 * free unless it goes inline). */
static int send_small(struct vb_chan *c, enum vb_msg type, const struct iovec *iov, int iovcnt,
                      size_t len)
{
    struct ibv_sge sge[ROV_RAIL_MAX_IOV];
    uint64_t bytes = type == VB_MSG_FRAME ? WR_BYTES(len) : 0; /* see vb_chan.queued */
    int rc;

    if (len == 0)
        return post_send(c, type, NULL, 0, WR_ID(VB_WR_INLINE, 0), false);
    if (len <= c->rail->max_inline && iovcnt <= ROV_RAIL_MAX_IOV) {
        for (int i = 0; i < iovcnt; i++) {
            sge[i].addr = (uintptr_t)iov[i].iov_base;
            sge[i].length = (uint32_t)iov[i].iov_len;
            sge[i].lkey = 0;
        }
        return post_send(c, type, sge, iovcnt, WR_ID(VB_WR_INLINE, 0) | bytes, true);
    }
    uint32_t slot = c->sfree[--c->nfree];

    iov_copy(sslot(c, slot), iov, iovcnt);
    sge[0].addr = (uintptr_t)sslot(c, slot);
    sge[0].length = (uint32_t)len;
    sge[0].lkey = c->smr->lkey;
    rc = post_send(c, type, sge, 1, WR_ID(VB_WR_SEND, slot) | bytes, false);
    if (rc)
        c->sfree[c->nfree++] = slot;
    return rc;
}

static bool slot_ok(struct vb_chan *c, size_t len)
{
    return len == 0 || len <= c->rail->max_inline || c->nfree > 0;
}

static void post_failed(struct vb_chan *c, int rc)
{
    rov_error(VB, "ibv_post_send on qp %u: %s", c->qp->qp_num, strerror(rc));
    fail(c, ROV_ERR_IO, "verbs: ibv_post_send failed (QP in error state)");
}

/* Announce a large frame: register it (or a copy) and SEND an RTS with its
 * length and header; the payload is written when the peer's CTS comes. */
static rov_status_t send_big(struct vb_chan *c, const struct iovec *iov, int iovcnt,
                             void *cookie)
{
    struct vb_big *b = calloc(1, sizeof(*b));
    uint8_t msg[sizeof(struct vb_rts) + ROV_WIRE_HDR_LEN + ROV_SEND_PREFIX_MAX];
    struct vb_rts rts;
    size_t inl = 0;
    struct iovec one;
    int rc;

    if (!b)
        return ROV_ERR_NOMEM;
    if (cookie && iovcnt == 2 && iov[0].iov_len <= ROV_WIRE_HDR_LEN + ROV_SEND_PREFIX_MAX) {
        inl = iov[0].iov_len;       /* header (and prefix) inline, payload written in place */
        b->base = iov[1].iov_base;
        b->len = iov[1].iov_len;
    } else if (cookie && iovcnt == 1) {
        b->base = iov[0].iov_base;
        b->len = iov[0].iov_len;
    } else {
        /* No cookie: the memory is not ours after return, so copy it. */
        b->len = iov_total(iov, iovcnt);
        b->copy = malloc(b->len);
        if (!b->copy) {
            free(b);
            return ROV_ERR_NOMEM;
        }
        iov_copy(b->copy, iov, iovcnt);
        b->base = b->copy;
    }
    b->reg = rov_regcache_get(c->rail->regcache, b->base, b->len, false);
    if (!b->reg) {
        free(b->copy);
        free(b);
        return ROV_ERR_NOMEM;
    }
    rts.len = htonl((uint32_t)b->len);
    rts.inl = htonl((uint32_t)inl);
    memcpy(msg, &rts, sizeof(rts));
    if (inl)
        memcpy(msg + sizeof(rts), iov[0].iov_base, inl);
    one.iov_base = msg;
    one.iov_len = sizeof(rts) + inl;
    rc = send_small(c, VB_MSG_RTS, &one, 1, one.iov_len);
    if (rc) {
        rov_regcache_put(c->rail->regcache, b->reg);
        free(b->copy);
        free(b);
        post_failed(c, rc);
        return ROV_ERR_IO;
    }
    c->credits--;
    b->cookie = cookie;
    b->frame = inl + b->len;
    if (c->big_tail)
        c->big_tail->next = b;
    else
        c->big_head = b;
    c->big_tail = b;
    return cookie ? ROV_INPROGRESS : ROV_OK;
}

/* Write the large frames whose CTS came, in order, as credits allow. */
static void post_writes(struct vb_chan *c)
{
    for (struct vb_big *b = c->big_head; b && !c->dead; b = b->next) {
        struct ibv_sge sge;
        int rc;

        if (b->posted)
            continue;
        if (!b->cts || !can_send(c, VB_MSG_DONE))
            return;
        sge.addr = (uintptr_t)b->base;
        sge.length = (uint32_t)b->len;
        sge.lkey = rov_reg_lkey(b->reg);
        rc = post_msg(c, VB_MSG_DONE, &sge, 1, WR_ID(VB_WR_WRITE, 0), false, b);
        if (rc) {
            post_failed(c, rc);
            return;
        }
        c->credits--;
        b->posted = true;
    }
}

/* The peer's staging buffer for the oldest announced frame without one. */
static void cts_received(struct vb_chan *c, const uint8_t *msg, size_t len)
{
    struct vb_cts cts;
    struct vb_big *b = c->big_head;

    while (b && b->cts)
        b = b->next;
    if (len != sizeof(cts) || !b) {
        fail(c, ROV_ERR_PROTO, "verbs: CTS from peer without a large frame announced");
        return;
    }
    memcpy(&cts, msg, sizeof(cts));
    if (ntohl(cts.len) != b->len) {
        fail(c, ROV_ERR_PROTO, "verbs: CTS from peer for a different length");
        return;
    }
    b->raddr = be64toh(cts.addr);
    b->rkey = ntohl(cts.rkey);
    b->cts = true;
    post_writes(c);
}

/* Our write of the oldest large frame completed: the peer has it. */
static void write_done(struct vb_chan *c)
{
    struct vb_big *b = c->big_head;

    if (!b || !b->posted)
        return;
    c->big_head = b->next;
    if (!c->big_head)
        c->big_tail = NULL;
    c->queued -= b->frame;
    rov_regcache_put(c->rail->regcache, b->reg);
    free(b->copy);
    if (b->cookie)
        rov_rail_send_done(&c->base, b->cookie);
    free(b);
}

/* Reads (rov_conn_get()) ------------------------------------------------------ */

/* Post the queued reads, in order, as the QP's outstanding reads allow. */
static void post_reads(struct vb_chan *c)
{
    for (struct vb_get *g = c->get_head; g && !c->dead && c->rd_out < VB_MAX_RD_ATOMIC;
         g = g->next) {
        struct ibv_sge sge = {(uintptr_t)g->local, g->len, g->lkey};
        struct ibv_send_wr wr = {0}, *bad;
        int rc;

        if (g->posted)
            continue;
        wr.wr_id = WR_ID(VB_WR_READ, 0);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_READ;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = g->raddr;
        wr.wr.rdma.rkey = g->rkey;
        rc = ibv_post_send(c->qp, &wr, &bad);
        if (rc) {
            post_failed(c, rc);
            return;
        }
        c->rd_out++;
        c->last_post_ns = rov_now_ns();
        g->posted = true;
    }
}

/* The oldest posted read completed (status ROV_OK: its data is in place). */
static void read_done(struct vb_chan *c, rov_status_t status)
{
    struct vb_get *g = c->get_head;

    if (!g || !g->posted)
        return;
    c->get_head = g->next;
    if (!c->get_head)
        c->get_tail = NULL;
    rov_rail_get_done(&c->base, g->cookie, status);
    free(g);
}

static rov_status_t vb_mem_reg(struct rov_rail *rail, void *addr, size_t len, void **handle_p,
                               uint32_t *key_p)
{
    struct vb_rail *r = (struct vb_rail *)rail;
    struct rov_reg *reg = rov_regcache_get(r->regcache, addr, len, true);

    if (!reg)
        return ROV_ERR_IO; /* logged */
    *handle_p = reg;
    *key_p = rov_reg_rkey(reg);
    return ROV_OK;
}

static void vb_mem_dereg(struct rov_rail *rail, void *handle)
{
    rov_regcache_put(((struct vb_rail *)rail)->regcache, handle);
}

static rov_status_t vb_get(struct rov_chan *chan, void *local, void *handle, uint64_t raddr,
                           uint32_t key, size_t len, void *cookie)
{
    struct vb_chan *c = (struct vb_chan *)chan;
    struct vb_get *g;

    if (c->dead)
        return ROV_ERR_CLOSED;
    g = calloc(1, sizeof(*g));
    if (!g)
        return ROV_ERR_NOMEM;
    g->cookie = cookie;
    g->local = local;
    g->lkey = rov_reg_lkey(handle);
    g->rkey = key;
    g->raddr = raddr;
    g->len = (uint32_t)len;
    if (c->get_tail)
        c->get_tail->next = g;
    else
        c->get_head = g;
    c->get_tail = g;
    post_reads(c);
    return ROV_INPROGRESS;
}

/* Try one message now.  ROV_ERR_AGAIN: no credit, slot or send queue room. */
static rov_status_t try_send(struct vb_chan *c, enum vb_msg type, const struct iovec *iov,
                             int iovcnt, void *cookie)
{
    size_t len = iov_total(iov, iovcnt);
    int rc;

    if (!can_send(c, type))
        return ROV_ERR_AGAIN;
    if (type == VB_MSG_FRAME && len > c->eager_max) {
        /* The RTS carries the header (and a prefix) of a two-piece frame. */
        if (c->nfree == 0 &&
            sizeof(struct vb_rts) + (iovcnt == 2 ? iov[0].iov_len : 0) > c->rail->max_inline)
            return ROV_ERR_AGAIN;
        return send_big(c, iov, iovcnt, cookie);
    }
    if (!slot_ok(c, len))
        return ROV_ERR_AGAIN;
    rc = send_small(c, type, iov, iovcnt, len);
    if (rc) {
        post_failed(c, rc);
        return ROV_ERR_IO;
    }
    if (type == VB_MSG_CREDIT)
        c->ctrl_credits--;
    else
        c->credits--;
    return ROV_OK;
}

static void pend_push(struct vb_chan *c, struct vb_pend *p)
{
    p->next = NULL;
    if (c->pend_tail)
        c->pend_tail->next = p;
    else
        c->pend_head = p;
    c->pend_tail = p;
}

static rov_status_t pend_copy(struct vb_chan *c, enum vb_msg type, const struct iovec *iov,
                              int iovcnt)
{
    size_t len = iov_total(iov, iovcnt);
    struct vb_pend *p = malloc(sizeof(*p) + len);

    if (!p)
        return ROV_ERR_NOMEM;
    p->type = type;
    p->len = len;
    iov_copy(p->data, iov, iovcnt);
    pend_push(c, p);
    return ROV_OK;
}

/* Send what waits for credits, in order; then return credits nobody carried. */
static void flush(struct vb_chan *c)
{
    post_writes(c);
    post_reads(c);
    while (c->pend_head && !c->dead) {
        struct vb_pend *p = c->pend_head;
        struct iovec iov = {p->data, p->len};
        rov_status_t st = try_send(c, p->type, &iov, 1, NULL);

        if (st == ROV_ERR_AGAIN)
            break;
        c->pend_head = p->next;
        if (!c->pend_head)
            c->pend_tail = NULL;
        free(p);
        if (st < 0)
            return;
    }
    if (c->dead)
        return;
    /* Credit-only message: when enough is owed that the peer may be waiting
     * for it and no message of ours carried it (we may be out of credits
     * ourselves: both sides waiting would deadlock), and never just to
     * return credit-only buffers (that would ping-pong). */
    if (c->owed_data >= (c->nrecv + 3) / 4 && c->ctrl_credits > 0 && c->sq_out < c->sq_max) {
        if (try_send(c, VB_MSG_CREDIT, NULL, 0, NULL) < 0)
            return;
    }
    if (!c->pend_head && c->want_writable && c->credits > 0) {
        c->want_writable = false;
        rov_rail_writable(&c->base);
    }
}

static rov_status_t vb_send(struct rov_chan *chan, const struct iovec *iov, int iovcnt,
                            void *cookie)
{
    struct vb_chan *c = (struct vb_chan *)chan;
    rov_status_t st;

    if (c->dead)
        return ROV_ERR_RESET;
    if (!c->pend_head) {
        st = try_send(c, VB_MSG_FRAME, iov, iovcnt, cookie);
        if (st == ROV_OK || st == ROV_INPROGRESS)
            c->queued += iov_total(iov, iovcnt);
        if (st != ROV_ERR_AGAIN)
            return st;
    }
    if (cookie) {
        c->want_writable = true;
        return ROV_ERR_AGAIN;
    }
    /* Control frame: it must be taken; it goes out in order when credits come. */
    st = pend_copy(c, VB_MSG_FRAME, iov, iovcnt);
    if (st == ROV_OK)
        c->queued += iov_total(iov, iovcnt);
    return st;
}

/* Frames taken and not yet acknowledged by the peer's HCA: counted when
 * vb_send takes one (posted, or copied behind a full send queue), taken
 * off at its send completion (a large frame's at its RDMA WRITE's), every
 * send being signalled; 0 once the channel failed (its sends released). */
static uint64_t vb_chan_queued(struct rov_chan *chan)
{
    const struct vb_chan *c = (const struct vb_chan *)chan;

    return c->dead ? 0 : c->queued;
}

/* Keepalive probe: an RDMA WRITE of a counter, answered by the peer's HCA. */
static void post_probe(struct vb_chan *c)
{
    struct ibv_sge sge = {(uintptr_t)c->ka_src, sizeof(uint64_t), c->ka_mr->lkey};
    struct ibv_send_wr wr = {0}, *bad;
    int rc;

    (*c->ka_src)++;
    wr.wr_id = WR_ID(VB_WR_PROBE, 0);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    wr.wr.rdma.remote_addr = c->peer.ka_addr;
    wr.wr.rdma.rkey = c->peer.ka_rkey;
    rc = ibv_post_send(c->qp, &wr, &bad);
    if (rc)
        post_failed(c, rc);
    else {
        c->sq_out++;
        c->last_post_ns = rov_now_ns();
    }
}

/* Receive side --------------------------------------------------------------- */

static bool check_frame(struct vb_chan *c, const uint8_t *buf, size_t len)
{
    size_t flen;
    const char *why = "verbs: frame length does not match the message";

    if (rov_wire_peek(buf, len, rov_chan_rx_max_payload(&c->base), &flen, &why) != ROV_OK ||
        flen != len) {
        rov_warn(VB, "qp %u: bad frame from peer (%s); closing the channel", c->qp->qp_num, why);
        fail(c, ROV_ERR_PROTO, why);
        return false;
    }
    return true;
}

/* Give a receive buffer back to the HCA.  A SEND takes whichever buffer is
 * posted next, so the credit owed depends on the message type, not on the
 * buffer: credit-only messages return credit-only credits. */
static void repost(struct vb_chan *c, uint32_t slot, bool ctrl)
{
    int rc = post_recv(c, slot);

    if (rc) {
        rov_error(VB, "ibv_post_recv on qp %u: %s", c->qp->qp_num, strerror(rc));
        fail(c, ROV_ERR_IO, "verbs: ibv_post_recv failed (QP in error state)");
        return;
    }
    if (ctrl)
        c->owed_ctrl++;
    else
        c->owed_data++;
}

static bool stage_grow(struct vb_chan *c, struct vb_stage *st, size_t need)
{
    size_t cap = st->cap ? st->cap : 64 * 1024;
    uint8_t *nb;

    while (cap < need)
        cap *= 2;
    if (cap > c->rail->base.max_frame)
        cap = c->rail->base.max_frame;
    if (st->mr)
        ibv_dereg_mr(st->mr);
    free(st->buf);
    st->mr = NULL;
    st->cap = 0;
    st->buf = nb = aligned_alloc(4096, (cap + 4095) & ~(size_t)4095);
    if (!nb)
        return false;
    st->mr = ibv_reg_mr(c->rail->pd, nb, cap, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!st->mr)
        return false;
    st->cap = cap;
    return true;
}

/* An RTS whose turn it is: stage the frame and tell the peer where. */
static void accept_rts(struct vb_chan *c, const uint8_t *msg, size_t len)
{
    struct vb_stage *st = &c->stage[(c->stage_head + c->stage_count) % VB_STAGES];
    struct vb_rts rts;
    struct vb_cts cts;
    struct iovec iov = {&cts, sizeof(cts)};
    size_t inl, wlen;

    if (len < sizeof(rts)) {
        fail(c, ROV_ERR_PROTO, "verbs: truncated RTS from peer");
        return;
    }
    memcpy(&rts, msg, sizeof(rts));
    inl = ntohl(rts.inl);
    wlen = ntohl(rts.len);
    if (inl != len - sizeof(rts) || inl + wlen > c->rail->base.max_frame ||
        inl + wlen <= ROV_WIRE_HDR_LEN) {
        fail(c, ROV_ERR_PROTO, "verbs: RTS from peer with impossible lengths");
        return;
    }
    /* Nothing is staged for a peer that has not authenticated: its frames
     * are handshake frames, which fit a receive buffer. */
    if (inl + wlen > ROV_WIRE_HDR_LEN + rov_chan_rx_max_payload(&c->base)) {
        rov_warn(VB, "qp %u: large frame (%zu bytes) from a peer that has not authenticated; "
                 "closing the channel", c->qp->qp_num, inl + wlen);
        fail(c, ROV_ERR_PROTO, "verbs: large frame before authentication");
        return;
    }
    if (inl + wlen > st->cap && !stage_grow(c, st, inl + wlen)) {
        fail(c, ROV_ERR_NOMEM, "verbs: no memory for a large frame");
        return;
    }
    memcpy(st->buf, msg + sizeof(rts), inl);
    st->len = inl + wlen;
    st->wlen = wlen;
    c->stage_count++;
    cts.addr = htobe64((uintptr_t)st->buf + inl);
    cts.rkey = htonl(st->mr->rkey);
    cts.len = htonl((uint32_t)wlen);
    if (c->pend_head || try_send(c, VB_MSG_CTS, &iov, 1, NULL) == ROV_ERR_AGAIN)
        pend_copy(c, VB_MSG_CTS, &iov, 1);
}

/* Deliver one message in its turn (false: it must wait, or the channel
 * died). */
static bool turn(struct vb_chan *c, enum vb_msg type, const uint8_t *buf, size_t len)
{
    if (type == VB_MSG_RTS) {
        if (c->stage_count == VB_STAGES)
            return false;
        accept_rts(c, buf, len);
        return !c->dead;
    }
    if (c->stage_count) /* a frame after a large one waits for it */
        return false;
    if (!check_frame(c, buf, len))
        return false;
    rov_rail_recv(&c->base, buf, len);
    return !c->dead;
}

/* Deliver held messages until one has to wait. */
static void deliver_held(struct vb_chan *c)
{
    while (c->held_head && !c->dead && known(c)) {
        struct vb_pend *p = c->held_head;

        if (!turn(c, p->type, p->data, p->len))
            return;
        c->held_head = p->next;
        if (!c->held_head)
            c->held_tail = NULL;
        free(p);
    }
}

static void hold(struct vb_chan *c, enum vb_msg type, const uint8_t *buf, size_t len)
{
    struct vb_pend *p = malloc(sizeof(*p) + len);

    if (!p) {
        fail(c, ROV_ERR_NOMEM, "verbs: no memory");
        return;
    }
    p->next = NULL;
    p->type = type;
    p->len = len;
    memcpy(p->data, buf, len);
    if (c->held_tail)
        c->held_tail->next = p;
    else
        c->held_head = p;
    c->held_tail = p;
}

/* The peer's write of the oldest staged frame is complete. */
static void done_received(struct vb_chan *c, size_t wlen)
{
    struct vb_stage *st = &c->stage[c->stage_head];

    if (!c->stage_count || wlen != st->wlen) {
        fail(c, ROV_ERR_PROTO, "verbs: write completion from peer without a staged frame");
        return;
    }
    if (!check_frame(c, st->buf, st->len))
        return;
    c->stage_head = (c->stage_head + 1) % VB_STAGES;
    c->stage_count--;
    rov_rail_recv(&c->base, st->buf, st->len);
    if (!c->dead)
        deliver_held(c);
}

static void on_recv(struct vb_chan *c, const struct ibv_wc *wc)
{
    uint32_t slot = WR_IDX(wc->wr_id);
    uint32_t imm;
    enum vb_msg type;

    if (!(wc->wc_flags & IBV_WC_WITH_IMM) || slot >= c->nrecv + VB_NCTRL) {
        fail(c, ROV_ERR_PROTO, "verbs: message without immediate data from peer");
        return;
    }
    imm = ntohl(wc->imm_data);
    c->credits += IMM_DATA(imm);
    c->ctrl_credits += IMM_CTRL(imm);
    type = (enum vb_msg)IMM_TYPE(imm);
    if (type == VB_MSG_CREDIT) {
        repost(c, slot, true);
        return;
    }
    if (type == VB_MSG_DONE) {
        /* The data went to the staging buffer; this receive only signals. */
        repost(c, slot, false);
        if (!c->dead)
            done_received(c, wc->byte_len);
        return;
    }
    if (type > VB_MSG_DONE || wc->byte_len > c->rail->eager) {
        fail(c, ROV_ERR_PROTO, "verbs: unknown or oversized message from peer");
        return;
    }
    if (type == VB_MSG_CTS) {
        cts_received(c, rslot(c, slot), wc->byte_len);
        if (!c->dead)
            repost(c, slot, false);
        return;
    }
    /* FRAME or RTS: delivered in order; what cannot go now is copied, so
     * that the buffer goes back at once and credits keep flowing. */
    if (c->held_head || !known(c) || !turn(c, type, rslot(c, slot), wc->byte_len)) {
        if (c->dead)
            return;
        hold(c, type, rslot(c, slot), wc->byte_len);
    }
    if (!c->dead)
        repost(c, slot, false);
}

static void on_wc(struct vb_chan *c, const struct ibv_wc *wc)
{
    unsigned kind = WR_KIND(wc->wr_id);

    if (kind == VB_WR_READ)
        c->rd_out--;
    else if (kind != VB_WR_RECV)
        c->sq_out--;
    if (wc->status != IBV_WC_SUCCESS) {
        const char *why;
        rov_status_t st = wc_status(wc->status, &why);

        if (kind == VB_WR_READ) {
            rov_status_t read_st = st;

            if (wc->status == IBV_WC_REM_ACCESS_ERR) {
                /* The key came from the application (the peer's, passed
                 * on): that read fails, as the TCP rail's refusal does
                 * (ROV_ERR_INVAL: a bond does not read it again), and the
                 * QP with it (an I/O error), not the connection. */
                why = "verbs: a read named memory the peer does not expose "
                      "(IBV_WC_REM_ACCESS_ERR)";
                read_st = ROV_ERR_INVAL;
                st = ROV_ERR_IO;
            }
            read_done(c, read_st);
        }
        if (!c->dead)
            rov_info(VB, "qp %u: work completion %s (%s, vendor error 0x%x)", c->qp->qp_num,
                     why + strlen("verbs: "), ibv_wc_status_str(wc->status), wc->vendor_err);
        fail(c, st, why);
        return;
    }
    c->last_heard_ns = rov_now_ns();
    if (c->dead)
        return;
    c->queued -= WR_ID_BYTES(wc->wr_id); /* a frame's SEND: the peer's HCA has it */
    switch (kind) {
    case VB_WR_RECV:
        on_recv(c, wc);
        break;
    case VB_WR_SEND:
        c->sfree[c->nfree++] = WR_IDX(wc->wr_id);
        break;
    case VB_WR_WRITE:
        write_done(c);
        break;
    case VB_WR_READ:
        read_done(c, ROV_OK);
        break;
    default:
        break;
    }
}

/* Poll a channel's CQ dry.  Returns the number of completions. */
static int poll_chan(struct vb_chan *c)
{
    struct ibv_wc wc[VB_POLL_BATCH];
    int n, total = 0;

    do {
        n = ibv_poll_cq(c->cq, VB_POLL_BATCH, wc);
        if (n < 0) {
            fail(c, ROV_ERR_IO, "verbs: ibv_poll_cq failed");
            return total;
        }
        for (int i = 0; i < n && !c->closed; i++)
            on_wc(c, &wc[i]);
        total += n;
    } while (n == VB_POLL_BATCH && !c->closed);
    if (!c->dead && !c->closed && (total || c->pend_head || c->want_writable))
        flush(c);
    /* Every send completed: on RC, each is in the peer's receive queue. */
    if (c->want_flush && !c->dead && !c->closed && c->sq_out == 0 && !c->pend_head) {
        c->want_flush = false;
        rov_rail_flushed(&c->base);
    }
    return total;
}

/* Channel life cycle --------------------------------------------------------- */

static void release_sends(struct vb_chan *c)
{
    while (c->big_head) {
        struct vb_big *b = c->big_head;

        c->big_head = b->next;
        rov_regcache_put(c->rail->regcache, b->reg);
        free(b->copy);
        if (b->cookie)
            rov_rail_send_done(&c->base, b->cookie);
        free(b);
    }
    c->big_tail = NULL;
    while (c->get_head) {
        struct vb_get *g = c->get_head;

        c->get_head = g->next;
        rov_rail_get_done(&c->base, g->cookie, ROV_ERR_CANCELED);
        free(g);
    }
    c->get_tail = NULL;
    while (c->pend_head) {
        struct vb_pend *p = c->pend_head;

        c->pend_head = p->next;
        free(p);
    }
    c->pend_tail = NULL;
    c->queued = 0;
}

void vb_chan_free(struct vb_chan *c)
{
    vb_oob_close(c);
#ifdef ROV_HAVE_RDMACM
    if (c->cm_id)
        vb_cm_chan_free(c);
#endif
    if (c->qp)
        ibv_destroy_qp(c->qp);
    if (c->cq) {
        /* events not yet acknowledged were acknowledged in cc_cb */
        ibv_destroy_cq(c->cq);
    }
    if (c->rmr)
        ibv_dereg_mr(c->rmr);
    if (c->smr)
        ibv_dereg_mr(c->smr);
    for (int i = 0; i < VB_STAGES; i++) {
        if (c->stage[i].mr)
            ibv_dereg_mr(c->stage[i].mr);
        free(c->stage[i].buf);
    }
    if (c->ka_mr)
        ibv_dereg_mr(c->ka_mr);
    free(c->rbufs);
    free(c->sbufs);
    free(c->ka_local);
    while (c->held_head) {
        struct vb_pend *p = c->held_head;

        c->held_head = p->next;
        free(p);
    }
    free(c->sfree);
    free(c);
}

static void unlink_chan(struct vb_chan *c)
{
    struct vb_chan **pp;

    if (!c->linked)
        return;
    for (pp = &c->rail->chans; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    c->linked = false;
}

void vb_chan_close(struct rov_chan *chan)
{
    struct vb_chan *c = (struct vb_chan *)chan;
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};

    if (c->closed)
        return;
    c->closed = true;
    c->dead = true;
    /* Stop the HCA first: once the QP is in error, the peer can no longer
     * read the buffers we are about to hand back to the transport. */
    if (c->qp)
        ibv_modify_qp(c->qp, &attr, IBV_QP_STATE);
#ifdef ROV_HAVE_RDMACM
    if (c->cm_id)
        vb_cm_chan_close(c);
#endif
    release_sends(c);
    vb_oob_close(c);
    rov_rail_preauth_end(&c->preauth);
    unlink_chan(c);
    /* Freed later, outside any callback that may still hold c. */
    c->next = c->rail->graveyard;
    c->rail->graveyard = c;
}

void vb_bury(struct vb_rail *r)
{
    while (r->graveyard) {
        struct vb_chan *c = r->graveyard;

        r->graveyard = c->next;
        vb_chan_free(c);
    }
}

/* A channel with nothing of the device yet (an acceptor's before the peer
 * proved its key). */
struct vb_chan *vb_chan_shell(struct vb_rail *r, bool outbound)
{
    struct vb_chan *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    vb_refresh_port(r);
    c->rail = r;
    c->base.rail = &r->base;
    c->active = outbound;
    c->oob_fd = -1;
    return c;
}

/* Its CQ, rings and their registrations; false (logged) when they cannot
 * be had. */
bool vb_chan_buffers(struct vb_chan *c)
{
    struct vb_rail *r = c->rail;
    uint32_t ring;

    c->nrecv = r->nrecv;
    c->nsend = r->nrecv + VB_NCTRL;
    ring = c->nrecv + VB_NCTRL;
    c->sq_max = c->nsend + 1; /* + one keepalive probe */
    c->rbufs = aligned_alloc(4096, ((size_t)ring * r->eager + 4095) & ~(size_t)4095);
    c->sbufs = aligned_alloc(4096, ((size_t)c->nsend * r->eager + 4095) & ~(size_t)4095);
    c->ka_local = aligned_alloc(64, 64);
    c->sfree = calloc(c->nsend, sizeof(*c->sfree));
    if (!c->rbufs || !c->sbufs || !c->ka_local || !c->sfree)
        return false;
    memset(c->ka_local, 0, 64);
    c->ka_src = c->ka_local + 1;
    c->rmr = ibv_reg_mr(r->pd, c->rbufs, (size_t)ring * r->eager, IBV_ACCESS_LOCAL_WRITE);
    c->smr = ibv_reg_mr(r->pd, c->sbufs, (size_t)c->nsend * r->eager, 0);
    c->ka_mr = ibv_reg_mr(r->pd, c->ka_local, 64,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!c->rmr || !c->smr || !c->ka_mr) {
        rov_error(VB, "ibv_reg_mr on %s: %m", r->dev_name);
        return false;
    }
    for (uint32_t i = 0; i < c->nsend; i++)
        c->sfree[c->nfree++] = c->nsend - 1 - i;
    c->cq = ibv_create_cq(r->ctx, (int)(ring + c->sq_max), c, r->cc, 0);
    if (!c->cq) {
        rov_error(VB, "ibv_create_cq on %s: %m", r->dev_name);
        return false;
    }
    return true; /* (its CQ is armed by vb_arm(), before the application sleeps) */
}

struct vb_chan *vb_chan_alloc(struct vb_rail *r, bool outbound)
{
    struct vb_chan *c = vb_chan_shell(r, outbound);

    if (c && !vb_chan_buffers(c)) {
        vb_chan_free(c);
        return NULL;
    }
    return c;
}

void vb_qp_init_attr(struct vb_chan *c, struct ibv_qp_init_attr *qia)
{
    memset(qia, 0, sizeof(*qia));
    qia->send_cq = c->cq;
    qia->recv_cq = c->cq;
    qia->qp_type = IBV_QPT_RC;
    qia->qp_context = c;
    qia->cap.max_send_wr = c->sq_max + VB_MAX_RD_ATOMIC; /* + reads (rd_out) */
    qia->cap.max_recv_wr = c->nrecv + VB_NCTRL;
    qia->cap.max_send_sge = ROV_RAIL_MAX_IOV;
    qia->cap.max_recv_sge = 1;
    qia->cap.max_inline_data = c->rail->max_inline;
}

int vb_chan_use_qp(struct vb_chan *c, struct ibv_qp *qp)
{
    struct vb_rail *r = c->rail;
    uint32_t rnd;

    c->qp = qp;
    qp->qp_context = c;
    for (uint32_t i = 0; i < c->nrecv + VB_NCTRL; i++)
        if (post_recv(c, i)) {
            rov_error(VB, "ibv_post_recv on %s: %m", r->dev_name);
            return -1;
        }
    if (getentropy(&rnd, sizeof(rnd)) != 0)
        rnd = (uint32_t)rov_now_ns();
    c->psn = rnd & 0xffffff;
    c->last_post_ns = c->last_heard_ns = rov_now_ns();
    vb_chan_link(c);
    return 0;
}

void vb_chan_link(struct vb_chan *c)
{
    if (c->linked)
        return;
    c->linked = true;
    c->next = c->rail->chans;
    c->rail->chans = c;
}

void vb_chan_discard(struct vb_chan *c)
{
    unlink_chan(c);
    vb_chan_free(c);
}

void vb_fill_info(struct vb_chan *c, struct vb_oob *m)
{
    struct vb_rail *r = c->rail;

    memset(m, 0, sizeof(*m));
    m->magic = htonl(VB_OOB_MAGIC);
    m->version = htons(VB_OOB_VERSION);
    m->lid = htons(r->lid);
    m->qpn = htonl(c->qp->qp_num);
    m->psn = htonl(c->psn);
    memcpy(m->gid, r->gid.raw, 16);
    m->nrecv = htonl(c->nrecv);
    m->eager = htonl((uint32_t)r->eager);
    m->mtu = htonl(r->mtu);
    m->ka_rkey = htonl(c->ka_mr->rkey);
    m->ka_addr = htobe64((uintptr_t)c->ka_local);
}

rov_status_t vb_take_info(struct vb_chan *c, const struct vb_oob *m, const char **why)
{
    struct vb_rail *r = c->rail;
    struct vb_oob *p = &c->peer;

    if (ntohl(m->magic) != VB_OOB_MAGIC || ntohs(m->version) != VB_OOB_VERSION) {
        *why = "verbs: bad handshake from peer (magic or version)";
        return ROV_ERR_PROTO;
    }
    p->lid = ntohs(m->lid);
    p->qpn = ntohl(m->qpn) & 0xffffff;
    p->psn = ntohl(m->psn) & 0xffffff;
    memcpy(p->gid, m->gid, 16);
    p->nrecv = ntohl(m->nrecv);
    p->eager = ntohl(m->eager);
    p->mtu = ntohl(m->mtu);
    p->ka_rkey = ntohl(m->ka_rkey);
    p->ka_addr = be64toh(m->ka_addr);
    if (p->nrecv < 4 || p->nrecv > 0xffff || p->eager < 256 || p->eager > (1u << 20) ||
        p->mtu < IBV_MTU_256 || p->mtu > IBV_MTU_4096) {
        *why = "verbs: handshake from peer with impossible parameters";
        return ROV_ERR_PROTO;
    }
    c->credits = p->nrecv;
    c->ctrl_credits = VB_NCTRL;
    /* Eager frames must fit the peer's receive buffers (and our slots). */
    c->eager_max = p->eager < r->eager ? p->eager : r->eager;
    return ROV_OK;
}

/* Connection setup, both ways (oob.c, cm.c) ------------------------------------ */

void vb_setup_failed(struct vb_chan *c, rov_status_t st, const char *why)
{
    vb_oob_close(c);
    fail(c, st, why);
}

void vb_chan_ended(struct vb_chan *c, rov_status_t st, const char *why)
{
    if (c->qp && c->oob == OOB_NONE && !c->dead && !c->closed)
        poll_chan(c);
    if (!c->dead && !c->closed)
        fail(c, st, why);
}

void vb_chan_established(struct vb_chan *c)
{
    vb_oob_close(c);
    rov_rail_preauth_end(&c->preauth);
    if (c->active) {
        rov_rail_connected(&c->base);
        return;
    }
    c->accepted = true;
    rov_rail_accepted(&c->rail->base, &c->base);
    /* What arrived before the transport knew the channel. */
    if (!c->closed) {
        deliver_held(c);
        poll_chan(c);
    }
}

/* The transport drops an accepted peer still in its setup. */
static void preauth_expire(struct rov_preauth *p, const char *why)
{
    struct vb_chan *c = rov_container_of(p, struct vb_chan, preauth);

    (void)why;
    vb_setup_failed(c, ROV_ERR_TIMEDOUT, "verbs: connection setup not completed in time");
}

/* An accepted peer, before its setup: admitted (and timed) with the
 * transport's unauthenticated channels. */
void vb_preauth_begin(struct vb_chan *c)
{
    c->preauth.rail = &c->rail->base;
    c->preauth.expire = preauth_expire;
    vb_chan_link(c);
    rov_rail_preauth_begin(&c->rail->base, &c->preauth);
}

/* Completion channel and async events ------------------------------------------- */

static void cc_cb(struct rov_watch *w, uint32_t events)
{
    struct vb_rail *r = rov_container_of(w, struct vb_rail, cc_watch);
    struct ibv_cq *cq;
    void *ctx;

    while (ibv_get_cq_event(r->cc, &cq, &ctx) == 0) {
        struct vb_chan *c = ctx;

        ibv_ack_cq_events(cq, 1);
        if (c->closed)
            continue;
        c->armed = false; /* the event disarmed it: vb_arm() before the next sleep */
        poll_chan(c);
    }
    vb_bury(r);
}

void vb_fail_all(struct vb_rail *r, rov_status_t st, const char *why)
{
    struct vb_chan *c, *next;

    for (c = r->chans; c; c = next) {
        next = c->next;
        if (c->oob != OOB_NONE)
            vb_setup_failed(c, st, why);
        else
            fail(c, st, why);
    }
}

static const char *event_name(enum ibv_event_type t)
{
    switch (t) {
    case IBV_EVENT_CQ_ERR: return "IBV_EVENT_CQ_ERR";
    case IBV_EVENT_QP_FATAL: return "IBV_EVENT_QP_FATAL";
    case IBV_EVENT_QP_REQ_ERR: return "IBV_EVENT_QP_REQ_ERR";
    case IBV_EVENT_QP_ACCESS_ERR: return "IBV_EVENT_QP_ACCESS_ERR";
    case IBV_EVENT_COMM_EST: return "IBV_EVENT_COMM_EST";
    case IBV_EVENT_SQ_DRAINED: return "IBV_EVENT_SQ_DRAINED";
    case IBV_EVENT_PATH_MIG: return "IBV_EVENT_PATH_MIG";
    case IBV_EVENT_PATH_MIG_ERR: return "IBV_EVENT_PATH_MIG_ERR";
    case IBV_EVENT_DEVICE_FATAL: return "IBV_EVENT_DEVICE_FATAL";
    case IBV_EVENT_PORT_ACTIVE: return "IBV_EVENT_PORT_ACTIVE";
    case IBV_EVENT_PORT_ERR: return "IBV_EVENT_PORT_ERR";
    case IBV_EVENT_LID_CHANGE: return "IBV_EVENT_LID_CHANGE";
    case IBV_EVENT_PKEY_CHANGE: return "IBV_EVENT_PKEY_CHANGE";
    case IBV_EVENT_SM_CHANGE: return "IBV_EVENT_SM_CHANGE";
    case IBV_EVENT_GID_CHANGE: return "IBV_EVENT_GID_CHANGE";
    case IBV_EVENT_QP_LAST_WQE_REACHED: return "IBV_EVENT_QP_LAST_WQE_REACHED";
    case IBV_EVENT_CLIENT_REREGISTER: return "IBV_EVENT_CLIENT_REREGISTER";
    default: return "IBV_EVENT_?";
    }
}

static void async_cb(struct rov_watch *w, uint32_t events)
{
    struct vb_rail *r = rov_container_of(w, struct vb_rail, async_watch);
    struct ibv_async_event ev;

    while (ibv_get_async_event(r->ctx, &ev) == 0) {
        enum ibv_event_type t = ev.event_type;
        struct vb_chan *c = NULL;

        rov_info(VB, "%s: async event %s (%s)", r->dev_name, event_name(t), ibv_event_type_str(t));
        switch (t) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
            c = ev.element.qp->qp_context;
            fail(c, t == IBV_EVENT_QP_FATAL ? ROV_ERR_RESET : ROV_ERR_PROTO,
                 t == IBV_EVENT_QP_FATAL    ? "verbs: QP fatal error (IBV_EVENT_QP_FATAL)"
                 : t == IBV_EVENT_QP_REQ_ERR ? "verbs: invalid request (IBV_EVENT_QP_REQ_ERR)"
                                             : "verbs: access violation (IBV_EVENT_QP_ACCESS_ERR)");
            break;
        case IBV_EVENT_CQ_ERR:
            c = ev.element.cq->cq_context;
            fail(c, ROV_ERR_IO, "verbs: CQ overrun (IBV_EVENT_CQ_ERR)");
            break;
        case IBV_EVENT_PORT_ERR:
            if (ev.element.port_num == r->port) {
                r->port_down = true;
                r->down_why = "verbs: port down (IBV_EVENT_PORT_ERR)";
                rov_rail_link_down(&r->base, r->down_why); /* connections: failover.link */
                vb_fail_all(r, ROV_ERR_UNREACHABLE, r->down_why); /* channels in setup */
            }
            break;
        case IBV_EVENT_PORT_ACTIVE:
            if (ev.element.port_num == r->port) {
                r->port_down = false;
                vb_refresh_port(r);
                rov_rail_link_up(&r->base); /* failed channels retry now */
            }
            break;
        case IBV_EVENT_GID_CHANGE:
            if (ev.element.port_num == r->port)
                vb_refresh_port(r);
            break;
        case IBV_EVENT_DEVICE_FATAL:
            r->device_dead = true;
            r->down_why = "verbs: device failed (IBV_EVENT_DEVICE_FATAL)";
            vb_fail_all(r, ROV_ERR_IO, r->down_why);
            break;
        default:
            break;
        }
        ibv_ack_async_event(&ev);
    }
    vb_bury(r);
}

/* Rail ops ------------------------------------------------------------------- */

int vb_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Pick the GID: RoCE v2 with an IPv4-mapped address first (routable, and it
 * names the OOB address), then any RoCE v2, then index 0. */
static int pick_gid(struct vb_rail *r, struct ibv_port_attr *pa)
{
    int best = -1, best_rank = 0;

    for (int i = 0; i < pa->gid_tbl_len && i < 64; i++) {
        struct ibv_gid_entry e;
        int rank;
        static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

        if (ibv_query_gid_ex(r->ctx, r->port, (uint32_t)i, &e, 0))
            continue;
        if (!memcmp(e.gid.raw, (uint8_t[16]){0}, 16))
            continue;
        rank = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? 2 : 1;
        if (rank == 2 && !memcmp(e.gid.raw, v4, 12))
            rank = 3;
        if (rank > best_rank) {
            best = i;
            best_rank = rank;
        }
    }
    return best < 0 ? 0 : best;
}

void vb_refresh_port(struct vb_rail *r)
{
    struct ibv_port_attr pa;
    union ibv_gid gid;
    int idx;

    if (ibv_query_port(r->ctx, r->port, &pa) != 0)
        return;
    r->mtu = pa.active_mtu;
    r->lid = pa.lid;
    idx = r->gid_fixed ? r->gid_index : pick_gid(r, &pa);
    if (ibv_query_gid(r->ctx, r->port, idx, &gid) != 0)
        return;
    if (idx != r->gid_index || memcmp(&gid, &r->gid, sizeof(gid)) != 0)
        rov_info(VB, "%s port %u: now using GID index %d (was %d)", r->dev_name, r->port, idx,
                 r->gid_index);
    r->gid_index = idx;
    r->gid = gid;
}

bool vb_use_port(struct vb_rail *r, struct ibv_context *ctx, unsigned port, bool require_active)
{
    struct ibv_port_attr pa;

    if (ibv_query_port(ctx, (uint8_t)port, &pa) != 0 ||
        (require_active && pa.state != IBV_PORT_ACTIVE))
        return false;
    r->ctx = ctx;
    snprintf(r->dev_name, sizeof(r->dev_name), "%s", ibv_get_device_name(ctx->device));
    r->port = (uint8_t)port;
    r->lid = pa.lid;
    r->mtu = pa.active_mtu;
    r->global = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    r->port_down = pa.state != IBV_PORT_ACTIVE;
    r->gid_index = pick_gid(r, &pa);
    return true;
}

/* "dev[:port]" -> open it if it exists and (when require_active) is up. */
static rov_status_t open_dev(struct vb_rail *r, const char *want, bool require_active)
{
    struct ibv_device **list;
    char name[64];
    unsigned port = 1;
    const char *colon = strchr(want, ':');
    int n;
    rov_status_t st = ROV_ERR_NOT_FOUND;

    snprintf(name, sizeof(name), "%.*s", colon ? (int)(colon - want) : (int)strlen(want), want);
    if (colon) {
        char *end;

        port = (unsigned)strtoul(colon + 1, &end, 10);
        if (*end || port < 1 || port > 255)
            return ROV_ERR_INVAL;
    }
#ifdef ROV_HAVE_RDMACM
    if (r->cm)
        return vb_cm_open(r, name, port, require_active);
#endif
    list = ibv_get_device_list(&n);
    if (!list)
        return ROV_ERR_NOT_FOUND;
    for (int i = 0; i < n && st != ROV_OK; i++) {
        struct ibv_context *ctx;

        if (*name && strcmp(ibv_get_device_name(list[i]), name) != 0)
            continue;
        ctx = ibv_open_device(list[i]);
        if (!ctx)
            continue;
        if (vb_use_port(r, ctx, port, require_active))
            st = ROV_OK;
        else
            ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return st;
}

static void vb_close(struct rov_rail *rail);

/* The rail's settings (transport/settings.h) ----------------------------- */

enum { VB_CM_OOB = 0, VB_CM_RDMACM = 1 }; /* RAILOVER_VERBS_CM, in choice order */

struct vb_settings {
    char dev[128];      /* device[:port],... tried in order; empty: any active */
    int cm;             /* VB_CM_*: how QPs are connected */
    int gid_index;      /* -1: auto (RoCE v2 IPv4-mapped first) */
    uint64_t timeout;   /* RC local ACK timeout exponent: 4.096 us * 2^n */
    uint64_t retry;     /* RC retry count (7 = infinite on rxe) */
    uint64_t eager;     /* bytes per receive buffer; larger frames: RDMA READ */
    uint64_t recv;      /* receive buffers (= credits) per channel */
    uint64_t regcache;  /* bytes of idle registrations kept; 0: none */
};

static void vb_defaults(void *block)
{
    struct vb_settings *s = block;

    s->cm = VB_CM_OOB;
    s->gid_index = -1;
    s->timeout = 14;
    s->retry = 6;
    /* Room for 8 KiB of payload with the wire header and an embedder's
     * (ob1's match header): an 8 KiB MPI message is one SEND, as with UCX
     * (an RTS/CTS round trip cost it 1.6x pml ucx's time).  A multiple of
     * the page: with 8 KiB + 64 (UCX's RC segment) the slots drift across
     * page boundaries, and 1 KiB messages took 1.09x as long on rxe
     * (bench/README.md). */
    s->eager = 12 * 1024;
    s->recv = 64;
    s->regcache = 256ull << 20;
}

#define VB_OFF(f) offsetof(struct vb_settings, f)

static const struct rov_var vb_vars[] = {
    {"RAILOVER_VERBS_DEV", ROV_VAR_DEVLIST, VB_OFF(dev), sizeof(((struct vb_settings *)0)->dev),
     0, 0, NULL,
     "RDMA devices of verbs rails without @DEV: dev[:port],... first active wins (empty: any)"},
    {"RAILOVER_VERBS_CM", ROV_VAR_CHOICE, VB_OFF(cm), 0, 0, 0, "oob|rdmacm",
     "how verbs QPs are connected: oob (TCP handshake, checkpointable) or rdmacm"},
    {"RAILOVER_VERBS_GID_INDEX", ROV_VAR_INDEX, VB_OFF(gid_index), 0, 0, 255, NULL,
     "GID table index (auto: RoCE v2 with an IPv4 address first)"},
    {"RAILOVER_VERBS_TIMEOUT", ROV_VAR_COUNT, VB_OFF(timeout), 0, 1, 31, NULL,
     "RC ACK timeout exponent, 4.096us*2^N (14 = 67ms; lower gives false alarms on Soft-RoCE)"},
    {"RAILOVER_VERBS_RETRY", ROV_VAR_COUNT, VB_OFF(retry), 0, 1, 7, NULL,
     "RC retry count; a dead path errors after about (N+1)*timeout (7 = retry forever on rxe)"},
    {"RAILOVER_VERBS_EAGER", ROV_VAR_SIZE, VB_OFF(eager), 0, 1024, 1024 * 1024, NULL,
     "receive buffer size; larger frames are RDMA-written into a staging buffer of the receiver"},
    {"RAILOVER_VERBS_RECV", ROV_VAR_COUNT, VB_OFF(recv), 0, 4, 4096, NULL,
     "pre-posted receive buffers (send credits) per verbs channel"},
    {"RAILOVER_VERBS_REGCACHE", ROV_VAR_SIZE, VB_OFF(regcache), 0, 0, 1024ull << 30, NULL,
     "memory registrations kept for reuse after use, while their memory stays "
     "mapped (0: register per message)"},
};

static struct rov_settings vb_settings = {
    .layer = "verbs",
    .vars = vb_vars,
    .nvars = sizeof(vb_vars) / sizeof(vb_vars[0]),
    .size = sizeof(struct vb_settings),
    .defaults = vb_defaults,
};

static rov_status_t vb_open(rov_context_t *ctx, const struct rov_rail_spec *spec,
                            const struct rov_rail_env *env, const void *settings,
                            struct rov_rail **rail_p)
{
    const struct vb_settings *set = settings;
    struct vb_rail *r = rov_zalloc_lines(sizeof(*r));
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    rov_status_t st = ROV_ERR_NOT_FOUND;
    char list[sizeof(set->dev)];
    char *save, *tok;

    if (!r)
        return ROV_ERR_NOMEM;
    r->base.ctx = ctx;
    r->listen_fd = -1;
    r->nrecv = (uint32_t)set->recv;
    r->eager = set->eager;
    r->timeout = (uint8_t)set->timeout;
    r->retry = (uint8_t)set->retry;
    r->keepalive_ns = env->keepalive_ns;
    r->cm = set->cm == VB_CM_RDMACM;
#ifndef ROV_HAVE_RDMACM
    if (r->cm) {
        rov_error(VB, "rail %s: RAILOVER_VERBS_CM=rdmacm, but this build has no librdmacm",
                  spec->name);
        free(r);
        return ROV_ERR_UNSUPPORTED;
    }
#endif
    /* verbs@dev[:port], else the first active entry of RAILOVER_VERBS_DEV,
     * else the first active port of any device. */
    snprintf(list, sizeof(list), "%s", spec->arg[0] ? spec->arg : set->dev);
    if (!list[0]) {
        st = open_dev(r, "", true);
    } else {
        for (tok = strtok_r(list, ",", &save); tok && st != ROV_OK;
             tok = strtok_r(NULL, ",", &save))
            st = open_dev(r, tok, !spec->arg[0]);
    }
    if (st != ROV_OK) {
        rov_error(VB, "rail %s: no %sRDMA device%s%s", spec->name,
                  spec->arg[0] ? "" : "active ", spec->arg[0] || list[0] ? " matching " : "",
                  spec->arg[0] ? spec->arg : set->dev);
        free(r);
        return st == ROV_ERR_INVAL ? ROV_ERR_INVAL : ROV_ERR_NOT_FOUND;
    }
    if (set->gid_index >= 0) {
        r->gid_index = set->gid_index;
        r->gid_fixed = true;
    }
    if (ibv_query_gid(r->ctx, r->port, r->gid_index, &r->gid) || ibv_query_device(r->ctx, &da)) {
        rov_error(VB, "%s: cannot query GID %d / device: %m", r->dev_name, r->gid_index);
        goto fail;
    }
    if (ibv_query_port(r->ctx, r->port, &pa) == 0)
        r->base.get_max = pa.max_msg_sz; /* an RDMA READ's limit (rov_conn_get()) */
    if (r->nrecv + VB_NCTRL + 2 + VB_MAX_RD_ATOMIC > (uint32_t)da.max_qp_wr)
        r->nrecv = (uint32_t)da.max_qp_wr - VB_NCTRL - 2 - VB_MAX_RD_ATOMIC;
    r->max_inline = 128;
    r->pd = ibv_alloc_pd(r->ctx);
    r->cc = ibv_create_comp_channel(r->ctx);
    if (!r->pd || !r->cc || vb_set_nonblock(r->cc->fd) || vb_set_nonblock(r->ctx->async_fd)) {
        rov_error(VB, "%s: cannot allocate a protection domain or completion channel: %m",
                  r->dev_name);
        goto fail;
    }
    r->regcache = rov_regcache_new(r->pd, set->regcache);
    if (!r->regcache)
        goto fail;
    /* OOB address: the IPv4 address in the RoCE GID, else the TCP interface. */
    if (!memcmp(r->gid.raw, (uint8_t[12]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 12)) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&r->oob_local;

        sin->sin_family = AF_INET;
        memcpy(&sin->sin_addr, r->gid.raw + 12, 4);
        r->oob_local_len = sizeof(*sin);
    } else if (rov_net_resolve(VB, env->default_if, &r->oob_local, &r->oob_local_len, NULL, 0) !=
               ROV_OK) {
        goto fail;
    }
    r->cc_watch.fd = r->cc->fd;
    r->cc_watch.cb = cc_cb;
    r->async_watch.fd = r->ctx->async_fd;
    r->async_watch.cb = async_cb;
    if (rov_ctx_watch(ctx, &r->cc_watch, EPOLLIN) != ROV_OK ||
        rov_ctx_watch_urgent(ctx, &r->async_watch, EPOLLIN) != ROV_OK)
        goto fail;
    {
        char ip[64];

        rov_net_sockaddr_str(&r->oob_local, ip, sizeof(ip));
        rov_info(VB, "rail %s: %s port %u, gid index %d, mtu %s, link %s, handshake via %s",
                 spec->name, r->dev_name, r->port, r->gid_index, mtu_str(r->mtu),
                 r->global ? "ethernet (RoCE)" : "infiniband", ip);
    }
    *rail_p = &r->base;
    return ROV_OK;
fail:
    r->base.spec = spec;
    vb_close(&r->base);
    return ROV_ERR_IO;
}

static void vb_close(struct rov_rail *rail)
{
    struct vb_rail *r = (struct vb_rail *)rail;

    while (r->chans) {
        struct vb_chan *c = r->chans;

        c->dead = true; /* no upcalls */
        vb_chan_close(&c->base);
    }
    vb_bury(r);
    vb_unlisten(rail);
    if (r->cc) {
        if (r->cc_watch.fd)
            rov_ctx_unwatch(rail->ctx, &r->cc_watch);
        ibv_destroy_comp_channel(r->cc);
    }
    if (r->ctx && r->async_watch.fd)
        rov_ctx_unwatch(rail->ctx, &r->async_watch);
    rov_regcache_free(r->regcache);
    if (r->pd)
        ibv_dealloc_pd(r->pd);
#ifdef ROV_HAVE_RDMACM
    if (r->cm) {
        /* librdmacm owns the device context, and keeps it open for the
         * life of the process (why oob is the default). */
        vb_cm_close(r);
        r->ctx = NULL;
    }
#endif
    /* Closing the device releases the last /dev/infiniband descriptor. */
    if (r->ctx)
        ibv_close_device(r->ctx);
    free(r);
}

static rov_status_t vb_listen(struct rov_rail *rail, void *addr, size_t *len_p)
{
    struct vb_rail *r = (struct vb_rail *)rail;

#ifdef ROV_HAVE_RDMACM
    if (r->cm && !r->addr_len) {
        rov_status_t st = vb_cm_listen(r);

        if (st != ROV_OK)
            return st;
    }
#endif
    if (!r->cm && r->listen_fd < 0) {
        rov_status_t st = vb_oob_listen(r);

        if (st != ROV_OK)
            return st;
    }
    memcpy(addr, r->addr, r->addr_len);
    *len_p = r->addr_len;
    return ROV_OK;
}

static rov_status_t vb_connect(struct rov_rail *rail, const void *addr, size_t len,
                               struct rov_chan **chan_p)
{
    struct vb_rail *r = (struct vb_rail *)rail;
    struct sockaddr_storage peer;
    socklen_t pl;
    struct vb_chan *c;
    rov_status_t st;

    if (rov_net_addr_decode(addr, len, &peer, &pl) != ROV_OK)
        return ROV_ERR_INVAL;
    if (r->port_down || r->device_dead) {
        rov_debug(VB, "rail %s: not connecting: %s", rail->spec->name, r->down_why);
        return ROV_ERR_UNREACHABLE;
    }
#ifdef ROV_HAVE_RDMACM
    if (r->cm) {
        st = vb_cm_connect(r, &peer, &c);
        if (st == ROV_OK)
            *chan_p = &c->base;
        return st;
    }
#endif
    st = vb_oob_connect(r, &peer, pl, &c);
    if (st == ROV_OK)
        *chan_p = &c->base;
    return st;
}

static int vb_progress(struct rov_rail *rail)
{
    struct vb_rail *r = (struct vb_rail *)rail;
    struct vb_chan *c, *next;
    int n = 0;

    for (c = r->chans; c; c = next) {
        next = c->next;
        if (c->oob == OOB_NONE && !c->dead) {
            poll_chan(c);
            n++;
        }
    }
    vb_bury(r);
    return n;
}

/* Before the application sleeps: arm every connected channel's CQ, then poll
 * it, for what completed before the arm raised no event. */
static rov_status_t vb_arm(struct rov_rail *rail)
{
    struct vb_rail *r = (struct vb_rail *)rail;
    struct vb_chan *c, *next;
    int n = 0;

    for (c = r->chans; c; c = next) {
        next = c->next;
        if (c->oob != OOB_NONE || c->dead)
            continue;
        if (!c->armed) {
            if (ibv_req_notify_cq(c->cq, 0)) {
                fail(c, ROV_ERR_IO, "verbs: ibv_req_notify_cq failed");
                n++;
                continue;
            }
            c->armed = true;
        }
        n += poll_chan(c);
    }
    vb_bury(r);
    return n ? ROV_ERR_BUSY : ROV_OK;
}

static rov_status_t vb_chan_health(struct rov_chan *chan, struct rov_chan_health *h)
{
    struct vb_chan *c = (struct vb_chan *)chan;
    uint64_t now = rov_now_ns();

    if (c->dead)
        return ROV_ERR_RESET;
    h->peer_turn = 0;
    if (c->oob != OOB_NONE) {
        vb_oob_health(c, h);
        return ROV_OK;
    }
    /* Probe a quiet channel so that a dead path shows before it is needed. */
    if (c->sq_out == 0 && c->rail->keepalive_ns &&
        now - c->last_post_ns >= c->rail->keepalive_ns / 2)
        post_probe(c);
    h->busy = c->sq_out > 0 || c->rd_out > 0;
    h->queued = c->pend_head != NULL || c->want_writable || (c->get_tail && !c->get_tail->posted);
    h->heard_ago_ns = now - c->last_heard_ns;
    h->sent_ago_ns = now - c->last_post_ns;
    return c->dead ? ROV_ERR_RESET : ROV_OK;
}

/* A send completion on an RC QP means the peer's HCA acknowledged it: the
 * message is in the peer's receive queue (poll_chan() reports). */
static rov_status_t vb_chan_flush(struct rov_chan *chan)
{
    struct vb_chan *c = (struct vb_chan *)chan;

    c->want_flush = true;
    return ROV_INPROGRESS;
}

static void vb_chan_str(struct rov_chan *chan, char *buf, size_t len)
{
    struct vb_chan *c = (struct vb_chan *)chan;
    char g[INET6_ADDRSTRLEN] = "?";

    inet_ntop(AF_INET6, c->peer.gid, g, sizeof(g));
    snprintf(buf, len,
             "%s:%u qp %u>qp %u gid %s credits %u+%u owed %u+%u wr %u/%u%s%s large %u%s",
             c->rail->dev_name, c->rail->port, c->qp ? c->qp->qp_num : 0, c->peer.qpn, g,
             c->credits, c->ctrl_credits, c->owed_data, c->owed_ctrl, c->sq_out, c->sq_max,
             c->pend_head ? " pending" : "", c->want_writable ? " blocked" : "",
             c->stage_count, c->held_head ? " held" : "");
}

/* The port's active speed (per lane, IBV_SPEED_* codes) times its width
 * (lanes, IBV_WIDTH_*), in Mbit/s; 0 when the port does not say. */
static uint64_t vb_link_mbps(struct rov_rail *rail)
{
    struct vb_rail *r = rov_container_of(rail, struct vb_rail, base);
    struct ibv_port_attr pa;
    uint64_t lane = 0, lanes = 0;

    if (ibv_query_port(r->ctx, r->port, &pa) != 0)
        return 0;
    switch (pa.active_speed) {
    case 1: lane = 2500; break;    /* SDR */
    case 2: lane = 5000; break;    /* DDR */
    case 4: lane = 10000; break;   /* QDR */
    case 8: lane = 10313; break;   /* FDR10 */
    case 16: lane = 14063; break;  /* FDR */
    case 32: lane = 25781; break;  /* EDR */
    case 64: lane = 50000; break;  /* HDR */
    case 128: lane = 100000; break; /* NDR */
    default: return 0;
    }
    switch (pa.active_width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: return 0;
    }
    return lane * lanes;
}

static const struct rov_rail_ops vb_ops = {
    .name = "verbs",
    .settings = &vb_settings,
    .open = vb_open,
    .close = vb_close,
    .listen = vb_listen,
    .unlisten = vb_unlisten,
    .accept_resume = vb_accept_resume,
    .connect = vb_connect,
    .send = vb_send,
    .chan_close = vb_chan_close,
    .progress = vb_progress,
    .arm = vb_arm,
    .chan_health = vb_chan_health,
    .chan_flush = vb_chan_flush,
    .chan_queued = vb_chan_queued,
    .chan_str = vb_chan_str,
    .link_mbps = vb_link_mbps,
    .addr_str = rov_net_addr_str,
    .path_key = rov_net_addr_path_key,
    .mem_reg = vb_mem_reg,
    .mem_dereg = vb_mem_dereg,
    .get = vb_get,
};

ROV_RAIL_REGISTER(vb_ops)
