/* The device merges (mlav_merge_states_stacked, mlav_merge_state_in_place on MLAV_MEM_DEVICE)
 * against the host ones: every dtype and N in 1, 2, 3, 7, 64 within the fp64 bound the host
 * merge meets (merge_fixture.h), and out bit for bit with the host's where the weights are exact
 * (every state's lse equal or -inf: what is left are fp32 products and sums, in the host's order,
 * and one rounding; expf and logf may round differently on the device otherwise); a CUDA graph of both merges replayed on changed inputs gives what direct calls
 * give, bit for bit; rows past the launch's grid; nothing written outside out and lse. Skips
 * without CUDA built in or without a device of cc >= 8.0. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/dtype.h"
#include "merge_fixture.h"
#include "mlaverify.h"
#include "test_util.h"

#ifdef MLAV_WITH_CUDA
#include <cuda_runtime_api.h>

#include "device_buffer.h"

#define CK TU_CK

static const mlav_dtype DTYPES[] = {MLAV_DTYPE_F32, MLAV_DTYPE_BF16, MLAV_DTYPE_F16};
static const int32_t COUNTS[] = {1, 2, 3, 7, 64};

/* States on the device, as the host has them. */
typedef struct dstates {
    dbuf outs, lses;
} dstates;

static dstates to_device(const mf_states *s)
{
    dstates d = {dbuf_alloc(mf_out_bytes(s) * (size_t)s->n),
                 dbuf_alloc(sizeof(float) * (size_t)s->rows * (size_t)s->n)};
    dbuf_write(&d.outs, s->outs);
    dbuf_write(&d.lses, s->lses);
    return d;
}

static void free_device(dstates *d)
{
    CK(cudaFree(d->outs.base));
    CK(cudaFree(d->lses.base));
}

/* The host's stacked merge of s. */
static void host_merge(const mf_states *s, void *out, float *lse)
{
    if (mlav_merge_states_stacked(MLAV_MEM_HOST, s->dtype, s->n, s->rows, s->dim, s->outs,
                                  s->lses, out, lse, NULL) != MLAV_OK)
        fail_msg("host merge: %s", mlav_last_error(NULL));
}

/* The device's stacked merge of s on `stream`, read back (guards checked). */
static void device_merge(const mf_states *s, void *out, float *lse, cudaStream_t stream)
{
    dstates d = to_device(s);
    dbuf o = dbuf_alloc(mf_out_bytes(s)), l = dbuf_alloc(sizeof(float) * (size_t)s->rows);
    const mlav_status st =
        mlav_merge_states_stacked(MLAV_MEM_DEVICE, s->dtype, s->n, s->rows, s->dim, d.outs.p,
                                  d.lses.p, o.p, l.p, stream);
    if (st != MLAV_OK)
        fail_msg("device merge: %s", mlav_last_error(NULL));
    CK(cudaStreamSynchronize(stream));
    if (!dbuf_read(&o, out) || !dbuf_read(&l, lse))
        fail_msg("device merge wrote outside out or lse");
    CK(cudaFree(o.base));
    CK(cudaFree(l.base));
    free_device(&d);
}

/* Random states, every dtype and count: the device merge meets the fp64 bound (and n = 1 is the
 * state itself, bit for bit), and NaN and -inf land where the host's do. */
