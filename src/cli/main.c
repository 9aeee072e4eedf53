/* `mlaverify`: info, check, gen, bench. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mlaverify.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} commands[] = {
    {"info", mlav_cmd_info, "version, backends compiled in, devices, what AUTO picks"},
    {"check", mlav_cmd_check, "check golden bundles token-exact on a backend"},
    {"gen", mlav_cmd_gen, "generate a seeded golden bundle from the fp64 oracle"},
    {"bench", mlav_cmd_bench, "time the verify backends (the docs/PERFORMANCE.md table)"},
};

static int usage(FILE *f)
{
    fprintf(f, "usage: mlaverify COMMAND [ARGS]   (mlaverify COMMAND --help for details)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-6s %s\n", commands[i].name, commands[i].what);
    return f == stdout ? 0 : 2;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage(stderr);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))
        return usage(stdout);
    if (!strcmp(argv[1], "--version")) {
        printf("mlaverify %s\n", mlav_version_string());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "mlaverify: unknown command '%s'\n", argv[1]);
    return usage(stderr);
}
