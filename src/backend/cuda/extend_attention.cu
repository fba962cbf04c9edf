// Launch of the tensor-core extend kernel (validation: extend_attention.cpp). head_dim is the one
// runtime -> template dispatch; the GQA group picks heads_per_block at run time.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/extend_attention_tc.cuh"
#include "backend/cuda/prefill_attention.h"  // detail::convert_kv_to_bf16

#include <numeric>

namespace nibble::cuda::detail {

namespace {

// The tile per head_dim: the prefill kernel's default tiles with the lazy-rescale softmax (the
// extend kernel's phase-dependent softmax scale needs its log2-domain running max), one bf16 K/V
// tile plus the raw staging buffer (ExtendSmem).
template <int D>
struct ExtendTileFor;
template <>
struct ExtendTileFor<64> {
  using type = PrefillTile<64, 4, 2, 64, 2, false, 2, PrefillSchedule::kLazyRescale>;
};
template <>
struct ExtendTileFor<128> {
  using type = PrefillTile<128, 8, 2, 64, 1, true, 2, PrefillSchedule::kLazyRescale>;
};
template <>
struct ExtendTileFor<256> {
  using type = PrefillTile<256, 4, 1, 32, 1, false, 2, PrefillSchedule::kLazyRescale>;
};

template <int D, ExtendPrefix kPrefix>
void launch(const ExtendAttentionParams& p, cudaStream_t stream) {
  using T = typename ExtendTileFor<D>::type;
  using S = ExtendSmem<D, T, kPrefix>;
  auto* kernel = extend_attention_kernel<D, T, kPrefix>;
  static const cudaError_t attribute_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kBytes);
  NIBBLE_CUDA_CHECK(attribute_status);
  // Query heads per block: as many of the GQA group as the warps allow (a divisor of both).
  const int group = static_cast<int>(p.num_q_heads / p.num_kv_heads);
  const int heads_per_block = std::gcd(group, T::kWarps);
  const int rows_q = T::kRowsWarp * (T::kWarps / heads_per_block);
  const int64_t max_new = p.max_new_tokens > 0 ? p.max_new_tokens : p.total_tokens;
  const dim3 grid(static_cast<unsigned>(p.num_q_heads / heads_per_block), static_cast<unsigned>(p.num_seqs),
                  static_cast<unsigned>((max_new + rows_q - 1) / rows_q));
  kernel<<<grid, T::kThreads, S::kBytes, stream>>>(p, static_cast<const __nv_bfloat16*>(p.kv_workspace),
                                                    heads_per_block);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

// The prefix mode per call (extend_attention_tc.cuh, ExtendPrefix): a bf16 cache copies its rows
// straight into the bf16 stages; fp8 / nvfp4 / k8v4 run the staged loop at head_dim <= 128, the
// single-stage one at 256 (staged measured 1-1.5% slower there); the f32 cache the single-stage one.
// (Until the thirty-fourth round head_dim 256 took the single-stage loop for bf16 too.)
template <int D>
void launch(const ExtendAttentionParams& p, cudaStream_t stream) {
  using quant::ElemFormat;
  const auto narrow = [](ElemFormat f) { return f == ElemFormat::kFP8 || f == ElemFormat::kNVFP4; };
  if (p.k_layout.format == ElemFormat::kBF16 && p.v_layout.format == ElemFormat::kBF16) {
    launch<D, ExtendPrefix::kBf16Direct>(p, stream);
    return;
  }
  if constexpr (D <= 128) {
    if (narrow(p.k_layout.format) && narrow(p.v_layout.format)) {
      launch<D, ExtendPrefix::kStaged>(p, stream);
      return;
    }
  }
  launch<D, ExtendPrefix::kSingleStage>(p, stream);
}

}  // namespace

void launch_extend_attention(const ExtendAttentionParams& p, cudaStream_t stream) {
  // The own tiles' bf16 copy of k and v (extend_attention_tc.cuh).
  if (!p.kv_workspace_filled) {
    convert_kv_to_bf16(p.k, p.v, p.kv_workspace, p.total_tokens * p.num_kv_heads * p.head_dim, stream);
  }
  switch (p.head_dim) {
    case 64: launch<64>(p, stream); break;
    case 128: launch<128>(p, stream); break;
    case 256: launch<256>(p, stream); break;
    default: throw_unsupported("extend attention", "head_dim", "64, 128, 256", p.head_dim);
  }
}

}  // namespace nibble::cuda::detail
