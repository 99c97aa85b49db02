/*
 * One-sided reads (rov_mem_register(), rov_conn_get()) end to end.
 *
 * Two contexts in this process, b connected to a over the configured rails
 * (the verbs rail first, a second rail after it).  a registers a buffer
 * with a pattern, b reads pieces of it into its own registered buffer and
 * checks every byte:
 *   sizes      1 B .. 6 MiB, at odd offsets, one at a time (with a small
 *              RAILOVER_MAX_MSG, the larger ones are read in parts: one
 *              completion each)
 *   burst      32 reads at once (more than the QP's outstanding reads)
 *   args       a local range outside its registration, a malformed key
 *   moved      on the second rail (forced there) a read is refused
 *              with ROV_ERR_UNSUPPORTED (the caller sends instead), or,
 *              when that rail reads too (tcp: by message), done right;
 *              back on the first, reads work again
 *   bad_key    a read with a wrong remote key, with good reads queued
 *              behind it: every callback runs once, the bad one with an
 *              error; the channel fails, the connection does not (it fails
 *              over, then back), and reads work again
 *   reopened   both contexts quiesce, close their rails and reopen (each
 *              told the other's new address): the registrations stay,
 *              under new keys; a key from before the close is refused
 *              with ROV_ERR_UNSUPPORTED (it never reaches the rail, where
 *              the number may name other memory now); reads work again
 *   destroy    reads in flight when the context is destroyed complete as
 *              cancelled
 *
 *   rov_rdma_get            (RAILOVER_RAILS with a rail that reads first:
 *                            verbs, or tcp, which reads by message)
 *   rov_rdma_get --no-rdma  (no rail reads, e.g. loop: register and the
 *                            limit say so)
 *   rov_rdma_get --bond-fault
 *                           (RAILOVER_BOND=on, RAILOVER_FAULT failing rail 1
 *                            as its first read completes) only this: once
 *                            rail 1 joined the bond, 4 reads of 2 MiB at
 *                            once, in pieces over both members; rail 1's
 *                            channel fails under its pieces (so pieces went
 *                            there), rail 0 reads them again: every read
 *                            completes once, done, with the data right;
 *                            rail 1 left the bond and joins it again
 *
 * Exit 0 when every case passed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "railover/railover.h"

#define BUF (8u << 20)

struct side {
    rov_context_t *ctx;
    rov_conn_t *conn;
    int up;
};

struct read {
    int done;
    rov_status_t status;
};

static struct side a, b;
static uint8_t *src, *dst;
static int failures;

static void on_recv(void *arg, rov_conn_t *conn, uint32_t tag, const void *data, size_t len)
{
}

static void on_event(void *arg, const rov_event_t *ev)
{
    struct side *s = arg;

    if (ev->type == ROV_EVENT_CONN_ACCEPTED || ev->type == ROV_EVENT_CONN_ESTABLISHED) {
        s->conn = ev->conn;
        s->up = 1;
    } else if (ev->type == ROV_EVENT_CONN_ERROR) {
        fprintf(stderr, "FAIL: the connection failed: %s\n", ev->reason ? ev->reason : "?");
        exit(1);
    } else if (ev->type == ROV_EVENT_CONN_RAIL_SWITCH) {
        printf("  %s moved from rail %d to %d (%s)\n", s == &a ? "a" : "b", ev->rail_from,
               ev->rail_to, rov_reason_str(ev->code));
    }
}

static void on_read(void *arg, rov_status_t status)
{
    struct read *r = arg;

    r->done++;
    r->status = status;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void spin(void)
{
    rov_progress(a.ctx);
    rov_progress(b.ctx);
}

/* Progress until *flag (or for at most limit seconds); false on timeout. */
static int wait_for(const int *flag, int want, double limit)
{
    double end = now_s() + limit;

    while (*flag < want && now_s() < end)
        spin();
    return *flag >= want;
}

static int wait_rail(int rail, double limit)
{
    double end = now_s() + limit;

    while (rov_conn_rail(b.conn) != rail && now_s() < end)
        spin();
    /* a while more: the peer's side and the channel settle */
    for (double t = now_s() + 0.05; now_s() < t;)
        spin();
    return rov_conn_rail(b.conn) == rail;
}

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok)
        failures++;
}

