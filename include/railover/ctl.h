/*
 * Railover control client: one request to a process's control endpoint
 * (docs/control.md), as the `railover` tool and the checkpoint client
 * (cprclient, rov_job_*) send them.  This is the library's only client of
 * the control protocol; finding the endpoints (the run directory, the job
 * registry) is the caller's part (railover.h: rov_ctl_run_dir(); ccp.h).
 *
 * Threading: uses no context; blocks the calling thread for at most the
 * given time; may run in any thread.
 */
#ifndef RAILOVER_CTL_H
#define RAILOVER_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "railover/railover.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported like railover.h's declarations (the library hides the rest). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/** Length of the job's secret that proves a request to a network endpoint. */
#define ROV_CTL_KEY_LEN 32

/** Longest answer rov_ctl_request() takes (a status of thousands of
 * connections is a few MB). */
#define ROV_CTL_ANSWER_MAX (16u << 20)

/**
 * Send one request line (without its newline, at most ROV_CTL_LINE_MAX - 1
 * bytes) to the control endpoint where, and read the whole answer.
 *
 * where is a control socket's path (starting with '/'), or the "IP:PORT"
 * (or "[IPv6]:PORT") of a network control endpoint; for the latter key
 * (ROV_CTL_KEY_LEN bytes, the job's secret) proves the request against the
 * endpoint's challenge, for a socket it is not used (may be NULL).  The
 * server of a socket must run as our effective uid (SO_PEERCRED); nothing
 * is sent to another's.
 *
 * An endpoint that answers busy (as many clients as it serves; it ran
 * nothing) is asked again, after 20 ms doubling up to 250 ms, as long as a
 * new attempt can start within busy_s of the call with 0.1 s left of
 * timeout_s (busy_s 0: not asked again).  The whole call, every attempt
 * included, takes at most timeout_s.
 *
 * Returns ROV_OK with *answer_p the answer (malloc'd, NUL-terminated, free()
 * it: text lines, the last "ok" or "error: ..."; it may itself hold a NUL
 * byte, so *len_p, when len_p is not NULL, is its length).  Otherwise
 * *answer_p is NULL and err (truncated to err_len) says why:
 *   ROV_ERR_AGAIN        still busy when busy_s ran out: err is the
 *                        endpoint's "busy: ..." line (printable);
 *   ROV_ERR_REFUSED      the socket is served by another uid (err names the
 *                        socket, its uid and ours), or SO_PEERCRED failed;
 *   ROV_ERR_NOT_FOUND    a socket path with no socket file, or one nobody
 *                        listens on (the process that made it is gone);
 *   ROV_ERR_TIMEDOUT     no connection or no complete answer in time;
 *   ROV_ERR_PROTO        not a Railover control endpoint, or an answer
 *                        longer than ROV_CTL_ANSWER_MAX;
 *   ROV_ERR_UNREACHABLE  any other failure to connect, send or receive;
 *   ROV_ERR_INVAL        a malformed where, a request too long, a network
 *                        endpoint without key;
 *   ROV_ERR_NOMEM.
 * RAILOVER_LOG=debug (once the log level is set: a context, rov_job_open())
 * logs each busy answer and the pause before the next attempt.
 */
rov_status_t rov_ctl_request(const char *where, const uint8_t *key, const char *request,
                             double timeout_s, double busy_s, char **answer_p, size_t *len_p,
                             char *err, size_t err_len);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif
