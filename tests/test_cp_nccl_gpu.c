/* mlav_cp_merge_states, the NCCL exchange of context-parallel verify. Without NCCL built in: the
 * call says so (MLAV_ERR_UNSUPPORTED). With it, on one process:
 *   - one rank (a communicator of one GPU): the result is the device merge of the one state, bit
 *     for bit, out aliasing out_local or not; replayed from a CUDA graph after the inputs change,
 *     what a direct call gives; nothing written outside out and lse;
 *   - bad arguments (NULL communicator, overlapping scratch, host memory, a bad dtype) get
 *     MLAV_ERR_INVALID_ARG and leave out untouched;
 *   - R ranks, one thread and one GPU each, when the machine has R >= 2 GPUs (else skipped):
 *     rank r holds state r of R random states (empty and NaN rows included); every rank's out and
 *     lse equal, bit for bit, the device merge of the R states stacked on one GPU (the same
 *     kernel after the all-gather).
 * Skips without a CUDA device of cc >= 8.0. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "merge_fixture.h"
#include "mlaverify.h"
#include "test_util.h"

#define ROWS 300
#define DIM 512

static void test_cp_without_nccl(void **state)
{
    (void)state;
    if (mlav_nccl_compiled()) {
        print_message("built with NCCL: the other cases run\n");
        skip();
    }
    float x[4] = {0};
    assert_int_equal(mlav_cp_merge_states((void *)x, MLAV_DTYPE_F32, 1, 1, x, x + 1, x + 2,
                                          x + 3, x, x + 1, NULL),
                     MLAV_ERR_UNSUPPORTED);
    assert_non_null(strstr(mlav_last_error(NULL), "without NCCL"));
}

#if defined(MLAV_WITH_CUDA) && defined(MLAV_WITH_NCCL)
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>

#include "device_buffer.h"

#define CK TU_CK
#define NK(call)                                                                                 \
    do {                                                                                         \
        ncclResult_t r_ = (call);                                                                \
        if (r_ != ncclSuccess)                                                                   \
            fail_msg("%s: %s", #call, ncclGetErrorString(r_));                                   \
    } while (0)

static const mlav_dtype DTYPES[] = {MLAV_DTYPE_F32, MLAV_DTYPE_BF16, MLAV_DTYPE_F16};

/* The device merge of all n states of `s` on the current device: out and lse to the host. */
static void reference_merge(const mf_states *s, void *out, float *lse)
{
    const size_t ob = mf_out_bytes(s), lb = (size_t)s->rows * sizeof(float);
    dbuf so = dbuf_alloc(ob * (size_t)s->n), sl = dbuf_alloc(lb * (size_t)s->n);
    dbuf o = dbuf_alloc(ob), l = dbuf_alloc(lb);
    CK(cudaMemcpy(so.p, s->outs, ob * (size_t)s->n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(sl.p, s->lses, lb * (size_t)s->n, cudaMemcpyHostToDevice));
    assert_int_equal(mlav_merge_states_stacked(MLAV_MEM_DEVICE, s->dtype, s->n, s->rows, s->dim,
                                               so.p, sl.p, o.p, l.p, NULL),
                     MLAV_OK);
    CK(cudaDeviceSynchronize());
    assert_true(dbuf_read(&o, out));
    assert_true(dbuf_read(&l, lse));
    dbuf_free(&so);
    dbuf_free(&sl);
    dbuf_free(&o);
    dbuf_free(&l);
}

static ncclComm_t one_rank_comm(void)
{
    int dev = 0;
    CK(cudaGetDevice(&dev));
    ncclComm_t comm = NULL;
    NK(ncclCommInitAll(&comm, 1, &dev));
    return comm;
}

static void test_cp_one_rank(void **state)
{
    (void)state;
    tu_require_device();
    uint64_t rng = tu_seeded("one rank");
    ncclComm_t comm = one_rank_comm();
    for (size_t d = 0; d < sizeof DTYPES / sizeof DTYPES[0]; d++) {
        mf_states s = mf_alloc(DTYPES[d], 1, ROWS, DIM);
        mf_fill(&s, &rng, 1);
        const size_t ob = mf_out_bytes(&s), lb = ROWS * sizeof(float);
        void *want = tu_xcalloc(ob, 1), *got = tu_xcalloc(ob, 1);
        float *want_l = tu_xcalloc(ROWS, sizeof(float)), *got_l = tu_xcalloc(ROWS, sizeof(float));
        reference_merge(&s, want, want_l);
        for (int alias = 0; alias < 2; alias++) {
            dbuf ol = dbuf_alloc(ob), ll = dbuf_alloc(lb), go = dbuf_alloc(ob),
                 gl = dbuf_alloc(lb), o = dbuf_alloc(ob), l = dbuf_alloc(lb);
            CK(cudaMemcpy(ol.p, s.outs, ob, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(ll.p, s.lses, lb, cudaMemcpyHostToDevice));
            void *out = alias ? ol.p : o.p;
            float *lse = alias ? (float *)ll.p : (float *)l.p;
            assert_int_equal(mlav_cp_merge_states(comm, s.dtype, ROWS, DIM, ol.p, ll.p, go.p,
                                                  gl.p, out, lse, NULL),
                             MLAV_OK);
            CK(cudaDeviceSynchronize());
            assert_true(dbuf_read(alias ? &ol : &o, got));
            assert_true(dbuf_read(alias ? &ll : &l, got_l));
            assert_memory_equal(got, want, ob);
            assert_memory_equal(got_l, want_l, lb);
            dbuf_free(&ol);
            dbuf_free(&ll);
            dbuf_free(&go);
            dbuf_free(&gl);
            dbuf_free(&o);
            dbuf_free(&l);
        }
        free(want);
        free(got);
        free(want_l);
        free(got_l);
        mf_free(&s);
    }
    NK(ncclCommDestroy(comm));
}

/* Captured once, replayed on new inputs: what a direct call on those inputs gives. */
static void test_cp_graph(void **state)
{
    (void)state;
    tu_require_device();
    uint64_t rng = tu_seeded("graph");
    ncclComm_t comm = one_rank_comm();
    mf_states a = mf_alloc(MLAV_DTYPE_BF16, 1, ROWS, DIM), b = mf_alloc(MLAV_DTYPE_BF16, 1, ROWS,
                                                                         DIM);
    mf_fill(&a, &rng, 1);
    mf_fill(&b, &rng, 0);
    const size_t ob = mf_out_bytes(&a), lb = ROWS * sizeof(float);
    dbuf ol = dbuf_alloc(ob), ll = dbuf_alloc(lb), go = dbuf_alloc(ob), gl = dbuf_alloc(lb),
         o = dbuf_alloc(ob), l = dbuf_alloc(lb);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaMemcpy(ol.p, a.outs, ob, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ll.p, a.lses, lb, cudaMemcpyHostToDevice));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    const mlav_status s = mlav_cp_merge_states(comm, MLAV_DTYPE_BF16, ROWS, DIM, ol.p, ll.p,
                                               go.p, gl.p, o.p, l.p, st);
    CK(cudaStreamEndCapture(st, &g));
    assert_int_equal(s, MLAV_OK);
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaMemcpy(ol.p, b.outs, ob, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ll.p, b.lses, lb, cudaMemcpyHostToDevice));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    void *want = tu_xcalloc(ob, 1), *got = tu_xcalloc(ob, 1);
    float *want_l = tu_xcalloc(ROWS, sizeof(float)), *got_l = tu_xcalloc(ROWS, sizeof(float));
    reference_merge(&b, want, want_l);
    assert_true(dbuf_read(&o, got));
    assert_true(dbuf_read(&l, got_l));
    assert_memory_equal(got, want, ob);
    assert_memory_equal(got_l, want_l, lb);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(st));
    free(want);
    free(got);
    free(want_l);
    free(got_l);
    dbuf_free(&ol);
    dbuf_free(&ll);
    dbuf_free(&go);
    dbuf_free(&gl);
    dbuf_free(&o);
    dbuf_free(&l);
    mf_free(&a);
    mf_free(&b);
    NK(ncclCommDestroy(comm));
}

static void test_cp_refusals(void **state)
{
    (void)state;
    tu_require_device();
    ncclComm_t comm = one_rank_comm();
    const size_t ob = ROWS * DIM * sizeof(float), lb = ROWS * sizeof(float);
    dbuf ol = dbuf_alloc(ob), ll = dbuf_alloc(lb), go = dbuf_alloc(ob), gl = dbuf_alloc(lb),
         o = dbuf_alloc(ob), l = dbuf_alloc(lb);
    float *host = tu_xcalloc(ROWS * DIM, sizeof(float));
    const mlav_dtype F = MLAV_DTYPE_F32;
    struct {
        mlav_status want;
        const char *says;
        mlav_status got;
    } cases[] = {
        {MLAV_ERR_INVALID_ARG, "comm is NULL",
         mlav_cp_merge_states(NULL, F, ROWS, DIM, ol.p, ll.p, go.p, gl.p, o.p, l.p, NULL)},
        {MLAV_ERR_INVALID_ARG, "overlaps",
         mlav_cp_merge_states(comm, F, ROWS, DIM, ol.p, ll.p, ol.p, gl.p, o.p, l.p, NULL)},
        {MLAV_ERR_INVALID_ARG, "overlaps",
         mlav_cp_merge_states(comm, F, ROWS, DIM, ol.p, ll.p, go.p, gl.p, go.p, l.p, NULL)},
        {MLAV_ERR_INVALID_ARG, "host memory",
         mlav_cp_merge_states(comm, F, ROWS, DIM, host, ll.p, go.p, gl.p, o.p, l.p, NULL)},
        {MLAV_ERR_INVALID_ARG, "dtype",
         mlav_cp_merge_states(comm, MLAV_DTYPE_FP8_E4M3, ROWS, DIM, ol.p, ll.p, go.p, gl.p, o.p,
                              l.p, NULL)},
        {MLAV_ERR_INVALID_ARG, "must be >= 0",
         mlav_cp_merge_states(comm, F, -1, DIM, ol.p, ll.p, go.p, gl.p, o.p, l.p, NULL)},
    };
    (void)cases[0].got;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        print_message("  refusal %zu: %s\n", i, mlav_status_string(cases[i].got));
        assert_int_equal(cases[i].got, cases[i].want);
    }
    /* the sentences, case by case (mlav_last_error keeps only the last): rerun each */
    assert_int_equal(mlav_cp_merge_states(comm, F, ROWS, DIM, ol.p, ll.p, go.p, gl.p, go.p, l.p,
                                          NULL),
                     MLAV_ERR_INVALID_ARG);
    assert_non_null(strstr(mlav_last_error(NULL), "overlaps"));
    assert_int_equal(mlav_cp_merge_states(comm, F, ROWS, DIM, host, ll.p, go.p, gl.p, o.p, l.p,
                                          NULL),
                     MLAV_ERR_INVALID_ARG);
    assert_non_null(strstr(mlav_last_error(NULL), "out_local"));
    CK(cudaDeviceSynchronize());
    unsigned char *back = tu_xcalloc(ob, 1);
    assert_true(dbuf_read(&o, back));
    for (size_t i = 0; i < ob; i++)
        assert_int_equal(back[i], 0xFF); /* out untouched */
    free(back);
    free(host);
    dbuf_free(&ol);
    dbuf_free(&ll);
    dbuf_free(&go);
    dbuf_free(&gl);
    dbuf_free(&o);
    dbuf_free(&l);
    NK(ncclCommDestroy(comm));
}

