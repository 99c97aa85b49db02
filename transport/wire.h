/*
 * Railover wire format, common to every rail.
 *
 * A frame is a 32-byte header followed by `len` payload bytes.  All integers
 * are little-endian.
 *
 *   0  u16 magic     0x5652 ("RV")
 *   2  u8  version   ROV_WIRE_VERSION
 *   3  u8  type      enum rov_ft
 *   4  u32 len       payload bytes after the header
 *   8  u64 seq       DATA: message sequence number (first is 1); else 0
 *  16  u64 ack       cumulative: highest sequence delivered in order
 *  24  u32 tag       DATA: user tag; HELLO/HELLO_ACK/SWITCH: bits 0-7 flags
 *                    (ROV_HF_*), 8-15 switch reason (rov_reason_t), 16-23
 *                    with ROV_HF_FAILED the rail index that failed;
 *                    CLOSE: 0, or ROV_CLOSE_ACKED; QUIESCE: 0, or
 *                    ROV_QUIESCE_RESUME; READ, READ_DATA: the read's id;
 *                    ACK, RESEND: 0 (not checked)
 *  28  u32 flags     DATA: ROV_DF_MORE (a fragment: the message goes on in
 *                    the next sequence number); else, and every other bit,
 *                    zero
 *
 * Stream rails (TCP) find frame boundaries with rov_wire_peek(), which also
 * rejects garbage before any payload is buffered; a frame already whole in
 * the buffer is measured with rov_wire_frame_len() and checked once, by the
 * decode in rov_rail_recv().
 */
#ifndef ROV_WIRE_H
#define ROV_WIRE_H

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "railover/railover.h"
#include "transport/auth.h"

#define ROV_WIRE_MAGIC 0x5652u
#define ROV_WIRE_VERSION 5
#define ROV_WIRE_HDR_LEN 32
#define ROV_EP_ID_LEN 16

enum rov_ft {
    ROV_FT_DATA = 1,      /* user message */
    ROV_FT_ACK = 2,       /* stand-alone cumulative acknowledgement */
    ROV_FT_HELLO = 3,     /* first frame on a new channel: identity */
    ROV_FT_HELLO_ACK = 4, /* answer to HELLO, same payload without address */
    ROV_FT_SWITCH = 5,    /* "I send on this channel now; I have up to ack" */
    ROV_FT_RESEND = 6,    /* "resend everything after ack" (gap recovery) */
    ROV_FT_CLOSE = 7,     /* sender has flushed everything and is done;
                             with ROV_CLOSE_ACKED: "I have your CLOSE" */
    ROV_FT_QUIESCE = 8,   /* end of channel: "I send nothing after my message
                             <payload: u64 seq> until I resume"; with
                             ROV_QUIESCE_RESUME: "I send again" */
    ROV_FT_CHALLENGE = 9, /* the acceptor's first frame on every channel:
                             payload ROV_NONCE_LEN fresh random bytes that
                             the connector's HELLO MAC must cover, so a
                             recorded HELLO opens nothing */
    /* A rail's own frames, for a rail that reads remote memory by message
     * (the TCP rail's ops.get); never handed to the transport. */
    ROV_FT_READ = 10,     /* "send me len bytes at addr of your registration
                             key": payload ROV_WIRE_READ_LEN bytes, u64 addr,
                             u64 len, u32 key, u32 zero; tag: the read's id */
    ROV_FT_READ_DATA = 11, /* the answer, in the order asked: tag the read's
                              id, payload the bytes (len as asked), or none
                              when refused (no such registration or range) */
    ROV_FT_MAX_ = 11,
};
#define ROV_WIRE_READ_LEN 24
#define ROV_FT_RAIL_FIRST_ ROV_FT_READ /* types from here are a rail's own */

/* QUIESCE flags, in the tag field. */
enum {
    ROV_QUIESCE_RESUME = 1u << 0,
};
#define ROV_QUIESCE_PAYLOAD 8 /* the end marker's last sequence number */

