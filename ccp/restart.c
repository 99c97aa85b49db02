/*
 * `cprclient JOBID restart` (rov_job_restart(), include/railover/ccp.h):
 * bring a job back from a complete checkpoint set (sets.h).  Each unit of
 * the set (a rank alone, or the ranks of a host imaged with their process
 * tree) is restored by RAILOVER_RESTORE_CMD on its target host, reached
 * through RAILOVER_CCP_AGENT (`AGENT HOST COMMAND`, as Open MPI's
 * plm_rsh_agent; this host directly).  In order, each step before anything
 * is changed where it can be:
 *
 *   1. no rank of the job answers (a restart beside a live job would
 *      duplicate its ranks);
 *   2. the set: the newest complete one (or the one asked for);
 *   3. every target host answers the agent (`true`);
 *   4. none of the set's process ids is taken on its target host;
 *   5. every unit's restore (%a: "restore"), all at once; one that fails
 *      has every unit restored so far killed again, so nothing is left
 *      half-running; then each unit's "release" (a unit's restore holds
 *      its TCP connections back until every unit is back: a restored end
 *      must not reach a peer whose end is not, whose kernel would reset it);
 *   6. every rank answers from where it runs now (its restored copy ends its
 *      checkpoint wait, opens its control endpoints and registers).
 *
 * The client then reopens the job (cprclient: the reopen stage).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ccp/client_int.h"
#include "ccp/sets.h"
#include "transport/log.h"

/* How long a host may take to answer the agent's `true` or the pid check. */
#define PROBE_S 30.0

struct unit {
    long unit;                    /* its lowest rank */
    int tree;                     /* the root of its process tree */
    const char *from;             /* the host it was imaged on */
    char to[CCP_HOST_MAX];        /* the host it is restored on */
    pid_t child;                  /* its restore command, 0: none */
    int rc;                       /* the command's exit status, -1: none yet */
    bool restored;
};

struct plan {
    rov_job_t *job;
    struct ccp_manifest m;
    struct unit *units;
    size_t n;
    char agent[256];
    char restore_cmd[256];
    rov_job_restart_fault_t *fault;
    char *err;
    size_t err_len;
};

static rov_status_t failed(struct plan *p, rov_job_restart_fault_t fault, rov_status_t st)
{
    *p->fault = fault;
    return st;
}

static bool local(const struct plan *p, const char *host)
{
    return strcmp(host, p->job->host) == 0 || strcmp(host, "localhost") == 0;
}

/* Start `cmd` on host (through the agent unless it is this one), its
 * output to out.  The agent is a command line of the user's (as
 * plm_rsh_agent): the shell splits it; the host and the command are its
 * two last arguments, never parsed here. */
