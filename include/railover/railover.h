/*
 * Railover public API.
 *
 * Railover gives an application reliable, sequenced message connections that
 * survive the failure of the rail (RDMA, TCP) they run on.  Every message is
 * retained by the sender until the peer acknowledges it, so a connection can
 * move to another rail and resend exactly what the peer lacks.
 *
 * Object model:
 *   rov_context_t   configuration (from the environment), the rails, the
 *                   progress engine and its file descriptor.
 *   rov_endpoint_t  listens on every configured rail and exports an opaque
 *                   address blob that a peer passes to rov_conn_connect().
 *   rov_conn_t      one reliable connection to one peer endpoint.
 *
 * Threading: a context and everything created from it belong to the
 * thread that calls them (the owner).  Nothing blocks except
 * rov_context_wait(), which blocks at most for the timeout it is given.
 * Callbacks run only inside rov_progress(), rov_context_wait(),
 * rov_context_arm() and the destroy/close calls that document it, on the
 * thread that called them; a callback may call rov_conn_send() and
 * rov_conn_close() but must not destroy the context or the endpoint.
 *
 * Each context has a progress helper, a thread of its own
 * (RAILOVER_PROGRESS_THREAD=on, the default), so that a checkpoint stage
 * and a control request complete while the owner computes and calls
 * nothing.  Every call then holds the context's lock (recursive) for its
 * duration, and rov_context_wait() releases it while it sleeps; so another
 * thread may call too (a checkpoint tool's thread: rov_context_quiesce(),
 * rov_context_close_rails(), rov_context_reopen(), rov_context_stage(); it
 * waits for the call in progress).  The helper works only when a control
 * request is waiting or a stage is under way and the owner has not
 * progressed for a few milliseconds; it never runs a callback: a message
 * it receives is acknowledged and kept (a copy), an event or a send's
 * completion is kept, and the owner's next progress call delivers them
 * first, in order.  Outside a stage the helper reads no connection: a peer
 * that quiesces alone while this owner computes waits for its next
 * progress call, or for this process's own quiesce (ccp/ quiesces every
 * process of a job).  With
 * RAILOVER_PROGRESS_THREAD=off there is no lock and no thread: only one
 * thread may call at a time, and a stage advances only inside the owner's
 * progress calls.  rov_context_destroy() must not race with another call;
 * it stops the helper first.
 *
 * Errors: every call that can fail returns rov_status_t: ROV_OK (0),
 * ROV_INPROGRESS (1), or a negative ROV_ERR_* code; rov_status_str() names it.
 * The function that first detects a problem logs it (see Logging below); callers
 * need not log again.
 */
#ifndef RAILOVER_RAILOVER_H
#define RAILOVER_RAILOVER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility: what this header declares is
 * its whole exported interface, and calls inside the library bind directly
 * (no PLT, and the compiler may inline them). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define ROV_VERSION_MAJOR 0
#define ROV_VERSION_MINOR 1
#define ROV_VERSION_PATCH 0

/** Library version string, e.g. "0.1.0". */
const char *rov_version(void);

/** The rail kinds this build of the library has, comma separated, e.g.
 * "tcp,verbs,ucx" (RAILOVER_RAILS entries name one of them).  Writes at most
 * len bytes, NUL-terminated. */
void rov_rail_kinds(char *buf, size_t len);

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */

typedef int rov_status_t;

enum {
    ROV_OK = 0,
    ROV_INPROGRESS = 1,        /* accepted; completion reported later */
    ROV_ERR_NOMEM = -1,        /* allocation failed */
    ROV_ERR_INVAL = -2,        /* invalid argument or configuration value */
    ROV_ERR_AGAIN = -3,        /* window full: progress, then retry */
    ROV_ERR_IO = -4,           /* system call or device failure */
    ROV_ERR_PROTO = -5,        /* peer violated the wire protocol */
    ROV_ERR_CLOSED = -6,       /* connection closed or closing */
    ROV_ERR_UNREACHABLE = -7,  /* no rail could reach the peer */
    ROV_ERR_REFUSED = -8,      /* peer refused the connection */
    ROV_ERR_RESET = -9,        /* rail connection reset / failed */
    ROV_ERR_TIMEDOUT = -10,    /* operation timed out */
    ROV_ERR_MSGSIZE = -11,     /* message larger than RAILOVER_MAX_MSG */
    ROV_ERR_NOT_FOUND = -12,   /* no such rail, device or interface */
    ROV_ERR_UNSUPPORTED = -13, /* not built in or not available here */
    ROV_ERR_BUSY = -14,        /* object in a state that forbids the call */
    ROV_ERR_CANCELED = -15,    /* operation canceled by close/destroy */
    ROV_ERR_RESOURCE = -16,    /* a local limit was reached (file descriptors: EMFILE,
                                * ENFILE); says nothing about the peer or the path */
};

/** Static, human readable name of a status ("ok", "window full", ...). */
const char *rov_status_str(rov_status_t status);

/* ------------------------------------------------------------------------ */
/* Logging                                                                   */

