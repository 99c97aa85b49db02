/* Unit tests for transport/log.c: levels per subsystem (RAILOVER_LOG), the
 * host program's hook, and the stderr line format that tests and tools grep. */
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport/config.h"
#include "transport/log.h"

/* ---- helpers ------------------------------------------------------------ */

/* What the hook received: one "level tag: msg" per line. */
static char got[8192];
static size_t ngot;

static void record_hook(void *arg, rov_log_level_t level, const char *tag, const char *msg)
{
    int n = snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s %s: %s\n",
                     rov_log_level_str(level), tag, msg);

    ck_assert_int_gt(n, 0);
    ck_assert_ptr_eq(arg, &ngot);
    ngot++;
}

/* stderr captured into a temporary file while a test logs. */
static int saved_stderr = -1;
static FILE *captured;

static void capture_start(void)
{
    captured = tmpfile();
    ck_assert_ptr_nonnull(captured);
    saved_stderr = dup(STDERR_FILENO);
    ck_assert_int_ge(saved_stderr, 0);
    ck_assert_int_ge(dup2(fileno(captured), STDERR_FILENO), 0);
}

/* Restores stderr; what was written, NUL-terminated, into buf. */
static void capture_end(char *buf, size_t len)
{
    size_t n;

    ck_assert_int_ge(dup2(saved_stderr, STDERR_FILENO), 0);
    close(saved_stderr);
    rewind(captured);
    n = fread(buf, 1, len - 1, captured);
    buf[n] = '\0';
    fclose(captured);
}

static void set_spec(const char *spec)
{
    struct rov_log_levels l;
    char why[256] = "";

    ck_assert_msg(rov_log_levels_parse(spec, &l, why, sizeof(why)) == ROV_OK, "%s: %s", spec,
                  why);
    rov_log_set_levels(&l);
}

static void setup(void)
{
    got[0] = '\0';
    ngot = 0;
    rov_log_set_hook(NULL, NULL, ROV_LOG_OFF);
    rov_log_set_level(ROV_LOG_WARN);
}

/* ---- levels per subsystem ----------------------------------------------- */

START_TEST(test_levels_per_subsystem)
{
    set_spec("warn,verbs=debug,failover=info");
    /* The fast path's bound: the most detailed level of any subsystem. */
    ck_assert_int_eq(rov_log_max(), ROV_LOG_DEBUG);
    rov_log_set_hook(record_hook, &ngot, ROV_LOG_OFF);
    rov_debug("verbs", "verbs debug");
    rov_trace("verbs", "verbs trace");
    rov_info("failover", "failover info");
    rov_debug("failover", "failover debug");
    rov_warn("tcp", "tcp warn");
    rov_info("tcp", "tcp info");
    rov_debug("tcp", "tcp debug");
    rov_error("core", "core error");
    rov_info("test", "a tag of no table: the default level");
    rov_warn("test", "%s %d", "formatted", 42);
    ck_assert_str_eq(got, "debug verbs: verbs debug\n"
                          "info failover: failover info\n"
                          "warn tcp: tcp warn\n"
                          "error core: core error\n"
                          "warn test: formatted 42\n");
    ck_assert(rov_log_on(ROV_LOG_DEBUG, "verbs"));
    ck_assert(!rov_log_on(ROV_LOG_DEBUG, "tcp"));
    /* An override below the default quiets one subsystem. */
    set_spec("info,ccp=error");
    ck_assert_int_eq(rov_log_max(), ROV_LOG_INFO);
    got[0] = '\0';
    rov_warn("ccp", "ccp warn");
    rov_info("conn", "conn info");
    ck_assert_str_eq(got, "info conn: conn info\n");
}
END_TEST

START_TEST(test_ratelimited_per_subsystem)
{
    set_spec("error,tcp=warn");
    rov_log_set_hook(record_hook, &ngot, ROV_LOG_OFF);
    for (int i = 0; i < 3; i++) {
        rov_log_ratelimited(ROV_LOG_WARN, "verbs", "verbs %d", i);
        rov_log_ratelimited(ROV_LOG_WARN, "tcp", "tcp %d", i);
    }
    /* tcp's first line; verbs's are off (and not counted as suppressed). */
    ck_assert_str_eq(got, "warn tcp: tcp 0\n");
}
END_TEST

