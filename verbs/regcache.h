/*
 * Memory registration cache of the verbs rail.
 *
 * Large frames are sent without a copy: they are RDMA-written from the
 * application's buffer, which must be registered.  Registering is costly
 * (pinning pages, a system call), and MPI applications send from the same
 * buffers again and again, so registrations are kept after use, up to a
 * byte limit, and evicted least recently used first.
 *
 * Ranges are registered page-aligned; a lookup hits when a kept
 * registration covers the whole range.  A registration in use (between get
 * and put) is never evicted.
 *
 * A registration pins the pages it was made for, so a kept one is only
 * right while its memory stays mapped: the released-memory watch
 * (memwatch.h) reports munmap, mremap, brk shrinks and discarded pages, and
 * registrations of released memory are dropped (or, in use, dropped at
 * their last put).  Memory the watch cannot follow is not kept after use.
 */
#ifndef ROV_VERBS_REGCACHE_H
#define ROV_VERBS_REGCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

struct rov_regcache;
struct rov_reg;

/** A cache on pd keeping up to limit bytes of unused registrations. */
struct rov_regcache *rov_regcache_new(struct ibv_pd *pd, uint64_t limit);
/** Deregister everything; registrations still in use are a bug (logged). */
void rov_regcache_free(struct rov_regcache *cache);

/** A registration covering [addr, addr+len), a local source of RDMA writes;
 * with remote, also readable by the peers (RDMA READ) and writable by our
 * reads.  NULL when registration fails (logged). */
struct rov_reg *rov_regcache_get(struct rov_regcache *cache, const void *addr, size_t len,
                                 bool remote);
void rov_regcache_put(struct rov_regcache *cache, struct rov_reg *reg);
uint32_t rov_reg_lkey(const struct rov_reg *reg);
uint32_t rov_reg_rkey(const struct rov_reg *reg);

/** Counters, for tests and status. */
struct rov_regcache_stats {
    uint64_t hits, misses, evictions;
    uint64_t released;       /* registrations whose memory was released */
    uint64_t kept_bytes;
};
void rov_regcache_stats(const struct rov_regcache *cache, struct rov_regcache_stats *st);

#endif
