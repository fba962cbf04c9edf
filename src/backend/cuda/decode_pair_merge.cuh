#pragma once
// The split merge of a sequence's two items inside their thread block cluster (TcItems::kPair):
// the long-item builds of decode_attention_tc.cuh, where a plan gives every sequence exactly two
// items (8 x 32K and 8 x 128K at 16 warps per block, for instance). The two blocks of one
// (sequence, head chunk) run as a cluster of two; each ends with its item's output rows and lse in
// its own shared memory, and they merge them through distributed shared memory, each block the
// output rows of half the heads: no partial rows in global memory, no merge kernel, no kernel
// boundary between the attention and its output.
//
//   out[h] = g_v · (2^(lse_0 - m) · rows_0[h] + 2^(lse_1 - m) · rows_1[h]) / (2^(lse_0 - m) + 2^(lse_1 - m)),
//   m = max(lse_0, lse_1), rotated back where the cache is rotated,
//
// the merge kernel's formula (decode_reduce.cu) for two items, item 0 (rank 0) first in both blocks.
//
// Each block's rows reach the other as they are made: the block's last sum over its warps writes the
// rows of its own output heads into its own shared memory and those of the partner's heads, with its
// lse, into the partner's inbox through distributed shared memory (pair_row_home). After one cluster
// barrier (release / acquire) each block merges from its own shared memory only, and may exit as soon
// as it is done. The first form read the partner's rows after the barrier and needed a second one
// before exit, so that neither block's memory went away while the other read it: H200, 2026-12-03,
// graph replays, nvfp4 us, reads -> pushed rows, 8 x 32K GQA 4 78.0-78.3 -> 77.6 (three runs each),
// GQA 8 78.3-78.7 -> 77.8-77.9, 8 x 16K 43.4-43.9 -> 43.0-43.4 (PERFORMANCE.md, thirty-first round).
//
// Synchronisation: every thread arrives (relaxed) on a cluster barrier at the kernel's start and
// waits on it before the epilogue's remote writes (the partner has started, so its shared memory may
// be written); the writes, then a release arrive and an acquire wait, order them before the merge.
// A block leaves no access to the other's memory after that barrier, so nothing holds it longer.
#include <cooperative_groups.h>

#include "backend/cuda/decode_attention.cuh"  // hadamard_rows_smem
#include "backend/cuda/decode_kernel_args.h"

namespace nibble::cuda::detail {

__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_acquire() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// A block's inbox: the partner's rows of this block's output heads [kMaxGroupPerBlock / 2][D] f32, then
// the partner's lse [kMaxGroupPerBlock] f32. It lies past the block's other shared memory.
template <int D>
inline constexpr int kPairInboxBytes = (kMaxGroupPerBlock / 2 * D + kMaxGroupPerBlock) * 4;

// The output heads of rank `rank`: the first half (rank 0) or the rest (rank 1); a lone head goes to rank 0.
struct PairHeads {
  int h0, count;
};
__device__ __forceinline__ PairHeads pair_heads(int rank, int n_heads) {
  const int half = (n_heads + 1) / 2;
  const int h0 = rank * half;
  return {h0, max(0, min(n_heads, h0 + half) - h0)};
}

// Where this block's row of head h goes: into its own rows [8][D] (one of its output heads), into the
// partner's inbox (`far`, one of the partner's), or nowhere (nullptr: a head past n_heads).
template <int D>
__device__ __forceinline__ float* pair_row_home(float* rows, float* far, int h, int rank, int n_heads) {
  const PairHeads mine = pair_heads(rank, n_heads), theirs = pair_heads(rank ^ 1, n_heads);
  if (h >= mine.h0 && h < mine.h0 + mine.count) return rows + h * D;
  if (h >= theirs.h0 && h < theirs.h0 + theirs.count) return far + (h - theirs.h0) * D;
  return nullptr;
}

// Every thread of both blocks calls it, once this block's rows of its own heads and its lse are
// written, and its rows of the partner's heads and its lse have been stored to the partner's inbox. rank: the block's rank in its cluster (0: the
// sequence's first item). rows is overwritten (this block's heads only).
template <int D, int kThreads>
__device__ void pair_merge_store(const DecodeKernelArgs& a, float* rows, const float* lse, const float* inbox, int rank,
                                 int seq, int q_head0, int n_heads) {
  cluster_arrive_release();
  cluster_wait_acquire();  // both items' rows of this block's heads and both lse are in its shared memory
  const PairHeads mine = pair_heads(rank, n_heads);
  const float* inbox_lse = inbox + kMaxGroupPerBlock / 2 * D;
  const float out_mult = a.v_global_scale * (a.rotate ? rsqrtf(static_cast<float>(D)) : 1.0f);
  float* out = a.out + (static_cast<int64_t>(seq) * a.num_q_heads + q_head0) * D;
  for (int i = mine.h0 * D + static_cast<int>(threadIdx.x); i < (mine.h0 + mine.count) * D; i += kThreads) {
    const int h = i / D;
    const float mine_x = rows[i], theirs_x = inbox[i - mine.h0 * D];
    const float l0 = rank == 0 ? lse[h] : inbox_lse[h], l1 = rank == 0 ? inbox_lse[h] : lse[h];
    const float r0 = rank == 0 ? mine_x : theirs_x, r1 = rank == 0 ? theirs_x : mine_x;
    const float m = fmaxf(l0, l1);
    const float w0 = exp2f(l0 - m), w1 = exp2f(l1 - m);
    const float x = (w0 * r0 + w1 * r1) / (w0 + w1);
    if (a.rotate) {
      rows[i] = x;
    } else {
      out[i] = x * out_mult;
    }
  }
  if (a.rotate) {
    __syncthreads();
    hadamard_rows_smem(rows + mine.h0 * D, mine.count, D);
    for (int i = mine.h0 * D + static_cast<int>(threadIdx.x); i < (mine.h0 + mine.count) * D; i += kThreads) {
      out[i] = rows[i] * out_mult;
    }
  }
}

}  // namespace nibble::cuda::detail
