#pragma once
// The register side of the tensor-core decode kernel (decode_attention_tc.cuh): K rows of a stage
// as QK B fragments (load_k_regs, head_dim order k_dim), V^T as P·V A fragments (pv_chunk,
// pv_pair), every KV format decoded in registers — bf16 as is, fp8 by the hardware e4m3x2 -> f16x2
// convert, nvfp4 by E2M1 bit placement (e2m1_decode.h) times the block scale in f16 — and the
// m16n8k16 MMA. Values are exact in f16 (fp8 units; nvfp4 units · 2^-8), so the only rounding is
// the f32 accumulation, the hi/lo split of q and p (split_pair) and, where V is nvfp4, p rounded
// once to f16 (decode_attention_tc.cuh, kOneP).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/decode_tile_copy.cuh"  // k_swz, v_swz: the stage layout these reads follow
#include "backend/cuda/e2m1_decode.h"
#include "quant/kv_format.h"

namespace nibble::cuda::detail {

using quant::ElemFormat;

// ---- K: head_dim position of half h of B register r of thread column c ---------------------------
template <ElemFormat KF, int kHeadDim>
__device__ __forceinline__ int k_dim(int c, int r, int h) {
  if constexpr (KF == ElemFormat::kBF16) {
    return 8 * (4 * (r / 4) + c) + 2 * (r % 4) + h;
  } else if constexpr (KF == ElemFormat::kFP8) {
    return 16 * (4 * (r / 8) + c) + 4 * ((r % 8) / 2) + 2 * (r % 2) + h;
  } else {  // kNVFP4: 8-byte units of 16 dims (one block), two words each
    const int i = r / 8;
    const int unit = kHeadDim == 64 ? c : 8 * (i / 2) + 2 * c + (i % 2);
    return 16 * unit + 8 * ((r % 8) / 4) + e2m1x8_element(r % 4, h);
  }
}

__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t pair16) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair16 & 0xFFFFu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Two e4m3 block scales (positive) -> f16x2 of s · 64. An e4m3 byte shifted left by 7 is the f16
// pattern of s · 2^-8 (subnormals included), so one shift and one exact f16 multiply by 2^14.
// The placement is written as integer multiply-adds: they issue to the FMA pipe, which has room,
// while the ALU pipe (half the rate per SM) carries the E2M1 bit work.
__device__ __forceinline__ uint32_t nvfp4_scales_f16x2(uint32_t lo_code, uint32_t hi_code) {
  const uint32_t bits = lo_code * 128u + hi_code * (128u << 16);  // (lo | hi << 16) << 7
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&bits), __half2half2(__ushort_as_half(0x7400)));
  return *reinterpret_cast<const uint32_t*>(&r);
}
// One scale code in both halves: one multiply (code · (2^7 + 2^23)).
__device__ __forceinline__ uint32_t nvfp4_scale_f16x2_dup(uint32_t code) {
  const uint32_t bits = code * 0x00800080u;
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&bits), __half2half2(__ushort_as_half(0x7400)));
  return *reinterpret_cast<const uint32_t*>(&r);
}

__device__ __forceinline__ uint32_t hmul2_bits(uint32_t a, uint32_t b) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// nvfp4 codes are decoded by e2m1x8_f16x2 (e2m1_decode.h): a packed group of 8 -> the fp16x2
// patterns (E2M1 · 2^-14) of elements (0, 2) (1, 3) (6, 4) (7, 5), 7 integer ops for the 4 pairs.
// Before the cache's decode-order packing (twenty-ninth round) the nibbles were in element order
// and took 11 (high bytes, then one byte permute per pair). Tried and rejected on that layout
// (H200, 2026-11-30, graph replays): K (and V) codes as E4M3 bytes (s<<7 |
// (e1 e0 m)<<2 = E2M1 · 2^-6) through the hardware e4m3x2 -> f16x2 convert, the raw scale pattern
// exact in f16: bit-identical products, but more SASS (a shift per high-half convert) and slower:
// 32 x 32K GQA 4 424.4 -> 445.1 (K) / 465.0 (K+V) us, 1 x 16K 17.9 -> 18.1 / 18.5.
// Also rejected: each pair as (x << a & 0x80008000) |
// (x << b & 0x0E000E00) with the shifts as mul.lo / mul.hi (to move them to the FMA pipe): the
// 32-token nvfp4 build went from 335 LOP3 + 80 PRMT + 524 IMAD to 399 + 16 + 686 SASS, and nvfp4
// slowed everywhere: 32 x 32K GQA 4 420.6 -> 481.3 us, 1 x 16K 17.7 -> 18.5, 8 x 1K 14.4 -> 14.8.
// And the one right shift (x >> 3 of the high nibbles) as the high word of x · 2^29 (IMAD.HI on the
// FMA pipe; the multiplier in __constant__ so that ptxas keeps the multiply; 32 SHF -> 32 IMAD.HI
// per 32-token step, ALU work -8%): slower, 32 x 32K GQA 4 388.7 / 390.6 -> 402.6 / 404.1 us, 1 x 4K
// 10.0 -> 10.6 (H200, 2026-11-30).

