/*
 * The UCX rail's liveness probes (ucx_chan_health() asks for them): reads
 * of the peer rail's keepalive word that the peer's transport answers
 * without the peer process.  It owns the probe endpoints (one per peer
 * rail, shared by every channel to it) and their state machine (enum
 * ucx_probe_state: one table, one setter), our keepalive word and the probe
 * listener with the endpoints it serves to peers, and the setup the two
 * ends of a channel exchange (UCX_AM_PROBE, UCX_AM_PROBE_GO).  Why a probe
 * endpoint of its own, client-server, and who connects first: struct
 * ucx_probe (ucx.h).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>

#include <ucp/api/ucp.h>

#include "transport/log.h"
#include "transport/netaddr.h"
#include "transport/rail.h"
#include "transport/wire.h"
#include "ucx/ucx.h"

/* A probe endpoint: one table, one setter (rov_rail_state_change()).  A new
 * one starts WIRING (calloc's zero, then set); FAILED is the end. */
static const struct rov_state_info probe_states[] = {
    [PROBE_WIRING] = {"wiring", ROV_STATE_BIT(PROBE_WIRING) | ROV_STATE_BIT(PROBE_READY) |
                                    ROV_STATE_BIT(PROBE_SOFT) | ROV_STATE_BIT(PROBE_FAILED)},
    [PROBE_READY] = {"ready", ROV_STATE_BIT(PROBE_FAILED)},
    [PROBE_SOFT] = {"soft", ROV_STATE_BIT(PROBE_FAILED)},
    [PROBE_FAILED] = {"failed", ROV_STATE_BIT(PROBE_FAILED)},
};

static void probe_set_state(struct ucx_probe *p, enum ucx_probe_state state, const char *why)
{
    char what[112];

    snprintf(what, sizeof(what), "rail %s: probe endpoint", p->rail->base.spec->name);
    if (rov_rail_state_change(&p->rail->base, probe_states, p->state, state, what, why))
        p->state = state;
}

static void free_cb(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    (void)user_data;
    ucp_request_free(request);
}

/* Send the peer what it needs to probe us.  The rail's blob outlives any
 * request (the worker goes first), so UCX may keep referring to it. */
static void blob_send(struct ucx_chan *c)
{
    struct ucx_rail *r = c->rail;
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS |
                        UCP_OP_ATTR_FIELD_DATATYPE,
        .flags = UCP_AM_SEND_FLAG_REPLY,
        .cb.send = free_cb,
        .datatype = ucp_dt_make_contig(1),
    };
    ucs_status_ptr_t req = ucp_am_send_nbx(c->ep, UCX_AM_PROBE, r->ka_hdr, sizeof(r->ka_hdr),
                                           r->blob, r->blob_len, &p);

    if (UCS_PTR_IS_ERR(req))
        rov_debug("ucx", "%s channel: probe setup not sent: %s", r->base.spec->name,
                  ucs_status_string(UCS_PTR_STATUS(req)));
}

static void probe_go_send(struct ucx_chan *c)
{
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_REPLY,
        .cb.send = free_cb,
    };
    ucs_status_ptr_t req = ucp_am_send_nbx(c->ep, UCX_AM_PROBE_GO, NULL, 0, NULL, 0, &p);

    if (UCS_PTR_IS_ERR(req))
        rov_debug("ucx", "%s channel: probe go not sent: %s", c->rail->base.spec->name,
                  ucs_status_string(UCS_PTR_STATUS(req)));
}

ucs_status_t ucx_probe_go_cb(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    struct ucx_chan *c = ucx_chan_of(arg, param);

    if (c)
        c->probe_go = true;
    return UCS_OK;
}

/* The peer's probe setup: kept (bounded) until the channel is authenticated;
 * nothing is built for a peer that has not proved its key. */
