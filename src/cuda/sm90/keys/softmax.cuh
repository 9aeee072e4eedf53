/* The keys kernel's softmax stage: each row's online softmax over the slice's keys and
 * P^T's B fragments. */
#ifndef MLAV_CUDA_SM90_KEYS_SOFTMAX_CUH
#define MLAV_CUDA_SM90_KEYS_SOFTMAX_CUH

#include "../../reference_max.cuh"
#include "fragments.cuh"

namespace mlav90 {
namespace keys {

/* The online softmax of each row over the slice's 16 keys (the maxima over lanes g: xor 4, 8,
 * 16), reference_max.cuh's rule: O and the sums rescaled where a reference moves, the scores
 * made P (k: the factor of raw scores, 1 for scaled ones) and added to the sums, and P^T's B
 * fragments of each n-tile (keys 0-7, 8-15) by movmatrix. */
template <int NTN>
__device__ __forceinline__ void softmax_tile(float (&sacc)[NTN][4], float (&o)[GROUPS * 4][NTN][4],
                                             float (&m_run)[NTN][2], float (&l_run)[NTN][2],
                                             float k, uint32_t (&pb)[NTN][2])
{
    float f[NTN][2];
    bool moved = false;
#pragma unroll
    for (int n = 0; n < NTN; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float tm = fmaxf(sacc[n][e], sacc[n][e + 2]);
            tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 4));
            tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 8));
            tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 16));
            tm *= k;
            const float mr = mlav::next_ref(m_run[n][e], tm);
            f[n][e] = mlav::ref_factor(m_run[n][e], mr);
            moved |= f[n][e] != 1.0f;
            l_run[n][e] *= f[n][e];
            m_run[n][e] = mr;
        }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int i = 0; i < GROUPS * 4; i++)
#pragma unroll
            for (int n = 0; n < NTN; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    o[i][n][e] *= f[n][e & 1];
    }
#pragma unroll
    for (int n = 0; n < NTN; n++) {
        float neg[2];
#pragma unroll
        for (int e = 0; e < 2; e++)
            neg[e] = m_run[n][e] == -INFINITY ? 0.0f : -m_run[n][e];
#pragma unroll
        for (int e = 0; e < 4; e++)
            sacc[n][e] = mlav::exp2_fast(fmaf(sacc[n][e], k, neg[e & 1]));
        l_run[n][0] += sacc[n][0] + sacc[n][2];
        l_run[n][1] += sacc[n][1] + sacc[n][3];
        pb[n][0] = movtrans(mlav::mma_type<__half>::pack(sacc[n][0], sacc[n][1]));
        pb[n][1] = movtrans(mlav::mma_type<__half>::pack(sacc[n][2], sacc[n][3]));
    }
}

} // namespace keys
} // namespace mlav90

#endif
