/* Command-line options of `mlaverify gen`, parsed in the library so that the tests can rerun
 * golden/regen.sh's exact commands in process and compare bytes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlaverify_internal.h"
#include "gen.h"

static const char usage_text[] =
    "usage: mlaverify gen [OPTIONS] OUT.safetensors\n"
    "       mlaverify gen --expect-from INPUTS.safetensors [--readout-tries N] OUT.safetensors\n"
    "\n"
    "Write a golden bundle (golden/FORMAT.md): seeded and deterministic, expectations from the\n"
    "fp64 oracle, every token decisive, unused pages and page slack NaN.\n"
    "\n"
    "  --seed N              seed of every draw (default 1)\n"
    "  --heads H             query heads (default 8)\n"
    "  --d-latent N          Dl, the latent width (default 512)\n"
    "  --d-rope N            Dr, the rope width (default 64)\n"
    "  --dtype T             bf16 | f16 | f32, of q (and out) (default bf16)\n"
    "  --kv-dtype T          of the KV cache: fp8 (alias fp8_e4m3: float8 e4m3fn bytes, value\n"
    "                        e4m3 x kv_scale) or the --dtype value (default)\n"
    "  --kv-scale S          fp8 only: the cache's scale; each KV value v is stored as\n"
    "                        e4m3(v / S) (default 1/224: the values, in [-1, 1), reach 224)\n"
    "  --page-size N         KV rows per page (default 16)\n"
    "  --req Q:P[:TREE[:ACC]]  a request of Q draft nodes after a P-row prefix. TREE: chain,\n"
    "                        bushy or deep (default deep). ACC, the accepted path: full, partial,\n"
    "                        none or a depth (default full, partial, none by request index).\n"
    "                        Repeat for a batch (default one request 9:256)\n"
    "  --vocab N             readout vocabulary (default 256)\n"
    "  --readout-seed N      seed of the readout matrix (default: the --seed value)\n"
    "  --spare-pages N       unused NaN pages shuffled into the pool (default 3)\n"
    "  --softmax-scale X     (default 1/sqrt(192), DeepSeek-V3's)\n"
    "\n"
    "  --expect-from FILE    complete an inputs-only bundle (golden/write_bundle.py) with the\n"
    "                        oracle's expectations; shapes come from FILE\n"
    "  --readout-tries N     with --expect-from: readout seeds tried, from the bundle's, for the\n"
    "                        fewest indecisive tokens (default 64)\n";

const char *mlav_gen_usage(void)
{
    return usage_text;
}

static int parse_i32(const char *s, int64_t lo, int64_t hi, int32_t *v)
{
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return 0;
    *v = (int32_t)x;
    return 1;
}

static int parse_seed(const char *s, uint64_t *v)
{
    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
        return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 0);
    if (errno || *end)
        return 0;
    *v = x;
    return 1;
}

/* "Q:P[:TREE[:ACC]]" */
static mlav_status parse_req(const char *spec, mlav_gen_request *r)
{
    char buf[128];
    if (strlen(spec) >= sizeof buf)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "--req '%.40s...' is too long", spec);
    strcpy(buf, spec);
    char *fields[5] = {0};
    int n = 0;
    for (char *p = buf, *tok; n < 5 && (tok = p) != NULL; n++) {
        p = strchr(p, ':');
        if (p)
            *p++ = '\0';
        fields[n] = tok;
    }
    r->tree = MLAV_TREE_DEEP;
    r->accept = MLAV_ACCEPT_AUTO;
    if (n < 2 || n > 4 || !parse_i32(fields[0], 1, MLAV_BUNDLE_MAX_Q_LEN, &r->q_len) ||
        !parse_i32(fields[1], 0, 1 << 28, &r->prefix))
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "--req '%s' is not Q:P[:TREE[:ACC]] with Q in [1, %d] (a bundle's "
                              "limit) and P in [0, 2^28]",
                              spec, MLAV_BUNDLE_MAX_Q_LEN);
    if (n >= 3) {
        if (!strcmp(fields[2], "chain"))
            r->tree = MLAV_TREE_CHAIN;
        else if (!strcmp(fields[2], "bushy"))
            r->tree = MLAV_TREE_BUSHY;
        else if (!strcmp(fields[2], "deep"))
            r->tree = MLAV_TREE_DEEP;
        else
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "--req '%s': tree '%s' is not chain, bushy or deep", spec,
                                  fields[2]);
    }
    if (n == 4) {
        if (!strcmp(fields[3], "full"))
            r->accept = MLAV_ACCEPT_FULL;
        else if (!strcmp(fields[3], "partial"))
            r->accept = MLAV_ACCEPT_PARTIAL;
        else if (!strcmp(fields[3], "none"))
            r->accept = MLAV_ACCEPT_NONE;
        else if (!parse_i32(fields[3], 0, MLAV_BUNDLE_MAX_Q_LEN, &r->accept))
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "--req '%s': accepted path '%s' is not full, partial, none or a "
                                  "depth",
                                  spec, fields[3]);
    }
    return MLAV_OK;
}

