/*
 * The one retry backoff: a first connect the peer dropped, a reconnect
 * after a reopen (transport/conn_connect.c, conn_stage.c) and the failover
 * engine's rail retries (failover/failover.c) each wait twice as long as
 * last time, from a first wait up to a cap.  A caller keeps its last wait
 * in a uint64_t, 0 before the first; setting it back to 0 starts over.
 */
#ifndef ROV_BACKOFF_H
#define ROV_BACKOFF_H

#include <stdint.h>

/** The next wait: min_ns after none, else twice *last_ns, at most max_ns;
 * stored back in *last_ns. */
static inline uint64_t rov_backoff_next(uint64_t *last_ns, uint64_t min_ns, uint64_t max_ns)
{
    uint64_t next = !*last_ns ? min_ns : *last_ns > max_ns / 2 ? max_ns : 2 * *last_ns;

    *last_ns = next < max_ns ? next : max_ns;
    return *last_ns;
}

#endif
