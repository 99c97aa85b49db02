/*
 * rov_alltoall: wire-up storms end in connections, not failures (issue 20).
 *
 * Forks --procs processes (ranks).  Each creates a context and an endpoint,
 * publishes its address blob in --dir (owner-only), waits for every other
 * rank's, then opens --per-peer connections to every higher rank, all at
 * once, as an MPI rank's first all-to-all would; lower ranks connect to it.
 * Every connection carries --msgs checked messages each way (the first
 * names the sender's rank and connection index), then closes.
 *
 * A rank fails (exit 1) when a connection fails, a message is wrong, out of
 * order or missing, a connection ended on any rail but the first or
 * switched (a connect that is merely slow must be retried, not moved to a
 * fallback rail), or nothing completes within --timeout seconds.  The
 * parent prints each rank's result and exits 0 only if every rank did.
 * Public API only.
 *
 * Usage: rov_alltoall --procs N [--per-peer K] [--msgs M] [--size B]
 *                     [--dir DIR] [--timeout S]
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "railover/railover.h"

#define BLOB_MAX 1024
#define TAG_HELLO 1u
#define TAG_DATA 2u

struct peer_conn {
    rov_conn_t *conn;
    int peer, index;          /* -1 until the accepted side's hello */
    uint64_t sent, recvd;
    bool closing, closed, hello_sent;
};

static struct {
    int procs, per_peer, msgs, size, rank, timeout_s;
    const char *dir;
    rov_context_t *ctx;
    struct peer_conn *conns;  /* (procs - 1) * per_peer */
    int nconns, nclosed, failures;
    uint8_t *buf;
} g;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void __attribute__((format(printf, 1, 2))) fail(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "FAIL [rank %d]: ", g.rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g.failures++;
}

static uint8_t pattern(int from, int index, uint64_t k, size_t i)
{
    return (uint8_t)(from * 131 + index * 31 + k * 7 + i);
}

static struct peer_conn *slot_of(rov_conn_t *conn)
{
    struct peer_conn *pc = rov_conn_get_user(conn);

    if (pc)
        return pc;
    /* Accepted connections take the slots after our own connects'. */
    for (int i = (g.procs - 1 - g.rank) * g.per_peer; i < g.nconns; i++) {
        if (!g.conns[i].conn) {
            g.conns[i].conn = conn;
            g.conns[i].peer = -1;
            rov_conn_set_user(conn, &g.conns[i]);
            return &g.conns[i];
        }
    }
    return NULL;
}

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    struct peer_conn *pc = rov_conn_get_user(conn);
    const uint8_t *d = data;

    (void)arg;
    if (!pc) {
        fail("message on a connection with no slot");
        return;
    }
    if (tag == TAG_HELLO) {
        int ids[2];

        if (len != sizeof(ids) || pc->peer >= 0) {
            fail("unexpected hello (%zu bytes)", len);
            return;
        }
        memcpy(ids, data, sizeof(ids));
        pc->peer = ids[0];
        pc->index = ids[1];
        pc->hello_sent = true; /* the connector's hello names the connection */
        return;
    }
    if (tag != TAG_DATA || pc->peer < 0 || len != (size_t)g.size) {
        fail("bad message: tag %u, %zu bytes", tag, len);
        return;
    }
    for (size_t i = 0; i < len; i++) {
        if (d[i] != pattern(pc->peer, pc->index, pc->recvd, i)) {
            fail("message %" PRIu64 " from rank %d: wrong content or order", pc->recvd, pc->peer);
            return;
        }
    }
    pc->recvd++;
}

static void on_event(void *arg, const rov_event_t *e)
{
    struct peer_conn *pc;

    (void)arg;
    switch (e->type) {
    case ROV_EVENT_CONN_ACCEPTED:
        if (!slot_of(e->conn))
            fail("more connections accepted than expected");
        break;
    case ROV_EVENT_CONN_ERROR:
        fail("connection failed: %s (%s)", rov_status_str(e->status),
             e->reason ? e->reason : "?");
        rov_conn_close(e->conn);
        break;
    case ROV_EVENT_CONN_PEER_CLOSED:
        pc = rov_conn_get_user(e->conn);
        if (pc && (pc->sent < (uint64_t)g.msgs || pc->recvd < (uint64_t)g.msgs))
            fail("rank %d closed the connection before its stream ended", pc->peer);
        if (pc)
            pc->closing = true;
        rov_conn_close(e->conn);
        break;
    case ROV_EVENT_CONN_CLOSED:
        pc = rov_conn_get_user(e->conn);
        if (pc && !pc->closed) {
            pc->closed = true;
            g.nclosed++;
        }
        break;
    default:
        break;
    }
}

static void pump(struct peer_conn *pc)
{
    rov_status_t st;

    if (!pc->conn || pc->peer < 0 || pc->closing)
        return;
    if (!pc->hello_sent) {
        int ids[2] = {g.rank, pc->index};

        st = rov_conn_send(pc->conn, TAG_HELLO, ids, sizeof(ids), NULL);
        if (st == ROV_ERR_AGAIN)
            return;
        if (st != ROV_OK) {
            fail("send of the hello: %s", rov_status_str(st));
            return;
        }
        pc->hello_sent = true;
    }
    while (pc->sent < (uint64_t)g.msgs) {
        for (int i = 0; i < g.size; i++)
            g.buf[i] = pattern(g.rank, pc->index, pc->sent, (size_t)i);
        st = rov_conn_send(pc->conn, TAG_DATA, g.buf, (size_t)g.size, NULL);
        if (st == ROV_ERR_AGAIN)
            return;
        if (st != ROV_OK) {
            fail("send: %s", rov_status_str(st));
            return;
        }
        pc->sent++;
    }
}

static int read_blob(int rank, uint8_t *blob, size_t *len)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%d.addr", g.dir, rank);
    f = fopen(path, "rb");
    if (!f)
        return -1;
    *len = fread(blob, 1, BLOB_MAX, f);
    fclose(f);
    return *len ? 0 : -1;
}