mlav_status mlav_gen_parse_args(int argc, char **argv, mlav_gen_params *p, const char **out_path)
{
    char vocab_range[32];
    snprintf(vocab_range, sizeof vocab_range, "2 to %d", MLAV_BUNDLE_MAX_VOCAB);
    mlav_gen_defaults(p);
    *out_path = NULL;
    int nreq = 0, shaped = 0, seed_set = 0, readout_set = 0, out_at = -1, kv_scale_set = 0;
    /* --kv-dtype names fp8 or q's dtype, which --dtype may give later: resolved after the loop */
    mlav_dtype kv_named = MLAV_DTYPE_F32;
    const char *kv_name = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0') {
            if (*out_path)
                return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                      "one output file only ('%s' and '%s' given)", *out_path, a);
            *out_path = a;
            out_at = i;
            continue;
        }
        if (i + 1 >= argc)
            return mlav_set_error(MLAV_ERR_INVALID_ARG, "option %s needs a value", a);
        const char *v = argv[++i];
        int ok = 1;
        const char *want = NULL; /* the values an option takes, for the sentence on a bad one */
        if (!strcmp(a, "--seed")) {
            ok = parse_seed(v, &p->seed);
            want = "an unsigned 64-bit decimal integer";
            seed_set = 1;
        } else if (!strcmp(a, "--heads")) {
            ok = parse_i32(v, 1, 4096, &p->H);
            want = "1 to 4096";
            shaped = 1;
        } else if (!strcmp(a, "--d-latent")) {
            ok = parse_i32(v, 1, 16384, &p->Dl);
            want = "1 to 16384";
            shaped = 1;
        } else if (!strcmp(a, "--d-rope")) {
            ok = parse_i32(v, 0, 16384, &p->Dr);
            want = "0 to 16384";
            shaped = 1;
        } else if (!strcmp(a, "--dtype")) {
            shaped = 1;
            mlav_dtype qd; /* the library's one table of names; q is never FP8 */
            ok = mlav_dtype_parse(v, &qd) == MLAV_OK && qd != MLAV_DTYPE_FP8_E4M3;
            if (ok)
                p->dtype = qd;
            want = "bf16, f16 or f32";
        } else if (!strcmp(a, "--kv-dtype")) {
            shaped = 1;
            kv_name = v;
            mlav_dtype kd; /* the library's one table of names (mlav_dtype_alias) */
            ok = mlav_dtype_parse(v, &kd) == MLAV_OK;
            if (ok)
                kv_named = kd;
            want = "fp8_e4m3 (fp8), bf16, f16 or f32, or an alias of mlav_dtype_alias";
        } else if (!strcmp(a, "--kv-scale")) {
            char *end;
            double x = strtod(v, &end);
            ok = *v && !*end && isfinite(x) && x > 0.0 && isfinite((float)x) && (float)x > 0.0f;
            p->kv_scale = (float)x;
            want = "a finite number > 0";
            kv_scale_set = 1;
            shaped = 1;
        } else if (!strcmp(a, "--page-size")) {
            ok = parse_i32(v, 1, 1 << 20, &p->page_size);
            want = "1 to 1048576";
            shaped = 1;
        } else if (!strcmp(a, "--vocab")) {
            ok = parse_i32(v, 2, MLAV_BUNDLE_MAX_VOCAB, &p->vocab);
            want = vocab_range;
            shaped = 1;
        } else if (!strcmp(a, "--readout-seed")) {
            ok = parse_seed(v, &p->readout_seed);
            want = "an unsigned 64-bit decimal integer";
            readout_set = 1;
            shaped = 1;
        } else if (!strcmp(a, "--spare-pages")) {
            ok = parse_i32(v, 1, 65536, &p->spare_pages);
            want = "1 to 65536";
            shaped = 1;
        } else if (!strcmp(a, "--softmax-scale")) {
            char *end;
            double x = strtod(v, &end);
            ok = *v && !*end && isfinite(x) && x > 0.0;
            p->softmax_scale = (float)x;
            want = "a finite number > 0";
            shaped = 1;
        } else if (!strcmp(a, "--req")) {
            if (nreq >= MLAV_GEN_MAX_REQUESTS)
                return mlav_set_error(MLAV_ERR_INVALID_ARG, "more than %d --req",
                                      MLAV_GEN_MAX_REQUESTS);
            mlav_status s = parse_req(v, &p->req[nreq]);
            if (s != MLAV_OK)
                return s;
            nreq++;
            shaped = 1;
        } else if (!strcmp(a, "--expect-from")) {
            p->expect_from = v;
        } else if (!strcmp(a, "--readout-tries")) {
            ok = parse_i32(v, 1, 1 << 20, &p->readout_tries);
            want = "1 to 1048576";
        } else {
            return mlav_set_error(MLAV_ERR_INVALID_ARG, "unknown option %s", a);
        }
        if (!ok)
            return mlav_set_error(MLAV_ERR_INVALID_ARG, "bad value '%s' for %s (%s)", v, a,
                                  want ? want : "see --help");
    }
    if (!*out_path)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "no output file given");
    if (p->expect_from && (shaped || seed_set))
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "--expect-from takes every shape and seed from its input bundle; "
                              "only --readout-tries may go with it");
    if (kv_name && kv_named != MLAV_DTYPE_FP8_E4M3 && kv_named != p->dtype)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "--kv-dtype %s with --dtype %s: the cache has the q dtype or is fp8",
                              kv_name, mlav_dtype_name(p->dtype));
    p->kv_dtype = kv_named == MLAV_DTYPE_FP8_E4M3 ? MLAV_DTYPE_FP8_E4M3 : p->dtype;
    if (kv_scale_set && p->kv_dtype != MLAV_DTYPE_FP8_E4M3)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "--kv-scale is the scale of an FP8 cache: it goes with --kv-dtype "
                              "fp8");
    if (nreq > 0)
        p->B = nreq;
    if (!readout_set)
        p->readout_seed = p->seed;
    /* the metadata records the command, less the output path, so a regenerated bundle is
     * byte-identical wherever it is written */
    size_t n = (size_t)snprintf(p->source, sizeof p->source, "mlaverify gen");
    for (int i = 0; i < argc && n < sizeof p->source; i++)
        if (i != out_at)
            n += (size_t)snprintf(p->source + n, sizeof p->source - n, " %s", argv[i]);
    if (n >= sizeof p->source)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "the command line is too long");
    return MLAV_OK;
}
