/*
 * rov_mpi_ckpt: a deterministic MPI job to checkpoint and restart
 * (tests/ccp/mpi-criu-job.sh).  It knows nothing of checkpoints: an
 * unmodified MPI program whose result says whether every message arrived
 * once and intact, whatever happened to the job while it ran.
 *
 *   rov_mpi_ckpt ITERATIONS BYTES PAUSE_MS [TICK_MS]
 *
 * Each iteration every rank sends BYTES to its right neighbour and receives
 * from its left (a ring, MPI_Sendrecv), checks the received buffer's
 * checksum (its first 8 bytes), folds it into its state, and takes part in
 * an MPI_Allreduce of the states; then it pauses PAUSE_MS (computation,
 * outside the library).  A buffer's bytes follow from the sender's state, so
 * a message lost, repeated, reordered or damaged changes every later one.
 *
 * Output: every rank prints "mpi_ckpt: rank R pid P host H" to stderr at
 * the start; rank 0 alone prints progress ("mpi_ckpt: iteration I/N", every
 * 10) to stderr and, at the end, one line to stdout:
 *     result=<16 hex digits> iters=N ranks=P
 * the same for an uninterrupted run and a checkpointed or restarted one.
 * A bad checksum prints "FAIL ..." and the job aborts (exit 1).
 *
 * With TICK_MS, every rank also prints "mpi_ckpt: tick R K" (K = 1, 2, ...)
 * to stderr every TICK_MS from a thread of its own, whatever MPI is doing,
 * until the end: a stream that a rank on another host sends to mpirun
 * through its orted and Open MPI's out-of-band connection all the time, a
 * checkpoint included.  A restarted job whose images are one consistent
 * cut (docs/ccp.md) has every tick of every rank once, in order.
 */
#include <mpi.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t mix(uint64_t x)
{
    /* splitmix64's finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* FNV-1a over the 64-bit words of buf[1..n) (n words in all). */
static uint64_t checksum(const uint64_t *buf, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 1; i < n; i++) {
        h ^= buf[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static long arg(const char *s, const char *what, long min, long max)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "mpi_ckpt: bad %s '%s' (%ld to %ld)\n", what, s, min, max);
        exit(64);
    }
    return v;
}

struct ticker {
    int rank;
    long ms;
    atomic_bool stop;
};

/* "mpi_ckpt: tick R K" every t->ms, one write(2) a line. */
static void *tick(void *arg)
{
    struct ticker *t = arg;
    struct timespec ts = { t->ms / 1000, (t->ms % 1000) * 1000000l };
    char line[64];

    for (long k = 1; !atomic_load(&t->stop); k++) {
        int len = snprintf(line, sizeof(line), "mpi_ckpt: tick %d %ld\n", t->rank, k);

        while (write(2, line, (size_t)len) < 0 && errno == EINTR)
            ;
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int rank, size;
    char host[256] = "?";

    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: rov_mpi_ckpt ITERATIONS BYTES PAUSE_MS [TICK_MS]\n");
        return 64;
    }
    long iters = arg(argv[1], "ITERATIONS", 1, 10000000);
    long bytes = arg(argv[2], "BYTES", 16, 64l << 20);
    long pause_ms = arg(argv[3], "PAUSE_MS", 0, 60000);
    long tick_ms = argc == 5 ? arg(argv[4], "TICK_MS", 1, 60000) : 0;
    size_t words = (size_t)bytes / 8;
    struct ticker ticker = { .ms = tick_ms };
    pthread_t ticker_thread;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof(host) - 1);
    fprintf(stderr, "mpi_ckpt: rank %d pid %ld host %s\n", rank, (long)getpid(), host);
    ticker.rank = rank;
    if (tick_ms && pthread_create(&ticker_thread, NULL, tick, &ticker) != 0) {
        fprintf(stderr, "mpi_ckpt: cannot start the ticker thread\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    uint64_t *out = malloc(words * 8), *in = malloc(words * 8);
    if (!out || !in) {
        fprintf(stderr, "mpi_ckpt: out of memory for %ld bytes\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    uint64_t state = mix(0x5eed0000ull + (uint64_t)rank);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    struct timespec pause = { pause_ms / 1000, (pause_ms % 1000) * 1000000l };

    for (long it = 0; it < iters; it++) {
        uint64_t x = mix(state ^ (uint64_t)it), global;

        for (size_t i = 1; i < words; i++)
            out[i] = x = mix(x + i);
        out[0] = checksum(out, words);
        MPI_Sendrecv(out, (int)words, MPI_UINT64_T, right, 7, in, (int)words, MPI_UINT64_T,
                     left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (in[0] != checksum(in, words)) {
            fprintf(stderr, "FAIL: rank %d iteration %ld: the buffer from rank %d is damaged\n",
                    rank, it, left);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        state = mix(state ^ in[0]);
        MPI_Allreduce(&state, &global, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        state = mix(state + global);
        if (rank == 0 && (it + 1) % 10 == 0)
            fprintf(stderr, "mpi_ckpt: iteration %ld/%ld\n", it + 1, iters);
        if (pause_ms)
            nanosleep(&pause, NULL);
    }
    uint64_t result;
    MPI_Reduce(&state, &result, 1, MPI_UINT64_T, MPI_BXOR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("result=%016llx iters=%ld ranks=%d\n", (unsigned long long)result, iters, size);
        fflush(stdout);
    }
    if (tick_ms) {
        atomic_store(&ticker.stop, true);
        pthread_join(ticker_thread, NULL);
    }
    free(out);
    free(in);
    MPI_Finalize();
    return 0;
}
