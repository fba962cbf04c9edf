#pragma once
// Device code of the write path (host entry point: kv_write.h).
//
// Work split: one warp quantizes 512 / head_dim head vectors at once; each lane owns one block of
// 16 consecutive elements (one nvfp4 block; for the other formats simply 16 elements), so every
// lane is busy for every head_dim and every format. The Hadamard rotation runs on those registers:
// butterflies of stride 1..8 inside a lane, stride 16..head_dim/2 between lanes (shfl_xor), in
// exactly quant::hadamard_inplace's order of float operations, then one multiply by 1/sqrt(n).
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/kv_write.h"
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
#pragma unroll
  for (int half = 1; half < kElemsPerLane; half *= 2) {
#pragma unroll
    for (int i = 0; i < kElemsPerLane; i += 2 * half) {
#pragma unroll
      for (int j = i; j < i + half; ++j) {
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

// Quantizes 16 elements with the reference function and stores them at `data` (+ one scale byte at
// `scale` for nvfp4). data is aligned to the piece size (64/32/16/8 bytes).
template <quant::ElemFormat F>
__device__ __forceinline__ void quantize_store16(const float x[16], float global_scale, uint8_t* data,
                                                 uint8_t* scale) {
  constexpr int kBytes = static_cast<int>(quant::data_bytes(F, kElemsPerLane));
  alignas(16) uint8_t packed[kBytes];
  uint8_t block_scale = 0;
  quant::quantize_head_vector(F, x, kElemsPerLane, global_scale, packed, &block_scale);
  if constexpr (kBytes >= 16) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i)
      reinterpret_cast<uint4*>(data)[i] = reinterpret_cast<const uint4*>(packed)[i];
  } else {
    *reinterpret_cast<uint2*>(data) = *reinterpret_cast<const uint2*>(packed);
    *scale = block_scale;
  }
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
  const int64_t vector = (static_cast<int64_t>(blockIdx.x) * kKvWriteWarps + warp) * kVectorsPerWarp +
                         lane / kLanesPerVector;  // = token * kv_heads + head
  const int64_t num_vectors = p.num_tokens * layout.kv_heads;
  const bool in_range = vector < num_vectors;

  float x[kElemsPerLane];
  if (in_range) {
    load16<D>(src, vector * kHeadDim + block_in_vector * kElemsPerLane, x);
  } else {
#pragma unroll
    for (int e = 0; e < kElemsPerLane; ++e) x[e] = 0.0f;
  }
  // Every lane takes part in the shuffles; out-of-range groups are whole lane groups.
  if (p.rotation == quant::Rotation::kHadamard) hadamard16_lanes(x, block_in_vector, kHeadDim);
  if (!in_range) return;

  const int64_t token = vector / layout.kv_heads;
  const int64_t head = vector % layout.kv_heads;
  const int32_t seq = p.row_sequence[token];
  if (seq < 0) return;
  const int64_t pos = p.positions[token];
  const int64_t page = p.page_tables[seq * p.max_pages_per_seq + pos / layout.page_size];
  const int64_t slot = pos % layout.page_size;
  uint8_t* page_base = p.pool + page * p.page_bytes;
  uint8_t* data = page_base + layout.data_at(head, slot) +
                  block_in_vector * quant::data_bytes(layout.format, kElemsPerLane);
  uint8_t* scale = page_base + layout.scales_at(head, slot) + block_in_vector;
  switch (layout.format) {
    case quant::ElemFormat::kF32: quantize_store16<quant::ElemFormat::kF32>(x, g, data, scale); break;
    case quant::ElemFormat::kBF16: quantize_store16<quant::ElemFormat::kBF16>(x, g, data, scale); break;
    case quant::ElemFormat::kFP8: quantize_store16<quant::ElemFormat::kFP8>(x, g, data, scale); break;
    case quant::ElemFormat::kNVFP4: quantize_store16<quant::ElemFormat::kNVFP4>(x, g, data, scale); break;
  }
}

}  // namespace nibble::cuda::detail
