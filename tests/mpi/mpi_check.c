/*
 * rov_mpi_check: MPI programs that check their own results, for the MPI
 * tier (tests/mpi/run.sh runs them under --mca btl self,railover).
 *
 * Every payload is a pattern of (sender, receiver, tag, size, index) and is
 * compared byte for byte; a mismatch, a wrong source/tag/count or a failed
 * MPI call prints "FAIL ..." and makes the job exit 1.
 *
 * Usage: rov_mpi_check TEST...   (ring sizes alltoall anysource nonblocking
 *                                 halo threads soak hold)
 * soak exchanges checked messages with the pair partner for
 * $ROV_MPI_SOAK_S seconds (default 6), for a fault to be made meanwhile,
 * or until the file $ROV_MPI_SOAK_STOP (on rank 0's host) exists, if that
 * comes first; every rank prints its pid, rank 0 "soak: started" when the
 * traffic runs.
 * hold: every rank prints "hold: rank R pid P"; rank 0 then waits, without
 * calling MPI, until the file $ROV_MPI_HOLD_FILE exists (for a limit to be
 * set on it from outside before its first connection); no barrier follows
 * unless $ROV_MPI_HOLD_BARRIER is set, so that rank 0 connects first.  With
 * the barrier, the other ranks first wait for $ROV_MPI_HOLD_FILE.peers, so
 * that they connect to rank 0 only once its limit is set.
 *
 * After each test but soak (whose length is a time) and hold, rank 0 prints
 * "result: TEST HEX": the sum over ranks of what they received (a hash of
 * every payload's bytes with its source, destination, tag and size) and
 * computed (the ring's token, the reduction's and the stencil's totals),
 * independent of arrival order.  The same job on Open MPI's own transports
 * must print the same lines (tests/mpi/run.sh compares them).
 */
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, nprocs, failures;
static uint64_t digest; /* this rank's part of the current test's result */

/* Fold a received payload or a computed value into the result: a sum, so
 * that the order of arrival (MPI_ANY_SOURCE, threads) does not matter. */
static void add_result(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    __atomic_fetch_add(&digest, h, __ATOMIC_RELAXED);
}

static void __attribute__((format(printf, 1, 2))) fail(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "FAIL [rank %d]: ", rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    failures++;
}

static uint8_t pattern(int from, int to, int tag, size_t size, size_t i)
{
    return (uint8_t) (from * 131 + to * 61 + tag * 17 + size * 7 + i * 13 + (i >> 8));
}

static void fill(uint8_t *buf, int from, int to, int tag, size_t size)
{
    for (size_t i = 0; i < size; i++)
        buf[i] = pattern(from, to, tag, size, i);
}

/* Compare, naming the first wrong byte; fold the bytes as received into
 * the result (FNV-1a over the payload, keyed by its envelope). */
static void check(const uint8_t *buf, int from, int to, int tag, size_t size, const char *what)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ ((uint64_t) from << 48 ^ (uint64_t) to << 32 ^
                                          (uint64_t) (uint32_t) tag) * 31 ^ size;
    size_t bad = size;

    for (size_t i = 0; i < size; i++) {
        h = (h ^ buf[i]) * 0x100000001b3ULL;
        if (buf[i] != pattern(from, to, tag, size, i) && bad == size)
            bad = i;
    }
    add_result(h);
    if (bad < size)
        fail("%s: %zu-byte message from rank %d, tag %d: byte %zu is 0x%02x, expected 0x%02x",
             what, size, from, tag, bad, buf[bad], pattern(from, to, tag, size, bad));
}

static void check_status(const MPI_Status *st, int from, int tag, size_t size, const char *what)
{
    int count;

    MPI_Get_count(st, MPI_BYTE, &count);
    if (st->MPI_SOURCE != from || st->MPI_TAG != tag || (size_t) count != size)
        fail("%s: got source %d tag %d count %d, expected source %d tag %d count %zu", what,
             st->MPI_SOURCE, st->MPI_TAG, count, from, tag, size);
}

