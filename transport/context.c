/* Context, endpoint and progress engine (its timer, the epoll set, busy
 * polling, the helper thread's pass); channels and the rail upcalls are in
 * chan.c. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "railover/ccp.h"
#include "transport/auth.h"
#include "transport/control.h"
#include "transport/core.h"
#include "transport/log.h"

#define EPOLL_BATCH 64
/* With busy polling, rails poll their hot channels directly; the epoll set
 * (accepts, connects, writability) is checked, and the failover engine's
 * tick run, when EPOLL_GAP_NS (no more than that tick's shortest) has
 * passed since the last check, by the clock: not every Nth call, since a
 * poll that makes no system call (an RDMA completion queue's) is fast
 * enough for any N to put an epoll_wait() into every round trip.  What
 * wakes a sleeper (an RDMA completion queue's event, a UCX worker's, the
 * context's timer) is armed only before a sleep (arm_sleep(),
 * rov_context_arm()), never on this path. */
#define EPOLL_GAP_NS 1000000ull
/* Longer than this since the engine last had its chance to run: the process
 * was away (stopped, descheduled, its caller out of progress). */
#define AWAY_NS (10ull * 1000000ull)
/* The clock is read every CLOCK_EVERY-th call that handled frames (such a
 * call can take long), every CLOCK_EVERY_IDLE-th one that found nothing
 * (a few microseconds apart at most): a read costs 25 ns and, after a
 * system call, the two pages of the vDSO (transport/compiler.h). */
#define CLOCK_EVERY 4
#define CLOCK_EVERY_IDLE 16
/* A rail that neither handed up nor took a frame in COLD_POLLS calls while
 * another did (a bond's second member under small messages, a fallback
 * after failback, a rail whose channels wait in standby) is polled directly
 * on every COLD_EVERY-th call only: a TCP channel's poll is a recv() that
 * finds nothing, and a bonded 8 B MPI ping-pong made twice the recv() calls
 * of an unbonded one and took 10-15% longer (bench/README.md).  It is hot
 * again as soon as it hands up a frame or is given one (rov_ctx_rail_used());
 * epoll_check() recounts. */
#define COLD_POLLS 1024u
#define COLD_EVERY 8u
/* Powers of two, so that choosing between them costs a mask, not a
 * division (a 'div' of 20-40 cycles on every progress call). */
_Static_assert((CLOCK_EVERY & (CLOCK_EVERY - 1)) == 0 &&
               (CLOCK_EVERY_IDLE & (CLOCK_EVERY_IDLE - 1)) == 0,
               "progress intervals: powers of two");

uint64_t rov_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static rov_status_t watch_ctl(rov_context_t *ctx, int op, struct rov_watch *watch,
                              uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = watch};

    if (epoll_ctl(watch->urgent ? ctx->urgent.fd : ctx->epfd, op, watch->fd, &ev) < 0) {
        rov_error("core", "epoll_ctl(%s fd %d): %m", op == EPOLL_CTL_ADD ? "add" : "mod",
                  watch->fd);
        return ROV_ERR_IO;
    }
    return ROV_OK;
}

rov_status_t rov_ctx_watch(rov_context_t *ctx, struct rov_watch *watch, uint32_t events)
{
    return watch_ctl(ctx, EPOLL_CTL_ADD, watch, events);
}

rov_status_t rov_ctx_watch_urgent(rov_context_t *ctx, struct rov_watch *watch, uint32_t events)
{
    watch->urgent = true;
    return watch_ctl(ctx, EPOLL_CTL_ADD, watch, events);
}

rov_status_t rov_ctx_watch_mod(rov_context_t *ctx, struct rov_watch *watch, uint32_t events)
{
    return watch_ctl(ctx, EPOLL_CTL_MOD, watch, events);
}

void rov_ctx_unwatch(rov_context_t *ctx, struct rov_watch *watch)
{
    epoll_ctl(watch->urgent ? ctx->urgent.fd : ctx->epfd, EPOLL_CTL_DEL, watch->fd, NULL);
}

void rov_ctx_event_code(rov_context_t *ctx, rov_event_type_t type, struct rov_conn *conn,
                        rov_status_t status, int from, int to, const char *reason,
                        rov_reason_t code)
{
    rov_event_t ev = {
        .type = type, .conn = conn, .status = status,
        .rail_from = from, .rail_to = to, .reason = reason, .code = code,
    };

    ctx->events++; /* news for the caller: rov_context_wait() must not sleep on */
    if (__builtin_expect(ctx->in_helper, 0))
        rov_ctx_defer_event(ctx, &ev); /* for the application's next progress */
    else if (ctx->event_cb)
        ctx->event_cb(ctx->arg, &ev);
}

