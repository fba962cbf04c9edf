#pragma once
// The tensor-core prefill kernel (prefill_attention.h states the contract): causal flash attention
// over a sequence's own K/V, FlashAttention-2 style, mma.sync m16n8k16 bf16 -> f32. The pieces of
// a key tile (layouts, loads, S = QK^T, mask, softmax, PV) are in prefill_tile.cuh.
//
// Block: kWarps warps, one query head, kRowsQ = 16 * kM * kWarps consecutive new tokens of one
// sequence; warp w owns kM blocks of 16 query rows, [16 kM w, 16 kM (w + 1)). Its Q fragments stay
// in registers for the whole key loop (read once from the f32 q rows, rounded to bf16), or are
// staged once in shared memory. Keys stream in tiles of kKeys rows: the K and V tiles [kKeys][D]
// bf16 are multi-buffered in shared memory by cp.async, one barrier per tile. Each warp computes
// S = Q K^T [16][kKeys] per row block in f32 registers (K fragments by ldmatrix), folds it into the
// online softmax (log2 domain, the softmax scale folded into one FFMA before exp2), converts P to
// bf16 A fragments in registers (the S accumulator layout of two n8 tiles is the A layout of one
// k16 step) and accumulates O += P V [16][D] (V fragments by ldmatrix.trans); the schedule
// (PrefillSchedule) orders these per tile or pipelines them across tiles. Only tiles that reach
// past a row block's first query are masked; tiles past the block's last query are never loaded; a
// warp skips the math of a tile that lies wholly past its own last row. With kM = 2 every K/V
// fragment read from shared memory feeds two MMAs (shared-memory reads per FLOP halve, registers
// grow).
//
// Grid: (num_q_heads, num_seqs, query tiles), tiles in reverse order so the longest (last) query
// tiles of every sequence start first and the short ones fill the tail.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/prefill_mma.cuh"
#include "backend/cuda/prefill_tile.cuh"

