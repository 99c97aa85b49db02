/*
 * Railover cooperative checkpoint (ccp/, docs/ccp.md): job identity, the job
 * registry, and the stages run on every process of a job.
 *
 * Every context belongs to a job: RAILOVER_JOBID (or the job given at
 * rov_context_create()), else a fresh UUID that the context logs once; and
 * has a rank: the one given at create, else RAILOVER_RANK, else its pid
 * (rov_context_jobid(), rov_context_rank(): railover.h).
 * Each context with a job registers in the job registry
 * (RAILOVER_JOB_DIR/<jobid>/; a directory on a filesystem that every host
 * of the job shares, or by default the per-user run directory, for jobs
 * on one host): one record per rank with its pid, host, control endpoints
 * and endpoint address, sealed with the job's secret (a random key in the
 * registry, readable by the job's owner only).  A stage request must prove
 * that key, so only whoever can read it drives the job.
 *
 * The stages (what `cprclient <jobid> drain|close|checkpoint|reopen|status`
 * runs):
 *   drain   every rank quiesces (rov_context_quiesce()): new sends wait,
 *           everything in flight is acknowledged, end markers exchanged;
 *           done when every rank is quiesced.  Completes while ranks
 *           compute without calling the library (the progress helper).
 *   close   every rank closes its rails (rov_context_close_rails());
 *           drained first.
 *   checkpoint  every closed rank's unit (the rank alone, or the ranks of
 *           a host under one parent: RAILOVER_CHECKPOINT_TREE) runs
 *           RAILOVER_CHECKPOINT_CMD (CRIU: `criu dump -t %p -D %d
 *           --leave-running`) from outside its process tree, into a new
 *           numbered checkpoint set, the ranks' control endpoints closed
 *           meanwhile; done when every rank has published the command's
 *           result in the registry.  A set whose every rank succeeded gets
 *           its manifest (complete); older sets are pruned
 *           (rov_job_set_keep()).
 *   restart (rov_job_restart()) every unit of the newest complete set is
 *           restored on its host or another (RAILOVER_CCP_AGENT,
 *           RAILOVER_RESTORE_CMD); then reopen.
 *   reopen  every rank reopens its rails (or resumes a drain); done when
 *           every rank runs again.
 * A stage already reached is done at once (idempotent).  A drain or
 * reopen that does not complete in time is undone (the job resumes) and
 * reported as ROV_ERR_TIMEDOUT: a temporary failure, the job runs on as
 * it was.  One client at a time drives a job (a lock in the registry).
 *
 * Threading: the rov_job_* calls are a client's; they use no context and
 * may run in any process of the job's owner, on any host that sees the
 * registry and reaches the ranks' control endpoints.
 */
#ifndef RAILOVER_CCP_H
#define RAILOVER_CCP_H

#include <stdbool.h>
#include <stddef.h>

#include "railover/railover.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported like railover.h's declarations (the library hides the rest). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

typedef struct rov_job rov_job_t;

typedef enum rov_job_stage {
    ROV_JOB_STATUS, /* ask every rank its stage; change nothing */
    ROV_JOB_DRAIN,
    ROV_JOB_CLOSE,
    ROV_JOB_REOPEN,
    ROV_JOB_CHECKPOINT, /* closed: every rank runs RAILOVER_CHECKPOINT_CMD;
                           they stay closed (ROV_JOB_REOPEN next) */
    ROV_JOB_SUSPEND,    /* the same, then every rank stops (SIGSTOP) */
} rov_job_stage_t;

/** "status", "drain", "close", "reopen", "checkpoint", "suspend". */
const char *rov_job_stage_str(rov_job_stage_t stage);

/** Whether id can name a job (what RAILOVER_JOBID accepts): 1 to
 * ROV_JOB_MAX characters of A-Z a-z 0-9 . _ -, not starting with '.'. */
bool rov_job_id_ok(const char *id);

/** One rank's record and its answer to the last stage. */
typedef struct rov_job_rank {
    long rank;
    int pid;
    char host[64];
    char where[112];       /* its control endpoint (cprclient's ctl=): the network
                              one's IP:PORT, else its socket's path */
    char stage[16];        /* its context's stage after the request */
    double seconds;        /* from the request until the rank was done */
    rov_status_t status;   /* ROV_OK, or why this rank failed the stage */
    char error[160];       /* one line when status != ROV_OK */
} rov_job_rank_t;

/**
 * Open a job of the registry (RAILOVER_JOB_DIR, else the per-user run
 * directory's "jobs"): read its secret and every rank's record.
 *   ROV_ERR_NOT_FOUND  no job of that id in the registry
 *   ROV_ERR_REFUSED    the job is not this user's (its secret is not
 *                      readable: only the job's owner drives it)
 *   ROV_ERR_PROTO      a record is truncated, malformed or does not carry
 *                      the job's seal, or a record or the secret is a
 *                      link or not the user's own file (tampered with)
 *   ROV_ERR_INVAL      a malformed job id
 * On any error *job_p is NULL; err (err_len bytes) says why in one line.
 */
rov_status_t rov_job_open(const char *jobid, rov_job_t **job_p, char *err, size_t err_len);
void rov_job_close(rov_job_t *job);