/* One read of len bytes from src+off to dst+doff, waited for and checked. */
static int read_one(rov_mem_t *mb, const uint8_t *key, size_t off, size_t doff, size_t len)
{
    struct read r = {0};
    rov_status_t st;

    memset(dst + doff, 0, len);
    st = rov_conn_get(b.conn, dst + doff, mb, (uint64_t)(uintptr_t)(src + off), key, len,
                      on_read, &r);
    if (st != ROV_INPROGRESS) {
        fprintf(stderr, "  read of %zu bytes: %s\n", len, rov_status_str(st));
        return 0;
    }
    if (!wait_for(&r.done, 1, 30) || r.status != ROV_OK) {
        fprintf(stderr, "  read of %zu bytes: %s\n", len,
                r.done ? rov_status_str(r.status) : "no completion in 30 s");
        return 0;
    }
    if (memcmp(dst + doff, src + off, len) != 0) {
        fprintf(stderr, "  read of %zu bytes at %zu: wrong data\n", len, off);
        return 0;
    }
    return r.done == 1;
}

static uint64_t bond_stat(int leaves)
{
    rov_conn_stats_t st;

    rov_conn_stats(b.conn, &st);
    return leaves ? st.bond_leaves : st.bond_joins;
}

static int wait_bond_joins(uint64_t want, double limit)
{
    double end = now_s() + limit;

    while (bond_stat(0) < want && now_s() < end)
        spin();
    return bond_stat(0) >= want;
}

/* --bond-fault: see the top. */
static int bond_fault(rov_mem_t *mb, const uint8_t *key)
{
    enum { N = 4, LEN = 2u << 20 }; /* N * LEN = BUF: the reads land apart */
    struct read r[N];
    uint64_t joins;
    int ok = 1;

    /* The bond forms with both rails joining at once (bond_joins 2). */
    if (!wait_bond_joins(1, 30)) {
        fprintf(stderr, "FAIL: rail 1 never joined the bond (RAILOVER_BOND=on?)\n");
        return 1;
    }
    joins = bond_stat(0);
    memset(r, 0, sizeof(r));
    memset(dst, 0, (size_t)N * LEN);
    for (int i = 0; i < N; i++)
        ok &= rov_conn_get(b.conn, dst + (size_t)i * LEN, mb,
                           (uint64_t)(uintptr_t)(src + (size_t)i * 4099), key, LEN, on_read,
                           &r[i]) == ROV_INPROGRESS;
    for (int i = 0; i < N && ok; i++)
        ok &= wait_for(&r[i].done, 1, 30);
    for (double t = now_s() + 0.2; now_s() < t;)
        spin(); /* no second callback */
    for (int i = 0; i < N; i++) {
        if (r[i].done && r[i].status != ROV_OK)
            printf("  read %d: %s\n", i, rov_status_str(r[i].status));
        ok &= r[i].done == 1 && r[i].status == ROV_OK &&
              memcmp(dst + (size_t)i * LEN, src + (size_t)i * 4099, LEN) == 0;
    }
    check(ok, "bond-fault: reads in pieces over both members, rail 1 failing under some: "
              "every read done once, data right");
    check(bond_stat(1) >= 1, "bond-fault: rail 1 carried pieces, failed and left the bond");
    /* joins only grow past what they were when the bond formed by a rejoin */
    check(wait_bond_joins(joins + 1, 60) && read_one(mb, key, 3, 0, 2 * LEN),
          "bond-fault: rail 1 joined the bond again, reads work");
    return failures != 0;
}

static int wait_stage(rov_context_stage_t stage, double limit)
{
    double end = now_s() + limit;

    while ((rov_context_stage(a.ctx) != stage || rov_context_stage(b.ctx) != stage) &&
           now_s() < end)
        spin();
    return rov_context_stage(a.ctx) == stage && rov_context_stage(b.ctx) == stage;
}