static void test_device_within_bound(void **state)
{
    (void)state;
    tu_require_device();
    uint64_t rng = tu_seeded("device within bound");
    cudaStream_t stream;
    CK(cudaStreamCreate(&stream));
    char msg[512];
    for (size_t t = 0; t < sizeof DTYPES / sizeof DTYPES[0]; t++)
        for (size_t c = 0; c < sizeof COUNTS / sizeof COUNTS[0]; c++) {
            const int32_t dims[] = {1, 7, 64, 512};
            const int64_t rows = (1 + (int64_t)(tu_next(&rng) % 9)) * (1 + tu_next(&rng) % 16);
            mf_states s = mf_alloc(DTYPES[t], COUNTS[c], rows, dims[tu_next(&rng) % 4]);
            mf_fill(&s, &rng, 1);
            const size_t ob = mf_out_bytes(&s), lb = sizeof(float) * (size_t)rows;
            void *dout = tu_xcalloc(ob, 1), *hout = tu_xcalloc(ob, 1);
            float *dl = tu_xcalloc((size_t)rows, 4), *hl = tu_xcalloc((size_t)rows, 4);
            device_merge(&s, dout, dl, stream);
            host_merge(&s, hout, hl);
            if (!mf_check(&s, dout, dl, msg, sizeof msg))
                fail_msg("device: %s", msg);
            size_t same = 0;
            for (int64_t r = 0; r < rows; r++) {
                if (isnan(hl[r]) != isnan(dl[r]) || (isinf(hl[r]) && hl[r] != dl[r]))
                    fail_msg("row %lld: lse host %g, device %g", (long long)r, hl[r], dl[r]);
                same += memcmp(&hl[r], &dl[r], 4) == 0;
            }
            print_message("  %s n=%d rows=%lld dim=%d: lse bit-equal to the host's in %zu of "
                          "%lld rows, out in %s\n",
                          mlav_dtype_name(s.dtype), s.n, (long long)rows, s.dim, same,
                          (long long)rows, memcmp(dout, hout, ob) ? "part" : "full");
            (void)lb;
            free(dout);
            free(hout);
            free(dl);
            free(hl);
            mf_free(&s);
        }
    CK(cudaStreamDestroy(stream));
}

/* Every state's lse equal or -inf in a row: the weights are exactly 0 or 1 / k on both sides, so
 * the device must give the host's out bit for bit (the same products and sums in the same order,
 * no fused multiply-add, the same rounding to the dtype), and lse where k = 1. */
static void test_device_bitwise_on_exact_weights(void **state)
{
    (void)state;
    tu_require_device();
    uint64_t rng = tu_seeded("device bit for bit");
    for (size_t t = 0; t < sizeof DTYPES / sizeof DTYPES[0]; t++)
        for (size_t c = 0; c < sizeof COUNTS / sizeof COUNTS[0]; c++) {
            mf_states s = mf_alloc(DTYPES[t], COUNTS[c], 48, 96);
            mf_fill(&s, &rng, 0);
            for (int64_t r = 0; r < s.rows; r++) {
                const float v = (float)(4.0 * tu_uniform(&rng));
                for (int32_t i = 0; i < s.n; i++) {
                    float *l = &s.lses[(size_t)i * (size_t)s.rows + (size_t)r];
                    *l = *l == -INFINITY ? -INFINITY : v;
                }
            }
            const size_t ob = mf_out_bytes(&s), lb = sizeof(float) * (size_t)s.rows;
            void *dout = tu_xcalloc(ob, 1), *hout = tu_xcalloc(ob, 1);
            float *dl = tu_xcalloc((size_t)s.rows, 4), *hl = tu_xcalloc((size_t)s.rows, 4);
            device_merge(&s, dout, dl, 0);
            host_merge(&s, hout, hl);
            if (memcmp(dout, hout, ob))
                fail_msg("%s n=%d: the device's merge differs from the host's with exact weights",
                         mlav_dtype_name(s.dtype), s.n);
            char msg[512];
            if (!mf_check(&s, dout, dl, msg, sizeof msg))
                fail_msg("device: %s", msg);
            /* lse = m + logf(k): bit for bit where k = 1 (logf(1) = 0 on both); elsewhere the
             * device's logf may round differently, within mf_check's bound */
            for (int64_t r = 0; r < s.rows; r++) {
                int k = 0;
                for (int32_t i = 0; i < s.n; i++)
                    k += s.lses[(size_t)i * (size_t)s.rows + (size_t)r] != -INFINITY;
                if (k <= 1 && memcmp(&dl[r], &hl[r], 4))
                    fail_msg("%s n=%d row %lld: lse %g on the device, %g on the host",
                             mlav_dtype_name(s.dtype), s.n, (long long)r, dl[r], hl[r]);
            }
            (void)lb;
            free(dout);
            free(hout);
            free(dl);
            free(hl);
            mf_free(&s);
        }
}

