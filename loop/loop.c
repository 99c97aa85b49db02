/*
 * The loop rail: channels between contexts of one process, each a pair of
 * frame queues (RAILOVER_RAILS=loop@NAME; NAME only tells instances apart in
 * logs).  It exists to show that a rail is one directory and one
 * registration line, and to run the transport's state machines (connect,
 * switch, resend, failover on an error, quiesce, close and reopen)
 * deterministically in one process, without sockets (tests/unit/test_loop.c).
 *
 * Address: the listening rail's id, 8 bytes, unique in the process.  A
 * connect finds the listener in a process-wide list; the listener accepts at
 * its next progress, then the connector completes at its own.  A send copies
 * the frame into the peer channel's queue (ROV_OK), or says ROV_ERR_AGAIN
 * while that queue holds LOOP_QUEUE_MAX bytes; each rail's progress
 * delivers its channels' queues in order.  Closing a channel lets the peer
 * read what was queued, then fails it (ROV_ERR_CLOSED), as a TCP FIN does.
 * An eventfd per rail wakes a sleeping context when a peer queues for it.
 *
 * Every context using loop rails must run in one thread: the queues and
 * the list of listeners are not locked (so RAILOVER_PROGRESS_THREAD=off:
 * a context's progress helper is a second thread).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "transport/log.h"
#include "transport/rail.h"
#include "transport/wire.h"

#define LOOP_ADDR_LEN 8
#define LOOP_QUEUE_MAX (4u << 20) /* bytes queued for a channel before AGAIN */

struct loop_frame {
    struct loop_frame *next;
    size_t len;
    uint8_t data[];
};

struct loop_rail;

struct loop_chan {
    struct rov_chan base;           /* first: the transport's part */
    struct loop_rail *r;
    struct loop_chan *peer;         /* NULL once either end closed */
    struct loop_chan *next;         /* the rail's channels */
    struct loop_frame *rx_head, *rx_tail; /* frames for this end */
    size_t rx_bytes;
    uint64_t id, peer_id;           /* for chan_str */
    bool accept_due;                /* inbound: rov_rail_accepted() at progress */
    bool connect_due;               /* outbound: rov_rail_connected() at progress */
    bool writable_due;              /* rov_rail_writable() at progress */
    bool want_writable;             /* a send found the peer's queue full */
    bool peer_gone;                 /* rov_rail_failed() once the queue is read */
    bool dead;                      /* chan_close(): no upcalls; freed at progress */
};

struct loop_rail {
    struct rov_rail base;
    uint64_t listen_id;             /* 0: not listening */
    struct loop_chan *chans;
    struct rov_watch wake;          /* eventfd: a peer queued work for us */
    bool kicked;
    struct loop_rail *next_listener;
};

static struct loop_rail *listeners;
static uint64_t last_id;

static void kick(struct loop_rail *r)
{
    uint64_t one = 1;

    if (r->kicked)
        return;
    r->kicked = true;
    (void)!write(r->wake.fd, &one, sizeof(one));
}

static void free_frames(struct loop_chan *c)
{
    while (c->rx_head) {
        struct loop_frame *f = c->rx_head;

        c->rx_head = f->next;
        free(f);
    }
    c->rx_tail = NULL;
    c->rx_bytes = 0;
}

/* This end goes away: the peer reads what it has, then fails. */
static void detach(struct loop_chan *c)
{
    struct loop_chan *p = c->peer;

    c->peer = NULL;
    if (!p)
        return;
    p->peer = NULL;
    p->peer_gone = true;
    kick(p->r);
}

static struct loop_chan *chan_new(struct loop_rail *r)
{
    struct loop_chan *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->r = r;
    c->id = ++last_id;
    c->next = r->chans;
    r->chans = c;
    return c;
}

static void bury(struct loop_rail *r)
{
    for (struct loop_chan **pp = &r->chans; *pp;) {
        struct loop_chan *c = *pp;

        if (!c->dead) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        free_frames(c);
        free(c);
    }
}

static int loop_progress(struct rov_rail *rail)
{
    struct loop_rail *r = (struct loop_rail *)rail;
    uint64_t count;
    int n = 0;

    if (r->kicked) {
        r->kicked = false;
        (void)!read(r->wake.fd, &count, sizeof(count));
    }
    for (struct loop_chan *c = r->chans; c; c = c->next) {
        if (c->dead)
            continue;
        if (c->accept_due) {
            c->accept_due = false;
            rov_rail_accepted(rail, &c->base);
            if (c->peer) {
                c->peer->connect_due = true;
                kick(c->peer->r);
            }
            n++;
        }
        if (c->connect_due && !c->dead) {
            c->connect_due = false;
            rov_rail_connected(&c->base);
            n++;
        }
        while (c->rx_head && !c->dead) {
            struct loop_frame *f = c->rx_head;

            c->rx_head = f->next;
            if (!c->rx_head)
                c->rx_tail = NULL;
            c->rx_bytes -= f->len;
            rov_rail_recv(&c->base, f->data, f->len);
            free(f);
            n++;
        }
        if (!c->dead && c->peer && c->peer->want_writable) {
            c->peer->want_writable = false;
            c->peer->writable_due = true;
            kick(c->peer->r);
        }
        if (c->writable_due && !c->dead) {
            c->writable_due = false;
            rov_rail_writable(&c->base);
        }
        if (c->peer_gone && !c->dead && !c->rx_head) {
            c->peer_gone = false;
            rov_rail_failed(&c->base, ROV_ERR_CLOSED, "loop: the peer closed the channel");
            n++;
        }
    }
    bury(r);
    return n;
}

static void wake_cb(struct rov_watch *w, uint32_t events)
{
    (void)events;
    loop_progress(&rov_container_of(w, struct loop_rail, wake)->base);
}

static int loop_ready(struct rov_rail *rail)
{
    return ((struct loop_rail *)rail)->kicked;
}

static rov_status_t loop_open(rov_context_t *ctx, const struct rov_rail_spec *spec,
                              const struct rov_rail_env *env, const void *settings,
                              struct rov_rail **rail_p)
{
    struct loop_rail *r = rov_zalloc_lines(sizeof(*r));

    (void)spec;
    (void)env;
    (void)settings;
    if (!r)
        return ROV_ERR_NOMEM;
    r->wake.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    r->wake.cb = wake_cb;
    if (r->wake.fd < 0 || rov_ctx_watch(ctx, &r->wake, EPOLLIN) != ROV_OK) {
        rov_error("loop", "eventfd: %m");
        if (r->wake.fd >= 0)
            close(r->wake.fd);
        free(r);
        return ROV_ERR_IO;
    }
    *rail_p = &r->base;
    return ROV_OK;
}

static void loop_unlisten(struct rov_rail *rail)
{
    struct loop_rail *r = (struct loop_rail *)rail;

    for (struct loop_rail **pp = &listeners; *pp; pp = &(*pp)->next_listener) {
        if (*pp == r) {
            *pp = r->next_listener;
            break;
        }
    }
    r->listen_id = 0;
    /* Connects not yet accepted are refused: their connectors fail. */
    for (struct loop_chan *c = r->chans; c; c = c->next) {
        if (c->accept_due && !c->dead) {
            c->dead = true;
            detach(c);
        }
    }
}

static void loop_close(struct rov_rail *rail)
{
    struct loop_rail *r = (struct loop_rail *)rail;

    loop_unlisten(rail);
    for (struct loop_chan *c = r->chans; c; c = c->next) {
        c->dead = true;
        detach(c);
    }
    bury(r);
    rov_ctx_unwatch(rail->ctx, &r->wake);
    close(r->wake.fd);
    free(r);
}

static struct loop_rail *listener(uint64_t id)
{
    for (struct loop_rail *l = listeners; l; l = l->next_listener)
        if (l->listen_id == id)
            return l;
    return NULL;
}

static rov_status_t loop_listen(struct rov_rail *rail, void *addr, size_t *len_p)
{
    struct loop_rail *r = (struct loop_rail *)rail;

    if (!r->listen_id) {
        uint64_t before = 0;

        /* A reopen listens where it did, if nobody took that id. */
        if (rail->listen_hint && rail->listen_hint_len == LOOP_ADDR_LEN)
            before = rov_get64(rail->listen_hint);
        r->listen_id = before && !listener(before) ? before : ++last_id;
        r->next_listener = listeners;
        listeners = r;
    }
    rov_put64(addr, r->listen_id);
    *len_p = LOOP_ADDR_LEN;
    return ROV_OK;
}

static rov_status_t loop_connect(struct rov_rail *rail, const void *addr, size_t len,
                                 struct rov_chan **chan_p)
{
    struct loop_rail *r = (struct loop_rail *)rail, *l;
    struct loop_chan *out, *in;

    if (len != LOOP_ADDR_LEN)
        return ROV_ERR_INVAL;
    l = listener(rov_get64(addr));
    if (!l)
        return ROV_ERR_REFUSED; /* nothing listens there (closed, or gone) */
    out = chan_new(r);
    in = out ? chan_new(l) : NULL;
    if (!in) {
        if (out)
            out->dead = true;
        return ROV_ERR_NOMEM;
    }
    out->peer = in;
    in->peer = out;
    out->peer_id = in->id;
    in->peer_id = out->id;
    in->accept_due = true;
    kick(l);
    *chan_p = &out->base;
    return ROV_OK;
}

static rov_status_t loop_send(struct rov_chan *chan, const struct iovec *iov, int iovcnt,
                              void *cookie)
{
    struct loop_chan *c = (struct loop_chan *)chan, *p = c->peer;
    struct loop_frame *f;
    size_t len = 0, off = 0;

    (void)cookie;
    if (!p)
        return ROV_ERR_RESET; /* rov_rail_failed() follows at progress */
    if (p->rx_bytes >= LOOP_QUEUE_MAX) {
        c->want_writable = true;
        return ROV_ERR_AGAIN;
    }
    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    f = malloc(sizeof(*f) + len);
    if (!f)
        return ROV_ERR_NOMEM;
    for (int i = 0; i < iovcnt; i++) {
        memcpy(f->data + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    f->len = len;
    f->next = NULL;
    if (p->rx_tail)
        p->rx_tail->next = f;
    else
        p->rx_head = f;
    p->rx_tail = f;
    p->rx_bytes += len;
    kick(p->r);
    return ROV_OK;
}

static void loop_chan_close(struct rov_chan *chan)
{
    struct loop_chan *c = (struct loop_chan *)chan;

    c->dead = true;
    detach(c);
    free_frames(c);
}

static void loop_chan_str(struct rov_chan *chan, char *buf, size_t len)
{
    struct loop_chan *c = (struct loop_chan *)chan;

    snprintf(buf, len, "loop %llu>%llu", (unsigned long long)c->id,
             (unsigned long long)c->peer_id);
}

static void loop_addr_str(const void *addr, size_t len, char *buf, size_t buf_len)
{
    if (len == LOOP_ADDR_LEN)
        snprintf(buf, buf_len, "loop:%llu", (unsigned long long)rov_get64(addr));
    else
        snprintf(buf, buf_len, "<%zu bytes>", len);
}

static const struct rov_rail_ops loop_ops = {
    .name = "loop",
    .open = loop_open,
    .close = loop_close,
    .listen = loop_listen,
    .unlisten = loop_unlisten,
    .connect = loop_connect,
    .send = loop_send,
    .chan_close = loop_chan_close,
    .progress = loop_progress,
    .ready = loop_ready,
    .chan_str = loop_chan_str,
    .addr_str = loop_addr_str,
};

ROV_RAIL_REGISTER(loop_ops)
