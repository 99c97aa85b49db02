/*
 * The handshake of every channel (wire.h): the acceptor's CHALLENGE, the
 * connector's HELLO and the HELLO_ACK, each with its proof; the
 * connection's secret; a first HELLO creating the accepted connection, a
 * later one joining (or parked for) its connection; HELLOs for a
 * connection that ended; and the proofs a rail asks for before it spends
 * anything on a channel (rov_rail_preauth_prove/_check).
 */
#include <stdlib.h>
#include <string.h>

#include "transport/auth.h"
#include "transport/conn_int.h"
#include "transport/log.h"

/* Handshake authentication (auth.h) ------------------------------------------ */

static bool hello_authentic(const uint8_t *key, const uint8_t *answered,
                            const struct rov_wire_hdr *hdr, const uint8_t *payload,
                            const struct rov_wire_hello *h)
{
    uint8_t hdrbuf[ROV_WIRE_HDR_LEN], mac[ROV_MAC_LEN];

    rov_wire_encode(hdrbuf, hdr);
    rov_auth_hello_mac(key, answered, hdrbuf, payload, hdr->len, mac);
    return rov_auth_mac_equal(mac, h->mac);
}

/* The connection's secret, from the listener's endpoint key, both nonces of
 * the first handshake and both ends' identities: only the two ends of this
 * connection can compute it (the connector was given the listener's key). */
static void derive_secret(const uint8_t *listener_key, const uint8_t *nonce_c,
                          const uint8_t *nonce_l, const uint8_t *ep_c, uint64_t conn_c,
                          const uint8_t *ep_l, uint64_t conn_l, uint8_t out[ROV_KEY_LEN])
{
    uint8_t ids[16];
    struct rov_auth_piece pieces[5] = {
        {nonce_c, ROV_NONCE_LEN}, {nonce_l, ROV_NONCE_LEN},
        {ep_c, ROV_EP_ID_LEN},    {ep_l, ROV_EP_ID_LEN},
        {ids, sizeof(ids)},
    };

    rov_put64(ids, conn_c);
    rov_put64(ids + 8, conn_l);
    rov_auth_mac(listener_key, "railover connection secret", pieces, 5, out);
}

/* Send a HELLO or a HELLO_ACK with its proof, which covers the nonce it
 * answers (chan->nonce: the acceptor's CHALLENGE for a HELLO, the HELLO's
 * nonce for a HELLO_ACK).  A HELLO's own nonce then replaces the challenge
 * in chan->nonce (the answer's MAC covers it); a first HELLO goes under the
 * peer's endpoint key, with our public address, any other under the
 * connection's secret with the next counter.  A HELLO_ACK carries `nonce`
 * (the listener's half of the secret, on a first answer; otherwise fresh
 * bytes). */
static void send_hello(struct rov_chan *chan, uint8_t type, uint32_t flags, const uint8_t *nonce)
{
    struct rov_conn *conn = chan->conn;
    rov_context_t *ctx = conn->ctx;
    bool first = type == ROV_FT_HELLO && !conn->peer_id;
    uint8_t hdrbuf[ROV_WIRE_HDR_LEN];
    uint8_t buf[ROV_WIRE_HELLO_FIXED + sizeof(ctx->endpoint->pub_blob)];
    struct rov_wire_hello h = {
        .conn_id = conn->id, .peer_conn_id = conn->peer_id,
        .rail = (uint16_t)chan->rail->index, .max_msg = ctx->config.max_msg,
    };
    size_t len;

    memcpy(h.ep_id, ctx->ep_id, ROV_EP_ID_LEN);
    if (type == ROV_FT_HELLO || !nonce) {
        if (rov_auth_random(h.nonce, ROV_NONCE_LEN) != ROV_OK) {
            rov_conn_chan_failed(chan, ROV_ERR_IO, "no random bytes for a handshake");
            return;
        }
    } else {
        memcpy(h.nonce, nonce, ROV_NONCE_LEN);
    }
    if (type == ROV_FT_HELLO) {
        if (!first) {
            h.ctr = ++conn->hello_tx_ctr;
            /* After a reopen our ports (or host) changed: the peer learns
             * where we listen now from the reconnect, authenticated by the
             * connection's secret. */
            if (conn->state == ROV_CONN_REOPENING && ctx->endpoint) {
                h.addr = ctx->endpoint->pub_blob;
                h.addr_len = ctx->endpoint->blob_len;
            }
        } else if (ctx->endpoint) {
            h.addr = ctx->endpoint->pub_blob;
            h.addr_len = ctx->endpoint->blob_len;
            h.data = conn->data;
            h.data_len = conn->data_len;
        }
    }
    len = rov_wire_hello_encode(buf, &h);
    conn_ctrl_hdr(chan, type, flags, len, hdrbuf);
    rov_auth_hello_mac(first ? conn->peer.key : conn->secret, chan->nonce, hdrbuf, buf, len,
                       buf + len - ROV_MAC_LEN);
    if (type == ROV_FT_HELLO)
        memcpy(chan->nonce, h.nonce, ROV_NONCE_LEN);
    conn_ctrl_send(chan, hdrbuf, buf, len);
}

/* The peer's largest message, from its handshake: our sends are held to
 * it.  A message already queued that it would refuse fails the connection
 * once, naming both settings (a peer that closed the channel on it instead
 * would make this side reconnect for ever).  False when it did. */
static bool learn_peer_max(struct rov_conn *conn, uint64_t peer_max)
{
    size_t own = conn->ctx->config.max_msg;

    conn->peer_max_msg = peer_max;
    conn->max_send = peer_max < own ? (size_t)peer_max : own;
    for (struct rov_msg *m = conn->tx.head; m; m = m->next) {
        if (m->len > conn->max_send) {
            rov_error("conn", "conn %llu: a queued message of %zu bytes is larger than the "
                      "peer accepts (its RAILOVER_MAX_MSG is %llu, ours %zu): connection failed",
                      (unsigned long long)conn->id, m->len, (unsigned long long)peer_max, own);
            conn_fail(conn, ROV_ERR_MSGSIZE, "message larger than the peer's RAILOVER_MAX_MSG");
            return false;
        }
    }
    return true;
}

static struct rov_conn *find_conn(rov_context_t *ctx, uint64_t id)
{
    for (struct rov_conn *c = ctx->conns; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* Make an accepted channel the connection's channel on its rail, replacing
 * any other, and answer its HELLO (flags, ack). */
void conn_adopt(struct rov_conn *conn, struct rov_chan *chan, uint32_t flags, uint64_t ack)
{
    int rail = chan->rail->index;
    struct rov_chan *old = conn->chans[rail];
    bool follow;

    rov_ctx_chan_park(chan, false);
    if (old && old != chan)
        rov_ctx_chan_close(old);
    conn->chans[rail] = chan;
    chan->conn = conn;
    chan->handshaken = 1;
    if (!conn_apply_ack(conn, chan, ack))
        return;
    follow = (flags & ROV_HF_SWITCH) && conn_peer_moves(conn, chan, flags);
    send_hello(chan, ROV_FT_HELLO_ACK, follow ? ROV_HF_SWITCH : 0, NULL);
    /* A new channel of the rail we send on: resume from what the peer has. */
    if (chan->conn == conn && conn->tx_rail == rail)
        conn_peer_synced(conn, chan, ack);
    conn_peer_request_done(conn, chan, flags);
    /* The peer reconnected after its reopen (its rails were closed; it
     * may have closed them before its last ack reached us: still
     * draining, the ack of this HELLO settled that). */
    if (chan->conn == conn && conn->tx_rail == rail &&
        (conn->state == ROV_CONN_QUIESCED || conn->state == ROV_CONN_REOPENING ||
         (conn->state == ROV_CONN_DRAINING && conn->peer_eoc)))
        conn_running(conn, "the peer reconnected after its reopen");
}

/* Answer a HELLO for a connection that failed or ended here with its
 * status (CLOSE|ABORT), and close the channel: the peer stops reconnecting
 * to it.  The peer sends nothing after its HELLO until it is answered, so
 * the close leaves no unread input behind, and the answer is not lost to a
 * reset. */
void conn_abort_hello(struct rov_chan *chan, rov_status_t status)
{
    if (conn_send_ctrl(chan, ROV_FT_CLOSE, rov_close_abort(status), NULL, 0) == ROV_OK)
        rov_ctx_chan_close(chan);
}

/* The key a peer proves on a connection's channel: ours (the listener's
 * address key) for its first, else the secret of the connection conn_id
 * names, live or among the last ended; NULL when there is none. */
static const uint8_t *proof_key(rov_context_t *ctx, uint64_t conn_id)
{
    struct rov_conn *conn;

    if (conn_id == 0)
        return ctx->ep_key;
    conn = find_conn(ctx, conn_id);
    if (conn)
        return conn->has_secret ? conn->secret : NULL;
    for (int i = 0; i < ROV_ENDED_MAX; i++)
        if (ctx->ended[i].id == conn_id)
            return ctx->ended[i].secret;
    return NULL;
}

static void proof_mac(const uint8_t *key, const uint8_t *challenge, const uint8_t *ids,
                      const void *msg, size_t len, uint8_t mac[ROV_MAC_LEN])
{
    struct rov_auth_piece pieces[3] = {{challenge, ROV_NONCE_LEN}, {ids, 8}, {msg, len}};

    rov_auth_mac(key, "railover rail setup", pieces, 3, mac);
}

void rov_rail_preauth_prove(const struct rov_chan *chan, const uint8_t *challenge,
                            const void *msg, size_t len, uint8_t *proof, size_t proof_len)
{
    const struct rov_conn *conn = chan->conn;
    bool later = conn->peer_id && conn->has_secret;
    uint8_t mac[ROV_MAC_LEN];

    rov_put64(proof, later ? conn->peer_id : 0);
    proof_mac(later ? conn->secret : conn->peer.key, challenge, proof, msg, len, mac);
    memcpy(proof + 8, mac, proof_len - 8);
}

bool rov_rail_preauth_check(struct rov_rail *rail, const uint8_t *challenge, const void *msg,
                            size_t len, const uint8_t *proof, size_t proof_len)
{
    const uint8_t *key;
    uint8_t want[ROV_MAC_LEN];

    if (proof_len < ROV_RAIL_PROOF_SHORT_LEN || proof_len > ROV_RAIL_PROOF_LEN)
        return false;
    key = proof_key(rail->ctx, rov_get64(proof));
    if (!key)
        return false;
    proof_mac(key, challenge, proof, msg, len, want);
    return rov_auth_mac_prefix_equal(want, proof + 8, proof_len - 8);
}

/* A HELLO for a connection no longer here (freed, rov_conn_free()): the
 * peer, closing too, lost our answer to its CLOSE, or did not learn of a
 * failure.  It is answered (CLOSE|ABORT, and the peer stops reconnecting)
 * only when it proves that connection's secret, which the context keeps
 * for its last ROV_ENDED_MAX connections; anything else is closed
 * unanswered, like a HELLO for an id never used, so that nobody without
 * the secret learns which connection ids existed. */
static ROV_COLD void hello_for_ended(struct rov_chan *chan, const struct rov_wire_hdr *hdr,
                                     const uint8_t *payload, const struct rov_wire_hello *h)
{
    rov_context_t *ctx = chan->rail->ctx;

    for (int i = 0; i < ROV_ENDED_MAX; i++) {
        const struct rov_ended *e = &ctx->ended[i];

        if (e->id != h->peer_conn_id || e->id == 0 || e->peer_id != h->conn_id ||
            memcmp(e->peer_ep, h->ep_id, ROV_EP_ID_LEN) != 0 ||
            !hello_authentic(e->secret, chan->nonce, hdr, payload, h))
            continue;
        rov_info("conn", "hello on %s for connection %llu, which has ended here: answered and "
                 "closed", chan->rail->spec->name, (unsigned long long)h->peer_conn_id);
        return conn_abort_hello(chan, ROV_ERR_CLOSED);
    }
    conn_protocol_error(chan, "hello for a connection not here, or not authenticated");
}

/* HELLO on an accepted channel: a new connection, or a new channel (switch,
 * reconnect) of an existing one. */
ROV_COLD void conn_handle_hello(struct rov_chan *chan, const struct rov_wire_hdr *hdr,
                                  const uint8_t *payload)
{
    rov_context_t *ctx = chan->rail->ctx;
    int rail = chan->rail->index;
    struct rov_wire_hello h;
    struct rov_conn *conn;
    struct rov_chan *old;
    const char *why = "";

    if (rov_wire_hello_decode(payload, hdr->len, &h, &why) != ROV_OK)
        return conn_protocol_error(chan, why);
    if (h.rail != rail)
        return conn_protocol_error(chan, "hello names another rail than the one it came on");
    if (h.peer_conn_id == 0) {
        uint8_t nonce_l[ROV_NONCE_LEN];

        if (!h.addr)
            return conn_protocol_error(chan, "first hello without an address");
        if (!hello_authentic(ctx->ep_key, chan->nonce, hdr, payload, &h))
            return conn_protocol_error(chan, "hello not authenticated: the peer does not hold this "
                                        "endpoint's address key");
        if (rov_auth_random(nonce_l, sizeof(nonce_l)) != ROV_OK) {
            rov_ctx_chan_close(chan);
            return;
        }
        conn = rov_conn_new(ctx);
        if (!conn) {
            rov_error("conn", "out of memory accepting a connection");
            rov_ctx_chan_close(chan);
            return;
        }
        if (conn_set_peer_addr(conn, h.addr, h.addr_len, &why) != ROV_OK ||
            memcmp(conn->peer.ep_id, h.ep_id, ROV_EP_ID_LEN) != 0) {
            conn_set_state(conn, ROV_CONN_DEAD, "hello refused");
            rov_conn_free(conn);
            return conn_protocol_error(chan, why[0] ? why : "hello address of another endpoint");
        }
        conn->peer_id = h.conn_id;
        if (h.data_len)
            memcpy(conn->data, h.data, h.data_len);
        conn->data_len = (uint8_t)h.data_len;
        learn_peer_max(conn, h.max_msg); /* nothing queued yet: cannot fail */
        derive_secret(ctx->ep_key, h.nonce, nonce_l, h.ep_id, h.conn_id, ctx->ep_id, conn->id,
                      conn->secret);
        conn->has_secret = true;
        memcpy(chan->nonce, h.nonce, ROV_NONCE_LEN);
        conn->tx_rail = rail;
        conn->tx_chan_serial = chan->serial;
        conn->chans[rail] = chan;
        chan->conn = conn;
        rov_ctx_chan_authed(chan);
        chan->handshaken = 1;
        conn_set_state(conn, ROV_CONN_ESTABLISHED, "accepted");
        send_hello(chan, ROV_FT_HELLO_ACK, 0, nonce_l);
        rov_ctx_event(ctx, ROV_EVENT_CONN_ACCEPTED, conn, ROV_OK, -1, rail, "accepted");
        if (conn->state == ROV_CONN_ESTABLISHED)
            conn_up(conn);
        return;
    }
    conn = find_conn(ctx, h.peer_conn_id);
    if (!conn)
        return hello_for_ended(chan, hdr, payload, &h);
    if (conn->peer_id != h.conn_id || memcmp(conn->peer.ep_id, h.ep_id, ROV_EP_ID_LEN) != 0)
        return conn_protocol_error(chan, "hello for a connection of another peer");
    if (!conn->has_secret || !hello_authentic(conn->secret, chan->nonce, hdr, payload, &h))
        return conn_protocol_error(chan, "hello not authenticated: the peer does not hold the "
                                    "connection's secret");
    if (conn->state == ROV_CONN_FAILED || conn->state == ROV_CONN_DEAD) {
        /* A connection that ended here: the peer, closing too, lost our
         * answer to its CLOSE and sends it again, or it did not learn of
         * the failure (not a protocol error). */
        rov_info("conn", "hello on %s for connection %llu, which has %s here: answered and "
                 "closed", chan->rail->spec->name, (unsigned long long)h.peer_conn_id,
                 conn->state == ROV_CONN_FAILED ? "failed" : "ended");
        return conn_abort_hello(chan, conn->state == ROV_CONN_FAILED ? conn->fail_status
                                                                 : ROV_ERR_CLOSED);
    }
    if (!rov_replay_fresh(&conn->hello_rx, h.ctr))
        return conn_protocol_error(chan, "hello replayed: its counter was used before");
    rov_replay_accept(&conn->hello_rx, h.ctr);
    memcpy(chan->nonce, h.nonce, ROV_NONCE_LEN);
    rov_ctx_chan_authed(chan);
    if (conn->state == ROV_CONN_CONNECTING) {
        rov_ctx_chan_close(chan);
        return;
    }
    /* A peer that reopened its rails sends where it listens now. */
    if (h.addr && rov_conn_set_peer_address(conn, h.addr, h.addr_len) != ROV_OK)
        return conn_protocol_error(chan, "reconnect hello with a malformed or foreign address");
    old = conn->chans[rail];
    chan->conn = conn;
    /* A quiesced connection connects nothing: its channel there is from
     * before the peer closed its rails, and may never learn it (a verbs QP
     * that sends nothing sees no error), so the peer's reconnect takes
     * over, whatever the endpoint ids. */
    if (old && old->outbound && rov_conn_ep_cmp(conn) < 0 && conn->state != ROV_CONN_QUIESCED) {
        /* Both sides connected this rail: the channel opened by the smaller
         * endpoint id wins, whatever the timing.  The peer closes this one
         * when it sees ours; if ours fails first, this one takes over. */
        rov_ctx_chan_park(chan, true);
        chan->hello_flags = hdr->tag;
        chan->hello_ack = hdr->ack;
        return;
    }
    conn_adopt(conn, chan, hdr->tag, hdr->ack);
}

ROV_COLD void conn_handle_hello_ack(struct rov_conn *conn, struct rov_chan *chan,
                                      const struct rov_wire_hdr *hdr,
                                      const uint8_t *payload)
{
    int rail = chan->rail->index;
    struct rov_wire_hello h;
    const char *why = "";
    bool first;

    if (!chan->outbound || chan->handshaken || !chan->challenged)
        return conn_protocol_error(chan, "unexpected hello ack");
    if (rov_wire_hello_decode(payload, hdr->len, &h, &why) != ROV_OK)
        return conn_protocol_error(chan, why);
    if (h.peer_conn_id != conn->id || memcmp(h.ep_id, conn->peer.ep_id, ROV_EP_ID_LEN) != 0 ||
        (conn->peer_id && h.conn_id != conn->peer_id))
        return conn_protocol_error(chan, "hello ack from the wrong connection");
    if (!conn->has_secret) {
        uint8_t secret[ROV_KEY_LEN];

        derive_secret(conn->peer.key, chan->nonce, h.nonce, conn->ctx->ep_id, conn->id,
                      h.ep_id, h.conn_id, secret);
        if (!hello_authentic(secret, chan->nonce, hdr, payload, &h))
            return conn_protocol_error(chan, "hello ack not authenticated: the listener does not "
                                        "hold its address key");
        memcpy(conn->secret, secret, ROV_KEY_LEN);
        conn->has_secret = true;
    } else if (!hello_authentic(conn->secret, chan->nonce, hdr, payload, &h)) {
        return conn_protocol_error(chan, "hello ack not authenticated: the peer does not hold the "
                                    "connection's secret");
    }
    rov_ctx_chan_authed(chan);
    first = !conn->peer_id;
    /* Known before anything can fail the connection: the peer's HELLO for
     * it is then answered (conn_handle_hello()). */
    conn->peer_id = h.conn_id;
    if (!learn_peer_max(conn, h.max_msg))
        return;
    chan->handshaken = 1;
    if (first) {
        /* First handshake (the connection may already be closing). */
        conn->tx_sync = false;
        conn->tx_chan_serial = chan->serial;
        if (conn->state == ROV_CONN_CONNECTING) {
            conn_set_state(conn, ROV_CONN_ESTABLISHED, "hello acknowledged");
            rov_ctx_event(conn->ctx, ROV_EVENT_CONN_ESTABLISHED, conn, ROV_OK, -1, rail,
                          "connected");
            if (conn->state == ROV_CONN_ESTABLISHED)
                conn_up(conn);
        }
    } else if (conn->tx_rail == rail && conn->tx_sync) {
        /* Its ack is the peer's last-received, fresh, on this channel: all we
         * need to start sending here, whether or not the peer follows. */
        conn_peer_synced(conn, chan, hdr->ack);
        if (conn->state == ROV_CONN_REOPENING)
            conn_running(conn, "reconnected after the reopen");
    }
    rov_conn_push(conn);
}

/* Our HELLO on a channel we connected, once it is both open and
 * challenged (in either order, early_frame() in context.c). */
static void chan_hello(struct rov_chan *chan)
{
    struct rov_conn *conn = chan->conn;

    send_hello(chan, ROV_FT_HELLO,
               conn->peer_id && conn->tx_rail == chan->rail->index
                   ? conn->switch_tag | conn_hold_flag(conn) : 0,
               NULL);
}

void rov_conn_chan_connected(struct rov_chan *chan)
{
    if (chan->conn && chan->challenged)
        chan_hello(chan);
}

/* The acceptor's CHALLENGE: the nonce our HELLO's MAC must cover. */
ROV_COLD void conn_handle_challenge(struct rov_chan *chan, const uint8_t *payload)
{
    if (!chan->outbound || chan->challenged)
        return conn_protocol_error(chan, "unexpected challenge");
    memcpy(chan->nonce, payload, ROV_NONCE_LEN);
    chan->challenged = 1;
    if (chan->state == ROV_CHAN_OPEN)
        chan_hello(chan);
}

/* An accepted channel: challenge the connector at once (wire.h).  Its HELLO
 * must prove the key (or the connection's secret) over this nonce, so a
 * HELLO recorded on another channel opens nothing. */
void rov_conn_chan_accepted(struct rov_chan *chan)
{
    if (rov_auth_random(chan->nonce, ROV_NONCE_LEN) != ROV_OK) {
        rov_log_ratelimited(ROV_LOG_WARN, "conn", "no random bytes for a handshake challenge");
        rov_ctx_chan_close(chan);
        return;
    }
    conn_send_ctrl(chan, ROV_FT_CHALLENGE, 0, chan->nonce, ROV_NONCE_LEN);
}
