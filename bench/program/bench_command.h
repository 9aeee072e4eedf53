/* `mlaverify bench` as a library that the command (tools/cli) links: its one entry point, with
 * the conventions of the command's other subcommands (tools/cli/cli.h): it returns the exit
 * status (0 success, 2 bad usage or an error) and sees every --opt=value already split. */
#ifndef MLAV_BENCH_PROGRAM_BENCH_COMMAND_H
#define MLAV_BENCH_PROGRAM_BENCH_COMMAND_H

int mlav_cmd_bench(int argc, char **argv);

#endif
