/* mma.sync m16n8k16 BF16 rate against warps per SM and independent accumulators per warp: a
 * register-only loop, one block per SM (forced with dynamic shared memory), so only the MMA issue
 * rate and latency limit it. Answers "can N warps per scheduler saturate the tensor pipe?".
 *   nvcc -O3 -arch=sm_90 -o mma_occupancy bench/diag/mma_occupancy.cu && ./mma_occupancy */
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
template <int ACC>
__global__ void k(int iters, float *sink) {
    uint32_t lane = threadIdx.x & 31u;
    uint32_t a0 = 0x3c003c00u + lane, a1 = 0x3c013c02u ^ lane, a2 = 0x3b803c00u + (lane << 16), a3 = 0x3c003b80u;
    uint32_t b0 = 0x3b003b00u + lane, b1 = 0x3b013b02u;
    float acc[ACC][4];
#pragma unroll
    for (int i = 0; i < ACC; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int i = 0; i < ACC; i++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                         : "+f"(acc[i][0]), "+f"(acc[i][1]), "+f"(acc[i][2]), "+f"(acc[i][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < ACC; i++) s += acc[i][0] + acc[i][1] + acc[i][2] + acc[i][3];
    if (s == -1.f) sink[blockIdx.x] = s;
}
template <int ACC> void run(int threads, int sms, float *sink) {
    // force one block per SM with dynamic shared memory
    cudaFuncSetAttribute(k<ACC>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    int iters = 4096 * 8 / ACC;
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    k<ACC><<<sms, threads, 200 * 1024>>>(iters, sink);
    cudaEventRecord(a);
    for (int r = 0; r < 5; r++) k<ACC><<<sms, threads, 200 * 1024>>>(iters, sink);
    cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b);
    double flop = 5.0 * 2 * 16 * 8 * 16 * (double)ACC * iters * (threads / 32) * sms;
    printf("warps/SM %2d (per SMSP %d)  acc/warp %2d  -> %6.1f TFLOP/s  err=%s\n", threads / 32, threads / 128, ACC,
           flop / (ms * 1e-3) / 1e12, cudaGetErrorString(cudaGetLastError()));
}
int main() {
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    float *sink; cudaMalloc(&sink, 4096 * 4);
    for (int th : {128, 256, 512, 1024}) { run<1>(th, sms, sink); run<2>(th, sms, sink); run<4>(th, sms, sink); run<8>(th, sms, sink); run<16>(th, sms, sink); }
    return 0;
}
