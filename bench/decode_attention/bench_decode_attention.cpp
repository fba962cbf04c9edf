// bench_decode_attention: paged decode attention and the KV write path on the GPU, per KV format.
// Prints, per shape, each format's median time, achieved GB/s (KV bytes incl. scales + q + output)
// and the fraction of the read bandwidth measured in the same run, plus the nvfp4/fp8 and fp8/bf16
// time ratios; then the write path in GB/s (f32 input read + stored bytes).
//
//   bench_decode_attention [--quick] [--json FILE] [--shapes G:CTX:B,...] [--formats bf16,fp8,...]
//                          [--no-write | --write-only] [--one-order] [--nvfp4-rule 6|4over6]
//                          [--timing graph|eager|both] [--chunks C1,C2,...] [--page-size N]
//                          [--head-dim 64|128|256] [--kv-heads N] [--write-shapes TOKENS:G,...]
//                          [--sustain SECONDS] [--units auto|off|8|16] [--engine-batches] [--mixed SEED]
//                          [--pair-merge on|off] [--prefix-ready on|off]
//
// --shapes times only the listed (GQA group, context, batch) shapes instead of the sweep; --formats
// only the listed KV formats (the ratios need nvfp4+fp8 / fp8+bf16); --no-write / --write-only
// skip the write path / the decode table; --nvfp4-rule picks the write path's nvfp4 block-scale rule
// (4over6: a second candidate scale and both block errors per block, docs/kv_layout.md);
// --page-size sets the tokens per KV page (default 16, the engine's: every 16-token chunk the decode
// kernel copies is then a page of its own); --head-dim and --kv-heads the attention's shape (default
// 128 and 8, Llama-3-8B's; the GQA group of --shapes multiplies the KV heads); --write-shapes times the write path only at the listed
// (tokens, global scale g) pairs instead of 256:1, 4096:1, 65536:1, 65536:0.37 (e.g. one case to
// profile: every kv_write launch of the run is then that case).
//
// Timing (--timing, default both): "graph" = CUDA-graph replays of N decode_attention calls
// captured once (decode kernel + PDL reduce per call, N >= the page copies), time per call = graph
// time / N: the GPU's time for the kernels, launch gaps inside a graph included, no host launch
// cost — what the engine's decode steps see (they replay CUDA graphs). "eager" = N calls launched
// from the host back to back: at short contexts the ~4 µs of host work per launch, not the GPU,
// sets that time. Each line of the table names its timing. A call's last kernel (the merge, or the
// decode kernel of a plan without splits) triggers the next call's launch at its end
// (DecodeAttentionParams::early_dependents off): the engine turns it on because its next kernel is
// the o GEMV, but here the next kernel is another decode call, whose blocks would then hold SMs
// while waiting. (Until the fifteenth round the decode kernel of an unsplit plan triggered at its
// start regardless: 32 x 1K nvfp4 measured 25.5 us instead of 20.3, 1.037 x fp8.)
//
// --mixed SEED gives each shape's sequences lengths of their own, drawn log-uniformly from [CTX/16,
// CTX] by a generator seeded with SEED (the same lengths for every format and plan of a run): a
// serving batch's mix of contexts instead of one length; the ctx column is then the longest
// possible, and GB/s counts the bytes of the drawn lengths.
//
// --pair-merge off runs the merge kernel where a long-item plan gives every sequence two items
// (DecodeAttentionParams::pair_merge; on, the default, merges them in thread block clusters): the
// A/B of decode_pair_merge.cuh in one binary. The JSON's "pair_merge" says which ran.
//
// --prefix-ready on copies a sequence's chunks before its last token's before the kernel's
// griddepcontrol.wait (DecodeAttentionParams::prefix_ready), as the engine's steps do; off, the
// default, copies everything after it. Nothing writes the pages here, so both are correct; the
// default keeps the earlier rounds' figures comparable. The JSON's "prefix_ready" says which ran.
//
// --chunks C1,C2,... also times every shape with the split plan forced to items of C tokens (graph
// timing), and for nvfp4 at head_dim 64 and 128 both tensor-core step builds (16 and 32 tokens per warp
// step): the data behind the split plan's short-context rules (decode_plan.h).
//
// Each timed call reads a different copy of the KV pages (copies rotate so the working set is
// >= 4x L2), so the numbers are DRAM numbers, not L2 numbers. KV contents are a constant byte
// pattern (finite in every format): timing does not depend on values.
//
// Memory: ONE device arena is allocated before the first timed case (after the bandwidth probe
// is freed), sized for the largest pool (times its copies) and the largest of every other buffer
// over all requested shapes and formats (bench/common/device_arena.h); every format's pool starts
// at the arena base and q / out / page tables / plan / partials / write-path inputs sit at fixed
// offsets after it. Nothing is allocated or freed between formats or shapes. Reason (H200,
// 2026-11-30): with a pool allocated per (shape, format), where it landed moved the time of the
// same kernel: fp8 took 495 us at 32 x 32K (94% of the read bandwidth) when run first in a shape
// against 567 us (83%) right after bf16's twice larger pool was freed, 13% less at 8 x 128K and
// 32 x 32K GQA 8, 10% more at 8 x 32K.
//
// Warm-up: the first shape is timed for every format for 2 s before the table and dropped (on a GPU
// that was idle the first cases came out up to ~5% off; PERFORMANCE.md, fifth round).
//
// SM clock: after each format's timing a probe kernel reads the SM clock the board is running at
// (bench/common/sm_clock.h), printed at the end of the row and in the JSON (sm_mhz, the lower of
// the two orders): a time taken while the board held its power cap says so. --sustain S replays
// each graph-timed call for S seconds before its samples, so the samples see the clock and power
// state of that work run continuously (the default, 0, times each format for a few ms between the
// others; nvfp4 alone at 32 x 32K reaches the H200's 700 W cap within about a second: PERFORMANCE.md,
// twenty-sixth round). With --sustain the board's energy counter (NVML, bench/common/board_energy.h)
// is read across each sustained window: the row then also gives the board's mean power and the
// energy per call (the whole board's; windows of >= 2 s keep the counter's update steps small).
//
// Order: each shape is timed twice, formats in the given order and then in reverse order; the
// reported time is the minimum of the two medians, and "order spread" is the largest relative
// difference max|fwd - rev| / min(fwd, rev) over the formats of that shape (the order effects that
// remain). --one-order times the given order only (spread printed as '-').
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_graph.h"  // graph_batch_bucket
#include "decode_bench_args.h"  // --shapes, --formats, --write-shapes
#include "device_arena.h"
#include "device_mem.h"
#include "event_timing.h"
#include "graph_timing.h"
#include "board_energy.h"
#include "sm_clock.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/decode_kernel_args.h"
#include "backend/cuda/kv_write.h"
#include "cache/page_layout.h"
#include "quant/kv_format.h"
#include "mixed_lengths.h"
#include "read_bandwidth.h"

