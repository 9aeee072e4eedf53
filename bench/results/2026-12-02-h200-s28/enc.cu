/* the host cost of the KV pool's tensor map (kv_tensor_map.h), as mlav_flash_sm90_launch pays
 * it per launch: the entry point's first resolution, then 100000 encodes */
#include <chrono>
#include <stdio.h>
#include "kv_tensor_map.h"
int main()
{
    using clk = std::chrono::steady_clock;
    void *kv = nullptr;
    if (cudaMalloc(&kv, (size_t)4096 * 64 * 1152) != cudaSuccess)
        return 1;
    mlav90::kv_map_encoder fn = nullptr;
    auto a = clk::now();
    const cudaError_t e = mlav90::kv_map_encoder_get(&fn);
    auto z = clk::now();
    printf("entry point: %s, first %.2f us\n", cudaGetErrorString(e),
           std::chrono::duration<double, std::micro>(z - a).count());
    if (e != cudaSuccess)
        return 1;
    a = clk::now();
    for (int i = 0; i < 1000; i++)
        mlav90::kv_map_encoder_get(&fn);
    z = clk::now();
    printf("entry point, cached: %.3f us\n",
           std::chrono::duration<double, std::micro>(z - a).count() / 1000);
    CUtensorMap m;
    const int n = 100000;
    a = clk::now();
    for (int i = 0; i < n; i++)
        if (mlav90::kv_map_encode(fn, &m, kv, (uint64_t)4096 * 64 - (i & 63)) != CUDA_SUCCESS)
            return 2;
    z = clk::now();
    printf("encode: %.3f us each (%d)\n", std::chrono::duration<double, std::micro>(z - a).count() / n, n);
    return 0;
}
