/* `mlaverify`: info, check, gen, bench. */
#include <stdio.h>
#include <stdlib.h>
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
    fprintf(f, "usage: mlaverify COMMAND [ARGS]   (mlaverify COMMAND --help for details)\n"
               "       mlaverify -V | --version   (the library's version)\n"
               "       mlaverify -h | --help\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-6s %s\n", commands[i].name, commands[i].what);
    fprintf(f, "\nOptions take a value as --opt VALUE or --opt=VALUE.\n");
    return f == stdout ? 0 : 2;
}

/* argv with every "--opt=value" split into "--opt" "value", so that each command's parser sees
 * one form. The strings are the originals, cut at '=' in place. NULL when out of memory. */
static char **split_equals(int argc, char **argv, int *argc_out)
{
    char **v = malloc(sizeof *v * ((size_t)argc * 2 + 1));
    if (!v)
        return NULL;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        char *eq = argv[i][0] == '-' && argv[i][1] == '-' ? strchr(argv[i], '=') : NULL;
        if (eq && eq > argv[i] + 2) {
            *eq = '\0';
            v[n++] = argv[i];
            v[n++] = eq + 1;
        } else {
            v[n++] = argv[i];
        }
    }
    v[n] = NULL;
    *argc_out = n;
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage(stderr);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))
        return usage(stdout);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("mlaverify %s\n", mlav_version_string());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            int n;
            char **v = split_equals(argc - 1, argv + 1, &n);
            if (!v) {
                fprintf(stderr, "mlaverify: out of memory\n");
                return 2;
            }
            int rc = commands[i].fn(n, v);
            free(v);
            return rc;
        }
    fprintf(stderr, "mlaverify: unknown command '%s' (info, check, gen, bench); mlaverify --help "
                    "lists them\n", argv[1]);
    return 2;
}
