/* PLACEHOLDER until its issue lands: mlaverify bench. */
#include <stdio.h>

#include "cli.h"

int mlav_cmd_bench(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "mlaverify bench: not built yet\n");
    return 2;
}
