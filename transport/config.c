#include "transport/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "transport/fault.h"
#include "transport/log.h"
#include "transport/netaddr.h"

#define KiB (1024ull)
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull

static void errf(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void errf(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;

    if (!err || !err_len)
        return;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* Parse the leading unsigned integer of s; *end_p is where it stopped. */
static rov_status_t parse_number(const char *s, uint64_t *out_p, const char **end_p,
                                 char *err, size_t err_len)
{
    char *end;
    unsigned long long v;

    if (!isdigit((unsigned char)*s)) {
        errf(err, err_len, "'%s' is not a non-negative integer", s);
        return ROV_ERR_INVAL;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno == ERANGE) {
        errf(err, err_len, "'%s' is out of range", s);
        return ROV_ERR_INVAL;
    }
    *out_p = v;
    *end_p = end;
    return ROV_OK;
}

static rov_status_t check_range(const char *s, uint64_t v, uint64_t min, uint64_t max,
                                char *err, size_t err_len)
{
    if (v < min || v > max) {
        errf(err, err_len, "'%s' is outside [%" PRIu64 ", %" PRIu64 "]", s, min, max);
        return ROV_ERR_INVAL;
    }
    return ROV_OK;
}

static rov_status_t scale(const char *s, uint64_t v, uint64_t mult, uint64_t *out_p,
                          char *err, size_t err_len)
{
    if (mult && v > UINT64_MAX / mult) {
        errf(err, err_len, "'%s' is out of range", s);
        return ROV_ERR_INVAL;
    }
    *out_p = v * mult;
    return ROV_OK;
}

rov_status_t rov_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out_p,
                           char *err, size_t err_len)
{
    const char *end;
    uint64_t v;

    if (parse_number(s, &v, &end, err, err_len))
        return ROV_ERR_INVAL;
    if (*end) {
        errf(err, err_len, "'%s' is not a non-negative integer", s);
        return ROV_ERR_INVAL;
    }
    if (check_range(s, v, min, max, err, err_len))
        return ROV_ERR_INVAL;
    *out_p = v;
    return ROV_OK;
}

struct unit {
    const char *suffix;
    uint64_t mult;
};

static rov_status_t parse_with_units(const char *s, const struct unit *units, int bare_ok,
                                     uint64_t min, uint64_t max, uint64_t *out_p,
                                     const char *what, char *err, size_t err_len)
{
    const char *end;
    uint64_t v, r;

    if (parse_number(s, &v, &end, err, err_len))
        return ROV_ERR_INVAL;
    if (*end == '\0' && bare_ok) {
        r = v;
    } else {
        const struct unit *u;

        for (u = units; u->suffix; u++)
            if (strcmp(end, u->suffix) == 0)
                break;
        if (!u->suffix) {
            errf(err, err_len, "'%s' is not a %s", s, what);
            return ROV_ERR_INVAL;
        }
        if (scale(s, v, u->mult, &r, err, err_len))
            return ROV_ERR_INVAL;
    }
    if (check_range(s, r, min, max, err, err_len))
        return ROV_ERR_INVAL;
    *out_p = r;
    return ROV_OK;
}

rov_status_t rov_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out_p,
                            char *err, size_t err_len)
{
    static const struct unit units[] = {
        {"k", KiB}, {"K", KiB}, {"KiB", KiB}, {"m", MiB}, {"M", MiB}, {"MiB", MiB},
        {"g", GiB}, {"G", GiB}, {"GiB", GiB}, {"B", 1},   {NULL, 0},
    };
    return parse_with_units(s, units, 1, min, max, out_p,
                            "size (bytes, or with k, M, G / KiB, MiB, GiB)", err, err_len);
}

rov_status_t rov_parse_duration(const char *s, uint64_t min_ns, uint64_t max_ns,
                                uint64_t *out_ns_p, char *err, size_t err_len)
{
    static const struct unit units[] = {
        {"ns", 1}, {"us", 1000}, {"ms", NS_PER_MS}, {"s", NS_PER_S}, {NULL, 0},
    };
    return parse_with_units(s, units, 0, min_ns, max_ns, out_ns_p,
                            "duration (a number with unit ns, us, ms or s, e.g. 250ms)", err,
                            err_len);
}

