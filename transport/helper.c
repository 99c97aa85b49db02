/*
 * The progress helper: a thread per context that advances checkpoint stages
 * and answers control requests while the application computes and calls
 * nothing (RAILOVER_PROGRESS_THREAD, on by default; railover.h, "Threading").
 *
 * The application's thread stays the owner.  Every public call holds the
 * context's lock (core.h, ROV_CTX_GUARD); the helper takes it for a pass of
 * the progress engine only:
 *   - when a control request is waiting (the control socket's own epoll
 *     set, control.c), or a stage was requested from another thread
 *     (rov_helper_kick());
 *   - during a stage (quiescing, quiesced, closed, reopening, or a
 *     connection's that its peer began), whenever the context's descriptors
 *     are ready, and only while the application is
 *     not progressing itself (its progress count did not move since the
 *     helper's last pass; otherwise the helper looks again HELPER_AWAY_MS
 *     later).
 * A pass never runs an application callback: a message it receives is
 * acknowledged and its copy kept, an event or a send's completion is kept,
 * a read's completion waits, and the application's next progress call delivers them first, in
 * order (rov_ctx_deferred_deliver()).  A pass frees nothing (no reap), so a
 * kept message's connection outlives it.  An application asleep in
 * rov_context_wait() is woken (app_wake) when a pass kept something.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "transport/control.h"
#include "transport/core.h"
#include "transport/log.h"

/* The application progressed since the last pass: look again this much later. */
#define HELPER_AWAY_MS 2
/* Longest sleep during a stage (deadlines are also in the context's timer). */
#define HELPER_STAGE_MS 100

/* What a pass kept for the application: a message, an event, or a send's
 * completion. */
enum kept_kind { KEPT_RECV, KEPT_EVENT, KEPT_SEND };

struct rov_deferred {
    struct rov_deferred *next;
    enum kept_kind kind;
    union {
        struct {                 /* KEPT_EVENT */
            rov_event_t ev;
            char reason[128];    /* ev.reason's text, which may not outlive the pass */
        } event;
        struct {                 /* KEPT_SEND */
            rov_send_cb_t cb;
            void *arg;
            rov_status_t status;
        } send;
        struct {                 /* KEPT_RECV: the message's copy follows */
            struct rov_conn *conn;
            uint32_t tag;
            size_t len;
        } recv;
    } u;
    uint8_t data[];
};

struct rov_helper {
    pthread_t thread;
    int wake;          /* eventfd: the helper, for a kick or to stop */
    bool stop;         /* under the context's lock */
    bool renew;        /* under the lock: end, the owner starts another (rov_helper_renew()) */
    uint64_t passes;   /* under the lock */
    uint64_t kept;     /* messages and events kept for the application */
};

static void efd_drain(int fd)
{
    uint64_t v;

    (void)!read(fd, &v, sizeof(v));
}

static void efd_post(int fd)
{
    uint64_t one = 1;

    (void)!write(fd, &one, sizeof(one));
}

static void keep(rov_context_t *ctx, struct rov_deferred *d)
{
    d->next = NULL;
    if (ctx->deferred_tail)
        ctx->deferred_tail->next = d;
    else
        ctx->deferred_head = d;
    ctx->deferred_tail = d;
    ctx->helper->kept++;
}

/* A new entry of `kind` with `extra` bytes after it; NULL (said) without
 * memory, and the caller then calls the application from here rather than
 * lose what it had to tell. */
static struct rov_deferred *kept_new(enum kept_kind kind, size_t extra)
{
    struct rov_deferred *d = calloc(1, sizeof(*d) + extra);

    if (!d)
        rov_error("helper", "out of memory keeping a %s; calling the application from the "
                  "helper", kind == KEPT_RECV ? "message" : kind == KEPT_EVENT ? "event"
                                                                        : "send completion");
    else
        d->kind = kind;
    return d;
}

void rov_ctx_defer_recv(struct rov_conn *conn, uint32_t tag, const void *data, size_t len)
{
    rov_context_t *ctx = conn->ctx;
    struct rov_deferred *d = kept_new(KEPT_RECV, len);

    if (!d) {
        ctx->recv_cb(ctx->arg, conn, tag, data, len);
        return;
    }
    d->u.recv.conn = conn;
    d->u.recv.tag = tag;
    d->u.recv.len = len;
    memcpy(d->data, data, len);
    keep(ctx, d);
}

