/* The policy registry, the hooks' dispatch, and the accessors a policy
 * reads connections through (policy.h). */
#include "transport/policy.h"

#include <stdlib.h>
#include <string.h>

#include "transport/core.h"
#include "transport/log.h"

#define MAX_POLICIES 4
#define ALIGN(n) (((n) + 15) & ~(size_t)15)

static struct {
    const struct rov_policy_ops *key; /* as registered: rov_policy_conn()'s key */
    struct rov_policy_ops ops;        /* with stubs */
    size_t ctx_off, conn_off;         /* of its state, after the object */
} registry[MAX_POLICIES];
static int npolicies;
static size_t ctx_area, conn_area;

static void stub_ctx(rov_context_t *ctx)
{
}

static void stub_address(rov_context_t *ctx, const void *blob, size_t len)
{
}

static void stub_conn(rov_conn_t *conn)
{
}

static bool stub_chan_failed(rov_conn_t *conn, int rail, rov_status_t status,
                             rov_reason_t reason, const char *why)
{
    return false;
}

static void stub_peer_failed(rov_conn_t *conn, int rail, rov_reason_t reason)
{
}

static void stub_rail_up(rov_context_t *ctx, int rail)
{
}

static rov_status_t stub_hold(rov_conn_t *conn, bool on)
{
    rov_conn_announce(conn);
    return ROV_OK;
}

static void stub_tick(rov_context_t *ctx, uint64_t now)
{
}

static uint64_t stub_due_ns(const rov_context_t *ctx)
{
    return 0;
}

static void stub_status_ctx(rov_context_t *ctx, FILE *out)
{
}

static void stub_status_rail(rov_conn_t *conn, int rail, bool chan, uint64_t now, FILE *out)
{
}

void rov_policy_register(const struct rov_policy_ops *ops)
{
    struct rov_policy_ops *p;

    if (!ops->name || npolicies == MAX_POLICIES) {
        fprintf(stderr, "railover: cannot register policy '%s' (no name, or table full)\n",
                ops->name ? ops->name : "?");
        abort();
    }
    registry[npolicies].key = ops;
    registry[npolicies].ctx_off = ctx_area;
    registry[npolicies].conn_off = conn_area;
    ctx_area += ALIGN(ops->ctx_size);
    conn_area += ALIGN(ops->conn_size);
    p = &registry[npolicies++].ops;
    *p = *ops;
    if (p->settings)
        rov_settings_register(p->settings);
    if (!p->ctx_init)
        p->ctx_init = stub_ctx;
    if (!p->ctx_open)
        p->ctx_open = stub_ctx;
    if (!p->ctx_fini)
        p->ctx_fini = stub_ctx;
    if (!p->endpoint_address)
        p->endpoint_address = stub_address;
    if (!p->conn_connecting)
        p->conn_connecting = stub_conn;
    if (!p->conn_up)
        p->conn_up = stub_conn;
    if (!p->chan_failed)
        p->chan_failed = stub_chan_failed;
    if (!p->peer_failed)
        p->peer_failed = stub_peer_failed;
    if (!p->rail_up)
        p->rail_up = stub_rail_up;
    if (!p->hold)
        p->hold = stub_hold;
    if (!p->tick)
        p->tick = stub_tick;
    if (!p->due_ns)
        p->due_ns = stub_due_ns;
    if (!p->status_ctx)
        p->status_ctx = stub_status_ctx;
    if (!p->status_rail)
        p->status_rail = stub_status_rail;
}

static int index_of(const struct rov_policy_ops *ops)
{
    for (int i = 0; i < npolicies; i++)
        if (registry[i].key == ops)
            return i;
    abort(); /* a policy that did not register: a bug */
}

void *rov_policy_ctx(const rov_context_t *ctx, const struct rov_policy_ops *ops)
{
    return (char *)ctx + ALIGN(sizeof(*ctx)) + registry[index_of(ops)].ctx_off;
}

void *rov_policy_conn(const rov_conn_t *conn, const struct rov_policy_ops *ops)
{
    return (char *)conn + ALIGN(sizeof(*conn)) + registry[index_of(ops)].conn_off;
}

const void *rov_policy_settings(const rov_context_t *ctx, const struct rov_policy_ops *ops)
{
    return rov_settings_of(&ctx->config, ops->settings);
}

size_t rov_policy_ctx_size(void)
{
    return ALIGN(sizeof(struct rov_context)) + ctx_area;
}

size_t rov_policy_conn_size(void)
{
    return ALIGN(sizeof(struct rov_conn)) + conn_area;
}

/* Dispatch --------------------------------------------------------------------- */

#define EACH(hook, ...)                          \
    for (int i_ = 0; i_ < npolicies; i_++)       \
        registry[i_].ops.hook(__VA_ARGS__)

void rov_policies_ctx_init(rov_context_t *ctx)
{
    ctx->policy_env = (struct rov_policy_env){
        .failover = ctx->config.failover,
        .failover_timeout_ns = ctx->config.failover_timeout_ns,
        .connect_timeout_ns = ctx->config.connect_timeout_ns,
        .keepalive_ns = ctx->config.keepalive_ns,
        .unreachable_timeout_ns = ctx->config.unreachable_timeout_ns,
        .run_dir = ctx->config.run_dir,
        .bond = ctx->config.bond,
    };
    EACH(ctx_init, ctx);
}

void rov_policies_ctx_open(rov_context_t *ctx)
{
    EACH(ctx_open, ctx);
}

void rov_policies_ctx_fini(rov_context_t *ctx)
{
    EACH(ctx_fini, ctx);
}

void rov_policies_endpoint_address(rov_context_t *ctx, const void *blob, size_t len)
{
    EACH(endpoint_address, ctx, blob, len);
}

void rov_policies_conn_connecting(struct rov_conn *conn)
{
    EACH(conn_connecting, conn);
}

void rov_policies_conn_up(struct rov_conn *conn)
{
    EACH(conn_up, conn);
}

bool rov_policies_chan_failed(struct rov_conn *conn, int rail, rov_status_t status,
                              rov_reason_t reason, const char *why)
{
    bool moved = false;

    for (int i = 0; i < npolicies; i++)
        moved |= registry[i].ops.chan_failed(conn, rail, status, reason, why);
    return moved;
}

void rov_policies_peer_failed(struct rov_conn *conn, int rail, rov_reason_t reason)
{
    EACH(peer_failed, conn, rail, reason);
}

void rov_policies_rail_up(rov_context_t *ctx, int rail)
{
    EACH(rail_up, ctx, rail);
}

rov_status_t rov_policies_hold(struct rov_conn *conn, bool on)
{
    rov_status_t st = ROV_OK;

    for (int i = 0; i < npolicies && st == ROV_OK; i++)
        st = registry[i].ops.hold(conn, on);
    return st;
}

void rov_policies_tick(rov_context_t *ctx, uint64_t now)
{
    EACH(tick, ctx, now);
}

uint64_t rov_policies_due_ns(const rov_context_t *ctx)
{
    uint64_t due = 0;

    for (int i = 0; i < npolicies; i++) {
        uint64_t d = registry[i].ops.due_ns(ctx);

        if (d && (!due || d < due))
            due = d;
    }
    return due;
}

void rov_policies_status_ctx(rov_context_t *ctx, FILE *out)
{
    EACH(status_ctx, ctx, out);
}

void rov_policies_status_rail(struct rov_conn *conn, int rail, bool chan, uint64_t now,
                              FILE *out)
{
    EACH(status_rail, conn, rail, chan, now, out);
}

/* Reason codes -------------------------------------------------------------------- */

rov_reason_t rov_reason_classify(rov_status_t status, rov_reason_t reason)
{
    if (reason != ROV_REASON_NONE)
        return reason;
    switch (status) {
    case ROV_ERR_RESET: return ROV_REASON_FAIL_RESET;
    case ROV_ERR_CLOSED: return ROV_REASON_FAIL_CLOSED;
    case ROV_ERR_UNREACHABLE:
    case ROV_ERR_REFUSED: return ROV_REASON_FAIL_UNREACH;
    case ROV_ERR_TIMEDOUT: return ROV_REASON_FAIL_STALL;
    default: return ROV_REASON_FAIL_ERROR;
    }
}

rov_reason_t rov_reason_of_peer(rov_reason_t reason)
{
    switch (reason) {
    case ROV_REASON_FAIL_ERROR:
    case ROV_REASON_FAIL_RESET:
    case ROV_REASON_FAIL_CLOSED:
    case ROV_REASON_FAIL_UNREACH:
    case ROV_REASON_FAIL_STALL:
    case ROV_REASON_FAIL_KEEPALIVE:
    case ROV_REASON_FAIL_INJECTED:
    case ROV_REASON_FAIL_LINK: return ROV_REASON_PEER_FAILOVER;
    case ROV_REASON_FAILBACK: return ROV_REASON_PEER_FAILBACK;
    case ROV_REASON_API: return ROV_REASON_PEER_API;
    case ROV_REASON_REOPEN: return ROV_REASON_PEER_REOPEN;
    default: return ROV_REASON_PEER_ADMIN; /* admin.*, and hold announcements */
    }
}

/* Accessors ----------------------------------------------------------------------- */

const struct rov_policy_env *rov_policy_env(const rov_context_t *ctx)
{
    return &ctx->policy_env;
}

int rov_policy_nrails(const rov_context_t *ctx)
{
    return ctx->nrails;
}

rov_conn_t *rov_policy_first(const rov_context_t *ctx)
{
    return ctx->conns;
}

rov_conn_t *rov_policy_next(const rov_conn_t *conn)
{
    return conn->next;
}

