// Host entry point of paged decode attention (compiled by the C++ compiler): validate, pick the kernel for the format pair,
// head_dim and group tile, launch it, then the split-KV reduce when the plan splits a sequence.
#include "backend/cuda/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_kernel_args.h"
#include "common/error.h"

namespace nibble::cuda {



int64_t decode_group_chunks(int64_t num_q_heads, int64_t num_kv_heads) {
  NIBBLE_CHECK(num_kv_heads > 0 && num_q_heads > 0 && num_q_heads % num_kv_heads == 0,
               "decode attention: num_q_heads ({}) must be a positive multiple of num_kv_heads ({})", num_q_heads,
               num_kv_heads);
  const int64_t group = num_q_heads / num_kv_heads;
  return (group + detail::kMaxGroupPerBlock - 1) / detail::kMaxGroupPerBlock;
}

// The blocks per SM the split plan may fill (DecodePlanInputs::blocks_per_sm): every resident block
// (tc_geometry) for the kernels whose blocks are issue-bound — V in nvfp4 (nvfp4, k8v4) — and at most
// kDecodeMemoryBoundBlocksPerSm for the memory-bound ones (bf16, fp8), which stream at the read
// bandwidth with 2 and only lose to more, shorter items (measured: decode_plan.h).
int64_t decode_blocks_per_sm(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim) {
  if (k_format == quant::ElemFormat::kF32) return 2;
  const int64_t resident = detail::tc_geometry(k_format, v_format, static_cast<int>(head_dim)).blocks_per_sm;
  const bool issue_bound = v_format == quant::ElemFormat::kNVFP4;
  return issue_bound ? resident : std::min(resident, kDecodeMemoryBoundBlocksPerSm);
}

int64_t decode_item_granules(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim) {
  if (k_format == quant::ElemFormat::kF32) return 1;
  const int64_t block_round = detail::kTcWarps * detail::kTcChunk *
                              detail::tc_steps(k_format, v_format, static_cast<int>(head_dim));
  return std::max<int64_t>(1, block_round / kDecodeSplitGranule);
}

std::array<DecodeLongItemBuild, kDecodeLongItemBuilds> decode_long_item_builds(quant::ElemFormat k_format,
                                                                               quant::ElemFormat v_format,
                                                                               int64_t head_dim) {
  if (k_format == quant::ElemFormat::kF32) return {};
  const int hd = static_cast<int>(head_dim);
  const int steps = detail::tc_steps(k_format, v_format, hd);
  if (steps != 2) return {};  // the long-item builds exist where the 32-token-step build does
  auto build = [&](int warps, int64_t many_waves_tokens) {
    return DecodeLongItemBuild{
        .warps = warps,
        .blocks_per_sm = detail::tc_geometry(k_format, v_format, hd, warps, steps).blocks_per_sm,
        .item_granule_multiple = std::max<int64_t>(1, warps * detail::kTcChunk * steps / kDecodeSplitGranule),
        .many_waves_tokens = many_waves_tokens};
  };
  return {build(detail::kTcSmWarps, kDecodeSmBlockManyWavesTokens),
          build(detail::kTcWideWarps, kDecodeWideManyWavesTokens)};
}

static_assert(kTcChunkTokens == detail::kTcChunk, "the plan's chunk is the kernel's");

int32_t decode_short_item_warps(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim) {
  if (k_format == quant::ElemFormat::kF32) return 0;
  return detail::tc_steps(k_format, v_format, static_cast<int>(head_dim)) == 2 ? detail::kTcWideWarps : 0;
}

int64_t decode_short_item_whole_rounds(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim) {
  if (decode_short_item_warps(k_format, v_format, head_dim) == 0) return 0;
  return head_dim == 64 ? kDecodeShortItemRounds : 3;
}

int64_t decode_min_chunk_tokens(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim) {
  const bool nvfp4 = k_format == quant::ElemFormat::kNVFP4 && v_format == quant::ElemFormat::kNVFP4;
  return nvfp4 && head_dim == 64 ? kDecodeIdleChunkTokens : kDecodeMinChunkTokens;
}

DecodePlanInputs decode_plan_format_inputs(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim) {
  return {.blocks_per_sm = decode_blocks_per_sm(k_format, v_format, head_dim),
          .min_chunk_tokens = decode_min_chunk_tokens(k_format, v_format, head_dim),
          .item_granule_multiple = decode_item_granules(k_format, v_format, head_dim),
          .long_items = decode_long_item_builds(k_format, v_format, head_dim),
          .short_item_warps = decode_short_item_warps(k_format, v_format, head_dim),
          .short_item_whole_rounds = decode_short_item_whole_rounds(k_format, v_format, head_dim)};
}

int64_t decode_partial_out_floats(const DecodeSplitPlan& plan, int64_t num_q_heads, int64_t head_dim) {
  return plan.max_splits > 1 ? static_cast<int64_t>(plan.num_work) * num_q_heads * head_dim : 0;
}

namespace {

void validate_decode_part(const cache::KvPartLayout& part, const char* which, int64_t page_bytes) {
  NIBBLE_CHECK(part.head_dim == 64 || part.head_dim == 128 || part.head_dim == 256,
               "decode attention: {} head_dim must be 64, 128 or 256 on CUDA, got {}", which, part.head_dim);
  NIBBLE_CHECK(part.kv_heads > 0, "decode attention: {} kv_heads must be > 0, got {}", which, part.kv_heads);
  NIBBLE_CHECK(part.page_size > 0 && part.page_size % 16 == 0,
               "decode attention: page_size must be a positive multiple of 16 on CUDA, got {}", part.page_size);
  NIBBLE_CHECK(part.data_row_bytes == quant::data_bytes(part.format, part.head_dim) &&
                   part.scale_row_bytes == quant::scale_bytes(part.format, part.head_dim),
               "decode attention: {} row bytes: expected data {} scales {}, got {} and {}", which,
               quant::data_bytes(part.format, part.head_dim), quant::scale_bytes(part.format, part.head_dim),
               part.data_row_bytes, part.scale_row_bytes);
  NIBBLE_CHECK(part.data_offset % 16 == 0 && part.scale_offset % 16 == 0,
               "decode attention: {} part offsets must be 16-byte aligned, got data {} scales {}", which,
               part.data_offset, part.scale_offset);
  NIBBLE_CHECK(part.data_offset + part.bytes <= page_bytes,
               "decode attention: {} part ends at byte {}, past page_bytes {}", which, part.data_offset + part.bytes,
               page_bytes);
}

}  // namespace

namespace detail {

namespace {

// decode_tc_pair_clusters of the format pair kf, vf (0 for formats without tensor-core long-item builds).
int pair_clusters_of_format(quant::ElemFormat kf, quant::ElemFormat vf, int head_dim, int warps, bool one_p) {
  using quant::ElemFormat;
  if (kf == ElemFormat::kNVFP4 && vf == ElemFormat::kNVFP4) {
    return decode_tc_pair_clusters<ElemFormat::kNVFP4, ElemFormat::kNVFP4>(head_dim, warps, one_p);
  }
  return 0;  // bf16, fp8 and k8v4 have no long-item builds (decode_long_item_builds)
}

}  // namespace

DecodeLaunch prepare_decode_launch(const DecodeAttentionParams& p) {
  using quant::ElemFormat;
  NIBBLE_CHECK(p.plan != nullptr, "decode attention: no split plan (DecodeAttentionParams::plan is null)");
  const DecodeSplitPlan& plan = *p.plan;
  NIBBLE_CHECK(p.q && p.out && p.pool && p.page_tables && p.plan_device,
               "decode attention: a device pointer is null (q {}, out {}, pool {}, page_tables {}, plan_device {})",
               p.q != nullptr, p.out != nullptr, p.pool != nullptr, p.page_tables != nullptr, p.plan_device != nullptr);
  NIBBLE_CHECK(plan.num_seqs > 0 && plan.num_work >= plan.num_seqs &&
                   static_cast<int64_t>(plan.seq_work_offset.size()) == plan.num_seqs + 1 && plan.num_units > 0 &&
                   plan.num_units <= plan.num_work &&
                   static_cast<int64_t>(plan.unit_first_item.size()) == plan.num_units + 1,
               "decode attention: malformed plan (num_seqs {}, num_work {}, {} sequence offsets, num_units {}, {} "
               "unit offsets)",
               plan.num_seqs, plan.num_work, plan.seq_work_offset.size(), plan.num_units, plan.unit_first_item.size());
  NIBBLE_CHECK(p.page_bytes > 0 && p.page_bytes % 16 == 0,
               "decode attention: page_bytes must be a positive multiple of 16, got {}", p.page_bytes);
  // The tensor-core kernel forms page addresses as a 32 x 32 -> 64-bit product (page index · page_bytes).
  NIBBLE_CHECK(p.page_bytes <= INT32_MAX, "decode attention: page_bytes {} exceeds the CUDA kernels' limit {}",
               p.page_bytes, INT32_MAX);
  NIBBLE_CHECK(p.max_pages_per_seq > 0, "decode attention: max_pages_per_seq must be > 0, got {}", p.max_pages_per_seq);
  validate_decode_part(p.k_layout, "K", p.page_bytes);
  validate_decode_part(p.v_layout, "V", p.page_bytes);
  NIBBLE_CHECK(p.k_layout.head_dim == p.v_layout.head_dim && p.k_layout.kv_heads == p.v_layout.kv_heads &&
                   p.k_layout.page_size == p.v_layout.page_size,
               "decode attention: K and V layouts disagree: head_dim {} vs {}, kv_heads {} vs {}, page_size {} vs {}",
               p.k_layout.head_dim, p.v_layout.head_dim, p.k_layout.kv_heads, p.v_layout.kv_heads,
               p.k_layout.page_size, p.v_layout.page_size);
  const ElemFormat kf = p.k_layout.format, vf = p.v_layout.format;
  const int64_t head_dim = p.k_layout.head_dim;
  const int64_t kv_heads = p.k_layout.kv_heads;
  const int64_t group_chunks = decode_group_chunks(p.num_q_heads, kv_heads);
  const int64_t group = p.num_q_heads / kv_heads;
  NIBBLE_CHECK(p.softmax_scale > 0.0f && std::isfinite(p.softmax_scale),
               "decode attention: softmax_scale must be positive and finite, got {}", p.softmax_scale);
  NIBBLE_CHECK(p.k_global_scale > 0.0f && p.v_global_scale > 0.0f && std::isfinite(p.k_global_scale) &&
                   std::isfinite(p.v_global_scale),
               "decode attention: global scales must be positive and finite, got k {} v {}", p.k_global_scale,
               p.v_global_scale);
  if (plan.max_splits > 1) {
    NIBBLE_CHECK(p.partial_out && p.partial_lse,
                 "decode attention: the plan splits sequences ({} items for {} sequences) but the partial_out / "
                 "partial_lse workspace is null",
                 plan.num_work, plan.num_seqs);
  }

  // Group tile of the CUDA-core (f32) kernel: the smallest of 1, 2, 4, 8 holding the group (chunks of 8 above).
  const int max_group = group > 4 ? 8 : (group > 2 ? 4 : static_cast<int>(group));
  constexpr double kLog2e = 1.4426950408889634;
  const double rotate_norm = p.rotation == quant::Rotation::kHadamard ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0;

  DecodeKernelArgs args{};
  args.q = p.q;
  args.q_is_bf16 = p.q_dtype == ActivationDtype::kBF16;
  args.out = p.out;
  args.pool = p.pool;
  args.page_tables = p.page_tables;
  args.work_seq = p.plan_device;
  args.work_begin = p.plan_device + plan.num_work;
  args.work_end = p.plan_device + 2 * plan.num_work;
  args.seq_work_offset = p.plan_device + 3 * plan.num_work;
  args.unit_first_item = p.plan_device + 3 * plan.num_work + plan.num_seqs + 1;
  args.partial_out = p.partial_out;
  args.partial_lse = p.partial_lse;
  args.num_q_heads = static_cast<int>(p.num_q_heads);
  args.group = static_cast<int>(group);
  args.group_chunks = static_cast<int>(group_chunks);
  args.max_pages_per_seq = p.max_pages_per_seq;
  args.page_bytes = p.page_bytes;
  args.k_layout = p.k_layout;
  args.v_layout = p.v_layout;
  // g multiplies stored values only for the formats that define it (fp8, nvfp4); f32 and bf16 ignore it,
  // exactly as quant::dequantize_head_vector does.
  const double g_k = quant::uses_global_scale(kf) ? p.k_global_scale : 1.0;
  const double g_v = quant::uses_global_scale(vf) ? p.v_global_scale : 1.0;
  args.q_multiplier = static_cast<float>(p.softmax_scale * kLog2e * g_k * rotate_norm);
  args.v_global_scale = static_cast<float>(g_v);
  args.rotate = p.rotation == quant::Rotation::kHadamard;

  args.num_work = plan.num_work;
  args.num_units = plan.num_units;
  args.early_dependents = p.early_dependents;
  args.prefix_ready = p.prefix_ready;
  DecodeLaunch launch{};
  launch.args = args;
  launch.k_format = kf;
  launch.v_format = vf;
  launch.head_dim = static_cast<int>(head_dim);
  launch.max_group = max_group;
  launch.grid = dim3(static_cast<unsigned>(plan.num_work), static_cast<unsigned>(kv_heads * group_chunks));
  // The tensor-core kernel takes a 1-D grid of num_units × (kv_heads · group_chunks) blocks.
  launch.grid_tc = dim3(static_cast<unsigned>(plan.num_units * kv_heads * group_chunks));
  launch.num_seqs = plan.num_seqs;
  launch.split = plan.max_splits > 1;
  launch.max_splits = plan.max_splits;
  launch.tc_steps = detail::decode_tc_steps(kf, vf, static_cast<int>(head_dim), plan.chunk_tokens);
  launch.tc_few_blocks = detail::tc_steps(kf, vf, static_cast<int>(head_dim)) == 2 &&
                        plan.chunk_tokens < kDecodeLongItemTokens &&
                        static_cast<int64_t>(launch.grid_tc.x) <= int64_t{detail::kTcFewBlocksPerSm} * plan.num_sms;
  // The short-item build (16-token steps in 8-warp blocks) on the items the plan sized for it
  // (plan_decode_splits: one to four chunks per warp, kDecodeShortItemRounds).
  const bool short_item_build =
      plan.block_warps == detail::kTcWideWarps && launch.tc_few_blocks &&
      plan.chunk_tokens <= kDecodeShortItemRounds * detail::kTcChunk * detail::kTcWideWarps;
  if (short_item_build) launch.tc_steps = 1;
  const bool long_item_build = plan.block_warps > 0 && launch.tc_steps == 2 && !launch.tc_few_blocks;
  launch.tc_warps = long_item_build || short_item_build ? plan.block_warps : detail::kTcWarps;
  // Units of several items run only in the long-item builds (decode_attention_tc.cuh, kUnits).
  launch.tc_items = plan.spans_units() ? TcItems::kUnits : TcItems::kOne;
  NIBBLE_CHECK(!plan.spans_units() || long_item_build,
               "decode attention: the plan's units span sequences ({} units, {} items) but the launch is not a "
               "long-item build (block_warps {}, chunk_tokens {})",
               plan.num_units, plan.num_work, plan.block_warps, plan.chunk_tokens);
  launch.tc_one_p = vf == ElemFormat::kNVFP4 && !p.exact_p;
  // Two items for every sequence on a long-item build: the pair of blocks of each (sequence, head
  // chunk) as a cluster, merged there (decode_pair_merge.cuh), where the device holds every pair of
  // the grid at once (a cluster waits for room in one GPC for both blocks: a grid of more would run
  // a second wave, which a plan of one block per slot never intends).
  if (p.pair_merge && long_item_build && !plan.spans_units() && plan.max_splits == 2 &&
      plan.num_work == 2 * plan.num_seqs &&
      static_cast<int64_t>(launch.grid_tc.x) / 2 <=
          pair_clusters_of_format(kf, vf, static_cast<int>(head_dim), launch.tc_warps, launch.tc_one_p)) {
    launch.tc_items = TcItems::kPair;
    launch.split = false;
  }
  // A split plan's merge must be scheduled while the decode kernel drains; otherwise (no splits, or
  // pairs merged in their clusters) the decode kernel is the call's last, and its dependent is the
  // stream's next kernel, which then follows early_dependents as the merge's would.
  launch.args.trigger_at_start = launch.split || p.early_dependents;
  // The merge's blocks, scheduled while the decode kernel runs (PDL), land wherever an SM has room
  // at that moment: where the decode blocks take every register (nvfp4's 8- and 16-warp builds),
  // only on the SMs it leaves idle (8 x 32K: all 64 merge blocks on 4 SMs), and elsewhere packed
  // onto the first SMs with room. Spread over the plan's SMs they merge in parallel. H200,
  // 2026-12-02, graph replays, GQA 4, bf16 / fp8 / nvfp4 us, packed -> spread (one call, two runs
  // each): 8 x 32K 242.5 / 127.2 / 81.0 -> 242.7 / 127.1 / 79.3, 8 x 128K nvfp4 288.7 -> 287.3,
  // 8 x 16K nvfp4 46.0 -> 44.6, 8 x 1K 14.6 / 11.6 / 10.5 -> 14.2 / 11.3 / 10.3, 8 x 4K 37.8 / 23.7 /
  // 18.4 -> 37.3 / 23.5 / 18.1, 1 x 4K nvfp4 9.7 -> 9.4; the rest equal. The 8B step (mode 9, ms):
  // batch 1 at 1K bf16 4.079 -> 4.067, fp8 4.068 -> 4.057, nvfp4 4.132 -> 4.116; batch 8 at 32K fp8
  // 8.595 -> 8.566, nvfp4 7.116 -> 7.092; nvfp4 at 4K 4.176 -> 4.181 (within the runs' spread). At
  // most 2 per SM instead (room for the next kernel's blocks beside them) lost at batch 1 (1 x 4K
  // nvfp4 9.8, 1 x 16K 14.8 against 14.4).
  launch.reduce_spread_sms = plan.num_sms;
  if (p.spread_blocks &&
      static_cast<int64_t>(launch.grid_tc.x) <= kDecodeMemoryBoundBlocksPerSm * static_cast<int64_t>(plan.num_sms)) {
    launch.max_blocks_per_sm = static_cast<int>(kDecodeMemoryBoundBlocksPerSm);
  }
  const bool supported = (kf == vf && (kf == ElemFormat::kF32 || kf == ElemFormat::kBF16 || kf == ElemFormat::kFP8 ||
                                       kf == ElemFormat::kNVFP4)) ||
                         (kf == ElemFormat::kFP8 && vf == ElemFormat::kNVFP4);
  NIBBLE_CHECK(supported, "decode attention: no CUDA kernel for K {} with V {} (supported: f32, bf16, fp8, nvfp4, k8v4)",
               quant::elem_format_name(kf), quant::elem_format_name(vf));
  return launch;
}

namespace {

// The tensor-core kernel of one format pair, with the launch's build choices.
template <quant::ElemFormat KF, quant::ElemFormat VF>
void launch_tc(const DecodeLaunch& l, cudaStream_t stream) {
  launch_decode_attention_tc<KF, VF>(l.args, l.head_dim, l.tc_steps, l.tc_few_blocks, l.tc_warps, l.tc_one_p,
                                     l.tc_items, l.max_blocks_per_sm, l.grid_tc, stream);
}

}  // namespace

void launch_decode_kernel(const DecodeLaunch& l, cudaStream_t stream) {
  using quant::ElemFormat;
  const ElemFormat kf = l.k_format, vf = l.v_format;
  if (kf == ElemFormat::kF32 && vf == ElemFormat::kF32) {
    launch_decode_attention<ElemFormat::kF32, ElemFormat::kF32>(l.args, l.head_dim, l.max_group, l.grid, stream);
  } else if (kf == ElemFormat::kBF16 && vf == ElemFormat::kBF16) {
    launch_tc<ElemFormat::kBF16, ElemFormat::kBF16>(l, stream);
  } else if (kf == ElemFormat::kFP8 && vf == ElemFormat::kFP8) {
    launch_tc<ElemFormat::kFP8, ElemFormat::kFP8>(l, stream);
  } else if (kf == ElemFormat::kNVFP4 && vf == ElemFormat::kNVFP4) {
    launch_tc<ElemFormat::kNVFP4, ElemFormat::kNVFP4>(l, stream);
  } else if (kf == ElemFormat::kFP8 && vf == ElemFormat::kNVFP4) {
    launch_tc<ElemFormat::kFP8, ElemFormat::kNVFP4>(l, stream);
  } else {
    NIBBLE_FAIL("decode attention: no CUDA kernel for K {} with V {} (supported: f32, bf16, fp8, nvfp4, k8v4)",
                quant::elem_format_name(kf), quant::elem_format_name(vf));
  }
}

}  // namespace detail

void decode_attention(const DecodeAttentionParams& p, cudaStream_t stream) {
  const detail::DecodeLaunch launch = detail::prepare_decode_launch(p);
  detail::launch_decode_kernel(launch, stream);
  // The merge is launched programmatically: its blocks are scheduled while the decode kernel's last
  // blocks finish, instead of after a full launch gap (they wait for its results before reading).
  if (launch.split) {
    detail::launch_decode_reduce(launch.args, launch.num_seqs, launch.head_dim, launch.max_splits,
                                 launch.reduce_spread_sms, true, stream);
  }
}

}  // namespace nibble::cuda