/** Ranks in the registry, in rank order. */
size_t rov_job_size(const rov_job_t *job);
const rov_job_rank_t *rov_job_rank(const rov_job_t *job, size_t index);

/** The endpoint address (rov_endpoint_address()) that rank published,
 * read from the registry again (it changes when that rank reopens or is
 * restored elsewhere).  ROV_ERR_NOT_FOUND: no such rank, or it has no
 * endpoint; ROV_ERR_MSGSIZE: *len too small (then *len says how much). */
rov_status_t rov_job_address(rov_job_t *job, long rank, void *buf, size_t *len);

/**
 * Run a stage on every rank and wait until each has reported, at most
 * timeout_s seconds.  Each rank's answer is in rov_job_rank().
 *   ROV_OK              every rank is there
 *   ROV_ERR_AGAIN       another client is driving the job: nothing asked
 *   ROV_ERR_BUSY        the stage is out of order (a close before the
 *                       drain): nothing was asked of any rank
 *   ROV_ERR_UNREACHABLE a rank is dead or its control endpoint does not
 *                       answer (the others were resumed if a drain had
 *                       begun)
 *   ROV_ERR_REFUSED     a rank refused the job's proof
 *   ROV_ERR_RESOURCE    a rank's control endpoint stayed busy (it had as
 *                       many clients as it serves, and ran nothing of
 *                       ours) while it was asked again, up to one
 *                       request's limit (5 s) or timeout_s
 *   ROV_ERR_TIMEDOUT    not done in time: undone, the job runs as before
 *   ROV_ERR_PROTO       a record changed since rov_job_open() is malformed
 *                       or not sealed (the records are read again first),
 *                       a record or the lock is a link; or (checkpoint) a
 *                       rank refused to run its command because a file it
 *                       writes is a link or not its own: the ranks are
 *                       closed and reachable, reopen them
 *   ROV_ERR_NOT_FOUND   no rank is registered any more
 *   ROV_ERR_IO          a checkpoint command failed on a rank (its exit
 *                       status and the command are in err); the ranks are
 *                       closed and reachable: reopen them
 * err says why in one line, naming the rank.
 */
rov_status_t rov_job_run(rov_job_t *job, rov_job_stage_t stage, double timeout_s, char *err,
                         size_t err_len);

/** How many complete checkpoint sets a checkpoint keeps (default 2, at
 * least 1): older sets are removed once a new one is complete, and
 * incomplete ones too. */
void rov_job_set_keep(rov_job_t *job, unsigned keep);

/** One checkpoint set of a job. */
typedef struct rov_job_set {
    long number;           /* 1, 2, ...: in the order they were taken */
    bool complete;         /* every rank succeeded: it has its manifest */
    long long time;        /* when it completed (Unix time), 0: incomplete */
    size_t ranks;          /* ranks imaged (complete sets) */
} rov_job_set_t;

/** The job's checkpoint sets, oldest first: up to max of them in sets;
 * returns how many there are (maybe more than max), or a negative status. */
long rov_job_sets(rov_job_t *job, rov_job_set_t *sets, size_t max);

/** Why a restart failed (rov_job_restart()). */
typedef enum rov_job_restart_fault {
    ROV_RESTART_OK,
    ROV_RESTART_NO_SET,    /* no complete checkpoint set (or not the one asked) */
    ROV_RESTART_RUNNING,   /* a rank of the job still answers: nothing restored */
    ROV_RESTART_HOST,      /* a target host does not answer the agent: nothing
                              restored */
    ROV_RESTART_PID,       /* a process id of the images is taken on its
                              target host: nothing left restored */
    ROV_RESTART_RESTORE,   /* a unit's restore failed (err names the rank, the
                              host and the end of CRIU's log): nothing left
                              restored */
    ROV_RESTART_REGISTER,  /* restored ranks did not answer in time */
    ROV_RESTART_USAGE,     /* hosts or map malformed, or naming no rank */
} rov_job_restart_fault_t;

/**
 * Restore the job from a checkpoint set (set 0: the newest complete one):
 * each unit of the set on the host it was imaged on, or on the host
 * `hosts` gives ("H1,H2,...": the set's hosts, in the order of their lowest
 * rank, each replaced by the one at its place) or `map` gives ("R=H,...":
 * rank R's unit on host H); NULL for none.  Each unit's RAILOVER_RESTORE_CMD
 * runs on its host through RAILOVER_CCP_AGENT (on this host, directly),
 * all at once; then every rank is waited for (at most timeout_s) until it
 * answers from where it now runs, closed: reopen the job next
 * (ROV_JOB_REOPEN).  Output of each unit's command:
 * <set>/restore.<unit>.out in the job's directory.
 * ROV_OK, else *fault says which of the above failed (ROV_ERR_AGAIN:
 * another client drives the job, nothing done); err says why in one line.
 */
rov_status_t rov_job_restart(rov_job_t *job, const char *hosts, const char *map, long set,
                             double timeout_s, rov_job_restart_fault_t *fault, char *err,
                             size_t err_len);

/** The jobs of the registry this user can drive: calls fn for each job
 * id (with its number of ranks); returns how many, or a negative status
 * (ROV_ERR_REFUSED: the registry's directory is not readable by this
 * user). */
int rov_job_list(void (*fn)(void *arg, const char *jobid, size_t ranks), void *arg);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif
