#include "transport/wire.h"

#include <string.h>

rov_status_t rov_wire_decode(const void *buf, size_t avail, size_t max_payload,
                             struct rov_wire_hdr *hdr, const char **why_p)
{
    const uint8_t *p = buf;

    /* Check what we have so far, so garbage is caught on its first bytes. */
    if (avail >= 2 && rov_get16(p) != ROV_WIRE_MAGIC) {
        *why_p = "bad magic";
        return ROV_ERR_PROTO;
    }
    if (avail >= 3 && p[2] != ROV_WIRE_VERSION) {
        *why_p = "unsupported protocol version";
        return ROV_ERR_PROTO;
    }
    if (avail >= 4 && (p[3] == 0 || p[3] > ROV_FT_MAX_)) {
        *why_p = "unknown frame type";
        return ROV_ERR_PROTO;
    }
    if (avail < ROV_WIRE_HDR_LEN)
        return ROV_INPROGRESS;

    hdr->version = p[2];
    hdr->type = p[3];
    hdr->len = rov_get32(p + 4);
    hdr->seq = rov_get64(p + 8);
    hdr->ack = rov_get64(p + 16);
    hdr->tag = rov_get32(p + 24);
    hdr->flags = rov_get32(p + 28);
    if (hdr->flags & ~(hdr->type == ROV_FT_DATA ? (uint32_t)ROV_DF_MORE : 0u)) {
        *why_p = "reserved header bits set";
        return ROV_ERR_PROTO;
    }
    if (hdr->len > max_payload) {
        *why_p = max_payload == ROV_WIRE_HELLO_MAX
                     ? "frame longer than a handshake frame before authentication"
                     : "frame longer than RAILOVER_MAX_MSG";
        return ROV_ERR_PROTO;
    }
    if (hdr->type == ROV_FT_QUIESCE) {
        if (hdr->len != ((hdr->tag & ROV_QUIESCE_RESUME) ? 0 : ROV_QUIESCE_PAYLOAD)) {
            *why_p = "end-of-channel marker of the wrong size";
            return ROV_ERR_PROTO;
        }
    } else if (hdr->type == ROV_FT_CHALLENGE) {
        if (hdr->len != ROV_NONCE_LEN || hdr->tag != 0) {
            *why_p = "challenge of the wrong size";
            return ROV_ERR_PROTO;
        }
    } else if (hdr->type == ROV_FT_READ) {
        if (hdr->len != ROV_WIRE_READ_LEN) {
            *why_p = "read request of the wrong size";
            return ROV_ERR_PROTO;
        }
    } else if (hdr->type != ROV_FT_DATA && hdr->type != ROV_FT_HELLO &&
               hdr->type != ROV_FT_HELLO_ACK && hdr->type != ROV_FT_READ_DATA && hdr->len != 0) {
        *why_p = "payload on a control frame";
        return ROV_ERR_PROTO;
    }
    if (hdr->type == ROV_FT_DATA && hdr->seq == 0) {
        *why_p = "data frame with sequence 0";
        return ROV_ERR_PROTO;
    }
    if (hdr->type != ROV_FT_DATA && hdr->seq != 0) {
        *why_p = "sequence number on a control frame";
        return ROV_ERR_PROTO;
    }
    if ((hdr->type == ROV_FT_HELLO || hdr->type == ROV_FT_HELLO_ACK ||
         hdr->type == ROV_FT_SWITCH) && (hdr->tag & ~(uint32_t)ROV_HF_MASK_)) {
        *why_p = "unknown control flags";
        return ROV_ERR_PROTO;
    }
    if ((hdr->type == ROV_FT_HELLO || hdr->type == ROV_FT_HELLO_ACK ||
         hdr->type == ROV_FT_SWITCH) && rov_hf_reason(hdr->tag) >= ROV_REASON_COUNT) {
        *why_p = "unknown switch reason";
        return ROV_ERR_PROTO;
    }
    if (hdr->type == ROV_FT_CLOSE &&
        ((hdr->tag & ~(uint32_t)(ROV_CLOSE_ACKED | ROV_CLOSE_ABORT | ROV_CLOSE_STATUS_MASK_)) ||
         ((hdr->tag & ROV_CLOSE_STATUS_MASK_) && !(hdr->tag & ROV_CLOSE_ABORT)))) {
        *why_p = "unknown close flags";
        return ROV_ERR_PROTO;
    }
    return ROV_OK;
}

