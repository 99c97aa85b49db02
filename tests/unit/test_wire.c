/* Unit tests for transport/wire.c: frame header, HELLO payload, address blob. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/wire.h"

#define MAXP (1u << 20)

/* A valid header of each type, as a decoder would accept it. */
static struct rov_wire_hdr valid_hdr(uint8_t type)
{
    struct rov_wire_hdr h = {.version = ROV_WIRE_VERSION, .type = type};

    if (type == ROV_FT_DATA) {
        h.seq = 7;
        h.len = 100;
        h.tag = 0xdeadbeefu;
    }
    if (type == ROV_FT_HELLO || type == ROV_FT_HELLO_ACK)
        h.len = ROV_WIRE_HELLO_FIXED;
    if (type == ROV_FT_QUIESCE)
        h.len = ROV_QUIESCE_PAYLOAD;
    if (type == ROV_FT_CHALLENGE)
        h.len = ROV_NONCE_LEN;
    if (type == ROV_FT_READ)
        h.len = ROV_WIRE_READ_LEN;
    if (type == ROV_FT_READ_DATA)
        h.len = 4096;
    h.ack = 3;
    return h;
}

static void encode(uint8_t buf[ROV_WIRE_HDR_LEN], uint8_t type, uint32_t len, uint64_t seq,
                   uint64_t ack, uint32_t tag)
{
    struct rov_wire_hdr h = {.version = ROV_WIRE_VERSION, .type = type, .len = len,
                             .seq = seq, .ack = ack, .tag = tag};

    rov_wire_encode(buf, &h);
}

/* decode() and peek() must agree; returns decode's status. */
static rov_status_t decode_both(const uint8_t *buf, size_t avail, size_t max_payload,
                                struct rov_wire_hdr *hdr, const char **why_p)
{
    const char *why_d = NULL, *why_p2 = NULL;
    size_t flen = 12345;
    rov_status_t sd = rov_wire_decode(buf, avail, max_payload, hdr, &why_d);
    rov_status_t sp = rov_wire_peek(buf, avail, max_payload, &flen, &why_p2);

    ck_assert_int_eq(sd, sp);
    if (sd == ROV_ERR_PROTO) {
        ck_assert_ptr_nonnull(why_d);
        ck_assert_ptr_nonnull(why_p2);
        ck_assert_str_eq(why_d, why_p2);
        ck_assert_uint_gt(strlen(why_d), 0);
    }
    if (sd == ROV_OK)
        ck_assert_uint_eq(flen, ROV_WIRE_HDR_LEN + (size_t)hdr->len);
    else
        ck_assert_uint_eq(flen, 12345); /* untouched unless ROV_OK */
    *why_p = why_d;
    return sd;
}

static void expect_proto(const uint8_t *buf, size_t avail, size_t max_payload)
{
    struct rov_wire_hdr h;
    const char *why = NULL;

    ck_assert_int_eq(decode_both(buf, avail, max_payload, &h, &why), ROV_ERR_PROTO);
}

static void expect_ok(const uint8_t *buf, size_t max_payload, struct rov_wire_hdr *h)
{
    const char *why = NULL;

    ck_assert_msg(decode_both(buf, ROV_WIRE_HDR_LEN, max_payload, h, &why) == ROV_OK,
                  "decode failed: %s", why ? why : "(no reason)");
}

/* ---- header ------------------------------------------------------------- */

static const struct rov_wire_hdr roundtrip_cases[] = {
    {ROV_WIRE_VERSION, ROV_FT_DATA, 0, 1, 0, 0, 0},
    {ROV_WIRE_VERSION, ROV_FT_DATA, 65536, 2, 1, 7, ROV_DF_MORE},
    {ROV_WIRE_VERSION, ROV_FT_DATA, MAXP, UINT64_MAX, UINT64_MAX, UINT32_MAX, 0},
    {ROV_WIRE_VERSION, ROV_FT_DATA, 1, 0x0102030405060708ull, 0x1112131415161718ull, 0x21222324u, 0},
    {ROV_WIRE_VERSION, ROV_FT_DATA, 0x80, 1ull << 63, (1ull << 63) - 1, 0x80000000u, 0},
    {ROV_WIRE_VERSION, ROV_FT_ACK, 0, 0, UINT64_MAX, 0, 0},
    {ROV_WIRE_VERSION, ROV_FT_HELLO, 4096, 0, 0, ROV_HF_SWITCH | ROV_HF_REPLY, 0},
    {ROV_WIRE_VERSION, ROV_FT_HELLO_ACK, ROV_WIRE_HELLO_FIXED, 0, 42, ROV_HF_REPLY, 0},
    {ROV_WIRE_VERSION, ROV_FT_SWITCH, 0, 0, UINT64_MAX - 1, ROV_HF_SWITCH, 0},
    {ROV_WIRE_VERSION, ROV_FT_RESEND, 0, 0, 99, 0, 0},
    {ROV_WIRE_VERSION, ROV_FT_CLOSE, 0, 0, 1, 0, 0},
    {ROV_WIRE_VERSION, ROV_FT_CLOSE, 0, 0, 7, ROV_CLOSE_ACKED, 0},
};

START_TEST(test_hdr_roundtrip)
{
    const struct rov_wire_hdr *in = &roundtrip_cases[_i];
    uint8_t buf[ROV_WIRE_HDR_LEN + 8];
    struct rov_wire_hdr out;

    memset(buf, 0xa5, sizeof(buf));
    rov_wire_encode(buf, in);
    ck_assert_uint_eq(buf[ROV_WIRE_HDR_LEN], 0xa5); /* writes exactly 32 bytes */
    memset(&out, 0x5a, sizeof(out));
    expect_ok(buf, MAXP, &out);
    ck_assert_uint_eq(out.version, ROV_WIRE_VERSION);
    ck_assert_uint_eq(out.type, in->type);
    ck_assert_uint_eq(out.len, in->len);
    ck_assert_uint_eq(out.seq, in->seq);
    ck_assert_uint_eq(out.ack, in->ack);
    ck_assert_uint_eq(out.tag, in->tag);
    ck_assert_uint_eq(out.flags, in->flags);
}
END_TEST

START_TEST(test_hdr_layout)
{
    /* The byte layout documented in wire.h, little-endian. */
    static const uint8_t expect[ROV_WIRE_HDR_LEN] = {
        0x52, 0x56, ROV_WIRE_VERSION, ROV_FT_DATA,
        0x04, 0x03, 0x02, 0x01,
        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
        0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,
        0x34, 0x33, 0x32, 0x31,
        0, 0, 0, 0,
    };
    uint8_t buf[ROV_WIRE_HDR_LEN];
    struct rov_wire_hdr h;

    encode(buf, ROV_FT_DATA, 0x01020304u, 0x1112131415161718ull, 0x2122232425262728ull,
           0x31323334u);
    ck_assert_mem_eq(buf, expect, sizeof(expect));
    expect_ok(expect, UINT32_MAX, &h);
    ck_assert_uint_eq(h.len, 0x01020304u);
}
END_TEST

