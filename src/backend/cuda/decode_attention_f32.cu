// Decode attention kernels for the f32 cache (K F32, V F32): every head_dim × group tile.
#include "backend/cuda/decode_attention_launch.cuh"

namespace nibble::cuda::detail {

template void launch_decode_attention<quant::ElemFormat::kF32, quant::ElemFormat::kF32>(const DecodeKernelArgs&, int,
                                                                                      int, dim3, cudaStream_t);

}  // namespace nibble::cuda::detail
