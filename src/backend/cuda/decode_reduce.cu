// The split-KV merge of decode attention (launched by decode_attention.cpp).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.cuh"

namespace nibble::cuda::detail {

namespace {


// Merges a split sequence's partial outputs: out = g_v · Σ_i 2^(lse_i - m) o_i / Σ_i 2^(lse_i - m),
// rotated back when the cache is rotated. grid (num_seqs, num_q_heads), block head_dim threads.
__global__ void decode_reduce_kernel(DecodeKernelArgs a, int head_dim) {
  extern __shared__ float row[];  // [head_dim]
  const int seq = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  const int first = a.seq_work_offset[seq], last = a.seq_work_offset[seq + 1];
  if (last - first <= 1) return;  // written directly by the decode kernel (uniform per block)
  float m = -INFINITY;
  for (int w = first; w < last; ++w) m = fmaxf(m, a.partial_lse[static_cast<int64_t>(w) * a.num_q_heads + head]);
  float sum = 0.0f, weight_sum = 0.0f;
  for (int w = first; w < last; ++w) {
    const float weight = exp2f(a.partial_lse[static_cast<int64_t>(w) * a.num_q_heads + head] - m);
    sum += weight * a.partial_out[(static_cast<int64_t>(w) * a.num_q_heads + head) * head_dim + d];
    weight_sum += weight;
  }
  row[d] = sum / weight_sum;
  __syncthreads();
  if (a.rotate) hadamard_rows_smem(row, 1, head_dim);
  const float out_mult = a.v_global_scale * (a.rotate ? rsqrtf(static_cast<float>(head_dim)) : 1.0f);
  a.out[(static_cast<int64_t>(seq) * a.num_q_heads + head) * head_dim + d] = row[d] * out_mult;
}

}  // namespace

void launch_decode_reduce(const DecodeKernelArgs& args, int num_seqs, int head_dim, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(num_seqs), static_cast<unsigned>(args.num_q_heads));
  decode_reduce_kernel<<<grid, head_dim, head_dim * sizeof(float), stream>>>(args, head_dim);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

}  // namespace nibble::cuda::detail