namespace nibble::bench {
}

namespace {

using namespace nibble;
using quant::KvDtype;

// The attention's shape (--head-dim, --kv-heads): Llama-3-8B's unless given (e.g. Qwen3-Next's full
// attention layers: head_dim 256, 2 KV heads).
int g_head_dim = 128;
int g_kv_heads = 8;
// Tokens per KV page (--page-size): the engine's default unless given (EngineOptions::page_size,
// `nibble serve --page-size`). The rounds of docs/PERFORMANCE.md before the seventh used 64.
int64_t g_page_size = 16;
// Spanning units (--units): -1 the plan's rule, 0 never, 8 or 16 the long-item build of that many
// warps wherever its units are long enough (DecodePlanInputs::span_units_warps).
int g_span_units_warps = -1;
// --pair-merge: DecodeAttentionParams::pair_merge.
bool g_pair_merge = true;
// --prefix-ready: DecodeAttentionParams::prefix_ready.
bool g_prefix_ready = false;
// --engine-batches: each shape's batch padded to the engine's CUDA-graph bucket with sequences of
// kEnginePadTokens tokens, as runtime/forward_step.cpp pads decode steps (backend::graph_batch_bucket:
// 31 -> 32, 17 -> 24, 34 -> 48); their plan is the engine's. GB/s counts the real sequences' bytes.
bool g_engine_batches = false;
constexpr int32_t kEnginePadTokens = 2;
// --mixed SEED: lengths log-uniform in [ctx / 16, ctx] (shape_lengths); 0 = every sequence ctx long.
uint64_t g_mixed_seed = 0;

// The lengths of a shape's `batch` sequences: all `ctx`, or with --mixed, log-uniform in [ctx / 16,
// ctx] (bench/common/mixed_lengths.h).
std::vector<int32_t> shape_lengths(int64_t ctx, int64_t batch) {
  return bench::mixed_lengths(ctx, batch, g_mixed_seed);
}

struct Device {
  int sms = 0;
  int64_t l2_bytes = 0;
  size_t free_bytes = 0;
  std::string name;
};

Device query_device() {
  Device d;
  int dev = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  NIBBLE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  d.sms = prop.multiProcessorCount;
  d.l2_bytes = prop.l2CacheSize;
  d.name = prop.name;
  size_t total = 0;
  NIBBLE_CUDA_CHECK(cudaMemGetInfo(&d.free_bytes, &total));
  return d;
}

using nibble::bench::ArenaLayout;
using nibble::bench::DeviceArena;
using nibble::bench::DeviceMem;

// --sustain: seconds of graph replays before each graph timing's samples (0: none), and the board's
// energy counter read across them (null where NVML has none).
nibble::bench::Sustain g_sustain;

// Median seconds per call of fn(copy), launched eagerly from the host (event_timing.h: samples of
// >= ~0.3 ms, at most 200 calls, 3 warm-up calls), copies rotated call by call.
template <typename Fn>
double median_seconds(Fn&& fn, int copies) {
  return nibble::bench::median_seconds_per_call([&](int n) { fn(n % copies); }, 0.3, 200, 3);
}

enum class Timing { kGraph, kEager };
const char* timing_name(Timing t) { return t == Timing::kGraph ? "graph" : "eager"; }

using Shape = bench::DecodeShape;
using bench::WriteShape;

// Regions of the one device arena (offsets fixed for the whole run; see device_arena.h). The KV
// pool is region 0, so every format's pool starts at the arena base.
enum Region : size_t {
  kPool,             // u8  decode: [copies][batch * pages_per_seq] pages; write: [pages] pages
  kTables,           // i32 [copies][batch][pages_per_seq]
  kPlan,             // i32 DecodeSplitPlan::packed()
  kPartialOut,       // f32 [plan.num_work][num_q_heads][head_dim]
  kPartialLse,       // f32 [plan.num_work][num_q_heads]
  kQ,                // f32 [batch][num_q_heads][head_dim]
  kOut,              // f32 [batch][num_q_heads][head_dim]
  kWriteK,           // f32 [tokens][kv_heads][head_dim]
  kWriteV,           // f32 [tokens][kv_heads][head_dim]
  kWritePositions,   // i32 [tokens]
  kWriteSeqs,        // i32 [tokens]
  kWriteTable,       // i32 [pages]
  kNumRegions
};

struct DecodeResult {
  double seconds = 0;
  double gbps = 0;
  double sm_mhz = 0;  // the SM clock right after the timing (sm_clock.h)
  double watts = 0, joules_per_call = 0;  // --sustain with an energy counter (bench::GraphTiming), else 0
};

// One decode case: `batch` sequences of `ctx` tokens in `dtype`, pages in `copies` copies.
struct DecodeCase {
  cache::PageLayout layout;
  int64_t pages_per_seq = 0, pages_per_copy = 0, copy_bytes = 0;
  int copies = 0;
  int64_t num_q_heads = 0, q_elems = 0;
  // Sequences the call runs: the shape's batch, then (--engine-batches) the padding sequences of 2
  // tokens that fill it to the engine's graph bucket (runtime/forward_step.cpp); their page-table
  // rows point at the copy's first page.
  int64_t seqs = 0;
  std::vector<int32_t> lens;  // [seqs] tokens per sequence (shape_lengths, then the padding)
  cuda::DecodeSplitPlan plan{};

