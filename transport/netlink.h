/*
 * Link changes for the rails that use IP.  A rail whose interface stops
 * running (ip link set down, the carrier lost: a cable pulled, the switch
 * port or the peer's end down) says so with rov_rail_link_down(): every
 * connection's channel on it fails at once, reason "failover.link", instead
 * of each waiting for its own stall timer (RAILOVER_FAILOVER_TIMEOUT).  One
 * that comes back up (ip link set up, the carrier back after a switch
 * restarts) says so with rov_rail_link_up(), and the connections whose
 * channel on that rail failed retry it at once instead of after their
 * backoff's doubled step (up to RAILOVER_FAILBACK_RETRY_MAX, 5 s by default).
 *
 * A NETLINK_ROUTE socket subscribed to RTMGRP_LINK, watched in the context's
 * epoll.  Each link's state (up and running, or not) is remembered from a dump
 * taken at open; a link that changes state, and carries the rail's local
 * address, is news.  Without netlink (a sandbox that forbids it) the rail
 * works as before: stall detection finds a dead link, and only its retries
 * find the path again.
 */
#ifndef ROV_NETLINK_H
#define ROV_NETLINK_H

#include <stdbool.h>
#include <sys/socket.h>

#include "transport/rail.h"

#define ROV_NET_LINKS_SEEN 64 /* links remembered (then the oldest is forgotten) */

struct rov_net_links {
    struct rov_watch watch;          /* fd -1: not watching */
    struct rov_rail *rail;
    struct sockaddr_storage local;   /* the rail's own address */
    unsigned nseen, next;            /* entries used, the next one replaced */
    struct {
        int ifindex;
        bool running;
    } seen[ROV_NET_LINKS_SEEN];
};

/** Start watching for rail, whose own address is local.  Failure is logged
 * at debug level and leaves links->watch.fd at -1: nothing else changes. */
void rov_net_links_open(struct rov_net_links *links, struct rov_rail *rail,
                        const struct sockaddr_storage *local);
/** Stop watching (nothing when not watching, or never opened: zeroed). */
void rov_net_links_close(struct rov_net_links *links);

#endif
