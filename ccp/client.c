/*
 * The checkpoint client (include/railover/ccp.h): read a job's registry,
 * and run a stage on every rank through its control endpoint (the network
 * one with the job's proof, else its socket on this host), then wait until
 * each rank's context has reached the stage.  cprclient is this and a
 * command line.
 *
 * A stage is asked of every rank at once and then watched by asking each
 * its stage ("stage") until all are there: a rank completes a drain by
 * itself (its helper), whatever the others do.  A drain that cannot
 * complete (a rank dies, the time is up) is undone: every rank still
 * reachable resumes, so the job runs on as before.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "ccp/registry.h"
#include "ccp/sets.h"
#include "railover/ccp.h"
#include "transport/control.h"
#include "transport/log.h"

#include "ccp/client_int.h"

static const char *const stage_names[] = {"status", "drain",      "close",
                                          "reopen", "checkpoint", "suspend"};

bool rov_job_id_ok(const char *id)
{
    return id && rov_jobid_ok(id);
}

/* The registry's base directory (ccp_base_dir()) from RAILOVER_JOB_DIR and
 * RAILOVER_RUN_DIR, read and checked as a rank reads them: a bad value of
 * any setting is refused, with err saying which. */
rov_status_t ccp_client_setting(const char *name, char *out, size_t len, char *err,
                                size_t err_len)
{
    rov_config_t *config;
    rov_status_t st = rov_config_read(err, err_len, &config);

    if (st != ROV_OK)
        return st;
    st = rov_config_get(config, name, out, len);
    if (st != ROV_OK)
        snprintf(err, err_len, "%s: %s", name, rov_status_str(st));
    rov_config_free(config);
    return st;
}

static rov_status_t registry_base(char *out, size_t len, char *err, size_t err_len)
{
    char job_dir[CCP_DIR_MAX], run_dir[ROV_CTL_RUN_DIR_MAX];
    rov_config_t *config;
    rov_status_t st = rov_config_read(err, err_len, &config);

    if (st != ROV_OK)
        return st;
    if (rov_config_get(config, "RAILOVER_JOB_DIR", job_dir, sizeof(job_dir)) != ROV_OK ||
        rov_config_get(config, "RAILOVER_RUN_DIR", run_dir, sizeof(run_dir)) != ROV_OK ||
        ccp_base_dir(job_dir, run_dir, out, len) != ROV_OK) {
        snprintf(err, err_len, "no job registry (RAILOVER_JOB_DIR too long?)");
        st = ROV_ERR_INVAL;
    }
    rov_config_free(config);
    return st;
}

const char *rov_job_stage_str(rov_job_stage_t stage)
{
    return (unsigned)stage <= ROV_JOB_SUSPEND ? stage_names[stage] : "unknown";
}

double ccp_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int by_rank(const void *a, const void *b)
{
    const struct ccp_record *x = a, *y = b;

    return (x->rank > y->rank) - (x->rank < y->rank);
}

struct gather {
    rov_job_t *job;
    struct ccp_record *recs;
    size_t n, cap;
    rov_status_t st;
    char *err;
    size_t err_len;
};

static bool gather_one(void *arg, const struct ccp_record *rec)
{
    struct gather *g = arg;

    if (strcmp(rec->job, g->job->id) != 0) {
        snprintf(g->err, g->err_len, "registry record of rank %ld in %s is of job %s",
                 rec->rank, g->job->dir, rec->job);
        g->st = ROV_ERR_PROTO;
        return false;
    }
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 16;
        struct ccp_record *more = realloc(g->recs, cap * sizeof(*more));

        if (!more) {
            g->st = ROV_ERR_NOMEM;
            return false;
        }
        g->recs = more;
        g->cap = cap;
    }
    g->recs[g->n++] = *rec;
    return true;
}

