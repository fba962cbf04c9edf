#pragma once
// Prefix tiles of the tensor-core extend kernel (extend_attention_tc.cuh): raw bytes from the paged
// pool into a staging buffer by cp.async, then dequantized in shared memory into the swizzled bf16
// tile layout the prefill tile pieces read (prefill_tile.cuh), plus the register-level Hadamard
// transform of one row held in mma fragments. (The chunk's own rows come from a bf16 copy through
// prefill_tile.cuh's load_kv_tile.)
//
// Staging (shared memory), per part (K, then V): data [kKeys][row_bytes] with row_bytes the
// source's bytes per head vector (f32 4·D, bf16 2·D, fp8 D, nvfp4 D/2), then nvfp4 scales
// [kKeys][D/16]. Rows at or past the end of the source are zero-filled (cp.async src-size 0), so
// they decode to 0 and no stale byte meets a zero probability.
//
// Dequantization is exact to bf16 except from f32 (RNE): the global scale g is not applied here
// (the kernel folds it into the softmax scale for K and into O for V).
//   fp8:   the hardware's E4M3 -> f16 convert, then f32 and bf16 (each step exact).
//   nvfp4: E2M1 codes -> fp16 patterns worth code · 2^-14 (e2m1_decode.h), to bf16, times the
//          block's E4M3 scale · 2^14 in bf16: a product of <= 6 significant bits, exact in bf16.
//          (A NaN scale code, which the write path never stores, decodes as 480.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/e2m1_decode.h"
#include "backend/cuda/prefill_mma.cuh"
#include "backend/cuda/prefill_tile.cuh"
#include "cache/page_layout.h"
#include "quant/kv_format.h"

namespace nibble::cuda::detail {

// How the extend kernel runs a sequence's prefix tiles (extend_attention_tc.cuh): through one raw
// staging buffer and one bf16 tile (kSingleStage: the f32 cache); through two raw and two bf16
// stages (kStaged: fp8, nvfp4, k8v4); or copied straight into three bf16 stages (kBf16Direct: bf16).
enum class ExtendPrefix { kSingleStage, kStaged, kBf16Direct };
__host__ __device__ constexpr bool extend_prefix_staged(ExtendPrefix m) {
  return m == ExtendPrefix::kStaged || m == ExtendPrefix::kBf16Direct;
}

// Sets of formats a kernel's convert_part is built for (a format's bit: 1 << ElemFormat).
__host__ __device__ constexpr unsigned format_bit(quant::ElemFormat f) { return 1u << static_cast<unsigned>(f); }
inline constexpr unsigned kConvertAll = 0xFu;

// Byte offsets of the extend kernel's shared memory for tile configuration T at head_dim D and
// prefix mode M:
//   kStages × [K tile | V tile] bf16 swizzled [kKeys][D] each (kStages: 1 single-stage, 2 staged),
//   the raw region, kStages × [K scales | V scales] [kKeys][D/16], then Q [kRowsQ][D] bf16
//   (T::kQInSmem).
// The raw region: kSingleStage, [K raw | V raw] [kKeys][4 D] (the widest prefix row, f32); kStaged,
// two prefix stages of [K raw | V raw] [kKeys][D] (fp8 and nvfp4 rows); kBf16Direct, its third bf16
// stage. Both staged layouts' raw region is one [K tile | V tile] stage's bytes.
// Once the prefix is done, the chunk's own tiles take three bf16 stages (stage3): tiles 0 and 1 and
// the raw region (staged modes), or tile 0 and two in the raw region (single-stage).
template <int D, typename T, ExtendPrefix M>
struct ExtendSmem {
  static constexpr int kStages = extend_prefix_staged(M) ? 2 : 1;
  static constexpr int kTileBytes = T::kKeys * D * 2;
  static constexpr int kRawPartBytes = T::kKeys * 4 * D;       // kSingleStage: an f32 row
  static constexpr int kPrefixRawPartBytes = T::kKeys * D;     // kStaged: an fp8 or nvfp4 row
  static constexpr int kRawBytes = kStages == 1 ? 2 * kRawPartBytes : 2 * kTileBytes;
  static constexpr int kScaleRowBytes = D / 16;
  static constexpr int kScalePartBytes = T::kKeys * kScaleRowBytes;
  static constexpr int kRaw = kStages * 2 * kTileBytes;
  static constexpr int kScales = kRaw + kRawBytes;
  static constexpr int kQ = kScales + kStages * 2 * kScalePartBytes;
  static constexpr int kBytes = kQ + (T::kQInSmem ? T::kRowsQ * D * 2 : 0);
  static_assert(kQ % 128 == 0 && kTileBytes % 128 == 0 && kRaw % 128 == 0,
                "tiles and Q rows start 128-byte aligned (fragment_address)");
  static_assert(M != ExtendPrefix::kStaged || 2 * 2 * kPrefixRawPartBytes <= kRawBytes,
                "two prefix stages fit the raw region");
  static_assert(kRawBytes >= (kStages == 1 ? 4 : 2) * kTileBytes, "the own tiles' stages fit (stage3)");
  // Stage s of the staged-prefix build.
  static constexpr int tile(int s) { return s * 2 * kTileBytes; }
  static constexpr int prefix_raw(int s) { return kRaw + s * 2 * kPrefixRawPartBytes; }
  static constexpr int scales(int s) { return kScales + s * 2 * kScalePartBytes; }
  // The bf16 stage of the i-th tile of a three-stage loop (kBf16Direct's prefix, the own tiles).
  static constexpr int stage3(int i) {
    if constexpr (kStages == 2) return i % 3 == 2 ? kRaw : tile(i % 3);
    return i % 3 == 0 ? tile(0) : kRaw + (i % 3 - 1) * 2 * kTileBytes;
  }
};

// cp.async of kBytes (4, 8 or 16) through L1; src_bytes 0 zero-fills.
template <int kBytes>
__device__ __forceinline__ void cp_async_small(uint32_t smem_dst, const void* gmem_src, bool valid) {
  const int src_bytes = valid ? kBytes : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_dst), "l"(gmem_src), "n"(kBytes),
               "r"(src_bytes)
               : "memory");
}

// The page of this thread's prefix row in the tile starting at key0 (the row layout of
// copy_prefix_tile; a row at or past `end` takes the last row's page, a mapped address that is not
// read). Loaded a tile ahead of its copy by the staged build, so the page-table read is off the
// copy's path.
template <typename T>
__device__ __forceinline__ int prefix_row_page(const int32_t* page_table, int page_size, int key0, int end) {
  const int pos = key0 + static_cast<int>(threadIdx.x) / (T::kThreads / T::kKeys);
  return page_table[(pos < end ? pos : end - 1) / page_size];
}

// Prefix rows [key0, key0 + kKeys) of K and V (positions >= end zero-filled) into staging, the row
// of this thread in `page` (prefix_row_page). Thread layout: kThreads / kKeys threads per key row;
// the row's 16-byte chunks go round-robin over its threads, and one of them copies the nvfp4 scale
// row (D/16 bytes, one copy). kToTile (bf16 K and V): the rows go straight into the swizzled bf16
// tiles at raw_k / raw_v, which then need no conversion.
template <int D, typename T, bool kToTile = false>
__device__ __forceinline__ void copy_prefix_tile(uint32_t raw_k, uint32_t raw_v, uint32_t scales_k, uint32_t scales_v,
                                                 const cache::KvPartLayout& k_part, const cache::KvPartLayout& v_part,
                                                 const uint8_t* pool, int64_t page_bytes, int page, int page_size,
                                                 int kv_head, int key0, int end) {
  constexpr int kThreadsPerRow = T::kThreads / T::kKeys;
  static_assert(T::kThreads % T::kKeys == 0, "whole threads per key row");
  constexpr int kScaleBytes = D / 16;
  const int r = threadIdx.x / kThreadsPerRow, sub = threadIdx.x % kThreadsPerRow;
  const int pos = key0 + r;
  const bool valid = pos < end;
  const int at = valid ? pos : end - 1;  // a mapped address even when nothing is read
  const uint8_t* page_base = pool + static_cast<int64_t>(page) * page_bytes;
  const int64_t vector = static_cast<int64_t>(kv_head) * page_size + at % page_size;  // (head, slot) index
  if constexpr (kToTile) {
    constexpr int kChunks = D / 8;  // 16-byte chunks of a bf16 row
    const uint8_t* src_k = page_base + k_part.data_offset + vector * (2 * D);
    const uint8_t* src_v = page_base + v_part.data_offset + vector * (2 * D);
#pragma unroll
    for (int c = sub; c < kChunks; c += kThreadsPerRow) {
      cp_async_16(raw_k + swizzled_bytes<D>(r, c), src_k + 16 * c, valid);
      cp_async_16(raw_v + swizzled_bytes<D>(r, c), src_v + 16 * c, valid);
    }
    return;
  }
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

// Two E4M3 codes (bytes 0, 1 of x) -> bf16x2, exact: the hardware's e4m3x2 -> f16x2 convert (E4M3
// is a subset of f16, subnormals included), then to f32 and bf16. 4 instructions per pair; the bit
// placement in an f32 times 2^120 it replaces took 13 (H200, 2026-12-03: PERFORMANCE.md,
// thirty-third round).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t x) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(x & 0xFFFFu), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return pack_bf16x2(f.x, f.y);
}

// An E4M3 block scale times 2^14 (kE2M1F16Rescale), as bf16 in both halves, exact: its bits placed
// in an f32 (sign -> 31, exponent and mantissa -> 26..20) read as 2^-120 times its value, subnormals
// included (as f32 subnormals), then times 2^120 and 2^14. <= 4 significant bits and at most
// 448 · 2^14: bf16 holds it.
__device__ __forceinline__ __nv_bfloat162 e4m3_scale_bf16x2(uint32_t code) {
  const float f = __uint_as_float(((code & 0x7Fu) << 20) | ((code & 0x80u) << 24)) * 0x1p120f * kE2M1F16Rescale;
  return __float2bfloat162_rn(f);
}

// Eight E4M3 codes (bytes of a, element 0 lowest) -> eight bf16 (out[i] = elements 2i, 2i + 1), exact.
__device__ __forceinline__ void e4m3x8_to_bf16x8(uint2 a, uint32_t (&out)[4]) {
  out[0] = e4m3x2_to_bf16x2(a.x), out[1] = e4m3x2_to_bf16x2(a.x >> 16);
  out[2] = e4m3x2_to_bf16x2(a.y), out[3] = e4m3x2_to_bf16x2(a.y >> 16);
}

// Eight E2M1 codes (one word of the cache's packing) under the E4M3 block scale `scale_code` ->
// eight bf16 (out[i] = elements 2i, 2i + 1), exact.
__device__ __forceinline__ void e2m1x8_to_bf16x8(uint32_t word, uint32_t scale_code, uint32_t (&out)[4]) {
  // The codes' f16 patterns (code · 2^-14) to bf16 (exact: >= 2^-15), then one bf16x2 multiply by
  // the block scale · 2^14 per pair: code · scale has <= 6 significant bits and lies in
  // [2^-10, 2688], so the product is exact in bf16 (no rounding). Pairs come out as elements (0, 2)
  // (1, 3) (6, 4) (7, 5) (e2m1x8_element) and are regrouped by byte permutes.
  const __nv_bfloat162 scale = e4m3_scale_bf16x2(scale_code);
  uint32_t h[4], b[4];
  e2m1x8_f16x2(word, h);
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[p]));
    const __nv_bfloat162 v = __hmul2(__floats2bfloat162_rn(f.x, f.y), scale);
    b[p] = *reinterpret_cast<const uint32_t*>(&v);
  }
  // b[0] = (e0, e2), b[1] = (e1, e3), b[2] = (e6, e4), b[3] = (e7, e5) -> out[i] = (e2i, e2i+1).
  out[0] = __byte_perm(b[0], b[1], 0x5410);  // e0, e1
  out[1] = __byte_perm(b[0], b[1], 0x7632);  // e2, e3
  out[2] = __byte_perm(b[2], b[3], 0x7632);  // e4, e5
  out[3] = __byte_perm(b[2], b[3], 0x5410);  // e6, e7
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
      e4m3x8_to_bf16x8(*reinterpret_cast<const uint2*>(raw + r * D + 8 * c), out);
    } else {
      e2m1x8_to_bf16x8(*reinterpret_cast<const uint32_t*>(raw + r * (D / 2) + 4 * c), scales[r * (D / 16) + c / 2],
                       out);
    }
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(tile + swizzled_bytes<D>(r, c)), "r"(out[0]),
                 "r"(out[1]), "r"(out[2]), "r"(out[3])
                 : "memory");
  }
}

// convert_units where F is one of kFormats; nothing otherwise.
template <int D, typename T, unsigned kFormats, quant::ElemFormat F>
__device__ __forceinline__ void convert_units_in(uint32_t tile, const unsigned char* raw, const unsigned char* scales) {
  if constexpr ((kFormats & format_bit(F)) != 0) convert_units<D, T, F>(tile, raw, scales);
}

// Staging rows of one part in `format` (one of kFormats: the kernel's launcher guarantees it; the
// conversions of other formats are not compiled in) -> bf16 swizzled tile.
template <int D, typename T, unsigned kFormats = kConvertAll>
__device__ __forceinline__ void convert_part(uint32_t tile, const unsigned char* raw, const unsigned char* scales,
                                             quant::ElemFormat format) {
  static_assert((T::kKeys * (D / 8)) % T::kThreads == 0, "every thread converts the same number of units");
  using quant::ElemFormat;
  switch (format) {
    case ElemFormat::kF32: convert_units_in<D, T, kFormats, ElemFormat::kF32>(tile, raw, scales); break;
    case ElemFormat::kBF16: convert_units_in<D, T, kFormats, ElemFormat::kBF16>(tile, raw, scales); break;
    case ElemFormat::kFP8: convert_units_in<D, T, kFormats, ElemFormat::kFP8>(tile, raw, scales); break;
    case ElemFormat::kNVFP4: convert_units_in<D, T, kFormats, ElemFormat::kNVFP4>(tile, raw, scales); break;
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