void rov_ctx_event(rov_context_t *ctx, rov_event_type_t type, struct rov_conn *conn,
                   rov_status_t status, int from, int to, const char *reason)
{
    rov_ctx_event_code(ctx, type, conn, status, from, to, reason, ROV_REASON_NONE);
}

/* RAILOVER_WINDOW_TIME: what the connections of a context retain together
 * is bounded by what their peers acknowledge in that long, at the rate they
 * acknowledged lately (tx_cap, between WINDOW_FLOOR and
 * RAILOVER_WINDOW_TOTAL).  Everything retained waits in socket buffers or
 * in the peer's backlog ahead of a control frame, so this bounds how late a
 * switch, a probe's answer or an ack arrives behind the data: 256
 * connections streaming 2 KiB messages, acknowledged at about 55 MB/s on
 * two shared cores, kept up to RAILOVER_WINDOW_TOTAL (256 MiB, seconds of
 * backlog) in flight, and their moves and failbacks took seconds each
 * (bench/README.md, failover-scale.py).  A faster path acknowledges more
 * in the same time, so the bound grows with it; it is measured every
 * RATE_INTERVAL_NS while anything is retained, follows a rise at once and
 * a fall by a quarter per interval (a pause in the acks, a failover, is
 * not taken for a slow path at once), and an idle interval teaches
 * nothing. */
#define RATE_INTERVAL_NS (10ull * 1000000ull)
#define WINDOW_FLOOR (1ull << 20)

static uint64_t window_floor(const rov_context_t *ctx)
{
    return ctx->config.window_total < WINDOW_FLOOR ? ctx->config.window_total : WINDOW_FLOOR;
}

static void window_update(rov_context_t *ctx, uint64_t now)
{
    uint64_t elapsed = now - ctx->rate_ns, floor = window_floor(ctx), cap;
    double rate;

    if (ctx->config.window_time_ns == 0 || elapsed < RATE_INTERVAL_NS)
        return;
    if (ctx->acked_bytes != 0 || ctx->tx_bytes != 0) {
        rate = (double)ctx->acked_bytes * 1e9 / (double)elapsed;
        if (rate >= (double)ctx->ack_rate)
            ctx->ack_rate = (uint64_t)rate;
        else
            ctx->ack_rate -= (ctx->ack_rate - (uint64_t)rate) / 4;
        cap = (uint64_t)((double)ctx->ack_rate * (double)ctx->config.window_time_ns / 1e9);
        ctx->tx_cap = cap < floor ? floor : cap > ctx->config.window_total ?
                      ctx->config.window_total : cap;
    }
    ctx->rate_ns = now;
    ctx->acked_bytes = 0;
}

static void window_init(rov_context_t *ctx)
{
    ctx->tx_cap = ctx->config.window_time_ns ? window_floor(ctx) : ctx->config.window_total;
    ctx->rate_ns = rov_now_ns();
}

/* The failover engine's tick, on what the rails have reported.  After the
 * process was away, the rails are polled first: what arrived meanwhile (the
 * completions of sends the peer's transport acknowledged, frames) counts
 * before any channel is judged silent.  Without that, a process continued
 * after 6 s of SIGSTOP ran its engine before its completion queue and
 * called two of its verbs channels stalled (CI's verbs_failover,
 * peer_stopped, round 2). */
static void engine_tick(rov_context_t *ctx, uint64_t now)
{
    if (__builtin_expect(now - ctx->engine_seen_ns > AWAY_NS, 0))
        for (int i = 0; i < ctx->nrails; i++)
            ctx->rails[i]->ops.progress(ctx->rails[i]);
    ctx->engine_seen_ns = now;
    window_update(ctx, now);
    rov_policies_tick(ctx, now);
}

/* The urgent set has something ready (docs/architecture.md, Progress). */
static void urgent_cb(struct rov_watch *w, uint32_t events)
{
    (void)events;
    rov_watch_run(w->fd, 0);
}

/* The timer fired: its work waits for the end of the epoll batch
 * (dispatch()), because the engine's tick may poll the rails, and a rail's
 * progress frees the channels it closed, which later events of the same
 * batch may still name; the batch's completions count first, too. */