/* (Re)read every rank's record. */
rov_status_t ccp_job_load(rov_job_t *job, char *err, size_t err_len)
{
    struct gather g = {.job = job, .err = err, .err_len = err_len};
    rov_status_t st = ccp_records(job->dir, job->key, gather_one, &g, err, err_len);

    if (st == ROV_OK)
        st = g.st;
    if (st != ROV_OK) {
        free(g.recs);
        return st;
    }
    qsort(g.recs, g.n, sizeof(*g.recs), by_rank);
    free(job->recs);
    free(job->ranks);
    job->recs = g.recs;
    job->n = g.n;
    job->ranks = calloc(g.n ? g.n : 1, sizeof(*job->ranks));
    if (!job->ranks)
        return ROV_ERR_NOMEM;
    for (size_t i = 0; i < g.n; i++) {
        rov_job_rank_t *r = &job->ranks[i];

        r->rank = g.recs[i].rank;
        r->pid = g.recs[i].pid;
        snprintf(r->host, sizeof(r->host), "%s", g.recs[i].host);
        snprintf(r->where, sizeof(r->where), "%s",
                 g.recs[i].ctl_net[0] ? g.recs[i].ctl_net : g.recs[i].ctl_path);
        snprintf(r->stage, sizeof(r->stage), "?");
    }
    return ROV_OK;
}

rov_status_t rov_job_open(const char *jobid, rov_job_t **job_p, char *err, size_t err_len)
{
    char base[CCP_DIR_MAX];
    rov_job_t *job;
    rov_status_t st;

    const char *level = getenv("RAILOVER_LOG");
    struct rov_log_levels levels;
    char why[256];

    *job_p = NULL;
    /* No context reads the environment here: RAILOVER_LOG=debug shows
     * each request and how long its answer took. */
    if (level && rov_log_levels_parse(level, &levels, why, sizeof(why)) == ROV_OK)
        rov_log_set_levels(&levels);
    if (!rov_job_id_ok(jobid)) {
        snprintf(err, err_len, "'%.*s%s' is not a job id: 1 to %d characters of A-Z a-z 0-9 . _ "
                 "-, not starting with '.' (as RAILOVER_JOBID)", 80, jobid ? jobid : "",
                 jobid && strlen(jobid) > 80 ? "..." : "", ROV_JOB_MAX);
        return ROV_ERR_INVAL;
    }
    st = registry_base(base, sizeof(base), err, err_len);
    if (st != ROV_OK)
        return st;
    job = calloc(1, sizeof(*job));
    if (!job)
        return ROV_ERR_NOMEM;
    job->lock_fd = -1;
    job->keep = 2;
    snprintf(job->id, sizeof(job->id), "%s", jobid);
    if (gethostname(job->host, sizeof(job->host)) < 0)
        job->host[0] = '\0';
    job->host[sizeof(job->host) - 1] = '\0';
    st = ccp_job_dir(base, jobid, false, job->dir, sizeof(job->dir), err, err_len);
    if (st == ROV_OK)
        st = ccp_secret(job->dir, false, job->key, err, err_len);
    if (st == ROV_ERR_NOT_FOUND)
        snprintf(err, err_len, "no job %s in the registry %s", jobid, base);
    if (st == ROV_OK)
        st = ccp_job_load(job, err, err_len);
    if (st != ROV_OK) {
        rov_job_close(job);
        return st;
    }
    *job_p = job;
    return ROV_OK;
}

void rov_job_close(rov_job_t *job)
{
    if (!job)
        return;
    if (job->lock_fd >= 0)
        close(job->lock_fd);
    free(job->recs);
    free(job->ranks);
    free(job);
}

size_t rov_job_size(const rov_job_t *job)
{
    return job->n;
}

const rov_job_rank_t *rov_job_rank(const rov_job_t *job, size_t index)
{
    return index < job->n ? &job->ranks[index] : NULL;
}

rov_status_t rov_job_address(rov_job_t *job, long rank, void *buf, size_t *len)
{
    char path[sizeof(job->dir) + 32], err[256];
    struct ccp_record rec;

    snprintf(path, sizeof(path), "%s/rank.%ld", job->dir, rank);
    if (ccp_record_read(path, job->key, &rec, err, sizeof(err)) != ROV_OK ||
        rec.endpoint_len == 0)
        return ROV_ERR_NOT_FOUND;
    if (*len < rec.endpoint_len) {
        *len = rec.endpoint_len;
        return ROV_ERR_MSGSIZE;
    }
    memcpy(buf, rec.endpoint, rec.endpoint_len);
    *len = rec.endpoint_len;
    return ROV_OK;
}