/*
 * The library logs what it detects (a rail failed, a connection moved, a
 * setting refused) one line at a time, each with a level and the tag of the
 * subsystem that wrote it: auth, ccp, config, conn, core, ctl, failover,
 * fault, helper, loop, netlink, stage, tcp, ucx, verbs.  RAILOVER_LOG sets
 * the levels: one for every subsystem, then overrides by tag, e.g.
 * "warn,verbs=debug,failover=info" (default "warn"); a context applies its
 * configuration's value when it is created, process-wide.
 *
 * Without a hook each line goes to stderr in one write(2):
 *   [<seconds>.<microseconds>] railover[<pid>] <level> <tag>: <message>
 * A host program with a log of its own (an MPI library, a daemon) installs
 * a hook instead and receives the parts of each line.
 */
typedef enum rov_log_level {
    ROV_LOG_OFF = -1, /* as a level to log at: nothing */
    ROV_LOG_ERROR = 0,
    ROV_LOG_WARN,
    ROV_LOG_INFO,
    ROV_LOG_DEBUG,
    ROV_LOG_TRACE,
} rov_log_level_t;

/** Receives one log line: its level, the subsystem's tag ("tcp") and the
 * message (lowercase, without a newline).  tag and msg are valid during
 * the call only. */
typedef void (*rov_log_hook_t)(void *arg, rov_log_level_t level, const char *tag,
                               const char *msg);

/**
 * Send the log lines to hook (with arg) instead of stderr; NULL sends them
 * to stderr again.  level is the most detailed level the hook wants of
 * every subsystem: each subsystem then logs at the higher of level and
 * its RAILOVER_LOG level (ROV_LOG_OFF: RAILOVER_LOG's alone).
 *
 * May be called at any time, from any thread, before any context exists
 * too.  When it returns the previous hook is not running and is not
 * called again, so its code may be unloaded.  The hook runs in the thread
 * that logs (an application's call into the library, or a context's
 * progress helper: see Threading above), one line at a time, with the
 * log's lock held: it must be quick and must not call this library (a line
 * the library logs from inside the hook goes to stderr).
 */
void rov_log_set_hook(rov_log_hook_t hook, void *arg, rov_log_level_t level);

/** Static name of a level: "error", "warn", "info", "debug", "trace"
 * ("off" for ROV_LOG_OFF, "?" out of range). */
const char *rov_log_level_str(rov_log_level_t level);

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */

/*
 * Configuration is read from RAILOVER_* environment variables (see
 * docs/configuration in README.md).  A malformed value is rejected with
 * ROV_ERR_INVAL and a message naming the variable, the value and what is
 * accepted; nothing is silently clamped.
 */
typedef struct rov_config rov_config_t;

/** Parse the environment into a new configuration.  On ROV_ERR_INVAL, an
 * explanation is written to the log and, if err_buf is not NULL, copied into
 * err_buf (truncated to err_len).  *config_p is set only on ROV_OK. */
rov_status_t rov_config_read(char *err_buf, size_t err_len, rov_config_t **config_p);

/** Set one variable by name (e.g. "RAILOVER_RAILS") as if it were in the
 * environment.  ROV_ERR_NOT_FOUND for an unknown name, ROV_ERR_INVAL (with a
 * message in err_buf) for a bad value; the configuration is unchanged then. */
rov_status_t rov_config_set(rov_config_t *config, const char *name, const char *value,
                            char *err_buf, size_t err_len);

/** Print the effective configuration, one "NAME=value  # meaning" per line. */
void rov_config_print(const rov_config_t *config, FILE *stream);

void rov_config_free(rov_config_t *config);

/*
 * Every setting, for an embedder that offers them under its own names (the
 * Open MPI BTL makes an MCA parameter of each: btl_railover_failover_timeout
 * for RAILOVER_FAILOVER_TIMEOUT).  Values are text, in the form the
 * environment takes; an embedder passes what its user gave to
 * rov_config_set(), which refuses a bad value with the same message as for
 * the environment variable.
 */
typedef enum rov_config_type {
    ROV_CONFIG_STRING,   /* free text of a documented form (rails, paths, devices) */
    ROV_CONFIG_BOOL,     /* on/off (also 1/0, yes/no, true/false) */
    ROV_CONFIG_COUNT,    /* an integer in [min, max] */
    ROV_CONFIG_SIZE,     /* bytes in [min, max], with an optional k/m/g suffix (KiB, MiB, GiB) */
    ROV_CONFIG_DURATION, /* nanoseconds in [min, max], written with a unit: ns, us, ms, s */
    ROV_CONFIG_CHOICE,   /* one word of `choices` */
} rov_config_type_t;

typedef struct rov_config_var {
    const char *name;          /* "RAILOVER_FAILOVER_TIMEOUT" */
    rov_config_type_t type;
    const char *default_value; /* text form of the built-in default */
    const char *help;          /* one line: what it does */
    const char *units;         /* "bytes", "time", "messages", ... or "" */
    const char *choices;       /* CHOICE: its words, "a|b|c"; else the words taken besides
                                * the type's form (COUNT: "auto"; RAILOVER_LOG, a
                                * STRING: its levels) or "" */
    uint64_t min, max;         /* COUNT, SIZE, DURATION (ns): the accepted range */
} rov_config_var_t;

/** Number of settings; rov_config_var(i) for i in [0, count) describes each,
 * NULL out of range.  The descriptions are static.  Every layer of this
 * build contributes its own (the transport's first, then each rail's and
 * policy's, grouped by layer): a build without a rail has none of that
 * rail's settings, and they are then unknown to rov_config_set(). */
int rov_config_var_count(void);
const rov_config_var_t *rov_config_var(int index);

/** The effective value of a setting, in its text form, into buf (at most len
 * bytes, NUL-terminated).  ROV_ERR_NOT_FOUND for an unknown name,
 * ROV_ERR_MSGSIZE if len is too small (buf then holds a truncated value). */
rov_status_t rov_config_get(const rov_config_t *config, const char *name, char *buf,
                            size_t len);

/* ------------------------------------------------------------------------ */
/* Context                                                                   */

typedef struct rov_context rov_context_t;
typedef struct rov_endpoint rov_endpoint_t;
typedef struct rov_conn rov_conn_t;

/** Events reported to the application's event callback. */
typedef enum rov_event_type {
    ROV_EVENT_CONN_ACCEPTED,    /* a peer connected to one of our endpoints */
    ROV_EVENT_CONN_ESTABLISHED, /* our rov_conn_connect() completed */
    ROV_EVENT_CONN_RAIL_SWITCH, /* the connection moved to another rail */
    ROV_EVENT_CONN_RAIL_DOWN,   /* a rail of the connection failed */
    ROV_EVENT_CONN_PEER_CLOSED, /* the peer called rov_conn_close() */
    ROV_EVENT_CONN_CLOSED,      /* close finished; the handle is now invalid */
    ROV_EVENT_CONN_ERROR,       /* the connection failed; retained data lost */
    /* Checkpoint stages (conn is NULL): */
    ROV_EVENT_CONTEXT_QUIESCED, /* rov_context_quiesce() is complete */
    ROV_EVENT_ENDPOINT_ADDRESS, /* rov_context_reopen() gave the endpoint a new
                                   address: rov_endpoint_address() reads it */
    ROV_EVENT_CONTEXT_RESUMED,  /* every quiesced connection sends again (or failed) */
    /* RAILOVER_BOND: */
    ROV_EVENT_CONN_BOND,        /* a rail joined the connection's bond (rail_to; rail_from
                                   -1) or left it (rail_from; rail_to -1) */
} rov_event_type_t;

/*
 * Why a connection changed rail.  Every switch carries one reason; they are
 * counted per connection (rov_conn_stats_t.reasons) and named hierarchically,
 * class first ("failover.stall.keepalive"): failover.* (the rail failed),
 * failback (a preferred rail healed), admin.* (operator request), api (the
 * application called rov_conn_switch), peer.* (the peer moved the
 * connection, with the peer's own reason class).
 */
typedef enum rov_reason {
    ROV_REASON_NONE = 0,
    ROV_REASON_API,              /* "api": rov_conn_switch() */
    ROV_REASON_FAIL_ERROR,       /* "failover.error": the rail reported an error */
    ROV_REASON_FAIL_RESET,       /* "failover.error.reset": connection reset or broken */
    ROV_REASON_FAIL_CLOSED,      /* "failover.error.closed": the peer's end went away */
    ROV_REASON_FAIL_UNREACH,     /* "failover.error.unreachable": no route, refused */
    ROV_REASON_FAIL_STALL,       /* "failover.stall": posted work, no rail completion
                                    within RAILOVER_FAILOVER_TIMEOUT */
    ROV_REASON_FAIL_KEEPALIVE,   /* "failover.stall.keepalive": idle probe unanswered */
    ROV_REASON_FAIL_INJECTED,    /* "failover.injected": RAILOVER_FAULT */
    ROV_REASON_FAILBACK,         /* "failback": preferred rail healthy for the dwell */
    ROV_REASON_ADMIN_FORCE,      /* "admin.force": operator forced the fallback rail */
    ROV_REASON_ADMIN_RELEASE,    /* "admin.release": operator released it */
    ROV_REASON_PEER_FAILOVER,    /* "peer.failover": the peer saw the rail fail */
    ROV_REASON_PEER_FAILBACK,    /* "peer.failback" */
    ROV_REASON_PEER_ADMIN,       /* "peer.admin": operator request on the peer */
    ROV_REASON_PEER_API,         /* "peer.api": the peer application switched */
    ROV_REASON_REOPEN,           /* "reopen": reconnected after rov_context_reopen() */
    ROV_REASON_PEER_REOPEN,      /* "peer.reopen": the peer reconnected after its reopen */
    ROV_REASON_FAIL_LINK,        /* "failover.link": the rail's link went down (the
                                    kernel said so: netlink, an RDMA port error);
                                    last so that the values above keep theirs */
    ROV_REASON_COUNT
} rov_reason_t;

/** Static name of a reason ("failover.stall"), "unknown" if out of range. */
const char *rov_reason_str(rov_reason_t reason);

typedef struct rov_event {
    rov_event_type_t type;
    rov_conn_t *conn;
    rov_status_t status;  /* cause, for RAIL_DOWN and ERROR */
    int rail_from;        /* RAIL_SWITCH / RAIL_DOWN: rail index, or -1 */
    int rail_to;          /* RAIL_SWITCH: new rail index */
    const char *reason;   /* static text: why, e.g. "requested by api" */
    rov_reason_t code;    /* RAIL_SWITCH, RAIL_DOWN: the reason code */
} rov_event_t;

