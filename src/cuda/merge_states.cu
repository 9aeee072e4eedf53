/* The device merge of attention states (mlav_merge_states_stacked, mlav_merge_state_in_place on
 * MLAV_MEM_DEVICE): a block per row, with the merge math of merge.h and the conversions of
 * dtype.h, the host loop's (merge_states.c) operation for operation, so that the two differ only
 * where the device's expf / logf round differently from the host's. */
#include <math.h>

#include "../common/dtype.h"
#include "../common/merge.h"
#include "../common/merge_states.h"
#include "cuda_device.h"

namespace {

constexpr int THREADS = 128;
constexpr int64_t MAX_BLOCKS = 1 << 20; /* rows past it are looped over */
static_assert(MLAV_MERGE_MAX_STATES * sizeof(float) <= 48 * 1024,
              "the weights fit the dynamic shared memory a launch gets without an opt-in");

template <int DT> __device__ __forceinline__ const void *state_o(const mlav_merge_job &j, int i)
{
    return i == 0 ? j.o0
                  : static_cast<const char *>(j.o1) +
                        (size_t)(i - 1) * j.o_step * (DT == MLAV_DTYPE_F32 ? 4 : 2);
}
__device__ __forceinline__ const float *state_l(const mlav_merge_job &j, int i)
{
    return i == 0 ? j.l0 : j.l1 + (size_t)(i - 1) * j.l_step;
}

/* The block's max and NaN flag over its threads' values, through s_red (every thread gets both).
 * Exact in any order, as a max is. */
__device__ __forceinline__ void block_max_nan(float &m, int &nan, float *s_red, int *s_nan)
{
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    nan = __any_sync(0xffffffffu, nan);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        s_red[warp] = m;
        s_nan[warp] = nan;
    }
    __syncthreads();
    m = s_red[0];
    nan = s_nan[0];
    for (int k = 1; k < THREADS / 32; k++) {
        m = fmaxf(m, s_red[k]);
        nan |= s_nan[k];
    }
}

/* Row r: the weights into s_w (dynamic shared memory, n floats), the sum in the host's order (one
 * thread, i = 0 .. n-1, so that equal weights give an equal sum), lse by thread 0 once every
 * thread has read the row's lse values (lse may be the first state's), then each thread's columns
 * with every state of an element read before the element is written (out may be the first
 * state's o). Products and sums are rounded one by one (no fused multiply-add), as the host's
 * C loop is. */
template <int DT> __global__ void __launch_bounds__(THREADS) merge_kernel(const mlav_merge_job j)
{
    extern __shared__ float s_w[];
    __shared__ float s_red[THREADS / 32], s_sum;
    __shared__ int s_nan[THREADS / 32];
    const int n = j.n, tid = threadIdx.x;
    for (int64_t r = blockIdx.x; r < j.rows; r += gridDim.x) {
        float m = -INFINITY;
        int nan = 0;
        for (int i = tid; i < n; i += THREADS) {
            const float l = state_l(j, i)[r];
            s_w[i] = l;
            m = fmaxf(m, l);
            nan |= l != l;
        }
        block_max_nan(m, nan, s_red, s_nan); /* its barrier also orders s_w's lse values */
        for (int i = tid; i < n; i += THREADS)
            s_w[i] = mlav_merge_weight(s_w[i], m, nan);
        __syncthreads();
        if (tid == 0) {
            float sum = 0.0f;
            /* one weight at a time: unrolled, the loop read s_w three floats at once past the
             * end of a smaller allocation (compute-sanitizer memcheck) */
#pragma unroll 1
            for (int i = 0; i < n; i++)
                sum = __fadd_rn(sum, s_w[i]);
            s_sum = sum;
            if (j.lse)
                j.lse[r] = mlav_merge_lse(m, sum, nan);
        }
        __syncthreads();
        const float sum = s_sum;
        for (int i = tid; i < n; i += THREADS)
            s_w[i] = mlav_merge_normalize(s_w[i], sum);
        __syncthreads();
        for (int d = tid; d < j.dim; d += THREADS) {
            const size_t k = (size_t)r * (size_t)j.dim + (size_t)d;
            float acc = 0.0f;
            for (int i = 0; i < n; i++) {
                const float w = s_w[i];
                if (w != 0.0f || w != w) /* an empty state's o is not read: 0*NaN */
                    acc = __fadd_rn(acc, __fmul_rn(w, mlav_load_as_f32(state_o<DT>(j, i), DT, k)));
            }
            mlav_store_from_f32(j.out, DT, k, acc);
        }
        __syncthreads(); /* s_w, s_red and s_sum are the next row's */
    }
}