/* One request to rank i; ROV_OK with its answer's last line "ok" (and the
 * stage it reports in r->stage), or why not in r->error. */
rov_status_t ccp_job_ask(rov_job_t *job, size_t i, const char *verb)
{
    const struct ccp_record *rec = &job->recs[i];
    rov_job_rank_t *r = &job->ranks[i];
    char *answer = NULL, *at;
    rov_status_t st;
    double t0;

    if (!rec->ctl_net[0] && strcmp(rec->host, job->host) != 0) {
        snprintf(r->error, sizeof(r->error), "rank %ld is on host %s and has no network "
                 "control endpoint (RAILOVER_CCP_ADDR)", rec->rank, rec->host);
        return r->status = ROV_ERR_UNREACHABLE;
    }
    t0 = ccp_now_s();
    /* A busy endpoint (it ran nothing) is asked again within the request's
     * limit and the stage's. */
    st = rov_ctl_request(rec->ctl_net[0] ? rec->ctl_net : rec->ctl_path, job->key, verb,
                         REQUEST_S, job->until > 0 ? job->until - t0 : REQUEST_S, &answer, NULL,
                         r->error, sizeof(r->error));
    rov_debug("ccp", "rank %ld: '%s' answered in %.3f s (%s)", rec->rank, verb, ccp_now_s() - t0,
              rov_status_str(st));
    if (st == ROV_ERR_AGAIN) {
        char msg[sizeof(r->error) + 128];
        size_t n;

        snprintf(msg, sizeof(msg), "rank %ld (pid %d on %s): control endpoint busy for %.1f s "
                 "(%s)", rec->rank, rec->pid, rec->host, ccp_now_s() - t0, r->error);
        n = strnlen(msg, sizeof(r->error) - 1);
        memcpy(r->error, msg, n);
        r->error[n] = '\0';
        return r->status = ROV_ERR_RESOURCE;
    }
    if (st != ROV_OK) {
        char msg[sizeof(r->error) + 128];
        size_t n;

        snprintf(msg, sizeof(msg), "rank %ld (pid %d on %s) unreachable: %s", rec->rank,
                 rec->pid, rec->host, r->error);
        n = strnlen(msg, sizeof(r->error) - 1);
        memcpy(r->error, msg, n);
        r->error[n] = '\0';
        /* Gone, silent, another uid's, not an endpoint or a record whose
         * address is not one: unreachable. */
        return r->status = (st == ROV_ERR_PROTO || st == ROV_ERR_NOT_FOUND ||
                            st == ROV_ERR_TIMEDOUT || st == ROV_ERR_REFUSED ||
                            st == ROV_ERR_INVAL
                                ? ROV_ERR_UNREACHABLE : st);
    }
    at = strstr(answer, "stage=");
    if (at)
        sscanf(at + 6, "%15[a-z]", r->stage);
    at = strstr(answer, "error: ");
    if (at) {
        char *nl = strchr(at, '\n');

        if (nl)
            *nl = '\0';
        snprintf(r->error, sizeof(r->error), "rank %ld: %s", rec->rank, at + 7);
        st = strstr(at, "permission denied") ? ROV_ERR_REFUSED : ROV_ERR_BUSY;
    } else if (!strstr(answer, "ok\n")) {
        snprintf(r->error, sizeof(r->error), "rank %ld: answer cut short", rec->rank);
        st = ROV_ERR_UNREACHABLE;
    }
    free(answer);
    return r->status = st;
}

static const char *target_of(rov_job_stage_t stage)
{
    return stage == ROV_JOB_DRAIN ? "quiesced" : stage == ROV_JOB_REOPEN ? "running" : "closed";
}

static const char *verb_of(rov_job_stage_t stage)
{
    return stage == ROV_JOB_DRAIN ? "quiesce" : stage == ROV_JOB_CLOSE ? "close-rails" : "reopen";
}

