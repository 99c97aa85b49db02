/*
 * MCA parameters made from Railover's own settings: every RAILOVER_* variable
 * that rov_config_var() enumerates becomes btl_railover_<name> (lowercase,
 * without the RAILOVER_ prefix), a string with the library's default, so
 * that ompi_info documents them and mpirun's --mca, OMPI_MCA_* and the
 * parameter files set them.  A value the user set is applied on top of the
 * environment (rov_config_read), so the MCA parameter wins over RAILOVER_*.
 */
#include "opal_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/mca/base/mca_base_var.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#include "btl_railover.h"

#define PARAM_NAME_MAX 64 /* RAILOVER_ names are shorter */
#define PREFIX "RAILOVER_"

struct param {
    const rov_config_var_t *var;
    char name[PARAM_NAME_MAX]; /* without "btl_railover_" */
    char *value;               /* storage the MCA variable system owns */
    int index;                 /* MCA variable index */
};

/* Static: the MCA variable system writes to (and frees the string in) a
 * variable's storage when it deregisters it, which is after the
 * component's close. */
#define PARAMS_MAX 128
static struct param params[PARAMS_MAX];
static int nparams;

/* Names mca_btl_base_param_register() gives every BTL: a setting of the
 * same name (RAILOVER_EAGER_LIMIT) takes the prefix "rov_". */
static const char *const btl_base_names[] = {
    "exclusivity", "flags", "atomic_flags", "rndv_eager_limit", "eager_limit",
    "max_send_size", "rdma_pipeline_send_length", "rdma_pipeline_frag_size",
    "min_rdma_pipeline_size", "latency", "bandwidth", "get_limit", "get_alignment",
    "put_limit", "put_alignment", "get_local_registration_threshold",
    "put_local_registration_threshold", "registration_handle_size",
};

static bool is_btl_base_name(const char *name)
{
    for (size_t i = 0; i < sizeof(btl_base_names) / sizeof(btl_base_names[0]); i++)
        if (0 == strcmp(name, btl_base_names[i]))
            return true;
    return false;
}

static void param_name(const rov_config_var_t *var, char *buf, size_t len)
{
    const char *n = var->name;
    char lower[PARAM_NAME_MAX - 4]; /* room for "rov_" */
    size_t i;

    if (0 == strncmp(n, PREFIX, strlen(PREFIX)))
        n += strlen(PREFIX);
    for (i = 0; n[i] && i < sizeof(lower) - 1; i++)
        lower[i] = (char) tolower((unsigned char) n[i]);
    lower[i] = '\0';
    snprintf(buf, len, "%s%s", is_btl_base_name(lower) ? "rov_" : "", lower);
}

/* The settings an MPI user tunes (level 5: "tuner/basic") apart from the
 * library's internals (6) and test-only fault injection (9). */
static mca_base_var_info_lvl_t param_level(const rov_config_var_t *var)
{
    static const char *const basic[] = {
        "RAILOVER_RAILS", "RAILOVER_TCP_IF", "RAILOVER_VERBS_DEV", "RAILOVER_LOG",
        "RAILOVER_FAILOVER", "RAILOVER_FAILOVER_TIMEOUT", "RAILOVER_FAILBACK",
        "RAILOVER_FAILBACK_DWELL", "RAILOVER_CONTROL",
    };

    if (0 == strcmp(var->name, "RAILOVER_FAULT"))
        return OPAL_INFO_LVL_9;
    for (size_t i = 0; i < sizeof(basic) / sizeof(basic[0]); i++)
        if (0 == strcmp(var->name, basic[i]))
            return OPAL_INFO_LVL_5;
    return OPAL_INFO_LVL_6;
}

static void format_duration(uint64_t ns, char *buf, size_t len)
{
    if (ns >= 1000000000ull && 0 == ns % 1000000000ull)
        snprintf(buf, len, "%" PRIu64 "s", ns / UINT64_C(1000000000));
    else if (ns >= 1000000ull && 0 == ns % 1000000ull)
        snprintf(buf, len, "%" PRIu64 "ms", ns / UINT64_C(1000000));
    else if (ns >= 1000ull && 0 == ns % 1000ull)
        snprintf(buf, len, "%" PRIu64 "us", ns / UINT64_C(1000));
    else
        snprintf(buf, len, "%" PRIu64 "ns", ns);
}

static void format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *const suffix[] = {"", "k", "m", "g"};
    int s = 0;

    while (s < 3 && bytes >= 1024 && 0 == bytes % 1024) {
        bytes /= 1024;
        s++;
    }
    snprintf(buf, len, "%" PRIu64 "%s", bytes, suffix[s]);
}

