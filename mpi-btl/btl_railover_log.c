/*
 * Railover's log lines through Open MPI's output: the hook the component
 * installs at init and removes at close (rov_log_set_hook()), the levels
 * its verbosity asks of Railover, and the lines of threads that may not
 * call opal_output, kept until the next progress.
 *
 * Each line goes to the component's stream (mca_btl_railover_component.verbose)
 * with opal_output(), so it gets Open MPI's "[host:pid] " prefix and
 * follows its output redirection:
 *   [host:pid] [<seconds>.<microseconds>] railover <level> <tag>: <message>
 * Railover's own filter decides which lines come (RAILOVER_LOG, raised by
 * the verbosity): the stream's verbosity filters none of them again.
 *
 * A line of another thread (Railover's progress helper) while MPI is not
 * thread-safe cannot go through opal_output(): an error or a warning is
 * written to stderr at once, with the same prefix (it matters most when
 * the rank no longer calls MPI: a job stuck in computation), the others
 * wait for the next progress of MPI's thread, which sends them before a
 * line of its own.
 */
#include "opal_config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "opal/mca/base/base.h"
#include "opal/threads/thread_usage.h"
#include "opal/util/output.h"

#include "btl_railover.h"

#define LINE_MAX_LEN 1100 /* Railover's message (under 1024) and our prefix */
#define QUEUED_MAX 256    /* lines of other threads waiting for progress */

static bool installed;
static int output = -1;
static char host[64]; /* opal_output()'s prefix, for the lines written to stderr */
static pthread_t owner; /* the thread that initialized the component: MPI's */

/* Lines logged while MPI is not thread-safe by a thread other than the
 * owner (Railover's progress helper): opal_output() takes its lock only
 * when opal_using_threads(), so they wait here for a thread inside MPI. */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static char *queued[QUEUED_MAX];
static int nqueued;
static unsigned dropped;
atomic_int mca_btl_railover_log_pending;

rov_log_level_t mca_btl_railover_log_level(int verbosity)
{
    if (verbosity >= MCA_BASE_VERBOSE_MAX)
        return ROV_LOG_TRACE;
    if (verbosity >= MCA_BASE_VERBOSE_DEBUG)
        return ROV_LOG_DEBUG;
    if (verbosity >= MCA_BASE_VERBOSE_INFO)
        return ROV_LOG_INFO;
    return ROV_LOG_OFF; /* RAILOVER_LOG's alone: errors and warnings by default */
}

static void log_hook(void *arg, rov_log_level_t level, const char *tag, const char *msg)
{
    char line[LINE_MAX_LEN];
    struct timespec ts;
    char *copy;

    (void) arg;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(line, sizeof(line), "[%lld.%06ld] railover %s %s: %s", (long long) ts.tv_sec,
             ts.tv_nsec / 1000, rov_log_level_str(level), tag, msg);
    if (opal_using_threads() || pthread_equal(pthread_self(), owner)) {
        if (atomic_load_explicit(&mca_btl_railover_log_pending, memory_order_relaxed))
            mca_btl_railover_log_flush(); /* the helper's earlier lines first */
        opal_output(output, "%s", line);
        return;
    }
    if (level <= ROV_LOG_WARN) {
        char out[LINE_MAX_LEN + sizeof(host) + 32];
        int n = snprintf(out, sizeof(out), "[%s:%ld] %s\n", host, (long) getpid(), line);

        if (n > 0 && write(STDERR_FILENO, out, (size_t) n < sizeof(out) ? (size_t) n
                                                                        : sizeof(out) - 1) < 0) {
            /* nowhere else to say it */
        }
        return;
    }
    copy = strdup(line);
    pthread_mutex_lock(&queue_lock);
    if (NULL != copy && nqueued < QUEUED_MAX) {
        queued[nqueued++] = copy;
        copy = NULL;
    } else {
        dropped++;
    }
    atomic_store_explicit(&mca_btl_railover_log_pending, 1, memory_order_relaxed);
    pthread_mutex_unlock(&queue_lock);
    free(copy);
}

void mca_btl_railover_log_flush(void)
{
    char *lines[QUEUED_MAX];
    unsigned lost;
    int n;

    pthread_mutex_lock(&queue_lock);
    n = nqueued;
    memcpy(lines, queued, (size_t) n * sizeof(lines[0]));
    nqueued = 0;
    lost = dropped;
    dropped = 0;
    atomic_store_explicit(&mca_btl_railover_log_pending, 0, memory_order_relaxed);
    pthread_mutex_unlock(&queue_lock);
    for (int i = 0; i < n; i++) {
        opal_output(output, "%s", lines[i]);
        free(lines[i]);
    }
    if (lost > 0)
        opal_output(output, "btl railover: %u log line(s) of Railover's progress helper lost "
                    "(more than %d waited for progress)", lost, QUEUED_MAX);
}

void mca_btl_railover_log_open(int stream, int verbosity)
{
    output = stream;
    owner = pthread_self();
    if (0 != gethostname(host, sizeof(host)))
        snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = '\0';
    installed = true;
    rov_log_set_hook(log_hook, NULL, mca_btl_railover_log_level(verbosity));
}

void mca_btl_railover_log_close(void)
{
    if (!installed)
        return;
    /* When this returns the hook is not running: the component may unload. */
    rov_log_set_hook(NULL, NULL, ROV_LOG_OFF);
    installed = false;
    mca_btl_railover_log_flush();
}
