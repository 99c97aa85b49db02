/*
 * The component: MCA parameters, selection, the Railover context, progress.
 */
#include "opal_config.h"

#include <dlfcn.h>
#include <libgen.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "opal/mca/btl/base/base.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/util/output.h"
#include "opal/util/show_help.h"

#include "btl_railover.h"

#define RAILOVER_BTL_NAME "railover"
#define ADDR_MAX 4096 /* an address blob is a few hundred bytes */

static int railover_register(void);
static int railover_open(void);
static int railover_close(void);
static mca_btl_base_module_t **railover_init(int *num_btls, bool progress_threads,
                                             bool mpi_threads);
static int railover_progress(void);

mca_btl_railover_component_t mca_btl_railover_component = {
    .super = {
        .btl_version = {
            MCA_BTL_DEFAULT_VERSION(RAILOVER_BTL_NAME),
            .mca_open_component = railover_open,
            .mca_close_component = railover_close,
            .mca_register_component_params = railover_register,
        },
        .btl_data = {.param_field = MCA_BASE_METADATA_PARAM_NONE},
        .btl_init = railover_init,
        .btl_progress = railover_progress,
    },
};

static int railover_register(void)
{
    mca_btl_base_module_t *m = &mca_btl_railover_module.super;
    int rc;

    /* Above btl tcp (LOW), below the shared-memory and loopback BTLs:
     * named together with tcp, railover carries the traffic alone. */
    m->btl_exclusivity = MCA_BTL_EXCLUSIVITY_DEFAULT;
    m->btl_flags = MCA_BTL_FLAGS_SEND;
    m->btl_latency = 100;
    m->btl_bandwidth = 10000;
    /* Placeholders until init knows the context's limits (railover_limits). */
    m->btl_eager_limit = 8 * 1024;
    m->btl_rndv_eager_limit = 8 * 1024;
    m->btl_max_send_size = 256 * 1024;
    rc = mca_btl_base_param_register(&mca_btl_railover_component.super.btl_version, m);
    if (OPAL_SUCCESS != rc)
        return rc;
    /* Names (error, info, debug, ...) or 0-100, as btl_base_verbose. */
    mca_btl_railover_component.verbosity = MCA_BASE_VERBOSE_ERROR;
    rc = mca_base_component_var_register(
        &mca_btl_railover_component.super.btl_version, "verbose",
        "Verbosity of the railover component and of Railover's log lines (the higher of this "
        "and btl_base_verbose applies).  Railover's errors and warnings are always shown "
        "(unless btl_railover_log lowers Railover's level); 40 (info) adds its info lines, "
        "80 (debug) its debug lines, 100 its trace lines; btl_railover_log (RAILOVER_LOG) "
        "raises Railover's levels further, per subsystem",
        MCA_BASE_VAR_TYPE_INT, &mca_base_var_enum_verbose, 0, 0, OPAL_INFO_LVL_5,
        MCA_BASE_VAR_SCOPE_LOCAL, &mca_btl_railover_component.verbosity);
    if (0 > rc)
        return rc;
    /* Among Railover's settings: btl_railover_unreachable_timeout, after
     * which a connection none of whose rails works fails (the one failure
     * ob1 hears of), so a job whose peer is gone ends instead of hanging. */
    return mca_btl_railover_params_register();
}

static int railover_verbosity(void)
{
    int framework = opal_btl_base_framework.framework_verbose;
    int own = mca_btl_railover_component.verbosity;

    return own > framework ? own : framework;
}

static int railover_open(void)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;

    /* The component's own stream (Open MPI's "[host:pid] " prefix, stderr). */
    c->verbose = opal_output_open(NULL);
    opal_output_set_verbosity(c->verbose, railover_verbosity());
    OBJ_CONSTRUCT(&c->lock, opal_recursive_mutex_t);
    OBJ_CONSTRUCT(&c->peers, opal_hash_table_t);
    OBJ_CONSTRUCT(&c->endpoints, opal_list_t);
    OBJ_CONSTRUCT(&c->conn_list, opal_list_t);
    OBJ_CONSTRUCT(&c->dead_frags, opal_list_t);
    OBJ_CONSTRUCT(&c->eager_frags, opal_free_list_t);
    OBJ_CONSTRUCT(&c->max_frags, opal_free_list_t);
    return OPAL_SUCCESS;
}

static int railover_close(void)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;

    /* After finalize (the context and its progress helper are gone), and
     * after a failed init: Open MPI closes the component then. */
    mca_btl_railover_log_close();
    opal_output_close(c->verbose);
    c->verbose = -1;

    OBJ_DESTRUCT(&c->max_frags);
    OBJ_DESTRUCT(&c->eager_frags);
    OBJ_DESTRUCT(&c->dead_frags);
    OBJ_DESTRUCT(&c->conn_list);
    OBJ_DESTRUCT(&c->endpoints);
    OBJ_DESTRUCT(&c->peers);
    OBJ_DESTRUCT(&c->lock);
    return OPAL_SUCCESS;
}

/* Once mca_btl_railover.so is in the component path, every job opens it;
 * only a job that names it in its btl selection ("self,railover", not
 * "^tcp" or the default) gets Railover connections next to its usual BTLs. */
static bool railover_requested(void)
{
    const char *sel = opal_btl_base_framework.framework_selection;
    size_t n = strlen(RAILOVER_BTL_NAME);

    if (NULL == sel || '^' == sel[0])
        return false;
    for (const char *p = sel; *p;) {
        size_t len = strcspn(p, ",");

        if (len == n && 0 == strncmp(p, RAILOVER_BTL_NAME, n))
            return true;
        p += len;
        if (',' == *p)
            p++;
    }
    return false;
}

/* help-btl-railover.txt is installed with Open MPI's own help files; in a
 * build tree it sits next to the component, which is where we look too. */
static void railover_add_help_dir(void)
{
    Dl_info info;
    char *path, *dir;

    if (0 == dladdr((void *) &mca_btl_railover_component, &info) || NULL == info.dli_fname)
        return;
    path = strdup(info.dli_fname);
    if (NULL == path)
        return;
    dir = dirname(path);
    opal_show_help_add_dir(dir);
    free(path);
}

/* Rendered here and written to this process's stderr rather than relayed
 * by opal_show_help(): Debian's Open MPI 4.1.4 loses about half of the
 * messages ranks relay to mpirun ("ORTE_ERROR_LOG: Out of resource in
 * file orte/util/show_help.c"; btl tcp's own are lost as often), and these
 * are the messages that say why a job ended. */
void mca_btl_railover_show_help(const char *topic, ...)
{
    va_list ap;
    char *msg;

    va_start(ap, topic);
    msg = opal_show_help_vstring("help-btl-railover.txt", topic, true, ap);
    va_end(ap);
    if (NULL != msg) {
        opal_output(0, "%s", msg);
        free(msg);
    }
}

static bool user_set(const char *name)
{
    int idx = mca_base_var_find("opal", "btl", RAILOVER_BTL_NAME, name);
    mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;

    if (idx < 0 || OPAL_SUCCESS != mca_base_var_get_value(idx, NULL, &source, NULL))
        return false;
    return MCA_BASE_VAR_SOURCE_DEFAULT != source;
}

/* Open MPI's sizes follow the context's limits unless the user set them:
 * eager messages up to 64 KiB, as btl tcp's (or RAILOVER_EAGER_LIMIT if that
 * is larger; Railover copies those up to its own limit, so their send
 * completes at once, and sends the rest from the descriptor until the peer
 * has it), fragments of at most RAILOVER_MAX_MSG.  With an 8 KiB eager
 * limit, ob1's rendezvous made 8-64 KiB messages cost an extra round trip:
 * NetPIPE at 8 KiB had 0.44 of btl tcp's bandwidth (bench/mpi-perf.py).
 * A size above what Railover accepts is refused. */
