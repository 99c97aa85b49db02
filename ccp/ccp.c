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

struct ccp_ctx {
    bool registered;
    char jobdir[CCP_DIR_MAX + ROV_JOB_MAX + 2];
    uint8_t key[ROV_KEY_LEN];
    struct ccp_record rec;
};

static const struct rov_policy_ops ccp_policy;

static struct ccp_ctx *C(const rov_context_t *ctx)
{
    return rov_policy_ctx(ctx, &ccp_policy);
}

static void publish(rov_context_t *ctx)
{
    struct ccp_ctx *c = C(ctx);

    if (ccp_record_write(c->jobdir, c->key, &c->rec) != ROV_OK)
        rov_warn("ccp", "cannot write rank %ld's record in %s: %m", c->rec.rank, c->jobdir);
}

/* Register the context in its job's registry (nothing is fatal: a context
 * that cannot register runs, without a checkpoint). */
static void ccp_ctx_open(rov_context_t *ctx)
{
    const struct ccp_settings *s = rov_policy_settings(ctx, &ccp_policy);
    struct ccp_ctx *c = C(ctx);
    const char *job = rov_context_jobid(ctx), *path = rov_ctl_path(ctx), *net;
    char base[CCP_DIR_MAX], err[256];

    if (!path) {
        rov_debug("ccp", "no control socket: not registered in the job registry");
        return;
    }
    if (!ccp_jobid_ok(job)) {
        rov_warn("ccp", "job id '%s' cannot name a registry entry (1 to %d of A-Z a-z 0-9 . _ "
                 "-): this process cannot be checkpointed", job, ROV_JOB_MAX);
        return;
    }
    if (ccp_base_dir(s->job_dir, base, sizeof(base)) != ROV_OK ||
        ccp_job_dir(base, job, true, c->jobdir, sizeof(c->jobdir), err, sizeof(err)) != ROV_OK ||
        ccp_secret(c->jobdir, true, c->key, err, sizeof(err)) != ROV_OK) {
        rov_warn("ccp", "job registry: %s; this process cannot be checkpointed", err);
        return;
    }
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
};

ROV_POLICY_REGISTER(ccp_policy)
