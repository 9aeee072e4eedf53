/* The bundle format: safetensors round trips, byte-exact rewrites, expectations equal to the
 * fp64 oracle, the readout stream, and every malformed file rejected with MLAV_ERR_FORMAT and a
 * sentence naming the tensor (never a crash, never a read out of bounds). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bundle.h"
#include "gen.h"
#include "readout.h"
#include "safetensors.h"
#include "../src/common/dtype.h"
#include "../src/cpu/oracle.h"
#include "../src/dispatch/validate.h"
#include "test_util.h"

static char dir[256];
static char base_path[300], mut_path[300];

static void path_in_dir(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* A tiny bundle from gen's own argument parser: 2 heads, dims 16+8, two requests; `kv` (may be
 * NULL) adds "--kv-dtype fp8" and `kv_scale` (may be NULL) its scale. */
static void make_bundle_kv(const char *path, const char *dtype, const char *kv,
                           const char *kv_scale, mlav_bundle *out)
{
    char *argv[24] = {"--seed",      "7",        "--heads",   "2",         "--d-latent",
                      "16",          "--d-rope", "8",         "--dtype",   (char *)dtype,
                      "--page-size", "4",        "--vocab",   "16",        "--req",
                      "3:5:bushy",   "--req",    "4:0:chain"};
    int argc = 18;
    if (kv) {
        argv[argc++] = "--kv-dtype";
        argv[argc++] = (char *)kv;
    }
    if (kv_scale) {
        argv[argc++] = "--kv-scale";
        argv[argc++] = (char *)kv_scale;
    }
    argv[argc++] = (char *)path;
    mlav_gen_params p;
    const char *o;
    assert_int_equal(mlav_gen_parse_args(argc, argv, &p, &o), MLAV_OK);
    assert_string_equal(o, path);
    mlav_gen_stats st;
    mlav_bundle b;
    mlav_status s = mlav_gen_run(&p, path, &st, &b);
    if (s != MLAV_OK)
        fail_msg("gen %s%s: %s: %s", dtype, kv ? " --kv-dtype fp8" : "", mlav_tool_status_string(s),
                 mlav_last_error(NULL));
    if (out)
        *out = b;
    else
        mlav_bundle_free(&b);
}

static void make_bundle(const char *path, const char *dtype, mlav_bundle *out)
{
    make_bundle_kv(path, dtype, NULL, NULL, out);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *n = (size_t)size;
    return buf;
}

/* Rewrite a file as a new inode: truncating one in place makes ext4 flush it on close
 * (auto_da_alloc), milliseconds each, and the fuzz test writes thousands. */
static void fresh(const char *path)
{
    unlink(path);
}