/* A token around the ring, 100 laps, each rank adding its rank. */
static void test_ring(void)
{
    int next = (rank + 1) % nprocs, prev = (rank + nprocs - 1) % nprocs;
    long token = 0, expect = 0;

    for (int lap = 0; lap < 100; lap++) {
        if (rank == 0) {
            MPI_Send(&token, 1, MPI_LONG, next, lap, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += rank;
            MPI_Send(&token, 1, MPI_LONG, next, lap, MPI_COMM_WORLD);
        }
        expect += (long) nprocs * (nprocs - 1) / 2;
    }
    if (rank == 0)
        add_result((uint64_t) token);
    if (rank == 0 && token != expect)
        fail("ring: token %ld after 100 laps, expected %ld", token, expect);
}

/* Every size class ob1 has (empty, eager, rendezvous, pipelined
 * fragments), 0 B to 64 MiB, between rank pairs both ways. */
static void test_sizes(void)
{
    static const size_t sizes[] = {0, 1, 7, 64, 1000, 4096, 8191, 8192, 8193, 65536,
                                   262143, 262144, 1048577, 4u << 20, 16u << 20,
                                   64u << 20};
    size_t max = 64u << 20;
    uint8_t *sbuf = malloc(max), *rbuf = malloc(max);
    int peer = rank ^ 1;

    if (!sbuf || !rbuf) {
        fail("sizes: out of memory");
        goto out;
    }
    if (peer >= nprocs)
        goto out;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        MPI_Status st;

        fill(sbuf, rank, peer, (int) k, n);
        memset(rbuf, 0xee, n);
        MPI_Sendrecv(sbuf, (int) n, MPI_BYTE, peer, (int) k, rbuf, (int) n, MPI_BYTE, peer,
                     (int) k, MPI_COMM_WORLD, &st);
        check_status(&st, peer, (int) k, n, "sizes");
        check(rbuf, peer, rank, (int) k, n, "sizes");
    }
out:
    free(sbuf);
    free(rbuf);
}

/* Every rank sends every other rank 64 KiB at once (MPI_Alltoall), then
 * messages of a different size per pair (MPI_Alltoallv). */
static void test_alltoall(void)
{
    size_t block = 65536;
    uint8_t *sbuf = malloc(block * nprocs), *rbuf = malloc(block * nprocs);
    int *scount = calloc(nprocs, sizeof(int)), *sdisp = calloc(nprocs, sizeof(int));
    int *rcount = calloc(nprocs, sizeof(int)), *rdisp = calloc(nprocs, sizeof(int));

    if (!sbuf || !rbuf || !scount || !sdisp || !rcount || !rdisp) {
        fail("alltoall: out of memory");
        goto out;
    }
    for (int p = 0; p < nprocs; p++)
        fill(sbuf + p * block, rank, p, 0, block);
    MPI_Alltoall(sbuf, (int) block, MPI_BYTE, rbuf, (int) block, MPI_BYTE, MPI_COMM_WORLD);
    for (int p = 0; p < nprocs; p++)
        check(rbuf + p * block, p, rank, 0, block, "alltoall");
    for (int p = 0; p < nprocs; p++) {
        scount[p] = (rank * 977 + p * 331) % (int) block;
        sdisp[p] = p * (int) block;
        rcount[p] = (p * 977 + rank * 331) % (int) block;
        rdisp[p] = p * (int) block;
        fill(sbuf + sdisp[p], rank, p, 1, (size_t) scount[p]);
    }
    MPI_Alltoallv(sbuf, scount, sdisp, MPI_BYTE, rbuf, rcount, rdisp, MPI_BYTE, MPI_COMM_WORLD);
    for (int p = 0; p < nprocs; p++)
        check(rbuf + rdisp[p], p, rank, 1, (size_t) rcount[p], "alltoallv");
out:
    free(sbuf);
    free(rbuf);
    free(scount);
    free(sdisp);
    free(rcount);
    free(rdisp);
}