/** Called inside progress for each event.  ROV_EVENT_CONN_CLOSED and
 * ROV_EVENT_CONN_ERROR are the last events of a connection; after
 * CONN_CLOSED returns the handle is freed, after CONN_ERROR the application
 * must still call rov_conn_close() to free it. */
typedef void (*rov_event_cb_t)(void *arg, const rov_event_t *event);

/** Called inside progress for every message, in send order, exactly once.
 * data is valid only during the call and is read-only. */
typedef void (*rov_recv_cb_t)(void *arg, rov_conn_t *conn, uint32_t tag,
                              const void *data, size_t len);

typedef struct rov_context_params {
    const rov_config_t *config; /* NULL: read the environment */
    rov_recv_cb_t recv_cb;      /* required */
    rov_event_cb_t event_cb;    /* optional */
    void *arg;                  /* passed to both callbacks */
    /* The job this process belongs to and its rank there (an MPI job id
     * and rank), shown by `railover status` so an operator or a
     * checkpointer finds a job's processes.  NULL: the configuration's
     * RAILOVER_JOBID (empty: a fresh UUID) and RAILOVER_RANK (empty: the
     * pid).  1 to ROV_JOB_MAX characters of A-Z a-z 0-9 . _ -, not
     * starting with '.' (it names the job's directory in the registry);
     * anything else is refused: ROV_ERR_INVAL (RAILOVER_JOBID already by
     * rov_config_read()). */
    const char *job;
    long rank;                  /* with job: its rank, >= 0 (negative: as without job) */
} rov_context_params_t;

#define ROV_JOB_MAX 63

/** Create a context and open every rail in RAILOVER_RAILS.  Copies the
 * configuration.  A rail that cannot be opened (missing device, interface
 * without an address) fails the call with its status and a log line naming
 * the rail; ROV_ERR_INVAL for a bad environment value. */
rov_status_t rov_context_create(const rov_context_params_t *params,
                                rov_context_t **context_p);

/** Close every connection at once (without flushing: unacknowledged data is
 * dropped, pending sends complete with ROV_ERR_CANCELED), then endpoints and
 * rails, and free the context.  Use rov_conn_close() first for a graceful
 * shutdown. */
void rov_context_destroy(rov_context_t *context);

/** Make progress without blocking: read rails, deliver messages, run timers,
 * send acknowledgements.  Returns the number of frames handled (>= 0). */
int rov_progress(rov_context_t *context);

/** A file descriptor that becomes readable when rov_progress() has work, for
 * poll/epoll (level-triggered).  Before sleeping on it, call
 * rov_context_arm() and sleep only if it returns ROV_OK; after waking, call
 * rov_progress().  (A caller that only polls rov_progress() never needs the
 * descriptor, and never pays for arming it.) */
int rov_context_fd(const rov_context_t *context);

/** Prepare to sleep on rov_context_fd(), like ucp_worker_arm(): arms the
 * rails' completion notification (a system call on RDMA rails, which is why
 * it is not done on every progress call) and the library's timer for its
 * next deadline (an owed ack, the failover engine's tick; a caller that
 * only polls meets them in rov_progress() and takes no timer interrupts
 * from the library).  Returns ROV_OK when the
 * descriptor will become readable for any work from now on, ROV_ERR_BUSY
 * when work is already there (call rov_progress() and try again).  May run
 * callbacks, like rov_progress().  rov_context_wait() does this itself. */
rov_status_t rov_context_arm(rov_context_t *context);

/** Block up to timeout_ms (-1: forever) for work, then progress.  Polls
 * for up to RAILOVER_SPIN (50 us) before it sleeps: a stream's next message
 * usually comes sooner than a sleep and a wake-up take.  Wakes early for
 * internal timers, and does not block once a callback has run (its news may
 * be what the caller waits for).  Returns like rov_progress(). */
int rov_context_wait(rov_context_t *context, int timeout_ms);

/** Number of configured rails and the name of rail i ("tcp@lo", ...). */
int rov_context_rail_count(const rov_context_t *context);

/** Limits an embedder sizes its buffers against (from the context's
 * configuration): the largest message rov_conn_send() accepts
 * (RAILOVER_MAX_MSG; a peer with a smaller limit lowers it per connection),
 * and the largest that is copied at send (RAILOVER_EAGER_LIMIT). */
typedef struct rov_limits {
    size_t max_msg;
    size_t eager_limit;
    size_t conn_data_max; /* rov_connect_params_t.data_len, at most */
    size_t get_max;       /* the largest rov_conn_get(): SIZE_MAX (any
                           * length inside the registrations: a read
                           * longer than its rail's limit goes in parts,
                           * with one completion) when a rail reads a
                           * peer's memory (verbs and tcp do); 0: none */
    uint64_t bandwidth_mbps; /* what a connection may carry, Mbit/s: the
                              * preferred rail's link speed, or with
                              * RAILOVER_BOND the sum of the rails' (those
                              * that know theirs); 0: unknown */
} rov_limits_t;

void rov_context_limits(const rov_context_t *context, rov_limits_t *limits_p);
const char *rov_context_rail_name(const rov_context_t *context, int rail);

