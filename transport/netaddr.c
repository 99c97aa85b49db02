/* Socket addresses shared by the IP-based rails: see netaddr.h. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "transport/log.h"
#include "transport/netaddr.h"
#include "transport/rail.h" /* rov_hash_bytes() */

rov_status_t rov_net_errno_status(int err)
{
    switch (err) {
    case ECONNREFUSED: return ROV_ERR_REFUSED;
    case ETIMEDOUT: return ROV_ERR_TIMEDOUT;
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EHOSTDOWN:
    case ENETDOWN: return ROV_ERR_UNREACHABLE;
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE: return ROV_ERR_RESET;
    case ENOMEM:
    case ENOBUFS: return ROV_ERR_NOMEM;
    case EMFILE:
    case ENFILE: return ROV_ERR_RESOURCE;
    default: return ROV_ERR_IO;
    }
}

size_t rov_net_addr_encode(const struct sockaddr_storage *ss, uint8_t *out)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;

        out[0] = 4;
        memcpy(out + 1, &sin->sin_port, 2);
        memcpy(out + 3, &sin->sin_addr, 4);
        return 7;
    } else {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;

        out[0] = 6;
        memcpy(out + 1, &sin6->sin6_port, 2);
        memcpy(out + 3, &sin6->sin6_addr, 16);
        return 19;
    }
}

rov_status_t rov_net_addr_decode(const void *addr, size_t len, struct sockaddr_storage *ss,
                                socklen_t *sslen_p)
{
    const uint8_t *p = addr;

    memset(ss, 0, sizeof(*ss));
    if (len == 7 && p[0] == 4) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;

        sin->sin_family = AF_INET;
        memcpy(&sin->sin_port, p + 1, 2);
        memcpy(&sin->sin_addr, p + 3, 4);
        *sslen_p = sizeof(*sin);
    } else if (len == 19 && p[0] == 6) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

        sin6->sin6_family = AF_INET6;
        memcpy(&sin6->sin6_port, p + 1, 2);
        memcpy(&sin6->sin6_addr, p + 3, 16);
        *sslen_p = sizeof(*sin6);
    } else {
        return ROV_ERR_INVAL;
    }
    return ROV_OK;
}

const char *rov_net_addr_unusable(const struct sockaddr_storage *ss)
{
    const uint8_t *v4;

    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;

        if (IN6_IS_ADDR_UNSPECIFIED(a))
            return "the unspecified address";
        if (IN6_IS_ADDR_MULTICAST(a))
            return "a multicast address";
        if (!IN6_IS_ADDR_V4MAPPED(a))
            return NULL;
        v4 = a->s6_addr + 12;
    } else if (ss->ss_family == AF_INET) {
        v4 = (const uint8_t *)&((const struct sockaddr_in *)ss)->sin_addr;
    } else {
        return "not an IP address";
    }
    if (v4[0] == 0)
        return "the unspecified address";
    if (v4[0] >= 224 && v4[0] <= 239)
        return "a multicast address";
    if (v4[0] == 255 && v4[1] == 255 && v4[2] == 255 && v4[3] == 255)
        return "the broadcast address";
    return NULL;
}

/* An IP literal parsed into ss; false for anything else. */
static bool parse_literal(const char *arg, struct sockaddr_storage *ss, socklen_t *len_p)
{
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof(*ss));
    if (*arg && inet_pton(AF_INET, arg, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        *len_p = sizeof(*sin);
        return true;
    }
    if (*arg && inet_pton(AF_INET6, arg, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        *len_p = sizeof(*sin6);
        return true;
    }
    return false;
}

const char *rov_net_literal_unusable(const char *arg)
{
    struct sockaddr_storage ss;
    socklen_t len;

    return parse_literal(arg, &ss, &len) ? rov_net_addr_unusable(&ss) : NULL;
}

bool rov_net_same_ip(const struct sockaddr *sa, const struct sockaddr_storage *ss)
{
    if (!sa || sa->sa_family != ss->ss_family)
        return false;
    if (sa->sa_family == AF_INET)
        return memcmp(&((const struct sockaddr_in *)sa)->sin_addr,
                      &((const struct sockaddr_in *)ss)->sin_addr, 4) == 0;
    return sa->sa_family == AF_INET6 &&
           memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
                  &((const struct sockaddr_in6 *)ss)->sin6_addr, 16) == 0;
}

/* The broadcast address of an interface that is up (192.0.2.255 on a /24):
 * a literal one would be advertised to peers as if it were ours.  An
 * address of our own is never one: an address added without "brd" has no
 * broadcast, and getifaddrs() then reports the address itself there. */
static bool is_if_broadcast(const struct sockaddr_storage *ss)
{
    struct ifaddrs *ifs;
    bool bcast = false, own = false;

    if (ss->ss_family != AF_INET || getifaddrs(&ifs) < 0)
        return false;
    for (struct ifaddrs *ifa = ifs; ifa; ifa = ifa->ifa_next) {
        own = own || rov_net_same_ip(ifa->ifa_addr, ss);
        bcast = bcast ||
                ((ifa->ifa_flags & IFF_BROADCAST) && rov_net_same_ip(ifa->ifa_broadaddr, ss));
    }
    freeifaddrs(ifs);
    return bcast && !own;
}

