/*
 * railover perf: latency and bandwidth of a Railover connection and of the
 * same traffic on a bare TCP socket, so the two can be compared in one run.
 *
 *   railover perf --listen ADDR:PORT     serve runs, one at a time, until killed
 *   railover perf ADDR:PORT [options]    run the tests against a server
 *
 * Bootstrap, on a plain TCP connection to ADDR:PORT (integers little-endian):
 *
 *   request   "ROVPERF1" u32 version, u32 mode (1 raw, 2 railover), u32 nsteps,
 *             u32 0, then per step (one per message size):
 *             u64 size, u32 lat_iters, u32 lat_warmup, u64 bw_msgs, u32 bw_reps,
 *             u32 0
 *   response  "ROVPERF1" u32 status (0: ok), u32 len, u64 token, then len bytes:
 *             the server endpoint's address blob (railover mode, status 0) or
 *             an error message (status != 0)
 *
 * Raw mode then carries the tests on the bootstrap socket itself.  Railover
 * mode connects to the blob and sends HELLO(token), so that the server can
 * tell its client's connection from strays, and waits for READY; the
 * bootstrap socket stays open only to notice a peer that dies.  The blob
 * holds the server endpoint's key (docs/architecture.md, "Who may join a
 * connection"): a benchmark server hands it to whoever connects to
 * ADDR:PORT, so anyone who can reach that port can open connections to it.
 * Serve benchmarks on loopback or a network you trust.
 *
 * Both sides then walk the same plan.  Per size: lat_warmup + lat_iters
 * ping-pongs (the first and last 8 bytes of each message carry the size, the
 * iteration and the direction), then bw_reps streams of bw_msgs messages, each
 * answered by one small ack once the server has received and checked every
 * message.  Both sides busy-poll: rov_progress() for Railover, recv/send with
 * MSG_DONTWAIT for raw TCP.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "railover/railover.h"
#include "railover_tool.h"

/* The functions every latency iteration runs, of both paths (raw TCP and
 * Railover), kept together on a few pages: after each system call every page
 * they touch is walked again (bench/README.md, "What a message costs"), and
 * the tool's own cost must not differ between the paths it compares. */
#define PERF_HOT __attribute__((hot))

#define PERF_MAGIC "ROVPERF1"
#define PERF_MAGIC_LEN 8
#define PERF_VERSION 1
#define PERF_REQ_HDR_LEN 24
#define PERF_REQ_STEP_LEN 32
#define PERF_RESP_HDR_LEN 24
#define PERF_RESP_MAX_PAYLOAD 65536

#define PERF_MAX_STEPS 64
#define PERF_MAX_SIZE (UINT64_C(1) << 30)
#define PERF_MAX_ITERS 100000000u
#define PERF_MAX_REPS 100u
#define PERF_BW_REPS 3u
#define PERF_BW_MIN_MSGS 64u
#define PERF_BW_MAX_MSGS (UINT64_C(1) << 20)
#define PERF_DEFAULT_SIZES "8,4096,65536,1048576"
#define PERF_DEFAULT_BW_BYTES (UINT64_C(512) << 20)
#define PERF_LARGE_SIZE (UINT64_C(64) << 10) /* above: fewer latency iterations */
#define PERF_ITERS_SMALL 10000u
#define PERF_ITERS_LARGE 1000u

#define PERF_RAW_BATCH (256u << 10) /* raw stream receive: bytes per recv target */
#define PERF_NS_PER_S UINT64_C(1000000000)
#define PERF_IDLE_TIMEOUT_S 20   /* a run fails after this long without progress */
#define PERF_SETUP_TIMEOUT_S 10  /* bootstrap request, connect, close */
#define PERF_REPLY_TIMEOUT_S 120 /* client: the server may be busy with another run */
#define PERF_ABORT_TIMEOUT_S 2   /* server: closing a failed run's connection */
#define PERF_BOOT_CHECK_NS (50 * UINT64_C(1000000))
#define PERF_IDLE_SPINS 1024u    /* idle polls between clock reads */
/* Both ends of a bandwidth stream sleep up to this long when nothing can
 * move (the sender: no room to send; the receiver: nothing arrived), in
 * rov_context_wait() or poll() on the raw path: on a machine whose network
 * stack shares the application's CPU (Soft-RoCE, where rxe's requester and
 * responder run in softirq context on the posting CPU; loopback TCP), a
 * busy-polling end takes that CPU from the stack.  On Soft-RoCE a polling
 * sender held its vCPU at 0.99 busy and streamed 64 KiB frames at 0.87 of
 * ib_write_bw; waiting, 0.77-0.86 busy and 1.04 (docs/rdma.md).  Latency
 * runs poll busily on both sides, like ib_send_lat. */
#define PERF_STREAM_WAIT_MS 1

#define PERF_SALT_LAT UINT64_C(0x52564c4154000000)
#define PERF_SALT_BW UINT64_C(0x5256425700000000)
#define PERF_SALT_ACK UINT64_C(0x52564143b0000000)
#define PERF_SALT_HELLO UINT64_C(0x525648454c4c4f00)

enum perf_mode {
    PERF_MODE_RAW = 1,
    PERF_MODE_RAILOVER = 2,
};

/* Message tags on the Railover connection. */
enum perf_tag {
    PERF_TAG_HELLO = 1, /* client -> server: the token from the bootstrap reply */
    PERF_TAG_READY = 2, /* server -> client: connection bound, plan starts */
    PERF_TAG_PING = 3,  /* latency, client -> server */
    PERF_TAG_PONG = 4,  /* latency, server -> client */
    PERF_TAG_BW = 5,    /* bandwidth stream, client -> server */
    PERF_TAG_ACK = 6,   /* server -> client: the whole stream arrived */
};

struct perf_step {
    uint64_t size;
    uint32_t lat_iters;
    uint32_t lat_warmup;
    uint64_t bw_msgs;
    uint32_t bw_reps;
};

struct perf_plan {
    uint32_t mode;
    uint32_t nsteps;
    struct perf_step step[PERF_MAX_STEPS];
};

/* The edges of a received message: enough to check that it is the right one. */
struct perf_msg {
    bool ready;
    uint32_t tag;
    size_t len;
    unsigned char head[8];
    unsigned char tail[8];
};

struct perf_idle {
    uint32_t spins;
    uint64_t since_ns;
};

struct perf_bufs;
struct perf_io;

/* A buffer that zero-copy sends may still reference. */
struct perf_slot {
    struct perf_bufs *bufs;
    unsigned busy; /* sends posted from the buffer and not yet completed */
};

/* One run's buffers.  They outlive a failed run while a send still references
 * them; the last completion frees them then. */
struct perf_bufs {
    struct perf_io *io;
    bool orphaned;
    size_t len;            /* of tx[], bw */
    size_t rx_len;
    unsigned char *tx[2];  /* latency, alternating */
    unsigned char *bw;     /* bandwidth stream, never changed while in flight */
    unsigned char *rx;     /* raw receive */
    unsigned char ctl[8];  /* HELLO, READY, ACK */
    struct perf_slot tx_slot[2];
    struct perf_slot bw_slot;
    struct perf_slot ctl_slot;
};

/* How one path moves the test traffic.  Every call busy-polls until done and
 * returns 0, or -1 with io->err set. */
struct perf_ops {
    const char *path;
    int (*send_lat)(struct perf_io *io, unsigned slot, size_t size, uint64_t word);
    int (*recv_lat)(struct perf_io *io, size_t size, uint64_t word);
    int (*send_stream)(struct perf_io *io, size_t size, uint64_t count);
    int (*recv_stream)(struct perf_io *io, size_t size, uint64_t count);
    int (*send_ack)(struct perf_io *io, uint64_t word);
    int (*recv_ack)(struct perf_io *io, uint64_t word);
    int (*drain)(struct perf_io *io);
    const char *(*rail)(const struct perf_io *io);
};

struct perf_io {
    const struct perf_ops *ops;
    bool server;
    int fd;               /* raw: data socket; railover: bootstrap socket */
    bool stream_wait;     /* in a bandwidth stream: sleep when nothing moves */
    bool fd_eof_ok;       /* railover: the peer may close the bootstrap socket */
    uint64_t fd_checked_ns;
    char err[256];
    struct perf_bufs *bufs;

    /* Railover only. */
    rov_context_t *ctx;
    rov_endpoint_t *ep;
    rov_conn_t *conn;
    uint64_t token;
    bool want_hello;      /* server: bind the connection that sends HELLO(token) */
    bool closing;         /* the plan is done; a close from the peer is expected */
    bool conn_gone;       /* our connection handle has been freed */
    char closing_mark;    /* its address is the user pointer of connections we closed */
    struct perf_msg msg;  /* last latency / control message, until consumed */
    size_t bw_size;       /* expected stream message size; 0: none expected */
    uint64_t bw_word;
    uint64_t bw_count;
};

