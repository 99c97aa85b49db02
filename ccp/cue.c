/*
 * The checkpointer's cue (cue.h, docs/ccp.md "Cues from the checkpointer"):
 * RAILOVER_CHECKPOINT_SIGNAL's handler and the `cue` control verb, and the
 * steps that take a context to closed or back to running on their behalf.
 */
#define _GNU_SOURCE /* sigabbrev_np */
#include "ccp/cue.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "transport/control.h"
#include "transport/log.h"
#include "transport/policy.h"
#include "transport/states.h"

/* While a cue is under way, ccp's tick looks this often. */
#define CUE_POLL_NS (20ull * 1000000ull)
/* A reopen that failed (a rail did not open) is tried again after this. */
#define CUE_RETRY_NS (1000ull * 1000000ull)

#define B ROV_STATE_BIT
static const struct rov_state_info cue_states[CCP_CUE_NSTATES] = {
    [CCP_CUE_IDLE] = {"idle", B(CCP_CUE_CLOSING) | B(CCP_CUE_REOPENING)},
    [CCP_CUE_CLOSING] = {"closing", B(CCP_CUE_IDLE) | B(CCP_CUE_REOPENING)},
    [CCP_CUE_RENEWING] = {"renewing", B(CCP_CUE_REOPENING) | B(CCP_CUE_CLOSING)},
    [CCP_CUE_REOPENING] = {"reopening", B(CCP_CUE_IDLE) | B(CCP_CUE_RENEWING) |
                                        B(CCP_CUE_CLOSING)},
};
#undef B

/* The process's signal cue: one signal, its handler installed once and
 * kept for the life of the process (a later signal must not find the
 * default action, which ends the process, when a context is gone). */
static pthread_mutex_t sig_lock = PTHREAD_MUTEX_INITIALIZER;
static int sig_installed;          /* the signal, 0: none */
static int sig_efd = -1;           /* written by the handler, never closed */
static atomic_ulong sig_count;     /* signals received */

static void cue_set(struct ccp_cue *cue, enum ccp_cue_state to, const char *why)
{
    char what[32];

    snprintf(what, sizeof(what), "cue of rank %ld", cue->rank);
    if (rov_state_change(cue_states, cue->state, to, "ccp", what, why, &cue->illegal))
        cue->state = to;
}

/* Signals ----------------------------------------------------------------------------- */

/* Raised by the kernel on a fault: a handler that returns faults again. */
static const int fault_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};

/* A decimal number, nothing else (*v untouched otherwise). */
static bool parse_int(const char *s, long *v)
{
    char *end;
    long n;

    if (!isdigit((unsigned char)*s))
        return false;
    errno = 0;
    n = strtol(s, &end, 10);
    if (errno || *end)
        return false;
    *v = n;
    return true;
}

