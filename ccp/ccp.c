/*
 * ccp/, the cooperative checkpoint policy (docs/ccp.md): each context of a
 * job registers as a rank in the job registry (registry.h) with where its
 * control endpoints are and its endpoint's address, and keeps the record
 * true (a reopen moves the address).  With RAILOVER_CCP_ADDR it also opens
 * the network control endpoint, whose requests must carry the proof of the
 * job's secret, so that a client on another host drives the stages; the
 * stages themselves are the transport's (quiesce, close-rails, reopen:
 * transport/stage.c), served by the progress helper while the rank
 * computes.  The client side, rov_job_*(), is client.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ccp/cue.h"
#include "ccp/registry.h"
#include "ccp/sets.h"
#include "railover/ccp.h"
#include "transport/control.h"
#include "transport/log.h"
#include "transport/policy.h"
#include "transport/states.h"

struct ccp_settings {
    char job_dir[CCP_DIR_MAX];
    char addr[CCP_WHERE_MAX];
    char ckpt_signal[16];         /* RAILOVER_CHECKPOINT_SIGNAL (cue.h) */
    char ckpt_cmd[256];
    uint64_t ckpt_timeout_ns;
    int tree;                     /* RAILOVER_CHECKPOINT_TREE: TREE_* */
    char agent[256];              /* (read by the client: restart.c) */
    char restore_cmd[256];
};

enum { TREE_PROCESS, TREE_PARENT };

/* The ranks that share one process tree on a host, at most. */
#define CCP_UNIT_MAX 256

/* While reconnecting after a reopen, the registry is read this often for
 * peers that reopened at new addresses (or were restored elsewhere). */
#define READDRESS_NS (200ull * 1000000ull)

/* While the checkpoint command runs, its status file is looked for this
 * often. */
#define CKPT_POLL_NS (20ull * 1000000ull)

enum ckpt_state {
    CKPT_IDLE,
    CKPT_ASKED,     /* asked for; starts at the next tick, the asker gone */
    CKPT_RUNNING,   /* the command runs; no control endpoint meanwhile */
    CKPT_NSTATES
};

#define B ROV_STATE_BIT
static const struct rov_state_info ckpt_states[CKPT_NSTATES] = {
    [CKPT_IDLE] = {"idle", B(CKPT_ASKED)},
    [CKPT_ASKED] = {"asked", B(CKPT_RUNNING)},
    [CKPT_RUNNING] = {"running", B(CKPT_IDLE)},
};
#undef B

struct ccp_ctx {
    bool registered;
    uint64_t readdress_ns;        /* next look at the registry, 0: none due */
    enum ckpt_state ckpt;
    bool ckpt_suspend;            /* stop the process once imaged */
    uint64_t ckpt_due_ns, ckpt_start_ns;
    uint64_t ckpt_limit_ns;       /* no result after this: the command failed */
    long ckpt_set;                /* the set being written (sets.h) */
    uint64_t illegal;             /* checkpoint transitions refused (a bug) */
    struct ccp_cue cue;           /* the checkpointer's cue (cue.h) */
    char jobdir[CCP_DIR_MAX + ROV_JOB_MAX + 2];
    uint8_t key[ROV_KEY_LEN];
    struct ccp_record rec;
};

static const struct rov_policy_ops ccp_policy;

/* The root of the process tree imaged with this rank. */
static int tree_root(const struct ccp_settings *s)
{
    return s->tree == TREE_PARENT && getppid() > 1 ? (int)getppid() : (int)getpid();
}

static struct ccp_ctx *C(const rov_context_t *ctx)
{
    return rov_policy_ctx(ctx, &ccp_policy);
}

struct ccp_cue *ccp_cue_of(const rov_context_t *ctx)
{
    return &C(ctx)->cue;
}

bool ccp_cue_held(const rov_context_t *ctx)
{
    return C(ctx)->ckpt != CKPT_IDLE;
}

/* The checkpoint's one setter (transport/states.h). */
static void ckpt_set(struct ccp_ctx *c, enum ckpt_state to, const char *why)
{
    char what[32];

    snprintf(what, sizeof(what), "rank %ld", c->rec.rank);
    if (rov_state_change(ckpt_states, c->ckpt, to, "ccp", what, why, &c->illegal))
        c->ckpt = to;
}

