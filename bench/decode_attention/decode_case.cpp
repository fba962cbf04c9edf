#include "decode_case.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_graph.h"  // graph_batch_bucket
#include "backend/cuda/decode_kernel_args.h"
#include "event_timing.h"
#include "mixed_lengths.h"
#include "sm_clock.h"

namespace nibble::bench {

std::vector<int64_t> DecodeCase::region_bytes() const {
  std::vector<int64_t> b(kNumRegions, 0);
  b[kPool] = copies * copy_bytes;
  b[kTables] = copies * seqs * pages_per_seq * 4;
  b[kPlan] = plan.packed_size() * 4;
  b[kPartialOut] = cuda::decode_partial_out_floats(plan, num_q_heads, options->head_dim) * 4;
  b[kPartialLse] = static_cast<int64_t>(plan.num_work) * num_q_heads * 4;
  b[kQ] = b[kOut] = q_elems * 4;
  return b;
}

double DecodeCase::io_bytes() const {
  int64_t tokens = 0;
  for (int64_t s = 0; s < batch; ++s) tokens += lens[s];
  return static_cast<double>(tokens) * layout.bytes_per_token_per_layer() + 2.0 * q_elems * 4;
}

std::optional<DecodeCase> make_decode_case(const DecodeBenchOptions& o, const BenchDevice& dev, quant::KvDtype dtype,
                                           const DecodeShape& shape, int64_t force_chunk) {
  DecodeCase c{.options = &o,
               .layout = cache::PageLayout({.num_layers = 1, .kv_heads = o.kv_heads, .head_dim = o.head_dim}, dtype,
                                           o.page_size)};
  c.pages_per_seq = (shape.ctx + o.page_size - 1) / o.page_size;
  c.pages_per_copy = c.pages_per_seq * shape.batch;
  c.copy_bytes = c.pages_per_copy * c.layout.page_bytes();
  const int64_t budget = static_cast<int64_t>(dev.free_bytes * 0.6);
  if (c.copy_bytes > budget) return std::nullopt;
  c.copies = static_cast<int>(std::clamp<int64_t>((4 * dev.l2_bytes + c.copy_bytes - 1) / c.copy_bytes, 1,
                                                  std::min<int64_t>(64, budget / c.copy_bytes)));
  c.num_q_heads = static_cast<int64_t>(o.kv_heads) * shape.group;
  c.batch = shape.batch;
  c.seqs = o.engine_batches ? std::max<int64_t>(shape.batch, backend::graph_batch_bucket(shape.batch)) : shape.batch;
  c.q_elems = c.seqs * c.num_q_heads * o.head_dim;
  c.lens = mixed_lengths(shape.ctx, shape.batch, o.mixed_seed);
  c.lens.resize(c.seqs, kEnginePadTokens);
  // The plan as the engine makes it (decode_plan_format_inputs), or forced to items of force_chunk.
  cuda::DecodePlanInputs plan_in =
      cuda::decode_plan_format_inputs(c.layout.k(0).format, c.layout.v(0).format, o.head_dim);
  plan_in.seq_lens = c.lens;
  plan_in.num_kv_heads = o.kv_heads;
  plan_in.group_chunks = cuda::decode_group_chunks(c.num_q_heads, o.kv_heads);
  plan_in.num_sms = dev.sms;
  plan_in.force_chunk_tokens = force_chunk;
  plan_in.span_units_warps = o.span_units_warps;
  c.plan = cuda::plan_decode_splits(plan_in);
  return c;
}

namespace {

// The decode_attention parameters of one case, its buffers carved from `arena` (page tables: copy 0's).
cuda::DecodeAttentionParams case_params(const DeviceArena& arena, const DecodeCase& c) {
  const std::vector<int64_t> bytes = c.region_bytes();
  const DecodeBenchOptions& o = *c.options;
  return {.q = arena.at<float>(kQ, bytes[kQ]), .out = arena.at<float>(kOut, bytes[kOut]),
          .pool = arena.at<uint8_t>(kPool, bytes[kPool]), .page_tables = arena.at<int32_t>(kTables, bytes[kTables]),
          .plan_device = arena.at<int32_t>(kPlan, bytes[kPlan]), .plan = &c.plan,
          .partial_out = arena.at<float>(kPartialOut, bytes[kPartialOut]),
          .partial_lse = arena.at<float>(kPartialLse, bytes[kPartialLse]), .num_q_heads = c.num_q_heads,
          .max_pages_per_seq = c.pages_per_seq, .page_bytes = c.layout.page_bytes(), .k_layout = c.layout.k(0),
          .v_layout = c.layout.v(0), .softmax_scale = 1.0f / std::sqrt(static_cast<float>(o.head_dim)),
          .prefix_ready = o.prefix_ready, .pair_merge = o.pair_merge};
}

}  // namespace

const char* decode_merge_name(const DeviceArena& arena, const DecodeCase& c) {
  const cuda::detail::DecodeLaunch launch = cuda::detail::prepare_decode_launch(case_params(arena, c));
  return launch.tc_items == cuda::detail::TcItems::kPair ? "pairs" : launch.split ? "kernel" : "none";
}

int any_plan_block_warps(const DecodeCase& c) {
  return c.plan.block_warps > 0 && c.plan.chunk_tokens >= cuda::kDecodeWideItemTokens ? c.plan.block_warps
                                                                                        : cuda::detail::kTcWarps;
}

DecodeResult bench_decode(const DeviceArena& arena, const DecodeCase& c, DecodeTiming timing, const Sustain& sustain,
                          int tc_steps) {
  const std::vector<int64_t> bytes = c.region_bytes();
  uint8_t* pool = arena.at<uint8_t>(kPool, bytes[kPool]);
  int32_t* d_tables = arena.at<int32_t>(kTables, bytes[kTables]);
  int32_t* d_plan = arena.at<int32_t>(kPlan, bytes[kPlan]);
  float* q = arena.at<float>(kQ, bytes[kQ]);
  NIBBLE_CUDA_CHECK(cudaMemset(pool, 0x33, bytes[kPool]));
  // Page tables per copy [copies][seqs][pages_per_seq]; pages of a sequence scattered (strided).
  std::vector<int32_t> tables(c.copies * c.seqs * c.pages_per_seq);
  for (int k = 0; k < c.copies; ++k)
    for (int64_t s = 0; s < c.seqs; ++s)
      for (int64_t p = 0; p < c.pages_per_seq; ++p)
        tables[(k * c.seqs + s) * c.pages_per_seq + p] =
            static_cast<int32_t>(k * c.pages_per_copy + (s < c.batch ? p * c.batch + s : 0));
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_tables, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
  const std::vector<int32_t> packed = c.plan.packed();
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_plan, packed.data(), packed.size() * 4, cudaMemcpyHostToDevice));
  NIBBLE_CUDA_CHECK(cudaMemset(q, 0x3C, bytes[kQ]));

  cuda::DecodeAttentionParams params = case_params(arena, c);
  auto call = [&](int copy, cudaStream_t stream) {
    params.page_tables = d_tables + copy * c.seqs * c.pages_per_seq;
    if (tc_steps == 0) {
      cuda::decode_attention(params, stream);
      return;
    }
    cuda::detail::DecodeLaunch launch = cuda::detail::prepare_decode_launch(params);
    launch.tc_steps = tc_steps;
    launch.tc_few_blocks = false;
    launch.tc_warps = tc_steps == 2 ? any_plan_block_warps(c) : cuda::detail::kTcWarps;
    if (launch.tc_items == cuda::detail::TcItems::kPair && (tc_steps != 2 || launch.tc_warps != c.plan.block_warps)) {
      // Cluster pairs only in the long-item builds: another build takes the merge kernel.
      launch.tc_items = cuda::detail::TcItems::kOne;
      launch.split = true;
      launch.args.trigger_at_start = true;
    }
    cuda::detail::launch_decode_kernel(launch, stream);
    if (launch.split) {
      cuda::detail::launch_decode_reduce(launch.args, launch.num_seqs, launch.head_dim, launch.max_splits,
                                         launch.reduce_spread_sms, true, stream);
    }
  };
  // Eager: event timing of host launches (samples of >= ~0.3 ms, at most 200 calls, 3 warm-up
  // calls), copies rotated call by call.
  const GraphTiming t =
      timing == DecodeTiming::kGraph
          ? graph_median_seconds(call, c.copies, sustain)
          : GraphTiming{median_seconds_per_call([&](int n) { call(n % c.copies, nullptr); }, 0.3, 200, 3)};
  return {t.seconds, c.io_bytes() / t.seconds * 1e-9, sm_clock_mhz(c.plan.num_sms), t.watts, t.joules_per_call};
}

}  // namespace nibble::bench
