#include "flow.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MAX_REPORTS 20      /* failures printed per flow; the rest are counted */
#define SMALL_SLOTS 256
#define SMALL_CAP (64 * IT_KiB)
#define LARGE_SLOTS 32
#define POISON 0xa5

/* ---- generator ----------------------------------------------------------- */

uint64_t it_mix64(uint64_t x)
{
    /* splitmix64 finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t it_rand(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ull;
    return it_mix64(*state);
}

uint64_t it_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

static unsigned log2_floor(size_t v)
{
    unsigned b = 0;

    while (v >>= 1)
        b++;
    return b;
}

size_t it_msg_size(uint64_t seed, uint64_t k, size_t max_size)
{
    uint64_t r, r2;
    unsigned cls;

    switch (k) {
    case 0: return 0;
    case 1: return max_size;
    case 2: return min_size(8 * IT_KiB, max_size);
    case 3: return min_size(8 * IT_KiB + 1, max_size);
    case 4: return min_size(64 * IT_KiB, max_size);
    case 5: return min_size(1, max_size);
    default: break;
    }
    r = it_mix64(seed ^ it_mix64(k ^ 0x5bd1e9955bd1e995ull));
    r2 = it_mix64(r);
    cls = (unsigned)(r % 1000);
    if (cls < 900)
        return min_size((size_t)(r2 % 257), max_size);
    if (cls < 999 || max_size <= 64 * IT_KiB) {
        /* log-uniform over [257, 64 KiB): pick a power of two, then uniform */
        unsigned b = 9 + (unsigned)(r2 % 8);
        size_t lo = (size_t)1 << (b - 1), sz = lo + (size_t)((r2 >> 8) % lo);

        return min_size(sz < 257 ? 257 : sz, max_size);
    }
    /* log-uniform over [64 KiB, max_size] */
    unsigned top = log2_floor(max_size);

    if (top < 17)
        return 64 * IT_KiB + (size_t)(r2 % (max_size - 64 * IT_KiB + 1));
    unsigned b = 17 + (unsigned)(r2 % (top - 16));
    size_t lo = (size_t)1 << (b - 1);

    return min_size(lo + (size_t)((r2 >> 8) % lo), max_size);
}

/* Content: a splitmix64 stream seeded by (seed, k), 8 bytes per word in
 * native byte order; the tail is the first bytes of one more word. */
static uint64_t content_state(uint64_t seed, uint64_t k)
{
    return it_mix64(seed + 0x632be59bd9b4e019ull) ^ it_mix64(k * 0x9e3779b97f4a7c15ull + 1);
}

void it_msg_fill(uint64_t seed, uint64_t k, void *buf, size_t len)
{
    uint8_t *p = buf;
    uint64_t s = content_state(seed, k), w;
    size_t i, nw = len / 8;

    for (i = 0; i < nw; i++) {
        w = it_rand(&s);
        memcpy(p + 8 * i, &w, 8);
    }
    if (len % 8) {
        w = it_rand(&s);
        memcpy(p + 8 * nw, &w, len % 8);
    }
}

/* 64-bit FNV-1a over 64-bit words, four interleaved lanes (so it runs at
 * memory speed), lanes folded with a strong mixer at the end. */
#define FNV_PRIME 0x100000001b3ull
#define FNV_BASIS 0xcbf29ce484222325ull

static inline uint64_t lane(uint64_t h, uint64_t w)
{
    return (h ^ w) * FNV_PRIME;
}

static uint64_t fold(const uint64_t h[4], size_t len)
{
    uint64_t x = it_mix64(h[0]);

    x = it_mix64(x ^ h[1]);
    x = it_mix64(x ^ h[2]);
    x = it_mix64(x ^ h[3]);
    return it_mix64(x ^ (uint64_t)len);
}

static uint64_t tail_word(const void *p, size_t n)
{
    uint64_t t = 0;

    memcpy(&t, p, n);
    return t;
}

uint64_t it_checksum(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t h[4] = {FNV_BASIS, FNV_BASIS ^ 1, FNV_BASIS ^ 2, FNV_BASIS ^ 3};
    size_t nw = len / 8, i = 0;

    for (; i + 4 <= nw; i += 4) {
        uint64_t w[4];

        memcpy(w, p + 8 * i, 32);
        h[0] = lane(h[0], w[0]);
        h[1] = lane(h[1], w[1]);
        h[2] = lane(h[2], w[2]);
        h[3] = lane(h[3], w[3]);
    }
    for (; i < nw; i++)
        h[i & 3] = lane(h[i & 3], tail_word(p + 8 * i, 8));
    if (len % 8)
        h[nw & 3] = lane(h[nw & 3], tail_word(p + 8 * nw, len % 8));
    return fold(h, len);
}

uint64_t it_msg_checksum(uint64_t seed, uint64_t k, size_t len)
{
    uint64_t h[4] = {FNV_BASIS, FNV_BASIS ^ 1, FNV_BASIS ^ 2, FNV_BASIS ^ 3};
    uint64_t s = content_state(seed, k);
    size_t nw = len / 8, i = 0;

    for (; i + 4 <= nw; i += 4) {
        h[0] = lane(h[0], it_rand(&s));
        h[1] = lane(h[1], it_rand(&s));
        h[2] = lane(h[2], it_rand(&s));
        h[3] = lane(h[3], it_rand(&s));
    }
    for (; i < nw; i++)
        h[i & 3] = lane(h[i & 3], it_rand(&s));
    if (len % 8) {
        uint64_t w = it_rand(&s);

        h[nw & 3] = lane(h[nw & 3], tail_word(&w, len % 8));
    }
    return fold(h, len);
}

const char *it_bytes_str(uint64_t bytes, char *buf, size_t len)
{
    if (bytes >= (1ull << 30))
        snprintf(buf, len, "%.2f GiB", (double)bytes / (double)(1ull << 30));
    else if (bytes >= (1ull << 20))
        snprintf(buf, len, "%.2f MiB", (double)bytes / (double)(1ull << 20));
    else if (bytes >= (1ull << 10))
        snprintf(buf, len, "%.2f KiB", (double)bytes / (double)(1ull << 10));
    else
        snprintf(buf, len, "%" PRIu64 " B", bytes);
    return buf;
}

/* ---- flows --------------------------------------------------------------- */

void it_flow_fail(struct it_flow *flow, const char *fmt, ...)
{
    va_list ap;

    if (flow->errors == 0)
        flow->first_error_ns = it_now_ns();
    flow->errors++;
    if (flow->errors > MAX_REPORTS) {
        if (flow->errors == MAX_REPORTS + 1)
            fprintf(stderr, "FAIL [%s]: further failures are counted, not printed\n",
                    flow->name);
        return;
    }
    fprintf(stderr, "FAIL [%s]: ", flow->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int pool_init(struct it_pool *pool, unsigned nslots, size_t cap, struct it_flow *flow)
{
    pool->slots = calloc(nslots, sizeof(*pool->slots));
    pool->free_idx = calloc(nslots, sizeof(*pool->free_idx));
    if (!pool->slots || !pool->free_idx)
        return -1;
    pool->nslots = nslots;
    pool->cap = cap;
    /* Highest index at the bottom of the stack: slot 0 is used first. */
    for (unsigned i = 0; i < nslots; i++) {
        pool->slots[i].flow = flow;
        pool->free_idx[i] = nslots - 1 - i;
    }
    pool->nfree = nslots;
    return 0;
}

static void pool_free(struct it_pool *pool)
{
    for (unsigned i = 0; i < pool->nslots; i++) {
        if (pool->slots[i].mapped)
            munmap(pool->slots[i].buf, pool->cap);
        else
            free(pool->slots[i].buf);
    }
    free(pool->slots);
    free(pool->free_idx);
    memset(pool, 0, sizeof(*pool));
}

static struct it_pool *slot_pool(struct it_flow *flow, const struct it_slot *slot)
{
    if (slot >= flow->small.slots && slot < flow->small.slots + flow->small.nslots)
        return &flow->small;
    return &flow->large;
}

int it_flow_init(struct it_flow *flow, const char *name, uint64_t tx_seed, uint64_t rx_seed,
                 uint64_t tx_count, uint64_t rx_count, size_t max_size)
{
    memset(flow, 0, sizeof(*flow));
    snprintf(flow->name, sizeof(flow->name), "%s", name);
    flow->tx_seed = tx_seed;
    flow->rx_seed = rx_seed;
    flow->tx_count = tx_count;
    flow->rx_count = rx_count;
    flow->max_size = max_size;
    if (pool_init(&flow->small, SMALL_SLOTS, min_size(SMALL_CAP, max_size), flow) ||
        pool_init(&flow->large, LARGE_SLOTS, max_size, flow)) {
        fprintf(stderr, "[%s]: out of memory\n", name);
        it_flow_free(flow);
        return -1;
    }
    return 0;
}

void it_flow_free(struct it_flow *flow)
{
    pool_free(&flow->small);
    pool_free(&flow->large);
}

/* A private anonymous mapping of len bytes, at hint if that is given and
 * free.  NULL on failure. */
static uint8_t *map_buf(size_t len, void *hint)
{
    void *p = mmap(hint, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (hint ? MAP_FIXED_NOREPLACE : 0), -1, 0);

    if (p == MAP_FAILED && hint)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* New pages under a send buffer (flow->renew_buffers). */
static void renew(struct it_flow *flow, struct it_slot *slot)
{
    size_t cap = slot_pool(flow, slot)->cap;

    if (slot->renewals++ % 2 == 0) {
        munmap(slot->buf, cap);
        slot->buf = map_buf(cap, slot->buf);
        if (!slot->buf) {
            slot->mapped = false;
            it_flow_fail(flow, "cannot map a send buffer again: %s", strerror(errno));
            flow->failed = true;
            return;
        }
    } else if (madvise(slot->buf, cap, MADV_DONTNEED) != 0) {
        it_flow_fail(flow, "madvise(MADV_DONTNEED) of a send buffer: %s", strerror(errno));
        flow->failed = true;
        return;
    }
    slot->k = UINT64_MAX;
    flow->renewals++;
}

/* Completion of a zero-copy send: the library no longer reads the buffer. */
static void slot_done(void *arg, rov_status_t status)
{
    struct it_slot *slot = arg;
    struct it_flow *flow = slot->flow;
    struct it_pool *pool = slot_pool(flow, slot);

    if (!slot->busy) {
        it_flow_fail(flow, "send completion (status %s) for a buffer that is not in flight "
                     "(last message %" PRIu64 "): duplicate completion, or a completion for "
                     "a send that returned ROV_OK", rov_status_str(status), slot->k);
        return;
    }
    if (status != ROV_OK && !flow->draining && flow->tx_failed++ == 0)
        it_flow_fail(flow, "send of message %" PRIu64 " (%zu bytes) completed with %s "
                     "(further failed completions are only counted)",
                     slot->k, slot->len, rov_status_str(status));
    /* Poison the buffer: a library that still read it would send garbage,
     * which the peer's checksum catches. */
    memset(slot->buf, POISON, slot->len);
    if (slot->mapped)
        renew(flow, slot);
    slot->busy = false;
    pool->free_idx[pool->nfree++] = (unsigned)(slot - pool->slots);
    flow->tx_inflight--;
}

/* Delivery notification (ROV_SEND_NOTIFY_DELIVERED). */
struct notify_rec {
    struct it_flow *flow;
    struct it_slot *slot; /* zero-copy send: released by this callback too */
    uint64_t k;
};

static void notify_done(void *arg, rov_status_t status)
{
    struct notify_rec *rec = arg;
    struct it_flow *flow = rec->flow;

    if (status != ROV_OK && !flow->draining && !rec->slot && flow->tx_failed++ == 0)
        it_flow_fail(flow, "delivery notification of message %" PRIu64 " came with %s "
                     "(further failed completions are only counted)",
                     rec->k, rov_status_str(status));
    if (rec->slot)
        slot_done(rec->slot, status);
    else
        flow->tx_notify_pending--;
    flow->tx_notified++;
    free(rec);
}

unsigned it_flow_pump(struct it_flow *flow, unsigned max_msgs)
{
    unsigned n = 0;

    while (n < max_msgs && flow->conn && !flow->failed && flow->tx_next < flow->tx_count) {
        uint64_t k = flow->tx_next;
        size_t len = it_msg_size(flow->tx_seed, k, flow->max_size);
        struct it_pool *pool = len <= flow->small.cap ? &flow->small : &flow->large;
        struct it_slot *slot;
        struct notify_rec *rec = NULL;
        rov_send_params_t params = {0};
        rov_status_t st;

        if (pool->nfree == 0)
            break;
        slot = &pool->slots[pool->free_idx[pool->nfree - 1]];
        if (!slot->buf) {
            slot->mapped = flow->renew_buffers;
            slot->buf = slot->mapped ? map_buf(pool->cap, NULL) : malloc(pool->cap ? pool->cap : 1);
            if (!slot->buf) {
                it_flow_fail(flow, "out of memory for a send buffer");
                flow->failed = true;
                break;
            }
            slot->k = UINT64_MAX;
        }
        if (slot->k != k || slot->len != len) {
            /* not already filled by an attempt that got ROV_ERR_AGAIN */
            it_msg_fill(flow->tx_seed, k, slot->buf, len);
            slot->k = k;
            slot->len = len;
        }

        /* Exercise the flags now and then: copy of a large message, and
         * delivery notification of any message. */
        if (len > 64 * IT_KiB && k % 7 == 3)
            params.flags |= ROV_SEND_COPY;
        if (k % 1009 == 7) {
            params.flags |= ROV_SEND_NOTIFY_DELIVERED;
            rec = malloc(sizeof(*rec));
            if (!rec) {
                it_flow_fail(flow, "out of memory");
                flow->failed = true;
                break;
            }
            rec->flow = flow;
            rec->slot = NULL;
            rec->k = k;
            params.cb = notify_done;
            params.arg = rec;
        } else {
            params.cb = slot_done;
            params.arg = slot;
        }

        st = rov_conn_send(flow->conn, (uint32_t)k, slot->buf, len, &params);
        if (st == ROV_ERR_AGAIN) {
            flow->tx_again++;
            free(rec);
            break;
        }
        if (st == ROV_OK) {
            /* Copied: the buffer is ours again at once.  Scribble on it so a
             * library that kept a reference sends garbage. */
            memset(slot->buf, POISON, len);
            slot->k = UINT64_MAX;
            flow->tx_copied++;
            if (rec)
                flow->tx_notify_pending++;
        } else if (st == ROV_INPROGRESS) {
            if (params.flags & ROV_SEND_COPY)
                it_flow_fail(flow, "send of message %" PRIu64 " (%zu bytes) with ROV_SEND_COPY "
                             "returned ROV_INPROGRESS; a copied send must return ROV_OK",
                             k, len);
            pool->nfree--;
            slot->busy = true;
            if (rec)
                rec->slot = slot;
            flow->tx_inflight++;
            flow->tx_zcopy++;
        } else {
            it_flow_fail(flow, "rov_conn_send of message %" PRIu64 " (%zu bytes) failed: %s",
                         k, len, rov_status_str(st));
            free(rec);
            flow->failed = true;
            break;
        }
        flow->tx_bytes += len;
        flow->tx_next++;
        n++;
    }
    return n;
}

/* Message k of the peer's stream nearest to `near` whose tag is `tag`. */
static uint64_t k_from_tag(uint64_t near, uint32_t tag)
{
    uint64_t k = (near & ~(uint64_t)UINT32_MAX) | tag;

    if (k > near && k - near > (1ull << 31) && k >= (1ull << 32))
        k -= 1ull << 32;
    else if (k < near && near - k > (1ull << 31))
        k += 1ull << 32;
    return k;
}

static void report_corruption(struct it_flow *flow, uint64_t k, const uint8_t *data, size_t len,
                              uint64_t got, uint64_t want)
{
    uint8_t *expect = malloc(len ? len : 1);
    size_t first = len, ndiff = 0;

    if (!expect) {
        it_flow_fail(flow, "message %" PRIu64 " (tag %" PRIu32 ", %zu bytes): content corrupt: "
                     "checksum %016" PRIx64 ", expected %016" PRIx64, k, (uint32_t)k, len,
                     got, want);
        return;
    }
    it_msg_fill(flow->rx_seed, k, expect, len);
    for (size_t i = 0; i < len; i++) {
        if (data[i] != expect[i]) {
            if (first == len)
                first = i;
            ndiff++;
        }
    }
    if (first < len)
        it_flow_fail(flow, "message %" PRIu64 " (tag %" PRIu32 ", %zu bytes): content corrupt: "
                     "checksum %016" PRIx64 ", expected %016" PRIx64 "; first difference at "
                     "byte %zu (expected 0x%02x, got 0x%02x%s), %zu bytes differ",
                     k, (uint32_t)k, len, got, want, first, expect[first], data[first],
                     data[first] == POISON ? ": the sender's poison, buffer read after "
                     "its completion or copy" : "", ndiff);
    else
        it_flow_fail(flow, "message %" PRIu64 ": checksum mismatch but no byte differs "
                     "(test bug)", k);
    free(expect);
}

void it_flow_recv(struct it_flow *flow, uint32_t tag, const void *data, size_t len)
{
    uint64_t k = flow->rx_next, got, want;
    size_t want_len;

    if (k >= flow->rx_count) {
        flow->rx_extra++;
        it_flow_fail(flow, "unexpected message after all %" PRIu64 " expected ones: tag %" PRIu32
                     ", %zu bytes (duplicate of message %" PRIu64 "?)", flow->rx_count, tag,
                     len, k_from_tag(k, tag));
        return;
    }
    want_len = it_msg_size(flow->rx_seed, k, flow->max_size);
    if (tag != (uint32_t)k) {
        uint64_t other = k_from_tag(k, tag);
        bool is_other = other < flow->rx_count &&
                        it_msg_size(flow->rx_seed, other, flow->max_size) == len &&
                        it_checksum(data, len) == it_msg_checksum(flow->rx_seed, other, len);

        if (is_other && other > k) {
            it_flow_fail(flow, "message %" PRIu64 " (tag %" PRIu32 ", %zu bytes) expected, got "
                         "intact message %" PRIu64 " instead: %" PRIu64 " message(s) "
                         "missing (lost, or reordered)", k, (uint32_t)k, want_len, other,
                         other - k);
            flow->rx_next = other + 1;
            flow->rx_bytes += len;
        } else if (is_other) {
            it_flow_fail(flow, "message %" PRIu64 " (tag %" PRIu32 ", %zu bytes) expected, got "
                         "intact message %" PRIu64 " again: duplicate delivery (%" PRIu64
                         " behind)", k, (uint32_t)k, want_len, other, k - other);
        } else {
            it_flow_fail(flow, "message %" PRIu64 " (tag %" PRIu32 ", %zu bytes) expected, got "
                         "tag %" PRIu32 " with %zu bytes that is no message of the stream "
                         "(message %" PRIu64 " has %zu bytes)", k, (uint32_t)k, want_len, tag,
                         len, other,
                         other < flow->rx_count
                             ? it_msg_size(flow->rx_seed, other, flow->max_size) : 0);
            flow->rx_next++;
        }
        return;
    }
    if (len != want_len) {
        it_flow_fail(flow, "message %" PRIu64 " (tag %" PRIu32 "): expected %zu bytes, got %zu",
                     k, tag, want_len, len);
        flow->rx_next++;
        return;
    }
    got = it_checksum(data, len);
    want = it_msg_checksum(flow->rx_seed, k, len);
    if (got != want)
        report_corruption(flow, k, data, len, got, want);
    flow->rx_bytes += len;
    flow->rx_next++;
}

void it_flow_stop_tx(struct it_flow *flow)
{
    flow->tx_count = flow->tx_next;
}

void it_flow_end_rx(struct it_flow *flow)
{
    flow->rx_count = flow->rx_next;
}

bool it_flow_tx_done(const struct it_flow *flow)
{
    return flow->tx_next == flow->tx_count && flow->tx_inflight == 0 &&
           flow->tx_notify_pending == 0;
}

bool it_flow_rx_done(const struct it_flow *flow)
{
    return flow->rx_next >= flow->rx_count;
}

/* "/count", or nothing while the stream has no end yet. */
static const char *count_str(uint64_t count, char *buf, size_t len)
{
    if (count == IT_UNLIMITED)
        snprintf(buf, len, " (no end yet)");
    else
        snprintf(buf, len, "/%" PRIu64, count);
    return buf;
}

void it_flow_dump(const struct it_flow *flow)
{
    char tx[32], rx[32];

    fprintf(stderr, "[%s]: sent %" PRIu64 "%s (zero-copy in flight %" PRIu64
            ", notifications pending %" PRIu64 ", ROV_ERR_AGAIN %" PRIu64 ", failed "
            "completions %" PRIu64 "), received %" PRIu64 "%s, failures %" PRIu64 "\n",
            flow->name, flow->tx_next, count_str(flow->tx_count, tx, sizeof(tx)),
            flow->tx_inflight, flow->tx_notify_pending, flow->tx_again, flow->tx_failed,
            flow->rx_next, count_str(flow->rx_count, rx, sizeof(rx)), flow->errors);
    if (flow->tx_inflight) {
        /* the oldest buffers still in flight say where acknowledgements stop */
        uint64_t oldest = UINT64_MAX;
        const struct it_pool *pools[2] = {&flow->small, &flow->large};

        for (int p = 0; p < 2; p++)
            for (unsigned i = 0; i < pools[p]->nslots; i++)
                if (pools[p]->slots[i].busy && pools[p]->slots[i].k < oldest)
                    oldest = pools[p]->slots[i].k;
        fprintf(stderr, "[%s]: oldest zero-copy send still in flight: message %" PRIu64 "\n",
                flow->name, oldest);
    }
    if (flow->conn) {
        rov_conn_stats_t s;

        rov_conn_stats(flow->conn, &s);
        fprintf(stderr, "[%s]: library: sent %" PRIu64 " recv %" PRIu64 " resent %" PRIu64
                " dups %" PRIu64 " reordered %" PRIu64 " window_full %" PRIu64 " switches %"
                PRIu64 " retained %" PRIu64 " msgs/%" PRIu64 " B tx_seq %" PRIu64 " rx_seq %"
                PRIu64 " rail %d\n",
                flow->name, s.msgs_sent, s.msgs_recv, s.msgs_resent, s.dups_dropped,
                s.reordered, s.window_full, s.switches, s.retained_msgs, s.retained_bytes,
                s.tx_seq, s.rx_seq, s.rail);
    }
}
