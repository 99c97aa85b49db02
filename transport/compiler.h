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
 */
#ifndef ROV_COMPILER_H
#define ROV_COMPILER_H

#define ROV_HOT __attribute__((hot))
#define ROV_COLD __attribute__((cold))

#endif
