/*
 * Checkpoint stages of a context (railover.h, "Checkpoint stages"): quiesce,
 * close the rails, reopen.  The context's stage is one state machine (one
 * table, one setter); each connection's part is in conn.c (DRAINING,
 * QUIESCED, REOPENING and the end-of-channel marker, ROV_FT_QUIESCE), and
 * this file moves the stage on as the connections get there.  Stage events
 * wait for the next progress call: a call such as rov_context_quiesce()
 * never runs the application's callback.
 */
#include <string.h>

#include "transport/control.h"
#include "transport/core.h"
#include "transport/log.h"

#define B ROV_STATE_BIT
const struct rov_state_info rov_stage_states[ROV_STAGE_NSTATES] = {
    [ROV_CONTEXT_RUNNING] = {"running", B(ROV_CONTEXT_QUIESCING)},
    [ROV_CONTEXT_QUIESCING] = {"quiescing", B(ROV_CONTEXT_QUIESCED) | B(ROV_CONTEXT_RUNNING)},
    [ROV_CONTEXT_QUIESCED] = {"quiesced", B(ROV_CONTEXT_CLOSED) | B(ROV_CONTEXT_RUNNING) |
                                          B(ROV_CONTEXT_QUIESCING)},
    [ROV_CONTEXT_CLOSED] = {"closed", B(ROV_CONTEXT_REOPENING)},
    [ROV_CONTEXT_REOPENING] = {"reopening", B(ROV_CONTEXT_RUNNING)},
};
#undef B

/* Events waiting for progress (ctx->stage_news). */
enum {
    NEWS_QUIESCED = 1u << 0,
    NEWS_ADDRESS = 1u << 1,
    NEWS_RESUMED = 1u << 2,
};

static bool stage_set(rov_context_t *ctx, rov_context_stage_t stage, const char *why)
{
    if (!rov_state_change(rov_stage_states, ctx->stage, stage, "stage", "context", why,
                          &ctx->illegal_transitions))
        return false;
    if (ctx->stage != stage)
        rov_info("stage", "context %s -> %s (%s)", rov_stage_states[ctx->stage].name,
                 rov_stage_states[stage].name, why);
    ctx->stage = stage;
    rov_helper_kick(ctx); /* it drives the stage while the application computes */
    return true;
}

/* Stage hooks (railover.h, rov_context_set_stage_hook()): before a stage
 * starts and once after it ends, in the thread that runs it. */
void rov_ctx_stage_hook(rov_context_t *ctx, const char *stage, bool after, rov_status_t status)
{
    if (after && (!ctx->hook_pending || strcmp(ctx->hook_pending, stage) != 0))
        return; /* (said already, or never begun) */
    ctx->hook_pending = after ? NULL : stage;
    if (ctx->stage_hook)
        ctx->stage_hook(ctx->stage_hook_arg, ctx, stage, after, status);
}

void rov_context_set_stage_hook(rov_context_t *ctx, rov_stage_hook_t hook, void *arg)
{
    ROV_CTX_GUARD(ctx);
    ctx->stage_hook = hook;
    ctx->stage_hook_arg = arg;
}

const char *rov_context_stage_str(rov_context_stage_t stage)
{
    return (unsigned)stage < ROV_STAGE_NSTATES ? rov_stage_states[stage].name : "unknown";
}

rov_context_stage_t rov_context_stage(const rov_context_t *ctx)
{
    ROV_CTX_GUARD((rov_context_t *)ctx);
    return ctx->stage;
}

/* Whether c holds a quiesce up: it still establishes (it drains once up),
 * drains, or closes with data of ours unacknowledged or its CLOSE not yet
 * sent.  A closing connection whose CLOSE is out with everything before it
 * acknowledged sends nothing more: it waits only for the peer. */
static bool unsettled(const struct rov_conn *c)
{
    switch (c->state) {
    case ROV_CONN_QUIESCED:
    case ROV_CONN_FAILED:
    case ROV_CONN_DEAD:
        return false;
    case ROV_CONN_CLOSE_SENT:
    case ROV_CONN_CLOSE_ANSWERED:
        return c->tx.count != 0;
    default:
        return true;
    }
}

static int unquiesced(const rov_context_t *ctx)
{
    int n = 0;

    for (const struct rov_conn *c = ctx->conns; c; c = c->next)
        n += unsettled(c);
    return n;
}

static int reopening(const rov_context_t *ctx)
{
    int n = 0;

    for (const struct rov_conn *c = ctx->conns; c; c = c->next)
        n += c->state == ROV_CONN_REOPENING;
    return n;
}