/* Whether two outputs of `count` elements hold the same values bit for bit, a NaN matching any
 * NaN: a NaN's payload is not the merge's (x86 keeps an operand's, a GPU gives its canonical
 * NaN: a state whose out is NaN under a finite lse makes such rows). The 16-bit types widen to
 * fp32 exactly, so comparing the widened bits is comparing theirs. */
static int same_values(mlav_dtype dt, const void *a, const void *b, size_t count)
{
    for (size_t k = 0; k < count; k++) {
        const float x = mlav_load_as_f32(a, (int)dt, k), y = mlav_load_as_f32(b, (int)dt, k);
        if (!(isnan(x) && isnan(y)) && memcmp(&x, &y, sizeof x))
            return 0;
    }
    return 1;
}

/* The in-place pair on the device against the host's in-place pair: within the fp64 bound, and
 * bit for bit with equal lse values. */
static void test_device_in_place(void **state)
{
    (void)state;
    tu_require_device();
    uint64_t rng = tu_seeded("device in place");
    char msg[512];
    for (size_t t = 0; t < sizeof DTYPES / sizeof DTYPES[0]; t++)
        for (int exact = 0; exact < 2; exact++) {
            mf_states s = mf_alloc(DTYPES[t], 2, 8 * 16, 512);
            mf_fill(&s, &rng, !exact);
            if (exact)
                for (int64_t r = 0; r < s.rows; r++)
                    s.lses[s.rows + r] = s.lses[r];
            const size_t ob = mf_out_bytes(&s), lb = sizeof(float) * (size_t)s.rows;
            dstates d = to_device(&s);
            dbuf a = dbuf_alloc(ob), al = dbuf_alloc(lb);
            dbuf_write(&a, s.outs);
            dbuf_write(&al, s.lses);
            const mlav_status st = mlav_merge_state_in_place(
                MLAV_MEM_DEVICE, s.dtype, s.rows, s.dim, a.p, al.p,
                (const char *)d.outs.p + ob, (const float *)d.lses.p + s.rows, NULL);
            if (st != MLAV_OK)
                fail_msg("device in place: %s", mlav_last_error(NULL));
            CK(cudaDeviceSynchronize());
            void *dout = tu_xcalloc(ob, 1), *hout = tu_xcalloc(ob, 1);
            float *dl = tu_xcalloc((size_t)s.rows, 4), *hl = tu_xcalloc((size_t)s.rows, 4);
            assert_true(dbuf_read(&a, dout) && dbuf_read(&al, dl));
            if (!mf_check(&s, dout, dl, msg, sizeof msg))
                fail_msg("device in place: %s", msg);
            memcpy(hout, s.outs, ob);
            memcpy(hl, s.lses, lb);
            assert_int_equal(mlav_merge_state_in_place(MLAV_MEM_HOST, s.dtype, s.rows, s.dim,
                                                       hout, hl, (const char *)s.outs + ob,
                                                       s.lses + s.rows, NULL),
                             MLAV_OK);
            if (exact && !same_values(s.dtype, dout, hout, (size_t)s.rows * (size_t)s.dim))
                /* lse: logf(2), within mf_check's bound */
                fail_msg("%s: the device's in-place merge differs from the host's with equal "
                         "lse",
                         mlav_dtype_name(s.dtype));
            free(dout);
            free(hout);
            free(dl);
            free(hl);
            CK(cudaFree(a.base));
            CK(cudaFree(al.base));
            free_device(&d);
            mf_free(&s);
        }
}

/* A graph of a stacked merge (N = 7, lse written) and an in-place merge, captured once and
 * replayed three times on new inputs copied into the same buffers: each replay equals direct
 * calls on those inputs bit for bit, and meets the fp64 bound. */
