// Launch of the tensor-core extend kernel (validation: extend_attention.cpp). head_dim is the one
// runtime -> template dispatch; the GQA group picks heads_per_block at run time.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_caps.h"
#include "backend/cuda/extend_attention_tc.cuh"
#include "backend/cuda/extend_merge.cuh"
#include "backend/cuda/extend_split.h"
#include "backend/cuda/prefill_attention.h"  // detail::convert_kv_to_bf16

#include <algorithm>
#include <numeric>
#include <type_traits>

namespace nibble::cuda::detail {

void check_extend_split(int splits, int64_t work_blocks, int64_t tiles, int64_t merge_groups, int64_t record_bytes,
                        int64_t records, int64_t workspace_bytes);  // extend_attention.cpp
void launch_extend_wgmma(const ExtendAttentionParams& p, cudaStream_t stream);  // extend_attention_wgmma.cu

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

// A partial record of tile T at head_dim D (extend_merge.cuh), in bytes.
template <int D, typename T>
constexpr int64_t record_bytes() {
  return int64_t{T::kRowsQ} * (D + 2) * 4;
}

// Records of the most blocks of any prefix mode resident at once on num_sms SMs, in bytes.
template <int D>
int64_t split_workspace_bytes(int num_sms) {
  int64_t most = 0;
  for (const auto [bytes, per_sm] :
       {std::pair{record_bytes<D, typename ExtendTileFor<D, ExtendPrefix::kStaged>::type>(),
                  ExtendTileFor<D, ExtendPrefix::kStaged>::type::kMinBlocks},
        std::pair{record_bytes<D, typename ExtendTileFor<D, ExtendPrefix::kBf16Direct>::type>(),
                  ExtendTileFor<D, ExtendPrefix::kBf16Direct>::type::kMinBlocks},
        std::pair{record_bytes<D, typename ExtendTileFor<D, ExtendPrefix::kSingleStage>::type>(),
                  ExtendTileFor<D, ExtendPrefix::kSingleStage>::type::kMinBlocks}}) {
    most = std::max(most, bytes * per_sm * num_sms);
  }
  return most;
}

int device_sms() {
  int device = 0, sms = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
  NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// A call's grid: query heads per block, query tiles per sequence, prefix parts.
struct ExtendLaunchShape {
  int heads_per_block;
  int64_t tiles;
  int splits;
};

template <int D, ExtendPrefix kPrefix>
ExtendLaunchShape launch_shape(const ExtendAttentionParams& p) {
  using T = typename ExtendTileFor<D, kPrefix>::type;
  // Query heads per block: as many of the GQA group as the warps allow (a divisor of both).
  const int group = static_cast<int>(p.num_q_heads / p.num_kv_heads);
  const int heads_per_block = std::gcd(group, T::kWarps);
  const int rows_q = T::kRowsWarp * (T::kWarps / heads_per_block);
  const int64_t max_new = p.max_new_tokens > 0 ? p.max_new_tokens : p.total_tokens;
  const int64_t head_groups = p.num_q_heads / heads_per_block;
  const int64_t tiles = (max_new + rows_q - 1) / rows_q;
  // The prefix split (extend_split.h): the blocks with work, bounded from the hints.
  const int64_t seqs = p.extend_seqs > 0 ? p.extend_seqs : p.num_seqs;
  const int64_t tokens = p.extend_tokens > 0 ? p.extend_tokens : p.total_tokens;
  const int64_t work_tiles = std::min(p.num_seqs * tiles, tokens / rows_q + seqs);
  const int64_t records = p.split_workspace ? p.split_workspace_bytes / record_bytes<D, T>() : 0;
  int splits = p.prefix_splits;
  if (splits == 0) {
    const int sms = p.num_sms > 0 ? p.num_sms : device_sms();
    splits = extend_prefix_splits({.work_blocks = head_groups * work_tiles,
                                   .max_prefix_tiles = (p.max_prefix_tokens + T::kKeys - 1) / T::kKeys,
                                   .slots = int64_t{sms} * T::kMinBlocks,
                                   .records = records});
  }
  check_extend_split(splits, head_groups * work_tiles, tiles, T::kRowsQ / kExtendMergeWarps, record_bytes<D, T>(),
                     records, p.split_workspace_bytes);
  return {heads_per_block, tiles, splits};
}

template <int D, ExtendPrefix kPrefix>
void launch(const ExtendAttentionParams& p, cudaStream_t stream) {
  using T = typename ExtendTileFor<D, kPrefix>::type;
  using S = ExtendSmem<D, T, kPrefix>;
  static const cudaError_t attribute_status = [] {
    const cudaError_t whole = cudaFuncSetAttribute(extend_attention_kernel<D, T, kPrefix, false>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, S::kBytes);
    const cudaError_t split = cudaFuncSetAttribute(extend_attention_kernel<D, T, kPrefix, true>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, S::kBytes);
    return whole != cudaSuccess ? whole : split;
  }();
  NIBBLE_CUDA_CHECK(attribute_status);
  const ExtendLaunchShape shape = launch_shape<D, kPrefix>(p);
  if constexpr (D == 128 && kPrefix == ExtendPrefix::kStaged) {
    // The warpgroup kernel takes unsplit calls of fp8 / nvfp4 / k8v4 caches where it runs
    // (extend_attention_wgmma.cuh). H200, 2026-12-04, bench_prefill_attention --extend, d128 32 / 8
    // heads, TFLOP/s wgmma / mma.sync: 8K + 2K fp8 333 / 287, nvfp4 350 / 274, k8v4 352 / 279;
    // 32K + 8K fp8 350 / 295, nvfp4 366 / 282, k8v4 370 / 288 (PERFORMANCE.md, thirty-eighth round).
    if (p.kernel == kExtendKernelWgmma || (p.kernel == kExtendKernelDefault && shape.splits == 1 && wgmma_runs())) {
      if (!device_is_sm90()) throw_unsupported("extend attention", "kernel (the wgmma kernel)", "a 9.0 device", p.kernel);
      return launch_extend_wgmma(p, stream);
    }
  }
  auto* kernel = shape.splits > 1 ? extend_attention_kernel<D, T, kPrefix, true>
                                  : extend_attention_kernel<D, T, kPrefix, false>;
  const dim3 grid(static_cast<unsigned>(p.num_q_heads / shape.heads_per_block), static_cast<unsigned>(p.num_seqs),
                  static_cast<unsigned>(shape.tiles * shape.splits));
  kernel<<<grid, T::kThreads, S::kBytes, stream>>>(p, static_cast<const __nv_bfloat16*>(p.kv_workspace),
                                                    shape.heads_per_block, shape.splits);
  NIBBLE_CUDA_CHECK_LAUNCH();
  if (shape.splits > 1) {
    const dim3 merge_grid(grid.x, grid.y, static_cast<unsigned>(shape.tiles * (T::kRowsQ / kExtendMergeWarps)));
    extend_merge_kernel<D, T><<<merge_grid, kExtendMergeThreads, 0, stream>>>(p, shape.heads_per_block, shape.splits);
    NIBBLE_CUDA_CHECK_LAUNCH();
  }
}

// The prefix mode per call (extend_attention_tc.cuh, ExtendPrefix): a bf16 cache copies its rows
// straight into the bf16 stages, fp8 / nvfp4 / k8v4 run the staged loop, the f32 cache the
// single-stage one. (Until the thirty-fourth round head_dim 256 took the single-stage loop for
// every format.) `run` is called on that mode: run.template operator()<kPrefix>().
template <typename Run>
auto with_prefix_mode(const ExtendAttentionParams& p, Run&& run) {
  using quant::ElemFormat;
  const auto narrow = [](ElemFormat f) { return f == ElemFormat::kFP8 || f == ElemFormat::kNVFP4; };
  if (p.k_layout.format == ElemFormat::kBF16 && p.v_layout.format == ElemFormat::kBF16) {
    return run.template operator()<ExtendPrefix::kBf16Direct>();
  } else if (narrow(p.k_layout.format) && narrow(p.v_layout.format)) {
    return run.template operator()<ExtendPrefix::kStaged>();
  } else {
    return run.template operator()<ExtendPrefix::kSingleStage>();
  }
}

template <int D>
void launch(const ExtendAttentionParams& p, cudaStream_t stream) {
  with_prefix_mode(p, [&]<ExtendPrefix kPrefix>() { launch<D, kPrefix>(p, stream); });
}

template <int D>
int splits_of(const ExtendAttentionParams& p) {
  return with_prefix_mode(p, [&]<ExtendPrefix kPrefix>() { return launch_shape<D, kPrefix>(p).splits; });
}

}  // namespace

int extend_attention_splits(const ExtendAttentionParams& p) {
  switch (p.head_dim) {
    case 64: return splits_of<64>(p);
    case 128: return splits_of<128>(p);
    case 256: return splits_of<256>(p);
    default: throw_unsupported("extend attention", "head_dim", "64, 128, 256", p.head_dim);
  }
}

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

namespace nibble::cuda {

int64_t extend_split_workspace_bytes(int64_t head_dim, int num_sms) {
  switch (head_dim) {
    case 64: return detail::split_workspace_bytes<64>(num_sms);
    case 128: return detail::split_workspace_bytes<128>(num_sms);
    case 256: return detail::split_workspace_bytes<256>(num_sms);
    default: return 0;
  }
}

}  // namespace nibble::cuda