/* R ranks, a thread and a GPU each */
typedef struct rank_job {
    int rank, ranks;
    ncclUniqueId id;
    const mf_states *s;
    void *out;
    float *lse;
    mlav_status status;
    char error[512];
} rank_job;

static void *rank_main(void *arg)
{
    rank_job *j = arg;
    const mf_states *s = j->s;
    const size_t ob = mf_out_bytes(s), lb = (size_t)s->rows * sizeof(float);
    if (cudaSetDevice(j->rank) != cudaSuccess)
        return snprintf(j->error, sizeof j->error, "cudaSetDevice(%d)", j->rank), NULL;
    ncclComm_t comm = NULL;
    if (ncclCommInitRank(&comm, j->ranks, j->id, j->rank) != ncclSuccess)
        return snprintf(j->error, sizeof j->error, "ncclCommInitRank"), NULL;
    void *ol, *go, *o;
    float *ll, *gl, *l;
    cudaMalloc(&ol, ob);
    cudaMalloc((void **)&ll, lb);
    cudaMalloc(&go, ob * (size_t)j->ranks);
    cudaMalloc((void **)&gl, lb * (size_t)j->ranks);
    cudaMalloc(&o, ob);
    cudaMalloc((void **)&l, lb);
    cudaMemcpy(ol, (const char *)s->outs + ob * (size_t)j->rank, ob, cudaMemcpyHostToDevice);
    cudaMemcpy(ll, s->lses + (size_t)s->rows * (size_t)j->rank, lb, cudaMemcpyHostToDevice);
    j->status = mlav_cp_merge_states(comm, s->dtype, s->rows, s->dim, ol, ll, go, gl, o, l, NULL);
    if (j->status != MLAV_OK)
        snprintf(j->error, sizeof j->error, "%s", mlav_last_error(NULL));
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess && j->status == MLAV_OK) {
        j->status = MLAV_ERR_CUDA;
        snprintf(j->error, sizeof j->error, "%s", cudaGetErrorString(e));
    }
    cudaMemcpy(j->out, o, ob, cudaMemcpyDeviceToHost);
    cudaMemcpy(j->lse, l, lb, cudaMemcpyDeviceToHost);
    cudaFree(ol);
    cudaFree(ll);
    cudaFree(go);
    cudaFree(gl);
    cudaFree(o);
    cudaFree(l);
    ncclCommDestroy(comm);
    return NULL;
}

