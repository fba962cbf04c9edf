// Tensor-core decode attention kernels for the fp8 cache (K FP8, V FP8): every head_dim.
#include "backend/cuda/decode_attention_launch.cuh"

namespace nibble::cuda::detail {

template void launch_decode_attention_tc<quant::ElemFormat::kFP8, quant::ElemFormat::kFP8>(
    const DecodeKernelArgs&, int, int, bool, int, bool, TcItems, int, dim3, cudaStream_t);
template int decode_tc_pair_clusters<quant::ElemFormat::kFP8, quant::ElemFormat::kFP8>(int, int, bool);

}  // namespace nibble::cuda::detail
