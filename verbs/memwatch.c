/* Released-memory watch: see memwatch.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "transport/log.h"
#include "verbs/memwatch.h"

#define MW_FEATURES (UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | \
                     UFFD_FEATURE_EVENT_REMAP)
#define MW_READ_MSGS 16

struct mw_range {
    uintptr_t start, end;
};

/* Users, the descriptor and the thread: changed under mw_open_lock. */
static pthread_mutex_t mw_open_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned mw_users;
static int mw_fd = -1;
static int mw_stop = -1;     /* eventfd: ends the thread */
static pthread_t mw_thread;
static pid_t mw_pid;         /* the process that started them */
static bool mw_told;         /* "no watch" was logged */

/* Releases: written by the thread under mw_ring_lock only. */
static pthread_mutex_t mw_ring_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mw_range mw_ring[ROV_MEMWATCH_RING];
static _Atomic uint64_t mw_count;
static atomic_bool mw_reading; /* events read but maybe not yet recorded */

static uintptr_t page_size(void)
{
    return (uintptr_t)sysconf(_SC_PAGESIZE);
}

static void record(uintptr_t start, uintptr_t end)
{
    pthread_mutex_lock(&mw_ring_lock);
    uint64_t n = atomic_load(&mw_count);
    mw_ring[n % ROV_MEMWATCH_RING] = (struct mw_range){start, end};
    atomic_store(&mw_count, n + 1);
    pthread_mutex_unlock(&mw_ring_lock);
}

/* Stop watching a range (its next faults must be the kernel's, not ours);
 * this also wakes a thread that faulted in it. */
static void unwatch(uintptr_t start, uintptr_t end)
{
    struct uffdio_range range = {.start = start, .len = end - start};

    if (ioctl(mw_fd, UFFDIO_UNREGISTER, &range) < 0 && errno != EINVAL && errno != ENOMEM)
        rov_warn("verbs", "memwatch: UFFDIO_UNREGISTER: %m");
    ioctl(mw_fd, UFFDIO_WAKE, &range);
}

static void handle(const struct uffd_msg *m)
{
    uintptr_t pg = page_size();

    switch (m->event) {
    case UFFD_EVENT_UNMAP:
        record((uintptr_t)m->arg.remove.start, (uintptr_t)m->arg.remove.end);
        break;
    case UFFD_EVENT_REMOVE:
        /* The pages are being discarded; their next touch faults. */
        record((uintptr_t)m->arg.remove.start, (uintptr_t)m->arg.remove.end);
        unwatch((uintptr_t)m->arg.remove.start, (uintptr_t)m->arg.remove.end);
        break;
    case UFFD_EVENT_REMAP:
        record((uintptr_t)m->arg.remap.from, (uintptr_t)(m->arg.remap.from + m->arg.remap.len));
        break;
    case UFFD_EVENT_PAGEFAULT: {
        /* A page of a watched range is missing, so whatever was pinned
         * there is gone.  Not expected (registered pages stay present), but
         * the faulting thread must never hang on us. */
        uintptr_t p = (uintptr_t)m->arg.pagefault.address & ~(pg - 1);

        record(p, p + pg);
        unwatch(p, p + pg);
        break;
    }
    default:
        break;
    }
}

static void *mw_main(void *unused)
{
    struct uffd_msg msg[MW_READ_MSGS];

    (void)unused;
    for (;;) {
        struct pollfd pfd[2] = {
            {.fd = mw_fd, .events = POLLIN},
            {.fd = mw_stop, .events = POLLIN},
        };

        if (poll(pfd, 2, -1) < 0) {
            /* Never give up: a thread releasing watched memory waits for us. */
            if (errno != EINTR) {
                rov_log_ratelimited(ROV_LOG_ERROR, "verbs", "memwatch: poll: %m");
                usleep(1000);
            }
            continue;
        }
        if (pfd[1].revents)
            break;
        if (!(pfd[0].revents & POLLIN))
            continue;
        /* Set before the read, which lets the releasing thread go on, and
         * cleared once every event read is recorded: rov_memwatch_sync
         * waits in between. */
        atomic_store(&mw_reading, true);
        ssize_t n = read(mw_fd, msg, sizeof(msg));
        for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof(msg[0]); i++)
            handle(&msg[i]);
        atomic_store(&mw_reading, false);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            rov_log_ratelimited(ROV_LOG_ERROR, "verbs", "memwatch: read: %m");
    }
    return NULL;
}

