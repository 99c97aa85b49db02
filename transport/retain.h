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

#include "railover/railover.h"
#include "transport/wire.h"

enum {
    ROV_MSG_COPIED = 1u << 0,    /* payload copied inline after the struct */
    ROV_MSG_NOTIFY = 1u << 1,    /* call cb when acknowledged */
    ROV_MSG_ACKED = 1u << 2,     /* acknowledged; freed when rail_refs drops to 0 */
    ROV_MSG_SENT_ONCE = 1u << 3, /* transmitted at least once */
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

/** Would a message of len bytes fit the window?  One message always fits an
 * empty queue, however large. */
static inline bool rov_retain_has_room(const struct rov_retain *r, size_t len)
{
    return r->count == 0 || (r->count < r->max_msgs && r->bytes + len <= r->max_bytes);
}

/** Allocate a message; copy != 0 copies data inline, else references it.
 * Free it with rov_msg_free() (plain free() is fine for this one). */
struct rov_msg *rov_retain_msg_alloc(const void *data, size_t len, int copy);

/* A per-context cache of message buffers in a few size classes, so the send
 * path neither calls malloc nor faults in fresh pages per message. */
#define ROV_MSG_CLASSES 4
struct rov_msg_cache {
    struct rov_msg *free[ROV_MSG_CLASSES];
    unsigned nfree[ROV_MSG_CLASSES];
};

/** Like rov_retain_msg_alloc(), from cache. */
struct rov_msg *rov_msg_cache_alloc(struct rov_msg_cache *cache, const void *data, size_t len,
                                    int copy);
/** Return m to its cache, or free it. */
void rov_msg_free(struct rov_msg *m);
/** Free every cached buffer. */
void rov_msg_cache_fini(struct rov_msg_cache *cache);

/** Append msg, giving it the next sequence number. */
void rov_retain_push(struct rov_retain *r, struct rov_msg *msg);

/** Highest sequence acknowledged so far. */
static inline uint64_t rov_retain_acked(const struct rov_retain *r)
{
    return r->head ? r->head->seq - 1 : r->next_seq - 1;
}

/** Apply a cumulative ack.  Removed messages are returned as a list through
 * *acked_p (linked by next, in order) for the caller to complete and free.
 * ROV_ERR_PROTO if ack covers a sequence never sent. */
rov_status_t rov_retain_ack(struct rov_retain *r, uint64_t ack, struct rov_msg **acked_p);

/** The peer has everything up to peer_last: transmit again from there. */
void rov_retain_rewind(struct rov_retain *r, uint64_t peer_last);

/** Messages (a list linked by next) have left the queue: acknowledged, or
 * canceled with status.  Each is completed to the user and freed once no rail
 * references it, else marked so rov_msg_rail_done() does that later.  The
 * user's buffer is thus never read by a rail after the user was told it may
 * reuse it. */
void rov_msg_release_list(struct rov_msg *list, rov_status_t status);
/** The rail of channel chan_serial no longer references m. */
void rov_msg_rail_done(struct rov_msg *m, uint64_t chan_serial);

/** Detach every message (for teardown); returned as a list like ack. */
struct rov_msg *rov_retain_drain(struct rov_retain *r);

/* ------------------------------------------------------------------------ */
/* Reorder buffer: early arrivals, indexed by sequence, bounded.            */

struct rov_reorder_slot {
    uint64_t seq; /* 0: empty */
    uint32_t tag;
    size_t len;
    void *data;
};

struct rov_reorder {
    struct rov_reorder_slot *slots;
    uint64_t cap;
    uint64_t count;
};

rov_status_t rov_reorder_init(struct rov_reorder *ro, uint64_t cap);
void rov_reorder_fini(struct rov_reorder *ro);

/** Buffer a copy of message seq, which is later than expected (the next
 * in-order sequence).  ROV_OK: stored; ROV_INPROGRESS: already held
 * (duplicate, ignored); ROV_ERR_AGAIN: beyond the buffer, not stored;
 * ROV_ERR_NOMEM. */
rov_status_t rov_reorder_insert(struct rov_reorder *ro, uint64_t expected, uint64_t seq,
                                uint32_t tag, const void *data, size_t len);

/** Take message seq out if held (caller frees slot->data). */
bool rov_reorder_take(struct rov_reorder *ro, uint64_t seq, struct rov_reorder_slot *slot_p);

#endif