struct perf_opts {
    const char *listen;
    const char *server;
    bool raw;
    bool json;
    const char *sizes;
    long long iters;  /* -1: default per size */
    long long warmup; /* -1: 10% of iters */
    uint64_t bw_bytes;
};

struct perf_lat {
    uint32_t iters;
    double p50_us, p99_us, mean_us;
};

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * PERF_NS_PER_S + (uint64_t)ts.tv_nsec;
}

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static uint32_t get_le32(const unsigned char *p)
{
    uint32_t v = 0;

    for (int i = 3; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static int perf_fail(struct perf_io *io, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Record the first error of a run; returns -1 for `return perf_fail(...)`. */
static int perf_fail(struct perf_io *io, const char *fmt, ...)
{
    if (io->err[0] == '\0') {
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(io->err, sizeof(io->err), fmt, ap);
        va_end(ap);
        if (io->err[0] == '\0') {
            snprintf(io->err, sizeof(io->err), "failed");
        }
    }
    return -1;
}

static PERF_HOT void idle_reset(struct perf_idle *idle)
{
    idle->spins = 0;
    idle->since_ns = 0;
}

/* Count one poll that found nothing to do.  Reads the clock only every
 * PERF_IDLE_SPINS polls; *now_p is set (else 0) when it did. */
static PERF_HOT bool idle_expired(struct perf_idle *idle, uint64_t *now_p)
{
    *now_p = 0;
    if (++idle->spins % PERF_IDLE_SPINS != 0) {
        return false;
    }
    uint64_t now = now_ns();
    *now_p = now;
    if (idle->since_ns == 0) {
        idle->since_ns = now;
        return false;
    }
    return now - idle->since_ns > PERF_IDLE_TIMEOUT_S * PERF_NS_PER_S;
}

/* The words written into test messages; the size, iteration and direction
 * are all in them so a message of the wrong test, size or turn is caught. */
static uint64_t lat_word(uint64_t size, uint64_t iter, bool pong)
{
    return PERF_SALT_LAT ^ (size << 32) ^ (iter << 1) ^ (pong ? 1u : 0u);
}

static uint64_t bw_word(uint64_t size)
{
    return PERF_SALT_BW ^ size;
}

static uint64_t ack_word(uint64_t size, uint64_t count)
{
    return PERF_SALT_ACK ^ (size << 24) ^ count;
}

/* Write `word` into the first 8 bytes of buf (fewer if len < 8) and, when
 * len >= 16, into the last 8. */
static PERF_HOT void edges_write(unsigned char *buf, size_t len, uint64_t word)
{
    unsigned char w[8];

    put_le64(w, word);
    memcpy(buf, w, len < 8 ? len : 8);
    if (len >= 16) {
        memcpy(buf + len - 8, w, 8);
    }
}

static bool edges_match(const unsigned char *head, const unsigned char *tail, size_t len,
                        uint64_t word)
{
    unsigned char w[8];

    put_le64(w, word);
    if (memcmp(head, w, len < 8 ? len : 8) != 0) {
        return false;
    }
    return len < 16 || memcmp(tail, w, 8) == 0;
}

static PERF_HOT bool buf_matches(const unsigned char *buf, size_t len, uint64_t word)
{
    return edges_match(buf, len >= 16 ? buf + len - 8 : buf, len, word);
}

static void msg_capture(struct perf_msg *msg, uint32_t tag, const void *data, size_t len)
{
    const unsigned char *p = data;

    msg->tag = tag;
    msg->len = len;
    memset(msg->head, 0, sizeof(msg->head));
    memset(msg->tail, 0, sizeof(msg->tail));
    memcpy(msg->head, p, len < 8 ? len : 8);
    if (len >= 16) {
        memcpy(msg->tail, p + len - 8, 8);
    }
    msg->ready = true;
}

/* Check a captured message; names what is wrong. */
static PERF_HOT int msg_check(struct perf_io *io, const struct perf_msg *msg, const char *what,
                              uint32_t tag, size_t len, uint64_t word)
{
    if (msg->tag != tag) {
        return perf_fail(io, "%s: received a message with tag %" PRIu32 ", expected %" PRIu32,
                         what, msg->tag, tag);
    }
    if (msg->len != len) {
        return perf_fail(io, "%s: received %zu bytes, expected %zu", what, msg->len, len);
    }
    if (!edges_match(msg->head, msg->tail, len, word)) {
        return perf_fail(io, "%s: message content is wrong (not the expected message)", what);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Buffers                                                                   */

static void bufs_free(struct perf_bufs *bufs)
{
    if (bufs == NULL) {
        return;
    }
    free(bufs->tx[0]);
    free(bufs->tx[1]);
    free(bufs->bw);
    free(bufs->rx);
    free(bufs);
}

static unsigned char *buf_alloc(size_t len)
{
    unsigned char *p = malloc(len);

    if (p != NULL) {
        memset(p, 0xa5, len); /* fault the pages in before timing */
    }
    return p;
}

static struct perf_bufs *bufs_alloc(struct perf_io *io, const struct perf_plan *plan)
{
    size_t max = 16;

    for (uint32_t i = 0; i < plan->nsteps; i++) {
        if (plan->step[i].size > max) {
            max = (size_t)plan->step[i].size;
        }
    }
    struct perf_bufs *bufs = calloc(1, sizeof(*bufs));
    if (bufs == NULL) {
        return NULL;
    }
    bufs->io = io;
    bufs->len = max;
    bufs->tx[0] = buf_alloc(max);
    bufs->tx[1] = buf_alloc(max);
    bufs->bw = buf_alloc(max);
    if (plan->mode == PERF_MODE_RAW) {
        bufs->rx_len = max > PERF_RAW_BATCH ? max : PERF_RAW_BATCH;
        bufs->rx = buf_alloc(bufs->rx_len);
    }
    if (bufs->tx[0] == NULL || bufs->tx[1] == NULL || bufs->bw == NULL ||
        (plan->mode == PERF_MODE_RAW && bufs->rx == NULL)) {
        bufs_free(bufs);
        return NULL;
    }
    bufs->tx_slot[0].bufs = bufs;
    bufs->tx_slot[1].bufs = bufs;
    bufs->bw_slot.bufs = bufs;
    bufs->ctl_slot.bufs = bufs;
    return bufs;
}

static bool bufs_busy(const struct perf_bufs *bufs)
{
    return bufs->tx_slot[0].busy != 0 || bufs->tx_slot[1].busy != 0 ||
           bufs->bw_slot.busy != 0 || bufs->ctl_slot.busy != 0;
}

/* End of a run: free the buffers, or leave that to the last completion when
 * an abandoned connection still references them. */
static void bufs_release(struct perf_bufs *bufs)
{
    if (bufs == NULL) {
        return;
    }
    if (bufs_busy(bufs)) {
        bufs->orphaned = true;
        bufs->io = NULL;
        return;
    }
    bufs_free(bufs);
}

/* ------------------------------------------------------------------------ */
/* Raw TCP path                                                              */

static PERF_HOT bool errno_is_again(void)
{
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

/* The socket cannot take or give anything: in a stream, sleep until it can
 * (at most PERF_STREAM_WAIT_MS); -1 once nothing moved for too long. */
static int raw_blocked(struct perf_io *io, short events, struct perf_idle *idle, const char *op)
{
    uint64_t now;

    if (io->stream_wait) {
        struct pollfd pfd = {.fd = io->fd, .events = events};

        poll(&pfd, 1, PERF_STREAM_WAIT_MS);
    }
    if (idle_expired(idle, &now)) {
        return perf_fail(io, "%s: no progress for %d s", op, PERF_IDLE_TIMEOUT_S);
    }
    return 0;
}

static PERF_HOT int raw_send_all(struct perf_io *io, const unsigned char *buf, size_t len)
{
    struct perf_idle idle = { 0 };
    size_t off = 0;

    while (off < len) {
        ssize_t n = send(io->fd, buf + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            idle_reset(&idle);
        } else if (n < 0 && errno_is_again()) {
            if (raw_blocked(io, POLLOUT, &idle, "send") < 0) {
                return -1;
            }
        } else {
            return perf_fail(io, "send: %s", n == 0 ? "sent nothing" : strerror(errno));
        }
    }
    return 0;
}

static PERF_HOT int raw_recv_all(struct perf_io *io, unsigned char *buf, size_t len)
{
    struct perf_idle idle = { 0 };
    size_t off = 0;

    while (off < len) {
        ssize_t n = recv(io->fd, buf + off, len - off, MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            idle_reset(&idle);
        } else if (n == 0) {
            return perf_fail(io, "peer closed the connection");
        } else if (errno_is_again()) {
            if (raw_blocked(io, POLLIN, &idle, "recv") < 0) {
                return -1;
            }
        } else {
            return perf_fail(io, "recv: %s", strerror(errno));
        }
    }
    return 0;
}

static PERF_HOT int raw_send_lat(struct perf_io *io, unsigned slot, size_t size, uint64_t word)
{
    unsigned char *buf = io->bufs->tx[slot];

    edges_write(buf, size, word);
    return raw_send_all(io, buf, size);
}

static PERF_HOT int raw_recv_lat(struct perf_io *io, size_t size, uint64_t word)
{
    if (raw_recv_all(io, io->bufs->rx, size) < 0) {
        return -1;
    }
    if (!buf_matches(io->bufs->rx, size, word)) {
        return perf_fail(io, "latency: message content is wrong (not the expected message)");
    }
    return 0;
}

static int raw_send_stream(struct perf_io *io, size_t size, uint64_t count)
{
    for (uint64_t i = 0; i < count; i++) {
        if (raw_send_all(io, io->bufs->bw, size) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Receive up to PERF_RAW_BATCH bytes of whole messages per round, as a
 * framing receiver would, then check every message's edges. */
static int raw_recv_stream(struct perf_io *io, size_t size, uint64_t count)
{
    uint64_t per_batch = size >= PERF_RAW_BATCH ? 1 : PERF_RAW_BATCH / size;
    uint64_t word = bw_word(size);
    uint64_t done = 0;

    while (done < count) {
        uint64_t k = count - done < per_batch ? count - done : per_batch;
        if (raw_recv_all(io, io->bufs->rx, (size_t)k * size) < 0) {
            return -1;
        }
        for (uint64_t i = 0; i < k; i++) {
            if (!buf_matches(io->bufs->rx + i * size, size, word)) {
                return perf_fail(io, "bandwidth: stream message %" PRIu64 " is wrong",
                                 done + i);
            }
        }
        done += k;
    }
    return 0;
}

static int raw_send_ack(struct perf_io *io, uint64_t word)
{
    put_le64(io->bufs->ctl, word);
    return raw_send_all(io, io->bufs->ctl, 8);
}

static int raw_recv_ack(struct perf_io *io, uint64_t word)
{
    unsigned char buf[8];

    if (raw_recv_all(io, buf, sizeof(buf)) < 0) {
        return -1;
    }
    if (get_le64(buf) != word) {
        return perf_fail(io, "bandwidth: wrong ack from the server");
    }
    return 0;
}

static int raw_drain(struct perf_io *io)
{
    return 0;
}

static const char *raw_rail(const struct perf_io *io)
{
    return "tcp-raw";
}

static const struct perf_ops raw_ops = {
    .path = "raw",
    .send_lat = raw_send_lat,
    .recv_lat = raw_recv_lat,
    .send_stream = raw_send_stream,
    .recv_stream = raw_recv_stream,
    .send_ack = raw_send_ack,
    .recv_ack = raw_recv_ack,
    .drain = raw_drain,
    .rail = raw_rail,
};

/* ------------------------------------------------------------------------ */
/* Railover path                                                             */

/* Close a connection once; later calls for it do nothing (unless force: a
 * failed connection must be closed to be freed even if a close was already
 * under way).  Returns true when this call started the close. */
static bool rv_close(struct perf_io *io, rov_conn_t *conn, bool force)
{
    if (!force && rov_conn_get_user(conn) == &io->closing_mark) {
        return false;
    }
    rov_conn_set_user(conn, &io->closing_mark);
    bool ours = conn == io->conn;
    rov_status_t status = rov_conn_close(conn);
    if (status == ROV_OK && ours) {
        io->conn = NULL;
        io->conn_gone = true;
    }
    return true;
}

static void rv_stray(struct perf_io *io, rov_conn_t *conn, uint32_t tag, const void *data,
                     size_t len)
{
    if (io->want_hello && io->conn == NULL && tag == PERF_TAG_HELLO && len == 8 &&
        get_le64(data) == (io->token ^ PERF_SALT_HELLO)) {
        io->conn = conn;
        io->want_hello = false;
        return;
    }
    if (rov_conn_get_user(conn) == &io->closing_mark) {
        return;
    }
    fprintf(stderr, "railover perf: closing a connection that is not the current run's "
                    "(first message: tag %" PRIu32 ", %zu bytes)\n", tag, len);
    rv_close(io, conn, false);
}

static PERF_HOT void rv_recv_cb(void *arg, rov_conn_t *conn, uint32_t tag, const void *data,
                                size_t len)
{
    struct perf_io *io = arg;

    if (conn != io->conn || conn == NULL) {
        rv_stray(io, conn, tag, data, len);
        return;
    }
    if (tag == PERF_TAG_BW) {
        if (io->bw_size == 0) {
            perf_fail(io, "bandwidth: unexpected stream message (%zu bytes)", len);
        } else if (len != io->bw_size) {
            perf_fail(io, "bandwidth: stream message %" PRIu64 " has %zu bytes, expected %zu",
                      io->bw_count, len, io->bw_size);
        } else if (!buf_matches(data, len, io->bw_word)) {
            perf_fail(io, "bandwidth: stream message %" PRIu64 " is wrong", io->bw_count);
        }
        io->bw_count++;
        return;
    }
    if (io->msg.ready) {
        perf_fail(io, "unexpected message (tag %" PRIu32 ", %zu bytes) before the previous "
                      "one was handled", tag, len);
        return;
    }
    msg_capture(&io->msg, tag, data, len);
}

static void rv_event_cb(void *arg, const rov_event_t *event)
{
    struct perf_io *io = arg;
    bool ours = event->conn != NULL && event->conn == io->conn;

    switch (event->type) {
    case ROV_EVENT_CONN_ACCEPTED:      /* bound when it sends HELLO(token) */
    case ROV_EVENT_CONN_ESTABLISHED:
        break;
    case ROV_EVENT_CONTEXT_QUIESCED:   /* checkpoint stages (railover quiesce ...) */
    case ROV_EVENT_ENDPOINT_ADDRESS:
    case ROV_EVENT_CONTEXT_RESUMED:
        fprintf(stderr, "railover perf: %s\n", event->reason);
        break;
    case ROV_EVENT_CONN_BOND:
        break; /* the bond's members: railover status shows them */
    case ROV_EVENT_CONN_RAIL_SWITCH:
        if (ours) {
            fprintf(stderr, "railover perf: connection switched from rail %d to %d (%s)\n",
                    event->rail_from, event->rail_to,
                    event->reason != NULL ? event->reason : "no reason");
        }
        break;
    case ROV_EVENT_CONN_RAIL_DOWN:
        if (ours) {
            fprintf(stderr, "railover perf: connection lost rail %d: %s (%s)\n",
                    event->rail_from, rov_status_str(event->status),
                    event->reason != NULL ? event->reason : "no reason");
        }
        break;
    case ROV_EVENT_CONN_PEER_CLOSED:
        if (ours && !io->closing) {
            perf_fail(io, "the peer closed the connection mid-run");
        }
        rv_close(io, event->conn, false);
        break;
    case ROV_EVENT_CONN_ERROR:
        if (ours) {
            perf_fail(io, "connection failed: %s (%s)", rov_status_str(event->status),
                      event->reason != NULL ? event->reason : "no reason");
        }
        rv_close(io, event->conn, true);
        break;
    case ROV_EVENT_CONN_CLOSED:
        if (ours) {
            io->conn = NULL;
            io->conn_gone = true;
        }
        break;
    }
}

static void rv_send_done(void *arg, rov_status_t status)
{
    struct perf_slot *slot = arg;
    struct perf_bufs *bufs = slot->bufs;

    slot->busy--;
    if (bufs->orphaned) {
        if (!bufs_busy(bufs)) {
            bufs_free(bufs);
        }
        return;
    }
    if (status != ROV_OK) {
        perf_fail(bufs->io, "send completed with: %s", rov_status_str(status));
    }
}

/* Peek at the bootstrap socket: a peer that died or misbehaves ends the run
 * even when the Railover connection would take long to notice. */
static int rv_check_boot(struct perf_io *io, uint64_t now)
{
    char c;

    if (io->fd < 0 || now - io->fd_checked_ns < PERF_BOOT_CHECK_NS) {
        return 0;
    }
    io->fd_checked_ns = now;
    ssize_t n = recv(io->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) {
        if (io->fd_eof_ok) {
            return 0;
        }
        return perf_fail(io, "the peer closed the bootstrap connection");
    }
    if (n > 0) {
        return perf_fail(io, "unexpected data on the bootstrap connection");
    }
    if (errno_is_again()) {
        return 0;
    }
    if (io->fd_eof_ok) {
        return 0;
    }
    return perf_fail(io, "bootstrap connection: %s", strerror(errno));
}

/* One turn of progress: a busy poll, or in a stream a wait of up to
 * PERF_STREAM_WAIT_MS.  -1 (with io->err) when the run must stop. */
static PERF_HOT int rv_step(struct perf_io *io, struct perf_idle *idle)
{
    uint64_t now;
    int n = io->stream_wait ? rov_context_wait(io->ctx, PERF_STREAM_WAIT_MS)
                            : rov_progress(io->ctx);

    if (io->err[0] != '\0') {
        return -1;
    }
    if (n > 0) {
        idle_reset(idle);
        return 0;
    }
    if (idle_expired(idle, &now)) {
        return perf_fail(io, "no progress for %d s", PERF_IDLE_TIMEOUT_S);
    }
    if (now != 0) {
        return rv_check_boot(io, now);
    }
    return 0;
}

static PERF_HOT int rv_wait_slot(struct perf_io *io, const struct perf_slot *slot)
{
    struct perf_idle idle = { 0 };

    while (slot->busy != 0) {
        if (rv_step(io, &idle) < 0) {
            return -1;
        }
    }
    return 0;
}

static PERF_HOT int rv_send(struct perf_io *io, uint32_t tag, const void *buf, size_t len,
                            struct perf_slot *slot)
{
    struct perf_idle idle = { 0 };
    rov_send_params_t params = {
        .flags = 0,
        .cb = rv_send_done,
        .arg = slot,
    };

    for (;;) {
        if (io->conn == NULL) {
            return perf_fail(io, "the connection is gone");
        }
        rov_status_t status = rov_conn_send(io->conn, tag, buf, len, &params);
        if (status == ROV_OK) {
            return 0;
        }
        if (status == ROV_INPROGRESS) {
            slot->busy++;
            return 0;
        }
        if (status != ROV_ERR_AGAIN) {
            return perf_fail(io, "rov_conn_send of %zu bytes: %s", len, rov_status_str(status));
        }
        if (rv_step(io, &idle) < 0) {
            return -1;
        }
    }
}

static PERF_HOT int rv_wait_msg(struct perf_io *io)
{
    struct perf_idle idle = { 0 };

    while (!io->msg.ready) {
        if (rv_step(io, &idle) < 0) {
            return -1;
        }
    }
    return 0;
}

static int rv_send_ctl(struct perf_io *io, uint32_t tag, uint64_t word)
{
    struct perf_slot *slot = &io->bufs->ctl_slot;

    if (rv_wait_slot(io, slot) < 0) {
        return -1;
    }
    put_le64(io->bufs->ctl, word);
    return rv_send(io, tag, io->bufs->ctl, 8, slot);
}

static int rv_recv_ctl(struct perf_io *io, const char *what, uint32_t tag, uint64_t word)
{
    if (rv_wait_msg(io) < 0) {
        return -1;
    }
    io->msg.ready = false;
    return msg_check(io, &io->msg, what, tag, 8, word);
}

static PERF_HOT int rv_send_lat(struct perf_io *io, unsigned slot_index, size_t size, uint64_t word)
{
    struct perf_slot *slot = &io->bufs->tx_slot[slot_index];
    unsigned char *buf = io->bufs->tx[slot_index];

    if (rv_wait_slot(io, slot) < 0) {
        return -1;
    }
    edges_write(buf, size, word);
    return rv_send(io, io->server ? PERF_TAG_PONG : PERF_TAG_PING, buf, size, slot);
}

static PERF_HOT int rv_recv_lat(struct perf_io *io, size_t size, uint64_t word)
{
    if (rv_wait_msg(io) < 0) {
        return -1;
    }
    io->msg.ready = false;
    return msg_check(io, &io->msg, "latency", io->server ? PERF_TAG_PING : PERF_TAG_PONG,
                     size, word);
}

static int rv_send_stream(struct perf_io *io, size_t size, uint64_t count)
{
    for (uint64_t i = 0; i < count; i++) {
        if (rv_send(io, PERF_TAG_BW, io->bufs->bw, size, &io->bufs->bw_slot) < 0) {
            return -1;
        }
    }
    return 0;
}

static int rv_recv_stream(struct perf_io *io, size_t size, uint64_t count)
{
    struct perf_idle idle = { 0 };

    io->bw_size = size;
    io->bw_word = bw_word(size);
    io->bw_count = 0;
    while (io->bw_count < count) {
        if (rv_step(io, &idle) < 0) {
            break;
        }
    }
    io->bw_size = 0;
    return io->err[0] != '\0' ? -1 : 0;
}

static int rv_send_ack(struct perf_io *io, uint64_t word)
{
    return rv_send_ctl(io, PERF_TAG_ACK, word);
}

static int rv_recv_ack(struct perf_io *io, uint64_t word)
{
    return rv_recv_ctl(io, "bandwidth ack", PERF_TAG_ACK, word);
}

static int rv_drain(struct perf_io *io)
{
    struct perf_idle idle = { 0 };

    while (bufs_busy(io->bufs)) {
        if (rv_step(io, &idle) < 0) {
            return -1;
        }
    }
    return 0;
}

static const char *rv_rail(const struct perf_io *io)
{
    const char *name = NULL;

    if (io->conn != NULL) {
        name = rov_context_rail_name(io->ctx, rov_conn_rail(io->conn));
    }
    return name != NULL ? name : "unknown";
}

static const struct perf_ops rv_ops = {
    .path = "railover",
    .send_lat = rv_send_lat,
    .recv_lat = rv_recv_lat,
    .send_stream = rv_send_stream,
    .recv_stream = rv_recv_stream,
    .send_ack = rv_send_ack,
    .recv_ack = rv_recv_ack,
    .drain = rv_drain,
    .rail = rv_rail,
};

/* Progress (ignoring run errors) until our connection is freed or timeout_s
 * passes.  Returns 0 when it is gone. */
static int rv_wait_gone(struct perf_io *io, int timeout_s)
{
    uint64_t deadline = now_ns() + (uint64_t)timeout_s * PERF_NS_PER_S;
    unsigned spins = 0;

    while (!io->conn_gone && io->conn != NULL) {
        rov_progress(io->ctx);
        if (++spins % PERF_IDLE_SPINS == 0 && now_ns() > deadline) {
            return -1;
        }
    }
    return 0;
}

/* Create a context and endpoint from the environment. */
static int rv_open(struct perf_io *io, const char *who)
{
    char err[512] = "";
    rov_config_t *config = NULL;

    rov_status_t status = rov_config_read(err, sizeof(err), &config);
    if (status != ROV_OK) {
        fprintf(stderr, "%s: %s\n", who, err[0] != '\0' ? err : rov_status_str(status));
        return -1;
    }
    rov_context_params_t params = {
        .config = config,
        .recv_cb = rv_recv_cb,
        .event_cb = rv_event_cb,
        .arg = io,
    };
    status = rov_context_create(&params, &io->ctx);
    rov_config_free(config);
    if (status != ROV_OK) {
        fprintf(stderr, "%s: cannot create the Railover context: %s\n", who,
                rov_status_str(status));
        io->ctx = NULL;
        return -1;
    }
    status = rov_endpoint_create(io->ctx, &io->ep);
    if (status != ROV_OK) {
        fprintf(stderr, "%s: cannot create the Railover endpoint: %s\n", who,
                rov_status_str(status));
        rov_context_destroy(io->ctx);
        io->ctx = NULL;
        io->ep = NULL;
        return -1;
    }
    return 0;
}

static void rv_shut(struct perf_io *io)
{
    if (io->ep != NULL) {
        rov_endpoint_destroy(io->ep);
        io->ep = NULL;
    }
    if (io->ctx != NULL) {
        rov_context_destroy(io->ctx);
        io->ctx = NULL;
    }
}

/* ------------------------------------------------------------------------ */
/* The tests, common to both paths                                           */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted values. */
static uint64_t percentile(const uint64_t *sorted, size_t n, unsigned pct)
{
    size_t rank = (n * pct + 99) / 100;

    return sorted[rank > 0 ? rank - 1 : 0];
}

static PERF_HOT int perf_latency(struct perf_io *io, const struct perf_step *step,
                                 struct perf_lat *res)
{
    const struct perf_ops *ops = io->ops;
    size_t size = (size_t)step->size;
    uint64_t total = (uint64_t)step->lat_warmup + step->lat_iters;
    uint64_t *rtt = NULL;

    if (!io->server) {
        rtt = malloc(step->lat_iters * sizeof(*rtt));
        if (rtt == NULL) {
            return perf_fail(io, "out of memory");
        }
    }
    for (uint64_t it = 0; it < total; it++) {
        unsigned slot = (unsigned)(it & 1);
        if (io->server) {
            if (ops->recv_lat(io, size, lat_word(size, it, false)) < 0 ||
                ops->send_lat(io, slot, size, lat_word(size, it, true)) < 0) {
                return -1;
            }
            continue;
        }
        uint64_t t0 = now_ns();
        if (ops->send_lat(io, slot, size, lat_word(size, it, false)) < 0 ||
            ops->recv_lat(io, size, lat_word(size, it, true)) < 0) {
            free(rtt);
            return -1;
        }
        uint64_t t1 = now_ns();
        if (it >= step->lat_warmup) {
            rtt[it - step->lat_warmup] = t1 - t0;
        }
    }
    if (io->server) {
        return 0;
    }

    size_t n = step->lat_iters;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += (double)rtt[i];
    }
    qsort(rtt, n, sizeof(*rtt), cmp_u64);
    res->iters = step->lat_iters;
    res->p50_us = (double)percentile(rtt, n, 50) / 2000.0; /* one way: RTT / 2 */
    res->p99_us = (double)percentile(rtt, n, 99) / 2000.0;
    res->mean_us = sum / (double)n / 2000.0;
    free(rtt);
    return 0;
}

static int perf_bandwidth(struct perf_io *io, const struct perf_step *step, double *mb_s_p)
{
    const struct perf_ops *ops = io->ops;
    size_t size = (size_t)step->size;
    uint64_t count = step->bw_msgs;
    double mb_s[PERF_MAX_REPS];

    if (!io->server) {
        /* The buffer is posted many times at once; it must not change while
         * a send of an earlier size may still read it. */
        if (ops->drain(io) < 0) {
            return -1;
        }
        edges_write(io->bufs->bw, size, bw_word(size));
    }
    for (uint32_t rep = 0; rep < step->bw_reps; rep++) {
        uint64_t ack = ack_word(size, (uint64_t)rep * count + count);
        int rc;

        io->stream_wait = true;
        if (io->server) {
            rc = ops->recv_stream(io, size, count);
            io->stream_wait = false;
            if (rc < 0 || ops->send_ack(io, ack) < 0) {
                return -1;
            }
            continue;
        }
        uint64_t t0 = now_ns();
        rc = ops->send_stream(io, size, count) < 0 || ops->recv_ack(io, ack) < 0 ? -1 : 0;
        uint64_t t1 = now_ns();
        io->stream_wait = false;
        if (rc < 0) {
            return -1;
        }
        if (ops->drain(io) < 0) {
            return -1;
        }
        uint64_t ns = t1 > t0 ? t1 - t0 : 1;
        mb_s[rep] = (double)count * (double)size * 1000.0 / (double)ns; /* 10^6 B/s */
    }
    if (!io->server) {
        qsort(mb_s, step->bw_reps, sizeof(mb_s[0]), cmp_double);
        *mb_s_p = mb_s[step->bw_reps / 2];
    }
    return 0;
}

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            fprintf(out, "\\%c", c);
        } else if (c < 0x20) {
            fprintf(out, "\\u%04x", c);
        } else {
            fputc(c, out);
        }
    }
    fputc('"', out);
}

static void print_lat_json(FILE *out, const struct perf_io *io, const struct perf_step *step,
                           const struct perf_lat *lat)
{
    fprintf(out, "{\"test\":\"latency\",\"path\":\"%s\",\"rail\":", io->ops->path);
    json_string(out, io->ops->rail(io));
    fprintf(out, ",\"size\":%" PRIu64 ",\"p50_us\":%.3f,\"p99_us\":%.3f,\"mean_us\":%.3f,"
                 "\"iters\":%" PRIu32 "}\n",
            step->size, lat->p50_us, lat->p99_us, lat->mean_us, lat->iters);
}

static void print_bw_json(FILE *out, const struct perf_io *io, const struct perf_step *step,
                          double mb_s)
{
    fprintf(out, "{\"test\":\"bandwidth\",\"path\":\"%s\",\"rail\":", io->ops->path);
    json_string(out, io->ops->rail(io));
    fprintf(out, ",\"size\":%" PRIu64 ",\"mb_s\":%.1f,\"bytes\":%" PRIu64 "}\n", step->size,
            mb_s, step->size * step->bw_msgs);
}

/* Walk the plan.  The client prints results to out (NULL on the server). */
static int perf_run_plan(struct perf_io *io, const struct perf_plan *plan, FILE *out, bool json)
{
    for (uint32_t i = 0; i < plan->nsteps; i++) {
        const struct perf_step *step = &plan->step[i];
        struct perf_lat lat = { 0 };
        double mb_s = 0;

        if (perf_latency(io, step, &lat) < 0) {
            return -1;
        }
        if (out != NULL && json) {
            print_lat_json(out, io, step, &lat);
            fflush(out);
        }
        if (perf_bandwidth(io, step, &mb_s) < 0) {
            return -1;
        }
        if (out == NULL) {
            continue;
        }
        if (json) {
            print_bw_json(out, io, step, mb_s);
        } else {
            fprintf(out, "%10" PRIu64 " %10.2f %10.2f %10.2f %8" PRIu32 " %12.1f %10" PRIu64 "\n",
                    step->size, lat.p50_us, lat.p99_us, lat.mean_us, lat.iters, mb_s,
                    step->bw_msgs);
        }
        fflush(out);
    }
    /* The server's last sends complete as the client closes. */
    return io->server ? 0 : io->ops->drain(io);
}

/* ------------------------------------------------------------------------ */
/* Addresses and the bootstrap socket                                        */

/* Split "HOST:PORT" or "[V6ADDR]:PORT". */
static int parse_hostport(const char *str, bool passive, char *host, size_t host_len,
                          char *port, size_t port_len)
{
    const char *colon;
    const char *h = str;
    size_t hlen;

    if (str[0] == '[') {
        const char *rb = strchr(str, ']');
        if (rb == NULL || rb[1] != ':') {
            fprintf(stderr, "railover perf: bad address '%s': expected [IPV6]:PORT\n", str);
            return -1;
        }
        h = str + 1;
        hlen = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        colon = strrchr(str, ':');
        if (colon == NULL) {
            fprintf(stderr, "railover perf: bad address '%s': expected ADDR:PORT "
                            "(or [IPV6]:PORT)\n", str);
            return -1;
        }
        hlen = (size_t)(colon - str);
        if (memchr(str, ':', hlen) != NULL) {
            fprintf(stderr, "railover perf: bad address '%s': write an IPv6 address as "
                            "[ADDR]:PORT\n", str);
            return -1;
        }
    }
    if (hlen == 0 || hlen >= host_len) {
        fprintf(stderr, "railover perf: bad address '%s': %s host\n", str,
                hlen == 0 ? "missing" : "too long a");
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';

    const char *p = colon + 1;
    size_t plen = strlen(p);
    char *end = NULL;
    errno = 0;
    unsigned long v = plen > 0 && plen < port_len && strspn(p, "0123456789") == plen
                          ? strtoul(p, &end, 10)
                          : 100000;
    if (v > 65535 || (v == 0 && !passive)) {
        fprintf(stderr, "railover perf: bad address '%s': port must be a number from %d "
                        "to 65535\n", str, passive ? 0 : 1);
        return -1;
    }
    snprintf(port, port_len, "%lu", v);
    return 0;
}

static struct addrinfo *resolve(const char *str, bool passive)
{
    char host[256], port[16];
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM,
        .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0),
    };
    struct addrinfo *res = NULL;

    if (parse_hostport(str, passive, host, sizeof(host), port, sizeof(port)) < 0) {
        return NULL;
    }
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "railover perf: bad address '%s': %s\n", str,
                rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return NULL;
    }
    return res;
}

static void sockaddr_str(const struct sockaddr *sa, socklen_t len, char *buf, size_t buf_len)
{
    char host[64], serv[8]; /* numeric: an IPv6 address with a scope fits */

    if (getnameinfo(sa, len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(buf, buf_len, "?");
    } else if (sa->sa_family == AF_INET6) {
        snprintf(buf, buf_len, "[%s]:%s", host, serv);
    } else {
        snprintf(buf, buf_len, "%s:%s", host, serv);
    }
}

static void set_timeouts(int fd, int seconds)
{
    struct timeval tv = { .tv_sec = seconds };

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int set_nodelay(int fd)
{
    int one = 1;

    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int set_nonblocking(int fd, bool on)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0) {
        return -1;
    }
    return fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK);
}

/* Blocking I/O on the bootstrap socket (with the socket's timeouts).  On
 * failure *why_p says what happened. */
static int boot_write(int fd, const void *buf, size_t len, const char **why_p)
{
    const unsigned char *p = buf;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            *why_p = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? "timed out"
                                                                        : strerror(errno);
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int boot_read(int fd, void *buf, size_t len, const char **why_p)
{
    unsigned char *p = buf;

    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n == 0) {
            *why_p = "connection closed by the peer";
            return -1;
        }
        if (n < 0) {
            *why_p = errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno);
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int send_request(int fd, const struct perf_plan *plan, const char **why_p)
{
    unsigned char buf[PERF_REQ_HDR_LEN + PERF_MAX_STEPS * PERF_REQ_STEP_LEN];
    unsigned char *p = buf;

    memset(buf, 0, sizeof(buf));
    memcpy(p, PERF_MAGIC, PERF_MAGIC_LEN);
    put_le32(p + 8, PERF_VERSION);
    put_le32(p + 12, plan->mode);
    put_le32(p + 16, plan->nsteps);
    p += PERF_REQ_HDR_LEN;
    for (uint32_t i = 0; i < plan->nsteps; i++, p += PERF_REQ_STEP_LEN) {
        const struct perf_step *step = &plan->step[i];
        put_le64(p, step->size);
        put_le32(p + 8, step->lat_iters);
        put_le32(p + 12, step->lat_warmup);
        put_le64(p + 16, step->bw_msgs);
        put_le32(p + 24, step->bw_reps);
    }
    return boot_write(fd, buf, (size_t)(p - buf), why_p);
}

/* Read and validate a request.  On failure, why holds a message for the log
 * and for the client. */
static int recv_request(int fd, struct perf_plan *plan, char *why, size_t why_len)
{
    unsigned char hdr[PERF_REQ_HDR_LEN];
    unsigned char step_buf[PERF_REQ_STEP_LEN];
    const char *io_why = NULL;

    if (boot_read(fd, hdr, sizeof(hdr), &io_why) < 0) {
        snprintf(why, why_len, "reading the request: %s", io_why);
        return -1;
    }
    if (memcmp(hdr, PERF_MAGIC, PERF_MAGIC_LEN) != 0) {
        snprintf(why, why_len, "not a railover perf request (bad magic)");
        return -1;
    }
    uint32_t version = get_le32(hdr + 8);
    if (version != PERF_VERSION) {
        snprintf(why, why_len, "request version %" PRIu32 ", this server speaks %d", version,
                 PERF_VERSION);
        return -1;
    }
    plan->mode = get_le32(hdr + 12);
    plan->nsteps = get_le32(hdr + 16);
    if (plan->mode != PERF_MODE_RAW && plan->mode != PERF_MODE_RAILOVER) {
        snprintf(why, why_len, "bad mode %" PRIu32, plan->mode);
        return -1;
    }
    if (plan->nsteps == 0 || plan->nsteps > PERF_MAX_STEPS || get_le32(hdr + 20) != 0) {
        snprintf(why, why_len, "bad request header (%" PRIu32 " sizes)", plan->nsteps);
        return -1;
    }
    for (uint32_t i = 0; i < plan->nsteps; i++) {
        struct perf_step *step = &plan->step[i];
        if (boot_read(fd, step_buf, sizeof(step_buf), &io_why) < 0) {
            snprintf(why, why_len, "reading the request: %s", io_why);
            return -1;
        }
        step->size = get_le64(step_buf);
        step->lat_iters = get_le32(step_buf + 8);
        step->lat_warmup = get_le32(step_buf + 12);
        step->bw_msgs = get_le64(step_buf + 16);
        step->bw_reps = get_le32(step_buf + 24);
        if (step->size == 0 || step->size > PERF_MAX_SIZE || step->lat_iters == 0 ||
            step->lat_iters > PERF_MAX_ITERS || step->lat_warmup > PERF_MAX_ITERS ||
            step->bw_msgs == 0 || step->bw_msgs > PERF_BW_MAX_MSGS || step->bw_reps == 0 ||
            step->bw_reps > PERF_MAX_REPS || get_le32(step_buf + 28) != 0) {
            snprintf(why, why_len, "bad request: step %" PRIu32 " out of range", i);
            return -1;
        }
    }
    return 0;
}

static int send_response(int fd, uint32_t status, uint64_t token, const void *payload,
                         size_t len, const char **why_p)
{
    unsigned char hdr[PERF_RESP_HDR_LEN];

    memcpy(hdr, PERF_MAGIC, PERF_MAGIC_LEN);
    put_le32(hdr + 8, status);
    put_le32(hdr + 12, (uint32_t)len);
    put_le64(hdr + 16, token);
    if (boot_write(fd, hdr, sizeof(hdr), why_p) < 0) {
        return -1;
    }
    return len > 0 ? boot_write(fd, payload, len, why_p) : 0;
}

/* ------------------------------------------------------------------------ */
/* Server                                                                    */

struct perf_server {
    int lfd;
    struct perf_io rv;  /* lives as long as the server: context, endpoint */
    unsigned char *blob;
    size_t blob_len;
};

static uint64_t make_token(void)
{
    uint64_t token = 0;

    if (getrandom(&token, sizeof(token), GRND_NONBLOCK) != (ssize_t)sizeof(token)) {
        token = now_ns() ^ ((uint64_t)getpid() << 32);
    }
    return token;
}

static void io_reset(struct perf_io *io, const struct perf_ops *ops, bool server, int fd)
{
    io->ops = ops;
    io->server = server;
    io->fd = fd;
    io->fd_eof_ok = false;
    io->fd_checked_ns = 0;
    io->err[0] = '\0';
    io->bufs = NULL;
    io->conn = NULL;
    io->token = 0;
    io->want_hello = false;
    io->closing = false;
    io->conn_gone = false;
    memset(&io->msg, 0, sizeof(io->msg));
    io->bw_size = 0;
    io->bw_word = 0;
    io->bw_count = 0;
}

static int serve_raw(struct perf_io *io, int fd, const struct perf_plan *plan)
{
    const char *why = NULL;

    if (send_response(fd, 0, 0, NULL, 0, &why) < 0) {
        return perf_fail(io, "sending the reply: %s", why);
    }
    set_nodelay(fd);
    set_nonblocking(fd, true);
    return perf_run_plan(io, plan, NULL, false);
}

static int serve_railover(struct perf_server *srv, int fd, const struct perf_plan *plan)
{
    struct perf_io *io = &srv->rv;
    const char *why = NULL;
    struct perf_idle idle = { 0 };

    io->token = make_token();
    if (send_response(fd, 0, io->token, srv->blob, srv->blob_len, &why) < 0) {
        return perf_fail(io, "sending the reply: %s", why);
    }
    set_nonblocking(fd, true);
    io->want_hello = true;
    while (io->conn == NULL) {
        if (rv_step(io, &idle) < 0) {
            return -1;
        }
    }
    if (rv_send_ctl(io, PERF_TAG_READY, io->token ^ PERF_SALT_HELLO) < 0 ||
        perf_run_plan(io, plan, NULL, false) < 0) {
        return -1;
    }
    /* The client closes first; answer its close and wait for ours to end. */
    io->closing = true;
    io->fd_eof_ok = true;
    if (rv_wait_gone(io, PERF_SETUP_TIMEOUT_S) < 0) {
        return perf_fail(io, "the connection did not close within %d s", PERF_SETUP_TIMEOUT_S);
    }
    return 0;
}

static void serve_client(struct perf_server *srv, int fd, const char *peer)
{
    struct perf_plan plan;
    struct perf_io raw_io;
    struct perf_io *io;
    char why[256];
    const char *io_why = NULL;
    uint64_t t0 = now_ns();
    int rc;

    set_timeouts(fd, PERF_SETUP_TIMEOUT_S);
    if (recv_request(fd, &plan, why, sizeof(why)) < 0) {
        fprintf(stderr, "railover perf: client %s: %s; waiting for the next client\n", peer,
                why);
        send_response(fd, 1, 0, why, strlen(why), &io_why);
        return;
    }
    if (plan.mode == PERF_MODE_RAW) {
        memset(&raw_io, 0, sizeof(raw_io));
        io = &raw_io;
        io_reset(io, &raw_ops, true, fd);
    } else {
        io = &srv->rv;
        io_reset(io, &rv_ops, true, fd);
    }
    io->bufs = bufs_alloc(io, &plan);
    if (io->bufs == NULL) {
        snprintf(why, sizeof(why), "server out of memory for buffers of this run");
        fprintf(stderr, "railover perf: client %s: %s\n", peer, why);
        send_response(fd, 1, 0, why, strlen(why), &io_why);
        return;
    }

    if (plan.mode == PERF_MODE_RAW) {
        rc = serve_raw(io, fd, &plan);
    } else {
        rc = serve_railover(srv, fd, &plan);
        if (io->conn != NULL) {
            /* A failed run: close our side, give it a moment, then abandon
             * the handle (it is marked closed, and its events are ignored). */
            io->closing = true;
            rv_close(io, io->conn, false);
            if (rv_wait_gone(io, PERF_ABORT_TIMEOUT_S) < 0) {
                io->conn = NULL;
            }
        }
        io->want_hello = false;
        io->fd = -1;
    }
    bufs_release(io->bufs);
    io->bufs = NULL;

    double secs = (double)(now_ns() - t0) / 1e9;
    if (rc < 0) {
        fprintf(stderr, "railover perf: client %s: %s run failed after %.1f s: %s; waiting for "
                        "the next client\n", peer, io->ops->path, secs, io->err);
    } else {
        fprintf(stderr, "railover perf: client %s: %s run of %" PRIu32 " sizes done in %.1f s\n",
                peer, io->ops->path, plan.nsteps, secs);
    }
}

static int open_listener(const char *addr, char *bound, size_t bound_len)
{
    struct addrinfo *res = resolve(addr, true);
    int last_errno = 0;
    int fd = -1;

    if (res == NULL) {
        return -1;
    }
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int one = 1;
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 16) == 0) {
            break;
        }
        last_errno = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "railover perf: cannot listen on %s: %s\n", addr, strerror(last_errno));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        sockaddr_str((struct sockaddr *)&ss, len, bound, bound_len);
    } else {
        snprintf(bound, bound_len, "%s", addr);
    }
    return fd;
}