rov_status_t ccp_cue_signal_parse(const char *text, int *signo_p, char *why, size_t why_len)
{
    const char *name = text;
    long n = -1, off;

    *signo_p = 0;
    if (!text[0] || strcasecmp(text, "off") == 0)
        return ROV_OK;
    if (strncasecmp(name, "SIG", 3) == 0)
        name += 3;
    if (parse_int(text, &n)) {
        if (n < 1 || n > SIGRTMAX || (n > SIGSYS && n < SIGRTMIN)) {
            snprintf(why, why_len, "no signal %ld (1 to %d, without %d to %d, which the C "
                     "library keeps)", n, SIGRTMAX, SIGSYS + 1, SIGRTMIN - 1);
            return ROV_ERR_INVAL;
        }
    } else if (strncasecmp(name, "RTMIN", 5) == 0 &&
               (!name[5] || (name[5] == '+' && parse_int(name + 6, &off)))) {
        n = SIGRTMIN + (name[5] ? off : 0);
    } else if (strncasecmp(name, "RTMAX", 5) == 0 &&
               (!name[5] || (name[5] == '-' && parse_int(name + 6, &off)))) {
        n = SIGRTMAX - (name[5] ? off : 0);
    } else {
        for (int s = 1; s <= SIGSYS; s++) {
            const char *abbrev = sigabbrev_np(s);

            if (abbrev && strcasecmp(abbrev, name) == 0)
                n = s;
        }
    }
    if (n < SIGRTMIN && n > SIGSYS)
        n = -1;
    if (n < 1 || n > SIGRTMAX) {
        snprintf(why, why_len, "not a signal: a name (USR2, SIGUSR2, RTMIN+N, RTMAX-N) or a "
                 "number");
        return ROV_ERR_INVAL;
    }
    if (n == SIGKILL || n == SIGSTOP) {
        snprintf(why, why_len, "SIG%s cannot be caught", sigabbrev_np((int)n));
        return ROV_ERR_INVAL;
    }
    for (size_t i = 0; i < sizeof(fault_signals) / sizeof(fault_signals[0]); i++) {
        if (n == fault_signals[i]) {
            snprintf(why, why_len, "SIG%s is raised by a fault, not a cue (USR1, USR2 or a "
                     "real-time signal is)", sigabbrev_np((int)n));
            return ROV_ERR_INVAL;
        }
    }
    *signo_p = (int)n;
    return ROV_OK;
}

static void sig_name(int signo, char *buf, size_t len)
{
    if (signo >= SIGRTMIN)
        snprintf(buf, len, "RTMIN+%d", signo - SIGRTMIN);
    else if (signo > 0 && sigabbrev_np(signo))
        snprintf(buf, len, "%s", sigabbrev_np(signo));
    else
        snprintf(buf, len, "%s", signo ? "?" : "off");
}

/* Async-signal-safe: an atomic add (lock-free) and write(2). */
static void sig_handler(int signo)
{
    int saved = errno;
    uint64_t one = 1;

    (void)signo;
    atomic_fetch_add_explicit(&sig_count, 1, memory_order_relaxed);
    (void)!write(sig_efd, &one, sizeof(one));
    errno = saved;
}

/* The handler for signo, installed once per process; false (a warning
 * says why) when there can be none. */
static bool sig_install(int signo)
{
    struct sigaction sa = {.sa_handler = sig_handler, .sa_flags = SA_RESTART}, old;
    char name[16];
    bool ok = false;

    sig_name(signo, name, sizeof(name));
    pthread_mutex_lock(&sig_lock);
    if (sig_installed == signo) {
        ok = true;
    } else if (sig_installed) {
        char other[16];

        sig_name(sig_installed, other, sizeof(other));
        rov_warn("ccp", "RAILOVER_CHECKPOINT_SIGNAL=%s: this process's cue is SIG%s already "
                 "(one signal per process): no signal cue for this context", name, other);
    } else if (sigaction(signo, NULL, &old) < 0) {
        rov_warn("ccp", "RAILOVER_CHECKPOINT_SIGNAL=%s: sigaction: %m: no signal cue", name);
    } else if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
        rov_warn("ccp", "RAILOVER_CHECKPOINT_SIGNAL=%s: the application handles SIG%s itself; "
                 "its handler stays and there is no signal cue", name, name);
    } else if (sig_efd < 0 && (sig_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        rov_warn("ccp", "RAILOVER_CHECKPOINT_SIGNAL=%s: eventfd: %m: no signal cue", name);
    } else {
        sigemptyset(&sa.sa_mask);
        if (sigaction(signo, &sa, NULL) < 0) {
            rov_warn("ccp", "RAILOVER_CHECKPOINT_SIGNAL=%s: sigaction: %m: no signal cue", name);
        } else {
            sig_installed = signo;
            ok = true;
        }
    }
    pthread_mutex_unlock(&sig_lock);
    return ok;
}

/* The process's start time (field 22 of /proc/self/stat, clock ticks
 * since boot), 0 when unreadable.  A copy restored from an image is a new
 * process: its start time is not the one the image holds. */
