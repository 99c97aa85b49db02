/*
 * libFuzzer target for the wire decoders: everything a peer can send before
 * the transport trusts it.  Each input is tried as a frame stream (peek and
 * decode, then the HELLO payload of a whole HELLO frame) and as an endpoint
 * address blob.  Beyond "no crash, no sanitizer report", it checks that the
 * decoders agree with each other and with their own encoders, and that the
 * handshake's authentication (auth.c) holds on whatever a HELLO says: a
 * HELLO checked against FUZZ_KEY passes only if its MAC is that key's (the
 * corpus has one that is), a MAC made with the key passes, and any change
 * to a covered byte, or another key, or the HELLO_ACK's answered nonce,
 * fails it; the reconnect counters' replay window accepts each counter
 * once.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* The key of the corpus's authentic HELLO (make_corpus.py). */
static const uint8_t FUZZ_KEY[ROV_KEY_LEN] = "railover fuzz endpoint key 0123";
/* The challenge that HELLO answers (make_corpus.py). */
static const uint8_t FUZZ_CHALLENGE[ROV_NONCE_LEN] = "railover fuzz c";

static bool authentic(const uint8_t *key, const uint8_t *answered, const uint8_t *hdr,
                      const uint8_t *payload, size_t len, const uint8_t *mac)
{
    uint8_t want[ROV_MAC_LEN];

    rov_auth_hello_mac(key, answered, hdr, payload, len, want);
    return rov_auth_mac_equal(want, mac);
}

/* A decoded HELLO payload with the header it came with (hdr, or NULL for a
 * payload on its own). */
static void check_auth(const uint8_t *hdr, const uint8_t *payload, size_t len,
                       const struct rov_wire_hello *h)
{
    static const uint8_t zero_hdr[ROV_WIRE_HDR_LEN];
    uint8_t other[ROV_KEY_LEN], *sealed;
    size_t flip;
    struct rov_replay r = {0, 0};

    if (!hdr)
        hdr = zero_hdr;
    memcpy(other, FUZZ_KEY, sizeof(other));
    other[0] ^= 1;
    /* The MAC as it came: another key never accepts what FUZZ_KEY does. */
    if (authentic(FUZZ_KEY, FUZZ_CHALLENGE, hdr, payload, len, h->mac))
        CHECK(!authentic(other, FUZZ_CHALLENGE, hdr, payload, len, h->mac));
    /* Sealed with FUZZ_KEY: passes; a flipped covered byte or another key
     * or an answered nonce does not. */
    sealed = malloc(len);
    CHECK(sealed != NULL);
    memcpy(sealed, payload, len);
    rov_auth_hello_mac(FUZZ_KEY, FUZZ_CHALLENGE, hdr, sealed, len, sealed + len - ROV_MAC_LEN);
    CHECK(authentic(FUZZ_KEY, FUZZ_CHALLENGE, hdr, sealed, len, sealed + len - ROV_MAC_LEN));
    CHECK(!authentic(other, FUZZ_CHALLENGE, hdr, sealed, len, sealed + len - ROV_MAC_LEN));
    if (memcmp(h->nonce, FUZZ_CHALLENGE, ROV_NONCE_LEN) != 0)
        CHECK(!authentic(FUZZ_KEY, h->nonce, hdr, sealed, len, sealed + len - ROV_MAC_LEN));
    flip = (h->conn_id ^ h->ctr) % (len - ROV_MAC_LEN);
    sealed[flip] ^= 0x80;
    CHECK(!authentic(FUZZ_KEY, FUZZ_CHALLENGE, hdr, sealed, len, sealed + len - ROV_MAC_LEN));
    free(sealed);
    /* The replay window: each counter accepted once, 0 never. */
    CHECK(!rov_replay_fresh(&r, 0));
    for (uint64_t c = h->ctr; c < h->ctr + 3 && c != 0; c++) {
        CHECK(rov_replay_fresh(&r, c));
        rov_replay_accept(&r, c);
        CHECK(!rov_replay_fresh(&r, c));
    }
}

