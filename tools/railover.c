/*
 * railover: command line tool for the Railover library.
 *
 *   railover info     library version, the configured rails, the effective
 *                     configuration
 *   railover perf     latency and bandwidth benchmark (see perf.c)
 *   railover status|force|release|ctl
 *                     talk to running processes through their control
 *                     sockets (see ctl.c, docs/control.md)
 */
#include <stdio.h>
#include <string.h>

#include "ctl.h"
#include "railover/railover.h"
#include "railover_tool.h"

static void usage(FILE *stream)
{
    fprintf(stream,
            "usage: railover <command> [options]\n"
            "\n"
            "commands:\n"
            "  info                     library version, configured rails and the effective\n"
            "                           configuration (from the RAILOVER_* environment)\n"
            "  perf --listen ADDR:PORT  serve latency/bandwidth runs until killed\n"
            "  perf ADDR:PORT [--raw] [--json] [--sizes LIST] [--iters N] [--warmup N]\n"
            "                 [--bw-bytes N]\n"
            "                           measure against a perf server ('railover perf --help')\n"
            "  status [PID...]          identity and connection status of the given processes,\n"
            "                           or of every Railover process of this user\n"
            "  force PID|all [conn ID | peer EPID]\n"
            "                           move connections off their preferred rail and hold\n"
            "                           them there (fabric maintenance); all connections of\n"
            "                           the process unless conn/peer selects some\n"
            "  release PID|all [conn ID | peer EPID]\n"
            "                           undo force: connections may move back\n"
            "  ctl PID VERB [ARGS...]   send any control request ('ctl PID help' lists them)\n"
            "  version                  print the library version\n"
            "  help                     this text\n"
            "\n"
            "status, force, release and ctl reach processes through their control sockets in\n"
            "RAILOVER_RUN_DIR (default $XDG_RUNTIME_DIR/railover or /tmp/railover-UID), a\n"
            "directory that must be this user's alone (mode 700); only processes of this\n"
            "user are trusted, and what they send is shown with control characters escaped.\n"
            "A process answers while it calls rov_progress; a busy one (as many control\n"
            "clients as it serves) is asked again for up to 5 s.  Exit status 0 when every\n"
            "answer was 'ok', 10 when the only failures were processes that stayed busy,\n"
            "1 otherwise.\n");
}

static void info_recv_cb(void *arg, rov_conn_t *conn, uint32_t tag, const void *data,
                         size_t len)
{
}

static int cmd_info(int argc, char **argv)
{
    char err[512] = "";
    rov_config_t *config = NULL;
    rov_context_t *context = NULL;
    int rc = 0;

    if (argc > 1) {
        fprintf(stderr, "railover info: unexpected argument '%s'\n", argv[1]);
        return 1;
    }
    rov_status_t status = rov_config_read(err, sizeof(err), &config);
    if (status != ROV_OK) {
        fprintf(stderr, "railover info: %s\n", err[0] != '\0' ? err : rov_status_str(status));
        return 1;
    }

    char kinds[128];

    rov_rail_kinds(kinds, sizeof(kinds));
    printf("railover %s\n", rov_version());
    printf("rail kinds built in: %s\n", kinds);

    /* The rails are opened to show which open; the context has no control
     * socket, so it creates no run directory and registers in no job
     * registry: an information command changes nothing on disk. */
    rov_config_t *probe = NULL;

    status = rov_config_read(err, sizeof(err), &probe);
    if (status == ROV_OK)
        status = rov_config_set(probe, "RAILOVER_CONTROL", "off", err, sizeof(err));
    rov_context_params_t params = {
        .config = probe,
        .recv_cb = info_recv_cb,
    };
    if (status == ROV_OK)
        status = rov_context_create(&params, &context);
    rov_config_free(probe);
    if (status == ROV_OK) {
        int count = rov_context_rail_count(context);
        printf("rails: %d\n", count);
        for (int i = 0; i < count; i++) {
            const char *name = rov_context_rail_name(context, i);
            printf("  %d  %s\n", i, name != NULL ? name : "?");
        }
        rov_context_destroy(context);
    } else {
        fprintf(stderr, "railover info: cannot open the configured rails: %s\n",
                rov_status_str(status));
        printf("rails: not opened (%s)\n", rov_status_str(status));
        rc = 1;
    }

    printf("configuration:\n");
    fflush(stdout);
    rov_config_print(config, stdout);
    fflush(stdout);
    rov_config_free(config);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "info") == 0) {
        return cmd_info(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "perf") == 0) {
        return rov_tool_perf(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "status") == 0) {
        return rov_tool_status(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "force") == 0 || strcmp(cmd, "release") == 0) {
        return rov_tool_force(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "ctl") == 0) {
        return rov_tool_ctl(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("railover %s\n", rov_version());
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "railover: unknown command '%s'\n", cmd);
    usage(stderr);
    return 1;
}
