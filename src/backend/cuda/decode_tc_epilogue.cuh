#pragma once
// The tensor-core decode kernel's epilogue (decode_attention_tc.cuh): the block's warps end their
// loops each with its own online-softmax state (m, l, O) over its steps of the item, and here they
// merge them in a fixed order and store the item's output:
//   - (m, l) per head over the warps: the 8 lanes of a column c reduce warps g, g + 8 by shuffles;
//   - each warp's O, scaled by 2^(m_w - m), into its [8][D] block of the reduction area (red_swz),
//     then a flat sum over the warps, one float2 of a row per thread, divided by l;
//   - the rows, with the item's lse: to the output (an item that is its sequence's only one), to
//     partial_out / partial_lse for the split merge (decode_reduce.cu), or, in the cluster pair build
//     (TcItems::kPair), half of them into the partner block's inbox and merged there
//     (decode_pair_merge.cuh).
// The order of every sum is fixed by warp and lane indices, never by timing, so repeated calls give
// the same bits (CudaDecodeMerge.RepeatedCallsAreBitIdentical).
#include <cstdint>

#include "backend/cuda/decode_attention.cuh"  // store_item_rows
#include "backend/cuda/decode_kernel_args.h"
#include "backend/cuda/decode_pair_merge.cuh"
#include "backend/cuda/decode_tc_traits.cuh"  // red_swz

