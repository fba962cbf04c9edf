#pragma once
// Device code of the write path (host entry point: kv_write.h).
//
// Work split: one warp quantizes the K and V of 512 / head_dim head vectors at once; each lane owns
// one block of 16 consecutive elements of both (one nvfp4 block; for the other formats simply 16
// elements), so every lane is busy for every head_dim and every format, and a vector's place in the
// pool is looked up once for K and V. The Hadamard rotation runs on those registers:
// butterflies of stride 1..8 inside a lane, stride 16..head_dim/2 between lanes (shfl_xor), in
// exactly quant::hadamard_inplace's order of float operations, then one multiply by 1/sqrt(n).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/kv_write.h"
#include "quant/bf16.h"
#include "quant/e2m1.h"
#include "quant/e2m1_reciprocal.h"
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

// backend.h's RoPE, angle = position · inv_freq[i] (as elementwise.cu's rope and the CPU compute
// it), by sincosf: the (cos, sin) of every (token, i) the block's vectors need, computed once into
// cs [tokens][head_dim / 2] by the whole block (one sincosf per thread at batch 1), from the step's
// positions and the constant inv_freq only, so it runs before griddep_wait(). Vectors
// first_vector .. first_vector + vectors - 1 of [num_tokens][heads] (some may lie past the end).
// Returns the block's first token. Every thread of the block calls it (it synchronizes).
template <int kHeadDim>
__device__ __forceinline__ int rope_table(float2* cs, int first_vector, int vectors, int heads, int num_tokens,
                                          const int32_t* positions, const float* inv_freq) {
  constexpr int kHalf = kHeadDim / 2;
  const int first_token = first_vector / heads;
  const int last_vector = min(first_vector + vectors, num_tokens * heads) - 1;
  const int tokens = last_vector >= first_vector ? last_vector / heads - first_token + 1 : 0;
  for (int e = threadIdx.x; e < tokens * kHalf; e += blockDim.x) {
    const int token = first_token + e / kHalf, i = e % kHalf;
    float sin_v, cos_v;
    sincosf(__fmul_rn(static_cast<float>(positions[token]), __ldg(inv_freq + i)), &sin_v, &cos_v);
    cs[e] = make_float2(cos_v, sin_v);
  }
  __syncthreads();
  return first_token;
}

// RoPE on a head vector spread over head_dim / 16 lanes, 16 elements each: lane b (b < lanes / 2)
// holds elements i of the pairs (i, i + head_dim / 2), lane b + lanes / 2 the partners, exchanged by
// one shuffle per element; cs_row: the vector's token's row of rope_table. Every product and sum
// rounded on its own (explicit _rn: never contracted). Every lane of the warp takes part.
template <int kHeadDim>
__device__ __forceinline__ void rope16_lanes(float x[16], int block_in_vector, const float2* cs_row) {
  constexpr int kHalfLanes = kHeadDim / kElemsPerLane / 2;
  const bool upper = block_in_vector >= kHalfLanes;
  const int i0 = (block_in_vector % kHalfLanes) * kElemsPerLane;  // the frequency index of x[0]
#pragma unroll
  for (int e = 0; e < kElemsPerLane; ++e) {
    const float other = __shfl_xor_sync(0xFFFFFFFFu, x[e], kHalfLanes);
    const float2 cs = cs_row[i0 + e];
    // lower: x_i cos - x_{i+d/2} sin; upper: x_{i+d/2} cos + x_i sin.
    x[e] = upper ? __fadd_rn(__fmul_rn(x[e], cs.x), __fmul_rn(other, cs.y))
                 : __fsub_rn(__fmul_rn(x[e], cs.x), __fmul_rn(other, cs.y));
  }
}

// Stores this lane's 16 f32 elements at dst (16-byte aligned).
__device__ __forceinline__ void store16(float* dst, const float x[16]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
    reinterpret_cast<float4*>(dst)[i] = make_float4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
}

// Programmatic dependent launch (no-ops when the kernel was launched plainly): the next kernel may
// be scheduled; wait for the previous kernel's results (and memory) before reading them.
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Four floats -> four E4M3 bytes (first in the low byte) by the hardware conversion: round to
// nearest even, satfinite (|x| >= 448 and ±Inf -> ±448), NaN -> 0x7F: exactly
// quant::e4m3_from_f32 for every input (the GPU's NaN has no sign: the documented difference).
__device__ __forceinline__ uint32_t e4m3x4_from_f32(float a, float b, float c, float d) {
  const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// max(m, |x|), NaN if either is NaN (PTX max.NaN, sm_80+): one instruction per element for a
// NaN-propagating amax. Any NaN becomes the canonical NaN in amax / 6 anyway, so "some element is
// NaN" is all the block scale needs (quant::amax_nan keeps the first NaN, whose payload and sign the
// division drops; see kv_write.h on the NaN sign).
__device__ __forceinline__ float max_abs_nan(float m, float x) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(m), "f"(fabsf(x)));
  return r;
}

