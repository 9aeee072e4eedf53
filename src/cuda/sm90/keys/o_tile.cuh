/* The keys kernel's O^T stage: O^T += V^T P^T with V^T's fragments made from K's. */
#ifndef MLAV_CUDA_SM90_KEYS_O_TILE_CUH
#define MLAV_CUDA_SM90_KEYS_O_TILE_CUH

#include "fragments.cuh"

namespace mlav90 {
namespace keys {

/* O^T += V^T P^T over the slice's keys: V^T's A fragments are K's latent ones (kf), each 8x8
 * register transposed; a draft key's non-finite values zeroed first (a row that sees it has a
 * non-finite score; one that does not gives it weight 0, which would turn them into NaN). */
template <int NTN>
__device__ __forceinline__ void o_tile(float (&o)[GROUPS * 4][NTN][4],
                                       uint32_t (&kf)[GROUPS][4][4], const uint32_t (&pb)[NTN][2],
                                       int j_s, int prefix, const lane_ctx &l)
{
    if (j_s + 16 > prefix) {
        const bool dg = j_s + l.g >= prefix, dg8 = j_s + l.g + 8 >= prefix;
#pragma unroll
        for (int u = 0; u < GROUPS; u++)
#pragma unroll
            for (int s = 0; s < 4; s++) { /* selects: movmatrix and mma follow, .aligned */
                kf[u][s][0] = dg ? finite_or_zero(kf[u][s][0]) : kf[u][s][0];
                kf[u][s][2] = dg ? finite_or_zero(kf[u][s][2]) : kf[u][s][2];
                kf[u][s][1] = dg8 ? finite_or_zero(kf[u][s][1]) : kf[u][s][1];
                kf[u][s][3] = dg8 ? finite_or_zero(kf[u][s][3]) : kf[u][s][3];
            }
    }
#pragma unroll
    for (int u = 0; u < GROUPS; u++)
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const uint32_t a[4] = {movtrans(kf[u][s][0]), movtrans(kf[u][s][2]),
                                   movtrans(kf[u][s][1]), movtrans(kf[u][s][3])};
#pragma unroll
            for (int n = 0; n < NTN; n++)
                mlav::mma_type<__half>::mma(o[4 * u + s][n], a, pb[n][0], pb[n][1]);
        }
}

} // namespace keys
} // namespace mlav90

#endif
