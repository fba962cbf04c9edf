// Tensor-core decode attention kernels for the nvfp4 cache (K NVFP4, V NVFP4): every head_dim.
#include "backend/cuda/decode_attention_launch.cuh"

namespace nibble::cuda::detail {

template void launch_decode_attention_tc<quant::ElemFormat::kNVFP4, quant::ElemFormat::kNVFP4>(
    const DecodeKernelArgs&, int, int, bool, int, bool, TcItems, int, dim3, cudaStream_t);
template int decode_tc_pair_clusters<quant::ElemFormat::kNVFP4, quant::ElemFormat::kNVFP4>(int, int, bool);

}  // namespace nibble::cuda::detail