// The 16 E2M1 codes of x_i / v.d by quant/e2m1_reciprocal.h's rule, packed as quant/nvfp4.h packs
// them (w[k] = the little-endian group k: element 8k+j upright and 8k+j+4 mirrored in byte j): per element a multiply (and an FMA for kProven), the magnitude code by a
// magic-number addition, and for kChecked the near-decision check on the quotient's bit pattern; a
// flagged element (rare) is decided exactly, by an FMA residual, in an out-of-line call. The rare
// path inlined per element (a branch and ~25 instructions between every element's common path, 16
// times per format) had the kernel stall on instruction fetches: H200, 2026-12-01, 64K tokens, g = 0.37, nvfp4 61.5% -> 70.8-71.1% of the read
// bandwidth with the other changes of that day (kv_write_kernel).
static __device__ __noinline__ uint32_t e2m1_magnitude_code_near_call(float x, float q, float d) {
  return quant::e2m1_magnitude_code_near(x, q, d);
}

template <bool kChecked>
__device__ __forceinline__ void e2m1_codes16(const float x[16], const quant::E2m1Divisor& v, uint32_t w[2]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const float q = kChecked ? quant::e2m1_checked_quotient(x[i], v) : quant::e2m1_reciprocal_quotient(x[i], v);
    uint32_t magnitude = quant::e2m1_magnitude_code(q);
    if (kChecked && quant::e2m1_near_decision_point(q)) magnitude = e2m1_magnitude_code_near_call(x[i], q, v.d);
    const uint32_t code = ((__float_as_uint(x[i]) >> 28) & 0x8u) | magnitude;
    const uint32_t placed = quant::nvfp4_is_mirrored(i) ? quant::nvfp4_mirrored(code) : quant::nvfp4_upright(code);
    w[i / 8] |= placed << (8 * (i % 4));
  }
}

// E4M3 block-scale code of t / g (t·(1/g) when g_inv = 1/g is exact, kv_write_kernel) by the
// hardware conversion, as quant::e4m3_from_f32(t / g).
__device__ __forceinline__ uint8_t nvfp4_scale_code(float t, float g, float g_inv) {
  return static_cast<uint8_t>(e4m3x4_from_f32(g_inv != 0.0f ? t * g_inv : t / g, 0.0f, 0.0f, 0.0f));
}

// quant::f32_from_e4m3 by the hardware: E4M3 -> f16 is exact (NaN stays NaN), f16 -> f32 too.
__device__ __forceinline__ float f32_from_e4m3_hw(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
}

// The packed E2M1 codes of x_i / (s·g) (w = {0, 0}: the all-zero block when s is 0 or NaN), as
// quant::nvfp4_quantize_block codes them for the block scale value s.
__device__ __forceinline__ void nvfp4_codes16(const float x[16], float s, float g, uint32_t w[2]) {
  w[0] = 0, w[1] = 0;
  if (s == 0.0f || quant::is_nan(s)) return;
  // e2m1(x_i / (s·g)) without the 16 divisions (quant/e2m1_reciprocal.h): with g a power of two
  // (g = 1 by default) every divisor is kProven; other g check each quotient (kChecked) and
  // decide the flagged ones exactly by an FMA residual. kv_write() admits only nvfp4 g in
  // [2^-51, 2^51], so s·g lies in [2^-60, 2^60] and is never kDivide (an inlined division's
  // slow-path call would cost the whole kernel ~20 registers).
  const quant::E2m1Divisor v = quant::e2m1_divisor(s * g);
  if (v.mode == quant::E2m1DivisorMode::kProven) {
    e2m1_codes16<false>(x, v, w);
  } else {
    e2m1_codes16<true>(x, v, w);
  }
}

