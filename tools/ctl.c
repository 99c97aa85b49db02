/*
 * railover status|force|release|ctl: clients of the per-process control
 * sockets.  The requests go through the library's control client
 * (rov_ctl_request(), railover/ctl.h: it checks that each server runs as our
 * uid, and asks a busy one again within the request's 5 s); what this file
 * adds is the command line: where the sockets are (rov_ctl_run_dir) and
 * whether the directory is safe (rov_ctl_run_dir_check), so that the tool
 * trusts only sockets that only its user could have made; which processes
 * a command names; stale sockets removed; and what a server sends printed
 * with its control characters escaped.
 */
#include "ctl.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "railover/ctl.h"
#include "railover/railover.h"

#define CTL_TIMEOUT_S 5

/* One control socket: process pid, its context number n. */
struct target {
    long pid;
    unsigned n;
    char label[32];   /* "1234", or "1234.1" for a process's second context */
    char path[ROV_CTL_RUN_DIR_MAX + 32];  /* "<run dir>/<pid>.<n>.sock" */
};

struct targets {
    struct target *v;
    size_t count, cap;
};

enum req_result {
    REQ_ANSWERED,  /* *answer_p holds what the process sent */
    REQ_STALE,     /* nobody listens: the process is gone; socket removed */
    REQ_BUSY,      /* the socket stayed busy (as many clients as it serves) */
    REQ_FAILED,    /* timeout or error, reported on stderr */
};

/* What a command met: its exit status is 1 when anything failed, else
 * ROV_TOOL_EXIT_BUSY when a process stayed busy, else 0. */
struct outcome {
    bool failed, busy;
};

static int exit_status(const struct outcome *o)
{
    return o->failed ? 1 : o->busy ? ROV_TOOL_EXIT_BUSY : 0;
}

/* Note r in o; stale_fails: a stale socket is a failure (a process asked
 * for by pid), not housekeeping. */
