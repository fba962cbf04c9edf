// Launch of the tensor-core extend kernel (validation: extend_attention.cpp). head_dim is the one
// runtime -> template dispatch; the GQA group picks heads_per_block at run time.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/extend_attention_tc.cuh"
#include "backend/cuda/prefill_attention.h"  // detail::convert_kv_to_bf16

#include <numeric>
#include <type_traits>

namespace nibble::cuda::detail {

namespace {

// The tile per head_dim and prefix mode: the prefill kernel's default tiles with the lazy-rescale
// softmax (the extend kernel's phase-dependent softmax scale needs its log2-domain running max),
// except the staged builds (fp8 / nvfp4 / k8v4) at head_dim 64 and 256, which take 8 warps — twice
// the query rows per dequantized key tile, one block per SM, the conversion staggered — and at 256
// Q in shared memory. H200, 2026-12-03, bench_prefill_attention --extend, TFLOP/s at 32K + 8K, the
// 4-warp tile -> 8 warps: d256 (from the single-stage loop) nvfp4 162.7 -> 202.3, fp8 185.7 ->
// 208.4, k8v4 176.9 -> 205.1 (+6-27% over the four shapes); d64 (staged both) nvfp4 201.3 -> 217.5,
// fp8 211.9 -> 226.2, k8v4 206.3 -> 222.5 (+4-9%; PERFORMANCE.md, thirty-fourth round). The 8-warp
// d256 tile ran a bf16 prefix 7% slower (269 -> 250): the other modes keep the 4-warp tiles.
template <int D, ExtendPrefix kPrefix>
struct ExtendTileFor;
template <ExtendPrefix kPrefix>
struct ExtendTileFor<64, kPrefix> {
  using type = std::conditional_t<kPrefix == ExtendPrefix::kStaged,
                                  PrefillTile<64, 8, 2, 64, 1, false, 2, PrefillSchedule::kLazyRescale>,
                                  PrefillTile<64, 4, 2, 64, 2, false, 2, PrefillSchedule::kLazyRescale>>;
};
template <ExtendPrefix kPrefix>
struct ExtendTileFor<128, kPrefix> {
  using type = PrefillTile<128, 8, 2, 64, 1, true, 2, PrefillSchedule::kLazyRescale>;
};
template <ExtendPrefix kPrefix>
struct ExtendTileFor<256, kPrefix> {
  using type = std::conditional_t<kPrefix == ExtendPrefix::kStaged,
                                  PrefillTile<256, 8, 1, 32, 1, true, 2, PrefillSchedule::kLazyRescale>,
                                  PrefillTile<256, 4, 1, 32, 1, false, 2, PrefillSchedule::kLazyRescale>>;
};

template <int D, ExtendPrefix kPrefix>
void launch(const ExtendAttentionParams& p, cudaStream_t stream) {
  using T = typename ExtendTileFor<D, kPrefix>::type;
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
// straight into the bf16 stages, fp8 / nvfp4 / k8v4 run the staged loop, the f32 cache the
// single-stage one. (Until the thirty-fourth round head_dim 256 took the single-stage loop for
// every format.)
template <int D>
void launch(const ExtendAttentionParams& p, cudaStream_t stream) {
  using quant::ElemFormat;
  const auto narrow = [](ElemFormat f) { return f == ElemFormat::kFP8 || f == ElemFormat::kNVFP4; };
  if (p.k_layout.format == ElemFormat::kBF16 && p.v_layout.format == ElemFormat::kBF16) {
    launch<D, ExtendPrefix::kBf16Direct>(p, stream);
  } else if (narrow(p.k_layout.format) && narrow(p.v_layout.format)) {
    launch<D, ExtendPrefix::kStaged>(p, stream);
  } else {
    launch<D, ExtendPrefix::kSingleStage>(p, stream);
  }
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