namespace nibble::cuda::detail {

// Which output a block writes: its item of sequence `seq` (one of the sequence's n_items), query
// heads q_head0 .. q_head0 + n_heads - 1, and (kPair) its rank in the cluster.
struct TcOutputIds {
  int seq, item, n_items, q_head0, n_heads, rank;
};

// Called by every thread of the block once its warp's loop and copies are done. State of this lane:
// o = O^T accumulators (pv_pair layout: o[m][0..1] dim g·D/8 + 2m of heads 2c, 2c + 1, o[m][2..3] the
// next dim), m_run / l_run = the running max (scores' unit: times score_mult for log2) and this lane's
// share of the sum for its heads (kOneQ: heads 2c + j; else head g). Shared memory: m_w, l_w [kWarps][8]
// f32; work = the stages, free now, reused as the reduction [kWarps][8][D] f32; rows = [8][D] f32, the
// merged rows in natural layout (Q's region); inbox (kPair) = kPairInboxBytes past the geometry.
template <typename T, int D, int kWarps, bool kOneQ, bool kPair, int kOT, int kLaneHeads>
__device__ __forceinline__ void tc_epilogue(const DecodeKernelArgs& a, const TcOutputIds& ids, const float (&o)[kOT][4],
                                            const float (&m_run)[kLaneHeads], float (&l_run)[kLaneHeads],
                                            float score_mult, float* m_w, float* l_w, uint8_t* work, float* rows,
                                            float* inbox) {
  constexpr int kThreads = 32 * kWarps;
  // The lanes sharing a head's scores differ in lane bits [log2 kFirstLane, log2 kLastLane): the 8
  // lanes of column c (kOneQ) or the 4 lanes of row g.
  constexpr int kFirstLane = kOneQ ? 4 : 1, kLastLane = kOneQ ? 32 : 4;
  static_assert(kLaneHeads == (kOneQ ? 2 : 1), "softmax states per lane");
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, c = lane % 4;
  const int seq = ids.seq, item = ids.item, q_head0 = ids.q_head0, n_heads = ids.n_heads, rank = ids.rank;
  // Tried and reverted (H200, 2026-12-03, PERFORMANCE.md thirty-first round): the warps' states merged
  // in a binary tree as the warps end (the first at each node leaves its state in its ring, the second
  // merges it and goes on; no block barrier, the root warp writes the rows). One warp's chain of
  // log2(kWarps) merges came out slower than every warp's share of the flat sum below: graph replays,
  // nvfp4 us, 8 x 32K 77.6-77.9 -> 78.2-78.6, 1 x 1K 7.2 -> 8.4 (bf16 8.6 -> 9.0, fp8 8.2 -> 8.7).
#pragma unroll
  for (int j = 0; j < kLaneHeads; ++j) {
#pragma unroll
    for (int off = kFirstLane; off < kLastLane; off *= 2) l_run[j] += __shfl_xor_sync(0xFFFFFFFFu, l_run[j], off);
    if (kOneQ ? g == 0 : c == 0) {
      const int h = kOneQ ? 2 * c + j : g;
      m_w[warp * 8 + h] = m_run[j] * score_mult;
      l_w[warp * 8 + h] = l_run[j];
    }
  }
  __syncthreads();  // every warp is done with its stages (and Q's): the reduction may overwrite them
  // The merged (m, l) of this lane's heads 2c, 2c + 1, and this warp's scale for them: the 8 lanes of
  // column c split the warps' states (lane g takes warps g, g + 8) and reduce with shuffles over g.
  // (Every lane walking all warps' states, as before, cost a 16-warp block 16 times the loads and
  // exp2s; PERFORMANCE.md, twenty-first round.)
  float m_head[2], l_head[2], sc[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int h = 2 * c + k;
    constexpr int kPerLane = (kWarps + 7) / 8;
    float mw[kPerLane], m_all = -INFINITY, l_all = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      mw[j] = g + 8 * j < kWarps ? m_w[(g + 8 * j) * 8 + h] : -INFINITY;
      m_all = fmaxf(m_all, mw[j]);
    }
#pragma unroll
    for (int off = 4; off < 32; off *= 2) m_all = fmaxf(m_all, __shfl_xor_sync(0xFFFFFFFFu, m_all, off));
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      l_all += mw[j] == -INFINITY ? 0.0f : l_w[(g + 8 * j) * 8 + h] * exp2f(mw[j] - m_all);
    }
#pragma unroll
    for (int off = 4; off < 32; off *= 2) l_all += __shfl_xor_sync(0xFFFFFFFFu, l_all, off);
    m_head[k] = m_all, l_head[k] = l_all;
    const float m_mine = m_w[warp * 8 + h];
    sc[k] = m_mine == -INFINITY ? 0.0f : exp2f(m_mine - m_all);
  }
  // Each warp's scaled O into its [8][D] block of `red` (red_swz layout; o[m][0..1]: dim g·D/8 + 2m,
  // heads 2c, 2c+1; o[m][2..3]: dim g·D/8 + 2m + 1), as 64-bit stores of dim pairs. All 8 heads,
  // even where the block has fewer: stores and sums of the n_heads heads only (half the shared-memory
  // traffic at GQA 4) gained nothing at 8 x 32K and cost every format 0.2-0.3 us at 1 x 1K (the row
  // loop's bound no longer a constant, its loads no longer all in flight; H200, 2026-12-03, nvfp4
  // 7.3 -> 7.6 us, bf16 8.6 -> 8.8). Also tried and reverted (H200, 2026-12-03, PERFORMANCE.md
  // thirty-second round): each warp's O stored unscaled into its own ring as soon as its loop ended,
  // before the first barrier, its scales beside it and the products formed in the sum below (the same
  // bits). Equal or slower: graph replays, nvfp4 us, 8 x 32K 77.7-78.4 -> 78.0-78.3, 17 x 32K (the
  // units build, 8 bytes more spilled) 166.8-167.7 -> 168.0-168.4, 1 x 1K 7.2 -> 7.1. A block's warps
  // end their loops together, so the stores had nothing to overlap.
  float* red = reinterpret_cast<float*>(work);  // [kWarps][8][D]
  {
    float* mine = red + warp * 8 * D;
#pragma unroll
    for (int m = 0; m < kOT; ++m) {
      const int d = g * (D / 8) + 2 * m;
      *reinterpret_cast<float2*>(mine + red_swz<D>(2 * c, d)) = make_float2(o[m][0] * sc[0], o[m][2] * sc[0]);
      *reinterpret_cast<float2*>(mine + red_swz<D>(2 * c + 1, d)) = make_float2(o[m][1] * sc[1], o[m][3] * sc[1]);
    }
  }
  __syncthreads();
  // kPair: the rows of the partner's output heads go straight to its inbox (decode_pair_merge.cuh),
  // once the start's cluster barrier says it has started.
  float* far = nullptr;
  if constexpr (kPair) {
    cluster_wait_acquire();
    far = cooperative_groups::this_cluster().map_shared_rank(inbox, rank ^ 1);
  }
  for (int i = 2 * tid; i < 8 * D; i += 2 * kThreads) {
    const int h = i / D;  // warp-uniform
    const float l_all = __shfl_sync(0xFFFFFFFFu, (h & 1) ? l_head[1] : l_head[0], h >> 1);  // lane (0, h / 2)
    const int at = red_swz<D>(h, i % D);
    float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float2 x = *reinterpret_cast<const float2*>(red + w * 8 * D + at);
      sum.x += x.x, sum.y += x.y;
    }
    const float2 row = make_float2(sum.x / l_all * T::kVUnitMult, sum.y / l_all * T::kVUnitMult);
    if constexpr (kPair) {
      float* home = pair_row_home<D>(rows, far, h, rank, n_heads);
      if (home != nullptr) *reinterpret_cast<float2*>(home + i % D) = row;
    } else {
      *reinterpret_cast<float2*>(rows + i) = row;
    }
  }
  if constexpr (kPair) {
    // The item's lse per head, here and in the partner's inbox (m_w is free: its last reads were
    // before the two barriers above).
    float* lse = m_w;  // [8]
    if (warp == 0) {  // lane h < 8: head h's lse, from lane (0, h / 2)
      const int from = (lane >> 1) & 3;
      const float m0 = __shfl_sync(0xFFFFFFFFu, m_head[0], from), m1 = __shfl_sync(0xFFFFFFFFu, m_head[1], from);
      const float l0 = __shfl_sync(0xFFFFFFFFu, l_head[0], from), l1 = __shfl_sync(0xFFFFFFFFu, l_head[1], from);
      if (lane < 8) {
        const float x = (lane & 1) ? m1 + log2f(l1) : m0 + log2f(l0);
        lse[lane] = x;
        far[kMaxGroupPerBlock / 2 * D + lane] = x;
      }
    }
    // (pair_merge_store's cluster barrier orders these writes, here and there, for both blocks.)
    pair_merge_store<D, kThreads>(a, rows, lse, inbox, rank, seq, q_head0, n_heads);
    return;
  }
  __syncthreads();

  store_item_rows<D, 8, kThreads>(a, rows, ids.n_items == 1, seq, item, q_head0, n_heads);
  if (ids.n_items != 1 && warp == 0) {  // the partial's lse: lane h < n_heads, head h's, from lane (0, h / 2)
    const int from = (lane >> 1) & 3;
    const float m0 = __shfl_sync(0xFFFFFFFFu, m_head[0], from), m1 = __shfl_sync(0xFFFFFFFFu, m_head[1], from);
    const float l0 = __shfl_sync(0xFFFFFFFFu, l_head[0], from), l1 = __shfl_sync(0xFFFFFFFFu, l_head[1], from);
    if (lane < n_heads) {
      a.partial_lse[static_cast<int64_t>(item) * a.num_q_heads + q_head0 + lane] =
          (lane & 1) ? m1 + log2f(l1) : m0 + log2f(l0);
    }
  }
}

}  // namespace nibble::cuda::detail
