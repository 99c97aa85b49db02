/*
 * The verbs rail's connection setup through librdmacm
 * (RAILOVER_VERBS_CM=rdmacm).
 *
 * The rail address is an rdma_cm listener on the RDMA port's IP address.
 * The listener makes nothing for a peer that has not proved the key, as
 * the out-of-band listener (oob.c) does not, in two connect requests:
 *
 *   connector                                   listener
 *   REQ  (no QP) {magic, version, ASK}     ->
 *                                          <-   REJ {magic, version, slot,
 *                                                    challenge}  (nothing kept
 *                                                    but the challenge, in a
 *                                                    fixed table of slots)
 *   new id, QP made
 *   REQ  {magic, version, slot, receive depth,
 *         eager size, keepalive target, proof} ->
 *                                               slot consumed; proof checked
 *                                               (rov_rail_preauth_check(): the
 *                                               listener's address key, or
 *                                               the connection's secret);
 *                                               only then a channel, CQ,
 *                                               rings and QP
 *                                          <-   REP {struct vb_oob}
 *
 * The proof is a 128-bit HMAC (the request's 56 bytes of private data have
 * no room for more) over the challenge and the request.  A challenge is
 * single-use and expires after VB_CM_CHALLENGE_NS: a recorded request,
 * replayed, meets a used or expired slot and is answered with a new
 * challenge it cannot answer.  A connector answers one challenge: when a
 * flood of requests recycled its slot before its proof came (256 requests
 * in between), the listener's second challenge ends the attempt as a
 * rejection, and the transport connects again on its own schedule (the
 * connector's QP, made for the proof, cannot be reused).  The path (QPN, PSN, GID, MTU) is
 * rdma_cm's; rdma_cm moves the QPs through their states.  Events become
 * channel failures with precise reasons: address/route errors, rejection,
 * unreachable, disconnect, device removal.
 *
 * The cost, measured (docs/rdma.md): librdmacm opens every device when first
 * used and keeps those contexts open for the life of the process, so a
 * process that used this mode cannot be checkpointed with CRIU.  That is
 * why RAILOVER_VERBS_CM=oob is the default.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <rdma/rdma_cma.h>

#include "transport/auth.h"
#include "transport/log.h"
#include "transport/states.h"
#include "verbs/verbs.h"

#define VB "verbs"

#define VB_CM_MAGIC 0x52564331u /* "RVC1" */
#define VB_CM_VERSION 1
#define VB_CM_ASK 0xffff        /* the slot of a request that asks for a challenge */
#define VB_CM_SLOTS 256         /* challenges outstanding per listener */
#define VB_CM_CHALLENGE_NS (10ull * 1000000000ull)
/* rdma_cm's connect request carries 56 bytes of private data on IB and RoCE. */
#define VB_CM_REQ_MAX 56

/* A connect request's private data, network order.  The proof covers the
 * fields before it. */
struct vb_cm_req {
    uint32_t magic;
    uint16_t version;
    uint16_t slot;     /* the challenge answered, or VB_CM_ASK */
    uint64_t ka_addr;  /* struct vb_oob's, as vb_fill_info() made them */
    uint32_t nrecv;
    uint32_t eager;
    uint32_t ka_rkey;
    uint8_t proof[ROV_RAIL_PROOF_SHORT_LEN];
};
_Static_assert(sizeof(struct vb_cm_req) <= VB_CM_REQ_MAX, "rdma_cm private data");

/* The listener's reject that carries a challenge (a reject has room for
 * 148 bytes). */
struct vb_cm_challenge {
    uint32_t magic;
    uint16_t version;
    uint16_t slot;
    uint8_t nonce[ROV_NONCE_LEN];
};

/* An issued challenge: live until used or expired. */
struct vb_cm_slot {
    uint8_t nonce[ROV_NONCE_LEN];
    uint64_t expires_ns; /* 0: used, or never issued */
};

static const char *cm_event_why(enum rdma_cm_event_type t, rov_status_t *st)
{
    switch (t) {
    case RDMA_CM_EVENT_ADDR_ERROR:
        *st = ROV_ERR_UNREACHABLE;
        return "verbs: rdma_cm cannot resolve the peer's address (RDMA_CM_EVENT_ADDR_ERROR)";
    case RDMA_CM_EVENT_ROUTE_ERROR:
        *st = ROV_ERR_UNREACHABLE;
        return "verbs: rdma_cm cannot resolve a route (RDMA_CM_EVENT_ROUTE_ERROR)";
    case RDMA_CM_EVENT_CONNECT_ERROR:
        *st = ROV_ERR_RESET;
        return "verbs: rdma_cm connection error (RDMA_CM_EVENT_CONNECT_ERROR)";
    case RDMA_CM_EVENT_UNREACHABLE:
        *st = ROV_ERR_UNREACHABLE;
        return "verbs: peer unreachable (RDMA_CM_EVENT_UNREACHABLE)";
    case RDMA_CM_EVENT_REJECTED:
        *st = ROV_ERR_REFUSED;
        return "verbs: connection rejected by the peer (RDMA_CM_EVENT_REJECTED)";
    case RDMA_CM_EVENT_DISCONNECTED:
        *st = ROV_ERR_RESET;
        return "verbs: peer disconnected (RDMA_CM_EVENT_DISCONNECTED)";
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        *st = ROV_ERR_IO;
        return "verbs: RDMA device removed (RDMA_CM_EVENT_DEVICE_REMOVAL)";
    default:
        *st = ROV_ERR_IO;
        return "verbs: unexpected rdma_cm event";
    }
}

/* QP and private data for id; the channel adopts the QP. */
static int cm_make_qp(struct vb_chan *c, struct rdma_cm_id *id)
{
    struct ibv_qp_init_attr qia;

    if (id->verbs != c->rail->ctx) {
        rov_error(VB, "rdma_cm resolved %s to another device than %s",
                  id->verbs ? ibv_get_device_name(id->verbs->device) : "?", c->rail->dev_name);
        return -1;
    }
    vb_qp_init_attr(c, &qia);
    if (rdma_create_qp(id, c->rail->pd, &qia)) {
        rov_error(VB, "rdma_create_qp on %s: %m", c->rail->dev_name);
        return -1;
    }
    c->cm_id = id;
    id->context = c;
    if (vb_chan_use_qp(c, id->qp)) {
        rdma_destroy_qp(id);
        c->qp = NULL;
        c->cm_id = NULL;
        return -1;
    }
    return 0;
}

static void conn_param(struct vb_chan *c, struct rdma_conn_param *p, const void *pdata,
                       size_t len)
{
    memset(p, 0, sizeof(*p));
    p->private_data = pdata;
    p->private_data_len = (uint8_t)len;
    p->responder_resources = 4;
    p->initiator_depth = 4;
    p->retry_count = c->rail->retry;
    p->rnr_retry_count = 0; /* credits: an RNR is a bug, never retried */
}

static void set_timeout(struct vb_chan *c, struct rdma_cm_id *id)
{
    uint8_t t = c->rail->timeout;

    if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t)))
        rov_debug(VB, "rdma_set_option(ACK_TIMEOUT): %m (using rdma_cm's default)");
}

static void reject(struct rdma_cm_id *id, const void *pdata, size_t len)
{
    rdma_reject(id, pdata, (uint8_t)len);
    rdma_destroy_id(id);
}

/* A rate-limited warning naming the requester. */
static void warn_request(struct vb_rail *r, struct rdma_cm_id *id, const char *what)
{
    struct sockaddr_storage ss;
    struct sockaddr *sa = rdma_get_peer_addr(id);
    char peer[64] = "?";

    memset(&ss, 0, sizeof(ss));
    if (sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)) {
        memcpy(&ss, sa, sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                  : sizeof(struct sockaddr_in6));
        rov_net_sockaddr_str(&ss, peer, sizeof(peer));
    }
    rov_log_ratelimited(ROV_LOG_WARN, VB, "%s: rdma_cm connect request from %s %s: rejected",
                        r->dev_name, peer, what);
}

/* Answer a request with a new challenge in the next slot (the oldest
 * outstanding one is recycled). */
static void challenge(struct vb_rail *r, struct rdma_cm_id *id)
{
    struct vb_cm_slot *s = &r->cm_slots[r->cm_next];
    struct vb_cm_challenge ch = {
        .magic = htonl(VB_CM_MAGIC), .version = htons(VB_CM_VERSION), .slot = htons(r->cm_next)};

    if (rov_auth_random(s->nonce, sizeof(s->nonce)) != ROV_OK) {
        reject(id, NULL, 0);
        return;
    }
    s->expires_ns = rov_now_ns() + VB_CM_CHALLENGE_NS;
    memcpy(ch.nonce, s->nonce, sizeof(ch.nonce));
    r->cm_next = (uint16_t)((r->cm_next + 1) % VB_CM_SLOTS);
    reject(id, &ch, sizeof(ch));
}

/* Whether req answers a live challenge with a proof of our address key or
 * of a connection's secret; the challenge is used up either way. */
static bool proven(struct vb_rail *r, const struct vb_cm_req *req)
{
    struct vb_cm_slot *s = &r->cm_slots[ntohs(req->slot)];
    bool ok = rov_rail_preauth_check(&r->base, s->nonce, req, offsetof(struct vb_cm_req, proof),
                                     req->proof, sizeof(req->proof));

    s->expires_ns = 0;
    return ok;
}

/* The connection parameters of a request, as struct vb_oob (vb_take_info()
 * checks them); the path is rdma_cm's, the MTU ours. */
static void req_info(const struct vb_rail *r, const struct vb_cm_req *req, struct vb_oob *info)
{
    memset(info, 0, sizeof(*info));
    info->magic = htonl(VB_OOB_MAGIC);
    info->version = htons(VB_OOB_VERSION);
    info->nrecv = req->nrecv;
    info->eager = req->eager;
    info->mtu = htonl(r->mtu);
    info->ka_rkey = req->ka_rkey;
    info->ka_addr = req->ka_addr;
}

/* An inbound connect request: a challenge, or, for one that answers a
 * challenge with the proof, a new channel, our QP, accept. */
static void on_request(struct vb_rail *r, struct rdma_cm_id *id, const void *pdata, size_t plen)
{
    struct vb_chan *c;
    struct rdma_conn_param p;
    struct vb_cm_req req;
    struct vb_oob info;
    unsigned slot;
    const char *why;

    memset(&req, 0, sizeof(req));
    memcpy(&req, pdata, plen < sizeof(req) ? plen : sizeof(req));
    if (plen < offsetof(struct vb_cm_req, ka_addr) || ntohl(req.magic) != VB_CM_MAGIC ||
        ntohs(req.version) != VB_CM_VERSION) {
        warn_request(r, id, "is not this version's (another Railover version, or not Railover)");
        reject(id, NULL, 0);
        return;
    }
    if (r->port_down || r->device_dead || !r->cm_slots) {
        reject(id, NULL, 0);
        return;
    }
    slot = ntohs(req.slot);
    /* Asked for one; or answers one used, expired or never issued (a
     * replay, or a slot recycled under a flood): a new challenge. */
    if (slot >= VB_CM_SLOTS || r->cm_slots[slot].expires_ns == 0 ||
        r->cm_slots[slot].expires_ns < rov_now_ns()) {
        challenge(r, id);
        return;
    }
    if (plen < sizeof(req) || !proven(r, &req)) {
        warn_request(r, id, "without proof of this endpoint's address key or a connection's secret");
        reject(id, NULL, 0);
        return;
    }
    /* Over the transport's budget for unauthenticated peers: refused (the
     * connector retries on its own schedule). */
    if (!rov_rail_accept_ok(&r->base)) {
        reject(id, NULL, 0);
        return;
    }
    c = vb_chan_alloc(r, false);
    if (!c || cm_make_qp(c, id)) {
        rov_log_ratelimited(ROV_LOG_WARN, VB, "cannot set up an inbound connection; rejecting");
        if (c)
            vb_setup_failed(c, ROV_ERR_NOMEM, "verbs: no resources for a connection");
        rdma_reject(id, NULL, 0);
        if (!c || !c->cm_id)
            rdma_destroy_id(id);
        vb_bury(r);
        return;
    }
    /* Setup under way: not polled, not yet known. */
    vb_oob_set_state(c, OOB_ACCEPTED, "proven connect request");
    vb_preauth_begin(c); /* timed until ESTABLISHED, like every admitted peer */
    req_info(r, &req, &info);
    if (vb_take_info(c, &info, &why) != ROV_OK) {
        rov_warn(VB, "inbound connection: %s", why);
        rdma_reject(id, NULL, 0);
        vb_setup_failed(c, ROV_ERR_PROTO, why);
        return;
    }
    set_timeout(c, id);
    vb_fill_info(c, &info);
    conn_param(c, &p, &info, sizeof(info));
    if (rdma_accept(id, &p)) {
        rov_warn(VB, "rdma_accept: %m");
        vb_setup_failed(c, ROV_ERR_IO, "verbs: rdma_accept failed");
    }
}

/* Connector: resolve the listener's address on the channel's id (route,
 * QP and connect follow its events).  0, or -1 with errno. */
static int resolve(struct vb_chan *c)
{
    struct sockaddr_storage src = c->rail->oob_local;

    return rdma_resolve_addr(c->cm_id, (struct sockaddr *)&src, (struct sockaddr *)&c->cm_peer,
                             2000);
}

/* Connector: the first request, without a QP (rdma_cm sends qp_num in its
 * place), asks for a challenge. */
static void ask(struct vb_chan *c, struct rdma_cm_id *id)
{
    struct vb_cm_req req = {
        .magic = htonl(VB_CM_MAGIC), .version = htons(VB_CM_VERSION), .slot = htons(VB_CM_ASK)};
    struct rdma_conn_param p;

    conn_param(c, &p, &req, offsetof(struct vb_cm_req, ka_addr));
    p.qp_num = c->psn; /* any 24-bit number: no QP answers to it */
    if (rdma_connect(id, &p))
        vb_setup_failed(c, ROV_ERR_UNREACHABLE, "verbs: rdma_connect failed");
}

/* Connector: our parameters and the proof over them and the challenge. */
static void prove(struct vb_chan *c, struct vb_cm_req *req)
{
    struct vb_oob info;

    vb_fill_info(c, &info);
    memset(req, 0, sizeof(*req));
    req->magic = htonl(VB_CM_MAGIC);
    req->version = htons(VB_CM_VERSION);
    req->slot = htons(c->cm_slot);
    req->ka_addr = info.ka_addr;
    req->nrecv = info.nrecv;
    req->eager = info.eager;
    req->ka_rkey = info.ka_rkey;
    rov_rail_preauth_prove(&c->base, c->oob_challenge, req, offsetof(struct vb_cm_req, proof),
                           req->proof, sizeof(req->proof));
}

/* Connector: a reject that carries a challenge starts the request again on
 * a new id (a rejected one cannot connect again).  False when it carries
 * none, or answers our proof: the rejection stands. */
static bool take_challenge(struct vb_chan *c, const struct rdma_conn_param *rej)
{
    struct vb_cm_challenge ch;
    struct rdma_cm_id *old = c->cm_id, *id;

    if (!rej->private_data || rej->private_data_len < sizeof(ch))
        return false;
    memcpy(&ch, rej->private_data, sizeof(ch));
    if (ntohl(ch.magic) != VB_CM_MAGIC || ntohs(ch.version) != VB_CM_VERSION ||
        ntohs(ch.slot) >= VB_CM_SLOTS || c->cm_challenged || c->qp)
        return false;
    if (rdma_create_id(c->rail->cm_ec, &id, c, RDMA_PS_TCP)) {
        rov_error(VB, "rdma_create_id: %m");
        vb_setup_failed(c, ROV_ERR_IO, "verbs: rdma_create_id failed");
        return true;
    }
    c->cm_challenged = true;
    c->cm_slot = ntohs(ch.slot);
    memcpy(c->oob_challenge, ch.nonce, sizeof(ch.nonce));
    old->context = NULL;
    c->cm_id = id;
    rdma_destroy_id(old); /* no QP: the request was only a question */
    if (resolve(c))
        vb_setup_failed(c, rov_net_errno_status(errno), "verbs: rdma_resolve_addr failed");
    return true;
}

