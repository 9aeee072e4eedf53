/* The `mlaverify` command's subcommands, one file each (cmd_<name>.c). Each returns the
 * process exit status: 0 success, 1 a check failed, 2 bad usage or an error. main.c has split
 * every --opt=value into --opt value before a command sees its arguments. */
#ifndef MLAV_CLI_H
#define MLAV_CLI_H

#include "bench_command.h" /* bench: the benchmark program of bench/program */

int mlav_cmd_info(int argc, char **argv);
int mlav_cmd_check(int argc, char **argv);
int mlav_cmd_gen(int argc, char **argv);

/* A usage error of `mlaverify CMD`: the sentence, then a line pointing at CMD --help (the help
 * itself is not reprinted). Returns 2, the exit status of a usage error. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
