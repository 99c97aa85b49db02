/*
 * Subcommands of the railover command line tool.  Each takes the arguments
 * after the tool's name (argv[0] is the subcommand) and returns the process
 * exit status.  They use only the public API (include/railover/).
 */
#ifndef RAILOVER_TOOL_H
#define RAILOVER_TOOL_H

/** `railover perf`: latency and bandwidth, Railover next to raw TCP. */
int rov_tool_perf(int argc, char **argv);

#endif
