// Launch of the warpgroup extend kernel (extend_attention_wgmma.cuh): the KV formats are the
// template dispatch, the GQA group picks the query heads per block. Built into sm_90a builds; the
// launcher (extend_attention.cu) calls it only where wgmma_runs().
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/extend_attention.h"
#if NIBBLE_CUDA_SM90A
#include "backend/cuda/extend_attention_wgmma.cuh"
#endif

namespace nibble::cuda::detail {

#if NIBBLE_CUDA_SM90A
namespace {

template <quant::ElemFormat kK, quant::ElemFormat kV>
void launch_formats(const ExtendAttentionParams& p, cudaStream_t stream) {
  using T = WgmmaExtendTile<kK, kV>;
  auto* kernel = extend_attention_wgmma_kernel<kK, kV>;
  static const cudaError_t attribute_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
  NIBBLE_CUDA_CHECK(attribute_status);
  // Two heads of the group per block where the group is even (every prefix tile feeds 2 x 64 rows
  // either way), else 128 tokens of one head.
  const int heads_per_block = (p.num_q_heads / p.num_kv_heads) % 2 == 0 ? 2 : 1;
  const int64_t rows_q = 128 / heads_per_block;
  const int64_t max_new = p.max_new_tokens > 0 ? p.max_new_tokens : p.total_tokens;
  const dim3 grid(static_cast<unsigned>(p.num_q_heads / heads_per_block), static_cast<unsigned>(p.num_seqs),
                  static_cast<unsigned>((max_new + rows_q - 1) / rows_q));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p, static_cast<const __nv_bfloat16*>(p.kv_workspace),
                                                       heads_per_block);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

}  // namespace
#endif

void launch_extend_wgmma(const ExtendAttentionParams& p, cudaStream_t stream) {
#if NIBBLE_CUDA_SM90A
  using quant::ElemFormat;
  const ElemFormat k = p.k_layout.format, v = p.v_layout.format;
  if (k == ElemFormat::kFP8 && v == ElemFormat::kFP8) return launch_formats<ElemFormat::kFP8, ElemFormat::kFP8>(p, stream);
  if (k == ElemFormat::kNVFP4 && v == ElemFormat::kNVFP4) {
    return launch_formats<ElemFormat::kNVFP4, ElemFormat::kNVFP4>(p, stream);
  }
  if (k == ElemFormat::kFP8 && v == ElemFormat::kNVFP4) return launch_formats<ElemFormat::kFP8, ElemFormat::kNVFP4>(p, stream);
  if (k == ElemFormat::kNVFP4 && v == ElemFormat::kFP8) return launch_formats<ElemFormat::kNVFP4, ElemFormat::kFP8>(p, stream);
  throw_unsupported("extend attention (the wgmma kernel)", "K and V formats", "fp8 or nvfp4 each",
                    static_cast<long long>(k));
#else
  (void)p, (void)stream;
  throw_unsupported("extend attention", "kernel (the wgmma kernel)", "a build for sm_90a", 2);
#endif
}

}  // namespace nibble::cuda::detail
