/*
 * rov_authed_peer: a peer that holds the secret misbehaves (issue 35, item 5).
 *
 *   rov_authed_peer resend    RESEND frames asking again and again for the
 *                             same range: what the victim sends back is
 *                             bounded (one window per RAILOVER_FAILOVER_TIMEOUT)
 *   rov_authed_peer partial   connections that each announce a large DATA
 *                             frame, send part of it and stop: the victim
 *                             fails those channels and frees their buffers
 *
 * The victim is a child process using the public API only: it listens on a
 * TCP rail of 127.0.0.1, accepts, and (resend) sends small messages whenever
 * its window has room.  The attacker (this process) opens its connections
 * with the library, so that they are authenticated the way every peer is,
 * and then takes their sockets over: it stops calling the library and reads
 * and writes the TCP streams itself (frames built with transport/wire.h).
 * Figures come from /proc/PID of the victim (VmRSS, utime + stime) and from
 * the bytes the attacker reads.  Nothing is timed: the bounds are in bytes
 * and in the victim's own timeout.
 *
 * Exit status: 0 pass, 1 failure, 2 setup error, 64 usage.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "railover/railover.h"
#include "transport/core.h"
#include "transport/wire.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

/* resend: the victim's window and its timeout (the resend hold-off). */
#define RS_WINDOW (1 * MiB)
#define RS_TIMEOUT_S 10
#define RS_MSG 1024
#define RS_ATTACK_S 3.0
#define RS_BATCH 16 /* RESEND frames per write */

/* partial: what each connection announces and what it sends of it.  Above
 * glibc's largest mmap threshold (32 MiB), so a freed buffer leaves RSS. */
#define PT_CONNS 3
#define PT_ANNOUNCE (40 * MiB)
#define PT_SEND (24 * MiB)
#define PT_GONE_S 30.0 /* give up waiting for the buffers' release */

static int failures;

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void failf(const char *fmt, ...)
{
    va_list ap;

    fputs("FAIL: ", stdout);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
    failures++;
}

static void note(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

static double cpu_s(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long ut = 0, st = 0;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    if (!(p = strrchr(buf, ')')) ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ---- the victim (child): public API only --------------------------------- */

struct victim {
    rov_context_t *ctx;
    rov_conn_t *conns[16];
    int nconns;
    bool sender;
};

static void victim_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    (void)arg, (void)conn, (void)tag, (void)data, (void)len;
}

static void victim_event(void *arg, const rov_event_t *ev)
{
    struct victim *v = arg;

    if (ev->type == ROV_EVENT_CONN_ACCEPTED && v->nconns < 16)
        v->conns[v->nconns++] = ev->conn;
    if (ev->type == ROV_EVENT_CONN_ERROR)
        fprintf(stderr, "victim: connection failed: %s (%s)\n", rov_status_str(ev->status),
                ev->reason ? ev->reason : "");
}

/* Never returns: serves until killed. */
static void victim_run(int out_fd, bool sender)
{
    struct victim v = {.sender = sender};
    rov_context_params_t p = {.recv_cb = victim_recv, .event_cb = victim_event, .arg = &v,
                              .rank = -1};
    static uint8_t msg[RS_MSG];
    uint8_t addr[1024];
    size_t len = sizeof(addr);
    rov_endpoint_t *ep;

    if (rov_context_create(&p, &v.ctx) != ROV_OK || rov_endpoint_create(v.ctx, &ep) != ROV_OK ||
        rov_endpoint_address(ep, addr, &len) != ROV_OK) {
        fprintf(stderr, "victim: setup failed\n");
        _exit(2);
    }
    if (write(out_fd, &len, sizeof(len)) != sizeof(len) || write(out_fd, addr, len) != (ssize_t)len)
        _exit(2);
    close(out_fd);
    memset(msg, 0x5a, sizeof(msg));
    for (;;) {
        for (int i = 0; v.sender && i < v.nconns; i++)
            while (rov_conn_send(v.conns[i], 1, msg, sizeof(msg), NULL) == ROV_OK)
                ;
        rov_progress(v.ctx);
        if (rov_context_arm(v.ctx) == ROV_OK)
            rov_context_wait(v.ctx, 50);
    }
}

static pid_t victim_start(bool sender, const char *max_msg, const char *window, uint8_t *addr,
                          size_t *len_p)
{
    int pfd[2];
    pid_t pid;

    if (pipe(pfd) != 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        setenv("RAILOVER_MAX_MSG", max_msg, 1);
        setenv("RAILOVER_WINDOW_BYTES", window, 1);
        setenv("RAILOVER_FAILOVER_TIMEOUT", sender ? "10s" : "1s", 1);
        victim_run(pfd[1], sender);
    }
    close(pfd[1]);
    if (pid < 0 || read(pfd[0], len_p, sizeof(*len_p)) != sizeof(*len_p) || *len_p > 1024 ||
        read(pfd[0], addr, *len_p) != (ssize_t)*len_p) {
        close(pfd[0]);
        return -1;
    }
    close(pfd[0]);
    return pid;
}

/* ---- the attacker: connect with the library, then take the socket -------- */

static int established;

static void att_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    (void)arg, (void)conn, (void)tag, (void)data, (void)len;
}

static void att_event(void *arg, const rov_event_t *ev)
{
    (void)arg;
    if (ev->type == ROV_EVENT_CONN_ESTABLISHED)
        established++;
}

/* Connected TCP sockets of this process (the library's channels). */
static int connected_sockets(int *fds, int max)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (!d)
        return 0;
    while ((e = readdir(d)) && n < max) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = atoi(e->d_name), type = 0;
        socklen_t tl = sizeof(type);

        if (e->d_name[0] == '.' || fd == dirfd(d))
            continue;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM)
            continue;
        if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
            fds[n++] = fd;
    }
    closedir(d);
    return n;
}