/* What a setting accepts, in words: the same rule rov_config_set() applies. */
void mca_btl_railover_param_accepts(const rov_config_var_t *var, char *buf, size_t len)
{
    char lo[32], hi[32];

    switch (var->type) {
    case ROV_CONFIG_BOOL:
        snprintf(buf, len, "on or off (also 1/0, yes/no, true/false)");
        break;
    case ROV_CONFIG_COUNT:
        snprintf(buf, len, "an integer from %" PRIu64 " to %" PRIu64, var->min, var->max);
        break;
    case ROV_CONFIG_SIZE:
        format_size(var->min, lo, sizeof(lo));
        format_size(var->max, hi, sizeof(hi));
        snprintf(buf, len, "a size from %s to %s bytes (suffix k, m or g for KiB, MiB, GiB)",
                 lo, hi);
        break;
    case ROV_CONFIG_DURATION:
        format_duration(var->min, lo, sizeof(lo));
        format_duration(var->max, hi, sizeof(hi));
        snprintf(buf, len, "a time from %s to %s, with its unit (ns, us, ms, s)", lo, hi);
        break;
    case ROV_CONFIG_CHOICE:
        snprintf(buf, len, "one of %s", var->choices);
        break;
    case ROV_CONFIG_STRING:
    default:
        snprintf(buf, len, "%s", var->choices && var->choices[0] ? var->choices : "text");
        break;
    }
}

static char *param_description(const rov_config_var_t *var)
{
    char accepts[160];
    char *desc = NULL;

    mca_btl_railover_param_accepts(var, accepts, sizeof(accepts));
    if (0 > asprintf(&desc, "%s%s%s%s. Accepted: %s. Same as the environment variable %s; "
                     "this parameter wins when both are set",
                     var->help, var->units && var->units[0] ? " (units: " : "",
                     var->units && var->units[0] ? var->units : "",
                     var->units && var->units[0] ? ")" : "", accepts, var->name))
        return NULL;
    return desc;
}

int mca_btl_railover_params_register(void)
{
    int count = rov_config_var_count();

    nparams = 0;
    if (count > PARAMS_MAX) {
        opal_output(0, "btl railover: Railover has %d settings, only the first %d become "
                    "MCA parameters (raise PARAMS_MAX)", count, PARAMS_MAX);
        count = PARAMS_MAX;
    }
    for (int i = 0; i < count; i++) {
        struct param *p = &params[nparams];
        char *desc;

        p->var = rov_config_var(i);
        if (NULL == p->var)
            continue;
        param_name(p->var, p->name, sizeof(p->name));
        desc = param_description(p->var);
        if (NULL == desc)
            return OPAL_ERR_OUT_OF_RESOURCE;
        /* The variable system copies the default and the description. */
        p->value = (char *) p->var->default_value;
        p->index = mca_base_component_var_register(
            &mca_btl_railover_component.super.btl_version, p->name, desc,
            MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, param_level(p->var),
            MCA_BASE_VAR_SCOPE_READONLY, &p->value);
        free(desc);
        if (p->index < 0)
            return p->index;
        nparams++;
    }
    return OPAL_SUCCESS;
}

static const char *source_name(mca_base_var_source_t source, const char *file, char *buf,
                               size_t len)
{
    switch (source) {
    case MCA_BASE_VAR_SOURCE_COMMAND_LINE:
        return "the command line";
    case MCA_BASE_VAR_SOURCE_ENV:
        return "the environment (OMPI_MCA_...)";
    case MCA_BASE_VAR_SOURCE_FILE:
        snprintf(buf, len, "the file %s", file ? file : "(unknown)");
        return buf;
    default:
        return "the MCA variable system";
    }
}

static int param_apply(rov_config_t *config, const struct param *p)
{
    const char **value = NULL;
    const char *file = NULL;
    mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;
    char err[512], accepts[160], where[256];
    rov_status_t st;

    if (OPAL_SUCCESS != mca_base_var_get_value(p->index, &value, &source, &file))
        return OPAL_ERROR;
    if (MCA_BASE_VAR_SOURCE_DEFAULT == source)
        return OPAL_SUCCESS;
    st = rov_config_set(config, p->var->name, value && *value ? *value : "", err, sizeof(err));
    if (ROV_OK == st)
        return OPAL_SUCCESS;
    mca_btl_railover_param_accepts(p->var, accepts, sizeof(accepts));
    mca_btl_railover_show_help("bad parameter", opal_process_info.nodename, p->name,
                               value && *value ? *value : "",
                               source_name(source, file, where, sizeof(where)), accepts,
                               ROV_ERR_INVAL == st ? err : rov_status_str(st));
    return OPAL_ERR_BAD_PARAM;
}

int mca_btl_railover_params_config(rov_config_t **config_p)
{
    rov_config_t *config;
    char err[512];
    int rc;

    if (ROV_OK != rov_config_read(err, sizeof(err), &config)) {
        mca_btl_railover_show_help("bad environment", opal_process_info.nodename, err);
        return OPAL_ERR_BAD_PARAM;
    }
    for (int i = 0; i < nparams; i++) {
        rc = param_apply(config, &params[i]);
        if (OPAL_SUCCESS != rc) {
            rov_config_free(config);
            return rc;
        }
    }
    *config_p = config;
    return OPAL_SUCCESS;
}

/* The smallest eager (and rendezvous eager) limit accepted: a fragment
 * must hold the PML's largest match header (ob1's is 56 bytes in Open MPI
 * 4.1) with room to spare. */
