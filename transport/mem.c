/*
 * One-sided reads (railover.h, "One-sided reads"): registrations with every
 * rail that reads remote memory, their keys, and rov_conn_get() on the rail
 * a connection sends on now.
 *
 * The transport adds nothing to a read but bookkeeping: the rail does it
 * (verbs: an RDMA READ), in pieces when it is longer than the rail's limit
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

/* A read in progress, then done and waiting for its callback: the
 * caller's, or, for a piece of a split read, split_piece_done(). */
struct rov_get_op {
    struct rov_get_op *next;
    rov_get_cb_t cb;
    void *arg;
    struct rov_split_get *split; /* a piece of this read, on rail */
    size_t at, len;              /* the piece: offset in the read, bytes */
    int rail;
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
        rov_status_t st = ROV_ERR_IO;

        if (!__builtin_expect(ctx->fault_armed, 0) || !rov_fault_register(&ctx->fault, i))
            st = rail->ops.mem_reg(rail, (void *)mem->base, mem->len, &mem->handle[i],
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

/* A read in pieces (split_get()).
 *
 * On a bonded connection every read goes in pieces (none smaller than
 * RAILOVER_BOND_MIN, about SPLIT_PIECES per member) into the connection's
 * queue of reads, oldest first, and a member takes the next piece when it
 * has fewer reads of ours in flight than its share of BOND_READS_OUT: a
 * faster member finishes more and so reads more; a slower one holds fewer
 * at once, in proportion to the rate its pieces came at (bond.read_rate,
 * measured per member while it reads: a read's data comes the other way
 * from what a member's send queue shows, so the bond's send rates do not
 * apply), so that what is left on it when the queue runs dry takes no
 * longer than on the others; and a stream of reads too small to split
 * still uses every member.  Elsewhere a read longer than the rail's limit
 * goes in pieces of that limit, SPLIT_OUT in flight.
 *
 * A bonded read's piece whose member failed under it is read again by the
 * others (by the transmit rail once the bond is down to it), as the bond
 * resends a failed member's messages; a piece the owner refused
 * (ROV_ERR_INVAL: no such registration or range; on verbs, the key the
 * peer's HCA refused) is not, and after SPLIT_REDO_MAX pieces read again
 * the next failure ends the read.
 *
 * The caller hears once, when the last piece is over, with the first
 * failure: an MPI library that read a message in several gets, some
 * failing, would fall back to sending only those, and Open MPI 4.1's ob1
 * then never completes the send (docs/mpi.md). */
#define SPLIT_OUT 2       /* pieces in flight per read, not bonded */
#define BOND_READS_OUT 4  /* reads in flight per bond member */
#define SPLIT_PIECES 32   /* a bonded read: about this many pieces per member */
#define SPLIT_REDO_MAX 16 /* pieces of one read read again, at most */

struct rov_split_range {
    struct rov_split_range *next;
    size_t at, len;
};

struct rov_split_get {
    struct rov_split_get *next, *prev; /* conn->splits, oldest first */
    rov_conn_t *conn;                  /* NULL: the connection is gone */
    rov_get_cb_t cb;
    void *arg;
    uint8_t *local;
    rov_mem_t *lmem;
    uint64_t remote;
    uint8_t key[ROV_MEM_KEY_LEN];
    size_t len, at, piece;             /* at: handed out so far */
    struct rov_split_range *redo;      /* failed pieces to read again, before at */
    unsigned redone;                   /* pieces put back in redo so far */
    unsigned out;                      /* pieces in flight */
    uint8_t out_on[ROV_MAX_RAILS];     /* of them, per rail */
    unsigned refused;                  /* rails that would not start a piece */
    rov_status_t refusal;              /* the last one's reason */
    bool bond;                         /* over the bond's members, else the transmit rail */
    rov_status_t status;
};

/* Start one read of len bytes on chan (rail's registrations); the rail
 * answers at rov_rail_get_done().  split: a piece of that read. */
static rov_status_t get_on(rov_conn_t *conn, int rail, void *local, rov_mem_t *lmem,
                           uint64_t remote, const uint8_t *k, size_t len, rov_get_cb_t cb,
                           void *arg, struct rov_split_get *split)
{
    struct rov_chan *chan = conn->chans[rail];
    struct rov_get_op *op = malloc(sizeof(*op));
    rov_status_t st;

    if (!op)
        return ROV_ERR_NOMEM;
    op->cb = cb;
    op->arg = arg;
    op->split = split;
    op->at = split ? (size_t)((uint8_t *)local - split->local) : 0;
    op->len = len;
    op->rail = rail;
    if (split && split->bond && !chan->gets_out)
        chan->bond.read_mark_ns = rov_now_ns(); /* busy from now */
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

/* chan, on rail i, reads the peer's memory of key k into lmem. */
static bool chan_reads(const struct rov_chan *chan, int i, const rov_mem_t *lmem,
                       const uint8_t *k)
{
    return chan && chan->rail->get_max && (lmem->mask & (1u << i)) && (k[1] & (1u << i));
}

/* The channel a piece of s may go on, on rail i, capacity aside, or NULL. */
static struct rov_chan *split_chan(const struct rov_split_get *s, int i)
{
    rov_conn_t *conn = s->conn;
    struct rov_chan *chan;

    if (!conn || s->status != ROV_OK || conn->state != ROV_CONN_ESTABLISHED ||
        (s->refused & (1u << i)) || rov_get32(s->key + KEY_GEN) != conn->peer.gen)
        return NULL;
    if (s->bond && conn->bond_mask)
        chan = rov_bond_member(conn, i);
    else
        chan = i == conn->tx_rail && conn->chans[i] &&
                       conn->chans[i]->state == ROV_CHAN_OPEN ? conn->chans[i] : NULL;
    return chan_reads(chan, i, s->lmem, s->key) ? chan : NULL;
}

/* Pieces of s not handed out yet (failed ones to read again included). */
static bool split_more(const struct rov_split_get *s)
{
    return s->at < s->len || s->redo;
}

/* Start the next piece of s on rail i (chan): a failed one first, else
 * from at; false: the rail refused it. */
static bool split_start(struct rov_split_get *s, int i, struct rov_chan *chan)
{
    struct rov_split_range *r = s->redo;
    size_t at = r ? r->at : s->at, part = r ? r->len : s->len - s->at;
    rov_status_t st;

    part = part < s->piece ? part : s->piece;
    part = part < chan->rail->get_max ? part : chan->rail->get_max;
    st = get_on(s->conn, i, s->local + at, s->lmem, s->remote + at, s->key, part, NULL, NULL,
                s);
    if (st != ROV_INPROGRESS) { /* the other members may go on */
        s->refused |= 1u << i;
        s->refusal = st;
        return false;
    }
    s->out++;
    s->out_on[i]++;
    if (!r)
        s->at += part;
    else if ((r->at += part, r->len -= part) == 0) {
        s->redo = r->next;
        free(r);
    }
    return true;
}

/* Reads a bond member may have in flight: BOND_READS_OUT for the fastest
 * reader (and for every rail while the bond is down to one, or no rate is
 * known), a slower one fewer, in proportion (rounded up), so that what is
 * left on it when the queue runs dry takes no longer than on the others. */
static unsigned member_reads(const rov_conn_t *conn, const struct rov_chan *chan)
{
    uint64_t top = 0;

    if (!chan->bond.read_rate)
        return BOND_READS_OUT;
    for (int i = 0; i < conn->ctx->nrails; i++) {
        const struct rov_chan *c = rov_bond_member(conn, i);

        if (c && c->bond.read_rate > top)
            top = c->bond.read_rate;
    }
    if (!top || chan->bond.read_rate >= top)
        return BOND_READS_OUT;
    return (unsigned)((BOND_READS_OUT * chan->bond.read_rate + top - 1) / top);
}

static bool split_room(const struct rov_split_get *s, int i, const struct rov_chan *chan)
{
    return s->bond ? chan->gets_out < member_reads(s->conn, chan) : s->out_on[i] < SPLIT_OUT;
}

/* Hand out pieces, the oldest reads first, to every rail with room.  When
 * then no piece of any read is in flight (the members are full of reads
 * from before the bond), the oldest that can go on starts one anyway: a
 * piece's end is what hands out the rest. */
static void split_pull(rov_conn_t *conn)
{
    bool flowing = false;

    for (struct rov_split_get *s = conn->splits; s; s = s->next) {
        for (int i = 0; i < conn->ctx->nrails && split_more(s); i++) {
            struct rov_chan *chan;

            while (split_more(s) && (chan = split_chan(s, i)) && split_room(s, i, chan) &&
                   split_start(s, i, chan))
                ;
        }
        flowing |= s->out > 0;
    }
    for (struct rov_split_get *s = conn->splits; s && !flowing; s = s->next)
        for (int i = 0; i < conn->ctx->nrails && !flowing && split_more(s); i++) {
            struct rov_chan *chan = split_chan(s, i);

            flowing = chan && split_start(s, i, chan);
        }
}

/* s can go on: some rail would take a piece of it, room or not. */
static bool split_alive(const struct rov_split_get *s)
{
    for (int i = 0; s->conn && i < s->conn->ctx->nrails; i++)
        if (split_chan(s, i))
            return true;
    return false;
}

/* Nothing of s in flight, and done, failed, or with nowhere to go. */
static bool split_over(const struct rov_split_get *s)
{
    return !s->out && (!split_more(s) || s->status != ROV_OK || !split_alive(s));
}

static void split_finish(struct rov_split_get *s)
{
    if (split_more(s) && s->status == ROV_OK) /* nowhere to go on */
        s->status = !s->conn ? ROV_ERR_CANCELED : s->refusal ? s->refusal : ROV_ERR_UNSUPPORTED;
    while (s->redo) {
        struct rov_split_range *r = s->redo;

        s->redo = r->next;
        free(r);
    }
    s->cb(s->arg, s->status);
    free(s);
}

static void split_unlink(struct rov_split_get *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        s->conn->splits = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        s->conn->splits_tail = s->prev;
}

/* The reads of conn that are over: out of the queue, then their callbacks
 * (which may read again). */
static void split_reap(rov_conn_t *conn)
{
    struct rov_split_get *over = NULL, *s = conn->splits;

    while (s) {
        struct rov_split_get *next = s->next;

        if (split_over(s)) {
            split_unlink(s);
            s->next = over;
            over = s;
        }
        s = next;
    }
    while (over) {
        s = over;
        over = s->next;
        split_finish(s);
    }
}

/* A bonded read's piece [at, at + len) failed with status: true when it
 * goes back into the read's queue, to be read by another member. */
static bool split_redo(struct rov_split_get *s, size_t at, size_t len, rov_status_t status)
{
    struct rov_split_range *r;

    if (!s->bond || !s->conn || s->status != ROV_OK || status == ROV_ERR_INVAL ||
        s->redone >= SPLIT_REDO_MAX || !(r = malloc(sizeof(*r))))
        return false;
    r->at = at;
    r->len = len;
    r->next = s->redo;
    s->redo = r;
    s->redone++;
    rov_debug("bond", "conn %llu: a piece of %zu bytes of a read failed (%s): read again",
              (unsigned long long)s->conn->id, len, rov_status_str(status));
    return true;
}

/* A piece [at, at + len) of s on rail is over (from rov_ctx_gets_deliver());
 * rail < 0: the orphaned read's own turn (rov_conn_splits_orphan()). */
static void split_piece_done(struct rov_split_get *s, int rail, size_t at, size_t len,
                             rov_status_t status)
{
    rov_conn_t *conn = s->conn;

    s->out--;
    if (rail >= 0)
        s->out_on[rail]--;
    if (status != ROV_OK && s->status == ROV_OK && !split_redo(s, at, len, status))
        s->status = status;
    if (!conn) {
        if (!s->out)
            split_finish(s);
        return;
    }
    split_pull(conn);
    split_reap(conn);
}

/* Queue op as over with status (its callback from the next progress). */
static void get_op_done(rov_context_t *ctx, struct rov_get_op *op, rov_status_t status)
{
    op->status = status;
    op->next = NULL;
    if (ctx->gets_tail)
        ctx->gets_tail->next = op;
    else
        ctx->gets_done = op;
    ctx->gets_tail = op;
    ctx->gets_ready = true;
}

void rov_conn_splits_orphan(rov_conn_t *conn)
{
    struct rov_split_get *s = conn->splits;

    conn->splits = conn->splits_tail = NULL;
    while (s) {
        struct rov_split_get *next = s->next;
        struct rov_get_op *op;

        s->conn = NULL;
        if (!s->out && (op = calloc(1, sizeof(*op)))) { /* nothing will end it: a turn */
            op->split = s;
            op->rail = -1;
            s->out++;
            get_op_done(conn->ctx, op, ROV_ERR_CANCELED);
        } else if (!s->out) {
            s->status = ROV_ERR_NOMEM; /* (its callback now, out of memory) */
            split_finish(s);
        }
        s = next;
    }
}

/* A read in pieces, into conn's queue. */
static rov_status_t split_get(rov_conn_t *conn, uint8_t *local, rov_mem_t *lmem, uint64_t remote,
                              const uint8_t *k, size_t len, rov_get_cb_t cb, void *arg)
{
    size_t min = conn->ctx->config.bond_min;
    struct rov_split_get *s = malloc(sizeof(*s));
    rov_status_t st;
    int members = 0;

    if (!s)
        return ROV_ERR_NOMEM;
    *s = (struct rov_split_get){.conn = conn, .cb = cb, .arg = arg, .local = local,
                                .lmem = lmem, .remote = remote, .len = len, .status = ROV_OK};
    memcpy(s->key, k, ROV_MEM_KEY_LEN);
    if (conn->bond_mask) {
        s->bond = true;
        for (int i = 0; i < conn->ctx->nrails; i++)
            members += split_chan(s, i) != NULL;
        s->bond = members > 0;
    }
    s->piece = s->bond ? len / (SPLIT_PIECES * (size_t)members) : len;
    if (s->piece < min)
        s->piece = min;
    if (s->bond && s->piece < len)
        rov_debug("bond", "conn %llu: a read of %zu bytes in pieces of %zu over %d members",
                  (unsigned long long)conn->id, len, s->piece, members);
    s->prev = conn->splits_tail;
    if (conn->splits_tail)
        conn->splits_tail->next = s;
    else
        conn->splits = s;
    conn->splits_tail = s;
    split_pull(conn);
    if (!s->out && !split_alive(s)) { /* the caller hears at once */
        st = s->refusal ? s->refusal : ROV_ERR_IO;
        split_unlink(s);
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
    if (!chan || chan->state != ROV_CHAN_OPEN || !chan_reads(chan, rail, lmem, k))
        return ROV_ERR_UNSUPPORTED;
    if (rov_get32(k + KEY_GEN) != conn->peer.gen) {
        rov_debug("core", "a read refused: its key is from before the peer reopened its rails");
        return ROV_ERR_UNSUPPORTED;
    }
    if (len > chan->rail->get_max || conn->bond_mask)
        return split_get(conn, local, lmem, remote, k, len, cb, arg);
    return get_on(conn, rail, local, lmem, remote, k, len, cb, arg, NULL);
}

/* A bond member's read rate: its pieces' bytes over the time it spent
 * reading them (each piece from the end of the one before it there, or
 * from when the member began reading, get_on()), sampled every
 * READ_SAMPLE_NS of reading (a piece alone comes in a burst or after a
 * pause on a shaped or shared link), the last two samples averaged. */
#define READ_SAMPLE_NS 2000000ull

static void read_rate_sample(struct rov_chan *chan, size_t len)
{
    struct rov_bond_chan *b = &chan->bond;
    uint64_t now = rov_now_ns();

    b->read_ns += now - b->read_mark_ns;
    b->read_bytes += len;
    b->read_mark_ns = now;
    if (b->read_ns >= READ_SAMPLE_NS) {
        uint64_t rate = (uint64_t)((double)b->read_bytes * 1e9 / (double)b->read_ns);

        b->read_rate = b->read_rate ? (b->read_rate + rate) / 2 : rate;
        b->read_bytes = b->read_ns = 0;
    }
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
    if (status == ROV_OK && op->split && op->split->bond)
        read_rate_sample(chan, op->len);
    if (__builtin_expect(ctx->fault_armed, 0) && status == ROV_OK && chan->conn &&
        rov_fault_read_done(&ctx->fault, chan) && chan->send_error)
        rov_conn_push_later(chan->conn); /* the failure, from progress */
    get_op_done(ctx, cookie, status);
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
        if (op->split)
            split_piece_done(op->split, op->rail, op->at, op->len, op->status);
        else
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
