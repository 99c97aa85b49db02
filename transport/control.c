/*
 * The per-process control endpoint.  Everything runs in the progress thread
 * from the context's epoll set, and nothing blocks: a client that does not
 * finish its request, or does not read its answer, costs a slot and a
 * buffer, never the application's progress.
 */
#define _GNU_SOURCE /* struct ucred, accept4 */
#include "transport/control.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include "transport/auth.h"
#include "transport/core.h"
#include "transport/log.h"
#include "transport/netaddr.h"

#define CTL_MAX_CMDS 32
/* Separate budgets: the control socket's clients (our own uid) take slots
 * [0, CTL_MAX_LOCAL), the network endpoint's the rest, so that no number of
 * strangers on the network keeps the owner off the local socket. */
#define CTL_MAX_LOCAL 16
#define CTL_MAX_NET 16
#define CTL_MAX_CLIENTS (CTL_MAX_LOCAL + CTL_MAX_NET)
#define CTL_BACKLOG 16
#define CTL_ACCEPT_BATCH 16
/* Events of the control set served in one pass (rov_ctl_serve()). */
#define CTL_EVENT_BATCH 64
/* A full table makes room by dropping a client that has held its slot for
 * this long (a local client, or a network client that proved the secret
 * and then does not read its answer). */
#define CTL_CLIENT_IDLE_NS (10ull * 1000000000ull)
/* A network client that has not sent its request with the job's proof
 * this long after the challenge is dropped (a client with the secret
 * answers in one round trip). */
#define CTL_NET_PROOF_NS (1ull * 1000000000ull)
/* Request bytes after the line are discarded before close, up to this, so
 * the kernel does not reset the connection under the client's answer. */
#define CTL_DRAIN_MAX (64 * 1024)

struct ctl_client {
    struct rov_watch watch;
    struct rov_ctl *ctl;
    int slot;
    bool net;             /* on the network endpoint: the request carries a proof */
    char peer[64];        /* network: the client's IP:PORT, for the log */
    uint8_t nonce[ROV_CTL_NONCE_LEN]; /* its challenge */
    uint64_t since_ns;    /* accepted at */
    bool answering;       /* request handled; sending the answer */
    size_t in_len;
    char in[ROV_CTL_LINE_MAX + 1];
    char *out;            /* the whole answer (open_memstream buffer) */
    size_t out_len, out_off;
};

struct rov_ctl {
    rov_context_t *ctx;
    /* The control socket's own epoll set (the listener and the clients),
     * watched as one descriptor in the context's set: the progress helper
     * (helper.c) sleeps on it alone while the application computes. */
    struct rov_watch set;
    struct rov_watch listen;
    struct rov_watch net_listen;          /* fd -1: no network endpoint */
    uint8_t net_key[ROV_KEY_LEN];         /* what its clients prove */
    char net_where[ROV_CTL_WHERE_MAX];    /* "IP:PORT" */
    struct rov_watch proof_timer;         /* timerfd (fd -1 without a network
                                           * endpoint): CTL_NET_PROOF_NS expired */
    struct rov_watch wake;                /* a policy's descriptor (rov_ctl_wake_on()),
                                           * not ours to close; fd -1: none */
    void (*wake_cb)(rov_context_t *ctx);
    struct ctl_client *clients[CTL_MAX_CLIENTS];
    /* The events rov_ctl_serve() is running: a client freed meanwhile is
     * taken out of those still to come. */
    struct epoll_event batch[CTL_EVENT_BATCH];
    int batch_n;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* Watches in the control set ----------------------------------------------- */

static int set_ctl(struct rov_ctl *ctl, int op, struct rov_watch *w, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = w};

    if (epoll_ctl(ctl->set.fd, op, w->fd, op == EPOLL_CTL_DEL ? NULL : &ev) == 0)
        return ROV_OK;
    if (op != EPOLL_CTL_DEL)
        rov_warn("ctl", "epoll_ctl(fd %d): %m", w->fd);
    return ROV_ERR_IO;
}

/* The control set is readable: served once the context's epoll batch is
 * over (rov_ctl_serve(), from dispatch()), since a command may close the
 * rails whose channels later events of the batch still name. */
static void set_cb(struct rov_watch *w, uint32_t events)
{
    struct rov_ctl *ctl = rov_container_of(w, struct rov_ctl, set);

    (void)events;
    ctl->ctx->ctl_ready = true;
}

void rov_ctl_serve(rov_context_t *ctx)
{
    struct rov_ctl *ctl = ctx->ctl;
    int n;

    ctx->ctl_ready = false;
    if (!ctl)
        return;
    n = epoll_wait(ctl->set.fd, ctl->batch, CTL_EVENT_BATCH, 0);
    ctl->batch_n = n > 0 ? n : 0;
    for (int i = 0; i < ctl->batch_n; i++) {
        struct rov_watch *w = ctl->batch[i].data.ptr;

        if (w)
            w->cb(w, ctl->batch[i].events);
    }
    ctl->batch_n = 0;
}

int rov_ctl_fd(const rov_context_t *ctx)
{
    return ctx->ctl ? ctx->ctl->set.fd : -1;
}

/* Registry ----------------------------------------------------------------- */

static const struct rov_ctl_cmd *registry[CTL_MAX_CMDS];
static int ncmds;

static const struct rov_ctl_cmd *cmd_lookup(const char *verb)
{
    for (int i = 0; i < ncmds; i++)
        if (strcmp(registry[i]->verb, verb) == 0)
            return registry[i];
    return NULL;
}

void rov_ctl_register(const struct rov_ctl_cmd *cmd)
{
    /* A bug in the registering layer, found before main() runs. */
    if (!cmd->verb || !cmd->verb[0] || !cmd->usage || !cmd->help || !cmd->fn) {
        fprintf(stderr, "railover: control command '%s' lacks a verb, usage, help or "
                "handler; not registered\n", cmd->verb ? cmd->verb : "?");
        abort();
    }
    if (cmd_lookup(cmd->verb)) {
        fprintf(stderr, "railover: control command '%s' registered twice\n", cmd->verb);
        abort();
    }
    if (ncmds == CTL_MAX_CMDS) {
        fprintf(stderr, "railover: cannot register control command '%s': table full (%d)\n",
                cmd->verb, CTL_MAX_CMDS);
        abort();
    }
    registry[ncmds++] = cmd;
}

/* Run directory --------------------------------------------------------------- */

/* Whether path is an existing directory (not a symlink) owned by us. */
static bool own_dir(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid();
}

rov_status_t rov_ctl_run_dir(const rov_config_t *config, char *buf, size_t len)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;

    if (config && config->run_dir[0])
        n = snprintf(buf, len, "%s", config->run_dir);
    else if (xdg && xdg[0] == '/' && strlen(xdg) + sizeof("/railover") <= ROV_CTL_RUN_DIR_MAX &&
             own_dir(xdg))
        n = snprintf(buf, len, "%s/railover", xdg);
    else
        n = snprintf(buf, len, "/tmp/railover-%u", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= len || (size_t)n >= ROV_CTL_RUN_DIR_MAX)
        return ROV_ERR_INVAL;
    /* lstat("/x/link/") follows the link; "/x/link" does not. */
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    return ROV_OK;
}

rov_status_t rov_ctl_run_dir_check(const char *dir, char *why, size_t why_len)
{
    const char *base = strrchr(dir, '/');
    struct stat st;

    base = base ? base + 1 : dir;
    /* Each of these makes lstat() resolve a symbolic link in the last
     * component, which the check below exists to refuse. */
    if (!dir[0] || (base[0] == '\0' && base != dir + 1) || strcmp(base, ".") == 0 ||
        strcmp(base, "..") == 0) {
        snprintf(why, why_len, "run directory '%s' does not end in a directory name (no "
                 "trailing '/', '.' or '..')", dir);
        return ROV_ERR_INVAL;
    }
    if (lstat(dir, &st) < 0) {
        int err = errno;

        snprintf(why, why_len, "run directory %s: %s", dir, strerror(err));
        return err == ENOENT ? ROV_ERR_NOT_FOUND : ROV_ERR_IO;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, why_len, "run directory %s is not a directory%s", dir,
                 S_ISLNK(st.st_mode) ? " (a symbolic link)" : "");
        return ROV_ERR_INVAL;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, why_len, "run directory %s belongs to uid %u, not to us (uid %u)", dir,
                 (unsigned)st.st_uid, (unsigned)geteuid());
        return ROV_ERR_INVAL;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(why, why_len, "run directory %s has mode %03o; it must be accessible by its "
                 "owner only (chmod 700)", dir, (unsigned)(st.st_mode & 0777));
        return ROV_ERR_INVAL;
    }
    return ROV_OK;
}

/* Create the run directory if needed and check that it is safe.  Sockets are
 * protected by the directory alone (connect() needs search permission on
 * it), so this is the whole access control besides SO_PEERCRED. */
static bool run_dir_ready(const char *dir)
{
    char why[256];

    if (mkdir(dir, 0700) == 0) {
        /* The umask may have taken bits we need; it cannot have added any. */
        if (chmod(dir, 0700) < 0) {
            rov_warn("ctl", "chmod %s: %m; running without a control socket", dir);
            return false;
        }
    } else if (errno != EEXIST) {
        rov_warn("ctl", "cannot create run directory %s: %m; running without a control socket",
                 dir);
        return false;
    }
    if (rov_ctl_run_dir_check(dir, why, sizeof(why)) != ROV_OK) {
        rov_warn("ctl", "%s; running without a control socket", why);
        return false;
    }
    return true;
}

/* Clients --------------------------------------------------------------------- */

static void client_free(struct ctl_client *c, bool drain)
{
    struct rov_ctl *ctl = c->ctl;

    if (drain) {
        char sink[4096];
        size_t total = 0;
        ssize_t n;

        while (total < CTL_DRAIN_MAX && (n = read(c->watch.fd, sink, sizeof(sink))) > 0)
            total += (size_t)n;
    }
    set_ctl(ctl, EPOLL_CTL_DEL, &c->watch, 0);
    close(c->watch.fd);
    /* An event of this client later in the batch being served must not
     * reach its freed memory. */
    for (int i = 0; i < ctl->batch_n; i++)
        if (ctl->batch[i].data.ptr == &c->watch)
            ctl->batch[i].data.ptr = NULL;
    ctl->clients[c->slot] = NULL;
    free(c->out);
    free(c);
}

/* Send what the socket takes; returns false when the client is done (all
 * sent, or the client went away). */
static bool client_flush(struct ctl_client *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->watch.fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return true;
            rov_debug("ctl", "client fd %d: send: %m; answer dropped", c->watch.fd);
            return false;
        }
        c->out_off += (size_t)n;
    }
    return false;
}

/* Keep an error message to one line. */
static void one_line(char *s)
{
    size_t n;

    for (char *p = s; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    n = strlen(s);
    while (n > 0 && s[n - 1] == ' ')
        s[--n] = '\0';
}

/* Run the request in line (NUL-terminated, no newline) and write the answer,
 * including its final "ok" or "error: ..." line, to out, the open_memstream
 * of *buf_p and *size_p. */
static void run_request(rov_context_t *ctx, char *line, FILE *out, char **buf_p,
                        size_t *size_p)
{
    char *argv[ROV_CTL_MAX_ARGS + 1];
    char err[256] = "";
    const struct rov_ctl_cmd *cmd;
    char *save = NULL, *tok;
    int argc = 0, rc;

    for (tok = strtok_r(line, " \t\r", &save); tok; tok = strtok_r(NULL, " \t\r", &save)) {
        if (argc == ROV_CTL_MAX_ARGS) {
            fprintf(out, "error: more than %d arguments\n", ROV_CTL_MAX_ARGS);
            return;
        }
        argv[argc++] = tok;
    }
    argv[argc] = NULL;
    if (argc == 0) {
        fputs("error: empty request (try 'help')\n", out);
        return;
    }
    cmd = cmd_lookup(argv[0]);
    if (!cmd) {
        fprintf(out, "error: unknown command '%s' (try 'help')\n", argv[0]);
        return;
    }
    rc = cmd->fn(ctx, argc, argv, out, err, sizeof(err));
    /* The verdict must be a line of its own: finish a partial line. */
    if (fflush(out) == 0 && *size_p > 0 && (*buf_p)[*size_p - 1] != '\n')
        fputc('\n', out);
    if (rc == 0) {
        fputs("ok\n", out);
        return;
    }
    one_line(err);
    fprintf(out, "error: %s\n", err[0] ? err : "command failed");
}

/* Network requests: "auth <MAC hex> <request>", the MAC under the
 * endpoint's key over the challenge and the request (rov_ctl_mac()). */
#define CTL_AUTH_PREFIX (5 + 2 * ROV_MAC_LEN + 1)

void rov_ctl_mac(const uint8_t key[ROV_KEY_LEN], const uint8_t nonce[ROV_CTL_NONCE_LEN],
                    const char *req, uint8_t mac[ROV_MAC_LEN])
{
    const struct rov_auth_piece pieces[2] = {{nonce, ROV_CTL_NONCE_LEN}, {req, strlen(req)}};

    rov_auth_mac(key, "railover control request", pieces, 2, mac);
}

void rov_ctl_hex_encode(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

bool rov_ctl_hex_decode(const char *s, uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;

        if (!isxdigit((unsigned char)s[2 * i]) || !isxdigit((unsigned char)s[2 * i + 1]) ||
            sscanf(s + 2 * i, "%2x", &v) != 1)
            return false;
        b[i] = (uint8_t)v;
    }
    return true;
}

/* NULL when c->in (NUL-terminated) carries a good proof, else why not. */
static const char *net_request_check(struct ctl_client *c)
{
    uint8_t got[ROV_MAC_LEN], want[ROV_MAC_LEN];

    if (strlen(c->in) < CTL_AUTH_PREFIX || strncmp(c->in, "auth ", 5) != 0 ||
        c->in[CTL_AUTH_PREFIX - 1] != ' ' || !rov_ctl_hex_decode(c->in + 5, got, ROV_MAC_LEN))
        return "a request on the network control endpoint must be 'auth <proof> <request>'";
    rov_ctl_mac(c->ctl->net_key, c->nonce, c->in + CTL_AUTH_PREFIX, want);
    if (!rov_auth_mac_equal(got, want))
        return "the request does not carry this job's proof (wrong secret, or a stale "
               "challenge)";
    return NULL;
}

/* A whole request is in c->in (terminated by a newline or by the client's
 * end of stream): answer it. */
static void client_answer(struct ctl_client *c)
{
    char *nl = memchr(c->in, '\n', c->in_len);
    size_t size = 0;
    FILE *out;

    c->in[nl ? (size_t)(nl - c->in) : c->in_len] = '\0';
    c->answering = true;
    out = open_memstream(&c->out, &size);
    if (!out) {
        static const char nomem[] = "error: out of memory\n";

        rov_warn("ctl", "open_memstream: %m");
        c->out = strdup(nomem);
        c->out_len = c->out ? sizeof(nomem) - 1 : 0;
        return;
    }
    if (c->net) {
        const char *why = net_request_check(c);

        if (why) {
            rov_log_ratelimited(ROV_LOG_WARN, "ctl", "network control client refused: %s", why);
            fprintf(out, "error: permission denied: %s\n", why);
            goto done;
        }
        memmove(c->in, c->in + CTL_AUTH_PREFIX, strlen(c->in) - CTL_AUTH_PREFIX + 1);
    }
    rov_debug("ctl", "request '%s'", c->in);
    run_request(c->ctl->ctx, c->in, out, &c->out, &size);
done:
    if (fclose(out) != 0) {
        free(c->out);
        c->out = NULL;
        size = 0;
    }
    c->out_len = size;
}

static void client_cb(struct rov_watch *w, uint32_t events)
{
    struct ctl_client *c = rov_container_of(w, struct ctl_client, watch);
    bool eof = false;

    if (events & EPOLLERR) {
        client_free(c, false);
        return;
    }
    if (!c->answering) {
        while (c->in_len < ROV_CTL_LINE_MAX) {
            ssize_t n = read(w->fd, c->in + c->in_len, ROV_CTL_LINE_MAX - c->in_len);

            if (n > 0) {
                bool line = memchr(c->in + c->in_len, '\n', (size_t)n) != NULL;

                c->in_len += (size_t)n;
                if (line)
                    break;
                continue;
            }
            if (n == 0) {
                eof = true;
            } else if (errno == EINTR) {
                continue;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                rov_debug("ctl", "client fd %d: read: %m", w->fd);
                client_free(c, false);
                return;
            }
            break;
        }
        if (memchr(c->in, '\n', c->in_len)) {
            client_answer(c);
        } else if (c->in_len == ROV_CTL_LINE_MAX) {
            char msg[64];
            int len = snprintf(msg, sizeof(msg), "error: request longer than %d bytes\n",
                               ROV_CTL_LINE_MAX);

            rov_debug("ctl", "client fd %d: request longer than %d bytes", w->fd,
                      ROV_CTL_LINE_MAX);
            c->answering = true;
            c->out = strndup(msg, (size_t)len);
            c->out_len = c->out ? (size_t)len : 0;
        } else if (eof && c->in_len > 0) {
            client_answer(c); /* the client ended its line by shutting down */
        } else if (eof) {
            client_free(c, false); /* went away without asking anything */
            return;
        } else {
            return; /* wait for the rest of the line */
        }
    }
    if (client_flush(c)) {
        /* Socket full: wait for room, no longer for requests. */
        if (!(events & EPOLLOUT) && set_ctl(c->ctl, EPOLL_CTL_MOD, w, EPOLLOUT) != ROV_OK)
            client_free(c, false);
        return;
    }
    client_free(c, true);
}

/* Tell a client we will not serve why, then close.  Best effort and never
 * blocking: the line fits in an empty socket buffer.  The request, if it came
 * already, is read first so that the close does not reset the connection
 * under the reason. */
static void __attribute__((format(printf, 2, 3))) client_refuse(int fd, const char *fmt, ...)
{
    char msg[256], sink[4096];
    size_t total = 0;
    va_list ap;
    ssize_t n;
    int len;

    va_start(ap, fmt);
    len = vsnprintf(msg, sizeof(msg) - 1, fmt, ap);
    va_end(ap);
    if (len > 0) {
        if ((size_t)len > sizeof(msg) - 2)
            len = (int)sizeof(msg) - 2;
        msg[len++] = '\n';
        if (send(fd, msg, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
            rov_debug("ctl", "client fd %d: send: %m; reason for the refusal dropped", fd);
    }
    shutdown(fd, SHUT_WR);
    while (total < CTL_DRAIN_MAX && (n = read(fd, sink, sizeof(sink))) > 0)
        total += (size_t)n;
    close(fd);
}

/* The slots of one budget: [*lo_p, *hi_p). */
static void budget(bool net, int *lo_p, int *hi_p)
{
    *lo_p = net ? CTL_MAX_LOCAL : 0;
    *hi_p = net ? CTL_MAX_CLIENTS : CTL_MAX_LOCAL;
}

/* With a full budget, drop its oldest client that has held its slot for too
 * long, whether it has not finished its request or does not read its
 * answer: either way it is not a client that will complete.  Returns the
 * freed slot or -1. */
static int evict_idle(struct rov_ctl *ctl, bool net)
{
    uint64_t now = rov_now_ns();
    struct ctl_client *oldest = NULL;
    int slot, lo, hi;

    budget(net, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        struct ctl_client *c = ctl->clients[i];

        if (c && now - c->since_ns > CTL_CLIENT_IDLE_NS &&
            (!oldest || c->since_ns < oldest->since_ns))
            oldest = c;
    }
    if (!oldest)
        return -1;
    rov_debug("ctl", "client fd %d: %s after %" PRIu64 " s; dropped for a new client",
              oldest->watch.fd, oldest->answering ? "answer not read" : "no request",
              (now - oldest->since_ns) / UINT64_C(1000000000));
    slot = oldest->slot;
    client_free(oldest, false);
    return slot;
}

/* Tell a client in the table why it is dropped, then drop it.  Best effort
 * and never blocking, like client_refuse(). */
static void client_drop(struct ctl_client *c, const char *msg)
{
    if (send(c->watch.fd, msg, strlen(msg), MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        rov_debug("ctl", "client fd %d: send: %m; reason for the drop lost", c->watch.fd);
    shutdown(c->watch.fd, SHUT_WR);
    client_free(c, true);
}

/* A network client that has not sent its request with a proof: the one
 * that has waited longest, or NULL. */
static struct ctl_client *oldest_unproven(struct rov_ctl *ctl, uint64_t before_ns)
{
    struct ctl_client *oldest = NULL;

    for (int i = CTL_MAX_LOCAL; i < CTL_MAX_CLIENTS; i++) {
        struct ctl_client *c = ctl->clients[i];

        if (c && !c->answering && c->since_ns <= before_ns &&
            (!oldest || c->since_ns < oldest->since_ns))
            oldest = c;
    }
    return oldest;
}

/* Read what c has sent that is not served yet (its event may be behind us
 * in the batch): a request that has arrived is answered, not dropped.
 * Returns whether c still waits for its request (false: answered or gone). */
static bool still_unproven(struct rov_ctl *ctl, struct ctl_client *c)
{
    int slot = c->slot;

    client_cb(&c->watch, EPOLLIN);
    return ctl->clients[slot] == c && !c->answering;
}

/* The network budget is full: make room by shedding the oldest client that
 * has not proved the secret (a stranger cannot hold a slot against a new
 * client; one with the secret proves it in a round trip).  Returns the
 * freed slot or -1 when every client has proved it. */
static int shed_unproven(struct rov_ctl *ctl)
{
    for (int tries = 0; tries < CTL_MAX_NET; tries++) {
        struct ctl_client *c = oldest_unproven(ctl, UINT64_MAX);
        int slot;

        if (!c)
            return -1;
        slot = c->slot;
        if (still_unproven(ctl, c)) {
            rov_log_ratelimited(ROV_LOG_WARN, "ctl", "network control client %s dropped for "
                                "a newer one: %d network clients and it sent no request "
                                "with the job's proof", c->peer, CTL_MAX_NET);
            client_drop(c, "error: busy: dropped for a newer client before this one sent "
                        "a request with the job's proof; try again\n");
            return slot;
        }
        if (!ctl->clients[slot])
            return slot; /* answered and done */
    }
    return -1;
}

/* The proof timer: the network endpoint's first timed-out client, or none. */
static void proof_timer_arm(struct rov_ctl *ctl)
{
    struct ctl_client *c;
    struct itimerspec its = {{0, 0}, {0, 0}};

    if (ctl->proof_timer.fd < 0)
        return;
    c = oldest_unproven(ctl, UINT64_MAX);
    if (c) {
        uint64_t due = c->since_ns + CTL_NET_PROOF_NS;

        its.it_value.tv_sec = (time_t)(due / 1000000000ull);
        its.it_value.tv_nsec = (long)(due % 1000000000ull);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1;
    }
    if (timerfd_settime(ctl->proof_timer.fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        rov_warn("ctl", "timerfd_settime: %m");
}

/* Network clients without a proof CTL_NET_PROOF_NS after their challenge are
 * dropped, the table full or not: a stranger holds no descriptor for long. */
static void proof_timer_cb(struct rov_watch *w, uint32_t events)
{
    struct rov_ctl *ctl = rov_container_of(w, struct rov_ctl, proof_timer);
    uint64_t expirations, now = rov_now_ns();
    struct ctl_client *c;

    (void)events;
    if (read(w->fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
        rov_debug("ctl", "timerfd read: %m");
    for (int i = 0; i < CTL_MAX_NET; i++) {
        c = oldest_unproven(ctl, now - CTL_NET_PROOF_NS);
        if (!c)
            break;
        if (still_unproven(ctl, c)) {
            rov_log_ratelimited(ROV_LOG_WARN, "ctl", "network control client %s dropped: no "
                                "request with the job's proof within %.0f s", c->peer,
                                (double)CTL_NET_PROOF_NS / 1e9);
            client_drop(c, "error: busy: no request with the job's proof within 1 s of the "
                        "challenge; try again\n");
        }
    }
    proof_timer_arm(ctl);
}

static void client_new(struct rov_ctl *ctl, int fd, bool net)
{
    struct ucred cred = {.pid = -1};
    socklen_t len = sizeof(cred);
    struct ctl_client *c;
    char peer[sizeof(c->peer)] = "";
    int slot = -1, lo, hi;

    if (net) {
        /* Anyone may connect; only a request with the key's proof runs. */
        struct sockaddr_storage ss;
        socklen_t sslen = sizeof(ss);

        if (getpeername(fd, (struct sockaddr *)&ss, &sslen) == 0)
            rov_net_sockaddr_str(&ss, peer, sizeof(peer));
    } else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        rov_debug("ctl", "SO_PEERCRED: %m; client refused");
        close(fd);
        return;
    }
    if (!net && cred.uid != geteuid()) {
        rov_debug("ctl", "client pid %d uid %u refused: not our uid %u", (int)cred.pid,
                  (unsigned)cred.uid, (unsigned)geteuid());
        client_refuse(fd, "error: permission denied: only uid %u, which runs this process, "
                      "may use its control socket (you are uid %u)", (unsigned)geteuid(),
                      (unsigned)cred.uid);
        return;
    }
    budget(net, &lo, &hi);
    for (int i = lo; i < hi && slot < 0; i++)
        if (!ctl->clients[i])
            slot = i;
    if (slot < 0 && net)
        slot = shed_unproven(ctl);
    if (slot < 0)
        slot = evict_idle(ctl, net);
    if (slot < 0) {
        rov_debug("ctl", "%s client %s refused: %d clients already", net ? "network" : "local",
                  net ? peer : "", hi - lo);
        client_refuse(fd, "error: busy: %d %scontrol clients already; try again later", hi - lo,
                      net ? "network " : "");
        return;
    }
    c = malloc(sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    c->watch.fd = fd;
    c->watch.cb = client_cb;
    c->ctl = ctl;
    c->slot = slot;
    c->since_ns = rov_now_ns();
    c->answering = false;
    c->in_len = 0;
    c->out = NULL;
    c->out_len = c->out_off = 0;
    c->net = net;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    if (net) {
        char hello[sizeof(ROV_CTL_CHALLENGE) + 2 * ROV_CTL_NONCE_LEN + 1];

        /* The challenge fits in an empty socket buffer: a send that does
         * not take it all means a broken connection. */
        if (rov_auth_random(c->nonce, sizeof(c->nonce)) != ROV_OK) {
            close(fd);
            free(c);
            return;
        }
        memcpy(hello, ROV_CTL_CHALLENGE, sizeof(ROV_CTL_CHALLENGE) - 1);
        rov_ctl_hex_encode(c->nonce, sizeof(c->nonce), hello + sizeof(ROV_CTL_CHALLENGE) - 1);
        hello[sizeof(hello) - 2] = '\n';
        if (send(fd, hello, sizeof(hello) - 1, MSG_DONTWAIT | MSG_NOSIGNAL) !=
            (ssize_t)sizeof(hello) - 1) {
            close(fd);
            free(c);
            return;
        }
    }
    if (set_ctl(ctl, EPOLL_CTL_ADD, &c->watch, EPOLLIN) != ROV_OK) {
        close(fd);
        free(c);
        return;
    }
    ctl->clients[slot] = c;
    if (net)
        proof_timer_arm(ctl);
}

static void accept_batch(struct rov_ctl *ctl, int lfd, bool net)
{
    for (int i = 0; i < CTL_ACCEPT_BATCH; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                errno != ECONNABORTED)
                rov_log_ratelimited(ROV_LOG_WARN, "ctl", "accept on %s: %m",
                                    net ? ctl->net_where : ctl->path);
            return;
        }
        client_new(ctl, fd, net);
    }
}

static void listen_cb(struct rov_watch *w, uint32_t events)
{
    accept_batch(rov_container_of(w, struct rov_ctl, listen), w->fd, false);
}

static void net_listen_cb(struct rov_watch *w, uint32_t events)
{
    accept_batch(rov_container_of(w, struct rov_ctl, net_listen), w->fd, true);
}

/* Socket ------------------------------------------------------------------------ */

void rov_ctl_open(rov_context_t *ctx)
{
    static atomic_uint seq; /* contexts of this process with a control socket */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char dir[ROV_CTL_RUN_DIR_MAX];
    struct rov_ctl *ctl;
    unsigned n;
    int fd;

    if (!ctx->config.control)
        return;
    if (rov_ctl_run_dir(&ctx->config, dir, sizeof(dir)) != ROV_OK) {
        rov_warn("ctl", "run directory path too long; running without a control socket");
        return;
    }
    if (!run_dir_ready(dir))
        return;
    n = atomic_fetch_add(&seq, 1);
    if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%d.%u.sock", dir, (int)getpid(), n) >=
        (int)sizeof(sa.sun_path)) {
        rov_warn("ctl", "socket path in %s too long; running without a control socket", dir);
        return;
    }
    ctl = calloc(1, sizeof(*ctl));
    if (!ctl) {
        rov_warn("ctl", "out of memory; running without a control socket");
        return;
    }
    ctl->ctx = ctx;
    ctl->net_listen.fd = -1;
    ctl->proof_timer.fd = -1;
    ctl->wake.fd = -1;
    snprintf(ctl->path, sizeof(ctl->path), "%s", sa.sun_path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rov_warn("ctl", "socket(AF_UNIX): %m; running without a control socket");
        goto err_free;
    }
    /* A file of this name is left by an earlier process with our pid. */
    if (unlink(ctl->path) < 0 && errno != ENOENT) {
        rov_warn("ctl", "cannot remove stale %s: %m; running without a control socket",
                 ctl->path);
        goto err_close;
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        rov_warn("ctl", "bind %s: %m; running without a control socket", ctl->path);
        goto err_close;
    }
    /* Until this chmod the socket has the umask's mode, but the directory
     * (0700) already keeps everyone else out. */
    if (chmod(ctl->path, 0600) < 0) {
        rov_warn("ctl", "chmod %s: %m; running without a control socket", ctl->path);
        goto err_unlink;
    }
    if (listen(fd, CTL_BACKLOG) < 0) {
        rov_warn("ctl", "listen %s: %m; running without a control socket", ctl->path);
        goto err_unlink;
    }
    ctl->listen.fd = fd;
    ctl->listen.cb = listen_cb;
    ctl->set.fd = epoll_create1(EPOLL_CLOEXEC);
    ctl->set.cb = set_cb;
    if (ctl->set.fd < 0) {
        rov_warn("ctl", "epoll_create1: %m; running without a control socket");
        goto err_unlink;
    }
    if (set_ctl(ctl, EPOLL_CTL_ADD, &ctl->listen, EPOLLIN) != ROV_OK ||
        rov_ctx_watch_urgent(ctx, &ctl->set, EPOLLIN) != ROV_OK) {
        close(ctl->set.fd);
        goto err_unlink; /* logged */
    }
    ctx->ctl = ctl;
    rov_debug("ctl", "control socket %s", ctl->path);
    return;

err_unlink:
    unlink(ctl->path);
err_close:
    close(fd);
err_free:
    free(ctl);
}

void rov_ctl_close(rov_context_t *ctx)
{
    struct rov_ctl *ctl = ctx->ctl;

    if (!ctl)
        return;
    for (int i = 0; i < CTL_MAX_CLIENTS; i++)
        if (ctl->clients[i])
            client_free(ctl->clients[i], false);
    rov_ctx_unwatch(ctx, &ctl->set);
    close(ctl->set.fd);
    close(ctl->listen.fd);
    if (ctl->net_listen.fd >= 0)
        close(ctl->net_listen.fd);
    if (ctl->proof_timer.fd >= 0)
        close(ctl->proof_timer.fd);
    if (unlink(ctl->path) < 0 && errno != ENOENT)
        rov_warn("ctl", "cannot remove %s: %m", ctl->path);
    rov_debug("ctl", "control socket %s closed", ctl->path);
    free(ctl);
    ctx->ctl = NULL;
}

static void wake_cb(struct rov_watch *w, uint32_t events)
{
    struct rov_ctl *ctl = rov_container_of(w, struct rov_ctl, wake);

    (void)events;
    ctl->wake_cb(ctl->ctx);
}

rov_status_t rov_ctl_wake_on(rov_context_t *ctx, int fd, void (*cb)(rov_context_t *ctx))
{
    struct rov_ctl *ctl = ctx->ctl;

    if (!ctl)
        return ROV_ERR_NOT_FOUND;
    if (ctl->wake.fd == fd && ctl->wake_cb == cb)
        return ROV_OK;
    if (ctl->wake.fd >= 0)
        set_ctl(ctl, EPOLL_CTL_DEL, &ctl->wake, 0);
    ctl->wake.fd = fd;
    ctl->wake.cb = wake_cb;
    ctl->wake_cb = cb;
    /* Edge-triggered: the descriptor is never read (an eventfd that every
     * context of the process watches), and each write is one wake-up. */
    if (set_ctl(ctl, EPOLL_CTL_ADD, &ctl->wake, EPOLLIN | EPOLLET) != ROV_OK) {
        ctl->wake.fd = -1;
        return ROV_ERR_IO;
    }
    return ROV_OK;
}

const char *rov_ctl_path(const rov_context_t *ctx)
{
    return ctx->ctl ? ctx->ctl->path : NULL;
}

/* The network endpoint ---------------------------------------------------------- */

rov_status_t rov_ctl_net_open(rov_context_t *ctx, const char *arg,
                              const uint8_t key[ROV_KEY_LEN])
{
    struct rov_ctl *ctl = ctx->ctl;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    rov_status_t st;
    int fd;

    if (!ctl) {
        rov_warn("ctl", "no control socket (RAILOVER_CONTROL=off?): no network control "
                 "endpoint either");
        return ROV_ERR_UNSUPPORTED;
    }
    if (ctl->net_listen.fd >= 0)
        return ROV_ERR_BUSY;
    st = rov_net_resolve("ctl", arg, &ss, &len, NULL, 0);
    if (st != ROV_OK)
        return st;
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rov_warn("ctl", "socket: %m; no network control endpoint");
        return ROV_ERR_IO;
    }
    if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, CTL_BACKLOG) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
        rov_warn("ctl", "network control endpoint on %s: %m", arg);
        close(fd);
        return ROV_ERR_IO;
    }
    ctl->proof_timer.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ctl->proof_timer.cb = proof_timer_cb;
    if (ctl->proof_timer.fd < 0 ||
        set_ctl(ctl, EPOLL_CTL_ADD, &ctl->proof_timer, EPOLLIN) != ROV_OK) {
        if (ctl->proof_timer.fd < 0)
            rov_warn("ctl", "timerfd_create: %m; no network control endpoint");
        else
            close(ctl->proof_timer.fd);
        ctl->proof_timer.fd = -1;
        close(fd);
        return ROV_ERR_IO;
    }
    memcpy(ctl->net_key, key, ROV_KEY_LEN);
    rov_net_sockaddr_str(&ss, ctl->net_where, sizeof(ctl->net_where));
    ctl->net_listen.fd = fd;
    ctl->net_listen.cb = net_listen_cb;
    if (set_ctl(ctl, EPOLL_CTL_ADD, &ctl->net_listen, EPOLLIN) != ROV_OK) {
        close(fd);
        ctl->net_listen.fd = -1;
        set_ctl(ctl, EPOLL_CTL_DEL, &ctl->proof_timer, 0);
        close(ctl->proof_timer.fd);
        ctl->proof_timer.fd = -1;
        return ROV_ERR_IO;
    }
    rov_debug("ctl", "network control endpoint %s", ctl->net_where);
    return ROV_OK;
}

void rov_ctl_net_rekey(rov_context_t *ctx, const uint8_t key[ROV_KEY_LEN])
{
    if (ctx->ctl)
        memcpy(ctx->ctl->net_key, key, ROV_KEY_LEN);
}

const char *rov_ctl_net_where(const rov_context_t *ctx)
{
    return ctx->ctl && ctx->ctl->net_listen.fd >= 0 ? ctx->ctl->net_where : NULL;
}

/* Built-in commands ------------------------------------------------------------ */

static int ctl_help(rov_context_t *ctx, int argc, char **argv, FILE *out, char *err,
                    size_t err_len)
{
    for (int i = 0; i < ncmds; i++)
        fprintf(out, "%-32s %s\n", registry[i]->usage, registry[i]->help);
    return 0;
}

static int ctl_hello(rov_context_t *ctx, int argc, char **argv, FILE *out, char *err,
                     size_t err_len)
{
    char ep[ROV_EP_ID_HEX_LEN + 1];

    rov_wire_ep_id_hex(ctx->ep_id, ep);
    fprintf(out, "process pid=%d version=%s endpoint=%s jobid=%s ", (int)getpid(), rov_version(),
            ep, ctx->job[0] ? ctx->job : "-");
    if (ctx->rank >= 0)
        fprintf(out, "rank=%ld ", ctx->rank);
    fputs("rails=", out);
    for (int i = 0; i < ctx->nrails; i++)
        fprintf(out, "%s%s", i ? "," : "", ctx->rails[i]->spec->name);
    if (ctx->nrails == 0)
        fputc('-', out);
    fputc('\n', out);
    return 0;
}

static int ctl_ping(rov_context_t *ctx, int argc, char **argv, FILE *out, char *err,
                    size_t err_len)
{
    return 0;
}

static const struct rov_ctl_cmd ctl_help_cmd = {
    .verb = "help",
    .usage = "help",
    .help = "list the commands this process serves",
    .fn = ctl_help,
};
static const struct rov_ctl_cmd ctl_hello_cmd = {
    .verb = "hello",
    .usage = "hello",
    .help = "one line: pid, library version, endpoint id, job id, rails",
    .fn = ctl_hello,
};
static const struct rov_ctl_cmd ctl_ping_cmd = {
    .verb = "ping",
    .usage = "ping",
    .help = "answer 'ok' (is the process making progress?)",
    .fn = ctl_ping,
};

ROV_CTL_REGISTER(ctl_help_cmd)
ROV_CTL_REGISTER(ctl_hello_cmd)
ROV_CTL_REGISTER(ctl_ping_cmd)
