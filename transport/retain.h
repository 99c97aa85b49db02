/*
 * Retention queue: every message a connection sends stays here, in sequence
 * order, until the peer's cumulative acknowledgement covers it.  It also
 * tracks the next message to transmit, so a rail switch rewinds to what the
 * peer lacks and resends from there.  Bounded by a message and byte window.
 */
#ifndef ROV_RETAIN_H
#define ROV_RETAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "railover/railover.h"
#include "transport/compiler.h"
#include "transport/wire.h"

enum {
    ROV_MSG_COPIED = 1u << 0,    /* payload copied inline after the struct */
    ROV_MSG_NOTIFY = 1u << 1,    /* call cb when acknowledged */
    ROV_MSG_ACKED = 1u << 2,     /* acknowledged; freed when rail_refs drops to 0 */
    ROV_MSG_SENT_ONCE = 1u << 3, /* transmitted at least once */
    ROV_MSG_MORE = 1u << 4,      /* a fragment: the message goes on in the next one */
};

struct rov_msg_cache;

struct rov_msg {
    struct rov_msg *next;
    struct rov_msg_cache *cache;        /* where it returns when freed, or NULL */
    unsigned cls;                       /* size class in the cache */
    uint64_t seq;
    uint32_t tag;
    uint32_t flags;
    size_t len;
    const void *data;
    rov_send_cb_t cb;
    void *arg;
    uint32_t prefix_len;                /* not COPIED: the first len bytes are
                                         * payload[0..prefix_len) then data */
    unsigned rail_refs;                 /* rail sends still referencing it */
    rov_status_t status;                /* completion status once ACKED */
    uint64_t queued_serial;             /* channel whose rail last took a reference */
    uint8_t hdr[ROV_WIRE_HDR_LEN];      /* encoded at each transmission */
    uint8_t payload[];                  /* ROV_MSG_COPIED: the data */
};

struct rov_retain {
    struct rov_msg *head, *tail; /* oldest unacknowledged .. newest */
    struct rov_msg *next_tx;     /* next to transmit; NULL: all transmitted */
    uint64_t next_seq;           /* sequence of the next message pushed */
    uint64_t count, bytes;
    uint64_t max_msgs, max_bytes;
};

void rov_retain_init(struct rov_retain *r, uint64_t max_msgs, uint64_t max_bytes);

/** Would a message of len bytes fit the window, with extra_msgs messages of
 * extra_bytes kept outside the queue counted against it too (a
 * connection's sends held in a checkpoint stage)?  One message always fits
 * when there is nothing, however large. */
static inline bool rov_retain_has_room(const struct rov_retain *r, uint64_t extra_msgs,
                                       uint64_t extra_bytes, size_t len)
{
    uint64_t msgs = r->count + extra_msgs;

    return msgs == 0 ||
           (msgs < r->max_msgs && r->bytes + extra_bytes + len <= r->max_bytes);
}

/** Allocate a message; copy != 0 copies data inline, else references it.
 * Free it with rov_msg_free() (plain free() is fine for this one). */
struct rov_msg *rov_retain_msg_alloc(const void *data, size_t len, int copy);

/* A per-context cache of message buffers in a few size classes, so the send
 * path neither calls malloc nor faults in fresh pages per message.  Payload
 * capacity per class: 0 (references), then these. */
#define ROV_MSG_CLASSES 4
#define ROV_MSG_CLASS1_LEN 256
#define ROV_MSG_CLASS2_LEN 2048
#define ROV_MSG_CLASS3_LEN 8192
struct rov_msg_cache {
    struct rov_msg *free[ROV_MSG_CLASSES];
    unsigned nfree[ROV_MSG_CLASSES];
};

/* The send and acknowledgement paths below run once per message: they are
 * inline, so a message costs no calls between them. */

/* Out of line: a buffer the cache has none of (class cls), or one larger
 * than its classes (cls == ROV_MSG_CLASSES, not cached). */
ROV_COLD
struct rov_msg *rov_msg_cache_refill(struct rov_msg_cache *cache, unsigned cls, size_t len,
                                     int copy);

static inline void rov_msg_init(struct rov_msg *m, const void *data, size_t len, int copy)
{
    m->next = NULL;
    m->seq = 0;
    m->tag = 0;
    m->flags = copy ? ROV_MSG_COPIED : 0;
    m->len = len;
    m->cb = NULL;
    m->arg = NULL;
    m->prefix_len = 0;
    m->rail_refs = 0;
    m->queued_serial = 0;
    if (copy) {
        if (len)
            memcpy(m->payload, data, len);
        m->data = m->payload;
    } else {
        m->data = data;
    }
}

/** A buffer from cache with room for need payload bytes, not initialized. */
static inline struct rov_msg *rov_msg_cache_take(struct rov_msg_cache *cache, size_t need)
{
    unsigned cls = need == 0 ? 0 : need <= ROV_MSG_CLASS1_LEN ? 1 : need <= ROV_MSG_CLASS2_LEN ? 2
                 : need <= ROV_MSG_CLASS3_LEN ? 3 : ROV_MSG_CLASSES;
    struct rov_msg *m;

    if (cls < ROV_MSG_CLASSES && (m = cache->free[cls]) != NULL) {
        cache->free[cls] = m->next;
        cache->nfree[cls]--;
        return m;
    }
    return rov_msg_cache_refill(cache, cls, need, need != 0);
}

/** Like rov_retain_msg_alloc(), from cache. */
static inline struct rov_msg *rov_msg_cache_alloc(struct rov_msg_cache *cache, const void *data,
                                                  size_t len, int copy)
{
    struct rov_msg *m = rov_msg_cache_take(cache, copy ? len : 0);

    if (m)
        rov_msg_init(m, data, len, copy);
    return m;
}