void rov_stage_conn_changed(rov_context_t *ctx)
{
    switch (ctx->stage) {
    case ROV_CONTEXT_QUIESCING:
        if (!unquiesced(ctx) && stage_set(ctx, ROV_CONTEXT_QUIESCED, "every connection quiesced")) {
            ctx->stage_news |= NEWS_QUIESCED;
            rov_ctx_stage_hook(ctx, ROV_STAGE_QUIESCE, true, ROV_OK);
        }
        break;
    case ROV_CONTEXT_QUIESCED:
        if (unquiesced(ctx))
            stage_set(ctx, ROV_CONTEXT_QUIESCING, "a connection came up: it drains too");
        break;
    case ROV_CONTEXT_REOPENING:
        if (!reopening(ctx) && stage_set(ctx, ROV_CONTEXT_RUNNING, "every connection reconnected")) {
            ctx->stage_news |= NEWS_RESUMED;
            rov_ctx_stage_hook(ctx, ROV_STAGE_REOPEN, true, ROV_OK);
        }
        break;
    case ROV_CONTEXT_RUNNING:
    case ROV_CONTEXT_CLOSED:
        break;
    }
}

void rov_stage_progress(rov_context_t *ctx)
{
    unsigned news = ctx->stage_news;

    ctx->stage_news = 0;
    if (news & NEWS_QUIESCED)
        rov_ctx_event(ctx, ROV_EVENT_CONTEXT_QUIESCED, NULL, ROV_OK, -1, -1, "quiesced");
    if (news & NEWS_ADDRESS)
        rov_ctx_event(ctx, ROV_EVENT_ENDPOINT_ADDRESS, NULL, ROV_OK, -1, -1,
                      "the endpoint listens at a new address");
    if (news & NEWS_RESUMED)
        rov_ctx_event(ctx, ROV_EVENT_CONTEXT_RESUMED, NULL, ROV_OK, -1, -1, "resumed");
}

rov_status_t rov_context_quiesce(rov_context_t *ctx)
{
    ROV_CTX_GUARD(ctx);
    switch (ctx->stage) {
    case ROV_CONTEXT_QUIESCED:
        return ROV_OK;
    case ROV_CONTEXT_QUIESCING:
        return ROV_INPROGRESS;
    case ROV_CONTEXT_CLOSED:
    case ROV_CONTEXT_REOPENING:
        rov_error("stage", "quiesce refused: the context is %s", rov_stage_states[ctx->stage].name);
        return ROV_ERR_BUSY;
    case ROV_CONTEXT_RUNNING:
        break;
    }
    rov_ctx_stage_hook(ctx, ROV_STAGE_QUIESCE, false, ROV_OK);
    stage_set(ctx, ROV_CONTEXT_QUIESCING, "quiesce requested");
    for (struct rov_conn *c = ctx->conns; c; c = c->next)
        rov_conn_quiesce(c);
    rov_stage_conn_changed(ctx); /* none to wait for */
    return ctx->stage == ROV_CONTEXT_QUIESCED ? ROV_OK : ROV_INPROGRESS;
}

rov_status_t rov_context_close_rails(rov_context_t *ctx)
{
    ROV_CTX_GUARD(ctx);
    if (ctx->stage == ROV_CONTEXT_CLOSED)
        return ROV_OK;
    if (ctx->stage != ROV_CONTEXT_QUIESCED) {
        rov_error("stage", "close of the rails refused: the context is %s, not quiesced "
                  "(rov_context_quiesce() first)", rov_stage_states[ctx->stage].name);
        return ROV_ERR_BUSY;
    }
    rov_ctx_stage_hook(ctx, ROV_STAGE_CLOSE, false, ROV_OK);
    while (ctx->chans)
        rov_ctx_chan_close(ctx->chans);
    if (ctx->endpoint)
        for (int i = 0; i < ctx->nrails; i++)
            ctx->rails[i]->ops.unlisten(ctx->rails[i]);
    rov_ctx_mem_unregister(ctx);
    rov_ctx_close_rails(ctx);
    stage_set(ctx, ROV_CONTEXT_CLOSED, "rails closed");
    rov_ctx_stage_hook(ctx, ROV_STAGE_CLOSE, true, ROV_OK);
    return ROV_OK;
}

