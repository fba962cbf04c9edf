#pragma once
// The split-KV (flash-decoding) plan for one decode step: built once on the host from the
// sequences' lengths, uploaded once, reused by every layer (no allocation, no host sync inside the
// per-layer call, so the step can be captured in a CUDA graph).
//
// A work item is one chunk [token_begin, token_end) of one sequence; the decode kernel runs one
// thread block per (work item, KV head, group chunk of <= 8 query heads). A sequence split into
// n > 1 items writes n partial outputs plus their log-sum-exp, merged by the reduce kernel; a
// sequence of one item writes its output directly. Chunk boundaries are multiples of
// kDecodeSplitGranule tokens (a multiple of every kernel tile), so tiles never straddle two items;
// every item is one chunk long but a sequence's last, which is shorter, or on the short-item build up
// to kDecodeShortItemTailTokens longer.
#include <cstdint>
#include <array>
#include <span>
#include <vector>

namespace nibble::cuda {

inline constexpr int32_t kDecodeSplitGranule = 64;  // tokens
inline constexpr int64_t kTcChunkTokens = 16;       // a warp's chunk in the tensor-core kernel (kTcChunk)

// Split sizing, measured on the H200 (2026-11-30, forced-chunk sweep of every plan at 1-32 × 1K-32K,
// GQA 4 and 8, head_dim 128, 8 KV heads, page 64; times include the merge): bf16 and fp8 blocks
// are memory-bound and 2 per SM already stream at the read bandwidth, so more, shorter items only
// add prologues, partial outputs and a longer merge (8 × 32K fp8: 133.7 µs with 2 blocks per SM,
// 142.0 with 4). nvfp4 blocks (and k8v4's, V in nvfp4) are issue-bound and gain from every resident
// block, but only while items stay long (8 × 32K nvfp4: 126.3 µs with 4 per SM, 136.7 with 2; at
// 1 × 16K, 512-token items on 2 per SM beat 256-token items on 4: 20.9 vs 25.2 µs).
inline constexpr int64_t kDecodeMemoryBoundBlocksPerSm = 2;
inline constexpr int64_t kDecodeLongItemTokens = 1024;  // items at least this long may fill every slot
inline constexpr int64_t kDecodeIdleChunkTokens = 128;  // the floor when half the SMs would sit idle
inline constexpr int64_t kDecodeMinChunkTokens = 256;   // the usual floor (DecodePlanInputs::min_chunk_tokens)
// Issue-bound formats (blocks_per_sm above kDecodeMemoryBoundBlocksPerSm: V in nvfp4) go one granule
// further when 128-token items still leave half the SMs idle: 1 x 1K nvfp4 (GQA 4 / 8, graph
// replays) 9.2 / 9.5 us with 16 items of 64 tokens against 9.6-9.9 / 9.7-10.1 with 8 of 128
// (2026-11-30, the 32-token build on 128-token items). Re-measured when 128-token items moved to
// the 16-token-step build (kTcShortItemTokens; H200, 2026-12-02): back-to-back calls then favour 8
// items of 128 (1 x 1K 8.1 against 8.7 us, fp8 8.7; 1 x 640 7.9 against 8.5), but the whole 8B
// batch-1 step at 1K did not (bench_model_decode, nvfp4 KV, one call: 4.138 ms/token with 16 items
// of 64, 4.194 with 8 of 128). That step's contexts are 1024 and then 1025, 1026, ...: without the
// one-granule rule those took 256-token items (17 granules in at most 8 splits, rounded up to the
// granule multiple), 40 blocks, which was the loss (found 2026-12-02 in the step's kernel timeline).
// So the rule stays for formats without the short-item build, and where the build exists
// (DecodePlanInputs::short_item_warps) the plan takes 128-token items whenever their grid fits one
// block per SM and the other rules' items would leave half the SMs idle: H200, 2026-12-02, graph
// replays, GQA 4, nvfp4 us (fp8 beside it) 1 x 1K 8.4 -> 7.3 (8.3), 1 x 1025 8.5 -> 8.1 (8.5), 1 x 600
// 8.3 -> 7.1 (8.1), 1 x 2K 9.0 -> 8.7 (9.2); the 8B step (mode 9, two runs each, ms) at 512 4.167 /
// 4.173 -> 4.160 / 4.169, 1K 4.175 / 4.181 -> 4.177 / 4.185, 1536 4.205 / 4.211 -> 4.177 / 4.185,
// 2K 4.244 / 4.248 -> 4.245 / 4.248. bf16 was
// 0.2-0.3 us slower at 64 (9.6 / 9.7 vs 9.3 / 9.5, 2026-11-30) in back-to-back calls, but not in the
// model's step (next rule).
// One wave of granules: memory-bound formats take one-granule (64-token) items when that grid fits
// num_sms · kDecodeMemoryBoundBlocksPerSm blocks (batch 1 up to 2K tokens at 8 KV heads). Measured
// in the whole 8B batch-1 step, where the merge is followed by the o GEMV (bench_model_decode,
// graph, H200, 2026-11-30, three runs each, ms/token), although back-to-back decode calls lose
// 0.2-0.3 us there (above): bf16 / fp8 at 512 tokens 4.66-4.70 /
// 4.68-4.72 with 128-token items -> 4.55-4.58 / 4.57-4.61; 1K 4.62-4.66 / 4.68-4.76 -> 4.56-4.57 /
// 4.58-4.63; 2K 4.64-4.69 / 4.68-4.77 -> 4.59-4.64 / 4.61-4.64. At 4K (512 blocks at 64 tokens,
// not one wave) 64-token items were slower: 4.73-4.78 -> 4.82-4.87 (bf16). nvfp4 keeps the rules
// above (1K: 4.66-4.72 with them, 4.69-4.71 forced to 64; 256-token items 4.74).

// Long-item builds (decode_long_item_builds): nvfp4 at head_dim 64 and 128 has two besides its 4-warp ones,
// blocks of 16 warps (1 per SM) and of 8 warps (2 per SM), on items of whole rounds of their warps'
// 32-token steps. The plan takes the first that fits, sized for its own slots: items of at least
// kDecodeWideItemTokens on one wave of its blocks, or of at least its many_waves_tokens on any grid
// (DecodeSplitPlan::block_warps says which). H200, 2026-12-01, graph replays, GQA 4, nvfp4 us:
//  - 4-warp -> 8-warp plan where they differ: one wave 4K x 32 50.5 -> 46.7 (4K items), 16K x 8
//    50.8 -> 50.0, 16K x 32 161 -> 155, 32K x 8 87.4 -> 85.7, 32K x 32 306 -> 295, 128K x 8 309 ->
//    301, 128K x 32 1178 -> 1143; several waves 32K x 128 1157 -> 1146, 128K x 128 4560 -> 4478, 16K
//    x 128 594 -> 594, 16K x 256 1163 -> 1168; lost with 1K items (32K x 1 20.5 -> 22.5, 1K x 128 56
//    -> 65, 4K x 8 19.3 -> 22.6) and 4K items on several waves (4K x 128 162 -> 171, 4K x 256 313 ->
//    331);
//  - 8-warp -> 16-warp plan: one wave 32K x 8 86.4 -> 83.5 (8K -> 16K items), 128K x 8 304 -> 292
//    (32K -> 64K), 16K x 8 50.0 -> 48.6; 2 waves of 128K items 32 x 128K 1152 -> 1129; nothing or
//    worse on 2 waves of shorter items (32K x 32 297.8 -> 297.5, 16K x 32 155 -> 161, 4K x 32 46.6
//    -> 50.7) and on 8 of 32K items (32K x 128 1156 -> 1179): each block's end leaves its SM empty
//    until the next one's prologue is done.
// head_dim 64 (nvfp4, the same builds since 2026-12-01) keeps these thresholds: the 8-warp build on
// several waves of >= 4096-token items, or the 16-warp one of >= 16384, lost there too (graph
// replays, 8 KV heads, GQA 4, us: 4K x 128 100.4 -> 108.2, 16K x 128 362.3 -> 365.2 / 398.9).
// The short-item build (DecodePlanInputs::short_item_warps) runs items of up to this many rounds of
// its warps' 16-token chunks (512 tokens at 8 warps); a sequence's last item of at most
// kDecodeShortItemTailTokens joins the item before it, whose first warp then takes one chunk more
// (2 x 1025 at 8 KV heads: 16 items of 128 tokens, 128 blocks, instead of 18 with a 1-token item
// each, whose 144 blocks leave the build for 4-warp blocks).
inline constexpr int64_t kDecodeShortItemRounds = 4;

// Spanning units (DecodePlanInputs::span_units_warps, DecodeSplitPlan::unit_first_item). A chunk plan
// cuts every sequence alike, so a batch whose rows (sequences × KV heads) do not match the slots
// leaves blocks idle or takes short items: 31 × 32K at 8 KV heads is 248 rows on 264 slots of the
// 8-warp build, where its rule took 4-warp blocks of 1792-token items instead (0.67 × fp8). Units
// cut the batch's sequences, laid end to end, into one run of whole rounds per slot group (33 units ×
// 8 KV heads = 264 blocks of the 8-warp build on 132 SMs), so every block gets the same work; a
// block runs its unit's items in turn (one per sequence it touches), and a sequence cut between
// units is merged as any split one. The build that runs them holds the items loop, which costs it
// ~4% against the one-item build on the same plan (its registers: 28-64 bytes spilled in the
// prologue; 32 × 32K 307.6 against 292.8-294.6 µs), so the rule takes units only where the chunk
// plan has no long-item build and the units are long: H200, 2026-12-02, graph replays, GQA 4, 8 KV
// heads, nvfp4 µs, chunk plan / 8-warp units / 16-warp units (bench_decode_attention --units off|8|16):
// 32K x 17 183.7 / 173.4 / 174.6, x 20 206.4 / 203.6 / 200.8, x 31 330.4 / 300.6 / 307.0, x 34
// 339.0 / 329.0 / 334.0 (GQA 8 x 31 336.8 / 300.7 / 307.6); where the chunk plan runs a long-item
// build, units lose or tie: 32K x 8 79.0 / 91.8 / 79.2, x 32 292.8 / 310.9 / 304.4, x 64 577.1 /
// 601.0 / 604.2, 128K x 8 285.8 / 311.3 / 285.8; and so do short units: 16K x 31 (15.4K-token
// units) 151.5 / 161.2 / 167.1, 8K x 31 79.5 / 89.1 / 95.8, 4K x 128 158.9 / 180.3 / 211.4. Nor do
// batches with a sequence shorter than a round inside them: the unit that reaches it runs it as one
// more item. The engine's padding is different: with CUDA graphs it pads a decode batch to its graph
// bucket (backend::graph_batch_bucket) with 2-token sequences at the end, which, chained into the
// last unit, cost that block one prologue and epilogue each (bench_decode_attention --engine-batches,
// chunk plan / 8-warp units: 32K x 33 (+15) 321.8 / 366.0, 16K x 33 182.4 / 218.5, 2026-12-02). So
// the trailing sequences of at most kDecodeWholeSequenceShortTokens get a unit each, after the
// spanning ones: last in the grid, their blocks take the slots that free first. And the long-item
// rules size their waves without them (so do the units), where they used to count each as a row:
// 32K x 50 (+14) had whole sequences on the 8-warp build, 400 long blocks in 1.5 waves of its 264
// slots, 574.6 us (0.708 x fp8). Then the rule above decides as for the unpadded batch. H200,
// 2026-12-03, graph replays, GQA 4, one order, nvfp4 us before -> after (nvfp4 / fp8 after): 32K x
// 17 (+7) 182.2 -> 172.1 (0.603), x 20 (+4) 206.8 -> 201.5 (0.607), x 23 (+1) 237.1 -> 228.1, x 34
// (+14) 330.7 -> 327.4, x 40 (+8) 400.5 -> 381.9 (0.589), x 50 (+14) 574.6 -> 475.0 (0.601), x 100
// (+28) 996.2 -> 923.8; 16K x 50 (+14) 301.9 -> 251.7, x 100 (+28) 513.2 -> 482.4; 64K x 17 (+7)
// 346.3 -> 327.1, x 34 (+14) 845.3 -> 628.1 (0.788 -> 0.605), x 50 (+14) 1125.2 -> 917.4; 128K x 17
// (+7) 671.6 -> 627.1, x 50 (+14) 2222.8 -> 1804.8; within 1.1% of the best of chunk plan, 8- and
// 16-warp units at each of these 20 shapes (128K x 31 (+1) 1113.0 -> 1123.1 is the worst).
inline constexpr int64_t kDecodeSpanUnitTokens = 16384;

// Whole sequences on a long-item build. The split rule keeps the fewest splits within 5% of the best
// wave efficiency, which at 31 x 32K (248 rows on the 8-warp build's 264 slots: 94%) cut the
// sequences into 1792-token items on 4-warp blocks (330.4 us, 0.671 x fp8), where whole sequences
// on the 8-warp build run as 32 x 32K's do; the engine's step happened to run that (its 2-token
// padding sequence made 256 rows: 292.1 us per layer). Where the long-item rules find no build, the
// plan takes whole sequences of kDecodeWholeSequenceTokens to kDecodeWholeSequenceMaxTokens on the
// first build they fill to kDecodeWholeSequenceFill in one wave, sequences of at most
// kDecodeWholeSequenceShortTokens (the engine's padding) not counted. H200, 2026-12-02, graph
// replays, both orders, GQA 4, nvfp4 us (fp8 beside it), before -> whole sequences: 32K x 31 300.4
// (units) -> 291.5 (484.3), 32K x 15 157.6 -> 146.1 (16-warp build; 252.3), 16K x 15 92.9 -> 76.8
// (132.7), GQA 8 32K x 31 298.6 -> 291.9; the engine's padded batches (--engine-batches) 32K x 33
// (+15) 318.0 -> 294.1 (507.4), 16K x 33 182.9 -> 152.5 (270.3); 16K x 31, 8K x 31 and 64K x 31
// equal; 128K x 31 1125.1 (units) -> 1139.2, hence the upper bound.
inline constexpr int64_t kDecodeWholeSequenceTokens = 16384;
inline constexpr int64_t kDecodeWholeSequenceMaxTokens = 65536;
inline constexpr double kDecodeWholeSequenceFill = 0.9;
inline constexpr int64_t kDecodeWholeSequenceShortTokens = kTcChunkTokens;
inline constexpr int64_t kDecodeSpanUnitBlocksPerSm = 2;  // the 8-warp build's
inline constexpr int64_t kDecodeShortItemTailTokens = kTcChunkTokens;

// Mixed lengths. The rules above count blocks (wave efficiency), which holds where the sequences are
// about as long as each other; in a serving batch of mixed contexts the blocks differ in work, and a
// plan whose waves look full can leave most SMs idle behind its longest items (32 sequences of 2K-28K
// tokens: whole sequences on the 8-warp build, its longest item 28K tokens against an even share of
// 11K). Where the longest spanned sequence is more than kDecodeMixedLengthRatio times their mean,
// the plan estimates each candidate's makespan instead: the blocks start in grid order as slots free
// (list scheduling), each block's work its tokens plus kDecodeBlockOverheadTokens, in SM time (a
// build of k blocks per SM gives each a k-th of it), spanning units' work times kDecodeUnitsLoopCost
// (their build's loop, ~4%). nvfp4 then takes units where their makespan is the lower; the other
// formats take the chunk of the lowest makespan among their rule's and even shares of the batch
// (where the rule's items are at least kDecodeLongItemTokens and another gains kDecodeMakespanMargin).
inline constexpr double kDecodeMixedLengthRatio = 1.25;
inline constexpr int64_t kDecodeBlockOverheadTokens = 512;
inline constexpr double kDecodeUnitsLoopCost = 1.04;
inline constexpr double kDecodeMakespanMargin = 0.05;  // a chunk other than the rule's must gain this

inline constexpr int64_t kDecodeWideItemTokens = 4096;
inline constexpr int64_t kDecodeWideManyWavesTokens = 32768;     // the 8-warp build
inline constexpr int64_t kDecodeSmBlockManyWavesTokens = 65536;  // the 16-warp build
struct DecodeLongItemBuild {
  int32_t warps = 0;  // warps per block; 0 = none
  int64_t blocks_per_sm = 0;
  int64_t item_granule_multiple = 1;
  int64_t many_waves_tokens = 0;  // items this long take it on any grid
};
inline constexpr int kDecodeLongItemBuilds = 2;

struct DecodePlanInputs {
  std::span<const int32_t> seq_lens;  // [num_seqs] tokens in the cache per sequence (>= 1), host
  int64_t num_kv_heads = 0;
  int64_t group_chunks = 1;   // ceil(query heads per KV head / 8)
  int64_t num_sms = 132;      // cudaDevAttrMultiProcessorCount of the device
  // Blocks per SM worth running for the format (decode_blocks_per_sm): the plan always aims at
  // min(this, kDecodeMemoryBoundBlocksPerSm) per SM, and at all of them when the items that gives
  // are >= kDecodeLongItemTokens (or at long_items' slots, above).
  int64_t blocks_per_sm = 4;
  // Never split finer than this (a shorter item costs a block's whole latency chain for little
  // work); lowered once to kDecodeIdleChunkTokens when it would leave more than half the SMs idle.
  // nvfp4 at head_dim 64 starts at kDecodeIdleChunkTokens (decode_min_chunk_tokens; H200, graph
  // replays, 8 KV heads, GQA 4, us, the plan's items -> 128-token items: 1 x 1K 8.0 (64) -> 7.3, 1 x
  // 4K 10.2 (256) -> 9.5, against fp8's 7.9 and 9.9; 8 x 1K stays at 256, 9.9 against 11.1 at 128).
  int64_t min_chunk_tokens = kDecodeMinChunkTokens;
  // Items longer than one granule span a multiple of this many granules (decode_item_granules: 2 for
  // nvfp4 at head_dim 64 and 128, whose 4 warps take 32-token steps, so that every warp of a block gets the
  // same number of steps). 1 x 32K nvfp4 (GQA 4, H200, graph replays): 1088-token items (17 steps of
  // 32 per warp pair, 16 for the other two) 24.0 us, 1024-token items 22.6; 1 x 64K 38.3 -> 37.2;
  // 2 x 32K 38.2 -> 36.8.
  int64_t item_granule_multiple = 1;
  std::array<DecodeLongItemBuild, kDecodeLongItemBuilds> long_items{};  // in order of preference
  // The short-item build's warps per block (decode_short_item_warps; 0 = none): items of one to four
  // rounds of 16-token chunks over its warps (kDecodeShortItemRounds) on a grid of at most one block
  // per SM run it (DecodeSplitPlan::block_warps), and the issue-bound formats' one-granule rule gives
  // way to its one-round items.
  int32_t short_item_warps = 0;
  // On that build, the most rounds of an item that holds a whole sequence (no merge) on any grid
  // (decode_short_item_whole_rounds: 3, or 4 at head_dim 64, whose items carry half the bytes); up to
  // kDecodeShortItemRounds where that grid fills at least a quarter of the SMs.
  int64_t short_item_whole_rounds = 3;
  int64_t force_chunk_tokens = 0;  // > 0: use this chunk size (a multiple of the granule); tests
  // Units that span sequences (kDecodeSpanUnitTokens above): -1 the plan's rule, 0 never, or the
  // warps of one of long_items' builds to use that build's units wherever they are at least
  // kDecodeWideItemTokens long (benchmarks and tests compare them).
  int32_t span_units_warps = -1;
};

struct DecodeSplitPlan {
  int32_t num_seqs = 0;
  int32_t num_work = 0;
  int32_t max_splits = 1;     // most items of one sequence; 1 = no reduce kernel needed
  int32_t chunk_tokens = 0;   // the chunk length used (multiple of kDecodeSplitGranule; items above)
  int32_t num_sms = 0;        // the SMs it was sized for (DecodePlanInputs::num_sms)
  int32_t block_warps = 0;    // the long- or short-item build it is for (DecodeLongItemBuild::warps,
                              // DecodePlanInputs::short_item_warps), forced chunks too; 0 = none
  std::vector<int32_t> work_seq;         // [num_work] sequence of each item
  std::vector<int32_t> work_begin;       // [num_work] first token of the item
  std::vector<int32_t> work_end;         // [num_work] one past its last token
  std::vector<int32_t> seq_work_offset;  // [num_seqs + 1] first item of each sequence
  // A block's work: unit u = items unit_first_item[u] .. unit_first_item[u + 1] - 1, run one after
  // the other (the tensor-core grid is num_units × kv_heads · group_chunks blocks). One item per unit
  // unless the plan spans sequences (spans_units, kDecodeSpanUnitTokens); only the long-item builds
  // run units of several.
  int32_t num_units = 0;
  std::vector<int32_t> unit_first_item;  // [num_units + 1]
  bool spans_units() const { return num_units != num_work; }

  // The device copy, one int32 array:
  //   [work_seq: num_work][work_begin: num_work][work_end: num_work][seq_work_offset: num_seqs + 1]
  //   [unit_first_item: num_units + 1]
  std::vector<int32_t> packed() const;
  int64_t packed_size() const { return 3 * static_cast<int64_t>(num_work) + num_seqs + 1 + num_units + 1; }
};

// Throws nibble::Error on an empty batch, a length < 1 or a bad chunk size.
DecodeSplitPlan plan_decode_splits(const DecodePlanInputs& in);

}  // namespace nibble::cuda