/* Open nconns authenticated connections to addr; on return the library is
 * no longer called and each socket is the caller's (fds), its connection in
 * conns (the internal struct, for the sequence numbers). */
static bool attacker_open(rov_context_t **ctx_p, const uint8_t *addr, size_t len, int nconns,
                          rov_conn_t **conns, int *fds)
{
    rov_context_params_t p = {.recv_cb = att_recv, .event_cb = att_event, .rank = -1};
    rov_endpoint_t *ep;
    double end;

    if (rov_context_create(&p, ctx_p) != ROV_OK || rov_endpoint_create(*ctx_p, &ep) != ROV_OK)
        return false;
    for (int i = 0; i < nconns; i++)
        if (rov_conn_connect(ep, addr, len, &conns[i]) != ROV_OK)
            return false;
    for (end = now_s() + 30; established < nconns && now_s() < end;)
        rov_progress(*ctx_p);
    /* A little longer, so the victim's HELLO_ACK handling and first data
     * are behind us. */
    for (end = now_s() + 0.3; now_s() < end;)
        rov_progress(*ctx_p);
    if (established < nconns) {
        fprintf(stderr, "attacker: %d of %d connections established\n", established, nconns);
        return false;
    }
    return connected_sockets(fds, nconns + 1) == nconns;
}

/* Read whatever is there without blocking; bytes read. */
static size_t drained; /* bytes drain() read, all sockets */

static size_t drain(int fd)
{
    static uint8_t sink[1 << 20];
    size_t total = 0;
    ssize_t n;

    while ((n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0)
        total += (size_t)n;
    drained += total;
    return total;
}

static bool send_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0 && errno == EAGAIN) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};

            drain(fd);
            poll(&pf, 1, 100);
            continue;
        }
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* ---- resend --------------------------------------------------------------- */

static int run_resend(void)
{
    uint8_t addr[1024], frames[RS_BATCH][ROV_WIRE_HDR_LEN];
    size_t len, back = 0, sent_frames = 0, initial;
    rov_context_t *ctx = NULL;
    rov_conn_t *conn;
    double t0, elapsed, c0, cpu, bound;
    int fd;
    pid_t pid = victim_start(true, "1M", "1M", addr, &len);

    if (pid < 0)
        return 2;
    if (!attacker_open(&ctx, addr, len, 1, &conn, &fd)) {
        kill(pid, SIGKILL);
        rov_context_destroy(ctx);
        return 2;
    }
    /* The victim's window is full of messages we never acknowledge: let
     * them arrive, then ask for them again and again (the ack is what the
     * library acknowledged, so every RESEND names the same range). */
    usleep(200000);
    initial = drain(fd);
    for (int i = 0; i < RS_BATCH; i++) {
        struct rov_wire_hdr h = {.type = ROV_FT_RESEND, .ack = conn->rx_seq};

        rov_wire_encode(frames[i], &h);
    }
    note("resend: victim pid %d, window %zu bytes, %zu bytes in flight drained, acking %" PRIu64,
         (int)pid, RS_WINDOW, initial, conn->rx_seq);
    c0 = cpu_s(pid);
    t0 = now_s();
    drained = 0;
    while (now_s() - t0 < RS_ATTACK_S && send_all(fd, frames, sizeof(frames))) {
        sent_frames += RS_BATCH;
        drain(fd);
    }
    elapsed = now_s() - t0;
    drain(fd);
    back = drained;
    cpu = cpu_s(pid) - c0;
    /* What was in flight before, then the first RESEND and one per
     * RAILOVER_FAILOVER_TIMEOUT; a window on the wire is its messages and
     * their headers. */
    bound = (double)RS_WINDOW * (1.0 + (double)ROV_WIRE_HDR_LEN / RS_MSG) *
                (2.0 + elapsed / RS_TIMEOUT_S) + 256.0 * KiB;
    note("resend: %zu RESEND frames (%zu bytes) in %.1f s; the victim sent back %zu bytes "
         "(bound %.0f), used %.2f s of CPU, RSS %ld KiB",
         sent_frames, sent_frames * ROV_WIRE_HDR_LEN, elapsed, back, bound, cpu, rss_kib(pid));
    if (sent_frames < 1000)
        failf("only %zu RESEND frames went out: the attack did not run", sent_frames);
    if ((double)back > bound)
        failf("a peer asking for the same range again made the victim send %zu bytes in %.1f s "
              "(%.0f windows of %zu): RESEND is not bounded", back, elapsed,
              (double)back / RS_WINDOW, RS_WINDOW);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    rov_context_destroy(ctx); /* also closes the sockets taken over */
    return failures ? 1 : 0;
}