rov_status_t rov_wire_peek(const void *buf, size_t avail, size_t max_payload,
                           size_t *frame_len_p, const char **why_p)
{
    struct rov_wire_hdr hdr;
    rov_status_t st = rov_wire_decode(buf, avail, max_payload, &hdr, why_p);

    if (st == ROV_OK)
        *frame_len_p = ROV_WIRE_HDR_LEN + (size_t)hdr.len;
    return st;
}

size_t rov_wire_hello_encode(void *buf, const struct rov_wire_hello *hello)
{
    uint8_t *p = buf;

    memcpy(p, hello->ep_id, ROV_EP_ID_LEN);
    rov_put64(p + 16, hello->conn_id);
    rov_put64(p + 24, hello->peer_conn_id);
    rov_put16(p + 32, hello->rail);
    rov_put16(p + 34, (uint16_t)hello->addr_len);
    rov_put64(p + 36, hello->max_msg);
    rov_put64(p + 44, hello->ctr);
    memcpy(p + 52, hello->nonce, ROV_NONCE_LEN);
    rov_put16(p + 68, (uint16_t)hello->data_len);
    p += ROV_WIRE_HELLO_ADDR_OFF;
    if (hello->addr_len)
        memcpy(p, hello->addr, hello->addr_len);
    p += hello->addr_len;
    if (hello->data_len)
        memcpy(p, hello->data, hello->data_len);
    memset(p + hello->data_len, 0, ROV_MAC_LEN);
    return ROV_WIRE_HELLO_FIXED + hello->addr_len + hello->data_len;
}

rov_status_t rov_wire_hello_decode(const void *buf, size_t len, struct rov_wire_hello *hello,
                                   const char **why_p)
{
    const uint8_t *p = buf;

    if (len < ROV_WIRE_HELLO_FIXED) {
        *why_p = "truncated hello";
        return ROV_ERR_PROTO;
    }
    memcpy(hello->ep_id, p, ROV_EP_ID_LEN);
    hello->conn_id = rov_get64(p + 16);
    hello->peer_conn_id = rov_get64(p + 24);
    hello->rail = rov_get16(p + 32);
    hello->addr_len = rov_get16(p + 34);
    hello->max_msg = rov_get64(p + 36);
    hello->ctr = rov_get64(p + 44);
    memcpy(hello->nonce, p + 52, ROV_NONCE_LEN);
    hello->data_len = rov_get16(p + 68);
    if (hello->conn_id == 0) {
        *why_p = "hello with connection id 0";
        return ROV_ERR_PROTO;
    }
    if (hello->data_len > ROV_CONN_DATA_MAX) {
        *why_p = "hello with connect-time data longer than ROV_CONN_DATA_MAX";
        return ROV_ERR_PROTO;
    }
    if (ROV_WIRE_HELLO_FIXED + hello->addr_len + hello->data_len != len) {
        *why_p = "hello address and data lengths do not match the frame";
        return ROV_ERR_PROTO;
    }
    if (hello->max_msg == 0 || hello->max_msg > UINT32_MAX) {
        *why_p = "hello with a largest message out of range";
        return ROV_ERR_PROTO;
    }
    p += ROV_WIRE_HELLO_ADDR_OFF;
    hello->addr = hello->addr_len ? p : NULL;
    hello->data = p + hello->addr_len;
    hello->mac = p + hello->addr_len + hello->data_len;
    return ROV_OK;
}

size_t rov_wire_addr_size(const struct rov_wire_addr *addr)
{
    size_t n = ROV_ADDR_FIXED;

    for (unsigned i = 0; i < addr->nrails; i++)
        n += 1 + 1 + strlen(addr->rails[i].kind) + 2 + addr->rails[i].addr_len;
    return n;
}

