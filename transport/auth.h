/*
 * Handshake authentication (the wire's trust model: docs/architecture.md,
 * "Who may join a connection").
 *
 * Every endpoint holds a random key (ROV_KEY_LEN bytes) that travels in its
 * address blob, out of band (a file, PMIx, the MPI modex), and never on the
 * wire.  A first HELLO carries an HMAC-SHA256 under the listener's key: only
 * a process that was given the blob can open a connection.  The listener's
 * HELLO_ACK brings a nonce of its own; both sides then derive the
 * connection's secret from the listener's key and the two nonces, and
 * every later HELLO (a reconnect, a switch, a failback probe, from either
 * side) and every HELLO_ACK carries a MAC under that secret.  A HELLO_ACK's
 * MAC also covers the nonce of the HELLO it answers, and a reconnect HELLO
 * carries a counter that the receiver accepts once (a window of the last
 * 64), so neither can be replayed.  Only handshakes are authenticated: the
 * per-message path is unchanged.
 *
 * The MAC and the random bytes come from OpenSSL's libcrypto; nothing here
 * is cryptography of our own but the choice of inputs.
 */
#ifndef ROV_AUTH_H
#define ROV_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "railover/railover.h"

#define ROV_KEY_LEN 32   /* endpoint key, connection secret */
#define ROV_MAC_LEN 32   /* HMAC-SHA256 */
#define ROV_NONCE_LEN 16

/** Fill buf with len bytes from the kernel's CSPRNG.  ROV_ERR_IO (logged)
 * if it cannot. */
rov_status_t rov_auth_random(void *buf, size_t len);

/** HMAC-SHA256 under key of: label (a NUL-terminated constant naming the
 * use), then each of the n pieces in order. */
struct rov_auth_piece {
    const void *p;
    size_t len;
};
void rov_auth_mac(const uint8_t key[ROV_KEY_LEN], const char *label,
                  const struct rov_auth_piece *pieces, int n, uint8_t out[ROV_MAC_LEN]);

/** The MAC of a HELLO or HELLO_ACK (wire.h): over the nonce it answers
 * (answered, ROV_NONCE_LEN bytes: for a HELLO the channel's CHALLENGE, for
 * a HELLO_ACK the HELLO's nonce), so that it cannot be replayed on another
 * channel or as the answer to another, its encoded header (hdrbuf,
 * ROV_WIRE_HDR_LEN bytes, which names the frame type) and its payload of
 * len bytes but the MAC at its end. */
void rov_auth_hello_mac(const uint8_t key[ROV_KEY_LEN], const uint8_t *answered,
                        const uint8_t *hdrbuf, const uint8_t *payload, size_t len,
                        uint8_t out[ROV_MAC_LEN]);

/** Constant-time comparison of two MACs. */
bool rov_auth_mac_equal(const uint8_t a[ROV_MAC_LEN], const uint8_t b[ROV_MAC_LEN]);
/** The same for the first n bytes of each (a MAC truncated to n, at least
 * 16 bytes: where a message has no room for all of it). */
bool rov_auth_mac_prefix_equal(const uint8_t *a, const uint8_t *b, size_t n);

/** Whether the key is all zero: the public copy of an address blob (the one
 * a HELLO carries), which cannot open connections. */
bool rov_auth_key_is_zero(const uint8_t key[ROV_KEY_LEN]);

/* Anti-replay window of a connection's reconnect HELLOs: the highest
 * counter seen and a bitmap of the 64 below it (bit i: max - i seen). */
struct rov_replay {
    uint64_t max;
    uint64_t seen;
};

/** Whether ctr is new (never accepted, not older than the window).  Does
 * not record it: rov_replay_accept() does, once the MAC has been checked. */
bool rov_replay_fresh(const struct rov_replay *r, uint64_t ctr);
void rov_replay_accept(struct rov_replay *r, uint64_t ctr);

#endif