/* The job's directory and secret, made if missing. */
static bool job_ready(rov_context_t *ctx)
{
    const struct ccp_settings *s = rov_policy_settings(ctx, &ccp_policy);
    struct ccp_ctx *c = C(ctx);
    char base[CCP_DIR_MAX], err[256];

    if (ccp_base_dir(s->job_dir, rov_policy_env(ctx)->run_dir, base, sizeof(base)) != ROV_OK ||
        ccp_job_dir(base, rov_context_jobid(ctx), true, c->jobdir, sizeof(c->jobdir), err,
                    sizeof(err)) != ROV_OK ||
        ccp_secret(c->jobdir, true, c->key, err, sizeof(err)) != ROV_OK) {
        rov_warn("ccp", "job registry: %s; this process cannot be checkpointed", err);
        return false;
    }
    return true;
}

static void publish(rov_context_t *ctx)
{
    struct ccp_ctx *c = C(ctx);
    rov_status_t st = ccp_record_write(c->jobdir, c->key, &c->rec);

    /* The last rank of the job left and took the directory with it. */
    if (st != ROV_OK && errno == ENOENT && job_ready(ctx)) {
        rov_ctl_net_rekey(ctx, c->key);
        st = ccp_record_write(c->jobdir, c->key, &c->rec);
    }
    if (st != ROV_OK)
        rov_warn("ccp", "cannot write rank %ld's record in %s: %m", c->rec.rank, c->jobdir);
}

/* The checkpointer's cue (cue.h), set up whether or not the rank is
 * registered. */
static void cue_open(rov_context_t *ctx)
{
    const struct ccp_settings *s = rov_policy_settings(ctx, &ccp_policy);
    char why[160];
    int signo;

    if (ccp_cue_signal_parse(s->ckpt_signal, &signo, why, sizeof(why)) != ROV_OK)
        signo = 0; /* (refused when the configuration was read) */
    ccp_cue_open(ctx, &C(ctx)->cue, signo, rov_context_rank(ctx));
}

/* The record says the context's stage (a checkpointer waiting for its cue
 * to be done reads it there): rewritten when the stage has changed. */
static void stage_publish(rov_context_t *ctx)
{
    struct ccp_ctx *c = C(ctx);
    const char *now = rov_context_stage_str(rov_context_stage(ctx));

    if (!c->registered || strcmp(c->rec.stage, now) == 0)
        return;
    snprintf(c->rec.stage, sizeof(c->rec.stage), "%s", now);
    publish(ctx);
}

/* Register the context in its job's registry (nothing is fatal: a context
 * that cannot register runs, without a checkpoint). */
static void ccp_ctx_open(rov_context_t *ctx)
{
    const struct ccp_settings *s = rov_policy_settings(ctx, &ccp_policy);
    struct ccp_ctx *c = C(ctx);
    const char *job = rov_context_jobid(ctx), *path = rov_ctl_path(ctx), *net;

    cue_open(ctx);
    if (!path) {
        rov_debug("ccp", "no control socket: not registered in the job registry");
        return;
    }
    if (!rov_jobid_ok(job)) {
        rov_warn("ccp", "job id '%s' cannot name a registry entry (1 to %d of A-Z a-z 0-9 . _ "
                 "-): this process cannot be checkpointed", job, ROV_JOB_MAX);
        return;
    }
    if (!job_ready(ctx))
        return;
    if (s->addr[0] && rov_ctl_net_open(ctx, s->addr, c->key) != ROV_OK)
        rov_warn("ccp", "no network control endpoint on RAILOVER_CCP_ADDR=%s: only clients on "
                 "this host reach rank %ld", s->addr, rov_context_rank(ctx));
    snprintf(c->rec.job, sizeof(c->rec.job), "%s", job);
    c->rec.rank = rov_context_rank(ctx);
    c->rec.pid = (int)getpid();
    c->rec.tree = tree_root(s);
    c->rec.uid = (unsigned)geteuid();
    if (gethostname(c->rec.host, sizeof(c->rec.host)) < 0 || !c->rec.host[0])
        snprintf(c->rec.host, sizeof(c->rec.host), "localhost");
    c->rec.host[sizeof(c->rec.host) - 1] = '\0';
    snprintf(c->rec.ctl_path, sizeof(c->rec.ctl_path), "%s", path);
    net = rov_ctl_net_where(ctx);
    snprintf(c->rec.ctl_net, sizeof(c->rec.ctl_net), "%s", net ? net : "");
    publish(ctx);
    c->registered = true;
    rov_info("ccp", "rank %ld of job %s, registered in %s (control: %s)", c->rec.rank, job,
             c->jobdir, net ? net : path);
}

static void ccp_endpoint_address(rov_context_t *ctx, const void *blob, size_t len)
{
    struct ccp_ctx *c = C(ctx);

    if (!c->registered || len > sizeof(c->rec.endpoint))
        return;
    memcpy(c->rec.endpoint, blob, len);
    c->rec.endpoint_len = len;
    publish(ctx);
}

/* Checkpoint --------------------------------------------------------------------------
 *
 * `checkpoint set=N [suspend]` on the control endpoint of a closed rank: at
 * the next tick the rank closes its control endpoints (a checkpointer such
 * as CRIU cannot image a socket connected outside the process, and a
 * restored process may be on another host) and says so (ready.<rank> in the
 * set, sets.h).  The lowest rank of its unit (the ranks of this host that
 * share its process tree, RAILOVER_CHECKPOINT_TREE) starts
 * RAILOVER_CHECKPOINT_CMD in a runner outside its process tree (so that
 * `criu dump -t PID` images the ranks and not their checkpointer), once
 * every rank of the unit is ready.  The runner writes the command's exit
 * status and time to status.<rank> of every rank of the unit; each rank
 * looks for its file, then opens its control endpoints again and publishes
 * the result in its record, where the client reads it.  A process restored
 * from the images resumes in the same wait, finds the same file and does
 * the same on the host it was restored on: it registers there, reachable
 * again. */

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* <job dir>/sets/<this checkpoint's set>/<what><rank>. */
static bool set_file(const struct ccp_ctx *c, const char *what, long rank, char *buf, size_t len)
{
    char leaf[48];

    snprintf(leaf, sizeof(leaf), "%s%ld", what, rank);
    return ccp_set_path(c->jobdir, c->ckpt_set, leaf, buf, len);
}

/* The runner, "sh -c RUNNER railover-checkpoint CMD SETDIR SET WAIT_S
 * RANK...": waits (at most WAIT_S seconds of wall time, read every pass from
 * /proc/uptime without a fork, as railover-criu-tree does) until every other
 * rank of the unit has closed its control endpoints, then runs CMD: "+
 * <command>" and its output in the log, then "<set> <status> <milliseconds>"
 * in each rank's status file (written whole, renamed into place: a runner
 * of an earlier checkpoint that ends late cannot answer for this one;
 * mktemp: O_CREAT | O_EXCL, the rename replaces a link planted there, never
 * writes through it).  Status 125: a rank of the unit never got ready,
 * nothing imaged.  CMD's environment says where it is (docs/ccp.md, "The
 * checkpoint stage"): RAILOVER_CKPT_SET (the set's directory),
 * RAILOVER_CKPT_UNIT (the unit's ranks, the lowest first) and
 * RAILOVER_CKPT_END (the Unix time at which the ranks stop waiting for it),
 * which is what a command that waits for the other units
 * (railover-criu-tree's cut) needs. */
#define RUNNER                                                                                   \
    "cmd=$1 dir=$2 set=$3 wait=$4; shift 4; rc=0; me=$1; shift; end=$(($(date +%s) + wait)); " \
    "read -r up _ < /proc/uptime; stop=$((${up%.*} + wait)); "                                 \
    "for r; do while [ ! -e \"$dir/ready.$r\" ]; do read -r up _ < /proc/uptime; "             \
    "if [ ${up%.*} -ge $stop ]; then "                                                         \
    "echo \"rank $r of this unit did not close its control endpoints: nothing imaged\"; "      \
    "rc=125; break 2; fi; sleep 0.02; done; done; "                                            \
    "export RAILOVER_CKPT_SET=\"$dir\" RAILOVER_CKPT_UNIT=\"$me $*\" RAILOVER_CKPT_END=$end; " \
    "t0=$(date +%s%N); if [ $rc -eq 0 ]; then printf '+ %s\\n' \"$cmd\"; /bin/sh -c \"$cmd\"; " \
    "rc=$?; fi; t1=$(date +%s%N); "                                                           \
    "for r in $me \"$@\"; do t=$(mktemp \"$dir/status.$r.tmp.XXXXXX\") && "                    \
    "echo \"$set $rc $(( (t1 - t0) / 1000000 ))\" > \"$t\" && mv -f \"$t\" \"$dir/status.$r\"; " \
    "done"

/* The command is over (or its time is up): reachable again, the result
 * published. */
