#pragma once
// Device-side decoding of 8 consecutive elements of one stored head vector (already in shared
// memory) into float32 "unit" values: the stored value without the per-layer global multiplier g,
// which the attention kernel folds into q (keys) and into the output (values):
//   f32, bf16   the value itself
//   fp8         e4m3(code)                              (x̂ = unit · g)
//   nvfp4       e2m1(code) · e4m3(block scale)          (x̂ = unit · g, q·s exact in fp16/f32)
// Every decoder reads one aligned vector from shared memory (LDS.64/128 for 8 elements of
// fp8/bf16/f32, LDS.32 plus one scale byte for nvfp4).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/e2m1_decode.h"
#include "quant/kv_format.h"

namespace nibble::cuda {

// e4m3 byte pair -> two floats through the sm_89+ hardware converter (exact: every E4M3 value,
// subnormals included, is an fp16 value).
__device__ __forceinline__ float2 e4m3x2_to_float2(uint16_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

__device__ __forceinline__ float e4m3_to_float(uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(*reinterpret_cast<const __half*>(&h));
}

__device__ __forceinline__ float2 f16x2_bits_to_float2(uint32_t bits) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}

// row: the head vector's data row in shared memory; scales: its nvfp4 scale row (unused otherwise);
// e0: first element, a multiple of 8. out: [8] unit values of elements e0 .. e0+7.
template <quant::ElemFormat F>
__device__ __forceinline__ void decode8(const uint8_t* row, const uint8_t* scales, int e0, float out[8]) {
  if constexpr (F == quant::ElemFormat::kF32) {
    const float4 a = *reinterpret_cast<const float4*>(row + 4 * e0);
    const float4 b = *reinterpret_cast<const float4*>(row + 4 * e0 + 16);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else if constexpr (F == quant::ElemFormat::kBF16) {
    const uint4 w = *reinterpret_cast<const uint4*>(row + 2 * e0);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(words[i] << 16);
      out[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
    }
  } else if constexpr (F == quant::ElemFormat::kFP8) {
    const uint2 w = *reinterpret_cast<const uint2*>(row + e0);
    const uint32_t words[2] = {w.x, w.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float2 lo = e4m3x2_to_float2(static_cast<uint16_t>(words[i] & 0xFFFFu));
      const float2 hi = e4m3x2_to_float2(static_cast<uint16_t>(words[i] >> 16));
      out[4 * i] = lo.x, out[4 * i + 1] = lo.y, out[4 * i + 2] = hi.x, out[4 * i + 3] = hi.y;
    }
  } else {  // kNVFP4
    const uint32_t word = *reinterpret_cast<const uint32_t*>(row + e0 / 2);
    const float scale = e4m3_to_float(scales[e0 / quant::kNvfp4Block]) * kE2M1F16Rescale;
    uint32_t pairs[4];
    e2m1x8_f16x2(word, pairs);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const float2 f = f16x2_bits_to_float2(pairs[p]);
      out[e2m1x8_element(p, 0)] = f.x * scale;
      out[e2m1x8_element(p, 1)] = f.y * scale;
    }
  }
}

}  // namespace nibble::cuda
