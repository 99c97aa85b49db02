/* Logging: levels, a subsystem tag, cheap when off.  Level from RAILOVER_LOG
 * (error, warn, info, debug, trace; default warn). */
#ifndef ROV_LOG_H
#define ROV_LOG_H

#include <time.h>

enum rov_log_level {
    ROV_LOG_ERROR = 0,
    ROV_LOG_WARN,
    ROV_LOG_INFO,
    ROV_LOG_DEBUG,
    ROV_LOG_TRACE,
};

extern int rov_log_level;

void rov_log_set_level(int level);
/** "error"... "trace" -> level, or -1. */
int rov_log_level_parse(const char *s);
const char *rov_log_level_name(int level);

/* cold: callers lay out the logging branch away from their hot path */
void rov_log_emit(int level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), cold));

#define rov_log(level, subsys, ...)                                      \
    do {                                                                 \
        if (__builtin_expect((level) <= rov_log_level, 0))               \
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
        if ((level) <= rov_log_level) {                                           \
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