static void ckpt_done(rov_context_t *ctx, long rc, long ms)
{
    const struct ccp_settings *s = rov_policy_settings(ctx, &ccp_policy);
    struct ccp_ctx *c = C(ctx);
    const char *net;

    ckpt_set(c, CKPT_IDLE, rc == 0 ? "checkpoint taken" : "checkpoint failed");
    /* This may be a copy restored from the images, whose threads CRIU gave
     * credentials of their own: the helper starts again from the
     * application's thread before the rails reopen. */
    rov_policy_renew_threads(ctx);
    if (!rov_ctl_path(ctx)) {
        rov_ctl_open(ctx);
        if (s->addr[0] && rov_ctl_net_open(ctx, s->addr, c->key) != ROV_OK)
            rov_warn("ccp", "no network control endpoint on RAILOVER_CCP_ADDR=%s after the "
                     "checkpoint", s->addr);
    }
    c->rec.pid = (int)getpid();
    c->rec.tree = tree_root(s);
    if (gethostname(c->rec.host, sizeof(c->rec.host)) < 0 || !c->rec.host[0])
        snprintf(c->rec.host, sizeof(c->rec.host), "localhost");
    c->rec.host[sizeof(c->rec.host) - 1] = '\0';
    snprintf(c->rec.ctl_path, sizeof(c->rec.ctl_path), "%s",
             rov_ctl_path(ctx) ? rov_ctl_path(ctx) : "");
    net = rov_ctl_net_where(ctx);
    snprintf(c->rec.ctl_net, sizeof(c->rec.ctl_net), "%s", net ? net : "");
    c->rec.ckpt_count++;
    c->rec.ckpt_rc = rc;
    c->rec.ckpt_ms = ms;
    publish(ctx);
    rov_policy_stage_hook(ctx, ROV_STAGE_CHECKPOINT, 1, rc == 0 ? ROV_OK : ROV_ERR_IO);
    if (rc == 0)
        rov_info("ccp", "rank %ld: checkpoint taken in %ld ms (set %ld)", c->rec.rank, ms,
                 c->ckpt_set);
    else if (rc != CCP_CKPT_REFUSED)
        rov_warn("ccp", "rank %ld: the checkpoint command failed (%s %ld): the rank runs on",
                 c->rec.rank, rc == -2 ? "no status after" : "exit status",
                 rc == -2 ? (long)(c->ckpt_limit_ns / 1000000000ull) : rc);
    if (rc == 0 && c->ckpt_suspend) {
        rov_info("ccp", "rank %ld: stopped (checkpoint --suspend); SIGCONT resumes it",
                 c->rec.rank);
        kill(getpid(), SIGSTOP);
    }
}

/* The ranks of this rank's unit (the ranks of this host with its process
 * tree), this one first. */
struct unit {
    const struct ccp_ctx *c;
    long ranks[CCP_UNIT_MAX];
    size_t n;
    bool leader;        /* the lowest rank of the unit */
};

static bool unit_one(void *arg, const struct ccp_record *rec)
{
    struct unit *u = arg;

    if (rec->rank == u->c->rec.rank || rec->tree != u->c->rec.tree ||
        strcmp(rec->host, u->c->rec.host) != 0)
        return true;
    if (rec->rank < u->c->rec.rank)
        u->leader = false;
    if (u->n < CCP_UNIT_MAX)
        u->ranks[u->n++] = rec->rank;
    return true;
}

/* The unit's runner: "sh -c RUNNER railover-checkpoint CMD SETDIR SET
 * WAIT_S RANK..." (outside this process's tree: setsid, and its parent
 * exits). */
static rov_status_t ckpt_spawn(struct ccp_ctx *c, const char *cmd, const struct unit *u, int log)
{
    char setdir[sizeof(c->jobdir) + 40], set[24], wait_s[24], me[24], ranks[CCP_UNIT_MAX][24];
    const char *argv[10 + CCP_UNIT_MAX];
    int argc = 0;
    pid_t pid;

    ccp_set_path(c->jobdir, c->ckpt_set, NULL, setdir, sizeof(setdir));
    snprintf(set, sizeof(set), "%ld", c->ckpt_set);
    snprintf(wait_s, sizeof(wait_s), "%llu",
             (unsigned long long)(c->ckpt_limit_ns / 1000000000ull) + 1);
    argv[argc++] = "/bin/sh";
    argv[argc++] = "-c";
    argv[argc++] = RUNNER;
    argv[argc++] = "railover-checkpoint";
    argv[argc++] = cmd;
    argv[argc++] = setdir;
    argv[argc++] = set;
    argv[argc++] = wait_s;
    snprintf(me, sizeof(me), "%ld", c->rec.rank);
    argv[argc++] = me;
    for (size_t i = 0; i < u->n; i++) {
        snprintf(ranks[i], sizeof(ranks[i]), "%ld", u->ranks[i]);
        argv[argc++] = ranks[i];
    }
    argv[argc] = NULL;
    pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls here: the process has threads. */
        if (setsid() < 0 || fork() != 0)
            _exit(0);
        int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);

        if (nul < 0 || dup2(nul, 0) < 0 || dup2(log, 1) < 0 || dup2(log, 2) < 0)
            _exit(127);
        syscall(SYS_close_range, 3u, ~0u, 0u);
        execv("/bin/sh", (char *const *)argv);
        _exit(127);
    }
    if (pid < 0)
        return ROV_ERR_IO;
    waitpid(pid, NULL, 0);
    return ROV_OK;
}

