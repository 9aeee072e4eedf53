/* The cuda-naive backend's ops table: plan (device facts, the shared-memory fit, device copies
 * of the lengths), run (through the common offload mapping) and free. Plans for one problem
 * only: it declines a plan for limits (naive_plan says why). */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_offload.h"
#include "verify_naive.h"

namespace {

struct naive_state {
    mlav_cuda_device dev; /* the device the plan was made on; runs must use the same one */
    int32_t *lengths;     /* device: q_indptr [B+1] then kv_lens [B] */
    size_t smem_bytes;    /* dynamic shared memory per block */
};

void naive_plan_free(void *state)
{
    naive_state *st = static_cast<naive_state *>(state);
    if (!st)
        return;
    if (st->lengths && cudaFree(st->lengths) != cudaSuccess)
        (void)cudaGetLastError();
    free(st);
}

mlav_status naive_plan(const mlav_problem_info *p, const mlav_limits *lim, uint64_t owner,
                       void **state, size_t *workspace_bytes)
{
    (void)lim, (void)owner;
    *state = nullptr;
    *workspace_bytes = 0;
    /* One block per query row of the plan's T: a step's rows past its tokens would be run with
     * the last request's lengths, so the kernel's grid needs the host's T, which only a plan for
     * one problem has. */
    if (!mlav_info_has_lengths(p))
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "cuda-naive has no plan for limits (its grid is one block per "
                              "query row of one problem); use cuda or cpu");
    mlav_cuda_device dev;
    mlav_status s = mlav_cuda_device_query(&dev);
    if (s != MLAV_OK)
        return s;
    const int64_t rows = (int64_t)p->T * p->H;
    if (rows > 0x7fffffff)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "cuda-naive runs one block per query row and T * H = %lld is more "
                              "than a grid holds",
                              (long long)rows);
    const size_t smem = mlav_naive_smem_bytes(p);
    s = mlav_cuda_prepare_kernel(mlav_naive_kernel(p), smem, &dev,
                                 mlav_naive_kernel_name(p));
    if (s == MLAV_ERR_UNSUPPORTED) {
        char why[512];
        snprintf(why, sizeof why, "%s", mlav_get_error()); /* the sentence buffer is reused */
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "cuda-naive keeps a request's whole score row in shared memory, "
                              "and the longest request (kv_len %lld, row width %d) does not fit: "
                              "%s",
                              (long long)p->max_kv_len, p->W, why);
    }
    if (s != MLAV_OK)
        return s;

    naive_state *st = static_cast<naive_state *>(calloc(1, sizeof(naive_state)));
    if (!st)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory for a cuda-naive plan");
    st->dev = dev;
    st->smem_bytes = smem;
    /* q_indptr, kv_lens, then max_pages page ids of -1: the row a device page-table row index
     * outside the table reads (page_row.cuh) */
    const size_t n_indptr = (size_t)p->B + 1, n_lens = (size_t)p->B;
    const size_t n_all = n_indptr + n_lens + (size_t)p->max_pages;
    cudaError_t e = cudaMalloc((void **)&st->lengths, n_all * sizeof(int32_t));
    if (e != cudaSuccess) {
        st->lengths = nullptr;
        naive_plan_free(st);
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY,
                                  "out of device memory for the plan's %zu-byte length tables",
                                  n_all * sizeof(int32_t));
        }
        return mlav_cuda_error(e, "cudaMalloc(lengths)", __FILE__, __LINE__);
    }
    /* Plain (synchronous) copies: plan may synchronize, and the host arrays must be consumed
     * before plan returns. */
    e = cudaMemcpy(st->lengths, p->q_indptr, n_indptr * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(st->lengths + n_indptr, p->kv_lens, n_lens * sizeof(int32_t),
                       cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemset(st->lengths + n_indptr + n_lens, 0xff,
                       (size_t)p->max_pages * sizeof(int32_t));
    if (e == cudaSuccess) /* a memset may return early: the runs' streams need not wait for it */
        e = cudaStreamSynchronize(0);
    if (e != cudaSuccess) {
        s = mlav_cuda_error(e, "cudaMemcpy(lengths)", __FILE__, __LINE__);
        naive_plan_free(st);
        return s;
    }
    *state = st;
    return MLAV_OK;
}

mlav_status naive_update(const mlav_problem_info *shape, const void *state,
                         const mlav_lengths *len, void *workspace, size_t workspace_bytes,
                         void *stream)
{
    (void)shape, (void)state, (void)len, (void)workspace, (void)workspace_bytes, (void)stream;
    return mlav_set_error(MLAV_ERR_INTERNAL, "a cuda-naive update (it has no plan for limits)");
}

/* The run on device tensors (mlav_cuda_run_fn): no allocation, no synchronization. */
mlav_status naive_run_device(const mlav_problem_info *p, const void *state,
                             const mlav_tensors *t, void *workspace, size_t workspace_bytes,
                             cudaStream_t stream)
{
    (void)workspace, (void)workspace_bytes;
    const naive_state *st = static_cast<const naive_state *>(state);
    /* Checked on every run, not only at plan time: the limit is the point of the check, and
     * it also raises the kernel's dynamic limit on whatever device runs it. */
    mlav_status s = mlav_cuda_prepare_kernel(mlav_naive_kernel(p), st->smem_bytes,
                                             &st->dev, mlav_naive_kernel_name(p));
    if (s != MLAV_OK)
        return s;
    const int32_t *q_indptr = st->lengths, *kv_lens = q_indptr + p->B + 1;
    return mlav_naive_launch(p, q_indptr, kv_lens, kv_lens + p->B, t, st->smem_bytes, stream);
}

mlav_status naive_run(const mlav_problem_info *p, const void *state, const mlav_tensors *t,
                      void *workspace, size_t workspace_bytes, void *stream)
{
    const naive_state *st = static_cast<const naive_state *>(state);
    return mlav_cuda_run_mapped(p, state, t, workspace, workspace_bytes, stream,
                                naive_run_device, st->dev.device, "cuda-naive");
}

} // namespace

extern "C" const mlav_backend_ops mlav_backend_cuda_naive_ops = {
    "cuda-naive",   MLAV_BACKEND_CUDA_NAIVE, MLAV_MEM_DEVICE,           mlav_cuda_available,
    naive_plan,     naive_update,            naive_run,                 naive_plan_free,
    mlav_cuda_workspace_alloc,               mlav_cuda_workspace_free,  NULL,
};
