/*
 * The kernel's measured delivery rate of a TCP socket (tcp_info's
 * tcpi_delivery_rate, Linux 4.9 and later), for a bond's member rates
 * (transport/bond.c).  In a file of its own: glibc's <netinet/tcp.h>, which
 * tcp.c uses, has an older struct tcp_info than <linux/tcp.h>, and the two
 * headers do not go together.
 */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sockets/tcp_rate.h"

uint64_t rov_tcp_delivery_rate(int fd, int *app_limited_p)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    *app_limited_p = 1;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_delivery_rate) + sizeof(ti.tcpi_delivery_rate))
        return 0;
    *app_limited_p = ti.tcpi_delivery_rate_app_limited;
    return ti.tcpi_delivery_rate;
}
