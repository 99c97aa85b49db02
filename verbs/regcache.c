/* Memory registration cache: see regcache.h. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "transport/log.h"
#include "verbs/memwatch.h"
#include "verbs/regcache.h"

struct rov_reg {
    struct rov_reg *prev, *next; /* LRU list: most recently used first */
    uintptr_t start, end;        /* page-aligned */
    struct ibv_mr *mr;
    unsigned refs;
    bool watched;                /* its memory's release will be reported */
    bool released;               /* it was: deregister at the last put */
    bool remote;                 /* peers may read it (rov_mem_register()) */
};

struct rov_regcache {
    struct ibv_pd *pd;
    uint64_t limit;
    uint64_t idle_bytes;         /* bytes of registrations with refs == 0 */
    struct rov_reg *head, *tail;
    uintptr_t page;
    bool watch;                  /* the memory watch is open */
    uint64_t seen;               /* releases of the watch taken into account */
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
    /* No watch, no keeping: a registration would outlive its memory. */
    if (limit > 0 && rov_memwatch_open()) {
        c->watch = true;
        c->seen = rov_memwatch_count();
    }
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
    if (c->watch)
        rov_memwatch_close();
    free(c);
}

/* Memory in [start, end) was released: registrations of it must not be
 * handed out again. */
static void released(void *arg, uintptr_t start, uintptr_t end)
{
    struct rov_regcache *c = arg;
    struct rov_reg *r = c->head, *next;

    for (; r; r = next) {
        next = r->next;
        if (r->released || r->end <= start || end <= r->start)
            continue;
        r->released = true;
        c->st.released++;
        if (r->refs == 0) {
            c->idle_bytes -= r->end - r->start;
            drop(c, r);
        }
    }
}

struct rov_reg *rov_regcache_get(struct rov_regcache *c, const void *addr, size_t len,
                                 bool remote)
{
    uintptr_t start = (uintptr_t)addr & ~(c->page - 1);
    uintptr_t end = ((uintptr_t)addr + len + c->page - 1) & ~(c->page - 1);
    struct rov_reg *r;

    if (c->watch)
        rov_memwatch_sync(&c->seen, released, c);
    for (r = c->head; r; r = r->next) {
        if (!r->released && r->start <= start && end <= r->end && r->remote == remote) {
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
    /* LOCAL_WRITE only because some providers want it with any access (and
     * a read writes it); remote access only for what the application
     * registered for peers' reads: a frame's source is never exposed. */
    r->mr = ibv_reg_mr(c->pd, (void *)start, end - start,
                       IBV_ACCESS_LOCAL_WRITE | (remote ? IBV_ACCESS_REMOTE_READ : 0));
    if (!r->mr) {
        rov_error("verbs", "ibv_reg_mr of %zu bytes: %m", (size_t)(end - start));
        free(r);
        return NULL;
    }
    r->start = start;
    r->end = end;
    r->refs = 1;
    r->remote = remote;
    /* Registered first: the pages are present when the watch starts. */
    r->watched = c->watch && rov_memwatch_track(start, end);
    lru_push(c, r);
    c->st.misses++;
    return r;
}

void rov_regcache_put(struct rov_regcache *c, struct rov_reg *r)
{
    if (--r->refs)
        return;
    if (r->released || !r->watched) {
        drop(c, r);
        return;
    }
    c->idle_bytes += r->end - r->start;
    trim(c);
}

uint32_t rov_reg_lkey(const struct rov_reg *r)
{
    return r->mr->lkey;
}

uint32_t rov_reg_rkey(const struct rov_reg *r)
{
    return r->mr->rkey;
}

void rov_regcache_stats(const struct rov_regcache *c, struct rov_regcache_stats *st)
{
    *st = c->st;
    st->kept_bytes = c->idle_bytes;
}
