// decode_attention's checks and prepare_decode_launch's choices, no kernel run: bad parameters are
// rejected naming the problem (before any CUDA call, so these run without a GPU), the split merge's
// blocks are spread over the plan's SMs, and which plans merge their items in cluster pairs
// (TcItems::kPair; that one asks the device how many clusters it holds, so it needs a GPU).
// The kernels' results against the oracle: test_cuda_decode_attention.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda/decode_attention.h"
#include "backend/cuda/decode_kernel_args.h"
#include "backend/cuda_common/cuda_test_util.h"
#include "cache/page_layout.h"
#include "common/error.h"
#include "quant/kv_format.h"

namespace nibble::cuda {
namespace {

using quant::KvDtype;

// ---- validation (before any CUDA call: runs without a GPU) ----------------------------------------

TEST(CudaDecodeErrors, RejectsBadShapesNamingTheProblem) {
  const std::vector<int32_t> lens = {1000};  // 16 items: the plan needs the split workspace
  const DecodeSplitPlan plan = plan_decode_splits({.seq_lens = lens, .num_kv_heads = 2, .force_chunk_tokens = 64});
  const cache::PageLayout layout({.num_layers = 1, .kv_heads = 2, .head_dim = 128}, KvDtype::kNVFP4, 16);
  int32_t dummy = 0;
  uint8_t byte = 0;
  float f = 0;
  const DecodeAttentionParams good{.q = &f, .out = &f, .pool = &byte, .page_tables = &dummy, .plan_device = &dummy,
                                   .plan = &plan, .partial_out = &f, .partial_lse = &f, .num_q_heads = 8,
                                   .max_pages_per_seq = 1, .page_bytes = layout.page_bytes(), .k_layout = layout.k(0),
                                   .v_layout = layout.v(0), .softmax_scale = 0.088f};
  auto expect_error = [](DecodeAttentionParams p, const std::string& needle) {
    try {
      decode_attention(p, nullptr);
      ADD_FAILURE() << "accepted; expected an error mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  DecodeAttentionParams p = good;
  p.num_q_heads = 7;
  expect_error(p, "multiple of num_kv_heads");
  p = good;
  p.plan = nullptr;
  expect_error(p, "no split plan");
  p = good;
  p.partial_out = nullptr;
  expect_error(p, "workspace");
  p = good;
  p.softmax_scale = 0.0f;
  expect_error(p, "softmax_scale");
  const cache::PageLayout odd_page({.num_layers = 1, .kv_heads = 2, .head_dim = 128}, KvDtype::kNVFP4, 8);
  p = good;
  p.k_layout = odd_page.k(0), p.v_layout = odd_page.v(0), p.page_bytes = odd_page.page_bytes();
  expect_error(p, "page_size must be a positive multiple of 16");
  const cache::PageLayout wide({.num_layers = 1, .kv_heads = 2, .head_dim = 80}, KvDtype::kBF16, 16);
  p = good;
  p.k_layout = wide.k(0), p.v_layout = wide.v(0), p.page_bytes = wide.page_bytes();
  expect_error(p, "head_dim must be 64, 128 or 256");
  p = good;
  p.page_bytes = (int64_t{1} << 31) + 16;  // pages past 2 GiB: the kernels' 32-bit page size
  expect_error(p, "exceeds the CUDA kernels' limit");
}

// The launches prepare_decode_launch makes for nvfp4 plans (8 KV heads, GQA 4, head_dim 128, 16-token
// pages), the device pointers dummies: it reads none of them.
struct Nvfp4LaunchProbe {
  Nvfp4LaunchProbe() = default;
  Nvfp4LaunchProbe(const Nvfp4LaunchProbe&) = delete;  // p points at its members
  Nvfp4LaunchProbe& operator=(const Nvfp4LaunchProbe&) = delete;

  cache::PageLayout layout{{.num_layers = 1, .kv_heads = 8, .head_dim = 128}, KvDtype::kNVFP4, 16};
  int32_t dummy = 0;
  uint8_t byte = 0;
  float f = 0;
  DecodeAttentionParams p{.q = &f, .out = &f, .pool = &byte, .page_tables = &dummy, .plan_device = &dummy,
                          .partial_out = &f, .partial_lse = &f, .num_q_heads = 32, .max_pages_per_seq = 8192,
                          .page_bytes = layout.page_bytes(), .k_layout = layout.k(0), .v_layout = layout.v(0),
                          .softmax_scale = 0.088f};
  DecodeSplitPlan plan;  // the last launch's

  // The launch of a plan for `lens` on `num_sms` SMs (force_chunk_tokens: 0 = the plan's own items).
  detail::DecodeLaunch launch_for(const std::vector<int32_t>& lens, int64_t num_sms, int64_t force_chunk_tokens) {
    DecodePlanInputs in = decode_plan_format_inputs(quant::ElemFormat::kNVFP4, quant::ElemFormat::kNVFP4, 128);
    in.seq_lens = lens;
    in.num_kv_heads = 8;
    in.num_sms = num_sms;
    in.force_chunk_tokens = force_chunk_tokens;
    plan = plan_decode_splits(in);
    p.plan = &plan;
    return detail::prepare_decode_launch(p);
  }
};

// The split merge's blocks are spread over the plan's SMs (DecodeLaunch::reduce_spread_sms), behind
// the 4-warp builds and nvfp4's 16-warp one alike. Host only: with pair_merge off prepare_decode_launch
// calls no CUDA API.
TEST(CudaDecodeLaunch, SpreadsTheMergeOverThePlansSms) {
  Nvfp4LaunchProbe probe;
  // 8 x 32K: two 16K items per sequence on 16-warp blocks, one per SM, 4 of 132 SMs left idle; with
  // the merge kernel (on a GPU these pairs merge in clusters: CudaDecodeLaunch.PairsMergeInClusters).
  probe.p.pair_merge = false;
  const detail::DecodeLaunch wide = probe.launch_for(std::vector<int32_t>(8, 32768), 132, 0);
  EXPECT_TRUE(wide.split);
  EXPECT_EQ(wide.tc_warps, detail::kTcSmWarps);
  EXPECT_EQ(wide.reduce_spread_sms, 132);
  // 4 x 2K on a 66-SM plan: 4-warp blocks, the merge spread over those 66.
  const detail::DecodeLaunch narrow = probe.launch_for(std::vector<int32_t>(4, 2048), 66, 256);
  EXPECT_TRUE(narrow.split);
  EXPECT_EQ(narrow.tc_warps, detail::kTcWarps);
  EXPECT_EQ(narrow.reduce_spread_sms, 66);
}

// Which plans merge in cluster pairs (DecodeLaunch::tc_items): a long-item plan with two items for
// every sequence, where the device holds all its pairs at once (8 x 32K and 8 x 128K on this GPU's
// SMs); not three items, not a plan with one sequence unsplit, not short items, not with
// pair_merge off. Pairs leave no merge kernel, and the kernel triggers the next one at its start
// only when early_dependents asks for it, as an unsplit plan's does.
TEST(CudaDecodeLaunch, PairsMergeInClusters) {
  NIBBLE_SKIP_WITHOUT_GPU();
  const int64_t sms = test::device_sm_count();
  Nvfp4LaunchProbe probe;
  DecodeAttentionParams& p = probe.p;
  const DecodeSplitPlan& plan = probe.plan;
  auto launch_for = [&](const std::vector<int32_t>& lens, int64_t force_chunk_tokens) {
    return probe.launch_for(lens, sms, force_chunk_tokens);
  };
  for (const int32_t ctx : {32768, 131072}) {
    p.pair_merge = true;
    p.early_dependents = false;
    const detail::DecodeLaunch pairs = launch_for(std::vector<int32_t>(8, ctx), 0);
    EXPECT_EQ(plan.max_splits, 2) << ctx;
    EXPECT_EQ(pairs.tc_warps, detail::kTcSmWarps) << ctx;
    EXPECT_EQ(pairs.tc_items, detail::TcItems::kPair) << ctx;
    EXPECT_FALSE(pairs.split) << ctx;
    EXPECT_FALSE(pairs.args.trigger_at_start) << ctx;
    p.early_dependents = true;
    EXPECT_TRUE(launch_for(std::vector<int32_t>(8, ctx), 0).args.trigger_at_start) << ctx;
    p.early_dependents = false;
    p.pair_merge = false;
    const detail::DecodeLaunch kernel = launch_for(std::vector<int32_t>(8, ctx), 0);
    EXPECT_EQ(kernel.tc_items, detail::TcItems::kOne) << ctx;
    EXPECT_TRUE(kernel.split) << ctx;
    EXPECT_TRUE(kernel.args.trigger_at_start) << ctx;
  }
  p.pair_merge = true;
  // Three items of the 8K plan for one sequence of 24K: the merge kernel.
  const detail::DecodeLaunch three = launch_for({24576, 16384}, 8192);
  EXPECT_EQ(plan.max_splits, 3);
  EXPECT_EQ(three.tc_items, detail::TcItems::kOne);
  EXPECT_TRUE(three.split);
  // One sequence unsplit beside split ones: the merge kernel (pairs need two items everywhere).
  const detail::DecodeLaunch mixed = launch_for({16384, 8192}, 8192);
  EXPECT_EQ(plan.max_splits, 2);
  EXPECT_EQ(mixed.tc_items, detail::TcItems::kOne);
  EXPECT_TRUE(mixed.split);
  // Two short items per sequence (not a long-item build): the merge kernel.
  const detail::DecodeLaunch narrow = launch_for({512, 512}, 256);
  EXPECT_EQ(plan.num_work, 4);
  EXPECT_EQ(narrow.tc_items, detail::TcItems::kOne);
  EXPECT_TRUE(narrow.split);
}

}  // namespace
}  // namespace nibble::cuda