static unsigned long long start_time(void)
{
    char buf[1024], *p;
    unsigned long long t = 0;
    ssize_t n = -1;
    FILE *f = fopen("/proc/self/stat", "re");

    if (f) {
        n = (ssize_t)fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
    }
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* (the command name may hold spaces) */
    /* ") S ppid ...": the state is field 3, the start time field 22. */
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (p)
        t = strtoull(p + 1, NULL, 10);
    return t;
}

/* Steps ------------------------------------------------------------------------------ */

/* Take the context as far as it goes now toward what the cue wants. */
static void cue_step(rov_context_t *ctx, struct ccp_cue *cue, uint64_t now)
{
    for (;;) {
        rov_context_stage_t stage = rov_context_stage(ctx);
        rov_status_t st;

        switch (cue->state) {
        case CCP_CUE_IDLE:
            return;
        case CCP_CUE_CLOSING:
            if (stage == ROV_CONTEXT_CLOSED) {
                cue_set(cue, CCP_CUE_IDLE, "closed: ready to be imaged");
                return;
            }
            if (stage == ROV_CONTEXT_QUIESCED) {
                rov_context_close_rails(ctx);
                continue;
            }
            if (stage != ROV_CONTEXT_RUNNING)
                return; /* quiescing, or another's reopen: wait */
            if (cue->asked) {
                cue_set(cue, CCP_CUE_IDLE, "resumed by another request: the close is given up");
                return;
            }
            cue->asked = true;
            rov_context_quiesce(ctx); /* (quiesced at once without a connection) */
            continue;
        case CCP_CUE_RENEWING:
            if (rov_policy_threads_renewing(ctx))
                return;
            cue_set(cue, CCP_CUE_REOPENING, "progress helper replaced");
            continue;
        case CCP_CUE_REOPENING:
            switch (stage) {
            case ROV_CONTEXT_RUNNING:
                cue_set(cue, CCP_CUE_IDLE, "running");
                return;
            case ROV_CONTEXT_REOPENING:
                return;
            case ROV_CONTEXT_QUIESCING:
            case ROV_CONTEXT_QUIESCED:
                rov_context_reopen(ctx); /* a resume: at once */
                continue;
            case ROV_CONTEXT_CLOSED:
                break;
            }
            if (now < cue->retry_ns)
                return;
            if (start_time() != cue->started) {
                cue->started = start_time();
                rov_policy_renew_threads(ctx);
                cue_set(cue, CCP_CUE_RENEWING, "restored from an image: its progress helper "
                        "is replaced before the rails reopen");
                continue;
            }
            st = rov_context_reopen(ctx);
            if (st < 0) {
                rov_warn("ccp", "rank %ld: the cue's reopen failed (%s); trying again in %llu "
                         "ms", cue->rank, rov_status_str(st),
                         (unsigned long long)(CUE_RETRY_NS / 1000000ull));
                cue->retry_ns = now + CUE_RETRY_NS;
                return;
            }
            continue;
        case CCP_CUE_NSTATES:
            return;
        }
    }
}

/* close: drain and close; else reopen (or resume). */
static void cue_request(rov_context_t *ctx, struct ccp_cue *cue, bool close, const char *from)
{
    char why[64];

    snprintf(why, sizeof(why), "%s: %s", from, close ? "drain and close" : "reopen");
    if (close && cue->state != CCP_CUE_CLOSING) {
        cue_set(cue, CCP_CUE_CLOSING, why);
        cue->asked = false;
    } else if (!close && cue->state != CCP_CUE_REOPENING && cue->state != CCP_CUE_RENEWING) {
        cue_set(cue, CCP_CUE_REOPENING, why);
        cue->retry_ns = 0;
    }
    if (!ccp_cue_held(ctx))
        cue_step(ctx, cue, rov_now_ns());
}