static void check_hello(const uint8_t *hdr, const uint8_t *payload, size_t len)
{
    struct rov_wire_hello h;
    const char *why = NULL;
    uint8_t *again;

    if (rov_wire_hello_decode(payload, len, &h, &why) != ROV_OK) {
        CHECK(why != NULL);
        return;
    }
    CHECK(h.conn_id != 0);
    CHECK(h.max_msg != 0 && h.max_msg <= UINT32_MAX);
    CHECK(h.data_len <= ROV_CONN_DATA_MAX);
    CHECK(ROV_WIRE_HELLO_FIXED + h.addr_len + h.data_len == len);
    CHECK(h.mac == payload + len - ROV_MAC_LEN);
    if (h.addr_len) {
        const uint8_t *a = h.addr;

        CHECK(a == payload + ROV_WIRE_HELLO_ADDR_OFF);
    } else {
        CHECK(h.addr == NULL);
    }
    /* Re-encoding gives back the same bytes. */
    again = malloc(len);
    CHECK(again != NULL);
    CHECK(rov_wire_hello_encode(again, &h) == len);
    /* The same bytes but the MAC, which the encoder leaves for the caller. */
    CHECK(memcmp(again, payload, len - ROV_MAC_LEN) == 0);
    free(again);
    check_auth(hdr, payload, len, &h);
}

/* The receive path's inline decoder (rov_wire_decode_data) takes the input
 * as one whole frame: it accepts exactly what the full decoder accepts as a
 * DATA frame of that length, with the same fields, and reads nothing past
 * the input (libFuzzer's buffer is exactly size bytes). */
static void check_data_fast(const uint8_t *data, size_t size, size_t max_payload,
                            rov_status_t full, const struct rov_wire_hdr *hdr)
{
    struct rov_wire_hdr fast;
    bool whole_data = full == ROV_OK && hdr->type == ROV_FT_DATA &&
                      size == ROV_WIRE_HDR_LEN + (size_t)hdr->len;

    CHECK(rov_wire_decode_data(data, size, max_payload, &fast) == whole_data);
    if (whole_data)
        CHECK(fast.version == hdr->version && fast.type == hdr->type && fast.len == hdr->len &&
              fast.seq == hdr->seq && fast.ack == hdr->ack && fast.tag == hdr->tag);
}

