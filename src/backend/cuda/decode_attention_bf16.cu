// Tensor-core decode attention kernels for the bf16 cache (K BF16, V BF16): every head_dim.
#include "backend/cuda/decode_attention_launch.cuh"

namespace nibble::cuda::detail {

template void launch_decode_attention_tc<quant::ElemFormat::kBF16, quant::ElemFormat::kBF16>(
    const DecodeKernelArgs&, int, int, bool, int, bool, TcItems, int, dim3, cudaStream_t);
template int decode_tc_pair_clusters<quant::ElemFormat::kBF16, quant::ElemFormat::kBF16>(int, int, bool);

}  // namespace nibble::cuda::detail
