/*
 * rov_garbage: a listening endpoint must survive garbage from the network.
 *
 * One process, two contexts: context A listens, context B makes two real
 * connections to it, and all four directions carry checksummed traffic for
 * the whole run.  Meanwhile raw TCP sockets connect straight to A's tcp rail
 * (address taken from A's blob with the internal rov_wire_addr_decode) and
 * send, one sub-case per fresh socket: bad magic, a wrong version, a
 * truncated header then EOF, an absurd length, a DATA frame before any HELLO,
 * random bytes, and more.  For each, the library must close the raw socket
 * within a bounded time while the good connections keep delivering correct
 * traffic.  Sub-cases on an *established* raw connection (a valid HELLO
 * first) check that a protocol violation fails only that connection, with
 * ROV_EVENT_CONN_ERROR and ROV_ERR_PROTO (a bond's fragments of two
 * messages mixed among them).  One more on an established raw
 * connection checks the close handshake against a peer that writes after
 * its CLOSE (run_close_answer_case).
 *
 * Exit status: 0 pass, 1 failure, 2 setup error.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "flow.h"
#include "railover/railover.h"
#include "transport/wire.h"

#define NGOOD 2
#define MAX_SIZE (256 * IT_KiB)
#define CASE_TIMEOUT_NS (10ull * 1000000000ull)
#define MIN_TRAFFIC 50 /* messages each good flow must receive during a case */
#define MIN_CASE_NS (100ull * 1000000ull) /* and traffic flows this long around it */
#define PUMP_BATCH 32
#define FLOOD_SOCKETS 64
/* Half-open sockets that never send a HELLO: more than the library keeps
 * waiting at once (context.c: HELLO_PENDING_MAX 512), each tenth a
 * slowloris sending a partial header; all must be gone after its handshake
 * timeout (5 s). */
#define HALF_OPEN 600
#define HALF_OPEN_KEPT_MAX 512
#define HALF_OPEN_GONE_NS (12ull * 1000000000ull)

enum side { SIDE_A, SIDE_B };

/* A good connection: one end of a checked flow. */
struct good {
    struct it_flow flow;
    enum side side;
    bool established, peer_closed, closed;
};

/* The connection the library accepted for a raw socket's HELLO. */
struct rawconn {
    rov_conn_t *conn;
    bool accepted, error, closed;
    rov_status_t error_status;
    const char *error_reason;
    uint64_t msgs;
    uint32_t last_tag;
    size_t last_len;
    bool last_ok;
};

static struct {
    rov_context_t *ctx[2];
    rov_endpoint_t *ep[2];
    struct good a[NGOOD], b[NGOOD];
    int naccepted_good;
    bool expect_raw_accept;
    struct rawconn raw;
    struct sockaddr_storage rail_addr;
    socklen_t rail_addr_len;
    uint8_t a_key[ROV_KEY_LEN];   /* A's address key (from its blob) */
    uint8_t a_ep_id[ROV_EP_ID_LEN];
    /* The last raw connection established: A's id for it, ours, our endpoint
     * (a HELLO naming it once it has ended: run_ended_hello_case()). */
    uint64_t raw_a_id, raw_our_id;
    uint8_t raw_ep_id[ROV_EP_ID_LEN];
    uint64_t rng;
    unsigned failures;
    unsigned cases, cases_failed;
    const char *case_name;
    uint64_t case_t0;
} g;

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void failf(const char *fmt, ...)
{
    va_list ap;

    g.failures++;
    fprintf(stderr, "FAIL [%s]: ", g.case_name ? g.case_name : "setup");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static const char *event_name(rov_event_type_t t)
{
    switch (t) {
    case ROV_EVENT_CONN_ACCEPTED: return "ACCEPTED";
    case ROV_EVENT_CONN_ESTABLISHED: return "ESTABLISHED";
    case ROV_EVENT_CONN_RAIL_SWITCH: return "RAIL_SWITCH";
    case ROV_EVENT_CONN_RAIL_DOWN: return "RAIL_DOWN";
    case ROV_EVENT_CONN_PEER_CLOSED: return "PEER_CLOSED";
    case ROV_EVENT_CONN_CLOSED: return "CLOSED";
    case ROV_EVENT_CONN_ERROR: return "ERROR";
    case ROV_EVENT_CONTEXT_QUIESCED: return "QUIESCED";
    case ROV_EVENT_ENDPOINT_ADDRESS: return "ADDRESS";
    case ROV_EVENT_CONTEXT_RESUMED: return "RESUMED";
    case ROV_EVENT_CONN_BOND: return "BOND";
    }
    return "?";
}

/* ---- callbacks ------------------------------------------------------------ */

static struct good *good_of(rov_conn_t *conn)
{
    for (int i = 0; i < NGOOD; i++) {
        if (g.a[i].flow.conn == conn)
            return &g.a[i];
        if (g.b[i].flow.conn == conn)
            return &g.b[i];
    }
    return NULL;
}

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    struct good *gd = good_of(conn);

    if (gd) {
        it_flow_recv(&gd->flow, tag, data, len);
        return;
    }
    if (g.raw.conn == conn) {
        g.raw.msgs++;
        g.raw.last_tag = tag;
        g.raw.last_len = len;
        g.raw.last_ok = len == 11 && memcmp(data, "raw message", 11) == 0;
        return;
    }
    failf("message (tag %" PRIu32 ", %zu bytes) on an unknown connection", tag, len);
}

static void on_event(void *arg, const rov_event_t *ev)
{
    enum side side = (enum side)(intptr_t)arg;
    struct good *gd;

    if (ev->type == ROV_EVENT_CONN_ACCEPTED) {
        if (side != SIDE_A) {
            failf("ACCEPTED event on the connecting context");
            return;
        }
        if (g.naccepted_good < NGOOD) {
            gd = &g.a[g.naccepted_good++];
            gd->flow.conn = ev->conn;
            gd->established = true;
            return;
        }
        if (g.expect_raw_accept && !g.raw.conn) {
            g.raw.conn = ev->conn;
            g.raw.accepted = true;
            return;
        }
        failf("unexpected connection accepted (raw garbage must not make one); closing it");
        rov_conn_close(ev->conn);
        return;
    }
    gd = good_of(ev->conn);
    if (gd) {
        switch (ev->type) {
        case ROV_EVENT_CONN_ESTABLISHED:
            gd->established = true;
            return;
        case ROV_EVENT_CONN_PEER_CLOSED:
            gd->peer_closed = true;
            return;
        case ROV_EVENT_CONN_CLOSED:
            gd->closed = true;
            gd->flow.conn = NULL;
            return;
        default:
            failf("good connection [%s] got %s: %s (%s)", gd->flow.name, event_name(ev->type),
                  rov_status_str(ev->status), ev->reason ? ev->reason : "");
            return;
        }
    }
    if (g.raw.conn && ev->conn == g.raw.conn) {
        switch (ev->type) {
        case ROV_EVENT_CONN_ERROR:
            g.raw.error = true;
            g.raw.error_status = ev->status;
            g.raw.error_reason = ev->reason;
            return;
        case ROV_EVENT_CONN_CLOSED:
            g.raw.closed = true;
            return;
        default:
            fprintf(stderr, "[%s]: raw peer's connection: %s %s (%s)\n", g.case_name,
                    event_name(ev->type), rov_status_str(ev->status),
                    ev->reason ? ev->reason : "");
            return;
        }
    }
    if (ev->type != ROV_EVENT_CONN_CLOSED) /* CLOSED of one we closed ourselves */
        failf("%s event for an unknown connection", event_name(ev->type));
}

