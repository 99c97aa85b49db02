/*
 * cprclient: drive the checkpoint stages of a Railover job (docs/ccp.md).
 *
 *   cprclient [--timeout S] JOBID [drain|close|checkpoint [--suspend]|reopen|resume|status]
 *   cprclient list
 *
 * With no stage: drain, close, checkpoint and reopen, as Scali's checkpoint
 * client did.
 * Prints one line per rank and a summary; exits with a code per failure,
 * each with a one-line message on stderr.  Uses only include/railover/.
 */
#include <stdbool.h>
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
    EXIT_CHECKPOINT = 9,
    EXIT_BUSY = 10,
    EXIT_USAGE = 64,
};

static void usage(FILE *f)
{
    fputs("usage: cprclient [--timeout SECONDS] JOBID\n"
          "                 [drain|close|checkpoint [--suspend]|reopen|resume|status]\n"
          "       cprclient list\n"
          "\n"
          "  drain    every rank holds new sends, acknowledges everything in flight and\n"
          "           exchanges end markers with its peers (completes while ranks compute)\n"
          "  close    every rank closes its rails (drained first): no socket or device\n"
          "           of a rail is left in any process\n"
          "  checkpoint  every closed rank runs RAILOVER_CHECKPOINT_CMD (CRIU), then every\n"
          "           rank reopens; --suspend: every rank stops (SIGSTOP) instead\n"
          "  reopen   every rank reopens its rails and reconnects (alias: resume)\n"
          "  status   every rank's stage\n"
          "  (none)   drain, close, checkpoint, reopen\n"
          "\n"
          "The job registry is RAILOVER_JOB_DIR (default: <run dir>/jobs).  --timeout: each\n"
          "stage's limit (default 60 s); a drain not done in time is undone.\n"
          "Exit: 0 done, 2 unknown job, 3 a rank dead or unreachable, 4 stage out of order,\n"
          "5 timeout (the job runs on: a drain is undone, a checkpoint reopened), 6 another\n"
          "client drives the job, 7 not the job's owner (or the registry is not readable),\n"
          "8 the registry tampered with (a record forged or truncated, a link where a file\n"
          "of the job should be; after a checkpoint the job is reopened), 9 a checkpoint\n"
          "command failed (the job was reopened and runs on), 10 a rank's control endpoint\n"
          "stayed busy (as many clients as it serves; asked again until the request's or\n"
          "the stage's time ran out), 64 usage (or a malformed job id), 1 other.\n",
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
    case ROV_ERR_IO: return EXIT_CHECKPOINT;
    case ROV_ERR_RESOURCE: return EXIT_BUSY;
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
    } verbs[] = {{"drain", ROV_JOB_DRAIN},   {"close", ROV_JOB_CLOSE},
                 {"reopen", ROV_JOB_REOPEN}, {"resume", ROV_JOB_REOPEN},
                 {"status", ROV_JOB_STATUS}, {"checkpoint", ROV_JOB_CHECKPOINT}};
    rov_job_stage_t stages[4] = {ROV_JOB_DRAIN, ROV_JOB_CLOSE, ROV_JOB_CHECKPOINT,
                                 ROV_JOB_REOPEN};
    int nstages = 4, a = 1;
    bool suspend = false;
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
            const char *dir = getenv("RAILOVER_JOB_DIR");

            fprintf(stderr, "cprclient: cannot read the job registry%s%s%s: %s\n",
                    dir && dir[0] ? " " : "", dir && dir[0] ? dir : "",
                    n == ROV_ERR_REFUSED ? " (not this user's)" : "",
                    n == ROV_ERR_REFUSED ? "permission denied" : rov_status_str(n));
            return n == ROV_ERR_REFUSED ? EXIT_NOT_OWNER : 1;
        }
        return 0;
    }
    if (argc - a == 3 && strcmp(argv[a + 1], "checkpoint") == 0 &&
        strcmp(argv[a + 2], "--suspend") == 0) {
        suspend = true;
        argc--;
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
        if (stages[0] == ROV_JOB_CHECKPOINT) {
            /* then the job continues, or stays stopped */
            stages[0] = suspend ? ROV_JOB_SUSPEND : ROV_JOB_CHECKPOINT;
            stages[1] = ROV_JOB_REOPEN;
            nstages = suspend ? 1 : 2;
        }
    }
    if (!rov_job_id_ok(argv[a])) {
        fprintf(stderr, "cprclient: '%.80s%s' is not a job id: 1 to %d characters of A-Z a-z 0-9 "
                ". _ -, not starting with '.' (what RAILOVER_JOBID accepts)\n", argv[a],
                strlen(argv[a]) > 80 ? "..." : "", ROV_JOB_MAX);
        return EXIT_USAGE;
    }
    st = rov_job_open(argv[a], &job, err, sizeof(err));
    if (st != ROV_OK) {
        fprintf(stderr, "cprclient: %s\n", err);
        return exit_code(st);
    }
    for (int s = 0; s < nstages; s++) {
        rov_status_t failed = st; /* a failed checkpoint: reopen all the same */
        double total = 0;

        if (st != ROV_OK && !(stages[s] == ROV_JOB_REOPEN && s > 0 &&
                              stages[s - 1] == ROV_JOB_CHECKPOINT &&
                              (st == ROV_ERR_IO || st == ROV_ERR_TIMEDOUT ||
                               st == ROV_ERR_PROTO)))
            break;
        st = rov_job_run(job, stages[s], timeout, err, sizeof(err));
        print_ranks(job);
        for (size_t i = 0; i < rov_job_size(job); i++)
            if (rov_job_rank(job, i)->seconds > total)
                total = rov_job_rank(job, i)->seconds;
        printf("stage=%s ranks=%zu time_s=%.3f status=%s\n", rov_job_stage_str(stages[s]),
               rov_job_size(job), total, st == ROV_OK ? "ok" :
               st == ROV_ERR_RESOURCE ? "busy" : rov_status_str(st));
        fflush(stdout);
        if (st != ROV_OK)
            fprintf(stderr, "cprclient: %s: %s\n", rov_job_stage_str(stages[s]), err);
        if (st == ROV_OK && failed != ROV_OK)
            st = failed;
    }
    rov_job_close(job);
    return exit_code(st);
}
