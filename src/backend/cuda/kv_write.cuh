#pragma once
// Device code of the write path (host entry point: kv_write.h).
//
// Work split: one warp quantizes 512 / head_dim head vectors at once; each lane owns one block of
// 16 consecutive elements (one nvfp4 block; for the other formats simply 16 elements), so every
// lane is busy for every head_dim and every format. The Hadamard rotation runs on those registers:
// butterflies of stride 1..8 inside a lane, stride 16..head_dim/2 between lanes (shfl_xor), in
// exactly quant::hadamard_inplace's order of float operations, then one multiply by 1/sqrt(n).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/kv_write.h"
#include "quant/bf16.h"
#include "quant/e4m3.h"
#include "quant/hadamard.h"
#include "quant/kv_format.h"

namespace nibble::cuda::detail {

inline constexpr int kKvWriteWarps = 4;  // warps per block
inline constexpr int kElemsPerLane = 16;

// Loads this lane's 16 input elements: src [num_tokens * kv_heads][head_dim], element offset `at`.
template <ActivationDtype D>
__device__ __forceinline__ void load16(const void* src, int64_t at, float x[16]) {
  if constexpr (D == ActivationDtype::kF32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(src) + at);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 f = p[i];
      x[4 * i] = f.x, x[4 * i + 1] = f.y, x[4 * i + 2] = f.z, x[4 * i + 3] = f.w;
    }
  } else {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(src) + at);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint4 w = p[i];
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        x[8 * i + 2 * j] = __uint_as_float(words[j] << 16);  // bf16 -> f32 is exact
        x[8 * i + 2 * j + 1] = __uint_as_float(words[j] & 0xFFFF0000u);
      }
    }
  }
}

// quant::hadamard_inplace on a head vector spread over `lanes_per_vector` lanes, 16 elements each.
__device__ __forceinline__ void hadamard16_lanes(float x[16], int block_in_vector, int head_dim) {
  // Strides 1..8 inside the lane: each butterfly pair (j, j + half) with bit `half` clear in j;
  // written with constant indices only, so x stays in registers (a loop over i = 0, 2·half, ...
  // was left rolled by the compiler and moved x to local memory).
#pragma unroll
  for (int half = 1; half < kElemsPerLane; half *= 2) {
#pragma unroll
    for (int j = 0; j < kElemsPerLane; ++j) {
      if ((j & half) == 0) {
        const float a = x[j], b = x[j + half];
        x[j] = a + b;
        x[j + half] = a - b;
      }
    }
  }
  for (int half = kElemsPerLane; half < head_dim; half *= 2) {
    const int lane_mask = half / kElemsPerLane;
    const bool upper = (block_in_vector & lane_mask) != 0;
#pragma unroll
    for (int e = 0; e < kElemsPerLane; ++e) {
      const float other = __shfl_xor_sync(0xFFFFFFFFu, x[e], lane_mask);
      x[e] = upper ? other - x[e] : x[e] + other;  // lower: a + b; upper: a - b with a the lower one
    }
  }
  const float norm = 1.0f / sqrtf(static_cast<float>(head_dim));
#pragma unroll
  for (int e = 0; e < kElemsPerLane; ++e) x[e] *= norm;
}

// Four floats -> four E4M3 bytes (first in the low byte) by the hardware conversion: round to
// nearest even, satfinite (|x| >= 448 and ±Inf -> ±448), NaN -> 0x7F: exactly
// quant::e4m3_from_f32 for every input (the GPU's NaN has no sign: the documented difference).
__device__ __forceinline__ uint32_t e4m3x4_from_f32(float a, float b, float c, float d) {
  const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// quant::e2m1_from_f32 without branches, by rounding instead of seven comparisons: the E2M1 grid
// has step 0.5 on [0, 2), 1 on [2, 4), 2 above, so the magnitude code is rint(2a), 2 + rint(a),
// min(4 + rint(a/2), 7) there; rint rounds ties to even, which is the reference's tie rule at every
// decision point (0.25, 0.75, ..., 5). All scalings are exact. Checked against the reference for
// every finite float and ±Inf (NaN cannot reach it: a NaN block is zeroed through its scale).
__device__ __forceinline__ uint32_t e2m1_code_from_f32(float x) {
  const float a = fabsf(x);
  const float lo = rintf(a * 2.0f);
  const float mid = 2.0f + rintf(a);
  const float hi = fminf(4.0f + rintf(a * 0.5f), 7.0f);
  const float m = a < 2.0f ? lo : (a < 4.0f ? mid : hi);
  return ((__float_as_uint(x) >> 28) & 0x8u) | static_cast<uint32_t>(m);
}

// Quantizes this lane's 16 elements and stores them at `data` (+ one scale byte at `scale` for
// nvfp4). The same building blocks and order of float operations as quant::quantize_head_vector
// (bf16_from_f32, e4m3_from_f32(x / g), nvfp4_quantize_block), but written out on registers: the
// generic function works through a byte array in local memory, which made the kernel issue-bound.
// `g_inv` is 1/g when g is a power of two (then x·(1/g) is exactly x/g: the same real number,
// rounded once), else 0 and the true division runs. data is aligned to the piece size.
template <quant::ElemFormat F>
__device__ __forceinline__ void quantize_store16(const float x[16], float g, float g_inv, uint8_t* data,
                                                 uint8_t* scale) {
  if constexpr (F == quant::ElemFormat::kF32) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      reinterpret_cast<float4*>(data)[i] = make_float4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
  } else if constexpr (F == quant::ElemFormat::kBF16) {
    uint32_t w[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      w[i] = static_cast<uint32_t>(quant::bf16_from_f32(x[2 * i])) |
             (static_cast<uint32_t>(quant::bf16_from_f32(x[2 * i + 1])) << 16);
    reinterpret_cast<uint4*>(data)[0] = make_uint4(w[0], w[1], w[2], w[3]);
    reinterpret_cast<uint4*>(data)[1] = make_uint4(w[4], w[5], w[6], w[7]);
  } else if constexpr (F == quant::ElemFormat::kFP8) {
    float y[16];
    if (g_inv != 0.0f) {  // uniform across the grid: one branch, not a select over both
#pragma unroll
      for (int i = 0; i < 16; ++i) y[i] = x[i] * g_inv;
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) y[i] = x[i] / g;
    }
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = e4m3x4_from_f32(y[4 * i], y[4 * i + 1], y[4 * i + 2], y[4 * i + 3]);
    *reinterpret_cast<uint4*>(data) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {  // kNVFP4: quant::nvfp4_quantize_block step by step
    // amax with NaN propagation, branch-free: on the GPU any NaN amax becomes the canonical NaN in
    // amax / 6 anyway, so "some element is NaN" is all that matters (quant::amax_nan keeps the
    // first NaN, whose payload and sign the division drops; see kv_write.h on the NaN sign).
    float amax = 0.0f;
    bool any_nan = false;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      amax = fmaxf(amax, fabsf(x[i]));
      any_nan |= x[i] != x[i];
    }
    if (any_nan) amax = __uint_as_float(0x7FFFFFFFu);
    const float t = amax / 6.0f;
    const uint8_t code = static_cast<uint8_t>(e4m3x4_from_f32(g_inv != 0.0f ? t * g_inv : t / g, 0.0f, 0.0f, 0.0f));
    const float s = quant::f32_from_e4m3(code);
    uint32_t w[2] = {0, 0};
    if (!(s == 0.0f || quant::is_nan(s))) {
      const float denom = s * g;
#pragma unroll
      for (int i = 0; i < 16; ++i) w[i / 8] |= e2m1_code_from_f32(x[i] / denom) << (4 * (i % 8));
    }
    *reinterpret_cast<uint2*>(data) = make_uint2(w[0], w[1]);
    *scale = code;
  }
}

