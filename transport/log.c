/*
 * Logging: the levels (RAILOVER_LOG's per subsystem, raised by the host
 * program's hook), the cold check of a line's subsystem, and the two sinks:
 * the hook, else stderr in the library's own line format.
 */
#include "transport/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Atomic int rov_log_level = ROV_LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

/* Every tag the library logs under (the subsys argument of rov_log() and of
 * the helpers that pass one on: rov_state_change(), rov_net_resolve()).
 * RAILOVER_LOG's overrides name one of these: a new tag goes here. */
static const char *const tags[] = {
    "auth", "bond", "ccp", "config", "conn", "core", "ctl", "failover", "fault",
    "helper", "loop", "netlink", "stage", "tcp", "ucx", "verbs",
};
#define NTAGS (sizeof(tags) / sizeof(tags[0]))
_Static_assert(NTAGS <= ROV_LOG_OVERRIDES_MAX, "an override per tag must fit");

/* Guards the state below.  Held while a line is written, so that lines do
 * not interleave, a hook runs one line at a time, and a hook replaced by
 * rov_log_set_hook() is not running any more when that returns. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rov_log_levels levels = {.dflt = ROV_LOG_WARN};
static rov_log_hook_t hook;
static void *hook_arg;
static int hook_level = ROV_LOG_OFF;
/* Set while this thread runs the hook (and so holds log_lock): a line the
 * hook causes goes to stderr instead of deadlocking. */
static __thread bool in_hook;

/* A child of fork() has only the forking thread: a lock another thread held
 * at the fork is never released there. */
static void log_atfork_child(void)
{
    pthread_mutex_init(&log_lock, NULL);
}

__attribute__((constructor)) static void log_init(void)
{
    pthread_atfork(NULL, NULL, log_atfork_child);
}

static int clamp_level(int level)
{
    return level < ROV_LOG_OFF ? ROV_LOG_OFF : level > ROV_LOG_TRACE ? ROV_LOG_TRACE : level;
}

const char *rov_log_level_str(rov_log_level_t level)
{
    if (level == ROV_LOG_OFF)
        return "off";
    return level >= 0 && level <= ROV_LOG_TRACE ? level_names[level] : "?";
}

static int level_of(const char *s, size_t len)
{
    for (int i = 0; i <= ROV_LOG_TRACE; i++)
        if (strlen(level_names[i]) == len && strncmp(s, level_names[i], len) == 0)
            return i;
    return -1;
}

static int tag_of(const char *s, size_t len)
{
    for (size_t i = 0; i < NTAGS; i++)
        if (strlen(tags[i]) == len && strncmp(s, tags[i], len) == 0)
            return (int)i;
    return -1;
}

void rov_log_levels_init(struct rov_log_levels *l, int level)
{
    memset(l, 0, sizeof(*l));
    l->dflt = (signed char)clamp_level(level);
}

rov_status_t rov_log_levels_parse(const char *spec, struct rov_log_levels *levels_p, char *why,
                                  size_t why_len)
{
    struct rov_log_levels l;
    bool have_default = false;
    const char *p = spec;

    rov_log_levels_init(&l, ROV_LOG_WARN);
    for (;;) {
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len);
        int tag = -1, level;

        if (!eq) {
            level = level_of(p, len);
            if (level < 0) {
                snprintf(why, why_len, "'%.*s' is not a log level", (int)len, p);
                return ROV_ERR_INVAL;
            }
            if (have_default) {
                snprintf(why, why_len, "'%.*s': a second level for every subsystem", (int)len,
                         p);
                return ROV_ERR_INVAL;
            }
            have_default = true;
            l.dflt = (signed char)level;
        } else {
            int n = 0;

            tag = tag_of(p, (size_t)(eq - p));
            if (tag < 0) {
                n = snprintf(why, why_len, "'%.*s' is not a subsystem (", (int)(eq - p), p);
                for (size_t i = 0; i < NTAGS && n >= 0 && (size_t)n < why_len; i++)
                    n += snprintf(why + n, why_len - (size_t)n, "%s%s", i ? ", " : "", tags[i]);
                if (n >= 0 && (size_t)n < why_len)
                    snprintf(why + n, why_len - (size_t)n, ")");
                return ROV_ERR_INVAL;
            }
            level = level_of(eq + 1, len - (size_t)(eq + 1 - p));
            if (level < 0) {
                snprintf(why, why_len, "%s: '%.*s' is not a log level", tags[tag],
                         (int)(len - (size_t)(eq + 1 - p)), eq + 1);
                return ROV_ERR_INVAL;
            }
            for (unsigned i = 0; i < l.n; i++)
                if (l.over[i].tag == tag) {
                    snprintf(why, why_len, "subsystem %s named twice", tags[tag]);
                    return ROV_ERR_INVAL;
                }
            l.over[l.n].tag = (unsigned char)tag;
            l.over[l.n].level = (signed char)level;
            l.n++;
        }
        if (!p[len])
            break;
        p += len + 1;
    }
    *levels_p = l;
    return ROV_OK;
}

