/* MLAV_HD: mark a static inline helper usable from C, host C++ and CUDA device code alike. */
#ifndef MLAV_COMMON_HD_H
#define MLAV_COMMON_HD_H

#ifdef __CUDACC__
#define MLAV_HD __host__ __device__ __forceinline__
#else
#define MLAV_HD inline
#endif

#endif