static void outcome_add(struct outcome *o, enum req_result r, bool stale_fails)
{
    if (r == REQ_BUSY)
        o->busy = true;
    else if (r == REQ_FAILED || (r == REQ_STALE && stale_fails))
        o->failed = true;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Resolve the run directory and check it as the library does: sockets in a
 * directory another user can write to may be anyone's.  A directory that
 * does not exist yet is fine (no process has made it: there are no
 * sockets). */
static int run_dir(char *dir, size_t len)
{
    char err[512] = "";
    rov_config_t *config;
    rov_status_t st = rov_config_read(err, sizeof(err), &config);

    if (st != ROV_OK) {
        fprintf(stderr, "railover: %s\n", err[0] ? err : rov_status_str(st));
        return -1;
    }
    st = rov_ctl_run_dir(config, dir, len);
    rov_config_free(config);
    if (st != ROV_OK) {
        fprintf(stderr, "railover: the control run directory path is too long "
                "(check RAILOVER_RUN_DIR and XDG_RUNTIME_DIR)\n");
        return -1;
    }
    st = rov_ctl_run_dir_check(dir, err, sizeof(err));
    if (st != ROV_OK && st != ROV_ERR_NOT_FOUND) {
        fprintf(stderr, "railover: %s; not trusting the control sockets in it\n", err);
        return -1;
    }
    return 0;
}

/* Strict decimal; false for anything else (sign, spaces, overflow). */
static bool parse_dec(const char *s, const char *end, unsigned long long max,
                        unsigned long long *out)
{
    unsigned long long v = 0;

    if (s == end)
        return false;
    for (; s < end; s++) {
        if (*s < '0' || *s > '9' || v > (max - (unsigned long long)(*s - '0')) / 10)
            return false;
        v = v * 10 + (unsigned long long)(*s - '0');
    }
    *out = v;
    return true;
}

static bool parse_pid(const char *s, long *pid_p)
{
    unsigned long long v;

    if (!parse_dec(s, s + strlen(s), 0x7fffffff, &v) || v == 0)
        return false;
    *pid_p = (long)v;
    return true;
}

/* "<pid>.<n>.sock" */
static bool parse_sock_name(const char *name, long *pid_p, unsigned *n_p)
{
    const char *dot = strchr(name, '.'), *suffix;
    unsigned long long pid, n;
    size_t len = strlen(name);

    if (!dot || len < 5 || strcmp(name + len - 5, ".sock") != 0)
        return false;
    suffix = name + len - 5;
    if (suffix <= dot || !parse_dec(name, dot, 0x7fffffff, &pid) || pid == 0 ||
        !parse_dec(dot + 1, suffix, 0xffffffff, &n))
        return false;
    *pid_p = (long)pid;
    *n_p = (unsigned)n;
    return true;
}

static int target_cmp(const void *a, const void *b)
{
    const struct target *x = a, *y = b;

    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->n < y->n ? -1 : x->n > y->n;
}

/* Append the sockets of process pid (every process when pid is 0) found in
 * dir to t, sorted.  -1 on error (reported). */
static int find_targets(const char *dir, long pid, struct targets *t)
{
    size_t first = t->count;
    struct dirent *de;
    DIR *d = opendir(dir);

    if (!d) {
        if (errno == ENOENT)
            return 0; /* no process has made it yet */
        fprintf(stderr, "railover: cannot list %s: %s\n", dir, strerror(errno));
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        struct target *tg;
        long p;
        unsigned n;

        if (!parse_sock_name(de->d_name, &p, &n) || (pid && p != pid))
            continue;
        if (t->count == t->cap) {
            size_t cap = t->cap ? 2 * t->cap : 16;
            struct target *v = realloc(t->v, cap * sizeof(*v));

            if (!v) {
                fprintf(stderr, "railover: out of memory\n");
                closedir(d);
                return -1;
            }
            t->v = v;
            t->cap = cap;
        }
        tg = &t->v[t->count];
        tg->pid = p;
        tg->n = n;
        if (n)
            snprintf(tg->label, sizeof(tg->label), "%ld.%u", p, n);
        else
            snprintf(tg->label, sizeof(tg->label), "%ld", p);
        if (snprintf(tg->path, sizeof(tg->path), "%s/%s", dir, de->d_name) >=
            (int)sizeof(tg->path))
            continue;
        t->count++;
    }
    closedir(d);
    if (t->count - first > 1)
        qsort(t->v + first, t->count - first, sizeof(*t->v), target_cmp);
    return 0;
}

/* Send line (without its newline) to t and collect the answer; what went
 * wrong is reported on stderr. */
static enum req_result ctl_request(const struct target *t, const char *line, char **answer_p,
                                   size_t *len_p)
{
    double t0 = now_s();
    char err[512];
    rov_status_t st = rov_ctl_request(t->path, NULL, line, CTL_TIMEOUT_S, CTL_TIMEOUT_S,
                                      answer_p, len_p, err, sizeof(err));

    switch (st) {
    case ROV_OK:
        return REQ_ANSWERED;
    case ROV_ERR_NOT_FOUND:
        /* No socket file, or one nobody listens on: its process died
         * without closing its context. */
        if (unlink(t->path) == 0)
            fprintf(stderr, "railover: %s: stale control socket (process %s is gone); "
                    "removed\n", t->path, t->label);
        else if (errno == ENOENT)
            fprintf(stderr, "railover: process %s has exited (%s is gone)\n", t->label,
                    t->path);
        else
            fprintf(stderr, "railover: %s: stale control socket (process %s is gone); "
                    "cannot remove it: %s\n", t->path, t->label, strerror(errno));
        return REQ_STALE;
    case ROV_ERR_TIMEDOUT:
        fprintf(stderr, "railover: process %s did not answer within %d s (does it call "
                "rov_progress?)\n", t->label, CTL_TIMEOUT_S);
        return REQ_FAILED;
    case ROV_ERR_AGAIN:
        fprintf(stderr, "railover: process %s: control socket busy for %.1f s (%s)\n",
                t->label, now_s() - t0, err);
        return REQ_BUSY;
    case ROV_ERR_REFUSED: /* err names the socket and both uids */
        fprintf(stderr, "railover: %s\n", err);
        return REQ_FAILED;
    default:
        fprintf(stderr, "railover: process %s: %s\n", t->label, err);
        return REQ_FAILED;
    }
}

/* Write n bytes a process sent to f, each byte that is not printable ASCII
 * (or a tab) as \xHH: a process's answer must not drive the terminal. */
static void put_escaped(FILE *f, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];

        if ((c >= 0x20 && c < 0x7f) || c == '\t')
            putc(c, f);
        else
            fprintf(f, "\\x%02x", c);
    }
}

/*
 * Print an answer: its lines before the verdict to stdout, each after
 * prefix; the verdict "ok" to stdout only when print_ok; an error to stderr.
 * Returns 0 for "ok", 1 otherwise.
 */
static int print_answer(const struct target *t, const char *answer, size_t len,
                        const char *prefix, bool print_ok)
{
    const char *last, *p;

    if (len == 0 || answer[len - 1] != '\n' || memchr(answer, '\0', len)) {
        fprintf(stderr, "railover: process %s closed the connection without a complete "
                "answer\n", t->label);
        return 1;
    }
    for (last = answer + len - 1; last > answer && last[-1] != '\n'; last--)
        ;
    for (p = answer; p < last;) {
        const char *nl = strchr(p, '\n');

        fputs(prefix, stdout);
        put_escaped(stdout, p, (size_t)(nl - p));
        putchar('\n');
        p = nl + 1;
    }
    if (strcmp(last, "ok\n") == 0) {
        if (print_ok)
            printf("%sok\n", prefix);
        return 0;
    }
    fflush(stdout);
    fprintf(stderr, "railover: process %s: %s", t->label,
            strncmp(last, "error: ", 7) == 0 ? "" : "malformed answer: ");
    put_escaped(stderr, last, strlen(last) - 1);
    putc('\n', stderr);
    return 1;
}

/* Find the targets named by a PID argument, or every target for "all" (when
 * allow_all) or a NULL arg.  -1 with a message when there are none. */
static int select_targets(const char *dir, const char *arg, bool allow_all, struct targets *t)
{
    long pid = 0;

    if (arg && !(allow_all && strcmp(arg, "all") == 0) && !parse_pid(arg, &pid)) {
        fprintf(stderr, "railover: '%s' is not a process id%s\n", arg,
                allow_all ? " or 'all'" : "");
        return -1;
    }
    if (find_targets(dir, pid, t) < 0)
        return -1;
    if (t->count == 0 && pid)
        fprintf(stderr, "railover: no control socket of process %ld in %s (not a Railover "
                "process, RAILOVER_CONTROL=off, or another RAILOVER_RUN_DIR?)\n", pid, dir);
    return 0;
}

static void no_process(const char *dir)
{
    fprintf(stderr, "railover: no Railover process with a control socket found in %s\n", dir);
}

int rov_tool_status(int argc, char **argv)
{
    struct outcome o = {0};
    struct targets t = {0};
    char dir[ROV_CTL_RUN_DIR_MAX];
    int live = 0, busy = 0;

    if (run_dir(dir, sizeof(dir)) < 0)
        return 1;
    if (argc < 2) {
        if (select_targets(dir, NULL, false, &t) < 0)
            o.failed = true;
    }
    for (int i = 1; i < argc; i++) {
        size_t before = t.count;

        if (select_targets(dir, argv[i], false, &t) < 0 || t.count == before)
            o.failed = true;
    }
    for (size_t i = 0; i < t.count; i++) {
        const struct target *tg = &t.v[i];
        enum req_result r;
        char *answer;
        size_t len;

        /* A stale socket in a scan of the directory is housekeeping; a
         * process asked for by pid that is gone is a failure. */
        r = ctl_request(tg, "hello", &answer, &len);
        outcome_add(&o, r, argc > 1);
        busy += r == REQ_BUSY;
        if (r != REQ_ANSWERED)
            continue;
        if (live++)
            putchar('\n');
        o.failed |= print_answer(tg, answer, len, "", false) != 0;
        free(answer);
        r = ctl_request(tg, "status", &answer, &len);
        outcome_add(&o, r, true);
        if (r != REQ_ANSWERED)
            continue;
        o.failed |= print_answer(tg, answer, len, "", false) != 0;
        free(answer);
    }
    if (argc < 2 && live + busy == 0) {
        no_process(dir);
        o.failed = true;
    }
    free(t.v);
    return exit_status(&o);
}

/* Send line to each target.  all: the targets are every process of the run
 * directory, so output lines name their process and stale sockets are mere
 * housekeeping. */