rov_status_t rov_parse_bool(const char *s, int *out_p, char *err, size_t err_len)
{
    static const char *const yes[] = {"on", "yes", "true", "1"};
    static const char *const no[] = {"off", "no", "false", "0"};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
            *out_p = strcasecmp(s, yes[i]) == 0;
            return ROV_OK;
        }
    }
    errf(err, err_len, "'%s' is not a boolean (on/off, yes/no, true/false, 1/0)", s);
    return ROV_ERR_INVAL;
}

static int valid_token(const char *s, size_t n, int allow_punct)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (!(isalnum(c) || c == '_' || (allow_punct && strchr("-.:/", c))))
            return 0;
    }
    return 1;
}

rov_status_t rov_parse_rails(const char *s, struct rov_rail_spec *rails, unsigned *nrails_p,
                             char *err, size_t err_len)
{
    unsigned n = 0;
    const char *p = s;

    if (!*s) {
        errf(err, err_len, "empty rail list");
        return ROV_ERR_INVAL;
    }
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *at = memchr(p, '@', len);
        size_t klen = at ? (size_t)(at - p) : len;
        size_t alen = at ? len - klen - 1 : 0;
        struct rov_rail_spec *r = &rails[n];
        const char *bad;

        if (n == ROV_MAX_RAILS) {
            errf(err, err_len, "more than %d rails", ROV_MAX_RAILS);
            return ROV_ERR_INVAL;
        }
        if (!valid_token(p, klen, 0) || klen >= sizeof(r->kind)) {
            errf(err, err_len, "rail '%.*s' is not of the form kind or kind@argument",
                 (int)len, p);
            return ROV_ERR_INVAL;
        }
        if (at && (!valid_token(at + 1, alen, 1) || alen >= sizeof(r->arg))) {
            errf(err, err_len, "rail '%.*s' has a bad argument after '@'", (int)len, p);
            return ROV_ERR_INVAL;
        }
        memcpy(r->kind, p, klen);
        r->kind[klen] = '\0';
        memcpy(r->arg, at ? at + 1 : "", alen);
        r->arg[alen] = '\0';
        if ((bad = rov_net_literal_unusable(r->arg)) != NULL) {
            errf(err, err_len, "rail '%.*s': %s is %s, which peers cannot connect to; name an "
                 "interface or one of its own addresses", (int)len, p, r->arg, bad);
            return ROV_ERR_INVAL;
        }
        snprintf(r->name, sizeof(r->name), "%s%s%s", r->kind, alen ? "@" : "", r->arg);
        for (unsigned i = 0; i < n; i++) {
            if (strcmp(rails[i].name, r->name) == 0) {
                errf(err, err_len, "rail '%s' is listed twice", r->name);
                return ROV_ERR_INVAL;
            }
        }
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    *nrails_p = n;
    return ROV_OK;
}

void rov_config_defaults(struct rov_config *c)
{
    memset(c, 0, sizeof(*c));
    rov_parse_rails("tcp", c->rails, &c->nrails, NULL, 0);
    c->log_level = ROV_LOG_WARN;
    c->window_msgs = 8192;
    c->window_bytes = 16 * MiB;
    c->window_total = 256 * MiB;
    c->window_time_ns = 20 * NS_PER_MS;
    c->eager_limit = 8 * KiB;
    c->max_msg = 64 * MiB;
    c->reorder_msgs = 256;
    c->reorder_bytes = 4 * MiB;
    c->ack_delay_ns = 200 * 1000;
    c->spin_ns = 50 * 1000;
    c->tcp_rxbuf = 256 * KiB;
    c->failover = 1;
    c->failover_timeout_ns = 1 * NS_PER_S;
    c->keepalive_ns = 1 * NS_PER_S;
    c->failback = 1;
    c->failback_dwell_ns = 2 * NS_PER_S;
    c->failback_retry_ns = 50 * NS_PER_MS;
    c->failback_retry_max_ns = 5 * NS_PER_S;
    c->unreachable_timeout_ns = 60 * NS_PER_S;
    c->control = 1;
    c->verbs_cm = ROV_VERBS_CM_OOB;
    c->verbs_gid_index = -1;
    c->verbs_timeout = 14;
    c->verbs_retry = 6;
    /* Room for 8 KiB of payload with the wire header and an embedder's
     * (ob1's match header): an 8 KiB MPI message is one SEND, as with UCX
     * (an RTS/CTS round trip cost it 1.6x pml ucx's time).  A multiple of
     * the page: with 8 KiB + 64 (UCX's RC segment) the slots drift across
     * page boundaries, and 1 KiB messages took 1.09x as long on rxe
     * (bench/README.md). */
    c->verbs_eager = 12 * KiB;
    c->verbs_recv = 64;
    c->verbs_regcache = 256 * MiB;
}

enum var_type {
    V_RAILS, V_IFNAME, V_LOG, V_COUNT, V_SIZE, V_DURATION, V_BOOL, V_FAULT, V_PATH,
    V_DEVLIST, V_CHOICE, V_INDEX
};

struct var {
    const char *name;
    enum var_type type;
    size_t offset;
    uint64_t min, max;
    const char *help;
};

#define OFF(f) offsetof(struct rov_config, f)

static const struct var vars[] = {
    {"RAILOVER_RAILS", V_RAILS, OFF(rails), 0, 0,
     "rails in order of preference: kind[@arg],... (tcp@IFACE)"},
    {"RAILOVER_TCP_IF", V_IFNAME, OFF(tcp_if), 0, 0,
     "interface of tcp rails without @IFACE (empty: first non-loopback)"},
    {"RAILOVER_LOG", V_LOG, OFF(log_level), 0, 0, "error, warn, info, debug or trace"},
    {"RAILOVER_WINDOW_MSGS", V_COUNT, OFF(window_msgs), 1, 1u << 20,
     "unacknowledged messages per connection"},
    {"RAILOVER_WINDOW_BYTES", V_SIZE, OFF(window_bytes), 4 * KiB, 64 * GiB,
     "unacknowledged bytes per connection"},
    {"RAILOVER_WINDOW_TOTAL", V_SIZE, OFF(window_total), 64 * KiB, 1024 * GiB,
     "unacknowledged bytes of all connections together (one message always fits an "
     "empty connection)"},
    {"RAILOVER_WINDOW_TIME", V_DURATION, OFF(window_time_ns), 0, 3600 * NS_PER_S,
     "unacknowledged bytes of all connections together, in time: what the peers "
     "acknowledge in this long at their recent rate (at least 1 MiB, at most "
     "RAILOVER_WINDOW_TOTAL; 0s: RAILOVER_WINDOW_TOTAL alone); bounds how long a "
     "failover's control frames wait behind data"},
    {"RAILOVER_EAGER_LIMIT", V_SIZE, OFF(eager_limit), 0, 1 * MiB,
     "largest message copied at send; larger ones are zero-copy"},
    {"RAILOVER_MAX_MSG", V_SIZE, OFF(max_msg), 1 * KiB, 1 * GiB,
     "largest message; larger frames from a peer are a protocol error"},
    {"RAILOVER_REORDER_MSGS", V_COUNT, OFF(reorder_msgs), 1, 1u << 16,
     "early arrivals buffered per connection"},
    {"RAILOVER_REORDER_BYTES", V_SIZE, OFF(reorder_bytes), 0, 64 * GiB,
     "bytes of early arrivals buffered per connection; beyond, they are dropped and "
     "asked for again"},
    {"RAILOVER_ACK_DELAY", V_DURATION, OFF(ack_delay_ns), 1000, 1000 * NS_PER_MS,
     "longest wait before a stand-alone acknowledgement"},
    {"RAILOVER_SPIN", V_DURATION, OFF(spin_ns), 0, NS_PER_S,
     "rov_context_wait() polls this long before it sleeps (0s: sleeps at once)"},
    {"RAILOVER_TCP_RXBUF", V_SIZE, OFF(tcp_rxbuf), 4 * KiB, 64 * MiB,
     "receive staging buffer per tcp channel"},
    {"RAILOVER_FAILOVER", V_BOOL, OFF(failover), 0, 0,
     "move a connection to the next rail when its rail fails (on/off)"},
    {"RAILOVER_FAILOVER_TIMEOUT", V_DURATION, OFF(failover_timeout_ns), 10 * NS_PER_MS,
     3600 * NS_PER_S, "work on a rail with no rail-level completion this long is a failure"},
    {"RAILOVER_CONNECT_TIMEOUT", V_DURATION, OFF(connect_timeout_ns), 0, 3600 * NS_PER_S,
     "a connection's first connect on a rail may take this long (0s: RAILOVER_FAILOVER_TIMEOUT)"},
    {"RAILOVER_KEEPALIVE", V_DURATION, OFF(keepalive_ns), 0, 3600 * NS_PER_S,
     "probe a channel that sent nothing this long (0s: never)"},
    {"RAILOVER_FAILBACK", V_BOOL, OFF(failback), 0, 0,
     "move back to a preferred rail once it has healed (on/off)"},
    {"RAILOVER_FAILBACK_DWELL", V_DURATION, OFF(failback_dwell_ns), 0, 3600 * NS_PER_S,
     "a healed rail must stay healthy this long before traffic moves back"},
    {"RAILOVER_FAILBACK_RETRY", V_DURATION, OFF(failback_retry_ns), 1 * NS_PER_MS,
     3600 * NS_PER_S, "first retry of a failed rail after this; the wait doubles per failure"},
    {"RAILOVER_FAILBACK_RETRY_MAX", V_DURATION, OFF(failback_retry_max_ns), 1 * NS_PER_MS,
     3600 * NS_PER_S, "longest wait between retries of a failed rail"},
    {"RAILOVER_UNREACHABLE_TIMEOUT", V_DURATION, OFF(unreachable_timeout_ns), 0,
     7 * 24 * 3600 * NS_PER_S,
     "a connection none of whose rails has worked for this long fails as unreachable "
     "(0s: it reconnects for ever)"},
    {"RAILOVER_FAULT", V_FAULT, OFF(fault), 0, 0,
     "fault injection for tests: rail=N,mode=error|silent,after=N[,every=N][,seed=N] "
     "or at=close|last-close|close-answer instead of after="},
    {"RAILOVER_VERBS_DEV", V_DEVLIST, OFF(verbs_dev), 0, 0,
     "RDMA devices of verbs rails without @DEV: dev[:port],... first active wins (empty: any)"},
    {"RAILOVER_VERBS_CM", V_CHOICE, OFF(verbs_cm), 0, 0,
     "how verbs QPs are connected: oob (TCP handshake, checkpointable) or rdmacm"},
    {"RAILOVER_VERBS_GID_INDEX", V_INDEX, OFF(verbs_gid_index), 0, 255,
     "GID table index (auto: RoCE v2 with an IPv4 address first)"},
    {"RAILOVER_VERBS_TIMEOUT", V_COUNT, OFF(verbs_timeout), 1, 31,
     "RC ACK timeout exponent, 4.096us*2^N (14 = 67ms; lower gives false alarms on Soft-RoCE)"},
    {"RAILOVER_VERBS_RETRY", V_COUNT, OFF(verbs_retry), 1, 7,
     "RC retry count; a dead path errors after about (N+1)*timeout (7 = retry forever on rxe)"},
    {"RAILOVER_VERBS_EAGER", V_SIZE, OFF(verbs_eager), 1 * KiB, 1 * MiB,
     "receive buffer size; larger frames are RDMA-written into a staging buffer of the receiver"},
    {"RAILOVER_VERBS_RECV", V_COUNT, OFF(verbs_recv), 4, 4096,
     "pre-posted receive buffers (send credits) per verbs channel"},
    {"RAILOVER_VERBS_REGCACHE", V_SIZE, OFF(verbs_regcache), 0, 1024 * GiB,
     "memory registrations kept for reuse after use, while their memory stays "
     "mapped (0: register per message)"},
    {"RAILOVER_CONTROL", V_BOOL, OFF(control), 0, 0,
     "serve the per-process control socket (railover status/force/release)"},
    {"RAILOVER_RUN_DIR", V_PATH, OFF(run_dir), 0, 0,
     "directory of control sockets (empty: $XDG_RUNTIME_DIR/railover or /tmp/railover-UID)"},
};

/* The words a V_CHOICE variable accepts, stored as their index. */
static const char *choices(const struct var *v)
{
    return v->offset == OFF(verbs_cm) ? "oob|rdmacm" : "";
}

static rov_status_t set_var(struct rov_config *c, const struct var *v, const char *value,
                            char *err, size_t err_len)
{
    char why[256] = "";
    void *field = (char *)c + v->offset;
    rov_status_t st = ROV_OK;
    const char *bad;

    switch (v->type) {
    case V_RAILS: {
        struct rov_rail_spec rails[ROV_MAX_RAILS];
        unsigned n;

        memset(rails, 0, sizeof(rails));
        st = rov_parse_rails(value, rails, &n, why, sizeof(why));
        if (st == ROV_OK) {
            memcpy(c->rails, rails, sizeof(rails));
            c->nrails = n;
        }
        break;
    }
    case V_IFNAME:
        if (*value && (!valid_token(value, strlen(value), 1) ||
                       strlen(value) >= ROV_RAIL_ARG_MAX)) {
            snprintf(why, sizeof(why), "'%s' is not an interface name", value);
            st = ROV_ERR_INVAL;
        } else if ((bad = rov_net_literal_unusable(value)) != NULL) {
            snprintf(why, sizeof(why), "'%s' is %s, which peers cannot connect to", value, bad);
            st = ROV_ERR_INVAL;
        } else {
            snprintf(field, ROV_RAIL_ARG_MAX, "%s", value);
        }
        break;
    case V_LOG: {
        int level = rov_log_level_parse(value);

        if (level < 0) {
            snprintf(why, sizeof(why), "'%s' is not a log level", value);
            st = ROV_ERR_INVAL;
        } else {
            *(int *)field = level;
        }
        break;
    }
    case V_COUNT:
        st = rov_parse_u64(value, v->min, v->max, field, why, sizeof(why));
        break;
    case V_SIZE:
        st = rov_parse_size(value, v->min, v->max, field, why, sizeof(why));
        break;
    case V_DURATION:
        st = rov_parse_duration(value, v->min, v->max, field, why, sizeof(why));
        break;
    case V_BOOL:
        st = rov_parse_bool(value, field, why, sizeof(why));
        break;
    case V_FAULT:
        st = rov_fault_parse(value, NULL, why, sizeof(why));
        if (st == ROV_OK && strlen(value) >= sizeof(c->fault)) {
            snprintf(why, sizeof(why), "longer than %zu characters", sizeof(c->fault) - 1);
            st = ROV_ERR_INVAL;
        }
        if (st == ROV_OK)
            snprintf(field, sizeof(c->fault), "%s", value);
        break;
    case V_DEVLIST:
        if (strlen(value) >= sizeof(c->verbs_dev) ||
            strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:,") !=
                strlen(value)) {
            snprintf(why, sizeof(why), "not a list of device[:port] names");
            st = ROV_ERR_INVAL;
        } else {
            snprintf(field, sizeof(c->verbs_dev), "%s", value);
        }
        break;
    case V_CHOICE: {
        const char *p = choices(v);
        int i = 0;
        size_t n = strlen(value);

        st = ROV_ERR_INVAL;
        while (p && *p) {
            size_t w = strcspn(p, "|");

            if (n && w == n && strncmp(p, value, n) == 0) {
                *(int *)field = i;
                st = ROV_OK;
                break;
            }
            p += w + (p[w] == '|');
            i++;
        }
        if (st != ROV_OK)
            snprintf(why, sizeof(why), "not one of %s", choices(v));
        break;
    }
    case V_INDEX: {
        uint64_t u;

        if (strcmp(value, "auto") == 0) {
            *(int *)field = -1;
        } else {
            st = rov_parse_u64(value, v->min, v->max, &u, why, sizeof(why));
            if (st == ROV_OK)
                *(int *)field = (int)u;
        }
        break;
    }
    case V_PATH:
        if (*value && (value[0] != '/' || strlen(value) >= sizeof(c->run_dir) - 32)) {
            snprintf(why, sizeof(why), "not an absolute path shorter than %zu characters",
                     sizeof(c->run_dir) - 32);
            st = ROV_ERR_INVAL;
        } else {
            snprintf(field, sizeof(c->run_dir), "%s", value);
        }
        break;
    }
    if (st != ROV_OK)
        errf(err, err_len, "%s='%s': %s (%s)", v->name, value, why, v->help);
    return st;
}

