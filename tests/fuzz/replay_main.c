/* Replays fuzz inputs (files, or every file of a directory) through a fuzz target without
 * libFuzzer, so the committed corpora and crash regressions run in every ctest, with any
 * compiler and under any sanitizer. Exit status 0 only when every input ran to completion. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 0;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *grown = realloc(buf, cap *= 2);
            if (!grown)
                free(buf);
            buf = grown;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return 0;
    }
    LLVMFuzzerTestOneInput(buf, n); /* a finding aborts, as under libFuzzer */
    free(buf);
    return 1;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of `dir` in name order (a README there is documentation, not an input). */
static int replay_dir(const char *dir, long *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot open directory %s\n", dir);
        return 0;
    }
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, "README", 6) == 0)
            continue;
        char **grown = realloc(names, sizeof *names * (n + 1));
        if (!grown)
            break;
        names = grown;
        names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
        if (!names[n])
            break;
        sprintf(names[n], "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n > 1)
        qsort(names, n, sizeof *names, cmp_names);
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            ok &= replay_file(names[i]);
            (*count)++;
        }
        free(names[i]);
    }
    free(names);
    return ok;
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    long count = 0;
    int ok = 1;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            ok = 0;
        } else if (S_ISDIR(st.st_mode)) {
            ok &= replay_dir(argv[i], &count);
        } else {
            ok &= replay_file(argv[i]);
            count++;
        }
    }
    printf("replayed %ld inputs: %s\n", count, ok ? "all ran clean" : "some could not be read");
    return ok ? 0 : 1;
}
