/*
 * gapprobe: an LD_PRELOAD probe that times what a busy-polling ping-pong
 * does in user space between its system calls, whatever the program.
 *
 * It wraps recv() and send() (the calls `railover perf` makes on both of
 * its paths, raw TCP and Railover's TCP rail) and reads the TSC around them:
 *
 *   recv->send   from a recv() that returned a small message (< 100 bytes)
 *                to the next send(): the receiving side's whole reaction
 *                (library receive path, application, library send path);
 *   empty-user   from a recv() that found nothing to the next recv(): what
 *                one idle poll costs besides the system call itself;
 *   empty-iter   the same from call to call, the system call included;
 *   rtt          from one received small message to the next.
 *
 * At exit it prints one line to stderr, medians in microseconds (the TSC is
 * calibrated against CLOCK_MONOTONIC then):
 *
 *   GAPPROBE recv->send 0.371 empty-user 0.180 empty-iter 1.297 rtt 13.350
 *
 * Built and used by bench/user-gap.py; not part of the library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <x86intrin.h>

#define GP_SAMPLES 200000
#define GP_SMALL 100

enum { GP_REACT, GP_EMPTY_USER, GP_EMPTY_ITER, GP_RTT, GP_NSEG };

static const char *const gp_names[GP_NSEG] = {"recv->send", "empty-user", "empty-iter", "rtt"};
static uint32_t gp_seg[GP_NSEG][GP_SAMPLES];
static unsigned gp_count[GP_NSEG];
static uint64_t gp_got_msg, gp_prev_msg, gp_last_entry, gp_last_return;
static int gp_last_empty;
static ssize_t (*gp_recv)(int, void *, size_t, int);
static ssize_t (*gp_send)(int, const void *, size_t, int);

static void gp_add(int seg, uint64_t ticks)
{
    if (gp_count[seg] < GP_SAMPLES)
        gp_seg[seg][gp_count[seg]++] = (uint32_t)ticks;
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    uint64_t entry = __rdtsc();
    ssize_t n;

    if (!gp_recv)
        gp_recv = (ssize_t (*)(int, void *, size_t, int))dlsym(RTLD_NEXT, "recv");
    if (gp_last_empty && gp_last_entry) {
        gp_add(GP_EMPTY_ITER, entry - gp_last_entry);
        gp_add(GP_EMPTY_USER, entry - gp_last_return);
    }
    gp_last_entry = entry;
    n = gp_recv(fd, buf, len, flags);
    gp_last_return = __rdtsc();
    gp_last_empty = n < 0;
    if (n > 0 && n < GP_SMALL) {
        if (gp_prev_msg)
            gp_add(GP_RTT, gp_last_return - gp_prev_msg);
        gp_prev_msg = gp_got_msg = gp_last_return;
    }
    return n;
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    if (!gp_send)
        gp_send = (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    if (gp_got_msg && len < GP_SMALL) {
        gp_add(GP_REACT, __rdtsc() - gp_got_msg);
        gp_got_msg = 0;
    }
    return gp_send(fd, buf, len, flags);
}

static int gp_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

__attribute__((destructor)) static void gp_report(void)
{
    struct timespec t0, t1;
    uint64_t c0;
    double ns, ticks_per_ns;

    if (gp_count[GP_REACT] < 1000)
        return; /* not a ping-pong (a server's bootstrap, a helper) */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    c0 = __rdtsc();
    do {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    } while (ns < 2e7);
    ticks_per_ns = (double)(__rdtsc() - c0) / ns;
    fprintf(stderr, "GAPPROBE");
    for (int s = 0; s < GP_NSEG; s++) {
        if (!gp_count[s])
            continue;
        qsort(gp_seg[s], gp_count[s], sizeof(gp_seg[s][0]), gp_cmp);
        fprintf(stderr, " %s %.3f", gp_names[s],
                gp_seg[s][gp_count[s] / 2] / ticks_per_ns / 1000.0);
    }
    fprintf(stderr, "\n");
}
