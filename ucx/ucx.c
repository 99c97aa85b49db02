/*
 * The UCX rail: UCP active messages over client/server endpoints.
 *
 * One UCP context and worker per rail instance (thread mode single), woken
 * through the worker's event fd in the context's epoll set and, on the busy
 * path, progressed on every rov_progress().  Transports and devices are
 * UCX's choice under the usual UCX_TLS / UCX_NET_DEVICES.
 *
 * Connections: the rail listens with ucp_listener_create on its interface's
 * address; its rail address is that listener's sockaddr (the netaddr.h
 * form).  Every endpoint uses peer error handling, and its error callback is
 * the channel's failure.  An outbound channel is connected when a flush of
 * the new endpoint completes, i.e. when the wire-up with the peer's worker
 * is done.
 *
 * Frames: one AM per frame (id UCX_AM_FRAME), the frame as the data and an
 * 8-byte channel sequence number as the AM header, sent with
 * UCP_AM_SEND_FLAG_REPLY so the receiver learns its own endpoint and finds
 * the channel by it.  The receiver hands frames up strictly in that sequence:
 * a rendezvous frame is fetched into a buffer of its own and what arrives
 * behind it is held (copied) until it is complete, so control frames, which
 * carry no transport sequence number, never overtake anything.
 *
 * Bonding (ops.chan_queued): the bytes of frames whose send request is not
 * complete (ucx_chan.send_bytes, the bound that also refuses sends); the
 * rail queues nothing itself (it refuses with ROV_ERR_AGAIN instead).
 *
 * Liveness (chan_health): a channel with sends outstanding and nothing
 * heard from the peer for half RAILOVER_FAILOVER_TIMEOUT reads 8 bytes of
 * the peer rail's keepalive word (ucp_get_nbx, an RDMA READ on RC) through
 * a probe endpoint of its own, connected to the peer rail's probe listener,
 * which the peer's HCA answers without the peer process (probe.c).  See
 * ucx_chan_health().
 *
 * UCX calls back only from ucp_worker_progress(); the transport may close a
 * channel from inside those callbacks, so closing an endpoint (which must not
 * happen inside a UCX callback) and the upcalls that are not tied to a
 * callback (connected, writable) run after progress returns, and a closed
 * channel is freed only once its endpoint is closed and no request refers
 * to it any more (requests refer to struct ucx_op records, never to a
 * channel that let go of them).
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <time.h>

#include <ucp/api/ucp.h>

#include "transport/log.h"
#include "transport/netaddr.h"
#include "transport/netlink.h"
#include "transport/rail.h"
#include "transport/wire.h"
#include "ucx/ucx.h"

/* Sends UCX has not completed, per channel, before data sends are refused. */
#define UCX_SENDS_MAX 256
#define UCX_SEND_BYTES_MAX (16u << 20)
/* Frames held behind an unfinished rendezvous; more means a lost frame. */
#define UCX_HELD_MAX 65536
/* ucp_worker_progress() rounds per drive; the rest waits for the next call. */
#define UCX_PROGRESS_ROUNDS 64
/* On rail close: how long endpoint closes may take before the worker goes. */
#define UCX_CLOSE_WAIT_NS 200000000ull
/* On rail close, before the listener goes: connection requests must have
 * been quiet this long (and at most this long is spent waiting for that). */
#define UCX_LISTENER_QUIET_NS 200000000ull
#define UCX_LISTENER_DRAIN_MAX_NS 1000000000ull

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* UCX status -> Railover status and a precise static reason, once, here. */
static rov_status_t ucs_to_rov(ucs_status_t s, const char **why_p)
{
    switch (s) {
    case UCS_ERR_ENDPOINT_TIMEOUT:
        *why_p = "ucx: endpoint timeout (the transport lost the peer: dead, reset, unreachable)";
        return ROV_ERR_TIMEDOUT;
    case UCS_ERR_TIMED_OUT:
        *why_p = "ucx: operation timed out";
        return ROV_ERR_TIMEDOUT;
    case UCS_ERR_CONNECTION_RESET:
        *why_p = "ucx: connection reset or closed by the peer";
        return ROV_ERR_RESET;
    case UCS_ERR_NOT_CONNECTED: /* what the tcp connection manager says for a refused connect */
        *why_p = "ucx: endpoint not connected (connect refused or never established)";
        return ROV_ERR_UNREACHABLE;
    case UCS_ERR_UNREACHABLE:
        *why_p = "ucx: destination unreachable";
        return ROV_ERR_UNREACHABLE;
    case UCS_ERR_REJECTED:
        *why_p = "ucx: connection rejected by the peer";
        return ROV_ERR_REFUSED;
    case UCS_ERR_NO_DEVICE:
        *why_p = "ucx: no usable transport to the peer (UCX_TLS, UCX_NET_DEVICES)";
        return ROV_ERR_UNREACHABLE;
    case UCS_ERR_IO_ERROR:
        *why_p = "ucx: input/output error in the transport";
        return ROV_ERR_IO;
    case UCS_ERR_CANCELED:
        *why_p = "ucx: operation canceled";
        return ROV_ERR_CANCELED;
    case UCS_ERR_NO_MEMORY:
        *why_p = "ucx: out of memory";
        return ROV_ERR_NOMEM;
    case UCS_ERR_MESSAGE_TRUNCATED:
        *why_p = "ucx: message truncated";
        return ROV_ERR_PROTO;
    default:
        *why_p = "ucx: transport error";
        return ROV_ERR_IO;
    }
}

static void ucx_addr_str(const void *addr, size_t len, char *buf, size_t buf_len)
{
    rov_net_addr_str(addr, len, buf, buf_len);
}

/* Ops ------------------------------------------------------------------------ */

struct ucx_op *ucx_op_get(struct ucx_rail *r, struct ucx_chan *c)
{
    struct ucx_op *op = r->free_ops;

    if (op) {
        r->free_ops = op->next;
    } else {
        op = malloc(sizeof(*op));
        if (!op)
            return NULL;
        op->rail = r;
        op->all_next = r->all_ops;
        r->all_ops = op;
    }
    op->next = op->prev = NULL;
    op->chan = c;
    op->done = false;
    op->cookie = NULL;
    op->buf = NULL;
    op->len = 0;
    return op;
}

/* A buffer of len bytes for the op: its own for small frames. */
static bool op_buf(struct ucx_op *op, size_t len)
{
    op->buf = len <= sizeof(op->small) ? op->small : malloc(len);
    op->len = len;
    return op->buf != NULL;
}

void ucx_op_put(struct ucx_op *op)
{
    struct ucx_rail *r = op->rail;

    if (op->buf != op->small)
        free(op->buf);
    op->buf = NULL;
    op->chan = NULL;
    op->next = r->free_ops;
    r->free_ops = op;
}

/* Endpoint -> channel ------------------------------------------------------------ */