/* ---- driving both contexts ------------------------------------------------ */

static unsigned pump_all(void)
{
    unsigned n = 0;

    for (int i = 0; i < NGOOD; i++) {
        n += it_flow_pump(&g.a[i].flow, PUMP_BATCH);
        n += it_flow_pump(&g.b[i].flow, PUMP_BATCH);
    }
    return n;
}

/* One round: send, progress both contexts, sleep briefly when idle. */
static void spin(int extra_fd)
{
    unsigned sent = pump_all();
    int done = rov_progress(g.ctx[SIDE_A]) + rov_progress(g.ctx[SIDE_B]);

    if (sent == 0 && done == 0) {
        struct pollfd p[3] = {
            {.fd = rov_context_fd(g.ctx[SIDE_A]), .events = POLLIN},
            {.fd = rov_context_fd(g.ctx[SIDE_B]), .events = POLLIN},
            {.fd = extra_fd, .events = POLLIN},
        };

        /* Sleep only if both are armed (else work is there already). */
        bool armed = rov_context_arm(g.ctx[SIDE_A]) == ROV_OK &&
                     rov_context_arm(g.ctx[SIDE_B]) == ROV_OK;

        poll(p, extra_fd >= 0 ? 3 : 2, armed ? 2 : 0);
    }
}

static uint64_t good_errors(void)
{
    uint64_t e = 0;

    for (int i = 0; i < NGOOD; i++)
        e += g.a[i].flow.errors + g.b[i].flow.errors;
    return e;
}

static void traffic_mark(uint64_t mark[2 * NGOOD])
{
    for (int i = 0; i < NGOOD; i++) {
        mark[2 * i] = g.a[i].flow.rx_next;
        mark[2 * i + 1] = g.b[i].flow.rx_next;
    }
}

/* Least number of messages any good flow received since mark. */
static uint64_t traffic_since(const uint64_t mark[2 * NGOOD])
{
    uint64_t least = UINT64_MAX;

    for (int i = 0; i < NGOOD; i++) {
        uint64_t da = g.a[i].flow.rx_next - mark[2 * i];
        uint64_t db = g.b[i].flow.rx_next - mark[2 * i + 1];

        if (da < least)
            least = da;
        if (db < least)
            least = db;
    }
    return least;
}

/* ---- raw sockets ---------------------------------------------------------- */

/* The tcp rail address of side's endpoint into g.rail_addr (where
 * raw_connect() goes); returns the rail's index. */
static int find_rail_addr(enum side side)
{
    uint8_t blob[1024];
    size_t len = sizeof(blob);
    struct rov_wire_addr wa;
    const char *why = "";
    rov_status_t st = rov_endpoint_address(g.ep[side], blob, &len);

    if (st != ROV_OK) {
        failf("rov_endpoint_address: %s", rov_status_str(st));
        return -1;
    }
    if (rov_wire_addr_decode(blob, len, &wa, &why) != ROV_OK) {
        failf("own address blob does not decode: %s", why);
        return -1;
    }
    if (side == SIDE_A) {
        memcpy(g.a_key, wa.key, ROV_KEY_LEN);
        memcpy(g.a_ep_id, wa.ep_id, ROV_EP_ID_LEN);
    }
    for (unsigned i = 0; i < wa.nrails; i++) {
        const uint8_t *p = wa.rails[i].addr;
        size_t al = wa.rails[i].addr_len;

        if (strcmp(wa.rails[i].kind, "tcp") != 0)
            continue;
        /* sockets/tcp.c: u8 family (4 or 6), u16 port (network order),
         * then 4 or 16 address bytes (network order) */
        memset(&g.rail_addr, 0, sizeof(g.rail_addr));
        if (al == 7 && p[0] == 4) {
            struct sockaddr_in *sin = (struct sockaddr_in *)&g.rail_addr;

            sin->sin_family = AF_INET;
            memcpy(&sin->sin_port, p + 1, 2);
            memcpy(&sin->sin_addr, p + 3, 4);
            g.rail_addr_len = sizeof(*sin);
        } else if (al == 19 && p[0] == 6) {
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&g.rail_addr;

            sin6->sin6_family = AF_INET6;
            memcpy(&sin6->sin6_port, p + 1, 2);
            memcpy(&sin6->sin6_addr, p + 3, 16);
            g.rail_addr_len = sizeof(*sin6);
        } else {
            failf("tcp rail address of %zu bytes, family byte %u: not the format of "
                  "sockets/tcp.c", al, al ? p[0] : 0);
            return -1;
        }
        char ip[INET6_ADDRSTRLEN] = "";
        uint16_t port = ntohs(((struct sockaddr_in *)&g.rail_addr)->sin_port);

        inet_ntop(g.rail_addr.ss_family,
                  g.rail_addr.ss_family == AF_INET
                      ? (const void *)&((struct sockaddr_in *)&g.rail_addr)->sin_addr
                      : (const void *)&((struct sockaddr_in6 *)&g.rail_addr)->sin6_addr,
                  ip, sizeof(ip));
        fprintf(stderr, "garbage: endpoint %c's tcp rail (index %u) listens on %s port %u\n",
                side == SIDE_A ? 'A' : 'B', wa.rails[i].index, ip, port);
        return (int)wa.rails[i].index;
    }
    failf("endpoint A has no tcp rail in its address");
    return -1;
}

static int raw_connect(void)
{
    int fd = socket(g.rail_addr.ss_family, SOCK_STREAM, 0);

    if (fd < 0) {
        failf("socket: %s", strerror(errno));
        return -1;
    }
    /* Blocking connect: the listen backlog accepts it without progress. */
    if (connect(fd, (struct sockaddr *)&g.rail_addr, g.rail_addr_len) < 0) {
        failf("connect to the tcp rail: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static bool raw_send(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0 && errno == EAGAIN) {
            spin(-1); /* the library reads it; keep it progressing */
            continue;
        }
        if (n < 0) {
            /* the library may already have closed the socket: fine */
            if (errno == EPIPE || errno == ECONNRESET)
                return false;
            failf("send on the raw socket: %s", strerror(errno));
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return true;
}

enum raw_state { RAW_OPEN, RAW_EOF, RAW_RESET };

/* Read and discard what the library sent; report whether it closed. */
static enum raw_state raw_poll(int fd, uint8_t *keep, size_t keep_cap, size_t *keep_len)
{
    for (;;) {
        uint8_t buf[4096];
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

        if (n == 0)
            return RAW_EOF;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return RAW_OPEN;
            if (errno == ECONNRESET)
                return RAW_RESET;
            failf("recv on the raw socket: %s", strerror(errno));
            return RAW_RESET;
        }
        if (keep && *keep_len < keep_cap) {
            size_t take = (size_t)n < keep_cap - *keep_len ? (size_t)n : keep_cap - *keep_len;

            memcpy(keep + *keep_len, buf, take);
            *keep_len += take;
        }
    }
}

/* Progress until the library closes fd (or the deadline).  True if closed. */
static bool wait_raw_closed(int fd, const char *what)
{
    uint64_t t0 = it_now_ns();

    for (;;) {
        enum raw_state rs = raw_poll(fd, NULL, 0, NULL);

        if (rs != RAW_OPEN) {
            fprintf(stderr, "[%s]: %s: library closed the raw socket after %.1f ms (%s)\n",
                    g.case_name, what, (double)(it_now_ns() - t0) / 1e6,
                    rs == RAW_EOF ? "EOF" : "reset");
            return true;
        }
        if (it_now_ns() - t0 > CASE_TIMEOUT_NS) {
            failf("%s: the library did not close the raw socket within %.0f s", what,
                  (double)CASE_TIMEOUT_NS / 1e9);
            return false;
        }
        spin(fd);
    }
}

static void header(uint8_t *buf, uint8_t type, uint32_t len, uint64_t seq, uint64_t ack,
                   uint32_t tag)
{
    struct rov_wire_hdr h = {
        .version = ROV_WIRE_VERSION, .type = type, .len = len, .seq = seq, .ack = ack, .tag = tag,
    };

    rov_wire_encode(buf, &h);
}

static void random_bytes(uint8_t *buf, size_t len)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)it_rand(&g.rng);
}