/** The context's job id and rank (rov_context_params_t.job and .rank,
 * else RAILOVER_JOBID and RAILOVER_RANK, else a fresh UUID and the pid);
 * the job registry (include/railover/ccp.h) files the process under them. */
const char *rov_context_jobid(const rov_context_t *context);
long rov_context_rank(const rov_context_t *context);

/* ------------------------------------------------------------------------ */
/* Endpoint                                                                  */

/** Listen on every rail.  Connections from peers are reported with
 * ROV_EVENT_CONN_ACCEPTED.  A context has one endpoint (ROV_ERR_BUSY for a
 * second): it is the process's identity on every rail, and every
 * connection, made or accepted, belongs to it; a process that needs two
 * identities creates two contexts. */
rov_status_t rov_endpoint_create(rov_context_t *context, rov_endpoint_t **endpoint_p);

/** Copy the address blob into buf.  *len_p is the buffer size on entry and the
 * blob size on return; ROV_ERR_MSGSIZE (with *len_p set) if buf is too small.
 * The blob is opaque and position independent, and it holds the endpoint's
 * key: whoever has it can open connections to this endpoint (not take over
 * existing ones).  Give it to the job's peers only, over a channel others
 * cannot read (a file only the job's user can read, PMIx, the MPI modex);
 * never log or publish it.  Each context's key is new and random. */
rov_status_t rov_endpoint_address(const rov_endpoint_t *endpoint, void *buf, size_t *len_p);

/** Stop listening.  Connections already made stay up. */
void rov_endpoint_destroy(rov_endpoint_t *endpoint);

/* ------------------------------------------------------------------------ */
/* Connection                                                                */

/** Start connecting to the peer endpoint whose address blob is given.  Does
 * not block: sends may be posted at once and are sent when the connection is
 * established (ROV_EVENT_CONN_ESTABLISHED).  ROV_ERR_INVAL for a malformed
 * blob, ROV_ERR_UNREACHABLE when the blob shares no rail with this context,
 * ROV_ERR_RESOURCE when this process is out of file descriptors.  The
 * connection is established only with the endpoint that holds the blob's
 * key (its HELLO_ACK proves it); a listener whose key does not match fails
 * it with ROV_ERR_PROTO. */
rov_status_t rov_conn_connect(rov_endpoint_t *endpoint, const void *addr, size_t addr_len,
                              rov_conn_t **conn_p);

/* Who is connecting, as the connector tells it (an MPI rank, a process
 * name): carried in the connection's first handshake, under its MAC, and
 * handed to the acceptor with the connection, before
 * ROV_EVENT_CONN_ACCEPTED. */
#define ROV_CONN_DATA_MAX 64

typedef struct rov_connect_params {
    const void *data;  /* connect-time data, may be NULL */
    size_t data_len;   /* at most ROV_CONN_DATA_MAX */
    void *user;        /* rov_conn_get_user()'s value from the start */
} rov_connect_params_t;

/** rov_conn_connect() with parameters (NULL: none).  ROV_ERR_INVAL also for
 * data longer than ROV_CONN_DATA_MAX. */
rov_status_t rov_conn_connect_ex(rov_endpoint_t *endpoint, const void *addr, size_t addr_len,
                                 const rov_connect_params_t *params, rov_conn_t **conn_p);

/** The connect-time data of a connection: for an accepted one what the peer
 * gave, for one of ours what we gave; *len_p = 0 (and a non-NULL pointer)
 * when there was none.  Valid as long as the connection. */
const void *rov_conn_data(const rov_conn_t *conn, size_t *len_p);

/** Send completion: called once per send that returned ROV_INPROGRESS, or
 * that asked for ROV_SEND_NOTIFY_DELIVERED, inside progress.  status is
 * ROV_OK when the peer has received the message, ROV_ERR_CANCELED /
 * ROV_ERR_CLOSED when the connection went away first. */
typedef void (*rov_send_cb_t)(void *arg, rov_status_t status);

enum {
    /* Call cb when the peer has the message, even if the data was copied. */
    ROV_SEND_NOTIFY_DELIVERED = 1u << 0,
    /* Never keep a reference to buf: copy it, whatever its size. */
    ROV_SEND_COPY = 1u << 1,
};

/* The longest prefix a send may carry (rov_send_params_t.prefix_len). */
#define ROV_SEND_PREFIX_MAX 256

typedef struct rov_send_params {
    unsigned flags;    /* ROV_SEND_* */
    rov_send_cb_t cb;  /* required when the send may return ROV_INPROGRESS */
    void *arg;
    /* Bytes that go before buf in the same message (a header of the
     * caller's, as an MPI library puts before the user's data), copied at
     * once, so that buf itself can be sent without copying it: the message
     * is prefix_len + len bytes, and whether it is copied goes by that
     * length.  At most ROV_SEND_PREFIX_MAX (else ROV_ERR_INVAL); 0: none. */
    const void *prefix;
    size_t prefix_len;
} rov_send_params_t;

/**
 * Send len bytes (0 allowed) with a user tag.  Never blocks.
 *
 * Messages up to RAILOVER_EAGER_LIMIT bytes (or with ROV_SEND_COPY) are
 * copied: the call returns ROV_OK and buf is free at once.  Larger ones are
 * sent zero-copy: the call returns ROV_INPROGRESS and buf must stay unchanged
 * until params->cb runs, which is when the peer has acknowledged the message
 * (a resend after a rail switch may read it again until then).
 *
 * ROV_ERR_AGAIN: the connection's window (RAILOVER_WINDOW_MSGS /
 * RAILOVER_WINDOW_BYTES) is full; nothing was taken, call rov_progress() and
 * retry.  ROV_ERR_MSGSIZE: len > RAILOVER_MAX_MSG.  ROV_ERR_CLOSED: the
 * connection is closing, closed or failed.  ROV_ERR_INVAL: zero-copy send
 * without a callback.
 */
rov_status_t rov_conn_send(rov_conn_t *conn, uint32_t tag, const void *buf, size_t len,
                           const rov_send_params_t *params);

/** Graceful close: no new sends; everything already sent is delivered and
 * acknowledged, the peer is told (ROV_EVENT_CONN_PEER_CLOSED there), and
 * ROV_EVENT_CONN_CLOSED ends the handle here.  Returns ROV_INPROGRESS, or
 * ROV_OK when the handle was freed at once (a failed connection). */
rov_status_t rov_conn_close(rov_conn_t *conn);

/** Close `from`, a connection of ours whose first connect has not completed,
 * and hand what was sent on it to `into`, another connection of the same
 * context to the same peer endpoint: when two processes connect to each
 * other at once and keep one of the two connections, the loser's sends go
 * out on the winner at once instead of waiting for the loser's connect (on
 * a dead path, its rail's connect timeout).  The sends join the end of
 * into's queue in their order, keep their completions (a zero-copy send's
 * callback runs when into's peer has it) and may exceed into's window once.
 * Nothing of `from` has reached the peer, so nothing is delivered twice.
 * Returns ROV_OK when `from` ended at once (no rail of it had connected, so
 * the peer knows nothing of it: the handle is freed, no event comes), or
 * ROV_INPROGRESS when it closes gracefully (its handshake, once complete,
 * ends with an empty CLOSE) and ROV_EVENT_CONN_CLOSED ends it later;
 * ROV_ERR_BUSY when the peer may have some of from's messages (it completed
 * a handshake: rov_conn_close() it instead, which delivers them),
 * ROV_ERR_CLOSED when `into` takes no more sends, ROV_ERR_INVAL for the same
 * connection or another peer.  No callback runs inside the call. */
rov_status_t rov_conn_hand_over(rov_conn_t *from, rov_conn_t *into);

/** Move the connection to rail `rail` (index into RAILOVER_RAILS): connect or
 * reuse that rail, exchange last-received sequence numbers with the peer,
 * resend what it lacks, and continue there.  reason is a static string
 * reported with ROV_EVENT_CONN_RAIL_SWITCH.  ROV_OK if already there,
 * ROV_INPROGRESS when started, ROV_ERR_UNREACHABLE if the peer has no such
 * rail, ROV_ERR_BUSY while the connection is not established. */
rov_status_t rov_conn_switch(rov_conn_t *conn, int rail, const char *reason);

/*
 * Operator control (fabric maintenance).  Forcing moves connections off their
 * preferred rail (RAILOVER_RAILS index 0) to the next rail both sides have and
 * keeps them there, with failback suspended; releasing lets them move back
 * (at once if the preferred rail is healthy).  The peer is told and does not
 * move the connection back while it is forced.  Also reachable from the
 * command line: `railover force|release PID ...` (see docs).
 */

/** Force (on != 0) or release (on == 0) one connection.  ROV_OK, or
 * ROV_ERR_BUSY if the connection is not established (the setting is kept and
 * applied once it is), ROV_ERR_UNREACHABLE if there is no other rail. */
rov_status_t rov_conn_force_fallback(rov_conn_t *conn, int on);

/** Force or release every connection to the peer endpoint whose id (32 hex
 * digits, as `railover status` shows) is given, or every connection of the
 * context (and those made later) when peer is NULL.  Returns the number of
 * connections affected, or ROV_ERR_INVAL for a malformed peer id. */
int rov_context_force_fallback(rov_context_t *context, const char *peer, int on);

/** Index of the rail the connection sends on now. */
int rov_conn_rail(const rov_conn_t *conn);

void rov_conn_set_user(rov_conn_t *conn, void *user);
void *rov_conn_get_user(const rov_conn_t *conn);

typedef struct rov_conn_stats {
    uint64_t msgs_sent, bytes_sent;         /* user messages, first transmission */
    uint64_t msgs_recv, bytes_recv;         /* delivered to the application */
    uint64_t msgs_resent, bytes_resent;     /* retransmitted after a switch */
    uint64_t dups_dropped;                  /* duplicates discarded */
    uint64_t reordered;                     /* early arrivals buffered */
    uint64_t acks_sent, acks_recv;          /* stand-alone ack frames */
    uint64_t window_full;                   /* sends refused with ROV_ERR_AGAIN */
    uint64_t switches;                      /* completed rail switches */
    uint64_t retained_msgs, retained_bytes; /* now: sent, not yet acknowledged */
    uint64_t tx_seq, rx_seq;                /* last sequence sent / delivered */
    int rail;                               /* current rail index */
    uint64_t reasons[ROV_REASON_COUNT];     /* switches per reason */
    rov_reason_t last_reason;               /* of the last switch */
    uint64_t last_switch_ns;                /* CLOCK_REALTIME of the last switch, 0: none */
    int forced;                             /* held on a fallback rail by an operator */
    uint64_t resends_asked;                 /* RESEND requests sent: gaps in what arrived */
    uint64_t bond_joins, bond_leaves;       /* rails that joined / left its bond */
} rov_conn_stats_t;

