/*
 * A connection's first connect: the most preferred rail the peer has, then
 * the next; rails that only timed out are tried again for a while, and a
 * peer that dropped the connect (reset, closed: busy, not gone) after a
 * backoff; then the connection fails, naming each rail's answer.  Also the
 * peer's address (rov_conn_set_peer_address()), and the timed retries of
 * both first connects and reconnects after a reopen
 * (rov_conn_connect_again()).
 */
#include <stdlib.h>
#include <string.h>

#include "transport/auth.h"
#include "transport/backoff.h"
#include "transport/conn_int.h"
#include "transport/log.h"

/* A first connect retries rails that timed out for this long (or four times
 * RAILOVER_CONNECT_TIMEOUT), first_connect_failed(). */
#define FIRST_CONNECT_FOR_NS (10ull * 1000000000ull)
/* A first connect the peer reset is tried again after this, doubling. */
#define CONNECT_AGAIN_MIN_NS (50ull * 1000000ull)
#define CONNECT_AGAIN_MAX_NS (1000ull * 1000000ull)

rov_status_t conn_set_peer_addr(struct rov_conn *conn, const void *blob, size_t len,
                                  const char **why_p)
{
    if (len > sizeof(conn->peer_blob)) {
        *why_p = "address blob too long";
        return ROV_ERR_INVAL;
    }
    memcpy(conn->peer_blob, blob, len);
    conn->peer_blob_len = len;
    return rov_wire_addr_decode(conn->peer_blob, len, &conn->peer, why_p);
}

rov_status_t rov_conn_open_rail(struct rov_conn *conn, int rail)
{
    int pr = conn_peer_rail(conn, rail);
    struct rov_chan *chan;
    rov_status_t st;

    if (pr < 0)
        return ROV_ERR_UNREACHABLE;
    chan = rov_ctx_chan_connect(conn->ctx->rails[rail], conn->peer.rails[pr].addr,
                                conn->peer.rails[pr].addr_len, &st);
    if (!chan)
        return st;
    if (conn->chans[rail])
        rov_ctx_chan_close(conn->chans[rail]);
    chan->conn = conn;
    conn->chans[rail] = chan;
    return ROV_OK;
}

/* The first connect on the first rail from `from` that opens; with
 * `timed_out`, only on rails whose last attempt timed out. */
static rov_status_t open_first_rail(struct rov_conn *conn, int from, bool timed_out)
{
    rov_status_t st = ROV_ERR_UNREACHABLE;

    for (int i = from; i < conn->ctx->nrails; i++) {
        if (!rov_conn_peer_has_rail(conn, i) ||
            (timed_out && conn->tried[i] != ROV_ERR_TIMEDOUT))
            continue;
        st = rov_conn_open_rail(conn, i);
        if (st == ROV_OK) {
            conn->tx_rail = i;
            conn->tx_sync = true;
            return ROV_OK;
        }
        conn->tried[i] = st;
    }
    return st;
}

/* How long a connection's first connect goes on retrying rails that timed
 * out: a storm of connects, or a lost SYN that TCP sends again after 1 s,
 * makes a connect slow, not impossible. */
static uint64_t first_connect_for_ns(const struct rov_conn *conn)
{
    uint64_t t = 4 * conn->ctx->config.connect_timeout_ns;

    return t > FIRST_CONNECT_FOR_NS ? t : FIRST_CONNECT_FOR_NS;
}

/* A rail that answered and then dropped the connection before its
 * handshake (reset, closed): the peer host is there, its process is not
 * taking connections just now (out of descriptors, its accept queue full in
 * a wire-up storm).  Tried again after a pause, not failed at once. */
static bool first_connect_transient(rov_status_t status)
{
    return status == ROV_ERR_RESET || status == ROV_ERR_CLOSED;
}

/* Every rail of a first connect failed: within first_connect_for_ns() of
 * rov_conn_connect(), again at once from the first rail that only timed
 * out (the timeout was the pause), or after a pause (CONNECT_AGAIN_MIN_NS,
 * doubling to CONNECT_AGAIN_MAX_NS) from the first rail if one was reset;
 * then the connection fails, naming each rail and its answer. */
static ROV_COLD void first_connect_retry_or_fail(struct rov_conn *conn)
{
    rov_context_t *ctx = conn->ctx;
    uint64_t now = rov_now_ns(), pause;
    bool within = now - conn->connect_ns < first_connect_for_ns(conn), transient = false;

    if (within && open_first_rail(conn, 0, true) == ROV_OK) {
        rov_debug("conn", "conn %llu: connecting again from %s (slow, not refused)",
                  (unsigned long long)conn->id, rov_context_rail_name(ctx, conn->tx_rail));
        return;
    }
    for (int i = 0; i < ctx->nrails; i++)
        transient |= first_connect_transient(conn->tried[i]);
    if (within && transient) {
        pause = rov_backoff_next(&conn->backoff_ns, CONNECT_AGAIN_MIN_NS, CONNECT_AGAIN_MAX_NS);
        conn_connect_again_at(conn, now + pause);
        rov_debug("conn", "conn %llu: the peer dropped the connect; again in %.0f ms",
                  (unsigned long long)conn->id, (double)pause / 1e6);
        return;
    }
    conn_fail_unreachable(conn, conn->tried, "no rail reaches the peer", NULL);
}

/* The first connect failed on `rail` with `status`: the next rail; after
 * the last, first_connect_retry_or_fail(). */
ROV_COLD void conn_first_connect_failed(struct rov_conn *conn, int rail, rov_status_t status)
{
    conn->tried[rail] = status;
    if (open_first_rail(conn, rail + 1, false) == ROV_OK)
        return;
    first_connect_retry_or_fail(conn);
}

/* conn connects again at `when` (rov_conn_connect_again(), from the
 * context's loop). */
void conn_connect_again_at(struct rov_conn *conn, uint64_t when)
{
    rov_context_t *ctx = conn->ctx;

    conn->connect_again_ns = when;
    if (!ctx->connect_again_ns || when < ctx->connect_again_ns)
        ctx->connect_again_ns = when;
}

void rov_conn_connect_again(rov_context_t *ctx, uint64_t now)
{
    ctx->connect_again_ns = 0;
    for (struct rov_conn *c = ctx->conns; c; c = c->next) {
        /* CLOSING too: closed before its first connect went through, it
         * still delivers what was sent on it (rov_conn_close()). */
        if ((c->state != ROV_CONN_CONNECTING && !CLOSING(c) &&
             c->state != ROV_CONN_REOPENING) || !c->connect_again_ns)
            continue;
        if (c->connect_again_ns > now) {
            if (!ctx->connect_again_ns || c->connect_again_ns < ctx->connect_again_ns)
                ctx->connect_again_ns = c->connect_again_ns;
            continue;
        }
        c->connect_again_ns = 0;
        if (c->state == ROV_CONN_REOPENING) {
            /* Reconnects after a reopen wait here between tries too. */
            if (!conn_reopen_from(c, 0))
                conn_reopen_failed(c, ctx->nrails, ROV_ERR_UNREACHABLE);
            continue;
        }
        if (open_first_rail(c, 0, false) != ROV_OK)
            first_connect_retry_or_fail(c);
    }
}

rov_status_t rov_conn_connect(rov_endpoint_t *ep, const void *addr, size_t addr_len,
                              rov_conn_t **conn_p)
{
    return rov_conn_connect_ex(ep, addr, addr_len, NULL, conn_p);
}

rov_status_t rov_conn_connect_ex(rov_endpoint_t *ep, const void *addr, size_t addr_len,
                                 const rov_connect_params_t *params, rov_conn_t **conn_p)
{
    ROV_CTX_GUARD((rov_context_t *)ep->ctx);
    rov_context_t *ctx = ep->ctx;
    struct rov_conn *conn;
    const char *why = "";
    rov_status_t st;

    if (!addr)
        return ROV_ERR_INVAL;
    if (ctx->stage == ROV_CONTEXT_CLOSED) {
        rov_error("conn", "cannot connect: the context's rails are closed (rov_context_reopen() first)");
        return ROV_ERR_BUSY;
    }
    if (params && (params->data_len > ROV_CONN_DATA_MAX || (params->data_len && !params->data))) {
        rov_error("conn", "cannot connect: connect-time data of %zu bytes (at most %d)",
                  params->data_len, ROV_CONN_DATA_MAX);
        return ROV_ERR_INVAL;
    }
    conn = rov_conn_new(ctx);
    if (!conn)
        return ROV_ERR_NOMEM;
    if (params) {
        if (params->data_len)
            memcpy(conn->data, params->data, params->data_len);
        conn->data_len = (uint8_t)params->data_len;
        conn->user = params->user;
    }
    st = conn_set_peer_addr(conn, addr, addr_len, &why);
    if (st == ROV_OK && rov_auth_key_is_zero(conn->peer.key)) {
        why = "the address blob has no key (a copy taken from a handshake? use the blob "
              "rov_endpoint_address() gave)";
        st = ROV_ERR_INVAL;
    }
    if (st != ROV_OK) {
        rov_error("conn", "cannot connect: %s", why);
        goto err;
    }
    conn->connect_ns = rov_now_ns();
    st = open_first_rail(conn, 0, false);
    if (st == ROV_ERR_RESOURCE) {
        /* Our own limit, not the peer's reachability: the rail said which. */
        rov_log_ratelimited(ROV_LOG_ERROR, "conn", "cannot connect: out of local resources (%s)",
                            rov_status_str(st));
        goto err;
    }
    if (st != ROV_OK) {
        rov_error("conn", "cannot connect: no rail of this context reaches the peer (%s)",
                  rov_status_str(st));
        st = ROV_ERR_UNREACHABLE;
        goto err;
    }
    rov_policies_conn_connecting(conn);
    *conn_p = conn;
    return ROV_OK;
err:
    conn_set_state(conn, ROV_CONN_DEAD, "connect failed");
    rov_conn_free(conn);
    return st;
}

/* Reconnects after a reopen: the first retry's pause, the longest. */

rov_status_t rov_conn_set_peer_address(rov_conn_t *conn, const void *addr, size_t addr_len)
{
    ROV_CTX_GUARD(conn->ctx);
    struct rov_wire_addr wa;
    uint8_t blob[sizeof(conn->peer_blob)];
    const char *why = "";

    if (!addr || addr_len > sizeof(blob))
        return ROV_ERR_INVAL;
    memcpy(blob, addr, addr_len);
    if (rov_wire_addr_decode(blob, addr_len, &wa, &why) != ROV_OK) {
        rov_error("conn", "conn %llu: new peer address refused: %s", (unsigned long long)conn->id, why);
        return ROV_ERR_INVAL;
    }
    if (memcmp(wa.ep_id, conn->peer.ep_id, ROV_EP_ID_LEN) != 0) {
        rov_error("conn", "conn %llu: new peer address refused: it is another endpoint's",
                  (unsigned long long)conn->id);
        return ROV_ERR_INVAL;
    }
    conn_set_peer_addr(conn, addr, addr_len, &why);
    rov_info("conn", "conn %llu: the peer's address changed", (unsigned long long)conn->id);
    if (conn->state == ROV_CONN_REOPENING) {
        rov_context_t *ctx = conn->ctx;
        bool dropped = false;

        /* A connect to the old address still waiting for its handshake
         * (something else may listen there now, or nothing answers) is
         * given up; the reconnect goes to the new address at once. */
        for (int i = 0; i < ctx->nrails; i++) {
            struct rov_chan *ch = conn->chans[i];

            if (ch && ch->outbound && !ch->handshaken) {
                rov_ctx_chan_close(ch);
                dropped = true;
            }
        }
        if (dropped || conn->connect_again_ns) {
            if (!conn->backoff_ns)
                conn->backoff_ns = REOPEN_RETRY_MIN_NS; /* a retry: conn_reopen_from() */
            conn_connect_again_at(conn, rov_now_ns());
        }
    }
    return ROV_OK;
}