/* HELLO / HELLO_ACK / SWITCH flags, carried in the tag field. */
enum {
    ROV_HF_SWITCH = 1u << 0, /* the sender moves its traffic to this channel */
    ROV_HF_REPLY = 1u << 1,  /* the receiver must answer with its own ack */
    ROV_HF_FAILED = 1u << 2, /* the sender left a failed rail (index in bits 16-23) */
    ROV_HF_HOLD = 1u << 3,   /* the sender holds the connection off its preferred rail */
    ROV_HF_MASK_ = 0x00ffff0fu,
};

/* CLOSE flags, in the tag field.  ROV_CLOSE_ACKED: the answer to the
 * peer's CLOSE from a side that had sent its own; the peer may finish (the
 * close handshake, conn.c).  ROV_CLOSE_ABORT: the connection failed at the
 * sender, or no longer exists there (the answer to a HELLO for it); bits
 * 8-15 carry the status, negated (rov_close_abort()). */
enum {
    ROV_CLOSE_ACKED = 1u << 0,
    ROV_CLOSE_ABORT = 1u << 2,
    ROV_CLOSE_STATUS_MASK_ = 0xffu << 8,
};

static inline uint32_t rov_close_abort(rov_status_t status)
{
    return ROV_CLOSE_ABORT | ((uint32_t)-status & 0xffu) << 8;
}
/* The status a CLOSE|ABORT carries.  A byte that names no status of ours
 * (a broken or hostile peer, or a newer one) reads as ROV_ERR_RESET, so that
 * the log names what happened rather than "(unknown status)".
 * ROV_ERR_RESOURCE is the last status of railover.h. */
static inline rov_status_t rov_close_status(uint32_t tag)
{
    rov_status_t st = -(rov_status_t)((tag >> 8) & 0xffu);

    return st < ROV_ERR_RESOURCE ? ROV_ERR_RESET : st;
}

static inline uint32_t rov_hf_make(uint32_t flags, unsigned reason, unsigned failed_rail)
{
    return flags | (reason & 0xffu) << 8 | (failed_rail & 0xffu) << 16;
}
static inline unsigned rov_hf_reason(uint32_t tag) { return (tag >> 8) & 0xffu; }
static inline unsigned rov_hf_failed_rail(uint32_t tag) { return (tag >> 16) & 0xffu; }

struct rov_wire_hdr {
    uint8_t version;
    uint8_t type;
    uint32_t len;
    uint64_t seq;
    uint64_t ack;
    uint32_t tag;
    uint32_t flags; /* DATA: ROV_DF_* */
};

/* DATA flags.  ROV_DF_MORE: this frame is a fragment of a message that a
 * bond split over its members (conn.c); the message ends with the first
 * frame after it without the flag, and is delivered whole. */
enum {
    ROV_DF_MORE = 1u << 0,
};

/* HELLO / HELLO_ACK payload: who is connecting, to which connection, and
 * (on a first connect) the connector's endpoint address in its public form
 * (key zeroed), so the acceptor can reach back on other rails; then the
 * proof (transport/auth.h).
 *
 *   0 ep_id[16]  sender's endpoint
 *  16 u64 conn_id       sender's connection id (non-zero)
 *  24 u64 peer_conn_id  receiver's connection id, 0 on a first HELLO
 *  32 u16 rail          sender's rail index of this channel
 *  34 u16 addr_len
 *  36 u64 max_msg       the sender's RAILOVER_MAX_MSG: the largest message
 *                       it accepts
 *  44 u64 ctr           reconnect HELLO: the sender's handshake counter for
 *                       the connection (anti-replay, from 1); else 0
 *  52 nonce[16]         fresh random bytes
 *  68 u16 data_len      first HELLO: the connector's connect-time data
 *                       (rov_connect_params_t, at most ROV_CONN_DATA_MAX);
 *                       else 0
 *  70 addr[addr_len]
 *  .. data[data_len]
 *  .. mac[32]           HMAC-SHA256 (auth.h) over a label, the nonce it
 *                       answers (a HELLO: the channel's CHALLENGE; a
 *                       HELLO_ACK: the HELLO's nonce), the 32-byte header
 *                       and the payload before the MAC: under the
 *                       listener's endpoint key for a first HELLO, under
 *                       the connection's secret for everything else.
 *
 * A channel's handshake: the acceptor sends CHALLENGE (its nonce) at
 * once; the connector answers with HELLO, whose MAC covers that nonce; the
 * acceptor answers with HELLO_ACK, whose MAC covers the HELLO's nonce.
 * Each side's proof is bound to the other's fresh nonce: no recorded
 * HELLO or HELLO_ACK is accepted on another channel. */
