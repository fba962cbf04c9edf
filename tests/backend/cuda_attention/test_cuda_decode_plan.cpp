// The split-KV plan (host only): every sequence is covered exactly once by contiguous items whose
// boundaries are multiples of the granule; long sequences in small batches are split; big batches
// are not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/decode_attention.h"  // decode_item_granules
#include "backend/cuda/decode_kernel_args.h"  // spread_smem_bytes, tc_geometry
#include "backend/cuda/decode_plan.h"
#include "common/error.h"

namespace nibble::cuda {
namespace {

void expect_covers(const DecodeSplitPlan& plan, const std::vector<int32_t>& lens) {
  ASSERT_EQ(plan.num_seqs, static_cast<int32_t>(lens.size()));
  ASSERT_EQ(plan.seq_work_offset.size(), lens.size() + 1);
  ASSERT_EQ(plan.seq_work_offset.back(), plan.num_work);
  int32_t max_splits = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    int32_t expect_begin = 0;
    for (int32_t w = plan.seq_work_offset[s]; w < plan.seq_work_offset[s + 1]; ++w) {
      EXPECT_EQ(plan.work_seq[w], static_cast<int32_t>(s));
      EXPECT_EQ(plan.work_begin[w], expect_begin);
      EXPECT_EQ(plan.work_begin[w] % kDecodeSplitGranule, 0);
      EXPECT_GT(plan.work_end[w], plan.work_begin[w]);
      expect_begin = plan.work_end[w];
    }
    EXPECT_EQ(expect_begin, lens[s]) << "sequence " << s;
    max_splits = std::max(max_splits, plan.seq_work_offset[s + 1] - plan.seq_work_offset[s]);
  }
  EXPECT_EQ(plan.max_splits, max_splits);
  // Units: consecutive runs of items, every item in exactly one; one item each unless they span.
  ASSERT_EQ(static_cast<int64_t>(plan.unit_first_item.size()), plan.num_units + 1);
  EXPECT_EQ(plan.unit_first_item.front(), 0);
  EXPECT_EQ(plan.unit_first_item.back(), plan.num_work);
  for (int32_t u = 0; u < plan.num_units; ++u) EXPECT_LT(plan.unit_first_item[u], plan.unit_first_item[u + 1]);
  if (!plan.spans_units()) {
    for (int32_t u = 0; u <= plan.num_units; ++u) EXPECT_EQ(plan.unit_first_item[u], u);
  }
  const std::vector<int32_t> packed = plan.packed();
  ASSERT_EQ(static_cast<int64_t>(packed.size()), plan.packed_size());
  EXPECT_EQ(packed[3 * plan.num_work + plan.num_seqs], plan.num_work);
  const int64_t units_at = 3 * static_cast<int64_t>(plan.num_work) + plan.num_seqs + 1;
  for (int32_t u = 0; u <= plan.num_units; ++u) EXPECT_EQ(packed[units_at + u], plan.unit_first_item[u]);
}

TEST(DecodeSplitPlan, SplitsOneLongSequenceToFillTheGpu) {
  const std::vector<int32_t> lens = {32768};
  const auto plan = plan_decode_splits({.seq_lens = lens, .num_kv_heads = 8, .num_sms = 132});
  expect_covers(plan, lens);
  EXPECT_EQ(plan.num_sms, 132);  // the launch sizes the few-blocks choice by it
  // 8 KV heads per item; 4 blocks per SM allowed, but items of 32768 / 64 = 512 tokens are short, so
  // the plan aims at 2 per SM: at least 90% of 2 × 132 blocks, and never more than one such wave.
  EXPECT_GE(plan.num_work * 8, 0.9 * 2 * 132);
  EXPECT_LE(plan.num_work * 8, 2 * 132);
  EXPECT_EQ(plan.chunk_tokens % kDecodeSplitGranule, 0);
}

// The choices measured best on the H200 (decode_plan.h), 8 KV heads,
// GQA <= 8: memory-bound formats (blocks_per_sm 2) and issue-bound ones (4) at each benchmark shape.
TEST(DecodeSplitPlan, MatchesTheMeasuredChoices) {
  struct Case {
    int32_t batch, ctx;
    int64_t blocks_per_sm;
    int32_t chunk_tokens, splits;
  };
  const Case cases[] = {
      {1, 512, 2, 64, 8},       // memory-bound, 64 blocks of one granule: one wave at 2 per SM
      {1, 1024, 2, 64, 16},     // 128 blocks of one granule (the 8B step: 4.62-4.66 -> 4.56-4.57 ms)
      {1, 2048, 2, 64, 32},     // 256 blocks: still one wave at 2 per SM
      {1, 1024, 4, 64, 16},     // issue-bound (nvfp4): 8 items still leave half idle, one granule each
      {1, 512, 4, 64, 8},       // the same drop: 8 items of 64, 64 blocks
      {1, 2048, 4, 128, 16},    // 128 blocks: no further drop
      {1, 4096, 2, 256, 16},    // 128 blocks; 32 items of 128 tokens were slower (14.8 vs 13.6 µs)
      {1, 16384, 2, 512, 32},   // 2 blocks per SM of 512 tokens
      {1, 16384, 4, 512, 32},   // 4 per SM would mean 256-token items: short, so 2 per SM
      {8, 1024, 2, 256, 4},
      {8, 32768, 2, 8192, 4},   // fp8 133.7 µs, against 142.0 with 8 items per sequence
      {8, 32768, 4, 4096, 8},   // nvfp4 126.3 µs, against 136.7 with 4
      {32, 32768, 2, 32768, 1},  // 256 blocks stream at the read bandwidth: no split, no merge
      {32, 32768, 4, 16384, 2},
  };
  for (const Case& c : cases) {
    const std::vector<int32_t> lens(c.batch, c.ctx);
    const auto plan =
        plan_decode_splits({.seq_lens = lens, .num_kv_heads = 8, .num_sms = 132, .blocks_per_sm = c.blocks_per_sm});
    expect_covers(plan, lens);
    EXPECT_EQ(plan.chunk_tokens, c.chunk_tokens) << c.batch << " x " << c.ctx << ", " << c.blocks_per_sm << "/SM";
    EXPECT_EQ(plan.max_splits, c.splits) << c.batch << " x " << c.ctx << ", " << c.blocks_per_sm << "/SM";
  }
}

// nvfp4 at head_dim 64 and 128 (32-token warp steps): items of more than one granule span whole
// rounds of the block's 4 warps (128 tokens), so no warp takes one step more than the others.
TEST(DecodeSplitPlan, ItemsOfThirtyTwoTokenStepBuildsSpanWholeBlockRounds) {
  EXPECT_EQ(decode_item_granules(quant::ElemFormat::kNVFP4, quant::ElemFormat::kNVFP4, 128), 2);
  EXPECT_EQ(decode_item_granules(quant::ElemFormat::kNVFP4, quant::ElemFormat::kNVFP4, 64), 2);
  EXPECT_EQ(decode_item_granules(quant::ElemFormat::kNVFP4, quant::ElemFormat::kNVFP4, 256), 1);
  EXPECT_EQ(decode_item_granules(quant::ElemFormat::kFP8, quant::ElemFormat::kNVFP4, 128), 1);
  EXPECT_EQ(decode_item_granules(quant::ElemFormat::kBF16, quant::ElemFormat::kBF16, 128), 1);
  struct Case {
    int32_t batch, ctx;
    int32_t before, after;  // chunk tokens with item_granule_multiple 1 and 2
  };
  const Case cases[] = {
      {1, 32768, 1088, 1024},  // 24.0 -> 22.6 us (decode_plan.h)
      {1, 65536, 1088, 1024},  // 38.3 -> 37.2
      {2, 32768, 1088, 1024},  // 38.2 -> 36.8
      {1, 1024, 64, 64},       // one granule: the 16-token-step build, nothing to round
      {1, 16384, 512, 512},
      {8, 32768, 4096, 4096},
  };
  for (const Case& c : cases) {
    const std::vector<int32_t> lens(c.batch, c.ctx);
    for (const int64_t multiple : {1, 2}) {
      const auto plan = plan_decode_splits(
          {.seq_lens = lens, .num_kv_heads = 8, .num_sms = 132, .blocks_per_sm = 4, .item_granule_multiple = multiple});
      expect_covers(plan, lens);
      EXPECT_EQ(plan.chunk_tokens, multiple == 1 ? c.before : c.after) << c.batch << " x " << c.ctx;
      if (multiple == 2 && plan.chunk_tokens > kDecodeSplitGranule) EXPECT_EQ(plan.chunk_tokens % 128, 0);
    }
  }
}

// nvfp4 at head_dim 64 and 128 has two long-item builds, blocks of 16 warps (1 per SM) and of 8 (2
// per SM). The plan takes the first whose own plan has items >= 4096 tokens on one wave of its
// blocks, or >= its many-waves length on any grid, with items of whole rounds of its warps' 32-token
// steps, and says which (block_warps); every other plan stays as without them.
TEST(DecodeSplitPlan, LongItemsFollowTheWideBuilds) {
  using quant::ElemFormat;
  for (const int head_dim : {64, 128}) {
    const auto builds = decode_long_item_builds(ElemFormat::kNVFP4, ElemFormat::kNVFP4, head_dim);
    EXPECT_EQ(builds[0].warps, 16) << head_dim;
    EXPECT_EQ(builds[0].blocks_per_sm, 1) << head_dim;
    EXPECT_EQ(builds[0].item_granule_multiple, 8) << head_dim;
    EXPECT_EQ(builds[0].many_waves_tokens, kDecodeSmBlockManyWavesTokens) << head_dim;
    EXPECT_EQ(builds[1].warps, 8) << head_dim;
    EXPECT_EQ(builds[1].blocks_per_sm, 2) << head_dim;
    EXPECT_EQ(builds[1].item_granule_multiple, 4) << head_dim;
    EXPECT_EQ(builds[1].many_waves_tokens, kDecodeWideManyWavesTokens) << head_dim;
  }
  const auto builds = decode_long_item_builds(ElemFormat::kNVFP4, ElemFormat::kNVFP4, 128);
  for (const auto& [k, v, d] : {std::tuple{ElemFormat::kNVFP4, ElemFormat::kNVFP4, 256},
                                std::tuple{ElemFormat::kFP8, ElemFormat::kNVFP4, 128},
                                std::tuple{ElemFormat::kFP8, ElemFormat::kFP8, 128},
                                std::tuple{ElemFormat::kBF16, ElemFormat::kBF16, 128},
                                std::tuple{ElemFormat::kF32, ElemFormat::kF32, 128}}) {
    for (const DecodeLongItemBuild& b : decode_long_item_builds(k, v, d)) {
      EXPECT_EQ(b.warps, 0) << quant::elem_format_name(k) << " " << d;
    }
  }
  struct Case {
    int32_t batch, ctx;
    int32_t four_warps, wide, warps;  // chunk tokens without and with the long-item builds, and its warps
  };
  const Case cases[] = {
      {8, 32768, 4096, 16384, 16},    // one wave of 128 blocks (H200: 87.3 -> 83.5 us)
      {8, 131072, 16384, 65536, 16},  // (306.9 -> 292.3)
      {32, 131072, 65536, 131072, 16},  // two waves of 128K items
      {32, 32768, 16384, 32768, 8},   // 256 blocks: no merge (304.8 -> 294.8)
      {16, 32768, 8192, 32768, 16},  // one wave of 128 blocks, no merge
      {128, 32768, 32768, 32768, 8},  // several waves of 32K items: the same items, in 8-warp blocks
      {128, 4096, 4096, 4096, 0},     // several waves of 4K items: 4-warp blocks
      {1, 32768, 1024, 1024, 0},      // 1K items: 4-warp blocks
      {1, 16384, 512, 512, 0},        // short items: the few-blocks build
      {8, 1024, 256, 256, 0},
      {1, 1024, 64, 64, 0},
  };
  for (const Case& c : cases) {
    const std::vector<int32_t> lens(c.batch, c.ctx);
    for (const bool use_wide : {false, true}) {
      const auto plan = plan_decode_splits({.seq_lens = lens,
                                            .num_kv_heads = 8,
                                            .num_sms = 132,
                                            .blocks_per_sm = 4,
                                            .item_granule_multiple = 2,
                                            .long_items = use_wide ? builds : decltype(builds){}});
      expect_covers(plan, lens);
      EXPECT_EQ(plan.chunk_tokens, use_wide ? c.wide : c.four_warps) << c.batch << " x " << c.ctx;
      EXPECT_EQ(plan.block_warps, use_wide ? c.warps : 0) << c.batch << " x " << c.ctx;
      if (plan.block_warps > 0) EXPECT_EQ(plan.chunk_tokens % (32 * plan.block_warps), 0);
    }
  }
  // With the 8-warp build alone, 8 x 32K takes it (one wave of 256 blocks of 8K items).
  const std::vector<int32_t> lens(8, 32768);
  const auto plan = plan_decode_splits(
      {.seq_lens = lens, .num_kv_heads = 8, .num_sms = 132, .blocks_per_sm = 4, .item_granule_multiple = 2,
       .long_items = {DecodeLongItemBuild{}, builds[1]}});
  EXPECT_EQ(plan.chunk_tokens, 8192);
  EXPECT_EQ(plan.block_warps, 8);
}

TEST(DecodeSplitPlan, DoesNotSplitABigBatch) {
  const std::vector<int32_t> lens(256, 4096);
  const auto plan = plan_decode_splits({.seq_lens = lens, .num_kv_heads = 8, .num_sms = 132});
  expect_covers(plan, lens);
  EXPECT_EQ(plan.max_splits, 1);
  EXPECT_EQ(plan.num_work, 256);
}

TEST(DecodeSplitPlan, MixedLengthsAndForcedChunks) {
  const std::vector<int32_t> lens = {1, 7, 64, 65, 4097, 100};
  const auto plan = plan_decode_splits({.seq_lens = lens, .num_kv_heads = 2, .force_chunk_tokens = 64});
  expect_covers(plan, lens);
  EXPECT_EQ(plan.max_splits, 65);  // 4097 tokens in chunks of 64
  EXPECT_EQ(plan.seq_work_offset[3] - plan.seq_work_offset[2], 1);
  EXPECT_EQ(plan.seq_work_offset[4] - plan.seq_work_offset[3], 2);
  const auto heuristic = plan_decode_splits({.seq_lens = lens, .num_kv_heads = 2});
  expect_covers(heuristic, lens);
}

// The format's plan inputs (decode_plan_format_inputs, as the engine and the benchmark make them):
// nvfp4 at head_dim 64 and 128 splits short contexts into items of the short-item build (8 warps):
// one item per sequence where a few rounds of chunks hold it (3 at head_dim 128, 4 at 64 or on a
// quarter of the SMs), else 128 tokens (one chunk per warp) while those leave a quarter of the SMs
// idle, else 256 (two); where 256-token items no longer fit one
// block per SM, 128-token items on up to 2 blocks per SM (4-warp blocks); batches that fill the SMs
// keep their items.
TEST(DecodeSplitPlan, Nvfp4ShortContextsTakeTheShortItemBuild) {
  using quant::ElemFormat;
  EXPECT_EQ(decode_min_chunk_tokens(ElemFormat::kNVFP4, ElemFormat::kNVFP4, 64), 128);
  EXPECT_EQ(decode_min_chunk_tokens(ElemFormat::kNVFP4, ElemFormat::kNVFP4, 128), kDecodeMinChunkTokens);
  EXPECT_EQ(decode_min_chunk_tokens(ElemFormat::kFP8, ElemFormat::kFP8, 64), kDecodeMinChunkTokens);
  EXPECT_EQ(decode_min_chunk_tokens(ElemFormat::kFP8, ElemFormat::kNVFP4, 64), kDecodeMinChunkTokens);
  for (const int head_dim : {64, 128, 256}) {
    const DecodePlanInputs in = decode_plan_format_inputs(ElemFormat::kNVFP4, ElemFormat::kNVFP4, head_dim);
    EXPECT_EQ(in.blocks_per_sm, decode_blocks_per_sm(ElemFormat::kNVFP4, ElemFormat::kNVFP4, head_dim));
    EXPECT_EQ(in.item_granule_multiple, decode_item_granules(ElemFormat::kNVFP4, ElemFormat::kNVFP4, head_dim));
    EXPECT_EQ(in.min_chunk_tokens, decode_min_chunk_tokens(ElemFormat::kNVFP4, ElemFormat::kNVFP4, head_dim));
    EXPECT_EQ(in.long_items[0].warps, head_dim <= 128 ? 16 : 0);
    EXPECT_EQ(in.short_item_warps, head_dim <= 128 ? 8 : 0);
    EXPECT_EQ(in.short_item_warps, decode_short_item_warps(ElemFormat::kNVFP4, ElemFormat::kNVFP4, head_dim));
    EXPECT_EQ(in.short_item_whole_rounds, head_dim == 64 ? 4 : head_dim == 128 ? 3 : 0);
    EXPECT_EQ(in.force_chunk_tokens, 0);
  }
  EXPECT_EQ(decode_short_item_warps(ElemFormat::kFP8, ElemFormat::kFP8, 128), 0);
  EXPECT_EQ(decode_short_item_warps(ElemFormat::kBF16, ElemFormat::kBF16, 64), 0);
  EXPECT_EQ(decode_short_item_whole_rounds(ElemFormat::kFP8, ElemFormat::kFP8, 64), 0);
  struct Case {
    int32_t batch, ctx;
    int32_t d64, d128;  // chunk tokens
    int32_t block_warps;  // both head_dims
  };
  const Case cases[] = {
      {1, 256, 256, 256, 8},     // one item: H200, d128 5.6 us against 6.5 with two of 128 (fp8 6.6)
      {1, 300, 384, 384, 8},     // one item of 3 rounds: 6.1 against 6.7 with 3 of 128 (fp8 6.8)
      {1, 512, 512, 128, 8},     // d128 4 items on 32 blocks: one of 4 rounds 7.2 against 6.8; d64 5.9 against 6.2
      {4, 512, 512, 256, 8},     // one item per sequence on 32 blocks: under a quarter of the SMs
      {8, 512, 512, 512, 8},     // 64 blocks: 7.6 against 8.6 us with 2 4-warp items of 256
      {16, 384, 384, 384, 8},    // 7.4 against 10.3 us
      {16, 528, 512, 512, 8},    // 16 tokens past 512: joined
      {1, 1024, 128, 128, 8},    // 64 blocks; d128 7.8 with 256, 7.3 with 128; d64: 8.0 with 64, 7.3 with 128 (fp8 7.9)
      {1, 1025, 128, 128, 8},    // the last token joins item 8: 64 blocks (9 items before)
      {1, 1536, 128, 128, 8},    // 96 blocks: under 3/4 of the SMs
      {1, 2048, 256, 256, 8},    // 128 blocks at 128 tokens: 64 of 256 instead, 8.1 against 8.6 us
      {1, 2049, 256, 256, 8},    // the last token joins item 8 (17 items of 128 had been 4-warp blocks)
      {2, 1025, 256, 256, 8},    // 8 items, 64 blocks (18 items of 128 with 1-token ones: 144, 4-warp)
      {1, 3000, 256, 256, 8},    // 96 blocks; 24 items of 128 are 192 4-warp blocks, 9.5 against 9.0 us
      {1, 4000, 256, 256, 8},    // 128 blocks (the heuristic alone: 11 of 384)
      {1, 4096, 256, 256, 8},    // d128 9.7 against 9.9 with 32 items of 128; d64 8.7 against 8.8
      {1, 4225, 256, 256, 0},    // 17 items of 256: 136 blocks, 4-warp blocks
      {8, 257, 256, 256, 8},     // one item per sequence: 6.6 against 8.1 us with two
      {8, 1024, 256, 256, 0},    // 9.9 with 256, 11.1 with 128
      {1, 32768, 1024, 1024, 0},
  };
  for (const Case& c : cases) {
    const std::vector<int32_t> lens(c.batch, c.ctx);
    for (const int head_dim : {64, 128}) {
      DecodePlanInputs in = decode_plan_format_inputs(ElemFormat::kNVFP4, ElemFormat::kNVFP4, head_dim);
      in.seq_lens = lens;
      in.num_kv_heads = 8;
      in.num_sms = 132;
      const auto plan = plan_decode_splits(in);
      expect_covers(plan, lens);
      EXPECT_EQ(plan.chunk_tokens, head_dim == 64 ? c.d64 : c.d128) << c.batch << " x " << c.ctx << " d" << head_dim;
      EXPECT_EQ(plan.block_warps, c.block_warps) << c.batch << " x " << c.ctx << " d" << head_dim;
    }
  }
}

TEST(DecodeSplitPlan, SplitsEvenlyWhenTheBatchFillsLessThanAWave) {
  // 32 × 32K with 8 KV heads = 256 blocks for 3 × 132 = 396 slots: 65% of one wave unsplit; three
  // equal items per sequence (10944 tokens: long, so all 3 blocks per SM are used) make 768 blocks
  // = 1.94 waves (97%). No item may be a small remainder.
  const std::vector<int32_t> lens(32, 32768);
  const auto plan = plan_decode_splits({.seq_lens = lens, .num_kv_heads = 8, .num_sms = 132, .blocks_per_sm = 3});
  expect_covers(plan, lens);
  EXPECT_EQ(plan.max_splits, 3);
  for (int32_t w = 0; w < plan.num_work; ++w) EXPECT_GE(plan.work_end[w] - plan.work_begin[w], 32768 / 3 - 64);
}

TEST(DecodeSplitPlan, RejectsBadInput) {
  const std::vector<int32_t> empty;
  EXPECT_THROW(plan_decode_splits({.seq_lens = empty, .num_kv_heads = 8}), Error);
  const std::vector<int32_t> zero = {5, 0};
  EXPECT_THROW(plan_decode_splits({.seq_lens = zero, .num_kv_heads = 8}), Error);
  const std::vector<int32_t> ok = {5};
  EXPECT_THROW(plan_decode_splits({.seq_lens = ok, .num_kv_heads = 8, .force_chunk_tokens = 100}), Error);
  EXPECT_THROW(plan_decode_splits({.seq_lens = ok, .num_kv_heads = 0}), Error);
  EXPECT_THROW(plan_decode_splits({.seq_lens = ok, .num_kv_heads = 8, .item_granule_multiple = 0}), Error);
  // Forced chunks take a long-item build by the same rule: one wave of 1-per-SM blocks here.
  const std::vector<int32_t> long_seq = {20000};
  const auto builds = decode_long_item_builds(quant::ElemFormat::kNVFP4, quant::ElemFormat::kNVFP4, 128);
  for (const int64_t chunk : {1024, 4096, 8192}) {
    const auto plan = plan_decode_splits(
        {.seq_lens = long_seq, .num_kv_heads = 2, .long_items = builds, .force_chunk_tokens = chunk});
    EXPECT_EQ(plan.block_warps, chunk >= 4096 ? 16 : 0) << chunk;
  }
  EXPECT_THROW(plan_decode_splits({.seq_lens = ok, .num_kv_heads = 8, .long_items = {{{.warps = 8, .blocks_per_sm = 0}}}}),
               Error);
  EXPECT_THROW(
      plan_decode_splits({.seq_lens = ok,
                          .num_kv_heads = 8,
                          .long_items = {{{.warps = 8, .blocks_per_sm = 2, .item_granule_multiple = 0}}}}),
      Error);
  EXPECT_THROW(plan_decode_splits({.seq_lens = ok, .num_kv_heads = 8, .long_items = {{{.warps = -1}}}}), Error);
  EXPECT_THROW(plan_decode_splits({.seq_lens = ok, .num_kv_heads = 8, .short_item_warps = -1}), Error);
}

// The short-item build takes items of one to four 16-token chunks per warp (128 to 512 tokens at 8
// warps) on a grid of at most one block per SM, forced chunks too; 64-token items, longer ones and
// bigger grids keep the 4-warp blocks. On it a sequence's last item of at most one chunk joins the one
// before it.
TEST(DecodeSplitPlan, ShortItemBuildOnItsItemsAtOneBlockPerSm) {
  auto plan_of = [](const std::vector<int32_t>& lens, int64_t chunk, int32_t warps) {
    const auto plan = plan_decode_splits({.seq_lens = lens, .num_kv_heads = 8, .num_sms = 132,
                                          .short_item_warps = warps, .force_chunk_tokens = chunk});
    expect_covers(plan, lens);
    return plan;
  };
  const std::vector<int32_t> one = {1024}, two = {1024, 1024}, three = {1024, 1024, 1024};
  EXPECT_EQ(plan_of(one, 128, 8).block_warps, 8);    // 64 blocks
  EXPECT_EQ(plan_of(two, 128, 8).block_warps, 8);    // 128 blocks
  EXPECT_EQ(plan_of(three, 128, 8).block_warps, 0);  // 192 blocks: more than one per SM
  EXPECT_EQ(plan_of(one, 64, 8).block_warps, 0);
  EXPECT_EQ(plan_of(one, 192, 8).block_warps, 8);    // 6 items: 5 of 192 tokens and 64
  EXPECT_EQ(plan_of(one, 256, 8).block_warps, 8);    // two chunks per warp
  EXPECT_EQ(plan_of(one, 320, 8).block_warps, 8);    // three for some
  EXPECT_EQ(plan_of(one, 512, 8).block_warps, 8);    // four
  EXPECT_EQ(plan_of(one, 576, 8).block_warps, 0);    // five for some
  EXPECT_EQ(plan_of(one, 128, 0).block_warps, 0);
  // Tails: 2 x 1025 in items of 128 would be 18 items, 144 blocks, two of them for one token each.
  const std::vector<int32_t> tails = {1025, 1040, 1041};
  const auto joined = plan_of({1025, 1025}, 128, 8);
  EXPECT_EQ(joined.block_warps, 8);
  EXPECT_EQ(joined.num_work, 16);
  EXPECT_EQ(joined.work_begin[7], 896);
  EXPECT_EQ(joined.work_end[7], 1025);
  const auto some = plan_of(tails, 128, 8);  // 8 + 8 + 9 items: 200 blocks, the 4-warp build
  EXPECT_EQ(some.block_warps, 0);
  EXPECT_EQ(some.num_work, 27);               // no tail joined off the build
  const auto one_kv = plan_decode_splits(
      {.seq_lens = tails, .num_kv_heads = 4, .num_sms = 132, .short_item_warps = 8, .force_chunk_tokens = 128});
  expect_covers(one_kv, tails);
  EXPECT_EQ(one_kv.block_warps, 8);  // 25 items, 100 blocks
  EXPECT_EQ(one_kv.num_work, 8 + 8 + 9);
  EXPECT_EQ(one_kv.work_end[15], 1040);  // 16 tokens past 1024: joined
  EXPECT_EQ(one_kv.work_end[16], 128);
  EXPECT_EQ(one_kv.work_begin[24], 1024);  // 17: an item of its own
  EXPECT_EQ(plan_of({1025}, 256, 8).work_end.back() - plan_of({1025}, 256, 8).work_begin.back(), 257);
  // The heuristic: 1 x 1K takes 128-token items with the build, one-granule items without it.
  const auto with = plan_decode_splits({.seq_lens = one, .num_kv_heads = 8, .num_sms = 132, .blocks_per_sm = 4,
                                        .short_item_warps = 8});
  const auto without =
      plan_decode_splits({.seq_lens = one, .num_kv_heads = 8, .num_sms = 132, .blocks_per_sm = 4});
  EXPECT_EQ(with.chunk_tokens, 128);
  EXPECT_EQ(with.block_warps, 8);
  EXPECT_EQ(without.chunk_tokens, 64);
  EXPECT_EQ(without.block_warps, 0);
}

// Spanning units (decode_plan.h): each long-item build's slots' worth of units, the sequences laid end
// to end and cut into units of whole rounds of the build's warps, equal to within one round; a unit
// holds one item per sequence it touches, each ending on a round or at its sequence's end.
TEST(DecodeSplitPlan, SpanningUnitsCutTheBatchIntoEqualRunsOfRounds) {
  using quant::ElemFormat;
  const auto builds = decode_long_item_builds(ElemFormat::kNVFP4, ElemFormat::kNVFP4, 128);
  struct Case {
    std::vector<int32_t> lens;
    int32_t warps, kv_heads;
    int32_t units;  // expected
  };
  const std::vector<int32_t> mixed = {40000, 100, 7000, 33000, 65, 131072, 4097};
  const Case cases[] = {
      {std::vector<int32_t>(32, 32768), 8, 8, 33},   // 264 slots of 8 KV heads' blocks
      {std::vector<int32_t>(32, 32768), 16, 8, 16},  // 132 slots: 128 blocks, two whole sequences each
      {std::vector<int32_t>(31, 32768), 8, 8, 33},
      {std::vector<int32_t>(17, 32768), 8, 8, 33},
      {std::vector<int32_t>(8, 32768), 8, 8, 33},
      {std::vector<int32_t>(6, 32768), 16, 11, 12},  // 11 KV heads: 12 units, 132 blocks
      {mixed, 8, 8, 33},
      {mixed, 16, 4, 33},
  };
  for (const Case& c : cases) {
    const auto plan = plan_decode_splits({.seq_lens = c.lens, .num_kv_heads = c.kv_heads, .num_sms = 132,
                                          .blocks_per_sm = 4, .item_granule_multiple = 2, .long_items = builds,
                                          .span_units_warps = c.warps});
    const std::string what = std::to_string(c.lens.size()) + " sequences, " + std::to_string(c.warps) + " warps";
    expect_covers(plan, c.lens);
    ASSERT_EQ(plan.num_units, c.units) << what;
    EXPECT_EQ(plan.block_warps, c.warps) << what;
    const int64_t round = 32 * c.warps;
    int64_t rounds = 0;
    for (int32_t len : c.lens) rounds += (len + round - 1) / round;
    EXPECT_EQ(plan.chunk_tokens, (rounds + c.units - 1) / c.units * round) << what;
    EXPECT_GE(plan.chunk_tokens, kDecodeWideItemTokens) << what;
    for (int32_t u = 0; u < plan.num_units; ++u) {
      int64_t unit_rounds = 0;
      for (int32_t w = plan.unit_first_item[u]; w < plan.unit_first_item[u + 1]; ++w) {
        const int32_t len = c.lens[plan.work_seq[w]];
        EXPECT_EQ(plan.work_begin[w] % round, 0) << what << ", item " << w;
        EXPECT_TRUE(plan.work_end[w] % round == 0 || plan.work_end[w] == len) << what << ", item " << w;
        // One item per sequence in a unit: its items' sequences increase.
        if (w > plan.unit_first_item[u]) EXPECT_GT(plan.work_seq[w], plan.work_seq[w - 1]) << what;
        unit_rounds += (plan.work_end[w] - plan.work_begin[w] + round - 1) / round;
      }
      EXPECT_GE(unit_rounds, rounds / c.units) << what << ", unit " << u;
      EXPECT_LE(unit_rounds, (rounds + c.units - 1) / c.units) << what << ", unit " << u;
    }
  }
  // Units shorter than kDecodeWideItemTokens are not made: the chunk plan stays (1 x 8K: 16 units of
  // 512 tokens on the 16-warp build; 132 x 4K on the 8-warp one: 33 units of 16 rounds, 4096 tokens,
  // are long enough).
  const std::vector<int32_t> short_batch(1, 8192);
  const auto chunked = plan_decode_splits({.seq_lens = short_batch, .num_kv_heads = 8, .num_sms = 132,
                                           .blocks_per_sm = 4, .item_granule_multiple = 2, .long_items = builds,
                                           .span_units_warps = 16});
  expect_covers(chunked, short_batch);
  EXPECT_FALSE(chunked.spans_units());
  const std::vector<int32_t> many(132, 4096);
  const auto spanning = plan_decode_splits({.seq_lens = many, .num_kv_heads = 8, .num_sms = 132, .blocks_per_sm = 4,
                                            .item_granule_multiple = 2, .long_items = builds,
                                            .span_units_warps = 8});
  expect_covers(spanning, many);
  EXPECT_EQ(spanning.num_units, 33);
  // Never with a forced chunk, or when turned off.
  for (const auto& [force, warps] : {std::pair<int64_t, int32_t>{4096, 8}, {0, 0}}) {
    const std::vector<int32_t> lens(31, 32768);
    const auto plan = plan_decode_splits({.seq_lens = lens, .num_kv_heads = 8, .num_sms = 132, .blocks_per_sm = 4,
                                          .item_granule_multiple = 2, .long_items = builds,
                                          .force_chunk_tokens = force, .span_units_warps = warps});
    expect_covers(plan, lens);
    EXPECT_FALSE(plan.spans_units()) << force << " " << warps;
  }
}

// The plan inputs the engine makes for Llama-3-8B's attention (8 KV heads, head_dim 128) on an H200.
DecodePlanInputs engine_inputs(quant::ElemFormat format, std::span<const int32_t> lens) {
  DecodePlanInputs in = decode_plan_format_inputs(format, format, 128);
  in.seq_lens = lens;
  in.num_kv_heads = 8;
  in.num_sms = 132;
  return in;
}

// The plan's own rule (decode_plan.h, kDecodeSpanUnitTokens): units of the 8-warp build where the chunk
// plan runs no long-item build, the units hold >= 16384 tokens and no sequence but the trailing
// padding is shorter than a round; the chunk plan elsewhere. Each
// case as measured on the H200 (graph replays, GQA 4, nvfp4 d128, 8 KV heads).
TEST(DecodeSplitPlan, SpanningUnitsWhereTheChunkPlanLeavesTheLongItemBuilds) {
  struct Case {
    int32_t batch, ctx;
    int32_t units;  // 0: the chunk plan
  };
  const Case cases[] = {
      {17, 32768, 33},   // 183.7 -> 173.4 us
      {20, 32768, 33},   // 206.4 -> 203.6
      {34, 32768, 33},   // 339.0 -> 329.0
      {31, 131072, 33},  // 1116.6 -> 1125.1; whole sequences 1139.2 (past kDecodeWholeSequenceMaxTokens)
      {8, 32768, 0},     // 16-warp build, 16K items: 79.0 (units 91.8)
      {32, 32768, 0},    // 8-warp build, whole sequences: 292.8 (310.9)
      {64, 32768, 0},    // 8-warp build, two waves: 577.1 (601.0)
      {8, 131072, 0},    // 285.8 (311.3)
      {31, 16384, 0},    // units of 15.4K tokens: 151.5 (161.2)
      {31, 32768, 0},    // whole sequences (below): 291.5 against units 300.4, 330.4 before
      {31, 8192, 0},     // 79.5 (89.1)
      {1, 4096, 0},
  };
  for (const Case& c : cases) {
    const std::vector<int32_t> lens(c.batch, c.ctx);
    DecodePlanInputs in = engine_inputs(quant::ElemFormat::kNVFP4, lens);
    const auto plan = plan_decode_splits(in);
    expect_covers(plan, lens);
    EXPECT_EQ(plan.spans_units(), c.units > 0) << c.batch << " x " << c.ctx;
    if (c.units > 0) {
      EXPECT_EQ(plan.num_units, c.units) << c.batch << " x " << c.ctx;
      EXPECT_EQ(plan.block_warps, 8) << c.batch << " x " << c.ctx;
    }
    // The engine's batch (CUDA graphs on): padded to its graph bucket with 2-token sequences, each a
    // unit of its own after the spanning ones (a padding sequence inside the batch is chained).
    if (c.units > 0) {
      for (const int32_t pads : {1, 7}) {
        std::vector<int32_t> padded = lens;
        padded.resize(static_cast<size_t>(c.batch + pads), 2);
        in.seq_lens = padded;
        const auto with_pads = plan_decode_splits(in);
        expect_covers(with_pads, padded);
        const std::string what = std::to_string(c.batch) + " x " + std::to_string(c.ctx) + " + " +
                                 std::to_string(pads) + " padding sequences";
        ASSERT_TRUE(with_pads.spans_units()) << what;
        EXPECT_EQ(with_pads.num_units, c.units + pads) << what;
        EXPECT_EQ(with_pads.chunk_tokens, plan.chunk_tokens) << what;
        for (int32_t p = 0; p < pads; ++p) {
          const int32_t u = c.units + p;
          ASSERT_EQ(with_pads.unit_first_item[u + 1] - with_pads.unit_first_item[u], 1) << what;
          EXPECT_EQ(with_pads.work_seq[with_pads.unit_first_item[u]], c.batch + p) << what;
        }
      }
      std::vector<int32_t> inside = lens;
      inside.insert(inside.begin() + 1, 2);
      in.seq_lens = inside;
      const auto chained = plan_decode_splits(in);
      expect_covers(chained, inside);
      EXPECT_FALSE(chained.spans_units()) << c.batch << " x " << c.ctx << " + a short sequence inside";
    }
    // Other formats have no long-item builds, so no units.
    EXPECT_FALSE(plan_decode_splits(engine_inputs(quant::ElemFormat::kFP8, lens)).spans_units())
        << c.batch << " x " << c.ctx;
  }
}

// The engine's decode batches as it pads them for CUDA graphs (runtime/forward_step.cpp: 2-token
// sequences up to the graph bucket). nvfp4 sizes its long-item waves without the padding and runs
// units where its chunk plan then has no long-item build, each padding sequence a unit of its own
// after them; fp8 weighs counting it or not by makespan. H200, 2026-12-03, graph replays, GQA 4, nvfp4 µs
// before -> after (bench_decode_attention --engine-batches).
TEST(DecodeSplitPlan, TheEnginesPaddedBatchesRunUnitsWithThePaddingLast) {
  struct Case {
    int32_t batch, ctx, pads;
    int32_t units;  // expected units of the long sequences (the padding's come on top)
  };
  const Case cases[] = {
      {17, 32768, 7, 33},    // 182.2 -> 172.1
      {20, 32768, 4, 33},    // 206.8 -> 201.5
      {23, 32768, 1, 33},    // 237.1 -> 228.1
      {34, 32768, 14, 33},   // 330.7 -> 327.4
      {40, 32768, 8, 33},    // 400.5 -> 381.9
      {50, 32768, 14, 33},   // 574.6 (8-warp whole sequences, 1.5 waves) -> 475.0
      {100, 32768, 28, 33},  // 996.2 -> 923.8
      {50, 16384, 14, 33},   // 301.9 -> 251.7
      {100, 16384, 28, 33},  // 513.2 -> 482.4
      {34, 65536, 14, 33},   // 845.3 (16-warp whole sequences, 2 waves) -> 628.1
      {17, 131072, 7, 33},   // 671.6 -> 627.1
      {50, 131072, 14, 33},  // 2222.8 -> 1804.8
  };
  for (const Case& c : cases) {
    std::vector<int32_t> lens(c.batch, c.ctx);
    lens.resize(static_cast<size_t>(c.batch + c.pads), 2);
    const std::string what = std::to_string(c.batch) + " (+" + std::to_string(c.pads) + ") x " + std::to_string(c.ctx);
    const auto plan = plan_decode_splits(engine_inputs(quant::ElemFormat::kNVFP4, lens));
    expect_covers(plan, lens);
    ASSERT_TRUE(plan.spans_units()) << what;
    EXPECT_EQ(plan.block_warps, 8) << what;
    ASSERT_EQ(plan.num_units, c.units + c.pads) << what;
    // The padding's units: one item each, last in the grid, so their blocks take the slots that free first.
    for (int32_t p = 0; p < c.pads; ++p) {
      const int32_t u = c.units + p;
      ASSERT_EQ(plan.unit_first_item[u + 1] - plan.unit_first_item[u], 1) << what;
      const int32_t item = plan.unit_first_item[u];
      EXPECT_EQ(plan.work_seq[item], c.batch + p) << what;
      EXPECT_EQ(plan.work_end[item] - plan.work_begin[item], 2) << what;
    }
    // The long units' items all belong to the long sequences: as unpadded.
    const std::vector<int32_t> unpadded(c.batch, c.ctx);
    DecodePlanInputs in = engine_inputs(quant::ElemFormat::kNVFP4, unpadded);
    in.span_units_warps = 8;
    const auto alone = plan_decode_splits(in);
    ASSERT_EQ(alone.num_units, c.units) << what;
    EXPECT_EQ(plan.unit_first_item[c.units], alone.num_work) << what;
    for (int32_t w = 0; w < alone.num_work; ++w) {
      EXPECT_EQ(plan.work_seq[w], alone.work_seq[w]) << what;
      EXPECT_EQ(plan.work_begin[w], alone.work_begin[w]) << what;
      EXPECT_EQ(plan.work_end[w], alone.work_end[w]) << what;
    }
  }
  // fp8 takes the chunk of the lower estimated makespan with the padding counted as rows or not
  // (decode_plan.cpp, has_long_items): 31 (+1) x 32K runs whole sequences on 256 blocks (469 us;
  // 1984-token items without the padding, 492); 50 (+14) x 32K 4736-token items (795 us; whole
  // sequences in 1.5 waves with it counted, 814).
  for (const auto& [batch, pads, chunk, unpadded_chunk] :
       {std::tuple<int32_t, int32_t, int32_t, int32_t>{31, 1, 32768, 1984}, {50, 14, 4736, 4736}}) {
    std::vector<int32_t> lens(batch, 32768);
    const auto unpadded = plan_decode_splits(engine_inputs(quant::ElemFormat::kFP8, lens));
    lens.resize(static_cast<size_t>(batch + pads), 2);
    const auto padded = plan_decode_splits(engine_inputs(quant::ElemFormat::kFP8, lens));
    expect_covers(padded, lens);
    EXPECT_EQ(padded.chunk_tokens, chunk) << batch << " (+" << pads << ")";
    EXPECT_EQ(unpadded.chunk_tokens, unpadded_chunk) << batch;
  }
}

// Lengths log-uniform in [ctx / 16, ctx] from a fixed generator, as bench_decode_attention --mixed
// draws them (not the same draws): a serving batch's mix of contexts.
std::vector<int32_t> mixed_lengths(int32_t batch, int32_t ctx, uint64_t seed) {
  std::vector<int32_t> lens;
  uint64_t x = seed;
  for (int32_t i = 0; i < batch; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(x >> 11) * 0x1.0p-53;
    lens.push_back(std::max<int32_t>(1, static_cast<int32_t>(std::exp(std::log(ctx / 16.0) + u * std::log(16.0)))));
  }
  return lens;
}

// The longest item's tokens, and the batch's tokens per slot if spread evenly over `slots`.
std::pair<int64_t, double> longest_item_and_share(const DecodeSplitPlan& plan, const std::vector<int32_t>& lens,
                                                  int64_t slots) {
  int64_t longest = 0, total = 0;
  for (int32_t w = 0; w < plan.num_work; ++w) {
    longest = std::max<int64_t>(longest, plan.work_end[w] - plan.work_begin[w]);
  }
  for (int32_t len : lens) total += len;
  return {longest, static_cast<double>(total) * 8 / static_cast<double>(slots)};
}

// Mixed contexts (decode_plan.h, "Mixed lengths"): the plan estimates each candidate's makespan
// instead of counting blocks. Before, a batch of 32 sequences of 2K-28K tokens ran whole sequences on
// the 8-warp build (its waves looked full: 256 blocks on 264 slots) and fp8 ran them whole too, its
// longest item 2.5x an even share: H200, 2026-12-03, graph replays, GQA 4, padded as the engine pads
// (bench_decode_attention --mixed 1 --engine-batches), µs before -> after: nvfp4 32K x 32 201.3 ->
// 123.7, 32K x 16 127.5 -> 73.4 (it had been 1.29 x fp8's time), 64K x 32 509.4 -> 216.9, 128K x 16
// 542.1 -> 226.3; fp8 32K x 32 293.3 -> 184.7, 64K x 32 703.8 -> 347.4, 128K x 32 1265.5 -> 779.6.
TEST(DecodeSplitPlan, MixedContextsArePlannedByMakespan) {
  for (const auto& [batch, ctx] : {std::pair<int32_t, int32_t>{32, 32768}, {16, 32768}, {32, 65536}, {16, 131072},
                                   {50, 32768}}) {
    const std::vector<int32_t> lens = mixed_lengths(batch, ctx, 7);
    const std::string what = std::to_string(batch) + " x up to " + std::to_string(ctx);
    // nvfp4: spanning units of the 8-warp build, every unit within a round of the even share.
    const auto nvfp4 = plan_decode_splits(engine_inputs(quant::ElemFormat::kNVFP4, lens));
    expect_covers(nvfp4, lens);
    ASSERT_TRUE(nvfp4.spans_units()) << what;
    EXPECT_EQ(nvfp4.block_warps, 8) << what;
    EXPECT_EQ(nvfp4.num_units, 33) << what;
    // fp8: items of at most about an even share of the batch per slot (2 blocks per SM).
    const auto fp8 = plan_decode_splits(engine_inputs(quant::ElemFormat::kFP8, lens));
    expect_covers(fp8, lens);
    const auto [longest, share] = longest_item_and_share(fp8, lens, 264);
    EXPECT_LE(static_cast<double>(longest), 1.05 * share + kDecodeSplitGranule) << what;
    EXPECT_GT(fp8.max_splits, 1) << what;
  }
  // Contexts within kDecodeMixedLengthRatio of each other keep the block-counting rules: 32 sequences
  // of 30000-32768 tokens plan as 32 x 32K does (whole sequences on the 8-warp build; fp8 unsplit).
  std::vector<int32_t> close(32, 32768);
  for (size_t i = 0; i < close.size(); ++i) close[i] -= static_cast<int32_t>(i * 89);
  const auto nvfp4 = plan_decode_splits(engine_inputs(quant::ElemFormat::kNVFP4, close));
  expect_covers(nvfp4, close);
  EXPECT_FALSE(nvfp4.spans_units());
  EXPECT_EQ(nvfp4.num_work, 32);
  EXPECT_EQ(nvfp4.block_warps, 8);
  const auto fp8 = plan_decode_splits(engine_inputs(quant::ElemFormat::kFP8, close));
  EXPECT_EQ(fp8.num_work, 32);
  // A sequence shorter than a round (256 tokens at 8 warps) inside a mixed batch (a new request) is
  // one more item of the unit that reaches it; the batch still runs units.
  std::vector<int32_t> with_short = mixed_lengths(32, 32768, 7);
  with_short[5] = 100;
  const auto spanning = plan_decode_splits(engine_inputs(quant::ElemFormat::kNVFP4, with_short));
  expect_covers(spanning, with_short);
  ASSERT_TRUE(spanning.spans_units());
  ASSERT_EQ(spanning.seq_work_offset[6] - spanning.seq_work_offset[5], 1);
  EXPECT_EQ(spanning.work_end[spanning.seq_work_offset[5]], 100);
}

// Whole sequences on a long-item build where the long-item rules find none and the sequences (16K to
// 64K tokens) fill it to 90% in one wave, the engine's 2-token padding sequences not counted
// (decode_plan.h, kDecodeWholeSequenceTokens); measured on the H200 as in the comments.
TEST(DecodeSplitPlan, WholeSequencesOnALongItemBuildTheyFill) {
  struct Case {
    int32_t batch, ctx, pads;
    int32_t warps;  // expected block_warps, 0 = not whole sequences
  };
  const Case cases[] = {
      {31, 32768, 0, 8},    // 248 of 264 slots: 330.4 (1792-token 4-warp items) -> 291.5 us
      {15, 32768, 0, 16},   // 120 of 132: 157.6 -> 146.1
      {15, 16384, 0, 16},   // 92.9 -> 76.8
      {33, 32768, 15, 8},   // the engine's 33 -> 48: 318.0 -> 294.1
      {33, 16384, 15, 8},   // 182.9 -> 152.5
      {20, 16384, 4, 0},    // 160 rows: 61% of the 8-warp build's slots
      {17, 32768, 0, 0},    // 136 of 264 slots: units instead
      {31, 131072, 0, 0},   // longer than kDecodeWholeSequenceMaxTokens: units instead
  };
  for (const Case& c : cases) {
    std::vector<int32_t> lens(c.batch, c.ctx);
    lens.resize(static_cast<size_t>(c.batch + c.pads), 2);
    DecodePlanInputs in = engine_inputs(quant::ElemFormat::kNVFP4, lens);
    const auto plan = plan_decode_splits(in);
    expect_covers(plan, lens);
    const bool whole = !plan.spans_units() && plan.num_work == c.batch + c.pads && plan.block_warps > 0;
    EXPECT_EQ(whole ? plan.block_warps : 0, c.warps) << c.batch << " (+" << c.pads << ") x " << c.ctx;
  }
}

// The spread launches (the decode kernel's and the split merge's) size each block's shared memory
// so that at most the asked number of blocks fit on an SM, and never below the kernel's own need.
TEST(DecodeSpreadLaunch, SharedMemoryLetsAtMostThatManyBlocksShareAnSm) {
  using detail::kSmemPerSm;
  using detail::kSmemReservedPerBlock;
  using detail::spread_smem_bytes;
  for (const int own : {0, 2080, 40000, 120000}) {
    EXPECT_EQ(spread_smem_bytes(own, 0), own);  // no spread
    for (int blocks = 1; blocks <= 32; ++blocks) {
      const int smem = spread_smem_bytes(own, blocks);
      const int fit = kSmemPerSm / (smem + kSmemReservedPerBlock);
      EXPECT_GE(smem, own) << own << " " << blocks;
      EXPECT_LE(fit, blocks) << own << " " << blocks;
      // Exactly `blocks` fit unless the kernel's own need already allows fewer.
      if (own + kSmemReservedPerBlock <= kSmemPerSm / blocks) {
        EXPECT_EQ(fit, blocks) << own << " " << blocks;
      } else {
        EXPECT_EQ(smem, own) << own << " " << blocks;
      }
    }
  }
  // One block per SM is within the opt-in limit of one block on the H100/H200 (227 KiB).
  EXPECT_LE(spread_smem_bytes(0, 1), 227 * 1024);
}

// The tensor-core decode kernel's rings (tc_geometry, shared by the kernel and the host): the stage
// counts the H200 measurements chose (decode_kernel_args.h; PERFORMANCE.md, thirty-ninth round) and
// what each build's shared memory then holds.
TEST(DecodeTcGeometry, RingsHoldTheMeasuredStages) {
  using detail::tc_geometry;
  using quant::ElemFormat;
  constexpr ElemFormat kNv = ElemFormat::kNVFP4;
  struct Case {
    ElemFormat k, v;
    int head_dim, warps, steps, stages, stage_bytes, blocks_per_sm;
  };
  const Case cases[] = {
      // 4-warp builds: 12 KiB of stages per warp.
      {ElemFormat::kBF16, ElemFormat::kBF16, 128, 4, 1, 2, 8192, 3},
      {ElemFormat::kFP8, ElemFormat::kFP8, 128, 4, 1, 3, 4096, 4},
      {ElemFormat::kFP8, kNv, 128, 4, 1, 3, 3200, 4},  // k8v4
      {kNv, kNv, 128, 4, 2, 5, 2304, 4},
      {kNv, kNv, 64, 4, 2, 8, 1152, 4},
      // nvfp4's long-item builds: 4.5 KiB in flight per warp beside a 32-token step.
      {kNv, kNv, 128, detail::kTcWideWarps, 2, 4, 2304, 2},
      {kNv, kNv, 128, detail::kTcSmWarps, 2, 4, 2304, 1},
      {kNv, kNv, 64, detail::kTcWideWarps, 2, 6, 1152, 2},
      {kNv, kNv, 64, detail::kTcSmWarps, 2, 6, 1152, 1},
      // The short-item build (8 warps, 16-token steps): at most 6 stages.
      {kNv, kNv, 128, detail::kTcWideWarps, 1, 5, 2304, 2},
      {kNv, kNv, 64, detail::kTcWideWarps, 1, 6, 1152, 2},
  };
  for (const Case& c : cases) {
    const detail::TcGeometry geo = tc_geometry(c.k, c.v, c.head_dim, c.warps, c.steps);
    const std::string what = std::string(quant::elem_format_name(c.k)) + "/" + quant::elem_format_name(c.v) +
                             " d" + std::to_string(c.head_dim) + " " + std::to_string(c.warps) + " warps, " +
                             std::to_string(c.steps) + " chunks per step";
    EXPECT_EQ(geo.stage_bytes, c.stage_bytes) << what;
    EXPECT_EQ(geo.stages, c.stages) << what;
    EXPECT_GT(geo.stages, c.steps) << what;  // a step plus at least one chunk in flight
    EXPECT_EQ(geo.blocks_per_sm, c.blocks_per_sm) << what;
    // The stages (or, aliasing them at the end, the warps' [8][D] f32 reduction), the Q fragments and
    // the (m, l) pairs; a cluster pair's inbox ([4][D] + 8 floats) on top still fits one block's
    // opt-in limit (227 KiB on the H100 / H200), and the blocks the geometry counts fit the SM.
    const int stages = c.warps * c.stages * c.stage_bytes, red = c.warps * 8 * c.head_dim * 4;
    EXPECT_EQ(geo.smem_bytes, c.head_dim / 16 * 32 * 16 + 2 * c.warps * 8 * 4 + std::max(stages, red)) << what;
    EXPECT_LE(geo.smem_bytes + (4 * c.head_dim + 8) * 4, 227 * 1024) << what;
    EXPECT_LE(geo.blocks_per_sm * (geo.smem_bytes + detail::kSmemReservedPerBlock), detail::kSmemPerSm) << what;
  }
}

}  // namespace
}  // namespace nibble::cuda
