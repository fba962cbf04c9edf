// Launch of the chunk-attention kernel (validation: prefill_attention.cpp). head_dim is the one
// runtime -> template dispatch, here.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/prefill_attention.cuh"

namespace nibble::cuda::detail {

namespace {

template <int D>
void launch(const ChunkAttentionParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_work), static_cast<unsigned>(p.num_q_heads));
  chunk_attention_kernel<D><<<grid, ChunkTile<D>::kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_chunk_attention(const ChunkAttentionParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 8: launch<8>(p, stream); break;
    case 16: launch<16>(p, stream); break;
    case 32: launch<32>(p, stream); break;
    case 64: launch<64>(p, stream); break;
    case 96: launch<96>(p, stream); break;
    case 128: launch<128>(p, stream); break;
    case 256: launch<256>(p, stream); break;
    default: throw_unsupported("chunk attention", "head_dim", "8, 16, 32, 64, 96, 128, 256", p.head_dim);
  }
}

}  // namespace nibble::cuda::detail