/* Rank 0 receives from MPI_ANY_SOURCE, and picks tags out of order: every
 * other rank sends tags 0..9 (sizes by tag), rank 0 asks for 9 first. */
static void test_anysource(void)
{
    enum { NTAGS = 10 };
    static uint8_t sbuf[NTAGS][20000];
    uint8_t buf[20000];

    if (rank != 0) {
        /* Non-blocking: a rendezvous-sized send completes only once rank 0
         * matches it, and rank 0 matches the last tag first. */
        MPI_Request req[NTAGS];

        for (int t = 0; t < NTAGS; t++) {
            size_t n = (size_t) t * 2000;

            fill(sbuf[t], rank, 0, t, n);
            MPI_Isend(sbuf[t], (int) n, MPI_BYTE, 0, t, MPI_COMM_WORLD, &req[t]);
        }
        MPI_Waitall(NTAGS, req, MPI_STATUSES_IGNORE);
        return;
    }
    for (int t = NTAGS - 1; t >= 0; t--) {
        int seen[64] = {0};

        for (int k = 1; k < nprocs; k++) {
            MPI_Status st;
            int count;

            MPI_Recv(buf, sizeof(buf), MPI_BYTE, MPI_ANY_SOURCE, t, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            if (st.MPI_TAG != t || st.MPI_SOURCE < 1 || st.MPI_SOURCE >= nprocs ||
                (st.MPI_SOURCE < 64 && seen[st.MPI_SOURCE]++)) {
                fail("anysource: tag %d from %d (duplicate or wrong)", st.MPI_TAG, st.MPI_SOURCE);
                continue;
            }
            check_status(&st, st.MPI_SOURCE, t, (size_t) t * 2000, "anysource");
            check(buf, st.MPI_SOURCE, 0, t, (size_t) count, "anysource");
        }
    }
}

/* Many MPI_Isend/MPI_Irecv at once to every peer, sizes across the eager
 * and rendezvous limits, completed with one MPI_Waitall; then a
 * non-blocking collective. */
static void test_nonblocking(void)
{
    enum { PER_PEER = 32 };
    int n = PER_PEER * (nprocs - 1), k = 0;
    MPI_Request *req = calloc(2 * (size_t) n + 1, sizeof(MPI_Request));
    uint8_t **sbuf = calloc((size_t) n, sizeof(uint8_t *));
    uint8_t **rbuf = calloc((size_t) n, sizeof(uint8_t *));
    long sum = rank, total;

    if (!req || !sbuf || !rbuf) {
        fail("nonblocking: out of memory");
        goto out;
    }
    for (int p = 0; p < nprocs; p++) {
        if (p == rank)
            continue;
        for (int i = 0; i < PER_PEER; i++, k++) {
            size_t sn = (size_t) (i * 4099) % 200000, rn = sn;

            sbuf[k] = malloc(sn + 1);
            rbuf[k] = malloc(rn + 1);
            fill(sbuf[k], rank, p, i, sn);
            MPI_Irecv(rbuf[k], (int) rn, MPI_BYTE, p, i, MPI_COMM_WORLD, &req[2 * k]);
            MPI_Isend(sbuf[k], (int) sn, MPI_BYTE, p, i, MPI_COMM_WORLD, &req[2 * k + 1]);
        }
    }
    MPI_Waitall(2 * n, req, MPI_STATUSES_IGNORE);
    k = 0;
    for (int p = 0; p < nprocs; p++) {
        if (p == rank)
            continue;
        for (int i = 0; i < PER_PEER; i++, k++)
            check(rbuf[k], p, rank, i, (size_t) (i * 4099) % 200000, "nonblocking");
    }
    MPI_Iallreduce(&sum, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &req[0]);
    MPI_Wait(&req[0], MPI_STATUS_IGNORE);
    add_result((uint64_t) total);
    if (total != (long) nprocs * (nprocs - 1) / 2)
        fail("nonblocking: MPI_Iallreduce gave %ld, expected %ld", total,
             (long) nprocs * (nprocs - 1) / 2);
out:
    for (int i = 0; sbuf && rbuf && i < n; i++) {
        free(sbuf[i]);
        free(rbuf[i]);
    }
    free(sbuf);
    free(rbuf);
    free(req);
}

/* A halo-exchange stencil on a periodic 2-D grid split over a Cartesian
 * process grid: each step swaps edge rows and columns with the four
 * neighbours (Isend/Irecv), then updates in exact integer arithmetic.
 * Rank 0 runs the same steps on the whole grid alone and compares. */
#define HALO_N 24    /* local block edge */
#define HALO_STEPS 40

static uint64_t halo_init(int gi, int gj)
{
    return (uint64_t) gi * 1000003u + (uint64_t) gj * 7919u + 17u;
}

/* One step on the interior of a block whose ghost cells are filled; the
 * weights are asymmetric, so a halo swapped by mistake shows. */
static void halo_step(const uint64_t *u, uint64_t *v, int rows, int cols, int stride)
{
    for (int i = 1; i <= rows; i++)
        for (int j = 1; j <= cols; j++)
            v[i * stride + j] = u[i * stride + j] * 3u + u[(i - 1) * stride + j] +
                                u[(i + 1) * stride + j] * 5u + u[i * stride + j - 1] * 7u +
                                u[i * stride + j + 1] * 11u + 1u;
}

static uint64_t halo_checksum(const uint64_t *g, int rows, int cols, int stride, int gi0, int gj0)
{
    uint64_t sum = 0;

    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            sum += g[(i + 1) * stride + j + 1] * (uint64_t) ((gi0 + i) * 65537 + gj0 + j + 1);
    return sum;
}

static uint64_t halo_serial(int gr, int gc)
{
    int stride = gc + 2;
    uint64_t *u = calloc((size_t) (gr + 2) * stride, sizeof(uint64_t));
    uint64_t *v = calloc((size_t) (gr + 2) * stride, sizeof(uint64_t)), *t, sum = 0;

    if (!u || !v) {
        fail("halo: out of memory");
        goto out;
    }
    for (int i = 0; i < gr; i++)
        for (int j = 0; j < gc; j++)
            u[(i + 1) * stride + j + 1] = halo_init(i, j);
    for (int step = 0; step < HALO_STEPS; step++) {
        for (int i = 1; i <= gr; i++) { /* periodic ghosts */
            u[i * stride] = u[i * stride + gc];
            u[i * stride + gc + 1] = u[i * stride + 1];
        }
        memcpy(&u[0], &u[gr * stride], stride * sizeof(uint64_t));
        memcpy(&u[(gr + 1) * stride], &u[stride], stride * sizeof(uint64_t));
        halo_step(u, v, gr, gc, stride);
        t = u, u = v, v = t;
    }
    sum = halo_checksum(u, gr, gc, stride, 0, 0);
out:
    free(u);
    free(v);
    return sum;
}

static void test_halo(void)
{
    int dims[2] = {0, 0}, periods[2] = {1, 1}, coords[2], up, down, left, right;
    int stride = HALO_N + 2, n = HALO_N;
    uint64_t *u = calloc((size_t) stride * stride, sizeof(uint64_t));
    uint64_t *v = calloc((size_t) stride * stride, sizeof(uint64_t)), *t;
    uint64_t scol[2][HALO_N], rcol[2][HALO_N], local, total;
    MPI_Comm cart;

    if (!u || !v) {
        fail("halo: out of memory");
        free(u);
        free(v);
        return;
    }
    MPI_Dims_create(nprocs, 2, dims);
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    MPI_Cart_coords(cart, rank, 2, coords);
    MPI_Cart_shift(cart, 0, 1, &up, &down);
    MPI_Cart_shift(cart, 1, 1, &left, &right);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            u[(i + 1) * stride + j + 1] = halo_init(coords[0] * n + i, coords[1] * n + j);
    for (int step = 0; step < HALO_STEPS; step++) {
        MPI_Request req[8];

        for (int i = 0; i < n; i++) {
            scol[0][i] = u[(i + 1) * stride + 1];
            scol[1][i] = u[(i + 1) * stride + n];
        }
        /* Rows: up/down; columns: left/right; tags say which edge. */
        MPI_Irecv(&u[1], n, MPI_UINT64_T, up, 1, cart, &req[0]);
        MPI_Irecv(&u[(n + 1) * stride + 1], n, MPI_UINT64_T, down, 0, cart, &req[1]);
        MPI_Irecv(rcol[0], n, MPI_UINT64_T, left, 3, cart, &req[2]);
        MPI_Irecv(rcol[1], n, MPI_UINT64_T, right, 2, cart, &req[3]);
        MPI_Isend(&u[stride + 1], n, MPI_UINT64_T, up, 0, cart, &req[4]);
        MPI_Isend(&u[n * stride + 1], n, MPI_UINT64_T, down, 1, cart, &req[5]);
        MPI_Isend(scol[0], n, MPI_UINT64_T, left, 2, cart, &req[6]);
        MPI_Isend(scol[1], n, MPI_UINT64_T, right, 3, cart, &req[7]);
        MPI_Waitall(8, req, MPI_STATUSES_IGNORE);
        for (int i = 0; i < n; i++) {
            u[(i + 1) * stride] = rcol[0][i];
            u[(i + 1) * stride + n + 1] = rcol[1][i];
        }
        halo_step(u, v, n, n, stride);
        t = u, u = v, v = t;
    }
    local = halo_checksum(u, n, n, stride, coords[0] * n, coords[1] * n);
    MPI_Reduce(&local, &total, 1, MPI_UINT64_T, MPI_SUM, 0, cart);
    if (rank == 0)
        add_result(total);
    if (rank == 0 && total != halo_serial(dims[0] * n, dims[1] * n))
        fail("halo: %dx%d stencil after %d steps differs from the serial run", dims[0] * n,
             dims[1] * n, HALO_STEPS);
    MPI_Comm_free(&cart);
    free(u);
    free(v);
}

/* MPI_THREAD_MULTIPLE: four threads per rank exchange with the pair
 * partner at once, each on its own tag, each checking what it gets. */
#define NTHREADS 4
#define THREAD_MSGS 200

static void *thread_main(void *arg)
{
    int id = (int) (intptr_t) arg, peer = rank ^ 1;
    uint8_t sbuf[30000], rbuf[30000];

    for (int m = 0; m < THREAD_MSGS; m++) {
        size_t n = (size_t) (m * 1499 + id * 7) % sizeof(sbuf);
        int tag = id * 1000 + m % 1000;
        MPI_Status st;

        fill(sbuf, rank, peer, tag, n);
        MPI_Sendrecv(sbuf, (int) n, MPI_BYTE, peer, tag, rbuf, sizeof(rbuf), MPI_BYTE, peer, tag,
                     MPI_COMM_WORLD, &st);
        check_status(&st, peer, tag, n, "threads");
        check(rbuf, peer, rank, tag, n, "threads");
    }
    return NULL;
}

static int provided; /* the thread level MPI_Init_thread gave */

static void test_threads(void)
{
    pthread_t t[NTHREADS];

    if (provided < MPI_THREAD_MULTIPLE) {
        fail("threads: MPI_THREAD_MULTIPLE not provided (%d)", provided);
        return;
    }
    if ((rank ^ 1) >= nprocs)
        return;
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&t[i], NULL, thread_main, (void *) (intptr_t) i);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
}

