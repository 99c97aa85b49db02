/*
 * cprclient: drive the checkpoint stages of a Railover job (docs/ccp.md).
 *
 *   cprclient [--timeout S] [--keep N] JOBID
 *             [drain|close|checkpoint [--suspend]|reopen|resume|status]
 *   cprclient [--timeout S] JOBID restart [--set N] [--hosts LIST | --map RANK=HOST,...]
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
    EXIT_NO_SET = 11,
    EXIT_HOST = 12,
    EXIT_PID = 13,
    EXIT_RESTORE = 14,
    EXIT_RUNNING = 15,
    EXIT_USAGE = 64,
};

static void usage(FILE *f)
{
    fputs("usage: cprclient [--timeout SECONDS] [--keep N] JOBID\n"
          "                 [drain|close|checkpoint [--suspend]|reopen|resume|status]\n"
          "       cprclient [--timeout SECONDS] JOBID restart [--set N]\n"
          "                 [--hosts HOST,... | --map RANK=HOST,...]\n"
          "       cprclient list\n"
          "\n"
          "  drain    every rank holds new sends, acknowledges everything in flight and\n"
          "           exchanges end markers with its peers (completes while ranks compute)\n"
          "  close    every rank closes its rails (drained first): no socket or device\n"
          "           of a rail is left in any process\n"
          "  checkpoint  every closed rank (or unit: RAILOVER_CHECKPOINT_TREE) runs\n"
          "           RAILOVER_CHECKPOINT_CMD (CRIU) into a new checkpoint set, then every\n"
          "           rank reopens; --suspend: every rank stops (SIGSTOP) instead; the\n"
          "           newest N complete sets are kept (--keep, default 2)\n"
          "  reopen   every rank reopens its rails and reconnects (alias: resume)\n"
          "  restart  restore the job (nothing of it running) from its newest complete\n"
          "           set (or --set N), each unit on the host it ran on, or: --hosts, the\n"
          "           set's hosts in rank order replaced one for one; --map, rank R's\n"
          "           unit on HOST (RAILOVER_CCP_AGENT runs RAILOVER_RESTORE_CMD there);\n"
          "           then reopen\n"
          "  status   every rank's stage, and the job's checkpoint sets\n"
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
          "the stage's time ran out), 11 no complete checkpoint set, 12 a host of the\n"
          "restart does not answer, 13 a process id of the images is taken on its host,\n"
          "14 a restore failed (the error names the rank, the host and CRIU's log), 15\n"
          "the job still runs (restart refused), 64 usage (or a malformed job id), 1 other.\n",
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

static void print_sets(rov_job_t *job, const char *prefix)
{
    rov_job_set_t sets[64];
    long n = rov_job_sets(job, sets, 64);

    for (long i = n > 64 ? n - 64 : 0; i < n; i++) {
        const rov_job_set_t *s = &sets[i];

        if (s->complete)
            printf("%sset=%ld complete ranks=%zu time=%lld\n", prefix, s->number, s->ranks,
                   s->time);
        else
            printf("%sset=%ld incomplete (never restarted from)\n", prefix, s->number);
    }
}

static void print_job(void *arg, const char *jobid, size_t ranks)
{
    rov_job_set_t sets[64];
    long newest = 0, n, complete = 0;
    rov_job_t *job;
    char err[256];

    (void)arg;
    n = rov_job_open(jobid, &job, err, sizeof(err)) == ROV_OK ? rov_job_sets(job, sets, 64) : 0;
    for (long i = 0; i < n && i < 64; i++)
        if (sets[i].complete) {
            complete++;
            newest = sets[i].number;
        }
    if (n > 0)
        rov_job_close(job);
    printf("%s ranks=%zu checkpoints=%ld", jobid, ranks, complete);
    if (newest)
        printf(" newest=%ld", newest);
    printf("\n");
}

static int restart_exit(rov_job_restart_fault_t fault, rov_status_t st)
{
    switch (fault) {
    case ROV_RESTART_NO_SET: return EXIT_NO_SET;
    case ROV_RESTART_RUNNING: return EXIT_RUNNING;
    case ROV_RESTART_HOST: return EXIT_HOST;
    case ROV_RESTART_PID: return EXIT_PID;
    case ROV_RESTART_RESTORE: return EXIT_RESTORE;
    case ROV_RESTART_REGISTER: return EXIT_TIMEOUT;
    case ROV_RESTART_USAGE: return EXIT_USAGE;
    case ROV_RESTART_OK: break;
    }
    return exit_code(st);
}

/* restart [--set N] [--hosts LIST | --map RANK=HOST,...], then reopen. */
static int restart(rov_job_t *job, int argc, char **argv, double timeout)
{
    const char *hosts = NULL, *map = NULL;
    rov_job_restart_fault_t fault;
    long set = 0;
    char err[1024];
    rov_status_t st;

    for (int i = 0; i < argc; i += 2) {
        char *end;

        if (i + 1 >= argc)
            goto usage;
        if (strcmp(argv[i], "--hosts") == 0 && !hosts && !map) {
            hosts = argv[i + 1];
        } else if (strcmp(argv[i], "--map") == 0 && !hosts && !map) {
            map = argv[i + 1];
        } else if (strcmp(argv[i], "--set") == 0 &&
                   (set = strtol(argv[i + 1], &end, 10)) > 0 && !*end) {
            continue;
        } else {
            goto usage;
        }
    }
    st = rov_job_restart(job, hosts, map, set, timeout, &fault, err, sizeof(err));
    if (st != ROV_OK) {
        fprintf(stderr, "cprclient: restart: %s\n", err);
        printf("stage=restart ranks=%zu status=%s\n", rov_job_size(job), rov_status_str(st));
        return restart_exit(fault, st);
    }
    for (size_t i = 0; i < rov_job_size(job); i++) {
        const rov_job_rank_t *r = rov_job_rank(job, i);

        printf("rank=%ld pid=%d host=%s ctl=%s stage=%s time_s=%.3f status=restored\n", r->rank,
               r->pid, r->host, r->where, r->stage, r->seconds);
    }
    printf("stage=restart ranks=%zu status=ok\n", rov_job_size(job));
    fflush(stdout);
    st = rov_job_run(job, ROV_JOB_REOPEN, timeout, err, sizeof(err));
    print_ranks(job);
    printf("stage=reopen ranks=%zu status=%s\n", rov_job_size(job),
           st == ROV_OK ? "ok" : rov_status_str(st));
    if (st != ROV_OK)
        fprintf(stderr, "cprclient: reopen after the restart: %s\n", err);
    return exit_code(st);
usage:
    fprintf(stderr, "cprclient: usage: JOBID restart [--set N] [--hosts HOST,... | --map "
            "RANK=HOST,...]\n");
    return EXIT_USAGE;
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
    bool suspend = false, restarting = false;
    double timeout = 60;
    long keep = 2;
    char err[512];
    rov_job_t *job;
    rov_status_t st;

    while (a + 1 < argc && (strcmp(argv[a], "--timeout") == 0 || strcmp(argv[a], "--keep") == 0)) {
        char *end;

        if (strcmp(argv[a], "--timeout") == 0) {
            timeout = strtod(argv[a + 1], &end);
            if (*end || !(timeout > 0)) {
                fprintf(stderr, "cprclient: --timeout takes a positive number of seconds\n");
                return EXIT_USAGE;
            }
        } else {
            keep = strtol(argv[a + 1], &end, 10);
            if (*end || keep < 1 || keep > 1000) {
                fprintf(stderr, "cprclient: --keep takes a number of checkpoint sets, 1 to "
                        "1000\n");
                return EXIT_USAGE;
            }
        }
        a += 2;
    }
    if (a < argc && (strcmp(argv[a], "--timeout") == 0 || strcmp(argv[a], "--keep") == 0)) {
        fprintf(stderr, "cprclient: %s takes a value\n", argv[a]);
        return EXIT_USAGE;
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
    restarting = argc - a >= 2 && strcmp(argv[a + 1], "restart") == 0;
    if (a >= argc || (argc - a > 2 && !restarting)) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (a + 1 < argc && !restarting) {
        size_t i;

        for (i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
            if (strcmp(argv[a + 1], verbs[i].name) == 0)
                break;
        if (i == sizeof(verbs) / sizeof(verbs[0])) {
            fprintf(stderr, "cprclient: unknown stage '%s' (drain, close, checkpoint, reopen, "
                    "resume, restart, status)\n", argv[a + 1]);
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
    rov_job_set_keep(job, (unsigned)keep);
    if (restarting) {
        int rc = restart(job, argc - a - 2, argv + a + 2, timeout);

        rov_job_close(job);
        return rc;
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
        if (stages[s] == ROV_JOB_STATUS)
            print_sets(job, "");
        fflush(stdout);
        if (st != ROV_OK)
            fprintf(stderr, "cprclient: %s: %s\n", rov_job_stage_str(stages[s]), err);
        if (st == ROV_OK && failed != ROV_OK)
            st = failed;
    }
    rov_job_close(job);
    return exit_code(st);
}