// Token `row` of the chunk: its K as B registers kb[kHeadDim/8] (f16 or bf16 pairs).
template <ElemFormat KF, int kHeadDim>
__device__ __forceinline__ void load_k_regs(const uint8_t* k_data, const uint8_t* k_scales, int row, int c,
                                            uint32_t (&kb)[kHeadDim / 8]) {
  constexpr int kRow = static_cast<int>(quant::data_bytes(KF, kHeadDim));
  if constexpr (KF == ElemFormat::kBF16) {
#pragma unroll
    for (int j = 0; j < kHeadDim / 32; ++j) {
      const uint4 w = *reinterpret_cast<const uint4*>(k_data + k_swz<kRow>(row * kRow + 16 * (4 * j + c)));
      kb[4 * j + 0] = w.x, kb[4 * j + 1] = w.y, kb[4 * j + 2] = w.z, kb[4 * j + 3] = w.w;
    }
  } else if constexpr (KF == ElemFormat::kFP8) {
#pragma unroll
    for (int j = 0; j < kHeadDim / 64; ++j) {
      const uint4 w = *reinterpret_cast<const uint4*>(k_data + k_swz<kRow>(row * kRow + 16 * (4 * j + c)));
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        kb[8 * j + 2 * q] = e4m3x2_to_f16x2(words[q]);
        kb[8 * j + 2 * q + 1] = e4m3x2_to_f16x2(words[q] >> 16);
      }
    }
  } else {  // kNVFP4
    constexpr int kScaleRow = kHeadDim / 16;
    constexpr int kUnits = kHeadDim / 64;  // 8-byte units (blocks) per thread
    uint32_t words[2 * kUnits];
    if constexpr (kHeadDim == 64) {
      const uint2 w = *reinterpret_cast<const uint2*>(k_data + k_swz<kRow>(row * kRow + 8 * c));
      words[0] = w.x, words[1] = w.y;
    } else {
#pragma unroll
      for (int j = 0; j < kUnits / 2; ++j) {
        const uint4 w = *reinterpret_cast<const uint4*>(k_data + k_swz<kRow>(row * kRow + 64 * j + 16 * c));
        words[4 * j] = w.x, words[4 * j + 1] = w.y, words[4 * j + 2] = w.z, words[4 * j + 3] = w.w;
      }
    }
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const int unit = kHeadDim == 64 ? c : 8 * (i / 2) + 2 * c + (i % 2);
      const uint32_t code = k_scales[row * kScaleRow + unit];
      const uint32_t s = nvfp4_scale_f16x2_dup(code);
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        uint32_t pairs[4];
        e2m1x8_f16x2(words[2 * i + w], pairs);
#pragma unroll
        for (int p = 0; p < 4; ++p) kb[8 * i + 4 * w + p] = hmul2_bits(pairs[p], s);
      }
    }
  }
}

template <bool kBf16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
  }
}

// The m8n8 b16 matrix whose fragment this warp holds (lane (g, c): row g, columns 2c, 2c+1), transposed:
// lane (g, c) gets rows 2c, 2c+1 of column g.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// Two floats -> (hi, lo) packed pairs, hi = round(x), lo = round(x - hi); low half = first value.
template <bool kBf16>
__device__ __forceinline__ void split_pair(float x, float y, uint32_t& hi, uint32_t& lo) {
  if constexpr (kBf16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    const __nv_bfloat162 l = __floats2bfloat162_rn(x - __low2float(h), y - __high2float(h));
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&l);
  } else {
    const __half2 h = __floats2half2_rn(x, y);
    const __half2 l = __floats2half2_rn(x - __low2float(h), y - __high2float(h));
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&l);
  }
}

