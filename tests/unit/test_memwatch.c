/* The released-memory watch (verbs/memwatch.c): every way an application
 * gives memory back is reported once munmap/madvise/mremap/free returns,
 * memory nobody tracks is not, and nothing stays open after the last
 * close. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "verbs/memwatch.h"

#define MAX_GOT (ROV_MEMWATCH_RING + 8)

#if defined(__SANITIZE_ADDRESS__)
#define ROV_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ROV_ASAN 1
#endif
#endif

static uintptr_t pg;
static struct {
    uintptr_t start, end;
} got[MAX_GOT];
static unsigned ngot;

static void collect(void *arg, uintptr_t start, uintptr_t end)
{
    (void)arg;
    ck_assert_uint_lt(ngot, MAX_GOT);
    got[ngot].start = start;
    got[ngot].end = end;
    ngot++;
}

/* Releases since *seen, into got[]. */
static unsigned sync_got(uint64_t *seen)
{
    ngot = 0;
    rov_memwatch_sync(seen, collect, NULL);
    return ngot;
}

/* Some reported range covers [start, end). */
static bool reported(uintptr_t start, uintptr_t end)
{
    for (unsigned i = 0; i < ngot; i++)
        if (got[i].start <= start && end <= got[i].end)
            return true;
    return false;
}

/* n touched, tracked pages. */
static uint8_t *tracked_pages(size_t n)
{
    uint8_t *p = mmap(NULL, n * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    ck_assert_ptr_ne(p, MAP_FAILED);
    memset(p, 0x5a, n * pg);
    ck_assert(rov_memwatch_track((uintptr_t)p, (uintptr_t)p + n * pg));
    return p;
}

static unsigned count_uffd(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    unsigned n = 0;

    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL) {
        char path[300], link[128];
        ssize_t len;

        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        len = readlink(path, link, sizeof(link) - 1);
        if (len > 0) {
            link[len] = '\0';
            n += strstr(link, "userfaultfd") != NULL;
        }
    }
    closedir(d);
    return n;
}

START_TEST(munmap_reported)
{
    ck_assert(rov_memwatch_open());
    uint8_t *p = tracked_pages(8);
    uint64_t seen = rov_memwatch_count();

    ck_assert_uint_eq(sync_got(&seen), 0);
    ck_assert_int_eq(munmap(p + 2 * pg, 2 * pg), 0);
    ck_assert_uint_eq(sync_got(&seen), 1);
    ck_assert_uint_eq(got[0].start, (uintptr_t)p + 2 * pg);
    ck_assert_uint_eq(got[0].end, (uintptr_t)p + 4 * pg);
    ck_assert_uint_eq(sync_got(&seen), 0); /* reported once */
    rov_memwatch_close();
}
END_TEST

static void *unmap_thread(void *arg)
{
    munmap(arg, pg);
    return NULL;
}

START_TEST(munmap_by_other_thread_reported_when_it_returns)
{
    ck_assert(rov_memwatch_open());
    for (int i = 0; i < 50; i++) {
        uint8_t *p = tracked_pages(1);
        uint64_t seen = rov_memwatch_count();
        pthread_t t;

        ck_assert_int_eq(pthread_create(&t, NULL, unmap_thread, p), 0);
        pthread_join(t, NULL);
        ck_assert_uint_eq(sync_got(&seen), 1);
        ck_assert(reported((uintptr_t)p, (uintptr_t)p + pg));
    }
    rov_memwatch_close();
}
END_TEST

START_TEST(dontneed_reported_and_page_usable)
{
    ck_assert(rov_memwatch_open());
    uint8_t *p = tracked_pages(4);
    uint64_t seen = rov_memwatch_count();

    ck_assert_int_eq(madvise(p + pg, pg, MADV_DONTNEED), 0);
    ck_assert_uint_ge(sync_got(&seen), 1);
    ck_assert(reported((uintptr_t)p + pg, (uintptr_t)p + 2 * pg));
    /* Discarded pages read as zero and fault normally (the test would hang
     * if the watch still caught their faults). */
    ck_assert_uint_eq(p[pg], 0);
    p[pg] = 7;
    ck_assert_uint_eq(p[pg], 7);
    ck_assert_uint_eq(p[0], 0x5a);
    munmap(p, 4 * pg);
    rov_memwatch_close();
}
END_TEST

START_TEST(mremap_move_reported)
{
    ck_assert(rov_memwatch_open());
    uint8_t *p = tracked_pages(4);
    uint64_t seen = rov_memwatch_count();
    /* Growing the first half cannot happen in place (the second half is
     * mapped): it moves. */
    uint8_t *q = mremap(p, 2 * pg, 6 * pg, MREMAP_MAYMOVE);

    ck_assert_ptr_ne(q, MAP_FAILED);
    ck_assert_ptr_ne(q, p);
    ck_assert_uint_ge(sync_got(&seen), 1);
    ck_assert(reported((uintptr_t)p, (uintptr_t)p + 2 * pg));
    ck_assert_uint_eq(q[0], 0x5a);
    munmap(q, 6 * pg);
    munmap(p + 2 * pg, 2 * pg);
    rov_memwatch_close();
}
END_TEST

