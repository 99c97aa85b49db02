/*
 * The checkpointer's cue (docs/ccp.md, "Cues from the checkpointer"): a
 * checkpointer that does not drive the stages itself tells the process to
 * get ready to be imaged, and to go on afterwards, and the process drains
 * and closes, or reopens, by itself.  Two sources:
 *
 *   RAILOVER_CHECKPOINT_SIGNAL   a signal: on a running process it drains
 *                                and closes, on any other it reopens; the
 *                                handler only counts it and writes to an
 *                                eventfd that every context's control set
 *                                watches (rov_ctl_wake_on())
 *   `cue close|reopen`           the control verb (the CRIU action script,
 *                                tools/railover-criu-action)
 *
 * The stages themselves are the transport's (rov_context_quiesce(),
 * _close_rails(), _reopen()), run from the control set's service and from
 * ccp's tick, in whichever thread runs them (the progress helper while the
 * application computes).  A reopen in a process restored from an image
 * (its start time is not the one it had: a new process) first has its
 * progress helper replaced (rov_policy_renew_threads(): CRIU gives each
 * restored thread credentials of its own, which the kernel's verbs
 * interface refuses to share), and reopens once that is done.
 */
#ifndef ROV_CCP_CUE_H
#define ROV_CCP_CUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "railover/railover.h"

enum ccp_cue_state {
    CCP_CUE_IDLE,      /* nothing asked: the stages are whoever's (cprclient) */
    CCP_CUE_CLOSING,   /* drain, then close the rails; idle once closed */
    CCP_CUE_RENEWING,  /* a reopen in a restored process: its helper is being
                        * replaced, the reopen follows */
    CCP_CUE_REOPENING, /* reopen (or resume a drain); idle once running */
    CCP_CUE_NSTATES
};

/* Per context (inside ccp's, zeroed at creation). */
struct ccp_cue {
    enum ccp_cue_state state;
    int signo;                  /* 0: no signal cue */
    unsigned long seen;         /* the process's signals handled so far */
    unsigned long long started; /* the process's start time (/proc/self/stat)
                                 * when it last ran its helper: differs in a
                                 * restored copy */
    bool asked;                 /* the state's stage call is made */
    uint64_t retry_ns;          /* a reopen that failed is tried again then */
    uint64_t illegal;           /* transitions refused (a bug) */
    long rank;                  /* for the log */
};

/** The context's cue (ccp.c keeps it in its per-context state). */
struct ccp_cue *ccp_cue_of(const rov_context_t *ctx);
/** A checkpoint of ccp's own is under way (ccp.c): the cue waits for its
 * end (its signals are counted meanwhile). */
bool ccp_cue_held(const rov_context_t *ctx);

/** Parse a RAILOVER_CHECKPOINT_SIGNAL value: "" (off), a name with or
 * without SIG (USR2, SIGUSR2, any case), RTMIN+N, RTMAX-N, or a number.
 * *signo_p is 0 for off.  ROV_ERR_INVAL with why (one line) for an unknown
 * name, a number out of range, a signal that cannot be caught (KILL, STOP)
 * or one the kernel raises on a fault (SEGV, BUS, FPE, ILL, TRAP, SYS). */
rov_status_t ccp_cue_signal_parse(const char *text, int *signo_p, char *why, size_t why_len);

/** The context is open (registered or not): set the signal cue up (signo
 * 0: none).  Without a control socket, or when the application handles the
 * signal itself, there is none (a warning says why). */
void ccp_cue_open(rov_context_t *ctx, struct ccp_cue *cue, int signo, long rank);
/** From ccp's tick: the signals that came, and the next step. */
void ccp_cue_tick(rov_context_t *ctx, struct ccp_cue *cue, uint64_t now);
/** When ccp's tick is due for the cue, 0: not. */
uint64_t ccp_cue_due_ns(const struct ccp_cue *cue);
/** The status command's fields (" cue=... cue_signal=..."). */
void ccp_cue_status(const struct ccp_cue *cue, FILE *out);

#endif