static size_t ep_hash(const struct ucx_rail *r, ucp_ep_h ep)
{
    return (size_t)(((uintptr_t)ep >> 4) * 0x9e3779b97f4a7c15ull >> 20) & (r->hash_size - 1);
}

static bool hash_grow(struct ucx_rail *r)
{
    size_t n = r->hash_size ? r->hash_size * 2 : 64;
    struct ucx_chan **h = calloc(n, sizeof(*h));
    struct ucx_chan **old = r->hash;
    size_t old_n = r->hash_size;

    if (!h)
        return false;
    r->hash = h;
    r->hash_size = n;
    for (size_t i = 0; i < old_n; i++) {
        for (struct ucx_chan *c = old[i], *next; c; c = next) {
            size_t b = ep_hash(r, c->ep);

            next = c->hnext;
            c->hnext = h[b];
            h[b] = c;
        }
    }
    free(old);
    return true;
}

static struct ucx_chan *chan_by_ep(struct ucx_rail *r, ucp_ep_h ep)
{
    struct ucx_chan *c = r->hash_size ? r->hash[ep_hash(r, ep)] : NULL;

    while (c && c->ep != ep)
        c = c->hnext;
    return c;
}

/* The channel an active message came on: every one is sent with
 * UCP_AM_SEND_FLAG_REPLY, and the reply endpoint is ours for that channel
 * (NULL: none, or a channel closed while it was on the way). */
struct ucx_chan *ucx_chan_of(struct ucx_rail *r, const ucp_am_recv_param_t *param)
{
    return param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP ? chan_by_ep(r, param->reply_ep)
                                                              : NULL;
}

/* Channels -------------------------------------------------------------------------- */

static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t status);

static struct ucx_chan *chan_new(struct ucx_rail *r)
{
    struct ucx_chan *c;

    if ((size_t)r->nchans >= r->hash_size && !hash_grow(r))
        return NULL;
    c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->rail = r;
    c->base.rail = &r->base;
    c->tx_seq = c->rx_seq = 1;
    c->sent_ns = c->heard_ns = now_ns();
    return c;
}

/* Track a channel whose endpoint exists. */
static void chan_link(struct ucx_rail *r, struct ucx_chan *c)
{
    size_t b = ep_hash(r, c->ep);

    c->hnext = r->hash[b];
    r->hash[b] = c;
    c->next = r->chans;
    r->chans = c;
    r->nchans++;
}

static void chan_unlink(struct ucx_rail *r, struct ucx_chan *c)
{
    for (struct ucx_chan **pp = &r->hash[ep_hash(r, c->ep)]; *pp; pp = &(*pp)->hnext) {
        if (*pp == c) {
            *pp = c->hnext;
            break;
        }
    }
    for (struct ucx_chan **pp = &r->chans; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    r->nchans--;
}

static void ep_params_common(ucp_ep_params_t *p, struct ucx_chan *c)
{
    p->field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p->err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p->err_handler.cb = err_cb;
    p->err_handler.arg = c;
}

static void fail(struct ucx_chan *c, rov_status_t st, const char *why)
{
    if (c->dead || c->failed)
        return;
    /* Send nothing more and close without flushing. */
    c->failed = true;
    c->force = true;
    rov_rail_failed(&c->base, st, why);
}

/* Nothing more goes out on c, nor is handed up: closed, failed, or its
 * failure about to be reported. */
static bool ended(const struct ucx_chan *c)
{
    return c->dead || c->failed || c->fail_due;
}

/* A failure UCX reported (an endpoint's error callback, a failed
 * completion) is reported up after the worker's progress loop (run_due()),
 * not from inside it: frames that the same loop still hands us are
 * delivered first.  A peer that closes and exits at once has its last
 * frames (the close handshake's) in our receive queue when UCX's connection
 * manager reports its endpoint gone; failed from the callback, the channel
 * dropped them, and the connection's close never ended (docs/mpi.md).
 * Nothing more is sent on it meanwhile. */
static void fail_ucs(struct ucx_chan *c, ucs_status_t s)
{
    if (ended(c))
        return;
    rov_debug("ucx", "%s channel: %s", c->rail->base.spec->name, ucs_status_string(s));
    c->fail_due = true;
    c->fail_status = s;
    c->rail->work_due = true;
}

static void fail_reported(struct ucx_chan *c)
{
    const char *why;
    rov_status_t st = ucs_to_rov(c->fail_status, &why);

    c->fail_due = false;
    fail(c, st, why);
}

static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    fail_ucs(arg, status);
}

static void close_cb(void *request, ucs_status_t status, void *user_data)
{
    struct ucx_chan *c = user_data;

    c->close_done = true;
    ucp_request_free(request);
}

bool ucx_ep_close_forced(ucp_ep_h ep, ucp_send_nbx_callback_t cb, void *arg)
{
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_EP_CLOSE_FLAG_FORCE,
        .cb.send = cb,
        .user_data = arg,
    };
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &prm);

    return req != NULL && !UCS_PTR_IS_ERR(req);
}

/* Close the endpoint; the channel is freed by bury() once that is done.
 * Always forced: what had to reach the peer was flushed before (see
 * ucx_chan_close), and a flushing close that never ends (a peer lost during
 * wire-up) cannot be cut short, which UCX 1.13 then reports as a bug in
 * ucp_worker_destroy. */
static void ep_close(struct ucx_chan *c)
{
    c->close_due = false;
    c->close_done = !ucx_ep_close_forced(c->ep, close_cb, c);
}

static void bury(struct ucx_rail *r)
{
    for (struct ucx_chan **pp = &r->closing; *pp;) {
        struct ucx_chan *c = *pp;

        if (c->close_done) {
            *pp = c->next;
            free(c);
        } else {
            pp = &c->next;
        }
    }
    /* A closed probe endpoint's requests are done: its key can go. */
    for (struct ucx_probe **pp = &r->probes_closing; *pp;) {
        struct ucx_probe *p = *pp;

        if (p->close_done && !p->flushing) {
            *pp = p->next;
            if (p->rkey)
                ucp_rkey_destroy(p->rkey);
            free(p->key);
            free(p);
        } else {
            pp = &p->next;
        }
    }
    for (struct ucx_served **pp = &r->served_closing; *pp;) {
        struct ucx_served *v = *pp;

        if (v->close_done) {
            *pp = v->next;
            free(v);
        } else {
            pp = &v->next;
        }
    }
}

static void answer_flush(struct ucx_chan *c);

/* A request of a one-shot op (flush, probe) is done: the channel it was
 * for, NULL if that channel has let go of it. */
struct ucx_chan *ucx_op_done(void *request, struct ucx_op *op)
{
    struct ucx_chan *c = op->chan;

    ucp_request_free(request);
    ucx_op_put(op);
    return c;
}

static void flush_cb(void *request, ucs_status_t status, void *user_data)
{
    struct ucx_chan *c = ucx_op_done(request, user_data);

    if (!c)
        return;
    c->flush_op = NULL;
    c->rail->work_due = true;
    if (c->dead) {
        c->close_due = true; /* drained (or failed): close for good */
        return;
    }
    if (status != UCS_OK) {
        fail_ucs(c, status);
        return;
    }
    c->connected = true;
    c->connect_due = true;
}

/* Flush the endpoint: UCS_INPROGRESS (flush_cb follows) or the result. */
static ucs_status_t start_flush(struct ucx_chan *c)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = flush_cb,
    };
    struct ucx_op *op = ucx_op_get(c->rail, c);
    ucs_status_ptr_t req;

    if (!op)
        return UCS_ERR_NO_MEMORY;
    p.user_data = op;
    req = ucp_ep_flush_nbx(c->ep, &p);
    if (req == NULL || UCS_PTR_IS_ERR(req)) {
        ucx_op_put(op);
        return UCS_PTR_STATUS(req);
    }
    c->flush_op = op;
    return UCS_INPROGRESS;
}

/* Give back everything the transport lent us, drop what is held, and close
 * the endpoint.  A healthy channel is flushed first, so that the last
 * control frames (CLOSE) reach the peer; a failed or unfinished one, or one
 * with frames of the transport still in flight, is closed at once: the
 * forced close cancels those frames, so UCX stops reading memory whose
 * cookie was released.  Closing waits until UCX is not calling us. */
static void ucx_chan_close(struct rov_chan *chan)
{
    struct ucx_chan *c = rov_container_of(chan, struct ucx_chan, base);
    struct ucx_rail *r = c->rail;
    struct ucx_op *op;

    if (c->dead)
        return;
    answer_flush(c);
    c->dead = true;
    chan_unlink(r, c);
    c->next = r->closing;
    r->closing = c;
    while ((op = c->sends) != NULL) {
        void *cookie = op->cookie;

        c->sends = op->next;
        op->chan = NULL;
        op->cookie = NULL;
        if (cookie) {
            c->force = true;
            rov_rail_send_done(&c->base, cookie);
        }
    }
    c->nsend = 0;
    c->send_bytes = 0;
    while ((op = c->held) != NULL) {
        c->held = op->next;
        op->chan = NULL;
        if (op->done)
            ucx_op_put(op); /* else the rendezvous callback frees it */
    }
    c->held_tail = NULL;
    ucx_probe_detach(c);
    if (c->flush_op) { /* a connect in progress */
        c->flush_op->chan = NULL;
        c->flush_op = NULL;
    }
    if (!c->connected)
        c->force = true;
    if (!c->force && start_flush(c) == UCS_INPROGRESS)
        return;
    if (r->in_ucx) {
        c->close_due = true;
        r->work_due = true;
    } else {
        ep_close(c);
    }
}

/* Send ------------------------------------------------------------------------------- */

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    struct ucx_op *op = user_data;
    struct ucx_chan *c = op->chan;

    ucp_request_free(request);
    if (c) {
        void *cookie = op->cookie;

        if (op->prev)
            op->prev->next = op->next;
        else
            c->sends = op->next;
        if (op->next)
            op->next->prev = op->prev;
        c->nsend--;
        c->send_bytes -= op->len;
        heard(c);
        ucx_op_put(op);
        /* Half drained: enough room that the transport's push pays off. */
        if (c->refused && c->nsend <= UCX_SENDS_MAX / 2 &&
            c->send_bytes <= UCX_SEND_BYTES_MAX / 2) {
            c->refused = false;
            c->writable_due = true;
            c->rail->work_due = true;
        }
        if (cookie)
            rov_rail_send_done(&c->base, cookie);
        if (status != UCS_OK && status != UCS_ERR_CANCELED)
            fail_ucs(c, status);
    } else {
        ucx_op_put(op);
    }
}

static rov_status_t ucx_send(struct rov_chan *chan, const struct iovec *iov, int iovcnt,
                             void *cookie)
{
    struct ucx_chan *c = rov_container_of(chan, struct ucx_chan, base);
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_REPLY,
        .cb.send = send_cb,
    };
    size_t total = 0;
    struct ucx_op *op;
    ucs_status_ptr_t req;
    const void *buffer;
    size_t count;

    if (ended(c))
        return ROV_ERR_RESET;
    if (iovcnt < 1 || iovcnt > ROV_RAIL_MAX_IOV)
        return ROV_ERR_INVAL;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    /* Bound what UCX holds for us; control frames always go (they are few
     * and the transport cannot retry them), and so does one frame on an idle
     * channel, however large. */
    if (cookie && c->nsend > 0 &&
        (c->nsend >= UCX_SENDS_MAX || c->send_bytes + total > UCX_SEND_BYTES_MAX)) {
        c->refused = true;
        return ROV_ERR_AGAIN;
    }
    op = ucx_op_get(c->rail, c);
    if (!op)
        return ROV_ERR_NOMEM;
    if (!cookie) {
        /* The transport reuses the memory after we return: send a copy. */
        size_t off = 0;

        if (!op_buf(op, total)) {
            ucx_op_put(op);
            return ROV_ERR_NOMEM;
        }
        for (int i = 0; i < iovcnt; i++) {
            memcpy(op->buf + off, iov[i].iov_base, iov[i].iov_len);
            off += iov[i].iov_len;
        }
        buffer = op->buf;
        count = total;
        p.datatype = ucp_dt_make_contig(1);
    } else if (iovcnt == 1) {
        buffer = iov[0].iov_base;
        count = total;
        op->len = total;
        p.datatype = ucp_dt_make_contig(1);
    } else {
        for (int i = 0; i < iovcnt; i++) {
            op->iov[i].buffer = iov[i].iov_base;
            op->iov[i].length = iov[i].iov_len;
        }
        buffer = op->iov;
        count = (size_t)iovcnt;
        op->len = total;
        p.datatype = ucp_dt_make_iov();
    }
    op->cookie = cookie;
    op->seq = c->tx_seq;
    rov_put64(op->hdr, op->seq);
    p.user_data = op;
    req = ucp_am_send_nbx(c->ep, UCX_AM_FRAME, op->hdr, UCX_AM_HDR_LEN, buffer, count, &p);
    if (UCS_PTR_IS_ERR(req)) {
        const char *why;
        rov_status_t st = ucs_to_rov(UCS_PTR_STATUS(req), &why);

        rov_debug("ucx", "ucp_am_send_nbx: %s", ucs_status_string(UCS_PTR_STATUS(req)));
        ucx_op_put(op);
        c->failed = c->force = true;
        return st;
    }
    c->tx_seq++;
    c->n_sent++;
    c->unconfirmed = true;
    if (req == NULL) {
        /* Copied or posted: says nothing of the peer. */
        ucx_op_put(op);
        return ROV_OK;
    }
    op->prev = NULL;
    op->next = c->sends;
    if (c->sends)
        c->sends->prev = op;
    c->sends = op;
    c->nsend++;
    c->send_bytes += op->len;
    return cookie ? ROV_INPROGRESS : ROV_OK;
}

/* A rail-level message without data (UCX_AM_FLUSH, _ACK): fire and forget,
 * its header in an op of no channel, which goes back when UCX is done. */
static void ctl_cb(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    ucx_op_done(request, user_data);
}

static bool ctl_send(struct ucx_chan *c, unsigned id, uint64_t word)
{
    struct ucx_op *op = ucx_op_get(c->rail, NULL);
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_REPLY,
        .cb.send = ctl_cb,
        .user_data = op,
    };
    ucs_status_ptr_t req;

    if (!op)
        return false;
    rov_put64(op->hdr, word);
    req = ucp_am_send_nbx(c->ep, id, op->hdr, UCX_AM_HDR_LEN, NULL, 0, &p);
    if (req == NULL || UCS_PTR_IS_ERR(req)) {
        ucx_op_put(op);
        return req == NULL;
    }
    return true;
}

/* The peer asked for a flush and every frame up to the one it named is
 * handed up: answer.  Also from ucx_chan_close(): the frame that made the
 * transport close the channel (the close handshake's last) is handed up
 * by then, and the endpoint still works. */
static void answer_flush(struct ucx_chan *c)
{
    if (!c->flush_ack_seq || c->rx_seq <= c->flush_ack_seq || ended(c) || !c->connected)
        return;
    if (!ctl_send(c, UCX_AM_FLUSH_ACK, c->flush_ack_seq))
        rov_debug("ucx", "%s channel: flush answer not sent", c->rail->base.spec->name);
    c->flush_ack_seq = 0;
}

/* Receive ---------------------------------------------------------------------------- */

/* Check a whole frame as a stream rail would, then hand it up. */
static void deliver(struct ucx_chan *c, const void *frame, size_t len)
{
    size_t flen = 0;
    const char *why = "";
    rov_status_t st = rov_wire_peek(frame, len, rov_chan_rx_max_payload(&c->base), &flen, &why);

    c->rx_seq++;
    heard(c);
    if (st == ROV_INPROGRESS) {
        fail(c, ROV_ERR_PROTO, "ucx: message shorter than a frame header");
        return;
    }
    if (st != ROV_OK) {
        fail(c, ROV_ERR_PROTO, why);
        return;
    }
    if (flen != len) {
        fail(c, ROV_ERR_PROTO, "ucx: frame length differs from the message length");
        return;
    }
    rov_rail_recv(&c->base, frame, len);
}

/* Hand up held frames that are next in sequence and complete. */
static void drain_held(struct ucx_chan *c)
{
    struct ucx_op *op;

    while (!ended(c) && (op = c->held) != NULL && op->done &&
           op->seq == c->rx_seq) {
        c->held = op->next;
        if (!c->held)
            c->held_tail = NULL;
        c->nheld--;
        op->chan = NULL;
        deliver(c, op->buf, op->len);
        ucx_op_put(op);
    }
    answer_flush(c);
}

/* Keep a frame in sequence order behind what is still incomplete. */
static bool hold(struct ucx_chan *c, struct ucx_op *op)
{
    struct ucx_op **pp;

    if (c->nheld >= UCX_HELD_MAX) {
        fail(c, ROV_ERR_PROTO, "ucx: too many frames held behind a missing one");
        return false;
    }
    if (!c->held_tail || c->held_tail->seq < op->seq) {
        pp = c->held_tail ? &c->held_tail->next : &c->held;
        c->held_tail = op;
    } else {
        for (pp = &c->held; *pp && (*pp)->seq < op->seq; pp = &(*pp)->next)
            ;
        if (*pp && (*pp)->seq == op->seq) {
            fail(c, ROV_ERR_PROTO, "ucx: frame sequence number repeated");
            return false;
        }
    }
    op->next = *pp;
    *pp = op;
    c->nheld++;
    return true;
}

static void rndv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    struct ucx_op *op = user_data;
    struct ucx_chan *c = op->chan;

    ucp_request_free(request);
    if (!c) {
        ucx_op_put(op);
        return;
    }
    /* A failed fetch stays held (the channel has failed, so it is never
     * handed up) and is freed with the channel. */
    op->done = true;
    if (status != UCS_OK) {
        fail_ucs(c, status);
        return;
    }
    op->len = length;
    drain_held(c);
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    struct ucx_rail *r = arg;
    bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
    struct ucx_chan *c = ucx_chan_of(r, param);
    struct ucx_op *op;
    uint64_t seq;

    if (!c) {
        /* A channel closed while frames were on the way. */
        rov_debug("ucx", "frame for no open channel dropped");
        return UCS_OK;
    }
    if (c->failed)
        return UCS_OK;
    if (header_length != UCX_AM_HDR_LEN) {
        fail(c, ROV_ERR_PROTO, "ucx: bad active message header");
        return UCS_OK;
    }
    seq = rov_get64(header);
    if (seq < c->rx_seq) {
        fail(c, ROV_ERR_PROTO, "ucx: frame sequence number went back");
        return UCS_OK;
    }
    if (!rndv && seq == c->rx_seq) {
        /* The common case: next in sequence, handed up in place. */
        deliver(c, data, length);
        drain_held(c);
        return UCS_OK;
    }
    if (length < ROV_WIRE_HDR_LEN || length > r->base.max_frame) {
        fail(c, ROV_ERR_PROTO, length < ROV_WIRE_HDR_LEN ?
             "ucx: message shorter than a frame header" :
             "ucx: message longer than RAILOVER_MAX_MSG allows");
        return UCS_OK;
    }
    /* Nothing is copied or fetched for a peer that has not authenticated:
     * its handshake frames are small and come eagerly, first in sequence,
     * so they are handed up in place (above) before anything is held. */
    if (length > ROV_WIRE_HDR_LEN + rov_chan_rx_max_payload(&c->base)) {
        fail(c, ROV_ERR_PROTO, "ucx: large message before authentication");
        return UCS_OK;
    }
    op = ucx_op_get(r, c);
    if (!op || !op_buf(op, length)) {
        if (op)
            ucx_op_put(op);
        fail(c, ROV_ERR_NOMEM, "ucx: no memory for a received frame");
        return UCS_OK;
    }
    op->seq = seq;
    if (!hold(c, op)) {
        ucx_op_put(op);
        return UCS_OK;
    }
    if (!rndv) {
        memcpy(op->buf, data, length);
        op->done = true;
    } else {
        ucp_request_param_t p = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                            UCP_OP_ATTR_FIELD_DATATYPE,
            .cb.recv_am = rndv_cb,
            .datatype = ucp_dt_make_contig(1),
            .user_data = op,
        };
        ucs_status_ptr_t req = ucp_am_recv_data_nbx(r->worker, data, op->buf, length, &p);

        if (UCS_PTR_IS_ERR(req)) {
            op->done = true; /* freed with the failed channel */
            fail_ucs(c, UCS_PTR_STATUS(req));
            return UCS_OK;
        }
        op->done = req == NULL;
    }
    drain_held(c);
    return UCS_OK;
}

/* The close handshake's flush (ucx_chan_flush) ------------------------------------ */

/* The peer's UCX_AM_FLUSH: answered once what it sent before is handed up. */
static ucs_status_t flush_req_cb(void *arg, const void *header, size_t header_length,
                                 void *data, size_t length, const ucp_am_recv_param_t *param)
{
    struct ucx_chan *c = ucx_chan_of(arg, param);

    (void)data;
    if (!c || ended(c))
        return UCS_OK;
    if (header_length != UCX_AM_HDR_LEN || length) {
        fail(c, ROV_ERR_PROTO, "ucx: bad flush request");
        return UCS_OK;
    }
    c->flush_ack_seq = rov_get64(header);
    answer_flush(c);
    return UCS_OK;
}

/* The answer to our UCX_AM_FLUSH: the peer's rail has handed up everything
 * we sent before it (ucx_chan_flush()). */
static ucs_status_t flush_ack_cb(void *arg, const void *header, size_t header_length,
                                 void *data, size_t length, const ucp_am_recv_param_t *param)
{
    struct ucx_chan *c = ucx_chan_of(arg, param);

    (void)data;
    (void)length;
    if (!c || ended(c) || !c->flush_wait || header_length != UCX_AM_HDR_LEN ||
        rov_get64(header) != c->tx_seq - 1)
        return UCS_OK;
    c->flush_wait = false;
    heard(c);
    rov_rail_flushed(&c->base);
    return UCS_OK;
}

/* Progress -------------------------------------------------------------------------- */

/* Deferred work, outside UCX callbacks: endpoint closes and the upcalls that
 * may send or close. */
static void run_due(struct ucx_rail *r)
{
    bool again = true;

    if (!r->work_due)
        return;
    r->work_due = false;
    for (struct ucx_chan *c = r->closing; c; c = c->next)
        if (c->close_due)
            ep_close(c);
    if (r->probe_sweep)
        ucx_probe_sweep(r);
    /* An upcall may close any channel: rescan from the head after each. */
    while (again) {
        again = false;
        for (struct ucx_chan *c = r->chans; c; c = c->next) {
            if (c->fail_due) {
                fail_reported(c);
                again = true;
                break;
            }
            if (c->connect_due) {
                c->connect_due = false;
                if (!c->failed)
                    rov_rail_connected(&c->base);
                again = true;
                break;
            }
            if (c->writable_due) {
                c->writable_due = false;
                if (!c->failed)
                    rov_rail_writable(&c->base);
                again = true;
                break;
            }
        }
    }
}

static unsigned drive(struct ucx_rail *r)
{
    unsigned n = 0, k;
    int rounds = 0;

    r->in_ucx++;
    r->drives++;
    do {
        k = ucp_worker_progress(r->worker);
        n += k;
    } while (k && ++rounds < UCX_PROGRESS_ROUNDS);
    r->in_ucx--;
    if (n)
        r->armed = false;
    run_due(r);
    return n;
}

/* Drive the worker, then arm its event fd (ucp_worker_arm), so that sleeping
 * on it cannot miss an event.  ROV_ERR_BUSY: work came in first (drive
 * again).  An arm error is logged and the fd made readable, so that a
 * sleeper comes back at once. */
static rov_status_t arm_worker(struct ucx_rail *r)
{
    ucs_status_t st;

    if (r->armed)
        return ROV_OK;
    if (drive(r) || r->work_due)
        return ROV_ERR_BUSY;
    st = ucp_worker_arm(r->worker);
    if (st == UCS_OK) {
        r->armed = true;
        return ROV_OK;
    }
    if (st == UCS_ERR_BUSY)
        return ROV_ERR_BUSY;
    rov_log_ratelimited(ROV_LOG_ERROR, "ucx", "ucp_worker_arm: %s", ucs_status_string(st));
    ucp_worker_signal(r->worker);
    return ROV_OK;
}

/* Progress until idle and arm: a rail with no channel, which is not
 * busy-polled, relies on its event fd alone. */
static void settle(struct ucx_rail *r)
{
    for (int i = 0; i < 8; i++)
        if (arm_worker(r) == ROV_OK)
            return;
    /* Still busy: make the fd readable so that epoll calls us again. */
    ucp_worker_signal(r->worker);
}

static void efd_cb(struct rov_watch *w, uint32_t events)
{
    struct ucx_rail *r = rov_container_of(w, struct ucx_rail, watch);

    bury(r);
    r->armed = false; /* readable until the next ucp_worker_arm() */
    if (r->nchans)
        drive(r); /* busy-polled; ucx_arm() arms before a sleep */
    else
        settle(r);
}

/* With channels, the worker is driven on every call and armed only before
 * the application sleeps (ucx_arm): ucp_worker_arm() arms every transport's
 * completion queues, system calls that would otherwise follow each message. */
static int ucx_progress(struct rov_rail *rail)
{
    struct ucx_rail *r = (struct ucx_rail *)rail;

    bury(r);
    if (r->nchans == 0) {
        /* listening only: the event fd says when to look */
        if (!r->armed)
            settle(r);
        return 0;
    }
    drive(r);
    return r->nchans;
}

static rov_status_t ucx_arm(struct rov_rail *rail)
{
    struct ucx_rail *r = (struct ucx_rail *)rail;

    bury(r);
    return arm_worker(r);
}

/* Connections ------------------------------------------------------------------------- */

static void conn_cb(ucp_conn_request_h req, void *arg)
{
    struct ucx_rail *r = arg;
    ucp_ep_params_t p = {
        .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST,
        .conn_request = req,
    };
    struct ucx_chan *c;
    ucs_status_t st;

    r->request_ns = now_ns();
    if (!r->listening) {
        rov_debug("ucx", "rail %s: connection request refused: not listening",
                  r->base.spec->name);
        ucp_listener_reject(r->listener, req);
        return;
    }
    /* As many peers as the context keeps wait for their handshake (on any
     * rail): refused, the connector retries on its own schedule.  (UCX's
     * own connection manager has by now exchanged its addresses; what the
     * endpoint costs beyond that is not made.) */
    if (!rov_rail_accept_ok(&r->base)) {
        ucp_listener_reject(r->listener, req);
        return;
    }
    c = chan_new(r);
    if (!c) {
        rov_log_ratelimited(ROV_LOG_WARN, "ucx", "no memory for an accepted connection");
        ucp_listener_reject(r->listener, req);
        return;
    }
    ep_params_common(&p, c);
    st = ucp_ep_create(r->worker, &p, &c->ep);
    if (st != UCS_OK) {
        rov_log_ratelimited(ROV_LOG_WARN, "ucx", "accepting on %s: ucp_ep_create: %s",
                            r->base.spec->name, ucs_status_string(st));
        free(c);
        return;
    }
    c->connected = true;
    chan_link(r, c);
    rov_rail_accepted(&r->base, &c->base);
}

static rov_status_t ucx_connect(struct rov_rail *rail, const void *addr, size_t len,
                                struct rov_chan **chan_p)
{
    struct ucx_rail *r = (struct ucx_rail *)rail;
    struct sockaddr_storage peer;
    socklen_t pl;
    ucp_ep_params_t p = {
        .field_mask = UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS |
                      UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR,
        .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
    };
    struct ucx_chan *c;
    ucs_status_t st;

    if (rov_net_addr_decode(addr, len, &peer, &pl) != ROV_OK) {
        rov_error("ucx", "malformed peer address for rail %s", rail->spec->name);
        return ROV_ERR_INVAL;
    }
    if (peer.ss_family != r->local.ss_family) {
        rov_error("ucx", "peer address family differs from rail %s", rail->spec->name);
        return ROV_ERR_UNREACHABLE;
    }
    c = chan_new(r);
    if (!c)
        return ROV_ERR_NOMEM;
    p.sockaddr.addr = (struct sockaddr *)&peer;
    p.sockaddr.addrlen = pl;
    /* Leave through the rail's own interface address. */
    p.local_sockaddr.addr = (struct sockaddr *)&r->local;
    p.local_sockaddr.addrlen = r->local_len;
    ep_params_common(&p, c);
    st = ucp_ep_create(r->worker, &p, &c->ep);
    if (st != UCS_OK) {
        const char *why;
        rov_status_t rst = ucs_to_rov(st, &why);

        rov_debug("ucx", "connect on %s: ucp_ep_create: %s", rail->spec->name,
                  ucs_status_string(st));
        free(c);
        return rst;
    }
    chan_link(r, c);
    /* The flush completes once the wire-up with the peer is done. */
    st = start_flush(c);
    if (st == UCS_OK) {
        /* Reported from progress: the transport has not seen the channel yet. */
        c->connected = c->connect_due = true;
        r->work_due = true;
        ucp_worker_signal(r->worker);
    } else if (st != UCS_INPROGRESS) {
        const char *why;
        rov_status_t rst = ucs_to_rov(st, &why);

        rov_debug("ucx", "connect on %s: flush: %s", rail->spec->name, ucs_status_string(st));
        ucx_chan_close(&c->base);
        return rst;
    }
    *chan_p = &c->base;
    return ROV_OK;
}

/* Rail ops ---------------------------------------------------------------------------- */

static void ucx_close(struct rov_rail *rail);

static rov_status_t ucx_open(rov_context_t *ctx, const struct rov_rail_spec *spec,
                             const struct rov_rail_env *env, const void *settings,
                             struct rov_rail **rail_p)
{
    struct ucx_rail *r = rov_zalloc_lines(sizeof(*r));
    ucp_config_t *ucfg = NULL;
    ucp_params_t up = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
    };
    /* Serialized, not single: the context's progress helper (a second
     * thread) may drive the worker, never at the same time as the owner
     * (the context's lock, transport/helper.c). */
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,
    };
    ucp_am_handler_param_t ap = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = UCX_AM_FRAME,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = am_cb,
    };
    rov_status_t rst = ROV_ERR_IO;
    ucs_status_t st;
    const char *what;

    (void)settings; /* UCX reads its own UCX_* variables */
    if (!r)
        return ROV_ERR_NOMEM;
    r->base.ctx = ctx;
    r->watch.fd = -1;
    rst = rov_net_resolve("ucx", spec->arg[0] ? spec->arg : env->default_if, &r->local,
                          &r->local_len, NULL, 0);
    if (rst != ROV_OK) {
        rov_error("ucx", "cannot open rail %s", spec->name);
        free(r);
        return rst;
    }
    rst = ROV_ERR_IO;
    /* Reads UCX_* from the environment: UCX_TLS, UCX_NET_DEVICES, ... */
    what = "ucp_config_read";
    st = ucp_config_read(NULL, NULL, &ucfg);
    if (st != UCS_OK)
        goto err;
    what = "ucp_init";
    /* Remote memory access for the probes, which only the failover engine
     * asks for (ucx_chan_health). */
    if (env->stall_ns)
        up.features |= UCP_FEATURE_RMA;
    st = ucp_init(&up, ucfg, &r->context);
    if (st != UCS_OK && (up.features & UCP_FEATURE_RMA)) {
        rov_debug("ucx", "rail %s: ucp_init with RMA: %s; no probes", spec->name,
                  ucs_status_string(st));
        up.features &= ~(uint64_t)UCP_FEATURE_RMA;
        st = ucp_init(&up, ucfg, &r->context);
    }
    ucp_config_release(ucfg);
    if (st != UCS_OK) {
        if (st == UCS_ERR_NO_DEVICE || st == UCS_ERR_NO_ELEM)
            rst = ROV_ERR_NOT_FOUND;
        goto err;
    }
    what = "ucp_worker_create";
    st = ucp_worker_create(r->context, &wp, &r->worker);
    if (st != UCS_OK)
        goto err;
    what = "ucp_worker_get_efd";
    st = ucp_worker_get_efd(r->worker, &r->watch.fd);
    if (st != UCS_OK)
        goto err;
    what = "ucp_worker_set_am_recv_handler";
    ap.arg = r;
    st = ucp_worker_set_am_recv_handler(r->worker, &ap);
    ap.id = UCX_AM_FLUSH;
    ap.cb = flush_req_cb;
    if (st == UCS_OK)
        st = ucp_worker_set_am_recv_handler(r->worker, &ap);
    ap.id = UCX_AM_FLUSH_ACK;
    ap.cb = flush_ack_cb;
    if (st == UCS_OK)
        st = ucp_worker_set_am_recv_handler(r->worker, &ap);
    if (st != UCS_OK)
        goto err;
    if (up.features & UCP_FEATURE_RMA) {
        ap.id = UCX_AM_PROBE;
        ap.cb = ucx_probe_am_cb;
        st = ucp_worker_set_am_recv_handler(r->worker, &ap);
        if (st != UCS_OK)
            goto err;
        ap.id = UCX_AM_PROBE_GO;
        ap.cb = ucx_probe_go_cb;
        st = ucp_worker_set_am_recv_handler(r->worker, &ap);
        if (st != UCS_OK)
            goto err;
        ucx_probe_init(r, env);
    }
    r->watch.cb = efd_cb;
    if (rov_ctx_watch(ctx, &r->watch, EPOLLIN) != ROV_OK) {
        r->watch.fd = -1;
        rov_error("ucx", "cannot watch the event fd of rail %s", spec->name);
        ucx_close(&r->base);
        return ROV_ERR_IO;
    }
    settle(r);
    rov_net_links_open(&r->links, &r->base, &r->local);
    *rail_p = &r->base;
    return ROV_OK;

err:
    rov_error("ucx", "cannot open rail %s: %s: %s", spec->name, what, ucs_status_string(st));
    r->watch.fd = -1;
    ucx_close(&r->base);
    return rst;
}

static rov_status_t ucx_listen(struct rov_rail *rail, void *addr, size_t *len_p)
{
    struct ucx_rail *r = (struct ucx_rail *)rail;

    if (!r->listener) {
        ucp_listener_params_t lp = {
            .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                          UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
            .sockaddr = {(const struct sockaddr *)&r->local, r->local_len},
            .conn_handler = {conn_cb, r},
        };
        ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
        ucs_status_t st = ucp_listener_create(r->worker, &lp, &r->listener);

        if (st == UCS_OK) {
            st = ucp_listener_query(r->listener, &la);
            if (st != UCS_OK) {
                ucp_listener_destroy(r->listener);
                r->listener = NULL;
            }
        }
        if (st != UCS_OK) {
            rov_error("ucx", "cannot listen on rail %s: %s", rail->spec->name,
                      ucs_status_string(st));
            return ROV_ERR_IO;
        }
        r->addr_len = rov_net_addr_encode(&la.sockaddr, r->addr);
        if (rov_log_level >= ROV_LOG_DEBUG) {
            char s[64];

            ucx_addr_str(r->addr, r->addr_len, s, sizeof(s));
            rov_debug("ucx", "rail %s listening on %s", rail->spec->name, s);
        }
    }
    r->listening = true;
    memcpy(addr, r->addr, r->addr_len);
    *len_p = r->addr_len;
    return ROV_OK;
}

/* The listener itself lives until the rail closes, refusing what comes: UCX
 * (1.13 here, still open upstream as issue #11087) hands a connection
 * request whose private data arrives after ucp_listener_destroy() to the
 * freed listener from its async thread.  See drain_requests(). */
static void ucx_unlisten(struct rov_rail *rail)
{
    ((struct ucx_rail *)rail)->listening = false;
}

/* Before the listeners go (the channel and the probe listener, whose
 * callbacks both stamp request_ns): refuse connection requests until none
 * has come for UCX_LISTENER_QUIET_NS (at most UCX_LISTENER_DRAIN_MAX_NS).
 * A peer's request is a TCP connect that UCX's async thread accepts, then
 * the request's private data; a connect accepted before the wait starts has
 * its data handled (and refused, in the callback) during the wait, so the
 * listener is freed only if a request began within the last quiet period,
 * which a peer that has closed its connection with us no longer sends.
 * UCX offers no way to stop accepting and know that none is pending: this
 * narrows the race of issue #11087 to that, it cannot close it. */
static void drain_requests(struct ucx_rail *r)
{
    uint64_t start = now_ns(), now = start;
    struct pollfd pfd = {.fd = r->watch.fd, .events = POLLIN};

    while (now - start < UCX_LISTENER_DRAIN_MAX_NS) {
        uint64_t last = r->request_ns > start ? r->request_ns : start;

        if (now - last >= UCX_LISTENER_QUIET_NS)
            return;
        if (arm_worker(r) == ROV_OK && pfd.fd >= 0 && poll(&pfd, 1, 10) > 0)
            r->armed = false; /* readable until the next ucp_worker_arm() */
        drive(r);
        now = now_ns();
    }
    rov_debug("ucx", "rail %s: connection requests still coming at close",
              r->base.spec->name);
}

static void ucx_close(struct rov_rail *rail)
{
    struct ucx_rail *r = (struct ucx_rail *)rail;
    uint64_t deadline = now_ns() + UCX_CLOSE_WAIT_NS;

    r->probe_open = false;
    rov_net_links_close(&r->links);
    while (r->chans)
        ucx_chan_close(&r->chans->base);
    while (r->probes)
        ucx_probe_close(r, r->probes);
    while (r->served)
        ucx_served_close(r, r->served);
    if (r->worker) {
        ucx_unlisten(rail);
        /* Bounded: a flush towards a peer that is gone may never end; then
         * the forced close cuts it short. */
        while ((r->closing || r->probes_closing || r->served_closing) && now_ns() < deadline) {
            drive(r);
            bury(r);
        }
        for (struct ucx_chan *c = r->closing; c; c = c->next) {
            if (c->flush_op) {
                c->flush_op->chan = NULL;
                c->flush_op = NULL;
                ep_close(c);
            } else if (c->close_due) {
                ep_close(c);
            }
        }
        deadline = now_ns() + UCX_CLOSE_WAIT_NS;
        while ((r->closing || r->probes_closing || r->served_closing) && now_ns() < deadline) {
            drive(r);
            bury(r);
        }
        /* Keys come from the worker's pool: released before it goes. */
        for (struct ucx_probe *p = r->probes_closing; p; p = p->next) {
            if (p->rkey)
                ucp_rkey_destroy(p->rkey);
            p->rkey = NULL;
        }
        if (r->listener || r->probe_listener)
            drain_requests(r);
        if (r->listener)
            ucp_listener_destroy(r->listener);
        if (r->probe_listener)
            ucp_listener_destroy(r->probe_listener);
        if (r->watch.fd >= 0)
            rov_ctx_unwatch(rail->ctx, &r->watch);
        ucp_worker_destroy(r->worker);
    }
    if (r->ka_memh)
        ucp_mem_unmap(r->context, r->ka_memh);
    if (r->context)
        ucp_cleanup(r->context);
    while (r->probes_closing) {
        struct ucx_probe *p = r->probes_closing;

        r->probes_closing = p->next;
        free(p->key);
        free(p);
    }
    while (r->served_closing) {
        struct ucx_served *v = r->served_closing;

        r->served_closing = v->next;
        free(v);
    }
    free(r->blob);
    while (r->closing) {
        struct ucx_chan *c = r->closing;

        r->closing = c->next;
        free(c);
    }
    while (r->all_ops) {
        struct ucx_op *op = r->all_ops;

        r->all_ops = op->all_next;
        if (op->buf != op->small)
            free(op->buf);
        free(op);
    }
    free(r->hash);
    free(r);
}