/** How many free buffers of class cls the cache keeps. */
static inline unsigned rov_msg_cache_keep(unsigned cls)
{
    return cls == 0 || cls == 1 ? 1024 : cls == 2 ? 512 : 256;
}

/** Return m to its cache, or free it. */
static inline void rov_msg_free(struct rov_msg *m)
{
    struct rov_msg_cache *cache = m->cache;

    if (!cache || cache->nfree[m->cls] >= rov_msg_cache_keep(m->cls)) {
        free(m);
        return;
    }
    m->next = cache->free[m->cls];
    cache->free[m->cls] = m;
    cache->nfree[m->cls]++;
}

/** Free every cached buffer. */
void rov_msg_cache_fini(struct rov_msg_cache *cache);

/** Append msg, giving it the next sequence number. */
static inline void rov_retain_push(struct rov_retain *r, struct rov_msg *msg)
{
    msg->seq = r->next_seq++;
    msg->next = NULL;
    if (r->tail)
        r->tail->next = msg;
    else
        r->head = msg;
    r->tail = msg;
    if (!r->next_tx)
        r->next_tx = msg;
    r->count++;
    r->bytes += msg->len;
}

/** Highest sequence acknowledged so far. */
static inline uint64_t rov_retain_acked(const struct rov_retain *r)
{
    return r->head ? r->head->seq - 1 : r->next_seq - 1;
}

/** Apply a cumulative ack.  Removed messages are returned as a list through
 * *acked_p (linked by next, in order) for the caller to complete and free.
 * ROV_ERR_PROTO if ack covers a sequence never sent. */
static inline rov_status_t rov_retain_ack(struct rov_retain *r, uint64_t ack,
                                          struct rov_msg **acked_p)
{
    struct rov_msg *first = r->head, *last = NULL;

    *acked_p = NULL;
    if (ack >= r->next_seq)
        return ROV_ERR_PROTO;
    while (r->head && r->head->seq <= ack) {
        last = r->head;
        r->head = last->next;
        r->count--;
        r->bytes -= last->len;
        if (r->next_tx == last)
            r->next_tx = last->next;
    }
    if (!last)
        return ROV_OK;
    last->next = NULL;
    if (!r->head)
        r->tail = NULL;
    *acked_p = first;
    return ROV_OK;
}

/** The peer has everything up to peer_last: transmit again from there. */
void rov_retain_rewind(struct rov_retain *r, uint64_t peer_last);

/* helper.c: a completion kept for the application's next progress call. */
void rov_ctx_defer_send_cb(rov_context_t *ctx, rov_send_cb_t cb, void *arg, rov_status_t status);

/** Messages (a list linked by next) have left the queue: acknowledged, or
 * canceled with status.  Each is completed to the user and freed once no rail
 * references it, else marked so rov_msg_rail_done() does that later.  The
 * user's buffer is thus never read by a rail after the user was told it may
 * reuse it.  keep: the context when a progress helper's pass completes it
 * (the callback is kept for the application's thread), else NULL. */
static inline void rov_msg_complete(struct rov_msg *m, rov_context_t *keep)
{
    if (m->cb && (!(m->flags & ROV_MSG_COPIED) || (m->flags & ROV_MSG_NOTIFY))) {
        if (__builtin_expect(keep != NULL, 0))
            rov_ctx_defer_send_cb(keep, m->cb, m->arg, m->status);
        else
            m->cb(m->arg, m->status);
    }
    rov_msg_free(m);
}

static inline void rov_msg_release_list(struct rov_msg *list, rov_status_t status,
                                        rov_context_t *keep)
{
    while (list) {
        struct rov_msg *m = list;

        list = m->next;
        m->flags |= ROV_MSG_ACKED;
        m->status = status;
        m->next = NULL;
        if (m->rail_refs == 0)
            rov_msg_complete(m, keep);
    }
}

/** The rail of channel chan_serial no longer references m. */
void rov_msg_rail_done(struct rov_msg *m, uint64_t chan_serial, rov_context_t *keep);

/** Detach every message (for teardown); returned as a list like ack. */
struct rov_msg *rov_retain_drain(struct rov_retain *r);

/* ------------------------------------------------------------------------ */
/* Reorder buffer: early arrivals, indexed by sequence, bounded in count   */
/* (its slots) and in bytes (the caller's bound, per insert).              */

struct rov_reorder_slot {
    uint64_t seq; /* 0: empty */
    uint32_t tag;
    uint32_t flags; /* the frame's ROV_DF_* */
    size_t len;
    void *data;
};

struct rov_reorder {
    struct rov_reorder_slot *slots;
    uint64_t cap;
    uint64_t count;
    uint64_t bytes; /* payload bytes held */
};

rov_status_t rov_reorder_init(struct rov_reorder *ro, uint64_t cap);
void rov_reorder_fini(struct rov_reorder *ro);

/** Buffer a copy of message seq, which is later than expected (the next
 * in-order sequence), if the buffer then holds at most max_bytes of payload
 * (RAILOVER_REORDER_BYTES).  ROV_OK: stored; ROV_INPROGRESS: already held
 * (duplicate, ignored); ROV_ERR_AGAIN: beyond the buffer (too far ahead, or
 * more bytes than max_bytes), not stored: the caller drops it and has it
 * sent again; ROV_ERR_NOMEM. */
rov_status_t rov_reorder_insert(struct rov_reorder *ro, uint64_t expected, uint64_t seq,
                                uint32_t tag, uint32_t flags, const void *data, size_t len,
                                uint64_t max_bytes);

/** Take message seq out if held (caller frees slot->data). */
bool rov_reorder_take(struct rov_reorder *ro, uint64_t seq, struct rov_reorder_slot *slot_p);

#endif
