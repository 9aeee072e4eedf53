/* PLACEHOLDER until its issue lands: mlaverify check. */
#include <stdio.h>

#include "cli.h"

int mlav_cmd_check(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "mlaverify check: not built yet\n");
    return 2;
}