size_t rov_wire_addr_encode(void *buf, size_t cap, const struct rov_wire_addr *addr)
{
    size_t n = rov_wire_addr_size(addr);
    uint8_t *p = buf;

    if (n > cap)
        return 0;
    rov_put32(p, ROV_ADDR_MAGIC);
    p[4] = ROV_WIRE_VERSION;
    p[5] = (uint8_t)addr->nrails;
    rov_put32(p + 6, addr->gen);
    memcpy(p + 10, addr->ep_id, ROV_EP_ID_LEN);
    memcpy(p + 10 + ROV_EP_ID_LEN, addr->key, ROV_KEY_LEN);
    p += ROV_ADDR_FIXED;
    for (unsigned i = 0; i < addr->nrails; i++) {
        size_t kl = strlen(addr->rails[i].kind);

        p[0] = (uint8_t)addr->rails[i].index;
        p[1] = (uint8_t)kl;
        memcpy(p + 2, addr->rails[i].kind, kl);
        p += 2 + kl;
        rov_put16(p, (uint16_t)addr->rails[i].addr_len);
        if (addr->rails[i].addr_len)
            memcpy(p + 2, addr->rails[i].addr, addr->rails[i].addr_len);
        p += 2 + addr->rails[i].addr_len;
    }
    return n;
}

rov_status_t rov_wire_addr_decode(const void *buf, size_t len, struct rov_wire_addr *addr,
                                  const char **why_p)
{
    const uint8_t *p = buf, *end = p + len;

    if (len < ROV_ADDR_FIXED) {
        *why_p = "address blob too short";
        return ROV_ERR_INVAL;
    }
    if (rov_get32(p) != ROV_ADDR_MAGIC) {
        *why_p = "not a railover address (bad magic)";
        return ROV_ERR_INVAL;
    }
    if (p[4] != ROV_WIRE_VERSION) {
        *why_p = "address blob of another protocol version";
        return ROV_ERR_INVAL;
    }
    addr->nrails = p[5];
    if (addr->nrails == 0 || addr->nrails > ROV_ADDR_MAX_RAILS) {
        *why_p = "address blob rail count out of range";
        return ROV_ERR_INVAL;
    }
    addr->gen = rov_get32(p + 6);
    memcpy(addr->ep_id, p + 10, ROV_EP_ID_LEN);
    memcpy(addr->key, p + 10 + ROV_EP_ID_LEN, ROV_KEY_LEN);
    p += ROV_ADDR_FIXED;
    for (unsigned i = 0; i < addr->nrails; i++) {
        size_t kl, al;

        if (end - p < 2)
            goto truncated;
        addr->rails[i].index = p[0];
        kl = p[1];
        if (kl == 0 || kl > ROV_RAIL_KIND_MAX) {
            *why_p = "address blob rail kind length out of range";
            return ROV_ERR_INVAL;
        }
        if ((size_t)(end - p) < 2 + kl + 2)
            goto truncated;
        memcpy(addr->rails[i].kind, p + 2, kl);
        addr->rails[i].kind[kl] = '\0';
        if (memchr(addr->rails[i].kind, '\0', kl)) {
            *why_p = "address blob rail kind contains NUL";
            return ROV_ERR_INVAL;
        }
        p += 2 + kl;
        al = rov_get16(p);
        if ((size_t)(end - p) < 2 + al)
            goto truncated;
        addr->rails[i].addr = al ? p + 2 : NULL;
        addr->rails[i].addr_len = al;
        p += 2 + al;
    }
    if (p != end) {
        *why_p = "trailing bytes after address blob";
        return ROV_ERR_INVAL;
    }
    return ROV_OK;
truncated:
    *why_p = "address blob truncated";
    return ROV_ERR_INVAL;
}

void rov_wire_ep_id_hex(const uint8_t *id, char out[ROV_EP_ID_HEX_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";

    for (int i = 0; i < ROV_EP_ID_LEN; i++) {
        out[2 * i] = digits[id[i] >> 4];
        out[2 * i + 1] = digits[id[i] & 15];
    }
    out[ROV_EP_ID_HEX_LEN] = '\0';
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

rov_status_t rov_wire_ep_id_parse(const char *hex, uint8_t *id)
{
    if (strlen(hex) != ROV_EP_ID_HEX_LEN)
        return ROV_ERR_INVAL;
    for (int i = 0; i < ROV_EP_ID_LEN; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);

        if (hi < 0 || lo < 0)
            return ROV_ERR_INVAL;
        id[i] = (uint8_t)(hi << 4 | lo);
    }
    return ROV_OK;
}
