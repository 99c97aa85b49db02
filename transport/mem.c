/*
 * One-sided reads (railover.h, "One-sided reads"): registrations with every
 * rail that reads remote memory, their keys, and rov_conn_get() on the rail
 * a connection sends on now.
 *
 * The transport adds nothing to a read but bookkeeping: the rail does it
 * (verbs: an RDMA READ), in parts when it is longer than the rail's limit
 * or shared over a bond (split_get()).  A read is not retained like a
 * message: it has no effect at the owner, so a read its rail could not
 * finish is reported failed, once and whole, and the caller moves the data
 * by message, which fails over.
 * Completions wait in a list on the context and run from the next progress
 * call, never inside the call that started or closed anything.
 *
 * Key layout (ROV_MEM_KEY_LEN bytes): u8 version, u8 mask of the rail
 * indices with a registration, u16 zero, u32 the owner's rail generation,
 * then per rail index a little-endian u32 key (the rail's: verbs, the
 * rkey).  A peer reads on its rail i the owner's rail i (a channel joins the
 * same rail index at both ends: conn.c, peer_rail()).
 *
 * A registration outlives a close of the rails (rov_context_close_rails()):
 * its rail part is released with them and made again at the reopen, under
 * new keys.  The generation (rov_ctx->rails_gen, counted at each close and
 * published in the endpoint's address) tells a reader that a key is from
 * before: the rail keys of a new protection domain may name other memory
 * under the same numbers, so such a key is refused (ROV_ERR_UNSUPPORTED,
 * the caller sends instead) and never reaches the rail.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/core.h"
#include "transport/log.h"

#define KEY_VERSION 2
#define KEY_GEN 4
#define KEY_RAIL(i) (8 + 4 * (i))

_Static_assert(KEY_RAIL(ROV_MAX_RAILS) <= ROV_MEM_KEY_LEN, "a key holds every rail's");
_Static_assert(ROV_MAX_RAILS <= 8, "the key's rail mask is one byte");

struct rov_mem {
    rov_context_t *ctx;
    struct rov_mem *next, *prev;   /* ctx->mems */
    uintptr_t base;
    size_t len;
    uint32_t gen;                  /* ctx->rails_gen when the rail part was made */
    unsigned mask;                 /* rails with a registration */
    void *handle[ROV_MAX_RAILS];
    uint32_t key[ROV_MAX_RAILS];
};

/* A read in progress, then done and waiting for its callback. */
struct rov_get_op {
    struct rov_get_op *next;
    rov_get_cb_t cb;
    void *arg;
    rov_status_t status;
};

/* The rail part: a registration with every open rail that reads remote
 * memory.  ROV_OK with at least one, ROV_ERR_UNSUPPORTED with none. */
static void mem_unregister(rov_mem_t *mem)
{
    for (int i = 0; i < mem->ctx->nrails; i++)
        if (mem->mask & (1u << i))
            mem->ctx->rails[i]->ops.mem_dereg(mem->ctx->rails[i], mem->handle[i]);
    mem->mask = 0;
}

static rov_status_t mem_register(rov_mem_t *mem)
{
    rov_context_t *ctx = mem->ctx;

    mem->gen = ctx->rails_gen;
    for (int i = 0; i < ctx->nrails; i++) {
        struct rov_rail *rail = ctx->rails[i];
        rov_status_t st = rail->ops.mem_reg(rail, (void *)mem->base, mem->len, &mem->handle[i],
                                            &mem->key[i]);

        if (st == ROV_ERR_UNSUPPORTED)
            continue;
        if (st != ROV_OK) {
            mem_unregister(mem);
            return st;
        }
        mem->mask |= 1u << i;
    }
    return mem->mask ? ROV_OK : ROV_ERR_UNSUPPORTED;
}

rov_status_t rov_mem_register(rov_context_t *ctx, void *base, size_t len, rov_mem_t **mem_p)
{
    rov_mem_t *mem;
    rov_status_t st;

    if (!ctx || !base || len == 0 || !mem_p)
        return ROV_ERR_INVAL;
    ROV_CTX_GUARD(ctx);
    mem = calloc(1, sizeof(*mem));
    if (!mem)
        return ROV_ERR_NOMEM;
    mem->ctx = ctx;
    mem->base = (uintptr_t)base;
    mem->len = len;
    st = mem_register(mem);
    if (st != ROV_OK) {
        free(mem);
        return st;
    }
    mem->next = ctx->mems;
    if (ctx->mems)
        ctx->mems->prev = mem;
    ctx->mems = mem;
    *mem_p = mem;
    return ROV_OK;
}

void rov_mem_deregister(rov_mem_t *mem)
{
    if (!mem)
        return;
    ROV_CTX_GUARD(mem->ctx);
    mem_unregister(mem);
    if (mem->prev)
        mem->prev->next = mem->next;
    else
        mem->ctx->mems = mem->next;
    if (mem->next)
        mem->next->prev = mem->prev;
    free(mem);
}