void rov_conn_stats(const rov_conn_t *conn, rov_conn_stats_t *stats_p);

/* ------------------------------------------------------------------------ */
/* One-sided reads (RDMA GET), where a rail offers them                      */
/*
 * A process registers memory that its peers may read, and gives each peer
 * the registration's key (rov_mem_key(), out of band or in a message); a
 * peer reads it with rov_conn_get() on its connection to the process.  A
 * rail that reads remote memory does this: verbs in hardware (RDMA READ,
 * no work on the owner's CPU), tcp by message (the owner's progress
 * answers from the registered memory, the reader receives straight into
 * its own: no copy on either side).  On any other rail (ucx, loop), and
 * after a failover to one, rov_conn_get() answers ROV_ERR_UNSUPPORTED and
 * the caller moves the data with messages instead, which fail over like
 * any.
 * A read that its rail cannot finish (the rail failed under it) completes
 * with an error status and may be asked for again by message: a read has
 * no effect at the owner, so doing it twice is harmless.
 *
 * Any peer connected to the context on that rail that holds the key can
 * read the registered range until rov_mem_deregister() (and, on verbs,
 * while the registration cache keeps it afterwards: RAILOVER_VERBS_REGCACHE):
 * register only what peers are meant to read.
 */

typedef struct rov_mem rov_mem_t;

/** Bytes of a registration's key (rov_mem_key()). */
#define ROV_MEM_KEY_LEN 40

/** Register [base, base + len) as readable by peers and as the target of
 * this process's reads.  ROV_ERR_UNSUPPORTED when no rail of the context
 * reads remote memory; ROV_ERR_NOMEM / ROV_ERR_IO when the rail could not
 * register it. */
rov_status_t rov_mem_register(rov_context_t *context, void *base, size_t len,
                              rov_mem_t **mem_p);
void rov_mem_deregister(rov_mem_t *mem);
/** The key a peer names this registration by in rov_conn_get():
 * ROV_MEM_KEY_LEN bytes, meaningful only to peers of this context, and only
 * until its rails close (rov_context_close_rails(); after the reopen, read
 * the new key). */
void rov_mem_key(const rov_mem_t *mem, void *key);

/** Read completion, called once per read that returned ROV_INPROGRESS,
 * inside progress: ROV_OK when local holds the data; otherwise the rail
 * failed or the connection went away first, and local holds anything. */
typedef void (*rov_get_cb_t)(void *arg, rov_status_t status);

/**
 * Read len bytes at the peer's address remote, inside the peer's
 * registration whose key is rkey, into local (inside lmem, registered
 * here).  Never blocks and never calls cb before it returns.  A read
 * longer than the rail's own limit is made in parts; cb still runs once.
 * ROV_INPROGRESS: cb follows.  ROV_ERR_UNSUPPORTED: the connection is not
 * on a rail that reads remote memory now, the key names none on it, or the
 * key is from before the peer closed and reopened its rails: move the data
 * by message.  ROV_ERR_BUSY: the connection is not established
 * (connecting, quiesced, reopening).  ROV_ERR_INVAL: bad arguments (local outside lmem, a malformed key).
 */
rov_status_t rov_conn_get(rov_conn_t *conn, void *local, rov_mem_t *lmem, uint64_t remote,
                          const void *rkey, size_t len, rov_get_cb_t cb, void *arg);

/*
 * Checkpoint stages: quiesce, close the rails, reopen.  These are the
 * mechanisms a checkpointer (CRIU) needs to image a process that uses the
 * fabric: afterwards the process holds no rail resource (no socket of a
 * rail, no /dev/infiniband descriptor, no QP, MR or UCX worker), and every
 * rov_conn_t stays valid and loses nothing.
 *
 *   rov_context_quiesce()     RUNNING -> QUIESCING -> QUIESCED
 *   rov_context_close_rails() QUIESCED -> CLOSED
 *   rov_context_reopen()      CLOSED -> REOPENING -> RUNNING, or
 *                             QUIESCING/QUIESCED -> RUNNING (resume)
 *
 * While a context is not RUNNING, rov_conn_send() still accepts messages
 * (within the window: ROV_ERR_AGAIN as always): they are held, in order, and
 * go out after the reopen, exactly once; the caller sees only a delay.
 * rov_conn_close() on a quiescing or quiesced connection returns
 * ROV_INPROGRESS and closes it when it sends again (after the held sends);
 * a peer's CLOSE ends its side of a quiesce as its end marker would.
 * Failover does not act on quiesced connections: their
 * channels may end (the peer closed its rails) without a move.
 *
 * A peer that receives a connection's end-of-channel marker quiesces that
 * connection too (its sends on it are held) until this side reconnects
 * (after its reopen) or resumes.
 *
 * Threading (see the top of this file): with the progress helper (the
 * default) these may be called from any thread, or asked for through the
 * control socket ("quiesce", "close-rails", "reopen", "stage"), and each
 * stage completes while the owner computes without calling the library;
 * the stage events reach the owner's callback at its next progress call.
 * With RAILOVER_PROGRESS_THREAD=off they run in the owner's thread, the
 * control socket is served by its progress, and a quiesce advances only
 * inside progress (rov_progress, rov_context_wait): the owner must keep
 * calling it until ROV_EVENT_CONTEXT_QUIESCED.
 */
typedef enum rov_context_stage {
    ROV_CONTEXT_RUNNING,
    ROV_CONTEXT_QUIESCING,
    ROV_CONTEXT_QUIESCED,
    ROV_CONTEXT_CLOSED,
    ROV_CONTEXT_REOPENING,
} rov_context_stage_t;

/** Start a quiesce: each connection's sends are held, what was sent before
 * is sent and acknowledged, and each connection exchanges an end-of-channel
 * marker with its peer (which then quiesces that connection too).  A
 * connection whose peer dies meanwhile fails (ROV_EVENT_CONN_ERROR) and no
 * longer holds the quiesce up.  Returns ROV_INPROGRESS
 * (ROV_EVENT_CONTEXT_QUIESCED follows, inside progress), ROV_OK when the
 * context is quiesced already (a second request is harmless), ROV_ERR_BUSY
 * when its rails are closed or reopening.  Never blocks. */
rov_status_t rov_context_quiesce(rov_context_t *context);

/** Release every rail resource (channels, listeners, the rails' part of
 * memory registrations, rails) of a quiesced context; connections, the
 * endpoint and registrations (rov_mem_t) stay valid.  The reopen registers
 * the memory again under a new key (rov_mem_key() again); peers refuse a
 * key from before the close (ROV_ERR_UNSUPPORTED from rov_conn_get()).
 * ROV_OK (also when closed already), or ROV_ERR_BUSY (with a log line) when
 * the context is not quiesced.  Blocks only as long as the rails' own
 * teardown. */
rov_status_t rov_context_close_rails(rov_context_t *context);

/** Closed: open the rails again (RAILOVER_RAILS as at rov_context_create()),
 * listen again, each rail on its previous port if it can
 * (ROV_EVENT_ENDPOINT_ADDRESS; rov_endpoint_address() reads the address),
 * and reconnect every quiesced connection, its preferred rail first, to its
 * peer's address (rov_conn_set_peer_address() changes it); the reconnect
 * tells the peer this side's address, and the held sends follow, in order.
 * Returns ROV_INPROGRESS (ROV_EVENT_CONTEXT_RESUMED when no connection is
 * reconnecting any more), or a rail's error opening (the context stays
 * closed; try again).  Quiescing or quiesced: resume (the peers are told),
 * ROV_OK.  Running: ROV_OK. */
rov_status_t rov_context_reopen(rov_context_t *context);

/** The context's stage. */
rov_context_stage_t rov_context_stage(const rov_context_t *context);

/*
 * Stage hooks: for a checkpointer that drives the stages itself, or an
 * application that must act around them (flush a file before an image is
 * taken, say).  The hook is called before each stage starts and once after
 * it ends: stage is one of the ROV_STAGE_* names below (compare with
 * strcmp()), after 0, then 1 with ROV_OK or why the stage failed.  "checkpoint"
 * comes from ccp/ (include/railover/ccp.h): before the checkpoint command
 * starts (the rails closed), and when its result is in.  It runs in the
 * thread that runs the stage (the application's progress, or the progress
 * helper while the application computes: any thread, never two at once),
 * with the context's lock held; it may call the context's functions but
 * rov_context_destroy(), and should not block long (the stage waits).
 */
#define ROV_STAGE_QUIESCE "quiesce"
#define ROV_STAGE_CLOSE "close"
#define ROV_STAGE_CHECKPOINT "checkpoint"
#define ROV_STAGE_REOPEN "reopen"
typedef void (*rov_stage_hook_t)(void *arg, rov_context_t *context, const char *stage,
                                 int after, rov_status_t status);
/** Set the hook (NULL: none). */
void rov_context_set_stage_hook(rov_context_t *context, rov_stage_hook_t hook, void *arg);
/** Its name: "running", "quiescing", "quiesced", "closed", "reopening". */
const char *rov_context_stage_str(rov_context_stage_t stage);

/** Give conn its peer's new address (the peer was restored elsewhere, or
 * reopened with new ports): an address blob of the same peer endpoint, with
 * or without its key.  A reconnect goes there from now on.  ROV_OK;
 * ROV_ERR_INVAL for a malformed blob or one of another endpoint. */
rov_status_t rov_conn_set_peer_address(rov_conn_t *conn, const void *addr, size_t addr_len);

/*
 * Control endpoints, for tools (`railover status|force|release`, a
 * checkpoint client): each context serves a Unix stream socket, owner-only,
 * in a per-user run directory.  A client sends one request line ("verb arg
 * ...\n", at most ROV_CTL_LINE_MAX bytes) and reads text lines up to a final
 * "ok" or "error: <message>".  These calls let a client find and trust the
 * directory exactly as the library does.
 */
#define ROV_CTL_LINE_MAX 4096

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
rov_status_t rov_ctl_run_dir_check(const char *dir, char *why, size_t why_len);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif
