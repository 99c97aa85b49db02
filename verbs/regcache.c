/* Memory registration cache: see regcache.h. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <unistd.h>

#include "transport/log.h"
#include "verbs/regcache.h"

struct rov_reg {
    struct rov_reg *prev, *next; /* LRU list: most recently used first */
    uintptr_t start, end;        /* page-aligned */
    struct ibv_mr *mr;
    unsigned refs;
};

struct rov_regcache {
    struct ibv_pd *pd;
    uint64_t limit;
    uint64_t idle_bytes;         /* bytes of registrations with refs == 0 */
    struct rov_reg *head, *tail;
    uintptr_t page;
    struct rov_regcache_stats st;
};

static void lru_unlink(struct rov_regcache *c, struct rov_reg *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        c->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        c->tail = r->prev;
    r->prev = r->next = NULL;
}

static void lru_push(struct rov_regcache *c, struct rov_reg *r)
{
    r->prev = NULL;
    r->next = c->head;
    if (c->head)
        c->head->prev = r;
    else
        c->tail = r;
    c->head = r;
}

static void drop(struct rov_regcache *c, struct rov_reg *r)
{
    lru_unlink(c, r);
    ibv_dereg_mr(r->mr);
    free(r);
}

/* Evict idle registrations, oldest first, until within the limit. */
static void trim(struct rov_regcache *c)
{
    struct rov_reg *r = c->tail, *prev;

    while (r && c->idle_bytes > c->limit) {
        prev = r->prev;
        if (r->refs == 0) {
            c->idle_bytes -= r->end - r->start;
            c->st.evictions++;
            drop(c, r);
        }
        r = prev;
    }
}

struct rov_regcache *rov_regcache_new(struct ibv_pd *pd, uint64_t limit)
{
    struct rov_regcache *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->pd = pd;
    c->limit = limit;
    c->page = (uintptr_t)sysconf(_SC_PAGESIZE);
    return c;
}

void rov_regcache_free(struct rov_regcache *c)
{
    if (!c)
        return;
    while (c->head) {
        if (c->head->refs)
            rov_error("verbs", "registration cache freed with a registration in use");
        drop(c, c->head);
    }
    free(c);
}

struct rov_reg *rov_regcache_get(struct rov_regcache *c, const void *addr, size_t len)
{
    uintptr_t start = (uintptr_t)addr & ~(c->page - 1);
    uintptr_t end = ((uintptr_t)addr + len + c->page - 1) & ~(c->page - 1);
    struct rov_reg *r;

    for (r = c->head; r; r = r->next) {
        if (r->start <= start && end <= r->end) {
            if (r->refs++ == 0)
                c->idle_bytes -= r->end - r->start;
            lru_unlink(c, r);
            lru_push(c, r);
            c->st.hits++;
            return r;
        }
    }
    r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    /* LOCAL_WRITE only because some providers want it with any access;
     * no remote access: the peer never touches the application's memory. */
    r->mr = ibv_reg_mr(c->pd, (void *)start, end - start, IBV_ACCESS_LOCAL_WRITE);
    if (!r->mr) {
        rov_error("verbs", "ibv_reg_mr of %zu bytes: %m", (size_t)(end - start));
        free(r);
        return NULL;
    }
    r->start = start;
    r->end = end;
    r->refs = 1;
    lru_push(c, r);
    c->st.misses++;
    return r;
}

void rov_regcache_put(struct rov_regcache *c, struct rov_reg *r)
{
    if (--r->refs)
        return;
    c->idle_bytes += r->end - r->start;
    trim(c);
}

uint32_t rov_reg_lkey(const struct rov_reg *r)
{
    return r->mr->lkey;
}

void rov_regcache_stats(const struct rov_regcache *c, struct rov_regcache_stats *st)
{
    *st = c->st;
    st->kept_bytes = c->idle_bytes;
}