/* Descriptors of /dev/infiniband this process holds. */
static int rdma_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char path[300], target[256];
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        ssize_t len;

        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        len = readlink(path, target, sizeof(target) - 1);
        if (len > 0) {
            target[len] = '\0';
            n += strncmp(target, "/dev/infiniband/", 16) == 0;
        }
    }
    closedir(d);
    return n;
}

/* Both contexts through quiesce, close and reopen; each connection then
 * given the other endpoint's new address.  With the rails closed, no
 * /dev/infiniband descriptor may be left although registrations are held
 * (but with RAILOVER_VERBS_CM=rdmacm: librdmacm keeps its own). */
static int cycle_rails(rov_endpoint_t *ea, rov_endpoint_t *eb)
{
    unsigned char aa[1024], ab[1024];
    size_t la = sizeof(aa), lb = sizeof(ab);
    int ok;

    ok = rov_context_quiesce(a.ctx) >= 0 && rov_context_quiesce(b.ctx) >= 0 &&
         wait_stage(ROV_CONTEXT_QUIESCED, 30);
    ok = ok && rov_context_close_rails(a.ctx) == ROV_OK &&
         rov_context_close_rails(b.ctx) == ROV_OK;
    if (ok) {
        const char *cm = getenv("RAILOVER_VERBS_CM");
        int held = rdma_fds();

        printf("  rails closed, registrations held: %d /dev/infiniband descriptor(s) left\n",
               held);
        if (!cm || strcmp(cm, "rdmacm") != 0)
            check(held == 0, "reopened: with the rails closed no /dev/infiniband descriptor "
                             "is left, registrations held");
    }
    ok = ok && rov_context_reopen(a.ctx) >= 0 && rov_context_reopen(b.ctx) >= 0 &&
         rov_endpoint_address(ea, aa, &la) == ROV_OK &&
         rov_endpoint_address(eb, ab, &lb) == ROV_OK &&
         rov_conn_set_peer_address(b.conn, aa, la) == ROV_OK &&
         rov_conn_set_peer_address(a.conn, ab, lb) == ROV_OK;
    return ok && wait_stage(ROV_CONTEXT_RUNNING, 60) && wait_rail(0, 60);
}

static int no_rdma(void)
{
    rov_context_params_t pa = {.recv_cb = on_recv, .event_cb = on_event, .arg = &a};
    rov_limits_t lim;
    rov_mem_t *m = NULL;
    static uint8_t buf[4096];

    if (rov_context_create(&pa, &a.ctx) != ROV_OK) {
        fprintf(stderr, "FAIL: context\n");
        return 1;
    }
    rov_context_limits(a.ctx, &lim);
    check(lim.get_max == 0, "no rail reads remote memory: get_max is 0");
    check(rov_mem_register(a.ctx, buf, sizeof(buf), &m) == ROV_ERR_UNSUPPORTED && !m,
          "rov_mem_register() answers ROV_ERR_UNSUPPORTED");
    rov_context_destroy(a.ctx);
    return failures != 0;
}

