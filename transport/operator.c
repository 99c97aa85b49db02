/*
 * Operator control: holds (force / release, railover.h) and the status
 * view, from the API and from the control socket.  A hold is wire state,
 * announced to the peer in switch requests; where a held connection goes,
 * and the health each policy sees, are the policies' (policy.h: hold,
 * status_ctx, status_rail).
 */
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "transport/control.h"
#include "transport/core.h"
#include "transport/log.h"

#define MS UINT64_C(1000000)

rov_status_t rov_conn_force_fallback(rov_conn_t *conn, int on)
{
    ROV_CTX_GUARD(conn->ctx);
    rov_status_t st;

    if (conn->hold == (on != 0))
        return ROV_OK;
    conn->hold = on != 0;
    if (conn->state != ROV_CONN_ESTABLISHED || !conn->peer_id)
        return ROV_ERR_BUSY; /* applied when it is (conn.c: conn_up()) */
    st = rov_policies_hold(conn, conn->hold);
    if (st == ROV_ERR_UNREACHABLE)
        conn->hold = false;
    return st;
}

int rov_context_force_fallback(rov_context_t *ctx, const char *peer, int on)
{
    ROV_CTX_GUARD(ctx);
    uint8_t id[ROV_EP_ID_LEN];
    int n = 0;

    if (peer && rov_wire_ep_id_parse(peer, id) != ROV_OK)
        return ROV_ERR_INVAL;
    if (!peer)
        ctx->hold_all = on != 0;
    for (struct rov_conn *c = ctx->conns; c; c = c->next) {
        if (c->state == ROV_CONN_DEAD || c->state == ROV_CONN_FAILED)
            continue;
        if (peer && (!c->peer_id || memcmp(c->peer.ep_id, id, ROV_EP_ID_LEN) != 0))
            continue;
        rov_conn_force_fallback(c, on);
        n++;
    }
    return n;
}

/* Control commands: status, force, release ------------------------------------------------ */

static void print_time(FILE *out, uint64_t realtime_ns)
{
    time_t secs = (time_t)(realtime_ns / 1000000000ull);
    struct tm tm;
    char buf[32];

    if (!realtime_ns) {
        fputc('-', out);
        return;
    }
    gmtime_r(&secs, &tm);
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(out, "%s.%03uZ", buf, (unsigned)(realtime_ns / 1000000ull % 1000));
}

static void print_conn(FILE *out, struct rov_conn *conn, uint64_t now)
{
    rov_context_t *ctx = conn->ctx;
    rov_conn_stats_t st;
    char peer[ROV_EP_ID_HEX_LEN + 1] = "-";
    bool first = true;

    rov_conn_stats(conn, &st);
    if (conn->peer_id || conn->peer_blob_len)
        rov_wire_ep_id_hex(conn->peer.ep_id, peer);
    fprintf(out, "conn id=%llu peer=%s:%llu state=%s rail=%s(%d) forced=%s peer_forced=%s "
            "switches=%" PRIu64 " last_reason=%s last_switch=",
            (unsigned long long)conn->id, peer, (unsigned long long)conn->peer_id,
            rov_conn_state_name(conn->state), rov_context_rail_name(ctx, conn->tx_rail), conn->tx_rail,
            conn->hold ? "yes" : "no", conn->peer_hold ? "yes" : "no", st.switches,
            rov_reason_str(st.last_reason));
    print_time(out, st.last_switch_ns);
    fprintf(out, " retained_msgs=%" PRIu64 " retained_bytes=%" PRIu64 " tx_seq=%" PRIu64
            " rx_seq=%" PRIu64 " resent=%" PRIu64 " resends_asked=%" PRIu64 " bond_joins=%" PRIu64
            " bond_leaves=%" PRIu64 " reasons=",
            st.retained_msgs, st.retained_bytes, st.tx_seq, st.rx_seq, st.msgs_resent,
            st.resends_asked, st.bond_joins, st.bond_leaves);
    for (int i = 1; i < ROV_REASON_COUNT; i++) {
        if (!st.reasons[i])
            continue;
        fprintf(out, "%s%s:%" PRIu64, first ? "" : ",", rov_reason_str((rov_reason_t)i),
                st.reasons[i]);
        first = false;
    }
    if (first)
        fputc('-', out);
    fputc('\n', out);
    for (int i = 0; i < ctx->nrails; i++) {
        struct rov_chan *chan = conn->chans[i];
        char where[160] = "";

        if (!chan) {
            rov_policies_status_rail(conn, i, false, now, out);
            continue;
        }
        if (chan->state == ROV_CHAN_OPEN)
            chan->rail->ops.chan_str(chan, where, sizeof(where));
        fprintf(out, "  chan rail=%s(%d) state=%s tx=%s", rov_context_rail_name(ctx, i), i,
                chan->state == ROV_CHAN_CONNECTING ? "connecting"
                : chan->handshaken                 ? "open" : "handshake",
                i == conn->tx_rail ? "yes" : "no");
        if (ctx->config.bond) /* member now, bytes it took, its measured rate */
            fprintf(out, " bond=%s bond_sent=%llu bond_rate=%llu",
                    conn->bond_mask & (1u << i) ? "yes" : "no",
                    (unsigned long long)chan->bond.sent, (unsigned long long)chan->bond.rate);
        if (chan->silent)
            fputs(" health=silenced", out);
        else
            rov_policies_status_rail(conn, i, true, now, out);
        fprintf(out, " %s\n", where);
    }
}

static int cmd_status(rov_context_t *ctx, int argc, char **argv, FILE *out, char *err,
                      size_t err_len)
{
    uint64_t now = rov_now_ns();
    int n = 0;

    (void)argv;
    if (argc > 1) {
        snprintf(err, err_len, "status takes no arguments");
        return 1;
    }
    for (struct rov_conn *conn = ctx->conns; conn; conn = conn->next)
        n++;
    fprintf(out, "rails=%d", ctx->nrails);
    rov_policies_status_ctx(ctx, out);
    fprintf(out, " forced_all=%s conns=%d\n", ctx->hold_all ? "yes" : "no", n);
    for (int i = 0; i < ctx->nrails; i++)
        fprintf(out, "rail index=%d name=%s link=%s link_downs=%u link_ups=%u\n", i,
                rov_context_rail_name(ctx, i),
                ctx->link[i].seen < 0 ? "down" : ctx->link[i].seen > 0 ? "up" : "-",
                ctx->link[i].downs, ctx->link[i].ups);
    for (struct rov_conn *conn = ctx->conns; conn; conn = conn->next)
        print_conn(out, conn, now);
    return 0;
}

/* force|release all | conn ID | peer EPID */
static int cmd_force(rov_context_t *ctx, int argc, char **argv, FILE *out, char *err,
                     size_t err_len)
{
    bool on = strcmp(argv[0], "force") == 0;
    int n = 0;

    if (argc == 2 && strcmp(argv[1], "all") == 0) {
        n = rov_context_force_fallback(ctx, NULL, on);
    } else if (argc == 3 && strcmp(argv[1], "peer") == 0) {
        n = rov_context_force_fallback(ctx, argv[2], on);
        if (n < 0) {
            snprintf(err, err_len, "'%s' is not an endpoint id (32 hex digits)", argv[2]);
            return 1;
        }
    } else if (argc == 3 && strcmp(argv[1], "conn") == 0) {
        char why[128];
        uint64_t id;
        struct rov_conn *conn = NULL;

        /* Digits only: strtoull() alone read "-1" as 2^64-1. */
        if (rov_parse_u64(argv[2], 1, UINT64_MAX, &id, why, sizeof(why)) != ROV_OK) {
            snprintf(err, err_len, "not a connection id: %s", why);
            return 1;
        }
        for (conn = ctx->conns; conn && conn->id != id; conn = conn->next)
            ;
        if (!conn || conn->state == ROV_CONN_DEAD) {
            snprintf(err, err_len, "no connection %llu", (unsigned long long)id);
            return 1;
        }
        if (rov_conn_force_fallback(conn, on) == ROV_ERR_UNREACHABLE) {
            snprintf(err, err_len, "connection %llu has no other rail to go to", (unsigned long long)id);
            return 1;
        }
        n = 1;
    } else {
        snprintf(err, err_len, "usage: %s all | conn ID | peer EPID", argv[0]);
        return 1;
    }
    fprintf(out, "%s %d connection%s\n", on ? "forced" : "released", n, n == 1 ? "" : "s");
    return 0;
}

static const struct rov_ctl_cmd status_cmd = {
    "status", "status", "connections: rail, state, switches and reasons, retained data",
    cmd_status,
};
static const struct rov_ctl_cmd force_cmd = {
    "force", "force all|conn ID|peer EPID",
    "move connections to a fallback rail and keep them there (fabric maintenance)", cmd_force,
};
static const struct rov_ctl_cmd release_cmd = {
    "release", "release all|conn ID|peer EPID", "let forced connections move back", cmd_force,
};

ROV_CTL_REGISTER(status_cmd)
ROV_CTL_REGISTER(force_cmd)
ROV_CTL_REGISTER(release_cmd)
