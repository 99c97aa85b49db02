#include "transport/retain.h"

#include <stdlib.h>
#include <string.h>

void rov_retain_init(struct rov_retain *r, uint64_t max_msgs, uint64_t max_bytes)
{
    memset(r, 0, sizeof(*r));
    r->next_seq = 1;
    r->max_msgs = max_msgs;
    r->max_bytes = max_bytes;
}

struct rov_msg *rov_retain_msg_alloc(const void *data, size_t len, int copy)
{
    struct rov_msg *m = malloc(sizeof(*m) + (copy ? len : 0));

    if (!m)
        return NULL;
    m->cache = NULL;
    rov_msg_init(m, data, len, copy);
    return m;
}

static const size_t class_len[ROV_MSG_CLASSES] = {
    0, ROV_MSG_CLASS1_LEN, ROV_MSG_CLASS2_LEN, ROV_MSG_CLASS3_LEN,
};

struct rov_msg *rov_msg_cache_refill(struct rov_msg_cache *cache, unsigned cls, size_t len,
                                     int copy)
{
    struct rov_msg *m;

    if (cls >= ROV_MSG_CLASSES) {
        m = malloc(sizeof(*m) + (copy ? len : 0));
        cache = NULL;
    } else {
        m = malloc(sizeof(*m) + class_len[cls]);
    }
    if (!m)
        return NULL;
    m->cache = cache;
    m->cls = cls;
    return m;
}

void rov_msg_cache_fini(struct rov_msg_cache *cache)
{
    for (unsigned c = 0; c < ROV_MSG_CLASSES; c++) {
        while (cache->free[c]) {
            struct rov_msg *m = cache->free[c];

            cache->free[c] = m->next;
            free(m);
        }
        cache->nfree[c] = 0;
    }
}

void rov_msg_rail_done(struct rov_msg *m, uint64_t chan_serial, rov_context_t *keep)
{
    if (m->queued_serial == chan_serial)
        m->queued_serial = 0;
    if (--m->rail_refs == 0 && (m->flags & ROV_MSG_ACKED))
        rov_msg_complete(m, keep);
}

void rov_retain_rewind(struct rov_retain *r, uint64_t peer_last)
{
    struct rov_msg *m = r->head;

    while (m && m->seq <= peer_last)
        m = m->next;
    r->next_tx = m;
}

struct rov_msg *rov_retain_drain(struct rov_retain *r)
{
    struct rov_msg *all = r->head;

    r->head = r->tail = r->next_tx = NULL;
    r->count = r->bytes = 0;
    return all;
}

rov_status_t rov_reorder_init(struct rov_reorder *ro, uint64_t cap)
{
    ro->slots = calloc(cap, sizeof(*ro->slots));
    ro->cap = cap;
    ro->count = 0;
    ro->bytes = 0;
    return ro->slots ? ROV_OK : ROV_ERR_NOMEM;
}

void rov_reorder_fini(struct rov_reorder *ro)
{
    for (uint64_t i = 0; ro->slots && i < ro->cap; i++)
        free(ro->slots[i].data);
    free(ro->slots);
    ro->slots = NULL;
    ro->count = 0;
    ro->bytes = 0;
}

rov_status_t rov_reorder_insert(struct rov_reorder *ro, uint64_t expected, uint64_t seq,
                                uint32_t tag, uint32_t flags, const void *data, size_t len,
                                uint64_t max_bytes)
{
    struct rov_reorder_slot *s;
    uint64_t held;

    /* expected+1 .. expected+cap map to cap distinct slots. */
    if (seq <= expected || seq - expected > ro->cap)
        return ROV_ERR_AGAIN;
    s = &ro->slots[seq % ro->cap];
    if (s->seq == seq)
        return ROV_INPROGRESS;
    /* Anything else in the slot is older than expected: stale, replaced. */
    held = ro->bytes - (s->seq ? s->len : 0);
    if (len > max_bytes || held > max_bytes - len)
        return ROV_ERR_AGAIN;
    free(s->data);
    if (s->seq) {
        ro->count--;
        ro->bytes -= s->len;
    }
    s->seq = 0;
    s->data = malloc(len ? len : 1);
    if (!s->data)
        return ROV_ERR_NOMEM;
    if (len)
        memcpy(s->data, data, len);
    s->seq = seq;
    s->tag = tag;
    s->flags = flags;
    s->len = len;
    ro->count++;
    ro->bytes += len;
    return ROV_OK;
}

bool rov_reorder_take(struct rov_reorder *ro, uint64_t seq, struct rov_reorder_slot *slot_p)
{
    struct rov_reorder_slot *s;

    if (ro->count == 0)
        return false;
    s = &ro->slots[seq % ro->cap];
    if (s->seq != seq)
        return false;
    *slot_p = *s;
    s->seq = 0;
    s->data = NULL;
    ro->count--;
    ro->bytes -= s->len;
    return true;
}
