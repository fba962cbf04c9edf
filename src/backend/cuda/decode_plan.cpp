#include "backend/cuda/decode_plan.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>

#include "common/error.h"

namespace nibble::cuda {

std::vector<int32_t> DecodeSplitPlan::packed() const {
  std::vector<int32_t> out;
  out.reserve(packed_size());
  out.insert(out.end(), work_seq.begin(), work_seq.end());
  out.insert(out.end(), work_begin.begin(), work_begin.end());
  out.insert(out.end(), work_end.begin(), work_end.end());
  out.insert(out.end(), seq_work_offset.begin(), seq_work_offset.end());
  out.insert(out.end(), unit_first_item.begin(), unit_first_item.end());
  return out;
}

namespace {

int64_t granules_of(int64_t tokens) { return (tokens + kDecodeSplitGranule - 1) / kDecodeSplitGranule; }

// Items of one sequence of `len` tokens with chunks of `chunk_tokens`; a last item of at most
// `tail_tokens` joins the one before it (short-item builds, decode_plan.h).
int64_t items_of(int64_t len, int64_t chunk_tokens, int64_t tail_tokens) {
  const int64_t items = (len + chunk_tokens - 1) / chunk_tokens;
  return items > 1 && len - (items - 1) * chunk_tokens <= tail_tokens ? items - 1 : items;
}

// Work items of the batch with chunks of `chunk_granules`.
int64_t count_items(const DecodePlanInputs& in, int64_t chunk_granules, int64_t tail_tokens = 0) {
  int64_t items = 0;
  for (int32_t len : in.seq_lens) items += items_of(len, chunk_granules * kDecodeSplitGranule, tail_tokens);
  return items;
}

// The batch without its trailing sequences of at most kDecodeWholeSequenceShortTokens: the engine's
// padding (decode_plan.h), whose blocks come last in the grid and take whichever slots free first,
// so the long-item rules size their waves without them, and spanning units lay only these end to
// end (the padding gets a unit each after them). All sequences where every one is that short.
int64_t spanned_seqs(const DecodePlanInputs& in) {
  int64_t n = static_cast<int64_t>(in.seq_lens.size());
  while (n > 0 && in.seq_lens[n - 1] <= kDecodeWholeSequenceShortTokens) --n;
  return n > 0 ? n : static_cast<int64_t>(in.seq_lens.size());
}

// Work items of the spanned sequences (above).
int64_t count_spanned_items(const DecodePlanInputs& in, int64_t chunk_granules) {
  int64_t items = 0;
  for (int64_t s = 0, n = spanned_seqs(in); s < n; ++s) {
    items += items_of(in.seq_lens[s], chunk_granules * kDecodeSplitGranule, 0);
  }
  return items;
}

// Work items of sequences longer than kDecodeWholeSequenceShortTokens: the engine's padding
// sequences (2 tokens, decode_plan.h) run their blocks in whichever slots free first.
int64_t count_long_items(const DecodePlanInputs& in, int64_t chunk_granules) {
  int64_t items = 0;
  for (int32_t len : in.seq_lens) {
    if (len > kDecodeWholeSequenceShortTokens) items += items_of(len, chunk_granules * kDecodeSplitGranule, 0);
  }
  return items;
}

// Whether a plan of `chunk_tokens` runs the short-item build: 128 to 512 tokens (one to four 16-token
// chunks per warp of its 8: kDecodeShortItemRounds), a tail of one chunk joined to the item before
// it, on a grid of at most one block per SM.
bool short_build_fits(const DecodePlanInputs& in, int64_t chunk_tokens) {
  const int64_t warp_round = kTcChunkTokens * in.short_item_warps;
  if (in.short_item_warps <= 0 || chunk_tokens < warp_round || chunk_tokens > kDecodeShortItemRounds * warp_round) {
    return false;
  }
  const int64_t items = count_items(in, chunk_tokens / kDecodeSplitGranule, kDecodeShortItemTailTokens);
  return items * in.num_kv_heads * in.group_chunks <= in.num_sms;
}

// Whether the format has long-item builds (nvfp4 at head_dim 64 and 128): its plans size their waves
// without the trailing padding (spanned_seqs). For the other formats neither way wins everywhere
// (H200, 2026-12-03, fp8, graph replays, both orders, twice, the engine's padded batches, µs with
// the padding counted as rows -> without: 32K x 31 (+1) 469.4 -> 492.7, x 20 (+4) 323.7 -> 333.9, x
// 17 (+7) 280.5 -> 285.8, x 40 (+8) 636.7 -> 648.8; but x 34 (+14) 547.0 -> 530.7, x 50 (+14) 814.0
// -> 795.0, x 100 (+28) 1571.8 -> 1523.7, 16K x 100 (+28) 834.9 -> 773.7, 64K x 50 (+14) 1634.5 ->
// 1527.5, 128K x 50 (+14) 3268.0 -> 3009.9), so their plan takes whichever chunk has the lower
// estimated makespan (list_makespan): right at 9 of those 12 shapes and within 1% at a tenth (16K x
// 50 (+14)); wrong at 32K x 34 (+14) and x 40 (+8), by 3% and 2%. Counting the padding is wrong at 7.
bool has_long_items(const DecodePlanInputs& in) {
  for (const DecodeLongItemBuild& b : in.long_items) {
    if (b.warps > 0) return true;
  }
  return false;
}

// Flash-decoding split sized by wave efficiency: with S = num_sms · blocks_per_sm slots, a grid of B
// blocks runs in ceil(B / S) waves and keeps (B / S) / ceil(B / S) of the slots busy. Tries splitting
// the longest sequence into 1, 2, ... items (chunks never below min_granules) and takes the fewest
// splits whose efficiency is within 5% of the best (fewer splits = less merge work): a batch that
// already fills whole waves stays unsplit. Chunks of more than one granule are rounded up to a
// multiple of `multiple`. The trailing padding (spanned_seqs) counts as rows unless `padding_free`.
// Returns the chunk in granules.
int64_t chunk_for_slots(const DecodePlanInputs& in, int64_t max_granules, int64_t min_granules, int64_t blocks_per_sm,
                        int64_t multiple, bool padding_free) {
  const int64_t blocks_per_item = in.num_kv_heads * in.group_chunks;
  const int64_t slots = in.num_sms * blocks_per_sm;
  const int64_t max_split = std::max<int64_t>(1, std::min<int64_t>(256, max_granules / min_granules));
  std::vector<double> efficiency;
  std::vector<int64_t> chunk_granules;
  double best = 0;
  for (int64_t split = 1; split <= max_split; ++split) {
    int64_t cg = (max_granules + split - 1) / split;
    if (cg > 1) cg = (cg + multiple - 1) / multiple * multiple;
    if (!chunk_granules.empty() && cg == chunk_granules.back()) continue;
    const int64_t items = padding_free ? count_spanned_items(in, cg) : count_items(in, cg);
    const double waves = static_cast<double>(items * blocks_per_item) / static_cast<double>(slots);
    const double eff = waves / std::ceil(waves);
    efficiency.push_back(eff);
    chunk_granules.push_back(cg);
    best = std::max(best, eff);
  }
  size_t pick = 0;
  while (efficiency[pick] < 0.95 * best) ++pick;
  return chunk_granules[pick];
}

// Whether items of `cg` granules run long-item build b: at least kDecodeWideItemTokens on a grid of
// one wave of its blocks, or its many_waves_tokens on any.
bool wide_fits(const DecodePlanInputs& in, const DecodeLongItemBuild& b, int64_t cg) {
  if (b.warps <= 0) return false;
  const int64_t tokens = cg * kDecodeSplitGranule;
  const int64_t blocks = count_spanned_items(in, cg) * in.num_kv_heads * in.group_chunks;
  return tokens >= kDecodeWideItemTokens && (blocks <= in.num_sms * b.blocks_per_sm || tokens >= b.many_waves_tokens);
}

// The short-item build's rules (DecodePlanInputs::short_item_warps), applied to the chunk of `cg`
// granules that the rules for every format chose, where its items are short (< kDecodeLongItemTokens).
// Returns the chunk in granules.
int64_t short_build_granules(const DecodePlanInputs& in, int64_t cg) {
  const int64_t short_granules = kTcChunkTokens * in.short_item_warps / kDecodeSplitGranule;
  if (in.short_item_warps <= 0 || short_granules < 1 || cg * kDecodeSplitGranule >= kDecodeLongItemTokens) return cg;
  const int64_t num_seqs = static_cast<int64_t>(in.seq_lens.size());
  const int64_t blocks_per_item = in.num_kv_heads * in.group_chunks;
  // First, short items that leave some SM without a block are cut to the shortest multiple of a round
  // (128 tokens at 8 warps) whose grid still fits 2 blocks per SM: the build's 16-token steps run
  // short items well on any block count. The rules for every format let neighbouring contexts jump between
  // item sizes: 1 x 2049 took 9 items of 256 tokens (72 blocks) and 1 x 4000 11 of 384 (88), where
  // 128-token items run in 9.0 and 9.9 us against 9.8 and 11.2 (fp8's plan 9.2 and 11.1; H200,
  // 2026-12-02, graph replays, GQA 4, forced chunks).
  if (count_items(in, cg) * blocks_per_item <= in.num_sms) {
    for (int64_t g = short_granules; g < cg; g += short_granules) {
      if (count_items(in, g) * blocks_per_item <= kDecodeMemoryBoundBlocksPerSm * in.num_sms) {
        cg = g;
        break;
      }
    }
  }
  // Then the build's longer items (H200, 2026-12-02, graph replays, GQA 4, nvfp4 us; fp8's plan in
  // brackets):
  //  - one item per sequence, of the fewest rounds that hold every sequence, where that grid fits
  //    the build: no merge. Up to short_item_whole_rounds on any grid, up to kDecodeShortItemRounds on
  //    a quarter of the SMs or more. 1 x 256 5.6 against 6.5 with 2 items of 128 (6.6), 1 x 300 6.1
  //    against 6.7 with 3 (6.8), 8 x 257 6.6 against 8.1 (8.9), 16 x 300 7.0 and 16 x 384 7.4
  //    against 10.0 and 10.3 with 2 4-warp items of 256 (8.4, 8.7); 4 rounds: 8 x 512 7.6 against
  //    8.6 (9.5), 16 x 512 8.2 against 10.4 (11.5), but 1 x 512 7.2 against 6.8 (7.1), 2 x 512 7.4
  //    against 7.1 (7.5), 4 x 512 7.6 against 7.8 (8.3). head_dim 64: 1 x 512 5.9 against 6.2 (6.2),
  //    2 x 512 6.0 against 6.3 (6.7);
  //  - else two-round items (256 tokens at 8 warps) where they fit and the one-round items would fill
  //    more than 3/4 of the SMs (or not fit the build at all): 1 x 2048 8.6 -> 8.1 (9.2), 1 x 3000
  //    9.5 -> 9.0 (10.8), 2 x 2048 9.7 -> 8.9 (9.8); fewer blocks lose below that (1 x 1024 7.3 ->
  //    7.8, 2 x 512 7.0 -> 7.6, 1 x 768 7.2 -> 7.7; 1 x 1536, 96 blocks of 128: 8.2 -> 8.0).
  const int64_t round = short_granules * kDecodeSplitGranule;
  for (int64_t r = 1; r <= kDecodeShortItemRounds; ++r) {
    const int64_t items = count_items(in, r * short_granules, kDecodeShortItemTailTokens);
    const bool grid_ok = r <= in.short_item_whole_rounds || 4 * items * blocks_per_item >= in.num_sms;
    if (items == num_seqs && grid_ok && short_build_fits(in, r * round)) return r * short_granules;
  }
  if (short_build_fits(in, 2 * round) &&
      4 * count_items(in, short_granules, kDecodeShortItemTailTokens) * blocks_per_item > 3 * in.num_sms) {
    return 2 * short_granules;
  }
  return cg;
}

// Rounds of `round` tokens in the spanned sequences (spanned_seqs), each one's last round counted whole.
int64_t rounds_of(const DecodePlanInputs& in, int64_t round) {
  int64_t rounds = 0;
  for (int64_t s = 0, n = spanned_seqs(in); s < n; ++s) rounds += (in.seq_lens[s] + round - 1) / round;
  return rounds;
}

// Spanning units of long-item build b (decode_plan.h, "Spanning units"): its slots' worth of units
// (num_sms · blocks_per_sm / blocks per unit), each the same number of whole rounds (give or take
// one) of the spanned sequences laid end to end; the trailing padding sequences' units come on top.
// 0 when a unit would hold fewer than kDecodeWideItemTokens tokens (or b is none).
int64_t span_unit_count(const DecodePlanInputs& in, const DecodeLongItemBuild& b) {
  if (b.warps <= 0) return 0;
  const int64_t round = b.item_granule_multiple * kDecodeSplitGranule;
  const int64_t rounds = rounds_of(in, round);
  const int64_t units = std::min(rounds, in.num_sms * b.blocks_per_sm / (in.num_kv_heads * in.group_chunks));
  return units >= 1 && rounds * round >= units * kDecodeWideItemTokens ? units : 0;
}

// The items of `units` spanning units of build b: unit u takes rounds [u·R / units, (u + 1)·R / units)
// of the R rounds of the spanned sequences in order, cut into one item per sequence it touches; a
// sequence's last item ends at its length. Each trailing padding sequence is then a unit of its own:
// dispatched last, its blocks take whichever slots free first, where chained into the last unit they
// would run one after the other in one block (decode_plan.h).
void span_units(const DecodePlanInputs& in, const DecodeLongItemBuild& b, int64_t units, DecodeSplitPlan& plan) {
  const int64_t round = b.item_granule_multiple * kDecodeSplitGranule;
  const int64_t num_seqs = spanned_seqs(in);
  const int64_t rounds = rounds_of(in, round);
  int64_t seq = 0, seq_round = 0;  // the next round to assign: round seq_round of sequence seq
  plan.seq_work_offset.assign(1, 0);
  for (int64_t u = 0; u < units; ++u) {
    plan.unit_first_item.push_back(static_cast<int32_t>(plan.work_seq.size()));
    int64_t left = (u + 1) * rounds / units - u * rounds / units;
    while (left > 0) {
      const int64_t len = in.seq_lens[seq];
      const int64_t take = std::min(left, (len + round - 1) / round - seq_round);
      plan.work_seq.push_back(static_cast<int32_t>(seq));
      plan.work_begin.push_back(static_cast<int32_t>(seq_round * round));
      plan.work_end.push_back(static_cast<int32_t>(std::min(len, (seq_round + take) * round)));
      left -= take;
      seq_round += take;
      if (seq_round * round >= len) {
        ++seq, seq_round = 0;
        plan.seq_work_offset.push_back(static_cast<int32_t>(plan.work_seq.size()));
      }
    }
  }
  NIBBLE_CHECK(seq == num_seqs, "decode plan: spanning units covered {} of {} sequences", seq, num_seqs);
  for (; seq < static_cast<int64_t>(in.seq_lens.size()); ++seq) {
    plan.unit_first_item.push_back(static_cast<int32_t>(plan.work_seq.size()));
    plan.work_seq.push_back(static_cast<int32_t>(seq));
    plan.work_begin.push_back(0);
    plan.work_end.push_back(in.seq_lens[seq]);
    plan.seq_work_offset.push_back(static_cast<int32_t>(plan.work_seq.size()));
  }
  plan.unit_first_item.push_back(static_cast<int32_t>(plan.work_seq.size()));
  plan.num_units = static_cast<int32_t>(plan.unit_first_item.size() - 1);
  plan.block_warps = b.warps;
  // The units' mean length, rounded up to a round: what the launch's build choices read.
  plan.chunk_tokens = static_cast<int32_t>((rounds + units - 1) / units * round);
}

// Whether the rule takes build b's spanning units over the chunk plan of `chunk` tokens (decode_plan.h,
// "Spanning units"): where that plan runs no long-item build, b is the 8-warp one, the units hold at
// least kDecodeSpanUnitTokens, and no spanned sequence is shorter than one of b's rounds (a unit would
// run it as one more item; the trailing padding gets units of its own).
bool span_units_pay(const DecodePlanInputs& in, const DecodeLongItemBuild& b, int64_t units, int64_t chunk) {
  if (b.blocks_per_sm != kDecodeSpanUnitBlocksPerSm) return false;
  for (const DecodeLongItemBuild& other : in.long_items) {
    if (wide_fits(in, other, chunk / kDecodeSplitGranule)) return false;
  }
  const int64_t round = b.item_granule_multiple * kDecodeSplitGranule;
  for (int64_t s = 0, n = spanned_seqs(in); s < n; ++s) {
    if (in.seq_lens[s] < round) return false;
  }
  return rounds_of(in, round) * round >= units * kDecodeSpanUnitTokens;
}

// Whether the spanned sequences' lengths are mixed (kDecodeMixedLengthRatio, decode_plan.h).
bool lengths_mixed(const DecodePlanInputs& in) {
  const int64_t n = spanned_seqs(in);
  int64_t total = 0, longest = 0;
  for (int64_t s = 0; s < n; ++s) total += in.seq_lens[s], longest = std::max<int64_t>(longest, in.seq_lens[s]);
  return static_cast<double>(longest) * static_cast<double>(n) > kDecodeMixedLengthRatio * static_cast<double>(total);
}

// Estimated makespan, in SM time (tokens of work · blocks per SM), of a grid whose items have the
// given works (tokens, overhead included), each run by `blocks_per_item` blocks in grid order, on a
// build of `blocks_per_sm` blocks per SM: list scheduling, each block taking the slot that frees
// first. An item's blocks start together and end together, so the slots move in groups of
// blocks_per_item and the items are scheduled on slots / blocks_per_item such groups (exact where
// that divides; 132 / 8 counts as 16).
double list_makespan(const std::vector<double>& item_work, int64_t blocks_per_item, int64_t num_sms,
                     int64_t blocks_per_sm) {
  const int64_t groups = std::max<int64_t>(1, num_sms * blocks_per_sm / blocks_per_item);
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int64_t i = 0; i < groups; ++i) free_at.push(0.0);
  double makespan = 0;
  for (double work : item_work) {
    const double end = free_at.top() + work;
    free_at.pop();
    free_at.push(end);
    makespan = std::max(makespan, end);
  }
  return makespan * static_cast<double>(blocks_per_sm);
}

// The works of the spanned sequences' items with chunks of `chunk` tokens (a last item of at most
// `tail_tokens` joined to the one before).
std::vector<double> chunk_item_work(const DecodePlanInputs& in, int64_t chunk, int64_t tail_tokens) {
  std::vector<double> work;
  for (int64_t s = 0, n = spanned_seqs(in); s < n; ++s) {
    const int64_t len = in.seq_lens[s];
    const int64_t items = items_of(len, chunk, tail_tokens);
    for (int64_t i = 0; i < items; ++i) {
      const int64_t tokens = i + 1 < items ? chunk : len - i * chunk;
      work.push_back(static_cast<double>(tokens + kDecodeBlockOverheadTokens));
    }
  }
  return work;
}

// The chunk of the lowest estimated makespan for a mixed batch of a format without long-item builds
// (decode_plan.h, "Mixed lengths"): the rule's chunk `cg` (granules) or an even share of the batch's
// work per slot, or a half, third or quarter of it, at `blocks_per_sm`; the rule's unless another's
// is lower by more than kDecodeMakespanMargin. The estimate is rough where blocks are short (its
// overhead term then dominates), so rule chunks under kDecodeLongItemTokens stay.
int64_t mixed_chunk_granules(const DecodePlanInputs& in, int64_t cg, int64_t min_granules, int64_t blocks_per_sm) {
  if (cg * kDecodeSplitGranule < kDecodeLongItemTokens) return cg;
  const int64_t blocks_per_item = in.num_kv_heads * in.group_chunks;
  int64_t total = 0;
  for (int64_t s = 0, n = spanned_seqs(in); s < n; ++s) total += in.seq_lens[s];
  const double share = static_cast<double>(total) * static_cast<double>(blocks_per_item) /
                       static_cast<double>(in.num_sms * blocks_per_sm);
  int64_t best = cg;
  double best_ms = (1.0 - kDecodeMakespanMargin) * list_makespan(chunk_item_work(in, cg * kDecodeSplitGranule, 0),
                                                                 blocks_per_item, in.num_sms, blocks_per_sm);
  for (int k = 1; k <= 4; ++k) {
    int64_t g = std::max<int64_t>(min_granules, granules_of(static_cast<int64_t>(std::ceil(share / k))));
    if (g > 1) g = (g + in.item_granule_multiple - 1) / in.item_granule_multiple * in.item_granule_multiple;
    const double ms =
        list_makespan(chunk_item_work(in, g * kDecodeSplitGranule, 0), blocks_per_item, in.num_sms, blocks_per_sm);
    if (ms < best_ms) best = g, best_ms = ms;
  }
  return best;
}

// The build a chunk plan of `chunk` tokens runs: the first long-item build whose rule the chunk meets
// (the heuristic's choice in plan_decode_splits: a build rejected there has fewer, longer items on
// its own plan, so it cannot fit the chosen one; or a forced chunk's), or `whole_build` (whole
// sequences), or the short-item build (one to four 16-token chunks per warp, at most one block per
// SM; a sequence's tail of one chunk joins the item before it); else the 4-warp one (warps 0).
struct ChunkBuild {
  int32_t warps = 0;
  int64_t blocks_per_sm = 0;
  int64_t tail_tokens = 0;
};
ChunkBuild chunk_plan_build(const DecodePlanInputs& in, int64_t chunk, const DecodeLongItemBuild* whole_build) {
  ChunkBuild build{.warps = 0, .blocks_per_sm = in.blocks_per_sm};
  for (const DecodeLongItemBuild& b : in.long_items) {
    if (wide_fits(in, b, chunk / kDecodeSplitGranule)) {
      build = {.warps = b.warps, .blocks_per_sm = b.blocks_per_sm};
      break;
    }
  }
  if (whole_build != nullptr) build = {.warps = whole_build->warps, .blocks_per_sm = whole_build->blocks_per_sm};
  if (short_build_fits(in, chunk)) {
    build = {.warps = in.short_item_warps, .blocks_per_sm = 1, .tail_tokens = kDecodeShortItemTailTokens};
  }
  return build;
}

// For a mixed batch (decode_plan.h, "Mixed lengths"): whether build b's spanning units have a lower
// estimated makespan than the chunk plan of `chunk` tokens on the build that plan runs
// (chunk_plan_build). A sequence shorter than a round inside the batch is one more item of the unit
// that reaches it, its block overhead counted like any item's.
bool units_beat_chunk(const DecodePlanInputs& in, const DecodeLongItemBuild& b, int64_t units, int64_t chunk,
                      const DecodeLongItemBuild* whole_build) {
  if (b.blocks_per_sm != kDecodeSpanUnitBlocksPerSm) return false;
  const ChunkBuild build = chunk_plan_build(in, chunk, whole_build);
  const int64_t blocks_per_item = in.num_kv_heads * in.group_chunks;
  const double chunk_ms = list_makespan(chunk_item_work(in, chunk, build.tail_tokens), blocks_per_item,
                                        in.num_sms, build.blocks_per_sm);
  DecodeSplitPlan spanning;
  span_units(in, b, units, spanning);
  std::vector<double> unit_work;
  for (int32_t u = 0; u < spanning.num_units; ++u) {
    double work = 0;
    for (int32_t w = spanning.unit_first_item[u]; w < spanning.unit_first_item[u + 1]; ++w) {
      work += static_cast<double>(spanning.work_end[w] - spanning.work_begin[w] + kDecodeBlockOverheadTokens);
    }
    unit_work.push_back(work * kDecodeUnitsLoopCost);
  }
  return list_makespan(unit_work, blocks_per_item, in.num_sms, b.blocks_per_sm) < chunk_ms;
}

// num_work and max_splits from the items.
void finish_plan(DecodeSplitPlan& plan) {
  plan.num_work = static_cast<int32_t>(plan.work_seq.size());
  plan.max_splits = 1;
  for (int32_t s = 0; s < plan.num_seqs; ++s) {
    plan.max_splits = std::max(plan.max_splits, plan.seq_work_offset[s + 1] - plan.seq_work_offset[s]);
  }
}

}  // namespace

