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

#include "railover/ctl.h"
#include "railover/railover.h"
#include "transport/auth.h"

#define ROV_CTL_MAX_ARGS 16
#define ROV_CTL_NONCE_LEN 32
#define ROV_CTL_WHERE_MAX 64  /* "IP:PORT" */
/* The network endpoint's first line: this, then the challenge in hex. */
#define ROV_CTL_CHALLENGE "railover-control challenge "

/* Shared by the server (control.c) and the client (ctl_client.c): a network
 * request's proof, the MAC under the job's key over the challenge and the
 * request, and the hex form it travels in. */
void rov_ctl_mac(const uint8_t key[ROV_KEY_LEN], const uint8_t nonce[ROV_CTL_NONCE_LEN],
                 const char *req, uint8_t mac[ROV_MAC_LEN]);
void rov_ctl_hex_encode(const uint8_t *b, size_t n, char *out);
bool rov_ctl_hex_decode(const char *s, uint8_t *b, size_t n);

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

/**
 * Wake the context when fd becomes readable, for a policy whose cue comes
 * from outside the control protocol (a signal handler writing to an
 * eventfd): fd joins the control set edge-triggered (each write to an
 * eventfd is one wake-up; fd is never read), so the progress helper wakes
 * for it while the application computes, as the application's progress
 * does, and cb runs from the progress that serves the set, the context's
 * lock held.  One per context (a second call replaces the first, the same
 * one again changes nothing); dropped
 * with the control socket (rov_ctl_close()); fd stays the caller's.
 * ROV_ERR_NOT_FOUND without a control socket, ROV_ERR_IO (logged) when
 * epoll refuses it.
 */
rov_status_t rov_ctl_wake_on(rov_context_t *ctx, int fd, void (*cb)(rov_context_t *ctx));

/** Path of the context's control socket, or NULL when it has none. */
const char *rov_ctl_path(const rov_context_t *ctx);
/**
 * The network control endpoint: a TCP listener on arg (an IP address or an
 * interface name, rov_net_resolve()), port chosen by the kernel, serving
 * the same commands to clients on other hosts.  It opens each connection
 * with a line "railover-control challenge <hex>"; a request must then be
 * "auth <proof> <request>", the proof an HMAC under key over the challenge
 * and the request, or it is refused ("error: permission denied: ...").
 * Needs the control socket (rov_ctl_open()); closed with it.
 */
rov_status_t rov_ctl_net_open(rov_context_t *ctx, const char *arg,
                              const uint8_t key[ROV_KEY_LEN]);
/** A new key for the network endpoint's proofs (the job's secret changed). */
void rov_ctl_net_rekey(rov_context_t *ctx, const uint8_t key[ROV_KEY_LEN]);
/** "IP:PORT" of the network endpoint, or NULL when there is none. */
const char *rov_ctl_net_where(const rov_context_t *ctx);

/* The client's side, rov_ctl_request(), is public: railover/ctl.h. */

/** Serve the requests that are ready (the context's dispatch calls it
 * after its epoll batch when the control set was readable). */
void rov_ctl_serve(rov_context_t *ctx);

/** The control socket's epoll set (readable when a request is waiting),
 * or -1 without a control socket: what the progress helper sleeps on. */
int rov_ctl_fd(const rov_context_t *ctx);

#endif
