/*
 * The TCP rail: non-blocking sockets, epoll, explicit framing.
 *
 * Frames are found in the byte stream with rov_wire_peek(), so garbage is
 * rejected on its first bytes.  Frames up to the receive buffer size are
 * handed up in place; larger ones are read straight into a frame buffer.
 * Sends go out with one sendmsg(); what the kernel does not take is queued
 * (referenced when the transport gives a cookie, copied otherwise) and
 * flushed on EPOLLOUT.
 *
 * One-sided reads (ops.get) go by message: a READ frame names a range of
 * the peer's registration, whose rail answers with a READ_DATA frame sent
 * from that memory (no copy), and the reader receives its payload straight
 * into its own memory (no copy): an MPI library's RDMA-get protocol then
 * moves a large message with the two kernel copies of a plain socket, where
 * its send protocol packs and unpacks it on top.  Neither frame reaches the
 * transport.
 *
 * Address format (ROV_RAIL_ADDR_MAX bytes at most): u8 family (4 or 6),
 * u16 port (network order), then 4 or 16 address bytes (network order).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <netinet/in.h>
/* linux/tcp.h, not netinet/tcp.h: glibc's struct tcp_info stops before
 * tcpi_notsent_bytes and tcpi_snd_wnd (Linux 4.6 and 5.19). */
#include <linux/tcp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/log.h"
#include "transport/netaddr.h"
#include "transport/netlink.h"
#include "transport/rail.h"
#include "transport/wire.h"

/* The rail's settings (transport/settings.h). */
struct tcp_settings {
    uint64_t rxbuf;        /* RAILOVER_TCP_RXBUF */
    char congestion[16];   /* RAILOVER_TCP_CONGESTION (TCP_CA_NAME_MAX) */
};

static void tcp_defaults(void *block)
{
    ((struct tcp_settings *)block)->rxbuf = 256 * 1024;
}

static const struct rov_var tcp_vars[] = {
    {"RAILOVER_TCP_RXBUF", ROV_VAR_SIZE, offsetof(struct tcp_settings, rxbuf), 0, 4 * 1024,
     64 * 1024 * 1024, NULL, "receive staging buffer per tcp channel"},
    {"RAILOVER_TCP_CONGESTION", ROV_VAR_STRING, offsetof(struct tcp_settings, congestion),
     sizeof(((struct tcp_settings *)0)->congestion), 0, 0, NULL,
     "TCP congestion control of tcp channels, one of the kernel's "
     "(net.ipv4.tcp_allowed_congestion_control; empty: the system's default)"},
};

static struct rov_settings tcp_settings = {
    .layer = "tcp",
    .vars = tcp_vars,
    .nvars = sizeof(tcp_vars) / sizeof(tcp_vars[0]),
    .size = sizeof(struct tcp_settings),
    .defaults = tcp_defaults,
};

/* Poll channels directly (no epoll_wait) while there are at most this many. */
#define TCP_DIRECT_POLL_MAX 8
/* ... and after this many polls without a sleep, take them out of epoll:
 * an fd in an epoll set makes every arriving segment run the set's wake-up
 * callback (about 1% of a loopback round trip).  rov_context_arm() puts them
 * back before any sleep. */
#define TCP_QUIET_AFTER 64
#define TCP_READS_PER_POLL 16
#define TCP_FLUSH_IOV 64
#define TCP_PAGE 4096 /* large frames: payload alignment */
/* The largest read (ops.get), at most the reader's RAILOVER_MAX_MSG
 * (tcp_get(), and the context caps it there): an MPI library reads a
 * larger message in pieces of this.  As large as the default
 * RAILOVER_MAX_MSG, so that a message is one read: when some of the pieces
 * of one message failed (a fault in the middle of a 16 MiB message read in
 * 4 MiB pieces), ob1's fallback to send for those pieces hung the job
 * (docs/mpi.md); a whole read that fails falls back whole. */
#define TCP_GET_MAX (64u << 20)
/* Answers to a peer's reads queued on a channel (not yet taken by the
 * socket) at most; more reads are refused (the peer sends instead): a peer
 * that asks without reading costs a bounded queue. */
#define TCP_ANSWERS_MAX 1024
/* Staging buffer of a channel whose peer has not authenticated: one whole
 * handshake frame, the largest it may send (rov_chan_rx_max_payload()). */
#define TCP_PREAUTH_BUF (ROV_WIRE_HDR_LEN + ROV_WIRE_HELLO_MAX)

struct tcp_reg;

struct tcp_txq {
    struct tcp_txq *next;
    struct iovec iov[ROV_RAIL_MAX_IOV];
    int iovcnt;
    void *cookie;    /* transport's, or NULL when copied */
    struct tcp_reg *reg; /* a READ_DATA frame: references this registration */
    bool answer;     /* a READ_DATA frame (counted in tcp_chan.answers) */
    void *owned;     /* its rest, copied when the registration went first */
    uint8_t copy[];  /* the copied frame remainder (READ_DATA: its header) */
};

/* A registration (ops.mem_reg): what a peer's READ may name. */
struct tcp_reg {
    struct tcp_reg *next;   /* the rail's */
    uintptr_t base;
    size_t len;
    uint32_t key;
    unsigned queued;        /* READ_DATA frames of it in a channel's txq */
};

/* A read of ours in flight on a channel (ops.get), in the order asked. */
struct tcp_read {
    struct tcp_read *next;
    uint8_t *local;
    size_t len;
    uint32_t id;
    void *cookie;           /* the transport's (rov_rail_get_done()) */
};

/* What a poll and a message touch first, in two cache lines after the base
 * (chan_new() allocates it on a line). */
struct tcp_chan {
    struct rov_chan base;
    struct rov_watch watch;
    uint32_t events;
    bool connecting, dead;
    bool ending;            /* chan_flush: the stream ends after the txq */
    bool quiet;             /* out of epoll: polled directly (TCP_QUIET_AFTER) */
    bool expect_big;        /* last frame was large: read the next header alone */
    bool preauth;           /* buf is TCP_PREAUTH_BUF until the peer authenticates */
    uint8_t *buf;           /* receive staging: [off, len) unparsed */
    size_t cap, off, len;
    size_t big_need;        /* size of the large frame being read, else 0 */
    struct tcp_txq *txq_head, *txq_tail;
    struct tcp_chan *next;  /* rail's list (live) or graveyard (dead) */
    struct tcp_chan **pprev; /* live: what points at it in the rail's list */
    struct tcp_rail *rail;
    uint8_t *big;           /* frame larger than buf being read: its payload */
    void *big_mem;          /* starts on a page, so big's payload does too */
    size_t big_cap, big_len;
    uint64_t big_frames;        /* large frames begun */
    uint64_t big_seen_frame;    /* ... the one tcp_chan_health() saw last, */
    size_t big_seen_len;        /* ... how much of it had come, */
    uint64_t big_seen_ns;       /* ... since when (0: none seen) */
    struct tcp_txq *txq_ctrl;   /* last queued control frame, if any */
    struct tcp_read *reads, *reads_tail; /* our reads not answered yet */
    struct tcp_read *rd_in;     /* the one whose READ_DATA payload is being read */
    size_t rd_got;              /* ... bytes of it in rd_in->local so far */
    unsigned answers;           /* READ_DATA frames of ours in txq */
};

/* The fields a poll reads first: in the cache line of the ops it calls
 * (struct rov_rail; tcp_open() allocates it on a line). */
struct tcp_rail {
    struct rov_rail base;
    struct tcp_chan *chans, *graveyard;
    int nchans;
    unsigned busy_polls;    /* progress calls since the last arm */
    int nquiet;             /* channels out of epoll */
    struct sockaddr_storage local; /* address to bind, port 0 */
    socklen_t local_len;
    char ifname[IF_NAMESIZE];
    int listen_fd;
    int spare_fd;           /* kept in reserve for accept() out of descriptors */
    bool accept_paused;     /* listener out of epoll: no descriptor, no reserve */
    uint64_t accept_try_ns; /* many channels: the next direct accept (tcp_progress()) */
    struct rov_watch lwatch;
    uint8_t addr[ROV_RAIL_ADDR_MAX];
    size_t addr_len;
    size_t rxbuf;
    char congestion[16];   /* RAILOVER_TCP_CONGESTION, or empty */
    uint64_t keepalive_ns; /* TCP keepalive idle time (RAILOVER_KEEPALIVE) */
    uint64_t stall_ns;     /* a large frame that stops arriving fails (env stall_ns) */
    struct rov_net_links links; /* the interface with our address comes back */
    struct tcp_reg *regs;   /* registrations, newest first */
    uint32_t next_key, next_read;
};

static const char *errno_why(int err)
{
    switch (err) {
    case ECONNREFUSED: return "tcp: connection refused";
    case ETIMEDOUT: return "tcp: connection timed out";
    case EHOSTUNREACH: return "tcp: host unreachable";
    case ENETUNREACH: return "tcp: network unreachable";
    case EHOSTDOWN: return "tcp: host down";
    case ENETDOWN: return "tcp: network down";
    case ECONNRESET: return "tcp: connection reset by peer";
    case ECONNABORTED: return "tcp: connection aborted";
    case EPIPE: return "tcp: broken pipe";
    default: return "tcp: socket error";
    }
}

/* Out of descriptors: a local limit, named with the limit, not the peer's
 * or the path's fault. */
static ROV_COLD const char *nofile_why(int err, char *buf, size_t len)
{
    struct rlimit rl;

    if (err == ENFILE)
        return "out of file descriptors (ENFILE: the system's file table is full, "
               "fs.file-max)";
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        snprintf(buf, len, "out of file descriptors (EMFILE: RLIMIT_NOFILE %llu reached)",
                 (unsigned long long)rl.rlim_cur);
    else
        snprintf(buf, len, "out of file descriptors (EMFILE)");
    return buf;
}

/* Addresses ------------------------------------------------------------------ */

static void tcp_addr_str(const void *addr, size_t len, char *buf, size_t buf_len)
{
    rov_net_addr_str(addr, len, buf, buf_len);
}

/* Channels -------------------------------------------------------------------- */

static void chan_cb(struct rov_watch *w, uint32_t events);
static ROV_COLD void fail(struct tcp_chan *c, rov_status_t st, const char *why);
static ROV_COLD void accept_resume(struct tcp_rail *r);
static void tcp_chan_str(struct rov_chan *chan, char *buf, size_t len);

static void set_events(struct tcp_chan *c, uint32_t events)
{
    if (c->events == events)
        return;
    c->events = events;
    if (!c->quiet)
        rov_ctx_watch_mod(c->rail->base.ctx, &c->watch, events);
}

static void chan_quiet(struct tcp_chan *c)
{
    rov_ctx_unwatch(c->rail->base.ctx, &c->watch);
    c->quiet = true;
    c->rail->nquiet++;
}

/* Every channel back in epoll (a sleep comes, or too many to poll). */
static rov_status_t rail_wake(struct tcp_rail *r)
{
    rov_status_t st = ROV_OK;

    r->busy_polls = 0;
    for (struct tcp_chan *c = r->chans; c && r->nquiet;) {
        if (!c->quiet) {
            c = c->next;
            continue;
        }
        c->quiet = false;
        r->nquiet--;
        if (rov_ctx_watch(r->base.ctx, &c->watch, c->events) != ROV_OK) {
            fail(c, ROV_ERR_IO, "tcp: cannot watch the socket");
            st = ROV_ERR_BUSY; /* an event for the caller: no sleep */
            c = r->chans;     /* the failure may have changed the list */
            continue;
        }
        c = c->next;
    }
    return st;
}

static struct tcp_chan *chan_new(struct tcp_rail *r, int fd, bool connecting)
{
    struct tcp_chan *c = rov_zalloc_lines(sizeof(*c));
    int one = 1;

    if (!c)
        return NULL;
    /* Nothing more is buffered for a peer that has not authenticated: the
     * buffer grows to RAILOVER_TCP_RXBUF once it has (rx_grow()). */
    c->buf = malloc(TCP_PREAUTH_BUF);
    if (!c->buf) {
        free(c);
        return NULL;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (r->congestion[0] && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, r->congestion,
                                       (socklen_t)strlen(r->congestion)) < 0)
        rov_log_ratelimited(ROV_LOG_WARN, "tcp", "RAILOVER_TCP_CONGESTION=%s on fd %d: %s "
                            "(the system's default stays)", r->congestion, fd, strerror(errno));
    /* Until the HELLO is answered the engine sends no probes here: a peer
     * socket that vanished (its reset lost) must still show as an error. */
    rov_net_keepalive(fd, r->keepalive_ns);
    c->rail = r;
    c->cap = TCP_PREAUTH_BUF;
    c->preauth = true;
    c->connecting = connecting;
    c->watch.fd = fd;
    c->watch.cb = chan_cb;
    c->events = connecting ? EPOLLOUT : EPOLLIN;
    if (rov_ctx_watch(r->base.ctx, &c->watch, c->events) != ROV_OK) {
        free(c->buf);
        free(c);
        return NULL;
    }
    c->next = r->chans;
    if (c->next)
        c->next->pprev = &c->next;
    c->pprev = &r->chans;
    r->chans = c;
    r->nchans++;
    return c;
}

/* A queued frame is written or dropped. */
static void txq_free(struct tcp_chan *c, struct tcp_txq *q)
{
    if (q->cookie)
        rov_rail_send_done(&c->base, q->cookie);
    if (q->reg)
        q->reg->queued--;
    if (q->answer)
        c->answers--;
    free(q->owned);
    free(q);
}

static void txq_release(struct tcp_chan *c)
{
    while (c->txq_head) {
        struct tcp_txq *q = c->txq_head;

        c->txq_head = q->next;
        txq_free(c, q);
    }
    c->txq_tail = NULL;
    c->txq_ctrl = NULL;
}

/* Our reads on a channel that ends: each ends with status, the one whose
 * answer was arriving first. */
static void reads_end(struct tcp_chan *c, rov_status_t status)
{
    if (c->rd_in) {
        rov_rail_get_done(&c->base, c->rd_in->cookie, status);
        free(c->rd_in);
        c->rd_in = NULL;
    }
    while (c->reads) {
        struct tcp_read *rd = c->reads;

        c->reads = rd->next;
        rov_rail_get_done(&c->base, rd->cookie, status);
        free(rd);
    }
    c->reads_tail = NULL;
}

static void tcp_chan_close(struct rov_chan *chan)
{
    struct tcp_chan *c = (struct tcp_chan *)chan;
    struct tcp_rail *r = c->rail;

    if (c->dead)
        return;
    c->dead = true;
    if (c->quiet) {
        c->quiet = false;
        r->nquiet--;
    } else {
        rov_ctx_unwatch(r->base.ctx, &c->watch);
    }
    if (c->preauth) {
        /* A stranger's, maybe shed to make room for accept(): its
         * descriptor is free at once.  A peer's closes with the rest. */
        close(c->watch.fd);
        c->watch.fd = -1;
    }
    *c->pprev = c->next; /* (O(1): a link down closes every channel of the rail) */
    if (c->next)
        c->next->pprev = c->pprev;
    r->nchans--;
    txq_release(c);
    reads_end(c, ROV_ERR_CANCELED);
    /* Freed (and a peer's socket closed) later: an epoll batch or a read
     * loop may still point at it, and a link that goes down closes every
     * channel of the rail in one call, where the sockets' close() (a reset
     * or a FIN each) took about a quarter of the time before the last
     * connection had moved (bench/failover-scale.py, 1,024 bonded
     * connections: 27% of the samples). */
    c->next = r->graveyard;
    r->graveyard = c;
}

static ROV_COLD void bury(struct tcp_rail *r)
{
    bool closed = r->graveyard != NULL;

    while (r->graveyard) {
        struct tcp_chan *c = r->graveyard;

        r->graveyard = c->next;
        if (c->watch.fd >= 0)
            close(c->watch.fd);
        free(c->buf);
        free(c->big_mem);
        free(c);
    }
    if (closed && __builtin_expect(r->accept_paused, 0))
        accept_resume(r); /* descriptors are free again */
}

static void fail(struct tcp_chan *c, rov_status_t st, const char *why)
{
    if (c->dead)
        return;
    /* Stop reading and writing; the transport closes the channel. */
    set_events(c, 0);
    rov_rail_failed(&c->base, st, why);
}

static size_t iov_total(const struct iovec *iov, int n)
{
    size_t t = 0;

    for (int i = 0; i < n; i++)
        t += iov[i].iov_len;
    return t;
}

/* Drop the first skip bytes of an iovec array, in place. */
static void iov_advance(struct iovec *iov, int *iovcnt_p, size_t skip)
{
    int j = 0;

    for (int i = 0; i < *iovcnt_p; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        iov[j].iov_base = (uint8_t *)iov[i].iov_base + skip;
        iov[j].iov_len = iov[i].iov_len - skip;
        skip = 0;
        j++;
    }
    *iovcnt_p = j;
}

/* Queue the part of iov not yet written (skip bytes): referenced when the
 * transport gave a cookie, copied otherwise. */
static rov_status_t enqueue(struct tcp_chan *c, const struct iovec *iov, int iovcnt, size_t skip,
                            void *cookie)
{
    size_t rest = iov_total(iov, iovcnt) - skip;
    struct tcp_txq *q;

    if (c->ending)
        return ROV_OK; /* after chan_flush: dropped (rail.h) */
    q = malloc(sizeof(*q) + (cookie ? 0 : rest));
    if (!q)
        return ROV_ERR_NOMEM;
    q->next = NULL;
    q->cookie = cookie;
    q->reg = NULL;
    q->answer = false;
    q->owned = NULL;
    memcpy(q->iov, iov, (size_t)iovcnt * sizeof(*iov));
    q->iovcnt = iovcnt;
    iov_advance(q->iov, &q->iovcnt, skip);
    if (!cookie) {
        size_t off = 0;

        for (int i = 0; i < q->iovcnt; i++) {
            memcpy(q->copy + off, q->iov[i].iov_base, q->iov[i].iov_len);
            off += q->iov[i].iov_len;
        }
        q->iov[0].iov_base = q->copy;
        q->iov[0].iov_len = rest;
        q->iovcnt = 1;
    }
    if (!cookie && c->txq_head) {
        /* Control frames overtake queued data at the next frame boundary
         * (the head may be half written), in order among themselves. */
        struct tcp_txq *after = c->txq_ctrl ? c->txq_ctrl : c->txq_head;

        q->next = after->next;
        after->next = q;
        if (c->txq_tail == after)
            c->txq_tail = q;
    } else {
        if (c->txq_tail)
            c->txq_tail->next = q;
        else
            c->txq_head = q;
        c->txq_tail = q;
    }
    if (!cookie)
        c->txq_ctrl = q;
    set_events(c, c->events | EPOLLOUT);
    return cookie ? ROV_INPROGRESS : ROV_OK;
}

static ssize_t write_iov(int fd, const struct iovec *iov, int iovcnt)
{
    struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
    ssize_t n;

    if (iovcnt == 1) { /* send() is a little cheaper than sendmsg() */
        do {
            n = send(fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        } while (n < 0 && errno == EINTR);
        return n;
    }
    do {
        n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n;
}

/* What tcp_send() does when the frame does not go out whole at once. */
static __attribute__((noinline)) rov_status_t send_rest(struct tcp_chan *c,
                                                        const struct iovec *iov, int iovcnt,
                                                        ssize_t n, void *cookie)
{
    if (n < 0) {
        if (c->ending && errno == EPIPE)
            return ROV_OK; /* after chan_flush: dropped (rail.h) */
        if (errno != EAGAIN) {
            int err = errno;

            rov_debug("tcp", "sendmsg on fd %d: %s", c->watch.fd, strerror(err));
            set_events(c, 0);
            return rov_net_errno_status(err);
        }
        n = 0;
    }
    return enqueue(c, iov, iovcnt, (size_t)n, cookie);
}

static ROV_HOT rov_status_t tcp_send(struct rov_chan *chan, const struct iovec *iov,
                                     int iovcnt, void *cookie)
{
    struct tcp_chan *c = (struct tcp_chan *)chan;
    ssize_t n;

    if (__builtin_expect(c->dead || iovcnt < 1 || iovcnt > ROV_RAIL_MAX_IOV, 0))
        return c->dead ? ROV_ERR_RESET : ROV_ERR_INVAL;
    if (c->txq_head)
        return enqueue(c, iov, iovcnt, 0, cookie);
    n = write_iov(c->watch.fd, iov, iovcnt);
    if (__builtin_expect(n == (ssize_t)iov_total(iov, iovcnt), 1))
        return ROV_OK;
    return send_rest(c, iov, iovcnt, n, cookie);
}

/* chan_flush: everything is written; the peer's read of it ends in EOF. */
static void end_stream(struct tcp_chan *c)
{
    if (shutdown(c->watch.fd, SHUT_WR) < 0) /* reset already: the read says so */
        rov_debug("tcp", "shutdown on fd %d: %s", c->watch.fd, strerror(errno));
}

/* Write as many queued frames as the socket takes, up to TCP_FLUSH_IOV
 * pieces per system call. */
static void flush_txq(struct tcp_chan *c)
{
    while (c->txq_head) {
        struct iovec iov[TCP_FLUSH_IOV];
        int n_iov = 0;
        size_t batch = 0, left;
        ssize_t n;

        for (struct tcp_txq *q = c->txq_head; q && n_iov + q->iovcnt <= TCP_FLUSH_IOV;
             q = q->next) {
            memcpy(iov + n_iov, q->iov, (size_t)q->iovcnt * sizeof(*iov));
            n_iov += q->iovcnt;
            batch += iov_total(q->iov, q->iovcnt);
        }
        n = write_iov(c->watch.fd, iov, n_iov);
        if (n < 0) {
            if (errno != EAGAIN)
                fail(c, rov_net_errno_status(errno), errno_why(errno));
            return;
        }
        for (left = (size_t)n; left > 0;) {
            struct tcp_txq *q = c->txq_head;
            size_t total = iov_total(q->iov, q->iovcnt);

            if (left < total) {
                iov_advance(q->iov, &q->iovcnt, left);
                return; /* the socket is full */
            }
            left -= total;
            c->txq_head = q->next;
            if (!c->txq_head)
                c->txq_tail = NULL;
            if (c->txq_ctrl == q)
                c->txq_ctrl = NULL;
            txq_free(c, q);
            if (c->dead)
                return;
        }
        if ((size_t)n < batch)
            return;
    }
    set_events(c, c->events & ~(uint32_t)EPOLLOUT);
    if (__builtin_expect(c->ending, 0)) {
        end_stream(c);
        return;
    }
    rov_rail_writable(&c->base);
}

/* Room for a large frame, its payload on a page boundary: the kernel
 * copies into a page- (and cache-line-) aligned destination faster, and the
 * application gets an aligned message. */
static bool big_reserve(struct tcp_chan *c, size_t flen)
{
    const size_t lead = TCP_PAGE - ROV_WIRE_HDR_LEN;
    void *mem;

    if (posix_memalign(&mem, TCP_PAGE, lead + flen) != 0) {
        fail(c, ROV_ERR_NOMEM, "tcp: no memory for a large frame");
        return false;
    }
    free(c->big_mem);
    c->big_mem = mem;
    c->big = (uint8_t *)mem + lead;
    c->big_cap = flen;
    return true;
}

/* The peer has authenticated: the staging buffer grows from one handshake
 * frame to RAILOVER_TCP_RXBUF (what it holds, [off, len), stays). */
static ROV_COLD bool rx_grow(struct tcp_chan *c)
{
    uint8_t *nb = realloc(c->buf, c->rail->rxbuf);

    if (!nb) {
        fail(c, ROV_ERR_NOMEM, "tcp: no memory for a receive buffer");
        return false;
    }
    c->buf = nb;
    c->cap = c->rail->rxbuf;
    c->preauth = false;
    return true;
}

/* One-sided reads by message -------------------------------------------- */

static struct tcp_reg *reg_find(struct tcp_rail *r, uint32_t key)
{
    for (struct tcp_reg *g = r->regs; g; g = g->next)
        if (g->key == key)
            return g;
    return NULL;
}

/* Answer a peer's READ: the bytes from our registration's memory, not
 * copied (the txq references it; the registration's release copies what
 * is still queued, tcp_mem_dereg()); a READ that names no registration or
 * a range outside it gets an empty answer. */
static ROV_COLD void serve_read(struct tcp_chan *c, const uint8_t *frame, uint32_t id)
{
    const uint8_t *p = frame + ROV_WIRE_HDR_LEN;
    uint64_t addr = rov_get64(p), len = rov_get64(p + 8);
    struct tcp_reg *g = rov_get32(p + 20) == 0 ? reg_find(c->rail, rov_get32(p + 16)) : NULL;
    struct rov_wire_hdr hdr = {.type = ROV_FT_READ_DATA, .tag = id};
    uint8_t h[ROV_WIRE_HDR_LEN];
    struct iovec iov[2];
    struct tcp_txq *q;
    int iovcnt = 1;
    ssize_t n = 0;

    if (c->txq_head && c->answers >= TCP_ANSWERS_MAX) {
        rov_log_ratelimited(ROV_LOG_WARN, "tcp", "refused a read: %u answers wait for the "
                            "peer to read them", c->answers);
        g = NULL;
    } else if (g && len > 0 && len <= UINT32_MAX && addr >= g->base && len <= g->len &&
               addr - g->base <= g->len - len) {
        hdr.len = (uint32_t)len;
        iov[1].iov_base = (void *)(uintptr_t)addr;
        iov[1].iov_len = len;
        iovcnt = 2;
    } else {
        rov_log_ratelimited(ROV_LOG_WARN, "tcp", "refused a read of %llu bytes at %#llx "
                            "(key %#x): no such registration or range",
                            (unsigned long long)len, (unsigned long long)addr,
                            rov_get32(p + 16));
        g = NULL;
    }
    rov_wire_encode(h, &hdr);
    iov[0].iov_base = h;
    iov[0].iov_len = sizeof(h);
    if (!c->txq_head) {
        n = write_iov(c->watch.fd, iov, iovcnt);
        if (n == (ssize_t)(sizeof(h) + hdr.len))
            return;
        if (n < 0 && errno != EAGAIN) {
            fail(c, rov_net_errno_status(errno), errno_why(errno));
            return;
        }
        n = n < 0 ? 0 : n;
    }
    q = malloc(sizeof(*q) + sizeof(h));
    if (!q) {
        fail(c, ROV_ERR_NOMEM, "tcp: no memory to answer a read");
        return;
    }
    memcpy(q->copy, h, sizeof(h));
    iov[0].iov_base = q->copy;
    q->next = NULL;
    q->cookie = NULL;
    q->owned = NULL;
    q->reg = g;
    q->answer = true;
    c->answers++;
    memcpy(q->iov, iov, (size_t)iovcnt * sizeof(*iov));
    q->iovcnt = iovcnt;
    iov_advance(q->iov, &q->iovcnt, (size_t)n);
    if (g)
        g->queued++;
    if (c->txq_tail)
        c->txq_tail->next = q;
    else
        c->txq_head = q;
    c->txq_tail = q;
    set_events(c, c->events | EPOLLOUT);
}

static ROV_COLD void read_done(struct tcp_chan *c, struct tcp_read *rd, rov_status_t status)
{
    c->rd_in = NULL;
    rov_rail_get_done(&c->base, rd->cookie, status);
    free(rd);
}

/* A frame of ours (READ, READ_DATA) at c->off, its header whole: 1 taken
 * (off moved past what it used), 0 not whole yet, -1 the channel failed.
 * A READ_DATA payload not here yet is read straight into the reader's
 * memory (read_dst()). */
static ROV_COLD int rail_frame(struct tcp_chan *c)
{
    const uint8_t *p = c->buf + c->off;
    size_t avail = c->len - c->off, have;
    struct rov_wire_hdr hdr;
    const char *why = "";
    struct tcp_read *rd;

    if (rov_wire_decode(p, avail, rov_chan_rx_max_payload(&c->base), &hdr, &why) != ROV_OK ||
        !rov_chan_authed(&c->base)) {
        fail(c, ROV_ERR_PROTO,
             rov_chan_authed(&c->base) ? why : "tcp: a read frame before the handshake");
        return -1;
    }
    if (hdr.type == ROV_FT_READ) {
        if (avail < ROV_WIRE_HDR_LEN + ROV_WIRE_READ_LEN)
            return 0;
        serve_read(c, p, hdr.tag);
        c->off += ROV_WIRE_HDR_LEN + ROV_WIRE_READ_LEN;
        return c->dead ? -1 : 1;
    }
    rd = c->reads;
    if (!rd || hdr.tag != rd->id || (hdr.len != rd->len && hdr.len != 0)) {
        fail(c, ROV_ERR_PROTO, "tcp: a read answer that matches no read of ours");
        return -1;
    }
    c->reads = rd->next;
    if (!c->reads)
        c->reads_tail = NULL;
    c->off += ROV_WIRE_HDR_LEN;
    if (hdr.len == 0) {
        read_done(c, rd, ROV_ERR_INVAL); /* refused: the caller sends instead */
        return 1;
    }
    have = avail - ROV_WIRE_HDR_LEN < rd->len ? avail - ROV_WIRE_HDR_LEN : rd->len;
    memcpy(rd->local, p + ROV_WIRE_HDR_LEN, have);
    c->off += have;
    if (have == rd->len) {
        read_done(c, rd, ROV_OK);
        return 1;
    }
    c->rd_in = rd;
    c->rd_got = have;
    return 1;
}

static rov_status_t tcp_get(struct rov_chan *chan, void *local, void *handle, uint64_t raddr,
                            uint32_t key, size_t len, void *cookie)
{
    struct tcp_chan *c = (struct tcp_chan *)chan;
    struct rov_wire_hdr hdr = {.type = ROV_FT_READ, .len = ROV_WIRE_READ_LEN};
    uint8_t frame[ROV_WIRE_HDR_LEN + ROV_WIRE_READ_LEN];
    struct iovec iov = {.iov_base = frame, .iov_len = sizeof(frame)};
    struct tcp_read *rd;
    rov_status_t st;

    (void)handle;
    if (c->dead)
        return ROV_ERR_RESET;
    if (len == 0 || len > rov_chan_rx_max_payload(chan))
        return ROV_ERR_MSGSIZE;
    rd = malloc(sizeof(*rd));
    if (!rd)
        return ROV_ERR_NOMEM;
    rd->next = NULL;
    rd->local = local;
    rd->len = len;
    rd->id = ++c->rail->next_read;
    rd->cookie = cookie;
    hdr.tag = rd->id;
    rov_wire_encode(frame, &hdr);
    rov_put64(frame + ROV_WIRE_HDR_LEN, raddr);
    rov_put64(frame + ROV_WIRE_HDR_LEN + 8, len);
    rov_put32(frame + ROV_WIRE_HDR_LEN + 16, key);
    rov_put32(frame + ROV_WIRE_HDR_LEN + 20, 0);
    st = tcp_send(chan, &iov, 1, NULL); /* sent, or queued as a control frame */
    if (st != ROV_OK) {
        free(rd);
        return st;
    }
    if (c->reads_tail)
        c->reads_tail->next = rd;
    else
        c->reads = rd;
    c->reads_tail = rd;
    return ROV_INPROGRESS;
}

static rov_status_t tcp_mem_reg(struct rov_rail *rail, void *addr, size_t len, void **handle_p,
                                uint32_t *key_p)
{
    struct tcp_rail *r = (struct tcp_rail *)rail;
    struct tcp_reg *g = malloc(sizeof(*g));

    if (!g)
        return ROV_ERR_NOMEM;
    do
        g->key = r->next_key++;
    while (g->key == 0 || reg_find(r, g->key));
    g->base = (uintptr_t)addr;
    g->len = len;
    g->queued = 0;
    g->next = r->regs;
    r->regs = g;
    *handle_p = g;
    *key_p = g->key;
    return ROV_OK;
}

/* The memory may be gone after this (an MPI library releases it once the
 * reader said it has the data, so normally nothing of it is queued): a
 * READ_DATA frame of it still queued becomes a refusal (header alone, length
 * 0: the reader sends instead), but the one the socket may be half-way
 * through, which keeps a copy of what it has left. */
static void tcp_mem_dereg(struct rov_rail *rail, void *handle)
{
    struct tcp_rail *r = (struct tcp_rail *)rail;
    struct tcp_reg *g = handle;

    for (struct tcp_chan *c = r->chans; c && g->queued; c = c->next) {
        for (struct tcp_txq *q = c->txq_head; q; q = q->next) {
            size_t rest = iov_total(q->iov, q->iovcnt), off = 0;

            if (q->reg != g)
                continue;
            q->reg = NULL;
            g->queued--;
            if (q != c->txq_head) {
                rov_put32(q->copy + 4, 0); /* (q->iov[0] is all of q->copy) */
                q->iovcnt = 1;
                continue;
            }
            q->owned = malloc(rest ? rest : 1);
            if (!q->owned) {
                fail(c, ROV_ERR_NOMEM, "tcp: no memory to keep a read's answer");
                break;
            }
            for (int i = 0; i < q->iovcnt; i++) {
                memcpy((uint8_t *)q->owned + off, q->iov[i].iov_base, q->iov[i].iov_len);
                off += q->iov[i].iov_len;
            }
            q->iov[0].iov_base = q->owned;
            q->iov[0].iov_len = rest;
            q->iovcnt = 1;
        }
    }
    for (struct tcp_reg **pp = &r->regs; *pp; pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    }
    free(g);
}

/* Hand up every whole frame in [off, len).  Returns false if the channel
 * died (protocol error or closed by the transport during an upcall). */
static ROV_HOT bool parse_frames(struct tcp_chan *c)
{
    while (c->len > c->off) {
        size_t flen, avail = c->len - c->off;
        const char *why = "";
        rov_status_t st;

        /* A whole frame is checked once, by rov_rail_recv(); the full peek
         * is for a frame still arriving, so garbage is caught on its first
         * bytes and no absurd length is allocated for. */
        if (__builtin_expect(avail >= ROV_WIRE_HDR_LEN &&
                             c->buf[c->off + 3] >= ROV_FT_RAIL_FIRST_, 0)) {
            int taken = rail_frame(c);

            if (taken < 0)
                return false;
            if (taken == 0 || c->rd_in)
                break; /* more to read (into the reader's memory) */
            continue;
        }
        if (avail >= ROV_WIRE_HDR_LEN &&
            (flen = rov_wire_frame_len(c->buf + c->off)) <= avail) {
            c->expect_big = false;
            rov_rail_recv(&c->base, c->buf + c->off, flen);
            if (c->dead)
                return false;
            c->off += flen;
            continue;
        }
        /* Per frame: the handshake frame before it may have raised it. */
        st = rov_wire_peek(c->buf + c->off, avail, rov_chan_rx_max_payload(&c->base), &flen,
                           &why);
        if (st == ROV_INPROGRESS)
            break;
        if (st != ROV_OK) {
            fail(c, ROV_ERR_PROTO, why);
            return false;
        }
        if (__builtin_expect(c->preauth, 0) && rov_chan_authed(&c->base) && !rx_grow(c))
            return false;
        /* A whole header and a frame not yet whole (else handed up above). */
        if (flen > c->cap) {
            /* Too large for the staging buffer: read the rest in place. */
            if (flen > c->big_cap && !big_reserve(c, flen))
                return false;
            memcpy(c->big, c->buf + c->off, avail);
            c->big_len = avail;
            c->big_need = flen;
            c->big_frames++;
            c->off = c->len = 0;
            c->expect_big = true;
        }
        break;
    }
    if (c->off == c->len) {
        c->off = c->len = 0;
    } else if (c->off > 0 && c->len == c->cap) {
        memmove(c->buf, c->buf + c->off, c->len - c->off);
        c->len -= c->off;
        c->off = 0;
    }
    if (__builtin_expect(c->preauth, 0) && rov_chan_authed(&c->base))
        return rx_grow(c);
    return true;
}

/* Where the next read goes and how much it may take: the staging buffer,
 * or the rest of a large frame's payload. */
static ROV_INLINE uint8_t *read_dst(struct tcp_chan *c, size_t *want_p)
{
    if (__builtin_expect(c->big_need != 0 || c->rd_in, 0)) {
        if (c->rd_in) {
            *want_p = c->rd_in->len - c->rd_got;
            return c->rd_in->local + c->rd_got;
        }
        *want_p = c->big_need - c->big_len;
        return c->big + c->big_len;
    }
    *want_p = c->cap - c->len;
    /* After a large frame, another is likely, and so is a read's answer
     * while one is awaited: read its header alone so its payload lands in
     * the frame buffer (the reader's memory) without a copy. */
    if (__builtin_expect(c->expect_big || c->reads, 0) && c->len - c->off < ROV_WIRE_HDR_LEN &&
        *want_p > ROV_WIRE_HDR_LEN - (c->len - c->off))
        *want_p = ROV_WIRE_HDR_LEN - (c->len - c->off);
    return c->buf + c->len;
}

/* Read what is ready.  Returns the number of reads that returned data.
 * Inlined into its callers: it makes the recv() call (transport/compiler.h).
 * A busy poll mostly finds nothing: that path is the straight one. */
static ROV_INLINE int read_chan(struct tcp_chan *c)
{
    int got = 0;

    for (int i = 0; i < TCP_READS_PER_POLL && !c->dead; i++) {
        bool big = c->big_need != 0 || c->rd_in;
        size_t want;
        uint8_t *dst = read_dst(c, &want);
        ssize_t n = recv(c->watch.fd, dst, want, MSG_DONTWAIT);

        if (n < 0) {
            if (__builtin_expect(errno == EAGAIN, 1))
                break;
            if (errno == EINTR)
                continue;
            fail(c, rov_net_errno_status(errno), errno_why(errno));
            break;
        }
        if (__builtin_expect(n == 0, 0)) {
            if (c->ending && c->len == c->off && !big) {
                /* The peer ended its stream after ours: flushed. */
                rov_rail_flushed(&c->base);
                if (c->dead)
                    break;
            }
            fail(c, ROV_ERR_CLOSED, (c->len > c->off || big) ?
                 "tcp: peer closed the connection in the middle of a frame" :
                 "tcp: peer closed the connection");
            break;
        }
        got++;
        if (__builtin_expect(c->rd_in != NULL, 0)) {
            c->rd_got += (size_t)n;
            if (c->rd_got == c->rd_in->len) {
                read_done(c, c->rd_in, ROV_OK);
                if (c->len > c->off && !parse_frames(c)) /* (frames behind its header) */
                    break;
            }
        } else if (big) {
            c->big_len += (size_t)n;
            if (c->big_len == c->big_need) {
                c->big_need = 0;
                rov_rail_recv(&c->base, c->big, c->big_len);
            }
        } else {
            c->len += (size_t)n;
            if (!parse_frames(c))
                break;
        }
        if ((size_t)n < want)
            break; /* drained the socket */
    }
    return got;
}

static void finish_connect(struct tcp_chan *c)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(c->watch.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err) {
        rov_debug("tcp", "connect on fd %d: %s", c->watch.fd, strerror(err));
        fail(c, rov_net_errno_status(err), errno_why(err));
        return;
    }
    c->connecting = false;
    set_events(c, EPOLLIN | (c->txq_head ? EPOLLOUT : 0));
    rov_rail_connected(&c->base);
}

static void chan_cb(struct rov_watch *w, uint32_t events)
{
    struct tcp_chan *c = rov_container_of(w, struct tcp_chan, watch);

    if (c->dead)
        return;
    if (c->connecting) {
        if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            finish_connect(c);
        return;
    }
    if ((events & EPOLLOUT) && c->txq_head)
        flush_txq(c);
    if (!c->dead && (events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
        read_chan(c);
}

/* Rail ops ------------------------------------------------------------------- */

/* RAILOVER_TCP_CONGESTION: one the kernel has and lets this user choose,
 * tried on a socket of the rail's family, so that a wrong name is an error
 * when the rail opens, not a warning per connection. */
static rov_status_t congestion_check(const char *name, int family)
{
    const char *list = "net.ipv4.tcp_available_congestion_control";
    int fd, err = 0;

    if (!name[0])
        return ROV_OK;
    fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
    if (fd < 0) {
        rov_error("tcp", "cannot check RAILOVER_TCP_CONGESTION=%s: socket: %m", name);
        return ROV_ERR_IO;
    }
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name)) < 0)
        err = errno;
    close(fd);
    if (!err)
        return ROV_OK;
    if (err == EPERM)
        list = "net.ipv4.tcp_allowed_congestion_control";
    rov_error("tcp", "RAILOVER_TCP_CONGESTION=%s: %s (see sysctl %s)", name,
              err == ENOENT ? "the kernel has no such congestion control"
              : err == EPERM ? "not allowed for this user" : strerror(err), list);
    return ROV_ERR_INVAL;
}

static rov_status_t tcp_open(rov_context_t *ctx, const struct rov_rail_spec *spec,
                             const struct rov_rail_env *env, const void *settings,
                             struct rov_rail **rail_p)
{
    const struct tcp_settings *set = settings;
    struct tcp_rail *r = rov_zalloc_lines(sizeof(*r));
    rov_status_t st;

    if (!r)
        return ROV_ERR_NOMEM;
    st = rov_net_resolve("tcp", spec->arg[0] ? spec->arg : env->default_if, &r->local,
                         &r->local_len, r->ifname, sizeof(r->ifname));
    if (st != ROV_OK) {
        rov_error("tcp", "cannot open rail %s", spec->name);
        free(r);
        return st;
    }
    st = congestion_check(set->congestion, r->local.ss_family);
    if (st != ROV_OK) {
        free(r);
        return st;
    }
    r->base.ctx = ctx;
    r->listen_fd = -1;
    r->spare_fd = -1;
    r->rxbuf = set->rxbuf;
    memcpy(r->congestion, set->congestion, sizeof(r->congestion));
    r->keepalive_ns = env->keepalive_ns;
    r->stall_ns = env->stall_ns;
    r->base.get_max = TCP_GET_MAX;
    if (getrandom(&r->next_key, sizeof(r->next_key), 0) != sizeof(r->next_key))
        r->next_key = (uint32_t)rov_now_ns();
    rov_net_links_open(&r->links, &r->base, &r->local);
    *rail_p = &r->base;
    return ROV_OK;
}

/* The listener back in epoll once a descriptor is free (one of the rail's
 * channels closed), with its reserve taken again first. */
static void accept_resume(struct tcp_rail *r)
{
    if (r->spare_fd < 0)
        r->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (r->spare_fd < 0 || r->listen_fd < 0)
        return;
    if (rov_ctx_watch_urgent(r->base.ctx, &r->lwatch, EPOLLIN) == ROV_OK) {
        r->accept_paused = false;
        rov_debug("tcp", "rail %s: accepting connections again", r->base.spec->name);
    }
}

/* The context has no slot for another channel waiting for its handshake:
 * the listener leaves epoll (connections wait in the backlog) until the
 * context calls tcp_accept_resume(). */
static ROV_COLD void accept_pause(struct tcp_rail *r)
{
    rov_ctx_unwatch(r->base.ctx, &r->lwatch);
    r->accept_paused = true;
}

/* accept() found no descriptor for a waiting connection (EMFILE, ENFILE).
 * The connection stays in the backlog and the listener readable, so the
 * accept loop would spin at full CPU, and a failover reconnect would wait
 * behind whatever fills the backlog.  The descriptor kept in reserve makes
 * room to accept the connection and close it at once (its peer sees it end
 * and retries through its backoff); then the reserve is taken again.
 * Without a reserve, the listener leaves epoll until one of the rail's
 * channels closes.  Returns whether to accept on. */
static ROV_COLD bool accept_shed(struct tcp_rail *r, int err)
{
    char why[96];
    int fd = -1, aerr = EMFILE;

    rov_log_ratelimited(ROV_LOG_WARN, "tcp",
                        "rail %s: %s: incoming connections are closed at once until "
                        "descriptors are free", r->base.spec->name,
                        nofile_why(err, why, sizeof(why)));
    if (r->spare_fd >= 0) {
        close(r->spare_fd);
        fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        aerr = fd < 0 ? errno : 0;
        if (fd >= 0)
            close(fd);
        r->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (r->spare_fd >= 0 && aerr != EMFILE && aerr != ENFILE)
            return aerr != EAGAIN; /* EAGAIN: the backlog is empty */
    }
    rov_debug("tcp", "rail %s: no descriptor in reserve: listener paused until a channel closes",
              r->base.spec->name);
    accept_pause(r);
    return false;
}

static void tcp_accept_resume(struct rov_rail *rail)
{
    struct tcp_rail *r = (struct tcp_rail *)rail;

    if (r->accept_paused)
        accept_resume(r);
}

/* At most ACCEPT_BATCH connections per readiness: the rest wait for the
 * next epoll round, after the HELLOs of those accepted are read (a storm of
 * 1024 connects is otherwise all accepted before any HELLO, and waits on
 * the handshake cap). */
#define ACCEPT_BATCH 64
#define ACCEPT_TRY_NS (5ull * 1000000ull)

static void accept_cb(struct rov_watch *w, uint32_t events)
{
    struct tcp_rail *r = rov_container_of(w, struct tcp_rail, lwatch);

    bool made_room = false;

    (void)events;
    for (int n = 0; n < ACCEPT_BATCH; n++) {
        struct tcp_chan *c;
        int fd;

        if (!rov_rail_accept_ok(&r->base)) {
            accept_pause(r);
            return;
        }
        fd = accept4(r->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;

            if (err == EINTR || err == ECONNABORTED)
                continue;
            if (err == EMFILE || err == ENFILE) {
                /* The oldest peer waiting for its handshake makes room if
                 * there is one (once a readiness: one that held no
                 * descriptor freed none); the connection in the backlog
                 * (maybe a peer's reconnect) is not the one to close. */
                if ((!made_room && (made_room = rov_rail_fd_short(&r->base, -1))) ||
                    accept_shed(r, err))
                    continue;
                return;
            }
            if (err != EAGAIN)
                rov_log_ratelimited(ROV_LOG_WARN, "tcp", "accept on %s: %s", r->base.spec->name,
                                    strerror(err));
            return;
        }
        rov_rail_fd_short(&r->base, fd);
        c = chan_new(r, fd, false);
        if (!c) {
            rov_log_ratelimited(ROV_LOG_WARN, "tcp", "no memory for an accepted connection");
            close(fd);
            continue;
        }
        rov_rail_accepted(&r->base, &c->base);
        /* The peer's HELLO follows its connect at once: read it now, not
         * after every busy channel ahead of it in the epoll set has had
         * its turn (which under a storm of 1,024 streaming connections
         * outlasted the handshake timeout). */
        chan_cb(&c->watch, EPOLLIN);
    }
}

/* A reopen: bind the port this rail listened on before (rail.h,
 * listen_hint) on the rail's own address; false when there is none or it is
 * taken (then any port will do). */
static bool bind_hint(struct tcp_rail *r, int fd)
{
    struct sockaddr_storage before, at = r->local;
    socklen_t len;

    if (!r->base.listen_hint ||
        rov_net_addr_decode(r->base.listen_hint, r->base.listen_hint_len, &before, &len) != ROV_OK ||
        before.ss_family != at.ss_family)
        return false;
    if (at.ss_family == AF_INET)
        ((struct sockaddr_in *)&at)->sin_port = ((struct sockaddr_in *)&before)->sin_port;
    else
        ((struct sockaddr_in6 *)&at)->sin6_port = ((struct sockaddr_in6 *)&before)->sin6_port;
    if (bind(fd, (struct sockaddr *)&at, r->local_len) == 0)
        return true;
    rov_debug("tcp", "rail %s: its previous port is taken (%m): listening on another",
              r->base.spec->name);
    return false;
}

static rov_status_t tcp_listen(struct rov_rail *rail, void *addr, size_t *len_p)
{
    struct tcp_rail *r = (struct tcp_rail *)rail;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int one = 1;

    if (r->listen_fd < 0) {
        int fd = socket(r->local.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

        if (fd < 0) {
            rov_error("tcp", "socket: %m");
            return ROV_ERR_IO;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (!bind_hint(r, fd) &&
            bind(fd, (struct sockaddr *)&r->local, r->local_len) < 0) {
            rov_error("tcp", "cannot listen on rail %s: %m", rail->spec->name);
            close(fd);
            return ROV_ERR_IO;
        }
        if (listen(fd, SOMAXCONN) < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
            rov_error("tcp", "cannot listen on rail %s: %m", rail->spec->name);
            close(fd);
            return ROV_ERR_IO;
        }
        r->listen_fd = fd;
        r->lwatch.fd = fd;
        r->lwatch.cb = accept_cb;
        /* A descriptor in reserve for accept() (accept_shed()); without
         * one, the listener pauses instead. */
        r->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (rov_ctx_watch_urgent(rail->ctx, &r->lwatch, EPOLLIN) != ROV_OK) {
            close(fd);
            r->listen_fd = -1;
            return ROV_ERR_IO;
        }
        r->addr_len = rov_net_addr_encode(&ss, r->addr);
        if (rov_log_level >= ROV_LOG_DEBUG) {
            char s[64];

            tcp_addr_str(r->addr, r->addr_len, s, sizeof(s));
            rov_debug("tcp", "rail %s listening on %s", rail->spec->name, s);
        }
    }
    memcpy(addr, r->addr, r->addr_len);
    *len_p = r->addr_len;
    return ROV_OK;
}

static void tcp_unlisten(struct rov_rail *rail)
{
    struct tcp_rail *r = (struct tcp_rail *)rail;

    if (r->listen_fd < 0)
        return;
    if (!r->accept_paused)
        rov_ctx_unwatch(rail->ctx, &r->lwatch);
    r->accept_paused = false;
    close(r->listen_fd);
    r->listen_fd = -1;
    if (r->spare_fd >= 0)
        close(r->spare_fd);
    r->spare_fd = -1;
}

static rov_status_t tcp_connect(struct rov_rail *rail, const void *addr, size_t len,
                                struct rov_chan **chan_p)
{
    struct tcp_rail *r = (struct tcp_rail *)rail;
    struct sockaddr_storage peer;
    socklen_t pl;
    struct tcp_chan *c;
    int fd;

    if (rov_net_addr_decode(addr, len, &peer, &pl) != ROV_OK) {
        rov_error("tcp", "malformed peer address for rail %s", rail->spec->name);
        return ROV_ERR_INVAL;
    }
    if (peer.ss_family != r->local.ss_family) {
        rov_error("tcp", "peer address family differs from rail %s", rail->spec->name);
        return ROV_ERR_UNREACHABLE;
    }
    fd = socket(peer.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno;
        char why[96];

        /* A local limit, not an unreachable peer; repeats per attempt. */
        if (err == EMFILE || err == ENFILE)
            rov_log_ratelimited(ROV_LOG_ERROR, "tcp", "cannot connect rail %s: %s",
                                rail->spec->name, nofile_why(err, why, sizeof(why)));
        else
            rov_error("tcp", "socket: %s", strerror(err));
        return err == EMFILE || err == ENFILE ? ROV_ERR_RESOURCE : ROV_ERR_IO;
    }
    /* Leave through the rail's own interface address. */
    if (bind(fd, (struct sockaddr *)&r->local, r->local_len) < 0) {
        rov_error("tcp", "bind to the address of rail %s: %m", rail->spec->name);
        close(fd);
        return ROV_ERR_IO;
    }
    if (connect(fd, (struct sockaddr *)&peer, pl) < 0 && errno != EINPROGRESS) {
        int err = errno;

        rov_debug("tcp", "connect: %s", strerror(err));
        close(fd);
        return rov_net_errno_status(err);
    }
    c = chan_new(r, fd, true);
    if (!c) {
        close(fd);
        return ROV_ERR_NOMEM;
    }
    *chan_p = &c->base;
    return ROV_OK;
}

/* The channels of a rail with many still in their handshake (connecting,
 * or HELLO / HELLO_ACK not yet exchanged): one poll() for all of them, up
 * to HANDSHAKE_POLL_MAX, and their events handled now, not when epoll
 * reaches them behind the busy ones (tcp_progress()).  Channels that end
 * meanwhile stay allocated until the next progress call (bury()). */
#define HANDSHAKE_POLL_MAX 64

static ROV_COLD void poll_handshaking(struct tcp_rail *r)
{
    struct pollfd p[HANDSHAKE_POLL_MAX];
    struct tcp_chan *cs[HANDSHAKE_POLL_MAX];
    nfds_t n = 0;

    for (struct tcp_chan *c = r->chans; c && n < HANDSHAKE_POLL_MAX; c = c->next) {
        if (c->dead || c->quiet || (rov_chan_handshaken(&c->base) && !c->connecting))
            continue;
        p[n].fd = c->watch.fd;
        p[n].events = c->connecting ? POLLOUT : POLLIN;
        p[n].revents = 0;
        cs[n++] = c;
    }
    if (n == 0 || poll(p, n, 0) <= 0)
        return;
    for (nfds_t i = 0; i < n; i++)
        if (p[i].revents) /* POLLIN, POLLOUT, POLLERR, POLLHUP: epoll's values */
            chan_cb(&cs[i]->watch, (uint32_t)p[i].revents);
}

static ROV_HOT int tcp_progress(struct rov_rail *rail)
{
    struct tcp_rail *r = (struct tcp_rail *)rail;
    struct tcp_chan *c, *next;
    int polled = 0;

    if (__builtin_expect(r->graveyard != NULL, 0))
        bury(r);
    if (r->nchans == 0 || r->nchans > TCP_DIRECT_POLL_MAX) {
        if (r->nquiet)
            rail_wake(r);
        /* Many channels: their readiness reaches the listener's turn in
         * epoll only after theirs, 64 (EPOLL_BATCH) at a time, and a caller
         * that sends for long between progress calls had 256 failback
         * connects wait 1.5 to 10 s in the backlog (the peer's engine does
         * not time a connect its kernel completed).  So an accept4() here
         * too (EAGAIN when none waits), at most every ACCEPT_TRY_NS, beside
         * the epoll_wait() this path makes on every call anyway, and the
         * channels still in their handshake polled (poll_handshaking()). */
        if (r->nchans && r->listen_fd >= 0 && !r->accept_paused) {
            uint64_t now = rov_now_ns();

            if (now >= r->accept_try_ns) {
                r->accept_try_ns = now + ACCEPT_TRY_NS;
                accept_cb(&r->lwatch, EPOLLIN);
                poll_handshaking(r);
            }
        }
        return 0;
    }
    r->busy_polls++;
    for (c = r->chans; c; c = next) {
        next = c->next;
        if (c->connecting || c->dead || !(c->events & EPOLLIN))
            continue;
        if (!c->quiet && r->busy_polls >= TCP_QUIET_AFTER)
            chan_quiet(c);
        if (c->txq_head)
            flush_txq(c);
        if (!c->dead)
            read_chan(c);
        polled++;
        if (next && next->dead)
            break; /* the list changed under us; the next call polls the rest */
    }
    return polled;
}

/* Whether tcp_progress() would find anything on the channels it polls;
 * with more, or a channel connecting, progress goes through epoll anyway.
 * Only while a channel receives large frames (read in place, the stream's
 * sender the bottleneck): for smaller ones, a recv() that holds the socket
 * while the peer's segments arrive moves their processing to this side (the
 * socket's backlog), which helps a 64 KiB stream (bench/README.md). */
static int tcp_ready(struct rov_rail *rail)
{
    struct tcp_rail *r = (struct tcp_rail *)rail;
    struct pollfd p[TCP_DIRECT_POLL_MAX];
    bool big = false;
    nfds_t n = 0;

    if (r->nchans == 0)
        return 0;
    if (r->nchans > TCP_DIRECT_POLL_MAX || r->graveyard)
        return 1;
    for (struct tcp_chan *c = r->chans; c; c = c->next) {
        if (c->connecting)
            return 1;
        big |= c->expect_big || c->big_need != 0;
        p[n].fd = c->watch.fd;
        p[n].events = (short)((c->events & EPOLLIN ? POLLIN : 0) | (c->txq_head ? POLLOUT : 0));
        n++;
    }
    return !big || poll(p, n, 0) != 0;
}

static rov_status_t tcp_arm(struct rov_rail *rail)
{
    return rail_wake((struct tcp_rail *)rail);
}

static void tcp_close(struct rov_rail *rail)
{
    struct tcp_rail *r = (struct tcp_rail *)rail;

    while (r->chans)
        tcp_chan_close(&r->chans->base);
    while (r->regs) /* (the transport releases its registrations first) */
        tcp_mem_dereg(rail, r->regs);
    tcp_unlisten(rail);
    rov_net_links_close(&r->links);
    bury(r);
    free(r);
}

/* Liveness from the kernel.  The channel is busy while segments it sent
 * await the peer kernel's ACK (tcpi_unacked); the engine then waits on the
 * time since the last ACK.  Data held back by the peer's receive window is
 * only queued: a peer that computes for minutes without reading closes its
 * window, and that is no failure.  The kernel probes a closed window (the
 * persist timer: 200 ms, then doubling) and the peer's kernel answers each
 * probe, but at most one every tcp_invalid_ratelimit (500 ms), so one
 * unanswered probe says nothing; two in a row (tcpi_probes, which any ACK
 * resets) do not happen on a live path.  They matter when both windows are
 * closed as the path dies: each end then reads, and the window update it
 * sends is lost, so neither has anything in flight, and neither would ever
 * stall otherwise (tests/failover: linkdown_frozen).
 *
 * Data that waits unsent while the peer's window has room and nothing is in
 * flight is work the kernel could not hand to the network: its
 * transmissions failed locally (the route went with the interface: `ip link
 * set down`).  That is busy at once.  A channel idle when its link went
 * down otherwise counted as busy only after two persist probes (the first
 * 200 ms after its next write, the next 400 ms later), and moved about
 * 1 s after the fault instead of 250 ms (4 of 256 connections in one
 * link-down of bench/failover-scale.py).  Its sends are failed attempts,
 * not retransmissions that an ACK may still answer (retransmits = 0). */
/* A large frame is read into a buffer of the size its header announces (up
 * to RAILOVER_MAX_MSG), so a peer that announces one and stops sending held
 * that memory for as long as the connection lived: eight connections that
 * each announced 64 MiB and sent 40 held 330 MB for ever.  A frame none of
 * whose bytes came for BIG_STALL_FACTOR failover timeouts (at least
 * BIG_STALL_MIN_NS) is a stall: the failover engine fails the channel (the
 * connection moves or reconnects, and the sender resends the message), and
 * its buffer goes with it.  Not one failover timeout: the rest of a frame
 * is written by the sender's progress calls, and a peer application that
 * computes for a while between two of them is the peer's turn, not a
 * failure; one that never finishes a frame no longer holds the memory for
 * ever.  Measured here, between the engine's health checks, so the
 * receive path reads no clock; a frame in the staging buffer holds only
 * that buffer, and is not timed. */
#define BIG_STALL_FACTOR 8
#define BIG_STALL_MIN_NS (10ull * 1000000000ull)
static ROV_COLD bool big_stalled(struct tcp_chan *c)
{
    uint64_t now = rov_now_ns(), limit = BIG_STALL_FACTOR * c->rail->stall_ns;
    char where[128];

    if (limit < BIG_STALL_MIN_NS)
        limit = BIG_STALL_MIN_NS;
    if (!c->big_seen_ns || c->big_seen_frame != c->big_frames || c->big_seen_len != c->big_len) {
        c->big_seen_frame = c->big_frames;
        c->big_seen_len = c->big_len;
        c->big_seen_ns = now;
        return false;
    }
    if (!c->rail->stall_ns || now - c->big_seen_ns < limit)
        return false;
    tcp_chan_str(&c->base, where, sizeof(where));
    rov_log_ratelimited(ROV_LOG_WARN, "tcp", "channel %s: a frame of %zu bytes stopped "
                        "arriving (%zu received, none for %.0f s): the channel fails and "
                        "the frame's buffer is freed",
                        where, c->big_need, c->big_len, (double)limit / 1e9);
    return true;
}

/* tcpi_state of an established connection (the kernel's TCP_ESTABLISHED,
 * which linux/tcp.h does not export). */
#define TCP_STATE_ESTABLISHED 1
static rov_status_t tcp_chan_health(struct rov_chan *chan, struct rov_chan_health *h)
{
    struct tcp_chan *c = rov_container_of(chan, struct tcp_chan, base);
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    int notsent = 0;

    h->busy = c->connecting;
    h->peer_turn = 0;
    h->queued = 0;
    h->heard_ago_ns = h->sent_ago_ns = 0;
    if (c->dead)
        return ROV_ERR_RESET;
    if (c->connecting) {
        /* The kernel's handshake is done and only this process has not
         * run the completion yet (a storm of connects, a busy caller): the
         * path works; what is left is ours, not the rail's to time. */
        if (getsockopt(c->watch.fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
            ti.tcpi_state == TCP_STATE_ESTABLISHED)
            h->peer_turn = 1;
        return ROV_OK;
    }
    if (__builtin_expect(c->big_need != 0, 0) && big_stalled(c))
        return ROV_ERR_TIMEDOUT;
    if (getsockopt(c->watch.fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
        return rov_net_errno_status(errno);
    h->busy = ti.tcpi_unacked > 0 || ti.tcpi_probes >= 2;
    h->retransmits = 1;
    if (!h->busy) {
        bool wnd = len >= offsetof(struct tcp_info, tcpi_snd_wnd) + sizeof(ti.tcpi_snd_wnd);

        /* Whether data waits: from TCP_INFO, or on an older kernel the ioctl. */
        if (wnd)
            notsent = (int)ti.tcpi_notsent_bytes;
        else if (ioctl(c->watch.fd, SIOCOUTQNSD, &notsent) < 0)
            return rov_net_errno_status(errno);
        h->queued = notsent > 0 || c->txq_head != NULL;
        /* (A window smaller than both a segment and the data does hold
         * it back; receivers advertise 0 rather than that, but this does
         * not rely on it.) */
        if (wnd && notsent > 0 && (ti.tcpi_snd_wnd >= ti.tcpi_snd_mss ||
                                   ti.tcpi_snd_wnd >= ti.tcpi_notsent_bytes)) {
            h->busy = 1; /* could not transmit: no route */
            h->retransmits = 0;
        }
    }
    h->heard_ago_ns = (uint64_t)ti.tcpi_last_ack_recv * 1000000ull;
    h->sent_ago_ns = (uint64_t)ti.tcpi_last_data_sent * 1000000ull;
    return ROV_OK;
}

static uint64_t tcp_link_mbps(struct rov_rail *rail)
{
    return rov_net_link_mbps(&rov_container_of(rail, struct tcp_rail, base)->local);
}

static uint64_t tcp_chan_queued(struct rov_chan *chan)
{
    struct tcp_chan *c = rov_container_of(chan, struct tcp_chan, base);
    uint64_t bytes = 0;
    int outq = 0;

    if (!c->connecting && !c->dead && ioctl(c->watch.fd, SIOCOUTQ, &outq) == 0 && outq > 0)
        bytes = (uint64_t)outq;
    for (const struct tcp_txq *q = c->txq_head; q; q = q->next)
        for (int i = 0; i < q->iovcnt; i++)
            bytes += q->iov[i].iov_len;
    return bytes;
}

/* TCP cannot tell when the peer application has read what its kernel took,
 * and a socket closed with unread input is reset, which throws away what is
 * still unsent here, and makes the peer's next write fail, on which its
 * rail drops the channel with what it had not read yet.  So the flush ends
 * the stream after what is queued (shutdown(SHUT_WR)) and completes when
 * the peer ends its own (the transport's peer does once it has read what
 * it waited for, rail.h); after the peer's end our close resets nothing.
 * A reset or a stall fails the channel instead, as ever. */
static rov_status_t tcp_chan_flush(struct rov_chan *chan)
{
    struct tcp_chan *c = rov_container_of(chan, struct tcp_chan, base);

    if (c->dead)
        return ROV_ERR_RESET;
    if (!c->ending) {
        c->ending = true;
        if (!c->txq_head)
            end_stream(c);
    }
    return ROV_INPROGRESS;
}

static void tcp_chan_str(struct rov_chan *chan, char *buf, size_t len)
{
    struct tcp_chan *c = rov_container_of(chan, struct tcp_chan, base);
    struct sockaddr_storage l, r;
    socklen_t ll = sizeof(l), rl = sizeof(r);
    char ls[64] = "?", rs[64] = "?";

    memset(&l, 0, sizeof(l));
    memset(&r, 0, sizeof(r));
    if (getsockname(c->watch.fd, (struct sockaddr *)&l, &ll) == 0)
        rov_net_sockaddr_str(&l, ls, sizeof(ls));
    if (getpeername(c->watch.fd, (struct sockaddr *)&r, &rl) == 0)
        rov_net_sockaddr_str(&r, rs, sizeof(rs));
    snprintf(buf, len, "local=%s remote=%s", ls, rs);
}

static const struct rov_rail_ops tcp_ops = {
    .name = "tcp",
    .settings = &tcp_settings,
    .open = tcp_open,
    .close = tcp_close,
    .listen = tcp_listen,
    .unlisten = tcp_unlisten,
    .accept_resume = tcp_accept_resume,
    .connect = tcp_connect,
    .send = tcp_send,
    .chan_close = tcp_chan_close,
    .progress = tcp_progress,
    .arm = tcp_arm,
    .ready = tcp_ready,
    .chan_health = tcp_chan_health,
    .chan_queued = tcp_chan_queued,
    .link_mbps = tcp_link_mbps,
    .mem_reg = tcp_mem_reg,
    .mem_dereg = tcp_mem_dereg,
    .get = tcp_get,
    .chan_flush = tcp_chan_flush,
    .chan_str = tcp_chan_str,
    .addr_str = tcp_addr_str,
    .path_key = rov_net_addr_path_key,
};

ROV_RAIL_REGISTER(tcp_ops)
