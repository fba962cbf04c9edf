#pragma once
// The extend kernel's prefix split (extend_split.h), device side: which blocks take which part of
// a query tile's prefix, where each writes its partial (O, m, l), and the merge kernel that turns
// a tile's partials into its output rows.
//
// Records. With S parts, the unsplit grid's block (head group x of n_hb, the sequence's query
// tile z) owns records ((tile_base(seq) + z) · n_hb + x) · S + s, s = 0 .. S - 1, where
// tile_base(seq) counts the query tiles of the sequences taken before it: the records of the
// blocks with work are dense, whatever else the step holds (decode sequences). A record is
// [kRowsQ][D] f32 O (unnormalized, relative to the row's m, with the global V scale and the
// Hadamard rotation already undone) then [kRowsQ][2] f32 (m, l): m the log2-domain reference max,
// l the sum of the row's probabilities. Local row lr = warp · kRowsWarp + 16 mi + g + 8 r, as the
// block's warps hold their rows.
//
// Parts. A tile's n_prefix key tiles split as [s · per, min((s + 1) · per, n_prefix)), per =
// ceil(n_prefix / S); the last part also takes the chunk's own tiles, so it always has work. Parts
// before it with no prefix tile write nothing, and the merge leaves them out.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/extend_attention.h"
#include "backend/cuda/extend_split.h"  // kExtendMaxSplits
#include "backend/cuda/prefill_attention.h"  // kSeqInfoFields

namespace nibble::cuda::detail {

// The sequences the extend kernel takes (extend_attention.h): own rows, and a cached prefix unless
// include_prefill.
__device__ __forceinline__ bool extend_takes(const int32_t* info, bool include_prefill) {
  return info[3] != 0 && (info[2] > 0 || include_prefill);
}

// Query tiles of the sequences before `seq` that the kernel takes (one warp, every lane gets it).
__device__ __forceinline__ int extend_tile_base(const ExtendAttentionParams& p, int seq, int rows_q, int lane) {
  int sum = 0;
  for (int j0 = 0; j0 < seq; j0 += 32) {
    const int j = j0 + lane;
    int tiles = 0;
    if (j < seq) {
      const int32_t* info = p.seq_info + static_cast<int64_t>(j) * kSeqInfoFields;
      if (extend_takes(info, p.include_prefill)) tiles = (info[1] + rows_q - 1) / rows_q;
    }
    sum += __reduce_add_sync(0xffffffffu, tiles);
  }
  return sum;
}

// Part s of S of a prefix of n_prefix key tiles: [begin, end).
struct ExtendPart {
  int begin, end;
};
__device__ __forceinline__ ExtendPart extend_part(int n_prefix, int s, int splits) {
  const int per = (n_prefix + splits - 1) / splits;
  const int begin = min(s * per, n_prefix);
  return {begin, min(begin + per, n_prefix)};
}

// Writes a warp's rows (g, g + 8 of each row block) into its block's record: O as held, (m, l)
// with l summed over the row's quad. Rows past num_new are left out.
template <int D, typename T>
__device__ __forceinline__ void store_partial_rows(const float (&o)[T::kM][2 * T::kD16][4], const float (&m)[T::kM][2],
                                                   const float (&l)[T::kM][2], float* record, int warp,
                                                   int warp_row0, int num_new, int g, int t) {
  float* ml = record + T::kRowsQ * D;
#pragma unroll
  for (int mi = 0; mi < T::kM; ++mi) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mi][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int local = 16 * mi + g + 8 * r;
      if (warp_row0 + local >= num_new) continue;
      const int lr = warp * T::kRowsWarp + local;
      float* row = record + lr * D;
#pragma unroll
      for (int n = 0; n < 2 * T::kD16; ++n) {
        *reinterpret_cast<float2*>(row + 8 * n + 2 * t) = make_float2(o[mi][n][2 * r], o[mi][n][2 * r + 1]);
      }
      if (t == 0) *reinterpret_cast<float2*>(ml + 2 * lr) = make_float2(m[mi][r], sum);
    }
  }
}

// The merge: a warp per output row (head, token), 8 per block; grid (n_hb, num_seqs, query tiles ×
// kRowsQ / 8), tiles in forward order. Lane s holds part s's (m, l) (and s + 32's), the lanes
// split the row's dims in 16- or 8-byte pieces. out = Σ_s 2^(m_s - M) O_s / Σ_s 2^(m_s - M) l_s over
// the parts with work, the O sum in part order and l's in a fixed butterfly: the same bits in every
// call. A first version walked a block's rows with one warp per row in turn and one block per
// unsplit block: at 32K + 64 tokens (8 blocks of 256 rows) it took ~150 of the call's ~300 us.
inline constexpr int kExtendMergeWarps = 8;
inline constexpr int kExtendMergeThreads = 32 * kExtendMergeWarps;

