/* Link changes for the IP rails: see netlink.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "transport/log.h"
#include "transport/netaddr.h"
#include "transport/netlink.h"

/* Whether the interface ifindex carries addr (the rail's own address): a
 * link that comes up elsewhere says nothing about this rail's path. */
static bool carries(int ifindex, const struct sockaddr_storage *addr)
{
    char name[IF_NAMESIZE];
    struct ifaddrs *ifs;
    bool yes = false;

    if (!if_indextoname((unsigned)ifindex, name) || getifaddrs(&ifs) < 0)
        return false;
    for (struct ifaddrs *ifa = ifs; ifa && !yes; ifa = ifa->ifa_next)
        yes = strcmp(ifa->ifa_name, name) == 0 && rov_net_same_ip(ifa->ifa_addr, addr);
    freeifaddrs(ifs);
    return yes;
}

/* Remember ifindex's state; +1 when it went from not running to running,
 * -1 from running to not running, 0 when it did not change (or is new). */
static int changed(struct rov_net_links *l, int ifindex, bool running)
{
    unsigned i;
    bool was;

    for (i = 0; i < l->nseen && l->seen[i].ifindex != ifindex; i++)
        ;
    if (i == l->nseen) {
        /* First news of this link (the dump at open, or a new link). */
        i = l->nseen < ROV_NET_LINKS_SEEN ? l->nseen++ : l->next++ % ROV_NET_LINKS_SEEN;
        l->seen[i].ifindex = ifindex;
        l->seen[i].running = running;
        return 0;
    }
    was = l->seen[i].running;
    l->seen[i].running = running;
    return running == was ? 0 : running ? 1 : -1;
}

static void links_cb(struct rov_watch *w, uint32_t events)
{
    struct rov_net_links *l = rov_container_of(w, struct rov_net_links, watch);
    char buf[16384] __attribute__((aligned(__alignof__(struct nlmsghdr))));
    bool up = false, down = false;
    ssize_t n;

    (void)events;
    for (;;) {
        struct sockaddr_nl from;
        socklen_t fl = sizeof(from);

        n = recvfrom(w->fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == ENOBUFS) {
                /* Events were lost: one may have been ours.  A retry of a
                 * path that is still down costs one attempt. */
                rov_debug("netlink", "rail %s: link events lost (ENOBUFS)", l->rail->spec->name);
                up = true;
                continue;
            }
            if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
                rov_warn("netlink", "rail %s: link events: %m; no longer watched",
                         l->rail->spec->name);
                rov_net_links_close(l);
            }
            break;
        }
        if (fl < sizeof(from) || from.nl_pid != 0)
            continue; /* not the kernel's: another process may unicast here */
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            const struct ifinfomsg *ifi = NLMSG_DATA(h);
            char name[IF_NAMESIZE] = "?";
            int change;

            if (h->nlmsg_type != RTM_NEWLINK || h->nlmsg_len < NLMSG_LENGTH(sizeof(*ifi)))
                continue;
            change = changed(l, ifi->ifi_index, (ifi->ifi_flags & (IFF_UP | IFF_RUNNING)) ==
                                                    (IFF_UP | IFF_RUNNING));
            if (!change || !carries(ifi->ifi_index, &l->local))
                continue;
            if_indextoname((unsigned)ifi->ifi_index, name);
            if (change > 0) {
                rov_info("netlink", "rail %s: link %s is up again", l->rail->spec->name, name);
                up = true;
                down = false;
            } else {
                rov_warn("netlink", "rail %s: link %s is down: its connections leave it",
                         l->rail->spec->name, name);
                down = true;
                up = false;
            }
        }
    }
    /* The last word of this batch counts: down then up again within it
     * (a flap faster than this process read) leaves the channels alone. */
    if (down)
        rov_rail_link_down(l->rail, "the rail's link went down (netlink)");
    if (up)
        rov_rail_link_up(l->rail);
}

void rov_net_links_open(struct rov_net_links *l, struct rov_rail *rail,
                        const struct sockaddr_storage *local)
{
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK, .nl_groups = RTMGRP_LINK};
    struct {
        struct nlmsghdr h;
        struct ifinfomsg ifi;
    } req = {
        .h = {.nlmsg_len = sizeof(req), .nlmsg_type = RTM_GETLINK,
              .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1},
        .ifi = {.ifi_family = AF_UNSPEC},
    };
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);

    memset(l, 0, sizeof(*l));
    l->watch.fd = -1;
    l->rail = rail;
    l->local = *local;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        send(fd, &req, sizeof(req), 0) < 0) {
        rov_debug("netlink", "link changes not watched: %m");
        if (fd >= 0)
            close(fd);
        return;
    }
    l->watch.fd = fd;
    l->watch.cb = links_cb;
    if (rov_ctx_watch_urgent(rail->ctx, &l->watch, EPOLLIN) != ROV_OK) {
        close(fd);
        l->watch.fd = -1;
    }
}

void rov_net_links_close(struct rov_net_links *l)
{
    if (!l->rail || l->watch.fd < 0) /* (zeroed: never opened) */
        return;
    rov_ctx_unwatch(l->rail->ctx, &l->watch);
    close(l->watch.fd);
    l->watch.fd = -1;
}