/* The library's first frame on a socket it accepted: its CHALLENGE, whose
 * nonce a HELLO must answer (wire.h).  Zeros (and a failure) if it does not
 * come. */
static void raw_challenge(int fd, uint8_t challenge[ROV_NONCE_LEN])
{
    uint8_t in[ROV_WIRE_HDR_LEN + ROV_NONCE_LEN];
    size_t len = 0;
    struct rov_wire_hdr h;
    const char *why = "";
    uint64_t t0 = it_now_ns();

    memset(challenge, 0, ROV_NONCE_LEN);
    while (len < sizeof(in)) {
        if (raw_poll(fd, in, sizeof(in), &len) != RAW_OPEN) {
            failf("the library closed a raw socket before its challenge");
            return;
        }
        if (it_now_ns() - t0 > CASE_TIMEOUT_NS) {
            failf("no challenge within %.0f s of a connect", (double)CASE_TIMEOUT_NS / 1e9);
            return;
        }
        if (len < sizeof(in))
            spin(fd);
    }
    if (rov_wire_decode(in, len, ROV_WIRE_HELLO_MAX, &h, &why) != ROV_OK ||
        h.type != ROV_FT_CHALLENGE || h.len != ROV_NONCE_LEN) {
        failf("the first frame on an accepted socket is not a challenge (%s, type %u)", why,
              in[3]);
        return;
    }
    memcpy(challenge, in + ROV_WIRE_HDR_LEN, ROV_NONCE_LEN);
}

/* A HELLO frame into b (header and payload, MAC under key over the
 * challenge the library sent on fd); returns its length. */
static size_t hello_frame(int fd, uint8_t *b, const struct rov_wire_hello *h, uint32_t tag,
                          const uint8_t *key)
{
    size_t hl = rov_wire_hello_encode(b + ROV_WIRE_HDR_LEN, h);
    uint8_t challenge[ROV_NONCE_LEN];

    raw_challenge(fd, challenge);
    header(b, ROV_FT_HELLO, (uint32_t)hl, 0, 0, tag);
    rov_auth_hello_mac(key, challenge, b, b + ROV_WIRE_HDR_LEN, hl, b + ROV_WIRE_HDR_LEN + hl -
                       ROV_MAC_LEN);
    return ROV_WIRE_HDR_LEN + hl;
}

/* ---- sub-cases on a fresh, unauthenticated socket -------------------------- */

static void send_bad_magic(int fd)
{
    uint8_t b[ROV_WIRE_HDR_LEN];

    header(b, ROV_FT_DATA, 0, 1, 0, 0);
    b[0] ^= 0xff;
    raw_send(fd, b, sizeof(b));
}

static void send_wrong_version(int fd)
{
    uint8_t b[ROV_WIRE_HDR_LEN];

    header(b, ROV_FT_HELLO, 0, 0, 0, 0);
    b[2] = ROV_WIRE_VERSION + 1;
    raw_send(fd, b, sizeof(b));
}

static void send_truncated_then_eof(int fd)
{
    uint8_t b[ROV_WIRE_HDR_LEN];

    header(b, ROV_FT_HELLO, ROV_WIRE_HELLO_FIXED, 0, 0, 0);
    raw_send(fd, b, 10);
    shutdown(fd, SHUT_WR); /* our EOF; the library must close its end */
}

static void send_absurd_length(int fd)
{
    uint8_t b[ROV_WIRE_HDR_LEN];

    header(b, ROV_FT_DATA, 0, 1, 0, 7);
    rov_put32(b + 4, 0xffffffffu);
    raw_send(fd, b, sizeof(b));
}

static void send_data_before_hello(int fd)
{
    uint8_t b[ROV_WIRE_HDR_LEN + 16];

    header(b, ROV_FT_DATA, 16, 1, 0, 42);
    memset(b + ROV_WIRE_HDR_LEN, 'x', 16);
    raw_send(fd, b, sizeof(b));
}

static void send_random(int fd)
{
    uint8_t b[4096];

    random_bytes(b, sizeof(b));
    if (rov_get16(b) == ROV_WIRE_MAGIC)
        b[0] ^= 0xff;
    raw_send(fd, b, sizeof(b));
}

static void send_random_after_magic(int fd)
{
    uint8_t b[4096];

    random_bytes(b, sizeof(b));
    rov_put16(b, ROV_WIRE_MAGIC);
    b[2] = ROV_WIRE_VERSION;
    b[3] = ROV_FT_DATA;
    b[28] |= 1; /* reserved field non-zero, whatever else is random */
    raw_send(fd, b, sizeof(b));
}

static void send_truncated_hello(int fd)
{
    uint8_t b[ROV_WIRE_HDR_LEN + 8];

    header(b, ROV_FT_HELLO, 8, 0, 0, 0);
    memset(b + ROV_WIRE_HDR_LEN, 0x11, 8);
    raw_send(fd, b, sizeof(b));
}

static void send_hello_without_address(int fd)
{
    uint8_t b[ROV_WIRE_HDR_LEN + ROV_WIRE_HELLO_FIXED];
    struct rov_wire_hello h = {.conn_id = 77, .peer_conn_id = 0, .rail = 0, .max_msg = 1 << 20};

    random_bytes(h.ep_id, sizeof(h.ep_id));
    raw_send(fd, b, hello_frame(fd, b, &h, 0, g.a_key));
}

static void send_hello_unknown_conn(int fd)
{
    uint8_t b[ROV_WIRE_HDR_LEN + ROV_WIRE_HELLO_FIXED];
    struct rov_wire_hello h = {.conn_id = 78, .peer_conn_id = 0x7fffffffffffull, .rail = 0, .max_msg = 1 << 20};

    random_bytes(h.ep_id, sizeof(h.ep_id));
    raw_send(fd, b, hello_frame(fd, b, &h, 0, g.a_key));
}

/* A HELLO naming connection 1 of the listener (its first accepted, one of
 * the good flows' here) from a stranger: it must not take the channel of a
 * live connection of another peer. */