rov_context_t *rov_policy_ctx_of(const rov_conn_t *conn)
{
    return conn->ctx;
}

uint64_t rov_policy_id(const rov_conn_t *conn)
{
    return conn->id;
}

uint64_t rov_policy_peer_id(const rov_conn_t *conn)
{
    return conn->peer_id;
}

void rov_policy_renew_threads(rov_context_t *ctx)
{
    rov_helper_renew(ctx);
}

bool rov_policy_threads_renewing(const rov_context_t *ctx)
{
    return rov_helper_renewing(ctx);
}

void rov_policy_stage_hook(rov_context_t *ctx, const char *stage, int after,
                           rov_status_t status)
{
    rov_ctx_stage_hook(ctx, stage, after != 0, status);
}

bool rov_policy_peer_moved(const rov_conn_t *conn, const void *blob, size_t len)
{
    const struct rov_wire_addr *old = &conn->peer;
    struct rov_wire_addr wa;
    uint8_t copy[sizeof(conn->peer_blob)];
    const char *why;

    if (len > sizeof(copy) || !conn->peer_blob_len)
        return false;
    memcpy(copy, blob, len);
    if (rov_wire_addr_decode(copy, len, &wa, &why) != ROV_OK ||
        memcmp(wa.ep_id, old->ep_id, ROV_EP_ID_LEN) != 0)
        return false;
    if (wa.gen != old->gen || wa.nrails != old->nrails)
        return true;
    for (unsigned i = 0; i < wa.nrails; i++)
        if (wa.rails[i].index != old->rails[i].index ||
            strcmp(wa.rails[i].kind, old->rails[i].kind) != 0 ||
            wa.rails[i].addr_len != old->rails[i].addr_len ||
            (wa.rails[i].addr_len &&
             memcmp(wa.rails[i].addr, old->rails[i].addr, wa.rails[i].addr_len) != 0))
            return true;
    return false;
}

bool rov_policy_same_peer(const rov_conn_t *a, const rov_conn_t *b)
{
    return a->peer_id && b->peer_id && memcmp(a->peer.ep_id, b->peer.ep_id, ROV_EP_ID_LEN) == 0;
}

enum rov_conn_state rov_policy_state(const rov_conn_t *conn)
{
    return conn->state;
}

int rov_policy_tx_rail(const rov_conn_t *conn)
{
    return conn->tx_rail;
}

bool rov_policy_tx_sync(const rov_conn_t *conn)
{
    return conn->tx_sync;
}

bool rov_policy_hold(const rov_conn_t *conn)
{
    return conn->hold;
}

bool rov_policy_peer_hold(const rov_conn_t *conn)
{
    return conn->peer_hold;
}

bool rov_policy_hold_all(const rov_context_t *ctx)
{
    return ctx->hold_all;
}

bool rov_policy_chan(const rov_conn_t *conn, int rail, struct rov_policy_chan *v)
{
    const struct rov_chan *chan = rail >= 0 && rail < conn->ctx->nrails ? conn->chans[rail] : NULL;

    if (!chan)
        return false;
    v->state = chan->state;
    v->serial = chan->serial;
    v->handshaken = chan->handshaken;
    v->ready = rov_conn_chan_ready(chan);
    v->silenced = chan->silent;
    return true;
}

rov_status_t rov_policy_chan_health(const rov_conn_t *conn, int rail, uint64_t now,
                                    struct rov_chan_health *h)
{
    struct rov_chan *chan = conn->chans[rail];

    memset(h, 0, sizeof(*h));
    if (!chan->rail->ops.chan_health)
        return ROV_ERR_UNSUPPORTED; /* the rail gives no verdict */
    if (chan->silent) { /* RAILOVER_FAULT: a path that died under posted work */
        h->busy = 1;
        h->heard_ago_ns = now - chan->silent_since_ns;
        return ROV_OK;
    }
    return chan->rail->ops.chan_health(chan, h);
}

void rov_policy_chan_str(const rov_conn_t *conn, int rail, char *buf, size_t len)
{
    struct rov_chan *chan = conn->chans[rail];

    buf[0] = '\0';
    if (chan && chan->state == ROV_CHAN_OPEN)
        chan->rail->ops.chan_str(chan, buf, len);
}

rov_status_t rov_policy_probe(rov_conn_t *conn, int rail)
{
    return rov_conn_probe(conn->chans[rail]);
}

void rov_policy_bond(rov_conn_t *conn, unsigned mask)
{
    /* Two members at least. */
    rov_conn_set_bond(conn, (mask & (mask - 1)) ? mask : 0, "failover policy");
}

void rov_policy_chan_fail(rov_conn_t *conn, int rail, rov_status_t status, const char *why,
                          rov_reason_t reason)
{
    rov_conn_chan_failed_reason(conn->chans[rail], status, why, reason);
}
