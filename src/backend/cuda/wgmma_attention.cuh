#pragma once
// The per-tile pieces of the warpgroup attention kernels at head_dim 128 (prefill_attention_wgmma.cuh,
// extend_attention_wgmma.cuh): one warpgroup's 64 query rows against a tile of 128 keys, and the
// ring of K and V stages with its mbarriers.
//
// Per tile and warpgroup (wgmma.cuh states the fragment layouts):
//   S = Q K^T   8 x wgmma m64n128k16, A = Q and B = K from shared memory, both K-major;
//   softmax     online, in registers, log2 domain (a quad of lanes shares a row, as in mma.sync);
//   O += P V    8 x wgmma m64n128k16, A = P (bf16, from the S registers), B = V MN-major.
// The accumulators s[64] and o[64] hold rows g (s[4j], s[4j + 1]) and g + 8 (s[4j + 2], s[4j + 3]) of
// the warp's 16, columns 8j + 2t and + 1 (g = lane / 4, t = lane % 4).
//
// Shared-memory layouts (1024-byte aligned, 128-byte swizzle: sw128_offset):
//   Q rows of a warpgroup [2 halves of 64 dims][64 rows][128 B]              16 KiB
//   K or V tile            [2 halves of 64 dims][kKeys rows][128 B]           32 KiB
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/prefill_mma.cuh"  // exp2_ftz, pack_bf16x2
#include "backend/cuda/wgmma.cuh"

namespace nibble::cuda::detail {

struct WgmmaAttention {
  static constexpr int kD = 128;
  static constexpr int kKeys = 128;
  static constexpr uint32_t kHalfBytes = kKeys * 128;    // 64 dims of one K or V tile
  static constexpr uint32_t kTileBytes = 2 * kHalfBytes;  // one K or V tile
  static constexpr uint32_t kQGroupBytes = 64 * kD * 2;  // one warpgroup's Q rows
};

// The byte offset of 16-byte piece `piece` (0..15: dims 8 piece ..) of row `row` of a Q or K/V tile
// whose halves are `half_bytes` apart.
__device__ __forceinline__ uint32_t wgmma_piece_offset(int row, int piece, uint32_t half_bytes) {
  return (piece / 8) * half_bytes + sw128_offset(row, piece % 8);
}

// S = Q K^T of one warpgroup (64 rows x 128 keys), S overwritten (scale-d false on the first
// k-step). Committed as one group.
__device__ __forceinline__ void wgmma_issue_qk(float (&s)[64], uint32_t q_rows, uint32_t k_tile) {
  using A = WgmmaAttention;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < A::kD / 16; ++kk) {
    const uint32_t q_off = (kk / 4) * (A::kQGroupBytes / 2) + (kk % 4) * 32;
    const uint32_t k_off = (kk / 4) * A::kHalfBytes + (kk % 4) * 32;
    wgmma_m64n128k16_ss(s, smem_desc(q_rows + q_off, 16, 1024), smem_desc(k_tile + k_off, 16, 1024), kk > 0);
  }
  wgmma_commit();
}

// O += P V (P in pa: k-step kk holds keys 16 kk ..): V MN-major, 16 keys per k-step (2 groups of 8
// rows, SBO apart), the two 64-dim halves LBO apart. Committed as one group.
__device__ __forceinline__ void wgmma_issue_pv(float (&o)[64], uint32_t (&pa)[8][4], uint32_t v_tile) {
  using A = WgmmaAttention;
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
    for (int x = 0; x < 4; ++x) asm volatile("" : "+r"(pa[kk][x])::"memory");
  }
  wgmma_fence_operands(o);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) wgmma_m64n128k16_rs_mn(o, pa[kk], smem_desc(v_tile + kk * 16 * 128, A::kHalfBytes, 1024));
  wgmma_commit();
}

// Causal mask of a tile whose keys start at key0, for the rows row_g (the thread's row g) and row_g + 8.
__device__ __forceinline__ void wgmma_causal_mask(float (&s)[64], int key0, int row_g, int t) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = key0 + 8 * j + 2 * t + e;
      if (key > row_g) s[4 * j + e] = -INFINITY;
      if (key > row_g + 8) s[4 * j + 2 + e] = -INFINITY;
    }
  }
}

// Keys at or past `count` (of the tile's 128) -> -inf, for both rows.
__device__ __forceinline__ void wgmma_length_mask(float (&s)[64], int count, int t) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (8 * j + 2 * t + e >= count) s[4 * j + e] = s[4 * j + 2 + e] = -INFINITY;
    }
  }
}