/* The unit's leader: its image directory, its log, the command. */
static rov_status_t ckpt_lead(rov_context_t *ctx, const struct unit *u, char *err,
                              size_t err_len)
{
    const struct ccp_settings *s = rov_policy_settings(ctx, &ccp_policy);
    struct ccp_ctx *c = C(ctx);
    char dir[sizeof(c->jobdir) + 40], log[sizeof(dir) + 8], cmd[1024], pid[16], rank[24];
    const char *vals[26] = {0};
    rov_status_t st;
    int fd = -1;

    set_file(c, "unit.", c->rec.rank, dir, sizeof(dir));
    snprintf(log, sizeof(log), "%s.log", dir);
    /* Nothing through a link, nothing of another's. */
    st = ccp_own_dir(dir, true, err, err_len);
    if (st == ROV_OK)
        st = ccp_open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600, &fd, err, err_len);
    if (st != ROV_OK)
        return st;
    snprintf(pid, sizeof(pid), "%d", c->rec.tree);
    snprintf(rank, sizeof(rank), "%ld", c->rec.rank);
    vals['p' - 'a'] = pid;
    vals['r' - 'a'] = rank;
    vals['j' - 'a'] = c->rec.job;
    vals['d' - 'a'] = dir;
    if (!ccp_expand(s->ckpt_cmd, vals, cmd, sizeof(cmd))) {
        snprintf(err, err_len, "checkpoint command too long once expanded: %s", s->ckpt_cmd);
        close(fd);
        return ROV_ERR_INVAL;
    }
    st = ckpt_spawn(c, cmd, u, fd);
    close(fd);
    if (st != ROV_OK)
        snprintf(err, err_len, "fork: %s: the checkpoint command does not run", strerror(errno));
    else
        rov_info("ccp", "rank %ld: checkpoint command started%s: %s", c->rec.rank,
                 u->n ? " for its unit" : "", cmd);
    return st;
}

static void ckpt_start(rov_context_t *ctx)
{
    struct ccp_ctx *c = C(ctx);
    struct unit u = {.c = c, .leader = true};
    char ready[sizeof(c->jobdir) + 40], err[CCP_DIR_MAX + 300];
    rov_status_t st;
    int fd;

    rov_policy_stage_hook(ctx, ROV_STAGE_CHECKPOINT, 0, ROV_OK);
    c->ckpt_start_ns = mono_ns();
    c->ckpt_due_ns = c->ckpt_start_ns + CKPT_POLL_NS;
    ckpt_set(c, CKPT_RUNNING, "checkpoint command starts");
    /* The set (made by the client) must be ours and no link. */
    ccp_set_path(c->jobdir, c->ckpt_set, NULL, ready, sizeof(ready));
    st = ccp_own_dir(ready, false, err, sizeof(err));
    if (st == ROV_OK)
        st = ccp_records(c->jobdir, c->key, unit_one, &u, err, sizeof(err));
    if (st == ROV_OK && u.n == CCP_UNIT_MAX) {
        snprintf(err, sizeof(err), "more than %d ranks share its process tree", CCP_UNIT_MAX);
        st = ROV_ERR_INVAL;
    }
    if (st != ROV_OK) {
        rov_warn("ccp", "rank %ld: checkpoint refused: %s", c->rec.rank, err);
        return ckpt_done(ctx, st == ROV_ERR_PROTO ? CCP_CKPT_REFUSED : -1, 0);
    }
    rov_ctl_close(ctx);
    /* Ready to be imaged: the unit's command may start. */
    set_file(c, "ready.", c->rec.rank, ready, sizeof(ready));
    st = ccp_open(ready, O_WRONLY | O_CREAT | O_EXCL, 0600, &fd, err, sizeof(err));
    if (st == ROV_OK)
        close(fd);
    if (st == ROV_OK && u.leader)
        st = ckpt_lead(ctx, &u, err, sizeof(err));
    if (st != ROV_OK) {
        rov_warn("ccp", "rank %ld: checkpoint refused: %s", c->rec.rank, err);
        return ckpt_done(ctx, st == ROV_ERR_PROTO ? CCP_CKPT_REFUSED : -1, 0);
    }
    if (!u.leader)
        rov_info("ccp", "rank %ld: ready to be imaged with its unit", c->rec.rank);
}