void rov_log_levels_print(const struct rov_log_levels *l, FILE *f)
{
    fputs(rov_log_level_str(l->dflt), f);
    for (unsigned i = 0; i < l->n; i++)
        fprintf(f, ",%s=%s", tags[l->over[i].tag], rov_log_level_str(l->over[i].level));
}

/* With log_lock held. */
static void update_max(void)
{
    int max = levels.dflt > hook_level ? levels.dflt : hook_level;

    for (unsigned i = 0; i < levels.n; i++)
        if (levels.over[i].level > max)
            max = levels.over[i].level;
    atomic_store_explicit(&rov_log_level, max, memory_order_relaxed);
}

/* With log_lock held: the level a tag logs at. */
static int tag_level(const char *tag)
{
    int level = levels.dflt;

    for (unsigned i = 0; i < levels.n; i++)
        if (strcmp(tag, tags[levels.over[i].tag]) == 0) {
            level = levels.over[i].level;
            break;
        }
    return level > hook_level ? level : hook_level;
}

void rov_log_set_levels(const struct rov_log_levels *l)
{
    pthread_mutex_lock(&log_lock);
    levels = *l;
    update_max();
    pthread_mutex_unlock(&log_lock);
}

void rov_log_set_level(int level)
{
    struct rov_log_levels l;

    rov_log_levels_init(&l, level);
    rov_log_set_levels(&l);
}

void rov_log_set_hook(rov_log_hook_t h, void *arg, rov_log_level_t level)
{
    pthread_mutex_lock(&log_lock);
    hook = h;
    hook_arg = h ? arg : NULL;
    hook_level = h ? clamp_level(level) : ROV_LOG_OFF;
    update_max();
    pthread_mutex_unlock(&log_lock);
}

int rov_log_on(int level, const char *tag)
{
    bool locked = !in_hook; /* inside the hook, this thread holds the lock */
    int on;

    if (locked)
        pthread_mutex_lock(&log_lock);
    on = level <= tag_level(tag);
    if (locked)
        pthread_mutex_unlock(&log_lock);
    return on;
}

static void write_stderr(const struct timespec *ts, int level, const char *subsys,
                         const char *msg)
{
    char line[1024];
    int n;

    n = snprintf(line, sizeof(line), "[%lld.%06ld] railover[%d] %s %s: %s", (long long)ts->tv_sec,
                 ts->tv_nsec / 1000, (int)getpid(), level_names[level], subsys, msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    /* One write per line, so lines of several processes do not interleave. */
    (void)!write(STDERR_FILENO, line, (size_t)n);
}

void rov_log_emit(int level, const char *subsys, const char *fmt, ...)
{
    int saved_errno = errno; /* for %m */
    bool locked = !in_hook;  /* inside the hook, this thread holds the lock */
    char msg[1024];
    struct timespec ts;
    va_list ap;

    if (level < ROV_LOG_ERROR || level > ROV_LOG_TRACE)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (locked)
        pthread_mutex_lock(&log_lock);
    if (level <= tag_level(subsys)) {
        errno = saved_errno;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (hook && locked) {
            in_hook = true;
            hook(hook_arg, (rov_log_level_t)level, subsys, msg);
            in_hook = false;
        } else {
            write_stderr(&ts, level, subsys, msg);
        }
    }
    if (locked)
        pthread_mutex_unlock(&log_lock);
    errno = saved_errno;
}