static rov_status_t check_consistency(const struct rov_config *c, char *err, size_t err_len)
{
    if (c->failback_retry_ns > c->failback_retry_max_ns) {
        errf(err, err_len, "RAILOVER_FAILBACK_RETRY exceeds RAILOVER_FAILBACK_RETRY_MAX");
        return ROV_ERR_INVAL;
    }
    if (c->eager_limit > c->max_msg) {
        errf(err, err_len, "RAILOVER_EAGER_LIMIT (%" PRIu64 ") exceeds RAILOVER_MAX_MSG (%" PRIu64
             ")", c->eager_limit, c->max_msg);
        return ROV_ERR_INVAL;
    }
    return ROV_OK;
}

rov_status_t rov_config_set(rov_config_t *config, const char *name, const char *value,
                            char *err_buf, size_t err_len)
{
    struct rov_config tmp = *config;

    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        if (strcmp(vars[i].name, name) != 0)
            continue;
        if (set_var(&tmp, &vars[i], value, err_buf, err_len) ||
            check_consistency(&tmp, err_buf, err_len))
            return ROV_ERR_INVAL;
        *config = tmp;
        return ROV_OK;
    }
    errf(err_buf, err_len, "unknown configuration variable %s", name);
    return ROV_ERR_NOT_FOUND;
}

rov_status_t rov_config_read(char *err_buf, size_t err_len, rov_config_t **config_p)
{
    char err[512];
    struct rov_config *c = malloc(sizeof(*c));

    if (!c)
        return ROV_ERR_NOMEM;
    rov_config_defaults(c);
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *value = getenv(vars[i].name);

        if (value && set_var(c, &vars[i], value, err, sizeof(err)))
            goto bad;
    }
    if (check_consistency(c, err, sizeof(err)))
        goto bad;
    *config_p = c;
    return ROV_OK;
bad:
    rov_error("config", "%s", err);
    errf(err_buf, err_len, "%s", err);
    free(c);
    return ROV_ERR_INVAL;
}

static void print_value(const struct rov_config *c, const struct var *v, FILE *f)
{
    const void *field = (const char *)c + v->offset;

    switch (v->type) {
    case V_RAILS:
        for (unsigned i = 0; i < c->nrails; i++)
            fprintf(f, "%s%s", i ? "," : "", c->rails[i].name);
        break;
    case V_IFNAME:
    case V_FAULT:
    case V_PATH:
    case V_DEVLIST:
        fputs(field, f);
        break;
    case V_CHOICE: {
        const char *p = choices(v);

        for (int i = *(const int *)field; i > 0 && p; i--)
            p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL;
        if (p)
            fprintf(f, "%.*s", (int)strcspn(p, "|"), p);
        break;
    }
    case V_INDEX:
        if (*(const int *)field < 0)
            fputs("auto", f);
        else
            fprintf(f, "%d", *(const int *)field);
        break;
    case V_BOOL:
        fputs(*(const int *)field ? "on" : "off", f);
        break;
    case V_LOG:
        fputs(rov_log_level_name(*(const int *)field), f);
        break;
    case V_COUNT:
    case V_SIZE:
        fprintf(f, "%" PRIu64, *(const uint64_t *)field);
        break;
    case V_DURATION: {
        uint64_t ns = *(const uint64_t *)field;

        if (ns && ns % NS_PER_S == 0)
            fprintf(f, "%" PRIu64 "s", ns / (uint64_t)NS_PER_S);
        else if (ns % NS_PER_MS == 0)
            fprintf(f, "%" PRIu64 "ms", ns / (uint64_t)NS_PER_MS);
        else if (ns % 1000 == 0)
            fprintf(f, "%" PRIu64 "us", ns / 1000);
        else
            fprintf(f, "%" PRIu64 "ns", ns);
        break;
    }
    }
}