START_TEST(test_off)
{
    rov_log_set_level(ROV_LOG_OFF);
    ck_assert_int_eq(rov_log_max(), ROV_LOG_OFF);
    rov_log_set_hook(record_hook, &ngot, ROV_LOG_OFF);
    rov_error("core", "nothing");
    ck_assert_uint_eq(ngot, 0);
}
END_TEST

/* ---- the hook ----------------------------------------------------------- */

START_TEST(test_hook_level_raises)
{
    set_spec("warn,verbs=trace");
    /* The hook wants info of everything: warn becomes info, trace stays. */
    rov_log_set_hook(record_hook, &ngot, ROV_LOG_INFO);
    ck_assert_int_eq(rov_log_max(), ROV_LOG_TRACE);
    rov_info("tcp", "tcp info");
    rov_debug("tcp", "tcp debug");
    rov_trace("verbs", "verbs trace");
    ck_assert_str_eq(got, "info tcp: tcp info\ntrace verbs: verbs trace\n");
    /* Removed: RAILOVER_LOG's levels alone again. */
    rov_log_set_hook(NULL, NULL, ROV_LOG_INFO);
    set_spec("warn");
    ck_assert_int_eq(rov_log_max(), ROV_LOG_WARN);
    ck_assert(!rov_log_on(ROV_LOG_INFO, "tcp"));
}
END_TEST

/* The library's own format, which tests/ and bench/ parse:
 * "[<s>.<us>] railover[<pid>] <level> <tag>: <message>\n", one write. */
static void assert_stderr_line(const char *text, const char *level_tag_msg)
{
    char pattern[256];
    regex_t re;

    snprintf(pattern, sizeof(pattern), "^\\[[0-9]+\\.[0-9]{6}\\] railover\\[%d\\] %s\n$",
             (int)getpid(), level_tag_msg);
    ck_assert_int_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    ck_assert_msg(regexec(&re, text, 0, NULL, 0) == 0, "'%s' does not match '%s'", text,
                  pattern);
    regfree(&re);
}

START_TEST(test_stderr_format)
{
    char text[2048];

    capture_start();
    rov_warn("core", "cannot %s rail %d", "open", 3);
    capture_end(text, sizeof(text));
    assert_stderr_line(text, "warn core: cannot open rail 3");
}
END_TEST

START_TEST(test_stderr_long_line_truncated)
{
    char text[4096], big[2000];

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    capture_start();
    rov_error("tcp", "%s", big);
    capture_end(text, sizeof(text));
    /* One line of at most 1023 bytes, newline included. */
    ck_assert_uint_eq(strlen(text), 1023);
    ck_assert_int_eq(text[1022], '\n');
    ck_assert_ptr_eq(strchr(text, '\n'), text + 1022);
}
END_TEST

START_TEST(test_hook_replaces_stderr_and_removal_restores_it)
{
    char text[2048];

    capture_start();
    rov_log_set_hook(record_hook, &ngot, ROV_LOG_OFF);
    rov_warn("conn", "to the hook");
    rov_log_set_hook(NULL, NULL, ROV_LOG_OFF);
    rov_warn("conn", "to stderr");
    capture_end(text, sizeof(text));
    ck_assert_str_eq(got, "warn conn: to the hook\n");
    assert_stderr_line(text, "warn conn: to stderr");
}
END_TEST

/* A line the hook itself causes goes to stderr instead of deadlocking. */
static void logging_hook(void *arg, rov_log_level_t level, const char *tag, const char *msg)
{
    record_hook(arg, level, tag, msg);
    rov_warn("core", "from inside the hook");
}

START_TEST(test_hook_that_logs)
{
    char text[2048];

    capture_start();
    rov_log_set_hook(logging_hook, &ngot, ROV_LOG_OFF);
    rov_warn("ctl", "outer");
    rov_log_set_hook(NULL, NULL, ROV_LOG_OFF);
    capture_end(text, sizeof(text));
    ck_assert_str_eq(got, "warn ctl: outer\n");
    assert_stderr_line(text, "warn core: from inside the hook");
}
END_TEST

/* Threads log while the hook is replaced: once rov_log_set_hook() returns,
 * the old hook is never called again, and the new one gets every line. */
static atomic_int old_removed, violations, stop_threads;
static atomic_int old_calls, new_calls;

static void old_hook(void *arg, rov_log_level_t level, const char *tag, const char *msg)
{
    (void)arg, (void)level, (void)tag, (void)msg;
    if (atomic_load(&old_removed))
        atomic_fetch_add(&violations, 1);
    atomic_fetch_add(&old_calls, 1);
}

static void new_hook(void *arg, rov_log_level_t level, const char *tag, const char *msg)
{
    (void)arg, (void)level, (void)tag, (void)msg;
    atomic_fetch_add(&new_calls, 1);
}

static void *log_loop(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_threads))
        rov_warn("helper", "a line from another thread");
    return NULL;
}

START_TEST(test_hook_swap_under_threads)
{
    pthread_t t[2];

    rov_log_set_hook(old_hook, NULL, ROV_LOG_OFF);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, log_loop, NULL), 0);
    while (atomic_load(&old_calls) < 1000)
        usleep(100);
    rov_log_set_hook(new_hook, NULL, ROV_LOG_OFF);
    atomic_store(&old_removed, 1);
    while (atomic_load(&new_calls) < 1000)
        usleep(100);
    atomic_store(&stop_threads, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    rov_log_set_hook(NULL, NULL, ROV_LOG_OFF);
    ck_assert_int_eq(atomic_load(&violations), 0);
}
END_TEST

/* A child forked while another thread writes a line (holding the log's
 * lock) logs all the same. */
static atomic_int in_blocking_hook, release_hook;

static void blocking_hook(void *arg, rov_log_level_t level, const char *tag, const char *msg)
{
    (void)arg, (void)level, (void)tag, (void)msg;
    atomic_store(&in_blocking_hook, 1);
    while (!atomic_load(&release_hook))
        usleep(1000);
}

static void *log_once(void *arg)
{
    (void)arg;
    rov_warn("helper", "held in the hook");
    return NULL;
}

START_TEST(test_fork_while_logging)
{
    pthread_t t;
    pid_t pid, done = 0;
    int status = -1;

    rov_log_set_hook(blocking_hook, NULL, ROV_LOG_OFF);
    ck_assert_int_eq(pthread_create(&t, NULL, log_once, NULL), 0);
    while (!atomic_load(&in_blocking_hook))
        usleep(1000);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int nul = open("/dev/null", O_WRONLY);

        dup2(nul, STDERR_FILENO);
        rov_log_set_hook(NULL, NULL, ROV_LOG_OFF);
        rov_warn("core", "from the child");
        _exit(0);
    }
    for (int i = 0; i < 500 && done == 0; i++) {
        done = waitpid(pid, &status, WNOHANG);
        if (done == 0)
            usleep(10000);
    }
    if (done == 0)
        kill(pid, SIGKILL);
    atomic_store(&release_hook, 1);
    pthread_join(t, NULL);
    rov_log_set_hook(NULL, NULL, ROV_LOG_OFF);
    ck_assert_msg(done == pid, "the child hung on the log's lock");
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
END_TEST

/* ---- RAILOVER_LOG through the settings ---------------------------------- */

START_TEST(test_setting_round_trip)
{
    rov_config_t *c = NULL;
    char err[512] = "", buf[128];

    unsetenv("RAILOVER_LOG");
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_OK);
    ck_assert_int_eq(rov_config_get(c, "RAILOVER_LOG", buf, sizeof(buf)), ROV_OK);
    ck_assert_str_eq(buf, "warn");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_LOG", "warn,verbs=debug,failover=info", err,
                                    sizeof(err)),
                     ROV_OK);
    ck_assert_int_eq(rov_config_get(c, "RAILOVER_LOG", buf, sizeof(buf)), ROV_OK);
    ck_assert_str_eq(buf, "warn,verbs=debug,failover=info");
    /* Overrides alone: the default stays warn. */
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_LOG", "ccp=trace", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(rov_config_get(c, "RAILOVER_LOG", buf, sizeof(buf)), ROV_OK);
    ck_assert_str_eq(buf, "warn,ccp=trace");
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_LOG", "debug", err, sizeof(err)), ROV_OK);
    ck_assert_int_eq(c->log.dflt, ROV_LOG_DEBUG);
    ck_assert_uint_eq(c->log.n, 0);
    rov_config_free(c);

    setenv("RAILOVER_LOG", "error,tcp=info", 1);
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_OK);
    unsetenv("RAILOVER_LOG");
    ck_assert_int_eq(c->log.dflt, ROV_LOG_ERROR);
    ck_assert_uint_eq(c->log.n, 1);
    rov_config_free(c);
}
END_TEST