static void ckpt_poll(rov_context_t *ctx, uint64_t now)
{
    struct ccp_ctx *c = C(ctx);
    char status[sizeof(c->jobdir) + 40], err[CCP_DIR_MAX + 200];
    long rc, ms;
    int fd = -1;
    FILE *f;

    c->ckpt_due_ns = now + CKPT_POLL_NS;
    set_file(c, "status.", c->rec.rank, status, sizeof(status));
    /* (a link there is not followed: the runner's rename replaces it) */
    f = ccp_open(status, O_RDONLY, 0, &fd, err, sizeof(err)) == ROV_OK ? fdopen(fd, "r") : NULL;
    if (!f && fd >= 0)
        close(fd);
    if (f) {
        long set;
        int n = fscanf(f, "%ld %ld %ld", &set, &rc, &ms);

        fclose(f);
        if (n == 3 && set == c->ckpt_set)
            return ckpt_done(ctx, rc < 0 || rc > 255 ? 255 : rc, ms < 0 ? 0 : ms);
    }
    if (now - c->ckpt_start_ns > c->ckpt_limit_ns)
        ckpt_done(ctx, -2, (long)((now - c->ckpt_start_ns) / 1000000ull));
}

/* checkpoint set=N [suspend] [limit=SECONDS] | checkpoint check.  set: the
 * set the client made for it (sets.h); limit: the client's time for the
 * stage (less than its own, so that the rank's result, a timeout included,
 * reaches the client before it gives up). */
static int cmd_checkpoint(rov_context_t *ctx, int argc, char **argv, FILE *out, char *err,
                          size_t err_len)
{
    const struct ccp_settings *s = rov_policy_settings(ctx, &ccp_policy);
    struct ccp_ctx *c = C(ctx);
    bool suspend = false, check = false;
    uint64_t limit = s->ckpt_timeout_ns;
    long set = 0;

    for (int i = 1; i < argc; i++) {
        char *end;
        double v;

        if (strcmp(argv[i], "suspend") == 0) {
            suspend = true;
        } else if (strcmp(argv[i], "check") == 0) {
            check = true;
        } else if (strncmp(argv[i], "limit=", 6) == 0 && (v = strtod(argv[i] + 6, &end)) > 0 &&
                   !*end && v < 86400) {
            if ((uint64_t)(v * 1e9) < limit)
                limit = (uint64_t)(v * 1e9);
        } else if (strncmp(argv[i], "set=", 4) == 0 && (set = strtol(argv[i] + 4, &end, 10)) > 0 &&
                   !*end && set <= INT32_MAX) {
            continue;
        } else {
            snprintf(err, err_len, "usage: checkpoint set=N [suspend] [limit=SECONDS] | "
                     "checkpoint check");
            return 1;
        }
    }
    if (!check && set <= 0) {
        snprintf(err, err_len, "usage: checkpoint set=N [suspend] [limit=SECONDS] (the set is "
                 "the client's: cprclient JOBID checkpoint)");
        return 1;
    }
    if (!c->registered || !s->ckpt_cmd[0]) {
        snprintf(err, err_len, "checkpoint refused: %s",
                 !c->registered ? "this process is in no job registry"
                                : "no checkpoint command (RAILOVER_CHECKPOINT_CMD)");
        return 1;
    }
    if (rov_context_stage(ctx) != ROV_CONTEXT_CLOSED || c->ckpt != CKPT_IDLE) {
        snprintf(err, err_len, "checkpoint refused: the context is %s%s",
                 rov_context_stage_str(rov_context_stage(ctx)),
                 c->ckpt != CKPT_IDLE ? " and a checkpoint is under way"
                                      : ", not closed (drain and close first)");
        return 1;
    }
    if (check) {
        fprintf(out, "checkpoint rank=%ld: ready\n", c->rec.rank);
        return 0; /* (a client checks every rank before it asks any) */
    }
    ckpt_set(c, CKPT_ASKED, "checkpoint requested");
    c->ckpt_suspend = suspend;
    c->ckpt_limit_ns = limit;
    c->ckpt_set = set;
    c->ckpt_due_ns = mono_ns();
    fprintf(out, "checkpoint rank=%ld set=%ld count=%ld limit=%.1fs: the control endpoint "
            "closes until it is done\n", c->rec.rank, set, c->rec.ckpt_count,
            (double)limit / 1e9);
    return 0;
}