void rov_config_print(const rov_config_t *config, FILE *f)
{
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        fprintf(f, "%s=", vars[i].name);
        print_value(config, &vars[i], f);
        fprintf(f, "  # %s\n", vars[i].help);
    }
}

/* Enumeration ---------------------------------------------------------------- */

#define NVARS (sizeof(vars) / sizeof(vars[0]))
#define DEFAULT_TEXT_MAX 256

/* A value's text into buf: ROV_ERR_MSGSIZE when it does not fit. */
static rov_status_t format_value(const struct rov_config *c, const struct var *v, char *buf,
                                 size_t len)
{
    FILE *f;
    long n;

    if (len == 0)
        return ROV_ERR_MSGSIZE;
    memset(buf, 0, len);
    f = fmemopen(buf, len, "w");
    if (!f)
        return ROV_ERR_NOMEM;
    setvbuf(f, NULL, _IONBF, 0);
    print_value(c, v, f);
    n = ftell(f);
    fclose(f);
    buf[len - 1] = '\0';
    return n >= 0 && (size_t)n < len ? ROV_OK : ROV_ERR_MSGSIZE;
}

static const struct {
    rov_config_type_t type;
    const char *units;
} public_type[] = {
    [V_RAILS] = {ROV_CONFIG_STRING, ""},          [V_IFNAME] = {ROV_CONFIG_STRING, ""},
    [V_LOG] = {ROV_CONFIG_CHOICE, ""},            [V_COUNT] = {ROV_CONFIG_COUNT, "count"},
    [V_SIZE] = {ROV_CONFIG_SIZE, "bytes"},        [V_DURATION] = {ROV_CONFIG_DURATION, "time"},
    [V_BOOL] = {ROV_CONFIG_BOOL, ""},             [V_FAULT] = {ROV_CONFIG_STRING, ""},
    [V_PATH] = {ROV_CONFIG_STRING, "path"},       [V_DEVLIST] = {ROV_CONFIG_STRING, ""},
    [V_CHOICE] = {ROV_CONFIG_CHOICE, ""},         [V_INDEX] = {ROV_CONFIG_COUNT, "index"},
};

static rov_config_var_t public_vars[NVARS];
static char default_text[NVARS][DEFAULT_TEXT_MAX];
static pthread_once_t public_once = PTHREAD_ONCE_INIT;

static void public_init(void)
{
    struct rov_config d;

    rov_config_defaults(&d);
    for (size_t i = 0; i < NVARS; i++) {
        const struct var *v = &vars[i];
        rov_config_var_t *p = &public_vars[i];

        format_value(&d, v, default_text[i], sizeof(default_text[i]));
        p->name = v->name;
        p->type = public_type[v->type].type;
        p->default_value = default_text[i];
        p->help = v->help;
        p->units = public_type[v->type].units;
        /* Words accepted instead of a number, or the only words accepted. */
        p->choices = v->type == V_LOG     ? "error|warn|info|debug|trace" :
                     v->type == V_CHOICE  ? choices(v) :
                     v->type == V_INDEX   ? "auto" : "";
        if (v->type == V_COUNT || v->type == V_SIZE || v->type == V_DURATION ||
            v->type == V_INDEX) {
            p->min = v->min;
            p->max = v->max;
        }
    }
}

int rov_config_var_count(void)
{
    return (int)NVARS;
}

const rov_config_var_t *rov_config_var(int index)
{
    if (index < 0 || (size_t)index >= NVARS)
        return NULL;
    pthread_once(&public_once, public_init);
    return &public_vars[index];
}

rov_status_t rov_config_get(const rov_config_t *config, const char *name, char *buf, size_t len)
{
    for (size_t i = 0; i < NVARS; i++)
        if (strcmp(vars[i].name, name) == 0)
            return format_value(config, &vars[i], buf, len);
    return ROV_ERR_NOT_FOUND;
}

void rov_config_free(rov_config_t *config)
{
    free(config);
}