DecodeSplitPlan plan_decode_splits(const DecodePlanInputs& in) {
  const int64_t num_seqs = static_cast<int64_t>(in.seq_lens.size());
  NIBBLE_CHECK(num_seqs > 0, "decode plan: the batch has no sequences");
  NIBBLE_CHECK(in.num_kv_heads > 0 && in.group_chunks > 0 && in.num_sms > 0 && in.blocks_per_sm > 0 &&
                   in.item_granule_multiple > 0 && in.short_item_warps >= 0 && in.short_item_whole_rounds >= 0,
               "decode plan: kv_heads {}, group_chunks {}, num_sms {}, blocks_per_sm {}, item_granule_multiple {} "
               "must all be positive (short_item_warps {}, short_item_whole_rounds {} >= 0)",
               in.num_kv_heads, in.group_chunks, in.num_sms, in.blocks_per_sm, in.item_granule_multiple,
               in.short_item_warps, in.short_item_whole_rounds);
  for (const DecodeLongItemBuild& b : in.long_items) {
    NIBBLE_CHECK(b.warps == 0 || (b.warps > 0 && b.blocks_per_sm > 0 && b.item_granule_multiple > 0),
                 "decode plan: a long-item build of {} warps needs blocks_per_sm ({}) and item_granule_multiple "
                 "({}) > 0 (warps 0 = none)",
                 b.warps, b.blocks_per_sm, b.item_granule_multiple);
  }
  int64_t max_len = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    NIBBLE_CHECK(in.seq_lens[s] >= 1, "decode plan: sequence {} has length {}, expected >= 1", s, in.seq_lens[s]);
    max_len = std::max<int64_t>(max_len, in.seq_lens[s]);
  }

  int64_t chunk = 0;
  const DecodeLongItemBuild* whole_build = nullptr;  // whole sequences on this build (above)
  if (in.force_chunk_tokens > 0) {
    NIBBLE_CHECK(in.force_chunk_tokens % kDecodeSplitGranule == 0,
                 "decode plan: chunk of {} tokens is not a multiple of {}", in.force_chunk_tokens, kDecodeSplitGranule);
    chunk = in.force_chunk_tokens;
  } else {
    // Aim at 2 blocks per SM (all a memory-bound format needs); at every block the format can use
    // only when the items stay long (see kDecodeMemoryBoundBlocksPerSm).
    const int64_t max_granules = granules_of(max_len);
    int64_t min_granules = std::max<int64_t>(1, in.min_chunk_tokens / kDecodeSplitGranule);
    const int64_t base_blocks_per_sm = std::min(in.blocks_per_sm, kDecodeMemoryBoundBlocksPerSm);
    const bool padding_free = has_long_items(in);
    int64_t cg =
        chunk_for_slots(in, max_granules, min_granules, base_blocks_per_sm, in.item_granule_multiple, padding_free);
    // A short batch whose finest split still leaves more than half the SMs without a block: halve the
    // floor once (1 × 1K: 8 items of 128 tokens, 11.0 µs, against 4 of 256, 11.9 µs, every format).
    const int64_t idle_granules = kDecodeIdleChunkTokens / kDecodeSplitGranule;
    // The short-item build's one-round items (one 16-token chunk per warp: 128 tokens at 8 warps), when
    // their grid fits one block per SM.
    const int64_t short_granules = kTcChunkTokens * in.short_item_warps / kDecodeSplitGranule;
    const bool short_items_fit = short_granules >= 1 && short_build_fits(in, short_granules * kDecodeSplitGranule);
    if (min_granules > idle_granules &&
        2 * count_items(in, cg) * in.num_kv_heads * in.group_chunks < in.num_sms) {
      min_granules = idle_granules;
      cg = chunk_for_slots(in, max_granules, min_granules, base_blocks_per_sm, in.item_granule_multiple, padding_free);
      // Issue-bound formats: one granule per item while half the SMs would still idle (1 × 1K: 16 items;
      // decode_plan.h), unless the short-item build takes the batch (below).
      if (in.blocks_per_sm > base_blocks_per_sm && min_granules > 1 && !short_items_fit &&
          2 * count_items(in, cg) * in.num_kv_heads * in.group_chunks < in.num_sms) {
        min_granules = 1;
        cg = chunk_for_slots(in, max_granules, min_granules, base_blocks_per_sm, in.item_granule_multiple,
                             padding_free);
      }
    }
    if (in.blocks_per_sm > base_blocks_per_sm) {
      const int64_t cg_full =
          chunk_for_slots(in, max_granules, min_granules, in.blocks_per_sm, in.item_granule_multiple, padding_free);
      if (cg_full * kDecodeSplitGranule >= kDecodeLongItemTokens) cg = cg_full;
      // The first long-item build whose items, sized for its own slots, are long enough (wide_fits).
      bool long_build = false;
      for (const DecodeLongItemBuild& b : in.long_items) {
        if (b.warps <= 0) continue;
        const int64_t cg_wide =
            chunk_for_slots(in, max_granules, min_granules, b.blocks_per_sm, b.item_granule_multiple, padding_free);
        if (wide_fits(in, b, cg_wide)) {
          cg = cg_wide;
          long_build = true;
          break;
        }
      }
      // Else whole sequences on the first long-item build they fill to kDecodeWholeSequenceFill in
      // one wave (decode_plan.h): the wave rule above had cut them into short items.
      for (const DecodeLongItemBuild& b : in.long_items) {
        if (long_build || b.warps <= 0) continue;
        const int64_t whole = (max_granules + b.item_granule_multiple - 1) / b.item_granule_multiple *
                              b.item_granule_multiple;
        const int64_t blocks = count_long_items(in, whole) * in.num_kv_heads * in.group_chunks;
        const int64_t slots = in.num_sms * b.blocks_per_sm;
        const int64_t whole_tokens = whole * kDecodeSplitGranule;
        if (whole_tokens >= kDecodeWholeSequenceTokens && whole_tokens <= kDecodeWholeSequenceMaxTokens &&
            blocks <= slots &&
            static_cast<double>(blocks) >= kDecodeWholeSequenceFill * static_cast<double>(slots)) {
          cg = whole;
          whole_build = &b;
          break;
        }
      }
    } else if (count_items(in, 1) * in.num_kv_heads * in.group_chunks <= in.num_sms * base_blocks_per_sm) {
      // Memory-bound formats: one granule per item while that grid is still one wave at 2 blocks per
      // SM (batch-1 steps of short contexts; "one wave of granules" in decode_plan.h).
      cg = 1;
    }
    // Formats without long-item builds, mixed lengths: the chunk of the lowest estimated makespan
    // (decode_plan.h, "Mixed lengths"); nvfp4 takes units for them below.
    if (!has_long_items(in) && lengths_mixed(in)) {
      cg = mixed_chunk_granules(in, cg, min_granules, base_blocks_per_sm);
    } else if (!has_long_items(in) && spanned_seqs(in) < num_seqs) {
      // Uniform with trailing padding: the rule's chunk with the padding counted as rows, or without
      // it, whichever has the lower estimated makespan (has_long_items).
      const int64_t free_cg =
          chunk_for_slots(in, max_granules, min_granules, base_blocks_per_sm, in.item_granule_multiple, true);
      const int64_t blocks_per_item = in.num_kv_heads * in.group_chunks;
      auto makespan = [&](int64_t g) {
        return list_makespan(chunk_item_work(in, g * kDecodeSplitGranule, 0), blocks_per_item, in.num_sms,
                             base_blocks_per_sm);
      };
      if (free_cg != cg && makespan(free_cg) < makespan(cg)) cg = free_cg;
    }
    // The short-item build takes a batch whose longer items would leave more than half the SMs idle:
    // at 1 x 1025 the rules above give 256-token items (17 granules in at most 8 splits, rounded to
    // the granule multiple), 40 blocks; this gives 9 items of 128 on 72.
    if (short_items_fit && cg > short_granules &&
        2 * count_items(in, cg) * in.num_kv_heads * in.group_chunks < in.num_sms) {
      cg = short_granules;
    }
    // Formats with the short-item build: its own item sizes for short plans (short_build_granules).
    cg = short_build_granules(in, cg);
    chunk = cg * kDecodeSplitGranule;
  }

  DecodeSplitPlan plan;
  plan.num_seqs = static_cast<int32_t>(num_seqs);
  plan.num_sms = static_cast<int32_t>(in.num_sms);
  // Spanning units instead of chunks (decode_plan.h): a forced build, or the rule's.
  if (in.force_chunk_tokens <= 0 && in.span_units_warps != 0) {
    for (const DecodeLongItemBuild& b : in.long_items) {
      if (b.warps <= 0 || (in.span_units_warps > 0 && b.warps != in.span_units_warps)) continue;
      const int64_t units = span_unit_count(in, b);
      const bool rule = in.span_units_warps < 0 && units > 0 &&
                        (lengths_mixed(in) ? units_beat_chunk(in, b, units, chunk, whole_build)
                                           : whole_build == nullptr && span_units_pay(in, b, units, chunk));
      if (units > 0 && (in.span_units_warps > 0 || rule)) {
        span_units(in, b, units, plan);
        finish_plan(plan);
        return plan;
      }
    }
  }
  plan.chunk_tokens = static_cast<int32_t>(chunk);
  const ChunkBuild build = chunk_plan_build(in, chunk, whole_build);
  plan.block_warps = build.warps;
  const int64_t tail_tokens = build.tail_tokens;
  plan.seq_work_offset.reserve(num_seqs + 1);
  for (int64_t s = 0; s < num_seqs; ++s) {
    plan.seq_work_offset.push_back(static_cast<int32_t>(plan.work_seq.size()));
    const int64_t len = in.seq_lens[s];
    const int64_t items = items_of(len, chunk, tail_tokens);
    for (int64_t i = 0; i < items; ++i) {
      plan.work_seq.push_back(static_cast<int32_t>(s));
      plan.work_begin.push_back(static_cast<int32_t>(i * chunk));
      plan.work_end.push_back(static_cast<int32_t>(i + 1 < items ? (i + 1) * chunk : len));
    }
  }
  plan.seq_work_offset.push_back(static_cast<int32_t>(plan.work_seq.size()));
  plan.num_units = static_cast<int32_t>(plan.work_seq.size());
  for (int32_t w = 0; w <= plan.num_units; ++w) plan.unit_first_item.push_back(w);
  finish_plan(plan);
  return plan;
}

}  // namespace nibble::cuda
