/* mlaverify check: run golden bundles on a backend; tokens and accepted paths must match
 * exactly, out and lse within the tolerances of docs/DESIGN.md#bundles. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "cli.h"
#include "mlaverify.h"

static const char usage[] =
    "usage: mlaverify check [--backend auto|cpu|cuda|cuda-naive|reference] FILE|DIR...\n"
    "\n"
    "Check golden bundles (a directory means its *.safetensors files, in name order). One line\n"
    "per bundle: backend, shape (an FP8 cache with the kv_scale the run is given:\n"
    "kv=fp8_e4m3*S), out rel-L2, lse max abs error, tokens and accepted paths\n"
    "reproduced, PASS / FAIL / UNSUPPORTED. Exit status 0 only when every bundle passes; 2 for\n"
    "a usage error, including a directory with no *.safetensors file in it.\n"
    "AUTO honours MLAV_BACKEND.\n";

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static int push(names *l, const char *s)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **g = realloc(l->v, cap * sizeof *g);
        if (!g)
            return 0;
        l->v = g;
        l->cap = cap;
    }
    size_t len = strlen(s) + 1;
    if (!(l->v[l->n] = malloc(len)))
        return 0;
    memcpy(l->v[l->n++], s, len);
    return 1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory contributes its *.safetensors files, sorted so runs are comparable. Returns 1, 0
 * when out of memory, or -1 for a directory that holds no bundle: a typo'd or empty directory
 * must not look like a run that checked everything (and qsort must not see a NULL array). */
static int expand(const char *arg, names *files)
{
    struct stat sb;
    if (stat(arg, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return push(files, arg);
    DIR *d = opendir(arg);
    if (!d)
        return push(files, arg); /* the check reports why it cannot be read */
    size_t first = files->n;
    const char *ext = ".safetensors";
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name), m = strlen(ext);
        if (n <= m || strcmp(e->d_name + n - m, ext) != 0)
            continue;
        size_t len = strlen(arg) + n + 2;
        char *path = malloc(len);
        if (!path) {
            closedir(d);
            return 0;
        }
        snprintf(path, len, "%s%s%s", arg, arg[strlen(arg) - 1] == '/' ? "" : "/", e->d_name);
        int ok = push(files, path);
        free(path);
        if (!ok) {
            closedir(d);
            return 0;
        }
    }
    closedir(d);
    if (files->n == first)
        return -1;
    qsort(files->v + first, files->n - first, sizeof *files->v, cmp_str);
    return 1;
}

int mlav_cmd_check(int argc, char **argv)
{
    mlav_backend want = MLAV_BACKEND_AUTO;
    names files = {0};
    int status = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            goto out;
        }
        if (!strcmp(argv[i], "--backend")) {
            if (i + 1 >= argc || mlav_backend_from_name(argv[i + 1], &want) != MLAV_OK) {
                status = cli_usage_error("check", "--backend needs auto, cpu, cuda, cuda-naive or "
                                                  "reference");
                goto out;
            }
            i++;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            status = cli_usage_error("check", "unknown option %s", argv[i]);
            goto out;
        } else {
            int got = expand(argv[i], &files);
            if (got == 0) {
                fprintf(stderr, "mlaverify check: out of memory\n");
                status = 2;
                goto out;
            }
            if (got < 0) {
                fprintf(stderr,
                        "mlaverify check: no bundles found: directory '%s' holds no "
                        "*.safetensors file\n",
                        argv[i]);
                status = 2;
                goto out;
            }
        }
    }
    if (files.n == 0) {
        status = cli_usage_error("check", "no bundles given");
        goto out;
    }
    mlav_context *ctx = NULL;
    mlav_status s = mlav_context_create(&ctx, want);
    if (s != MLAV_OK) {
        fprintf(stderr, "mlaverify check: cannot use backend %s: %s: %s\n", mlav_backend_name(want),
                mlav_status_string(s), mlav_last_error(NULL));
        status = 2;
        goto out;
    }
    printf("backend %s (%s)\n", mlav_backend_name(mlav_context_backend(ctx)),
           mlav_context_note(ctx));
    size_t counts[3] = {0, 0, 0};
    for (size_t i = 0; i < files.n; i++) {
        mlav_check_result r;
        mlav_check_file(ctx, files.v[i], &r);
        counts[r.verdict]++;
        printf("%-50s %-10s %-48s out %8.2e  lse %8.2e  tokens %d/%d  accepted %d/%d  %s",
               files.v[i], mlav_backend_name(r.backend), r.shape[0] ? r.shape : "-", r.out_rel_l2,
               r.lse_max_abs, r.tokens_ok, r.tokens_checked, r.accept_ok, r.accept_checked,
               mlav_verdict_name(r.verdict));
        if (r.tokens_indecisive)
            printf(" (%d indecisive tokens not compared)", r.tokens_indecisive);
        if (r.verdict != MLAV_VERDICT_PASS)
            printf(": %s", r.reason);
        printf("\n");
        fflush(stdout);
    }
    printf("%zu bundle(s) on %s: %zu PASS, %zu FAIL, %zu UNSUPPORTED\n", files.n,
           mlav_backend_name(mlav_context_backend(ctx)), counts[MLAV_VERDICT_PASS],
           counts[MLAV_VERDICT_FAIL], counts[MLAV_VERDICT_UNSUPPORTED]);
    mlav_context_free(ctx);
    status = counts[MLAV_VERDICT_PASS] == files.n ? 0 : 1;
out:
    for (size_t i = 0; i < files.n; i++)
        free(files.v[i]);
    free(files.v);
    return status;
}