static void test_device_graph_replay(void **state)
{
    (void)state;
    tu_require_device();
    uint64_t rng = tu_seeded("graph replay");
    char msg[512];
    for (size_t t = 0; t < sizeof DTYPES / sizeof DTYPES[0]; t++) {
        const mlav_dtype dt = DTYPES[t];
        mf_states s = mf_alloc(dt, 7, 5 * 16, 512), p = mf_alloc(dt, 2, 3 * 16, 512);
        const size_t ob = mf_out_bytes(&s), lb = sizeof(float) * (size_t)s.rows;
        const size_t pb = mf_out_bytes(&p), plb = sizeof(float) * (size_t)p.rows;
        dstates ds = to_device(&s), dp = to_device(&p);
        dbuf o = dbuf_alloc(ob), l = dbuf_alloc(lb);
        cudaStream_t stream;
        CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        mlav_status st1 = mlav_merge_states_stacked(MLAV_MEM_DEVICE, dt, 7, s.rows, s.dim,
                                                    ds.outs.p, ds.lses.p, o.p, l.p, stream);
        mlav_status st2 = mlav_merge_state_in_place(
            MLAV_MEM_DEVICE, dt, p.rows, p.dim, dp.outs.p, dp.lses.p,
            (const char *)dp.outs.p + pb, (const float *)dp.lses.p + p.rows, stream);
        cudaGraph_t graph = NULL;
        const cudaError_t ce = cudaStreamEndCapture(stream, &graph);
        if (st1 != MLAV_OK || st2 != MLAV_OK)
            fail_msg("captured merges: %s", mlav_last_error(NULL));
        CK(ce);
        cudaGraphExec_t exec = NULL;
        CK(cudaGraphInstantiate(&exec, graph, 0));
        for (int rep = 0; rep < 3; rep++) {
            mf_fill(&s, &rng, rep != 1);
            mf_fill(&p, &rng, rep != 1);
            dbuf_write(&ds.outs, s.outs);
            dbuf_write(&ds.lses, s.lses);
            dbuf_write(&dp.outs, p.outs);
            dbuf_write(&dp.lses, p.lses);
            CK(cudaGraphLaunch(exec, stream));
            CK(cudaStreamSynchronize(stream));
            void *go = tu_xcalloc(ob, 1), *want = tu_xcalloc(ob, 1);
            float *gl = tu_xcalloc((size_t)s.rows, 4), *wantl = tu_xcalloc((size_t)s.rows, 4);
            void *gp = tu_xcalloc(pb * 2, 1), *wantp = tu_xcalloc(pb, 1);
            float *gpl = tu_xcalloc((size_t)p.rows * 2, 4), *wantpl = tu_xcalloc((size_t)p.rows, 4);
            if (!dbuf_read(&o, go) || !dbuf_read(&l, gl))
                fail_msg("replay %d wrote outside out or lse", rep);
            assert_true(dbuf_read(&dp.outs, gp) && dbuf_read(&dp.lses, gpl));
            if (!mf_check(&s, go, gl, msg, sizeof msg) || !mf_check(&p, gp, gpl, msg, sizeof msg))
                fail_msg("replay %d: %s", rep, msg);
            device_merge(&s, want, wantl, stream);
            if (memcmp(go, want, ob) || memcmp(gl, wantl, lb))
                fail_msg("replay %d: the graph's stacked merge differs from a direct call", rep);
            /* the pair: a direct in-place call on a fresh copy of the same inputs */
            dstates again = to_device(&p);
            assert_int_equal(mlav_merge_state_in_place(MLAV_MEM_DEVICE, dt, p.rows, p.dim,
                                                       again.outs.p, again.lses.p,
                                                       (const char *)again.outs.p + pb,
                                                       (const float *)again.lses.p + p.rows,
                                                       stream),
                             MLAV_OK);
            CK(cudaStreamSynchronize(stream));
            CK(cudaMemcpy(wantp, again.outs.p, pb, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(wantpl, again.lses.p, plb, cudaMemcpyDeviceToHost));
            if (memcmp(gp, wantp, pb) || memcmp(gpl, wantpl, plb))
                fail_msg("replay %d: the graph's in-place merge differs from a direct call", rep);
            if (memcmp((char *)gp + pb, (char *)p.outs + pb, pb) ||
                memcmp(gpl + p.rows, p.lses + p.rows, plb))
                fail_msg("replay %d: the in-place merge wrote into the other state", rep);
            free_device(&again);
            free(go);
            free(want);
            free(gl);
            free(wantl);
            free(gp);
            free(wantp);
            free(gpl);
            free(wantpl);
        }
        print_message("  %s: 3 replays of the captured merges = direct calls\n",
                      mlav_dtype_name(dt));
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
        CK(cudaStreamDestroy(stream));
        CK(cudaFree(o.base));
        CK(cudaFree(l.base));
        free_device(&ds);
        free_device(&dp);
        mf_free(&s);
        mf_free(&p);
    }
}

/* More rows than the launch has blocks (2^20): the rows past the grid are looped over. */
static void test_device_rows_past_the_grid(void **state)
{
    (void)state;
    tu_require_device();
    uint64_t rng = tu_seeded("rows past the grid");
    char msg[512];
    mf_states s = mf_alloc(MLAV_DTYPE_BF16, 2, (1 << 20) + 77, 3);
    mf_fill(&s, &rng, 1);
    void *out = tu_xcalloc(mf_out_bytes(&s), 1);
    float *lse = tu_xcalloc((size_t)s.rows, 4);
    device_merge(&s, out, lse, 0);
    if (!mf_check(&s, out, lse, msg, sizeof msg))
        fail_msg("%s", msg);
    free(out);
    free(lse);
    mf_free(&s);
}

/* Device memory that is not: host and pinned host pointers, a NULL lse is fine. */
static void test_device_refusals(void **state)
{
    (void)state;
    tu_require_device();
    float host[64] = {0}, *pinned = NULL, *dev = NULL;
    CK(cudaMallocHost((void **)&pinned, 256));
    CK(cudaMalloc((void **)&dev, 1024));
    const mlav_memory D = MLAV_MEM_DEVICE;
    const mlav_dtype F = MLAV_DTYPE_F32;
    struct {
        mlav_status st;
        const char *what;
    } cases[] = {
        {mlav_merge_states_stacked(D, F, 2, 2, 4, host, dev + 64, dev, dev + 32, NULL),
         "outs in host memory"},
        {mlav_merge_states_stacked(D, F, 2, 2, 4, dev + 64, dev + 96, pinned, dev + 32, NULL),
         "out in pinned host memory"},
        {mlav_merge_state_in_place(D, F, 2, 4, dev, dev + 32, dev + 64, host, NULL),
         "other_lse in host memory"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (cases[k].st != MLAV_ERR_INVALID_ARG)
            fail_msg("%s: %s", cases[k].what, mlav_status_string(cases[k].st));
        print_message("  %s -> refused\n", cases[k].what);
    }
    assert_int_equal(mlav_merge_states_stacked(D, F, 2, 2, 4, dev + 64, dev + 96, dev, NULL, NULL),
                     MLAV_OK);
    CK(cudaDeviceSynchronize());
    CK(cudaFree(dev));
    CK(cudaFreeHost(pinned));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_within_bound),
        cmocka_unit_test(test_device_bitwise_on_exact_weights),
        cmocka_unit_test(test_device_in_place),
        cmocka_unit_test(test_device_graph_replay),
        cmocka_unit_test(test_device_rows_past_the_grid),
        cmocka_unit_test(test_device_refusals),
    };
    /* ctest reads 77 as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt): without a device
     * every GPU case skips inside cmocka, which would otherwise show as Passed */
    return tu_no_device_skip(cmocka_run_group_tests(tests, NULL, NULL));
}

#else /* built without CUDA */

static void test_merge_gpu_not_built(void **state)
{
    (void)state;
    print_message("built without CUDA: skipped\n");
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_gpu_not_built),
    };
    return tu_no_device_skip(cmocka_run_group_tests(tests, NULL, NULL));
}

#endif