START_TEST(test_hdr_version_ignored_on_encode)
{
    /* The encoder always writes our version, whatever the struct says. */
    struct rov_wire_hdr h = valid_hdr(ROV_FT_DATA);
    uint8_t buf[ROV_WIRE_HDR_LEN];

    h.version = 99;
    rov_wire_encode(buf, &h);
    ck_assert_uint_eq(buf[2], ROV_WIRE_VERSION);
    ck_assert_uint_eq(buf[28] | buf[29] | buf[30] | buf[31], 0);
}
END_TEST

START_TEST(test_bad_magic_early)
{
    uint8_t buf[ROV_WIRE_HDR_LEN];
    struct rov_wire_hdr h;
    const char *why = NULL;

    encode(buf, ROV_FT_ACK, 0, 0, 1, 0);
    buf[0] = 'G';
    buf[1] = 'E'; /* "GET / HTTP/1.1" reaching a railover port */
    for (size_t avail = 2; avail <= ROV_WIRE_HDR_LEN; avail++)
        expect_proto(buf, avail, MAXP);
    ck_assert_int_eq(decode_both(buf, 2, MAXP, &h, &why), ROV_ERR_PROTO);
    ck_assert_str_eq(why, "bad magic");

    /* Either magic byte wrong on its own. */
    encode(buf, ROV_FT_ACK, 0, 0, 1, 0);
    buf[1] ^= 0x01;
    expect_proto(buf, 2, MAXP);
    encode(buf, ROV_FT_ACK, 0, 0, 1, 0);
    buf[0] ^= 0x80;
    expect_proto(buf, 2, MAXP);
    /* Byte-swapped magic (a big-endian encoder). */
    encode(buf, ROV_FT_ACK, 0, 0, 1, 0);
    buf[0] = 0x56;
    buf[1] = 0x52;
    expect_proto(buf, 2, MAXP);
}
END_TEST

START_TEST(test_one_byte_is_inprogress)
{
    uint8_t buf[1] = {0};
    struct rov_wire_hdr h;
    const char *why = NULL;

    /* One byte cannot tell: even a wrong one needs the second to be sure. */
    ck_assert_int_eq(decode_both(buf, 1, MAXP, &h, &why), ROV_INPROGRESS);
    ck_assert_int_eq(decode_both(buf, 0, MAXP, &h, &why), ROV_INPROGRESS);
}
END_TEST

START_TEST(test_bad_version)
{
    static const uint8_t versions[] = {0, ROV_WIRE_VERSION + 1, 0x7f, 0xff};
    uint8_t buf[ROV_WIRE_HDR_LEN];

    for (size_t i = 0; i < sizeof(versions); i++) {
        encode(buf, ROV_FT_DATA, 0, 1, 0, 0);
        buf[2] = versions[i];
        expect_proto(buf, 3, MAXP); /* detected with 3 bytes */
        expect_proto(buf, ROV_WIRE_HDR_LEN, MAXP);
    }
}
END_TEST

START_TEST(test_bad_type)
{
    static const uint8_t types[] = {0, ROV_FT_MAX_ + 1, 0x80, 0xff};
    uint8_t buf[ROV_WIRE_HDR_LEN];

    for (size_t i = 0; i < sizeof(types); i++) {
        encode(buf, ROV_FT_ACK, 0, 0, 0, 0);
        buf[3] = types[i];
        expect_proto(buf, 4, MAXP); /* detected with 4 bytes */
        expect_proto(buf, ROV_WIRE_HDR_LEN, MAXP);
    }
    /* Every type in range is accepted. */
    for (uint8_t t = 1; t <= ROV_FT_MAX_; t++) {
        struct rov_wire_hdr h = valid_hdr(t), out;

        rov_wire_encode(buf, &h);
        expect_ok(buf, MAXP, &out);
        ck_assert_uint_eq(out.type, t);
    }
}
END_TEST

/* The end-of-channel marker names its sender's last message (8 bytes);
 * its resume form carries nothing; any other size is a violation. */
START_TEST(test_quiesce_sizes)
{
    static const struct {
        uint32_t tag, len;
        rov_status_t want;
    } cases[] = {
        {0, ROV_QUIESCE_PAYLOAD, ROV_OK},          {ROV_QUIESCE_RESUME, 0, ROV_OK},
        {0, 0, ROV_ERR_PROTO},                      {0, ROV_QUIESCE_PAYLOAD - 1, ROV_ERR_PROTO},
        {0, ROV_QUIESCE_PAYLOAD + 1, ROV_ERR_PROTO}, {ROV_QUIESCE_RESUME, 8, ROV_ERR_PROTO},
    };
    uint8_t buf[ROV_WIRE_HDR_LEN];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rov_wire_hdr h = valid_hdr(ROV_FT_QUIESCE), out;
        const char *why = NULL;

        h.tag = cases[i].tag;
        h.len = cases[i].len;
        rov_wire_encode(buf, &h);
        ck_assert_msg(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &out, &why) == cases[i].want,
                      "case %zu: tag %u len %u: %s", i, cases[i].tag, cases[i].len,
                      why ? why : "accepted");
        if (cases[i].want != ROV_OK)
            ck_assert_str_eq(why, "end-of-channel marker of the wrong size");
    }
}
END_TEST

/* A challenge is exactly ROV_NONCE_LEN bytes; a rail's read request is
 * exactly ROV_WIRE_READ_LEN bytes, its answer carries any length (0:
 * refused); none has a sequence number. */
START_TEST(test_read_frames)
{
    static const struct {
        uint8_t type;
        uint32_t len;
        uint64_t seq;
        rov_status_t want;
        const char *why;
    } cases[] = {
        {ROV_FT_CHALLENGE, ROV_NONCE_LEN, 0, ROV_OK, NULL},
        {ROV_FT_CHALLENGE, ROV_NONCE_LEN - 1, 0, ROV_ERR_PROTO, "challenge of the wrong size"},
        {ROV_FT_CHALLENGE, 0, 0, ROV_ERR_PROTO, "challenge of the wrong size"},
        {ROV_FT_CHALLENGE, ROV_NONCE_LEN, 1, ROV_ERR_PROTO, "sequence number on a control frame"},
        {ROV_FT_READ, ROV_WIRE_READ_LEN, 0, ROV_OK, NULL},
        {ROV_FT_READ, ROV_WIRE_READ_LEN - 1, 0, ROV_ERR_PROTO, "read request of the wrong size"},
        {ROV_FT_READ, ROV_WIRE_READ_LEN + 1, 0, ROV_ERR_PROTO, "read request of the wrong size"},
        {ROV_FT_READ, 0, 0, ROV_ERR_PROTO, "read request of the wrong size"},
        {ROV_FT_READ_DATA, 0, 0, ROV_OK, NULL},
        {ROV_FT_READ_DATA, 1u << 20, 0, ROV_OK, NULL},
        {ROV_FT_READ_DATA, 64, 5, ROV_ERR_PROTO, "sequence number on a control frame"},
    };
    uint8_t buf[ROV_WIRE_HDR_LEN];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rov_wire_hdr h = valid_hdr(cases[i].type), out;
        const char *why = NULL;

        h.len = cases[i].len;
        h.seq = cases[i].seq;
        rov_wire_encode(buf, &h);
        ck_assert_msg(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &out, &why) == cases[i].want,
                      "case %zu: %s", i, why ? why : "accepted");
        if (cases[i].why)
            ck_assert_str_eq(why, cases[i].why);
    }
}
END_TEST

START_TEST(test_truncated_header)
{
    for (uint8_t t = 1; t <= ROV_FT_MAX_; t++) {
        struct rov_wire_hdr h = valid_hdr(t), out;
        uint8_t full[ROV_WIRE_HDR_LEN];

        rov_wire_encode(full, &h);
        for (size_t avail = 0; avail < ROV_WIRE_HDR_LEN; avail++) {
            /* An exact-size copy so an over-read is caught by ASan/valgrind. */
            uint8_t *p = malloc(avail ? avail : 1);
            const char *why = NULL;

            ck_assert_ptr_nonnull(p);
            memcpy(p, full, avail);
            ck_assert_int_eq(decode_both(p, avail, MAXP, &out, &why), ROV_INPROGRESS);
            free(p);
        }
    }
}
END_TEST

START_TEST(test_reserved_bits)
{
    uint8_t buf[ROV_WIRE_HDR_LEN];
    struct rov_wire_hdr h;
    const char *why = NULL;

    for (int byte = 28; byte < 32; byte++) {
        for (int bit = 0; bit < 8; bit++) {
            encode(buf, ROV_FT_DATA, 0, 1, 0, 0);
            buf[byte] = (uint8_t)(1u << bit);
            if (byte == 28 && bit == 0) { /* ROV_DF_MORE: a DATA frame's only flag */
                ck_assert_int_eq(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &h, &why), ROV_OK);
                ck_assert_uint_eq(h.flags, ROV_DF_MORE);
                continue;
            }
            ck_assert_int_eq(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &h, &why),
                             ROV_ERR_PROTO);
        }
    }
    ck_assert_str_eq(why, "reserved header bits set");
    /* ... and on no other frame. */
    encode(buf, ROV_FT_ACK, 0, 0, 0, 0);
    buf[28] = ROV_DF_MORE;
    ck_assert_int_eq(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &h, &why), ROV_ERR_PROTO);
}
END_TEST

START_TEST(test_payload_limit)
{
    uint8_t buf[ROV_WIRE_HDR_LEN];
    struct rov_wire_hdr h;
    size_t flen = 0;
    const char *why = NULL;

    encode(buf, ROV_FT_DATA, 1000, 1, 0, 0);
    expect_ok(buf, 1000, &h);
    expect_proto(buf, ROV_WIRE_HDR_LEN, 999);
    expect_proto(buf, ROV_WIRE_HDR_LEN, 0);

    encode(buf, ROV_FT_DATA, 0, 1, 0, 0);
    expect_ok(buf, 0, &h); /* empty message with max_payload 0 */

    encode(buf, ROV_FT_DATA, UINT32_MAX, 1, 0, 0);
    expect_proto(buf, ROV_WIRE_HDR_LEN, (size_t)UINT32_MAX - 1);
    ck_assert_int_eq(rov_wire_peek(buf, ROV_WIRE_HDR_LEN, UINT32_MAX, &flen, &why), ROV_OK);
    ck_assert_uint_eq(flen, (size_t)ROV_WIRE_HDR_LEN + UINT32_MAX);

    /* peek needs only the header, not the payload. */
    encode(buf, ROV_FT_DATA, 4096, 1, 0, 0);
    ck_assert_int_eq(rov_wire_peek(buf, ROV_WIRE_HDR_LEN, MAXP, &flen, &why), ROV_OK);
    ck_assert_uint_eq(flen, ROV_WIRE_HDR_LEN + 4096);
}
END_TEST

START_TEST(test_payload_on_control)
{
    static const uint8_t control[] = {ROV_FT_ACK, ROV_FT_SWITCH, ROV_FT_RESEND, ROV_FT_CLOSE};
    uint8_t buf[ROV_WIRE_HDR_LEN];
    struct rov_wire_hdr h;
    const char *why = NULL;

    for (size_t i = 0; i < sizeof(control); i++) {
        encode(buf, control[i], 1, 0, 0, 0);
        ck_assert_int_eq(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &h, &why), ROV_ERR_PROTO);
        ck_assert_str_eq(why, "payload on a control frame");
        encode(buf, control[i], UINT32_MAX, 0, 0, 0);
        expect_proto(buf, ROV_WIRE_HDR_LEN, SIZE_MAX);
        encode(buf, control[i], 0, 0, 0, 0);
        expect_ok(buf, MAXP, &h);
    }
    /* HELLO and HELLO_ACK carry a payload. */
    encode(buf, ROV_FT_HELLO, 200, 0, 0, 0);
    expect_ok(buf, MAXP, &h);
    encode(buf, ROV_FT_HELLO_ACK, ROV_WIRE_HELLO_FIXED, 0, 0, 0);
    expect_ok(buf, MAXP, &h);
}
END_TEST

START_TEST(test_data_seq_zero)
{
    uint8_t buf[ROV_WIRE_HDR_LEN];
    struct rov_wire_hdr h;
    const char *why = NULL;

    encode(buf, ROV_FT_DATA, 10, 0, 5, 0);
    ck_assert_int_eq(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &h, &why), ROV_ERR_PROTO);
    ck_assert_str_eq(why, "data frame with sequence 0");
}
END_TEST

/* rov_wire_decode_data(), the receive path's inline decoder of a whole
 * frame: it accepts a valid DATA frame of exactly its length and nothing
 * else (the full decoder then judges). */
START_TEST(test_decode_data)
{
    uint8_t buf[ROV_WIRE_HDR_LEN + 8];
    struct rov_wire_hdr h;

    memset(buf, 0, sizeof(buf));
    encode(buf, ROV_FT_DATA, 8, 42, 41, 0x01020304u);
    ck_assert(rov_wire_decode_data(buf, ROV_WIRE_HDR_LEN + 8, MAXP, &h));
    ck_assert_uint_eq(h.type, ROV_FT_DATA);
    ck_assert_uint_eq(h.len, 8);
    ck_assert_uint_eq(h.seq, 42);
    ck_assert_uint_eq(h.ack, 41);
    ck_assert_uint_eq(h.tag, 0x01020304u);
    /* the frame's length must match the header's */
    ck_assert(!rov_wire_decode_data(buf, ROV_WIRE_HDR_LEN + 7, MAXP, &h));
    ck_assert(!rov_wire_decode_data(buf, ROV_WIRE_HDR_LEN, MAXP, &h));
    /* shorter than a header: not read past its end */
    ck_assert(!rov_wire_decode_data(buf, ROV_WIRE_HDR_LEN - 1, MAXP, &h));
    ck_assert(!rov_wire_decode_data(buf, 0, MAXP, &h));
    /* longer than the limit */
    ck_assert(!rov_wire_decode_data(buf, ROV_WIRE_HDR_LEN + 8, 7, &h));
    /* sequence 0, reserved bits, another type, bad magic or version */
    encode(buf, ROV_FT_DATA, 8, 0, 41, 0);
    ck_assert(!rov_wire_decode_data(buf, ROV_WIRE_HDR_LEN + 8, MAXP, &h));
    encode(buf, ROV_FT_DATA, 8, 42, 41, 0);
    buf[31] = 1;
    ck_assert(!rov_wire_decode_data(buf, ROV_WIRE_HDR_LEN + 8, MAXP, &h));
    for (uint8_t type = ROV_FT_ACK; type <= ROV_FT_MAX_; type++) {
        encode(buf, type, 0, 0, 41, 0);
        ck_assert(!rov_wire_decode_data(buf, ROV_WIRE_HDR_LEN, MAXP, &h));
    }
    encode(buf, ROV_FT_DATA, 8, 42, 41, 0);
    buf[0] ^= 1;
    ck_assert(!rov_wire_decode_data(buf, ROV_WIRE_HDR_LEN + 8, MAXP, &h));
    buf[0] ^= 1;
    buf[2]++;
    ck_assert(!rov_wire_decode_data(buf, ROV_WIRE_HDR_LEN + 8, MAXP, &h));
}
END_TEST

START_TEST(test_control_with_seq)
{
    uint8_t buf[ROV_WIRE_HDR_LEN];
    struct rov_wire_hdr h;
    const char *why = NULL;

    for (uint8_t t = 1; t <= ROV_FT_MAX_; t++) {
        struct rov_wire_hdr in = valid_hdr(t);

        if (t == ROV_FT_DATA)
            continue;
        in.seq = 1;
        rov_wire_encode(buf, &in);
        ck_assert_int_eq(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &h, &why), ROV_ERR_PROTO);
        ck_assert_str_eq(why, "sequence number on a control frame");
        in.seq = UINT64_MAX;
        rov_wire_encode(buf, &in);
        expect_proto(buf, ROV_WIRE_HDR_LEN, MAXP);
    }
}
END_TEST

START_TEST(test_control_flags)
{
    static const uint8_t flagged[] = {ROV_FT_HELLO, ROV_FT_HELLO_ACK, ROV_FT_SWITCH};
    static const uint32_t bad[] = {1u << 4, 1u << 7, 1u << 24, 1u << 31, ROV_HF_MASK_ + 1,
                                   UINT32_MAX};
    uint8_t buf[ROV_WIRE_HDR_LEN];
    struct rov_wire_hdr h;
    const char *why = NULL;

    for (size_t i = 0; i < sizeof(flagged); i++) {
        struct rov_wire_hdr in = valid_hdr(flagged[i]);

        for (size_t j = 0; j < sizeof(bad) / sizeof(bad[0]); j++) {
            in.tag = bad[j];
            rov_wire_encode(buf, &in);
            ck_assert_int_eq(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &h, &why),
                             ROV_ERR_PROTO);
            ck_assert_str_eq(why, "unknown control flags");
        }
        for (uint32_t f = 0; f <= 0xffu; f++) {
            in.tag = (f & 0xfu) ? rov_hf_make(f & 0xfu, f % ROV_REASON_COUNT, f >> 4) : 0;
            rov_wire_encode(buf, &in);
            expect_ok(buf, MAXP, &h);
            ck_assert_uint_eq(h.tag, in.tag);
        }
        in.tag = rov_hf_make(ROV_HF_SWITCH, ROV_REASON_COUNT, 0);
        rov_wire_encode(buf, &in);
        ck_assert_int_eq(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &h, &why), ROV_ERR_PROTO);
        ck_assert_str_eq(why, "unknown switch reason");
    }
    /* CLOSE knows two flags, and a status with ABORT only; the tag of ACK
     * and RESEND is unused, not checked. */
    encode(buf, ROV_FT_CLOSE, 0, 0, 0, ROV_CLOSE_ACKED);
    expect_ok(buf, MAXP, &h);
    ck_assert_uint_eq(h.tag, ROV_CLOSE_ACKED);
    encode(buf, ROV_FT_CLOSE, 0, 0, 0, rov_close_abort(ROV_ERR_MSGSIZE));
    expect_ok(buf, MAXP, &h);
    ck_assert_int_eq(rov_close_status(h.tag), ROV_ERR_MSGSIZE);
    encode(buf, ROV_FT_CLOSE, 0, 0, 0, rov_close_abort(ROV_ERR_MSGSIZE) & ~ROV_CLOSE_ABORT);
    ck_assert_int_eq(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &h, &why), ROV_ERR_PROTO);
    ck_assert_str_eq(why, "unknown close flags");
    /* Any status byte a peer sends reads as a status we can name: it is
     * logged, as "(unknown status) (unknown status)" it was (issue 35). */
    for (uint32_t b = 0; b < 256; b++) {
        encode(buf, ROV_FT_CLOSE, 0, 0, 0, ROV_CLOSE_ABORT | b << 8);
        expect_ok(buf, MAXP, &h);
        ck_assert_str_ne(rov_status_str(rov_close_status(h.tag)), "unknown status");
    }
    for (size_t j = 0; j < sizeof(bad) / sizeof(bad[0]); j++) {
        encode(buf, ROV_FT_CLOSE, 0, 0, 0, bad[j] | 2u);
        ck_assert_int_eq(decode_both(buf, ROV_WIRE_HDR_LEN, MAXP, &h, &why), ROV_ERR_PROTO);
        ck_assert_str_eq(why, "unknown close flags");
    }
    /* DATA's tag is the user's: any value is fine. */
    encode(buf, ROV_FT_DATA, 0, 1, 0, UINT32_MAX);
    expect_ok(buf, MAXP, &h);
    ck_assert_uint_eq(h.tag, UINT32_MAX);
}
END_TEST

START_TEST(test_error_is_sticky)
{
    /* Once a prefix is known bad, more bytes never make it acceptable. */
    uint8_t buf[ROV_WIRE_HDR_LEN];
    struct rov_wire_hdr h;
    const char *why = NULL;

    encode(buf, ROV_FT_DATA, 0, 1, 0, 0);
    buf[3] = 0;
    for (size_t avail = 0; avail <= ROV_WIRE_HDR_LEN; avail++) {
        rov_status_t st = decode_both(buf, avail, MAXP, &h, &why);

        ck_assert_int_eq(st, avail < 4 ? ROV_INPROGRESS : ROV_ERR_PROTO);
    }
}
END_TEST

/* ---- HELLO -------------------------------------------------------------- */

static struct rov_wire_hello sample_hello(const void *addr, size_t addr_len)
{
    struct rov_wire_hello h = {
        .conn_id = UINT64_MAX,
        .peer_conn_id = 0x0123456789abcdefull,
        .rail = 0xfffe,
        .max_msg = UINT32_MAX,
        .ctr = UINT64_MAX - 1,
        .addr = addr,
        .addr_len = addr_len,
    };

    for (int i = 0; i < ROV_EP_ID_LEN; i++)
        h.ep_id[i] = (uint8_t)(0xf0 + i);
    for (int i = 0; i < ROV_NONCE_LEN; i++)
        h.nonce[i] = (uint8_t)(0x30 + i);
    return h;
}

START_TEST(test_hello_roundtrip)
{
    static const size_t addr_lens[] = {0, 1, 37, 300};
    static const size_t data_lens[] = {0, 8, 0, ROV_CONN_DATA_MAX};
    uint8_t addr[300], data[ROV_CONN_DATA_MAX];
    uint8_t buf[ROV_WIRE_HELLO_FIXED + 300 + ROV_CONN_DATA_MAX + 1];

    for (size_t i = 0; i < sizeof(addr); i++)
        addr[i] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(0xa0 ^ i);
    for (size_t k = 0; k < sizeof(addr_lens) / sizeof(addr_lens[0]); k++) {
        struct rov_wire_hello in = sample_hello(addr_lens[k] ? addr : NULL, addr_lens[k]), out;
        const char *why = NULL;
        size_t n;

        in.data = data;
        in.data_len = data_lens[k];
        memset(buf, 0xcc, sizeof(buf));
        n = rov_wire_hello_encode(buf, &in);
        ck_assert_uint_eq(n, ROV_WIRE_HELLO_FIXED + addr_lens[k] + data_lens[k]);
        ck_assert_uint_eq(buf[n], 0xcc);
        memset(&out, 0, sizeof(out));
        ck_assert_int_eq(rov_wire_hello_decode(buf, n, &out, &why), ROV_OK);
        ck_assert_mem_eq(out.ep_id, in.ep_id, ROV_EP_ID_LEN);
        ck_assert_uint_eq(out.conn_id, in.conn_id);
        ck_assert_uint_eq(out.peer_conn_id, in.peer_conn_id);
        ck_assert_uint_eq(out.rail, in.rail);
        ck_assert_uint_eq(out.max_msg, in.max_msg);
        ck_assert_uint_eq(out.ctr, in.ctr);
        ck_assert_mem_eq(out.nonce, in.nonce, ROV_NONCE_LEN);
        ck_assert_uint_eq(out.addr_len, addr_lens[k]);
        /* The MAC is left zero, at the end, for the caller to fill in. */
        ck_assert_ptr_eq(out.mac, buf + n - ROV_MAC_LEN);
        for (int i = 0; i < ROV_MAC_LEN; i++)
            ck_assert_uint_eq(out.mac[i], 0);
        if (addr_lens[k]) {
            /* Points into the decoded buffer, not at the caller's source. */
            ck_assert_ptr_eq(out.addr, buf + ROV_WIRE_HELLO_ADDR_OFF);
            ck_assert_mem_eq(out.addr, addr, addr_lens[k]);
        } else {
            ck_assert_ptr_null(out.addr);
        }
        /* The data follows the address. */
        ck_assert_uint_eq(out.data_len, data_lens[k]);
        ck_assert_ptr_eq(out.data, buf + ROV_WIRE_HELLO_ADDR_OFF + addr_lens[k]);
        if (data_lens[k])
            ck_assert_mem_eq(out.data, data, data_lens[k]);
    }
}
END_TEST

START_TEST(test_hello_small_values)
{
    struct rov_wire_hello in = sample_hello(NULL, 0), out;
    uint8_t buf[ROV_WIRE_HELLO_FIXED];
    const char *why = NULL;

    in.conn_id = 1;
    in.peer_conn_id = UINT64_MAX;
    in.rail = 0;
    in.max_msg = 1;
    in.ctr = 0;
    memset(in.ep_id, 0, sizeof(in.ep_id));
    ck_assert_uint_eq(rov_wire_hello_encode(buf, &in), ROV_WIRE_HELLO_FIXED);
    ck_assert_int_eq(rov_wire_hello_decode(buf, sizeof(buf), &out, &why), ROV_OK);
    ck_assert_uint_eq(out.conn_id, 1);
    ck_assert_uint_eq(out.peer_conn_id, UINT64_MAX);
    ck_assert_uint_eq(out.rail, 0);
    ck_assert_uint_eq(out.max_msg, 1);
}
END_TEST

/* A largest message of 0, or beyond what a frame's 32-bit length can
 * carry, is refused. */
START_TEST(test_hello_max_msg_range)
{
    struct rov_wire_hello in = sample_hello(NULL, 0), out;
    uint8_t buf[ROV_WIRE_HELLO_FIXED];
    const char *why = NULL;

    in.max_msg = 0;
    rov_wire_hello_encode(buf, &in);
    ck_assert_int_eq(rov_wire_hello_decode(buf, sizeof(buf), &out, &why), ROV_ERR_PROTO);
    in.max_msg = (uint64_t)UINT32_MAX + 1;
    rov_wire_hello_encode(buf, &in);
    ck_assert_int_eq(rov_wire_hello_decode(buf, sizeof(buf), &out, &why), ROV_ERR_PROTO);
}
END_TEST

/* The handshake MAC (auth.c): it depends on the nonce it answers (the
 * channel's challenge), every byte of header and payload counts, the MAC
 * itself does not, and another key gives another MAC. */
START_TEST(test_hello_mac)
{
    uint8_t key[ROV_KEY_LEN], other[ROV_KEY_LEN], nonce[ROV_NONCE_LEN] = {7};
    uint8_t challenge[ROV_NONCE_LEN] = {9};
    uint8_t hdr[ROV_WIRE_HDR_LEN], payload[ROV_WIRE_HELLO_FIXED];
    uint8_t mac[ROV_MAC_LEN], mac2[ROV_MAC_LEN];
    struct rov_wire_hello in = sample_hello(NULL, 0);
    struct rov_wire_hdr h = {.type = ROV_FT_HELLO, .len = ROV_WIRE_HELLO_FIXED, .tag = 1};

    for (int i = 0; i < ROV_KEY_LEN; i++) {
        key[i] = (uint8_t)i;
        other[i] = (uint8_t)(i + 1);
    }
    rov_wire_encode(hdr, &h);
    rov_wire_hello_encode(payload, &in);
    rov_auth_hello_mac(key, challenge, hdr, payload, sizeof(payload), mac);
    rov_auth_hello_mac(key, challenge, hdr, payload, sizeof(payload), mac2);
    ck_assert(rov_auth_mac_equal(mac, mac2));
    rov_auth_hello_mac(other, challenge, hdr, payload, sizeof(payload), mac2);
    ck_assert(!rov_auth_mac_equal(mac, mac2));
    rov_auth_hello_mac(key, nonce, hdr, payload, sizeof(payload), mac2);
    ck_assert(!rov_auth_mac_equal(mac, mac2));
    payload[sizeof(payload) - 1] ^= 1; /* in the MAC field: not covered */
    rov_auth_hello_mac(key, challenge, hdr, payload, sizeof(payload), mac2);
    ck_assert(rov_auth_mac_equal(mac, mac2));
    for (size_t i = 0; i < sizeof(payload) - ROV_MAC_LEN; i += 7) {
        payload[i] ^= 0x40;
        rov_auth_hello_mac(key, challenge, hdr, payload, sizeof(payload), mac2);
        ck_assert_msg(!rov_auth_mac_equal(mac, mac2), "payload byte %zu not covered", i);
        payload[i] ^= 0x40;
    }
    for (size_t i = 0; i < sizeof(hdr); i++) {
        hdr[i] ^= 0x01;
        rov_auth_hello_mac(key, challenge, hdr, payload, sizeof(payload), mac2);
        ck_assert_msg(!rov_auth_mac_equal(mac, mac2), "header byte %zu not covered", i);
        hdr[i] ^= 0x01;
    }
}
END_TEST

/* Reconnect counters are accepted once, in any order within 64. */
START_TEST(test_replay_window)
{
    struct rov_replay r = {0, 0};

    ck_assert(!rov_replay_fresh(&r, 0));
    ck_assert(rov_replay_fresh(&r, 1));
    rov_replay_accept(&r, 1);
    ck_assert(!rov_replay_fresh(&r, 1));
    ck_assert(rov_replay_fresh(&r, 3));
    rov_replay_accept(&r, 3);
    ck_assert(rov_replay_fresh(&r, 2)); /* late, still in the window */
    rov_replay_accept(&r, 2);
    ck_assert(!rov_replay_fresh(&r, 2));
    ck_assert(!rov_replay_fresh(&r, 3));
    rov_replay_accept(&r, 100);
    ck_assert(!rov_replay_fresh(&r, 36)); /* older than the window */
    ck_assert(rov_replay_fresh(&r, 37));
    ck_assert(!rov_replay_fresh(&r, 100));
    rov_replay_accept(&r, 1000);
    ck_assert(!rov_replay_fresh(&r, 100));
    ck_assert(rov_replay_fresh(&r, 999));
}
END_TEST

START_TEST(test_hello_truncated)
{
    uint8_t addr[10] = "0123456789";
    struct rov_wire_hello in = sample_hello(addr, sizeof(addr)), out;
    uint8_t buf[ROV_WIRE_HELLO_FIXED + sizeof(addr)];
    size_t n = rov_wire_hello_encode(buf, &in);

    for (size_t len = 0; len < n; len++) {
        uint8_t *p = malloc(len ? len : 1);
        const char *why = NULL;

        ck_assert_ptr_nonnull(p);
        memcpy(p, buf, len);
        ck_assert_msg(rov_wire_hello_decode(p, len, &out, &why) == ROV_ERR_PROTO,
                      "hello of %zu/%zu bytes accepted", len, n);
        ck_assert_ptr_nonnull(why);
        free(p);
    }
}
END_TEST

START_TEST(test_hello_conn_id_zero)
{
    struct rov_wire_hello in = sample_hello(NULL, 0), out;
    uint8_t buf[ROV_WIRE_HELLO_FIXED];
    const char *why = NULL;

    in.conn_id = 0;
    rov_wire_hello_encode(buf, &in);
    ck_assert_int_eq(rov_wire_hello_decode(buf, sizeof(buf), &out, &why), ROV_ERR_PROTO);
    ck_assert_str_eq(why, "hello with connection id 0");
}
END_TEST

START_TEST(test_hello_addr_len_mismatch)
{
    uint8_t addr[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    struct rov_wire_hello in = sample_hello(addr, sizeof(addr)), out;
    uint8_t buf[ROV_WIRE_HELLO_FIXED + sizeof(addr) + 1];
    size_t n = rov_wire_hello_encode(buf, &in);
    const char *why = NULL;

    /* One trailing byte beyond the declared address. */
    buf[n] = 0;
    ck_assert_int_eq(rov_wire_hello_decode(buf, n + 1, &out, &why), ROV_ERR_PROTO);
    ck_assert_str_eq(why, "hello address and data lengths do not match the frame");

    /* Declared length larger / smaller than what follows. */
    rov_put16(buf + 34, sizeof(addr) + 1);
    ck_assert_int_eq(rov_wire_hello_decode(buf, n, &out, &why), ROV_ERR_PROTO);
    rov_put16(buf + 34, sizeof(addr) - 1);
    ck_assert_int_eq(rov_wire_hello_decode(buf, n, &out, &why), ROV_ERR_PROTO);
    rov_put16(buf + 34, UINT16_MAX);
    ck_assert_int_eq(rov_wire_hello_decode(buf, n, &out, &why), ROV_ERR_PROTO);
    rov_put16(buf + 34, sizeof(addr));
    ck_assert_int_eq(rov_wire_hello_decode(buf, n, &out, &why), ROV_OK);

    /* Data: its length is checked against the frame, and bounded. */
    rov_put16(buf + 68, 1);
    ck_assert_int_eq(rov_wire_hello_decode(buf, n, &out, &why), ROV_ERR_PROTO);
    rov_put16(buf + 34, sizeof(addr) - 1);
    ck_assert_int_eq(rov_wire_hello_decode(buf, n, &out, &why), ROV_OK);
    ck_assert_uint_eq(out.data_len, 1);
    ck_assert_uint_eq(*(const uint8_t *)out.data, addr[sizeof(addr) - 1]);
    rov_put16(buf + 68, ROV_CONN_DATA_MAX + 1);
    rov_put16(buf + 34, 0);
    ck_assert_int_eq(rov_wire_hello_decode(buf, n, &out, &why), ROV_ERR_PROTO);
    ck_assert_str_eq(why, "hello with connect-time data longer than ROV_CONN_DATA_MAX");
}
END_TEST

/* ---- address blob ------------------------------------------------------- */

static const uint8_t tcp_addr[6] = {127, 0, 0, 1, 0x1f, 0x90};
static const uint8_t verbs_addr[40] = {0xfe, 0x80, [39] = 0x77};

static struct rov_wire_addr sample_addr(void)
{
    struct rov_wire_addr a;

    memset(&a, 0, sizeof(a));
    for (int i = 0; i < ROV_EP_ID_LEN; i++)
        a.ep_id[i] = (uint8_t)(i + 1);
    for (int i = 0; i < ROV_KEY_LEN; i++)
        a.key[i] = (uint8_t)(0x80 + i);
    a.gen = 0x01020304u;
    a.nrails = 3;
    a.rails[0].index = 0;
    strcpy(a.rails[0].kind, "verbs");
    a.rails[0].addr = verbs_addr;
    a.rails[0].addr_len = sizeof(verbs_addr);
    a.rails[1].index = 1;
    strcpy(a.rails[1].kind, "tcp");
    a.rails[1].addr = tcp_addr;
    a.rails[1].addr_len = sizeof(tcp_addr);
    a.rails[2].index = 255;
    strcpy(a.rails[2].kind, "abcdefghijklmno"); /* ROV_RAIL_KIND_MAX chars */
    a.rails[2].addr = ""; /* empty address; test_addr_reencode covers NULL */
    a.rails[2].addr_len = 0;
    return a;
}

static size_t encode_sample(uint8_t *buf, size_t cap)
{
    struct rov_wire_addr a = sample_addr();
    size_t n = rov_wire_addr_encode(buf, cap, &a);

    ck_assert_uint_gt(n, 0);
    return n;
}

static void assert_addr_eq(const struct rov_wire_addr *got, const struct rov_wire_addr *want,
                           const uint8_t *blob, size_t blob_len)
{
    ck_assert_uint_eq(got->gen, want->gen);
    ck_assert_mem_eq(got->ep_id, want->ep_id, ROV_EP_ID_LEN);
    ck_assert_mem_eq(got->key, want->key, ROV_KEY_LEN);
    ck_assert_uint_eq(got->nrails, want->nrails);
    for (unsigned i = 0; i < want->nrails; i++) {
        ck_assert_uint_eq(got->rails[i].index, want->rails[i].index);
        ck_assert_str_eq(got->rails[i].kind, want->rails[i].kind);
        ck_assert_uint_eq(got->rails[i].addr_len, want->rails[i].addr_len);
        if (want->rails[i].addr_len) {
            const uint8_t *a = got->rails[i].addr;

            ck_assert_ptr_nonnull(a);
            ck_assert(a >= blob && a + got->rails[i].addr_len <= blob + blob_len);
            ck_assert_mem_eq(a, want->rails[i].addr, want->rails[i].addr_len);
        } else {
            ck_assert_ptr_null(got->rails[i].addr);
        }
    }
}

START_TEST(test_addr_roundtrip)
{
    struct rov_wire_addr in = sample_addr(), out;
    size_t size = rov_wire_addr_size(&in);
    uint8_t *buf = malloc(size + 1);
    const char *why = NULL;

    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(size, ROV_ADDR_FIXED + (2 + 5 + 2 + sizeof(verbs_addr)) +
                                (2 + 3 + 2 + sizeof(tcp_addr)) + (2 + 15 + 2));
    buf[size] = 0xee;
    ck_assert_uint_eq(rov_wire_addr_encode(buf, size, &in), size);
    ck_assert_uint_eq(buf[size], 0xee);
    ck_assert_uint_eq(rov_get32(buf), ROV_ADDR_MAGIC);
    memset(&out, 0xab, sizeof(out));
    ck_assert_int_eq(rov_wire_addr_decode(buf, size, &out, &why), ROV_OK);
    assert_addr_eq(&out, &in, buf, size);
    free(buf);
}
END_TEST

START_TEST(test_addr_reencode)
{
    /* decode() reports an empty rail address as addr NULL, addr_len 0; that
     * struct must encode back to the same blob (no memcpy from NULL, which is
     * undefined even for 0 bytes and aborts under -fsanitize=undefined). */
    struct rov_wire_addr in, out;
    uint8_t blob[128], again[128];
    const char *why = NULL;
    size_t n;

    memset(&in, 0, sizeof(in));
    in.nrails = 2;
    strcpy(in.rails[0].kind, "tcp");
    in.rails[0].addr = tcp_addr;
    in.rails[0].addr_len = sizeof(tcp_addr);
    in.rails[1].index = 1;
    strcpy(in.rails[1].kind, "shm");
    in.rails[1].addr = "";
    in.rails[1].addr_len = 0;
    n = rov_wire_addr_encode(blob, sizeof(blob), &in);
    ck_assert_uint_gt(n, 0);
    ck_assert_int_eq(rov_wire_addr_decode(blob, n, &out, &why), ROV_OK);
    ck_assert_ptr_null(out.rails[1].addr);
    ck_assert_uint_eq(rov_wire_addr_encode(again, sizeof(again), &out), n);
    ck_assert_mem_eq(again, blob, n);
}
END_TEST

START_TEST(test_addr_encode_cap)
{
    struct rov_wire_addr in = sample_addr();
    size_t size = rov_wire_addr_size(&in);
    uint8_t buf[256];

    ck_assert_uint_le(size, sizeof(buf));
    memset(buf, 0x11, sizeof(buf));
    ck_assert_uint_eq(rov_wire_addr_encode(buf, size - 1, &in), 0);
    ck_assert_uint_eq(rov_wire_addr_encode(buf, 0, &in), 0);
    ck_assert_uint_eq(buf[0], 0x11); /* nothing written when it does not fit */
    ck_assert_uint_eq(rov_wire_addr_encode(buf, sizeof(buf), &in), size);
}
END_TEST

START_TEST(test_addr_one_and_max_rails)
{
    static const uint8_t a16[16] = {9};
    struct rov_wire_addr in, out;
    uint8_t buf[1024];
    const char *why = NULL;
    size_t n;

    memset(&in, 0, sizeof(in));
    in.nrails = 1;
    strcpy(in.rails[0].kind, "t");
    in.rails[0].addr = "";
    n = rov_wire_addr_encode(buf, sizeof(buf), &in);
    ck_assert_int_eq(rov_wire_addr_decode(buf, n, &out, &why), ROV_OK);
    assert_addr_eq(&out, &in, buf, n);

    in.nrails = ROV_ADDR_MAX_RAILS;
    for (unsigned i = 0; i < ROV_ADDR_MAX_RAILS; i++) {
        in.rails[i].index = i;
        snprintf(in.rails[i].kind, sizeof(in.rails[i].kind), "rail%u", i);
        in.rails[i].addr = a16;
        in.rails[i].addr_len = i;
    }
    n = rov_wire_addr_encode(buf, sizeof(buf), &in);
    ck_assert_uint_eq(n, rov_wire_addr_size(&in));
    ck_assert_int_eq(rov_wire_addr_decode(buf, n, &out, &why), ROV_OK);
    assert_addr_eq(&out, &in, buf, n);
}
END_TEST

START_TEST(test_addr_every_prefix)
{
    uint8_t full[256];
    size_t n = encode_sample(full, sizeof(full));

    for (size_t len = 0; len < n; len++) {
        uint8_t *p = malloc(len ? len : 1);
        struct rov_wire_addr out;
        const char *why = NULL;

        ck_assert_ptr_nonnull(p);
        memcpy(p, full, len);
        ck_assert_msg(rov_wire_addr_decode(p, len, &out, &why) == ROV_ERR_INVAL,
                      "prefix of %zu/%zu bytes not rejected", len, n);
        ck_assert_ptr_nonnull(why);
        free(p);
    }
}
END_TEST

static rov_status_t decode_modified(size_t off, uint8_t value, const char **why_p)
{
    uint8_t buf[256];
    size_t n = encode_sample(buf, sizeof(buf));
    struct rov_wire_addr out;

    ck_assert_uint_lt(off, n);
    buf[off] = value;
    *why_p = NULL;
    return rov_wire_addr_decode(buf, n, &out, why_p);
}

START_TEST(test_addr_bad_header)
{
    const char *why;

    for (size_t off = 0; off < 4; off++) {
        ck_assert_int_eq(decode_modified(off, 0, &why), ROV_ERR_INVAL);
        ck_assert_str_eq(why, "not a railover address (bad magic)");
    }
    ck_assert_int_eq(decode_modified(4, ROV_WIRE_VERSION + 1, &why), ROV_ERR_INVAL);
    ck_assert_str_eq(why, "address blob of another protocol version");
    ck_assert_int_eq(decode_modified(4, 0, &why), ROV_ERR_INVAL);
    ck_assert_int_eq(decode_modified(5, 0, &why), ROV_ERR_INVAL);
    ck_assert_str_eq(why, "address blob rail count out of range");
    ck_assert_int_eq(decode_modified(5, ROV_ADDR_MAX_RAILS + 1, &why), ROV_ERR_INVAL);
    ck_assert_str_eq(why, "address blob rail count out of range");
    ck_assert_int_eq(decode_modified(5, 255, &why), ROV_ERR_INVAL);
    /* A count larger than the rails present is a truncation. */
    ck_assert_int_eq(decode_modified(5, 4, &why), ROV_ERR_INVAL);
    /* A count smaller leaves trailing bytes. */
    ck_assert_int_eq(decode_modified(5, 2, &why), ROV_ERR_INVAL);
    ck_assert_str_eq(why, "trailing bytes after address blob");
}
END_TEST

START_TEST(test_addr_trailing)
{
    uint8_t buf[257];
    size_t n = encode_sample(buf, sizeof(buf) - 1);
    struct rov_wire_addr out;
    const char *why = NULL;

    buf[n] = 0;
    ck_assert_int_eq(rov_wire_addr_decode(buf, n + 1, &out, &why), ROV_ERR_INVAL);
    ck_assert_str_eq(why, "trailing bytes after address blob");
    ck_assert_int_eq(rov_wire_addr_decode(buf, n, &out, &why), ROV_OK);
}
END_TEST

START_TEST(test_addr_kind_len)
{
    /* Offset of the first rail's kind length byte. */
    const size_t kl_off = ROV_ADDR_FIXED + 1;
    const char *why;

    ck_assert_int_eq(decode_modified(kl_off, 0, &why), ROV_ERR_INVAL);
    ck_assert_str_eq(why, "address blob rail kind length out of range");
    ck_assert_int_eq(decode_modified(kl_off, ROV_RAIL_KIND_MAX + 1, &why), ROV_ERR_INVAL);
    ck_assert_str_eq(why, "address blob rail kind length out of range");
    ck_assert_int_eq(decode_modified(kl_off, 255, &why), ROV_ERR_INVAL);
    /* A NUL inside the kind. */
    ck_assert_int_eq(decode_modified(kl_off + 2, 0, &why), ROV_ERR_INVAL);
    ck_assert_str_eq(why, "address blob rail kind contains NUL");
}
END_TEST

START_TEST(test_addr_rail_addr_len)
{
    /* The first rail's address length (after "verbs"), made to overrun. */
    const size_t al_off = ROV_ADDR_FIXED + 2 + 5;
    uint8_t buf[256];
    size_t n = encode_sample(buf, sizeof(buf));
    struct rov_wire_addr out;
    const char *why = NULL;

    ck_assert_uint_eq(rov_get16(buf + al_off), sizeof(verbs_addr));
    rov_put16(buf + al_off, UINT16_MAX);
    ck_assert_int_eq(rov_wire_addr_decode(buf, n, &out, &why), ROV_ERR_INVAL);
    ck_assert_str_eq(why, "address blob truncated");
    rov_put16(buf + al_off, (uint16_t)(n - al_off - 1));
    ck_assert_int_eq(rov_wire_addr_decode(buf, n, &out, &why), ROV_ERR_INVAL);
}
END_TEST

static Suite *wire_suite(void)
{
    Suite *s = suite_create("wire");
    TCase *tc;

    tc = tcase_create("header");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_hdr_roundtrip, 0,
                        (int)(sizeof(roundtrip_cases) / sizeof(roundtrip_cases[0])));
    tcase_add_test(tc, test_hdr_layout);
    tcase_add_test(tc, test_hdr_version_ignored_on_encode);
    tcase_add_test(tc, test_bad_magic_early);
    tcase_add_test(tc, test_one_byte_is_inprogress);
    tcase_add_test(tc, test_bad_version);
    tcase_add_test(tc, test_bad_type);
    tcase_add_test(tc, test_quiesce_sizes);
    tcase_add_test(tc, test_read_frames);
    tcase_add_test(tc, test_truncated_header);
    tcase_add_test(tc, test_reserved_bits);
    tcase_add_test(tc, test_payload_limit);
    tcase_add_test(tc, test_payload_on_control);
    tcase_add_test(tc, test_data_seq_zero);
    tcase_add_test(tc, test_decode_data);
    tcase_add_test(tc, test_control_with_seq);
    tcase_add_test(tc, test_control_flags);
    tcase_add_test(tc, test_error_is_sticky);
    suite_add_tcase(s, tc);

    tc = tcase_create("hello");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_hello_roundtrip);
    tcase_add_test(tc, test_hello_small_values);
    tcase_add_test(tc, test_hello_truncated);
    tcase_add_test(tc, test_hello_conn_id_zero);
    tcase_add_test(tc, test_hello_addr_len_mismatch);
    suite_add_tcase(s, tc);

    tc = tcase_create("addr");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_addr_roundtrip);
    tcase_add_test(tc, test_addr_reencode);
    tcase_add_test(tc, test_hello_max_msg_range);
    tcase_add_test(tc, test_hello_mac);
    tcase_add_test(tc, test_replay_window);
    tcase_add_test(tc, test_addr_encode_cap);
    tcase_add_test(tc, test_addr_one_and_max_rails);
    tcase_add_test(tc, test_addr_every_prefix);
    tcase_add_test(tc, test_addr_bad_header);
    tcase_add_test(tc, test_addr_trailing);
    tcase_add_test(tc, test_addr_kind_len);
    tcase_add_test(tc, test_addr_rail_addr_len);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(wire_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