void rov_ctx_defer_event(rov_context_t *ctx, const rov_event_t *ev)
{
    struct rov_deferred *d = kept_new(KEPT_EVENT, 0);

    if (!d) {
        if (ctx->event_cb)
            ctx->event_cb(ctx->arg, ev);
        return;
    }
    d->u.event.ev = *ev;
    if (ev->reason) {
        snprintf(d->u.event.reason, sizeof(d->u.event.reason), "%s", ev->reason);
        d->u.event.ev.reason = d->u.event.reason;
    }
    keep(ctx, d);
}

void rov_ctx_defer_send_cb(rov_context_t *ctx, rov_send_cb_t cb, void *arg, rov_status_t status)
{
    struct rov_deferred *d = kept_new(KEPT_SEND, 0);

    if (!d) {
        cb(arg, status);
        return;
    }
    d->u.send.cb = cb;
    d->u.send.arg = arg;
    d->u.send.status = status;
    keep(ctx, d);
}

void rov_ctx_deferred_deliver(rov_context_t *ctx)
{
    while (ctx->deferred_head) {
        struct rov_deferred *d = ctx->deferred_head;

        ctx->deferred_head = d->next;
        if (!ctx->deferred_head)
            ctx->deferred_tail = NULL;
        switch (d->kind) {
        case KEPT_EVENT:
            ctx->events++;
            if (ctx->event_cb)
                ctx->event_cb(ctx->arg, &d->u.event.ev);
            break;
        case KEPT_SEND:
            ctx->events++;
            d->u.send.cb(d->u.send.arg, d->u.send.status);
            break;
        case KEPT_RECV:
            ctx->frames++;
            ctx->recv_cb(ctx->arg, d->u.recv.conn, d->u.recv.tag, d->data, d->u.recv.len);
            break;
        }
        free(d);
    }
}

/* At destroy: kept messages and events go; kept send completions are
 * called, as destroy calls those of the sends it cancels (railover.h). */
static void deferred_free(rov_context_t *ctx)
{
    while (ctx->deferred_head) {
        struct rov_deferred *d = ctx->deferred_head;

        ctx->deferred_head = d->next;
        if (d->kind == KEPT_SEND)
            d->u.send.cb(d->u.send.arg, d->u.send.status);
        free(d);
    }
    ctx->deferred_tail = NULL;
}

void rov_helper_kick(rov_context_t *ctx)
{
    if (ctx->helper)
        efd_post(ctx->helper->wake);
}

/* A stage of this context, or a connection in one (its peer quiesced). */
static bool driving(const rov_context_t *ctx)
{
    return ctx->stage != ROV_CONTEXT_RUNNING || ctx->stage_news ||
           ctx->conn_now[ROV_CONN_DRAINING] || ctx->conn_now[ROV_CONN_QUIESCED] ||
           ctx->conn_now[ROV_CONN_REOPENING];
}

static void *helper_main(void *arg)
{
    rov_context_t *ctx = arg;
    struct rov_helper *h = ctx->helper;
    unsigned seen = 0;
    bool drive = false, away = true, busy = false;
    int ctl_fd;

    pthread_mutex_lock(&ctx->lock);
    ctl_fd = rov_ctl_fd(ctx);
    pthread_mutex_unlock(&ctx->lock);
    for (;;) {
        struct pollfd p[3] = {
            {.fd = h->wake, .events = POLLIN},
            {.fd = ctl_fd, .events = POLLIN},
            {.fd = ctx->epfd, .events = POLLIN},
        };
        nfds_t n = drive && away ? 3 : 2;
        int timeout = busy ? 0 : !drive ? -1 : away ? HELPER_STAGE_MS : HELPER_AWAY_MS;
        bool ctl;

        if (poll(p, n, timeout) < 0 && errno != EINTR)
            rov_warn("helper", "poll: %m");
        if (p[0].revents & POLLIN)
            efd_drain(h->wake);
        ctl = (p[1].revents & POLLIN) != 0;
        pthread_mutex_lock(&ctx->lock);
        if (h->stop || h->renew) {
            if (h->renew)
                ctx->helper_gone = true; /* the owner's progress starts another */
            pthread_mutex_unlock(&ctx->lock);
            break;
        }
        /* The application progressed since the last pass, or sleeps in
         * rov_context_wait() (it wakes for the same descriptors): it does
         * the work itself (a control request is served at once all the same). */
        away = ctx->poll_count == seen && !ctx->app_sleeping;
        busy = false;
        if (away || ctl || !drive) {
            int r;

            ctx->in_helper = true;
            r = rov_ctx_helper_pass(ctx);
            ctx->in_helper = false;
            h->passes++;
            if (r & ROV_PASS_TOLD)
                efd_post(ctx->app_wake);
            busy = (r & ROV_PASS_BUSY) != 0;
            away = true;
        }
        seen = ctx->poll_count;
        drive = driving(ctx);
        ctl_fd = rov_ctl_fd(ctx); /* (ccp/ closes and opens it around a checkpoint) */
        pthread_mutex_unlock(&ctx->lock);
    }
    return NULL;
}