static pid_t spawn(const struct plan *p, const char *host, const char *cmd, int out)
{
    pid_t pid = fork();

    if (pid == 0) {
        int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
        char line[300];

        if (nul < 0 || dup2(nul, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
            _exit(127);
        setpgid(0, 0); /* (killed as a group when it takes too long) */
        if (local(p, host))
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        snprintf(line, sizeof(line), "%s \"$@\"", p->agent);
        execl("/bin/sh", "sh", "-c", line, "railover-agent", host, cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Wait for pid until deadline (ccp_now_s()); its exit status, 128 + signal,
 * or -1 when it took too long (then it and its group are killed). */
static int reap(pid_t pid, double deadline)
{
    int status;

    for (;;) {
        pid_t got = waitpid(pid, &status, WNOHANG);

        if (got == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (got < 0 && errno != EINTR)
            return -1;
        if (ccp_now_s() >= deadline) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        nanosleep(&(struct timespec){0, 10 * 1000000}, NULL);
    }
}

/* Run cmd on host and wait (PROBE_S at most): its exit status (-1: no
 * answer in time), its output (the first len - 1 bytes) in out. */
static int run_on(const struct plan *p, const char *host, const char *cmd, char *out, size_t len)
{
    int fds[2], rc;
    size_t got = 0;
    double deadline = ccp_now_s() + PROBE_S;
    pid_t pid;

    out[0] = '\0';
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -1;
    pid = spawn(p, host, cmd, fds[1]);
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return -1;
    }
    for (;;) {
        struct pollfd pfd = {fds[0], POLLIN, 0};
        double left = deadline - ccp_now_s();
        char buf[512];
        ssize_t n;

        if (left <= 0 || poll(&pfd, 1, (int)(left * 1000) + 1) <= 0)
            break;
        n = read(fds[0], buf, sizeof(buf));
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n && got + 1 < len; i++)
            out[got++] = buf[i];
        out[got] = '\0';
    }
    close(fds[0]);
    rc = reap(pid, deadline);
    while (got > 0 && (out[got - 1] == '\n' || out[got - 1] == '\r'))
        out[--got] = '\0';
    return rc;
}

static struct unit *unit_of(struct plan *p, long rank)
{
    for (size_t i = 0; i < p->m.n; i++)
        if (p->m.ranks[i].rank == rank)
            for (size_t u = 0; u < p->n; u++)
                if (p->units[u].unit == p->m.ranks[i].unit)
                    return &p->units[u];
    return NULL;
}

/* The units of the set, each on the host it was imaged on. */
static rov_status_t plan_units(struct plan *p)
{
    p->units = calloc(p->m.n, sizeof(*p->units));
    if (!p->units)
        return ROV_ERR_NOMEM;
    for (size_t i = 0; i < p->m.n; i++) {
        const struct ccp_set_rank *r = &p->m.ranks[i];
        size_t u;

        for (u = 0; u < p->n && p->units[u].unit != r->unit; u++)
            ;
        if (u == p->n) {
            p->units[u] = (struct unit){.unit = r->unit, .tree = r->tree, .from = r->host,
                                        .rc = -1};
            snprintf(p->units[u].to, sizeof(p->units[u].to), "%s", r->host);
            p->n++;
        }
    }
    return ROV_OK;
}

/* --hosts H1,H2,...: the set's hosts, in the order of their lowest rank
 * (the manifest is in rank order), each replaced by the one at its place;
 * --map R=H,...: rank R's unit on H. */
static rov_status_t plan_targets(struct plan *p, const char *hosts, const char *map)
{
    char list[4096], *save = NULL, *item;
    const char *seen[1024];
    size_t nseen = 0, given = 0;

    if (hosts && hosts[0]) {
        for (size_t i = 0; i < p->m.n && nseen < 1024; i++) {
            size_t k;

            for (k = 0; k < nseen && strcmp(seen[k], p->m.ranks[i].host) != 0; k++)
                ;
            if (k == nseen)
                seen[nseen++] = p->m.ranks[i].host;
        }
        snprintf(list, sizeof(list), "%s", hosts);
        for (item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
            if (given < nseen)
                for (size_t u = 0; u < p->n; u++)
                    if (strcmp(p->units[u].from, seen[given]) == 0)
                        snprintf(p->units[u].to, sizeof(p->units[u].to), "%s", item);
            given++;
        }
        if (given != nseen) {
            snprintf(p->err, p->err_len, "--hosts names %zu hosts; checkpoint set %ld was taken "
                     "on %zu (in rank order: %s%s)", given, p->m.set, nseen, seen[0],
                     nseen > 1 ? ", ..." : "");
            return failed(p, ROV_RESTART_USAGE, ROV_ERR_INVAL);
        }
    }
    if (map && map[0]) {
        snprintf(list, sizeof(list), "%s", map);
        for (item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(item, '='), *end;
            long rank = strtol(item, &end, 10);
            struct unit *u = eq && end == eq && eq > item && eq[1] ? unit_of(p, rank) : NULL;

            if (!u) {
                snprintf(p->err, p->err_len, "--map: '%.64s' is not RANK=HOST for a rank of "
                         "checkpoint set %ld", item, p->m.set);
                return failed(p, ROV_RESTART_USAGE, ROV_ERR_INVAL);
            }
            snprintf(u->to, sizeof(u->to), "%s", eq + 1);
        }
    }
    for (size_t u = 0; u < p->n; u++)
        if (!p->units[u].to[0] || strlen(p->units[u].to) >= CCP_HOST_MAX - 1 ||
            p->units[u].to[0] == '-') {
            snprintf(p->err, p->err_len, "'%s' cannot name a host", p->units[u].to);
            return failed(p, ROV_RESTART_USAGE, ROV_ERR_INVAL);
        }
    return ROV_OK;
}

/* 1. Nothing of the job answers. */
static rov_status_t check_not_running(struct plan *p)
{
    rov_job_t *job = p->job;
    char why[256];

    if (ccp_job_load(job, why, sizeof(why)) != ROV_OK)
        return ROV_OK; /* (a registry without records: nothing runs) */
    job->until = ccp_now_s() + REQUEST_S;
    for (size_t i = 0; i < job->n; i++)
        if (ccp_job_ask(job, i, "stage") == ROV_OK) {
            snprintf(p->err, p->err_len, "rank %ld of job %s is running (pid %d on %s, %s): a "
                     "restart would run it twice; stop the job first", job->recs[i].rank,
                     job->id, job->recs[i].pid, job->recs[i].host, job->ranks[i].stage);
            job->until = 0;
            return failed(p, ROV_RESTART_RUNNING, ROV_ERR_BUSY);
        }
    job->until = 0;
    return ROV_OK;
}

/* 2. The set. */
static rov_status_t choose_set(struct plan *p, long want)
{
    rov_job_t *job = p->job;
    struct ccp_set_info *sets;
    size_t n;
    long set = 0;
    rov_status_t st = ccp_set_list(job->dir, job->key, &sets, &n, p->err, p->err_len);

    if (st != ROV_OK)
        return st;
    for (size_t i = n; i-- > 0 && !set;)
        if (sets[i].complete && (!want || sets[i].set == want))
            set = sets[i].set;
    free(sets);
    if (!set) {
        if (want)
            snprintf(p->err, p->err_len, "job %s has no complete checkpoint set %ld (cprclient "
                     "%s status lists them)", job->id, want, job->id);
        else
            snprintf(p->err, p->err_len, "job %s has no complete checkpoint set in %s/sets (a "
                     "set without its manifest failed half-way and is never restarted from)",
                     job->id, job->dir);
        return failed(p, ROV_RESTART_NO_SET, ROV_ERR_NOT_FOUND);
    }
    st = ccp_manifest_read(job->dir, job->key, set, &p->m, p->err, p->err_len);
    return st == ROV_OK ? ROV_OK : failed(p, ROV_RESTART_NO_SET, st);
}

/* 3. Every target host answers the agent. */
static rov_status_t check_host(struct plan *p, size_t u)
{
    const char *to = p->units[u].to;
    char out[512], how[48];
    int rc;

    if (local(p, to))
        return ROV_OK;
    for (size_t v = 0; v < u; v++)
        if (strcmp(p->units[v].to, to) == 0)
            return ROV_OK; /* (answered already) */
    rc = run_on(p, to, "true", out, sizeof(out));
    if (rc == 0)
        return ROV_OK;
    if (rc < 0)
        snprintf(how, sizeof(how), "no answer within %.0f s", PROBE_S);
    else
        snprintf(how, sizeof(how), "exit status %d", rc);
    snprintf(p->err, p->err_len, "host %s does not answer (%s %s true: %s%s%.300s)", to,
             p->agent, to, how, out[0] ? ": " : "", out);
    return failed(p, ROV_RESTART_HOST, ROV_ERR_UNREACHABLE);
}

/* "PREFIX <pids> SUFFIX" into cmd: the unit's process ids, its tree's root
 * and its ranks (CRIU restores the same ids); false when they do not fit. */
static bool unit_pids_cmd(const struct plan *p, size_t u, const char *prefix, const char *suffix,
                          char *cmd, size_t len)
{
    int n = snprintf(cmd, len, "%s %d", prefix, p->units[u].tree);

    for (size_t i = 0; i < p->m.n && n > 0 && (size_t)n < len; i++)
        if (p->m.ranks[i].unit == p->units[u].unit && p->m.ranks[i].pid != p->units[u].tree)
            n += snprintf(cmd + n, len - (size_t)n, " %d", p->m.ranks[i].pid);
    if (n > 0 && (size_t)n < len)
        n += snprintf(cmd + n, len - (size_t)n, "%s", suffix);
    return n > 0 && (size_t)n < len;
}

/* 4. None of the unit's process ids is taken on its target host. */
static rov_status_t check_pids(struct plan *p, size_t u)
{
    const char *to = p->units[u].to;
    char cmd[8192], out[512];
    int rc;

    if (!unit_pids_cmd(p, u, "for p in", "; do [ -e /proc/$p ] && echo \"$p $(cat "
                       "/proc/$p/comm 2>/dev/null)\"; done; true", cmd, sizeof(cmd))) {
        snprintf(p->err, p->err_len, "rank %ld's unit has too many processes to check",
                 p->units[u].unit);
        return failed(p, ROV_RESTART_USAGE, ROV_ERR_INVAL);
    }
    rc = run_on(p, to, cmd, out, sizeof(out));
    if (rc != 0) {
        snprintf(p->err, p->err_len, "host %s: the process id check exited %d: %.300s", to, rc,
                 out);
        return failed(p, ROV_RESTART_HOST, ROV_ERR_UNREACHABLE);
    }
    if (out[0]) {
        snprintf(p->err, p->err_len, "process id %.*s is taken on %s (%.200s): rank %ld's unit "
                 "of checkpoint set %ld needs it (CRIU restores the same ids)",
                 (int)strcspn(out, " \n"), out, to, out, p->units[u].unit, p->m.set);
        return failed(p, ROV_RESTART_PID, ROV_ERR_BUSY);
    }
    return ROV_OK;
}

/* The last line of a unit's output, for an error. */
static void last_lines(const char *path, char *out, size_t len)
{
    char buf[4096];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
    ssize_t n = size < 0 ? -1 : pread(fd, buf, sizeof(buf) - 1, size > 600 ? size - 600 : 0);

    if (fd >= 0)
        close(fd);
    out[0] = '\0';
    if (n <= 0)
        return;
    buf[n] = '\0';
    while (n > 0 && buf[n - 1] == '\n')
        buf[--n] = '\0';
    for (char *c = buf; *c; c++)
        if (*c == '\n')
            *c = '|';
    snprintf(out, len, "%.300s", buf + (n > 300 ? n - 300 : 0));
}

/* Kill what was restored: a restart that fails leaves nothing running. */
static void unrestore(struct plan *p)
{
    for (size_t u = 0; u < p->n; u++) {
        char cmd[8192], out[256];

        if (!p->units[u].restored ||
            !unit_pids_cmd(p, u, "kill -KILL", " 2>/dev/null; true", cmd, sizeof(cmd)))
            continue; /* (a unit too large for its check was never restored) */
        run_on(p, p->units[u].to, cmd, out, sizeof(out));
        rov_warn("ccp", "restart: rank %ld's unit, restored on %s, killed again",
                 p->units[u].unit, p->units[u].to);
    }
}

/* unit u's RAILOVER_RESTORE_CMD with %a the action, into cmd; false when
 * too long. */
static bool unit_cmd(const struct plan *p, size_t u, const char *action, char *cmd, size_t len)
{
    char dir[CCP_DIR_MAX + ROV_JOB_MAX + 60], rank[24], leaf[48];
    const char *vals[26] = {0};

    snprintf(leaf, sizeof(leaf), "unit.%ld", p->units[u].unit);
    ccp_set_path(p->job->dir, p->m.set, leaf, dir, sizeof(dir));
    snprintf(rank, sizeof(rank), "%ld", p->units[u].unit);
    vals['a' - 'a'] = action;
    vals['d' - 'a'] = dir;
    vals['r' - 'a'] = rank;
    vals['j' - 'a'] = p->job->id;
    if (ccp_expand(p->restore_cmd, vals, cmd, len))
        return true;
    snprintf(p->err, p->err_len, "RAILOVER_RESTORE_CMD too long once expanded");
    return false;
}

/* Every unit whose restore ran: `release` (RAILOVER_RESTORE_CMD with %a;
 * without %a there is nothing to release). */
static void release_all(struct plan *p)
{
    if (!strstr(p->restore_cmd, "%a"))
        return;
    for (size_t u = 0; u < p->n; u++) {
        char cmd[2048], out[512];
        int rc;

        if (p->units[u].rc == -1 && !p->units[u].restored)
            continue; /* (never ran) */
        if (!unit_cmd(p, u, "release", cmd, sizeof(cmd)))
            return;
        rc = run_on(p, p->units[u].to, cmd, out, sizeof(out));
        if (rc != 0)
            rov_warn("ccp", "restart: releasing rank %ld's unit on %s: exit %d: %s",
                     p->units[u].unit, p->units[u].to, rc, out);
    }
}

/* 5. Every unit's restore command, all at once. */
static rov_status_t restore_all(struct plan *p, double deadline)
{
    rov_job_t *job = p->job;
    rov_status_t st = ROV_OK;

    for (size_t u = 0; u < p->n; u++) {
        char out[CCP_DIR_MAX + ROV_JOB_MAX + 60], cmd[2048], leaf[48], why[CCP_DIR_MAX + 200];
        int fd;

        snprintf(leaf, sizeof(leaf), "restore.%ld.out", p->units[u].unit);
        ccp_set_path(job->dir, p->m.set, leaf, out, sizeof(out));
        if (!unit_cmd(p, u, "restore", cmd, sizeof(cmd))) {
            st = failed(p, ROV_RESTART_USAGE, ROV_ERR_INVAL);
            break;
        }
        st = ccp_open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600, &fd, why, sizeof(why));
        if (st != ROV_OK) {
            snprintf(p->err, p->err_len, "%s", why);
            break;
        }
        dprintf(fd, "+ %s%s%s\n", local(p, p->units[u].to) ? "" : p->units[u].to,
                local(p, p->units[u].to) ? "" : ": ", cmd);
        p->units[u].child = spawn(p, p->units[u].to, cmd, fd);
        close(fd);
        if (p->units[u].child < 0) {
            snprintf(p->err, p->err_len, "fork: %s", strerror(errno));
            p->units[u].child = 0;
            st = ROV_ERR_IO;
            break;
        }
        rov_info("ccp", "restart: rank %ld's unit (imaged on %s) restoring on %s",
                 p->units[u].unit, p->units[u].from, p->units[u].to);
    }
    for (size_t u = 0; u < p->n; u++) {
        char out[CCP_DIR_MAX + ROV_JOB_MAX + 60], tail[320], leaf[48];

        if (!p->units[u].child)
            continue;
        p->units[u].rc = reap(p->units[u].child, deadline);
        p->units[u].restored = p->units[u].rc == 0;
        if (p->units[u].rc == 0 || st != ROV_OK)
            continue;
        snprintf(leaf, sizeof(leaf), "restore.%ld.out", p->units[u].unit);
        ccp_set_path(job->dir, p->m.set, leaf, out, sizeof(out));
        last_lines(out, tail, sizeof(tail));
        snprintf(p->err, p->err_len, "restore of rank %ld's unit on %s %s (%s): %s", 
                 p->units[u].unit, p->units[u].to,
                 p->units[u].rc < 0 ? "took too long" : p->units[u].rc == 75
                 ? "found a process id taken" : "failed", out, tail);
        st = failed(p, p->units[u].rc == 75 ? ROV_RESTART_PID : ROV_RESTART_RESTORE,
                    ROV_ERR_IO);
    }
    if (st != ROV_OK)
        unrestore(p);
    /* Every unit is back (or killed again): their connections may flow. */
    release_all(p);
    return st;
}

/* 6. Every rank answers, closed, from where it runs now. */
static rov_status_t wait_ranks(struct plan *p, double t0, double deadline)
{
    rov_job_t *job = p->job;
    size_t left = p->m.n;
    char why[256];

    while (left) {
        left = p->m.n;
        if (ccp_job_load(job, why, sizeof(why)) == ROV_OK) {
            job->until = deadline;
            for (size_t i = 0; i < job->n; i++) {
                const struct ccp_set_rank *want = NULL;

                for (size_t k = 0; k < p->m.n && !want; k++)
                    if (p->m.ranks[k].rank == job->recs[i].rank)
                        want = &p->m.ranks[k];
                if (!want || job->recs[i].pid != want->pid ||
                    ccp_job_ask(job, i, "stage") != ROV_OK)
                    continue;
                job->ranks[i].seconds = ccp_now_s() - t0;
                left--;
            }
            job->until = 0;
        }
        if (!left || ccp_now_s() >= deadline)
            break;
        nanosleep(&(struct timespec){0, 50 * 1000000}, NULL);
    }
    if (left) {
        snprintf(p->err, p->err_len, "%zu of %zu restored ranks did not answer within the time "
                 "limit (their logs say why; cprclient %s status)", left, p->m.n, job->id);
        return failed(p, ROV_RESTART_REGISTER, ROV_ERR_TIMEDOUT);
    }
    return ROV_OK;
}

rov_status_t rov_job_restart(rov_job_t *job, const char *hosts, const char *map, long set,
                             double timeout_s, rov_job_restart_fault_t *fault, char *err,
                             size_t err_len)
{
    struct plan p = {.job = job, .fault = fault, .err = err, .err_len = err_len};
    double t0 = ccp_now_s(), deadline = t0 + timeout_s;
    rov_status_t st;

    *fault = ROV_RESTART_OK;
    err[0] = '\0';
    if (!(timeout_s > 0) || set < 0) {
        snprintf(err, err_len, "bad time limit or set");
        return failed(&p, ROV_RESTART_USAGE, ROV_ERR_INVAL);
    }
    st = ccp_client_setting("RAILOVER_CCP_AGENT", p.agent, sizeof(p.agent), err, err_len);
    if (st == ROV_OK)
        st = ccp_client_setting("RAILOVER_RESTORE_CMD", p.restore_cmd, sizeof(p.restore_cmd),
                                err, err_len);
    if (st != ROV_OK)
        return failed(&p, ROV_RESTART_USAGE, st);
    st = ccp_job_lock(job, err, err_len);
    if (st != ROV_OK)
        return st;
    st = check_not_running(&p);
    if (st == ROV_OK)
        st = choose_set(&p, set);
    if (st == ROV_OK)
        st = plan_units(&p);
    if (st == ROV_OK)
        st = plan_targets(&p, hosts, map);
    for (size_t u = 0; st == ROV_OK && u < p.n; u++)
        st = check_host(&p, u);
    for (size_t u = 0; st == ROV_OK && u < p.n; u++)
        st = check_pids(&p, u);
    if (st == ROV_OK)
        st = restore_all(&p, deadline);
    if (st == ROV_OK)
        st = wait_ranks(&p, t0, deadline);
    if (st == ROV_OK) {
        rov_info("ccp", "restart: job %s restored from checkpoint set %ld in %.3f s", job->id,
                 p.m.set, ccp_now_s() - t0);
    }
    ccp_manifest_free(&p.m);
    free(p.units);
    ccp_job_unlock(job);
    return st;
}
