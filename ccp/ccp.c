/*
 * ccp/, the cooperative checkpoint policy (docs/ccp.md): each context of a
 * job registers as a rank in the job registry (registry.h) with where its
 * control endpoints are and its endpoint's address, and keeps the record
 * true (a reopen moves the address).  With RAILOVER_CCP_ADDR it also opens
 * the network control endpoint, whose requests must carry the proof of the
 * job's secret, so that a client on another host drives the stages; the
 * stages themselves are the transport's (quiesce, close-rails, reopen:
 * transport/stage.c), served by the progress helper while the rank
 * computes.  The client side, rov_job_*(), is client.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "ccp/registry.h"
#include "railover/ccp.h"
#include "transport/control.h"
#include "transport/log.h"
#include "transport/policy.h"

struct ccp_settings {
    char job_dir[CCP_DIR_MAX];
    char addr[CCP_WHERE_MAX];
};

/* While reconnecting after a reopen, the registry is read this often for
 * peers that reopened at new addresses (or were restored elsewhere). */
#define READDRESS_NS (200ull * 1000000ull)

struct ccp_ctx {
    bool registered;
    uint64_t readdress_ns;        /* next look at the registry, 0: none due */
    char jobdir[CCP_DIR_MAX + ROV_JOB_MAX + 2];
    uint8_t key[ROV_KEY_LEN];
    struct ccp_record rec;
};

static const struct rov_policy_ops ccp_policy;

static struct ccp_ctx *C(const rov_context_t *ctx)
{
    return rov_policy_ctx(ctx, &ccp_policy);
}

/* The job's directory and secret, made if missing. */
static bool job_ready(rov_context_t *ctx)
{
    const struct ccp_settings *s = rov_policy_settings(ctx, &ccp_policy);
    struct ccp_ctx *c = C(ctx);
    char base[CCP_DIR_MAX], err[256];

    if (ccp_base_dir(s->job_dir, base, sizeof(base)) != ROV_OK ||
        ccp_job_dir(base, rov_context_jobid(ctx), true, c->jobdir, sizeof(c->jobdir), err,
                    sizeof(err)) != ROV_OK ||
        ccp_secret(c->jobdir, true, c->key, err, sizeof(err)) != ROV_OK) {
        rov_warn("ccp", "job registry: %s; this process cannot be checkpointed", err);
        return false;
    }
    return true;
}

static void publish(rov_context_t *ctx)
{
    struct ccp_ctx *c = C(ctx);
    rov_status_t st = ccp_record_write(c->jobdir, c->key, &c->rec);

    /* The last rank of the job left and took the directory with it. */
    if (st != ROV_OK && errno == ENOENT && job_ready(ctx)) {
        rov_ctl_net_rekey(ctx, c->key);
        st = ccp_record_write(c->jobdir, c->key, &c->rec);
    }
    if (st != ROV_OK)
        rov_warn("ccp", "cannot write rank %ld's record in %s: %m", c->rec.rank, c->jobdir);
}

/* Register the context in its job's registry (nothing is fatal: a context
 * that cannot register runs, without a checkpoint). */
static void ccp_ctx_open(rov_context_t *ctx)
{
    const struct ccp_settings *s = rov_policy_settings(ctx, &ccp_policy);
    struct ccp_ctx *c = C(ctx);
    const char *job = rov_context_jobid(ctx), *path = rov_ctl_path(ctx), *net;

    if (!path) {
        rov_debug("ccp", "no control socket: not registered in the job registry");
        return;
    }
    if (!ccp_jobid_ok(job)) {
        rov_warn("ccp", "job id '%s' cannot name a registry entry (1 to %d of A-Z a-z 0-9 . _ "
                 "-): this process cannot be checkpointed", job, ROV_JOB_MAX);
        return;
    }
    if (!job_ready(ctx))
        return;
    if (s->addr[0] && rov_ctl_net_open(ctx, s->addr, c->key) != ROV_OK)
        rov_warn("ccp", "no network control endpoint on RAILOVER_CCP_ADDR=%s: only clients on "
                 "this host reach rank %ld", s->addr, rov_context_rank(ctx));
    snprintf(c->rec.job, sizeof(c->rec.job), "%s", job);
    c->rec.rank = rov_context_rank(ctx);
    c->rec.pid = (int)getpid();
    c->rec.uid = (unsigned)geteuid();
    if (gethostname(c->rec.host, sizeof(c->rec.host)) < 0 || !c->rec.host[0])
        snprintf(c->rec.host, sizeof(c->rec.host), "localhost");
    c->rec.host[sizeof(c->rec.host) - 1] = '\0';
    snprintf(c->rec.ctl_path, sizeof(c->rec.ctl_path), "%s", path);
    net = rov_ctl_net_where(ctx);
    snprintf(c->rec.ctl_net, sizeof(c->rec.ctl_net), "%s", net ? net : "");
    publish(ctx);
    c->registered = true;
    rov_info("ccp", "rank %ld of job %s, registered in %s (control: %s)", c->rec.rank, job,
             c->jobdir, net ? net : path);
}

static void ccp_endpoint_address(rov_context_t *ctx, const void *blob, size_t len)
{
    struct ccp_ctx *c = C(ctx);

    if (!c->registered || len > sizeof(c->rec.endpoint))
        return;
    memcpy(c->rec.endpoint, blob, len);
    c->rec.endpoint_len = len;
    publish(ctx);
}

/* Each reconnecting connection whose peer's record shows another address
 * goes there: the TCP rail listens on its old port again after a reopen,
 * the others may not, and a restored peer is elsewhere altogether. */
struct readdress {
    rov_context_t *ctx;
    unsigned moved;
};

static bool readdress_one(void *arg, const struct ccp_record *rec)
{
    struct readdress *r = arg;

    if (!rec->endpoint_len || rec->rank == C(r->ctx)->rec.rank)
        return true;
    for (rov_conn_t *conn = rov_policy_first(r->ctx); conn; conn = rov_policy_next(conn))
        if (rov_policy_state(conn) == ROV_CONN_REOPENING &&
            rov_policy_peer_moved(conn, rec->endpoint, rec->endpoint_len) &&
            rov_conn_set_peer_address(conn, rec->endpoint, rec->endpoint_len) == ROV_OK) {
            rov_info("ccp", "conn %llu: rank %ld of the job is at a new address (registry)",
                     (unsigned long long)rov_policy_id(conn), rec->rank);
            r->moved++;
        }
    return true;
}

static void ccp_tick(rov_context_t *ctx, uint64_t now)
{
    struct ccp_ctx *c = C(ctx);
    struct readdress r = {.ctx = ctx};
    char err[256];

    if (!c->registered || rov_context_stage(ctx) != ROV_CONTEXT_REOPENING) {
        c->readdress_ns = 0;
        return;
    }
    if (c->readdress_ns && now < c->readdress_ns)
        return;
    c->readdress_ns = now + READDRESS_NS;
    if (ccp_records(c->jobdir, c->key, readdress_one, &r, err, sizeof(err)) != ROV_OK)
        rov_debug("ccp", "registry: %s", err);
}

static uint64_t ccp_due_ns(const rov_context_t *ctx)
{
    return C(ctx)->readdress_ns;
}

/* The record goes with the process, unless another process (a restored
 * copy) has written its own since. */
static void ccp_ctx_fini(rov_context_t *ctx)
{
    struct ccp_ctx *c = C(ctx);
    struct ccp_record now;
    char path[sizeof(c->jobdir) + 32], err[256];

    if (!c->registered)
        return;
    snprintf(path, sizeof(path), "%s/rank.%ld", c->jobdir, c->rec.rank);
    if (ccp_record_read(path, c->key, &now, err, sizeof(err)) == ROV_OK &&
        now.pid == c->rec.pid && strcmp(now.host, c->rec.host) == 0)
        ccp_record_remove(c->jobdir, c->rec.rank);
}

static void ccp_defaults(void *block)
{
    memset(block, 0, sizeof(struct ccp_settings));
}

#define CCP_OFF(f) offsetof(struct ccp_settings, f)
#define CCP_LEN(f) sizeof(((struct ccp_settings *)0)->f)

static const struct rov_var ccp_vars[] = {
    {"RAILOVER_JOB_DIR", ROV_VAR_PATH, CCP_OFF(job_dir), CCP_LEN(job_dir), 0, 0, NULL,
     "job registry: a directory every host of the job sees (empty: <run dir>/jobs, this "
     "host only)"},
    {"RAILOVER_CCP_ADDR", ROV_VAR_IFNAME, CCP_OFF(addr), CCP_LEN(addr), 0, 0, NULL,
     "IP or interface of the network control endpoint that drives checkpoint stages from "
     "other hosts (empty: none)"},
};

static struct rov_settings ccp_settings = {
    .layer = "ccp",
    .vars = ccp_vars,
    .nvars = sizeof(ccp_vars) / sizeof(ccp_vars[0]),
    .size = sizeof(struct ccp_settings),
    .defaults = ccp_defaults,
};

static const struct rov_policy_ops ccp_policy = {
    .name = "ccp",
    .settings = &ccp_settings,
    .ctx_size = sizeof(struct ccp_ctx),
    .ctx_open = ccp_ctx_open,
    .ctx_fini = ccp_ctx_fini,
    .endpoint_address = ccp_endpoint_address,
    .tick = ccp_tick,
    .due_ns = ccp_due_ns,
};

ROV_POLICY_REGISTER(ccp_policy)