#define EAGER_MIN 64

/* Whether s is a size as Open MPI reads one (an unsigned integer, decimal,
 * 0x hex or 0 octal, with an optional k, m or g), the value in *v_p. */
static bool size_text(const char *s, unsigned long long *v_p)
{
    char *end;

    while (isspace((unsigned char) *s))
        s++;
    if (!isdigit((unsigned char) *s))
        return false;
    errno = 0;
    *v_p = strtoull(s, &end, 0);
    if (0 != errno || end == s)
        return false;
    if (*end && strchr("kKmMgG", *end))
        end++;
    while (isspace((unsigned char) *end))
        end++;
    return '\0' == *end;
}

/* One BTL size parameter the user set: its text is checked (Open MPI reads
 * "abc" as 0 and says nothing), then its value against min. */
static int check_size(const char *name, size_t value, size_t min, const char *accepts)
{
    int idx = mca_base_var_find("opal", "btl", "railover", name);
    mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;
    const char *file = NULL, *text;
    char env[96], where[256], number[32], problem[160];
    unsigned long long parsed;

    if (idx < 0 || OPAL_SUCCESS != mca_base_var_get_value(idx, NULL, &source, &file) ||
        MCA_BASE_VAR_SOURCE_DEFAULT == source)
        return OPAL_SUCCESS;
    /* mpirun --mca and OMPI_MCA_ reach a rank as the environment variable:
     * the text the user wrote. */
    snprintf(env, sizeof(env), "OMPI_MCA_btl_railover_%s", name);
    text = getenv(env);
    snprintf(number, sizeof(number), "%zu", value);
    if (NULL != text && !size_text(text, &parsed)) {
        snprintf(problem, sizeof(problem), "not a size (Open MPI would read it as %zu)", value);
    } else if (value < min) {
        snprintf(problem, sizeof(problem), "too small (%zu bytes): the PML's headers must "
                 "fit in a fragment", value);
    } else {
        return OPAL_SUCCESS;
    }
    mca_btl_railover_show_help("bad parameter", opal_process_info.nodename, name,
                               NULL != text ? text : number,
                               source_name(source, file, where, sizeof(where)), accepts,
                               problem);
    return OPAL_ERR_BAD_PARAM;
}

int mca_btl_railover_params_check_sizes(void)
{
    const mca_btl_base_module_t *m = &mca_btl_railover_module.super;
    char accepts[160];
    int rc;

    snprintf(accepts, sizeof(accepts), "a size in bytes of at least %d (suffix k, m or g for "
             "KiB, MiB, GiB), at most btl_railover_max_msg", EAGER_MIN);
    rc = check_size("eager_limit", m->btl_eager_limit, EAGER_MIN, accepts);
    if (OPAL_SUCCESS == rc)
        rc = check_size("rndv_eager_limit", m->btl_rndv_eager_limit, EAGER_MIN, accepts);
    if (OPAL_SUCCESS == rc) {
        snprintf(accepts, sizeof(accepts), "a size in bytes of at least %d (suffix k, m or g "
                 "for KiB, MiB, GiB), at most btl_railover_max_msg; below the eager limit it "
                 "is raised to it", EAGER_MIN);
        rc = check_size("max_send_size", m->btl_max_send_size, EAGER_MIN, accepts);
    }
    return rc;
}

/* Whether a RAILOVER_RAILS list ("kind[@arg],...") names the loop rail. */
static bool has_loop_rail(const char *rails)
{
    for (const char *r = rails; *r;) {
        if (4 == strcspn(r, "@,") && 0 == strncmp(r, "loop", 4))
            return true;
        r += strcspn(r, ",");
        if (',' == *r)
            r++;
    }
    return false;
}

int mca_btl_railover_params_check_rails(const rov_config_t *config)
{
    char rails[1024], where[256], problem[160];
    const struct param *p = NULL;
    const char **value = NULL, *file = NULL, *set_in;
    mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;

    if (ROV_OK != rov_config_get(config, "RAILOVER_RAILS", rails, sizeof(rails)) ||
        !has_loop_rail(rails))
        return OPAL_SUCCESS; /* (a bad list: the context refuses it, with its message) */
    for (int i = 0; i < nparams; i++)
        if (0 == strcmp(params[i].var->name, "RAILOVER_RAILS"))
            p = &params[i];
    if (NULL != p && OPAL_SUCCESS == mca_base_var_get_value(p->index, &value, &source, &file) &&
        MCA_BASE_VAR_SOURCE_DEFAULT != source)
        set_in = source_name(source, file, where, sizeof(where));
    else
        set_in = "the environment (RAILOVER_RAILS)";
    snprintf(problem, sizeof(problem), "the loop rail connects contexts of one process only; "
             "it cannot reach another MPI process");
    mca_btl_railover_show_help("bad parameter", opal_process_info.nodename, "rails", rails,
                               set_in, "rails that reach other processes: tcp[@IFACE|@IP], "
                               "verbs[@DEV], ucx[@DEV] (not loop)", problem);
    return OPAL_ERR_BAD_PARAM;
}