static int send_all(const char *dir, const struct targets *t, const char *line, bool all,
                    bool print_ok)
{
    struct outcome o = {0};
    int live = 0;

    for (size_t i = 0; i < t->count; i++) {
        const struct target *tg = &t->v[i];
        char prefix[48] = "";
        enum req_result r;
        char *answer;
        size_t len;

        r = ctl_request(tg, line, &answer, &len);
        outcome_add(&o, r, !all);
        live += r == REQ_BUSY;
        if (r != REQ_ANSWERED)
            continue;
        live++;
        if (all)
            snprintf(prefix, sizeof(prefix), "%s: ", tg->label);
        o.failed |= print_answer(tg, answer, len, prefix, print_ok) != 0;
        free(answer);
    }
    if (all && live == 0) {
        no_process(dir);
        o.failed = true;
    }
    return exit_status(&o);
}

static int force_usage(const char *verb)
{
    fprintf(stderr, "usage: railover %s PID|all [conn ID | peer EPID]\n", verb);
    return 1;
}

int rov_tool_force(int argc, char **argv)
{
    const char *verb = argv[0];
    struct targets t = {0};
    char dir[ROV_CTL_RUN_DIR_MAX], line[256];
    bool all;
    int rc;

    if (argc != 2 && argc != 4)
        return force_usage(verb);
    if (argc == 4 && strcmp(argv[2], "conn") != 0 && strcmp(argv[2], "peer") != 0) {
        fprintf(stderr, "railover %s: expected 'conn ID' or 'peer EPID', not '%s'\n", verb,
                argv[2]);
        return force_usage(verb);
    }
    /* Checked here as well as by the process: strtoull() there reads "-1" as
     * 2^64-1. */
    if (argc == 4 && strcmp(argv[2], "conn") == 0) {
        unsigned long long id;

        if (!parse_dec(argv[3], argv[3] + strlen(argv[3]), ULLONG_MAX, &id)) {
            fprintf(stderr, "railover %s: '%s' is not a connection id (a decimal number, as "
                    "'railover status' shows after 'conn id=')\n", verb, argv[3]);
            return 1;
        }
    }
    /* The request names the connections; the process is chosen by socket. */
    if (argc == 4) {
        if (strpbrk(argv[3], " \t\r\n") ||
            snprintf(line, sizeof(line), "%s %s %s", verb, argv[2], argv[3]) >=
                (int)sizeof(line)) {
            fprintf(stderr, "railover %s: malformed %s '%s'\n", verb, argv[2], argv[3]);
            return 1;
        }
    } else {
        snprintf(line, sizeof(line), "%s all", verb);
    }
    if (run_dir(dir, sizeof(dir)) < 0)
        return 1;
    all = strcmp(argv[1], "all") == 0;
    if (select_targets(dir, argv[1], true, &t) < 0) {
        free(t.v);
        return 1;
    }
    if (t.count == 0 && !all) {
        free(t.v);
        return 1;
    }
    rc = send_all(dir, &t, line, all, false);
    free(t.v);
    return rc;
}

int rov_tool_ctl(int argc, char **argv)
{
    struct targets t = {0};
    char dir[ROV_CTL_RUN_DIR_MAX], line[ROV_CTL_LINE_MAX];
    size_t off = 0;
    int rc;

    if (argc < 3) {
        fprintf(stderr, "usage: railover ctl PID VERB [ARGS...]   (VERB 'help' lists them)\n");
        return 1;
    }
    for (int i = 2; i < argc; i++) {
        size_t n = strlen(argv[i]);

        if (n == 0 || strpbrk(argv[i], " \t\r\n")) {
            fprintf(stderr, "railover ctl: argument '%s' is empty or contains white space\n",
                    argv[i]);
            return 1;
        }
        if (off + n + 2 > sizeof(line)) {
            fprintf(stderr, "railover ctl: request longer than %d bytes\n", ROV_CTL_LINE_MAX);
            return 1;
        }
        if (off)
            line[off++] = ' ';
        memcpy(line + off, argv[i], n);
        off += n;
    }
    line[off] = '\0';
    if (run_dir(dir, sizeof(dir)) < 0)
        return 1;
    if (select_targets(dir, argv[1], false, &t) < 0 || t.count == 0) {
        free(t.v);
        return 1;
    }
    rc = send_all(dir, &t, line, false, true);
    free(t.v);
    return rc;
}
