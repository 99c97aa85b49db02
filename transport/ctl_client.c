/*
 * The one client of the control protocol (include/railover/ctl.h): the
 * `railover` tool, cprclient and ccp's job client all ask through
 * rov_ctl_request().  A Unix socket's server must be of our uid
 * (SO_PEERCRED); a network endpoint's challenge is answered with the job's
 * key; a busy endpoint is asked again within the caller's limit.  The
 * server side is control.c.
 */
#define _GNU_SOURCE /* struct ucred */
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "transport/auth.h"
#include "transport/control.h"
#include "transport/core.h"
#include "transport/log.h"
#include "transport/netaddr.h"

/* A busy endpoint is asked again after CTL_BUSY_FIRST_S, doubling up to
 * CTL_BUSY_MAX_S; an attempt starts only with CTL_BUSY_ATTEMPT_S of the
 * call's limit left, so that a last busy answer is reported as busy rather
 * than as a timeout. */
#define CTL_BUSY_FIRST_S 0.02
#define CTL_BUSY_MAX_S 0.25
#define CTL_BUSY_ATTEMPT_S 0.1
/* The challenge and a refusal are one short line. */
#define CTL_LINE_READ_MAX 256

_Static_assert(ROV_CTL_KEY_LEN == ROV_KEY_LEN, "a network request is proved with the job's key");

static double mono_s(void)
{
    return (double)rov_now_ns() / 1e9;
}

/* Wait for events on fd until the deadline: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        double left = deadline - mono_s();
        int n;

        if (left <= 0)
            return 0;
        n = poll(&p, 1, (int)(left * 1000) + 1);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* where as a socket address: a path starting with '/', or IP:PORT. */
static rov_status_t where_addr(const char *where, struct sockaddr_storage *ss, socklen_t *len_p,
                               char *err, size_t err_len)
{
    char host[INET6_ADDRSTRLEN + 2], *port;
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                             .ai_socktype = SOCK_STREAM}, *ai;

    if (where[0] == '/') {
        struct sockaddr_un *un = (struct sockaddr_un *)ss;

        memset(un, 0, sizeof(*un));
        un->sun_family = AF_UNIX;
        if (strlen(where) >= sizeof(un->sun_path)) {
            snprintf(err, err_len, "control socket path too long: %s", where);
            return ROV_ERR_INVAL;
        }
        strcpy(un->sun_path, where);
        *len_p = sizeof(*un);
        return ROV_OK;
    }
    snprintf(host, sizeof(host), "%s", where[0] == '[' ? where + 1 : where);
    port = strrchr(host, ':');
    if (!port || port == host) {
        snprintf(err, err_len, "not a control endpoint address (IP:PORT): %s", where);
        return ROV_ERR_INVAL;
    }
    *port++ = '\0';
    if (where[0] == '[' && host[strlen(host) - 1] == ']')
        host[strlen(host) - 1] = '\0';
    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        snprintf(err, err_len, "not a control endpoint address (IP:PORT): %s", where);
        return ROV_ERR_INVAL;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len_p = ai->ai_addrlen;
    freeaddrinfo(ai);
    return ROV_OK;
}

/* A connected non-blocking socket to where, or -1 with *st_p and err. */
static int connect_where(const char *where, double deadline, rov_status_t *st_p, char *err,
                         size_t err_len)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd;

    *st_p = where_addr(where, &ss, &len, err, err_len);
    if (*st_p != ROV_OK)
        return -1;
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *st_p = ROV_ERR_UNREACHABLE;
        snprintf(err, err_len, "socket: %s", strerror(errno));
        return -1;
    }
    for (;;) {
        int soerr = 0, w;
        socklen_t elen = sizeof(soerr);

        if (connect(fd, (struct sockaddr *)&ss, len) == 0)
            return fd;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN && ss.ss_family == AF_UNIX) {
            /* The listen backlog is full: the process is not accepting
             * (it does not call rov_progress, or is flooded). */
            if (mono_s() >= deadline)
                break;
            poll(NULL, 0, 10);
            continue;
        }
        if (errno != EINPROGRESS) {
            /* A socket file nobody listens on, or none: the process is gone. */
            *st_p = ss.ss_family == AF_UNIX && (errno == ECONNREFUSED || errno == ENOENT)
                        ? ROV_ERR_NOT_FOUND : ROV_ERR_UNREACHABLE;
            snprintf(err, err_len, "connect %s: %s", where, strerror(errno));
            close(fd);
            return -1;
        }
        w = wait_fd(fd, POLLOUT, deadline);
        if (w == 0)
            break;
        if (w < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &elen) < 0)
            soerr = errno;
        if (soerr == 0)
            return fd;
        *st_p = ROV_ERR_UNREACHABLE;
        snprintf(err, err_len, "connect %s: %s", where, strerror(soerr));
        close(fd);
        return -1;
    }
    *st_p = ROV_ERR_TIMEDOUT;
    snprintf(err, err_len, "connect %s: no answer in time", where);
    close(fd);
    return -1;
}

/* Only a process of our own user may answer for one: a socket another user
 * put where we look (the run directory's check rules out the usual ways)
 * must not get our request or have its answer believed.  The credentials
 * are the listening process's, taken when it called listen(). */
static rov_status_t server_ours(int fd, const char *where, char *err, size_t err_len)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        snprintf(err, err_len, "%s: SO_PEERCRED: %s; not trusting it", where, strerror(errno));
        return ROV_ERR_REFUSED;
    }
    if (cred.uid != geteuid()) {
        snprintf(err, err_len, "%s is served by uid %u, not by us (uid %u); not trusting it",
                 where, (unsigned)cred.uid, (unsigned)geteuid());
        return ROV_ERR_REFUSED;
    }
    return ROV_OK;
}

/* Read until the peer's end of stream (line: until a newline), at most max
 * bytes, into a new NUL-terminated *buf_p of *len_p bytes. */
static rov_status_t read_all(int fd, double deadline, size_t max, bool line, char **buf_p,
                             size_t *len_p, char *err, size_t err_len)
{
    size_t len = 0, cap = 256;
    char *buf = malloc(cap);

    *buf_p = NULL;
    if (!buf) {
        snprintf(err, err_len, "out of memory");
        return ROV_ERR_NOMEM;
    }
    for (;;) {
        ssize_t n;

        if (line && memchr(buf, '\n', len))
            break;
        if (len + 1 == cap) {
            char *more;

            if (cap >= max) {
                snprintf(err, err_len, "answer longer than %zu bytes", max);
                free(buf);
                return ROV_ERR_PROTO;
            }
            more = realloc(buf, cap * 2);
            if (!more) {
                snprintf(err, err_len, "out of memory");
                free(buf);
                return ROV_ERR_NOMEM;
            }
            buf = more;
            cap *= 2;
        }
        n = read(fd, buf + len, cap - 1 - len);
        if (n > 0) {
            len += (size_t)n;
            continue;
        }
        /* The server closes once it has answered; a reset after the answer
         * is that close with bytes of ours unread, as final. */
        if (n == 0 || (errno == ECONNRESET && len > 0))
            break;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(fd, POLLIN, deadline) <= 0) {
                snprintf(err, err_len, "no answer in time");
                free(buf);
                return ROV_ERR_TIMEDOUT;
            }
        } else if (errno != EINTR) {
            snprintf(err, err_len, "read: %s", strerror(errno));
            free(buf);
            return ROV_ERR_UNREACHABLE;
        }
    }
    buf[len] = '\0';
    *buf_p = buf;
    *len_p = len;
    return ROV_OK;
}

/* 0 once len bytes are sent, else the errno (ETIMEDOUT at the deadline). */
static int send_all(int fd, const char *p, size_t len, double deadline)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = wait_fd(fd, POLLOUT, deadline);

            if (w <= 0)
                return w == 0 ? ETIMEDOUT : errno;
        } else if (n < 0 && errno != EINTR) {
            return errno;
        }
    }
    return 0;
}

/* Whether answer is the endpoint's "error: busy: ..." (it took no request
 * from us: too many clients); then err is that line, printable. */
static bool busy_answer(const char *answer, char *err, size_t err_len)
{
    static const char busy[] = "error: busy";
    size_t n = 0;

    if (strncmp(answer, busy, sizeof(busy) - 1) != 0 || err_len == 0)
        return false;
    answer += sizeof("error: ") - 1;
    for (; *answer && *answer != '\n' && n + 1 < err_len; answer++)
        err[n++] = isprint((unsigned char)*answer) ? *answer : '?';
    err[n] = '\0';
    return true;
}

/* The request line for where's endpoint: as is on a socket; on the network
 * after the challenge, with its proof.  Its length, or -1 with *st_p. */
static int request_line(int fd, const char *where, const uint8_t *key, const char *request,
                        double deadline, char line[ROV_CTL_LINE_MAX + 1], rov_status_t *st_p,
                        char *err, size_t err_len)
{
    uint8_t nonce[ROV_CTL_NONCE_LEN], mac[ROV_MAC_LEN];
    char hex[2 * ROV_MAC_LEN + 1], *hello;
    size_t hello_len;
    int n;

    if (where[0] == '/') {
        *st_p = server_ours(fd, where, err, err_len);
        if (*st_p != ROV_OK)
            return -1;
        n = snprintf(line, ROV_CTL_LINE_MAX + 1, "%s\n", request);
    } else {
        if (!key) {
            snprintf(err, err_len, "%s is a network control endpoint: a request needs the "
                     "job's key", where);
            *st_p = ROV_ERR_INVAL;
            return -1;
        }
        *st_p = read_all(fd, deadline, CTL_LINE_READ_MAX, true, &hello, &hello_len, err,
                         err_len);
        if (*st_p != ROV_OK)
            return -1;
        if (busy_answer(hello, err, err_len)) {
            free(hello);
            *st_p = ROV_ERR_AGAIN;
            return -1;
        }
        if (strncmp(hello, ROV_CTL_CHALLENGE, sizeof(ROV_CTL_CHALLENGE) - 1) != 0 ||
            hello_len < sizeof(ROV_CTL_CHALLENGE) - 1 + 2 * ROV_CTL_NONCE_LEN ||
            !rov_ctl_hex_decode(hello + sizeof(ROV_CTL_CHALLENGE) - 1, nonce, sizeof(nonce))) {
            snprintf(err, err_len, "%s is not a Railover control endpoint (it said: %.60s)",
                     where, hello);
            free(hello);
            *st_p = ROV_ERR_PROTO;
            return -1;
        }
        free(hello);
        rov_ctl_mac(key, nonce, request, mac);
        rov_ctl_hex_encode(mac, sizeof(mac), hex);
        n = snprintf(line, ROV_CTL_LINE_MAX + 1, "auth %s %s\n", hex, request);
    }
    if (n < 0 || n > ROV_CTL_LINE_MAX) {
        snprintf(err, err_len, "request longer than %d bytes", ROV_CTL_LINE_MAX);
        *st_p = ROV_ERR_INVAL;
        return -1;
    }
    return n;
}

/* One connection: the request, then the whole answer. */
static rov_status_t ask_once(const char *where, const uint8_t *key, const char *request,
                             double deadline, char **answer_p, size_t *len_p, char *err,
                             size_t err_len)
{
    char line[ROV_CTL_LINE_MAX + 1];
    rov_status_t st;
    int fd, n, serr;

    fd = connect_where(where, deadline, &st, err, err_len);
    if (fd < 0)
        return st;
    n = request_line(fd, where, key, request, deadline, line, &st, err, err_len);
    if (n < 0)
        goto out;
    serr = send_all(fd, line, (size_t)n, deadline);
    if (serr == ETIMEDOUT) {
        snprintf(err, err_len, "no answer in time");
        st = ROV_ERR_TIMEDOUT;
        goto out;
    }
    /* A refusal (busy, permission denied) is sent at once, then the
     * connection closed: a request of ours then meets a closed socket, and
     * the refusal is still there to read. */
    if (serr == 0)
        shutdown(fd, SHUT_WR);
    st = read_all(fd, deadline, ROV_CTL_ANSWER_MAX, false, answer_p, len_p, err, err_len);
    if (serr && st == ROV_OK && *len_p == 0) {
        free(*answer_p);
        *answer_p = NULL;
        snprintf(err, err_len, "send to %s: %s", where, strerror(serr));
        st = ROV_ERR_UNREACHABLE;
    }
    if (st == ROV_OK && busy_answer(*answer_p, err, err_len)) {
        free(*answer_p);
        *answer_p = NULL;
        st = ROV_ERR_AGAIN;
    } else if (st == ROV_OK && *len_p == 0) {
        /* Closed with nothing said: every request is answered, so ours was
         * never taken (a network client is dropped when its request comes
         * later than the proof's deadline, and the drop's "error: busy"
         * can be lost to the reset our request meets): asked again, as
         * busy. */
        free(*answer_p);
        *answer_p = NULL;
        snprintf(err, err_len, "%s closed the connection without an answer", where);
        st = ROV_ERR_AGAIN;
    }
out:
    close(fd);
    return st;
}

rov_status_t rov_ctl_request(const char *where, const uint8_t *key, const char *request,
                             double timeout_s, double busy_s, char **answer_p, size_t *len_p,
                             char *err, size_t err_len)
{
    double t0 = mono_s(), deadline = t0 + timeout_s, pause = CTL_BUSY_FIRST_S;
    double busy_until = t0 + (busy_s < timeout_s - CTL_BUSY_ATTEMPT_S ? busy_s :
                                                                       timeout_s - CTL_BUSY_ATTEMPT_S);
    size_t len = 0;
    rov_status_t st;

    *answer_p = NULL;
    for (;;) {
        st = ask_once(where, key, request, deadline, answer_p, &len, err, err_len);
        if (st != ROV_ERR_AGAIN || mono_s() + pause > busy_until)
            break;
        rov_debug("ctl", "%s: %s; asking again in %.0f ms", where, err, pause * 1e3);
        poll(NULL, 0, (int)(pause * 1e3));
        pause = pause * 2 < CTL_BUSY_MAX_S ? pause * 2 : CTL_BUSY_MAX_S;
    }
    if (len_p)
        *len_p = st == ROV_OK ? len : 0;
    return st;
}
