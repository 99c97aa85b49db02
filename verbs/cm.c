/*
 * The verbs rail's connection setup through librdmacm
 * (RAILOVER_VERBS_CM=rdmacm).
 *
 * The rail address is an rdma_cm listener on the RDMA port's IP address.  A
 * connector resolves the address and the route, creates its QP with
 * rdma_create_qp() and connects; our half of the connection parameters
 * (struct vb_oob: receive depth, eager size, keepalive target) rides in the
 * private data of the connect request, the peer's in that of the accept.
 * rdma_cm moves the QPs through their states.  Events become channel
 * failures with precise reasons: address/route errors, rejection,
 * unreachable, disconnect, device removal.
 *
 * The cost, measured (docs/rdma.md): librdmacm opens every device when first
 * used and keeps those contexts open for the life of the process, so a
 * process that used this mode cannot be checkpointed with CRIU.  That is
 * why RAILOVER_VERBS_CM=oob is the default.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include <rdma/rdma_cma.h>

#include "transport/log.h"
#include "verbs/verbs.h"

#define VB "verbs"

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

static void conn_param(struct vb_chan *c, struct rdma_conn_param *p, struct vb_oob *info)
{
    memset(p, 0, sizeof(*p));
    vb_fill_info(c, info);
    p->private_data = info;
    p->private_data_len = sizeof(*info);
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

/* An inbound connect request: a new channel, our QP, accept. */
static void on_request(struct vb_rail *r, struct rdma_cm_id *id, const void *pdata, size_t plen)
{
    struct vb_chan *c;
    struct rdma_conn_param p;
    struct vb_oob info;
    const char *why;

    /* Over the transport's budget for unauthenticated peers: refused (the
     * connector retries on its own schedule). */
    if (plen < sizeof(struct vb_oob) || r->port_down || r->device_dead ||
        !rov_rail_accept_ok(&r->base)) {
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
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
    vb_oob_set_state(c, OOB_ACCEPTED, "connect request");
    vb_preauth_begin(c);    /* timed until ESTABLISHED (the QP is made: private
                             * data has no room for a proof of the key) */
    if (vb_take_info(c, pdata, &why) != ROV_OK) {
        rov_warn(VB, "inbound connection: %s", why);
        rdma_reject(id, NULL, 0);
        vb_setup_failed(c, ROV_ERR_PROTO, why);
        return;
    }
    set_timeout(c, id);
    conn_param(c, &p, &info);
    if (rdma_accept(id, &p)) {
        rov_warn(VB, "rdma_accept: %m");
        vb_setup_failed(c, ROV_ERR_IO, "verbs: rdma_accept failed");
    }
}

static void on_event(struct vb_rail *r, const struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    struct vb_chan *c = id->context;
    struct rdma_conn_param p;
    struct vb_oob info;
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
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(id, 2000))
            vb_setup_failed(c, ROV_ERR_UNREACHABLE, "verbs: rdma_resolve_route failed");
        return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        if (cm_make_qp(c, id)) {
            vb_setup_failed(c, ROV_ERR_IO, "verbs: cannot create the QP");
            return;
        }
        set_timeout(c, id);
        conn_param(c, &p, &info);
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
}

rov_status_t vb_cm_listen(struct vb_rail *r)
{
    struct sockaddr_storage ss = r->oob_local;

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
    struct sockaddr_storage src = r->oob_local;
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
    vb_oob_set_state(c, OOB_CONNECTING, "connecting");
    if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)peer, 2000)) {
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
