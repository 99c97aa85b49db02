/*
 * What a system call leaves behind: the user-space costs that follow one.
 *
 * A busy-polling receiver makes a recv() that finds nothing, over and over,
 * and the code around the call decides what the next one costs.  This
 * program makes such calls (non-blocking recv() on an empty socket pair) and
 * times, per call, what different code after it adds:
 *
 *   depth     the call made 7 function levels further down, so that 7 more
 *             returns run after it (less the same 7 levels with no system
 *             call: the calls and returns themselves);
 *   lines     16 cache lines of one page read after it;
 *   pages     16 pages read after it, one line each, within one 2 MiB region;
 *   regions   16 pages, one line each, each in a 2 MiB region of its own.
 *
 * Each variant runs 20000 calls per round, all variants one after another in
 * each of 31 rounds; the medians over the rounds are printed, in TSC ticks
 * and nanoseconds, with the cost per unit (return, line, page).  Run it
 * pinned (taskset -c 1) on an otherwise quiet machine; it asserts nothing.
 * bench/README.md, "What a system call leaves behind", has the figures of
 * these machines and what the library does with them (transport/compiler.h).
 *
 * usage: syscall-cost [ROUNDS]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#define CALLS 20000
#define TOUCH 16
#define REGION (2u << 20)
#define NOINLINE __attribute__((noinline))

static int fds[2];
static char buf[64];
static volatile char *mem;

/* The chain: level n calls level n - 1; the leaf makes the system call (or
 * not).  The empty asm keeps each level a real frame with a real return. */
#define LEVEL(name, below)                 \
    static NOINLINE int name(int x)        \
    {                                      \
        int r = below(x + 1);              \
        __asm__ volatile("" ::: "memory"); \
        return r + x;                      \
    }

static NOINLINE int sys_leaf(int x)
{
    return (int)recv(fds[0], buf, sizeof(buf), MSG_DONTWAIT) + x;
}

static NOINLINE int user_leaf(int x)
{
    __asm__ volatile("" ::: "memory");
    return x;
}

LEVEL(s2, sys_leaf) LEVEL(s3, s2) LEVEL(s4, s3) LEVEL(s5, s4) LEVEL(s6, s5) LEVEL(s7, s6)
LEVEL(s8, s7)
LEVEL(u2, user_leaf) LEVEL(u3, u2) LEVEL(u4, u3) LEVEL(u5, u4) LEVEL(u6, u5) LEVEL(u7, u6)
LEVEL(u8, u7)

enum { V_BASE, V_DEEP, V_USER1, V_USER8, V_LINES, V_PAGES, V_REGIONS, NV };

static const char *const names[NV] = {
    "recv(), 1 level", "recv(), 8 levels", "no call, 1 level", "no call, 8 levels",
    "recv() + 16 lines", "recv() + 16 pages", "recv() + 16 regions",
};

/* TOUCH reads from first on, stride apart, the j-th also shift * j bytes
 * further (a different line of each page, so no two share a cache set). */
static int touch(size_t first, size_t stride, size_t shift)
{
    int s = 0;

    for (size_t j = 0; j < TOUCH; j++)
        s += mem[first + stride * j + shift * j];
    return s;
}

static double run(int v)
{
    uint64_t t0 = __rdtsc();
    int s = 0;

    for (int i = 0; i < CALLS; i++) {
        switch (v) {
        case V_BASE: s += sys_leaf(i); break;
        case V_DEEP: s += s8(i); break;
        case V_USER1: s += user_leaf(i); break;
        case V_USER8: s += u8(i); break;
        case V_LINES: s += sys_leaf(i) + touch(0, 64, 0); break;
        case V_PAGES: s += sys_leaf(i) + touch(64 * 4096, 4096, 64); break;
        case V_REGIONS: s += sys_leaf(i) + touch(REGION, REGION, 64); break;
        }
    }
    __asm__ volatile("" ::"r"(s));
    return (double)(__rdtsc() - t0) / CALLS;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double tsc_per_ns(void)
{
    struct timespec a, b;
    uint64_t t0, t1;

    clock_gettime(CLOCK_MONOTONIC, &a);
    t0 = __rdtsc();
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000ll + (b.tv_nsec - a.tv_nsec) < 200000000);
    t1 = __rdtsc();
    return (double)(t1 - t0) / (double)((b.tv_sec - a.tv_sec) * 1000000000ll +
                                        (b.tv_nsec - a.tv_nsec));
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 31;
    size_t mem_len = (size_t)(TOUCH + 1) * REGION;
    double med[NV], per_ns;

    if (rounds < 1 || rounds > 1000) {
        fprintf(stderr, "usage: %s [ROUNDS (1-1000)]\n", argv[0]);
        return 2;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) < 0) {
        perror("socketpair");
        return 1;
    }
    mem = aligned_alloc(REGION, mem_len);
    if (!mem) {
        perror("aligned_alloc");
        return 1;
    }
    for (size_t i = 0; i < mem_len; i += 4096)
        mem[i] = 1; /* fault every page in first */
    double (*t)[NV] = calloc((size_t)rounds, sizeof(*t));
    if (!t) {
        perror("calloc");
        return 1;
    }
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < NV; v++)
            t[r][v] = run(v);
    for (int v = 0; v < NV; v++) {
        double col[1000];

        for (int r = 0; r < rounds; r++)
            col[r] = t[r][v];
        qsort(col, (size_t)rounds, sizeof(col[0]), cmp);
        med[v] = col[rounds / 2];
    }
    per_ns = tsc_per_ns();
    printf("# medians of %d rounds of %d calls; TSC %.3f GHz\n", rounds, CALLS, per_ns);
    printf("%-22s %10s %10s\n", "variant", "ticks", "ns");
    for (int v = 0; v < NV; v++)
        printf("%-22s %10.0f %10.1f\n", names[v], med[v], med[v] / per_ns);
    double ret = ((med[V_DEEP] - med[V_BASE]) - (med[V_USER8] - med[V_USER1])) / 7;
    double line = (med[V_LINES] - med[V_BASE]) / TOUCH;
    double page = (med[V_PAGES] - med[V_BASE]) / TOUCH;
    double region = (med[V_REGIONS] - med[V_BASE]) / TOUCH;
    printf("# after a system call, per unit (ns): return %.1f  line %.1f  page %.1f  "
           "page in its own 2 MiB %.1f\n",
           ret / per_ns, line / per_ns, page / per_ns, region / per_ns);
    printf("{\"test\":\"syscall-cost\",\"rounds\":%d,\"return_ns\":%.2f,\"line_ns\":%.2f,"
           "\"page_ns\":%.2f,\"region_page_ns\":%.2f}\n",
           rounds, ret / per_ns, line / per_ns, page / per_ns, region / per_ns);
    free(t);
    return 0;
}