static void on_event(struct vb_rail *r, const struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    struct vb_chan *c = id->context;
    struct rdma_conn_param p;
    struct vb_cm_req req;
    rov_status_t st;
    const char *why;

    rov_debug(VB, "%s: rdma_cm event %s", r->dev_name, rdma_event_str(ev->event));
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        on_request(r, id, ev->param.conn.private_data, ev->param.conn.private_data_len);
        return;
    }
    if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL && (!c || id == r->cm_listen)) {
        r->device_dead = true;
        r->down_why = cm_event_why(ev->event, &st);
        vb_fail_all(r, st, r->down_why);
        return;
    }
    if (!c || c->dead)
        return; /* the listener's own events, or a channel already gone */
    if (ev->event == RDMA_CM_EVENT_REJECTED && c->active && take_challenge(c, &ev->param.conn))
        return;
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(id, 2000))
            vb_setup_failed(c, ROV_ERR_UNREACHABLE, "verbs: rdma_resolve_route failed");
        return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        if (!c->cm_challenged) {
            ask(c, id);
            return;
        }
        if (cm_make_qp(c, id)) {
            vb_setup_failed(c, ROV_ERR_IO, "verbs: cannot create the QP");
            return;
        }
        set_timeout(c, id);
        prove(c, &req);
        conn_param(c, &p, &req, sizeof(req));
        if (rdma_connect(id, &p))
            vb_setup_failed(c, ROV_ERR_UNREACHABLE, "verbs: rdma_connect failed");
        return;

    case RDMA_CM_EVENT_ESTABLISHED:
        if (c->active) {
            if (ev->param.conn.private_data_len < sizeof(struct vb_oob) ||
                vb_take_info(c, ev->param.conn.private_data, &why) != ROV_OK) {
                vb_setup_failed(c, ROV_ERR_PROTO,
                                "verbs: bad connection parameters in the peer's accept");
                return;
            }
        }
        vb_chan_established(c);
        return;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
    case RDMA_CM_EVENT_ADDR_CHANGE:
        return;
    default:
        why = cm_event_why(ev->event, &st);
        rov_info(VB, "%s: %s", r->dev_name, why + strlen("verbs: "));
        if (ev->event == RDMA_CM_EVENT_DISCONNECTED)
            vb_chan_ended(c, st, why); /* what the peer sent before it, first */
        else
            vb_setup_failed(c, st, why);
        return;
    }
}

static void cm_cb(struct rov_watch *w, uint32_t events)
{
    struct vb_rail *r = rov_container_of(w, struct vb_rail, cm_watch);
    struct rdma_cm_event *ev;

    while (rdma_get_cm_event(r->cm_ec, &ev) == 0) {
        /* Handled on a copy: the event is acknowledged first, so that the
         * handler may destroy its id (rdma_destroy_id waits for acks). */
        struct rdma_cm_event copy = *ev;
        uint8_t pdata[256]; /* private_data_len is a uint8_t */

        if (copy.param.conn.private_data) {
            memcpy(pdata, copy.param.conn.private_data, copy.param.conn.private_data_len);
            copy.param.conn.private_data = pdata;
        }
        rdma_ack_cm_event(ev);
        on_event(r, &copy);
    }
    vb_bury(r);
}

rov_status_t vb_cm_open(struct vb_rail *r, const char *dev, unsigned port, bool require_active)
{
    struct ibv_context **list;
    int n = 0;

    if (!r->cm_ec) {
        r->cm_ec = rdma_create_event_channel();
        if (!r->cm_ec) {
            rov_error(VB, "rdma_create_event_channel: %m");
            return ROV_ERR_IO;
        }
        if (vb_set_nonblock(r->cm_ec->fd))
            return ROV_ERR_IO;
        r->cm_watch.fd = r->cm_ec->fd;
        r->cm_watch.cb = cm_cb;
        if (rov_ctx_watch_urgent(r->base.ctx, &r->cm_watch, EPOLLIN) != ROV_OK)
            return ROV_ERR_IO;
    }
    list = r->cm_devices ? r->cm_devices : rdma_get_devices(&n);
    if (!list)
        return ROV_ERR_NOT_FOUND;
    r->cm_devices = list;
    for (int i = 0; list[i]; i++) {
        if (*dev && strcmp(ibv_get_device_name(list[i]->device), dev) != 0)
            continue;
        if (vb_use_port(r, list[i], port, require_active))
            return ROV_OK;
    }
    return ROV_ERR_NOT_FOUND;
}

void vb_cm_close(struct vb_rail *r)
{
    if (r->cm_listen)
        rdma_destroy_id(r->cm_listen);
    r->cm_listen = NULL;
    if (r->cm_ec) {
        if (r->cm_watch.fd)
            rov_ctx_unwatch(r->base.ctx, &r->cm_watch);
        rdma_destroy_event_channel(r->cm_ec);
        r->cm_ec = NULL;
    }
    if (r->cm_devices)
        rdma_free_devices(r->cm_devices);
    r->cm_devices = NULL;
    free(r->cm_slots);
    r->cm_slots = NULL;
}

rov_status_t vb_cm_listen(struct vb_rail *r)
{
    struct sockaddr_storage ss = r->oob_local;

    if (!r->cm_slots) {
        r->cm_slots = calloc(VB_CM_SLOTS, sizeof(*r->cm_slots));
        if (!r->cm_slots)
            return ROV_ERR_NOMEM;
    }
    if (rdma_create_id(r->cm_ec, &r->cm_listen, NULL, RDMA_PS_TCP)) {
        rov_error(VB, "rdma_create_id: %m");
        return ROV_ERR_IO;
    }
    if (rdma_bind_addr(r->cm_listen, (struct sockaddr *)&ss) || rdma_listen(r->cm_listen, 512)) {
        rov_error(VB, "rail %s: cannot listen with rdma_cm: %m", r->base.spec->name);
        rdma_destroy_id(r->cm_listen);
        r->cm_listen = NULL;
        return ROV_ERR_IO;
    }
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = rdma_get_src_port(r->cm_listen);
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = rdma_get_src_port(r->cm_listen);
    r->addr_len = rov_net_addr_encode(&ss, r->addr);
    return ROV_OK;
}

rov_status_t vb_cm_connect(struct vb_rail *r, const struct sockaddr_storage *peer,
                           struct vb_chan **chan_p)
{
    struct rdma_cm_id *id;
    struct vb_chan *c = vb_chan_alloc(r, true);

    if (!c)
        return ROV_ERR_NOMEM;
    if (rdma_create_id(r->cm_ec, &id, c, RDMA_PS_TCP)) {
        rov_error(VB, "rdma_create_id: %m");
        vb_chan_discard(c);
        return ROV_ERR_IO;
    }
    /* Until the route is resolved the channel has no QP; cm_make_qp
     * attaches it.  The id is the channel's from now on. */
    c->cm_id = id;
    c->cm_peer = *peer;
    vb_oob_set_state(c, OOB_CONNECTING, "connecting");
    if (resolve(c)) {
        rov_status_t st = errno == ENETUNREACH || errno == EHOSTUNREACH ? ROV_ERR_UNREACHABLE
                                                                          : ROV_ERR_IO;

        rov_debug(VB, "rdma_resolve_addr: %m");
        vb_chan_discard(c); /* destroys the id */
        return st;
    }
    /* Known to the rail (failed with the others) from now on. */
    vb_chan_link(c);
    *chan_p = c;
    return ROV_OK;
}

void vb_cm_chan_close(struct vb_chan *c)
{
    if (c->cm_id && c->qp)
        rdma_disconnect(c->cm_id);
}

void vb_cm_chan_free(struct vb_chan *c)
{
    if (c->qp)
        rdma_destroy_qp(c->cm_id);
    c->qp = NULL;
    rdma_destroy_id(c->cm_id);
    c->cm_id = NULL;
}