static void spill(const char *path, const void *bytes, size_t n)
{
    fresh(path);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mlav_format_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    path_in_dir(base_path, sizeof base_path, "base.safetensors");
    path_in_dir(mut_path, sizeof mut_path, "mut.safetensors");
    make_bundle(base_path, "bf16", NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    static const char *names[] = {"base.safetensors", "mut.safetensors", "again.safetensors",
                                  "f32.safetensors",  "f16.safetensors", "bf16.safetensors",
                                  "fp8.safetensors",  "fp8_again.safetensors"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[300];
        path_in_dir(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return 0;
}

/* ---- raw header surgery --------------------------------------------------------------------- */

typedef struct raw {
    unsigned char *bytes;
    size_t size, hlen;
} raw;

static raw load_raw(const char *path)
{
    raw r;
    r.bytes = slurp(path, &r.size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | r.bytes[i];
    r.hlen = (size_t)n;
    return r;
}

static cJSON *header_of(const raw *r)
{
    cJSON *h = cJSON_ParseWithLength((const char *)r->bytes + 8, r->hlen);
    assert_non_null(h);
    return h;
}

/* Write `hdr` (unpadded) followed by the data of `r` less `cut` bytes at the end. */
static void write_with(const raw *r, cJSON *hdr, size_t cut)
{
    char *txt = cJSON_PrintUnformatted(hdr);
    size_t n = strlen(txt);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(((uint64_t)n >> (8 * i)) & 0xff);
    fresh(mut_path);
    FILE *f = fopen(mut_path, "wb");
    assert_non_null(f);
    fwrite(len8, 1, 8, f);
    fwrite(txt, 1, n, f);
    size_t data = r->size - 8 - r->hlen - cut;
    fwrite(r->bytes + 8 + r->hlen, 1, data, f);
    fclose(f);
    free(txt);
}

static cJSON *entry(cJSON *hdr, const char *name)
{
    cJSON *e = cJSON_GetObjectItemCaseSensitive(hdr, name);
    assert_non_null(e);
    return e;
}

static void set_num(cJSON *arr, int k, double v)
{
    cJSON_ReplaceItemInArray(arr, k, cJSON_CreateNumber(v));
}

static uint64_t offset_of(cJSON *hdr, const char *name, int k)
{
    return (uint64_t)cJSON_GetArrayItem(
               cJSON_GetObjectItemCaseSensitive(entry(hdr, name), "data_offsets"), k)
        ->valuedouble;
}

/* Read mut_path and require MLAV_ERR_FORMAT with every given phrase in the sentence. */
static void expect_format_error(const char *what, ...)
{
    mlav_bundle b;
    mlav_status s = mlav_bundle_read(mut_path, MLAV_BUNDLE_FULL, &b);
    const char *msg = mlav_last_error(NULL);
    if (s != MLAV_ERR_FORMAT) {
        print_error("%s: expected MLAV_ERR_FORMAT, got %s (%s)\n", what, mlav_tool_status_string(s),
                    msg);
        if (s == MLAV_OK)
            mlav_bundle_free(&b);
        fail();
    }
    va_list ap;
    va_start(ap, what);
    for (const char *phrase; (phrase = va_arg(ap, const char *)) != NULL;)
        if (!strstr(msg, phrase)) {
            print_error("%s: the sentence \"%s\" lacks \"%s\"\n", what, msg, phrase);
            va_end(ap);
            fail();
        }
    va_end(ap);
    assert_null(b.q); /* a failed read leaves nothing behind */
}

/* ---- st-level surgery (tensors removed or rewritten, file rebuilt contiguously) ------------- */

static void st_remove(mlav_st_file *f, const char *name)
{
    for (int32_t i = 0; i < f->num_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) {
            free(f->tensors[i].name);
            free(f->tensors[i].data);
            memmove(&f->tensors[i], &f->tensors[i + 1],
                    sizeof *f->tensors * (size_t)(f->num_tensors - i - 1));
            f->num_tensors--;
            return;
        }
    fail_msg("no tensor %s", name);
}

static void st_set_meta(mlav_st_file *f, const char *key, const char *value)
{
    for (int32_t i = 0; i < f->num_meta; i++)
        if (!strcmp(f->meta[i].key, key)) {
            free(f->meta[i].value);
            f->meta[i].value = strdup(value);
            return;
        }
    assert_int_equal(mlav_st_add_meta(f, key, value), MLAV_OK);
}

static int32_t *st_i32(mlav_st_file *f, const char *name)
{
    mlav_st_tensor *t = mlav_st_find(f, name);
    assert_non_null(t);
    return (int32_t *)t->data;
}

static void st_base(mlav_st_file *f)
{
    assert_int_equal(mlav_st_read(base_path, f), MLAV_OK);
}

static void st_save(mlav_st_file *f)
{
    fresh(mut_path);
    assert_int_equal(mlav_st_write(mut_path, f), MLAV_OK);
    mlav_st_free(f);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void bundles_equal(const mlav_bundle *a, const mlav_bundle *b)
{
    assert_int_equal(a->H, b->H);
    assert_int_equal(a->Dl, b->Dl);
    assert_int_equal(a->Dr, b->Dr);
    assert_int_equal(a->vocab, b->vocab);
    assert_true(a->readout_seed == b->readout_seed);
    assert_string_equal(a->source, b->source);
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(mlav_bundle_kv_dtype(a), mlav_bundle_kv_dtype(b));
    assert_memory_equal(&a->kv_scale, &b->kv_scale, sizeof(float));
    assert_int_equal(a->T, b->T);
    assert_int_equal(a->B, b->B);
    assert_int_equal(a->page_size, b->page_size);
    assert_int_equal(a->max_pages, b->max_pages);
    assert_int_equal(a->num_pages, b->num_pages);
    assert_int_equal(a->max_q_len, b->max_q_len);
    assert_memory_equal(&a->softmax_scale, &b->softmax_scale, sizeof(float));
    size_t esz = mlav_dtype_size(a->dtype), T = (size_t)a->T, H = (size_t)a->H;
    size_t kv_esz = mlav_dtype_size(mlav_bundle_kv_dtype(a));
    assert_memory_equal(a->q, b->q, T * H * (size_t)a->W * esz);
    assert_memory_equal(a->kv_cache, b->kv_cache,
                        (size_t)a->num_pages * (size_t)a->page_size * (size_t)a->W * kv_esz);
    assert_memory_equal(a->page_table, b->page_table, 4 * (size_t)a->B * (size_t)a->max_pages);
    assert_memory_equal(a->q_indptr, b->q_indptr, 4 * ((size_t)a->B + 1));
    assert_memory_equal(a->kv_lens, b->kv_lens, 4 * (size_t)a->B);
    assert_memory_equal(a->tree_parents, b->tree_parents, 4 * T);
    assert_memory_equal(a->draft_tokens, b->draft_tokens, 4 * T);
    assert_memory_equal(a->expect_out, b->expect_out, 4 * T * H * (size_t)a->Dl);
    assert_memory_equal(a->expect_lse, b->expect_lse, 4 * T * H);
    assert_memory_equal(a->expect_tokens, b->expect_tokens, 4 * T);
    assert_memory_equal(a->expect_margin, b->expect_margin, 4 * T);
    assert_memory_equal(a->expect_accept, b->expect_accept,
                        4 * (size_t)a->B * (size_t)a->max_q_len);
}

/* gen -> file -> read gives back every array; read -> write gives back every byte. */
static void test_bundle_format_roundtrip(void **state)
{
    (void)state;
    static const char *dtypes[] = {"bf16", "f16", "f32"};
    for (size_t i = 0; i < 3; i++) {
        char path[300], again[300];
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, dtypes[i]);
        path_in_dir(again, sizeof again, "again.safetensors");
        mlav_bundle made, read;
        make_bundle(path, dtypes[i], &made);
        assert_int_equal(mlav_bundle_read(path, MLAV_BUNDLE_FULL, &read), MLAV_OK);
        bundles_equal(&made, &read);
        assert_int_equal(mlav_bundle_write(again, &read), MLAV_OK);
        size_t n1, n2;
        unsigned char *b1 = slurp(path, &n1), *b2 = slurp(again, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(b1, b2, n1);
        /* the data section starts 8-byte aligned, as safetensors writes it */
        raw r = load_raw(path);
        assert_int_equal((8 + r.hlen) % 8, 0);
        free(r.bytes);
        free(b1);
        free(b2);
        mlav_bundle_free(&made);
        mlav_bundle_free(&read);
    }
}

/* The stored expectations are the fp64 oracle over the stored inputs, bit for bit (rows whose
 * query gen redrew included), and the tokens and margins its readout. */
static void expectations_are_the_oracle(const char *path)
{
    mlav_bundle b;
    assert_int_equal(mlav_bundle_read(path, MLAV_BUNDLE_FULL, &b), MLAV_OK);
    mlav_problem p = mlav_bundle_problem(&b);
    mlav_problem_info info;
    assert_int_equal(mlav_problem_validate(&p, &info), MLAV_OK);
    uint32_t *mask;
    assert_int_equal(mlav_bundle_tree_mask(&b, &mask), MLAV_OK);
    const size_t rows = (size_t)b.T * (size_t)b.H;
    double *o = calloc(rows * (size_t)b.Dl, sizeof(double)), *l = calloc(rows, sizeof(double));
    mlav_tensors t = mlav_bundle_tensors(&b, mask, NULL, NULL);
    assert_int_equal(mlav_oracle_compute(&info, &t, o, l), MLAV_OK);
    for (size_t k = 0; k < rows * (size_t)b.Dl; k++)
        if ((float)o[k] != b.expect_out[k])
            fail_msg("expect_out[%zu] = %.9g, the oracle says %.9g", k, (double)b.expect_out[k],
                     o[k]);
    for (size_t k = 0; k < rows; k++)
        assert_true((float)l[k] == b.expect_lse[k]);
    int32_t *tok = calloc((size_t)b.T, sizeof(int32_t));
    double *mg = calloc((size_t)b.T, sizeof(double));
    assert_int_equal(
        mlav_readout_tokens(b.T, (int64_t)b.H * b.Dl, b.vocab, b.readout_seed, o, tok, mg),
        MLAV_OK);
    for (int32_t k = 0; k < b.T; k++) {
        assert_int_equal(tok[k], b.expect_tokens[k]);
        assert_true((float)mg[k] == b.expect_margin[k]);
        /* and every token is decisive */
        assert_true((double)b.expect_margin[k] >=
                    mlav_required_margin(b.dtype, b.expect_out + (size_t)k * (size_t)b.H * b.Dl,
                                         (int64_t)b.H * b.Dl));
    }
    mlav_problem_info_free(&info);
    free(mask);
    free(o);
    free(l);
    free(tok);
    free(mg);
    mlav_bundle_free(&b);
}

static void test_bundle_format_expectations_are_the_oracle(void **state)
{
    (void)state;
    expectations_are_the_oracle(base_path);
}

/* The counter-based R of the readout is the sequential splitmix64 stream of the format. */
static void test_bundle_format_readout_stream(void **state)
{
    (void)state;
    const uint64_t seed = 0x123456789abcdefull;
    uint64_t x = seed;
    for (uint64_t k = 0; k < 1000; k++) {
        uint64_t z = (x += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float want = (float)((double)(z >> 40) / 16777216.0 * 2.0 - 1.0);
        assert_true(mlav_readout_r(seed, k) == want);
        assert_true(want >= -1.0f && want < 1.0f);
    }
    /* ties go to the lowest token; NaN rows give -1 */
    double out[2 * 6] = {0};
    out[6] = NAN;
    int32_t tok[2];
    double mg[2];
    assert_int_equal(mlav_readout_tokens(2, 6, 8, 1, out, tok, mg), MLAV_OK);
    assert_int_equal(tok[0], 0);
    assert_true(mg[0] == 0.0);
    assert_int_equal(tok[1], -1);
    assert_true(isnan(mg[1]));
}

/* Container-level damage: each is MLAV_ERR_FORMAT with a sentence saying what and where. */
static void test_bundle_format_container_errors(void **state)
{
    (void)state;
    raw r = load_raw(base_path);
    cJSON *h;

    spill(mut_path, r.bytes, 5);
    expect_format_error("short file", "shorter than the 8-byte header length", NULL);

    unsigned char *copy = malloc(r.size);
    memcpy(copy, r.bytes, r.size);
    copy[5] = 0x01; /* header length of 2^40 */
    spill(mut_path, copy, r.size);
    expect_format_error("header length past the end", "header length", "past the end of the file",
                        NULL);
    memcpy(copy, r.bytes, r.size);
    copy[8] = '[';
    spill(mut_path, copy, r.size);
    expect_format_error("not an object", "does not start with '{'", NULL);
    memcpy(copy, r.bytes, r.size);
    copy[8 + r.hlen / 2] = '\x01';
    spill(mut_path, copy, r.size);
    expect_format_error("control byte", "not valid JSON", "control byte", NULL);
    memcpy(copy, r.bytes, r.size);
    *(unsigned char *)memchr(copy + 8, ':', r.hlen) = ';';
    spill(mut_path, copy, r.size);
    expect_format_error("bad JSON", "not valid JSON", NULL);
    memcpy(copy, r.bytes, r.size);
    copy[8 + r.hlen - 1] = 'x'; /* the padding must be spaces (the header is padded: hlen %8) */
    spill(mut_path, copy, r.size);
    if (r.bytes[8 + r.hlen - 1] == ' ')
        expect_format_error("trailing junk", "non-space bytes after", NULL);
    free(copy);

    /* the file cut short: the last tensor (kv_cache) runs past the end */
    h = header_of(&r);
    write_with(&r, h, 100);
    expect_format_error("truncated", "'kv_cache'", "past the end", "truncated", NULL);
    cJSON_Delete(h);

    h = header_of(&r);
    cJSON_ReplaceItemInObject(entry(h, "q"), "dtype", cJSON_CreateString("F33"));
    write_with(&r, h, 0);
    expect_format_error("unknown dtype", "'q'", "unknown dtype", NULL);
    cJSON_Delete(h);

    h = header_of(&r);
    cJSON_ReplaceItemInObject(entry(h, "q"), "dtype", cJSON_CreateString("F32"));
    write_with(&r, h, 0);
    expect_format_error("dtype vs bytes", "'q'", "dtype F32", "bytes", NULL);
    cJSON_Delete(h);

    h = header_of(&r);
    set_num(cJSON_GetObjectItemCaseSensitive(entry(h, "kv_cache"), "shape"), 0, 1e6);
    write_with(&r, h, 0);
    expect_format_error("shape vs bytes", "'kv_cache'", "shape [1000000,", NULL);
    cJSON_Delete(h);

    h = header_of(&r);
    set_num(cJSON_GetObjectItemCaseSensitive(entry(h, "q"), "shape"), 1, 1.5);
    write_with(&r, h, 0);
    expect_format_error("fractional dim", "'q'", "not a non-negative integer", NULL);
    cJSON_Delete(h);

    h = header_of(&r);
    set_num(cJSON_GetObjectItemCaseSensitive(entry(h, "q"), "data_offsets"), 0, -8);
    write_with(&r, h, 0);
    expect_format_error("negative offset", "'q'", "data_offsets", NULL);
    cJSON_Delete(h);

    h = header_of(&r);
    {
        cJSON *o = cJSON_GetObjectItemCaseSensitive(entry(h, "q"), "data_offsets");
        uint64_t b0 = offset_of(h, "q", 0), e0 = offset_of(h, "q", 1);
        set_num(o, 0, (double)e0);
        set_num(o, 1, (double)b0);
    }
    write_with(&r, h, 0);
    expect_format_error("reversed offsets", "'q'", "end before they begin", NULL);
    cJSON_Delete(h);

    /* q moved 4 bytes down: it overlaps the tensor before it */
    h = header_of(&r);
    {
        cJSON *o = cJSON_GetObjectItemCaseSensitive(entry(h, "q"), "data_offsets");
        set_num(o, 0, (double)(offset_of(h, "q", 0) - 4));
        set_num(o, 1, (double)(offset_of(h, "q", 1) - 4));
    }
    write_with(&r, h, 0);
    expect_format_error("overlap", "'q'", "overlap", NULL);
    cJSON_Delete(h);

    /* q moved 4 bytes up: a gap before it (safetensors forbids gaps) */
    h = header_of(&r);
    {
        cJSON *o = cJSON_GetObjectItemCaseSensitive(entry(h, "q"), "data_offsets");
        set_num(o, 0, (double)(offset_of(h, "q", 0) + 4));
        set_num(o, 1, (double)(offset_of(h, "q", 1) + 4));
    }
    write_with(&r, h, 0);
    expect_format_error("gap", "'q'", "contiguous", NULL);
    cJSON_Delete(h);

    /* extra bytes after the last tensor */
    h = header_of(&r);
    write_with(&r, h, 0);
    {
        FILE *f = fopen(mut_path, "ab");
        fputs("extra", f);
        fclose(f);
    }
    expect_format_error("trailing data", "cover", NULL);
    cJSON_Delete(h);

    h = header_of(&r);
    cJSON_AddItemToObject(h, "q", cJSON_Duplicate(entry(h, "q"), 1));
    write_with(&r, h, 0);
    expect_format_error("duplicate", "'q'", "twice", NULL);
    cJSON_Delete(h);

    h = header_of(&r);
    cJSON_ReplaceItemInObject(entry(h, "__metadata__"), "vocab", cJSON_CreateNumber(16));
    write_with(&r, h, 0);
    expect_format_error("metadata number", "\"vocab\"", "not a string", NULL);
    cJSON_Delete(h);

    h = header_of(&r);
    cJSON_DeleteItemFromObject(entry(h, "kv_lens"), "shape");
    write_with(&r, h, 0);
    expect_format_error("no shape", "'kv_lens'", "\"shape\"", NULL);
    cJSON_Delete(h);

    mlav_bundle b;
    assert_int_equal(mlav_bundle_read("/nonexistent/dir/x.safetensors", MLAV_BUNDLE_FULL, &b),
                     MLAV_ERR_IO);
    free(r.bytes);
}

/* Bundle-level damage: names, dtypes, shapes, lengths and values. */
static void test_bundle_format_bundle_errors(void **state)
{
    (void)state;
    mlav_st_file f;
    mlav_bundle b;

    st_base(&f);
    st_set_meta(&f, "format", "something-else");
    st_save(&f);
    expect_format_error("format", "'format'", "something-else", NULL);

    st_base(&f);
    st_set_meta(&f, "version", "2");
    st_save(&f);
    expect_format_error("version", "version \"2\"", "reads version 1", NULL);

    st_base(&f);
    st_set_meta(&f, "num_heads", "3");
    st_save(&f);
    expect_format_error("heads vs q", "'q'", "num_heads", NULL);

    st_base(&f);
    st_set_meta(&f, "readout_seed", "-1");
    st_save(&f);
    expect_format_error("seed", "'readout_seed'", NULL);

    static const char *must[] = {"q",
                                 "kv_cache",
                                 "page_table",
                                 "q_indptr",
                                 "kv_lens",
                                 "tree_parents",
                                 "softmax_scale",
                                 "draft_tokens",
                                 "expect_out",
                                 "expect_lse",
                                 "expect_tokens",
                                 "expect_accept",
                                 "expect_margin"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        st_base(&f);
        st_remove(&f, must[i]);
        st_save(&f);
        char phrase[64];
        snprintf(phrase, sizeof phrase, "missing tensor '%s'", must[i]);
        expect_format_error(must[i], phrase, NULL);
    }

    st_base(&f);
    assert_int_equal(mlav_st_add_tensor(&f, "lse_from_engine", "F32", 1, (int64_t[]){2}, NULL),
                     MLAV_OK);
    st_save(&f);
    expect_format_error("unknown tensor", "unknown tensor 'lse_from_engine'", NULL);

    /* kv_cache stored as F32 beside a BF16 q */
    st_base(&f);
    {
        mlav_st_tensor *kv = mlav_st_find(&f, "kv_cache");
        int64_t shape[3] = {kv->shape[0], kv->shape[1], kv->shape[2]};
        st_remove(&f, "kv_cache");
        assert_int_equal(mlav_st_add_tensor(&f, "kv_cache", "F32", 3, shape, NULL), MLAV_OK);
    }
    st_save(&f);
    expect_format_error("kv dtype", "'kv_cache'", "share one dtype", NULL);

    /* tree_parents one node short: inconsistent with q's T */
    st_base(&f);
    {
        mlav_st_tensor *tp = mlav_st_find(&f, "tree_parents");
        int64_t n[1] = {tp->shape[0] - 1};
        st_remove(&f, "tree_parents");
        assert_int_equal(mlav_st_add_tensor(&f, "tree_parents", "I32", 1, n, NULL), MLAV_OK);
    }
    st_save(&f);
    expect_format_error("tree_parents length", "'tree_parents'", "[T]", NULL);

    /* kv_lens for one request more than page_table has rows */
    st_base(&f);
    {
        mlav_st_tensor *kl = mlav_st_find(&f, "kv_lens");
        int64_t n[1] = {kl->shape[0] + 1};
        st_remove(&f, "kv_lens");
        assert_int_equal(mlav_st_add_tensor(&f, "kv_lens", "I32", 1, n, NULL), MLAV_OK);
    }
    st_save(&f);
    expect_format_error("kv_lens length", "'kv_lens'", "page_table rows", NULL);

    st_base(&f);
    st_i32(&f, "q_indptr")[2] += 1;
    st_save(&f);
    expect_format_error("q_indptr end", "q_indptr[B = 2]", "T = 7", NULL);

    st_base(&f);
    st_i32(&f, "q_indptr")[1] = 0;
    st_save(&f);
    expect_format_error("empty request", "request 0", "q_len of 0", NULL);

    st_base(&f);
    st_i32(&f, "kv_lens")[1] = 2;
    st_save(&f);
    expect_format_error("kv_len < q_len", "kv_lens[1] = 2", NULL);

    st_base(&f);
    st_i32(&f, "page_table")[1] = 999;
    st_save(&f);
    expect_format_error("page id", "page_table[0][1] = 999", "num_pages", NULL);

    st_base(&f);
    st_i32(&f, "tree_parents")[2] = 2;
    st_save(&f);
    expect_format_error("parent", "tree_parents[2] = 2", "request 0, node 2", NULL);

    st_base(&f);
    st_i32(&f, "tree_parents")[3] = 0;
    st_save(&f);
    expect_format_error("root", "tree_parents[3] = 0", "the root", NULL);

    st_base(&f);
    st_i32(&f, "draft_tokens")[4] = 16;
    st_save(&f);
    expect_format_error("draft token", "draft_tokens[4] = 16", "vocab = 16", NULL);

    st_base(&f);
    st_i32(&f, "expect_tokens")[0] = -5;
    st_save(&f);
    expect_format_error("expected token", "expect_tokens[0] = -5", NULL);

    st_base(&f);
    st_i32(&f, "expect_accept")[0] = 1;
    st_save(&f);
    expect_format_error("accept root", "expect_accept[0][0] = 1", NULL);

    st_base(&f);
    {
        int32_t *acc = st_i32(&f, "expect_accept");
        acc[1] = 3; /* request 0 has nodes 0..2 only */
        acc[2] = -1;
    }
    st_save(&f);
    expect_format_error("accept path", "expect_accept[0][1] = 3", NULL);

    st_base(&f);
    ((float *)mlav_st_find(&f, "expect_margin")->data)[1] = -1.0f;
    st_save(&f);
    expect_format_error("margin", "expect_margin[1]", NULL);

    st_base(&f);
    ((float *)mlav_st_find(&f, "softmax_scale")->data)[0] = NAN;
    st_save(&f);
    expect_format_error("scale", "softmax_scale", "not finite", NULL);

    st_base(&f);
    {
        mlav_st_tensor *eo = mlav_st_find(&f, "expect_out");
        int64_t shape[3] = {eo->shape[0], eo->shape[1], eo->shape[2] + 8};
        st_remove(&f, "expect_out");
        assert_int_equal(mlav_st_add_tensor(&f, "expect_out", "F32", 3, shape, NULL), MLAV_OK);
    }
    st_save(&f);
    expect_format_error("expect_out shape", "'expect_out'", "[T, num_heads, d_latent]", NULL);

    /* the base itself is fine */
    assert_int_equal(mlav_bundle_read(base_path, MLAV_BUNDLE_FULL, &b), MLAV_OK);
    mlav_bundle_free(&b);
}

/* An inputs bundle (no expectations, no draft tokens) is what --expect-from reads; a check
 * refuses it; half the expectations is an error in either mode. */
static void test_bundle_format_inputs_mode(void **state)
{
    (void)state;
    mlav_st_file f;
    mlav_bundle b;
    st_base(&f);
    static const char *drop[] = {"expect_out",    "expect_lse",    "expect_tokens",
                                 "expect_accept", "expect_margin", "draft_tokens"};
    for (size_t i = 0; i < 6; i++)
        st_remove(&f, drop[i]);
    st_save(&f);
    assert_int_equal(mlav_bundle_read(mut_path, MLAV_BUNDLE_INPUTS, &b), MLAV_OK);
    assert_null(b.expect_out);
    assert_null(b.draft_tokens);
    mlav_gen_params p;
    mlav_gen_defaults(&p);
    mlav_gen_stats st;
    assert_int_equal(mlav_gen_expect(&p, &b, &st), MLAV_OK);
    assert_non_null(b.expect_out);
    assert_non_null(b.draft_tokens);
    assert_int_equal(mlav_bundle_validate(&b, MLAV_BUNDLE_FULL), MLAV_OK);
    mlav_bundle_free(&b);
    expect_format_error("inputs read as full", "missing tensor 'expect_out'", NULL);

    st_base(&f);
    st_remove(&f, "expect_lse");
    st_save(&f);
    assert_int_equal(mlav_bundle_read(mut_path, MLAV_BUNDLE_INPUTS, &b), MLAV_ERR_FORMAT);
    assert_non_null(strstr(mlav_last_error(NULL), "missing tensor 'expect_lse'"));
}

/* Random damage anywhere in the file, and every truncation: MLAV_OK or MLAV_ERR_FORMAT, never a
 * crash (run under MLAV_SANITIZE=address to catch any out-of-bounds read). */
static void test_bundle_format_fuzz(void **state)
{
    (void)state;
    raw r = load_raw(base_path);
    unsigned char *copy = malloc(r.size);
    uint64_t seed = tu_seed(), rng = seed;
    int ok = 0, bad = 0;
    for (int it = 0; it < 1500; it++) {
        memcpy(copy, r.bytes, r.size);
        int flips = 1 + (int)(tu_next(&rng) % 4);
        for (int k = 0; k < flips; k++) {
            /* mostly the header, where the structure is; sometimes the length or the data */
            uint64_t u = tu_next(&rng);
            size_t at = u % 4 == 0 ? (size_t)(tu_next(&rng) % r.size)
                                   : 8 + (size_t)(tu_next(&rng) % r.hlen);
            copy[at] = (unsigned char)tu_next(&rng);
        }
        size_t n = tu_next(&rng) % 8 == 0 ? (size_t)(tu_next(&rng) % r.size) : r.size;
        spill(mut_path, copy, n);
        mlav_bundle b;
        mlav_status s = mlav_bundle_read(mut_path, MLAV_BUNDLE_FULL, &b);
        if (s != MLAV_OK && s != MLAV_ERR_FORMAT)
            fail_msg("seed 0x%llx iteration %d: %s (%s)", (unsigned long long)seed, it,
                     mlav_tool_status_string(s), mlav_last_error(NULL));
        if (s == MLAV_OK) {
            ok++;
            mlav_bundle_free(&b);
        } else {
            bad++;
        }
    }
    for (size_t n = 0; n < r.size; n += 1 + r.size / 300) {
        spill(mut_path, r.bytes, n);
        mlav_bundle b;
        assert_int_equal(mlav_bundle_read(mut_path, MLAV_BUNDLE_FULL, &b), MLAV_ERR_FORMAT);
    }
    assert_true(bad > 0);
    (void)ok;
    free(copy);
    free(r.bytes);
}

/* gen's command line: what it refuses, and the source it records. */
static void test_bundle_format_gen_args(void **state)
{
    (void)state;
    mlav_gen_params p;
    const char *o;
    char *bad_req[] = {"--req", "9:x:deep", "out.safetensors"};
    assert_int_equal(mlav_gen_parse_args(3, bad_req, &p, &o), MLAV_ERR_INVALID_ARG);
    char *bad_tree[] = {"--req", "9:5:wide", "out.safetensors"};
    assert_int_equal(mlav_gen_parse_args(3, bad_tree, &p, &o), MLAV_ERR_INVALID_ARG);
    char *no_out[] = {"--seed", "3"};
    assert_int_equal(mlav_gen_parse_args(2, no_out, &p, &o), MLAV_ERR_INVALID_ARG);
    char *mixed[] = {"--expect-from", "in.safetensors", "--heads", "8", "out.safetensors"};
    assert_int_equal(mlav_gen_parse_args(5, mixed, &p, &o), MLAV_ERR_INVALID_ARG);
    char *good[] = {"--seed", "0x10", "x.safetensors", "--req", "5:7:chain:2", "--req", "1:0"};
    assert_int_equal(mlav_gen_parse_args(7, good, &p, &o), MLAV_OK);
    assert_string_equal(o, "x.safetensors");
    assert_string_equal(p.source, "mlaverify gen --seed 0x10 --req 5:7:chain:2 --req 1:0");
    assert_true(p.seed == 16 && p.readout_seed == 16);
    assert_int_equal(p.B, 2);
    assert_int_equal(p.req[0].accept, 2);
    assert_int_equal(p.req[1].tree, MLAV_TREE_DEEP);
}

static long max_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* issue 26: the readout held T x vocab doubles at once (600 nodes of vocab 2^20: 4.9 GB from a
 * 30 KB bundle). It streams blocks of nodes now: 600 nodes of vocab 2^18 (1.26 GB before) must
 * not raise this process's peak RSS by more than 128 MB (the bound is 16 MiB of logits and 1 MiB
 * of R). Run first in the group so that the peak so far is the small setup's. The blocked sums
 * equal a plain per-node sum bit for bit. */
static void test_bundle_format_readout_memory_bounded(void **state)
{
    (void)state;
    const int32_t T = 600, V = 1 << 18;
    assert_true((int64_t)mlav_readout_node_block(T, 1 << 20) * (1 << 20) <=
                MLAV_READOUT_LOGIT_DOUBLES);
    assert_int_equal(mlav_readout_node_block(T, 1 << 20), 2);
    assert_int_equal(mlav_readout_node_block(5, 16), 5);
    double *out = malloc(sizeof(double) * (size_t)T);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)T);
    double *mg = malloc(sizeof(double) * (size_t)T);
    assert_true(out && tok && mg);
    for (int32_t t = 0; t < T; t++)
        out[t] = 1.0 + 0.001 * t;
    long before = max_rss_kb();
    assert_int_equal(mlav_readout_tokens(T, 1, V, 3, out, tok, mg), MLAV_OK);
    long grew = max_rss_kb() - before;
    print_message("  readout T=%d vocab=%d: peak RSS grew %ld KB\n", T, V, grew);
    assert_true(grew < 128 * 1024);
    /* one row of R and a positive out: every node's token is R's argmax */
    int32_t arg = 0;
    for (int32_t v = 1; v < V; v++)
        if (mlav_readout_r(3, (uint64_t)v) > mlav_readout_r(3, (uint64_t)arg))
            arg = v;
    for (int32_t t = 0; t < T; t++)
        assert_int_equal(tok[t], arg);

    /* several node blocks (vocab 2^19: blocks of 4) against the plain sum in (h, d) order */
    const int32_t T2 = 9, V2 = 1 << 19;
    const int64_t N2 = 3;
    double o2[9 * 3];
    for (int k = 0; k < 27; k++)
        o2[k] = sin(0.7 * k + 0.1);
    int32_t tk2[9];
    double mg2[9];
    assert_int_equal(mlav_readout_node_block(T2, V2), 4);
    assert_int_equal(mlav_readout_tokens(T2, N2, V2, 77, o2, tk2, mg2), MLAV_OK);
    for (int32_t t = 0; t < T2; t++) {
        double best = -INFINITY, second = -INFINITY;
        int32_t a = -1;
        for (int32_t v = 0; v < V2; v++) {
            double l = 0.0;
            for (int64_t r = 0; r < N2; r++)
                l += o2[t * N2 + r] * (double)mlav_readout_r(77, (uint64_t)(r * V2 + v));
            if (a < 0 || l > best) {
                second = best;
                best = l;
                a = v;
            } else if (l > second) {
                second = l;
            }
        }
        assert_int_equal(tk2[t], a);
        assert_true(mg2[t] == best - second);
    }
    free(out);
    free(tok);
    free(mg);
}

/* An inputs-only chain bundle of one request of q_len T (H 1, dims 1+1, page_size 1). */
static void write_chain(const char *path, int32_t T)
{
    mlav_bundle b = {0};
    b.H = 1;
    b.Dl = 1;
    b.Dr = 1;
    b.W = 2;
    b.vocab = 16;
    b.readout_seed = 1;
    b.source = strdup("test chain");
    b.dtype = MLAV_DTYPE_BF16;
    b.T = T;
    b.B = 1;
    b.page_size = 1;
    b.max_pages = T;
    b.num_pages = T;
    b.max_q_len = T;
    b.softmax_scale = 0.5f;
    b.q = calloc((size_t)T * 2, 2);
    b.kv_cache = calloc((size_t)T * 2, 2);
    b.page_table = malloc(sizeof(int32_t) * (size_t)T);
    b.q_indptr = malloc(sizeof(int32_t) * 2);
    b.kv_lens = malloc(sizeof(int32_t));
    b.tree_parents = malloc(sizeof(int32_t) * (size_t)T);
    assert_true(b.source && b.q && b.kv_cache && b.page_table && b.q_indptr && b.kv_lens &&
                b.tree_parents);
    for (int32_t k = 0; k < T; k++) {
        b.page_table[k] = k;
        b.tree_parents[k] = k - 1;
    }
    b.q_indptr[0] = 0;
    b.q_indptr[1] = T;
    b.kv_lens[0] = T;
    fresh(path);
    assert_int_equal(mlav_bundle_write(path, &b), MLAV_OK);
    mlav_bundle_free(&b);
}

/* issue 26: a bundle's q_len had no bound and the check's dense tree mask is T x q_len/32
 * words: a 3.6 MB chain of 100k nodes took 1.24 GB. Past MLAV_BUNDLE_MAX_Q_LEN a bundle is
 * MLAV_ERR_FORMAT with a sentence, before any mask is built; at the limit it reads, and its mask
 * is 512 bytes a node. gen refuses such requests too. */
static void test_bundle_format_q_len_bound(void **state)
{
    (void)state;
    mlav_bundle b;
    write_chain(mut_path, MLAV_BUNDLE_MAX_Q_LEN);
    assert_int_equal(mlav_bundle_read(mut_path, MLAV_BUNDLE_INPUTS, &b), MLAV_OK);
    assert_int_equal(b.max_q_len, MLAV_BUNDLE_MAX_Q_LEN);
    assert_int_equal(mlav_tree_mask_words(b.max_q_len), MLAV_BUNDLE_MAX_Q_LEN / 32);
    mlav_bundle_free(&b);
    const int32_t over[] = {MLAV_BUNDLE_MAX_Q_LEN + 1, 100000};
    for (int k = 0; k < 2; k++) {
        write_chain(mut_path, over[k]);
        assert_int_equal(mlav_bundle_read(mut_path, MLAV_BUNDLE_INPUTS, &b), MLAV_ERR_FORMAT);
        const char *msg = mlav_last_error(NULL);
        if (!strstr(msg, "more than the 4096 a bundle may hold"))
            fail_msg("q_len %d: \"%s\"", over[k], msg);
        assert_null(b.q);
    }
    mlav_gen_params p;
    const char *o;
    char *too_long[] = {"--req", "4097:0", "out.safetensors"};
    assert_int_equal(mlav_gen_parse_args(3, too_long, &p, &o), MLAV_ERR_INVALID_ARG);
    assert_non_null(strstr(mlav_last_error(NULL), "4096"));
    char *at_limit[] = {"--req", "4096:0:chain:4096", "out.safetensors"};
    assert_int_equal(mlav_gen_parse_args(3, at_limit, &p, &o), MLAV_OK);
}

/* issue 26: expect_tokens of -1 (with NaN margins) on rows whose out is finite passed as
 * "tokens 0/0 accepted 0/0": the token and path checks silently off. -1 is the readout's answer
 * for a row whose out is not finite, and nothing else. */
static void test_bundle_format_no_token_only_for_nan_rows(void **state)
{
    (void)state;
    mlav_bundle b;
    assert_int_equal(mlav_bundle_read(base_path, MLAV_BUNDLE_FULL, &b), MLAV_OK);
    const int32_t T = b.T;
    const size_t per = (size_t)b.H * (size_t)b.Dl;
    mlav_bundle_free(&b);

    mlav_st_file f;
    st_base(&f);
    int32_t *tok = st_i32(&f, "expect_tokens");
    float *mg = (float *)mlav_st_find(&f, "expect_margin")->data;
    for (int32_t t = 0; t < T; t++) {
        tok[t] = -1;
        mg[t] = NAN;
    }
    st_save(&f);
    expect_format_error("every token -1", "expect_tokens[0] = -1", "row 0 is finite", NULL);

    /* one row is enough */
    st_base(&f);
    st_i32(&f, "expect_tokens")[T - 1] = -1;
    ((float *)mlav_st_find(&f, "expect_margin")->data)[T - 1] = NAN;
    st_save(&f);
    expect_format_error("last token -1", "-1 (no token) is only for a row whose out is NaN", NULL);

    /* where the oracle's out row is NaN, -1 is what the readout says, and it reads */
    const float bad[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        st_base(&f);
        st_i32(&f, "expect_tokens")[1] = -1;
        ((float *)mlav_st_find(&f, "expect_margin")->data)[1] = NAN;
        ((float *)mlav_st_find(&f, "expect_out")->data)[per + per / 2] = bad[k];
        st_save(&f);
        assert_int_equal(mlav_bundle_read(mut_path, MLAV_BUNDLE_FULL, &b), MLAV_OK);
        mlav_bundle_free(&b);
    }
}

/* issue 26: gen with H x Dl = 1 (or an extreme scale) gave up with MLAV_ERR_INTERNAL, "a bug",
 * when no redraw could make a token decisive. It is a request gen cannot satisfy. */
static void test_bundle_format_gen_unsatisfiable(void **state)
{
    (void)state;
    char out[300];
    path_in_dir(out, sizeof out, "again.safetensors");
    char *tiny[] = {"--heads", "1", "--d-latent", "1", "--d-rope", "0", "--req", "4:3", out};
    char *flat[] = {"--heads",         "2",     "--d-latent", "16",  "--d-rope", "8",
                    "--softmax-scale", "1e-30", "--req",      "4:3", out};
    struct {
        int argc;
        char **argv;
    } cases[] = {{9, tiny}, {11, flat}};
    for (int k = 0; k < 2; k++) {
        mlav_gen_params p;
        const char *o;
        assert_int_equal(mlav_gen_parse_args(cases[k].argc, cases[k].argv, &p, &o), MLAV_OK);
        mlav_gen_stats st;
        mlav_bundle b;
        mlav_status s = mlav_gen_run(&p, out, &st, &b);
        if (s == MLAV_OK)
            mlav_bundle_free(&b);
        if (s != MLAV_ERR_INVALID_ARG)
            fail_msg("case %d: expected MLAV_ERR_INVALID_ARG, got %s (%s)", k,
                     mlav_tool_status_string(s), mlav_last_error(NULL));
        assert_non_null(strstr(mlav_last_error(NULL), "no redraw gives it the decisive margin"));
    }
}

/* ---- issue 26: conformance with the safetensors library, and a linear header parse ---------- */

/* The header text of `r` with the first `from` replaced by `to` (which must occur), written to
 * mut_path followed by r's data. */
static void write_edited(const raw *r, const char *from, const char *to)
{
    size_t hl = r->hlen, fl = strlen(from), tl = strlen(to);
    char *txt = malloc(hl + 1);
    assert_non_null(txt);
    memcpy(txt, r->bytes + 8, hl);
    txt[hl] = '\0';
    char *at = strstr(txt, from);
    if (!at)
        fail_msg("the header lacks \"%s\"", from);
    size_t pre = (size_t)(at - txt), n = hl - fl + tl, data = r->size - 8 - hl;
    unsigned char *buf = malloc(8 + n + data);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(((uint64_t)n >> (8 * i)) & 0xffu);
    memcpy(buf + 8, txt, pre);
    memcpy(buf + 8 + pre, to, tl);
    memcpy(buf + 8 + pre + tl, at + fl, hl - pre - fl);
    memcpy(buf + 8 + n, r->bytes + 8 + hl, data);
    spill(mut_path, buf, 8 + n + data);
    free(buf);
    free(txt);
}

static void expect_read_ok(const char *what)
{
    mlav_bundle b;
    mlav_status s = mlav_bundle_read(mut_path, MLAV_BUNDLE_FULL, &b);
    if (s != MLAV_OK)
        fail_msg("%s: expected MLAV_OK, got %s (%s)", what, mlav_tool_status_string(s),
                 mlav_last_error(NULL));
    mlav_bundle_free(&b);
}

/* golden/FORMAT.md: the reader accepts exactly what the safetensors library accepts. cJSON
 * takes three things serde_json over a Rust str refuses: bytes that are not UTF-8, integers
 * written as floats (512e0), and an escaped NUL, which a C string cuts the name at. */
static void test_bundle_format_safetensors_conformance(void **state)
{
    (void)state;
    raw r = load_raw(base_path);
    /* the writer's own spelling, for the edits below */
    char *txt = malloc(r.hlen + 1);
    memcpy(txt, r.bytes + 8, r.hlen);
    txt[r.hlen] = '\0';
    assert_non_null(strstr(txt, "\"data_offsets\":[0,4]"));
    assert_non_null(strstr(txt, "\"kv_cache\":{"));
    assert_non_null(strstr(txt, "\"source\":\""));
    free(txt);

    write_edited(&r, "\"data_offsets\":[0,4]", "\"data_offsets\":[0e0,4]");
    expect_format_error("offset 0e0", "fraction or an exponent", "plain non-negative integers",
                        NULL);
    write_edited(&r, "\"data_offsets\":[0,4]", "\"data_offsets\":[0,4E0]");
    expect_format_error("offset 4E0", "fraction or an exponent", NULL);
    write_edited(&r, "\"data_offsets\":[0,4]", "\"data_offsets\":[0,4.0]");
    expect_format_error("offset 4.0", "fraction or an exponent", NULL);
    write_edited(&r, "\"data_offsets\":[0,4]", "\"data_offsets\":[0,0.4e1]");
    expect_format_error("offset 0.4e1", "fraction or an exponent", NULL);
    write_edited(&r, "\"shape\":[1]", "\"shape\":[1e0]");
    expect_format_error("shape 1e0", "fraction or an exponent", NULL);

    write_edited(&r, "\"kv_cache\":{", "\"kv_cache\\u0000junk\":{");
    expect_format_error("escaped NUL in a name", "escaped NUL", NULL);
    write_edited(&r, "\"source\":\"", "\"sou\\u0000rce\":\"x\",\"source\":\"");
    expect_format_error("escaped NUL in a metadata key", "escaped NUL", NULL);
    write_edited(&r, "\"source\":\"", "\"source\":\"a\\u0000b");
    expect_format_error("escaped NUL in a metadata value", "escaped NUL", NULL);
    write_edited(&r, "\"source\":\"", "\"source\":\"\\ud800");
    expect_format_error("lone high surrogate", "surrogate", NULL);
    write_edited(&r, "\"source\":\"", "\"source\":\"\\udc00x");
    expect_format_error("lone low surrogate", "surrogate", NULL);

    static const char *const bad_utf8[] = {
        "\xff",         "\xfe",         "\x80",             "\xc3",       /* truncated 2-byte */
        "\xc0\xaf",     "\xc1\xbf",     "\xe0\x80\xaf",     /* overlong */
        "\xed\xa0\x80", "\xed\xbf\xbf",                     /* encoded surrogates */
        "\xf4\x90\x80\x80", "\xf5\x80\x80\x80",             /* past U+10FFFF */
        "\xe2\x82",     "\xf0\x9f\x98",                     /* cut sequences */
    };
    for (size_t k = 0; k < sizeof bad_utf8 / sizeof bad_utf8[0]; k++) {
        char to[32];
        snprintf(to, sizeof to, "\"source\":\"%sx", bad_utf8[k]);
        write_edited(&r, "\"source\":\"", to);
        char what[64];
        snprintf(what, sizeof what, "invalid UTF-8 case %zu", k);
        expect_format_error(what, "not valid UTF-8", NULL);
    }
    /* a raw tab inside a string is a control character to JSON, as outside one it is space */
    write_edited(&r, "\"source\":\"", "\"source\":\"\t");
    expect_format_error("raw tab in a string", "control byte 0x09", NULL);

    /* what safetensors accepts stays accepted: UTF-8 of every length, escapes, surrogate pairs,
     * a number spelled as the writer spells it, blanks between tokens */
    write_edited(&r, "\"source\":\"", "\"source\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf");
    expect_read_ok("valid UTF-8");
    write_edited(&r, "\"source\":\"", "\"source\":\"\\u00e9\\ud83d\\ude00\\\"\\\\\\n\\t");
    expect_read_ok("escapes and a surrogate pair");
    write_edited(&r, "\"data_offsets\":[0,4]", "\"data_offsets\" : [ 0 , 4 ]");
    expect_read_ok("blanks between tokens");
    free(r.bytes);
}

/* `count` extra metadata keys "k0000000".."k<count-1>" (plus `dup` once more if >= 0) written
 * into the base bundle's __metadata__; returns the seconds mlav_bundle_read took. */
static double read_with_keys(const raw *r, long count, long dup, mlav_status want)
{
    const size_t per = 16; /* "k0000000":"v", */
    char *keys = malloc(per * (size_t)(count + 2) + 32);
    assert_non_null(keys);
    strcpy(keys, "\"__metadata__\":{");
    size_t at = strlen(keys);
    for (long k = 0; k < count; k++)
        at += (size_t)sprintf(keys + at, "\"k%07ld\":\"v\",", k);
    if (dup >= 0)
        at += (size_t)sprintf(keys + at, "\"k%07ld\":\"w\",", dup);
    (void)at;
    write_edited(r, "\"__metadata__\":{", keys);
    free(keys);
    mlav_bundle b;
    double t0 = tu_now_s();
    mlav_status s = mlav_bundle_read(mut_path, MLAV_BUNDLE_FULL, &b);
    double dt = tu_now_s() - t0;
    if (s != want)
        fail_msg("%ld keys: expected %s, got %s (%s)", count, mlav_tool_status_string(want),
                 mlav_tool_status_string(s), mlav_last_error(NULL));
    if (s == MLAV_OK)
        mlav_bundle_free(&b);
    return dt;
}

/* issue 26: each metadata key was looked up in a list grown one entry at a time, so a header of
 * n keys took n^2/2 string compares (80k keys: 10 s). 200k keys then take about a minute; the
 * linear parse reads them in well under a second on one core (0.1 s here, 0.4 s under ASan).
 * The bound is a complexity bound with a wide margin, not a speed claim: it also holds the
 * parse to within 40x the time of a tenth as many keys. */
static void test_bundle_format_many_metadata_keys(void **state)
{
    (void)state;
    raw r = load_raw(base_path);
    double small = read_with_keys(&r, 20000, -1, MLAV_OK);
    double big = read_with_keys(&r, 200000, -1, MLAV_OK);
    print_message("  20k metadata keys %.3f s, 200k %.3f s\n", small, big);
    assert_true(big < 3.0);
    assert_true(big < 40.0 * small + 0.05);
    /* a repeated key among them is still found, named, quickly */
    double dup = read_with_keys(&r, 200000, 123456, MLAV_ERR_FORMAT);
    assert_non_null(strstr(mlav_last_error(NULL), "\"k0123456\" appears twice"));
    assert_true(dup < 3.0);
    /* past MLAV_ST_MAX_MEMBERS the header is refused before cJSON allocates a node for each */
    read_with_keys(&r, MLAV_ST_MAX_MEMBERS, -1, MLAV_ERR_FORMAT);
    assert_non_null(strstr(mlav_last_error(NULL), "JSON members"));
    free(r.bytes);
}

/* ---- FP8 (E4M3) caches --------------------------------------------------------------------- */

/* The scale of the FP8 bundles made by surgery below: 1/224, gen's default. */
#define SURGERY_KV_SCALE (1.0f / 224.0f)

/* The base bundle with its BF16 cache quantized to F8_E4M3 bytes (e4m3(v / scale), NaN poison
 * becoming 0x7f) and a kv_scale beside it: a well-formed FP8 bundle made without running gen
 * (its expectations are the BF16 cache's, which the reader does not judge). */
static void st_fp8_base(mlav_st_file *f)
{
    st_base(f);
    mlav_st_tensor *kv = mlav_st_find(f, "kv_cache");
    int64_t shape[3] = {kv->shape[0], kv->shape[1], kv->shape[2]};
    size_t n = (size_t)(shape[0] * shape[1] * shape[2]);
    uint8_t *bytes = malloc(n);
    assert_non_null(bytes);
    for (size_t k = 0; k < n; k++)
        bytes[k] = mlav_f32_to_e4m3(mlav_bf16_to_f32(((const uint16_t *)kv->data)[k]) /
                                    SURGERY_KV_SCALE);
    st_remove(f, "kv_cache");
    assert_int_equal(mlav_st_add_tensor(f, "kv_cache", "F8_E4M3", 3, shape, bytes), MLAV_OK);
    float *scale = malloc(sizeof(float));
    assert_non_null(scale);
    *scale = SURGERY_KV_SCALE;
    assert_int_equal(mlav_st_add_tensor(f, "kv_scale", "F32", 1, (int64_t[]){1}, scale), MLAV_OK);
}

static void st_set_kv_scale(mlav_st_file *f, float v)
{
    mlav_st_tensor *t = mlav_st_find(f, "kv_scale");
    assert_non_null(t);
    memcpy(t->data, &v, sizeof v);
}

/* An F8_E4M3 cache reads with its kv_scale, writes back byte for byte, and runs as the
 * problem's FP8 cache; a missing, extra or bad kv_scale, or a cache of another dtype or byte
 * count, is MLAV_ERR_FORMAT with a sentence. The reader only: no backend runs here. */
static void test_bundle_format_fp8_reader(void **state)
{
    (void)state;
    mlav_st_file f;
    mlav_bundle b, again;
    char fp8[300], fp8_again[300];
    path_in_dir(fp8, sizeof fp8, "fp8.safetensors");
    path_in_dir(fp8_again, sizeof fp8_again, "fp8_again.safetensors");

    st_fp8_base(&f);
    st_save(&f);
    assert_int_equal(mlav_bundle_read(mut_path, MLAV_BUNDLE_FULL, &b), MLAV_OK);
    assert_int_equal(b.kv_dtype, MLAV_DTYPE_FP8_E4M3);
    assert_int_equal(mlav_bundle_kv_dtype(&b), MLAV_DTYPE_FP8_E4M3);
    assert_true(b.kv_scale == SURGERY_KV_SCALE);
    assert_int_equal(b.dtype, MLAV_DTYPE_BF16); /* q keeps its dtype */
    mlav_problem p = mlav_bundle_problem(&b);
    assert_int_equal(p.kv_dtype, MLAV_DTYPE_FP8_E4M3);
    mlav_tensors t = mlav_bundle_tensors(&b, NULL, NULL, NULL);
    assert_true(t.kv_scale == SURGERY_KV_SCALE && t.kv_scale_ptr == NULL);
    assert_ptr_equal(t.kv_cache, b.kv_cache);
    char text[200];
    mlav_bundle_describe(&b, text, sizeof text);
    assert_non_null(strstr(text, "h=2 bf16 kv=fp8_e4m3*0.00446429 page=4 B=2"));
    /* the poison is the NaN byte 0x7f, and every used element is finite */
    size_t n_nan = 0, n = (size_t)b.num_pages * (size_t)b.page_size * (size_t)b.W;
    for (size_t k = 0; k < n; k++)
        n_nan += ((const uint8_t *)b.kv_cache)[k] == 0x7f;
    assert_true(n_nan > 0);
    /* written and read back: the same bundle; written again: the same bytes */
    fresh(fp8);
    assert_int_equal(mlav_bundle_write(fp8, &b), MLAV_OK);
    assert_int_equal(mlav_bundle_read(fp8, MLAV_BUNDLE_FULL, &again), MLAV_OK);
    bundles_equal(&b, &again);
    fresh(fp8_again);
    assert_int_equal(mlav_bundle_write(fp8_again, &again), MLAV_OK);
    size_t n1, n2;
    unsigned char *b1 = slurp(fp8, &n1), *b2 = slurp(fp8_again, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    free(b1);
    free(b2);
    raw r = load_raw(fp8);
    assert_int_equal((8 + r.hlen) % 8, 0);
    cJSON *h = header_of(&r);
    assert_string_equal(
        cJSON_GetObjectItemCaseSensitive(entry(h, "kv_cache"), "dtype")->valuestring, "F8_E4M3");
    assert_string_equal(
        cJSON_GetObjectItemCaseSensitive(entry(h, "kv_scale"), "dtype")->valuestring, "F32");
    /* one byte an element */
    assert_true(offset_of(h, "kv_cache", 1) - offset_of(h, "kv_cache", 0) == (uint64_t)n);
    cJSON_Delete(h);
    free(r.bytes);
    mlav_bundle_free(&again);
    mlav_bundle_free(&b);

    /* an inputs bundle of an FP8 cache reads too (what gen --expect-from completes) */
    st_fp8_base(&f);
    static const char *drop[] = {"expect_out",    "expect_lse",    "expect_tokens",
                                 "expect_accept", "expect_margin", "draft_tokens"};
    for (size_t i = 0; i < 6; i++)
        st_remove(&f, drop[i]);
    st_save(&f);
    assert_int_equal(mlav_bundle_read(mut_path, MLAV_BUNDLE_INPUTS, &b), MLAV_OK);
    assert_int_equal(b.kv_dtype, MLAV_DTYPE_FP8_E4M3);
    mlav_bundle_free(&b);

    /* no kv_scale beside an FP8 cache */
    st_fp8_base(&f);
    st_remove(&f, "kv_scale");
    st_save(&f);
    expect_format_error("FP8 without kv_scale", "'kv_cache' is F8_E4M3",
                        "no tensor 'kv_scale'", NULL);

    /* a kv_scale beside a 16-bit cache */
    st_base(&f);
    assert_int_equal(mlav_st_add_tensor(&f, "kv_scale", "F32", 1, (int64_t[]){1}, NULL), MLAV_OK);
    st_set_kv_scale(&f, 0.5f);
    st_save(&f);
    expect_format_error("kv_scale with BF16", "'kv_scale' is only for an F8_E4M3 kv_cache",
                        "this one is BF16", NULL);

    /* scales that are not finite and > 0 */
    const float bad[] = {0.0f, -0.0f, -1.0f, NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        st_fp8_base(&f);
        st_set_kv_scale(&f, bad[k]);
        st_save(&f);
        char what[64];
        snprintf(what, sizeof what, "kv_scale %g", (double)bad[k]);
        expect_format_error(what, "kv_scale = ", "must be finite and > 0", NULL);
    }

    /* a kv_scale of the wrong dtype or shape */
    st_fp8_base(&f);
    st_remove(&f, "kv_scale");
    assert_int_equal(mlav_st_add_tensor(&f, "kv_scale", "F32", 1, (int64_t[]){2}, NULL), MLAV_OK);
    st_save(&f);
    expect_format_error("kv_scale [2]", "'kv_scale' must be one F32 value of shape [1]", NULL);
    st_fp8_base(&f);
    st_remove(&f, "kv_scale");
    assert_int_equal(mlav_st_add_tensor(&f, "kv_scale", "F16", 1, (int64_t[]){1}, NULL), MLAV_OK);
    st_save(&f);
    expect_format_error("kv_scale F16", "'kv_scale' must be one F32 value of shape [1]", NULL);
    /* a 0-dim F32 (an engine's scalar scale tensor, saved as it is) reads */
    st_fp8_base(&f);
    st_remove(&f, "kv_scale");
    {
        float *v = malloc(sizeof(float));
        assert_non_null(v);
        *v = 0.25f;
        assert_int_equal(mlav_st_add_tensor(&f, "kv_scale", "F32", 0, NULL, v), MLAV_OK);
    }
    st_save(&f);
    assert_int_equal(mlav_bundle_read(mut_path, MLAV_BUNDLE_FULL, &b), MLAV_OK);
    assert_true(b.kv_scale == 0.25f);
    mlav_bundle_free(&b);

    /* a cache of another 8-bit float, and FP8 q */
    st_fp8_base(&f);
    {
        mlav_st_tensor *kv = mlav_st_find(&f, "kv_cache");
        snprintf(kv->dtype, sizeof kv->dtype, "F8_E5M2");
    }
    st_save(&f);
    expect_format_error("E5M2 cache", "'kv_cache' has dtype F8_E5M2 but q has BF16",
                        "share one dtype, or the cache is F8_E4M3", NULL);
    st_fp8_base(&f);
    {
        mlav_st_tensor *q = mlav_st_find(&f, "q");
        int64_t shape[3] = {q->shape[0], q->shape[1], q->shape[2]};
        st_remove(&f, "q");
        assert_int_equal(mlav_st_add_tensor(&f, "q", "F8_E4M3", 3, shape, NULL), MLAV_OK);
    }
    st_save(&f);
    expect_format_error("FP8 q", "'q' has dtype F8_E4M3", "expected BF16, F16 or F32", NULL);

    /* the wrong byte count: the header says F8_E4M3 over a 2-byte-an-element cache */
    r = load_raw(base_path);
    h = header_of(&r);
    cJSON_ReplaceItemInObject(entry(h, "kv_cache"), "dtype", cJSON_CreateString("F8_E4M3"));
    write_with(&r, h, 0);
    expect_format_error("FP8 byte count", "tensor 'kv_cache': dtype F8_E4M3 and shape",
                        "data_offsets", NULL);
    cJSON_Delete(h);
    free(r.bytes);
}

/* gen's FP8 options: what they parse to, what they refuse, what the source records. */
static void test_bundle_format_fp8_gen_args(void **state)
{
    (void)state;
    mlav_gen_params p;
    const char *o;
    char *fp8[] = {"--kv-dtype", "fp8", "x.safetensors"};
    assert_int_equal(mlav_gen_parse_args(3, fp8, &p, &o), MLAV_OK);
    assert_int_equal(p.kv_dtype, MLAV_DTYPE_FP8_E4M3);
    assert_true(p.kv_scale == MLAV_GEN_KV_SCALE);
    assert_string_equal(p.source, "mlaverify gen --kv-dtype fp8");
    char *alias[] = {"--kv-scale", "0.5", "--kv-dtype", "fp8_e4m3", "--dtype", "f32", "x"};
    assert_int_equal(mlav_gen_parse_args(7, alias, &p, &o), MLAV_OK);
    assert_int_equal(p.kv_dtype, MLAV_DTYPE_FP8_E4M3);
    assert_int_equal(p.dtype, MLAV_DTYPE_F32);
    assert_true(p.kv_scale == 0.5f);
    /* the default is the q dtype, whichever --dtype says, in any order */
    char *plain[] = {"--dtype", "f16", "x"};
    assert_int_equal(mlav_gen_parse_args(3, plain, &p, &o), MLAV_OK);
    assert_int_equal(p.kv_dtype, MLAV_DTYPE_F16);
    char *same[] = {"--kv-dtype", "f32", "--dtype", "f32", "x"};
    assert_int_equal(mlav_gen_parse_args(5, same, &p, &o), MLAV_OK);
    assert_int_equal(p.kv_dtype, MLAV_DTYPE_F32);
    char *mix[] = {"--kv-dtype", "bf16", "--dtype", "f32", "x"};
    assert_int_equal(mlav_gen_parse_args(5, mix, &p, &o), MLAV_ERR_INVALID_ARG);
    assert_non_null(strstr(mlav_last_error(NULL), "the cache has the q dtype or is fp8"));
    char *lone_scale[] = {"--kv-scale", "0.5", "x"};
    assert_int_equal(mlav_gen_parse_args(3, lone_scale, &p, &o), MLAV_ERR_INVALID_ARG);
    assert_non_null(strstr(mlav_last_error(NULL), "goes with --kv-dtype fp8"));
    static const char *bad_scales[] = {"0", "-1", "nan", "inf", "1e-50", "1e50", "0.5x", ""};
    for (size_t k = 0; k < sizeof bad_scales / sizeof bad_scales[0]; k++) {
        char *argv[] = {"--kv-dtype", "fp8", "--kv-scale", (char *)bad_scales[k], "x"};
        assert_int_equal(mlav_gen_parse_args(5, argv, &p, &o), MLAV_ERR_INVALID_ARG);
        assert_non_null(strstr(mlav_last_error(NULL), "for --kv-scale"));
    }
    char *e5m2[] = {"--kv-dtype", "fp8_e5m2", "x"};
    assert_int_equal(mlav_gen_parse_args(3, e5m2, &p, &o), MLAV_ERR_INVALID_ARG);
    char *with_from[] = {"--expect-from", "in.safetensors", "--kv-dtype", "fp8", "x"};
    assert_int_equal(mlav_gen_parse_args(5, with_from, &p, &o), MLAV_ERR_INVALID_ARG);
    /* parameters set field by field: an FP8 q is refused, a bad scale too */
    mlav_gen_defaults(&p);
    assert_int_equal(p.kv_dtype, MLAV_DTYPE_F32); /* 0: the q dtype */
    mlav_bundle b;
    mlav_gen_stats st;
    p.kv_dtype = MLAV_DTYPE_FP8_E4M3;
    p.kv_scale = -2.0f;
    assert_int_equal(mlav_gen_bundle(&p, &b, &st), MLAV_ERR_INVALID_ARG);
    assert_non_null(strstr(mlav_last_error(NULL), "kv scale -2 must be finite and > 0"));
    p.dtype = MLAV_DTYPE_FP8_E4M3;
    assert_int_equal(mlav_gen_bundle(&p, &b, &st), MLAV_ERR_INVALID_ARG);
}

/* The F32 copy of a bundle's FP8 problem: q widened (exact), KV dequantized in float
 * (e4m3 x kv_scale: exact when the scale has at most 20 significant bits, as a power of two
 * does), for the oracle to run as a plain F32 problem. */
static void dequantized_oracle(const mlav_bundle *b, const uint32_t *mask, double *o,
                               double *l)
{
    const size_t nq = (size_t)b->T * (size_t)b->H * (size_t)b->W;
    const size_t nkv = (size_t)b->num_pages * (size_t)b->page_size * (size_t)b->W;
    float *q32 = malloc(sizeof(float) * nq), *kv32 = malloc(sizeof(float) * nkv);
    assert_true(q32 && kv32);
    for (size_t k = 0; k < nq; k++)
        q32[k] = mlav_load_as_f32(b->q, (int)b->dtype, k);
    for (size_t k = 0; k < nkv; k++)
        kv32[k] = mlav_e4m3_to_f32(((const uint8_t *)b->kv_cache)[k]) * b->kv_scale;
    mlav_problem p = mlav_bundle_problem(b);
    p.dtype = MLAV_DTYPE_F32;
    p.kv_dtype = MLAV_DTYPE_F32;
    mlav_problem_info info;
    assert_int_equal(mlav_problem_validate(&p, &info), MLAV_OK);
    mlav_tensors t = {.memory = MLAV_MEM_HOST,
                      .q = q32,
                      .kv_cache = kv32,
                      .num_pages = b->num_pages,
                      .page_table = b->page_table,
                      .tree_mask = mask};
    assert_int_equal(mlav_oracle_compute(&info, &t, o, l), MLAV_OK);
    mlav_problem_info_free(&info);
    free(q32);
    free(kv32);
}

/* gen --kv-dtype fp8: the cache holds e4m3(v / scale) of the drawn values (at most 224 with
 * the default scale), the poison is 0x7f, the run is deterministic, and the expectations are
 * the oracle on e4m3 x kv_scale: bit for bit the F32 oracle on the dequantized cache when that
 * is exact (a power-of-two scale), within float rounding of the values otherwise.
 * Needs the reference backend's FP8 oracle (gen's expectations come from it). */
static void test_bundle_format_fp8_gen(void **state)
{
    (void)state;
    static const char *scales[] = {NULL, "0.0078125"}; /* the default 1/224, and 2^-7 */
    char fp8[300], fp8_again[300];
    path_in_dir(fp8, sizeof fp8, "fp8.safetensors");
    path_in_dir(fp8_again, sizeof fp8_again, "fp8_again.safetensors");
    for (size_t c = 0; c < 2; c++) {
        mlav_bundle made, read;
        make_bundle_kv(fp8, "bf16", "fp8", scales[c], &made);
        const float scale = c == 0 ? MLAV_GEN_KV_SCALE : 0.0078125f;
        assert_int_equal(made.kv_dtype, MLAV_DTYPE_FP8_E4M3);
        assert_true(made.kv_scale == scale);
        assert_int_equal(mlav_bundle_read(fp8, MLAV_BUNDLE_FULL, &read), MLAV_OK);
        bundles_equal(&made, &read);
        /* seeded: the same command makes the same bytes */
        make_bundle_kv(fp8_again, "bf16", "fp8", scales[c], NULL);
        size_t n1, n2;
        unsigned char *b1 = slurp(fp8, &n1), *b2 = slurp(fp8_again, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(b1, b2, n1);
        free(b1);
        free(b2);
        /* rows the requests use are finite, at most e4m3(1 / scale) (the values are in
         * [-1, 1)); every other byte is the poison 0x7f */
        const float top = mlav_e4m3_to_f32(mlav_f32_to_e4m3(1.0f / scale));
        const uint8_t *kv = read.kv_cache;
        const size_t W = (size_t)read.W, rows = (size_t)read.num_pages * read.page_size;
        char *used = calloc(rows, 1);
        assert_non_null(used);
        for (int32_t r = 0; r < read.B; r++)
            for (int32_t j = 0; j < read.kv_lens[r]; j++) {
                const int32_t *row = read.page_table + (size_t)r * (size_t)read.max_pages;
                used[(size_t)row[j / read.page_size] * (size_t)read.page_size +
                     (size_t)(j % read.page_size)] = 1;
            }
        for (size_t row = 0; row < rows; row++)
            for (size_t d = 0; d < W; d++) {
                uint8_t x = kv[row * W + d];
                if (!used[row])
                    assert_int_equal(x, 0x7f);
                else
                    assert_true(fabsf(mlav_e4m3_to_f32(x)) <= top);
            }
        free(used);
        /* the stored expectations are the oracle over the FP8 tensors, bit for bit */
        expectations_are_the_oracle(fp8);
        /* and that oracle is over e4m3 x kv_scale */
        uint32_t *mask;
        assert_int_equal(mlav_bundle_tree_mask(&read, &mask), MLAV_OK);
        const size_t orows = (size_t)read.T * (size_t)read.H;
        double *o = calloc(orows * (size_t)read.Dl, sizeof(double));
        double *l = calloc(orows, sizeof(double));
        assert_true(o && l);
        dequantized_oracle(&read, mask, o, l);
        double num = 0.0, den = 0.0, lse_err = 0.0;
        for (size_t k = 0; k < orows * (size_t)read.Dl; k++) {
            num += (o[k] - read.expect_out[k]) * (o[k] - read.expect_out[k]);
            den += o[k] * o[k];
            if (c == 1 && (float)o[k] != read.expect_out[k])
                fail_msg("scale 2^-7: expect_out[%zu] = %.9g, the F32 oracle on the dequantized "
                         "cache says %.9g",
                         k, (double)read.expect_out[k], o[k]);
        }
        for (size_t k = 0; k < orows; k++) {
            double e = fabs(l[k] - read.expect_lse[k]);
            lse_err = e > lse_err ? e : lse_err;
            if (c == 1)
                assert_true((float)l[k] == read.expect_lse[k]);
        }
        print_message("  fp8 scale %g: expectations vs the F32 oracle on the dequantized cache: "
                      "out rel-L2 %.2e, lse %.2e\n",
                      (double)scale, sqrt(num / den), lse_err);
        assert_true(sqrt(num / den) <= 1e-6 && lse_err <= 1e-6);
        free(mask);
        free(o);
        free(l);
        mlav_bundle_free(&made);
        mlav_bundle_free(&read);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundle_format_readout_memory_bounded),
        cmocka_unit_test(test_bundle_format_roundtrip),
        cmocka_unit_test(test_bundle_format_expectations_are_the_oracle),
        cmocka_unit_test(test_bundle_format_readout_stream),
        cmocka_unit_test(test_bundle_format_container_errors),
        cmocka_unit_test(test_bundle_format_bundle_errors),
        cmocka_unit_test(test_bundle_format_inputs_mode),
        cmocka_unit_test(test_bundle_format_fuzz),
        cmocka_unit_test(test_bundle_format_gen_args),
        cmocka_unit_test(test_bundle_format_safetensors_conformance),
        cmocka_unit_test(test_bundle_format_many_metadata_keys),
        cmocka_unit_test(test_bundle_format_q_len_bound),
        cmocka_unit_test(test_bundle_format_no_token_only_for_nan_rows),
        cmocka_unit_test(test_bundle_format_gen_unsatisfiable),
        cmocka_unit_test(test_bundle_format_fp8_reader),
        cmocka_unit_test(test_bundle_format_fp8_gen_args),
        /* needs the reference backend's FP8 oracle (gen's expectations come from it) */
        cmocka_unit_test(test_bundle_format_fp8_gen),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