// The PV products of two consecutive n-tiles nt, nt + 1 (nt even) of the 16 tokens × 8 dims V tiles,
// given their B registers (b0, b1 of nt; c0, c1 of nt + 1: tokens 2c, 2c+1 and 2c+8, 2c+9 at one
// dim each). Computed transposed, O^T += V^T · P^T: A = V^T (rows 0-7 = nt's dims, rows 8-15 =
// nt + 1's), B = P^T (8 heads; pa.x, pa.z = P's hi halves, pa.y, pa.w = its lo halves, two MMAs
// into the same accumulator). O then takes kHeadDim/16 accumulator tiles, half the registers of
// P in A (whose rows 8-15 carried P's lo halves): o[nt / 2][0..1] = the dim of n-tile nt at heads
// 2c, 2c+1, [2..3] = the dim of nt + 1. Same MMA count.
// kOneP (V in nvfp4; decode_attention_tc.cuh): P is one f16 pair per register (pa.x, pa.z), one MMA.
template <bool kBf16, bool kOneP, int kOT>
__device__ __forceinline__ void pv_pair(float (&o)[kOT][4], int nt, const uint4& pa, uint32_t b0, uint32_t b1,
                                        uint32_t c0, uint32_t c1) {
  const uint4 v = make_uint4(b0, c0, b1, c1);
  mma16816<kBf16>(o[nt / 2], v, pa.x, pa.z);  // P (hi): tokens 2c, 2c+1 | 2c+8, 2c+9 of head g
  if constexpr (!kOneP) mma16816<kBf16>(o[nt / 2], v, pa.y, pa.w);  // P lo
}

// Words of 8 nvfp4 codes a thread holds per V row: its head_dim / 8 dims are head_dim / 16 bytes.
template <int kHeadDim>
inline constexpr int kNvfp4VWords = kHeadDim / 64;

// nvfp4 V: the words of rows 2c, 2c+1, 2c+8, 2c+9 holding this thread's dims [g·D/8, (g+1)·D/8).
template <int kHeadDim>
__device__ __forceinline__ void nvfp4_v_words(const uint8_t* v_data, int c, int g,
                                              uint32_t (&w)[4][kNvfp4VWords<kHeadDim>]) {
  constexpr int kRow = static_cast<int>(quant::data_bytes(ElemFormat::kNVFP4, kHeadDim));
  constexpr int kGBytes = kRow / 8;
  constexpr int kWords = kGBytes / 4;  // 8 dims per word
  static_assert(kWords == kNvfp4VWords<kHeadDim>, "words per thread");
  // Rows 2c + 8 and 2c + 9 lie 8 rows after 2c and 2c + 1, and v_swz keeps that distance (its XOR
  // depends on the row modulo 8): two lane addresses and an offset instead of four addresses.
  const uint8_t* row_at[2] = {v_data + v_swz<kRow>(2 * c * kRow + g * kGBytes),
                              v_data + v_swz<kRow>((2 * c + 1) * kRow + g * kGBytes)};
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const uint8_t* at = row_at[r % 2] + (r / 2) * 8 * kRow;
    if constexpr (kWords == 1) {
      w[r][0] = *reinterpret_cast<const uint32_t*>(at);
    } else if constexpr (kWords == 2) {
      const uint2 x = *reinterpret_cast<const uint2*>(at);
      w[r][0] = x.x, w[r][1] = x.y;
    } else {
      const uint4 x = *reinterpret_cast<const uint4*>(at);
      w[r][0] = x.x, w[r][1] = x.y, w[r][2] = x.z, w[r][3] = x.w;
    }
  }
}

// nvfp4 V: the block scales of rows (2c, 2c+1) and (2c+8, 2c+9) for word q of this thread's dims, as
// f16x2 (nvfp4_scales_f16x2). Scales of tokens past the end were zero-filled with their data.
template <int kHeadDim>
__device__ __forceinline__ void nvfp4_v_scales(const uint8_t* v_scales, int g, int c, int q, uint32_t& s01,
                                               uint32_t& s23) {
  constexpr int kScaleRow = kHeadDim / 16;
  const int rows[4] = {2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9};
  const int block = (g * (kHeadDim / 8)) / 16 + (8 * q) / 16;  // the same for every q at head_dim 128
  s01 = nvfp4_scales_f16x2(v_scales[rows[0] * kScaleRow + block], v_scales[rows[1] * kScaleRow + block]);
  s23 = nvfp4_scales_f16x2(v_scales[rows[2] * kScaleRow + block], v_scales[rows[3] * kScaleRow + block]);
}

