#ifndef ROV_TCP_RATE_H
#define ROV_TCP_RATE_H
#include <stdint.h>

/* fd's delivery rate as the kernel measured it last (bytes/s; 0: unknown),
 * and whether the sender had too little to send to fill the path then
 * (*app_limited_p: the rate is a lower bound of what the path carries). */
uint64_t rov_tcp_delivery_rate(int fd, int *app_limited_p);

#endif
