/*
 * The verbs rail's out-of-band connection setup (RAILOVER_VERBS_CM=oob, the
 * default; cm.c is the librdmacm way, verbs.c the data path): the TCP
 * listener that is the rail address, the connector, the handshake on that
 * socket that brings both QPs to RTS, and its state machine (enum
 * vb_oob_state: one table, one setter).
 *
 * The rail address is a small TCP listener on the IP address of the RDMA
 * port (the IPv4 address in its RoCE GID; RAILOVER_TCP_IF otherwise).  The
 * acceptor sends a random challenge at once; the connector, its QP made,
 * answers with its QP number, PSN, GID, LID, receive depth and keepalive
 * target and a MAC over them and the challenge under the listener's address
 * key, or the connection's secret when it reconnects
 * (rov_rail_preauth_prove()); only then does the acceptor create its QP, CQ
 * and registered rings (a stranger without the key gets none), bring the QP
 * to RTS and answer with the same; the connector brings its QP to RTS and
 * confirms; both close the socket.  Until it is established, an accepted
 * peer counts against the transport's budget and deadline for
 * unauthenticated peers (rov_rail_preauth_begin(), rov_rail_accept_ok()).
 * Nothing of librdmacm is touched, so after the rail is closed the process
 * holds no /dev/infiniband descriptor and CRIU can dump it (librdmacm keeps
 * its device context open for the life of the process).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include "verbs/verbs.h"

/* A channel's setup: one table, one setter (rov_rail_state_change()).
 * Every state may end in OOB_NONE: established, failed or closed. */
static const struct rov_state_info vb_oob_states[] = {
    [OOB_NONE] = {"none", ROV_STATE_BIT(OOB_NONE) | ROV_STATE_BIT(OOB_CONNECTING) |
                              ROV_STATE_BIT(OOB_ACCEPTED)},
    [OOB_CONNECTING] = {"connecting", ROV_STATE_BIT(OOB_WAIT_CHALLENGE) |
                                          ROV_STATE_BIT(OOB_NONE)},
    [OOB_WAIT_CHALLENGE] = {"wait-challenge", ROV_STATE_BIT(OOB_WAIT_INFO) |
                                                  ROV_STATE_BIT(OOB_NONE)},
    [OOB_WAIT_INFO] = {"wait-info", ROV_STATE_BIT(OOB_NONE)},
    [OOB_ACCEPTED] = {"accepted", ROV_STATE_BIT(OOB_WAIT_READY) | ROV_STATE_BIT(OOB_NONE)},
    [OOB_WAIT_READY] = {"wait-ready", ROV_STATE_BIT(OOB_NONE)},
};

void vb_oob_set_state(struct vb_chan *c, enum vb_oob_state state, const char *why)
{
    char what[48];

    snprintf(what, sizeof(what), "setup of qp %u", c->qp ? c->qp->qp_num : 0);
    if (rov_rail_state_change(&c->rail->base, vb_oob_states, c->oob, state, what, why))
        c->oob = state;
}

void vb_oob_close(struct vb_chan *c)
{
    if (c->oob_fd >= 0) {
        rov_ctx_unwatch(c->rail->base.ctx, &c->oob_watch);
        close(c->oob_fd);
        c->oob_fd = -1;
    }
    vb_oob_set_state(c, OOB_NONE, "setup over");
}

/* Out-of-band mode: the channel's own QP, brought to INIT here.  False
 * (logged) when it cannot be made. */
static bool chan_qp(struct vb_chan *c)
{
    struct vb_rail *r = c->rail;
    struct ibv_qp_init_attr qia;
    struct ibv_qp_attr attr = {0};
    struct ibv_qp *qp;

    vb_qp_init_attr(c, &qia);
    qp = ibv_create_qp(r->pd, &qia);
    if (!qp) {
        rov_error(VB, "ibv_create_qp on %s: %m", r->dev_name);
        return false;
    }
    c->qp = qp;
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = r->port;
    /* Large frames and keepalive are written; memory registered for peers'
     * reads (rov_mem_register()) is read.  The rest of our memory has no
     * remote access in its registration, whatever the QP allows. */
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &attr,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        rov_error(VB, "QP to INIT on %s: %m", r->dev_name);
        return false;
    }
    return vb_chan_use_qp(c, qp) == 0;
}