template <int D, typename T>
__global__ void __launch_bounds__(kExtendMergeThreads)
    extend_merge_kernel(ExtendAttentionParams p, int heads_per_block, int splits) {
  static_assert(T::kRowsQ % kExtendMergeWarps == 0, "whole row groups per tile");
  static_assert(kExtendMaxSplits <= 64, "two parts per lane at most");
  constexpr int kGroups = T::kRowsQ / kExtendMergeWarps;  // row groups of a tile
  const int seq = static_cast<int>(blockIdx.y);
  const int32_t* info = p.seq_info + static_cast<int64_t>(seq) * kSeqInfoFields;
  if (!extend_takes(info, p.include_prefill)) return;
  const int64_t row0 = info[0];
  const int num_new = info[1], cached_len = info[2];
  const int warps_per_head = T::kWarps / heads_per_block;
  const int rows_q = T::kRowsWarp * warps_per_head;
  const int tile = static_cast<int>(blockIdx.z) / kGroups;
  const int q0 = tile * rows_q;
  if (q0 >= num_new) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int lr = (static_cast<int>(blockIdx.z) % kGroups) * kExtendMergeWarps + warp;  // local row
  const int w = lr / T::kRowsWarp;
  const int token = q0 + (w % warps_per_head) * T::kRowsWarp + lr % T::kRowsWarp;
  if (token >= num_new) return;  // warp-uniform
  const int64_t head = static_cast<int64_t>(blockIdx.x) * heads_per_block + w / warps_per_head;
  const int base = extend_tile_base(p, seq, rows_q, lane);
  const int64_t record_floats = static_cast<int64_t>(T::kRowsQ) * (D + 2);
  const int64_t first = ((static_cast<int64_t>(base) + tile) * gridDim.x + blockIdx.x) * splits;
  const float* records = static_cast<const float*>(p.split_workspace) + first * record_floats;
  const int n_prefix = (cached_len + T::kKeys - 1) / T::kKeys;
  const auto has_work = [&](int s) {
    const ExtendPart part = extend_part(n_prefix, s, splits);
    return s + 1 == splits || part.begin < part.end;
  };

  // (m, l) of parts lane and lane + 32; the row's max M, the weights 2^(m_s - M) and Σ l_s w_s.
  float m_s[2] = {-INFINITY, -INFINITY}, l_s[2] = {0.0f, 0.0f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int s = lane + 32 * h;
    if (s < splits && has_work(s)) {
      const float2 ml = *reinterpret_cast<const float2*>(records + s * record_floats + T::kRowsQ * D + 2 * lr);
      m_s[h] = ml.x, l_s[h] = ml.y;
    }
  }
  float m_max = fmaxf(m_s[0], m_s[1]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) m_max = fmaxf(m_max, __shfl_xor_sync(0xffffffffu, m_max, off));
  float w_s[2], l_sum = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    w_s[h] = m_s[h] == -INFINITY ? 0.0f : exp2f(m_s[h] - m_max);
    l_sum += l_s[h] * w_s[h];
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) l_sum += __shfl_xor_sync(0xffffffffu, l_sum, off);

  // O: lane's dims [kPiece · lane, + kPiece) (and + 128 at head_dim 256), parts in order.
  constexpr int kPiece = D == 64 ? 2 : 4;
  constexpr int kPieces = D / (32 * kPiece);
  float acc[kPieces][kPiece] = {};
  for (int s = 0; s < splits; ++s) {
    const float weight = __shfl_sync(0xffffffffu, s < 32 ? w_s[0] : w_s[1], s % 32);
    if (weight == 0.0f) continue;  // a part without work (warp-uniform)
    const float* row = records + s * record_floats + lr * D;
#pragma unroll
    for (int k = 0; k < kPieces; ++k) {
      const float* at = row + 32 * kPiece * k + kPiece * lane;
      if constexpr (kPiece == 4) {
        const float4 v = *reinterpret_cast<const float4*>(at);
        acc[k][0] += v.x * weight, acc[k][1] += v.y * weight, acc[k][2] += v.z * weight, acc[k][3] += v.w * weight;
      } else {
        const float2 v = *reinterpret_cast<const float2*>(at);
        acc[k][0] += v.x * weight, acc[k][1] += v.y * weight;
      }
    }
  }
  const float inv = 1.0f / l_sum;
  float* out = p.out + (row0 + token) * (p.num_q_heads * D) + head * D;
#pragma unroll
  for (int k = 0; k < kPieces; ++k) {
    float* at = out + 32 * kPiece * k + kPiece * lane;
    if constexpr (kPiece == 4) {
      *reinterpret_cast<float4*>(at) = make_float4(acc[k][0] * inv, acc[k][1] * inv, acc[k][2] * inv, acc[k][3] * inv);
    } else {
      *reinterpret_cast<float2*>(at) = make_float2(acc[k][0] * inv, acc[k][1] * inv);
    }
  }
}

}  // namespace nibble::cuda::detail