ucs_status_t ucx_probe_am_cb(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    struct ucx_rail *r = arg;
    struct ucx_chan *c = ucx_chan_of(r, param);
    size_t alen;

    if (!c || c->failed || !r->blob || c->probe || c->peer_blob)
        return UCS_OK;
    alen = length >= 2 ? rov_get16(data) : 0;
    if (header_length != 8 || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
        length > UCX_PROBE_BLOB_MAX || alen == 0 || alen > ROV_NET_ADDR_MAX ||
        2 + alen >= length) {
        rov_debug("ucx", "%s channel: malformed probe setup ignored", r->base.spec->name);
        return UCS_OK;
    }
    c->peer_blob = malloc(length);
    if (!c->peer_blob)
        return UCS_OK;
    memcpy(c->peer_blob, data, length);
    c->peer_blob_len = length;
    c->peer_word = rov_get64(header);
    return UCS_OK;
}

/* Reads of the peer's word are RDMA READs (answered by its HCA, or its
 * kernel for rxe, or a shared-memory copy) only if UCX has a lane for
 * remote memory to that peer; without one (UCX's tcp transport) it emulates
 * them with active messages that the peer process answers when it calls
 * into UCX, and a probe would wait for the peer's application.  UCP 1.13
 * says which in its endpoint description only: a "get[lane]" protocol line
 * for a real lane.  Not found (another format): no probes, safely. */
static bool ep_remote_get(ucp_ep_h ep)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    bool yes;

    if (f) {
        ucp_ep_print_info(ep, f);
        fclose(f);
    }
    yes = buf && strstr(buf, " get[");
    free(buf);
    return yes;
}

/* Wired up: unpack the peer's key on the endpoint it now has lanes for. */
static void probe_ready(struct ucx_probe *p)
{
    ucs_status_t st = ucp_ep_rkey_unpack(p->ep, p->key, &p->rkey);

    free(p->key);
    p->key = NULL;
    if (st != UCS_OK) {
        p->rkey = NULL;
        probe_set_state(p, PROBE_FAILED, "key not unpacked");
        rov_debug("ucx", "rail %s: probe key: %s", p->rail->base.spec->name,
                  ucs_status_string(st));
        return;
    }
    p->hw = ep_remote_get(p->ep);
    probe_set_state(p, p->hw ? PROBE_READY : PROBE_SOFT, "wired up");
    rov_debug("ucx", "rail %s: probe endpoint ready: %s", p->rail->base.spec->name,
              p->hw ? "RDMA READ" : "no remote-memory lane, no probes");
}

static void probe_flush_cb(void *request, ucs_status_t status, void *user_data)
{
    struct ucx_probe *p = user_data;

    ucp_request_free(request);
    p->flushing = false;
    if (p->state != PROBE_WIRING)
        return; /* failed or closing */
    if (status != UCS_OK) {
        rov_debug("ucx", "rail %s: probe endpoint wire-up: %s", p->rail->base.spec->name,
                  ucs_status_string(status));
        probe_set_state(p, PROBE_FAILED, "wire-up failed");
        return;
    }
    probe_ready(p);
}

static void probe_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct ucx_probe *p = arg;

    (void)ep;
    rov_debug("ucx", "rail %s: probe endpoint: %s", p->rail->base.spec->name,
              ucs_status_string(status));
    probe_set_state(p, PROBE_FAILED, "endpoint error");
    p->rail->probe_sweep = true;
    p->rail->work_due = true;
}

static void probe_close_cb(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    ((struct ucx_probe *)user_data)->close_done = true;
    ucp_request_free(request);
}

static void served_close_cb(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    ((struct ucx_served *)user_data)->close_done = true;
    ucp_request_free(request);
}

