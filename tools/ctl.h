/*
 * Control clients of the railover tool (ctl.c): they talk to running
 * processes through their control sockets (docs/control.md).  Each takes the
 * arguments after the tool's name (argv[0] is the subcommand) and returns the
 * process exit status: 0 when every answer ended in "ok"; ROV_TOOL_EXIT_BUSY
 * when the only failures were processes whose control socket stayed busy
 * for the whole request (asked again meanwhile); 1 otherwise.
 */
#ifndef RAILOVER_TOOL_CTL_H
#define RAILOVER_TOOL_CTL_H

/* A process's control socket stayed busy (as cprclient's exit 10). */
#define ROV_TOOL_EXIT_BUSY 10

/** `railover status [PID...]`: hello + status of the given processes, or of
 * every process in the run directory. */
int rov_tool_status(int argc, char **argv);

/** `railover force|release PID|all [conn ID | peer EPID]`. */
int rov_tool_force(int argc, char **argv);

/** `railover ctl PID VERB [ARGS...]`: any request, answer printed as is. */
int rov_tool_ctl(int argc, char **argv);

#endif
