/*
 * Logging: lines with a level and a subsystem tag, cheap when off.
 *
 * The levels come from RAILOVER_LOG (a default for every subsystem, then
 * overrides: "warn,verbs=debug,failover=info"; default warn), raised by the
 * host program's hook if it asks for more (rov_log_set_hook() in
 * railover/railover.h).  The lines go to the hook, else to stderr.
 *
 * rov_log_level is the most detailed level of any subsystem: a line above it
 * costs one compare; a line within it enters the cold rov_log_emit(), which
 * checks the subsystem's own level.
 */
#ifndef ROV_LOG_H
#define ROV_LOG_H

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "railover/railover.h" /* rov_log_level_t, ROV_LOG_ERROR...ROV_LOG_TRACE */

/* The most detailed level any subsystem logs at now (ROV_LOG_OFF: none). */
extern _Atomic int rov_log_level;

/* Most overrides a RAILOVER_LOG value holds (one per subsystem tag). */
#define ROV_LOG_OVERRIDES_MAX 16

/* A RAILOVER_LOG value, parsed: a level for every subsystem, and overrides
 * for some (by their index in the table of tags in log.c).  Held in the
 * configuration by value. */
struct rov_log_levels {
    signed char dflt;
    unsigned char n;
    struct {
        unsigned char tag;
        signed char level;
    } over[ROV_LOG_OVERRIDES_MAX];
};

/** Parse "LEVEL[,TAG=LEVEL...]" (levels error, warn, info, debug, trace;
 * tags those of the table in log.c).  ROV_OK, or ROV_ERR_INVAL with the
 * offending part named in why; *levels_p is written only on ROV_OK. */
rov_status_t rov_log_levels_parse(const char *spec, struct rov_log_levels *levels_p, char *why,
                                  size_t why_len);
/** The canonical text of levels ("warn,verbs=debug") to f. */
void rov_log_levels_print(const struct rov_log_levels *levels, FILE *f);
/** Every subsystem at `level`. */
void rov_log_levels_init(struct rov_log_levels *levels, int level);

/** Make levels the process's RAILOVER_LOG levels (a context does at its
 * creation; the last one created wins).  Any thread, any time. */
void rov_log_set_levels(const struct rov_log_levels *levels);
/** Every subsystem at `level` (ROV_LOG_OFF: silent); for tests and tools. */
void rov_log_set_level(int level);

/** Whether a line of `level` under `tag` is logged now (the cold check). */
int rov_log_on(int level, const char *tag) __attribute__((cold));

/* cold: callers lay out the logging branch away from their hot path.  Checks
 * the tag's level itself. */
void rov_log_emit(int level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), cold));

#define rov_log_max() atomic_load_explicit(&rov_log_level, memory_order_relaxed)

#define rov_log(level, subsys, ...)                                      \
    do {                                                                 \
        if (__builtin_expect((level) <= rov_log_max(), 0))               \
            rov_log_emit((level), (subsys), __VA_ARGS__);                \
    } while (0)

#define rov_error(subsys, ...) rov_log(ROV_LOG_ERROR, subsys, __VA_ARGS__)
#define rov_warn(subsys, ...) rov_log(ROV_LOG_WARN, subsys, __VA_ARGS__)
#define rov_info(subsys, ...) rov_log(ROV_LOG_INFO, subsys, __VA_ARGS__)
#define rov_debug(subsys, ...) rov_log(ROV_LOG_DEBUG, subsys, __VA_ARGS__)
#define rov_trace(subsys, ...) rov_log(ROV_LOG_TRACE, subsys, __VA_ARGS__)

/* At most one line per second per call site; the rest are counted. */
#define rov_log_ratelimited(level, subsys, ...)                                   \
    do {                                                                          \
        static time_t rov_rl_last_;                                               \
        static unsigned rov_rl_skipped_;                                          \
        if ((level) <= rov_log_max() && rov_log_on((level), (subsys))) {          \
            time_t rov_rl_now_ = time(NULL);                                      \
            if (rov_rl_now_ != rov_rl_last_) {                                    \
                if (rov_rl_skipped_)                                              \
                    rov_log_emit((level), (subsys), "(%u similar messages suppressed)", \
                                 rov_rl_skipped_);                                \
                rov_rl_last_ = rov_rl_now_;                                       \
                rov_rl_skipped_ = 0;                                              \
                rov_log_emit((level), (subsys), __VA_ARGS__);                     \
            } else {                                                              \
                rov_rl_skipped_++;                                                \
            }                                                                     \
        }                                                                         \
    } while (0)

#endif