static int perf_serve(const struct perf_opts *opts)
{
    struct perf_server srv;
    char bound[128];

    memset(&srv, 0, sizeof(srv));
    srv.lfd = -1;
    io_reset(&srv.rv, &rv_ops, true, -1);
    if (rv_open(&srv.rv, "railover perf") < 0) {
        return 1;
    }

    size_t len = 512;
    rov_status_t status;
    for (;;) {
        unsigned char *blob = realloc(srv.blob, len);
        if (blob == NULL) {
            fprintf(stderr, "railover perf: out of memory\n");
            goto fail;
        }
        srv.blob = blob;
        size_t want = len;
        status = rov_endpoint_address(srv.rv.ep, srv.blob, &want);
        if (status == ROV_ERR_MSGSIZE && want > len && want <= PERF_RESP_MAX_PAYLOAD) {
            len = want;
            continue;
        }
        srv.blob_len = want;
        break;
    }
    if (status != ROV_OK) {
        fprintf(stderr, "railover perf: cannot get the endpoint address: %s\n",
                rov_status_str(status));
        goto fail;
    }

    srv.lfd = open_listener(opts->listen, bound, sizeof(bound));
    if (srv.lfd < 0) {
        goto fail;
    }
    printf("railover perf: listening on %s (railover rails:", bound);
    for (int i = 0; i < rov_context_rail_count(srv.rv.ctx); i++) {
        const char *name = rov_context_rail_name(srv.rv.ctx, i);
        printf(" %s", name != NULL ? name : "?");
    }
    printf(")\n");
    fflush(stdout);

    for (;;) {
        /* Between runs, keep the context going (strays, late closes). */
        struct pollfd pfd[2] = {
            { .fd = srv.lfd, .events = POLLIN },
            { .fd = rov_context_fd(srv.rv.ctx), .events = POLLIN },
        };
        int n = poll(pfd, 2, rov_context_arm(srv.rv.ctx) == ROV_OK ? 100 : 0);
        rov_progress(srv.rv.ctx);
        if (n <= 0 || !(pfd[0].revents & POLLIN)) {
            continue;
        }
        struct sockaddr_storage ss;
        socklen_t sslen = sizeof(ss);
        int fd = accept(srv.lfd, (struct sockaddr *)&ss, &sslen);
        if (fd < 0) {
            if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
                fprintf(stderr, "railover perf: accept: %s\n", strerror(errno));
                poll(NULL, 0, 100); /* e.g. out of descriptors: do not spin */
            }
            continue;
        }
        char peer[128];
        sockaddr_str((struct sockaddr *)&ss, sslen, peer, sizeof(peer));
        serve_client(&srv, fd, peer);
        close(fd);
    }

fail:
    if (srv.lfd >= 0) {
        close(srv.lfd);
    }
    free(srv.blob);
    rv_shut(&srv.rv);
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */

/* Parse a byte count with an optional K, M or G (binary) suffix. */
static int parse_bytes(const char *s, uint64_t *value_p)
{
    char *end = NULL;
    uint64_t mult = 1;

    if (*s < '0' || *s > '9') {
        return -1;
    }
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s) {
        return -1;
    }
    switch (*end) {
    case '\0':
        break;
    case 'k': case 'K':
        mult = UINT64_C(1) << 10;
        end++;
        break;
    case 'm': case 'M':
        mult = UINT64_C(1) << 20;
        end++;
        break;
    case 'g': case 'G':
        mult = UINT64_C(1) << 30;
        end++;
        break;
    default:
        return -1;
    }
    if (*end != '\0' || v > UINT64_MAX / mult) {
        return -1;
    }
    *value_p = (uint64_t)v * mult;
    return 0;
}

static int parse_count(const char *s, const char *opt, long long min, long long *value_p)
{
    char *end = NULL;

    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > (long long)PERF_MAX_ITERS) {
        fprintf(stderr, "railover perf: bad %s '%s': expected a number from %lld to %u\n", opt,
                s, min, PERF_MAX_ITERS);
        return -1;
    }
    *value_p = v;
    return 0;
}

static int build_plan(const struct perf_opts *opts, struct perf_plan *plan)
{
    const char *p = opts->sizes;

    memset(plan, 0, sizeof(*plan));
    plan->mode = opts->raw ? PERF_MODE_RAW : PERF_MODE_RAILOVER;
    if (*p == '\0') {
        fprintf(stderr, "railover perf: bad --sizes '': expected a list like %s\n",
                PERF_DEFAULT_SIZES);
        return -1;
    }
    while (*p != '\0') {
        char item[32];
        size_t len = strcspn(p, ",");
        uint64_t size = 0;

        if (len == 0 || len >= sizeof(item)) {
            fprintf(stderr, "railover perf: bad --sizes '%s': %s\n", opts->sizes,
                    len == 0 ? "empty item" : "item too long");
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (parse_bytes(item, &size) < 0 || size == 0 || size > PERF_MAX_SIZE) {
            fprintf(stderr, "railover perf: bad --sizes '%s': '%s' is not a size from 1 to %"
                            PRIu64 " bytes (suffixes K, M, G allowed)\n",
                    opts->sizes, item, PERF_MAX_SIZE);
            return -1;
        }
        if (plan->nsteps == PERF_MAX_STEPS) {
            fprintf(stderr, "railover perf: bad --sizes '%s': at most %d sizes\n", opts->sizes,
                    PERF_MAX_STEPS);
            return -1;
        }
        struct perf_step *step = &plan->step[plan->nsteps++];
        step->size = size;
        step->lat_iters = opts->iters >= 0 ? (uint32_t)opts->iters
                          : size <= PERF_LARGE_SIZE ? PERF_ITERS_SMALL
                                                    : PERF_ITERS_LARGE;
        step->lat_warmup = opts->warmup >= 0 ? (uint32_t)opts->warmup : step->lat_iters / 10;
        uint64_t msgs = (opts->bw_bytes + size - 1) / size;
        msgs = msgs < PERF_BW_MIN_MSGS ? PERF_BW_MIN_MSGS : msgs;
        step->bw_msgs = msgs > PERF_BW_MAX_MSGS ? PERF_BW_MAX_MSGS : msgs;
        step->bw_reps = PERF_BW_REPS;
        p += len;
        if (*p == ',') {
            p++;
            if (*p == '\0') {
                fprintf(stderr, "railover perf: bad --sizes '%s': trailing comma\n",
                        opts->sizes);
                return -1;
            }
        }
    }
    return 0;
}

static int connect_server(const char *addr)
{
    struct addrinfo *res = resolve(addr, false);
    int last_errno = ETIMEDOUT;
    int fd = -1;

    if (res == NULL) {
        return -1;
    }
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc < 0 && errno == EINPROGRESS) {
            struct pollfd pfd = { .fd = fd, .events = POLLOUT };
            int err = 0;
            socklen_t len = sizeof(err);
            rc = poll(&pfd, 1, PERF_SETUP_TIMEOUT_S * 1000);
            if (rc == 0) {
                errno = ETIMEDOUT;
                rc = -1;
            } else if (rc > 0) {
                rc = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (rc == 0 && err != 0) {
                    errno = err;
                    rc = -1;
                }
            }
        }
        if (rc == 0) {
            break;
        }
        last_errno = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "railover perf: cannot connect to %s: %s\n", addr,
                strerror(last_errno));
        return -1;
    }
    set_nonblocking(fd, false);
    set_nodelay(fd);
    return fd;
}

/* Read the server's reply; returns the payload (blob) in a new buffer. */
static int recv_response(int fd, const char *addr, uint64_t *token_p, unsigned char **blob_p,
                         size_t *len_p)
{
    unsigned char hdr[PERF_RESP_HDR_LEN];
    const char *why = NULL;

    if (boot_read(fd, hdr, sizeof(hdr), &why) < 0) {
        fprintf(stderr, "railover perf: no reply from %s: %s\n", addr, why);
        return -1;
    }
    uint32_t status = get_le32(hdr + 8);
    uint32_t len = get_le32(hdr + 12);
    if (memcmp(hdr, PERF_MAGIC, PERF_MAGIC_LEN) != 0 || len > PERF_RESP_MAX_PAYLOAD) {
        fprintf(stderr, "railover perf: %s is not a railover perf server\n", addr);
        return -1;
    }
    unsigned char *payload = malloc((size_t)len + 1);
    if (payload == NULL) {
        fprintf(stderr, "railover perf: out of memory\n");
        return -1;
    }
    if (len > 0 && boot_read(fd, payload, len, &why) < 0) {
        fprintf(stderr, "railover perf: reading the reply from %s: %s\n", addr, why);
        free(payload);
        return -1;
    }
    payload[len] = '\0';
    if (status != 0) {
        fprintf(stderr, "railover perf: server %s refused the run: %s\n", addr,
                (const char *)payload);
        free(payload);
        return -1;
    }
    *token_p = get_le64(hdr + 16);
    *blob_p = payload;
    *len_p = len;
    return 0;
}

/* Railover: connect to the server's endpoint and wait until it has bound the
 * connection to this run. */
static int rv_client_connect(struct perf_io *io, const unsigned char *blob, size_t len)
{
    rov_status_t status = rov_conn_connect(io->ep, blob, len, &io->conn);

    if (status != ROV_OK && status != ROV_INPROGRESS) {
        io->conn = NULL;
        return perf_fail(io, "rov_conn_connect: %s", rov_status_str(status));
    }
    if (rv_send_ctl(io, PERF_TAG_HELLO, io->token ^ PERF_SALT_HELLO) < 0) {
        return -1;
    }
    return rv_recv_ctl(io, "connect", PERF_TAG_READY, io->token ^ PERF_SALT_HELLO);
}

static int perf_client(const struct perf_opts *opts)
{
    struct perf_plan plan;
    struct perf_io io;
    unsigned char *blob = NULL;
    size_t blob_len = 0;
    uint64_t token = 0;
    const char *why = NULL;
    int rc = 1;
    int fd = -1;

    memset(&io, 0, sizeof(io));
    io_reset(&io, opts->raw ? &raw_ops : &rv_ops, false, -1);
    if (build_plan(opts, &plan) < 0) {
        return 1;
    }
    /* Before bothering the server: a bad environment fails here. */
    if (!opts->raw && rv_open(&io, "railover perf") < 0) {
        return 1;
    }
    io.bufs = bufs_alloc(&io, &plan);
    if (io.bufs == NULL) {
        fprintf(stderr, "railover perf: out of memory for the test buffers\n");
        goto out;
    }
    fd = connect_server(opts->server);
    if (fd < 0) {
        goto out;
    }
    io.fd = fd;
    set_timeouts(fd, PERF_REPLY_TIMEOUT_S);
    if (send_request(fd, &plan, &why) < 0) {
        fprintf(stderr, "railover perf: sending the request to %s: %s\n", opts->server, why);
        goto out;
    }
    if (recv_response(fd, opts->server, &token, &blob, &blob_len) < 0) {
        goto out;
    }
    set_nonblocking(fd, true);
    if (!opts->raw) {
        io.token = token;
        if (rv_client_connect(&io, blob, blob_len) < 0) {
            fprintf(stderr, "railover perf: connecting to the server's endpoint: %s\n", io.err);
            goto out;
        }
    }

    FILE *out = stdout;
    if (!opts->json) {
        fprintf(out, "# railover perf: path %s, rail %s, server %s\n", io.ops->path,
                io.ops->rail(&io), opts->server);
        fprintf(out, "# %8s %10s %10s %10s %8s %12s %10s\n", "size", "p50 us", "p99 us",
                "mean us", "iters", "MB/s", "bw msgs");
        fflush(out);
    }
    if (perf_run_plan(&io, &plan, out, opts->json) < 0) {
        fprintf(stderr, "railover perf: %s run failed: %s\n", io.ops->path, io.err);
        goto out;
    }
    if (!opts->raw) {
        io.closing = true;
        rv_close(&io, io.conn, false);
        if (rv_wait_gone(&io, PERF_SETUP_TIMEOUT_S) < 0) {
            fprintf(stderr, "railover perf: the connection did not close within %d s\n",
                    PERF_SETUP_TIMEOUT_S);
            goto out;
        }
    }
    rc = 0;

out:
    if (fd >= 0) {
        close(fd);
    }
    io.fd = -1;
    rv_shut(&io); /* cancels what is left; completions still find the buffers */
    bufs_free(io.bufs);
    free(blob);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Command line                                                              */

static void perf_usage(FILE *stream)
{
    fprintf(stream,
            "usage: railover perf --listen ADDR:PORT\n"
            "       railover perf ADDR:PORT [--raw] [--json] [--sizes LIST] [--iters N]\n"
            "                     [--warmup N] [--bw-bytes N]\n"
            "\n"
            "  --listen ADDR:PORT  serve runs one after another until killed (port 0: any;\n"
            "                      the bound address is printed).  The Railover side uses\n"
            "                      the RAILOVER_* environment.\n"
            "  ADDR:PORT           the server; IPv4, host name or [IPv6]\n"
            "  --raw               the same tests on a bare TCP socket instead of Railover\n"
            "  --json              one JSON line per result instead of the table\n"
            "  --sizes LIST        message sizes, comma separated, K/M/G suffixes allowed\n"
            "                      (default %s)\n"
            "  --iters N           latency iterations per size (default %u up to 64 KiB,\n"
            "                      %u above)\n"
            "  --warmup N          latency warmup iterations (default 10%% of --iters)\n"
            "  --bw-bytes N        bytes per bandwidth repetition (default 512M; at least\n"
            "                      %u and at most %" PRIu64 " messages); %u repetitions, the\n"
            "                      median is reported\n",
            PERF_DEFAULT_SIZES, PERF_ITERS_SMALL, PERF_ITERS_LARGE, PERF_BW_MIN_MSGS,
            PERF_BW_MAX_MSGS, PERF_BW_REPS);
}

int rov_tool_perf(int argc, char **argv)
{
    enum { OPT_LISTEN = 256, OPT_RAW, OPT_JSON, OPT_SIZES, OPT_ITERS, OPT_WARMUP, OPT_BW_BYTES };
    static const struct option longopts[] = {
        { "listen", required_argument, NULL, OPT_LISTEN },
        { "raw", no_argument, NULL, OPT_RAW },
        { "json", no_argument, NULL, OPT_JSON },
        { "sizes", required_argument, NULL, OPT_SIZES },
        { "iters", required_argument, NULL, OPT_ITERS },
        { "warmup", required_argument, NULL, OPT_WARMUP },
        { "bw-bytes", required_argument, NULL, OPT_BW_BYTES },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct perf_opts opts = {
        .sizes = PERF_DEFAULT_SIZES,
        .iters = -1,
        .warmup = -1,
        .bw_bytes = PERF_DEFAULT_BW_BYTES,
    };
    bool client_opts = false;
    int c;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_LISTEN:
            opts.listen = optarg;
            break;
        case OPT_RAW:
            opts.raw = true;
            client_opts = true;
            break;
        case OPT_JSON:
            opts.json = true;
            client_opts = true;
            break;
        case OPT_SIZES:
            opts.sizes = optarg;
            client_opts = true;
            break;
        case OPT_ITERS:
            if (parse_count(optarg, "--iters", 1, &opts.iters) < 0) {
                return 1;
            }
            client_opts = true;
            break;
        case OPT_WARMUP:
            if (parse_count(optarg, "--warmup", 0, &opts.warmup) < 0) {
                return 1;
            }
            client_opts = true;
            break;
        case OPT_BW_BYTES:
            if (parse_bytes(optarg, &opts.bw_bytes) < 0 || opts.bw_bytes == 0) {
                fprintf(stderr, "railover perf: bad --bw-bytes '%s': expected a positive byte "
                                "count (suffixes K, M, G allowed)\n", optarg);
                return 1;
            }
            client_opts = true;
            break;
        case 'h':
            perf_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "railover perf: unknown option or missing value: '%s'\n",
                    argv[optind - 1]);
            fprintf(stderr, "run 'railover perf --help' for the options\n");
            return 1;
        }
    }
    int npos = argc - optind;
    if (opts.listen != NULL) {
        if (npos != 0 || client_opts) {
            fprintf(stderr, "railover perf: --listen takes no server address and no client "
                            "options\n");
            return 1;
        }
    } else if (npos != 1) {
        fprintf(stderr, "railover perf: %s\n",
                npos == 0 ? "give the server's ADDR:PORT, or --listen ADDR:PORT"
                          : "more than one server address");
        perf_usage(stderr);
        return 1;
    } else {
        opts.server = argv[optind];
    }

    /* A peer that goes away must not kill us through a write. */
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return opts.listen != NULL ? perf_serve(&opts) : perf_client(&opts);
}
