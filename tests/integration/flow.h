/*
 * Checked message flows for the integration tests.
 *
 * A flow is one direction pair on one connection: it sends messages
 * k = 0, 1, ... generated from (tx_seed, k) and verifies that what it
 * receives is exactly messages k = 0, 1, ... generated from (rx_seed, k):
 * size, tag (low 32 bits of k) and a checksum of the content.  Whatever goes
 * wrong (loss, duplicate, reorder, corruption, a wrong completion) is
 * reported with the message number, what was expected and what arrived.
 *
 * Everything here runs in the thread that progresses the connection's
 * context.  Only the public API is used.
 */
#ifndef ROV_IT_FLOW_H
#define ROV_IT_FLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "railover/railover.h"

#define IT_KiB ((size_t)1024)
#define IT_MiB (1024 * IT_KiB)
#define IT_UNLIMITED UINT64_MAX

/* ---- deterministic message generator ------------------------------------ */

/** Size of message k of the stream with this seed, at most max_size:
 * 90% in 0..256 bytes, 9.9% log-uniform up to 64 KiB, 0.1% log-uniform up to
 * max_size; messages 0..5 are 0, max_size, 8 KiB, 8 KiB + 1, 64 KiB and 1. */
size_t it_msg_size(uint64_t seed, uint64_t k, size_t max_size);

/** Fill buf with the content of message k (len bytes). */
void it_msg_fill(uint64_t seed, uint64_t k, void *buf, size_t len);

/** Checksum of a buffer, and of message k's content computed without
 * materialising it; equal when the content is right. */
uint64_t it_checksum(const void *buf, size_t len);
uint64_t it_msg_checksum(uint64_t seed, uint64_t k, size_t len);

/** Split 64 bits of randomness; also used to derive seeds. */
uint64_t it_mix64(uint64_t x);

/** Small PRNG for test decisions (switch timing, random garbage). */
uint64_t it_rand(uint64_t *state);

uint64_t it_now_ns(void);

/* ---- flows -------------------------------------------------------------- */

struct it_flow;

/* A send buffer.  Busy from the send until its completion callback, or until
 * rov_conn_send() returned ROV_OK (the library copied it). */
struct it_slot {
    struct it_flow *flow;
    uint8_t *buf;
    uint64_t k;
    size_t len;
    bool busy;
    bool mapped;         /* buf is its own mapping (it_flow.renew_buffers) */
    unsigned renewals;
};

struct it_pool {
    struct it_slot *slots;
    unsigned nslots;
    size_t cap;          /* buffer size of every slot */
    unsigned *free_idx;  /* stack of free slot indices */
    unsigned nfree;
};

struct it_flow {
    rov_conn_t *conn;
    char name[48];
    uint64_t tx_seed, rx_seed;
    uint64_t tx_count, rx_count; /* messages to send / to expect (IT_UNLIMITED: no end yet) */
    size_t max_size;

    uint64_t tx_next;            /* next k to send */
    uint64_t tx_bytes;
    uint64_t tx_inflight;        /* zero-copy sends awaiting their callback */
    uint64_t tx_notify_pending;  /* copied sends with NOTIFY_DELIVERED pending */
    uint64_t tx_zcopy, tx_copied, tx_again, tx_notified;

    uint64_t rx_next;            /* next k expected */
    uint64_t rx_bytes;
    uint64_t rx_extra;           /* messages beyond rx_count */

    uint64_t tx_failed;          /* sends completed with an error status */
    uint64_t errors;             /* verification failures */
    uint64_t first_error_ns;
    bool failed;                 /* a send failed: stop sending */
    bool draining;               /* being torn down: cancellations are expected */
    /* Replace a buffer's memory at the same address after each zero-copy
     * send (munmap + mmap there, or MADV_DONTNEED, in turn): a library that
     * kept a registration of the old pages sends their poison.  Set before
     * the first send. */
    bool renew_buffers;
    uint64_t renewals;

    struct it_pool small, large;
};

/** Set up a flow.  conn may be set later (flow->conn). */
int it_flow_init(struct it_flow *flow, const char *name, uint64_t tx_seed, uint64_t rx_seed,
                 uint64_t tx_count, uint64_t rx_count, size_t max_size);
void it_flow_free(struct it_flow *flow);

/** Send up to max_msgs further messages; stops at ROV_ERR_AGAIN or when no
 * buffer is free.  Returns the number sent; a send error other than
 * ROV_ERR_AGAIN is reported, counted, and stops the flow's sending. */
unsigned it_flow_pump(struct it_flow *flow, unsigned max_msgs);

/** Send nothing more: the messages sent so far become the whole outgoing
 * stream (tx_count = tx_next).  Sends in flight still complete. */
void it_flow_stop_tx(struct it_flow *flow);

/** The peer has ended its stream: the messages received so far are all of
 * it (rx_count = rx_next); any later message is reported as a failure. */
void it_flow_end_rx(struct it_flow *flow);

/** Verify one received message (call from the recv callback). */
void it_flow_recv(struct it_flow *flow, uint32_t tag, const void *data, size_t len);

/** Every message sent with its completion reported. */
bool it_flow_tx_done(const struct it_flow *flow);
/** Every expected message received. */
bool it_flow_rx_done(const struct it_flow *flow);

/** One line on stderr describing where the flow stands (for hangs). */
void it_flow_dump(const struct it_flow *flow);

/** Report a verification failure of flow (counted in flow->errors). */
void it_flow_fail(struct it_flow *flow, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Human readable bytes ("1.23 GiB"), into buf. */
const char *it_bytes_str(uint64_t bytes, char *buf, size_t len);

#endif