static int write_blob(rov_endpoint_t *ep)
{
    char path[512], tmp[520];
    uint8_t blob[BLOB_MAX];
    size_t len = sizeof(blob);
    FILE *f;

    if (rov_endpoint_address(ep, blob, &len) != ROV_OK)
        return -1;
    snprintf(path, sizeof(path), "%s/%d.addr", g.dir, g.rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (!f || fwrite(blob, 1, len, f) != len || fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

static int rank_main(void)
{
    rov_context_params_t p = {.recv_cb = on_recv, .event_cb = on_event};
    rov_endpoint_t *ep = NULL;
    uint64_t deadline = now_ns() + (uint64_t)g.timeout_s * 1000000000ull, t0;
    int next = 0, rail_bad = 0;
    rov_status_t st;

    g.nconns = (g.procs - 1) * g.per_peer;
    g.conns = calloc((size_t)g.nconns, sizeof(*g.conns));
    g.buf = malloc((size_t)g.size + 1);
    if (!g.conns || !g.buf)
        return 1;
    if ((st = rov_context_create(&p, &g.ctx)) != ROV_OK ||
        (st = rov_endpoint_create(g.ctx, &ep)) != ROV_OK) {
        fprintf(stderr, "FAIL [rank %d]: setup: %s\n", g.rank, rov_status_str(st));
        return 1;
    }
    if (write_blob(ep) != 0) {
        fprintf(stderr, "FAIL [rank %d]: cannot publish the address: %s\n", g.rank,
                strerror(errno));
        return 1;
    }
    /* Every higher rank's address, then all its connections at once. */
    for (int peer = g.rank + 1; peer < g.procs; peer++) {
        uint8_t blob[BLOB_MAX];
        size_t len;

        while (read_blob(peer, blob, &len) != 0) {
            if (now_ns() > deadline) {
                fprintf(stderr, "FAIL [rank %d]: no address of rank %d\n", g.rank, peer);
                return 1;
            }
            rov_context_wait(g.ctx, 10);
        }
        for (int k = 0; k < g.per_peer; k++) {
            struct peer_conn *pc = &g.conns[next++];

            st = rov_conn_connect(ep, blob, len, &pc->conn);
            if (st != ROV_OK) {
                fprintf(stderr, "FAIL [rank %d]: connect to rank %d: %s\n", g.rank, peer,
                        rov_status_str(st));
                return 1;
            }
            pc->peer = peer;
            pc->index = k;
            rov_conn_set_user(pc->conn, pc);
        }
    }
    t0 = now_ns();
    for (;;) {
        int done = 0;

        for (int i = 0; i < g.nconns; i++) {
            struct peer_conn *pc = &g.conns[i];

            pump(pc);
            if (pc->conn && !pc->closing && pc->sent == (uint64_t)g.msgs &&
                pc->recvd == (uint64_t)g.msgs) {
                rov_conn_stats_t s;

                rov_conn_stats(pc->conn, &s);
                if (s.rail != 0 || s.switches != 0)
                    rail_bad++;
                pc->closing = true;
                if (rov_conn_close(pc->conn) == ROV_OK && !pc->closed) {
                    pc->closed = true;
                    g.nclosed++;
                }
            }
            done += pc->closed;
        }
        if (g.failures || done == g.nconns)
            break;
        if (now_ns() > deadline) {
            fprintf(stderr, "FAIL [rank %d]: %d of %d connections done after %d s\n", g.rank,
                    done, g.nconns, g.timeout_s);
            g.failures++;
            break;
        }
        rov_context_wait(g.ctx, 10);
    }
    if (rail_bad) {
        fprintf(stderr, "FAIL [rank %d]: %d connections ended on a fallback rail or switched "
                "(a slow connect moved instead of retried)\n", g.rank, rail_bad);
        g.failures++;
    }
    if (!g.failures)
        printf("rank %d: %d connections, %d messages each way on each, %.2f s\n", g.rank,
               g.nconns, g.msgs, (double)(now_ns() - t0) / 1e9);
    rov_context_destroy(g.ctx);
    return g.failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/rov-alltoall-XXXXXX";
    pid_t *pids;
    int bad = 0;

    g.per_peer = 1;
    g.msgs = 100;
    g.size = 256;
    g.timeout_s = 60;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!v)
            goto usage;
        if (strcmp(a, "--procs") == 0)
            g.procs = atoi(v);
        else if (strcmp(a, "--per-peer") == 0)
            g.per_peer = atoi(v);
        else if (strcmp(a, "--msgs") == 0)
            g.msgs = atoi(v);
        else if (strcmp(a, "--size") == 0)
            g.size = atoi(v);
        else if (strcmp(a, "--dir") == 0)
            g.dir = v;
        else if (strcmp(a, "--timeout") == 0)
            g.timeout_s = atoi(v);
        else
            goto usage;
    }
    if (g.procs < 2 || g.procs > 256 || g.per_peer < 1 || g.msgs < 0 || g.size < 1 ||
        g.timeout_s < 1)
        goto usage;
    if (!g.dir && !(g.dir = mkdtemp(tmpl))) {
        perror("rov_alltoall: mkdtemp");
        return 2;
    }
    pids = calloc((size_t)g.procs, sizeof(*pids));
    if (!pids)
        return 2;
    fflush(NULL);
    for (int r = 0; r < g.procs; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            g.rank = r;
            _exit(rank_main());
        }
        if (pids[r] < 0) {
            perror("rov_alltoall: fork");
            return 2;
        }
    }
    for (int r = 0; r < g.procs; r++) {
        int status = 0;

        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "rov_alltoall: rank %d failed (status 0x%x)\n", r, status);
            bad++;
        }
    }
    for (int r = 0; r < g.procs; r++) {
        char path[512];

        snprintf(path, sizeof(path), "%s/%d.addr", g.dir, r);
        unlink(path);
    }
    free(pids);
    if (g.dir == tmpl)
        rmdir(tmpl);
    printf("rov_alltoall: %d ranks, %d connections per pair: %s\n", g.procs, g.per_peer,
           bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
usage:
    fprintf(stderr, "usage: rov_alltoall --procs N [--per-peer K] [--msgs M] [--size B] "
                    "[--dir DIR] [--timeout S]\n");
    return 64;
}
