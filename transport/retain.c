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

/* Payload capacity of each class and how many free buffers it keeps. */
static const size_t class_len[ROV_MSG_CLASSES] = {0, 256, 2048, 8192};
static const unsigned class_keep[ROV_MSG_CLASSES] = {1024, 1024, 512, 256};

static void msg_init(struct rov_msg *m, const void *data, size_t len, int copy)
{
    m->next = NULL;
    m->seq = 0;
    m->tag = 0;
    m->flags = copy ? ROV_MSG_COPIED : 0;
    m->len = len;
    m->cb = NULL;
    m->arg = NULL;
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

struct rov_msg *rov_retain_msg_alloc(const void *data, size_t len, int copy)
{
    struct rov_msg *m = malloc(sizeof(*m) + (copy ? len : 0));

    if (!m)
        return NULL;
    m->cache = NULL;
    msg_init(m, data, len, copy);
    return m;
}

struct rov_msg *rov_msg_cache_alloc(struct rov_msg_cache *cache, const void *data, size_t len,
                                    int copy)
{
    size_t need = copy ? len : 0;
    unsigned cls = 0;
    struct rov_msg *m;

    while (cls < ROV_MSG_CLASSES && class_len[cls] < need)
        cls++;
    if (cls == ROV_MSG_CLASSES)
        return rov_retain_msg_alloc(data, len, copy);
    m = cache->free[cls];
    if (m) {
        cache->free[cls] = m->next;
        cache->nfree[cls]--;
    } else {
        m = malloc(sizeof(*m) + class_len[cls]);
        if (!m)
            return NULL;
        m->cache = cache;
        m->cls = cls;
    }
    msg_init(m, data, len, copy);
    return m;
}

void rov_msg_free(struct rov_msg *m)
{
    struct rov_msg_cache *cache = m->cache;

    if (!cache || cache->nfree[m->cls] >= class_keep[m->cls]) {
        free(m);
        return;
    }
    m->next = cache->free[m->cls];
    cache->free[m->cls] = m;
    cache->nfree[m->cls]++;
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

static void msg_complete(struct rov_msg *m)
{
    if (m->cb && (!(m->flags & ROV_MSG_COPIED) || (m->flags & ROV_MSG_NOTIFY)))
        m->cb(m->arg, m->status);
    rov_msg_free(m);
}

static void msg_release(struct rov_msg *m, rov_status_t status)
{
    m->flags |= ROV_MSG_ACKED;
    m->status = status;
    m->next = NULL;
    if (m->rail_refs == 0)
        msg_complete(m);
}

void rov_msg_release_list(struct rov_msg *list, rov_status_t status)
{
    while (list) {
        struct rov_msg *next = list->next;

        msg_release(list, status);
        list = next;
    }
}

void rov_msg_rail_done(struct rov_msg *m, uint64_t chan_serial)
{
    if (m->queued_serial == chan_serial)
        m->queued_serial = 0;
    if (--m->rail_refs == 0 && (m->flags & ROV_MSG_ACKED))
        msg_complete(m);
}

void rov_retain_push(struct rov_retain *r, struct rov_msg *msg)
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

rov_status_t rov_retain_ack(struct rov_retain *r, uint64_t ack, struct rov_msg **acked_p)
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
    return ro->slots ? ROV_OK : ROV_ERR_NOMEM;
}

void rov_reorder_fini(struct rov_reorder *ro)
{
    for (uint64_t i = 0; ro->slots && i < ro->cap; i++)
        free(ro->slots[i].data);
    free(ro->slots);
    ro->slots = NULL;
    ro->count = 0;
}

rov_status_t rov_reorder_insert(struct rov_reorder *ro, uint64_t expected, uint64_t seq,
                                uint32_t tag, const void *data, size_t len)
{
    struct rov_reorder_slot *s;

    /* expected+1 .. expected+cap map to cap distinct slots. */
    if (seq <= expected || seq - expected > ro->cap)
        return ROV_ERR_AGAIN;
    s = &ro->slots[seq % ro->cap];
    if (s->seq == seq)
        return ROV_INPROGRESS;
    /* Anything else in the slot is older than expected: stale, replace it. */
    free(s->data);
    if (s->seq)
        ro->count--;
    s->seq = 0;
    s->data = malloc(len ? len : 1);
    if (!s->data)
        return ROV_ERR_NOMEM;
    if (len)
        memcpy(s->data, data, len);
    s->seq = seq;
    s->tag = tag;
    s->len = len;
    ro->count++;
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
    return true;
}