struct rov_wire_hello {
    uint8_t ep_id[ROV_EP_ID_LEN];
    uint64_t conn_id;
    uint64_t peer_conn_id;
    uint16_t rail;
    uint64_t max_msg;
    uint64_t ctr;
    uint8_t nonce[ROV_NONCE_LEN];
    const void *addr;             /* endpoint address blob, may be empty */
    size_t addr_len;
    const void *data;             /* connect-time data, may be empty */
    size_t data_len;
    const uint8_t *mac;           /* decode: points into the payload */
};

#define ROV_WIRE_HELLO_ADDR_OFF 70
#define ROV_WIRE_HELLO_FIXED (ROV_WIRE_HELLO_ADDR_OFF + ROV_MAC_LEN)
/* Largest HELLO/HELLO_ACK payload: what a rail accepts on a channel whose
 * peer has not authenticated yet (rov_chan_rx_max_payload()). */
#define ROV_WIRE_HELLO_MAX 1024

/* rov_wire_encode(hdr): inline, below the integer helpers it uses. */

/** Validate and decode a header.  ROV_OK, ROV_INPROGRESS when fewer than
 * ROV_WIRE_HDR_LEN bytes are given, ROV_ERR_PROTO (with a static reason in
 * *why_p) for bad magic, version, type, reserved bits or a payload longer
 * than max_payload. */
rov_status_t rov_wire_decode(const void *buf, size_t avail, size_t max_payload,
                             struct rov_wire_hdr *hdr, const char **why_p);

/** For stream rails: how long is the frame that starts at buf?  Same returns
 * as rov_wire_decode(); on ROV_OK *frame_len_p = header + payload. */
rov_status_t rov_wire_peek(const void *buf, size_t avail, size_t max_payload,
                           size_t *frame_len_p, const char **why_p);

/** Encode a HELLO payload but its MAC (left zero, in the last ROV_MAC_LEN
 * bytes); returns its length (ROV_WIRE_HELLO_FIXED + addr + data). */
size_t rov_wire_hello_encode(void *buf, const struct rov_wire_hello *hello);
/** Decode a HELLO payload; pointers refer into buf. */
rov_status_t rov_wire_hello_decode(const void *buf, size_t len, struct rov_wire_hello *hello,
                                   const char **why_p);

/* Text form of an endpoint id: 32 lowercase hex digits (status, control). */
#define ROV_EP_ID_HEX_LEN (2 * ROV_EP_ID_LEN)
void rov_wire_ep_id_hex(const uint8_t *id, char out[ROV_EP_ID_HEX_LEN + 1]);
/** Parse the text form (either case); ROV_ERR_INVAL unless exactly 32 hex digits. */
rov_status_t rov_wire_ep_id_parse(const char *hex, uint8_t *id);

/* Endpoint address blob (rov_endpoint_address()):
 *   u32 magic 0x41564f52 ("ROVA"), u8 version, u8 rail count, u32 rail
 *   generation (how many times the endpoint's rails were closed: a memory
 *   key names the generation it was made in, transport/mem.c), 16-byte ep id,
 *   32-byte endpoint key (auth.h; all zero in the public form a HELLO
 *   carries), then per rail: u8 rail index, u8 kind length, kind ("tcp"), u16 address
 *   length, rail address bytes (rail-specific). */
#define ROV_ADDR_MAGIC 0x41564f52u
#define ROV_ADDR_MAX_RAILS 16
#define ROV_RAIL_KIND_MAX 15
#define ROV_ADDR_FIXED (4 + 1 + 1 + 4 + ROV_EP_ID_LEN + ROV_KEY_LEN)

struct rov_wire_addr {
    uint32_t gen;
    uint8_t ep_id[ROV_EP_ID_LEN];
    uint8_t key[ROV_KEY_LEN];
    unsigned nrails;
    struct {
        unsigned index;
        char kind[ROV_RAIL_KIND_MAX + 1];
        const void *addr; /* points into the decoded blob */
        size_t addr_len;
    } rails[ROV_ADDR_MAX_RAILS];
};

/** Encode into buf (of size cap); returns the blob length, or 0 if cap is too
 * small (then call with a larger buffer; rov_wire_addr_size() tells). */
size_t rov_wire_addr_size(const struct rov_wire_addr *addr);
size_t rov_wire_addr_encode(void *buf, size_t cap, const struct rov_wire_addr *addr);
/** Decode and validate a blob from an untrusted source. */
rov_status_t rov_wire_addr_decode(const void *buf, size_t len, struct rov_wire_addr *addr,
                                  const char **why_p);

/* Little-endian integers at any alignment: one load or store each (memcpy of
 * a fixed size compiles to a single move). */
static inline void rov_put16(uint8_t *p, uint16_t v)
{
    v = htole16(v);
    memcpy(p, &v, sizeof(v));
}
static inline void rov_put32(uint8_t *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, sizeof(v));
}
static inline void rov_put64(uint8_t *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, sizeof(v));
}
static inline uint16_t rov_get16(const uint8_t *p)
{
    uint16_t v;

    memcpy(&v, p, sizeof(v));
    return le16toh(v);
}
static inline uint32_t rov_get32(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return le32toh(v);
}
static inline uint64_t rov_get64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return le64toh(v);
}

/** What a full header (ROV_WIRE_HDR_LEN bytes at p) says the frame's length
 * is, header included; nothing checked. */
static inline size_t rov_wire_frame_len(const uint8_t *p)
{
    return ROV_WIRE_HDR_LEN + (size_t)rov_get32(p + 4);
}

/** Encode hdr (its version field is ignored: ROV_WIRE_VERSION is written).
 * Inline: the send path encodes every DATA header. */
static inline void rov_wire_encode(void *buf, const struct rov_wire_hdr *hdr)
{
    uint8_t *p = buf;

    rov_put16(p, ROV_WIRE_MAGIC);
    p[2] = ROV_WIRE_VERSION;
    p[3] = hdr->type;
    rov_put32(p + 4, hdr->len);
    rov_put64(p + 8, hdr->seq);
    rov_put64(p + 16, hdr->ack);
    rov_put32(p + 24, hdr->tag);
    rov_put32(p + 28, hdr->flags);
}

/** The common case of rov_wire_decode(), inline for the receive path: a
 * whole frame of frame_len bytes that is a valid DATA frame.  True with *hdr
 * filled in; false for anything else, which rov_wire_decode() then judges. */
static inline bool rov_wire_decode_data(const uint8_t *p, size_t frame_len, size_t max_payload,
                                        struct rov_wire_hdr *hdr)
{
    const uint32_t data_first = ROV_WIRE_MAGIC | (uint32_t)ROV_WIRE_VERSION << 16 |
                                (uint32_t)ROV_FT_DATA << 24; /* magic, version, type */
    uint32_t len, flags;
    uint64_t seq;

    if (frame_len < ROV_WIRE_HDR_LEN) /* a short frame from a message rail */
        return false;
    len = rov_get32(p + 4);
    seq = rov_get64(p + 8);
    flags = rov_get32(p + 28);
    if (rov_get32(p) != data_first || len > max_payload ||
        (size_t)len + ROV_WIRE_HDR_LEN != frame_len || seq == 0 || (flags & ~ROV_DF_MORE))
        return false;
    /* Checked equal to the constants above; taken from the frame so that the
     * compiler has no constant to load from another page (.rodata). */
    hdr->version = p[2];
    hdr->type = p[3];
    hdr->len = len;
    hdr->seq = seq;
    hdr->ack = rov_get64(p + 16);
    hdr->tag = rov_get32(p + 24);
    hdr->flags = flags;
    return true;
}

#endif