static const struct rov_ctl_cmd checkpoint_cmd = {
    "checkpoint", "checkpoint set=N [suspend] [limit=S] | checkpoint check",
    "closed: run RAILOVER_CHECKPOINT_CMD on this process (ccp/, docs/ccp.md)", cmd_checkpoint,
};

ROV_CTL_REGISTER(checkpoint_cmd)

/* Each reconnecting connection whose peer's record shows another address
 * goes there: the TCP rail listens on its old port again after a reopen,
 * the others may not, and a restored peer is elsewhere altogether. */
struct readdress {
    rov_context_t *ctx;
    unsigned moved;
};

static bool readdress_one(void *arg, const struct ccp_record *rec)
{
    struct readdress *r = arg;

    if (!rec->endpoint_len || rec->rank == C(r->ctx)->rec.rank)
        return true;
    for (rov_conn_t *conn = rov_policy_first(r->ctx); conn; conn = rov_policy_next(conn))
        if (rov_policy_state(conn) == ROV_CONN_REOPENING &&
            rov_policy_peer_moved(conn, rec->endpoint, rec->endpoint_len) &&
            rov_conn_set_peer_address(conn, rec->endpoint, rec->endpoint_len) == ROV_OK) {
            rov_info("ccp", "conn %llu: rank %ld of the job is at a new address (registry)",
                     (unsigned long long)rov_policy_id(conn), rec->rank);
            r->moved++;
        }
    return true;
}

static void ccp_tick(rov_context_t *ctx, uint64_t now)
{
    struct ccp_ctx *c = C(ctx);
    struct readdress r = {.ctx = ctx};
    char err[256];

    if (c->ckpt == CKPT_ASKED)
        ckpt_start(ctx); /* (the request's answer has gone: it was this tick's cause) */
    else if (c->ckpt == CKPT_RUNNING && now >= c->ckpt_due_ns)
        ckpt_poll(ctx, now);
    if (c->ckpt == CKPT_IDLE) {
        ccp_cue_tick(ctx, &c->cue, now);
        stage_publish(ctx);
    }
    if (!c->registered || rov_context_stage(ctx) != ROV_CONTEXT_REOPENING) {
        c->readdress_ns = 0;
        return;
    }
    if (c->readdress_ns && now < c->readdress_ns)
        return;
    c->readdress_ns = now + READDRESS_NS;
    if (ccp_records(c->jobdir, c->key, readdress_one, &r, err, sizeof(err)) != ROV_OK)
        rov_debug("ccp", "registry: %s", err);
}

static uint64_t ccp_due_ns(const rov_context_t *ctx)
{
    const struct ccp_ctx *c = C(ctx);
    uint64_t cue = ccp_cue_due_ns(&c->cue);

    if (cue && c->ckpt == CKPT_IDLE && (!c->readdress_ns || cue < c->readdress_ns))
        return cue;

    if (c->ckpt != CKPT_IDLE && (!c->readdress_ns || c->ckpt_due_ns < c->readdress_ns))
        return c->ckpt_due_ns;
    return c->readdress_ns;
}

/* The record goes with the process, unless another process (a restored
 * copy) has written its own since. */
static void ccp_ctx_fini(rov_context_t *ctx)
{
    struct ccp_ctx *c = C(ctx);
    struct ccp_record now;
    char path[sizeof(c->jobdir) + 32], err[256];

    if (!c->registered)
        return;
    snprintf(path, sizeof(path), "%s/rank.%ld", c->jobdir, c->rec.rank);
    if (ccp_record_read(path, c->key, &now, err, sizeof(err)) == ROV_OK &&
        now.pid == c->rec.pid && strcmp(now.host, c->rec.host) == 0)
        ccp_record_remove(c->jobdir, c->rec.rank);
}

static void ccp_status_ctx(rov_context_t *ctx, FILE *out)
{
    fprintf(out, " stage=%s", rov_context_stage_str(rov_context_stage(ctx)));
    ccp_cue_status(&C(ctx)->cue, out);
}