/* Whether a rank at stage `at` may be asked for `stage` (in order). */
static const char *out_of_order(rov_job_stage_t stage, const char *at)
{
    if (stage == ROV_JOB_DRAIN && (!strcmp(at, "closed") || !strcmp(at, "reopening")))
        return "its rails are closed: reopen first";
    if (stage == ROV_JOB_CLOSE && strcmp(at, "quiesced") && strcmp(at, "closed"))
        return "it is not drained: drain first";
    if ((stage == ROV_JOB_CHECKPOINT || stage == ROV_JOB_SUSPEND) && strcmp(at, "closed"))
        return "its rails are not closed: drain and close first";
    return NULL;
}

static rov_status_t fail(rov_job_t *job, size_t i, char *err, size_t err_len)
{
    snprintf(err, err_len, "%s", job->ranks[i].error);
    return job->ranks[i].status;
}

/* Take the job's lock: one client at a time. */
rov_status_t ccp_job_lock(rov_job_t *job, char *err, size_t err_len)
{
    char path[sizeof(job->dir) + 8], pid[32] = "";
    rov_status_t st;
    ssize_t n;

    if (job->lock_fd >= 0)
        return ROV_OK;
    snprintf(path, sizeof(path), "%s/lock", job->dir);
    /* (not truncated before it is known to be ours and have no other name) */
    st = ccp_open(path, O_RDWR | O_CREAT, 0600, &job->lock_fd, err, err_len);
    if (st != ROV_OK)
        return st;
    if (flock(job->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        n = pread(job->lock_fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        snprintf(err, err_len, "another client%s%s is driving job %s; try again when it is done",
                 pid[0] ? " (pid " : "", pid[0] ? strcat(pid, ")") : "", job->id);
        close(job->lock_fd);
        job->lock_fd = -1;
        return ROV_ERR_AGAIN;
    }
    n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (ftruncate(job->lock_fd, 0) < 0 || pwrite(job->lock_fd, pid, (size_t)n, 0) != n) {
        /* only the message of a second client lacks our pid */
    }
    return ROV_OK;
}

void ccp_job_unlock(rov_job_t *job)
{
    if (job->lock_fd >= 0) {
        close(job->lock_fd);
        job->lock_fd = -1;
    }
}

/* Undo a drain that cannot complete: every rank that answers resumes.  The
 * undo is not held to the stage's limit (it comes when that has run out):
 * a busy rank is asked again for the request's own time. */
static void resume_all(rov_job_t *job)
{
    job->until = 0;
    for (size_t i = 0; i < job->n; i++) {
        rov_job_rank_t keep = job->ranks[i];

        if (ccp_job_ask(job, i, "reopen") != ROV_OK)
            job->ranks[i] = keep; /* it keeps why the stage failed */
    }
}

/* The first line of rank i's unit's checkpoint log ("+ <command>"), for an
 * error. */
static void ckpt_command(const rov_job_t *job, long set, size_t i, char *out, size_t len)
{
    char path[sizeof(job->dir) + 60], err[sizeof(path) + 128], leaf[40];
    int fd = -1;
    FILE *f;

    snprintf(leaf, sizeof(leaf), "unit.%ld.log", ccp_unit_of(job->recs, job->n, i));
    out[0] = '\0';
    f = ccp_set_path(job->dir, set, leaf, path, sizeof(path)) &&
                ccp_open(path, O_RDONLY, 0, &fd, err, sizeof(err)) == ROV_OK
            ? fdopen(fd, "r") : NULL;
    if (!f && fd >= 0)
        close(fd);
    if (f) {
        if (fgets(out, (int)len, f))
            out[strcspn(out, "\n")] = '\0';
        fclose(f);
    }
    if (strncmp(out, "+ ", 2) == 0)
        memmove(out, out + 2, strlen(out) - 1);
}

/* Every rank closed: each unit runs its checkpoint command into a new set
 * (sets.h; the ranks without a control endpoint meanwhile), and each rank
 * publishes the result in its record.  When every rank succeeded the set
 * gets its manifest and older sets are pruned (job->keep). */
static rov_status_t checkpoint(rov_job_t *job, bool suspend, double timeout_s, char *err,
                               size_t err_len)
{
    long *before = calloc(job->n ? job->n : 1, sizeof(*before));
    rov_status_t st = ROV_OK;
    /* Each rank gives its command a little less than our time, so that its
     * result, "no result in time" included, is here before we give up: then
     * every rank is reachable again, and the job can be reopened. */
    double t0 = ccp_now_s(), limit = timeout_s > 1.0 ? timeout_s - 0.5 : timeout_s / 2;
    double deadline = t0 + timeout_s + 1.5;
    size_t left = job->n;
    char verb[96];
    long set;

    if (!before)
        return ROV_ERR_NOMEM;
    /* Every rank able to (its command set, closed) before any starts: a
     * rank that starts is out of reach until its command is done. */
    for (size_t i = 0; i < job->n; i++) {
        if (ccp_job_ask(job, i, "checkpoint check") != ROV_OK) {
            st = fail(job, i, err, err_len);
            free(before);
            return st;
        }
    }
    st = ccp_set_new(job->dir, job->recs, job->n, &set, err, err_len);
    if (st != ROV_OK) {
        free(before);
        return st;
    }
    for (size_t i = 0; i < job->n; i++) {
        before[i] = job->recs[i].ckpt_count;
        snprintf(verb, sizeof(verb), "checkpoint set=%ld%s limit=%.3f", set,
                 suspend ? " suspend" : "", limit);
        if (ccp_job_ask(job, i, verb) != ROV_OK) {
            st = fail(job, i, err, err_len);
            ccp_set_abort(job->dir, set); /* the ranks asked so far stop waiting */
            free(before);
            return st;
        }
    }
    while (left && ccp_now_s() < deadline) {
        struct timespec ts = {0, (long)(POLL_S * 4 * 1e9)};

        nanosleep(&ts, NULL);
        for (size_t i = 0; i < job->n; i++) {
            rov_job_rank_t *r = &job->ranks[i];
            char path[sizeof(job->dir) + 32], why[256];
            struct ccp_record rec;

            if (r->seconds > 0 || r->status != ROV_OK)
                continue; /* done */
            snprintf(path, sizeof(path), "%s/rank.%ld", job->dir, job->recs[i].rank);
            if (ccp_record_read(path, job->key, &rec, why, sizeof(why)) != ROV_OK ||
                rec.ckpt_count <= before[i])
                continue;
            job->recs[i] = rec; /* its control endpoints are new */
            r->pid = rec.pid;
            snprintf(r->host, sizeof(r->host), "%s", rec.host);
            snprintf(r->where, sizeof(r->where), "%s", rec.ctl_net[0] ? rec.ctl_net : rec.ctl_path);
            snprintf(r->stage, sizeof(r->stage), suspend && rec.ckpt_rc == 0 ? "stopped" : "closed");
            r->seconds = rec.ckpt_ms > 0 ? (double)rec.ckpt_ms / 1000 : 1e-3;
            left--;
            if (rec.ckpt_rc == CCP_CKPT_REFUSED) {
                r->status = ROV_ERR_PROTO;
                snprintf(r->error, sizeof(r->error), "rank %ld refused to checkpoint: the "
                         "registry was tampered with", rec.rank);
                if (st == ROV_OK) {
                    snprintf(err, err_len, "rank %ld refused to run its checkpoint command: a "
                             "file it writes in %s/sets/%ld is a link or not its own: the "
                             "registry was tampered with (the rank's log names it)", rec.rank,
                             job->dir, set);
                    st = r->status;
                }
            } else if (rec.ckpt_rc != 0) {
                char cmd[400];

                ckpt_command(job, set, i, cmd, sizeof(cmd));
                r->status = rec.ckpt_rc == -2 ? ROV_ERR_TIMEDOUT : ROV_ERR_IO;
                snprintf(r->error, sizeof(r->error), "rank %ld: checkpoint command %s (%.80s)",
                         rec.rank, rec.ckpt_rc == -2 ? "gave no result in time" :
                         "failed", cmd[0] ? cmd : "RAILOVER_CHECKPOINT_CMD");
                if (st == ROV_OK) {
                    snprintf(err, err_len, "rank %ld: checkpoint command %s, exit status %ld: "
                             "%s; see %s/sets/%ld/unit.%ld.log", rec.rank,
                             rec.ckpt_rc == -2 ? "gave no result in time" : "failed",
                             rec.ckpt_rc, cmd[0] ? cmd : "RAILOVER_CHECKPOINT_CMD", job->dir,
                             set, ccp_unit_of(job->recs, job->n, i));
                    st = r->status;
                }
            }
            if (r->status != ROV_OK)
                ccp_set_abort(job->dir, set); /* the other units stop waiting for a cut */
        }
    }
    if (left)
        ccp_set_abort(job->dir, set);
    for (size_t i = 0; left && i < job->n; i++)
        if (job->ranks[i].seconds == 0 && job->ranks[i].status == ROV_OK) {
            job->ranks[i].status = ROV_ERR_TIMEDOUT;
            snprintf(job->ranks[i].error, sizeof(job->ranks[i].error),
                     "rank %ld: no checkpoint result after %.1f s", job->ranks[i].rank,
                     timeout_s);
            if (st == ROV_OK) {
                snprintf(err, err_len, "%s", job->ranks[i].error);
                st = ROV_ERR_TIMEDOUT;
            }
        }
    free(before);
    /* Complete: the manifest, written last (the records now say where each
     * rank was imaged: its host and tree). */
    if (st == ROV_OK)
        st = ccp_manifest_write(job->dir, job->key, set, job->recs, job->n, err, err_len);
    if (st == ROV_OK) {
        char why[256];

        if (ccp_set_prune(job->dir, job->key, set, job->keep, why, sizeof(why)) < 0 || why[0])
            rov_warn("ccp", "%s", why);
    }
    return st;
}

static rov_status_t run(rov_job_t *job, rov_job_stage_t stage, double timeout_s, char *err,
                        size_t err_len)
{
    const char *target = target_of(stage);
    rov_status_t first = ROV_OK;
    double t0, deadline;
    size_t left;

    /* Where each rank is; nothing is asked before all answer and are in
     * order. */
    for (size_t i = 0; i < job->n; i++) {
        const char *why;

        /* Every rank is asked, so that each line says where it is; the
         * first failure is the answer. */
        if (ccp_job_ask(job, i, "stage") != ROV_OK) {
            if (first == ROV_OK)
                first = fail(job, i, err, err_len);
            continue;
        }
        if (stage != ROV_JOB_STATUS && first == ROV_OK &&
            (why = out_of_order(stage, job->ranks[i].stage))) {
            snprintf(err, err_len, "stage out of order: rank %ld is %s; %s",
                     job->ranks[i].rank, job->ranks[i].stage, why);
            first = ROV_ERR_BUSY;
        }
    }
    if (first != ROV_OK)
        return first;
    if (stage == ROV_JOB_STATUS)
        return ROV_OK;
    if (stage == ROV_JOB_CHECKPOINT || stage == ROV_JOB_SUSPEND)
        return checkpoint(job, stage == ROV_JOB_SUSPEND, timeout_s, err, err_len);
    t0 = ccp_now_s();
    deadline = t0 + timeout_s;
    for (size_t i = 0; i < job->n; i++) {
        if (strcmp(job->ranks[i].stage, target) == 0)
            continue; /* there already */
        if (ccp_job_ask(job, i, verb_of(stage)) != ROV_OK) {
            rov_status_t st = fail(job, i, err, err_len);

            if (stage == ROV_JOB_DRAIN)
                resume_all(job);
            return st;
        }
        job->ranks[i].seconds = ccp_now_s() - t0; /* (the answer says where it is) */
    }
    do {
        left = 0;
        for (size_t i = 0; i < job->n; i++) {
            rov_job_rank_t *r = &job->ranks[i];

            if (strcmp(r->stage, target) == 0)
                continue;
            if (ccp_job_ask(job, i, "stage") != ROV_OK) {
                rov_status_t st = fail(job, i, err, err_len);

                if (stage == ROV_JOB_DRAIN)
                    resume_all(job);
                return st;
            }
            r->seconds = ccp_now_s() - t0;
            left += strcmp(r->stage, target) != 0;
        }
        if (left && ccp_now_s() < deadline) {
            struct timespec ts = {0, (long)(POLL_S * 1e9)};

            nanosleep(&ts, NULL);
        }
    } while (left && ccp_now_s() < deadline);
    if (left) {
        for (size_t i = 0; i < job->n; i++)
            if (strcmp(job->ranks[i].stage, target) != 0) {
                job->ranks[i].status = ROV_ERR_TIMEDOUT;
                snprintf(job->ranks[i].error, sizeof(job->ranks[i].error),
                         "rank %ld still %s after %.1f s", job->ranks[i].rank,
                         job->ranks[i].stage, timeout_s);
            }
        for (size_t i = 0; i < job->n; i++)
            if (job->ranks[i].status == ROV_ERR_TIMEDOUT) {
                snprintf(err, err_len, "%s%s", job->ranks[i].error,
                         stage == ROV_JOB_DRAIN ? "; the job was resumed and runs on" : "");
                break;
            }
        if (stage == ROV_JOB_DRAIN)
            resume_all(job);
        return ROV_ERR_TIMEDOUT;
    }
    return ROV_OK;
}

rov_status_t rov_job_run(rov_job_t *job, rov_job_stage_t stage, double timeout_s, char *err,
                         size_t err_len)
{
    rov_status_t st;

    if ((unsigned)stage > ROV_JOB_SUSPEND || !(timeout_s > 0)) {
        snprintf(err, err_len, "bad stage or time limit");
        return ROV_ERR_INVAL;
    }
    st = ccp_job_lock(job, err, err_len);
    if (st != ROV_OK)
        return st;
    st = ccp_job_load(job, err, err_len); /* ranks may have come, gone or moved */
    if (st == ROV_OK && job->n == 0) {
        snprintf(err, err_len, "job %s has no rank registered", job->id);
        st = ROV_ERR_NOT_FOUND;
    }
    if (st == ROV_OK) {
        for (size_t i = 0; i < job->n; i++)
            job->ranks[i].status = ROV_OK;
        job->until = ccp_now_s() + timeout_s;
        st = run(job, stage, timeout_s, err, err_len);
        job->until = 0;
    }
    ccp_job_unlock(job);
    return st;
}

int rov_job_list(void (*fn)(void *arg, const char *jobid, size_t ranks), void *arg)
{
    char base[CCP_DIR_MAX], err[256];
    struct dirent *e;
    int count = 0;
    DIR *d;

    if (registry_base(base, sizeof(base), err, sizeof(err)) != ROV_OK)
        return ROV_ERR_INVAL;
    d = opendir(base);
    if (!d)
        return errno == ENOENT ? 0 : errno == EACCES || errno == EPERM ? ROV_ERR_REFUSED
                                                                         : ROV_ERR_IO;
    while ((e = readdir(d)) != NULL) {
        rov_job_t *job;

        if (!rov_job_id_ok(e->d_name) || rov_job_open(e->d_name, &job, err, sizeof(err)) != ROV_OK)
            continue; /* not a job, or not ours */
        fn(arg, job->id, job->n);
        rov_job_close(job);
        count++;
    }
    closedir(d);
    return count;
}

void rov_job_set_keep(rov_job_t *job, unsigned keep)
{
    job->keep = keep ? keep : 1;
}

long rov_job_sets(rov_job_t *job, rov_job_set_t *sets, size_t max)
{
    struct ccp_set_info *info;
    size_t n;
    char err[256];
    rov_status_t st = ccp_set_list(job->dir, job->key, &info, &n, err, sizeof(err));

    if (st != ROV_OK)
        return st;
    for (size_t i = 0; i < n && i < max; i++)
        sets[i] = (rov_job_set_t){info[i].set, info[i].complete, info[i].time, info[i].ranks};
    free(info);
    return (long)n;
}