/* Is `ptr` memory the current device's kernels may read and write: its device memory, or managed
 * memory? Anything else would fault inside the kernel and poison the caller's CUDA context. */
mlav_status check_device_pointer(const char *fn, const void *ptr, const char *name, int device)
{
    cudaPointerAttributes a;
    const cudaError_t e = cudaPointerGetAttributes(&a, ptr);
    if (e == cudaErrorInvalidValue) {
        (void)cudaGetLastError();
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "%s: %s = %p is not a pointer CUDA knows, but memory is "
                              "MLAV_MEM_DEVICE",
                              fn, name, ptr);
    }
    if (e != cudaSuccess)
        return mlav_cuda_error(e, "cudaPointerGetAttributes", __FILE__, __LINE__);
    if (a.type == cudaMemoryTypeDevice && a.device != device)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "%s: %s = %p is memory of CUDA device %d, but device %d is "
                              "current",
                              fn, name, ptr, a.device, device);
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "%s: %s = %p is %s memory, but memory is MLAV_MEM_DEVICE", fn,
                              name, ptr,
                              a.type == cudaMemoryTypeHost ? "pinned host" : "ordinary host");
    return MLAV_OK;
}

} // namespace

extern "C" mlav_status mlav_cuda_check_device_pointers(const char *fn,
                                                       const void *const *pointers,
                                                       const char *const *names,
                                                       int num_pointers)
{
    int device = -1;
    const cudaError_t e = cudaGetDevice(&device);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        return mlav_set_error(MLAV_ERR_NO_DEVICE, "%s: memory is MLAV_MEM_DEVICE, but %s", fn,
                              cudaGetErrorString(e));
    }
    if (e != cudaSuccess)
        return mlav_cuda_error(e, "cudaGetDevice", __FILE__, __LINE__);
    for (int k = 0; k < num_pointers; k++) {
        const mlav_status st = check_device_pointer(fn, pointers[k], names[k], device);
        if (st != MLAV_OK)
            return st;
    }
    return MLAV_OK;
}

/* num_pointers 0: the caller checked them (mlav_cp_merge_states, before its exchange) */
extern "C" mlav_status mlav_cuda_merge_states(const char *fn, const mlav_merge_job *job,
                                              const void *const *pointers,
                                              const char *const *names, int num_pointers,
                                              void *stream)
{
    if (num_pointers > 0) {
        const mlav_status st = mlav_cuda_check_device_pointers(fn, pointers, names, num_pointers);
        if (st != MLAV_OK)
            return st;
    }
    if (job->rows == 0)
        return MLAV_OK;
    const unsigned grid = (unsigned)(job->rows < MAX_BLOCKS ? job->rows : MAX_BLOCKS);
    /* <= 16 KiB: no opt-in needed; whole 16-byte words, so that no vector access of the last
     * weights reads past the allocation */
    const size_t smem = (sizeof(float) * (size_t)job->n + 15) & ~(size_t)15;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (job->dtype) {
    case MLAV_DTYPE_F32:
        merge_kernel<MLAV_DTYPE_F32><<<grid, THREADS, smem, s>>>(*job);
        break;
    case MLAV_DTYPE_BF16:
        merge_kernel<MLAV_DTYPE_BF16><<<grid, THREADS, smem, s>>>(*job);
        break;
    case MLAV_DTYPE_F16:
        merge_kernel<MLAV_DTYPE_F16><<<grid, THREADS, smem, s>>>(*job);
        break;
    default:
        return mlav_set_error(MLAV_ERR_INTERNAL, "%s: dtype %d reached the kernel", fn,
                              (int)job->dtype);
    }
    MLAV_CUDA_TRY(cudaGetLastError());
    return MLAV_OK;
}