int main(int argc, char **argv)
{
    rov_context_params_t pa = {.recv_cb = on_recv, .event_cb = on_event, .arg = &a};
    rov_context_params_t pb = {.recv_cb = on_recv, .event_cb = on_event, .arg = &b};
    rov_endpoint_t *ea, *eb;
    unsigned char addr[1024];
    size_t alen = sizeof(addr);
    uint8_t key[ROV_MEM_KEY_LEN], bad[ROV_MEM_KEY_LEN];
    rov_mem_t *ma, *mb;
    rov_limits_t lim;
    rov_status_t st;
    struct read burst[32], r;
    int ok;

    if (argc > 1 && strcmp(argv[1], "--no-rdma") == 0)
        return no_rdma();
    src = aligned_alloc(4096, BUF);
    dst = aligned_alloc(4096, BUF);
    if (!src || !dst)
        return 2;
    for (size_t i = 0; i < BUF; i++)
        src[i] = (uint8_t)(i * 131 + (i >> 12) * 7 + 1);
    if (rov_context_create(&pa, &a.ctx) != ROV_OK || rov_context_create(&pb, &b.ctx) != ROV_OK ||
        rov_endpoint_create(a.ctx, &ea) != ROV_OK || rov_endpoint_create(b.ctx, &eb) != ROV_OK ||
        rov_endpoint_address(ea, addr, &alen) != ROV_OK ||
        rov_conn_connect(eb, addr, alen, &b.conn) != ROV_OK) {
        fprintf(stderr, "FAIL: setup\n");
        return 1;
    }
    if (!wait_for(&a.up, 1, 60) || !wait_for(&b.up, 1, 60) || !wait_rail(0, 30)) {
        fprintf(stderr, "FAIL: no connection on rail 0 in time\n");
        return 1;
    }
    rov_context_limits(b.ctx, &lim);
    printf("connected on %s\n", rov_context_rail_name(b.ctx, 0));
    check(lim.get_max == SIZE_MAX, "a rail that reads: a read of any length (get_max)");
    if (rov_mem_register(a.ctx, src, BUF, &ma) != ROV_OK ||
        rov_mem_register(b.ctx, dst, BUF, &mb) != ROV_OK) {
        fprintf(stderr, "FAIL: rov_mem_register\n");
        return 1;
    }
    rov_mem_key(ma, key);
    if (argc > 1 && strcmp(argv[1], "--bond-fault") == 0) {
        int rc = bond_fault(mb, key);

        rov_mem_deregister(mb);
        rov_mem_deregister(ma);
        rov_context_destroy(b.ctx);
        rov_context_destroy(a.ctx);
        free(src);
        free(dst);
        printf("%s\n", rc ? "FAILED" : "all cases passed");
        return rc;
    }

    /* sizes */
    ok = 1;
    {
        const size_t sizes[] = {1, 7, 4096, 4099, 65536, 1u << 20, 4u << 20, (6u << 20) + 3};

        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
            ok &= read_one(mb, key, 13 * i + 1, 3 * i, sizes[i]);
    }
    check(ok, "sizes: 1 B .. 6 MiB at odd offsets, data right");

    /* burst */
    memset(dst, 0, BUF);
    memset(burst, 0, sizeof(burst));
    ok = 1;
    for (int i = 0; i < 32; i++)
        ok &= rov_conn_get(b.conn, dst + (size_t)i * 65536, mb,
                           (uint64_t)(uintptr_t)(src + (size_t)(31 - i) * 65536), key, 65536,
                           on_read, &burst[i]) == ROV_INPROGRESS;
    for (int i = 0; i < 32 && ok; i++) {
        ok &= wait_for(&burst[i].done, 1, 30) && burst[i].done == 1 && burst[i].status == ROV_OK;
        ok &= memcmp(dst + (size_t)i * 65536, src + (size_t)(31 - i) * 65536, 65536) == 0;
    }
    check(ok, "burst: 32 reads of 64 KiB at once, each completed once, data right");

    /* args */
    memcpy(bad, key, sizeof(bad));
    bad[0] ^= 0xff;
    check(rov_conn_get(b.conn, dst + BUF - 8, mb, (uint64_t)(uintptr_t)src, key, 16, on_read,
                       &r) == ROV_ERR_INVAL,
          "args: a local range outside its registration is refused (ROV_ERR_INVAL)");
    check(rov_conn_get(b.conn, dst, mb, (uint64_t)(uintptr_t)src, bad, 16, on_read, &r) ==
              ROV_ERR_INVAL,
          "args: a malformed key is refused (ROV_ERR_INVAL)");

    /* moved */
    if (rov_context_rail_count(b.ctx) > 1) {
        st = rov_conn_force_fallback(b.conn, 1);
        ok = st == ROV_OK && wait_rail(1, 30);
        if (strncmp(rov_context_rail_name(b.ctx, 1), "tcp", 3) == 0)
            check(ok && read_one(mb, key, 9, 2, 65536),
                  "moved: on the second rail (tcp, which reads by message) reads work");
        else {
            st = ok ? rov_conn_get(b.conn, dst, mb, (uint64_t)(uintptr_t)src, key, 4096,
                                   on_read, &r)
                    : ROV_ERR_IO;
            check(ok && st == ROV_ERR_UNSUPPORTED,
                  "moved: on the second rail a read is refused with ROV_ERR_UNSUPPORTED");
        }
        st = rov_conn_force_fallback(b.conn, 0);
        ok = st == ROV_OK && wait_rail(0, 30);
        check(ok && read_one(mb, key, 100, 0, 1u << 20), "moved: back on the first, reads work");
    }

    /* bad_key: a wrong rkey (the mask is right) with good reads behind it */
    memcpy(bad, key, sizeof(bad));
    bad[8] ^= 0x5a; /* rail 0's key (transport/mem.c: "Key layout") */
    bad[9] ^= 0xa5;
    memset(burst, 0, sizeof(burst));
    ok = rov_conn_get(b.conn, dst, mb, (uint64_t)(uintptr_t)src, bad, 4096, on_read,
                      &burst[0]) == ROV_INPROGRESS;
    for (int i = 1; i < 4; i++)
        ok &= rov_conn_get(b.conn, dst + (size_t)i * 65536, mb, (uint64_t)(uintptr_t)src, key,
                           65536, on_read, &burst[i]) == ROV_INPROGRESS;
    for (int i = 0; i < 4 && ok; i++)
        ok &= wait_for(&burst[i].done, 1, 30) && burst[i].done == 1;
    for (double t = now_s() + 0.2; now_s() < t;)
        spin(); /* no second callback */
    for (int i = 0; i < 4; i++)
        ok &= burst[i].done == 1;
    check(ok && burst[0].status != ROV_OK,
          "bad_key: every callback ran once, the bad read's with an error");
    printf("  statuses: %s %s %s %s\n", rov_status_str(burst[0].status),
           rov_status_str(burst[1].status), rov_status_str(burst[2].status),
           rov_status_str(burst[3].status));
    ok = wait_rail(0, 60) && read_one(mb, key, 5, 0, 1u << 20);
    check(ok, "bad_key: the connection lives, is back on the first rail, and reads work");

    /* reopened */
    memcpy(bad, key, sizeof(bad));
    ok = cycle_rails(ea, eb);
    check(ok, "reopened: both contexts quiesced, closed their rails, reopened, back on rail 0");
    rov_mem_key(ma, key);
    check(memcmp(bad, key, sizeof(key)) != 0, "reopened: the registration has a new key");
    check(ok && rov_conn_get(b.conn, dst, mb, (uint64_t)(uintptr_t)src, bad, 4096, on_read,
                             &r) == ROV_ERR_UNSUPPORTED,
          "reopened: a key from before the close is refused (ROV_ERR_UNSUPPORTED)");
    /* Both sides reconnected at once: the channel of the side whose
     * endpoint id is larger is given up for the other's (conn.c), and a
     * read in flight on it ends with an error, as any read whose channel
     * goes (railover.h: the caller asks again, or sends). */
    if (ok && !read_one(mb, key, 77, 1, 1u << 20)) {
        printf("  a read right after the reopen ended with its channel: again\n");
        ok = wait_rail(0, 60) && read_one(mb, key, 77, 1, 1u << 20);
    }
    check(ok, "reopened: the same registrations, both re-registered: reads work");
    wait_rail(0, 60);

    /* destroy */
    rov_mem_deregister(ma);
    memset(burst, 0, sizeof(burst));
    ok = 1;
    {
        rov_mem_t *ma2;

        ok &= rov_mem_register(a.ctx, src, BUF, &ma2) == ROV_OK;
        rov_mem_key(ma2, key);
        for (int i = 0; i < 8 && ok; i++)
            ok &= rov_conn_get(b.conn, dst + (size_t)i * (1u << 20), mb,
                               (uint64_t)(uintptr_t)src, key, 1u << 20, on_read,
                               &burst[i]) == ROV_INPROGRESS;
        rov_mem_deregister(mb);
        rov_context_destroy(b.ctx);
        for (int i = 0; i < 8; i++)
            ok &= burst[i].done == 1 &&
                  (burst[i].status == ROV_OK || burst[i].status == ROV_ERR_CANCELED);
        rov_mem_deregister(ma2);
    }
    check(ok, "destroy: reads in flight complete once, as done or cancelled");
    rov_context_destroy(a.ctx);
    free(src);
    free(dst);
    printf("%s\n", failures ? "FAILED" : "all cases passed");
    return failures != 0;
}
