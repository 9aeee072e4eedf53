/* The `mlaverify` command's subcommands, one file each (cmd_<name>.c). Each returns the
 * process exit status: 0 success, 1 a check failed, 2 bad usage or an error. */
#ifndef MLAV_CLI_H
#define MLAV_CLI_H

int mlav_cmd_info(int argc, char **argv);
int mlav_cmd_check(int argc, char **argv);
int mlav_cmd_gen(int argc, char **argv);
int mlav_cmd_bench(int argc, char **argv);

#endif
