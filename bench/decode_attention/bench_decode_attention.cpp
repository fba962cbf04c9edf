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
// Files: decode_bench_args.h (the flags, parsed whole before the GPU is touched), decode_case.h
// (a decode case: plan, buffers, timing), write_case.h (a write-path case), decode_bench_arena.h
// (the device and the arena's regions); this file runs the sweep and prints the tables.
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
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_kernel_args.h"  // tc_steps, kTcWarps
#include "board_energy.h"
#include "common/error.h"
#include "decode_bench_arena.h"
#include "decode_bench_args.h"
#include "decode_case.h"
#include "device_arena.h"
#include "device_mem.h"
#include "event_timing.h"
#include "graph_timing.h"
#include "quant/kv_format.h"
#include "read_bandwidth.h"
#include "write_case.h"

namespace {

using namespace nibble;
using namespace nibble::bench;
using quant::KvDtype;

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

// The device's practical read bandwidth: a read-only kernel over 2 GiB, and a device-to-device copy
// (read + write), GB/s. Its buffers are freed before the arena is allocated.
struct Bandwidth {
  double read_gbps = 0, copy_gbps = 0;
};
Bandwidth probe_bandwidth(const BenchDevice& dev) {
  const int64_t probe_bytes = int64_t{2} << 30;
  DeviceMem probe(probe_bytes), probe2(probe_bytes), sink(16);
  NIBBLE_CUDA_CHECK(cudaMemset(probe.p, 1, probe_bytes));
  const double read_s = time_read(probe.p, probe_bytes, sink.as<unsigned>(), dev.sms, 6);
  const double copy_s = median_seconds_per_call(
      [&](int) { NIBBLE_CUDA_CHECK(cudaMemcpyAsync(probe2.p, probe.p, probe_bytes, cudaMemcpyDeviceToDevice)); }, 0.3,
      200, 3);
  return {probe_bytes / read_s * 1e-9, 2.0 * probe_bytes / copy_s * 1e-9};
}

// The run: its flags, device, arena and bandwidth, and the JSON report its tables fill.
struct Run {
  const DecodeBenchOptions& o;
  const BenchDevice& dev;
  const DeviceArena& arena;
  const Sustain& sustain;
  double read_gbps = 0;
  nlohmann::json& report;
};

// One row of the decode table: every format of `shape` timed with `timing`, the plan's own items
// (chunk 0) or forced to items of `chunk` tokens; printed, and appended to the report.
void decode_row(const Run& run, const DecodeShape& shape, DecodeTiming timing, int64_t chunk) {
  const DecodeBenchOptions& o = run.o;
  std::map<KvDtype, std::optional<DecodeCase>> cases;
  for (KvDtype d : o.formats) cases[d] = make_decode_case(o, run.dev, d, shape, chunk);
  std::map<KvDtype, double> sm_mhz;         // the lower of the two orders' clocks
  std::map<KvDtype, DecodeResult> energy;  // the faster order's power and joules per call
  const auto times = time_both_orders(o.formats, o.both_orders, [&](KvDtype d) {
    if (!cases[d]) return 0.0;
    const DecodeResult r = bench_decode(run.arena, *cases[d], timing, run.sustain);
    sm_mhz[d] = sm_mhz.count(d) ? std::min(sm_mhz[d], r.sm_mhz) : r.sm_mhz;
    if (!energy.count(d) || r.seconds < energy[d].seconds) energy[d] = r;
    return r.seconds;
  });
  const double spread = order_spread(times);
  std::map<KvDtype, DecodeResult> results;
  const std::string label = chunk > 0 ? fmt::format("c{}", chunk) : decode_timing_name(timing);
  std::string line = fmt::format("{:>4} {:>7} {:>6} {:>6} |", shape.group, shape.ctx, shape.batch, label);
  for (KvDtype d : o.formats) {
    const auto [fwd, rev] = times.at(d);
    DecodeResult r;
    if (fwd > 0 && rev > 0) {
      r.seconds = std::min(fwd, rev);
      r.gbps = cases[d]->io_bytes() / r.seconds * 1e-9;
      r.sm_mhz = sm_mhz[d];
      r.watts = energy[d].watts;
      r.joules_per_call = energy[d].joules_per_call;
    }
    results[d] = r;
    line += r.seconds > 0 ? fmt::format(" {:>8.1f} {:>6.0f} {:>5.1f}% |", r.seconds * 1e6, r.gbps,
                                        100.0 * r.gbps / run.read_gbps)
                          : fmt::format(" {:>22} |", "(does not fit)");
    if (r.seconds > 0) {
      const cuda::DecodeSplitPlan& plan = cases[d]->plan;
      run.report["decode"].push_back(
          {{"dtype", quant::kv_dtype_name(d)}, {"group", shape.group}, {"ctx", shape.ctx}, {"batch", shape.batch},
           {"timing", decode_timing_name(timing)}, {"chunk_tokens", plan.chunk_tokens},
           {"block_warps", plan.block_warps}, {"forced_chunk", chunk > 0}, {"units", plan.num_units},
           {"spans_units", plan.spans_units()}, {"merge", decode_merge_name(run.arena, *cases[d])},
           {"seconds", r.seconds}, {"gbps", r.gbps}, {"fraction_of_read_bw", r.gbps / run.read_gbps},
           {"sm_mhz", r.sm_mhz}, {"board_watts", r.watts}, {"joules_per_call", r.joules_per_call},
           {"sustain_seconds", o.sustain_seconds}, {"seconds_forward", fwd}, {"seconds_reverse", rev},
           {"order_spread", spread}});
    }
  }
  auto ratio = [&](KvDtype a, KvDtype b) {
    return results[a].seconds > 0 && results[b].seconds > 0 ? results[a].seconds / results[b].seconds : NAN;
  };
  line += fmt::format(" {:>9.3f} {:>8.3f} {:>12}", ratio(KvDtype::kNVFP4, KvDtype::kFP8),
                      ratio(KvDtype::kFP8, KvDtype::kBF16),
                      o.both_orders ? fmt::format("{:.1f}%", 100.0 * spread) : std::string("-"));
  line += " | SM MHz";
  for (KvDtype d : o.formats) {
    if (results[d].seconds > 0) line += fmt::format(" {} {:.0f}", quant::kv_dtype_name(d), results[d].sm_mhz);
  }
  for (KvDtype d : o.formats) {  // the split merge in cluster pairs (decode_pair_merge.cuh)
    if (results[d].seconds > 0 && std::strcmp(decode_merge_name(run.arena, *cases[d]), "pairs") == 0) {
      line += fmt::format(" | {} merged in cluster pairs", quant::kv_dtype_name(d));
    }
  }
  if (run.sustain.energy != nullptr && timing == DecodeTiming::kGraph) {
    line += " | board W, mJ/call";
    for (KvDtype d : o.formats) {
      if (results[d].joules_per_call > 0) {
        line += fmt::format(" {} {:.0f} {:.3f}", quant::kv_dtype_name(d), results[d].watts,
                            results[d].joules_per_call * 1e3);
      }
    }
  }
  // nvfp4 at head_dim 64 and 128 has two step builds (tc_steps): time both on this row's plan
  // (graph timing).
  const bool two_step_builds =
      cuda::detail::tc_steps(quant::ElemFormat::kNVFP4, quant::ElemFormat::kNVFP4, o.head_dim) == 2;
  if (timing == DecodeTiming::kGraph && two_step_builds && cases.count(KvDtype::kNVFP4) && cases[KvDtype::kNVFP4]) {
    const DecodeCase& c = *cases[KvDtype::kNVFP4];
    // Units that span sequences run only in the long-item builds (no 16-token-step build).
    const double s1 =
        c.plan.spans_units() ? 0.0 : bench_decode(run.arena, c, DecodeTiming::kGraph, run.sustain, 1).seconds;
    const double s2 = bench_decode(run.arena, c, DecodeTiming::kGraph, run.sustain, 2).seconds;
    const int warps = any_plan_block_warps(c);
    line += fmt::format(" | nvfp4 {} {} tok, any-plan builds: 16-tok steps {}, 32-tok steps "
                        "({} warps/block) {:.1f} us",
                        c.plan.spans_units() ? fmt::format("{} units of ~", c.plan.num_units) : "item",
                        c.plan.chunk_tokens, s1 > 0 ? fmt::format("{:.1f} us", s1 * 1e6) : "-", warps, s2 * 1e6);
    run.report["nvfp4_steps"].push_back({{"group", shape.group}, {"ctx", shape.ctx}, {"batch", shape.batch},
                                         {"chunk_tokens", c.plan.chunk_tokens}, {"block_warps", warps},
                                         {"units", c.plan.num_units}, {"spans_units", c.plan.spans_units()},
                                         {"steps1_seconds", s1}, {"steps2_seconds", s2}});
  }
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

// The decode table: a warm-up on the first shape, then one row per shape and timing (and forced chunk).
void decode_table(const Run& run) {
  const DecodeBenchOptions& o = run.o;
  std::string header = fmt::format("{:>4} {:>7} {:>6} {:>6} |", "gqa", "ctx", "batch", "timing");
  for (KvDtype d : o.formats) header += fmt::format(" {:>22} |", fmt::format("{} us GB/s %BW", quant::kv_dtype_name(d)));
  header += " nvfp4/fp8 fp8/bf16 order spread | SM MHz";
  fmt::print("{}\n", header);
  // Warm-up: the first shape, every format, for at least kWarmupSeconds, results dropped. On a GPU
  // that was idle, the first second or so of cases came out off by up to ~5% (H200, 2026-11-30:
  // GQA 8 8 x 1K nvfp4 14.3 us as the first shape of the machine's first process, 15.0 timed
  // again in the same run and in every later process; fp8's first pass 15.4 against 14.7; SM
  // clock at 1980 MHz throughout, cause not found). One pass of the first shape was not enough.
  constexpr double kWarmupSeconds = 2.0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < kWarmupSeconds) {
    for (KvDtype d : o.formats) {
      if (const std::optional<DecodeCase> c = make_decode_case(o, run.dev, d, o.shapes.front())) {
        bench_decode(run.arena, *c, DecodeTiming::kGraph, run.sustain);
      }
    }
  }
  for (const DecodeShape& shape : o.shapes) {
    for (DecodeTiming t : o.timings) decode_row(run, shape, t, 0);
    for (int64_t chunk : o.chunks) decode_row(run, shape, DecodeTiming::kGraph, chunk);
  }
}

// The write-path table: one row per write shape, every format.
void write_table(const Run& run) {
  const DecodeBenchOptions& o = run.o;
  const bool four_over_six = o.write_rule == quant::Nvfp4ScaleRule::kFourOverSix;
  fmt::print("\nwrite path (f32 K/V in, quantize + store), {} KV heads, head_dim {}, nvfp4 block scale {}; GB/s = "
             "input + stored bytes; same arena, same two-order timing\n",
             o.kv_heads, o.head_dim, four_over_six ? "4-over-6" : "amax/6");
  for (const WriteShape& w : o.write_shapes) {
    const auto times =
        time_both_orders(o.formats, o.both_orders, [&](KvDtype d) { return bench_write(o, run.arena, d, w); });
    const double spread = order_spread(times);
    std::string line = fmt::format("tokens {:>6} g {:<4} |", w.tokens, w.g);
    for (KvDtype d : o.formats) {
      const auto [fwd, rev] = times.at(d);
      const double s = std::min(fwd, rev);
      const double gbps = write_io_bytes(o, d, w.tokens) / s * 1e-9;
      line += fmt::format(" {} {:.1f} us {:.0f} GB/s ({:.1f}%) |", quant::kv_dtype_name(d), s * 1e6, gbps,
                          100.0 * gbps / run.read_gbps);
      run.report["write"].push_back({{"dtype", quant::kv_dtype_name(d)}, {"tokens", w.tokens}, {"g", w.g},
                                     {"nvfp4_rule", four_over_six ? "4over6" : "6"}, {"seconds", s}, {"gbps", gbps},
                                     {"fraction_of_read_bw", gbps / run.read_gbps}, {"seconds_forward", fwd},
                                     {"seconds_reverse", rev}, {"order_spread", spread}});
    }
    line += o.both_orders ? fmt::format(" order spread {:.1f}%", 100.0 * spread) : std::string();
    fmt::print("{}\n", line);
  }
}

// How a time is taken from the two orders (printed, and the JSON's "timing").
const char* order_note(const DecodeBenchOptions& o) {
  return o.both_orders ? "time = min of the medians of two passes per shape (formats in the given order, then "
                         "reversed); order spread = max over formats of |fwd - rev| / min(fwd, rev)"
                       : "time = median of one pass per shape, formats in the given order (--one-order)";
}

// What the tables measure, printed once before them.
void print_preamble(const DecodeBenchOptions& o) {
  fmt::print("{}\n", order_note(o));
  fmt::print("decode attention, head_dim {}, page {}, {} KV heads, q f32, output f32; GB/s counts KV bytes "
             "(incl. scales) + q + output; %BW = of the read bandwidth above{}{}\n",
             o.head_dim, o.page_size, o.kv_heads,
             o.engine_batches ? "; each batch padded to the engine's graph bucket with 2-token sequences "
                                "(--engine-batches)"
                              : "",
             o.mixed_seed != 0
                 ? fmt::format("; sequence lengths log-uniform in [ctx/16, ctx], seed {} (--mixed)", o.mixed_seed)
                 : std::string());
  fmt::print("timing column: graph = CUDA-graph replay of N captured calls, per call (GPU time of decode kernel + "
             "reduce, no host launch cost; what the engine's graph-replayed decode steps see); eager = calls "
             "launched from the host back to back (includes host launch cost where it exceeds GPU time); "
             "cN = graph timing with the split plan forced to N-token items; SM MHz = the SM clock right after "
             "each format's timing (the lower of the two orders){}\n\n",
             o.sustain_seconds > 0
                 ? fmt::format("; every graph timing after {} s of replays of its call (--sustain)", o.sustain_seconds)
                 : std::string());
}

}  // namespace

