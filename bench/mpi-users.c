/* What MPI users run, OSU-micro-benchmark style (bench/mpi-users.py).
 *
 *   mpirun -np 2 mpi-users lat:8 lat:1048576 bw:1048576 rate:8
 *   mpirun -np 4 mpi-users allreduce:8 alltoall:65536
 *
 * Each argument is a figure KIND:SIZE (SIZE in bytes, k/m suffixes allowed);
 * rank 0 prints one line per figure:
 *
 *   ROV_MPIU kind=K size=N value=V unit=U iters=I
 *
 *   lat:SIZE        ping-pong between ranks 0 and 1: one-way latency,
 *                   elapsed / (2 * iters), in us.
 *   bw:SIZE         osu_bw's window: rank 0 posts WINDOW MPI_Isend of SIZE,
 *                   rank 1 WINDOW MPI_Irecv, both MPI_Waitall, rank 1 sends
 *                   a 4-byte ack; MB/s (10^6 bytes/s).
 *   rate:SIZE       the same window, counted in messages per second (msg/s).
 *   allreduce:SIZE  MPI_Allreduce of SIZE/8 doubles (MPI_SUM), all ranks: the
 *                   average time of a call, the maximum over the ranks (us).
 *   alltoall:SIZE   MPI_Alltoall, SIZE bytes per peer; as allreduce.
 *
 * Ranks other than 0 and 1 wait in a barrier during the point-to-point
 * figures.  Iteration counts come from a fixed model of a TCP link (about
 * 0.3 s per figure at a few GB/s), the same for every selection, times
 * ROV_MPIU_SCALE (default 1; rank 0's value is broadcast).  Warm-up
 * iterations come first, untimed; they also probe the time of an
 * iteration, and where the model's count would take more than about
 * CAP_S (1 s, times the scale) the count is cut to fit (a machine far
 * slower than the model, e.g. oversubscribed: iters= shows the count
 * used).  Every buffer is filled before use; the
 * first and last byte of every message received in lat, bw and rate carry
 * a pattern of the sender and the iteration, checked on arrival (the
 * collectives' results are checked once): a wrong byte is reported and the
 * job aborted, so a figure also proves that the data arrived.
 *
 * With ROV_MPIU_AFFINITY=1 rank 0 first prints, for every rank,
 *
 *   ROV_MPIU_AFFINITY rank=R pid=P netns=INODE cpus=LIST cpu=C
 *
 * (sched_getaffinity, the inode of /proc/self/ns/net, sched_getcpu): what
 * the driver checks the binding of a pinned run with.
 *
 * Exit 0; a usage error or a data error aborts the job.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WINDOW 64
#define TAG_DATA 1
#define TAG_ACK 2
#define AFF_LEN 256

/* The model of the link the iteration counts come from: a message costs
 * MODEL_LAT plus its size at MODEL_BW, a figure about BUDGET_S. */
#define MODEL_LAT 15e-6
#define MODEL_BW 2e9
#define BUDGET_S 0.3
/* Whatever the model says, a figure's timed part stops at about CAP_S
 * (times the scale), judged from the warm-up. */
#define CAP_S 1.0

enum kind { K_LAT, K_BW, K_RATE, K_ALLREDUCE, K_ALLTOALL };
static const char *const kind_name[] = {"lat", "bw", "rate", "allreduce", "alltoall"};
static const char *const kind_unit[] = {"us", "MB/s", "msg/s", "us", "us"};

struct figure {
    enum kind kind;
    size_t size;
};

static int rank, nranks;
static double scale = 1.0;

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mpi-users: rank %d: ", rank);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory (%zu bytes)", n);
    return p;
}

static int parse_figure(const char *arg, struct figure *f)
{
    const char *colon = strchr(arg, ':');
    if (!colon)
        return -1;
    size_t klen = (size_t)(colon - arg);
    int found = 0;
    for (int k = 0; k <= K_ALLTOALL; k++) {
        if (strlen(kind_name[k]) == klen && strncmp(arg, kind_name[k], klen) == 0) {
            f->kind = (enum kind)k;
            found = 1;
        }
    }
    if (!found)
        return -1;
    char *end;
    unsigned long long v = strtoull(colon + 1, &end, 10);
    if (end == colon + 1)
        return -1;
    if (*end == 'k' || *end == 'K') {
        v <<= 10;
        end++;
    } else if (*end == 'm' || *end == 'M') {
        v <<= 20;
        end++;
    }
    if (*end || v < 1 || v > (1ULL << 30))
        return -1;
    if (f->kind == K_ALLREDUCE && v < sizeof(double))
        return -1;
    f->size = (size_t)v;
    return 0;
}

