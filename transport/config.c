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

bool rov_jobid_ok(const char *id)
{
    size_t n = strlen(id);

    if (n == 0 || n > ROV_JOB_MAX || id[0] == '.')
        return false;
    for (const char *p = id; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            return false;
    return true;
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

/* The transport's table ------------------------------------------------------ */

static void transport_defaults(void *block)
{
    struct rov_config *c = block;

    rov_parse_rails("tcp", c->rails, &c->nrails, NULL, 0);
    rov_log_levels_init(&c->log, ROV_LOG_WARN);
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
    c->bond = 0;
    c->bond_min = 64 * KiB;
    c->failover = 1;
    c->failover_timeout_ns = 1 * NS_PER_S;
    c->keepalive_ns = 1 * NS_PER_S;
    c->unreachable_timeout_ns = 60 * NS_PER_S;
    c->control = 1;
    c->progress_thread = 1;
    c->rank = -1;
}

static rov_status_t transport_check(const void *block, char *err, size_t err_len)
{
    const struct rov_config *c = block;

    if (c->eager_limit > c->max_msg) {
        errf(err, err_len, "RAILOVER_EAGER_LIMIT (%" PRIu64 ") exceeds RAILOVER_MAX_MSG (%" PRIu64
             ")", c->eager_limit, c->max_msg);
        return ROV_ERR_INVAL;
    }
    return ROV_OK;
}

#define OFF(f) offsetof(struct rov_config, f)
#define LEN(f) sizeof(((struct rov_config *)0)->f)

static const struct rov_var transport_vars[] = {
    {"RAILOVER_RAILS", ROV_VAR_RAILS, OFF(rails), 0, 0, 0, NULL,
     "rails in order of preference: kind[@arg],... (tcp@eth0, tcp@192.0.2.1: an address of "
     "this host's; 0.0.0.0, ::, broadcast and multicast addresses are refused)"},
    {"RAILOVER_TCP_IF", ROV_VAR_IFNAME, OFF(tcp_if), LEN(tcp_if), 0, 0, NULL,
     "interface of tcp and ucx rails without @IFACE (empty: first non-loopback)"},
    {"RAILOVER_LOG", ROV_VAR_LOG, OFF(log), 0, 0, 0, NULL,
     "log level (error, warn, info, debug or trace) of every subsystem, then "
     "subsystem=level for some: warn,verbs=debug,failover=info"},
    {"RAILOVER_WINDOW_MSGS", ROV_VAR_COUNT, OFF(window_msgs), 0, 1, 1u << 20, NULL,
     "unacknowledged messages per connection"},
    {"RAILOVER_WINDOW_BYTES", ROV_VAR_SIZE, OFF(window_bytes), 0, 4 * KiB, 64 * GiB, NULL,
     "unacknowledged bytes per connection"},
    {"RAILOVER_WINDOW_TOTAL", ROV_VAR_SIZE, OFF(window_total), 0, 64 * KiB, 1024 * GiB, NULL,
     "unacknowledged bytes of all connections together (one message always fits an "
     "empty connection)"},
    {"RAILOVER_WINDOW_TIME", ROV_VAR_DURATION, OFF(window_time_ns), 0, 0, 3600 * NS_PER_S, NULL,
     "unacknowledged bytes of all connections together, in time: what the peers "
     "acknowledge in this long at their recent rate (at least 1 MiB, at most "
     "RAILOVER_WINDOW_TOTAL; 0s: RAILOVER_WINDOW_TOTAL alone); bounds how long a "
     "failover's control frames wait behind data"},
    {"RAILOVER_EAGER_LIMIT", ROV_VAR_SIZE, OFF(eager_limit), 0, 0, 1 * MiB, NULL,
     "largest message copied at send; larger ones are zero-copy"},
    {"RAILOVER_MAX_MSG", ROV_VAR_SIZE, OFF(max_msg), 0, 1 * KiB, 1 * GiB, NULL,
     "largest message; larger frames from a peer are a protocol error"},
    {"RAILOVER_REORDER_MSGS", ROV_VAR_COUNT, OFF(reorder_msgs), 0, 1, 1u << 16, NULL,
     "early arrivals buffered per connection"},
    {"RAILOVER_REORDER_BYTES", ROV_VAR_SIZE, OFF(reorder_bytes), 0, 0, 64 * GiB, NULL,
     "bytes of early arrivals buffered per connection; beyond, they are dropped and "
     "asked for again (0: none buffered)"},
    {"RAILOVER_ACK_DELAY", ROV_VAR_DURATION, OFF(ack_delay_ns), 0, 1000, 1000 * NS_PER_MS, NULL,
     "longest wait before a stand-alone acknowledgement"},
    {"RAILOVER_SPIN", ROV_VAR_DURATION, OFF(spin_ns), 0, 0, NS_PER_S, NULL,
     "rov_context_wait() polls this long before it sleeps (0s: sleeps at once)"},
    {"RAILOVER_BOND", ROV_VAR_BOOL, OFF(bond), 0, 0, 0, NULL,
     "spread a connection's large messages over every healthy rail, in proportion to "
     "what each delivers (on/off)"},
    {"RAILOVER_BOND_MIN", ROV_VAR_SIZE, OFF(bond_min), 0, 1 * KiB, 1 * GiB, NULL,
     "smallest message a bond spreads; smaller ones stay on the preferred rail"},
    {"RAILOVER_FAILOVER", ROV_VAR_BOOL, OFF(failover), 0, 0, 0, NULL,
     "move a connection to the next rail when its rail fails (on/off)"},
    {"RAILOVER_FAILOVER_TIMEOUT", ROV_VAR_DURATION, OFF(failover_timeout_ns), 0, 10 * NS_PER_MS,
     3600 * NS_PER_S, NULL, "work on a rail with no rail-level completion this long is a failure"},
    {"RAILOVER_CONNECT_TIMEOUT", ROV_VAR_DURATION, OFF(connect_timeout_ns), 0, 0,
     3600 * NS_PER_S, NULL,
     "a connection's first connect on a rail may take this long before the next rail is "
     "tried (0s: RAILOVER_FAILOVER_TIMEOUT; longer for wire-up storms at scale)"},
    {"RAILOVER_KEEPALIVE", ROV_VAR_DURATION, OFF(keepalive_ns), 0, 0, 3600 * NS_PER_S, NULL,
     "probe a channel that sent nothing this long (0s: never)"},
    {"RAILOVER_UNREACHABLE_TIMEOUT", ROV_VAR_DURATION, OFF(unreachable_timeout_ns), 0, 0,
     7 * 24 * 3600 * NS_PER_S, NULL,
     "a connection none of whose rails has worked for this long fails as unreachable, "
     "ROV_ERR_UNREACHABLE (0s: it reconnects for ever)"},
    {"RAILOVER_FAULT", ROV_VAR_FAULT, OFF(fault), LEN(fault), 0, 0, NULL,
     "fault injection for tests: rail=N,mode=error|silent,after=N[,every=N][,seed=N] "
     "or at=close|last-close|close-answer instead of after=, or at=read,after=N (as the "
     "Nth read completes), or mode=error,at=register,after=N (the Nth registration fails)"},
    {"RAILOVER_CONTROL", ROV_VAR_BOOL, OFF(control), 0, 0, 0, NULL,
     "serve the per-process control socket (railover status/force/release)"},
    {"RAILOVER_PROGRESS_THREAD", ROV_VAR_BOOL, OFF(progress_thread), 0, 0, 0, NULL,
     "a helper thread answers control requests and completes checkpoint stages while the "
     "application computes without calling the library (off: only its progress calls do; no "
     "lock, no thread)"},
    {"RAILOVER_RUN_DIR", ROV_VAR_PATH, OFF(run_dir), LEN(run_dir), 0, 0, NULL,
     "directory of control sockets, owner-only (empty: $XDG_RUNTIME_DIR/railover or "
     "/tmp/railover-UID)"},
    {"RAILOVER_JOBID", ROV_VAR_JOBID, OFF(jobid), LEN(jobid), 0, 0, NULL,
     "the job this process belongs to, naming its entry in the job registry (empty: a fresh "
     "UUID; under Open MPI: ompi-<job id>)"},
    {"RAILOVER_RANK", ROV_VAR_RANK, OFF(rank), 0, 0, INT32_MAX, NULL,
     "this process's rank in its job (empty: the pid; under Open MPI: the MPI rank, whatever "
     "this says)"},
};

/* The transport's block is the configuration itself (offset 0); the other
 * layers' blocks sit in its blocks[] area. */
static struct rov_settings transport_settings = {
    .layer = "transport",
    .vars = transport_vars,
    .nvars = sizeof(transport_vars) / sizeof(transport_vars[0]),
    .size = offsetof(struct rov_config, blocks),
    .defaults = transport_defaults,
    .check = transport_check,
    .offset = 0,
};

/* Registry of tables ---------------------------------------------------------- */

#define MAX_TABLES 16
#define MAX_VARS 128

/* tables[0] is the transport's; the others follow by layer name.  Written
 * only from constructors (registration), read afterwards. */
static struct rov_settings *tables[MAX_TABLES] = {&transport_settings};
static size_t ntables = 1;
static size_t nvars_all = sizeof(transport_vars) / sizeof(transport_vars[0]);
static size_t blocks_used;

static const struct rov_var *var_find(const char *name, const struct rov_settings **t_p);

void rov_settings_register(struct rov_settings *s)
{
    size_t off = (blocks_used + 15) & ~(size_t)15, i;

    for (i = 0; i < ntables; i++)
        if (tables[i] == s)
            return;
    for (i = 0; i < s->nvars; i++)
        if (strncmp(s->vars[i].name, "RAILOVER_", 9) != 0 || var_find(s->vars[i].name, NULL))
            break;
    if (ntables == MAX_TABLES || nvars_all + s->nvars > MAX_VARS || i < s->nvars ||
        !s->defaults || off + s->size > ROV_SETTINGS_BLOCKS_MAX) {
        /* A bug in the layer, found at load, before any configuration. */
        fprintf(stderr, "railover: cannot register the settings of '%s' (a name without "
                "RAILOVER_ or taken, no defaults, or more than the room for settings)\n", s->layer);
        abort();
    }
    s->offset = offsetof(struct rov_config, blocks) + off;
    blocks_used = off + s->size;
    nvars_all += s->nvars;
    for (i = ntables++; i > 1 && strcmp(tables[i - 1]->layer, s->layer) > 0; i--)
        tables[i] = tables[i - 1];
    tables[i] = s;
}

const void *rov_settings_of(const struct rov_config *config, const struct rov_settings *s)
{
    return (const char *)config + s->offset;
}

static void *field_of(struct rov_config *c, const struct rov_settings *t, const struct rov_var *v)
{
    return (char *)c + t->offset + v->offset;
}

/* The variable called name, and its table. */
static const struct rov_var *var_find(const char *name, const struct rov_settings **t_p)
{
    for (size_t i = 0; i < ntables; i++) {
        for (size_t k = 0; k < tables[i]->nvars; k++) {
            if (strcmp(tables[i]->vars[k].name, name) == 0) {
                if (t_p)
                    *t_p = tables[i];
                return &tables[i]->vars[k];
            }
        }
    }
    return NULL;
}

/* The index-th variable over all tables, in order, and its table. */
static const struct rov_var *var_at(size_t index, const struct rov_settings **t_p)
{
    for (size_t i = 0; i < ntables; i++) {
        if (index < tables[i]->nvars) {
            *t_p = tables[i];
            return &tables[i]->vars[index];
        }
        index -= tables[i]->nvars;
    }
    return NULL;
}

void rov_config_defaults(struct rov_config *c)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < ntables; i++)
        tables[i]->defaults((char *)c + tables[i]->offset);
}

/* Values ---------------------------------------------------------------------- */

static rov_status_t set_var(struct rov_config *c, const struct rov_settings *t,
                            const struct rov_var *v, const char *value, char *err,
                            size_t err_len)
{
    char why[256] = "";
    void *field = field_of(c, t, v);
    rov_status_t st = ROV_OK;
    const char *bad;

    switch (v->type) {
    case ROV_VAR_RAILS: {
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
    case ROV_VAR_IFNAME:
        if (*value && (!valid_token(value, strlen(value), 1) || strlen(value) >= v->len)) {
            snprintf(why, sizeof(why), "'%s' is not an interface name", value);
            st = ROV_ERR_INVAL;
        } else if ((bad = rov_net_literal_unusable(value)) != NULL) {
            snprintf(why, sizeof(why), "'%s' is %s, which peers cannot connect to", value, bad);
            st = ROV_ERR_INVAL;
        } else {
            snprintf(field, v->len, "%s", value);
        }
        break;
    case ROV_VAR_LOG:
        st = rov_log_levels_parse(value, field, why, sizeof(why));
        break;
    case ROV_VAR_COUNT:
        st = rov_parse_u64(value, v->min, v->max, field, why, sizeof(why));
        break;
    case ROV_VAR_SIZE:
        st = rov_parse_size(value, v->min, v->max, field, why, sizeof(why));
        break;
    case ROV_VAR_DURATION:
        st = rov_parse_duration(value, v->min, v->max, field, why, sizeof(why));
        break;
    case ROV_VAR_BOOL:
        st = rov_parse_bool(value, field, why, sizeof(why));
        break;
    case ROV_VAR_FAULT:
        st = rov_fault_parse(value, NULL, why, sizeof(why));
        if (st == ROV_OK && strlen(value) >= v->len) {
            snprintf(why, sizeof(why), "longer than %zu characters", v->len - 1);
            st = ROV_ERR_INVAL;
        }
        if (st == ROV_OK)
            snprintf(field, v->len, "%s", value);
        break;
    case ROV_VAR_DEVLIST:
        if (strlen(value) >= v->len ||
            strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:,") !=
                strlen(value)) {
            snprintf(why, sizeof(why), "not a list of device[:port] names");
            st = ROV_ERR_INVAL;
        } else {
            snprintf(field, v->len, "%s", value);
        }
        break;
    case ROV_VAR_CHOICE: {
        const char *p = v->choices;
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
            snprintf(why, sizeof(why), "not one of %s", v->choices);
        break;
    }
    case ROV_VAR_INDEX: {
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
    case ROV_VAR_STRING: {
        const char *p = value;

        while (*p && *p >= ' ' && *p != 0x7f)
            p++;
        if (*p || strlen(value) >= v->len) {
            snprintf(why, sizeof(why), "not printable text shorter than %zu characters",
                     v->len);
            st = ROV_ERR_INVAL;
        } else {
            snprintf(field, v->len, "%s", value);
        }
        break;
    }
    case ROV_VAR_JOBID:
        if (*value && !rov_jobid_ok(value)) {
            snprintf(why, sizeof(why), "'%.80s%s' is not a job id: 1 to %d characters of A-Z "
                     "a-z 0-9 . _ -, not starting with '.'", value, strlen(value) > 80 ? "..." : "",
                     ROV_JOB_MAX);
            st = ROV_ERR_INVAL;
        } else {
            snprintf(field, v->len, "%s", value);
        }
        break;
    case ROV_VAR_RANK: {
        uint64_t u;

        if (!*value) {
            *(long *)field = -1;
        } else {
            st = rov_parse_u64(value, v->min, v->max, &u, why, sizeof(why));
            if (st == ROV_OK)
                *(long *)field = (long)u;
        }
        break;
    }
    case ROV_VAR_PATH:
        if (*value && (value[0] != '/' || strlen(value) >= v->len - 32)) {
            snprintf(why, sizeof(why), "not an absolute path shorter than %zu characters",
                     v->len - 32);
            st = ROV_ERR_INVAL;
        } else {
            snprintf(field, v->len, "%s", value);
        }
        break;
    }
    if (st != ROV_OK)
        errf(err, err_len, "%s='%s': %s (%s)", v->name, value, why, v->help);
    return st;
}

/* Every table's own consistency checks. */
static rov_status_t check_consistency(const struct rov_config *c, char *err, size_t err_len)
{
    for (size_t i = 0; i < ntables; i++)
        if (tables[i]->check &&
            tables[i]->check(rov_settings_of(c, tables[i]), err, err_len) != ROV_OK)
            return ROV_ERR_INVAL;
    return ROV_OK;
}

rov_status_t rov_config_set(rov_config_t *config, const char *name, const char *value,
                            char *err_buf, size_t err_len)
{
    struct rov_config tmp = *config;
    const struct rov_settings *t;
    const struct rov_var *v = var_find(name, &t);

    if (!v) {
        errf(err_buf, err_len, "unknown configuration variable %s", name);
        return ROV_ERR_NOT_FOUND;
    }
    if (set_var(&tmp, t, v, value, err_buf, err_len) ||
        check_consistency(&tmp, err_buf, err_len))
        return ROV_ERR_INVAL;
    *config = tmp;
    return ROV_OK;
}

rov_status_t rov_config_read(char *err_buf, size_t err_len, rov_config_t **config_p)
{
    char err[512];
    struct rov_config *c = malloc(sizeof(*c));
    const struct rov_settings *t;
    const struct rov_var *v;

    if (!c)
        return ROV_ERR_NOMEM;
    rov_config_defaults(c);
    for (size_t i = 0; (v = var_at(i, &t)) != NULL; i++) {
        const char *value = getenv(v->name);

        if (value && set_var(c, t, v, value, err, sizeof(err)))
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

static void print_value(const struct rov_config *c, const struct rov_settings *t,
                        const struct rov_var *v, FILE *f)
{
    const void *field = field_of((struct rov_config *)c, t, v);

    switch (v->type) {
    case ROV_VAR_RAILS:
        for (unsigned i = 0; i < c->nrails; i++)
            fprintf(f, "%s%s", i ? "," : "", c->rails[i].name);
        break;
    case ROV_VAR_IFNAME:
    case ROV_VAR_FAULT:
    case ROV_VAR_JOBID:
    case ROV_VAR_PATH:
    case ROV_VAR_STRING:
    case ROV_VAR_DEVLIST:
        fputs(field, f);
        break;
    case ROV_VAR_CHOICE: {
        const char *p = v->choices;

        for (int i = *(const int *)field; i > 0 && p; i--)
            p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL;
        if (p)
            fprintf(f, "%.*s", (int)strcspn(p, "|"), p);
        break;
    }
    case ROV_VAR_INDEX:
        if (*(const int *)field < 0)
            fputs("auto", f);
        else
            fprintf(f, "%d", *(const int *)field);
        break;
    case ROV_VAR_RANK:
        if (*(const long *)field >= 0)
            fprintf(f, "%ld", *(const long *)field);
        break;
    case ROV_VAR_BOOL:
        fputs(*(const int *)field ? "on" : "off", f);
        break;
    case ROV_VAR_LOG:
        rov_log_levels_print(field, f);
        break;
    case ROV_VAR_COUNT:
    case ROV_VAR_SIZE:
        fprintf(f, "%" PRIu64, *(const uint64_t *)field);
        break;
    case ROV_VAR_DURATION: {
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
    const struct rov_settings *t;
    const struct rov_var *v;

    for (size_t i = 0; (v = var_at(i, &t)) != NULL; i++) {
        fprintf(f, "%s=", v->name);
        print_value(config, t, v, f);
        fprintf(f, "  # %s\n", v->help);
    }
}

/* Enumeration ---------------------------------------------------------------- */

#define DEFAULT_TEXT_MAX 256

/* A value's text into buf: ROV_ERR_MSGSIZE when it does not fit. */
static rov_status_t format_value(const struct rov_config *c, const struct rov_settings *t,
                                 const struct rov_var *v, char *buf, size_t len)
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
    print_value(c, t, v, f);
    n = ftell(f);
    fclose(f);
    buf[len - 1] = '\0';
    return n >= 0 && (size_t)n < len ? ROV_OK : ROV_ERR_MSGSIZE;
}

static const struct {
    rov_config_type_t type;
    const char *units;
} public_type[] = {
    [ROV_VAR_RAILS] = {ROV_CONFIG_STRING, ""},     [ROV_VAR_IFNAME] = {ROV_CONFIG_STRING, ""},
    [ROV_VAR_LOG] = {ROV_CONFIG_STRING, ""},       [ROV_VAR_COUNT] = {ROV_CONFIG_COUNT, "count"},
    [ROV_VAR_SIZE] = {ROV_CONFIG_SIZE, "bytes"},   [ROV_VAR_DURATION] = {ROV_CONFIG_DURATION, "time"},
    [ROV_VAR_BOOL] = {ROV_CONFIG_BOOL, ""},        [ROV_VAR_FAULT] = {ROV_CONFIG_STRING, ""},
    [ROV_VAR_PATH] = {ROV_CONFIG_STRING, "path"},  [ROV_VAR_DEVLIST] = {ROV_CONFIG_STRING, ""},
    [ROV_VAR_CHOICE] = {ROV_CONFIG_CHOICE, ""},    [ROV_VAR_INDEX] = {ROV_CONFIG_COUNT, "index"},
    [ROV_VAR_STRING] = {ROV_CONFIG_STRING, ""},    [ROV_VAR_JOBID] = {ROV_CONFIG_STRING, ""},
    [ROV_VAR_RANK] = {ROV_CONFIG_COUNT, "index"},
};

static rov_config_var_t public_vars[MAX_VARS];
static char default_text[MAX_VARS][DEFAULT_TEXT_MAX];
static pthread_once_t public_once = PTHREAD_ONCE_INIT;

static void public_init(void)
{
    struct rov_config *d = malloc(sizeof(*d));
    const struct rov_settings *t;
    const struct rov_var *v;

    if (d)
        rov_config_defaults(d);
    for (size_t i = 0; (v = var_at(i, &t)) != NULL; i++) {
        rov_config_var_t *p = &public_vars[i];

        if (d)
            format_value(d, t, v, default_text[i], sizeof(default_text[i]));
        p->name = v->name;
        p->type = public_type[v->type].type;
        p->default_value = default_text[i];
        p->help = v->help;
        p->units = public_type[v->type].units;
        /* Words accepted instead of a number, or the only words accepted. */
        p->choices = v->type == ROV_VAR_LOG    ? "error|warn|info|debug|trace" :
                     v->type == ROV_VAR_CHOICE ? v->choices :
                     v->type == ROV_VAR_INDEX  ? "auto" : "";
        if (v->type == ROV_VAR_COUNT || v->type == ROV_VAR_SIZE ||
            v->type == ROV_VAR_DURATION || v->type == ROV_VAR_INDEX || v->type == ROV_VAR_RANK) {
            p->min = v->min;
            p->max = v->max;
        }
    }
    free(d);
}

int rov_config_var_count(void)
{
    return (int)nvars_all;
}

const rov_config_var_t *rov_config_var(int index)
{
    if (index < 0 || (size_t)index >= nvars_all)
        return NULL;
    pthread_once(&public_once, public_init);
    return &public_vars[index];
}

rov_status_t rov_config_get(const rov_config_t *config, const char *name, char *buf, size_t len)
{
    const struct rov_settings *t;
    const struct rov_var *v = var_find(name, &t);

    return v ? format_value(config, t, v, buf, len) : ROV_ERR_NOT_FOUND;
}

void rov_config_free(rov_config_t *config)
{
    free(config);
}
