#pragma once
// NIBBLE_HD marks code shared by the host (the CPU oracle) and CUDA kernels: one definition of each
// number format, compiled by both g++ and nvcc. Never build it with --use_fast_math or
// -ffast-math: the formats divide, and the definition asks for correctly rounded float32 division.
#if defined(__CUDACC__)
#define NIBBLE_HD __host__ __device__ __forceinline__
#else
#define NIBBLE_HD inline
#endif