/* Pick the local address: an IP literal, or an interface's first address
 * (IPv4 preferred), or with no argument the first non-loopback interface. */
rov_status_t rov_net_resolve(const char *subsys, const char *arg, struct sockaddr_storage *ss,
                             socklen_t *len_p, char *ifname, size_t ifname_len)
{
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    struct ifaddrs *ifs, *ifa, *best = NULL;

    if (ifname_len)
        ifname[0] = 0;
    if (parse_literal(arg, ss, len_p)) {
        const char *bad = rov_net_addr_unusable(ss);

        if (!bad && is_if_broadcast(ss))
            bad = "an interface's broadcast address";
        if (bad) {
            rov_error(subsys, "%s is %s, which peers cannot connect to: name an interface "
                      "or one of its own addresses", arg, bad);
            return ROV_ERR_INVAL;
        }
        return ROV_OK;
    }
    if (getifaddrs(&ifs) < 0) {
        rov_error(subsys, "getifaddrs: %m");
        return ROV_ERR_IO;
    }
    for (ifa = ifs; ifa; ifa = ifa->ifa_next) {
        int fam = ifa->ifa_addr ? ifa->ifa_addr->sa_family : -1;

        if (fam != AF_INET && fam != AF_INET6)
            continue;
        if (fam == AF_INET6 &&
            IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr))
            continue;
        if (*arg ? strcmp(ifa->ifa_name, arg) != 0
                 : (ifa->ifa_flags & IFF_LOOPBACK) || !(ifa->ifa_flags & IFF_UP))
            continue;
        if (!best || (fam == AF_INET && best->ifa_addr->sa_family != AF_INET))
            best = ifa;
    }
    if (!best && !*arg) {
        /* No network at all: loopback still lets processes of one host talk. */
        freeifaddrs(ifs);
        return rov_net_resolve(subsys, "127.0.0.1", ss, len_p, ifname, ifname_len);
    }
    if (!best) {
        freeifaddrs(ifs);
        rov_error(subsys, "interface '%s' does not exist or has no IP address", arg);
        return ROV_ERR_NOT_FOUND;
    }
    if (ifname_len)
        snprintf(ifname, ifname_len, "%s", best->ifa_name);
    if (best->ifa_addr->sa_family == AF_INET) {
        *sin = *(struct sockaddr_in *)best->ifa_addr;
        sin->sin_port = 0;
        *len_p = sizeof(*sin);
    } else {
        *sin6 = *(struct sockaddr_in6 *)best->ifa_addr;
        sin6->sin6_port = 0;
        *len_p = sizeof(*sin6);
    }
    freeifaddrs(ifs);
    return ROV_OK;
}

uint64_t rov_net_link_mbps(const struct sockaddr_storage *ss)
{
    struct ifaddrs *ifs;
    char path[64 + IF_NAMESIZE] = "";
    long long mbps = 0;
    FILE *f;

    if (getifaddrs(&ifs) < 0)
        return 0;
    for (struct ifaddrs *ifa = ifs; ifa && !path[0]; ifa = ifa->ifa_next)
        if (rov_net_same_ip(ifa->ifa_addr, ss))
            snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifa->ifa_name);
    freeifaddrs(ifs);
    if (!path[0] || !(f = fopen(path, "re")))
        return 0;
    if (fscanf(f, "%lld", &mbps) != 1 || mbps < 0)
        mbps = 0;
    fclose(f);
    return (uint64_t)mbps;
}

void rov_net_sockaddr_str(const struct sockaddr_storage *ss, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;

    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;

        inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
        port = ntohs(sin->sin_port);
        snprintf(buf, len, "%s:%u", ip, port);
    } else {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;

        inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof(ip));
        port = ntohs(sin6->sin6_port);
        snprintf(buf, len, "[%s]:%u", ip, port);
    }
}


void rov_net_addr_str(const void *addr, size_t len, char *buf, size_t buf_len)
{
    struct sockaddr_storage ss;
    socklen_t sl;

    if (rov_net_addr_decode(addr, len, &ss, &sl) != ROV_OK)
        snprintf(buf, buf_len, "<bad address>");
    else
        rov_net_sockaddr_str(&ss, buf, buf_len);
}

uint64_t rov_net_addr_path_key(const void *addr, size_t len)
{
    const uint8_t *p = addr;
    struct sockaddr_storage ss;
    socklen_t sl;
    uint64_t h;

    if (rov_net_addr_decode(addr, len, &ss, &sl) == ROV_OK) /* without the port */
        h = rov_hash_bytes(rov_hash_bytes(ROV_HASH_INIT, p, 1), p + 3, len - 3);
    else
        h = rov_hash_bytes(ROV_HASH_INIT, p, len);
    return h ? h : 1;
}

void rov_net_keepalive(int fd, uint64_t idle_ns)
{
    int one = 1, cnt = 3, intvl = 1;
    int idle = idle_ns >= 1000000000ull ? (int)(idle_ns / 1000000000ull) : 1;

    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}
