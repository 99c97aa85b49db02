/*
 * Released-memory watch, for registration caches.
 *
 * A kept registration pins the pages it was made for.  When the application
 * releases that memory -- munmap(), mremap(), a brk shrink, free() of a
 * large malloc chunk, madvise(MADV_DONTNEED/FREE/REMOVE) -- a buffer later
 * found at the same address has other pages, and a cache that handed out
 * the old registration would send stale data.
 *
 * The kernel tells us: every tracked range is registered with one
 * process-wide userfaultfd asking for its non-cooperative events
 * (UFFD_EVENT_UNMAP, _REMOVE, _REMAP), and a thread reads them.  A thread
 * that releases tracked memory is held by the kernel until its event has
 * been read, and the reader records the range before a cache can look
 * again (rov_memwatch_sync waits out a read in progress), so once munmap()
 * has returned, the next sync reports the range.
 *
 * Releases are kept in a ring of the last ROV_MEMWATCH_RING ranges under a
 * running count; a reader further behind than that is told that everything
 * was released.  Nothing is allocated on the reader thread, and it takes no
 * lock a cache holds, so a cache may allocate and free (and thereby release
 * tracked memory) under its own lock.
 *
 * When userfaultfd is not available (an old kernel, seccomp, or
 * vm.unprivileged_userfaultfd=0 on a kernel without UFFD_USER_MODE_ONLY) or
 * a range cannot be registered (file-backed mappings other than shmem),
 * rov_memwatch_open or rov_memwatch_track fail and the caller must not keep
 * such a registration after its use.
 *
 * Thread-safe.  The descriptor and the thread exist only while at least
 * one user has it open (a checkpointer sees neither after the last close).
 */
#ifndef ROV_VERBS_MEMWATCH_H
#define ROV_VERBS_MEMWATCH_H

#include <stdbool.h>
#include <stdint.h>

#define ROV_MEMWATCH_RING 256

/** Take a reference on the watch, starting it on first use.  Returns
 * false (the reason logged once) when the kernel offers no watch. */
bool rov_memwatch_open(void);
/** Drop a reference; the last one stops the thread and closes the fd. */
void rov_memwatch_close(void);

/** Watch the page-aligned range [start, end) for releases.  False when it
 * cannot be watched (the caller then must not keep what depends on it). */
bool rov_memwatch_track(uintptr_t start, uintptr_t end);

/** The running count of releases: where a new reader starts. */
uint64_t rov_memwatch_count(void);

/** Report every release after *seen through fn(arg, start, end), then set
 * *seen to the current count.  A reader that fell more than the ring
 * behind gets one call for [0, UINTPTR_MAX). */
void rov_memwatch_sync(uint64_t *seen, void (*fn)(void *arg, uintptr_t start, uintptr_t end),
                       void *arg);

#endif
