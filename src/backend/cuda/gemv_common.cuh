#pragma once
// Device helpers shared by the decode GEMV's two builds (gemv.cu, gemv_tiles.cu).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "quant/bf16.h"

namespace nibble::cuda::detail::gemv_common {

inline constexpr int64_t kWideRow = 1024;  // elementwise.cu's rms_norm: one block per row above this width

// An L2 policy that evicts the lines it is used on first (each weight byte is read once).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// d += A · B, m16n8k16, bf16 inputs, f32 accumulators (A row-major 16 × 16, B column-major 16 × 8).
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats as a bf16x2 word (quant::bf16_from_f32 each); the low half is `lo`.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(quant::bf16_from_f32(lo)) | (static_cast<uint32_t>(quant::bf16_from_f32(hi)) << 16);
}

// The current device's multiprocessors (queried once).
inline int multiprocessors() {
  static const int count = [] {
    int device = 0, value = 0;
    NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
    NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device));
    return value;
  }();
  return count;
}

}  // namespace nibble::cuda::detail::gemv_common