static bool start(const char **why)
{
    struct uffdio_api api = {.api = UFFD_API, .features = MW_FEATURES};
    sigset_t all, old;
    int rc;

    /* User-mode faults only: allowed without privilege where
     * vm.unprivileged_userfaultfd is 0, and all we need. */
    mw_fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (mw_fd < 0 && errno == EINVAL)
        mw_fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (mw_fd < 0) {
        *why = "userfaultfd";
        return false;
    }
    if (ioctl(mw_fd, UFFDIO_API, &api) < 0) {
        *why = "UFFDIO_API (unmap, remove and remap events)";
        goto fail;
    }
    mw_stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (mw_stop < 0) {
        *why = "eventfd";
        goto fail;
    }
    /* The thread takes no signal meant for the application. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&mw_thread, NULL, mw_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errno = rc;
        *why = "pthread_create";
        goto fail;
    }
    mw_pid = getpid();
    return true;
fail:;
    int err = errno;

    close(mw_fd);
    mw_fd = -1;
    if (mw_stop >= 0)
        close(mw_stop);
    mw_stop = -1;
    errno = err;
    return false;
}

/* In a child of fork() the descriptors are the parent's watch (an ioctl on
 * them would act on the parent's memory, a write would stop its thread) and
 * the thread does not exist: drop our copies.  Called with mw_open_lock. */
static void forget_parent(void)
{
    if (mw_users == 0 || mw_pid == getpid())
        return;
    close(mw_fd);
    close(mw_stop);
    mw_fd = mw_stop = -1;
    mw_users = 0;
}

bool rov_memwatch_open(void)
{
    const char *why = NULL;
    bool ok = true;

    pthread_mutex_lock(&mw_open_lock);
    forget_parent();
    if (mw_users == 0)
        ok = start(&why);
    if (ok)
        mw_users++;
    else if (!mw_told) {
        mw_told = true;
        rov_info("verbs", "no released-memory watch (%s: %m): registrations are not kept "
                 "after use", why);
    }
    pthread_mutex_unlock(&mw_open_lock);
    return ok;
}

void rov_memwatch_close(void)
{
    uint64_t one = 1;

    pthread_mutex_lock(&mw_open_lock);
    forget_parent();
    if (mw_users > 0 && --mw_users == 0) {
        if (write(mw_stop, &one, sizeof(one)) != (ssize_t)sizeof(one))
            rov_error("verbs", "memwatch: cannot stop the thread: %m");
        else
            pthread_join(mw_thread, NULL);
        /* Closing the descriptor unregisters every range. */
        close(mw_fd);
        close(mw_stop);
        mw_fd = mw_stop = -1;
    }
    pthread_mutex_unlock(&mw_open_lock);
}

bool rov_memwatch_track(uintptr_t start, uintptr_t end)
{
    struct uffdio_register reg = {
        .range = {.start = start, .len = end - start},
        .mode = UFFDIO_REGISTER_MODE_MISSING,
    };
    int fd = mw_fd; /* open while the caller holds a reference */

    if (fd < 0 || mw_pid != getpid() || ioctl(fd, UFFDIO_REGISTER, &reg) < 0) {
        rov_debug("verbs", "memwatch: cannot watch %#lx..%#lx: %m", (unsigned long)start,
                  (unsigned long)end);
        return false;
    }
    return true;
}

uint64_t rov_memwatch_count(void)
{
    return atomic_load(&mw_count);
}

void rov_memwatch_sync(uint64_t *seen, void (*fn)(void *arg, uintptr_t start, uintptr_t end),
                       void *arg)
{
    struct mw_range got[ROV_MEMWATCH_RING];
    uint64_t now, n = 0;

    while (atomic_load(&mw_reading))
        sched_yield();
    if (atomic_load(&mw_count) == *seen)
        return;
    pthread_mutex_lock(&mw_ring_lock);
    now = atomic_load(&mw_count);
    if (now - *seen <= ROV_MEMWATCH_RING) {
        for (uint64_t i = *seen; i < now; i++)
            got[n++] = mw_ring[i % ROV_MEMWATCH_RING];
    }
    pthread_mutex_unlock(&mw_ring_lock);
    if (now - *seen > ROV_MEMWATCH_RING)
        fn(arg, 0, UINTPTR_MAX);
    for (uint64_t i = 0; i < n; i++)
        fn(arg, got[i].start, got[i].end);
    *seen = now;
}
