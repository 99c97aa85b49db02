/*
 * Socket addresses shared by the rails that use IP: the TCP rail's data
 * sockets, the verbs rail's out-of-band connection setup and the UCX rail's
 * listener all publish and parse the same compact address form.
 *
 * Address format (at most ROV_NET_ADDR_MAX bytes): u8 family (4 or 6),
 * u16 port (network order), then 4 or 16 address bytes (network order).
 */
#ifndef ROV_NETADDR_H
#define ROV_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "railover/railover.h"

#define ROV_NET_ADDR_MAX 19

/** Encode ss (AF_INET or AF_INET6) into out; returns the length (7 or 19). */
size_t rov_net_addr_encode(const struct sockaddr_storage *ss, uint8_t *out);
/** Decode; ROV_ERR_INVAL for anything malformed. */
rov_status_t rov_net_addr_decode(const void *addr, size_t len, struct sockaddr_storage *ss,
                                 socklen_t *sslen_p);
/** "192.0.2.1:5000" / "[2001:db8::1]:5000", or "<bad address>". */
void rov_net_addr_str(const void *addr, size_t len, char *buf, size_t buf_len);
void rov_net_sockaddr_str(const struct sockaddr_storage *ss, char *buf, size_t len);
/** A rail's path_key (rail.h): the family and the address bytes, not the
 * port, hashed; never 0.  A malformed address hashes whole. */
uint64_t rov_net_addr_path_key(const void *addr, size_t len);

/** Whether sa (may be NULL) is ss's IP address: the same family and address
 * bytes, whatever the port (AF_INET and AF_INET6; anything else: false). */
bool rov_net_same_ip(const struct sockaddr *sa, const struct sockaddr_storage *ss);

/** The local address to bind (port 0): arg is an IP literal, an interface
 * name (its first address, IPv4 preferred) or empty (the first non-loopback
 * interface that is up; loopback when there is none).  ifname receives the
 * interface name when one was looked up (may be NULL with ifname_len 0).
 * ROV_ERR_NOT_FOUND for an unknown interface, ROV_ERR_INVAL for an IP
 * literal that peers cannot connect to (rov_net_addr_unusable(), or an
 * interface's broadcast address), both logged under subsys. */
rov_status_t rov_net_resolve(const char *subsys, const char *arg, struct sockaddr_storage *ss,
                             socklen_t *len_p, char *ifname, size_t ifname_len);

/** Why ss cannot be a rail's own address, the one its peers connect to:
 * the unspecified address (0.0.0.0/8, ::), a multicast address, the limited
 * broadcast address (255.255.255.255), also in IPv4-mapped form; NULL when
 * it can be.  (A subnet's broadcast address needs the interfaces:
 * rov_net_resolve() checks that too.) */
const char *rov_net_addr_unusable(const struct sockaddr_storage *ss);
/* The speed in Mbit/s of the interface that has the IP of ss
 * (/sys/class/net/NAME/speed), 0 when none has it or it has no speed
 * (loopback, a link that is down). */
uint64_t rov_net_link_mbps(const struct sockaddr_storage *ss);

/** The same for a rail argument: NULL unless arg is an IP literal that
 * cannot be a rail's address, else why (for RAILOVER_RAILS and
 * RAILOVER_TCP_IF, when they are read). */
const char *rov_net_literal_unusable(const char *arg);

/** Turn on TCP keepalive on a connected or connecting socket: the first
 * probe after idle_ns (at least 1 s) of silence, then every second, and an
 * error (ETIMEDOUT, or ECONNRESET from a peer kernel that no longer knows the
 * connection) after 3 unanswered.  For the stretches in which a rail waits
 * for the peer's application (its handshake answer) and so has nothing of its
 * own in flight: only the peer's kernel can then tell that the path, or the
 * peer's socket, is gone. */
void rov_net_keepalive(int fd, uint64_t idle_ns);

/** Map a socket errno to a status (ECONNREFUSED: ROV_ERR_REFUSED, EMFILE:
 * ROV_ERR_RESOURCE, ...). */
rov_status_t rov_net_errno_status(int err);

#endif
