/*
 * Code placement for the per-message paths.
 *
 * Every system call on these machines (PTI without PCID) leaves the TLB
 * empty, and every page the code between two calls touches costs a page
 * walk; the receive path ran 0.14 us from recv() returning to the
 * application's callback (bench/README.md, "What a message costs").  So the
 * functions a message runs through are ROV_HOT: the compiler puts them in
 * .text.hot, which the linker keeps together, a page or two for all of them.
 * Error paths are ROV_COLD (.text.unlikely), so they leave the hot pages and
 * their callers lay the branch out of line.
 *
 * What costs most after a system call is the return: the call leaves the
 * return-stack predictor of no use, so every function that was already on
 * the stack below it mispredicts its return, 6-7 ns each here, against 4-7
 * ns for a page and about 2 ns for a cache line (bench/syscall-cost.c;
 * bench/README.md, "What a system call leaves behind").  So a function that
 * makes a per-message system call is inlined into its caller (ROV_INLINE):
 * one level less between the application and the kernel.  For the same
 * reason the per-message path reads no constant from .rodata (a page of its
 * own) and calls libc through the GOT, not a PLT stub (-fno-plt).
 */
#ifndef ROV_COMPILER_H
#define ROV_COMPILER_H

#define ROV_HOT __attribute__((hot))
#define ROV_COLD __attribute__((cold))
#define ROV_INLINE inline __attribute__((always_inline))
/* The first function of the hot text (conn.c is the first object in the
 * link that has any, rov_conn_send() its first hot function) starts on a
 * page, so that the 7 KiB of it take two pages, not three: conn.c's
 * functions the first, context.c's and the TCP rail's, which an idle poll
 * runs through, the second (the order of transport/CMakeLists.txt and of
 * the layers in CMakeLists.txt). */
#define ROV_HOT_FIRST __attribute__((hot, aligned(4096)))

#include <stdlib.h>
#include <string.h>

#define ROV_CACHE_LINE 64

/** Zeroed memory for an object that starts on a cache line, so that its
 * fields are in as few lines as their offsets say; free() frees it.  NULL
 * when out of memory. */
static inline void *rov_zalloc_lines(size_t size)
{
    size_t len = (size + ROV_CACHE_LINE - 1) & ~(size_t)(ROV_CACHE_LINE - 1);
    void *p = aligned_alloc(ROV_CACHE_LINE, len);

    if (p)
        memset(p, 0, len);
    return p;
}

#endif
