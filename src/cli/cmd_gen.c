/* PLACEHOLDER until its issue lands: mlaverify gen. */
#include <stdio.h>

#include "cli.h"

int mlav_cmd_gen(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "mlaverify gen: not built yet\n");
    return 2;
}