static void timer_cb(struct rov_watch *w, uint32_t events)
{
    rov_context_t *ctx = rov_container_of(w, rov_context_t, timer);
    uint64_t expirations;

    (void)events;
    (void)!read(w->fd, &expirations, sizeof(expirations));
    ctx->timer_set_ns = 0;
    ctx->timer_fired = true;
}

static void timer_work(rov_context_t *ctx)
{
    uint64_t now = rov_now_ns();

    ctx->timer_fired = false;
    if (ctx->awaiting_hello && now >= ctx->hello_due_ns)
        rov_ctx_sweep_unauthed(ctx, now);
    if (ctx->connect_again_ns && now >= ctx->connect_again_ns)
        rov_conn_connect_again(ctx, now);
    if (ctx->gap_check_ns && now >= ctx->gap_check_ns)
        rov_conn_gap_check(ctx, now);
    if (ctx->stage_news)
        rov_stage_progress(ctx);
    engine_tick(ctx, now); /* progress() sends the due acks next */
}

static void stamp_acks(rov_context_t *ctx, uint64_t now)
{
    for (struct rov_conn *c = ctx->ack_unstamped; c; c = c->ack_next)
        c->ack_deadline_ns = now + ctx->config.ack_delay_ns;
    ctx->ack_unstamped = NULL;
}

static void flush_due_acks(rov_context_t *ctx)
{
    uint64_t now = rov_now_ns();

    stamp_acks(ctx, now);
    /* (an ack held back goes to the unstamped tail: the walk ends there) */
    while (ctx->ack_head && ctx->ack_head != ctx->ack_unstamped &&
           ctx->ack_head->ack_deadline_ns <= now)
        rov_conn_ack_due(ctx->ack_head, now);
}

static void push_pending(rov_context_t *ctx)
{
    for (struct rov_conn *c = ctx->conns; c && ctx->push_pending; c = c->next)
        if (c->push_more)
            rov_conn_push(c);
}

static void reap(rov_context_t *ctx)
{
    struct rov_conn *c, *next;

    ctx->reap = false;
    for (c = ctx->conns; c; c = next) {
        next = c->next;
        if (c->state == ROV_CONN_DEAD)
            rov_conn_free(c);
    }
}

/* A sleep with the progress helper running: without the lock, on the
 * context's set and the helper's wake-up (it kept something for us), so
 * that the helper may work meanwhile; then the lock again, and the set is
 * read afresh (what was ready may be gone: the helper may have handled it,
 * or closed its channel). */
static ROV_COLD void sleep_unlocked(rov_context_t *ctx, int timeout_ms)
{
    struct pollfd p[2] = {{.fd = ctx->epfd, .events = POLLIN},
                          {.fd = ctx->app_wake, .events = POLLIN}};
    uint64_t v;

    ctx->app_sleeping = true;
    pthread_mutex_unlock(&ctx->lock);
    poll(p, 2, timeout_ms);
    pthread_mutex_lock(&ctx->lock);
    ctx->app_sleeping = false;
    if (p[1].revents & POLLIN)
        (void)!read(ctx->app_wake, &v, sizeof(v));
}

int rov_watch_run(int epfd, int timeout_ms)
{
    struct epoll_event evs[EPOLL_BATCH];
    int n = epoll_wait(epfd, evs, EPOLL_BATCH, timeout_ms);

    for (int i = 0; i < n; i++) {
        struct rov_watch *w = evs[i].data.ptr;

        w->cb(w, evs[i].events);
    }
    return n < 0 ? 0 : n;
}

static int dispatch(rov_context_t *ctx, int timeout_ms)
{
    int n;

    if (timeout_ms != 0 && ctx->threaded && !ctx->in_helper) {
        sleep_unlocked(ctx, timeout_ms);
        timeout_ms = 0;
        if (ctx->deferred_head)
            rov_ctx_deferred_deliver(ctx);
    }
    n = rov_watch_run(ctx->epfd, timeout_ms);
    /* A full batch: more may be ready than one call returns, and epoll
     * hands out level-triggered descriptors in the order they became ready,
     * the urgent set's own entry among them.  With 2,048 channels streaming
     * a link's netlink message waited 32 batches, 500-750 ms, behind them
     * (failover-scale.py, 1,024 bonded connections); the urgent set is
     * read at once instead. */
    if (__builtin_expect(n == EPOLL_BATCH, 0))
        rov_watch_run(ctx->urgent.fd, 0);
    if (__builtin_expect(ctx->timer_fired, 0))
        timer_work(ctx);
    if (__builtin_expect(ctx->ctl_ready, 0))
        rov_ctl_serve(ctx);
    return n;
}

/* The context's timer set for the earliest deadline, unless it is set for
 * one no later already. */
static void arm_timer(rov_context_t *ctx)
{
    uint64_t now = rov_now_ns(), due = rov_policies_due_ns(ctx);
    struct itimerspec its = {{0, 0}, {0, 0}};

    if (ctx->awaiting_hello && (due == 0 || ctx->hello_due_ns < due))
        due = ctx->hello_due_ns;
    if (ctx->connect_again_ns && (due == 0 || ctx->connect_again_ns < due))
        due = ctx->connect_again_ns;
    if (ctx->gap_check_ns && (due == 0 || ctx->gap_check_ns < due))
        due = ctx->gap_check_ns;
    if (ctx->stage_news)
        due = now; /* a stage's event waits */
    if (ctx->ack_head) {
        stamp_acks(ctx, now);
        if (due == 0 || ctx->ack_head->ack_deadline_ns < due)
            due = ctx->ack_head->ack_deadline_ns;
    }
    if (due == 0 || (ctx->timer_set_ns != 0 && ctx->timer_set_ns <= due))
        return;
    its.it_value.tv_sec = (time_t)(due / 1000000000ull);
    its.it_value.tv_nsec = (long)(due % 1000000000ull);
    timerfd_settime(ctx->timer.fd, TFD_TIMER_ABSTIME, &its, NULL);
    ctx->timer_set_ns = due;
}

/* Before a sleep: every rail's wake-up and the timer armed; ROV_ERR_BUSY if
 * a rail found work meanwhile. */
static rov_status_t arm_sleep(rov_context_t *ctx)
{
    rov_status_t st = ROV_OK;
    int events = ctx->events;

    for (int i = 0; i < ctx->nrails; i++)
        if (ctx->rails[i]->ops.arm && ctx->rails[i]->ops.arm(ctx->rails[i]) != ROV_OK)
            st = ROV_ERR_BUSY;
    if (st == ROV_OK && ctx->events == events)
        arm_timer(ctx);
    return ctx->events != events ? ROV_ERR_BUSY : st; /* an event ran: no sleep */
}

/* The epoll set and the failover engine's tick, when they are due
 * (progress() below): a call that polled no rail directly or may sleep, and
 * when EPOLL_GAP_NS have passed (the clock read on every
 * CLOCK_EVERY[_IDLE]-th call, where progress() calls this). */
static void epoll_check(rov_context_t *ctx, int timeout_ms, int polled)
{
    uint64_t now = rov_now_ns();

    if (timeout_ms == 0 && polled != 0 && now < ctx->epoll_due_ns)
        return;
    ctx->epoll_due_ns = now + EPOLL_GAP_NS;
    ctx->rails_cold = 0;
    for (int i = 0; i < ctx->nrails; i++)
        if (ctx->used_any - ctx->used[i] > COLD_POLLS)
            ctx->rails_cold |= 1u << i;
    if (__builtin_expect(ctx->helper_gone, 0) && !ctx->in_helper)
        rov_helper_respawn(ctx);
    if (__builtin_expect(ctx->awaiting_hello != 0, 0) && now >= ctx->hello_due_ns)
        rov_ctx_sweep_unauthed(ctx, now);
    if (__builtin_expect(ctx->connect_again_ns != 0, 0) && now >= ctx->connect_again_ns)
        rov_conn_connect_again(ctx, now);
    if (__builtin_expect(ctx->stage_news, 0))
        rov_stage_progress(ctx);
    engine_tick(ctx, now);
    if (ctx->frames || ctx->events || ctx->push_pending ||
        (timeout_ms != 0 && arm_sleep(ctx) != ROV_OK))
        timeout_ms = 0;
    dispatch(ctx, timeout_ms);
}

/* repoll: poll the rails directly first; a caller about to sleep right after
 * a call that found nothing skips that (the arm before the sleep catches
 * whatever came since: a system call less per sleep).  Inlined, so that
 * rov_progress() calls the rail itself (transport/compiler.h); what an idle
 * call does not need is out of line, so that its path is a few lines. */
static ROV_INLINE int progress(rov_context_t *ctx, int timeout_ms, bool repoll)
{
    int polled = 0;

    ctx->frames = 0;
    ctx->events = 0;
    ++ctx->poll_count;
    if (__builtin_expect(ctx->deferred_head != NULL, 0) && !ctx->in_helper)
        rov_ctx_deferred_deliver(ctx); /* before anything newer */
    for (int i = 0; repoll && i < ctx->nrails; i++) {
        int frames = ctx->frames;

        if (__builtin_expect((ctx->rails_cold >> i) & 1, 0) &&
            (ctx->poll_count & (COLD_EVERY - 1)) != 0)
            continue;
        polled += ctx->rails[i]->ops.progress(ctx->rails[i]);
        if (ctx->frames != frames)
            rov_ctx_rail_used(ctx, i);
    }
    if (__builtin_expect(ctx->push_pending != 0, 0)) {
        push_pending(ctx);
        polled++;
    }
    if (__builtin_expect(timeout_ms != 0 || polled == 0 ||
                         (ctx->poll_count &
                          (ctx->frames ? CLOCK_EVERY - 1 : CLOCK_EVERY_IDLE - 1)) == 0, 0))
        epoll_check(ctx, timeout_ms, polled);
    if (__builtin_expect(ctx->gets_ready, 0) && !ctx->in_helper)
        rov_ctx_gets_deliver(ctx);
    /* Acks owed only since this call cannot be due: no clock read for them
     * (the caller usually replies next, and the reply carries them). */
    if (__builtin_expect(ctx->ack_head != NULL, 0) &&
        (ctx->ack_head != ctx->ack_unstamped || ctx->ack_unstamped_poll != ctx->poll_count)) {
        flush_due_acks(ctx);
    }
    if (__builtin_expect(ctx->reap, 0) && !ctx->in_helper)
        reap(ctx); /* (never in a helper pass: a kept message's connection stays) */
    return ctx->frames;
}

ROV_HOT int rov_progress(rov_context_t *ctx)
{
    ROV_CTX_GUARD(ctx);
    return progress(ctx, 0, true);
}

int rov_ctx_helper_pass(rov_context_t *ctx)
{
    int r = 0;

    progress(ctx, 0, true);
    epoll_check(ctx, 0, 0);
    if (ctx->frames || ctx->events || ctx->deferred_head)
        r |= ROV_PASS_TOLD;
    if (ctx->frames || ctx->push_pending || arm_sleep(ctx) != ROV_OK)
        r |= ROV_PASS_BUSY;
    return r;
}

/* Work of the context's own that the next progress call does whatever the
 * rails report: sends waiting for room, closed objects to free, callbacks
 * of finished reads. */
static bool own_work(const rov_context_t *ctx)
{
    return ctx->push_pending || ctx->reap || ctx->gets_ready || ctx->deferred_head;
}

/* The spin of rov_context_wait(): whether a progress call would find work
 * (the rails' ready op; rail.h says why a spin must not simply progress). */
static bool spin_ready(rov_context_t *ctx)
{
    if (own_work(ctx))
        return true;
    for (int i = 0; i < ctx->nrails; i++)
        if (ctx->rails[i]->ops.ready(ctx->rails[i]))
            return true;
    return false;
}

int rov_context_wait(rov_context_t *ctx, int timeout_ms)
{
    ROV_CTX_GUARD(ctx);
    int n = rov_progress(ctx);

    if (n > 0 || ctx->events || timeout_ms == 0)
        return n;
    if (ctx->config.spin_ns != 0) {
        uint64_t spin = ctx->config.spin_ns, start = rov_now_ns();
        bool whole = timeout_ms > 0 && spin >= (uint64_t)timeout_ms * 1000000ull;

        if (whole)
            spin = (uint64_t)timeout_ms * 1000000ull;
        do
            n = spin_ready(ctx) ? rov_progress(ctx) : 0;
        while (n == 0 && !ctx->events && rov_now_ns() - start < spin);
        if (n > 0 || ctx->events || whole)
            return n;
    }
    return progress(ctx, timeout_ms, false); /* the timer wakes it for deadlines */
}

int rov_context_fd(const rov_context_t *ctx)
{
    return ctx->epfd;
}

rov_status_t rov_context_arm(rov_context_t *ctx)
{
    ROV_CTX_GUARD(ctx);
    if (own_work(ctx))
        return ROV_ERR_BUSY;
    return arm_sleep(ctx);
}

int rov_context_rail_count(const rov_context_t *ctx)
{
    return ctx->nrails;
}

void rov_context_limits(const rov_context_t *ctx, rov_limits_t *limits)
{
    int counted = ctx->config.bond ? ctx->nrails : ctx->nrails ? 1 : 0; /* the bond, or rail 0 */

    limits->max_msg = (size_t)ctx->config.max_msg;
    limits->eager_limit = (size_t)ctx->config.eager_limit;
    limits->conn_data_max = ROV_CONN_DATA_MAX;
    limits->get_max = rov_ctx_get_max(ctx);
    limits->bandwidth_mbps = 0;
    for (int i = 0; i < counted; i++)
        if (ctx->rails[i]->ops.link_mbps)
            limits->bandwidth_mbps += ctx->rails[i]->ops.link_mbps(ctx->rails[i]);
}

const char *rov_context_rail_name(const rov_context_t *ctx, int rail)
{
    return rail >= 0 && rail < ctx->nrails ? ctx->rails[rail]->spec->name : "none";
}

/* The job the context belongs to (include/railover/railover.h): the one
 * given (an empty one: a fresh UUID), else RAILOVER_JOBID, else a fresh
 * UUID; its rank: the one given with the job, else RAILOVER_RANK, else the
 * pid.  The configuration's values were checked when it was read. */
static rov_status_t set_job(rov_context_t *ctx, const rov_context_params_t *params)
{
    const char *job = params->job ? params->job : ctx->config.jobid;

    if (params->job && params->job[0] && !rov_jobid_ok(params->job)) {
        rov_error("core", "job (rov_context_params_t)='%.80s%s' is not a job id: 1 to %d "
                  "characters of A-Z a-z 0-9 . _ -, not starting with '.'",
                  params->job, strlen(params->job) > 80 ? "..." : "", ROV_JOB_MAX);
        return ROV_ERR_INVAL;
    }
    if (job[0]) {
        snprintf(ctx->job, sizeof(ctx->job), "%s", job);
    } else {
        uint8_t u[16];

        if (rov_auth_random(u, sizeof(u)) != ROV_OK)
            return ROV_ERR_IO;
        u[6] = (uint8_t)((u[6] & 0x0f) | 0x40); /* version 4 (random), RFC 9562 */
        u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
        snprintf(ctx->job, sizeof(ctx->job),
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
                 u[13], u[14], u[15]);
        rov_info("core", "job id %s (generated; RAILOVER_JOBID names the job)", ctx->job);
    }
    if (params->job && params->rank >= 0)
        ctx->rank = params->rank;
    else if (ctx->config.rank >= 0)
        ctx->rank = ctx->config.rank;
    else
        ctx->rank = getpid();
    return ROV_OK;
}

const char *rov_context_jobid(const rov_context_t *ctx)
{
    return ctx->job;
}

long rov_context_rank(const rov_context_t *ctx)
{
    return ctx->rank;
}

/* Open every rail of RAILOVER_RAILS, in order (the index is the rail's
 * identity on the wire); on a failure, close those opened. */
rov_status_t rov_ctx_open_rails(rov_context_t *ctx)
{
    const struct rov_rail_env env = {
        .default_if = ctx->config.tcp_if,
        .keepalive_ns = ctx->config.keepalive_ns,
        .stall_ns = ctx->config.failover ? ctx->config.failover_timeout_ns : 0,
    };
    rov_status_t st;

    for (unsigned i = 0; i < ctx->config.nrails; i++) {
        const struct rov_rail_spec *spec = &ctx->config.rails[i];
        const struct rov_rail_ops *ops = rov_rail_lookup(spec->kind);
        struct rov_rail *rail;

        if (!ops) {
            char kinds[128];

            rov_rail_kinds(kinds, sizeof(kinds));
            rov_error("core", "rail '%s' in RAILOVER_RAILS is not available in this build "
                      "(available: %s)", spec->name, kinds);
            st = ROV_ERR_NOT_FOUND;
            goto err;
        }
        st = ops->open(ctx, spec, &env,
                       ops->settings ? rov_settings_of(&ctx->config, ops->settings) : NULL,
                       &rail);
        if (st != ROV_OK)
            goto err; /* the rail logged why */
        rail->ops = *ops;
        rail->ctx = ctx;
        rail->spec = spec;
        rail->index = (int)i;
        rail->max_frame = ROV_WIRE_HDR_LEN + ctx->config.max_msg;
        /* A read is no larger than a message (a rail that reads by
         * message receives it as one frame). */
        if (rail->get_max > ctx->config.max_msg)
            rail->get_max = ctx->config.max_msg;
        ctx->rails[ctx->nrails++] = rail;
        rov_debug("core", "rail %u: %s open", i, spec->name);
    }
    return ROV_OK;
err:
    rov_ctx_close_rails(ctx);
    return st;
}

void rov_ctx_close_rails(rov_context_t *ctx)
{
    while (ctx->nrails > 0) {
        struct rov_rail *rail = ctx->rails[--ctx->nrails];

        ctx->rails[ctx->nrails] = NULL;
        rail->ops.close(rail);
    }
}

rov_status_t rov_context_create(const rov_context_params_t *params, rov_context_t **ctx_p)
{
    rov_context_t *ctx;
    rov_config_t *envcfg = NULL;
    rov_status_t st;

    if (!params || !params->recv_cb)
        return ROV_ERR_INVAL;
    ctx = rov_zalloc_lines(rov_policy_ctx_size());
    if (!ctx)
        return ROV_ERR_NOMEM;
    if (params->config) {
        ctx->config = *params->config;
    } else {
        st = rov_config_read(NULL, 0, &envcfg);
        if (st != ROV_OK)
            goto err_free;
        ctx->config = *envcfg;
        rov_config_free(envcfg);
    }
    st = set_job(ctx, params);
    if (st != ROV_OK)
        goto err_free;
    rov_log_set_levels(&ctx->config.log);
    ctx->recv_cb = params->recv_cb;
    ctx->event_cb = params->event_cb;
    ctx->arg = params->arg;
    ctx->next_conn_id = 1;
    if (rov_auth_random(ctx->ep_id, sizeof(ctx->ep_id)) != ROV_OK ||
        rov_auth_random(ctx->ep_key, sizeof(ctx->ep_key)) != ROV_OK) {
        st = ROV_ERR_IO;
        goto err_free;
    }
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (ctx->epfd < 0) {
        rov_error("core", "epoll_create1: %m");
        st = ROV_ERR_IO;
        goto err_free;
    }
    ctx->urgent.fd = epoll_create1(EPOLL_CLOEXEC);
    ctx->urgent.cb = urgent_cb;
    if (ctx->urgent.fd < 0 || rov_ctx_watch(ctx, &ctx->urgent, EPOLLIN) != ROV_OK) {
        rov_error("core", "epoll_create1: %m");
        st = ROV_ERR_IO;
        goto err_urgent;
    }
    ctx->timer.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ctx->timer.cb = timer_cb;
    if (ctx->timer.fd < 0) {
        rov_error("core", "timerfd_create: %m");
        st = ROV_ERR_IO;
        goto err_urgent;
    }
    st = rov_ctx_watch_urgent(ctx, &ctx->timer, EPOLLIN);
    if (st != ROV_OK)
        goto err_timer;
    rov_fault_parse(ctx->config.fault, &ctx->fault, NULL, 0); /* validated by config */
    ctx->fault_armed = ctx->fault.rail >= 0;
    if (ctx->fault_armed)
        rov_warn("core", "fault injection armed: RAILOVER_FAULT=%s", ctx->config.fault);
    rov_policies_ctx_init(ctx);
    window_init(ctx);
    st = rov_ctx_open_rails(ctx);
    if (st != ROV_OK)
        goto err_timer;
    rov_ctl_open(ctx);
    rov_policies_ctx_open(ctx);
    rov_helper_start(ctx);
    *ctx_p = ctx;
    return ROV_OK;

err_timer:
    close(ctx->timer.fd);
err_urgent:
    if (ctx->urgent.fd >= 0)
        close(ctx->urgent.fd);
    close(ctx->epfd);
err_free:
    free(ctx);
    return st;
}

void rov_context_destroy(rov_context_t *ctx)
{
    if (!ctx)
        return;
    rov_helper_stop(ctx); /* first: nothing runs beside this any more */
    rov_policies_ctx_fini(ctx);
    rov_ctl_close(ctx);
    while (ctx->conns) {
        struct rov_conn *c = ctx->conns;

        if (c->state != ROV_CONN_DEAD && c->state != ROV_CONN_FAILED)
            rov_conn_abort(c, ROV_ERR_CANCELED);
        rov_conn_free(c);
    }
    while (ctx->chans)
        rov_ctx_chan_close(ctx->chans);
    if (ctx->endpoint)
        rov_endpoint_destroy(ctx->endpoint);
    rov_ctx_close_rails(ctx);
    rov_ctx_gets_deliver(ctx); /* reads the closes ended: their callbacks, as for sends */
    close(ctx->timer.fd);
    close(ctx->urgent.fd);
    close(ctx->epfd);
    rov_msg_cache_fini(&ctx->msg_cache);
    explicit_bzero(ctx->ended, sizeof(ctx->ended));
    explicit_bzero(ctx->ep_key, sizeof(ctx->ep_key));
    free(ctx);
}

/* Endpoint ------------------------------------------------------------------ */

rov_status_t rov_endpoint_listen(rov_endpoint_t *ep)
{
    rov_context_t *ctx = ep->ctx;
    struct rov_wire_addr wa, before;
    uint8_t addrs[ROV_MAX_RAILS][ROV_RAIL_ADDR_MAX], old[sizeof(ep->blob)];
    const char *why;
    rov_status_t st;
    bool hint;

    /* A reopen: each rail may listen where it did (rail.h, listen_hint). */
    memcpy(old, ep->blob, ep->blob_len);
    hint = ep->blob_len && rov_wire_addr_decode(old, ep->blob_len, &before, &why) == ROV_OK;
    for (int i = 0; hint && i < ctx->nrails; i++) {
        for (unsigned k = 0; k < before.nrails; k++) {
            if ((int)before.rails[k].index == i &&
                strcmp(before.rails[k].kind, ctx->rails[i]->ops.name) == 0) {
                ctx->rails[i]->listen_hint = before.rails[k].addr;
                ctx->rails[i]->listen_hint_len = before.rails[k].addr_len;
            }
        }
    }
    memcpy(wa.ep_id, ctx->ep_id, ROV_EP_ID_LEN);
    memset(wa.key, 0, ROV_KEY_LEN);
    wa.nrails = (unsigned)ctx->nrails;
    wa.gen = ctx->rails_gen;
    for (int i = 0; i < ctx->nrails; i++) {
        struct rov_rail *rail = ctx->rails[i];
        size_t len = ROV_RAIL_ADDR_MAX;

        st = rail->ops.listen(rail, addrs[i], &len);
        rail->listen_hint = NULL; /* (pointed into old) */
        rail->listen_hint_len = 0;
        if (st != ROV_OK) {
            for (int k = i + 1; k < ctx->nrails; k++)
                ctx->rails[k]->listen_hint = NULL;
            while (i-- > 0)
                ctx->rails[i]->ops.unlisten(ctx->rails[i]);
            return st;
        }
        wa.rails[i].index = (unsigned)i;
        snprintf(wa.rails[i].kind, sizeof(wa.rails[i].kind), "%s", rail->ops.name);
        wa.rails[i].addr = addrs[i];
        wa.rails[i].addr_len = len;
    }
    ep->blob_len = rov_wire_addr_encode(ep->pub_blob, sizeof(ep->pub_blob), &wa);
    memcpy(wa.key, ctx->ep_key, ROV_KEY_LEN);
    rov_wire_addr_encode(ep->blob, sizeof(ep->blob), &wa);
    rov_policies_endpoint_address(ctx, ep->blob, ep->blob_len);
    return ROV_OK;
}

rov_status_t rov_endpoint_create(rov_context_t *ctx, rov_endpoint_t **ep_p)
{
    ROV_CTX_GUARD(ctx);
    rov_endpoint_t *ep;
    rov_status_t st;

    if (ctx->endpoint) {
        rov_error("core", "a context has at most one endpoint");
        return ROV_ERR_BUSY;
    }
    ep = calloc(1, sizeof(*ep));
    if (!ep)
        return ROV_ERR_NOMEM;
    ep->ctx = ctx;
    st = rov_endpoint_listen(ep);
    if (st != ROV_OK) {
        free(ep);
        return st;
    }
    ctx->endpoint = ep;
    *ep_p = ep;
    return ROV_OK;
}

rov_status_t rov_endpoint_address(const rov_endpoint_t *ep, void *buf, size_t *len_p)
{
    ROV_CTX_GUARD((rov_context_t *)ep->ctx);
    size_t cap = *len_p;

    *len_p = ep->blob_len;
    if (cap < ep->blob_len)
        return ROV_ERR_MSGSIZE;
    memcpy(buf, ep->blob, ep->blob_len);
    return ROV_OK;
}

void rov_endpoint_destroy(rov_endpoint_t *ep)
{
    ROV_CTX_GUARD((rov_context_t *)ep->ctx);
    rov_context_t *ctx = ep->ctx;

    for (int i = 0; i < ctx->nrails; i++)
        ctx->rails[i]->ops.unlisten(ctx->rails[i]);
    ctx->endpoint = NULL;
    free(ep);
}