/* The model's iteration count: clamp(BUDGET_S / time of one iteration)
 * times the scale. */
static long model_iters(const struct figure *f)
{
    double msg = MODEL_LAT + (double)f->size / MODEL_BW, t, lo, hi;
    switch (f->kind) {
    case K_LAT:
        t = 2 * msg;
        lo = 20;
        hi = 20000;
        break;
    case K_BW:
    case K_RATE:
        /* A window's messages stream: their latencies overlap. */
        t = MODEL_LAT + WINDOW * ((double)f->size / MODEL_BW + 1e-6);
        lo = 3;
        hi = 20000;
        break;
    case K_ALLREDUCE:
        t = 4 * MODEL_LAT + 3.0 * (double)f->size / MODEL_BW;
        lo = 10;
        hi = 10000;
        break;
    default: /* K_ALLTOALL */
        t = 2 * MODEL_LAT + (double)nranks * (double)f->size / MODEL_BW;
        lo = 10;
        hi = 10000;
        break;
    }
    double n = BUDGET_S / t;
    n = n < lo ? lo : n > hi ? hi : n;
    n *= scale;
    return n < 2 ? 2 : (long)(n + 0.5);
}

/* Untimed iterations first: a twentieth of the model's count, at least 1
 * (a window of large messages is long already) or 2, at most 100. */
static long warmups(const struct figure *f, long iters)
{
    long lo = f->kind == K_BW || f->kind == K_RATE ? 1 : 2, w = iters / 20;
    return w < lo ? lo : w > 100 ? 100 : w;
}

/* The pattern of a message: sender, iteration (and window slot). */
static unsigned char mark(int sender, long it)
{
    /* Consecutive iterations (and a slot's successive windows) differ. */
    return (unsigned char)(0x5a ^ (sender * 0x35) ^ (unsigned long)it);
}

static void stamp(unsigned char *buf, size_t n, int sender, long it)
{
    buf[0] = buf[n - 1] = mark(sender, it);
}

static void check(const unsigned char *buf, size_t n, int sender, long it, const char *what)
{
    unsigned char m = mark(sender, it);
    if (buf[0] != m || buf[n - 1] != m)
        die("%s: wrong data: message %ld of %zu bytes from the peer does not carry its "
            "pattern (first byte 0x%02x, last 0x%02x, expected 0x%02x)",
            what, it, n, buf[0], buf[n - 1], m);
}

/* A figure's buffers, filled before use.  bw and rate: one buffer per
 * window slot (no two pending operations share memory). */
struct bufs {
    unsigned char *s, *r;
    unsigned char *win[WINDOW];
};

static void setup(const struct figure *f, struct bufs *b)
{
    size_t n = f->size;
    memset(b, 0, sizeof(*b));
    switch (f->kind) {
    case K_LAT:
        b->s = xmalloc(n);
        b->r = xmalloc(n);
        for (size_t i = 0; i < n; i++)
            b->s[i] = (unsigned char)(rank * 7 + i * 13 + 1);
        memset(b->r, 0, n);
        break;
    case K_BW:
    case K_RATE:
        for (int w = 0; w < WINDOW; w++) {
            b->win[w] = xmalloc(n);
            for (size_t i = 0; i < n; i++)
                b->win[w][i] = rank == 0 ? (unsigned char)(w + i * 13 + 1) : 0;
        }
        break;
    case K_ALLREDUCE: {
        size_t count = n / sizeof(double);
        double *in = xmalloc(count * sizeof(double)), *out = xmalloc(count * sizeof(double));
        for (size_t i = 0; i < count; i++) {
            in[i] = rank + 1;
            out[i] = 0;
        }
        b->s = (unsigned char *)in;
        b->r = (unsigned char *)out;
        break;
    }
    case K_ALLTOALL:
        b->s = xmalloc(n * (size_t)nranks);
        b->r = xmalloc(n * (size_t)nranks);
        for (int p = 0; p < nranks; p++)
            memset(b->s + (size_t)p * n, 0x10 + rank, n);
        memset(b->r, 0, n * (size_t)nranks);
        break;
    }
}

