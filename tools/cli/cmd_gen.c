/* mlaverify gen: write a seeded golden bundle, or complete a captured one with expectations. */
#include <stdio.h>
#include <string.h>

#include "gen.h"
#include "cli.h"
#include "mlaverify.h"

int mlav_cmd_gen(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(mlav_gen_usage(), stdout);
            return 0;
        }
    mlav_gen_params p;
    const char *out = NULL;
    mlav_status s = mlav_gen_parse_args(argc - 1, argv + 1, &p, &out);
    if (s != MLAV_OK) {
        return cli_usage_error("gen", "%s", mlav_last_error(NULL));
    }
    mlav_gen_stats st;
    mlav_bundle b;
    s = mlav_gen_run(&p, out, &st, &b);
    if (s != MLAV_OK) {
        fprintf(stderr, "mlaverify gen: %s: %s\n", mlav_tool_status_string(s),
                mlav_last_error(NULL));
        return 2;
    }
    char shape[200];
    mlav_bundle_describe(&b, shape, sizeof shape);
    printf("wrote %s: %s, %d tokens, vocab %d, readout seed %llu\n", out, shape, b.T, b.vocab,
           (unsigned long long)b.readout_seed);
    printf("  accepted path lengths:");
    for (int32_t r = 0; r < b.B; r++) {
        int32_t n = 0;
        const int32_t *row = b.expect_accept + (size_t)r * (size_t)b.max_q_len;
        while (n < b.max_q_len && row[n] >= 0)
            n++;
        printf(" %d/%d", n, mlav_bundle_q_len(&b, r));
    }
    printf("\n  smallest margin %.2fx the decisive minimum", st.min_margin_ratio);
    if (p.expect_from)
        printf(", %d readout seed(s) tried, %d token(s) indecisive (not compared by check)",
               st.readout_tries, st.indecisive);
    else
        printf(", %d query row(s) redrawn to be decisive", st.redraws);
    printf("\n");
    mlav_bundle_free(&b);
    return 0;
}