/* Each signal that came: a running context closes, any other reopens. */
static void cue_signals(rov_context_t *ctx, struct ccp_cue *cue)
{
    unsigned long n = atomic_load_explicit(&sig_count, memory_order_relaxed);
    char why[48], name[16];

    sig_name(cue->signo, name, sizeof(name));
    while (cue->signo && cue->seen != n) {
        bool closed = cue->state == CCP_CUE_CLOSING ||
                      (cue->state == CCP_CUE_IDLE && rov_context_stage(ctx) != ROV_CONTEXT_RUNNING);

        cue->seen++;
        snprintf(why, sizeof(why), "SIG%s", name);
        cue_request(ctx, cue, !closed, why);
    }
}

static void cue_wake(rov_context_t *ctx)
{
    if (!ccp_cue_held(ctx))
        cue_signals(ctx, ccp_cue_of(ctx));
}

void ccp_cue_open(rov_context_t *ctx, struct ccp_cue *cue, int signo, long rank)
{
    char name[16];

    cue->rank = rank;
    cue->started = start_time();
    if (!signo)
        return;
    sig_name(signo, name, sizeof(name));
    if (!rov_ctl_path(ctx)) {
        rov_info("ccp", "RAILOVER_CHECKPOINT_SIGNAL=%s needs the control socket "
                 "(RAILOVER_CONTROL=on): no signal cue", name);
        return;
    }
    if (!sig_install(signo))
        return;
    cue->seen = atomic_load_explicit(&sig_count, memory_order_relaxed);
    if (rov_ctl_wake_on(ctx, sig_efd, cue_wake) != ROV_OK) {
        rov_warn("ccp", "RAILOVER_CHECKPOINT_SIGNAL=%s: the control set does not take the "
                 "cue's descriptor: no signal cue", name);
        return;
    }
    cue->signo = signo;
    rov_info("ccp", "rank %ld: SIG%s drains and closes this process, a second one reopens it",
             rank, name);
}

void ccp_cue_tick(rov_context_t *ctx, struct ccp_cue *cue, uint64_t now)
{
    /* The control socket reopened after a checkpoint of ccp's own: the
     * cue's descriptor goes back into its set. */
    if (cue->signo && rov_ctl_path(ctx) && rov_ctl_wake_on(ctx, sig_efd, cue_wake) != ROV_OK)
        cue->signo = 0;
    cue_signals(ctx, cue);
    cue_step(ctx, cue, now);
}

uint64_t ccp_cue_due_ns(const struct ccp_cue *cue)
{
    return cue->state == CCP_CUE_IDLE ? 0 : rov_now_ns() + CUE_POLL_NS;
}

void ccp_cue_status(const struct ccp_cue *cue, FILE *out)
{
    char name[16];

    sig_name(cue->signo, name, sizeof(name));
    fprintf(out, " cue=%s cue_signal=%s", cue_states[cue->state].name, name);
}

/* cue [close|reopen] ------------------------------------------------------------------ */

static int cmd_cue(rov_context_t *ctx, int argc, char **argv, FILE *out, char *err,
                   size_t err_len)
{
    struct ccp_cue *cue = ccp_cue_of(ctx);
    rov_context_stage_t was = rov_context_stage(ctx);

    if (argc > 2 || (argc == 2 && strcmp(argv[1], "close") != 0 &&
                     strcmp(argv[1], "reopen") != 0)) {
        snprintf(err, err_len, "usage: cue [close|reopen]");
        return 1;
    }
    if (argc == 2)
        cue_request(ctx, cue, strcmp(argv[1], "close") == 0, "control request");
    fprintf(out, "cue rank=%ld state=%s stage=%s was=%s\n", cue->rank,
            cue_states[cue->state].name, rov_context_stage_str(rov_context_stage(ctx)),
            rov_context_stage_str(was));
    return 0;
}

static const struct rov_ctl_cmd cue_cmd = {
    "cue", "cue [close|reopen]",
    "drain and close this process, or reopen it, by itself (a checkpointer's cue: ccp/, "
    "docs/ccp.md)",
    cmd_cue,
};

ROV_CTL_REGISTER(cue_cmd)
