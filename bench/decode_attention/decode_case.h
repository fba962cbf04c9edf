#pragma once
// One decode-attention case of bench_decode_attention: a shape's sequences in one KV format, its
// split plan as the engine makes it, its buffers in the run's arena, and its timing (graph replays
// or host launches, each call reading another copy of the pages so the working set is >= 4x L2).
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/cuda/decode_attention.h"
#include "backend/cuda/decode_plan.h"
#include "cache/page_layout.h"
#include "decode_bench_arena.h"
#include "decode_bench_args.h"
#include "device_arena.h"
#include "graph_timing.h"  // Sustain
#include "quant/kv_format.h"

namespace nibble::bench {

// --engine-batches pads each batch to the engine's CUDA-graph bucket with sequences of this many
// tokens, as runtime/forward_step.cpp pads decode steps.
inline constexpr int32_t kEnginePadTokens = 2;

struct DecodeCase {
  const DecodeBenchOptions* options = nullptr;  // head_dim, kv_heads, page size, the plan's and kernel's switches
  cache::PageLayout layout;
  int64_t pages_per_seq = 0, pages_per_copy = 0, copy_bytes = 0;
  int copies = 0;
  int64_t num_q_heads = 0, q_elems = 0;
  // Sequences the call runs: the shape's batch, then (--engine-batches) the padding sequences that
  // fill it to the engine's graph bucket; their page-table rows point at the copy's first page.
  int64_t batch = 0, seqs = 0;
  std::vector<int32_t> lens;  // [seqs] tokens per sequence (mixed_lengths, then the padding)
  cuda::DecodeSplitPlan plan{};

  std::vector<int64_t> region_bytes() const;  // [kNumRegions]
  // Bytes one call moves: the KV bytes (scales included) of the shape's sequences + q + output.
  double io_bytes() const;
};

// The case of (dtype, shape), or nullopt if one copy of its pages does not fit in 60% of the
// memory free at start. force_chunk > 0: the split plan takes items of that many tokens
// (DecodePlanInputs::force_chunk_tokens).
std::optional<DecodeCase> make_decode_case(const DecodeBenchOptions& options, const BenchDevice& dev,
                                           quant::KvDtype dtype, const DecodeShape& shape, int64_t force_chunk = 0);

// How the case's split items are merged: "pairs" (thread block clusters, decode_pair_merge.cuh),
// "kernel" (the merge kernel) or "none" (no sequence split).
const char* decode_merge_name(const DeviceArena& arena, const DecodeCase& c);

struct DecodeResult {
  double seconds = 0;
  double gbps = 0;
  double sm_mhz = 0;                      // the SM clock right after the timing (sm_clock.h)
  double watts = 0, joules_per_call = 0;  // --sustain with an energy counter, else 0
};

// Times the case (fills its pages, tables, plan and q first). tc_steps > 0 overrides the
// tensor-core kernel's chunks per warp step (DecodeLaunch::tc_steps; only nvfp4 d64 and d128 have
// both) and takes the any-plan build (DecodeLaunch::tc_few_blocks cleared): with 32-token steps in
// blocks of the plan's long-item build where it has one, else of 4 warps.
DecodeResult bench_decode(const DeviceArena& arena, const DecodeCase& c, DecodeTiming timing, const Sustain& sustain,
                          int tc_steps = 0);

// The block warps bench_decode's 32-token-step override runs for the case's plan.
int any_plan_block_warps(const DecodeCase& c);

}  // namespace nibble::bench
