/*
 * A connection through the checkpoint stages (transport/stage.c drives the
 * context's): draining until both end markers are exchanged and nothing is
 * in flight, quiesced with its sends held, resumed, or reopened and
 * reconnected on new rails (with a backoff while the peer has not reopened
 * yet), its held sends then released in order.
 */
#include <string.h>

#include "transport/backoff.h"
#include "transport/conn_int.h"
#include "transport/log.h"

/* Quiesce ---------------------------------------------------------------------- */

/* DRAINING: both end markers exchanged and everything we sent acknowledged
 * (the peer's marker named its last message, which we delivered): the
 * connection is quiesced.  Our ack of the peer's last went out with our
 * marker's answer (conn_handle_quiesce()). */
void conn_drained_check(struct rov_conn *conn)
{
    if (conn->state != ROV_CONN_DRAINING || !conn->eoc_sent || !conn->peer_eoc ||
        conn->tx.count || conn->rx_seq < conn->peer_eoc_seq)
        return;
    /* Nothing goes out on its own from now on, and the rails may close at
     * once: an ack still owed (the peer's drain waits for it) goes now. */
    if (conn->in_ack_list)
        rov_conn_send_ack(conn);
    conn_set_state(conn, ROV_CONN_QUIESCED, "end markers exchanged, nothing in flight");
}

void rov_conn_quiesce(struct rov_conn *conn)
{
    if (conn->state != ROV_CONN_ESTABLISHED || !conn->peer_id)
        return; /* connecting: when it is up (conn_up()); closing: it ends */
    conn->eoc_sent = false;
    conn_set_state(conn, ROV_CONN_DRAINING, "quiesce");
    rov_conn_push(conn); /* the rest, then the end marker */
}

/* The held sends go, and the peer hears that we send again. */
void conn_running(struct rov_conn *conn, const char *why)
{
    struct rov_chan *chan = conn->tx_rail >= 0 ? conn->chans[conn->tx_rail] : NULL;
    bool tell = conn->state != ROV_CONN_REOPENING && rov_conn_chan_ready(chan);

    conn->peer_eoc = false;
    conn->eoc_sent = false;
    conn->reopen_ns = 0;
    if (!conn_set_state(conn, ROV_CONN_ESTABLISHED, why))
        return;
    if (tell)
        conn_send_ctrl(chan, ROV_FT_QUIESCE, ROV_QUIESCE_RESUME, NULL, 0);
    rov_policies_conn_up(conn); /* watched again, the peer's paths anew */
    conn_release_held(conn);
    if (conn->close_pending) {
        conn->close_pending = false;
        rov_conn_close(conn); /* asked during the stage */
        return;
    }
    rov_conn_push(conn);
}

void rov_conn_resume(struct rov_conn *conn)
{
    if (conn->state != ROV_CONN_DRAINING && conn->state != ROV_CONN_QUIESCED)
        return;
    /* A quiesced connection whose channel ended (the peer closed its rails)
     * waits for the peer to reconnect after its reopen (conn_handle_hello()). */
    if (conn->state == ROV_CONN_QUIESCED &&
        !rov_conn_chan_ready(conn->tx_rail >= 0 ? conn->chans[conn->tx_rail] : NULL))
        return;
    conn_running(conn, "resumed");
}

/* REOPENING: connect the most preferred rail, from `from` on, that the peer
 * has and that can start a connect; false when none can. */
bool conn_reopen_from(struct rov_conn *conn, int from)
{
    for (int i = from; i < conn->ctx->nrails; i++) {
        rov_status_t st;

        if (!rov_conn_peer_has_rail(conn, i))
            continue;
        /* A retry on the rail the reopen moved to already: a new channel
         * (its HELLO carries that move), not another switch. */
        if (i == conn->tx_rail && conn->tx_sync && conn->backoff_ns &&
            !conn->chans[i])
            st = rov_conn_open_rail(conn, i);
        else
            st = rov_conn_move(conn, i, ROV_REASON_REOPEN, "reconnect after reopen", -1);
        if (st == ROV_OK || st == ROV_INPROGRESS)
            return true;
        conn->tried[i] = st;
        rov_debug("conn", "conn %llu: reopen on %s: %s", (unsigned long long)conn->id,
                  rov_context_rail_name(conn->ctx, i), rov_status_str(st));
    }
    return false;
}