/* bury() frees it once UCX is done with it. */
void ucx_probe_close(struct ucx_rail *r, struct ucx_probe *p)
{
    for (struct ucx_probe **pp = &r->probes; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    p->next = r->probes_closing;
    r->probes_closing = p;
    if (p->state == PROBE_WIRING)
        probe_set_state(p, PROBE_FAILED, "closed while wiring up");
    p->close_done = !ucx_ep_close_forced(p->ep, probe_close_cb, p);
}

void ucx_served_close(struct ucx_rail *r, struct ucx_served *v)
{
    for (struct ucx_served **pp = &r->served; *pp; pp = &(*pp)->next) {
        if (*pp == v) {
            *pp = v->next;
            break;
        }
    }
    r->nserved--;
    v->next = r->served_closing;
    r->served_closing = v;
    v->close_done = !ucx_ep_close_forced(v->ep, served_close_cb, v);
}

/* Close failed probe endpoints that no channel uses any more, and served
 * endpoints whose peer is gone. */
void ucx_probe_sweep(struct ucx_rail *r)
{
    r->probe_sweep = false;
    for (struct ucx_probe *p = r->probes, *next; p; p = next) {
        next = p->next;
        if (p->state == PROBE_FAILED && p->nchans == 0)
            ucx_probe_close(r, p);
    }
    for (struct ucx_served *v = r->served, *next; v; v = next) {
        next = v->next;
        if (v->failed)
            ucx_served_close(r, v);
    }
}

static void served_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct ucx_served *v = arg;

    (void)ep;
    (void)status;
    v->failed = true;
    v->rail->probe_sweep = true;
    v->rail->work_due = true;
}

static bool same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
    return false;
}

/* A peer's probe endpoint.  Only from an address that one of our
 * authenticated channels comes from (it connects from its rail's address,
 * as its channels do), and boundedly many. */
static void probe_conn_cb(ucp_conn_request_h req, void *arg)
{
    struct ucx_rail *r = arg;
    ucp_conn_request_attr_t ra = {.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR};
    ucp_ep_params_t p = {
        .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .conn_request = req,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {served_err_cb, NULL},
    };
    struct ucx_served *v = NULL;
    bool known = false;

    r->request_ns = rov_now_ns();
    if (r->probe_open && r->nserved < UCX_SERVED_MAX &&
        ucp_conn_request_query(req, &ra) == UCS_OK) {
        for (struct ucx_chan *c = r->chans; c && !known; c = c->next) {
            ucp_ep_attr_t a = {.field_mask = UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR};

            known = rov_chan_authed(&c->base) && !c->failed &&
                    ucp_ep_query(c->ep, &a) == UCS_OK && same_host(&a.remote_sockaddr, &ra.client_address);
        }
    }
    if (known)
        v = calloc(1, sizeof(*v));
    if (!v) {
        rov_debug("ucx", "rail %s: probe connection refused", r->base.spec->name);
        ucp_listener_reject(r->probe_listener, req);
        return;
    }
    v->rail = r;
    p.err_handler.arg = v;
    if (ucp_ep_create(r->worker, &p, &v->ep) != UCS_OK) {
        free(v);
        return;
    }
    v->next = r->served;
    r->served = v;
    r->nserved++;
}

static struct ucx_probe *probe_new(struct ucx_rail *r, const uint8_t *addr, size_t alen,
                                   const uint8_t *key, size_t klen, uint64_t word)
{
    struct ucx_probe *p;
    struct sockaddr_storage peer;
    socklen_t pl;
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS |
                      UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {probe_err_cb, NULL},
    };
    ucp_request_param_t fp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = probe_flush_cb,
    };
    ucs_status_ptr_t req;
    ucs_status_t st;

    if (rov_net_addr_decode(addr, alen, &peer, &pl) != ROV_OK ||
        peer.ss_family != r->local.ss_family)
        return NULL;
    p = calloc(1, sizeof(*p));
    if (!p || !(p->key = malloc(klen))) {
        free(p);
        return NULL;
    }
    p->rail = r;
    p->alen = alen;
    memcpy(p->addr, addr, alen);
    memcpy(p->key, key, klen);
    p->klen = klen;
    p->raddr = word;
    ep.sockaddr.addr = (struct sockaddr *)&peer;
    ep.sockaddr.addrlen = pl;
    ep.local_sockaddr.addr = (struct sockaddr *)&r->local;
    ep.local_sockaddr.addrlen = r->local_len;
    ep.err_handler.arg = p;
    st = ucp_ep_create(r->worker, &ep, &p->ep);
    if (st != UCS_OK) {
        rov_debug("ucx", "rail %s: probe endpoint: %s", r->base.spec->name, ucs_status_string(st));
        free(p->key);
        free(p);
        return NULL;
    }
    p->next = r->probes;
    r->probes = p;
    /* Complete the wire-up now, while the peer is handshaking with us: a
     * probe that waited for it would wait for the peer process. */
    fp.user_data = p;
    probe_set_state(p, PROBE_WIRING, "new");
    req = ucp_ep_flush_nbx(p->ep, &fp);
    if (req == NULL)
        probe_ready(p);
    else if (UCS_PTR_IS_ERR(req))
        probe_set_state(p, PROBE_FAILED, "wire-up not started");
    else
        p->flushing = true;
    return p;
}