// 1/g when g is a positive normal power of two (multiplying by it equals dividing by g), else 0.
__device__ __forceinline__ float exact_reciprocal_or_zero(float g) {
  const uint32_t u = __float_as_uint(g);
  const uint32_t exponent = (u >> 23) & 0xFFu;
  const bool pow2 = (u & 0x807FFFFFu) == 0 && exponent >= 2 && exponent <= 252;  // 1/g normal too
  return pow2 ? __uint_as_float((254u - exponent) << 23) : 0.0f;
}

// grid: (ceil(num_tokens * kv_heads / vectors_per_block), 2); blockIdx.y 0 = K, 1 = V.
template <int kHeadDim, ActivationDtype D>
__global__ void __launch_bounds__(kKvWriteWarps * 32) kv_write_kernel(KvWriteParams p) {
  constexpr int kLanesPerVector = kHeadDim / kElemsPerLane;
  constexpr int kVectorsPerWarp = 32 / kLanesPerVector;
  const bool is_v = blockIdx.y == 1;
  const cache::KvPartLayout& layout = is_v ? p.v_layout : p.k_layout;
  const void* src = is_v ? p.v : p.k;
  const float g = is_v ? p.v_global_scale : p.k_global_scale;

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int block_in_vector = lane % kLanesPerVector;
  // = token * kv_heads + head; < 2^31 (kv_write checks num_tokens * kv_heads), so the index math
  // is 32-bit: 64-bit divisions by runtime values cost ~70 instructions each.
  const int vector = (static_cast<int>(blockIdx.x) * kKvWriteWarps + warp) * kVectorsPerWarp + lane / kLanesPerVector;
  const int kv_heads = static_cast<int>(layout.kv_heads);
  const bool in_range = vector < static_cast<int>(p.num_tokens) * kv_heads;

  // Where the vector goes, loaded before the data so the dependent loads (row -> page table) overlap
  // the data loads instead of following the arithmetic.
  const int token = in_range ? vector / kv_heads : 0;
  const int head = vector - token * kv_heads;
  const int32_t seq = in_range ? p.row_sequence[token] : -1;
  const int32_t pos = in_range ? p.positions[token] : 0;
  const int page_size = static_cast<int>(layout.page_size);
  const int page_index = pos / page_size;
  const int slot = pos - page_index * page_size;
  const int64_t page = seq >= 0 ? p.page_tables[static_cast<int64_t>(seq) * p.max_pages_per_seq + page_index] : 0;

  float x[kElemsPerLane];
  if (in_range) {
    load16<D>(src, static_cast<int64_t>(vector) * kHeadDim + block_in_vector * kElemsPerLane, x);
  } else {
#pragma unroll
    for (int e = 0; e < kElemsPerLane; ++e) x[e] = 0.0f;
  }
  // Every lane takes part in the shuffles; out-of-range groups are whole lane groups.
  if (p.rotation == quant::Rotation::kHadamard) hadamard16_lanes(x, block_in_vector, kHeadDim);
  if (!in_range || seq < 0) return;

  uint8_t* page_base = p.pool + page * p.page_bytes;
  uint8_t* data = page_base + layout.data_at(head, slot) +
                  block_in_vector * quant::data_bytes(layout.format, kElemsPerLane);
  uint8_t* scale = page_base + layout.scales_at(head, slot) + block_in_vector;
  const float g_inv = exact_reciprocal_or_zero(g);
  switch (layout.format) {
    case quant::ElemFormat::kF32: quantize_store16<quant::ElemFormat::kF32>(x, g, g_inv, data, scale); break;
    case quant::ElemFormat::kBF16: quantize_store16<quant::ElemFormat::kBF16>(x, g, g_inv, data, scale); break;
    case quant::ElemFormat::kFP8: quantize_store16<quant::ElemFormat::kFP8>(x, g, g_inv, data, scale); break;
    case quant::ElemFormat::kNVFP4: quantize_store16<quant::ElemFormat::kNVFP4>(x, g, g_inv, data, scale); break;
  }
}

}  // namespace nibble::cuda::detail
