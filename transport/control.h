/*
 * The per-process control endpoint: a Unix stream socket, owner-only, in a
 * per-user run directory, served by the context's progress engine.  Tools
 * (`railover status|force|release`, later the checkpoint client) find it by
 * listing the run directory.
 *
 * Protocol: the client sends one request line ("verb arg ...\n", at most
 * ROV_CTL_LINE_MAX bytes); the server answers with text lines and a final
 * line "ok" or "error: <message>", then closes.  Commands are registered by
 * the layers that implement them (rov_ctl_register, from a constructor).
 */
#ifndef ROV_CONTROL_H
#define ROV_CONTROL_H

#include <stdio.h>

#include "railover/railover.h"

#define ROV_CTL_LINE_MAX 4096
#define ROV_CTL_MAX_ARGS 16

/** Handle one request.  argv[0] is the verb.  Write the answer lines to out;
 * return 0 for "ok", or nonzero after writing a one-line error message
 * (without the "error: " prefix) to err (size err_len). */
typedef int (*rov_ctl_handler_t)(rov_context_t *ctx, int argc, char **argv, FILE *out,
                                 char *err, size_t err_len);

struct rov_ctl_cmd {
    const char *verb;      /* "status" */
    const char *usage;     /* "status" or "force all|conn ID|peer EPID" */
    const char *help;      /* one line */
    rov_ctl_handler_t fn;
};

/** Register a command (static storage; from a constructor). */
void rov_ctl_register(const struct rov_ctl_cmd *cmd);

#define ROV_CTL_REGISTER(cmd)                                                \
    static void __attribute__((constructor)) rov_ctl_register_##cmd(void) \
    {                                                                        \
        rov_ctl_register(&cmd);                                              \
    }

/** Open the context's control socket (RAILOVER_CONTROL, RAILOVER_RUN_DIR).
 * A failure (unsafe run directory, ...) is logged and leaves the context
 * without a control endpoint; it never fails the context. */
void rov_ctl_open(rov_context_t *ctx);
/** Close the socket, drop clients, unlink the socket file. */
void rov_ctl_close(rov_context_t *ctx);

/** Path of the context's control socket, or NULL when it has none. */
const char *rov_ctl_path(const rov_context_t *ctx);

/* Longest run directory path (strlen below this): sun_path (108 bytes) must
 * still hold "/<pid>.<n>.sock". */
#define ROV_CTL_RUN_DIR_MAX 76

/** Write the run directory of config into buf: RAILOVER_RUN_DIR if set
 * (without trailing slashes, which would make a symbolic link look like the
 * directory it points to), else $XDG_RUNTIME_DIR/railover when
 * XDG_RUNTIME_DIR is an existing directory owned by us, else
 * /tmp/railover-<euid>.  config may be NULL (the defaults).  Only computes
 * the path: it neither creates nor checks the directory
 * (rov_ctl_run_dir_check).  Shared with the `railover` tool, so clients and
 * servers agree.  ROV_OK, or ROV_ERR_INVAL if the path does not fit in len or
 * ROV_CTL_RUN_DIR_MAX. */
__attribute__((visibility("default")))
rov_status_t rov_ctl_run_dir(const rov_config_t *config, char *buf, size_t len);

/** Check that dir may hold control sockets: it is a directory and not a
 * symbolic link (a trailing slash, "." or ".." as the last component is
 * refused rather than resolved), owned by the effective uid, with no group
 * or other permission bits.  The sockets are protected by this directory
 * alone, so both the library (before it binds) and the `railover` tool
 * (before it lists or connects) apply it.  Only looks (lstat): creates,
 * changes and logs nothing; does not block beyond the file system.
 *
 * Returns ROV_OK when the directory is safe.  Otherwise writes one lowercase
 * line naming dir and what is wrong (e.g. "run directory /tmp/x has mode
 * 777; it must be accessible by its owner only (chmod 700)") to why
 * (truncated to why_len; why may be NULL if why_len is 0) and returns
 * ROV_ERR_NOT_FOUND when dir does not exist, ROV_ERR_INVAL when it is unsafe,
 * ROV_ERR_IO when it cannot be examined. */
__attribute__((visibility("default")))
rov_status_t rov_ctl_run_dir_check(const char *dir, char *why, size_t why_len);

#endif
