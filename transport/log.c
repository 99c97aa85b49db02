#include "transport/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int rov_log_level = ROV_LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void rov_log_set_level(int level)
{
    rov_log_level = level;
}

int rov_log_level_parse(const char *s)
{
    for (int i = 0; i <= ROV_LOG_TRACE; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

const char *rov_log_level_name(int level)
{
    return level >= 0 && level <= ROV_LOG_TRACE ? level_names[level] : "?";
}

void rov_log_emit(int level, const char *subsys, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    int n;
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    n = snprintf(line, sizeof(line), "[%lld.%06ld] railover[%d] %s %s: ", (long long)ts.tv_sec,
                 ts.tv_nsec / 1000, (int)getpid(), level_names[level], subsys);
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    /* One write per line, so lines of several processes do not interleave. */
    (void)!write(STDERR_FILENO, line, (size_t)n);
}
