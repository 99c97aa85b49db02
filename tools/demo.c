/*
 * railover-demo: two processes stream checksummed messages to each other
 * over Railover and print what happens, once a second: rate, rail, retained
 * bytes, and every event (connection, rail switch with its reason, close).
 * tools/demo.sh takes a link down under it to show a failover.  With
 * --switch-ms MS (> 0) the connecting side also moves the connection to the
 * next rail every MS, as an operator would before fabric maintenance.
 *
 *   railover-demo --listen FILE  [--seconds N]
 *   railover-demo --connect FILE [--seconds N] [--switch-ms MS]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "railover/railover.h"

#define MAX_SIZE 65536

struct demo {
    const char *who;
    rov_context_t *ctx;
    rov_conn_t *conn;
    bool peer_closed, closed, failed;
    uint64_t next_rx, rx_bytes, bad;
    uint8_t buf[MAX_SIZE];
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Message k: size and content are a function of k, so the receiver checks both. */
static size_t msg_size(uint64_t k)
{
    return (size_t)((k * 2654435761u) % MAX_SIZE);
}

static void fill(uint8_t *p, size_t len, uint64_t k)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(k + i * 31);
}

static bool check(const uint8_t *p, size_t len, uint64_t k)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != (uint8_t)(k + i * 31))
            return false;
    return true;
}

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    struct demo *d = arg;
    uint64_t k = d->next_rx++;

    if (tag != (uint32_t)k || len != msg_size(k) || !check(data, len, k)) {
        if (d->bad++ < 5)
            printf("[%s] BAD message %" PRIu64 ": tag %u len %zu\n", d->who, k, tag, len);
    }
    d->rx_bytes += len;
}

static void on_event(void *arg, const rov_event_t *ev)
{
    struct demo *d = arg;

    switch (ev->type) {
    case ROV_EVENT_CONN_ACCEPTED:
        d->conn = ev->conn;
        printf("[%s] peer connected on rail %s\n", d->who, rov_context_rail_name(d->ctx, ev->rail_to));
        break;
    case ROV_EVENT_CONN_ESTABLISHED:
        printf("[%s] connected on rail %s\n", d->who, rov_context_rail_name(d->ctx, ev->rail_to));
        break;
    case ROV_EVENT_CONN_RAIL_SWITCH:
        printf("[%s] rail switch %s -> %s (%s: %s)\n", d->who,
               rov_context_rail_name(d->ctx, ev->rail_from),
               rov_context_rail_name(d->ctx, ev->rail_to), rov_reason_str(ev->code), ev->reason);
        break;
    case ROV_EVENT_CONN_RAIL_DOWN:
        printf("[%s] rail %s down (%s: %s)\n", d->who,
               rov_context_rail_name(d->ctx, ev->rail_from), rov_reason_str(ev->code), ev->reason);
        break;
    case ROV_EVENT_CONN_PEER_CLOSED:
        printf("[%s] peer finished\n", d->who);
        d->peer_closed = true;
        break;
    case ROV_EVENT_CONN_CLOSED:
        printf("[%s] connection closed\n", d->who);
        d->closed = true;
        d->conn = NULL;
        break;
    case ROV_EVENT_CONN_ERROR:
        printf("[%s] connection failed: %s (%s)\n", d->who, ev->reason, rov_status_str(ev->status));
        d->failed = true;
        break;
    case ROV_EVENT_CONTEXT_QUIESCED:
    case ROV_EVENT_ENDPOINT_ADDRESS:
    case ROV_EVENT_CONTEXT_RESUMED:
        printf("[%s] %s\n", d->who, ev->reason);
        break;
    case ROV_EVENT_CONN_BOND:
        break;
    }
}

static int read_file(const char *path, void *buf, size_t *len_p, double timeout_s)
{
    double end = now_s() + timeout_s;

    while (now_s() < end) {
        FILE *f = fopen(path, "rb");

        if (f) {
            *len_p = fread(buf, 1, *len_p, f);
            fclose(f);
            return 0;
        }
        usleep(10000);
    }
    return -1;
}

/* The address blob holds the endpoint's key: readable by its owner only. */
static int write_file(const char *path, const void *buf, size_t len)
{
    char tmp[4096];
    FILE *f;
    int fd;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (!f) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (fwrite(buf, 1, len, f) != len || fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

int main(int argc, char **argv)
{
    static struct demo d;
    const char *listen_file = NULL, *connect_file = NULL;
    double seconds = 6, switch_ms = 2000, start, last_print, last_switch;
    rov_context_params_t params = {.recv_cb = on_recv, .event_cb = on_event, .arg = &d};
    rov_endpoint_t *ep;
    uint8_t blob[512];
    size_t blob_len = sizeof(blob);
    uint64_t tx = 0, last_rx = 0, last_rx_bytes = 0;
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'}, {"connect", required_argument, NULL, 'c'},
        {"seconds", required_argument, NULL, 's'}, {"switch-ms", required_argument, NULL, 'w'},
        {NULL, 0, NULL, 0},
    };
    int opt, rc;

    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'l': listen_file = optarg; break;
        case 'c': connect_file = optarg; break;
        case 's': seconds = atof(optarg); break;
        case 'w': switch_ms = atof(optarg); break;
        default:
            fprintf(stderr, "usage: %s --listen FILE | --connect FILE [--seconds N] [--switch-ms MS]\n", argv[0]);
            return 2;
        }
    }
    if (!listen_file == !connect_file) {
        fprintf(stderr, "%s: give exactly one of --listen FILE or --connect FILE\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    d.who = listen_file ? "server" : "client";
    rc = rov_context_create(&params, &d.ctx);
    if (rc != ROV_OK) {
        fprintf(stderr, "[%s] cannot create context: %s\n", d.who, rov_status_str(rc));
        return 1;
    }
    if ((rc = rov_endpoint_create(d.ctx, &ep)) != ROV_OK) {
        fprintf(stderr, "[%s] cannot listen: %s\n", d.who, rov_status_str(rc));
        return 1;
    }
    printf("[%s] rails:", d.who);
    for (int i = 0; i < rov_context_rail_count(d.ctx); i++)
        printf(" %s", rov_context_rail_name(d.ctx, i));
    printf("\n");
    if (listen_file) {
        rov_endpoint_address(ep, blob, &blob_len);
        if (write_file(listen_file, blob, blob_len) != 0) {
            fprintf(stderr, "[server] cannot write %s: %s\n", listen_file, strerror(errno));
            return 1;
        }
    } else {
        if (read_file(connect_file, blob, &blob_len, 10) != 0) {
            fprintf(stderr, "[client] no address file %s after 10 s\n", connect_file);
            return 1;
        }
        if ((rc = rov_conn_connect(ep, blob, blob_len, &d.conn)) != ROV_OK) {
            fprintf(stderr, "[client] connect: %s\n", rov_status_str(rc));
            return 1;
        }
    }
    start = last_print = last_switch = now_s();
    while (!d.closed && !d.failed) {
        double t = now_s();

        if (t - start > seconds + 20) {
            printf("[%s] timed out\n", d.who);
            return 1;
        }
        if (d.conn && t - start < seconds && !d.peer_closed) {
            size_t len = msg_size(tx);

            fill(d.buf, len, tx);
            if (rov_conn_send(d.conn, (uint32_t)tx, d.buf, len,
                              &(rov_send_params_t){.flags = ROV_SEND_COPY}) == ROV_OK)
                tx++;
        } else if (d.conn && (t - start >= seconds || d.peer_closed)) {
            rov_conn_close(d.conn); /* idempotent: flushes, then closes */
        }
        if (connect_file && switch_ms > 0 && d.conn && t - last_switch > switch_ms / 1000 &&
            t - start < seconds) {
            int next = (rov_conn_rail(d.conn) + 1) % rov_context_rail_count(d.ctx);

            last_switch = t;
            if (next != rov_conn_rail(d.conn))
                rov_conn_switch(d.conn, next, "operator: fabric maintenance");
        }
        if (t - last_print >= 1.0 && d.conn) {
            rov_conn_stats_t s;

            rov_conn_stats(d.conn, &s);
            printf("[%s] %5.1fs  rail %-14s  sent %8" PRIu64 "  recv %8" PRIu64
                   "  %7.1f MB/s in  retained %6" PRIu64 " B  resent %" PRIu64 "\n",
                   d.who, t - start, rov_context_rail_name(d.ctx, s.rail), s.msgs_sent,
                   s.msgs_recv, (double)(d.rx_bytes - last_rx_bytes) / (t - last_print) / 1e6,
                   s.retained_bytes, s.msgs_resent);
            last_rx = d.next_rx;
            last_rx_bytes = d.rx_bytes;
            last_print = t;
        }
        rov_progress(d.ctx);
    }
    (void)last_rx;
    printf("[%s] done: sent %" PRIu64 " messages, received %" PRIu64 " (%.1f MB), %" PRIu64
           " bad\n", d.who, tx, d.next_rx, (double)d.rx_bytes / 1e6, d.bad);
    rov_context_destroy(d.ctx);
    return d.failed || d.bad ? 1 : 0;
}