static int railover_limits(void)
{
    mca_btl_base_module_t *m = &mca_btl_railover_module.super;
    const rov_limits_t *lim = &mca_btl_railover_component.limits;
    const size_t max_frag = 256 * 1024; /* each fragment of the max free list is this big */
    const size_t eager = 64 * 1024;

    if (!user_set("eager_limit")) {
        m->btl_eager_limit = lim->eager_limit > eager ? lim->eager_limit : eager;
        if (m->btl_eager_limit > lim->max_msg)
            m->btl_eager_limit = lim->max_msg;
    }
    if (!user_set("rndv_eager_limit"))
        m->btl_rndv_eager_limit = m->btl_eager_limit;
    if (!user_set("max_send_size"))
        m->btl_max_send_size = lim->max_msg < max_frag ? lim->max_msg : max_frag;
    if (m->btl_eager_limit > lim->max_msg || m->btl_rndv_eager_limit > lim->max_msg ||
        m->btl_max_send_size > lim->max_msg) {
        mca_btl_railover_show_help("size above max msg", opal_process_info.nodename,
                                   m->btl_eager_limit, m->btl_rndv_eager_limit,
                                   m->btl_max_send_size, lim->max_msg);
        return OPAL_ERR_BAD_PARAM;
    }
    if (m->btl_rndv_eager_limit > m->btl_eager_limit)
        m->btl_rndv_eager_limit = m->btl_eager_limit;
    if (m->btl_max_send_size < m->btl_eager_limit)
        m->btl_max_send_size = m->btl_eager_limit;
    /* btl_bandwidth (Mbit/s, how ob1 weighs BTLs to one peer): the
     * preferred rail's link, or the bond's sum (btl_railover_bond); the
     * registered default where the rails do not know their speed. */
    if (!user_set("bandwidth") && lim->bandwidth_mbps)
        m->btl_bandwidth = lim->bandwidth_mbps > UINT32_MAX ? UINT32_MAX
                                                            : (uint32_t)lim->bandwidth_mbps;
    return OPAL_SUCCESS;
}

static int frag_lists_init(void)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;
    mca_btl_base_module_t *m = &mca_btl_railover_module.super;
    int rc;

    rc = opal_free_list_init(&c->eager_frags, sizeof(mca_btl_railover_frag_t),
                             opal_cache_line_size, OBJ_CLASS(mca_btl_railover_frag_t),
                             m->btl_eager_limit, opal_cache_line_size, 64, -1, 64, NULL, 0,
                             NULL, NULL, NULL);
    if (OPAL_SUCCESS != rc)
        return rc;
    return opal_free_list_init(&c->max_frags, sizeof(mca_btl_railover_frag_t),
                               opal_cache_line_size, OBJ_CLASS(mca_btl_railover_frag_t),
                               m->btl_max_send_size, opal_cache_line_size, 8, -1, 8, NULL, 0,
                               NULL, NULL, NULL);
}

/* The address blob holds the endpoint's key: it goes to the job's peers
 * through the modex only, never to a log. */
static int publish_address(void)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;
    unsigned char buf[ADDR_MAX];
    size_t len = sizeof(buf);
    rov_status_t st;
    int rc;

    st = rov_endpoint_address(c->rov_ep, buf, &len);
    if (ROV_OK != st) {
        opal_output(0, "btl railover on %s: cannot get the endpoint address: %s",
                    opal_process_info.nodename, rov_status_str(st));
        return OPAL_ERROR;
    }
    OPAL_MODEX_SEND(rc, OPAL_PMIX_GLOBAL, &c->super.btl_version, buf, len);
    return rc;
}

static int context_open(void)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;
    rov_context_params_t params = {
        .recv_cb = mca_btl_railover_recv,
        .event_cb = mca_btl_railover_event,
    };
    rov_config_t *config;
    char jobid[ROV_JOB_MAX + 1];
    rov_status_t st;
    int rc;

    rc = mca_btl_railover_params_config(&config);
    if (OPAL_SUCCESS != rc)
        return rc;
    rc = mca_btl_railover_params_check_rails(config);
    if (OPAL_SUCCESS != rc) {
        rov_config_free(config);
        return rc;
    }
    params.config = config;
    /* The job's identity (`railover status`, the checkpoint client's job
     * registry, docs/ccp.md): the site's job id when it sets RAILOVER_JOBID
     * (or btl_railover_jobid), else one derived from Open MPI's job id, the
     * same in every rank of the job: "ompi-<its 32 bits in hex>"
     * (OPAL_JOBID_PRINT's "[f,j]" has characters a registry entry cannot be
     * named with).  The rank is always the MPI rank. */
    if (ROV_OK != rov_config_get(config, "RAILOVER_JOBID", jobid, sizeof(jobid)) ||
        '\0' == jobid[0])
        snprintf(jobid, sizeof(jobid), "ompi-%08x", (unsigned) OPAL_PROC_MY_NAME.jobid);
    params.job = jobid;
    params.rank = (long) OPAL_PROC_MY_NAME.vpid;
    st = rov_context_create(&params, &c->ctx);
    rov_config_free(config);
    if (ROV_OK != st) {
        mca_btl_railover_show_help("context failed", opal_process_info.nodename,
                                   rov_status_str(st));
        return OPAL_ERR_NOT_AVAILABLE;
    }
    st = rov_endpoint_create(c->ctx, &c->rov_ep);
    if (ROV_OK != st) {
        mca_btl_railover_show_help("context failed", opal_process_info.nodename,
                                   rov_status_str(st));
        rov_context_destroy(c->ctx);
        c->ctx = NULL;
        return OPAL_ERR_NOT_AVAILABLE;
    }
    rov_context_limits(c->ctx, &c->limits);
    return OPAL_SUCCESS;
}

static void context_close(void)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;

    rov_endpoint_destroy(c->rov_ep);
    c->rov_ep = NULL;
    rov_context_destroy(c->ctx);
    c->ctx = NULL;
}

static mca_btl_base_module_t **railover_init(int *num_btls, bool progress_threads,
                                             bool mpi_threads)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;
    mca_btl_base_module_t **modules;

    *num_btls = 0;
    if (!railover_requested()) {
        opal_output_verbose(10, c->verbose,
                            "btl railover: not named in the btl selection (\"%s\"): declining",
                            opal_btl_base_framework.framework_selection
                                ? opal_btl_base_framework.framework_selection : "");
        return NULL;
    }
    railover_add_help_dir();
    /* From here Railover's lines (the context's creation first) go through
     * the component's stream; railover_close() removes the hook. */
    mca_btl_railover_log_open(c->verbose, railover_verbosity());
    if (OPAL_SUCCESS != mca_btl_railover_params_check_sizes() ||
        OPAL_SUCCESS != context_open())
        return NULL;
    if (OPAL_SUCCESS != railover_limits())
        goto fail;
    mca_btl_railover_rdma_init(user_set("flags"));
    if (OPAL_SUCCESS != frag_lists_init() ||
        OPAL_SUCCESS != opal_hash_table_init(&c->peers, 256) ||
        OPAL_SUCCESS != publish_address())
        goto fail;
    modules = malloc(sizeof(*modules));
    if (NULL == modules)
        goto fail;
    modules[0] = &mca_btl_railover_module.super;
    *num_btls = 1;
    opal_output_verbose(10, c->verbose,
                        "btl railover: %d rail(s), first %s; eager limit %zu, max send size %zu, "
                        "RDMA get %s, bandwidth %u Mbit/s",
                        rov_context_rail_count(c->ctx), rov_context_rail_name(c->ctx, 0),
                        modules[0]->btl_eager_limit, modules[0]->btl_max_send_size,
                        (modules[0]->btl_flags & MCA_BTL_FLAGS_GET)
                            ? "on (a message in one get, the rails' reads in pieces)" : "off",
                        modules[0]->btl_bandwidth);
    return modules;
fail:
    context_close();
    return NULL;
}

/* Called by opal_progress() in every thread that waits: only one of them
 * drives the context; the others find the lock taken and go on. */
static int railover_progress(void)
{
    mca_btl_railover_component_t *c = &mca_btl_railover_component;
    int n = 0;

    if (atomic_load_explicit(&c->lock_waiters, memory_order_relaxed) > 0) {
        sched_yield(); /* the sender woken for the lock may need this core */
        return 0;
    }
    if (0 != OPAL_THREAD_TRYLOCK(&c->lock))
        return 0;
    /* A callback of ours that ends in opal_progress() must not re-enter
     * rov_progress(): the lock is recursive, so this flag says we are inside. */
    if (!c->in_progress && NULL != c->ctx) {
        c->in_progress = true;
        n = rov_progress(c->ctx);
        c->in_progress = false;
        if (OPAL_UNLIKELY(!opal_list_is_empty(&c->dead_frags)))
            mca_btl_railover_complete_dead();
        if (OPAL_UNLIKELY(mca_btl_railover_gets_pending()))
            mca_btl_railover_gets_failed();
        if (c->npending > 0)
            mca_btl_railover_flush_pending();
    }
    OPAL_THREAD_UNLOCK(&c->lock);
    if (OPAL_UNLIKELY(atomic_load_explicit(&mca_btl_railover_log_pending, memory_order_relaxed)))
        mca_btl_railover_log_flush();
    return n;
}
