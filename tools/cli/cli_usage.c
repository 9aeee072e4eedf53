/* The one form of a usage error: a sentence and where the options are listed. The benchmark
 * program prints the same form for `bench` (bench_usage_error, bench/program): the lab does not
 * include the tools, and tests/cli/conventions.sh holds both to it. */
#include <stdarg.h>
#include <stdio.h>

#include "cli.h"

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mlaverify %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(mlaverify %s --help lists the options)\n", cmd);
    return 2;
}