void rov_ctx_mem_unregister(rov_context_t *ctx)
{
    for (rov_mem_t *mem = ctx->mems; mem; mem = mem->next)
        mem_unregister(mem);
    ctx->rails_gen++;
}

void rov_ctx_mem_reregister(rov_context_t *ctx)
{
    for (rov_mem_t *mem = ctx->mems; mem; mem = mem->next) {
        rov_status_t st = mem_register(mem);

        if (st != ROV_OK)
            rov_warn("core", "a memory registration of %zu bytes could not be made again on "
                     "the reopened rails (%s): peers read it by message instead", mem->len,
                     rov_status_str(st));
    }
}

void rov_mem_key(const rov_mem_t *mem, void *key)
{
    uint8_t *k = key;

    memset(k, 0, ROV_MEM_KEY_LEN);
    k[0] = KEY_VERSION;
    k[1] = (uint8_t)mem->mask;
    rov_put32(k + KEY_GEN, mem->gen);
    for (int i = 0; i < ROV_MAX_RAILS; i++)
        if (mem->mask & (1u << i))
            rov_put32(k + KEY_RAIL(i), mem->key[i]);
}

/* A read in parts (split_get()): the caller's callback runs once, when the
 * last part is over, with the first failure if any. */
struct split_get {
    rov_get_cb_t cb;
    void *arg;
    unsigned parts;
    rov_status_t status;
};

static void split_get_part_done(void *arg, rov_status_t status)
{
    struct split_get *b = arg;

    if (status != ROV_OK && b->status == ROV_OK)
        b->status = status;
    if (--b->parts)
        return;
    b->cb(b->arg, b->status);
    free(b);
}

/* Start one read of len bytes on chan (rail's registrations); the rail
 * answers at rov_rail_get_done(). */
static rov_status_t get_on(rov_conn_t *conn, int rail, void *local, rov_mem_t *lmem,
                           uint64_t remote, const uint8_t *k, size_t len, rov_get_cb_t cb,
                           void *arg)
{
    struct rov_chan *chan = conn->chans[rail];
    struct rov_get_op *op = malloc(sizeof(*op));
    rov_status_t st;

    if (!op)
        return ROV_ERR_NOMEM;
    op->cb = cb;
    op->arg = arg;
    chan->gets_out++; /* (before: rov_rail_get_done() counts it down) */
    st = chan->rail->ops.get(chan, local, lmem->handle[rail], remote,
                             rov_get32(k + KEY_RAIL(rail)), len, op);
    if (st != ROV_INPROGRESS) {
        chan->gets_out--;
        free(op);
        return st == ROV_OK ? ROV_ERR_IO : st; /* a rail never finishes a read at once */
    }
    return ROV_INPROGRESS;
}

/* Start [at, at + len) of s's read on rail, in pieces of at most the rail's
 * get_max; the bytes started (fewer when the rail refused a piece). */
static size_t pieces_on(rov_conn_t *conn, int rail, uint8_t *local, rov_mem_t *lmem,
                        uint64_t remote, const uint8_t *k, size_t at, size_t len,
                        struct split_get *s)
{
    size_t max = conn->chans[rail]->rail->get_max, done = 0;

    while (done < len) {
        size_t part = len - done < max ? len - done : max;

        s->parts++;
        if (get_on(conn, rail, local + at + done, lmem, remote + at + done, k, part,
                   split_get_part_done, s) != ROV_INPROGRESS) {
            s->parts--;
            break;
        }
        done += part;
    }
    return done;
}

/* A read in parts, each at most its rail's get_max, so that a caller sees
 * one completion for any length (an MPI library that read a message in
 * several gets, some failing, would fall back to sending only those: Open
 * MPI 4.1's ob1 then never completes the send).  With RAILOVER_BOND, a read
 * of at least twice RAILOVER_BOND_MIN is shared over the bond's members
 * that read remote memory with both registrations, in proportion to each
 * one's measured rate (equal shares until measured), no share smaller than
 * BOND_MIN; otherwise it goes on the transmit rail.  What a member refuses
 * goes on the transmit rail. */
static rov_status_t split_get(rov_conn_t *conn, uint8_t *local, rov_mem_t *lmem, uint64_t remote,
                              const uint8_t *k, size_t len, rov_get_cb_t cb, void *arg)
{
    uint64_t min = conn->ctx->config.bond_min, rate[ROV_MAX_RAILS], sum = 0, top = 0;
    struct rov_chan *chans[ROV_MAX_RAILS];
    int rails[ROV_MAX_RAILS], n = 0, tx = conn->tx_rail;
    struct split_get *s;
    size_t at = 0;

    for (int i = 0; conn->bond_mask && len >= 2 * min && i < conn->ctx->nrails; i++) {
        struct rov_chan *chan = rov_bond_member(conn, i);

        if (!chan || !chan->rail->get_max || !(lmem->mask & (1u << i)) || !(k[1] & (1u << i)))
            continue;
        rails[n] = i;
        chans[n] = chan;
        top = chan->bond.rate > top ? chan->bond.rate : top;
        n++;
    }
    if (n < 2) {
        n = 1;
        rails[0] = tx;
        rate[0] = sum = 1;
    } else {
        for (int j = 0; j < n; j++) {
            rate[j] = rov_bond_rate(chans[j], top);
            sum += rate[j];
        }
    }
    s = malloc(sizeof(*s));
    if (!s)
        return ROV_ERR_NOMEM;
    *s = (struct split_get){.cb = cb, .arg = arg, .parts = 1, .status = ROV_OK};
    for (int j = 0; j < n && at < len; j++) {
        size_t left = len - at;
        size_t part = j == n - 1 ? left : (size_t)((unsigned __int128)len * rate[j] / sum);
        size_t done;

        if (part < min)
            part = min;
        if (part > left || left - part < min) /* no tail smaller than BOND_MIN */
            part = left;
        done = pieces_on(conn, rails[j], local, lmem, remote, k, at, part, s);
        at += done;
        if (done < part)
            break; /* what is left goes on the transmit rail, below */
    }
    if (at < len && pieces_on(conn, tx, local, lmem, remote, k, at, len - at, s) < len - at)
        s->status = ROV_ERR_IO;
    if (--s->parts == 0) { /* nothing started: the caller hears at once */
        rov_status_t st = s->status == ROV_OK ? ROV_ERR_IO : s->status;

        free(s);
        return st;
    }
    return ROV_INPROGRESS;
}

rov_status_t rov_conn_get(rov_conn_t *conn, void *local, rov_mem_t *lmem, uint64_t remote,
                          const void *rkey, size_t len, rov_get_cb_t cb, void *arg)
{
    ROV_CTX_GUARD(conn->ctx);
    const uint8_t *k = rkey;
    struct rov_chan *chan;
    uintptr_t at = (uintptr_t)local;
    int rail;

    if (!conn || !lmem || !k || !cb || lmem->ctx != conn->ctx || k[0] != KEY_VERSION ||
        at < lmem->base || len > lmem->len || at - lmem->base > lmem->len - len)
        return ROV_ERR_INVAL;
    if (conn->state != ROV_CONN_ESTABLISHED)
        return ROV_ERR_BUSY;
    rail = conn->tx_rail;
    chan = rail >= 0 ? conn->chans[rail] : NULL;
    if (!chan || chan->state != ROV_CHAN_OPEN || !chan->rail->get_max ||
        !(lmem->mask & (1u << rail)) || !(k[1] & (1u << rail)))
        return ROV_ERR_UNSUPPORTED;
    if (rov_get32(k + KEY_GEN) != conn->peer.gen) {
        rov_debug("core", "a read refused: its key is from before the peer reopened its rails");
        return ROV_ERR_UNSUPPORTED;
    }
    if (len > chan->rail->get_max || (conn->bond_mask && len >= 2 * conn->ctx->config.bond_min))
        return split_get(conn, local, lmem, remote, k, len, cb, arg);
    return get_on(conn, rail, local, lmem, remote, k, len, cb, arg);
}

void rov_rail_get_done(struct rov_chan *chan, void *cookie, rov_status_t status)
{
    rov_context_t *ctx = chan->rail->ctx;
    struct rov_get_op *op = cookie;

    if (status != ROV_OK)
        rov_debug("core", "a read on %s ended: %s", chan->rail->spec->name,
                  rov_status_str(status));
    if (chan->gets_out)
        chan->gets_out--;
    if (__builtin_expect(ctx->fault_armed, 0) && status == ROV_OK && chan->conn &&
        rov_fault_read_done(&ctx->fault, chan) && chan->send_error)
        rov_conn_push_later(chan->conn); /* the failure, from progress */
    op->status = status;
    op->next = NULL;
    if (ctx->gets_tail)
        ctx->gets_tail->next = op;
    else
        ctx->gets_done = op;
    ctx->gets_tail = op;
    ctx->gets_ready = true;
}

void rov_ctx_gets_deliver(rov_context_t *ctx)
{
    ctx->gets_ready = false;
    while (ctx->gets_done) {
        struct rov_get_op *op = ctx->gets_done;

        ctx->gets_done = op->next;
        if (!ctx->gets_done)
            ctx->gets_tail = NULL;
        ctx->events++;
        op->cb(op->arg, op->status);
        free(op);
    }
}

/* limits.get_max: any length when a rail reads remote memory (a read
 * longer than its rail's limit goes in parts, split_get()), else 0. */
size_t rov_ctx_get_max(const rov_context_t *ctx)
{
    for (int i = 0; i < ctx->nrails; i++)
        if (ctx->rails[i]->get_max)
            return SIZE_MAX;
    return 0;
}