static void check_frame(const uint8_t *data, size_t size, size_t max_payload)
{
    struct rov_wire_hdr hdr, again;
    const char *why_d = NULL, *why_p = NULL;
    size_t frame_len = 0;
    rov_status_t sd, sp;
    uint8_t enc[ROV_WIRE_HDR_LEN];
    int bad_at = -1;

    /* A prefix never looks better than the whole: once a prefix is rejected,
     * every longer one is rejected too; shorter than a header is never OK. */
    for (size_t k = 0; k <= size && k <= ROV_WIRE_HDR_LEN; k++) {
        const char *why = NULL;
        rov_status_t st = rov_wire_decode(data, k, max_payload, &hdr, &why);

        if (k < ROV_WIRE_HDR_LEN)
            CHECK(st == ROV_INPROGRESS || st == ROV_ERR_PROTO);
        if (st == ROV_ERR_PROTO) {
            CHECK(why != NULL && why[0] != '\0');
            if (bad_at < 0)
                bad_at = (int)k;
        } else {
            CHECK(bad_at < 0);
        }
        if (st == ROV_INPROGRESS)
            CHECK(k < ROV_WIRE_HDR_LEN);
    }

    sd = rov_wire_decode(data, size, max_payload, &hdr, &why_d);
    sp = rov_wire_peek(data, size, max_payload, &frame_len, &why_p);
    check_data_fast(data, size, max_payload, sd, &hdr);
    CHECK(sd == sp);
    CHECK(sd == ROV_OK || sd == ROV_INPROGRESS || sd == ROV_ERR_PROTO);
    if (sd == ROV_ERR_PROTO)
        CHECK(why_d != NULL && why_p != NULL && strcmp(why_d, why_p) == 0);
    if (sd == ROV_INPROGRESS)
        CHECK(size < ROV_WIRE_HDR_LEN);
    if (sd != ROV_OK)
        return;

    CHECK(size >= ROV_WIRE_HDR_LEN);
    CHECK(hdr.version == ROV_WIRE_VERSION);
    CHECK(hdr.type >= 1 && hdr.type <= ROV_FT_MAX_);
    CHECK(hdr.len <= max_payload);
    CHECK(frame_len == ROV_WIRE_HDR_LEN + (size_t)hdr.len);
    CHECK(frame_len - ROV_WIRE_HDR_LEN <= max_payload);
    CHECK((hdr.type == ROV_FT_DATA) == (hdr.seq != 0));
    if (hdr.type == ROV_FT_QUIESCE)
        CHECK(hdr.len == ((hdr.tag & ROV_QUIESCE_RESUME) ? 0 : ROV_QUIESCE_PAYLOAD));
    else if (hdr.type == ROV_FT_CHALLENGE)
        CHECK(hdr.len == ROV_NONCE_LEN && hdr.tag == 0);
    else if (hdr.type == ROV_FT_READ)
        CHECK(hdr.len == ROV_WIRE_READ_LEN);
    else if (hdr.type != ROV_FT_DATA && hdr.type != ROV_FT_HELLO &&
             hdr.type != ROV_FT_HELLO_ACK && hdr.type != ROV_FT_READ_DATA)
        CHECK(hdr.len == 0);
    if (hdr.type == ROV_FT_HELLO || hdr.type == ROV_FT_HELLO_ACK || hdr.type == ROV_FT_SWITCH)
        CHECK((hdr.tag & ~(uint32_t)ROV_HF_MASK_) == 0 &&
              rov_hf_reason(hdr.tag) < ROV_REASON_COUNT);

    /* Round trip: the decoded header encodes to the very same 32 bytes and
     * decodes to the same fields. */
    rov_wire_encode(enc, &hdr);
    CHECK(memcmp(enc, data, ROV_WIRE_HDR_LEN) == 0);
    CHECK(rov_wire_decode(enc, sizeof(enc), max_payload, &again, &why_d) == ROV_OK);
    CHECK(again.version == hdr.version && again.type == hdr.type && again.len == hdr.len &&
          again.seq == hdr.seq && again.ack == hdr.ack && again.tag == hdr.tag);

    /* A whole frame: hand its payload to the HELLO decoder like the
     * transport would (exact-size copy so over-reads are caught). */
    if (frame_len <= size &&
        (hdr.type == ROV_FT_HELLO || hdr.type == ROV_FT_HELLO_ACK)) {
        uint8_t *payload = malloc(hdr.len ? hdr.len : 1);

        CHECK(payload != NULL);
        memcpy(payload, data + ROV_WIRE_HDR_LEN, hdr.len);
        check_hello(data, payload, hdr.len);
        free(payload);
    }
}

static void check_addr(const uint8_t *data, size_t size)
{
    struct rov_wire_addr a;
    const char *why = NULL;
    uint8_t *again;
    size_t n;

    if (rov_wire_addr_decode(data, size, &a, &why) != ROV_OK) {
        CHECK(why != NULL && why[0] != '\0');
        return;
    }
    CHECK(a.nrails >= 1 && a.nrails <= ROV_ADDR_MAX_RAILS);
    for (unsigned i = 0; i < a.nrails; i++) {
        size_t kl = strlen(a.rails[i].kind);
        const uint8_t *ra = a.rails[i].addr;

        CHECK(kl >= 1 && kl <= ROV_RAIL_KIND_MAX);
        CHECK(a.rails[i].index <= 255);
        if (a.rails[i].addr_len) {
            CHECK(ra != NULL && ra >= data && ra + a.rails[i].addr_len <= data + size);
        } else {
            CHECK(ra == NULL);
        }
    }
    /* The blob is exactly what the encoder would produce. */
    n = rov_wire_addr_size(&a);
    CHECK(n == size);
    again = malloc(n);
    CHECK(again != NULL);
    CHECK(rov_wire_addr_encode(again, n - 1, &a) == 0);
    CHECK(rov_wire_addr_encode(again, n, &a) == n);
    CHECK(memcmp(again, data, n) == 0);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Limits: the input length itself (what a rail's buffer holds), a tiny
     * one, and the largest a u32 length field can express. */
    check_frame(data, size, size > ROV_WIRE_HDR_LEN ? size - ROV_WIRE_HDR_LEN : 0);
    check_frame(data, size, 64);
    check_frame(data, size, UINT32_MAX);
    check_addr(data, size);
    /* A HELLO payload may also be the input as a whole. */
    check_hello(NULL, data, size);
    return 0;
}