/* Out-of-band mode: check the peer's half and bring the QP to RTS. */
static rov_status_t connect_qp(struct vb_chan *c, const char **why)
{
    struct vb_rail *r = c->rail;
    const struct vb_oob *p = &c->peer;
    struct ibv_qp_attr a = {0};
    rov_status_t st = vb_take_info(c, (const struct vb_oob *)c->oob_buf, why);

    if (st != ROV_OK)
        return st;
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = p->mtu < r->mtu ? (enum ibv_mtu)p->mtu : r->mtu;
    a.dest_qp_num = p->qpn;
    a.rq_psn = p->psn;
    a.max_dest_rd_atomic = VB_MAX_RD_ATOMIC;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = p->lid;
    a.ah_attr.port_num = r->port;
    if (r->global) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, p->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)r->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    if (ibv_modify_qp(c->qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        rov_warn(VB, "QP %u to RTR: %m", c->qp->qp_num);
        *why = errno == ENETUNREACH || errno == EHOSTUNREACH
                   ? "verbs: no route to the peer's GID (QP to RTR failed)"
                   : "verbs: QP to RTR failed";
        return ROV_ERR_UNREACHABLE;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = r->timeout;
    a.retry_cnt = r->retry;
    a.rnr_retry = 0;
    a.sq_psn = c->psn;
    a.max_rd_atomic = VB_MAX_RD_ATOMIC;
    if (ibv_modify_qp(c->qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
        rov_warn(VB, "QP %u to RTS: %m", c->qp->qp_num);
        *why = "verbs: QP to RTS failed";
        return ROV_ERR_IO;
    }
    c->last_heard_ns = c->last_post_ns = rov_now_ns();
    return ROV_OK;
}

/* Read until the buffer holds want bytes.  1: complete, 0: wait, -1: failed. */
static int oob_read(struct vb_chan *c, size_t want)
{
    while (c->oob_have < want) {
        ssize_t n = read(c->oob_fd, c->oob_buf + c->oob_have, want - c->oob_have);

        if (n > 0) {
            c->oob_have += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        vb_setup_failed(c, n == 0 ? ROV_ERR_CLOSED : rov_net_errno_status(errno),
                 n == 0 ? "verbs: peer closed the connection during the handshake"
                        : "verbs: handshake socket error");
        return -1;
    }
    return 1;
}

static bool oob_write(struct vb_chan *c, const void *buf, size_t len)
{
    /* Tiny messages on a fresh socket: the kernel takes them whole. */
    if (send(c->oob_fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len) {
        vb_setup_failed(c, rov_net_errno_status(errno), "verbs: handshake send failed");
        return false;
    }
    return true;
}

/* Once the peer's half of the handshake is in, bring the QP to RTS.  False
 * while it is still arriving, or when the setup failed (reported). */
static bool take_peer_half(struct vb_chan *c)
{
    const char *why;
    rov_status_t st;

    if (oob_read(c, sizeof(struct vb_oob)) <= 0)
        return false;
    st = connect_qp(c, &why);
    if (st != ROV_OK) {
        vb_setup_failed(c, st, why);
        return false;
    }
    return true;
}

/* Acceptor: the connector's half and its proof of our address key; only
 * then the QP, CQ and rings, brought to RTS.  False while it is still
 * arriving, or when the setup failed (reported). */
static bool take_proven_half(struct vb_chan *c)
{
    struct vb_rail *r = c->rail;

    if (oob_read(c, sizeof(struct vb_oob) + ROV_RAIL_PROOF_LEN) <= 0)
        return false;
    if (!rov_rail_preauth_check(&r->base, c->oob_challenge, c->oob_buf, sizeof(struct vb_oob),
                                c->oob_buf + sizeof(struct vb_oob), ROV_RAIL_PROOF_LEN)) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        char peer[64] = "?";

        memset(&ss, 0, sizeof(ss));
        if (getpeername(c->oob_fd, (struct sockaddr *)&ss, &sl) == 0)
            rov_net_sockaddr_str(&ss, peer, sizeof(peer));
        rov_log_ratelimited(ROV_LOG_WARN, VB, "%s: connection setup from %s without proof of "
                            "this endpoint's address key or a connection's secret: closed",
                            r->dev_name, peer);
        vb_setup_failed(c, ROV_ERR_PROTO, "verbs: connection setup without proof of the key");
        return false;
    }
    if (!vb_chan_buffers(c) || !chan_qp(c)) {
        vb_setup_failed(c, ROV_ERR_NOMEM, "verbs: no resources for an inbound connection");
        return false;
    }
    return take_peer_half(c);
}

static void oob_cb(struct rov_watch *w, uint32_t events)
{
    struct vb_chan *c = rov_container_of(w, struct vb_chan, oob_watch);
    struct vb_oob mine;
    uint32_t ready = htonl(VB_OOB_READY);

    switch (c->oob) {
    case OOB_CONNECTING: {
        int err = 0;
        socklen_t el = sizeof(err);

        getsockopt(c->oob_fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err) {
            errno = err;
            vb_setup_failed(c, rov_net_errno_status(err), "verbs: cannot reach the peer's handshake listener");
            return;
        }
        vb_oob_set_state(c, OOB_WAIT_CHALLENGE, "connected");
        c->oob_have = 0;
        rov_ctx_watch_mod(c->rail->base.ctx, &c->oob_watch, EPOLLIN);
        return;
    }
    case OOB_WAIT_CHALLENGE: {
        uint8_t msg[sizeof(struct vb_oob) + ROV_RAIL_PROOF_LEN];

        if (oob_read(c, ROV_NONCE_LEN) <= 0)
            return;
        vb_fill_info(c, &mine);
        memcpy(msg, &mine, sizeof(mine));
        rov_rail_preauth_prove(&c->base, c->oob_buf, &mine, sizeof(mine), msg + sizeof(mine),
                               ROV_RAIL_PROOF_LEN);
        if (!oob_write(c, msg, sizeof(msg)))
            return;
        vb_oob_set_state(c, OOB_WAIT_INFO, "our half sent");
        c->oob_have = 0;
        return;
    }
    case OOB_WAIT_INFO:
        if (!take_peer_half(c))
            return;
        if (!oob_write(c, &ready, sizeof(ready)))
            return;
        vb_chan_established(c);
        return;
    case OOB_ACCEPTED:
        if (!take_proven_half(c))
            return;
        vb_fill_info(c, &mine);
        if (!oob_write(c, &mine, sizeof(mine)))
            return;
        vb_oob_set_state(c, OOB_WAIT_READY, "our half sent");
        c->oob_have = 0;
        return;
    case OOB_WAIT_READY:
        if (oob_read(c, sizeof(ready)) <= 0)
            return;
        if (memcmp(c->oob_buf, &ready, sizeof(ready)) != 0) {
            vb_setup_failed(c, ROV_ERR_PROTO, "verbs: bad handshake confirmation from peer");
            return;
        }
        vb_chan_established(c);
        return;
    case OOB_NONE:
        return;
    }
}

static bool oob_watch(struct vb_chan *c, int fd, uint32_t events)
{
    /* While the handshake waits for the peer's half, it is the peer's turn
     * and the failover engine does not time it: a path that died, or a peer
     * socket that is gone (its reset lost on the dead link), must still end
     * the wait. */
    rov_net_keepalive(fd, c->rail->keepalive_ns);
    c->oob_fd = fd;
    c->oob_watch.fd = fd;
    c->oob_watch.cb = oob_cb;
    if (rov_ctx_watch(c->rail->base.ctx, &c->oob_watch, events) != ROV_OK) {
        close(fd);
        c->oob_fd = -1;
        return false;
    }
    return true;
}

void vb_accept_resume(struct rov_rail *rail)
{
    struct vb_rail *r = (struct vb_rail *)rail;

    if (r->accept_paused && r->listen_fd >= 0 &&
        rov_ctx_watch_urgent(rail->ctx, &r->listen_watch, EPOLLIN) == ROV_OK)
        r->accept_paused = false;
}

static void listen_cb(struct rov_watch *w, uint32_t events)
{
    struct vb_rail *r = rov_container_of(w, struct vb_rail, listen_watch);
    bool made_room = false;

    for (;;) {
        struct vb_chan *c;
        int fd;

        if (!rov_rail_accept_ok(&r->base)) {
            /* Connections wait in the listen queue until a slot frees. */
            rov_ctx_unwatch(r->base.ctx, &r->listen_watch);
            r->accept_paused = true;
            return;
        }
        fd = accept4(r->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            /* Out of descriptors: the peer that has waited longest for its
             * handshake makes room, as on every listener (once a readiness:
             * one that held no descriptor freed none). */
            if ((errno == EMFILE || errno == ENFILE) && !made_room &&
                (made_room = rov_rail_fd_short(&r->base, -1)))
                continue;
            if (errno != EAGAIN)
                rov_log_ratelimited(ROV_LOG_WARN, VB, "accept on %s: %m", r->base.spec->name);
            return;
        }
        rov_rail_fd_short(&r->base, fd);
        if (r->port_down || r->device_dead) {
            close(fd); /* the connector sees EOF and fails over */
            continue;
        }
        c = vb_chan_shell(r, false);
        if (!c || getentropy(c->oob_challenge, sizeof(c->oob_challenge)) != 0) {
            rov_log_ratelimited(ROV_LOG_WARN, VB, "no memory or random bytes for an inbound "
                                "connection");
            free(c);
            close(fd);
            continue;
        }
        vb_oob_set_state(c, OOB_ACCEPTED, "accepted");
        if (!oob_watch(c, fd, EPOLLIN)) {
            free(c);
            continue;
        }
        vb_preauth_begin(c);
        oob_write(c, c->oob_challenge, sizeof(c->oob_challenge));
    }
}

rov_status_t vb_oob_listen(struct vb_rail *r)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int one = 1;
    int fd = socket(r->oob_local.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return ROV_ERR_IO;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&r->oob_local, r->oob_local_len) < 0 ||
        listen(fd, 512) < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        rov_error(VB, "rail %s: cannot listen for handshakes: %m", r->base.spec->name);
        close(fd);
        return ROV_ERR_IO;
    }
    r->listen_fd = fd;
    r->listen_watch.fd = fd;
    r->listen_watch.cb = listen_cb;
    if (rov_ctx_watch_urgent(r->base.ctx, &r->listen_watch, EPOLLIN) != ROV_OK) {
        close(fd);
        r->listen_fd = -1;
        return ROV_ERR_IO;
    }
    r->addr_len = rov_net_addr_encode(&ss, r->addr);
    return ROV_OK;
}

void vb_unlisten(struct rov_rail *rail)
{
    struct vb_rail *r = (struct vb_rail *)rail;

    if (r->listen_fd >= 0) {
        if (!r->accept_paused)
            rov_ctx_unwatch(rail->ctx, &r->listen_watch);
        r->accept_paused = false;
        close(r->listen_fd);
        r->listen_fd = -1;
    }
}

rov_status_t vb_oob_connect(struct vb_rail *r, const struct sockaddr_storage *peer,
                            socklen_t pl, struct vb_chan **chan_p)
{
    struct vb_chan *c;
    int fd, one = 1;

    c = vb_chan_alloc(r, true);
    if (c && !chan_qp(c)) {
        vb_chan_free(c);
        c = NULL;
    }
    if (!c)
        return ROV_ERR_NOMEM;
    fd = socket(peer->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        vb_chan_close(&c->base);
        vb_bury(r);
        return ROV_ERR_IO;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* From the RDMA port's address, so that the handshake takes the fabric. */
    if (peer->ss_family == r->oob_local.ss_family)
        (void)bind(fd, (struct sockaddr *)&r->oob_local, r->oob_local_len);
    if (connect(fd, (struct sockaddr *)peer, pl) < 0 && errno != EINPROGRESS) {
        rov_status_t st = rov_net_errno_status(errno);

        close(fd);
        c->dead = true;
        vb_chan_close(&c->base);
        vb_bury(r);
        return st;
    }
    vb_oob_set_state(c, OOB_CONNECTING, "connecting");
    if (!oob_watch(c, fd, EPOLLOUT)) {
        c->dead = true;
        vb_chan_close(&c->base);
        vb_bury(r);
        return ROV_ERR_IO;
    }
    *chan_p = c;
    return ROV_OK;
}

void vb_oob_health(struct vb_chan *c, struct rov_chan_health *h)
{
    /* Handshake: the TCP connect is the path's part; once the peer's
     * kernel has acknowledged our half, the answer needs the peer's
     * application, which may be busy computing. */
    struct tcp_info ti;
    socklen_t tl = sizeof(ti);

    h->busy = 1;
    h->queued = 0;
    h->heard_ago_ns = h->sent_ago_ns = 0;
    if (c->oob == OOB_WAIT_INFO &&
        getsockopt(c->oob_fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && ti.tcpi_unacked == 0)
        h->peer_turn = 1;
}