static void teardown(struct bufs *b)
{
    free(b->s);
    free(b->r);
    for (int w = 0; w < WINDOW; w++)
        free(b->win[w]);
}

/* Ping-pong iterations first .. first+count-1 (ranks 0 and 1). */
static void lat(const struct figure *f, struct bufs *b, long first, long count)
{
    size_t n = f->size;
    int peer = 1 - rank;
    for (long i = first; i < first + count; i++) {
        if (rank == 0) {
            stamp(b->s, n, 0, i);
            MPI_Send(b->s, (int)n, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD);
            MPI_Recv(b->r, (int)n, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            check(b->r, n, peer, i, "lat");
        } else {
            MPI_Recv(b->r, (int)n, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            check(b->r, n, peer, i, "lat");
            stamp(b->s, n, 1, i);
            MPI_Send(b->s, (int)n, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD);
        }
    }
}

/* bw and rate: windows first .. first+count-1, WINDOW messages in flight,
 * then a 4-byte ack (ranks 0 and 1). */
static void window(const struct figure *f, struct bufs *b, long first, long count)
{
    size_t n = f->size;
    MPI_Request req[WINDOW];
    uint32_t ack = 0;
    for (long i = first; i < first + count; i++) {
        if (rank == 0) {
            for (int w = 0; w < WINDOW; w++) {
                stamp(b->win[w], n, 0, i * WINDOW + w);
                MPI_Isend(b->win[w], (int)n, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, &req[w]);
            }
            MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
            MPI_Recv(&ack, 4, MPI_BYTE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (ack != (uint32_t)i)
                die("%s: wrong ack %lu after window %ld", kind_name[f->kind],
                    (unsigned long)ack, i);
        } else {
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(b->win[w], (int)n, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
            for (int w = 0; w < WINDOW; w++)
                check(b->win[w], n, 0, i * WINDOW + w, kind_name[f->kind]);
            ack = (uint32_t)i;
            MPI_Send(&ack, 4, MPI_BYTE, 0, TAG_ACK, MPI_COMM_WORLD);
        }
    }
}

static void collective(const struct figure *f, struct bufs *b, long count)
{
    if (count < 1)
        return;
    if (f->kind == K_ALLREDUCE) {
        int n = (int)(f->size / sizeof(double));
        for (long i = 0; i < count; i++)
            MPI_Allreduce(b->s, b->r, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        const double *out = (const double *)b->r, want = (double)nranks * (nranks + 1) / 2;
        if (out[0] != want || out[n - 1] != want)
            die("allreduce: wrong result %g (expected %g)", out[0], want);
    } else {
        int n = (int)f->size;
        for (long i = 0; i < count; i++)
            MPI_Alltoall(b->s, n, MPI_BYTE, b->r, n, MPI_BYTE, MPI_COMM_WORLD);
        for (int p = 0; p < nranks; p++) {
            const unsigned char *blk = b->r + (size_t)p * f->size;
            if (blk[0] != 0x10 + p || blk[f->size - 1] != 0x10 + p)
                die("alltoall: wrong data in the block of rank %d", p);
            memset(b->r + (size_t)p * f->size, 0, f->size);
        }
    }
}

/* count iterations of the figure from iteration first on; the elapsed time
 * (each participating rank's own; 0 on a rank that does not take part). */
static double phase(const struct figure *f, struct bufs *b, long first, long count)
{
    double t0;
    switch (f->kind) {
    case K_LAT:
        if (rank > 1)
            return 0;
        t0 = MPI_Wtime();
        lat(f, b, first, count);
        return MPI_Wtime() - t0;
    case K_BW:
    case K_RATE:
        if (rank > 1)
            return 0;
        t0 = MPI_Wtime();
        window(f, b, first, count);
        return MPI_Wtime() - t0;
    default:
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        collective(f, b, count);
        return MPI_Wtime() - t0;
    }
}

static void affinity(void)
{
    char line[AFF_LEN], cpus[160] = "";
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        size_t len = 0;
        for (int c = 0; c < CPU_SETSIZE && len + 8 < sizeof(cpus); c++) {
            if (!CPU_ISSET(c, &set))
                continue;
            int e = c;
            while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set))
                e++;
            len += (size_t)snprintf(cpus + len, sizeof(cpus) - len, "%s%d", len ? "," : "", c);
            if (e > c)
                len += (size_t)snprintf(cpus + len, sizeof(cpus) - len, "-%d", e);
            c = e;
        }
    }
    char ns[64] = "?";
    ssize_t k = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
    unsigned long long inode = 0;
    if (k > 0) {
        ns[k] = 0;
        sscanf(ns, "net:[%llu]", &inode);
    }
    snprintf(line, sizeof(line), "ROV_MPIU_AFFINITY rank=%d pid=%ld netns=%llu cpus=%s cpu=%d",
             rank, (long)getpid(), inode, cpus[0] ? cpus : "?", sched_getcpu());
    char *all = rank == 0 ? xmalloc((size_t)nranks * AFF_LEN) : NULL;
    MPI_Gather(line, AFF_LEN, MPI_CHAR, all, AFF_LEN, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 0; r < nranks; r++)
            printf("%s\n", all + (size_t)r * AFF_LEN);
        fflush(stdout);
        free(all);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    int nfig = argc - 1;
    if (nfig < 1)
        die("usage: mpi-users KIND:SIZE... (KIND lat, bw, rate, allreduce, alltoall)");
    struct figure *fig = xmalloc((size_t)nfig * sizeof(*fig));
    for (int i = 0; i < nfig; i++) {
        if (parse_figure(argv[i + 1], &fig[i]) != 0)
            die("bad figure '%s' (KIND:SIZE, KIND lat, bw, rate, allreduce, alltoall; "
                "SIZE 1 byte to 1 GiB, at least 8 for allreduce)",
                argv[i + 1]);
        if (fig[i].kind <= K_RATE && nranks < 2)
            die("figure '%s' needs at least 2 ranks (have %d)", argv[i + 1], nranks);
    }

    /* Rank 0's settings for all: the same iteration counts everywhere. */
    double settings[2] = {1.0, 0.0};
    if (rank == 0) {
        const char *s = getenv("ROV_MPIU_SCALE");
        if (s && *s) {
            char *end;
            settings[0] = strtod(s, &end);
            if (*end || !(settings[0] > 0))
                die("ROV_MPIU_SCALE=%s: not a positive number", s);
        }
        s = getenv("ROV_MPIU_AFFINITY");
        settings[1] = s && *s && strcmp(s, "0") != 0;
    }
    MPI_Bcast(settings, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    scale = settings[0];
    if (settings[1] != 0)
        affinity();

    /* Every connection up before the first figure (Open MPI connects on
     * first use). */
    {
        char *hello = xmalloc((size_t)nranks), *back = xmalloc((size_t)nranks);
        memset(hello, rank, (size_t)nranks);
        MPI_Alltoall(hello, 1, MPI_CHAR, back, 1, MPI_CHAR, MPI_COMM_WORLD);
        free(hello);
        free(back);
    }

    for (int i = 0; i < nfig; i++) {
        const struct figure *f = &fig[i];
        struct bufs b;
        setup(f, &b);
        long model = model_iters(f), warm = warmups(f, model);
        MPI_Barrier(MPI_COMM_WORLD);
        /* The warm-up is the probe: on a link or machine far slower than
         * the model, fewer iterations (at least a few), not minutes. */
        long half = warm / 2;
        phase(f, &b, 0, half);
        double probe = phase(f, &b, half, warm - half) / (double)(warm - half), slowest;
        MPI_Allreduce(&probe, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        long iters = model;
        if (slowest * (double)model > CAP_S * scale) {
            iters = (long)(CAP_S * scale / slowest);
            iters = iters < 3 ? 3 : iters;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double el = phase(f, &b, warm, iters), value = 0, mine = el / (double)iters * 1e6;
        switch (f->kind) {
        case K_LAT:
            value = el / (2.0 * (double)iters) * 1e6;
            break;
        case K_BW:
            value = (double)f->size * WINDOW * (double)iters / el / 1e6;
            break;
        case K_RATE:
            value = (double)WINDOW * (double)iters / el;
            break;
        default:
            MPI_Reduce(&mine, &value, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            break;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        teardown(&b);
        if (rank == 0) {
            printf("ROV_MPIU kind=%s size=%zu value=%.4f unit=%s iters=%ld\n",
                   kind_name[f->kind], f->size, value, kind_unit[f->kind], iters);
            fflush(stdout);
        }
    }
    free(fig);
    MPI_Finalize();
    return 0;
}