/* RAILOVER_CHECKPOINT_SIGNAL: a signal the process can catch. */
static rov_status_t ccp_check(const void *block, char *err, size_t err_len)
{
    const struct ccp_settings *s = block;
    char why[160];
    int signo;

    if (ccp_cue_signal_parse(s->ckpt_signal, &signo, why, sizeof(why)) == ROV_OK)
        return ROV_OK;
    snprintf(err, err_len, "RAILOVER_CHECKPOINT_SIGNAL='%s': %s", s->ckpt_signal, why);
    return ROV_ERR_INVAL;
}

static void ccp_defaults(void *block)
{
    struct ccp_settings *s = block;

    memset(s, 0, sizeof(*s));
    s->ckpt_timeout_ns = 600ull * 1000000000ull;
    snprintf(s->restore_cmd, sizeof(s->restore_cmd), "railover-restore %%a %%d");
    snprintf(s->agent, sizeof(s->agent), "ssh -o BatchMode=yes");
}

#define CCP_OFF(f) offsetof(struct ccp_settings, f)
#define CCP_LEN(f) sizeof(((struct ccp_settings *)0)->f)

static const struct rov_var ccp_vars[] = {
    {"RAILOVER_JOB_DIR", ROV_VAR_PATH, CCP_OFF(job_dir), CCP_LEN(job_dir), 0, 0, NULL,
     "job registry: a directory every host of the job sees (empty: <run dir>/jobs, this "
     "host only)"},
    {"RAILOVER_CCP_ADDR", ROV_VAR_IFNAME, CCP_OFF(addr), CCP_LEN(addr), 0, 0, NULL,
     "IP or interface of the network control endpoint that drives checkpoint stages from "
     "other hosts (empty: none)"},
    {"RAILOVER_CHECKPOINT_SIGNAL", ROV_VAR_STRING, CCP_OFF(ckpt_signal), CCP_LEN(ckpt_signal),
     0, 0, NULL, "a signal that makes the process drain and close by itself (a second one "
     "reopens it), for a checkpointer that only signals: USR2, SIGUSR2, RTMIN+N or a number "
     "(empty: none)"},
    {"RAILOVER_CHECKPOINT_CMD", ROV_VAR_STRING, CCP_OFF(ckpt_cmd), CCP_LEN(ckpt_cmd), 0, 0,
     NULL, "command that images this process (or its unit's tree) at `cprclient JOBID "
     "checkpoint`: %p pid of the tree's root, %r rank, %j job id, %d image directory (CRIU: "
     "criu dump -t %p -D %d --leave-running)"},
    {"RAILOVER_CHECKPOINT_TIMEOUT", ROV_VAR_DURATION, CCP_OFF(ckpt_timeout_ns), 0,
     1000000000ull, 86400ull * 1000000000ull, NULL,
     "a checkpoint command without a result after this has failed; the rank runs on"},
    {"RAILOVER_CHECKPOINT_TREE", ROV_VAR_CHOICE, CCP_OFF(tree), 0, 0, 0, "process|parent",
     "what a checkpoint images: the process alone, or its parent's tree (an MPI launcher's "
     "daemon and every rank under it, imaged once)"},
    {"RAILOVER_RESTORE_CMD", ROV_VAR_STRING, CCP_OFF(restore_cmd), CCP_LEN(restore_cmd), 0, 0,
     NULL, "`cprclient JOBID restart`: command run on each unit's host, %a restore (its "
     "images), then %a release once every unit is back (%d image directory, %r its lowest "
     "rank, %j job id)"},
    {"RAILOVER_CCP_AGENT", ROV_VAR_STRING, CCP_OFF(agent), CCP_LEN(agent), 0, 0, NULL,
     "`cprclient JOBID restart`: runs a command on another host, as `AGENT HOST COMMAND` (as "
     "Open MPI's plm_rsh_agent)"},
};

static struct rov_settings ccp_settings = {
    .layer = "ccp",
    .vars = ccp_vars,
    .nvars = sizeof(ccp_vars) / sizeof(ccp_vars[0]),
    .size = sizeof(struct ccp_settings),
    .defaults = ccp_defaults,
    .check = ccp_check,
};

static const struct rov_policy_ops ccp_policy = {
    .name = "ccp",
    .settings = &ccp_settings,
    .ctx_size = sizeof(struct ccp_ctx),
    .ctx_open = ccp_ctx_open,
    .ctx_fini = ccp_ctx_fini,
    .endpoint_address = ccp_endpoint_address,
    .tick = ccp_tick,
    .due_ns = ccp_due_ns,
    .status_ctx = ccp_status_ctx,
};

ROV_POLICY_REGISTER(ccp_policy)
