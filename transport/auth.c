#include "transport/auth.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "transport/log.h"
#include "transport/wire.h"

/* Largest input of one MAC: a label, a nonce, a frame header and the
 * largest HELLO (wire.h); assembled in one buffer for the one-shot HMAC(). */
#define AUTH_INPUT_MAX 2048

rov_status_t rov_auth_random(void *buf, size_t len)
{
    uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rov_error("auth", "getrandom: %m");
            return ROV_ERR_IO;
        }
        p += n;
        len -= (size_t)n;
    }
    return ROV_OK;
}

void rov_auth_mac(const uint8_t key[ROV_KEY_LEN], const char *label,
                  const struct rov_auth_piece *pieces, int n, uint8_t out[ROV_MAC_LEN])
{
    uint8_t in[AUTH_INPUT_MAX];
    size_t len = strlen(label) + 1; /* the NUL separates the label */
    unsigned int mac_len = ROV_MAC_LEN;

    memcpy(in, label, len);
    for (int i = 0; i < n; i++) {
        /* Callers pass bounded pieces (wire.h limits a HELLO); a bug that
         * passed more must not write past the buffer. */
        size_t take = pieces[i].len <= sizeof(in) - len ? pieces[i].len : sizeof(in) - len;

        if (take) /* p may be NULL for an empty piece */
            memcpy(in + len, pieces[i].p, take);
        len += take;
    }
    if (!HMAC(EVP_sha256(), key, ROV_KEY_LEN, in, len, out, &mac_len))
        memset(out, 0, ROV_MAC_LEN); /* matches no MAC a peer computed */
}

void rov_auth_hello_mac(const uint8_t key[ROV_KEY_LEN], const uint8_t *answered,
                        const uint8_t *hdrbuf, const uint8_t *payload, size_t len,
                        uint8_t out[ROV_MAC_LEN])
{
    struct rov_auth_piece pieces[3] = {
        {answered, ROV_NONCE_LEN},
        {hdrbuf, ROV_WIRE_HDR_LEN},
        {payload, len >= ROV_MAC_LEN ? len - ROV_MAC_LEN : 0},
    };

    rov_auth_mac(key, hdrbuf[3] == ROV_FT_HELLO_ACK ? "railover hello-ack" : "railover hello",
                 pieces, 3, out);
}

bool rov_auth_mac_equal(const uint8_t a[ROV_MAC_LEN], const uint8_t b[ROV_MAC_LEN])
{
    return CRYPTO_memcmp(a, b, ROV_MAC_LEN) == 0;
}

bool rov_auth_mac_prefix_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    return n >= 16 && n <= ROV_MAC_LEN && CRYPTO_memcmp(a, b, n) == 0;
}

bool rov_auth_key_is_zero(const uint8_t key[ROV_KEY_LEN])
{
    uint8_t acc = 0;

    for (int i = 0; i < ROV_KEY_LEN; i++)
        acc |= key[i];
    return acc == 0;
}

bool rov_replay_fresh(const struct rov_replay *r, uint64_t ctr)
{
    if (ctr == 0)
        return false;
    if (ctr > r->max)
        return true;
    if (r->max - ctr >= 64)
        return false;
    return !(r->seen & (1ull << (r->max - ctr)));
}

void rov_replay_accept(struct rov_replay *r, uint64_t ctr)
{
    if (ctr > r->max) {
        uint64_t shift = ctr - r->max;

        r->seen = shift >= 64 ? 0 : r->seen << shift;
        r->max = ctr;
    }
    r->seen |= 1ull << (r->max - ctr);
}