/* Pairs exchange messages of changing size (eager to several fragments)
 * until rank 0's clock (or its stop file) says stop; every 20 rounds
 * everyone learns it. */
static void test_soak(void)
{
    const char *env = getenv("ROV_MPI_SOAK_S"), *stop_file = getenv("ROV_MPI_SOAK_STOP");
    double secs = env ? atof(env) : 6.0, t0 = MPI_Wtime();
    size_t max = 1u << 20;
    uint8_t *sbuf = malloc(max), *rbuf = malloc(max);
    int peer = rank ^ 1, stop = 0;
    long rounds = 0;

    if (!sbuf || !rbuf) {
        fail("soak: out of memory");
        stop = 1;
    }
    /* Each rank's pid, for `railover status` from outside. */
    printf("soak: rank %d pid %d\n", rank, (int) getpid());
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("soak: started (%.0f s)\n", secs);
        fflush(stdout);
    }
    while (!stop) {
        for (int i = 0; i < 20 && peer < nprocs && sbuf && rbuf; i++, rounds++) {
            size_t n = (size_t) (rounds * 7919) % max;
            int tag = (int) (rounds % 30000);
            MPI_Status st;

            fill(sbuf, rank, peer, tag, n);
            MPI_Sendrecv(sbuf, (int) n, MPI_BYTE, peer, tag, rbuf, (int) max, MPI_BYTE, peer,
                         tag, MPI_COMM_WORLD, &st);
            check_status(&st, peer, tag, n, "soak");
            check(rbuf, peer, rank, tag, n, "soak");
        }
        stop = rank == 0 && (MPI_Wtime() - t0 > secs ||
                             (stop_file && *stop_file && 0 == access(stop_file, F_OK)));
        MPI_Bcast(&stop, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    if (rank == 0)
        printf("soak: %ld rounds in %.1f s\n", rounds, MPI_Wtime() - t0);
    free(sbuf);
    free(rbuf);
}

static void test_hold(void)
{
    const char *file = getenv("ROV_MPI_HOLD_FILE");

    char peers[4096];

    printf("hold: rank %d pid %d\n", rank, (int) getpid());
    fflush(stdout);
    if (!file) {
        fail("hold: ROV_MPI_HOLD_FILE is not set");
        return;
    }
    if (rank != 0) {
        if (!getenv("ROV_MPI_HOLD_BARRIER"))
            return;
        snprintf(peers, sizeof(peers), "%s.peers", file);
        file = peers;
    }
    while (access(file, F_OK) != 0)
        usleep(50000);
}

static const struct {
    const char *name;
    void (*run)(void);
} tests[] = {
    {"ring", test_ring},           {"sizes", test_sizes},   {"alltoall", test_alltoall},
    {"anysource", test_anysource}, {"nonblocking", test_nonblocking},
    {"halo", test_halo},           {"threads", test_threads}, {"soak", test_soak},
    {"hold", test_hold},
};

int main(int argc, char **argv)
{
    int want_threads = 0, all;

    for (int i = 1; i < argc; i++)
        if (0 == strcmp(argv[i], "threads"))
            want_threads = 1;
    if (want_threads)
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    else
        MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    for (int i = 1; i < argc; i++) {
        const char *t = argv[i];

        size_t k = 0;

        while (k < sizeof(tests) / sizeof(tests[0]) && 0 != strcmp(t, tests[k].name))
            k++;
        if (k == sizeof(tests) / sizeof(tests[0])) {
            fail("unknown test %s", t);
            continue;
        }
        digest = 0;
        tests[k].run();
        if (tests[k].run != test_soak && tests[k].run != test_hold) {
            uint64_t sum;

            MPI_Reduce(&digest, &sum, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
            if (rank == 0)
                printf("result: %s %016llx\n", t, (unsigned long long) sum);
        }
        /* After hold, rank 0 makes the first connection, unless the
         * barrier is asked for (then its peers connect to it). */
        if (tests[k].run != test_hold || getenv("ROV_MPI_HOLD_BARRIER"))
            MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %d rank(s), %d failure(s)\n", all ? "FAILED" : "PASSED", nprocs, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
