/* Configuration: RAILOVER_* variables, parsed and validated in one place. */
#ifndef ROV_CONFIG_H
#define ROV_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "railover/railover.h"
#include "transport/log.h"
#include "transport/settings.h"

#define ROV_MAX_RAILS 8
#define ROV_RAIL_ARG_MAX 64

/* One entry of RAILOVER_RAILS: "kind" or "kind@arg" (tcp@eth0). */
struct rov_rail_spec {
    char kind[16];
    char arg[ROV_RAIL_ARG_MAX];   /* empty: the kind's default (RAILOVER_TCP_IF) */
    char name[16 + ROV_RAIL_ARG_MAX + 1];
};

struct rov_config {
    /* read per message: first */
    uint64_t window_msgs;
    uint64_t window_bytes;
    uint64_t window_total;            /* all connections of the context */
    uint64_t window_time_ns;          /* ... and in time at their ack rate; 0: off */
    uint64_t eager_limit;
    uint64_t max_msg;
    uint64_t ack_delay_ns;
    uint64_t spin_ns;              /* rov_context_wait(): busy-poll this long first */
    int bond;                      /* RAILOVER_BOND: every healthy rail at once (bond.c) */
    uint64_t bond_min;             /* ... messages at least this large */
    /* read when connections and channels are made */
    uint64_t reorder_msgs;
    uint64_t reorder_bytes;        /* payload of early arrivals held per connection */
    struct rov_rail_spec rails[ROV_MAX_RAILS];
    unsigned nrails;
    char tcp_if[ROV_RAIL_ARG_MAX]; /* empty: first non-loopback IPv4 interface */
    struct rov_log_levels log;     /* RAILOVER_LOG */
    /* failure detection: read by the transport, rails (rov_rail_env) and failover/ */
    int failover;                  /* detect failures and move connections */
    uint64_t failover_timeout_ns;  /* no rail-level completion for this long: stalled */
    uint64_t keepalive_ns;         /* probe a channel idle this long; 0: never */
    uint64_t connect_timeout_ns;   /* a rail's first connect per connection; 0: as above */
    uint64_t unreachable_timeout_ns; /* every rail down this long: the connection fails; 0: never */
    char fault[128];               /* RAILOVER_FAULT: fault injection spec, empty: none */
    /* control endpoint (transport/control.c) */
    int control;                   /* serve the per-process control socket */
    int progress_thread;           /* a helper advances stages while the caller computes */
    char run_dir[108];             /* where control sockets live; empty: per-user default */
    /* the job (rov_context_create(): when the caller names none) */
    char jobid[ROV_JOB_MAX + 1];   /* RAILOVER_JOBID; empty: a fresh UUID */
    long rank;                     /* RAILOVER_RANK; -1: the pid */
    /* The settings blocks of the other layers (rails, policies), each at
     * its table's offset (transport/settings.h): a layer reads its own
     * with rov_settings_of().  Inline, so that a configuration copies by
     * value. */
    _Alignas(16) unsigned char blocks[ROV_SETTINGS_BLOCKS_MAX];
};

/* Value parsers, exported for the unit tests.  Each returns ROV_OK or
 * ROV_ERR_INVAL with a reason in err (size err_len). */
rov_status_t rov_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out_p,
                           char *err, size_t err_len);
/* Sizes: plain bytes or with k/K/KiB/m/M/MiB/g/G/GiB (binary multiples). */
rov_status_t rov_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out_p,
                            char *err, size_t err_len);
/* Durations: a number with unit ns, us, ms, s (e.g. "250ms", "2s"). */
rov_status_t rov_parse_duration(const char *s, uint64_t min_ns, uint64_t max_ns,
                                uint64_t *out_ns_p, char *err, size_t err_len);

rov_status_t rov_parse_rails(const char *s, struct rov_rail_spec *rails, unsigned *nrails_p,
                             char *err, size_t err_len);

/* Booleans: on/off, yes/no, true/false, 1/0. */
rov_status_t rov_parse_bool(const char *s, int *out_p, char *err, size_t err_len);

/* Job ids (RAILOVER_JOBID, rov_context_params_t.job): 1 to ROV_JOB_MAX
 * characters of A-Z a-z 0-9 . _ -, not starting with '.'.  An id names the
 * job's directory in the registry (ccp/): cut short, two jobs would be
 * one; with a '/' or "..", it would name another directory. */
bool rov_jobid_ok(const char *id);

/* Defaults for every field. */
void rov_config_defaults(struct rov_config *config);

#endif