  std::vector<int64_t> region_bytes() const {
    std::vector<int64_t> b(kNumRegions, 0);
    b[kPool] = copies * copy_bytes;
    b[kTables] = copies * seqs * pages_per_seq * 4;
    b[kPlan] = plan.packed_size() * 4;
    b[kPartialOut] = cuda::decode_partial_out_floats(plan, num_q_heads, g_head_dim) * 4;
    b[kPartialLse] = static_cast<int64_t>(plan.num_work) * num_q_heads * 4;
    b[kQ] = b[kOut] = q_elems * 4;
    return b;
  }
  // Bytes one call moves: the KV bytes (scales included) of the shape's sequences + q + output.
  double io_bytes(int64_t batch) const {
    int64_t tokens = 0;
    for (int64_t s = 0; s < batch; ++s) tokens += lens[s];
    return static_cast<double>(tokens) * layout.bytes_per_token_per_layer() + 2.0 * q_elems * 4;
  }
};

// The case of (dtype, shape), or nullopt if one copy of its pages does not fit in 60% of the
// memory free at start (the same rule as when each case allocated its own pool). force_chunk > 0:
// the split plan uses items of that many tokens (DecodePlanInputs::force_chunk_tokens).
std::optional<DecodeCase> make_decode_case(const Device& dev, KvDtype dtype, const Shape& shape,
                                           int64_t force_chunk = 0) {
  DecodeCase c{.layout = cache::PageLayout({.num_layers = 1, .kv_heads = g_kv_heads, .head_dim = g_head_dim}, dtype,
                                           g_page_size)};
  c.pages_per_seq = (shape.ctx + g_page_size - 1) / g_page_size;
  c.pages_per_copy = c.pages_per_seq * shape.batch;
  c.copy_bytes = c.pages_per_copy * c.layout.page_bytes();
  const int64_t budget = static_cast<int64_t>(dev.free_bytes * 0.6);
  if (c.copy_bytes > budget) return std::nullopt;
  c.copies = static_cast<int>(std::clamp<int64_t>((4 * dev.l2_bytes + c.copy_bytes - 1) / c.copy_bytes, 1,
                                                  std::min<int64_t>(64, budget / c.copy_bytes)));
  c.num_q_heads = static_cast<int64_t>(g_kv_heads) * shape.group;
  c.seqs = g_engine_batches ? std::max<int64_t>(shape.batch, backend::graph_batch_bucket(shape.batch)) : shape.batch;
  c.q_elems = c.seqs * c.num_q_heads * g_head_dim;
  std::vector<int32_t> lens = shape_lengths(shape.ctx, shape.batch);
  lens.resize(c.seqs, kEnginePadTokens);
  c.lens = lens;
  // The plan as the engine makes it (decode_plan_format_inputs), or forced to items of force_chunk.
  cuda::DecodePlanInputs plan_in = cuda::decode_plan_format_inputs(c.layout.k(0).format, c.layout.v(0).format, g_head_dim);
  plan_in.seq_lens = lens;
  plan_in.num_kv_heads = g_kv_heads;
  plan_in.group_chunks = cuda::decode_group_chunks(c.num_q_heads, g_kv_heads);
  plan_in.num_sms = dev.sms;
  plan_in.force_chunk_tokens = force_chunk;
  plan_in.span_units_warps = g_span_units_warps;
  c.plan = cuda::plan_decode_splits(plan_in);
  return c;
}

// The decode_attention parameters of one case, its buffers carved from `arena` (page tables: copy 0's).
cuda::DecodeAttentionParams case_params(const DeviceArena& arena, const DecodeCase& c) {
  const std::vector<int64_t> bytes = c.region_bytes();
  return {.q = arena.at<float>(kQ, bytes[kQ]), .out = arena.at<float>(kOut, bytes[kOut]),
          .pool = arena.at<uint8_t>(kPool, bytes[kPool]), .page_tables = arena.at<int32_t>(kTables, bytes[kTables]),
          .plan_device = arena.at<int32_t>(kPlan, bytes[kPlan]), .plan = &c.plan,
          .partial_out = arena.at<float>(kPartialOut, bytes[kPartialOut]),
          .partial_lse = arena.at<float>(kPartialLse, bytes[kPartialLse]), .num_q_heads = c.num_q_heads,
          .max_pages_per_seq = c.pages_per_seq, .page_bytes = c.layout.page_bytes(), .k_layout = c.layout.k(0),
          .v_layout = c.layout.v(0), .softmax_scale = 1.0f / std::sqrt(static_cast<float>(g_head_dim)),
          .prefix_ready = g_prefix_ready, .pair_merge = g_pair_merge};
}

// How the case's split items are merged: "pairs" (in thread block clusters, decode_pair_merge.cuh),
// "kernel" (the merge kernel) or "none" (no sequence split).
const char* merge_name(const DeviceArena& arena, const DecodeCase& c) {
  const cuda::detail::DecodeLaunch launch = cuda::detail::prepare_decode_launch(case_params(arena, c));
  return launch.tc_items == cuda::detail::TcItems::kPair ? "pairs" : launch.split ? "kernel" : "none";
}

// Decode attention of one case, all buffers carved from `arena`. tc_steps > 0 overrides the
// tensor-core kernel's chunks per warp step (DecodeLaunch::tc_steps; only nvfp4 d64 and d128 have both) and
// takes the any-plan build (DecodeLaunch::tc_few_blocks cleared): with 32-token steps in blocks of
// the plan's long-item build where it has one (DecodeSplitPlan::block_warps), else of 4 warps.
DecodeResult bench_decode(const DeviceArena& arena, const DecodeCase& c, int64_t ctx, int64_t batch, Timing timing,
                          int tc_steps = 0) {
  const std::vector<int64_t> bytes = c.region_bytes();
  uint8_t* pool = arena.at<uint8_t>(kPool, bytes[kPool]);
  int32_t* d_tables = arena.at<int32_t>(kTables, bytes[kTables]);
  int32_t* d_plan = arena.at<int32_t>(kPlan, bytes[kPlan]);
  float* q = arena.at<float>(kQ, bytes[kQ]);
  NIBBLE_CUDA_CHECK(cudaMemset(pool, 0x33, bytes[kPool]));
  // Page tables per copy [copies][batch][pages_per_seq]; pages of a sequence scattered (strided).
  std::vector<int32_t> tables(c.copies * c.seqs * c.pages_per_seq);
  for (int k = 0; k < c.copies; ++k)
    for (int64_t s = 0; s < c.seqs; ++s)
      for (int64_t p = 0; p < c.pages_per_seq; ++p)
        tables[(k * c.seqs + s) * c.pages_per_seq + p] =
            static_cast<int32_t>(k * c.pages_per_copy + (s < batch ? p * batch + s : 0));
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
    launch.tc_warps = tc_steps == 2 && c.plan.block_warps > 0 && c.plan.chunk_tokens >= cuda::kDecodeWideItemTokens
                          ? c.plan.block_warps
                          : cuda::detail::kTcWarps;
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
  const bench::GraphTiming t =
      timing == Timing::kGraph ? bench::graph_median_seconds(call, c.copies, g_sustain)
                               : bench::GraphTiming{median_seconds([&](int copy) { call(copy, nullptr); }, c.copies)};
  return {t.seconds, c.io_bytes(batch) / t.seconds * 1e-9, bench::sm_clock_mhz(c.plan.num_sms), t.watts,
          t.joules_per_call};
}

// Bytes per arena region of the write path for `tokens` tokens in `dtype`.
std::vector<int64_t> write_region_bytes(KvDtype dtype, int64_t tokens) {
  const cache::PageLayout layout({.num_layers = 1, .kv_heads = g_kv_heads, .head_dim = g_head_dim}, dtype, g_page_size);
  const int64_t pages = (tokens + g_page_size - 1) / g_page_size;
  std::vector<int64_t> b(kNumRegions, 0);
  b[kPool] = pages * layout.page_bytes();
  b[kWriteK] = b[kWriteV] = tokens * g_kv_heads * g_head_dim * 4;
  b[kWritePositions] = b[kWriteSeqs] = tokens * 4;
  b[kWriteTable] = pages * 4;
  return b;
}

// Seconds per kv_write call of `w.tokens` tokens in `dtype` (one sequence), buffers from `arena`.
double bench_write(const DeviceArena& arena, KvDtype dtype, const WriteShape& w) {
  const cache::PageLayout layout({.num_layers = 1, .kv_heads = g_kv_heads, .head_dim = g_head_dim}, dtype, g_page_size);
  const int64_t tokens = w.tokens;
  const int64_t pages = (tokens + g_page_size - 1) / g_page_size;
  const std::vector<int64_t> bytes = write_region_bytes(dtype, tokens);
  const int64_t elems = tokens * g_kv_heads * g_head_dim;
  float* k = arena.at<float>(kWriteK, bytes[kWriteK]);
  float* v = arena.at<float>(kWriteV, bytes[kWriteV]);
  int32_t* d_pos = arena.at<int32_t>(kWritePositions, bytes[kWritePositions]);
  int32_t* d_seq = arena.at<int32_t>(kWriteSeqs, bytes[kWriteSeqs]);
  int32_t* d_table = arena.at<int32_t>(kWriteTable, bytes[kWriteTable]);
  NIBBLE_CUDA_CHECK(cudaMemset(k, 0x3C, elems * 4));
  NIBBLE_CUDA_CHECK(cudaMemset(v, 0xBC, elems * 4));
  std::vector<int32_t> positions(tokens), seqs(tokens, 0), table(pages);
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(table.begin(), table.end(), 0);
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_pos, positions.data(), tokens * 4, cudaMemcpyHostToDevice));
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_seq, seqs.data(), tokens * 4, cudaMemcpyHostToDevice));
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_table, table.data(), pages * 4, cudaMemcpyHostToDevice));
  const cuda::KvWriteParams params{.k = k, .v = v, .positions = d_pos, .row_sequence = d_seq, .page_tables = d_table,
                                   .pool = arena.at<uint8_t>(kPool, bytes[kPool]), .num_tokens = tokens,
                                   .max_pages_per_seq = pages, .page_bytes = layout.page_bytes(),
                                   .k_layout = layout.k(0), .v_layout = layout.v(0), .k_global_scale = w.g,
                                   .v_global_scale = w.g, .nvfp4_scale_rule = w.rule};
  return median_seconds([&](int) { cuda::kv_write(params, nullptr); }, 1);
}

