/* The cuda-naive backend's ops table: plan (device facts, the shared-memory fit, device copies
 * of the lengths), update, run (through the common offload mapping) and free. A plan for one
 * problem keeps its lengths on the device and launches one block per query row of its T; a plan
 * for limits launches one per row of max_tokens, and its update writes each step's lengths into
 * the workspace (the lengths form of a step region, src/common/step_region.h), which the kernel
 * reads on the device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/step_region.h"
#include "cuda_offload.h"
#include "staging_ring.h"
#include "verify_naive.h"

namespace {

struct naive_state {
    mlav_cuda_device dev; /* the device the plan was made on; runs must use the same one */
    int32_t *lengths;     /* device: q_indptr [B+1] then kv_lens [B] (a plan for one problem
                             only), then max_pages page ids of -1 */
    size_t smem_bytes;    /* dynamic shared memory per block */
    /* a plan for limits */
    int for_limits;
    uint64_t owner;       /* the plan's id, stamped into every step it writes */
    mlav_limits lim;
    /* host updates: the lengths copied into a mapped slot of 2 max_batch + 1 int32, which the
     * step kernel reads from the device */
    mlav_staging_ring staging;
};

void naive_plan_free(void *state)
{
    naive_state *st = static_cast<naive_state *>(state);
    if (!st)
        return;
    mlav_staging_ring_free(&st->staging);
    if (st->lengths && cudaFree(st->lengths) != cudaSuccess)
        (void)cudaGetLastError();
    free(st);
}

mlav_status naive_plan(const mlav_problem_info *p, const mlav_limits *lim, uint64_t owner,
                       void **state, size_t *workspace_bytes)
{
    *state = nullptr;
    *workspace_bytes = 0;
    /* one block per query row of the plan's T: the problem's, or the limits' max_tokens (a
     * step's rows past its tokens return at once) */
    const int for_limits = !mlav_info_has_lengths(p);
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
    st->for_limits = for_limits;
    if (for_limits) {
        st->owner = owner;
        st->lim = *lim;
        s = mlav_staging_ring_make(&st->staging,
                                   (2 * (size_t)lim->max_batch + 1) * sizeof(int32_t), 1);
        if (s != MLAV_OK) {
            naive_plan_free(st);
            return s;
        }
    }
    /* q_indptr, kv_lens (a plan for one problem), then max_pages page ids of -1: the row a
     * device page-table row index outside the table reads (page_row.cuh) */
    const size_t n_indptr = for_limits ? 0 : (size_t)p->B + 1;
    const size_t n_lens = for_limits ? 0 : (size_t)p->B;
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
    if (!for_limits) {
        e = cudaMemcpy(st->lengths, p->q_indptr, n_indptr * sizeof(int32_t),
                       cudaMemcpyHostToDevice);
        if (e == cudaSuccess)
            e = cudaMemcpy(st->lengths + n_indptr, p->kv_lens, n_lens * sizeof(int32_t),
                           cudaMemcpyHostToDevice);
    }
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
    *workspace_bytes = for_limits ? mlav_step_region_bytes(lim) : 0;
    return MLAV_OK;
}

/* Host lengths (checked by dispatch): copied into a staging slot, which the step kernel reads. */
mlav_status update_host(naive_state *st, const mlav_lengths *len, const mlav_naive_step *step,
                        cudaStream_t stream)
{
    mlav_staging_slot slot;
    mlav_status s = mlav_staging_ring_acquire(&st->staging, &slot);
    if (s != MLAV_OK)
        return s;
    int32_t *q = static_cast<int32_t *>(slot.host), *kv = q + len->batch + 1;
    memcpy(q, len->q_indptr, sizeof(int32_t) * ((size_t)len->batch + 1));
    if (len->batch > 0) /* kv_lens may be NULL then */
        memcpy(kv, len->kv_lens, sizeof(int32_t) * (size_t)len->batch);
    const int32_t *dq = static_cast<const int32_t *>(slot.dev), *dkv = dq + len->batch + 1;
    s = mlav_naive_step_write(dq, dkv, len->batch, step, stream);
    return mlav_staging_ring_release(&st->staging, &slot, stream, s);
}

mlav_status naive_update(const mlav_problem_info *shape, const void *state,
                         const mlav_lengths *len, void *workspace, size_t workspace_bytes,
                         void *stream_)
{
    (void)shape, (void)workspace_bytes; /* dispatch checked the workspace against the plan */
    naive_state *st = const_cast<naive_state *>(static_cast<const naive_state *>(state));
    if (!st->for_limits)
        return mlav_set_error(MLAV_ERR_INTERNAL, "a cuda-naive update of a plan for one problem");
    cudaStream_t stream = static_cast<cudaStream_t>(stream_);
    int dev = -1;
    MLAV_CUDA_TRY(cudaGetDevice(&dev));
    mlav_status s = mlav_cuda_check_plan_device("cuda-naive", st->dev.device, dev);
    if (s != MLAV_OK)
        return s;
    const mlav_naive_step step = {workspace, st->owner, st->lim};
    if (len->memory == MLAV_MEM_DEVICE)
        return mlav_naive_step_write(len->q_indptr, len->kv_lens, len->batch, &step, stream);
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    MLAV_CUDA_TRY(cudaStreamIsCapturing(stream, &cap));
    if (cap != cudaStreamCaptureStatusNone)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "an update with host lengths cannot be captured (they are copied "
                              "at the call); pass device lengths, or update before each replay");
    return update_host(st, len, &step, stream);
}

/* The run on device tensors (mlav_cuda_run_fn): no allocation, no synchronization. */
mlav_status naive_run_device(const mlav_problem_info *p, const void *state,
                             const mlav_tensors *t, void *workspace, size_t workspace_bytes,
                             cudaStream_t stream)
{
    (void)workspace_bytes;
    const naive_state *st = static_cast<const naive_state *>(state);
    /* Checked on every run, not only at plan time: the limit is the point of the check, and
     * it also raises the kernel's dynamic limit on whatever device runs it. */
    mlav_status s = mlav_cuda_prepare_kernel(mlav_naive_kernel(p), st->smem_bytes,
                                             &st->dev, mlav_naive_kernel_name(p));
    if (s != MLAV_OK)
        return s;
    if (st->for_limits) {
        /* whatever the workspace holds, the kernel runs only this plan's step */
        const mlav_naive_step step = {workspace, st->owner, st->lim};
        return mlav_naive_launch(p, nullptr, nullptr, st->lengths, &step, t, st->smem_bytes,
                                 stream);
    }
    const int32_t *q_indptr = st->lengths, *kv_lens = q_indptr + p->B + 1;
    return mlav_naive_launch(p, q_indptr, kv_lens, kv_lens + p->B, nullptr, t, st->smem_bytes,
                             stream);
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
    mlav_cuda_workspace_alloc,               mlav_cuda_workspace_free,  mlav_cuda_step_read,
};