// nvfp4 V: the B registers of the two pv_pair calls of bytes j, j + 1 (j = 0 or 2) of word q (its
// elements 8q .. 8q + 7 are this thread's dims 8q .. 8q + 7). One byte permute per row pair puts
// bytes j, j + 1 of rows r0, r1 side by side, so e2m1x8_f16x2's pairs hold one dim of both rows:
// b[0] = (b0, b1, c0, c1) of dims 8q + j, 8q + j + 1 (the upright codes: tokens in order), b[1] of
// dims 8q + j + 4, 8q + j + 5 (the mirrored codes: each pair's tokens swapped, (r1, r0), which
// pv_pair undoes by taking P's token pairs swapped too), scaled.
template <int kHeadDim>
__device__ __forceinline__ void nvfp4_v_pairs(uint32_t s01, uint32_t s23, const uint32_t (&w)[4][kNvfp4VWords<kHeadDim>],
                                              int q, int j, uint32_t (&b)[2][4]) {
  const uint32_t sel = j | ((j + 1) << 4) | ((j + 4) << 8) | ((j + 5) << 12);
  const uint32_t x01 = __byte_perm(w[0][q], w[1][q], sel);  // bytes (r0.j, r0.j+1, r1.j, r1.j+1)
  const uint32_t x23 = __byte_perm(w[2][q], w[3][q], sel);
  uint32_t p01[4], p23[4];  // pair p: rows (r0, r1) / (r2, r3) at dims 8q + j + {0, 1, 4, 5}[p], the last two swapped
  e2m1x8_f16x2(x01, p01);
  e2m1x8_f16x2(x23, p23);
  // The swapped pairs take their rows' scales swapped too.
  const uint32_t s[2][2] = {{s01, s23}, {__byte_perm(s01, 0u, 0x1032), __byte_perm(s23, 0u, 0x1032)}};
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    b[p][0] = hmul2_bits(p01[2 * p], s[p][0]);
    b[p][1] = hmul2_bits(p23[2 * p], s[p][1]);
    b[p][2] = hmul2_bits(p01[2 * p + 1], s[p][0]);
    b[p][3] = hmul2_bits(p23[2 * p + 1], s[p][1]);
  }
}

// Whether nvfp4_v_each gives the V pair m (n-tiles 2m, 2m + 1) with its token pairs swapped.
__device__ __forceinline__ constexpr bool nvfp4_v_swapped(int m) { return m % 4 >= 2; }

// P^T's B registers with the two tokens of every register swapped (for the swapped V pairs).
__device__ __forceinline__ uint4 swap_token_pairs(const uint4& pa) {
  return make_uint4(__byte_perm(pa.x, 0u, 0x1032), __byte_perm(pa.y, 0u, 0x1032), __byte_perm(pa.z, 0u, 0x1032),
                    __byte_perm(pa.w, 0u, 0x1032));
}

// nvfp4 V of one chunk, pair by pair: fn(m, b) with b = pv_pair's (b0, b1, c0, c1) of n-tiles 2m,
// 2m + 1 (every m = 0 .. head_dim/16 - 1 once, in the order 4q, 4q + 2, 4q + 1, 4q + 3 per word q),
// decoded and scaled; the tokens of pair m come swapped where nvfp4_v_swapped(m).
template <int kHeadDim, typename Fn>
__device__ __forceinline__ void nvfp4_v_each(const uint8_t* v_data, const uint8_t* v_scales, int g, int c, Fn&& fn) {
  uint32_t w[4][kNvfp4VWords<kHeadDim>];
  nvfp4_v_words<kHeadDim>(v_data, c, g, w);
#pragma unroll
  for (int q = 0; q < kNvfp4VWords<kHeadDim>; ++q) {
    uint32_t s01, s23;
    nvfp4_v_scales<kHeadDim>(v_scales, g, c, q, s01, s23);
#pragma unroll
    for (int j = 0; j < 4; j += 2) {
      uint32_t b[2][4];
      nvfp4_v_pairs<kHeadDim>(s01, s23, w, q, j, b);
      fn(4 * q + j / 2, b[0]);      // dims 8q + j, + 1
      fn(4 * q + j / 2 + 2, b[1]);  // dims 8q + j + 4, + 5 (swapped)
    }
  }
}

// PV for one chunk over the 16 tokens; thread (g, c) supplies tokens 2c, 2c+1, 2c+8, 2c+9 at dims
// g·D/8 + nt of V n-tiles nt (pv_pair: O^T += V^T · P^T, two n-tiles at a time).
template <ElemFormat VF, int kHeadDim, bool kOneP>
__device__ __forceinline__ void pv_chunk(const uint8_t* v_data, const uint8_t* v_scales, int g, int c,
                                         const uint4& pa, float (&o)[kHeadDim / 16][4]) {
  constexpr int kRow = static_cast<int>(quant::data_bytes(VF, kHeadDim));
  constexpr int kGBytes = kRow / 8;  // bytes of one thread's dims in a row
  constexpr bool kBf16 = VF == ElemFormat::kBF16;
  const int rows[4] = {2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9};
  if constexpr (VF == ElemFormat::kBF16) {
#pragma unroll
    for (int s = 0; s < kGBytes / 16; ++s) {
      uint4 w[4];
#pragma unroll
      for (int r = 0; r < 4; ++r)
        w[r] = *reinterpret_cast<const uint4*>(v_data + v_swz<kRow>(rows[r] * kRow + g * kGBytes + 16 * s));
      const uint32_t a0[4] = {w[0].x, w[0].y, w[0].z, w[0].w}, a1[4] = {w[1].x, w[1].y, w[1].z, w[1].w};
      const uint32_t a2[4] = {w[2].x, w[2].y, w[2].z, w[2].w}, a3[4] = {w[3].x, w[3].y, w[3].z, w[3].w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        pv_pair<kBf16, kOneP>(o, 8 * s + 2 * q, pa, __byte_perm(a0[q], a1[q], 0x5410), __byte_perm(a2[q], a3[q], 0x5410),
                           __byte_perm(a0[q], a1[q], 0x7632), __byte_perm(a2[q], a3[q], 0x7632));
      }
    }
  } else if constexpr (VF == ElemFormat::kFP8) {
    constexpr int kWords = kGBytes / 4;
    uint32_t w[4][kWords];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      if constexpr (kWords == 2) {
        const uint2 x = *reinterpret_cast<const uint2*>(v_data + v_swz<kRow>(rows[r] * kRow + g * kGBytes));
        w[r][0] = x.x, w[r][1] = x.y;
      } else {
#pragma unroll
        for (int s = 0; s < kWords / 4; ++s) {
          const uint4 x = *reinterpret_cast<const uint4*>(v_data + v_swz<kRow>(rows[r] * kRow + g * kGBytes + 16 * s));
          w[r][4 * s] = x.x, w[r][4 * s + 1] = x.y, w[r][4 * s + 2] = x.z, w[r][4 * s + 3] = x.w;
        }
      }
    }
#pragma unroll
    for (int q = 0; q < kWords; ++q) {
#pragma unroll
      for (int k = 0; k < 4; k += 2) {
        // bytes [r0.k, r1.k, r0.k+1, r1.k+1]: low half = dim 4q+k, high half = dim 4q+k+1
        const uint32_t sel = k | ((k + 4) << 4) | ((k + 1) << 8) | ((k + 5) << 12);
        const uint32_t p01 = __byte_perm(w[0][q], w[1][q], sel);
        const uint32_t p23 = __byte_perm(w[2][q], w[3][q], sel);
        pv_pair<false, kOneP>(o, 4 * q + k, pa, e4m3x2_to_f16x2(p01), e4m3x2_to_f16x2(p23), e4m3x2_to_f16x2(p01 >> 16),
                           e4m3x2_to_f16x2(p23 >> 16));
      }
    }
  } else {  // kNVFP4
    const uint4 pt = swap_token_pairs(pa);
    nvfp4_v_each<kHeadDim>(v_data, v_scales, g, c, [&](int m, const uint32_t (&b)[4]) {
      pv_pair<false, kOneP>(o, 2 * m, nvfp4_v_swapped(m) ? pt : pa, b[0], b[1], b[2], b[3]);
    });
  }
}

// nvfp4 V, all of a chunk's B registers at once (vb[m] = pv_pair's b0, b1, c0, c1 of n-tiles 2m,
// 2m + 1, tokens swapped where nvfp4_v_swapped(m)), so the decode can run before the softmax;
// pv_nvfp4_decoded issues the MMAs.
template <int kHeadDim>
__device__ __forceinline__ void nvfp4_v_decode(const uint8_t* v_data, const uint8_t* v_scales, int g, int c,
                                               uint32_t (&vb)[kHeadDim / 16][4]) {
  nvfp4_v_each<kHeadDim>(v_data, v_scales, g, c, [&](int m, const uint32_t (&b)[4]) {
#pragma unroll
    for (int r = 0; r < 4; ++r) vb[m][r] = b[r];
  });
}
template <int kHeadDim, bool kOneP>
__device__ __forceinline__ void pv_nvfp4_decoded(const uint32_t (&vb)[kHeadDim / 16][4], const uint4& pa,
                                                 float (&o)[kHeadDim / 16][4]) {
  const uint4 pt = swap_token_pairs(pa);
#pragma unroll
  for (int m = 0; m < kHeadDim / 16; ++m)
    pv_pair<false, kOneP>(o, 2 * m, nvfp4_v_swapped(m) ? pt : pa, vb[m][0], vb[m][1], vb[m][2], vb[m][3]);
}

}  // namespace nibble::cuda::detail