// Online softmax of one tile's scores, per row (r = 0: row g, r = 1: row g + 8): the running max m
// (log2 domain, scores times scale_log2) and sum l, s -> exp2(s scale_log2 - m); correction[r] is
// what O must be multiplied by (0 on a row's first tile, m = -inf). Every row must have a finite
// score in the tile it starts with.
__device__ __forceinline__ void wgmma_softmax(float (&s)[64], float (&m)[2], float (&l)[2], float (&correction)[2],
                                              float scale_log2) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 16; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[r], mx * scale_log2);
    correction[r] = exp2_ftz(m[r] - m_new);
    m[r] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[4 * j + 2 * r + e] = exp2_ftz(fmaf(s[4 * j + 2 * r + e], scale_log2, -m_new));
        sum += s[4 * j + 2 * r + e];
      }
    }
    l[r] = l[r] * correction[r] + sum;
  }
}

// O to the new reference max (times correction), and P = s rounded to bf16 into pa.
__device__ __forceinline__ void wgmma_rescale_pack(float (&o)[64], const float (&correction)[2], const float (&s)[64],
                                                   uint32_t (&pa)[8][4]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      o[4 * j + 2 * r] *= correction[r];
      o[4 * j + 2 * r + 1] *= correction[r];
    }
  }
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    pa[kk][0] = pack_bf16x2(s[8 * kk + 0], s[8 * kk + 1]);
    pa[kk][1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
    pa[kk][2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
    pa[kk][3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// O / l of the thread's rows row_g and row_g + 8 into out_head (row stride q_cols floats); rows at or
// past num_new are not stored.
__device__ __forceinline__ void wgmma_store_rows(const float (&o)[64], const float (&l)[2], float* out_head,
                                                 int64_t q_cols, int row_g, int num_new, int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = row_g + 8 * r;
    if (row >= num_new) continue;
    const float inv = 1.0f / sum;
    float* out_row = out_head + static_cast<int64_t>(row) * q_cols;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      *reinterpret_cast<float2*>(out_row + 8 * j + 2 * t) =
          make_float2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
    }
  }
}

// The K and V rings of kStages tile stages and their mbarriers, in shared memory:
//   K ring [kStages][K tile], V ring [kStages][V tile] (32 KiB each), then
//   mbarriers [full K | full V | empty K | empty V][kStages] x 8 B.
// Tiles are numbered by the ring index x (tile x in stage x % kStages). full: every thread of the
// block arrives once its part of the tile is in the stage (and fenced for the async proxy); empty:
// lane 0 of each warp arrives once its warpgroup's products reading the stage are done. Waits name a
// phase by its parity: x / kStages.
template <int kStages_>
struct WgmmaKvRing {
  static constexpr int kStages = kStages_;
  static constexpr uint32_t kBytes = 2 * kStages * WgmmaAttention::kTileBytes;
  static constexpr uint32_t kBarrierBytes = 4 * kStages * 8;
  uint32_t base;  // 1024-byte aligned
  uint32_t bars;  // 8-byte aligned

  __device__ uint32_t k_stage(int x) const { return base + (x % kStages) * WgmmaAttention::kTileBytes; }
  __device__ uint32_t v_stage(int x) const {
    return base + (kStages + x % kStages) * WgmmaAttention::kTileBytes;
  }
  __device__ uint32_t full_k(int x) const { return bars + 8 * (x % kStages); }
  __device__ uint32_t full_v(int x) const { return bars + 8 * (kStages + x % kStages); }
  __device__ uint32_t empty_k(int x) const { return bars + 8 * (2 * kStages + x % kStages); }
  __device__ uint32_t empty_v(int x) const { return bars + 8 * (3 * kStages + x % kStages); }
  static __device__ uint32_t phase(int x) { return static_cast<uint32_t>(x / kStages) & 1u; }

  // One thread, before the block's first barrier.
  __device__ void init(uint32_t threads) const {
#pragma unroll
    for (int st = 0; st < kStages; ++st) {
      mbarrier_init(full_k(st), threads);
      mbarrier_init(full_v(st), threads);
      mbarrier_init(empty_k(st), threads / 32);
      mbarrier_init(empty_v(st), threads / 32);
    }
  }
  // Before writing tile x into its stage: both warpgroups are done with tile x - kStages.
  __device__ void wait_k_free(int x) const {
    if (x >= kStages) mbarrier_wait(empty_k(x), phase(x) ^ 1u);
  }
  __device__ void wait_v_free(int x) const {
    if (x >= kStages) mbarrier_wait(empty_v(x), phase(x) ^ 1u);
  }
  __device__ void wait_k_full(int x) const { mbarrier_wait(full_k(x), phase(x)); }
  __device__ void wait_v_full(int x) const { mbarrier_wait(full_v(x), phase(x)); }
};

}  // namespace nibble::cuda::detail