static const struct {
    const char *value, *why;
} bad_values[] = {
    {"loud", "'loud' is not a log level"},
    {"", "'' is not a log level"},
    {"warn,", "'' is not a log level"},
    {"warn,verb=debug", "'verb' is not a subsystem (auth, bond, ccp, config, "},
    {"warn,=debug", "'' is not a subsystem"},
    {"warn,verbs=loud", "verbs: 'loud' is not a log level"},
    {"warn,verbs=", "verbs: '' is not a log level"},
    {"warn,debug", "'debug': a second level for every subsystem"},
    {"verbs=debug,verbs=info", "subsystem verbs named twice"},
    {"WARN", "'WARN' is not a log level"},
    {"warn, tcp=info", "' tcp' is not a subsystem"},
};

START_TEST(test_bad_value_refused)
{
    rov_config_t *c = NULL;
    char err[512] = "", buf[128];
    const char *value = bad_values[_i].value;

    rov_log_set_level(ROV_LOG_OFF); /* rov_config_read() logs what it refuses */
    unsetenv("RAILOVER_LOG");
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_LOG", "info,tcp=debug", err, sizeof(err)),
                     ROV_OK);
    ck_assert_int_eq(rov_config_set(c, "RAILOVER_LOG", value, err, sizeof(err)), ROV_ERR_INVAL);
    ck_assert_msg(strstr(err, "RAILOVER_LOG='") == err, "%s", err);
    ck_assert_msg(strstr(err, bad_values[_i].why) != NULL, "'%s' not in '%s'",
                  bad_values[_i].why, err);
    /* The configuration is unchanged. */
    ck_assert_int_eq(rov_config_get(c, "RAILOVER_LOG", buf, sizeof(buf)), ROV_OK);
    ck_assert_str_eq(buf, "info,tcp=debug");
    rov_config_free(c);

    /* From the environment: the configuration (and so a context) is refused. */
    setenv("RAILOVER_LOG", value, 1);
    c = NULL;
    ck_assert_int_eq(rov_config_read(err, sizeof(err), &c), ROV_ERR_INVAL);
    unsetenv("RAILOVER_LOG");
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err, bad_values[_i].why) != NULL, "'%s' not in '%s'",
                  bad_values[_i].why, err);
}
END_TEST

/* The enumeration embedders build their parameters from: free text whose
 * levels are named. */
START_TEST(test_enumerated)
{
    for (int i = 0; i < rov_config_var_count(); i++) {
        const rov_config_var_t *v = rov_config_var(i);

        if (strcmp(v->name, "RAILOVER_LOG") != 0)
            continue;
        ck_assert_int_eq(v->type, ROV_CONFIG_STRING);
        ck_assert_str_eq(v->default_value, "warn");
        ck_assert_str_eq(v->choices, "error|warn|info|debug|trace");
        ck_assert_ptr_nonnull(strstr(v->help, "subsystem=level"));
        return;
    }
    ck_abort_msg("RAILOVER_LOG is not enumerated");
}
END_TEST

static Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc;

    tc = tcase_create("levels");
    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_levels_per_subsystem);
    tcase_add_test(tc, test_ratelimited_per_subsystem);
    tcase_add_test(tc, test_off);
    suite_add_tcase(s, tc);

    tc = tcase_create("hook");
    tcase_set_timeout(tc, 20);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_hook_level_raises);
    tcase_add_test(tc, test_stderr_format);
    tcase_add_test(tc, test_stderr_long_line_truncated);
    tcase_add_test(tc, test_hook_replaces_stderr_and_removal_restores_it);
    tcase_add_test(tc, test_hook_that_logs);
    tcase_add_test(tc, test_hook_swap_under_threads);
    tcase_add_test(tc, test_fork_while_logging);
    suite_add_tcase(s, tc);

    tc = tcase_create("setting");
    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_setting_round_trip);
    tcase_add_loop_test(tc, test_bad_value_refused, 0,
                        (int)(sizeof(bad_values) / sizeof(bad_values[0])));
    tcase_add_test(tc, test_enumerated);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(log_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
