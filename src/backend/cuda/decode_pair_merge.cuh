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
// Synchronisation: a cluster barrier once both blocks' rows and lse are in shared memory (release /
// acquire: every thread's writes before it are visible to the other block after it); each block
// then reads its heads' rows of both items, arrives on a second barrier once those reads are done,
// and waits on it before it exits, so neither block's shared memory goes away while the other
// still reads it. The rotation and the stores run between the second barrier's arrive and wait.
#include <cooperative_groups.h>

#include "backend/cuda/decode_attention.cuh"  // hadamard_rows_smem
#include "backend/cuda/decode_kernel_args.h"

namespace nibble::cuda::detail {

__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_acquire() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Every thread of both blocks calls it, after its block's rows [8][D] f32 (the item's output for
// heads q_head0 .. q_head0 + n_heads - 1, normalized by its own l) and lse [8] f32 (log2-sum-exp of
// its scores per head) are in shared memory and the block has synchronized. rank: the block's rank
// in its cluster (0: the sequence's first item). rows is overwritten (this block's heads only).
template <int D, int kThreads>
__device__ void pair_merge_store(const DecodeKernelArgs& a, float* rows, const float* lse, int rank, int seq,
                                 int q_head0, int n_heads) {
  cluster_arrive_release();
  cluster_wait_acquire();  // both items' rows and lse are in their blocks' shared memory
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const float* rows_of[2];
  const float* lse_of[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rows_of[r] = r == rank ? rows : cluster.map_shared_rank(rows, r);
    lse_of[r] = r == rank ? lse : cluster.map_shared_rank(lse, r);
  }
  // This block's heads: the first half (rank 0) or the rest (rank 1); a lone head goes to rank 0.
  const int half = (n_heads + 1) / 2;
  const int h0 = rank * half;
  const int nh = max(0, min(n_heads, h0 + half) - h0);
  const float out_mult = a.v_global_scale * (a.rotate ? rsqrtf(static_cast<float>(D)) : 1.0f);
  float* out = a.out + (static_cast<int64_t>(seq) * a.num_q_heads + q_head0) * D;
  for (int i = h0 * D + static_cast<int>(threadIdx.x); i < (h0 + nh) * D; i += kThreads) {
    const int h = i / D;
    const float l0 = lse_of[0][h], l1 = lse_of[1][h];
    const float m = fmaxf(l0, l1);
    const float w0 = exp2f(l0 - m), w1 = exp2f(l1 - m);
    const float x = (w0 * rows_of[0][i] + w1 * rows_of[1][i]) / (w0 + w1);
    if (a.rotate) {
      rows[i] = x;  // this block's heads: the other block reads only its own
    } else {
      out[i] = x * out_mult;
    }
  }
  cluster_arrive_release();  // done with the other block's shared memory
  if (a.rotate) {
    __syncthreads();
    hadamard_rows_smem(rows + h0 * D, nh, D);
    for (int i = h0 * D + static_cast<int>(threadIdx.x); i < (h0 + nh) * D; i += kThreads) out[i] = rows[i] * out_mult;
  }
  cluster_wait_acquire();  // the other block is done with this one's: both may exit
}

}  // namespace nibble::cuda::detail