/* ---- partial -------------------------------------------------------------- */

static int run_partial(void)
{
    uint8_t addr[1024], hdr[ROV_WIRE_HDR_LEN];
    static uint8_t chunk[1 * MiB];
    rov_conn_t *conns[PT_CONNS];
    int fds[PT_CONNS + 1];
    size_t len;
    rov_context_t *ctx = NULL;
    long rss0, rss_peak, rss = 0;
    double t0, cpu0, cpu;
    bool gone = false;
    pid_t pid = victim_start(false, "64M", "16M", addr, &len);

    if (pid < 0)
        return 2;
    if (!attacker_open(&ctx, addr, len, PT_CONNS, conns, fds)) {
        kill(pid, SIGKILL);
        rov_context_destroy(ctx);
        return 2;
    }
    rss0 = rss_kib(pid);
    memset(chunk, 0xa5, sizeof(chunk));
    for (int i = 0; i < PT_CONNS; i++) {
        struct rov_wire_hdr h = {.type = ROV_FT_DATA, .len = (uint32_t)PT_ANNOUNCE,
                                 .seq = 1, .ack = 0};

        rov_wire_encode(hdr, &h);
        if (!send_all(fds[i], hdr, sizeof(hdr)))
            goto broken;
        for (size_t s = 0; s < PT_SEND; s += sizeof(chunk))
            if (!send_all(fds[i], chunk, sizeof(chunk)))
                goto broken;
    }
    /* Until the victim has read it all (its RSS stops growing). */
    for (long last = -1; (rss_peak = rss_kib(pid)) != last;) {
        last = rss_peak;
        usleep(300000);
    }
    note("partial: victim pid %d, RSS %ld KiB before, %ld KiB with %d frames of %zu MiB "
         "announced, %zu MiB sent each", (int)pid, rss0, rss_peak, PT_CONNS,
         PT_ANNOUNCE / MiB, PT_SEND / MiB);
    if (rss_peak - rss0 < (long)(PT_CONNS * PT_SEND / KiB / 2)) {
        failf("the victim's RSS grew by %ld KiB only: the frames did not arrive", rss_peak - rss0);
        goto out;
    }
    cpu0 = cpu_s(pid);
    t0 = now_s();
    while (now_s() - t0 < PT_GONE_S) {
        for (int i = 0; i < PT_CONNS; i++)
            drain(fds[i]);
        rss = rss_kib(pid);
        if (rss - rss0 < (long)(PT_SEND / KiB)) {
            gone = true;
            break;
        }
        usleep(200000);
    }
    cpu = cpu_s(pid) - cpu0;
    if (gone)
        note("partial: the stalled frames' buffers were freed: RSS %ld KiB (victim CPU %.2f s "
             "meanwhile)", rss, cpu);
    else
        failf("%d partial frames still hold the victim's memory %.0f s after they stopped "
              "arriving: RSS %ld KiB (%ld KiB before them)", PT_CONNS, PT_GONE_S, rss, rss0);
    goto out;
broken:
    failf("the victim closed a connection while its frame was being sent");
out:
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    rov_context_destroy(ctx); /* also closes the sockets taken over */
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    int rc;

    if (argc != 2 || (strcmp(argv[1], "resend") != 0 && strcmp(argv[1], "partial") != 0)) {
        fprintf(stderr, "usage: %s resend|partial\n", argv[0]);
        return 64;
    }
    setenv("RAILOVER_RAILS", "tcp@127.0.0.1", 1);
    setenv("RAILOVER_PROGRESS_THREAD", "0", 1);
    setenv("RAILOVER_CONTROL", "0", 1);
    if (!getenv("RAILOVER_LOG"))
        setenv("RAILOVER_LOG", "warn", 1);
    signal(SIGPIPE, SIG_IGN);
    rc = strcmp(argv[1], "resend") == 0 ? run_resend() : run_partial();
    if (rc == 2)
        printf("setup failed\n");
    printf("authed_peer %s: %s\n", argv[1], rc == 0 ? "PASS" : "FAIL");
    return rc;
}
