#pragma once
// The tensor-core decode kernel's compile-time geometry (TcTraits: a stage's regions, the ring, the
// builds' switches) and its small helpers (the running max's slack, exp2 on the SFU, the q staging
// swizzle). The kernel: decode_attention_tc.cuh; its copies: decode_tile_copy.cuh; its fragments:
// decode_tc_fragments.cuh.
#include <cstdint>

#include "backend/cuda/decode_kernel_args.h"
#include "quant/kv_format.h"

namespace nibble::cuda::detail {

using quant::ElemFormat;

// kSteps: 16-token chunks per warp step (the kernel's; tc_geometry sizes the wider blocks' rings by it).
template <ElemFormat KF, ElemFormat VF, int kHeadDim, int kWarps = kTcWarps, int kSteps = 1>
struct TcTraits {
  static constexpr int kKRow = static_cast<int>(quant::data_bytes(KF, kHeadDim));
  static constexpr int kKScaleRow = static_cast<int>(quant::scale_bytes(KF, kHeadDim));
  static constexpr int kVRow = static_cast<int>(quant::data_bytes(VF, kHeadDim));
  static constexpr int kVScaleRow = static_cast<int>(quant::scale_bytes(VF, kHeadDim));
  static constexpr int kKBytes = kTcChunk * kKRow;
  static constexpr int kKScaleBytes = kTcChunk * kKScaleRow;
  static constexpr int kVBytes = kTcChunk * kVRow;
  static constexpr int kVScaleBytes = kTcChunk * kVScaleRow;
  static constexpr TcGeometry kGeo = tc_geometry(KF, VF, kHeadDim, kWarps, kSteps);
  static constexpr int kStageBytes = kGeo.stage_bytes;
  static constexpr int kStages = kGeo.stages;
  static constexpr int kSmemBytes = kGeo.smem_bytes;
  static constexpr int kMinBlocks = kGeo.blocks_per_sm;
  static constexpr int kKSteps = kHeadDim / 16;  // QK k-steps
  static constexpr int kKRegs = kHeadDim / 8;    // B registers of one token's K (2 per k-step)
  static constexpr int kNTiles = kHeadDim / 8;   // PV n-tiles (8 dims each)
  static constexpr int kQFragBytes = kKSteps * 32 * 16;
  static constexpr bool kQkBf16 = KF == ElemFormat::kBF16;
  static constexpr bool kPvBf16 = VF == ElemFormat::kBF16;
  // Full chunks take the copy path without size arithmetic; bf16 head_dim 256 (2 blocks/SM, 255
  // registers) keeps the single path, the second one made it spill.
  static constexpr bool kFastCopy = !(KF == ElemFormat::kBF16 && kHeadDim == 256);
  // nvfp4 head_dim 128 (64-byte data rows, 8-byte scale rows) and 64 (32 and 4): full chunks are
  // copied with per-lane 32-bit offsets fixed for the whole loop (lean_copy): 5 or 3 cp.async per lane
  // and a few adds. It also brings the page batches and steady steps (decode_attention_tc.cuh).
  static constexpr bool kLeanCopy =
      KF == ElemFormat::kNVFP4 && VF == ElemFormat::kNVFP4 && (kHeadDim == 128 || kHeadDim == 64);
  // QK in two MMA chains (even / odd k-steps): shorter dependency chains, 4 more registers (head_dim
  // 256 would spill). Since O is kept transposed (pv_pair, 32 registers at head_dim 128) every format
  // has them to spare, fp8/fp8 included.
  static constexpr bool kQkTwoChains = kHeadDim <= 128;
  // Stored unit values are scaled into f16 by these powers of two (nvfp4: unit · 2^-8).
  static constexpr float kKUnitMult = KF == ElemFormat::kNVFP4 ? 256.0f : 1.0f;
  static constexpr float kVUnitMult = VF == ElemFormat::kNVFP4 ? 256.0f : 1.0f;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head_dim must be 64, 128 or 256");
  static_assert(kStageBytes == kKBytes + kKScaleBytes + kVBytes + kVScaleBytes, "stage layout");
  static_assert(kKScaleBytes % 16 == 0 && kVScaleBytes % 16 == 0, "regions are whole 16-byte pieces");
};

// How far (log2 domain) a score may exceed the running max before the max moves and O is
// rescaled: p <= 2^8 stays exact in f16 and far from f32's range. FlashAttention-4 skips rescales
// the same way.
inline constexpr float kMaxSlack = 8.0f;

// 2^x on the special-function unit (x <= 0 here; -inf -> 0, results below 2^-126 flush to 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ---- q staging swizzle (float offset of head h, dim d in the [8][D] f32 staging) ---------------------
// The Q-fragment build has lane (g, c) read head g at dim k_dim(c, ..): with rows of D floats all
// lanes of one read hit one bank modulo 32 — 32-way conflicts for nvfp4 (dims 32c apart), 16-way fp8,
// 8-way bf16. XOR the dim's bits 0-2 with the head and bits 3-4 with its bits 5-6 (c for nvfp4, c/2
// for fp8): every fragment read is conflict-free, and so are the staging writes (32 consecutive dims
// of one head). Each row stays a permutation of itself.
// Measured on the H200 (2026-11-30, graph replays, bench_decode_attention, GQA 4, bf16 / fp8 / nvfp4
// us): 1 x 1K 9.4 / 9.0 / 9.1 -> 9.1 / 8.6 / 8.5, 1 x 4K 12.1 / 11.3 / 11.3 -> 11.9 / 11.1 / 10.7,
// 1 x 16K 24.3 / 16.7 / 16.7 -> 24.4 / 16.5 / 15.9, 8 x 1K 17.8 / 13.7 / 13.7 -> 17.7 / 13.5 / 12.8:
// the fragment build is on every block's path to its first MMA, so short items feel it.
template <int kHeadDim>
__device__ __forceinline__ int q_swz(int h, int d) {
  return h * kHeadDim + (d ^ (h & 7) ^ (((d >> 5) & 3) << 3));
}

// ---- epilogue swizzle (float offset of head h, dim d in a warp's [8][D] f32 O block) -----------------
// The O^T accumulators leave lane (g, c) as pairs of dims g·D/8 + 2m, 2m + 1 (m < D/16) of heads 2c
// and 2c + 1; with rows of D floats the 16 lanes of a half-warp's 64-bit store hit 2 (D = 128), 4
// (D = 64) or 1 (D = 256) bank pairs. XOR the pair index m with s(g, c), which takes 16 distinct
// values over a half-warp together with the bank bits the natural layout already spreads (g's low
// bits): every store is conflict-free, and so are the reduction's reads of 32 consecutive dims of one
// row (s is constant over them). Each row stays a permutation of itself. A 16-warp block's stores
// took 2.3 us with 8-way conflicts (PERFORMANCE.md, twenty-first round). Earlier conflict-free
// layouts measured slower at the short shapes (2026-11-30: an XOR swizzle with the merged rows kept
// in registers, 1 x 1K nvfp4 9.1 -> 9.8 us) or as noise (the twentieth round's padded rows); this one
// came with the per-column merge of the warps' softmax states and the merged rows in Q's region.
template <int kHeadDim>
__device__ __forceinline__ int red_swz(int h, int d) {
  constexpr int kPairs = kHeadDim / 16;  // m's range
  static_assert(kPairs == 4 || kPairs == 8 || kPairs == 16, "head_dim 64, 128 or 256");
  constexpr int kGShift = kPairs == 4 ? 2 : kPairs == 8 ? 1 : 0;  // g's bits not spread by the layout
  const int g = d / (kHeadDim / 8);
  const int s = ((h >> 1) | (((g & 3) >> kGShift) << 2)) & (kPairs - 1);
  return h * kHeadDim + (d ^ (2 * s));
}

}  // namespace nibble::cuda::detail