static void test_cp_ranks(void **state)
{
    (void)state;
    tu_require_device();
    int devices = 0;
    CK(cudaGetDeviceCount(&devices));
    if (devices < 2) {
        print_message("one GPU: the multi-rank case needs two or more (skipped)\n");
        skip();
    }
    const int R = devices > 8 ? 8 : devices;
    uint64_t rng = tu_seeded("ranks");
    for (size_t d = 0; d < sizeof DTYPES / sizeof DTYPES[0]; d++) {
        mf_states s = mf_alloc(DTYPES[d], R, ROWS, DIM);
        mf_fill(&s, &rng, 1);
        const size_t ob = mf_out_bytes(&s), lb = ROWS * sizeof(float);
        void *want = tu_xcalloc(ob, 1);
        float *want_l = tu_xcalloc(ROWS, sizeof(float));
        CK(cudaSetDevice(0));
        reference_merge(&s, want, want_l);
        ncclUniqueId id;
        NK(ncclGetUniqueId(&id));
        rank_job jobs[8];
        pthread_t th[8];
        for (int r = 0; r < R; r++) {
            jobs[r] = (rank_job){r, R, id, &s, tu_xcalloc(ob, 1), tu_xcalloc(ROWS, sizeof(float)),
                                 MLAV_ERR_INTERNAL, ""};
            assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
        }
        for (int r = 0; r < R; r++)
            assert_int_equal(pthread_join(th[r], NULL), 0);
        for (int r = 0; r < R; r++) {
            print_message("  %s, rank %d of %d: %s %s\n", mlav_dtype_name(s.dtype), r, R,
                          mlav_status_string(jobs[r].status), jobs[r].error);
            assert_int_equal(jobs[r].status, MLAV_OK);
            assert_memory_equal(jobs[r].out, want, ob);
            assert_memory_equal(jobs[r].lse, want_l, lb);
            free(jobs[r].out);
            free(jobs[r].lse);
        }
        free(want);
        free(want_l);
        mf_free(&s);
    }
    CK(cudaSetDevice(0));
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cp_without_nccl),
#if defined(MLAV_WITH_CUDA) && defined(MLAV_WITH_NCCL)
        cmocka_unit_test(test_cp_one_rank),
        cmocka_unit_test(test_cp_graph),
        cmocka_unit_test(test_cp_refusals),
        cmocka_unit_test(test_cp_ranks),
#endif
    };
    /* 77 (skipped for ctest) when every case skipped: built without NCCL that is never, the
     * first case runs */
    return tu_no_device_skip(cmocka_run_group_tests(tests, NULL, NULL));
}
