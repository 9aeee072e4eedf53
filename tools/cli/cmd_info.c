/* mlaverify info: version, backends compiled in, CUDA devices, what AUTO picks and why. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mlaverify.h"

int mlav_cmd_info(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "-h") && strcmp(argv[1], "--help"))
        return cli_usage_error("info", "takes no arguments ('%s' given)", argv[1]);
    if (argc > 1) {
        printf("usage: mlaverify info\n\n"
               "Prints, one per line: the library's version (and the header's it was built\n"
               "with); the backends compiled in (and whether the NCCL exchange of\n"
               "context-parallel verify is); the CUDA devices of compute capability 8.0 or\n"
               "more, each with its name, compute capability, SMs, shared memory, L2 and driver;\n"
               "the backend AUTO picks and why (MLAV_BACKEND in the environment overrides it).\n"
               "Exit status 0, or 2 when AUTO cannot make a context (the line says why).\n");
        return 0;
    }
    printf("mlaverify %s (header %d, library %u)\n", mlav_version_string(), MLAV_VERSION_NUMBER,
           mlav_version_number());
    printf("backends compiled in:");
    static const mlav_backend all[] = {MLAV_BACKEND_CUDA, MLAV_BACKEND_CUDA_NAIVE,
                                       MLAV_BACKEND_CPU, MLAV_BACKEND_REFERENCE};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (mlav_backend_compiled(all[i]))
            printf(" %s", mlav_backend_name(all[i]));
    printf("\n");
    printf("nccl exchange (mlav_cp_merge_states): %s\n",
           mlav_nccl_compiled() ? "built in" : "not built in (needs CUDA and NCCL at configure time)");
    int n = mlav_cuda_device_count();
    printf("cuda devices (cc >= 8.0): %d\n", n);
    for (int i = 0; i < n; i++) {
        char buf[256];
        if (mlav_cuda_device_describe(i, buf, sizeof buf) == MLAV_OK)
            printf("  [%d] %s\n", i, buf);
    }
    mlav_context *ctx = NULL;
    mlav_status s = mlav_context_create(&ctx, MLAV_BACKEND_AUTO);
    if (s != MLAV_OK) {
        printf("auto: error %s: %s\n", mlav_status_string(s), mlav_last_error(ctx));
        return 2;
    }
    printf("auto picks: %s (%s)\n", mlav_backend_name(mlav_context_backend(ctx)),
           mlav_context_note(ctx));
    mlav_context_free(ctx);
    return 0;
}
