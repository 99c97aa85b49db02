/*
 * cprclient: drive the checkpoint stages of a Railover job (docs/ccp.md).
 *
 *   cprclient [--timeout S] JOBID [drain|close|reopen|resume|status]
 *   cprclient list
 *
 * With no stage: drain, then close, as Scali's checkpoint client did (the
 * checkpoint itself, RAILOVER_CHECKPOINT_CMD, is not there yet: docs/ccp.md).
 * Prints one line per rank and a summary; exits with a code per failure,
 * each with a one-line message on stderr.  Uses only include/railover/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "railover/ccp.h"

enum {
    EXIT_UNKNOWN_JOB = 2,
    EXIT_UNREACHABLE = 3,
    EXIT_ORDER = 4,
    EXIT_TIMEOUT = 5,
    EXIT_OTHER_CLIENT = 6,
    EXIT_NOT_OWNER = 7,
    EXIT_REGISTRY = 8,
    EXIT_USAGE = 64,
};

static void usage(FILE *f)
{
    fputs("usage: cprclient [--timeout SECONDS] JOBID [drain|close|reopen|resume|status]\n"
          "       cprclient list\n"
          "\n"
          "  drain    every rank holds new sends, acknowledges everything in flight and\n"
          "           exchanges end markers with its peers (completes while ranks compute)\n"
          "  close    every rank closes its rails (drained first): no socket or device\n"
          "           of a rail is left in any process\n"
          "  reopen   every rank reopens its rails and reconnects (alias: resume)\n"
          "  status   every rank's stage\n"
          "  (none)   drain, then close\n"
          "\n"
          "The job registry is RAILOVER_JOB_DIR (default: <run dir>/jobs).  --timeout: each\n"
          "stage's limit (default 60 s); a drain not done in time is undone.\n"
          "Exit: 0 done, 2 unknown job, 3 a rank dead or unreachable, 4 stage out of order,\n"
          "5 timeout (the job runs on), 6 another client drives the job, 7 not the job's\n"
          "owner, 8 registry record tampered or truncated, 64 usage, 1 other.\n",
          f);
}

static int exit_code(rov_status_t st)
{
    switch (st) {
    case ROV_OK: return 0;
    case ROV_ERR_NOT_FOUND:
    case ROV_ERR_INVAL: return EXIT_UNKNOWN_JOB;
    case ROV_ERR_UNREACHABLE: return EXIT_UNREACHABLE;
    case ROV_ERR_BUSY: return EXIT_ORDER;
    case ROV_ERR_TIMEDOUT: return EXIT_TIMEOUT;
    case ROV_ERR_AGAIN: return EXIT_OTHER_CLIENT;
    case ROV_ERR_REFUSED: return EXIT_NOT_OWNER;
    case ROV_ERR_PROTO: return EXIT_REGISTRY;
    default: return 1;
    }
}

static void print_ranks(const rov_job_t *job)
{
    for (size_t i = 0; i < rov_job_size(job); i++) {
        const rov_job_rank_t *r = rov_job_rank(job, i);

        printf("rank=%ld pid=%d host=%s ctl=%s stage=%s time_s=%.3f status=%s\n", r->rank,
               r->pid, r->host, r->where, r->stage, r->seconds,
               r->status == ROV_OK ? "ok" : r->error);
    }
}

static void print_job(void *arg, const char *jobid, size_t ranks)
{
    printf("%s ranks=%zu\n", jobid, ranks);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        rov_job_stage_t stage;
    } verbs[] = {{"drain", ROV_JOB_DRAIN}, {"close", ROV_JOB_CLOSE}, {"reopen", ROV_JOB_REOPEN},
                 {"resume", ROV_JOB_REOPEN}, {"status", ROV_JOB_STATUS}};
    rov_job_stage_t stages[2] = {ROV_JOB_DRAIN, ROV_JOB_CLOSE};
    int nstages = 2, a = 1;
    double timeout = 60;
    char err[512];
    rov_job_t *job;
    rov_status_t st;

    if (a < argc && strcmp(argv[a], "--timeout") == 0) {
        char *end;

        timeout = a + 1 < argc ? strtod(argv[a + 1], &end) : 0;
        if (a + 1 >= argc || *end || !(timeout > 0)) {
            fprintf(stderr, "cprclient: --timeout takes a positive number of seconds\n");
            return EXIT_USAGE;
        }
        a += 2;
    }
    if (a < argc && (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (a < argc && strcmp(argv[a], "list") == 0 && a + 1 == argc) {
        int n = rov_job_list(print_job, NULL);

        if (n < 0) {
            fprintf(stderr, "cprclient: cannot read the job registry: %s\n", rov_status_str(n));
            return 1;
        }
        return 0;
    }
    if (a >= argc || argc - a > 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (a + 1 < argc) {
        size_t i;

        for (i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
            if (strcmp(argv[a + 1], verbs[i].name) == 0)
                break;
        if (i == sizeof(verbs) / sizeof(verbs[0])) {
            fprintf(stderr, "cprclient: unknown stage '%s' (drain, close, reopen, resume, "
                    "status)\n", argv[a + 1]);
            return EXIT_USAGE;
        }
        stages[0] = verbs[i].stage;
        nstages = 1;
    }
    st = rov_job_open(argv[a], &job, err, sizeof(err));
    if (st != ROV_OK) {
        fprintf(stderr, "cprclient: %s\n", err);
        return exit_code(st);
    }
    for (int s = 0; s < nstages && st == ROV_OK; s++) {
        double total = 0;

        st = rov_job_run(job, stages[s], timeout, err, sizeof(err));
        print_ranks(job);
        for (size_t i = 0; i < rov_job_size(job); i++)
            if (rov_job_rank(job, i)->seconds > total)
                total = rov_job_rank(job, i)->seconds;
        printf("stage=%s ranks=%zu time_s=%.3f status=%s\n", rov_job_stage_str(stages[s]),
               rov_job_size(job), total, st == ROV_OK ? "ok" : rov_status_str(st));
        fflush(stdout);
        if (st != ROV_OK)
            fprintf(stderr, "cprclient: %s: %s\n", rov_job_stage_str(stages[s]), err);
    }
    rov_job_close(job);
    return exit_code(st);
}