/* The helper's thread, with every signal blocked (signals are the
 * application's). */
static int spawn(rov_context_t *ctx)
{
    sigset_t all, old;
    int err;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    err = pthread_create(&ctx->helper->thread, NULL, helper_main, ctx);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!err)
        pthread_setname_np(ctx->helper->thread, "railover-help");
    return err;
}

void rov_helper_renew(rov_context_t *ctx)
{
    if (ctx->helper) {
        ctx->helper->renew = true;
        efd_post(ctx->helper->wake);
    }
}

bool rov_helper_renewing(const rov_context_t *ctx)
{
    return ctx->helper && ctx->helper->renew;
}

void rov_helper_respawn(rov_context_t *ctx)
{
    struct rov_helper *h = ctx->helper;
    int err;

    ctx->helper_gone = false;
    pthread_join(h->thread, NULL); /* (it has let go of the lock: it is ending) */
    h->renew = false;
    err = spawn(ctx);
    if (err) {
        errno = err;
        rov_warn("helper", "cannot start the progress helper again (%m): stages advance only "
                 "inside the application's progress calls");
        close(h->wake);
        free(h);
        ctx->helper = NULL; /* (threaded stays: the lock is still taken) */
        return;
    }
    rov_debug("helper", "progress helper started again by the application's thread");
}

static void lock_init(rov_context_t *ctx)
{
    pthread_mutexattr_t ma;

    /* Recursive: a callback that the application's progress runs may call
     * rov_conn_send(), and the control commands call the public stage
     * calls, each of which takes the lock again. */
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&ctx->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    ctx->app_wake = -1;
}

void rov_helper_start(rov_context_t *ctx)
{
    struct rov_helper *h;
    int err;

    lock_init(ctx); /* (destroyed by rov_helper_stop(), helper or not) */
    if (!ctx->config.progress_thread)
        return;
    h = calloc(1, sizeof(*h));
    if (!h)
        goto err;
    h->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ctx->app_wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->wake < 0 || ctx->app_wake < 0)
        goto err;
    ctx->helper = h;
    ctx->threaded = true;
    err = spawn(ctx);
    if (err) {
        errno = err;
        ctx->helper = NULL;
        ctx->threaded = false;
        goto err;
    }
    return;
err:
    rov_warn("helper", "cannot start the progress helper (%m): stages advance only inside "
             "the application's progress calls");
    if (h && h->wake >= 0)
        close(h->wake);
    if (ctx->app_wake >= 0)
        close(ctx->app_wake);
    ctx->app_wake = -1;
    free(h);
}

void rov_helper_stop(rov_context_t *ctx)
{
    struct rov_helper *h = ctx->helper;

    if (h) {
        pthread_mutex_lock(&ctx->lock);
        h->stop = true;
        pthread_mutex_unlock(&ctx->lock);
        efd_post(h->wake);
        pthread_join(h->thread, NULL);
        close(h->wake);
        close(ctx->app_wake);
        ctx->app_wake = -1;
        ctx->helper = NULL;
        ctx->threaded = false;
        free(h);
    }
    deferred_free(ctx);
    pthread_mutex_destroy(&ctx->lock);
}

void rov_helper_status(const rov_context_t *ctx, FILE *out)
{
    if (ctx->helper)
        fprintf(out, " helper=on helper_passes=%llu helper_kept=%llu",
                (unsigned long long)ctx->helper->passes, (unsigned long long)ctx->helper->kept);
    else
        fprintf(out, " helper=off");
}