/* UCP reports no transport-level acknowledgement of a send: a send
 * completes when UCX is done with the buffer, which for a rendezvous frame,
 * or for any frame once the RC flow-control window to the peer is used up,
 * waits for the peer *process* to call into UCX.  Nor does anything else on
 * the channel's endpoint tell a dead path from a busy peer: a flush, or an
 * RDMA READ, on that endpoint waits behind the same queued sends (measured
 * under TCG, peer process stopped 5 s: both waited the whole 5 s).  UCX's
 * own detection needs work posted to the RC QP to time out: a path that
 * dies while the sends wait in UCX's queues (for flow-control credits, or
 * for the peer's rendezvous answer) goes unnoticed (the likely mechanism of
 * issue 20: 64 s, 259 sends in flight, no error), as does any path with RC
 * retries set to 7 (for ever on rxe); and its keepalive runs on the
 * auxiliary lane (tcp on Ethernet with UCX_TLS=rc_verbs,tcp), which does
 * not cross the fabric (UCX_KEEPALIVE_INTERVAL=1s: no error in 11 s of a
 * silent fabric).
 *
 * So the rail asks the peer's transport itself: with sends unanswered
 * (outstanding, refused, or posted since anything was last heard) and
 * nothing heard for half RAILOVER_FAILOVER_TIMEOUT, it reads the peer rail's
 * 8-byte keepalive word (ucp_get_nbx) through a probe endpoint of its own
 * (struct ucx_probe): an RDMA READ on an RC QP with nothing queued, answered
 * by the peer's HCA (rxe: its kernel) without the peer process (measured
 * under TCG: 1.9 ms median, 3.3 ms at most, while the peer process was
 * stopped for 6 s with some 250 sends per channel waiting for it).  busy = sends unanswered; heard = a frame received, a
 * send completed by something from the peer, or a probe answered.  A live
 * path answers a probe every half timeout, so a peer that computes for
 * minutes is never stalled; a dead path answers nothing (or the probe
 * fails: then too it counts as unanswered), and the engine calls the channel
 * stalled one timeout after the last answer.  Where UCX has no remote-memory
 * lane to the peer (its tcp transport, UCX_TLS=tcp) a read is emulated with
 * messages the peer process answers, so a missing answer says nothing: no
 * probes, busy = 0, and dead paths are found by UCX's errors (and TCP's own
 * timeouts) only, as before.  Until the probe endpoint is wired up
 * (tens of ms to seconds after the handshake under TCG), the same.
 *
 * heard_ago counts the silence this process saw, up to the last time it
 * progressed the worker, never the time it was away (stopped, computing,
 * descheduled): what arrived meanwhile is still in UCX's queues, and the
 * engine may run before the rail (a timer that fires as the process
 * resumes).  Without that, a process continued after 6 s of SIGSTOP called
 * all its channels stalled at once (peer_stopped in tests/rdma/failover.sh,
 * 1 run in 4). */
static rov_status_t ucx_chan_health(struct rov_chan *chan, struct rov_chan_health *h)
{
    struct ucx_chan *c = rov_container_of(chan, struct ucx_chan, base);
    struct ucx_rail *r = c->rail;
    uint64_t now = now_ns();

    if (r->drives != r->seen_drives) {
        r->seen_drives = r->drives;
        r->drive_ns = now;
    }
    if (c->n_sent != c->seen_sent) {
        c->seen_sent = c->n_sent;
        c->sent_ns = now;
    }
    if (c->n_heard != c->seen_heard) {
        c->seen_heard = c->n_heard;
        c->heard_ns = now;
    }
    /* Only for an authenticated peer (the transport's flag, read only). */
    if (r->blob && c->connected && !c->dead && !c->failed && rov_chan_authed(&c->base))
        ucx_probe_tick(c, now);
    h->busy = c->probe && c->probe->hw && unanswered(c);
    h->queued = c->nsend > 0 || c->refused;
    /* The silence this process saw: up to its last look at the worker. */
    h->heard_ago_ns = r->drive_ns > c->heard_ns ? r->drive_ns - c->heard_ns : 0;
    h->sent_ago_ns = now - c->sent_ns;
    return c->dead || c->failed ? ROV_ERR_RESET : ROV_OK;
}

/* What the close handshake's answer needs (rail.h): UCX completes a send,
 * and even an endpoint flush, once the data is in the peer's receive queue,
 * and a peer process that closes and exits at once then has its connection
 * manager report the endpoint gone, possibly before the worker hands that
 * queue to the AM handler: the answer was lost with it, and the other side,
 * its CLOSE unanswered, failed the connection (ucx_conformance's case
 * `switch`: 10 of 66 tries in one VM; 0 of 66 with this).  So the flush is a round trip: UCX_AM_FLUSH after the
 * last frame, which the peer's rail answers once it has handed that frame
 * up.  ROV_ERR_UNSUPPORTED if it cannot be sent (the transport then finishes
 * at once, as before). */
static rov_status_t ucx_chan_flush(struct rov_chan *chan)
{
    struct ucx_chan *c = rov_container_of(chan, struct ucx_chan, base);

    if (ended(c))
        return ROV_ERR_RESET;
    if (!c->connected || !ctl_send(c, UCX_AM_FLUSH, c->tx_seq - 1))
        return ROV_ERR_UNSUPPORTED;
    c->flush_wait = true;
    return ROV_INPROGRESS;
}

/* The bytes of the frames whose send request UCX has not completed
 * (send_bytes: counted in ucx_send(), taken off in send_cb()); a send UCX
 * completed at once (copied into its own buffers) is not counted.  0 once
 * the channel failed. */
static uint64_t ucx_chan_queued(struct rov_chan *chan)
{
    const struct ucx_chan *c = rov_container_of(chan, struct ucx_chan, base);

    return ended(c) ? 0 : c->send_bytes;
}

static void ucx_chan_str(struct rov_chan *chan, char *buf, size_t len)
{
    struct ucx_chan *c = rov_container_of(chan, struct ucx_chan, base);
    ucp_ep_attr_t a = {
        .field_mask = UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR | UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR,
    };
    char ls[64], rs[64];

    if (c->dead || c->failed || ucp_ep_query(c->ep, &a) != UCS_OK) {
        snprintf(buf, len, "ucx ep");
        return;
    }
    rov_net_sockaddr_str(&a.local_sockaddr, ls, sizeof(ls));
    rov_net_sockaddr_str(&a.remote_sockaddr, rs, sizeof(rs));
    snprintf(buf, len, "local=%s remote=%s", ls, rs);
}

static const struct rov_rail_ops ucx_ops = {
    .name = "ucx",
    .open = ucx_open,
    .close = ucx_close,
    .listen = ucx_listen,
    .unlisten = ucx_unlisten,
    .connect = ucx_connect,
    .send = ucx_send,
    .chan_close = ucx_chan_close,
    .progress = ucx_progress,
    .arm = ucx_arm,
    .chan_health = ucx_chan_health,
    .chan_flush = ucx_chan_flush,
    .chan_queued = ucx_chan_queued,
    .chan_str = ucx_chan_str,
    .addr_str = ucx_addr_str,
    .path_key = rov_net_addr_path_key,
};

ROV_RAIL_REGISTER(ucx_ops)
