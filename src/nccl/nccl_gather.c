/* The exchange of mlav_cp_merge_states through NCCL (merge_states.h): the one file that includes
 * nccl.h, built only when CMake found NCCL (MLAV_NCCL). The states travel as bytes: an all-gather
 * copies, so one byte type serves every dtype of out. */
#include <cuda_runtime.h>
#include <nccl.h>

#include "../common/merge_states.h"
#include "../core/problem.h"

static mlav_status nccl_failed(const char *fn, const char *call, ncclResult_t r, ncclComm_t comm)
{
    const char *detail = comm ? ncclGetLastError(comm) : NULL;
    return mlav_set_error(MLAV_ERR_CUDA, "%s: %s failed: %s%s%s", fn, call,
                          ncclGetErrorString(r), detail && *detail ? ": " : "",
                          detail ? detail : "");
}

mlav_status mlav_nccl_ranks(const char *fn, void *comm, int *ranks)
{
    ncclComm_t c = (ncclComm_t)comm;
    int n = 0, dev = -1, cur = -1;
    ncclResult_t r = ncclCommCount(c, &n);
    if (r != ncclSuccess)
        return nccl_failed(fn, "ncclCommCount", r, c);
    if ((r = ncclCommCuDevice(c, &dev)) != ncclSuccess)
        return nccl_failed(fn, "ncclCommCuDevice", r, c);
    /* a communicator whose earlier collective failed (a rank gone, a network error) would hang
     * or fail the next one: say so now */
    ncclResult_t async = ncclSuccess;
    if ((r = ncclCommGetAsyncError(c, &async)) != ncclSuccess)
        return nccl_failed(fn, "ncclCommGetAsyncError", r, c);
    if (async != ncclSuccess && async != ncclInProgress)
        return nccl_failed(fn, "an earlier operation of this communicator", async, c);
    const cudaError_t e = cudaGetDevice(&cur);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        return mlav_set_error(MLAV_ERR_NO_DEVICE, "%s: %s", fn, cudaGetErrorString(e));
    }
    if (e != cudaSuccess)
        return mlav_set_error(MLAV_ERR_CUDA, "%s: cudaGetDevice failed: %s", fn,
                              cudaGetErrorString(e));
    if (dev != cur)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "%s: comm is a communicator of CUDA device %d, but device %d is "
                              "current",
                              fn, dev, cur);
    *ranks = n;
    return MLAV_OK;
}

mlav_status mlav_nccl_gather_states(const char *fn, void *comm, size_t o_bytes, const void *o,
                                    void *gathered_o, size_t l_bytes, const float *l,
                                    float *gathered_l, void *stream)
{
    ncclComm_t c = (ncclComm_t)comm;
    const cudaStream_t s = (cudaStream_t)stream;
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess)
        return nccl_failed(fn, "ncclGroupStart", r, c);
    if (o_bytes > 0)
        r = ncclAllGather(o, gathered_o, o_bytes, ncclUint8, c, s);
    if (r == ncclSuccess && l_bytes > 0)
        r = ncclAllGather(l, gathered_l, l_bytes, ncclUint8, c, s);
    const ncclResult_t g = ncclGroupEnd();
    if (r != ncclSuccess)
        return nccl_failed(fn, "ncclAllGather", r, c);
    if (g != ncclSuccess)
        return nccl_failed(fn, "ncclGroupEnd", g, c);
    return MLAV_OK;
}