namespace nibble::cuda::detail {

template <int D, typename T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    prefill_attention_kernel(PrefillAttentionParams p, const __nv_bfloat16* __restrict__ k_bf16,
                             const __nv_bfloat16* __restrict__ v_bf16) {
  constexpr int kKeys = T::kKeys;
  constexpr int kM = T::kM;
  constexpr int kD16 = T::kD16;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t smem = smem_address(smem_raw);  // [stage][K|V][kKeys][D] bf16, swizzled rows
  if (smem % 128 != 0) __trap();  // fragment_address needs 128-byte aligned tiles (__align__ above)
  constexpr uint32_t kTileBytes = T::kTileElems * 2;

  const int64_t head = blockIdx.x, seq = blockIdx.y;
  const int64_t q_tile = gridDim.z - 1 - blockIdx.z;
  const int32_t* info = p.seq_info + seq * kSeqInfoFields;
  const int64_t row0 = info[0], num_new = info[1];
  if (info[2] != 0 || info[3] == 0) return;  // extend / decode sequence: chunk_attention's work
  const int64_t q0 = q_tile * T::kRowsQ;
  if (q0 >= num_new) return;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t kv_head = head / (p.num_q_heads / p.num_kv_heads);
  const int64_t q_cols = p.num_q_heads * D, kv_cols = p.num_kv_heads * D;
  // This warp's first query (index among the new tokens); row block mi covers 16 rows from
  // warp_row0 + 16 mi.
  const int warp_row0 = static_cast<int>(q0) + T::kRowsWarp * warp;
  const int warp_last_row = warp_row0 + T::kRowsWarp - 1;

  // Q fragments [kM][kD16][4], bf16x2 (layout: prefill_mma.cuh), in registers, or Q [kRowsQ][D]
  // bf16 staged in shared memory after the K/V stages; rows past the sequence are zero.
  uint32_t qf[T::kQRegsM][T::kQRegsD][4];
  const uint32_t q_smem = smem + T::kKvBytes;
  const uint32_t q_warp = q_smem + T::kRowsWarp * warp * D * 2;  // this warp's first Q row
  if constexpr (!T::kQInSmem) {
    const float* q_base = p.q + (row0 + warp_row0) * q_cols + head * D;
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
      for (int kd = 0; kd < kD16; ++kd) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int row = 16 * mi + g + 8 * (r & 1), col = 16 * kd + 2 * t + 8 * (r >> 1);
          float2 x = make_float2(0.0f, 0.0f);
          if (warp_row0 + row < num_new) x = *reinterpret_cast<const float2*>(q_base + row * q_cols + col);
          qf[mi][kd][r] = pack_bf16x2(x.x, x.y);
        }
      }
    }
  } else {
    const float* q_base = p.q + (row0 + q0) * q_cols + head * D;
#pragma unroll
    for (int it = 0; it < T::kRowsQ * T::kChunks / T::kThreads; ++it) {
      const int u = threadIdx.x + it * T::kThreads;
      const int r = u / T::kChunks, c = u % T::kChunks;
      float4 lo = make_float4(0.0f, 0.0f, 0.0f, 0.0f), hi = lo;
      if (q0 + r < num_new) {
        lo = *reinterpret_cast<const float4*>(q_base + r * q_cols + 8 * c);
        hi = *reinterpret_cast<const float4*>(q_base + r * q_cols + 8 * c + 4);
      }
      const uint32_t x0 = pack_bf16x2(lo.x, lo.y), x1 = pack_bf16x2(lo.z, lo.w);
      const uint32_t x2 = pack_bf16x2(hi.x, hi.y), x3 = pack_bf16x2(hi.z, hi.w);
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(q_smem + swizzled_bytes<D>(r, c)), "r"(x0),
                   "r"(x1), "r"(x2), "r"(x3)
                   : "memory");
    }
    // Visible to every warp after the key loop's first barrier.
  }

  float o[kM][2 * kD16][4];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int n = 0; n < 2 * kD16; ++n) o[mi][n][0] = o[mi][n][1] = o[mi][n][2] = o[mi][n][3] = 0.0f;
  }
  // Running max (kBaseline: raw scores; else the log2-domain reference, prefill_tile.cuh) and this
  // thread's partial sum of rows g, g + 8 of each row block.
  float m[kM][2], l[kM][2];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) m[mi][0] = m[mi][1] = -INFINITY, l[mi][0] = l[mi][1] = 0.0f;
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale_log2 = p.softmax_scale * kLog2e;

  // Keys [0, key_end): the causal bound of the block's last query.
  const int key_end = static_cast<int>(num_new < q0 + T::kRowsQ ? num_new : q0 + T::kRowsQ);
  const int num_tiles = (key_end + kKeys - 1) / kKeys;
  // This thread's chunk of key 0 in K; V's is k_to_v elements on (both point into the one bf16
  // workspace [2][rows][cols]: one 64-bit pointer and an offset instead of two pointers' registers).
  const __nv_bfloat16* k_src = k_bf16 + row0 * kv_cols + kv_head * D + (threadIdx.x % T::kChunks) * 8;
  const int64_t k_to_v = v_bf16 - k_bf16;
  const auto load_tile = [&](int tile) {
    const uint32_t stage = smem + (tile % T::kStages) * 2 * kTileBytes;
    load_kv_tile<D, T>(stage, k_src, kv_cols, tile * kKeys, key_end);
    load_kv_tile<D, T>(stage + kTileBytes, k_src + k_to_v, kv_cols, tile * kKeys, key_end);
  };

  // K fragments: rows (keys) 16 jp + 8 (lane / 16) + lane % 8, chunk 2 kd + (lane / 8) % 2.
  // V fragments (transposed): rows 16 kk + 8 ((lane / 8) % 2) + lane % 8, chunk 2 np + lane / 16.
  const uint32_t k_lane = ldmatrix_lane_base<D>((lane / 16) * 8 + lane % 8, (lane / 8) % 2, lane);
  const uint32_t v_lane = ldmatrix_lane_base<D>(((lane / 8) % 2) * 8 + lane % 8, lane / 16, lane);

  if constexpr (!T::kPipelined) {
    // Prologue: tiles 0 .. kStages - 2, one commit group each (empty past the last tile), so that
    // the group count is uniform and wait<kStages - 2> means "tile i has landed".
#pragma unroll
    for (int st = 0; st < T::kStages - 1; ++st) {
      if (st < num_tiles) load_tile(st);
      cp_async_commit();
    }
    for (int i = 0; i < num_tiles; ++i) {
      const int key0 = i * kKeys;
      cp_async_wait<T::kStages - 2>();
      // One barrier per tile: after it tile i is visible to every thread, and every warp is done
      // with tile i - 1, whose stage the next load below reuses.
      __syncthreads();
      if (i + T::kStages - 1 < num_tiles) load_tile(i + T::kStages - 1);
      cp_async_commit();

      if (key0 <= warp_last_row) {  // else every key of the tile is past this warp's rows
        const uint32_t k_tile = smem + (i % T::kStages) * 2 * kTileBytes;
        float s[kM][T::kN][4];
        qk_tile<D, T>(s, qf, q_warp, k_tile, k_lane, v_lane);
        causal_mask<T>(s, key0, warp_row0, g, t);
        if constexpr (T::kLazy) {
          softmax_lazy<T>(s, m, l, o, scale_log2);
        } else {
          softmax_baseline<T>(s, m, l, o, scale_log2);
        }
        uint32_t pa[kKeys / 16][kM][4];
        pack_p<T>(pa, s);
        pv_tile<D, T>(o, pa, k_tile + kTileBytes, v_lane);
      }
    }
  } else {
    // Iteration i: the MMAs of S_i = Q K_i, then those of O += P_{i-1} V_{i-1}, then the softmax of
    // S_i (overlapping the P V MMAs in flight) into P_i; the warp's last P V runs once after its last
    // tile. Iteration i reads K_i and V_{i-1}; after its barrier every warp is done with iteration
    // i - 1 (K_{i-1}, V_{i-2}), so tile i - 2's stage takes tile i + kStages - 2. Prologue: tiles
    // 0 .. kStages - 3, one commit group each (empty past the last tile): wait<kStages - 3> at
    // iteration i means "tile i has landed".
#pragma unroll
    for (int st = 0; st < T::kStages - 2; ++st) {
      if (st < num_tiles) load_tile(st);
      cp_async_commit();
    }
    const auto k_tile = [&](int i) { return smem + (i % T::kStages) * 2 * kTileBytes; };
    const auto v_tile = [&](int i) { return smem + (i % T::kStages) * 2 * kTileBytes + kTileBytes; };
    const auto next_tile = [&](int i) {
      cp_async_wait<T::kStages - 3>();
      __syncthreads();
      if (i + T::kStages - 2 < num_tiles) load_tile(i + T::kStages - 2);
      cp_async_commit();
    };
    uint32_t pa[kKeys / 16][kM][4];  // P_{i-1}
    // Tile 0 (key 0 is in every warp's causal range).
    next_tile(0);
    {
      float s[kM][T::kN][4];
      qk_tile<D, T>(s, qf, q_warp, k_tile(0), k_lane, v_lane);
      causal_mask<T>(s, 0, warp_row0, g, t);
      softmax_lazy<T>(s, m, l, o, scale_log2);
      pack_p<T>(pa, s);
    }
    for (int i = 1; i < num_tiles; ++i) {
      const int key0 = i * kKeys;
      next_tile(i);
      if (key0 <= warp_last_row) {  // the steady state: one basic block of MMAs and softmax
        float s[kM][T::kN][4];
        qk_tile<D, T>(s, qf, q_warp, k_tile(i), k_lane, v_lane);
        wait_for(s[kM - 1][T::kN - 1][3]);
        pv_tile<D, T>(o, pa, v_tile(i - 1), v_lane);
        causal_mask<T>(s, key0, warp_row0, g, t);
        softmax_lazy<T>(s, m, l, o, scale_log2);
        pack_p<T>(pa, s);
      } else if (key0 - kKeys <= warp_last_row) {  // tile i - 1 was this warp's last
        pv_tile<D, T>(o, pa, v_tile(i - 1), v_lane);
      }
    }
    // The block's last tile, for the warps it reaches (V_{num_tiles - 1} is visible since its barrier).
    if ((num_tiles - 1) * kKeys <= warp_last_row) pv_tile<D, T>(o, pa, v_tile(num_tiles - 1), v_lane);
  }

  // Normalize and store rows g, g + 8 of each row block.
  store_normalized_rows<D, T>(o, l, p.out + row0 * q_cols + head * D, q_cols, warp_row0, num_new, g, t);
}

// K and V f32 [rows][cols] -> bf16 (round to nearest even) into out [2][rows][cols]; n = rows * cols,
// a multiple of 4.
__global__ void convert_kv_to_bf16_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                          __nv_bfloat16* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * 4;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; i < 2 * n; i += stride) {
    const float* src = i < n ? k + i : v + (i - n);
    const float4 x = *reinterpret_cast<const float4*>(src);
    uint2 packed;
    packed.x = pack_bf16x2(x.x, x.y);
    packed.y = pack_bf16x2(x.z, x.w);
    *reinterpret_cast<uint2*>(out + i) = packed;
  }
}

}  // namespace nibble::cuda::detail
