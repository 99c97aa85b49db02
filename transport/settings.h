/*
 * Settings: each layer's RAILOVER_* variables, declared where they are used.
 *
 * The transport's own variables are its table in config.c.  A rail or a
 * policy declares its variables in a table of its own (struct
 * rov_settings: name, type, range, help, and where the value goes in the
 * layer's settings block) and hangs it on its ops (rov_rail_ops.settings,
 * rov_policy_ops.settings); registering the rail or policy registers the
 * table.  Every configuration (struct rov_config) then carries one block
 * per registered table, filled with the table's defaults and whatever
 * RAILOVER_* or rov_config_set() says; a rail's open receives its block
 * alone, a policy reads its own with rov_policy_settings().
 *
 * Parsing, printing, rov_config_get()/_set() and the enumeration that
 * embedders build their own parameters from (rov_config_var(), the BTL's
 * MCA parameters) run over every table: the transport's first, then the
 * others by layer name.
 */
#ifndef ROV_SETTINGS_H
#define ROV_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "railover/railover.h"

enum rov_var_type {
    ROV_VAR_RAILS,    /* RAILOVER_RAILS (transport only) */
    ROV_VAR_IFNAME,   /* interface name or address; char[len] */
    ROV_VAR_LOG,      /* log levels; struct rov_log_levels (transport/log.h) */
    ROV_VAR_COUNT,    /* uint64_t in [min, max] */
    ROV_VAR_SIZE,     /* uint64_t bytes, with k/M/G suffixes, in [min, max] */
    ROV_VAR_DURATION, /* uint64_t ns, with a unit, in [min, max] */
    ROV_VAR_BOOL,     /* int */
    ROV_VAR_FAULT,    /* fault injection spec; char[len] */
    ROV_VAR_PATH,     /* absolute path or empty; char[len] */
    ROV_VAR_DEVLIST,  /* device[:port],...; char[len] */
    ROV_VAR_CHOICE,   /* one of choices ("a|b|c"), stored as its index; int */
    ROV_VAR_INDEX,    /* "auto" (-1) or an integer in [min, max]; int */
    ROV_VAR_STRING,   /* printable text (a command line); char[len] */
    ROV_VAR_JOBID,    /* empty or a job id (rov_jobid_ok()); char[len] */
    ROV_VAR_RANK,     /* empty (-1) or an integer in [min, max]; long */
};

struct rov_var {
    const char *name;       /* RAILOVER_... */
    enum rov_var_type type;
    size_t offset;          /* of the value in the layer's block */
    size_t len;             /* strings: size of the char array */
    uint64_t min, max;      /* numbers */
    const char *choices;    /* ROV_VAR_CHOICE: "word|word|..." */
    const char *help;
};

struct rov_settings {
    const char *layer;                 /* "tcp", "verbs", "failover" */
    const struct rov_var *vars;
    size_t nvars;
    size_t size;                       /* of the layer's block */
    void (*defaults)(void *block);     /* fills every field of a zeroed block */
    /* Checks that need several values together; NULL: none.  ROV_OK or
     * ROV_ERR_INVAL with the reason in err. */
    rov_status_t (*check)(const void *block, char *err, size_t err_len);
    size_t offset;                     /* set at registration: the block in rov_config */
};

/* Room for every layer's block in a configuration; a registration that
 * does not fit aborts (a build error, found at load). */
#define ROV_SETTINGS_BLOCKS_MAX 2048

/** Register a table (idempotent).  Called by rov_rail_register() and
 * rov_policy_register() for the table on the ops, from constructors. */
void rov_settings_register(struct rov_settings *settings);

struct rov_config;
/** The block of `settings` in config. */
const void *rov_settings_of(const struct rov_config *config, const struct rov_settings *settings);

#endif