// quant::nvfp4_block_squared_error on packed words: E = Σ_i (q_i·s·g − x_i)², i = 0..15 in order,
// every operation rounded separately (explicit _rn intrinsics: never contracted into an FMA, whatever
// --fmad says, as the host reference computes it). q_i by quant::f32_from_e2m1, exact.
__device__ __forceinline__ float nvfp4_squared_error16(const float x[16], const uint32_t w[2], float s, float g) {
  float err = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t byte = (w[i / 8] >> (8 * (i % 4))) & 0xFFu;
    const float q = quant::f32_from_e2m1(quant::nvfp4_is_mirrored(i) ? quant::nvfp4_mirrored_code(byte)
                                                                      : quant::nvfp4_upright_code(byte));
    const float d = __fsub_rn(__fmul_rn(__fmul_rn(q, s), g), x[i]);
    err = __fadd_rn(err, __fmul_rn(d, d));
  }
  return err;
}

// Quantizes this lane's 16 elements and stores them at `data` (+ one scale byte at `scale` for
// nvfp4). The same building blocks and order of float operations as quant::quantize_head_vector
// (bf16_from_f32, e4m3_from_f32(x / g), nvfp4_quantize_block; nvfp4_quantize_block_4over6 when
// R is kFourOverSix), but written out on registers: the generic function works through a byte array
// in local memory, which made the kernel issue-bound.
// `g_inv` is 1/g when g is a power of two (then x·(1/g) is exactly x/g: the same real number,
// rounded once), else 0 and the true division runs. data is aligned to the piece size.
template <quant::ElemFormat F, quant::Nvfp4ScaleRule R = quant::Nvfp4ScaleRule::kAmaxOver6>
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
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) amax = max_abs_nan(amax, x[i]);
    uint8_t code = nvfp4_scale_code(amax / 6.0f, g, g_inv);
    const float s = f32_from_e4m3_hw(code);
    uint32_t w[2];
    nvfp4_codes16(x, s, g, w);
    if constexpr (R == quant::Nvfp4ScaleRule::kFourOverSix) {
      // quant::nvfp4_quantize_block_4over6: the amax/4 candidate, kept only when its block error is
      // strictly smaller (ties and NaN errors keep amax/6); nothing to try for a zero or NaN s4.
      const uint8_t code4 = nvfp4_scale_code(amax / 4.0f, g, g_inv);
      const float s4 = f32_from_e4m3_hw(code4);
      if (!(s4 == 0.0f || quant::is_nan(s4))) {
        uint32_t w4[2];
        nvfp4_codes16(x, s4, g, w4);
        const float err6 = nvfp4_squared_error16(x, w, s, g);
        const float err4 = nvfp4_squared_error16(x, w4, s4, g);
        if (err4 < err6) w[0] = w4[0], w[1] = w4[1], code = code4;
      }
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

// In the 8B batch-1 step the nvfp4 write's link (its end after the q/k/v product's) is 2.8 us against
// fp8's 1.3 (H200, 2026-12-01); by instruction count the nvfp4 arithmetic after the wait adds ~1000
// cycles (0.5 us). Tried: running the code after the wait once on dummy data before it (a two-pass
// loop, stores to shared memory), in case the gap were cold instruction fetches: nvfp4 2.82 -> 2.82
// us, fp8 1.28 -> 2.56, the decode after it 0.25-0.5 us shorter; the step fp8 4.238 -> 4.267, nvfp4
// 4.329 -> 4.307 ms. Nor are the scale stores it (8 bytes of a 32-byte sector, the rest other
// tokens' scales, so a store that misses L2 might wait for the sector): the sector prefetched into L2
// (prefetch.global.L2) before the wait left the link at 2.82 us and the step within 0.3%. Reverted;
// the cause is not known. Nsight Compute on the eager kernel (same shapes, caches flushed, eleventh
// session): fp8 5.44 us (8.1k cycles), nvfp4 5.92-6.24 us (8.8-9.3k cycles), the same 45 registers
// and 0.07-0.09 issued warps per scheduler: alone, nvfp4 costs the ~1000 cycles its arithmetic
// explains; the in-graph gap is twice that.
// Block roles (grid.x = kv_blocks + q_blocks, kv_write.cu): K and V of the same vectors, then q's
// (RoPE only: rotated in place, nothing stored in the pool). A lane quantizes both K and V of its
// 16 elements: the vector's place (row -> sequence, position -> page) is looked up once for both,
// and both parts' loads are in flight together. One instance per (K format, V format): each carries
// only its own quantizer, once when K and V share the format (a second pass moves V's values into
// xk). R: the nvfp4 block-scale rule (p.nvfp4_scale_rule), so that the default amax/6 kernel carries
// none of 4-over-6's second candidate. Before griddep_wait() only the step's arrays (positions,
// row_sequence, page_tables: host copies) and inv_freq are read.
//
// H200, 2026-12-01 (bench_decode_attention --write-only, 65536 tokens, % of the read bandwidth, two
// runs): one instance for every format with a runtime switch, a thread per part (K or V) and the
// rare exact E2M1 decision inlined per element: bf16 86.1-86.5, fp8 84.9-85.0, nvfp4 74.7, k8v4
// 79.7-79.9 at g = 1; at g = 0.37 fp8 78.7-79.3, nvfp4 62.8-63.3, k8v4 70.3-70.9. Ncu (g = 0.37
// nvfp4): issue-bound at 0.78 warps per scheduler and cycle, a third of the stalls on instruction
// fetch (the kernel's code was ~4500 instructions). A thread per (K, V) pair, the rare decision out
// of line, one quantizer copy for K and V: bf16 93.4-94.4, fp8 93.4-94.0, nvfp4 82.5-83.4, k8v4
// 89.3-90.2; g = 0.37 fp8 87.4-88.3, nvfp4 72.3-72.9, k8v4 82.6-83.3. The kChecked quotient as one
// multiply with the near-decision check on its bit pattern (quant/e2m1_reciprocal.h) then took
// nvfp4 at g = 0.37 to 74.0-74.8 but bf16, whose code it does not touch, to 84.4-84.8: the shared
// kernel's registers and schedule moved with any format's code, hence an instance per format pair.
// Tried: the 16 near-decision checks min-combined into one compare per block, the flagged elements
// redone after the loop: all 16 inputs stay live, 64 registers spill 120 bytes (80 registers
// uncapped, 24 warps per SM): nvfp4 g = 0.37 54.8% and 73.1-73.7%; by halves of 8 (52 bytes of
// spills) 73.9-74.0% with bf16 at 86%. And for writes of <= 8 tokens (decode batches) K and V in
// blocks of their own again, chosen at launch by a runtime flag, plus a tree for nvfp4's amax: the
// 8B step's write link at 1K fell (fp8 1.54 -> 1.28 us, nvfp4 3.07 -> 2.56; the step -0.15% for
// nvfp4, a tie otherwise), but the flag's branches cost the large writes (64K tokens, g = 1: bf16
// 91.5 -> 86-87%, nvfp4 84.9 -> 83%, k8v4 91.9 -> 54%). Not adopted; as a template parameter it
// would double this file's instances for <= 0.15%.
template <int kHeadDim, ActivationDtype D, quant::ElemFormat KF, quant::ElemFormat VF, quant::Nvfp4ScaleRule R>
__global__ void __launch_bounds__(kKvWriteWarps * 32, R == quant::Nvfp4ScaleRule::kFourOverSix ? 6 : 8)
    kv_write_kernel(KvWriteParams p, int kv_blocks, int q_blocks) {
  constexpr int kLanesPerVector = kHeadDim / kElemsPerLane;
  constexpr int kVectorsPerWarp = 32 / kLanesPerVector;
  constexpr int kVectorsPerBlock = kKvWriteWarps * kVectorsPerWarp;
  __shared__ float2 rope_cs[kVectorsPerBlock * kHeadDim / 2];  // rope_table: at most one token per vector
  griddep_launch_dependents();
  const int role_block = static_cast<int>(blockIdx.x);
  if constexpr (D == ActivationDtype::kF32) {
    if (role_block >= kv_blocks) {  // q: RoPE in place
      const int lane = threadIdx.x % 32, block_in_vector = lane % kLanesPerVector;
      const int first_vector = (role_block - kv_blocks) * kVectorsPerBlock;
      const int vector = first_vector + static_cast<int>(threadIdx.x / 32) * kVectorsPerWarp + lane / kLanesPerVector;
      const int heads = static_cast<int>(p.q_heads), num_tokens = static_cast<int>(p.num_tokens);
      const int first_token = rope_table<kHeadDim>(rope_cs, first_vector, kVectorsPerBlock, heads, num_tokens,
                                                   p.positions, p.rope_inv_freq);
      const bool in_range = vector < num_tokens * heads;
      griddep_wait();
      float x[kElemsPerLane];
      float* at = p.q + static_cast<int64_t>(vector) * kHeadDim + block_in_vector * kElemsPerLane;
      if (in_range) {
        load16<D>(at, 0, x);
      } else {
#pragma unroll
        for (int e = 0; e < kElemsPerLane; ++e) x[e] = 0.0f;
      }
      const int row = in_range ? vector / heads - first_token : 0;
      rope16_lanes<kHeadDim>(x, block_in_vector, rope_cs + row * (kHeadDim / 2));
      if (in_range) store16(at, x);
      return;
    }
  }
  const int kv_block = role_block;
  const cache::KvPartLayout& kl = p.k_layout;
  const cache::KvPartLayout& vl = p.v_layout;

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int block_in_vector = lane % kLanesPerVector;
  // = token * kv_heads + head; < 2^31 (kv_write checks num_tokens * kv_heads), so the index math
  // is 32-bit: 64-bit divisions by runtime values cost ~70 instructions each.
  const int vector = (kv_block * kKvWriteWarps + warp) * kVectorsPerWarp + lane / kLanesPerVector;
  const int kv_heads = static_cast<int>(kl.kv_heads);
  const bool in_range = vector < static_cast<int>(p.num_tokens) * kv_heads;

  // Where the vector goes, loaded before the data so the dependent loads (row -> page table) overlap
  // the data loads instead of following the arithmetic. K and V share the page size (PageLayout).
  const int token = in_range ? vector / kv_heads : 0;
  const int head = vector - token * kv_heads;
  const int32_t seq = in_range ? p.row_sequence[token] : -1;
  const int32_t pos = in_range ? p.positions[token] : 0;
  const int page_size = static_cast<int>(kl.page_size);
  const int page_index = pos / page_size;
  const int slot = pos - page_index * page_size;
  const int64_t page = seq >= 0 ? p.page_tables[static_cast<int64_t>(seq) * p.max_pages_per_seq + page_index] : 0;

  const bool rope = D == ActivationDtype::kF32 && p.rope_inv_freq != nullptr;  // uniform
  int first_token = 0;
  if (rope) {
    first_token = rope_table<kHeadDim>(rope_cs, kv_block * kVectorsPerBlock, kVectorsPerBlock, kv_heads,
                                       static_cast<int>(p.num_tokens), p.positions, p.rope_inv_freq);
  }
  griddep_wait();  // k and v are the previous kernel's outputs
  float xk[kElemsPerLane], xv[kElemsPerLane];
  const int64_t at = static_cast<int64_t>(vector) * kHeadDim + block_in_vector * kElemsPerLane;
  if (in_range) {
    load16<D>(p.k, at, xk);
    load16<D>(p.v, at, xv);
  } else {
#pragma unroll
    for (int e = 0; e < kElemsPerLane; ++e) xk[e] = xv[e] = 0.0f;
  }
  if constexpr (D == ActivationDtype::kF32) {
    if (rope) {
      rope16_lanes<kHeadDim>(xk, block_in_vector, rope_cs + (in_range ? token - first_token : 0) * (kHeadDim / 2));
      if (in_range) store16(p.k_rotated + at, xk);
    }
  }
  // Every lane takes part in the shuffles; out-of-range groups are whole lane groups.
  if (p.rotation == quant::Rotation::kHadamard) {
    hadamard16_lanes(xk, block_in_vector, kHeadDim);
    hadamard16_lanes(xv, block_in_vector, kHeadDim);
  }
  if (!in_range || seq < 0) return;

  uint8_t* page_base = p.pool + page * p.page_bytes;
  constexpr int kKBytes = static_cast<int>(quant::data_bytes(KF, kElemsPerLane));
  constexpr int kVBytes = static_cast<int>(quant::data_bytes(VF, kElemsPerLane));
  uint8_t* k_data = page_base + kl.data_at(head, slot) + block_in_vector * kKBytes;
  uint8_t* k_scale = page_base + kl.scales_at(head, slot) + block_in_vector;
  uint8_t* v_data = page_base + vl.data_at(head, slot) + block_in_vector * kVBytes;
  uint8_t* v_scale = page_base + vl.scales_at(head, slot) + block_in_vector;
  if constexpr (KF == VF) {
    uint8_t* data = k_data;
    uint8_t* scale = k_scale;
    float g = p.k_global_scale;
#pragma unroll 1
    for (int pass = 0; pass < 2; ++pass) {
      quantize_store16<KF, R>(xk, g, exact_reciprocal_or_zero(g), data, scale);
#pragma unroll
      for (int e = 0; e < kElemsPerLane; ++e) xk[e] = xv[e];
      data = v_data;
      scale = v_scale;
      g = p.v_global_scale;
    }
  } else {
    quantize_store16<KF, R>(xk, p.k_global_scale, exact_reciprocal_or_zero(p.k_global_scale), k_data, k_scale);
    quantize_store16<VF, R>(xv, p.v_global_scale, exact_reciprocal_or_zero(p.v_global_scale), v_data, v_scale);
  }
}

}  // namespace nibble::cuda::detail