rov_status_t rov_context_reopen(rov_context_t *ctx)
{
    ROV_CTX_GUARD(ctx);
    rov_status_t st;

    switch (ctx->stage) {
    case ROV_CONTEXT_RUNNING:
        return ROV_OK;
    case ROV_CONTEXT_REOPENING:
        return ROV_INPROGRESS;
    case ROV_CONTEXT_QUIESCING:
    case ROV_CONTEXT_QUIESCED:
        /* Rails still open: resume where the channels still are. */
        rov_ctx_stage_hook(ctx, ROV_STAGE_REOPEN, false, ROV_OK);
        stage_set(ctx, ROV_CONTEXT_RUNNING, "resume requested");
        for (struct rov_conn *c = ctx->conns; c; c = c->next)
            rov_conn_resume(c);
        ctx->stage_news |= NEWS_RESUMED;
        rov_ctx_stage_hook(ctx, ROV_STAGE_REOPEN, true, ROV_OK);
        return ROV_OK;
    case ROV_CONTEXT_CLOSED:
        break;
    }
    rov_ctx_stage_hook(ctx, ROV_STAGE_REOPEN, false, ROV_OK);
    st = rov_ctx_open_rails(ctx);
    if (st != ROV_OK) {
        rov_error("stage", "reopen failed: a rail did not open (%s); the context stays closed",
                  rov_status_str(st));
        rov_ctx_stage_hook(ctx, ROV_STAGE_REOPEN, true, st);
        return st;
    }
    rov_ctx_mem_reregister(ctx);
    if (ctx->endpoint) {
        st = rov_endpoint_listen(ctx->endpoint);
        if (st != ROV_OK) {
            rov_error("stage", "reopen failed: the endpoint cannot listen (%s); the context "
                      "stays closed", rov_status_str(st));
            rov_ctx_mem_unregister(ctx);
            rov_ctx_close_rails(ctx);
            rov_ctx_stage_hook(ctx, ROV_STAGE_REOPEN, true, st);
            return st;
        }
        ctx->stage_news |= NEWS_ADDRESS;
    }
    stage_set(ctx, ROV_CONTEXT_REOPENING, "rails reopened");
    for (struct rov_conn *c = ctx->conns; c; c = c->next)
        rov_conn_reopen(c);
    rov_stage_conn_changed(ctx); /* none to wait for */
    return ctx->stage == ROV_CONTEXT_RUNNING ? ROV_OK : ROV_INPROGRESS;
}

/* Control commands: quiesce, close-rails, reopen, stage ------------------------------ */

static void print_stage(rov_context_t *ctx, FILE *out)
{
    const unsigned *n = ctx->conn_now;

    fprintf(out, "context stage=%s conns=%u quiesced=%u draining=%u reopening=%u failed=%u",
            rov_stage_states[ctx->stage].name, unquiesced(ctx) + n[ROV_CONN_QUIESCED] +
            n[ROV_CONN_FAILED], n[ROV_CONN_QUIESCED], n[ROV_CONN_DRAINING],
            n[ROV_CONN_REOPENING], n[ROV_CONN_FAILED]);
    rov_helper_status(ctx, out);
    fprintf(out, " illegal_transitions=%llu\n", (unsigned long long)ctx->illegal_transitions);
}

static int cmd_stage(rov_context_t *ctx, int argc, char **argv, FILE *out, char *err,
                     size_t err_len)
{
    rov_status_t st = ROV_OK;

    if (argc != 1) {
        snprintf(err, err_len, "%s takes no arguments", argv[0]);
        return 1;
    }
    if (strcmp(argv[0], "quiesce") == 0)
        st = rov_context_quiesce(ctx);
    else if (strcmp(argv[0], "close-rails") == 0)
        st = rov_context_close_rails(ctx);
    else if (strcmp(argv[0], "reopen") == 0)
        st = rov_context_reopen(ctx);
    if (st < 0) {
        snprintf(err, err_len, "%s refused: the context is %s%s", argv[0],
                 rov_stage_states[ctx->stage].name,
                 strcmp(argv[0], "close-rails") == 0 ? ", not quiesced (quiesce first)" : "");
        return 1;
    }
    print_stage(ctx, out);
    return 0;
}

static const struct rov_ctl_cmd stage_cmd = {
    "stage", "stage", "checkpoint stage: running, quiescing, quiesced, closed, reopening",
    cmd_stage,
};
static const struct rov_ctl_cmd quiesce_cmd = {
    "quiesce", "quiesce",
    "hold new sends, drain what is in flight, exchange end markers (then: stage)", cmd_stage,
};
static const struct rov_ctl_cmd close_rails_cmd = {
    "close-rails", "close-rails",
    "quiesced: release every rail resource (sockets, devices); connections stay", cmd_stage,
};
static const struct rov_ctl_cmd reopen_cmd = {
    "reopen", "reopen", "open the rails again and reconnect, or resume a quiesce", cmd_stage,
};

ROV_CTL_REGISTER(stage_cmd)
ROV_CTL_REGISTER(quiesce_cmd)
ROV_CTL_REGISTER(close_rails_cmd)
ROV_CTL_REGISTER(reopen_cmd)
