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
};

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
    uint64_t illegal;             /* checkpoint transitions refused (a bug) */
    struct ccp_cue cue;           /* the checkpointer's cue (cue.h) */
    char jobdir[CCP_DIR_MAX + ROV_JOB_MAX + 2];
    uint8_t key[ROV_KEY_LEN];
    struct ccp_record rec;
};

static const struct rov_policy_ops ccp_policy;

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
 * `checkpoint [suspend]` on the control endpoint of a closed rank: at the
 * next tick the rank closes its control endpoints (a checkpointer such as
 * CRIU cannot image a socket connected outside the process, and a restored
 * process may be on another host), and starts RAILOVER_CHECKPOINT_CMD in a
 * runner outside its process tree (so that `criu dump -t PID` images the
 * rank and not its own checkpointer).  The runner writes the command's exit
 * status and time to <job dir>/ckpt.<rank>; the rank looks for that file,
 * then opens its control endpoints again and publishes the result in its
 * record, where the client reads it.  A process restored from the images
 * resumes in the same wait, finds the same file and does the same on the
 * host it was restored on: it registers there, reachable again. */

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void ckpt_path(const struct ccp_ctx *c, const char *what, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s%ld", c->jobdir, what, c->rec.rank);
}

/* value quoted for /bin/sh: in single quotes, each ' as '\'' (nothing in
 * single quotes is special to the shell, so a value with a space, a quote or
 * "$(...)" stays one word and runs nothing).  false when it does not fit. */
static bool sh_quote(const char *value, char *out, size_t len)
{
    size_t n = 0;

    if (len < 3)
        return false;
    out[n++] = '\'';
    for (const char *p = value; *p; p++) {
        if (*p == '\'') {
            if (n + 4 >= len)
                return false;
            memcpy(out + n, "'\\''", 4);
            n += 4;
        } else {
            if (n + 1 >= len)
                return false;
            out[n++] = *p;
        }
    }
    if (n + 2 > len)
        return false;
    out[n++] = '\'';
    out[n] = '\0';
    return true;
}

/* The command with %p (pid), %r (rank), %j (job id), %d (image directory)
 * replaced, each quoted for the shell (sh_quote()), and %% by %; false when
 * it does not fit. */
static bool expand(const char *tmpl, const struct ccp_ctx *c, const char *dir, char *out,
                   size_t len)
{
    size_t n = 0;

    for (const char *p = tmpl; *p; p++) {
        char raw[sizeof(c->jobdir) + 64], v[4 * sizeof(raw) + 3];
        const char *val = raw;
        int k;

        raw[0] = '\0';
        if (*p != '%' || !p[1]) {
            raw[0] = *p;
            raw[1] = '\0';
        } else {
            switch (*++p) {
            case 'p': snprintf(raw, sizeof(raw), "%d", (int)getpid()); break;
            case 'r': snprintf(raw, sizeof(raw), "%ld", c->rec.rank); break;
            case 'j': snprintf(raw, sizeof(raw), "%s", c->rec.job); break;
            case 'd': snprintf(raw, sizeof(raw), "%s", dir); break;
            default: snprintf(raw, sizeof(raw), "%c", *p); break;
            }
            if (strchr("prjd", *p)) {
                if (!sh_quote(raw, v, sizeof(v)))
                    return false;
                val = v;
            }
        }
        k = snprintf(out + n, len - n, "%s", val);
        if (k < 0 || (size_t)k >= len - n)
            return false;
        n += (size_t)k;
    }
    return true;
}

/* The runner: "+ <command>" and its output in the log, then "<checkpoint
 * number> <status> <milliseconds>" in the status file (written whole,
 * renamed into place): a runner of an earlier checkpoint that ends late
 * cannot answer for this one.  The status is written to a fresh name
 * (mktemp: O_CREAT | O_EXCL), and renamed over whatever is at ckpt.<rank>:
 * a link planted at either is never written through. */
#define RUNNER "printf '+ %s\\n' \"$1\"; t0=$(date +%s%N); /bin/sh -c \"$1\"; rc=$?; " \
               "t1=$(date +%s%N); t=$(mktemp \"$2.tmp.XXXXXX\") && " \
               "echo \"$3 $rc $(( (t1 - t0) / 1000000 ))\" > \"$t\" && mv -f \"$t\" \"$2\""

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
        rov_info("ccp", "rank %ld: checkpoint taken in %ld ms", c->rec.rank, ms);
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

static void ckpt_start(rov_context_t *ctx)
{
    const struct ccp_settings *s = rov_policy_settings(ctx, &ccp_policy);
    struct ccp_ctx *c = C(ctx);
    char dir[sizeof(c->jobdir) + 32], status[sizeof(c->jobdir) + 32], log[sizeof(status) + 8];
    char cmd[1024], seq[24], err[CCP_DIR_MAX + 200];
    rov_status_t st;
    int fd = -1;
    pid_t pid;

    rov_policy_stage_hook(ctx, ROV_STAGE_CHECKPOINT, 0, ROV_OK);
    ckpt_path(c, "ckpt.", status, sizeof(status));
    snprintf(log, sizeof(log), "%s.log", status);
    snprintf(seq, sizeof(seq), "%ld", c->rec.ckpt_count + 1);
    unlink(status);
    c->ckpt_start_ns = mono_ns();
    c->ckpt_due_ns = c->ckpt_start_ns + CKPT_POLL_NS;
    ckpt_set(c, CKPT_RUNNING, "checkpoint command starts");
    /* Where the runner and the command write: nothing through a link, nothing
     * of another's (the log is truncated only once it is known to be ours). */
    snprintf(dir, sizeof(dir), "%s/images", c->jobdir);
    st = ccp_own_dir(dir, true, err, sizeof(err));
    if (st == ROV_OK) {
        snprintf(dir, sizeof(dir), "%s/images/rank.%ld", c->jobdir, c->rec.rank);
        st = ccp_own_dir(dir, true, err, sizeof(err));
    }
    if (st == ROV_OK)
        st = ccp_open(log, O_WRONLY | O_CREAT, 0600, &fd, err, sizeof(err));
    if (st == ROV_OK && ftruncate(fd, 0) < 0) {
        snprintf(err, sizeof(err), "cannot truncate %s: %s", log, strerror(errno));
        st = ROV_ERR_IO;
    }
    if (st != ROV_OK) {
        rov_warn("ccp", "rank %ld: checkpoint refused: %s", c->rec.rank, err);
        if (fd >= 0)
            close(fd);
        return ckpt_done(ctx, st == ROV_ERR_PROTO ? CCP_CKPT_REFUSED : -1, 0);
    }
    if (!expand(s->ckpt_cmd, c, dir, cmd, sizeof(cmd))) {
        rov_warn("ccp", "checkpoint command too long once expanded: %s", s->ckpt_cmd);
        close(fd);
        return ckpt_done(ctx, 127, 0);
    }
    rov_ctl_close(ctx);
    pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls here: the process has threads. */
        if (setsid() < 0 || fork() != 0)
            _exit(0);
        int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);

        if (nul < 0 || dup2(nul, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(127);
        syscall(SYS_close_range, 3u, ~0u, 0u);
        execl("/bin/sh", "sh", "-c", RUNNER, "railover-checkpoint", cmd, status, seq,
              (char *)NULL);
        _exit(127);
    }
    close(fd);
    if (pid < 0) {
        rov_warn("ccp", "fork: %m: the checkpoint command does not run");
        return ckpt_done(ctx, -1, 0);
    }
    waitpid(pid, NULL, 0);
    rov_info("ccp", "rank %ld: checkpoint command started: %s", c->rec.rank, cmd);
}

static void ckpt_poll(rov_context_t *ctx, uint64_t now)
{
    struct ccp_ctx *c = C(ctx);
    char status[sizeof(c->jobdir) + 32], err[CCP_DIR_MAX + 200];
    long rc, ms;
    int fd;
    FILE *f;

    c->ckpt_due_ns = now + CKPT_POLL_NS;
    ckpt_path(c, "ckpt.", status, sizeof(status));
    /* (a link there is not followed: the runner's rename replaces it) */
    f = ccp_open(status, O_RDONLY, 0, &fd, err, sizeof(err)) == ROV_OK ? fdopen(fd, "r") : NULL;
    if (!f && fd >= 0)
        close(fd);
    if (f) {
        long seq;
        int n = fscanf(f, "%ld %ld %ld", &seq, &rc, &ms);

        fclose(f);
        if (n == 3 && seq == c->rec.ckpt_count + 1)
            return ckpt_done(ctx, rc < 0 || rc > 255 ? 255 : rc, ms < 0 ? 0 : ms);
    }
    if (now - c->ckpt_start_ns > c->ckpt_limit_ns)
        ckpt_done(ctx, -2, (long)((now - c->ckpt_start_ns) / 1000000ull));
}

/* checkpoint [suspend] [limit=SECONDS] | checkpoint check.  limit: the
 * client's time for the stage (less than its own, so that the rank's
 * result, a timeout included, reaches the client before it gives up). */
static int cmd_checkpoint(rov_context_t *ctx, int argc, char **argv, FILE *out, char *err,
                          size_t err_len)
{
    const struct ccp_settings *s = rov_policy_settings(ctx, &ccp_policy);
    struct ccp_ctx *c = C(ctx);
    bool suspend = false, check = false;
    uint64_t limit = s->ckpt_timeout_ns;

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
        } else {
            snprintf(err, err_len, "usage: checkpoint [suspend] [limit=SECONDS] | checkpoint "
                     "check");
            return 1;
        }
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
    c->ckpt_due_ns = mono_ns();
    fprintf(out, "checkpoint rank=%ld count=%ld limit=%.1fs: the control endpoint closes until "
            "it is done\n", c->rec.rank, c->rec.ckpt_count, (double)limit / 1e9);
    return 0;
}

static const struct rov_ctl_cmd checkpoint_cmd = {
    "checkpoint", "checkpoint [suspend] [limit=S] | checkpoint check",
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
     NULL, "command that images this process at `cprclient JOBID checkpoint`: %p pid, %r "
     "rank, %j job id, %d image directory (CRIU: criu dump -t %p -D %d --leave-running)"},
    {"RAILOVER_CHECKPOINT_TIMEOUT", ROV_VAR_DURATION, CCP_OFF(ckpt_timeout_ns), 0,
     1000000000ull, 86400ull * 1000000000ull, NULL,
     "a checkpoint command without a result after this has failed; the rank runs on"},
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