static void send_hello_live_conn_other_peer(int fd)
{
    uint8_t b[ROV_WIRE_HDR_LEN + ROV_WIRE_HELLO_FIXED];
    struct rov_wire_hello h = {.conn_id = 79, .peer_conn_id = 1, .rail = 0, .max_msg = 1 << 20};

    random_bytes(h.ep_id, sizeof(h.ep_id));
    raw_send(fd, b, hello_frame(fd, b, &h, ROV_HF_SWITCH, g.a_key));
}

/* A first HELLO, well formed, with a valid address, under a key that is not
 * A's: a stranger who knows where A listens but was not given its blob. */
static void send_hello_wrong_key(int fd)
{
    uint8_t b[ROV_WIRE_HDR_LEN + ROV_WIRE_HELLO_FIXED + 256], blob[256], key[ROV_KEY_LEN];
    uint8_t fake_addr[7] = {4, 0, 9, 127, 0, 0, 1};
    struct rov_wire_addr wa = {0};
    struct rov_wire_hello h = {.conn_id = 80, .peer_conn_id = 0, .rail = 0, .max_msg = 1 << 20};

    random_bytes(wa.ep_id, sizeof(wa.ep_id));
    wa.nrails = 1;
    strcpy(wa.rails[0].kind, "tcp");
    wa.rails[0].addr = fake_addr;
    wa.rails[0].addr_len = sizeof(fake_addr);
    memcpy(h.ep_id, wa.ep_id, sizeof(h.ep_id));
    h.addr = blob;
    h.addr_len = rov_wire_addr_encode(blob, sizeof(blob), &wa);
    random_bytes(key, sizeof(key));
    raw_send(fd, b, hello_frame(fd, b, &h, 0, key));
}

struct raw_case {
    const char *name;
    void (*send)(int fd);
};

static const struct raw_case raw_cases[] = {
    {"bad_magic", send_bad_magic},
    {"wrong_version", send_wrong_version},
    {"truncated_header_then_eof", send_truncated_then_eof},
    {"absurd_length", send_absurd_length},
    {"data_before_hello", send_data_before_hello},
    {"random_bytes", send_random},
    {"random_after_magic", send_random_after_magic},
    {"truncated_hello", send_truncated_hello},
    {"hello_without_address", send_hello_without_address},
    {"hello_for_unknown_connection", send_hello_unknown_conn},
    {"hello_for_live_connection_of_another_peer", send_hello_live_conn_other_peer},
    {"hello_with_wrong_key", send_hello_wrong_key},
};

/* Let traffic flow until every good flow has made progress since mark. */
static bool wait_traffic(const uint64_t mark[2 * NGOOD])
{
    uint64_t t0 = it_now_ns();

    while (traffic_since(mark) < MIN_TRAFFIC || it_now_ns() - g.case_t0 < MIN_CASE_NS) {
        if (it_now_ns() - t0 > CASE_TIMEOUT_NS) {
            failf("good connections stalled: a flow received only %" PRIu64 " messages in "
                  "%.0f s", traffic_since(mark), (double)CASE_TIMEOUT_NS / 1e9);
            for (int i = 0; i < NGOOD; i++) {
                it_flow_dump(&g.a[i].flow);
                it_flow_dump(&g.b[i].flow);
            }
            return false;
        }
        spin(-1);
    }
    return true;
}

static void case_begin(const char *name, uint64_t mark[2 * NGOOD], unsigned *failures0)
{
    g.case_name = name;
    g.case_t0 = it_now_ns();
    g.cases++;
    *failures0 = g.failures + (unsigned)good_errors();
    traffic_mark(mark);
}

static void case_end(const uint64_t mark[2 * NGOOD], unsigned failures0)
{
    bool ok = wait_traffic(mark);

    if (g.failures + (unsigned)good_errors() != failures0)
        ok = false;
    if (!ok)
        g.cases_failed++;
    fprintf(stderr, "[%s]: %s (good flows received at least %" PRIu64 " messages each "
            "meanwhile)\n", g.case_name, ok ? "PASS" : "FAIL", traffic_since(mark));
    g.case_name = NULL;
}

static void run_raw_case(const struct raw_case *c)
{
    uint64_t mark[2 * NGOOD];
    unsigned f0;
    int fd;

    case_begin(c->name, mark, &f0);
    fd = raw_connect();
    if (fd >= 0) {
        c->send(fd);
        wait_raw_closed(fd, c->name);
        close(fd);
    }
    case_end(mark, f0);
}

/* Many sockets at once, each with its own garbage. */
static void run_flood_case(void)
{
    uint64_t mark[2 * NGOOD];
    int fds[FLOOD_SOCKETS];
    unsigned f0, open_left;
    uint64_t t0;

    case_begin("flood_of_garbage_sockets", mark, &f0);
    for (int i = 0; i < FLOOD_SOCKETS; i++) {
        fds[i] = raw_connect();
        if (fds[i] >= 0)
            raw_cases[(unsigned)i % (sizeof(raw_cases) / sizeof(raw_cases[0]))].send(fds[i]);
    }
    t0 = it_now_ns();
    do {
        open_left = 0;
        for (int i = 0; i < FLOOD_SOCKETS; i++) {
            if (fds[i] < 0)
                continue;
            if (raw_poll(fds[i], NULL, 0, NULL) != RAW_OPEN) {
                close(fds[i]);
                fds[i] = -1;
            } else {
                open_left++;
            }
        }
        if (open_left && it_now_ns() - t0 > CASE_TIMEOUT_NS) {
            failf("%u of %d garbage sockets still open after %.0f s", open_left, FLOOD_SOCKETS,
                  (double)CASE_TIMEOUT_NS / 1e9);
            break;
        }
        spin(-1);
    } while (open_left);
    for (int i = 0; i < FLOOD_SOCKETS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (!open_left)
        fprintf(stderr, "[%s]: all %d sockets closed by the library after %.1f ms\n",
                g.case_name, FLOOD_SOCKETS, (double)(it_now_ns() - t0) / 1e6);
    case_end(mark, f0);
}

/* Connections closed by us: idle ones, and ones closed after part of a
 * header.  Nothing to observe but that nothing breaks. */
static void run_connect_close_case(void)
{
    uint64_t mark[2 * NGOOD];
    uint8_t b[ROV_WIRE_HDR_LEN];
    unsigned f0;

    header(b, ROV_FT_HELLO, ROV_WIRE_HELLO_FIXED, 0, 0, 0);
    case_begin("connect_then_close", mark, &f0);
    for (int i = 0; i < 16; i++) {
        int fd = raw_connect();

        if (fd < 0)
            continue;
        if (i % 2)
            raw_send(fd, b, 10);
        close(fd);
    }
    case_end(mark, f0);
}

/* ---- sub-cases on an established raw connection ---------------------------- */

/* Handshake as a new peer: HELLO with a made-up endpoint, check HELLO_ACK
 * and the ACCEPTED event, deliver one DATA frame.  Returns the socket. */
static int raw_establish(int rail_index)
{
    uint8_t ep_id[ROV_EP_ID_LEN], blob[256], fake_addr[7] = {4, 0, 9, 127, 0, 0, 1};
    uint8_t frame[ROV_WIRE_HDR_LEN + ROV_WIRE_HELLO_FIXED + sizeof(blob)];
    uint8_t in[4096];
    size_t in_len = 0, blob_len, hl;
    struct rov_wire_addr wa = {0};
    struct rov_wire_hello h = {0}, ack;
    struct rov_wire_hdr ih;
    const char *why = "";
    uint64_t t0;
    int fd;

    random_bytes(ep_id, sizeof(ep_id));
    memcpy(wa.ep_id, ep_id, sizeof(ep_id));
    wa.nrails = 1;
    wa.rails[0].index = (unsigned)rail_index;
    strcpy(wa.rails[0].kind, "tcp");
    wa.rails[0].addr = fake_addr; /* never used: the library does not connect back */
    wa.rails[0].addr_len = sizeof(fake_addr);
    blob_len = rov_wire_addr_encode(blob, sizeof(blob), &wa);

    memcpy(h.ep_id, ep_id, sizeof(ep_id));
    h.conn_id = 0x5eed0000u + (it_rand(&g.rng) & 0xffff);
    h.peer_conn_id = 0;
    h.rail = (uint16_t)rail_index;
    h.addr = blob;
    h.addr_len = blob_len;
    h.max_msg = 1 << 20;
    memset(&g.raw, 0, sizeof(g.raw));
    g.expect_raw_accept = true;
    fd = raw_connect();
    if (fd < 0)
        return -1;
    hl = hello_frame(fd, frame, &h, 0, g.a_key) - ROV_WIRE_HDR_LEN;
    raw_send(fd, frame, ROV_WIRE_HDR_LEN + hl);

    /* HELLO_ACK back, ACCEPTED here */
    t0 = it_now_ns();
    while (!(g.raw.accepted && in_len >= ROV_WIRE_HDR_LEN)) {
        if (raw_poll(fd, in, sizeof(in), &in_len) != RAW_OPEN) {
            failf("library closed a raw socket that sent a valid HELLO");
            close(fd);
            return -1;
        }
        if (it_now_ns() - t0 > CASE_TIMEOUT_NS) {
            failf("no %s within %.0f s of a valid HELLO",
                  g.raw.accepted ? "HELLO_ACK frame" : "ACCEPTED event",
                  (double)CASE_TIMEOUT_NS / 1e9);
            close(fd);
            return -1;
        }
        spin(fd);
    }
    if (rov_wire_decode(in, in_len, 1u << 20, &ih, &why) != ROV_OK ||
        ih.type != ROV_FT_HELLO_ACK) {
        failf("first frame back is not a valid HELLO_ACK (%s, type %u)", why, in[3]);
    } else if (in_len >= ROV_WIRE_HDR_LEN + ih.len &&
               (rov_wire_hello_decode(in + ROV_WIRE_HDR_LEN, ih.len, &ack, &why) != ROV_OK ||
                ack.peer_conn_id != h.conn_id)) {
        failf("HELLO_ACK payload wrong (%s, peer_conn_id %" PRIu64 ", want %" PRIu64 ")", why,
              ack.peer_conn_id, h.conn_id);
    } else if (in_len >= ROV_WIRE_HDR_LEN + ih.len) {
        g.raw_a_id = ack.conn_id;
        g.raw_our_id = h.conn_id;
        memcpy(g.raw_ep_id, ep_id, sizeof(ep_id));
    }

    /* One message through the established raw connection. */
    uint8_t data[ROV_WIRE_HDR_LEN + 11];

    header(data, ROV_FT_DATA, 11, 1, 0, 0xc0ffee);
    memcpy(data + ROV_WIRE_HDR_LEN, "raw message", 11);
    raw_send(fd, data, sizeof(data));
    t0 = it_now_ns();
    while (g.raw.msgs == 0 && !g.raw.error) {
        if (raw_poll(fd, NULL, 0, NULL) != RAW_OPEN) {
            failf("library closed the established raw connection after a valid DATA frame");
            close(fd);
            return -1;
        }
        if (it_now_ns() - t0 > CASE_TIMEOUT_NS) {
            failf("DATA frame on the established raw connection not delivered");
            break;
        }
        spin(fd);
    }
    if (g.raw.msgs != 1 || g.raw.last_tag != 0xc0ffee || !g.raw.last_ok)
        failf("raw connection delivered %" PRIu64 " messages, last tag %#" PRIx32 " %zu bytes "
              "(%s), want one: tag 0xc0ffee \"raw message\"", g.raw.msgs, g.raw.last_tag,
              g.raw.last_len, g.raw.last_ok ? "content ok" : "content wrong");
    return fd;
}

/* After establishing: send garbage, expect ERROR(PROTO) on that connection
 * only, and the raw socket closed. */
static void run_established_case(const char *name, int rail_index, const void *bad,
                                 size_t bad_len)
{
    uint64_t mark[2 * NGOOD], t0;
    unsigned f0;
    int fd;

    case_begin(name, mark, &f0);
    fd = raw_establish(rail_index);
    if (fd >= 0) {
        raw_send(fd, bad, bad_len);
        t0 = it_now_ns();
        while (!g.raw.error && !g.raw.closed && it_now_ns() - t0 < CASE_TIMEOUT_NS)
            spin(fd);
        if (!g.raw.error)
            failf("no ROV_EVENT_CONN_ERROR on the connection within %.0f s%s",
                  (double)CASE_TIMEOUT_NS / 1e9, g.raw.closed ? " (it was CLOSED instead)" : "");
        else if (g.raw.error_status != ROV_ERR_PROTO)
            failf("ROV_EVENT_CONN_ERROR with status %s (%s), want %s",
                  rov_status_str(g.raw.error_status), g.raw.error_reason ? g.raw.error_reason : "",
                  rov_status_str(ROV_ERR_PROTO));
        else
            fprintf(stderr, "[%s]: ROV_EVENT_CONN_ERROR %s: %s\n", name,
                    rov_status_str(g.raw.error_status),
                    g.raw.error_reason ? g.raw.error_reason : "");
        wait_raw_closed(fd, name);
        close(fd);
    }
    if (g.raw.conn && !g.raw.closed) {
        rov_status_t st = rov_conn_close(g.raw.conn);

        if (g.raw.error && st != ROV_OK)
            failf("rov_conn_close of a failed connection returned %s, want ok (freed at once)",
                  rov_status_str(st));
    }
    g.raw.conn = NULL;
    g.expect_raw_accept = false;
    case_end(mark, f0);
}

/* A HELLO naming a connection that has ended at A (the last established
 * raw one, failed and freed), from someone who does not hold its secret:
 * closed unanswered, as a HELLO for an id never used is, so a stranger
 * cannot probe which connection ids existed (before, it was answered with
 * CLOSE|ABORT before any authentication). */
static void run_ended_hello_case(int rail_index)
{
    uint8_t b[ROV_WIRE_HDR_LEN + ROV_WIRE_HELLO_FIXED], key[ROV_KEY_LEN], in[4096];
    struct rov_wire_hello h = {.conn_id = g.raw_our_id, .peer_conn_id = g.raw_a_id,
                               .rail = (uint16_t)rail_index, .max_msg = 1 << 20, .ctr = 1};
    uint64_t mark[2 * NGOOD], t0;
    size_t in_len = 0, off = 0;
    enum raw_state rs = RAW_OPEN;
    unsigned f0;
    int fd;

    case_begin("hello_for_ended_connection_without_its_secret", mark, &f0);
    if (!g.raw_a_id) {
        failf("no raw connection was established before: nothing ended to name");
    } else if ((fd = raw_connect()) >= 0) {
        memcpy(h.ep_id, g.raw_ep_id, ROV_EP_ID_LEN);
        random_bytes(key, sizeof(key));
        raw_send(fd, b, hello_frame(fd, b, &h, 0, key));
        t0 = it_now_ns();
        while ((rs = raw_poll(fd, in, sizeof(in), &in_len)) == RAW_OPEN &&
               it_now_ns() - t0 < CASE_TIMEOUT_NS)
            spin(fd);
        if (rs == RAW_OPEN)
            failf("the library did not close the socket within %.0f s",
                  (double)CASE_TIMEOUT_NS / 1e9);
        while (in_len - off >= ROV_WIRE_HDR_LEN) {
            struct rov_wire_hdr fh;
            const char *why = "";

            if (rov_wire_decode(in + off, in_len - off, 1u << 20, &fh, &why) != ROV_OK)
                break;
            if (fh.type == ROV_FT_CLOSE)
                failf("a HELLO without the connection's secret, naming connection %" PRIu64
                      " (ended), was answered with CLOSE (flags 0x%x): its end is told to "
                      "anyone", g.raw_a_id, fh.tag);
            off += ROV_WIRE_HDR_LEN + fh.len;
        }
        close(fd);
    }
    case_end(mark, f0);
}

/* Read the library's frames on fd into *in (from *in_len on) and scan them
 * from *off: true once a CLOSE whose flags are want_flags was seen. */
static bool raw_scan_close(int fd, uint8_t *in, size_t cap, size_t *in_len, size_t *off,
                           uint32_t want_flags, enum raw_state *rs)
{
    *rs = raw_poll(fd, in, cap, in_len);
    while (*in_len - *off >= ROV_WIRE_HDR_LEN) {
        struct rov_wire_hdr h;
        const char *why = "";
        size_t flen = rov_wire_frame_len(in + *off);

        if (*in_len - *off < flen)
            break;
        if (rov_wire_decode(in + *off, flen, 1u << 20, &h, &why) != ROV_OK) {
            failf("the library sent a frame it cannot decode itself: %s", why);
            *off = *in_len;
            return false;
        }
        *off += flen;
        if (h.type == ROV_FT_CLOSE && h.tag == want_flags)
            return true;
    }
    return false;
}

/* The close handshake with a peer that writes after its CLOSE.  The library
 * closes first; the raw peer sends its CLOSE without having read the
 * library's, so the library answers (CLOSE | ROV_CLOSE_ACKED).  On TCP the
 * answering side must not close its socket before the peer closes its end:
 * a socket closed with unread input (here the peer's late ACK) is reset,
 * and a reset peer that writes first drops what it had not read yet, the
 * answer and the CLOSE before it.  So the library's stream must end after
 * the answer while the connection stays open, and it finishes, CLOSED and
 * not failed, when the peer closes. */
static void run_close_answer_case(int rail_index)
{
    uint8_t in[64 * 1024], close_frame[ROV_WIRE_HDR_LEN], ack[ROV_WIRE_HDR_LEN];
    size_t in_len = 0, off = 0;
    uint64_t mark[2 * NGOOD], t0;
    enum raw_state rs = RAW_OPEN;
    bool got = false;
    rov_status_t st;
    unsigned f0;
    int fd;

    case_begin("close_answer_waits_for_peer", mark, &f0);
    fd = raw_establish(rail_index);
    if (fd < 0)
        goto out;
    st = rov_conn_close(g.raw.conn);
    if (st != ROV_INPROGRESS) {
        failf("rov_conn_close: %s, want %s", rov_status_str(st), rov_status_str(ROV_INPROGRESS));
        close(fd);
        goto out;
    }
    /* The library's CLOSE (it sent nothing, so nothing waits for an ack). */
    for (t0 = it_now_ns(); !got && rs == RAW_OPEN && it_now_ns() - t0 < CASE_TIMEOUT_NS;) {
        spin(fd);
        got = raw_scan_close(fd, in, sizeof(in), &in_len, &off, 0, &rs);
    }
    if (!got) {
        failf("no CLOSE from the library after rov_conn_close (%s)",
              rs == RAW_OPEN ? "timeout" : "socket closed");
        close(fd);
        goto out;
    }
    /* Ours, as if it crossed theirs: the library must answer it. */
    header(close_frame, ROV_FT_CLOSE, 0, 0, 0, 0);
    raw_send(fd, close_frame, sizeof(close_frame));
    for (got = false, t0 = it_now_ns(); it_now_ns() - t0 < CASE_TIMEOUT_NS;) {
        spin(fd);
        got = got || raw_scan_close(fd, in, sizeof(in), &in_len, &off, ROV_CLOSE_ACKED, &rs);
        if (rs != RAW_OPEN)
            break;
    }
    if (!got || rs != RAW_EOF) {
        failf("after our CLOSE: %s, %s; want the answer, then the end of the library's stream",
              got ? "answered" : "no answer",
              rs == RAW_EOF ? "EOF" : rs == RAW_RESET ? "reset" : "still open");
        close(fd);
        goto out;
    }
    /* The library's socket is still open: were it closed, this ACK (a late
     * one, such as a peer still sends after its CLOSE) would reset ours. */
    if (g.raw.closed || g.raw.error)
        failf("the library finished the connection before the peer closed its end: its "
              "socket, closed with unread input, is reset");
    header(ack, ROV_FT_ACK, 0, 0, 0, 0);
    raw_send(fd, ack, sizeof(ack));
    for (int i = 0; i < 50; i++)
        spin(fd);
    if (!raw_send(fd, ack, sizeof(ack))) /* a reset answers the first on a closed socket */
        failf("our writes after the library's answer were reset");
    close(fd);
    for (t0 = it_now_ns(); !g.raw.closed && !g.raw.error && it_now_ns() - t0 < CASE_TIMEOUT_NS;)
        spin(-1);
    if (!g.raw.closed)
        failf("no ROV_EVENT_CONN_CLOSED after the peer closed its end (%s)",
              g.raw.error ? "CONN_ERROR instead" : "timeout");
    else
        fprintf(stderr, "[%s]: answered, stream ended, CLOSED once the peer closed\n",
                g.case_name);
out:
    if (g.raw.conn && !g.raw.closed)
        rov_conn_close(g.raw.conn); /* frees a failed one */
    g.raw.conn = NULL;
    g.expect_raw_accept = false;
    case_end(mark, f0);
}

/* ---- setup and teardown --------------------------------------------------- */

static int setup(void)
{
    uint8_t blob[1024];
    size_t len = sizeof(blob);
    uint64_t s_ab = it_mix64(0xab), s_ba = it_mix64(0xba), t0;
    rov_status_t st;

    for (int s = 0; s < 2; s++) {
        rov_context_params_t p = {
            .recv_cb = on_recv, .event_cb = on_event, .arg = (void *)(intptr_t)s,
        };

        st = rov_context_create(&p, &g.ctx[s]);
        if (st != ROV_OK) {
            failf("rov_context_create: %s (RAILOVER_RAILS=%s)", rov_status_str(st),
                  getenv("RAILOVER_RAILS") ? getenv("RAILOVER_RAILS") : "");
            return -1;
        }
        st = rov_endpoint_create(g.ctx[s], &g.ep[s]);
        if (st != ROV_OK) {
            failf("rov_endpoint_create: %s", rov_status_str(st));
            return -1;
        }
    }
    for (int i = 0; i < NGOOD; i++) {
        char name[16];

        snprintf(name, sizeof(name), "A%d", i + 1);
        g.a[i].side = SIDE_A;
        if (it_flow_init(&g.a[i].flow, name, s_ab, s_ba, IT_UNLIMITED, IT_UNLIMITED, MAX_SIZE))
            return -1;
        snprintf(name, sizeof(name), "B%d", i + 1);
        g.b[i].side = SIDE_B;
        if (it_flow_init(&g.b[i].flow, name, s_ba, s_ab, IT_UNLIMITED, IT_UNLIMITED, MAX_SIZE))
            return -1;
    }
    st = rov_endpoint_address(g.ep[SIDE_A], blob, &len);
    if (st != ROV_OK) {
        failf("rov_endpoint_address: %s", rov_status_str(st));
        return -1;
    }
    /* Connect one at a time, so B[i] pairs with A[i]. */
    for (int i = 0; i < NGOOD; i++) {
        rov_conn_t *c;

        st = rov_conn_connect(g.ep[SIDE_B], blob, len, &c);
        if (st != ROV_OK && st != ROV_INPROGRESS) {
            failf("rov_conn_connect: %s", rov_status_str(st));
            return -1;
        }
        g.b[i].flow.conn = c;
        t0 = it_now_ns();
        while (g.naccepted_good <= i || !g.b[i].established) {
            if (it_now_ns() - t0 > CASE_TIMEOUT_NS) {
                failf("good connection %d not established within %.0f s", i + 1,
                      (double)CASE_TIMEOUT_NS / 1e9);
                return -1;
            }
            spin(-1);
        }
    }
    return 0;
}

static int finish(void)
{
    uint64_t t0 = it_now_ns();
    bool all;

    g.case_name = "shutdown";
    /* Stop sending; each receiver now knows how many messages to expect. */
    for (int i = 0; i < NGOOD; i++) {
        g.a[i].flow.tx_count = g.a[i].flow.tx_next;
        g.b[i].flow.tx_count = g.b[i].flow.tx_next;
        g.a[i].flow.rx_count = g.b[i].flow.tx_count;
        g.b[i].flow.rx_count = g.a[i].flow.tx_count;
    }
    do {
        all = true;
        for (int i = 0; i < NGOOD; i++)
            all = all && it_flow_tx_done(&g.a[i].flow) && it_flow_rx_done(&g.a[i].flow) &&
                  it_flow_tx_done(&g.b[i].flow) && it_flow_rx_done(&g.b[i].flow);
        if (!all && it_now_ns() - t0 > CASE_TIMEOUT_NS) {
            failf("good flows did not drain within %.0f s", (double)CASE_TIMEOUT_NS / 1e9);
            for (int i = 0; i < NGOOD; i++) {
                it_flow_dump(&g.a[i].flow);
                it_flow_dump(&g.b[i].flow);
            }
            return -1;
        }
        spin(-1);
    } while (!all);

    for (int i = 0; i < NGOOD; i++) {
        char b1[32], b2[32];

        fprintf(stderr, "garbage: pair %d: A->B %" PRIu64 " msgs (%s), B->A %" PRIu64
                " msgs (%s), all verified\n", i + 1, g.a[i].flow.tx_next,
                it_bytes_str(g.a[i].flow.tx_bytes, b1, sizeof(b1)), g.b[i].flow.tx_next,
                it_bytes_str(g.b[i].flow.tx_bytes, b2, sizeof(b2)));
    }

    /* Both ends close at once. */
    for (int i = 0; i < NGOOD; i++) {
        rov_conn_t *c[2] = {g.a[i].flow.conn, g.b[i].flow.conn};

        for (int j = 0; j < 2; j++) {
            rov_status_t st = rov_conn_close(c[j]);

            if (st != ROV_INPROGRESS)
                failf("rov_conn_close of good connection %d: %s, want %s", i + 1,
                      rov_status_str(st), rov_status_str(ROV_INPROGRESS));
        }
    }
    t0 = it_now_ns();
    do {
        all = true;
        for (int i = 0; i < NGOOD; i++)
            all = all && g.a[i].closed && g.b[i].closed;
        if (!all && it_now_ns() - t0 > CASE_TIMEOUT_NS) {
            failf("good connections not CLOSED within %.0f s of rov_conn_close",
                  (double)CASE_TIMEOUT_NS / 1e9);
            return -1;
        }
        spin(-1);
    } while (!all);
    g.case_name = NULL;
    return 0;
}

/* Descriptors this process holds (both ends of every raw socket and the
 * library's own). */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static unsigned count_open(const int *fds, int n)
{
    unsigned open_now = 0;

    for (int i = 0; i < n; i++) {
        if (fds[i] < 0)
            continue;
        if (raw_poll(fds[i], NULL, 0, NULL) == RAW_OPEN) {
            open_now++;
        } else {
            close(fds[i]);
            ((int *)fds)[i] = -1;
        }
    }
    return open_now;
}

/* Issue 19, part 3: half-open connections and slowloris senders were kept
 * for ever.  Now at most HALF_OPEN_KEPT_MAX wait at once (further ones wait
 * in the listen queue until the oldest has waited 1 s and is closed), a
 * legitimate connection still gets in meanwhile, and every one is closed
 * once the handshake timeout has passed. */
static void run_half_open_case(int rail_index)
{
    static int fds[HALF_OPEN];
    struct rlimit rl;
    uint64_t mark[2 * NGOOD], t0;
    uint8_t partial[ROV_WIRE_HDR_LEN];
    unsigned f0, open_now = 0;
    int fds0 = count_fds(), fds1, held;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4 * HALF_OPEN) {
        rl.rlim_cur = rl.rlim_max < 4 * HALF_OPEN ? rl.rlim_max : 4 * HALF_OPEN;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    header(partial, ROV_FT_HELLO, ROV_WIRE_HELLO_FIXED, 0, 0, 0);
    case_begin("half_open_flood", mark, &f0);
    for (int i = 0; i < HALF_OPEN; i++) {
        fds[i] = raw_connect();
        if (fds[i] >= 0 && i % 10 == 0)
            raw_send(fds[i], partial, 10);
        if (i % 32 == 0)
            spin(-1);
    }
    t0 = it_now_ns();
    while (it_now_ns() - t0 < 300ull * 1000000ull)
        spin(-1);
    open_now = count_open(fds, HALF_OPEN);
    /* What the library holds: every descriptor beyond the baseline that is
     * not one of our client sockets.  The rest of those still open wait
     * in the kernel's listen queue (the library stops accepting at its
     * cap, and closes the oldest once they have waited 1 s). */
    held = count_fds() - fds0 - (int)open_now;
    fprintf(stderr, "[%s]: %u of %d half-open sockets still open after the flood, %d of them "
            "accepted by the library\n", g.case_name, open_now, HALF_OPEN, held);
    if (held > HALF_OPEN_KEPT_MAX)
        failf("%d half-open sockets accepted and kept, want at most %d", held,
              HALF_OPEN_KEPT_MAX);
    case_end(mark, f0);

    /* A real connection during the flood. */
    {
        uint8_t bad[ROV_WIRE_HDR_LEN];

        header(bad, ROV_FT_ACK, 0, 0, 1000, 0);
        run_established_case("established_during_half_open_flood", rail_index, bad,
                             sizeof(bad));
    }

    case_begin("half_open_timed_out", mark, &f0);
    t0 = it_now_ns();
    while ((open_now = count_open(fds, HALF_OPEN)) != 0 &&
           it_now_ns() - t0 < HALF_OPEN_GONE_NS)
        spin(-1);
    if (open_now)
        failf("%u half-open sockets still open %.0f s after the flood", open_now,
              (double)HALF_OPEN_GONE_NS / 1e9);
    else
        fprintf(stderr, "[%s]: every half-open socket closed by the library %.1f s after "
                "the flood\n", g.case_name, (double)(it_now_ns() - t0) / 1e9);
    for (int i = 0; i < HALF_OPEN; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    /* The library's ends are closed too: back to where the flood began (the
     * raw connection of the case in between is closed as well). */
    t0 = it_now_ns();
    while ((fds1 = count_fds()) > fds0 && it_now_ns() - t0 < CASE_TIMEOUT_NS)
        spin(-1);
    if (fds1 > fds0)
        failf("%d descriptors open after the flood, %d before it", fds1, fds0);
    else
        fprintf(stderr, "[%s]: descriptors back to %d (were %d before the flood)\n",
                g.case_name, fds1, fds0);
    case_end(mark, f0);
}

/* Issue 19's takeover: a stranger who holds A's address blob (its key
 * included) and sees B's listening port sends B a reconnect HELLO naming
 * A's endpoint and the live connection (A's id 1, B's id 1) with the switch
 * flag.  Before handshakes were authenticated, B adopted it as A's new
 * channel, moved its traffic there and took the stranger's acks.  The
 * connection's secret is agreed from nonces the stranger never saw: B must
 * close the socket, and neither side of the good connection may switch. */
static void run_hijack_case(void)
{
    struct sockaddr_storage a_addr = g.rail_addr;
    socklen_t a_len = g.rail_addr_len;
    uint8_t b[ROV_WIRE_HDR_LEN + ROV_WIRE_HELLO_FIXED];
    uint64_t mark[2 * NGOOD], switches0[2 * NGOOD], switches1;
    unsigned f0;
    int rail, fd;

    case_begin("takeover_with_listener_blob", mark, &f0);
    for (int i = 0; i < NGOOD; i++) {
        rov_conn_stats_t st;

        rov_conn_stats(g.a[i].flow.conn, &st);
        switches0[2 * i] = st.switches;
        rov_conn_stats(g.b[i].flow.conn, &st);
        switches0[2 * i + 1] = st.switches;
    }
    rail = find_rail_addr(SIDE_B);
    for (uint64_t id = 1; rail >= 0 && id <= NGOOD; id++) {
        for (uint64_t ctr = 1; ctr <= 3; ctr++) {
            struct rov_wire_hello h = {.conn_id = id, .peer_conn_id = id, .rail = (uint16_t)rail,
                                       .max_msg = 1 << 20, .ctr = ctr};

            memcpy(h.ep_id, g.a_ep_id, ROV_EP_ID_LEN);
            fd = raw_connect();
            if (fd < 0)
                continue;
            raw_send(fd, b, hello_frame(fd, b, &h, ROV_HF_SWITCH | ROV_HF_REPLY, g.a_key));
            wait_raw_closed(fd, g.case_name);
            close(fd);
        }
    }
    g.rail_addr = a_addr;
    g.rail_addr_len = a_len;
    for (int i = 0; i < NGOOD; i++) {
        rov_conn_stats_t st;

        rov_conn_stats(g.a[i].flow.conn, &st);
        switches1 = st.switches;
        rov_conn_stats(g.b[i].flow.conn, &st);
        if (switches1 != switches0[2 * i] || st.switches != switches0[2 * i + 1])
            failf("good connection %d switched during the takeover attempt (A %" PRIu64
                  " -> %" PRIu64 ", B %" PRIu64 " -> %" PRIu64 ")", i + 1, switches0[2 * i],
                  switches1, switches0[2 * i + 1], st.switches);
    }
    case_end(mark, f0);
}

int main(void)
{
    int rail_index, rc = 0;

    setvbuf(stderr, NULL, _IOLBF, 0);
    g.rng = 0x6172626167ull; /* fixed: the garbage is reproducible */
    if (setup() || (rail_index = find_rail_addr(SIDE_A)) < 0) {
        rc = 2;
        goto out;
    }
    fprintf(stderr, "garbage: two good connections up, traffic flowing\n");

    for (size_t i = 0; i < sizeof(raw_cases) / sizeof(raw_cases[0]); i++)
        run_raw_case(&raw_cases[i]);
    run_flood_case();
    run_connect_close_case();
    run_hijack_case();
    run_half_open_case(rail_index);

    {
        uint8_t bad[ROV_WIRE_HDR_LEN];

        header(bad, ROV_FT_DATA, 0, 2, 0, 0);
        bad[0] ^= 0xff;
        run_established_case("established_then_bad_magic", rail_index, bad, sizeof(bad));

        header(bad, ROV_FT_ACK, 0, 0, 1000, 0);
        run_established_case("established_then_ack_of_unsent_data", rail_index, bad,
                             sizeof(bad));

        uint8_t junk[1024];

        /* a valid 16-byte message, then random bytes */
        header(junk, ROV_FT_DATA, 16, 2, 0, 1);
        random_bytes(junk + ROV_WIRE_HDR_LEN, sizeof(junk) - ROV_WIRE_HDR_LEN);
        junk[ROV_WIRE_HDR_LEN + 16] = 0; /* the next "header" has a bad magic for sure */
        junk[ROV_WIRE_HDR_LEN + 17] = 0;
        run_established_case("established_then_random_bytes", rail_index, junk, sizeof(junk));

        /* a bond's fragment (ROV_DF_MORE) of one message, then the last
         * fragment of another (another tag): not put together, a protocol
         * error */
        uint8_t frags[2 * (ROV_WIRE_HDR_LEN + 16)];

        memset(frags, 0, sizeof(frags));
        header(frags, ROV_FT_DATA, 16, 2, 0, 1);
        frags[28] = ROV_DF_MORE;
        header(frags + ROV_WIRE_HDR_LEN + 16, ROV_FT_DATA, 16, 3, 0, 2);
        run_established_case("established_then_fragment_of_another_tag", rail_index, frags,
                             sizeof(frags));
    }
    run_ended_hello_case(rail_index);
    run_close_answer_case(rail_index);

    if (finish())
        rc = 1;
out:
    if (g.failures || good_errors())
        rc = rc ? rc : 1;
    for (int s = 0; s < 2; s++) {
        if (g.ep[s])
            rov_endpoint_destroy(g.ep[s]);
    }
    for (int i = 0; i < NGOOD; i++) {
        g.a[i].flow.draining = g.b[i].flow.draining = true;
    }
    for (int s = 0; s < 2; s++) {
        if (g.ctx[s])
            rov_context_destroy(g.ctx[s]);
    }
    for (int i = 0; i < NGOOD; i++) {
        it_flow_free(&g.a[i].flow);
        it_flow_free(&g.b[i].flow);
    }
    fprintf(stderr, "garbage: %u sub-cases, %u failed, %u failure(s): %s\n", g.cases,
            g.cases_failed, g.failures + (unsigned)good_errors(), rc ? "FAIL" : "PASS");
    return rc;
}