/* Whether our rail connects its probe endpoint first (the smaller probe
 * listener address leads). */
static bool probe_leads(const struct ucx_rail *r, const uint8_t *addr, size_t alen)
{
    size_t n = r->probe_alen < alen ? r->probe_alen : alen;
    int cmp = memcmp(r->probe_addr, addr, n);

    return cmp < 0 || (cmp == 0 && r->probe_alen <= alen);
}

/* Use the probe endpoint to the peer's rail, connected if there is none
 * and it is our turn. */
static void probe_attach(struct ucx_chan *c)
{
    struct ucx_rail *r = c->rail;
    const uint8_t *b = c->peer_blob;
    size_t alen = rov_get16(b);
    bool leads = probe_leads(r, b + 2, alen);
    struct ucx_probe *p;

    for (p = r->probes; p; p = p->next)
        if (p->state != PROBE_FAILED && p->alen == alen && memcmp(p->addr, b + 2, alen) == 0)
            break;
    if (!p && !leads && !c->probe_go)
        return; /* the peer's comes first */
    if (!p && !ep_remote_get(c->ep)) {
        /* The channel's own endpoint has no remote-memory lane: nor would
         * a probe endpoint to the same peer. */
        rov_debug("ucx", "rail %s: no remote-memory lane to the peer, no probes",
                  r->base.spec->name);
    } else if (!p) {
        p = probe_new(r, b + 2, alen, b + 2 + alen, c->peer_blob_len - 2 - alen, c->peer_word);
    }
    free(c->peer_blob);
    c->peer_blob = NULL;
    if (p) {
        c->probe = p;
        p->nchans++;
    }
    /* Even without an endpoint (the peer's turn comes all the same). */
    c->go_due = leads;
}

void ucx_probe_detach(struct ucx_chan *c)
{
    if (c->probe_op) { /* its completion only frees it */
        c->probe_op->chan = NULL;
        c->probe_op = NULL;
    }
    if (c->probe && --c->probe->nchans == 0 && c->probe->state == PROBE_FAILED) {
        c->rail->probe_sweep = true;
        c->rail->work_due = true;
    }
    c->probe = NULL;
    free(c->peer_blob);
    c->peer_blob = NULL;
}

static void probe_cb(void *request, ucs_status_t status, void *user_data)
{
    struct ucx_chan *c = ucx_op_done(request, user_data);

    if (!c)
        return;
    c->probe_op = NULL;
    if (status == UCS_OK)
        heard(c);
    else /* unanswered: the failover engine's timeout decides */
        rov_debug("ucx", "%s channel: probe: %s", c->rail->base.spec->name,
                  ucs_status_string(status));
}

/* Read the peer's keepalive word: answered by the peer's transport. */
static void probe_issue(struct ucx_chan *c, uint64_t now)
{
    struct ucx_probe *p = c->probe;
    struct ucx_op *op = ucx_op_get(c->rail, c);
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = probe_cb,
    };
    ucs_status_ptr_t req;

    if (!op)
        return;
    c->probe_ns = now;
    prm.user_data = op;
    req = ucp_get_nbx(p->ep, op->small, 8, p->raddr, p->rkey, &prm);
    if (req == NULL) {
        ucx_op_put(op);
        heard(c);
    } else if (UCS_PTR_IS_ERR(req)) {
        ucx_op_put(op);
        rov_debug("ucx", "%s channel: probe: %s", c->rail->base.spec->name,
                  ucs_status_string(UCS_PTR_STATUS(req)));
    } else {
        c->probe_op = op;
    }
}

/* From chan_health, on an authenticated channel: exchange probe setups,
 * and probe when the peer has been quiet for half the failover timeout
 * with sends unanswered. */
void ucx_probe_tick(struct ucx_chan *c, uint64_t now)
{
    struct ucx_rail *r = c->rail;

    if (!c->blob_sent) {
        c->blob_sent = true;
        blob_send(c);
    }
    if (!c->probe && c->peer_blob && !r->in_ucx)
        probe_attach(c);
    if (c->go_due && (!c->probe || c->probe->state != PROBE_WIRING)) {
        c->go_due = false;
        probe_go_send(c);
    }
    if (c->probe && c->probe->state == PROBE_READY && !c->probe_op && unanswered(c) &&
        now - c->heard_ns >= r->probe_quiet_ns && now - c->probe_ns >= r->probe_quiet_ns)
        probe_issue(c, now);
}

/* Our keepalive word, the listener for peers' probe endpoints, and the
 * setup a peer needs; without them the rail has no probes (health from
 * UCX's errors only). */
void ucx_probe_init(struct ucx_rail *r, const struct rov_rail_env *env)
{
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .length = 64,
        .flags = UCP_MEM_MAP_ALLOCATE,
    };
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    ucp_listener_params_t lp = {
        .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr = {(const struct sockaddr *)&r->local, r->local_len},
        .conn_handler = {probe_conn_cb, r},
    };
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    size_t kl = 0;
    void *kb = NULL;
    const char *what = "ucp_mem_map";
    ucs_status_t st;

    st = ucp_mem_map(r->context, &mp, &r->ka_memh);
    if (st != UCS_OK) {
        r->ka_memh = NULL;
        goto off;
    }
    what = "ucp_mem_query";
    if ((st = ucp_mem_query(r->ka_memh, &ma)) != UCS_OK)
        goto off;
    memset(ma.address, 0, 64);
    what = "ucp_rkey_pack";
    if ((st = ucp_rkey_pack(r->context, r->ka_memh, &kb, &kl)) != UCS_OK)
        goto off;
    what = "ucp_listener_create";
    if ((st = ucp_listener_create(r->worker, &lp, &r->probe_listener)) != UCS_OK) {
        r->probe_listener = NULL;
        goto off;
    }
    what = "ucp_listener_query";
    if ((st = ucp_listener_query(r->probe_listener, &la)) != UCS_OK)
        goto off;
    r->probe_alen = rov_net_addr_encode(&la.sockaddr, r->probe_addr);
    what = "probe setup size";
    st = UCS_ERR_EXCEEDS_LIMIT;
    if (2 + r->probe_alen + kl > UCX_PROBE_BLOB_MAX)
        goto off;
    r->blob = malloc(2 + r->probe_alen + kl);
    if (!r->blob)
        goto off;
    rov_put16(r->blob, (uint16_t)r->probe_alen);
    memcpy(r->blob + 2, r->probe_addr, r->probe_alen);
    memcpy(r->blob + 2 + r->probe_alen, kb, kl);
    r->blob_len = 2 + r->probe_alen + kl;
    rov_put64(r->ka_hdr, (uint64_t)(uintptr_t)ma.address);
    r->probe_quiet_ns = env->stall_ns / 2;
    r->probe_open = true;
    ucp_rkey_buffer_release(kb);
    return;

off:
    rov_debug("ucx", "rail %s: no probes: %s: %s", r->base.spec->name, what,
              ucs_status_string(st));
    if (kb)
        ucp_rkey_buffer_release(kb);
}