/* (AddressSanitizer's allocator keeps freed memory mapped, in quarantine:
 * nothing is released there, and nothing can go stale.) */
#ifndef ROV_ASAN
START_TEST(free_of_large_malloc_reported)
{
    ck_assert(rov_memwatch_open());
    /* Above glibc's largest dynamic mmap threshold: its own mapping. */
    size_t len = 64u << 20;
    uint8_t *b = malloc(len);

    ck_assert_ptr_nonnull(b);
    memset(b, 1, len);
    uintptr_t start = ((uintptr_t)b + pg - 1) & ~(pg - 1);
    uintptr_t end = ((uintptr_t)b + len) & ~(pg - 1);
    ck_assert(rov_memwatch_track(start, end));
    uint64_t seen = rov_memwatch_count();

    free(b);
    ck_assert_uint_ge(sync_got(&seen), 1);
    ck_assert(reported(start, end));
    rov_memwatch_close();
}
END_TEST
#endif

START_TEST(untracked_memory_not_reported)
{
    ck_assert(rov_memwatch_open());
    uint8_t *p = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint64_t seen = rov_memwatch_count();

    ck_assert_ptr_ne(p, MAP_FAILED);
    memset(p, 1, 4 * pg);
    ck_assert_int_eq(madvise(p, pg, MADV_DONTNEED), 0);
    ck_assert_int_eq(munmap(p, 4 * pg), 0);
    ck_assert_uint_eq(sync_got(&seen), 0);
    rov_memwatch_close();
}
END_TEST

START_TEST(reader_far_behind_told_everything)
{
    ck_assert(rov_memwatch_open());
    uint64_t seen = rov_memwatch_count();

    for (int i = 0; i < ROV_MEMWATCH_RING + 5; i++)
        munmap(tracked_pages(1), pg);
    ck_assert_uint_eq(sync_got(&seen), 1);
    ck_assert_uint_eq(got[0].start, 0);
    ck_assert_uint_eq(got[0].end, UINTPTR_MAX);
    ck_assert_uint_eq(seen, rov_memwatch_count());
    rov_memwatch_close();
}
END_TEST

START_TEST(nothing_left_after_last_close)
{
    unsigned before = count_uffd();

    ck_assert(rov_memwatch_open());
    ck_assert(rov_memwatch_open());
    ck_assert_uint_eq(count_uffd(), before + 1);
    uint8_t *p = tracked_pages(2);
    rov_memwatch_close();
    ck_assert_uint_eq(count_uffd(), before + 1); /* one user left */
    rov_memwatch_close();
    ck_assert_uint_eq(count_uffd(), before);
    ck_assert(!rov_memwatch_track((uintptr_t)p, (uintptr_t)p + 2 * pg));
    /* The ranges were let go with the descriptor: discarding and touching
     * them faults normally. */
    ck_assert_int_eq(madvise(p, 2 * pg, MADV_DONTNEED), 0);
    p[0] = 1;
    munmap(p, 2 * pg);
    /* And the watch starts again. */
    ck_assert(rov_memwatch_open());
    p = tracked_pages(1);
    uint64_t seen = rov_memwatch_count();
    munmap(p, pg);
    ck_assert_uint_eq(sync_got(&seen), 1);
    rov_memwatch_close();
}
END_TEST

START_TEST(child_of_fork_leaves_the_parent_watch_alone)
{
    ck_assert(rov_memwatch_open());
    uint8_t *p = tracked_pages(2);
    int status = -1;
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* Its copy of the memory is not watched (this would hang if it
         * were), what it inherited is let go, and it may watch its own. */
        munmap(p, 2 * pg);
        rov_memwatch_close();
        _exit(rov_memwatch_open() ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The parent's watch still runs. */
    uint64_t seen = rov_memwatch_count();
    ck_assert_int_eq(munmap(p, pg), 0);
    ck_assert_uint_eq(sync_got(&seen), 1);
    ck_assert(reported((uintptr_t)p, (uintptr_t)p + pg));
    munmap(p + pg, pg);
    rov_memwatch_close();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memwatch");
    TCase *tc = tcase_create("releases");
    SRunner *sr;
    int failed;

    pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    /* The watch needs userfaultfd; without it the cache keeps nothing, and
     * there is nothing here to test. */
    if (!rov_memwatch_open()) {
        fprintf(stderr, "test_memwatch: userfaultfd is not available here: skipped\n");
        return 77;
    }
    rov_memwatch_close();
    tcase_add_test(tc, munmap_reported);
    tcase_add_test(tc, munmap_by_other_thread_reported_when_it_returns);
    tcase_add_test(tc, dontneed_reported_and_page_usable);
    tcase_add_test(tc, mremap_move_reported);
#ifndef ROV_ASAN
    tcase_add_test(tc, free_of_large_malloc_reported);
#endif
    tcase_add_test(tc, untracked_memory_not_reported);
    tcase_add_test(tc, reader_far_behind_told_everything);
    tcase_add_test(tc, nothing_left_after_last_close);
    tcase_add_test(tc, child_of_fork_leaves_the_parent_watch_alone);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