int main(int argc, char** argv) {
  DecodeBenchOptions o;
  try {
    o = parse_decode_bench_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const Error& e) {
    fmt::print(stderr, "{}\nbench_decode_attention: {}\n", decode_bench_usage(argv[0]), e.what());
    return 2;
  }
  try {
    const BenchDevice dev = query_bench_device();
    const Bandwidth bw = probe_bandwidth(dev);
    fmt::print("device: {} ({} SMs, L2 {} MiB)\nread bandwidth (read-only kernel): {:.0f} GB/s; "
               "device-to-device copy (read+write): {:.0f} GB/s\n",
               dev.name, dev.sms, dev.l2_bytes >> 20, bw.read_gbps, bw.copy_gbps);
    // --sustain: the board's energy counter, read across each sustained window (none: no power column).
    int cuda_device = 0;
    NIBBLE_CUDA_CHECK(cudaGetDevice(&cuda_device));
    const std::optional<BoardEnergy> board_energy =
        o.sustain_seconds > 0 ? BoardEnergy::open(cuda_device) : std::nullopt;
    const Sustain sustain{o.sustain_seconds, board_energy ? &*board_energy : nullptr};
    if (o.sustain_seconds > 0) {
      fmt::print("board energy counter (NVML): {}\n",
                 board_energy ? "read across each sustained window: board W and mJ per call at the end of each row"
                              : "not available, no power column");
    }

    // One arena for every case of the run, sized before the first one is timed.
    ArenaLayout arena_layout(kNumRegions);
    for (const DecodeShape& shape : o.shapes)
      for (KvDtype d : o.formats) {
        if (const std::optional<DecodeCase> c = make_decode_case(o, dev, d, shape)) arena_layout.require(c->region_bytes());
        for (int64_t chunk : o.chunks)
          if (const std::optional<DecodeCase> c = make_decode_case(o, dev, d, shape, chunk))
            arena_layout.require(c->region_bytes());
      }
    for (const WriteShape& w : o.write_shapes)
      for (KvDtype d : o.formats) arena_layout.require(write_region_bytes(o, d, w.tokens));
    const DeviceArena arena(arena_layout);
    const double gib = double(int64_t{1} << 30);
    fmt::print("device arena: {:.2f} GiB allocated once for all shapes and formats (KV pool region {:.2f} GiB at "
               "its base, other buffers at fixed offsets); nothing is allocated or freed between cases\n",
               arena.bytes() / gib, arena_layout.region_bytes(kPool) / gib);
    print_preamble(o);

    nlohmann::json report;
    report["device"] = dev.name;
    report["read_gbps"] = bw.read_gbps;
    report["copy_gbps"] = bw.copy_gbps;
    report["page_size"] = o.page_size;
    report["head_dim"] = o.head_dim;
    report["kv_heads"] = o.kv_heads;
    report["arena_bytes"] = arena.bytes();
    report["orders"] = o.both_orders ? 2 : 1;
    report["timing"] = order_note(o);
    report["timing_modes"] = "graph: CUDA-graph replay, per call; eager: host launches back to back";
    report["sustain_seconds"] = o.sustain_seconds;
    report["engine_batches"] = o.engine_batches;
    report["mixed_seed"] = o.mixed_seed;      // 0: every sequence ctx long
    report["pair_merge"] = o.pair_merge;      // --pair-merge; each row's "merge" says what ran
    report["prefix_ready"] = o.prefix_ready;  // --prefix-ready

    const Run run{o, dev, arena, sustain, bw.read_gbps, report};
    if (!o.shapes.empty()) decode_table(run);
    if (!o.write_shapes.empty()) write_table(run);
    if (!o.json_path.empty()) {
      std::ofstream(o.json_path) << report.dump(2) << "\n";
      fmt::print("wrote {}\n", o.json_path);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_decode_attention: {}\n", e.what());
    return 1;
  }
  return 0;
}
