/*
 * What a process holds of the RDMA stack after Railover is done with it.
 *
 * Two contexts in this process connect over the configured rails (the verbs
 * rail first), exchange messages both ways, and are destroyed.  Then the
 * process must hold no /dev/infiniband descriptor, no RDMA event or
 * uverbs mapping, and no userfaultfd (the registration cache's watch): a
 * checkpointer (CRIU) cannot dump those, and the
 * checkpoint hooks rely on closing the rails to get rid of them.
 *
 *   rov_fd_release [--expect-held]
 *
 * Exit 0 when nothing is held (or, with --expect-held, when something is:
 * RAILOVER_VERBS_CM=rdmacm, whose librdmacm keeps its device contexts open
 * for the life of the process).  Prints what it found either way.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "railover/railover.h"

#define MSGS 200

struct side {
    rov_context_t *ctx;
    rov_conn_t *conn;
    int received, sent, up;
};

static int zc_pending;   /* zero-copy sends not yet completed */
static int destroying;   /* rov_context_destroy() cancels what is left */

static void on_sent(void *arg, rov_status_t status)
{
    (void)arg;
    zc_pending--;
    if (status != ROV_OK && !(destroying && status == ROV_ERR_CANCELED)) {
        fprintf(stderr, "zero-copy send completed with %s\n", rov_status_str(status));
        exit(1);
    }
}

/* Send what the window takes: sizes 1, 4097 and 8193 B (the last zero-copy:
 * on the verbs rail the peer RDMA-reads it from buf). */
static void pump(struct side *s)
{
    static char buf[2 * 4096 + 1];
    rov_send_params_t zc = {.cb = on_sent};

    while (s->up && s->sent < MSGS) {
        size_t len = (size_t)(s->sent % 3) * 4096 + 1;

        rov_status_t st = rov_conn_send(s->conn, (uint32_t)s->sent, buf, len, &zc);

        if (st < 0)
            return;
        if (st == ROV_INPROGRESS)
            zc_pending++;
        s->sent++;
    }
}

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
    struct side *s = arg;

    (void)conn;
    (void)data;
    if (tag != (uint32_t)s->received || len != (size_t)(tag % 3) * 4096 + 1) {
        fprintf(stderr, "message %d: tag %u len %zu\n", s->received, tag, len);
        exit(1);
    }
    s->received++;
}

static void on_event(void *arg, const rov_event_t *ev)
{
    struct side *s = arg;

    if (ev->type == ROV_EVENT_CONN_ACCEPTED || ev->type == ROV_EVENT_CONN_ESTABLISHED) {
        s->conn = ev->conn;
        s->up = 1;
    } else if (ev->type == ROV_EVENT_CONN_ERROR) {
        fprintf(stderr, "connection error: %s\n", ev->reason ? ev->reason : "?");
        exit(1);
    }
}

/* Count descriptors and mappings that belong to the RDMA stack. */
static int rdma_held(int verbose)
{
    char path[300], target[256], line[512];
    struct dirent *d;
    DIR *dir = opendir("/proc/self/fd");
    FILE *maps;
    int n = 0;

    while (dir && (d = readdir(dir))) {
        ssize_t k;

        snprintf(path, sizeof(path), "/proc/self/fd/%s", d->d_name);
        k = readlink(path, target, sizeof(target) - 1);
        if (k <= 0)
            continue;
        target[k] = 0;
        if (strstr(target, "/dev/infiniband") || strstr(target, "infinibandevent") ||
            strstr(target, "rdma_cm") || strstr(target, "userfaultfd")) {
            if (verbose)
                printf("  fd %s -> %s\n", d->d_name, target);
            n++;
        }
    }
    if (dir)
        closedir(dir);
    maps = fopen("/proc/self/maps", "r");
    while (maps && fgets(line, sizeof(line), maps)) {
        if (strstr(line, "/dev/infiniband")) {
            if (verbose)
                printf("  mapping %s", line);
            n++;
        }
    }
    if (maps)
        fclose(maps);
    return n;
}

int main(int argc, char **argv)
{
    int expect_held = argc > 1 && strcmp(argv[1], "--expect-held") == 0;
    struct side a = {0}, b = {0};
    rov_context_params_t pa = {.recv_cb = on_recv, .event_cb = on_event, .arg = &a};
    rov_context_params_t pb = {.recv_cb = on_recv, .event_cb = on_event, .arg = &b};
    rov_endpoint_t *ea, *eb;
    unsigned char addr[1024];
    size_t alen = sizeof(addr);
    int held;

    if (rov_context_create(&pa, &a.ctx) != ROV_OK || rov_context_create(&pb, &b.ctx) != ROV_OK ||
        rov_endpoint_create(a.ctx, &ea) != ROV_OK || rov_endpoint_create(b.ctx, &eb) != ROV_OK ||
        rov_endpoint_address(ea, addr, &alen) != ROV_OK ||
        rov_conn_connect(eb, addr, alen, &b.conn) != ROV_OK) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    printf("while connected: %d RDMA descriptors/mappings\n", rdma_held(0));
    for (int spin = 0; spin < 2000000 && (a.received < MSGS || b.received < MSGS); spin++) {
        rov_progress(a.ctx);
        rov_progress(b.ctx);
        pump(&a);
        pump(&b);
        if (spin % 64 == 63)
            usleep(100);
    }
    if (a.received < MSGS || b.received < MSGS) {
        fprintf(stderr, "only %d/%d messages arrived\n", a.received, b.received);
        return 1;
    }
    /* Let the last acknowledgements arrive, so that every zero-copy send
     * completes normally (bounded; destroy cancels what is left). */
    for (int spin = 0; spin < 200000 && zc_pending > 0; spin++) {
        rov_progress(a.ctx);
        rov_progress(b.ctx);
        if (spin % 64 == 63)
            usleep(100);
    }
    printf("exchanged %d messages each way on rail %d\n", MSGS, rov_conn_rail(b.conn));
    destroying = 1;
    rov_context_destroy(a.ctx);
    rov_context_destroy(b.ctx);
    held = rdma_held(1);
    printf("after rov_context_destroy: %d RDMA descriptors/mappings held\n", held);
    return expect_held ? !(held > 0) : held != 0;
}