// Bytes one kv_write call of `tokens` tokens moves: the f32 K and V read + the stored cache bytes.
double write_io_bytes(KvDtype dtype, int64_t tokens) {
  const cache::PageLayout layout({.num_layers = 1, .kv_heads = g_kv_heads, .head_dim = g_head_dim}, dtype, g_page_size);
  return 2.0 * tokens * g_kv_heads * g_head_dim * 4 + static_cast<double>(tokens) * layout.bytes_per_token_per_layer();
}

// Times fn(format) for each format in `order`, then (both_orders) again in reverse order.
// Returns per format {forward seconds, reverse seconds (= forward if !both_orders)}.
template <typename Fn>
std::map<KvDtype, std::pair<double, double>> time_both_orders(const std::vector<KvDtype>& order, bool both_orders,
                                                              Fn&& fn) {
  std::map<KvDtype, std::pair<double, double>> t;
  for (KvDtype d : order) t[d].first = fn(d);
  if (!both_orders) {
    for (auto& [d, s] : t) s.second = s.first;
    return t;
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) t[*it].second = fn(*it);
  return t;
}

// max over formats (both times > 0) of |fwd - rev| / min(fwd, rev); 0 if none.
double order_spread(const std::map<KvDtype, std::pair<double, double>>& t) {
  double spread = 0;
  for (const auto& [d, s] : t)
    if (s.first > 0 && s.second > 0)
      spread = std::max(spread, std::abs(s.first - s.second) / std::min(s.first, s.second));
  return spread;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, run_decode = true, run_write = true, both_orders = true;
  quant::Nvfp4ScaleRule write_rule = quant::Nvfp4ScaleRule::kAmaxOver6;
  std::string json_path, shapes_arg, formats_arg, write_shapes_arg;
  std::vector<Timing> timings = {Timing::kGraph, Timing::kEager};
  std::vector<int64_t> chunks;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (arg == "--shapes" && i + 1 < argc) {
      shapes_arg = argv[++i];
    } else if (arg == "--formats" && i + 1 < argc) {
      formats_arg = argv[++i];
    } else if (arg == "--no-write") {
      run_write = false;
    } else if (arg == "--write-only") {
      run_decode = false;
    } else if (arg == "--one-order") {
      both_orders = false;
    } else if (arg == "--timing" && i + 1 < argc) {
      const std::string t = argv[++i];
      if (t != "graph" && t != "eager" && t != "both") {
        fmt::print(stderr, "--timing: '{}' is not graph, eager or both\n", t);
        return 2;
      }
      timings = t == "both" ? std::vector<Timing>{Timing::kGraph, Timing::kEager}
                            : std::vector<Timing>{t == "graph" ? Timing::kGraph : Timing::kEager};
    } else if (arg == "--chunks" && i + 1 < argc) {
      const std::string text = argv[++i];
      size_t at = 0;
      while (at <= text.size()) {
        const size_t end = std::min(text.find(',', at), text.size());
        const std::string item = text.substr(at, end - at);
        char* tail = nullptr;
        const long v = std::strtol(item.c_str(), &tail, 10);
        if (item.empty() || *tail != 0 || v <= 0 || v % cuda::kDecodeSplitGranule != 0) {
          fmt::print(stderr, "--chunks: '{}' is not a positive multiple of {}\n", item, cuda::kDecodeSplitGranule);
          return 2;
        }
        chunks.push_back(v);
        at = end + 1;
      }
    } else if (arg == "--page-size" && i + 1 < argc) {
      const std::string text = argv[++i];
      char* tail = nullptr;
      const long v = std::strtol(text.c_str(), &tail, 10);
      if (text.empty() || *tail != 0 || v < 16 || v % 16 != 0 || v > 1024) {
        fmt::print(stderr, "--page-size: '{}' is not a multiple of 16 in 16..1024 (the decode kernel's pages)\n", text);
        return 2;
      }
      g_page_size = v;
    } else if ((arg == "--head-dim" || arg == "--kv-heads") && i + 1 < argc) {
      const std::string text = argv[++i];
      char* tail = nullptr;
      const long v = std::strtol(text.c_str(), &tail, 10);
      const bool head_dim = arg == "--head-dim";
      if (text.empty() || *tail != 0 || (head_dim ? (v != 64 && v != 128 && v != 256) : (v < 1 || v > 64))) {
        fmt::print(stderr, "{}: '{}' is not {}\n", arg, text, head_dim ? "64, 128 or 256" : "in 1..64");
        return 2;
      }
      (head_dim ? g_head_dim : g_kv_heads) = static_cast<int>(v);
    } else if (arg == "--engine-batches") {
      g_engine_batches = true;
    } else if (arg == "--mixed" && i + 1 < argc) {
      const std::string text = argv[++i];
      char* tail = nullptr;
      const unsigned long long v = std::strtoull(text.c_str(), &tail, 10);
      if (text.empty() || text[0] == '-' || *tail != 0 || v == 0) {
        fmt::print(stderr, "--mixed: '{}' is not a positive integer seed\n", text);
        return 2;
      }
      g_mixed_seed = v;
    } else if (arg == "--units" && i + 1 < argc) {
      const std::string text = argv[++i];
      if (text != "auto" && text != "off" && text != "8" && text != "16") {
        fmt::print(stderr, "--units: '{}' is not auto, off, 8 or 16\n", text);
        return 2;
      }
      g_span_units_warps = text == "auto" ? -1 : text == "off" ? 0 : std::stoi(text);
    } else if ((arg == "--pair-merge" || arg == "--prefix-ready") && i + 1 < argc) {
      const std::string text = argv[++i];
      if (text != "on" && text != "off") {
        fmt::print(stderr, "{}: '{}' is not on or off\n", arg, text);
        return 2;
      }
      (arg == "--pair-merge" ? g_pair_merge : g_prefix_ready) = text == "on";
    } else if (arg == "--sustain" && i + 1 < argc) {
      const std::string text = argv[++i];
      char* tail = nullptr;
      const double v = std::strtod(text.c_str(), &tail);
      if (text.empty() || *tail != 0 || !(v >= 0.0 && v <= 600.0)) {
        fmt::print(stderr, "--sustain: '{}' is not a number of seconds in 0..600\n", text);
        return 2;
      }
      g_sustain.seconds = v;
    } else if (arg == "--write-shapes" && i + 1 < argc) {
      write_shapes_arg = argv[++i];
    } else if (arg == "--nvfp4-rule" && i + 1 < argc) {
      const std::string rule = argv[++i];
      if (rule != "6" && rule != "4over6") {
        fmt::print(stderr, "--nvfp4-rule: '{}' is not 6 or 4over6\n", rule);
        return 2;
      }
      write_rule = rule == "6" ? quant::Nvfp4ScaleRule::kAmaxOver6 : quant::Nvfp4ScaleRule::kFourOverSix;
    } else {
      fmt::print(stderr,
                 "usage: {} [--quick] [--json FILE] [--shapes G:CTX:B,...] [--formats bf16,fp8,nvfp4,k8v4] "
                 "[--no-write | --write-only] [--one-order] [--nvfp4-rule 6|4over6] [--timing graph|eager|both] "
                 "[--chunks C1,C2,...] [--page-size N] [--head-dim 64|128|256] [--kv-heads N] "
                 "[--write-shapes TOKENS:G,...] [--sustain SECONDS] [--units auto|off|8|16] [--engine-batches] "
                 "[--mixed SEED] [--pair-merge on|off] [--prefix-ready on|off]\n"
                 "unknown argument '{}'\n",
                 argv[0], arg);
      return 2;
    }
  }
  // The list flags, read before anything touches the GPU: a typo costs no device time.
  std::vector<KvDtype> listed_formats;
  std::vector<Shape> listed_shapes;
  std::optional<std::vector<WriteShape>> listed_write_shapes;
  try {
    if (!formats_arg.empty()) listed_formats = bench::parse_formats(formats_arg);
    if (!shapes_arg.empty()) listed_shapes = bench::parse_decode_shapes(shapes_arg);
    if (!write_shapes_arg.empty()) listed_write_shapes = bench::parse_write_shapes(write_shapes_arg, write_rule);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_decode_attention: {}\n", e.what());
    return 2;
  }
  try {
    const Device dev = query_device();
    double read_gbps = 0, copy_gbps = 0;
    {
      // Practical read bandwidth: a read-only pass over 2 GiB, and a device-to-device copy (read+write).
      // Freed before the arena is allocated.
      const int64_t probe_bytes = int64_t{2} << 30;
      DeviceMem probe(probe_bytes), probe2(probe_bytes), sink(16);
      NIBBLE_CUDA_CHECK(cudaMemset(probe.p, 1, probe_bytes));
      const double read_s = bench::time_read(probe.p, probe_bytes, sink.as<unsigned>(), dev.sms, 6);
      read_gbps = probe_bytes / read_s * 1e-9;
      const double copy_s = median_seconds(
          [&](int) { NIBBLE_CUDA_CHECK(cudaMemcpyAsync(probe2.p, probe.p, probe_bytes, cudaMemcpyDeviceToDevice)); },
          1);
      copy_gbps = 2.0 * probe_bytes / copy_s * 1e-9;
    }
    fmt::print("device: {} ({} SMs, L2 {} MiB)\nread bandwidth (read-only kernel): {:.0f} GB/s; "
               "device-to-device copy (read+write): {:.0f} GB/s\n",
               dev.name, dev.sms, dev.l2_bytes >> 20, read_gbps, copy_gbps);
    // --sustain: the board's energy counter, read across each sustained window (none: no power column).
    int cuda_device = 0;
    NIBBLE_CUDA_CHECK(cudaGetDevice(&cuda_device));
    const std::optional<bench::BoardEnergy> board_energy =
        g_sustain.seconds > 0 ? bench::BoardEnergy::open(cuda_device) : std::nullopt;
    g_sustain.energy = board_energy ? &*board_energy : nullptr;
    if (g_sustain.seconds > 0) {
      fmt::print("board energy counter (NVML): {}\n",
                 board_energy ? "read across each sustained window: board W and mJ per call at the end of each row"
                              : "not available, no power column");
    }

    const std::vector<KvDtype> dtypes = formats_arg.empty()
                                            ? std::vector<KvDtype>{KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4,
                                                                   KvDtype::kK8V4}
                                            : listed_formats;
    std::vector<Shape> shapes;
    if (!shapes_arg.empty()) {
      shapes = listed_shapes;
    } else {
      const std::vector<int64_t> contexts = quick ? std::vector<int64_t>{4096, 32768}
                                                  : std::vector<int64_t>{1024, 4096, 16384, 32768, 131072};
      const std::vector<int64_t> batches = quick ? std::vector<int64_t>{1, 32} : std::vector<int64_t>{1, 8, 32, 128, 256};
      for (int group : {4, 8})
        for (int64_t ctx : contexts)
          for (int64_t batch : batches) shapes.push_back({group, ctx, batch});
    }
    if (!run_decode) shapes.clear();
    std::vector<WriteShape> write_shapes;
    if (run_write) {
      write_shapes = listed_write_shapes ? *listed_write_shapes
                                         : std::vector<WriteShape>{{256, 1.0f, write_rule},
                                                                   {4096, 1.0f, write_rule},
                                                                   {65536, 1.0f, write_rule},
                                                                   {65536, 0.37f, write_rule}};
    }

    // One arena for every case of the run, sized before the first one is timed.
    ArenaLayout arena_layout(kNumRegions);
    for (const Shape& shape : shapes)
      for (KvDtype d : dtypes) {
        if (const std::optional<DecodeCase> c = make_decode_case(dev, d, shape))
          arena_layout.require(c->region_bytes());
        for (int64_t chunk : chunks)
          if (const std::optional<DecodeCase> c = make_decode_case(dev, d, shape, chunk))
            arena_layout.require(c->region_bytes());
      }
    for (const WriteShape& w : write_shapes)
      for (KvDtype d : dtypes) arena_layout.require(write_region_bytes(d, w.tokens));
    const DeviceArena arena(arena_layout);
    const double gib = double(int64_t{1} << 30);
    fmt::print("device arena: {:.2f} GiB allocated once for all shapes and formats (KV pool region {:.2f} GiB at "
               "its base, other buffers at fixed offsets); nothing is allocated or freed between cases\n",
               arena.bytes() / gib, arena_layout.region_bytes(kPool) / gib);
    const std::string timing =
        both_orders ? "time = min of the medians of two passes per shape (formats in the given order, then reversed); "
                      "order spread = max over formats of |fwd - rev| / min(fwd, rev)"
                    : "time = median of one pass per shape, formats in the given order (--one-order)";
    fmt::print("{}\n", timing);
    fmt::print("decode attention, head_dim {}, page {}, {} KV heads, q f32, output f32; GB/s counts KV bytes "
               "(incl. scales) + q + output; %BW = of the read bandwidth above{}\n",
               g_head_dim, g_page_size, g_kv_heads,
               std::string(g_engine_batches ? "; each batch padded to the engine's graph bucket with 2-token "
                                              "sequences (--engine-batches)"
                                            : "") +
                   (g_mixed_seed != 0 ? fmt::format("; sequence lengths log-uniform in [ctx/16, ctx], seed {} "
                                                    "(--mixed)",
                                                    g_mixed_seed)
                                      : std::string()));
    fmt::print("timing column: graph = CUDA-graph replay of N captured calls, per call (GPU time of decode kernel + "
               "reduce, no host launch cost; what the engine's graph-replayed decode steps see); eager = calls "
               "launched from the host back to back (includes host launch cost where it exceeds GPU time); "
               "cN = graph timing with the split plan forced to N-token items; SM MHz = the SM clock right after "
               "each format's timing (the lower of the two orders){}\n\n",
               g_sustain.seconds > 0 ? fmt::format("; every graph timing after {} s of replays of its call (--sustain)",
                                                   g_sustain.seconds)
                                     : std::string());

    nlohmann::json report;
    report["device"] = dev.name;
    report["read_gbps"] = read_gbps;
    report["copy_gbps"] = copy_gbps;
    report["page_size"] = g_page_size;
    report["head_dim"] = g_head_dim;
    report["kv_heads"] = g_kv_heads;
    report["arena_bytes"] = arena.bytes();
    report["orders"] = both_orders ? 2 : 1;
    report["timing"] = timing;
    report["timing_modes"] = "graph: CUDA-graph replay, per call; eager: host launches back to back";
    report["sustain_seconds"] = g_sustain.seconds;
    report["engine_batches"] = g_engine_batches;
    report["mixed_seed"] = g_mixed_seed;  // 0: every sequence ctx long
    report["pair_merge"] = g_pair_merge;    // --pair-merge; each row's "merge" says what ran
    report["prefix_ready"] = g_prefix_ready;  // --prefix-ready

    std::string header = fmt::format("{:>4} {:>7} {:>6} {:>6} |", "gqa", "ctx", "batch", "timing");
    for (KvDtype d : dtypes) header += fmt::format(" {:>22} |", fmt::format("{} us GB/s %BW", quant::kv_dtype_name(d)));
    header += " nvfp4/fp8 fp8/bf16 order spread | SM MHz";
    if (run_decode) fmt::print("{}\n", header);
    // Warm-up: the first shape, every format, for at least kWarmupSeconds, results dropped. On a GPU
    // that was idle, the first second or so of cases came out off by up to ~5% (H200, 2026-11-30:
    // GQA 8 8 x 1K nvfp4 14.3 us as the first shape of the machine's first process, 15.0 timed
    // again in the same run and in every later process; fp8's first pass 15.4 against 14.7; SM
    // clock at 1980 MHz throughout, cause not found). One pass of the first shape was not enough.
    constexpr double kWarmupSeconds = 2.0;
    if (run_decode && !shapes.empty()) {
      const auto start = std::chrono::steady_clock::now();
      while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < kWarmupSeconds) {
        for (KvDtype d : dtypes) {
          if (const std::optional<DecodeCase> c = make_decode_case(dev, d, shapes.front())) {
            bench_decode(arena, *c, shapes.front().ctx, shapes.front().batch, Timing::kGraph);
          }
        }
      }
    }
    for (const Shape& shape : shapes) {
      const int group = shape.group;
      const int64_t ctx = shape.ctx, batch = shape.batch;
      // One row per timing mode, then (--chunks) one per forced item size, graph timing.
      struct Row {
        Timing timing;
        int64_t chunk;  // 0 = the plan's own choice
      };
      std::vector<Row> rows;
      for (Timing t : timings) rows.push_back({t, 0});
      for (int64_t chunk : chunks) rows.push_back({Timing::kGraph, chunk});
      for (const Row& row : rows) {
        std::map<KvDtype, std::optional<DecodeCase>> cases;
        for (KvDtype d : dtypes) cases[d] = make_decode_case(dev, d, shape, row.chunk);
        std::map<KvDtype, double> sm_mhz;         // the lower of the two orders' clocks
        std::map<KvDtype, DecodeResult> energy;  // the faster order's power and joules per call
        const auto times = time_both_orders(dtypes, both_orders, [&](KvDtype d) {
          if (!cases[d]) return 0.0;
          const DecodeResult r = bench_decode(arena, *cases[d], ctx, batch, row.timing);
          sm_mhz[d] = sm_mhz.count(d) ? std::min(sm_mhz[d], r.sm_mhz) : r.sm_mhz;
          if (!energy.count(d) || r.seconds < energy[d].seconds) energy[d] = r;
          return r.seconds;
        });
        const double spread = order_spread(times);
        std::map<KvDtype, DecodeResult> results;
        const std::string label = row.chunk > 0 ? fmt::format("c{}", row.chunk) : timing_name(row.timing);
        std::string line = fmt::format("{:>4} {:>7} {:>6} {:>6} |", group, ctx, batch, label);
        for (KvDtype d : dtypes) {
          const auto [fwd, rev] = times.at(d);
          DecodeResult r;
          if (fwd > 0 && rev > 0) {
            r.seconds = std::min(fwd, rev);
            r.gbps = cases[d]->io_bytes(batch) / r.seconds * 1e-9;
            r.sm_mhz = sm_mhz[d];
            r.watts = energy[d].watts;
            r.joules_per_call = energy[d].joules_per_call;
          }
          results[d] = r;
          line += r.seconds > 0 ? fmt::format(" {:>8.1f} {:>6.0f} {:>5.1f}% |", r.seconds * 1e6, r.gbps,
                                              100.0 * r.gbps / read_gbps)
                                : fmt::format(" {:>22} |", "(does not fit)");
          if (r.seconds > 0) {
            report["decode"].push_back({{"dtype", quant::kv_dtype_name(d)}, {"group", group}, {"ctx", ctx},
                                        {"batch", batch}, {"timing", timing_name(row.timing)},
                                        {"chunk_tokens", cases[d]->plan.chunk_tokens},
                                        {"block_warps", cases[d]->plan.block_warps}, {"forced_chunk", row.chunk > 0},
                                        {"units", cases[d]->plan.num_units}, {"spans_units", cases[d]->plan.spans_units()},
                                        {"merge", merge_name(arena, *cases[d])}, {"seconds", r.seconds}, {"gbps", r.gbps},
                                        {"fraction_of_read_bw", r.gbps / read_gbps}, {"sm_mhz", r.sm_mhz},
                                        {"board_watts", r.watts}, {"joules_per_call", r.joules_per_call},
                                        {"sustain_seconds", g_sustain.seconds}, {"seconds_forward", fwd},
                                        {"seconds_reverse", rev}, {"order_spread", spread}});
          }
        }
        auto ratio = [&](KvDtype a, KvDtype b) {
          return results[a].seconds > 0 && results[b].seconds > 0 ? results[a].seconds / results[b].seconds : NAN;
        };
        line += fmt::format(" {:>9.3f} {:>8.3f} {:>12}", ratio(KvDtype::kNVFP4, KvDtype::kFP8),
                            ratio(KvDtype::kFP8, KvDtype::kBF16),
                            both_orders ? fmt::format("{:.1f}%", 100.0 * spread) : std::string("-"));
        line += " | SM MHz";
        for (KvDtype d : dtypes) {
          if (results[d].seconds > 0) line += fmt::format(" {} {:.0f}", quant::kv_dtype_name(d), results[d].sm_mhz);
        }
        for (KvDtype d : dtypes) {  // the split merge in cluster pairs (decode_pair_merge.cuh)
          if (results[d].seconds > 0 && std::strcmp(merge_name(arena, *cases[d]), "pairs") == 0) {
            line += fmt::format(" | {} merged in cluster pairs", quant::kv_dtype_name(d));
          }
        }
        if (g_sustain.energy != nullptr && row.timing == Timing::kGraph) {
          line += " | board W, mJ/call";
          for (KvDtype d : dtypes) {
            if (results[d].joules_per_call > 0) {
              line += fmt::format(" {} {:.0f} {:.3f}", quant::kv_dtype_name(d), results[d].watts,
                                  results[d].joules_per_call * 1e3);
            }
          }
        }
        // nvfp4 at head_dim 64 and 128 has two step builds (tc_steps): time both on this row's plan
        // (graph timing).
        const bool two_step_builds =
            cuda::detail::tc_steps(quant::ElemFormat::kNVFP4, quant::ElemFormat::kNVFP4, g_head_dim) == 2;
        if (row.timing == Timing::kGraph && two_step_builds && cases.count(KvDtype::kNVFP4) &&
            cases[KvDtype::kNVFP4]) {
          const DecodeCase& c = *cases[KvDtype::kNVFP4];
          // Units that span sequences run only in the long-item builds (no 16-token-step build).
          const double s1 = c.plan.spans_units() ? 0.0 : bench_decode(arena, c, ctx, batch, Timing::kGraph, 1).seconds;
          const double s2 = bench_decode(arena, c, ctx, batch, Timing::kGraph, 2).seconds;
          const int warps = c.plan.block_warps > 0 && c.plan.chunk_tokens >= cuda::kDecodeWideItemTokens
                                ? c.plan.block_warps
                                : cuda::detail::kTcWarps;
          line += fmt::format(" | nvfp4 {} {} tok, any-plan builds: 16-tok steps {}, 32-tok steps "
                              "({} warps/block) {:.1f} us",
                              c.plan.spans_units() ? fmt::format("{} units of ~", c.plan.num_units) : "item",
                              c.plan.chunk_tokens, s1 > 0 ? fmt::format("{:.1f} us", s1 * 1e6) : "-", warps,
                              s2 * 1e6);
          report["nvfp4_steps"].push_back({{"group", group}, {"ctx", ctx}, {"batch", batch},
                                           {"chunk_tokens", c.plan.chunk_tokens}, {"block_warps", warps},
                                           {"units", c.plan.num_units}, {"spans_units", c.plan.spans_units()},
                                           {"steps1_seconds", s1}, {"steps2_seconds", s2}});
        }
        fmt::print("{}\n", line);
        std::fflush(stdout);
      }
    }

    if (run_write) {
      const bool four_over_six = write_rule == quant::Nvfp4ScaleRule::kFourOverSix;
      fmt::print("\nwrite path (f32 K/V in, quantize + store), {} KV heads, head_dim {}, nvfp4 block scale {}; GB/s = "
                 "input + stored bytes; same arena, same two-order timing\n",
                 g_kv_heads, g_head_dim, four_over_six ? "4-over-6" : "amax/6");
      for (const WriteShape& w : write_shapes) {
        const auto times =
            time_both_orders(dtypes, both_orders, [&](KvDtype d) { return bench_write(arena, d, w); });
        const double spread = order_spread(times);
        std::string line = fmt::format("tokens {:>6} g {:<4} |", w.tokens, w.g);
        for (KvDtype d : dtypes) {
          const auto [fwd, rev] = times.at(d);
          const double s = std::min(fwd, rev);
          const double gbps = write_io_bytes(d, w.tokens) / s * 1e-9;
          line += fmt::format(" {} {:.1f} us {:.0f} GB/s ({:.1f}%) |", quant::kv_dtype_name(d), s * 1e6, gbps,
                              100.0 * gbps / read_gbps);
          report["write"].push_back({{"dtype", quant::kv_dtype_name(d)}, {"tokens", w.tokens}, {"g", w.g},
                                     {"nvfp4_rule", four_over_six ? "4over6" : "6"},
                                     {"seconds", s}, {"gbps", gbps}, {"fraction_of_read_bw", gbps / read_gbps},
                                     {"seconds_forward", fwd}, {"seconds_reverse", rev}, {"order_spread", spread}});
        }
        line += both_orders ? fmt::format(" order spread {:.1f}%", 100.0 * spread) : std::string();
        fmt::print("{}\n", line);
      }
    }
    if (!json_path.empty()) {
      std::ofstream(json_path) << report.dump(2) << "\n";
      fmt::print("wrote {}\n", json_path);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_decode_attention: {}\n", e.what());
    return 1;
  }
  return 0;
}
