#pragma once
// The write path for head dims the fused kernel (kv_write.h: 64, 128, 256) does not take, e.g.
// stories260k's 8: one thread per (token, KV head, K or V) runs the CPU reference's own code
// (quant::hadamard_inplace, quant::quantize_head_vector, or quant::nvfp4_quantize_block_4over6 per
// nvfp4 block under the 4-over-6 rule) on a local copy of the head vector. Built
// with --fmad=false like kv_write.cu, so the stored bytes equal the CPU backend's. Slow (local
// memory, uncoalesced), but only small models take it.
#include <cuda_runtime.h>

#include "backend/cuda/kv_write.h"

namespace nibble::cuda {

inline constexpr int64_t kGenericKvWriteMaxHeadDim = 256;

// Same parameters and preconditions as kv_write() (the caller validates the layouts); input f32.
// Throws nibble::Error for head_dim outside [1, 256] or a bf16 input.
void generic_kv_write(const KvWriteParams& params, cudaStream_t stream);

}  // namespace nibble::cuda
