#pragma once
// Key tiles of the tensor-core extend kernel (extend_attention_tc.cuh): raw bytes into a staging
// buffer by cp.async (prefix rows from the paged pool in any format, or the chunk's own f32 K/V
// rows), then dequantized in shared memory into the swizzled bf16 tile layout the prefill tile
// pieces read (prefill_tile.cuh), plus the register-level Hadamard transform of one row held in
// mma fragments.
//
// Staging (shared memory), per part (K, then V): data [kKeys][row_bytes] with row_bytes the
// source's bytes per head vector (f32 4·D, bf16 2·D, fp8 D, nvfp4 D/2), then nvfp4 scales
// [kKeys][D/16]. Rows at or past the end of the source are zero-filled (cp.async src-size 0), so
// they decode to 0 and no stale byte meets a zero probability.
//
// Dequantization is exact to bf16 except from f32 (RNE): the global scale g is not applied here
// (the kernel folds it into the softmax scale for K and into O for V).
//   fp8:   E4M3 bits placed in an f32 (sign -> 31, exponent/mantissa -> 26..20) read as a value
//          2^-120 times the E4M3 value (subnormals included, as f32 subnormals), times 2^120.
//   nvfp4: E2M1 codes -> fp16 patterns worth code · 2^-14 (e2m1_decode.h), to f32, times the
//          block's E4M3 scale · 2^14: a product of <= 6 significant bits, exact in bf16.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/e2m1_decode.h"
#include "backend/cuda/prefill_mma.cuh"
#include "backend/cuda/prefill_tile.cuh"
#include "cache/page_layout.h"
#include "quant/e4m3.h"
#include "quant/kv_format.h"

namespace nibble::cuda::detail {

// Byte offsets of the extend kernel's shared memory for tile configuration T at head_dim D:
//   kStages × [K tile | V tile] bf16 swizzled [kKeys][D] each, [K raw | V raw] [kKeys][<= 4 D]
//   bytes, kStages × [K scales | V scales] [kKeys][D/16], then Q [kRowsQ][D] bf16 (T::kQInSmem).
// kStages 2 (the staged-prefix build, extend_attention_tc.cuh): the raw region holds two prefix
// stages of [K raw | V raw] [kKeys][<= 2 D] bytes (bf16, fp8, nvfp4 rows) — the same bytes as
// the one f32 staging of the chunk's own rows, which reuses it once the prefix is done.
template <int D, typename T, int kStages = 1>
struct ExtendSmem {
  static constexpr int kTileBytes = T::kKeys * D * 2;
  static constexpr int kRawPartBytes = T::kKeys * 4 * D;
  static constexpr int kPrefixRawPartBytes = T::kKeys * 2 * D;  // a prefix row in bf16 or narrower
  static constexpr int kScaleRowBytes = D / 16;
  static constexpr int kScalePartBytes = T::kKeys * kScaleRowBytes;
  static constexpr int kRaw = kStages * 2 * kTileBytes;
  static constexpr int kScales = kRaw + 2 * kRawPartBytes;
  static constexpr int kQ = kScales + kStages * 2 * kScalePartBytes;
  static constexpr int kBytes = kQ + (T::kQInSmem ? T::kRowsQ * D * 2 : 0);
  static_assert(kStages == 1 || kStages == 2, "one or two stages");
  static_assert(kStages * 2 * kPrefixRawPartBytes <= 2 * kRawPartBytes, "the prefix stages fit the raw region");
  static_assert(kQ % 128 == 0 && kTileBytes % 128 == 0, "tiles and Q rows start 128-byte aligned (fragment_address)");
  // Stage s of the staged-prefix build.
  static constexpr int tile(int s) { return s * 2 * kTileBytes; }
  static constexpr int prefix_raw(int s) { return kRaw + s * 2 * kPrefixRawPartBytes; }
  static constexpr int scales(int s) { return kScales + s * 2 * kScalePartBytes; }
};

// cp.async of kBytes (4, 8 or 16) through L1; src_bytes 0 zero-fills.
template <int kBytes>
__device__ __forceinline__ void cp_async_small(uint32_t smem_dst, const void* gmem_src, bool valid) {
  const int src_bytes = valid ? kBytes : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_dst), "l"(gmem_src), "n"(kBytes),
               "r"(src_bytes)
               : "memory");
}

// Prefix rows [key0, key0 + kKeys) of K and V (positions >= end zero-filled) into staging. Thread
// layout: kThreads / kKeys threads per key row, so the page-table lookup of a row is done once per
// thread for both parts; the row's 16-byte chunks go round-robin over its threads, and one of them
// copies the nvfp4 scale row (D/16 bytes, one copy).
template <int D, typename T>
__device__ __forceinline__ void copy_prefix_tile(uint32_t raw_k, uint32_t raw_v, uint32_t scales_k, uint32_t scales_v,
                                                 const cache::KvPartLayout& k_part, const cache::KvPartLayout& v_part,
                                                 const uint8_t* pool, int64_t page_bytes, const int32_t* page_table,
                                                 int page_size, int kv_head, int key0, int end) {
  constexpr int kThreadsPerRow = T::kThreads / T::kKeys;
  static_assert(T::kThreads % T::kKeys == 0, "whole threads per key row");
  constexpr int kScaleBytes = D / 16;
  const int r = threadIdx.x / kThreadsPerRow, sub = threadIdx.x % kThreadsPerRow;
  const int pos = key0 + r;
  const bool valid = pos < end;
  const int at = valid ? pos : end - 1;  // a mapped address even when nothing is read
  const int page = page_table[at / page_size];
  const uint8_t* page_base = pool + static_cast<int64_t>(page) * page_bytes;
  const int64_t vector = static_cast<int64_t>(kv_head) * page_size + at % page_size;  // (head, slot) index
  {
    const int row_bytes = static_cast<int>(k_part.data_row_bytes);
    const uint8_t* src = page_base + k_part.data_offset + vector * row_bytes;
    for (int c = sub; c < row_bytes / 16; c += kThreadsPerRow) {
      cp_async_16(raw_k + r * row_bytes + 16 * c, src + 16 * c, valid);
    }
  }
  {
    const int row_bytes = static_cast<int>(v_part.data_row_bytes);
    const uint8_t* src = page_base + v_part.data_offset + vector * row_bytes;
    for (int c = sub; c < row_bytes / 16; c += kThreadsPerRow) {
      cp_async_16(raw_v + r * row_bytes + 16 * c, src + 16 * c, valid);
    }
  }
  if (sub == 0 && k_part.format == quant::ElemFormat::kNVFP4) {
    cp_async_small<kScaleBytes>(scales_k + r * kScaleBytes,
                                page_base + k_part.scale_offset + vector * kScaleBytes, valid);
  }
  if (sub == kThreadsPerRow - 1 && v_part.format == quant::ElemFormat::kNVFP4) {
    cp_async_small<kScaleBytes>(scales_v + r * kScaleBytes,
                                page_base + v_part.scale_offset + vector * kScaleBytes, valid);
  }
}

// The chunk's own f32 rows [key0, key0 + kKeys) of one KV head (rows >= end zero-filled);
// `src` points at key 0's head vector, rows `row_stride` floats apart.
template <int D, typename T>
__device__ __forceinline__ void copy_own_part(uint32_t raw, const float* src, int64_t row_stride, int key0, int end) {
  constexpr int kChunks = D / 4;  // 16-byte chunks per f32 row
  for (int u = threadIdx.x; u < T::kKeys * kChunks; u += T::kThreads) {
    const int r = u / kChunks, c = u % kChunks;
    const int key = key0 + r;
    const bool valid = key < end;
    const int at = valid ? key : end - 1;
    cp_async_16(raw + r * (4 * D) + 16 * c, src + at * row_stride + 4 * c, valid);
  }
}

// Two E4M3 codes (bytes 0, 1 of x) -> bf16x2, exact.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t x) {
  const float a = __uint_as_float(((x & 0x7Fu) << 20) | ((x & 0x80u) << 24)) * 0x1p120f;
  const float b = __uint_as_float(((x & 0x7F00u) << 12) | ((x & 0x8000u) << 16)) * 0x1p120f;
  return pack_bf16x2(a, b);
}

// Staging rows of one part in format F -> bf16 swizzled tile (all threads; 8 elements per unit).
template <int D, typename T, quant::ElemFormat F>
__device__ __forceinline__ void convert_units(uint32_t tile, const unsigned char* raw, const unsigned char* scales) {
  constexpr int kChunks = D / 8;
#pragma unroll 1  // rolled: the key loop's registers are all taken (ptxas spills more when unrolled)
  for (int it = 0; it < T::kKeys * kChunks / T::kThreads; ++it) {
    const int u = threadIdx.x + it * T::kThreads;
    const int r = u / kChunks, c = u % kChunks;
    uint32_t out[4];
    if constexpr (F == quant::ElemFormat::kF32) {
      const float4 a = *reinterpret_cast<const float4*>(raw + r * (4 * D) + 32 * c);
      const float4 b = *reinterpret_cast<const float4*>(raw + r * (4 * D) + 32 * c + 16);
      out[0] = pack_bf16x2(a.x, a.y), out[1] = pack_bf16x2(a.z, a.w);
      out[2] = pack_bf16x2(b.x, b.y), out[3] = pack_bf16x2(b.z, b.w);
    } else if constexpr (F == quant::ElemFormat::kBF16) {
      const uint4 a = *reinterpret_cast<const uint4*>(raw + r * (2 * D) + 16 * c);
      out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    } else if constexpr (F == quant::ElemFormat::kFP8) {
      const uint2 a = *reinterpret_cast<const uint2*>(raw + r * D + 8 * c);
      out[0] = e4m3x2_to_bf16x2(a.x), out[1] = e4m3x2_to_bf16x2(a.x >> 16);
      out[2] = e4m3x2_to_bf16x2(a.y), out[3] = e4m3x2_to_bf16x2(a.y >> 16);
    } else {
      const uint32_t word = *reinterpret_cast<const uint32_t*>(raw + r * (D / 2) + 4 * c);
      const float scale = quant::f32_from_e4m3(scales[r * (D / 16) + c / 2]) * kE2M1F16Rescale;
      uint32_t h[4];
      e2m1x8_f16x2(word, h);
      float e[8];  // the group's elements in order
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[p]));
        e[e2m1x8_element(p, 0)] = f.x * scale;
        e[e2m1x8_element(p, 1)] = f.y * scale;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) out[i] = pack_bf16x2(e[2 * i], e[2 * i + 1]);
    }
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(tile + swizzled_bytes<D>(r, c)), "r"(out[0]),
                 "r"(out[1]), "r"(out[2]), "r"(out[3])
                 : "memory");
  }
}

template <int D, typename T>
__device__ __forceinline__ void convert_part(uint32_t tile, const unsigned char* raw, const unsigned char* scales,
                                             quant::ElemFormat format) {
  static_assert((T::kKeys * (D / 8)) % T::kThreads == 0, "every thread converts the same number of units");
  switch (format) {
    case quant::ElemFormat::kF32: convert_units<D, T, quant::ElemFormat::kF32>(tile, raw, scales); break;
    case quant::ElemFormat::kBF16: convert_units<D, T, quant::ElemFormat::kBF16>(tile, raw, scales); break;
    case quant::ElemFormat::kFP8: convert_units<D, T, quant::ElemFormat::kFP8>(tile, raw, scales); break;
    case quant::ElemFormat::kNVFP4: convert_units<D, T, quant::ElemFormat::kNVFP4>(tile, raw, scales); break;
  }
}

// Scores of keys >= count (past the prefix's end, in its last tile) -> -inf.
template <typename T>
__device__ __forceinline__ void length_mask(float (&s)[T::kM][T::kN][4], int count, int t) {
#pragma unroll
  for (int mi = 0; mi < T::kM; ++mi) {
#pragma unroll
    for (int j = 0; j < T::kN; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (8 * j + 2 * t + (e & 1) >= count) s[mi][j][e] = -INFINITY;
      }
    }
  }
}

// Normalized Hadamard transform (quant::Rotation::kHadamard, H = H^T = H^-1) of one row spread over
// the 4 lanes of a group as in the mma C / A fragments: lane t holds columns 8 n + 2 t + e in
// x[n][e]. Column bit 0 is e, bits 1-2 are t (lanes xor 1, 2), bits 3.. are n. Warp-uniform call.
template <int D>
__device__ __forceinline__ void hadamard_fragment_row(float (&x)[D / 8][2], int t) {
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const float a = x[n][0], b = x[n][1];
    x[n][0] = a + b;
    x[n][1] = a - b;
  }
#pragma unroll
  for (int m = 1; m <= 2; m *= 2) {
    const bool upper = (t & m) != 0;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float y = __shfl_xor_sync(0xffffffffu, x[n][e], m);
        x[n][e] = upper ? y - x[n][e] : x[n][e] + y;
      }
    }
  }
#pragma unroll
  for (int h = 1; h < D / 8; h *= 2) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      if ((n & h) == 0) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float a = x[n][e], b = x[n + h][e];
          x[n][e] = a + b;
          x[n + h][e] = a - b;
        }
      }
    }
  }
  const float norm = 1.0f / sqrtf(static_cast<float>(D));
#pragma unroll
  for (int n = 0; n < D / 8; ++n) x[n][0] *= norm, x[n][1] *= norm;
}

}  // namespace nibble::cuda::detail