/* A reconnect after the reopen failed (the peer has not reopened yet, or
 * its preferred rail is gone): the next rail now, or all of them again
 * after a backoff, until RAILOVER_UNREACHABLE_TIMEOUT (or
 * RAILOVER_CONNECT_TIMEOUT when that is off: a reopen is never waited for
 * for ever) has passed since the reopen: the connection then fails as
 * unreachable (rov_conn_fail_unreachable(), the one bound), naming each
 * rail's last answer. */
void conn_reopen_failed(struct rov_conn *conn, int rail, rov_status_t status)
{
    rov_context_t *ctx = conn->ctx;
    uint64_t now = rov_now_ns(), limit = ctx->config.unreachable_timeout_ns;

    if (rail < ctx->nrails)
        conn->tried[rail] = status;
    /* Refused: nothing listens there yet (the peer has not reopened), and
     * its other rails would say the same: all of them again after the
     * backoff.  Otherwise (no route, a timeout) the next rail now. */
    if (status != ROV_ERR_REFUSED && rail + 1 < ctx->nrails && conn_reopen_from(conn, rail + 1))
        return;
    if (rov_conn_fail_unreachable(conn, conn->reopen_ns, now,
                                  limit ? limit : ctx->config.connect_timeout_ns, conn->tried,
                                  "no rail has reached the peer since the reopen",
                                  limit ? "RAILOVER_UNREACHABLE_TIMEOUT"
                                        : "RAILOVER_CONNECT_TIMEOUT"))
        return;
    conn_connect_again_at(conn, now + rov_backoff_next(&conn->backoff_ns, REOPEN_RETRY_MIN_NS,
                                                       REOPEN_RETRY_MAX_NS));
}

void rov_conn_reopen(struct rov_conn *conn)
{
    if (conn->state != ROV_CONN_QUIESCED)
        return;
    conn->reopen_ns = rov_now_ns();
    conn->backoff_ns = 0;
    memset(conn->tried, 0, sizeof(conn->tried));
    if (!conn_set_state(conn, ROV_CONN_REOPENING, "rails reopened"))
        return;
    if (!conn_reopen_from(conn, 0))
        conn_reopen_failed(conn, conn->ctx->nrails, ROV_ERR_UNREACHABLE);
}

/* The peer's end marker (it holds its sends from now), or its word that it
 * sends again. */
ROV_COLD void conn_handle_quiesce(struct rov_conn *conn, struct rov_chan *chan,
                                   const struct rov_wire_hdr *hdr, const uint8_t *payload)
{
    if (hdr->tag & ROV_QUIESCE_RESUME) {
        conn->peer_eoc = false;
        if (conn->state == ROV_CONN_DRAINING || conn->state == ROV_CONN_QUIESCED) {
            /* Resumed there: here too, unless this side quiesces itself. */
            if (conn->ctx->stage == ROV_CONTEXT_RUNNING)
                conn_running(conn, "peer resumed");
        }
        rov_conn_push(conn);
        return;
    }
    conn->peer_eoc = true; /* (its size checked by rov_wire_decode()) */
    conn->peer_eoc_seq = rov_get64(payload);
    /* The peer quiesces: this connection does too (its sends held), so
     * that its channels may end without a failover. */
    if (conn->state == ROV_CONN_ESTABLISHED)
        rov_conn_quiesce(conn);
    if (conn->state == ROV_CONN_DRAINING && conn->rx_seq >= conn->peer_eoc_seq)
        rov_conn_send_ack(conn); /* its last messages are here: the peer may finish */
    rov_conn_push(conn);
}
