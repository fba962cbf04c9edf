// The memory planner's figures, worked out by hand from the definitions in planner.h (the arithmetic
// is written next to each number) rather than read back from the code.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>

#include "cache/planner.h"
#include "common/error.h"
#include "config/model_config.h"

namespace nibble::cache {
namespace {

using quant::KvDtype;

const FormatPlan& find(const MemoryPlan& plan, KvDtype dtype) {
  for (const FormatPlan& f : plan.formats) {
    if (f.kv_dtype == dtype) return f;
  }
  throw std::runtime_error("format not planned");
}

PlanInput builtin_input() {
  return PlanInput{
      .model = builtin_model_geometry(),
      .model_source = "built-in",
      .builtin_geometry = true,
      .gpu_memory_bytes = 141'000'000'000,
      .mem_fraction = 0.9,
      .weights_bytes = 54'000'000'000,
      .context_tokens = 32768,
      .page_size = 64,
      .kv_dtypes = {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4},
  };
}

TEST(Planner, BuiltinGeometryIsTheSeedsModel) {
  const config::ModelConfig m = builtin_model_geometry();
  EXPECT_EQ(m.num_layers, 64);
  EXPECT_EQ(m.num_full_attention_layers(), 16);
  EXPECT_EQ(m.num_kv_heads, 4);
  EXPECT_EQ(m.head_dim, 256);
  // Per request, 48 linear layers × (recurrent [48, 128, 128] float32 = 3,145,728 B
  //                                 + conv [3, 2·16·128 + 48·128 = 10,240] bf16 = 61,440 B).
  EXPECT_EQ(m.linear_state_bytes_per_request(), 48 * (3'145'728 + 61'440));
  EXPECT_EQ(m.linear_state_bytes_per_request(), 153'944'064);
}

TEST(Planner, SeedWorkedExampleOnAnH200) {
  const MemoryPlan plan = plan_memory(builtin_input());
  // usable = 141e9 × 0.9 = 126.9e9; budget = 126.9e9 − 54e9 = 72.9e9.
  EXPECT_EQ(plan.usable_bytes, 126'900'000'000);
  EXPECT_EQ(plan.budget_bytes, 72'900'000'000);
  EXPECT_FALSE(plan.weights_estimated);
  EXPECT_EQ(plan.pages_per_request, 512);  // 32768 / 64
  EXPECT_EQ(plan.state_bytes_per_request, 153'944'064);
  EXPECT_EQ(plan.full_attention_layers, 16);
  EXPECT_EQ(plan.linear_attention_layers, 48);
  ASSERT_EQ(plan.formats.size(), 5u);

  const FormatPlan& fp8 = find(plan, KvDtype::kFP8);
  EXPECT_EQ(fp8.bytes_per_token, 32768);  // 16 × 4 × 256 × 2 × 1 B
  EXPECT_EQ(fp8.bytes_per_token_per_layer, 2048);
  EXPECT_EQ(fp8.page_bytes, 2'097'152);   // 64 × 32768, no padding
  EXPECT_EQ(fp8.request_bytes, 1'227'685'888);  // 512 × 2,097,152 + 153,944,064
  EXPECT_EQ(fp8.requests, 59);            // floor(72.9e9 / 1,227,685,888) = floor(59.38)
  EXPECT_EQ(fp8.pool_pages, 30430);       // floor((72.9e9 − 59 × 153,944,064) / 2,097,152)
  EXPECT_EQ(fp8.pool_tokens, 30430 * 64);

  const FormatPlan& nvfp4 = find(plan, KvDtype::kNVFP4);
  EXPECT_EQ(nvfp4.bytes_per_token, 18432);  // 16 × 4 × 2 × (128 + 16)
  EXPECT_EQ(nvfp4.page_bytes, 1'179'648);
  EXPECT_EQ(nvfp4.requests, 96);            // floor(72.9e9 / (512 × 1,179,648 + 153,944,064)) = floor(96.18)
  EXPECT_EQ(nvfp4.pool_pages, 49270);       // floor((72.9e9 − 96 × 153,944,064) / 1,179,648)
  EXPECT_DOUBLE_EQ(nvfp4.tokens_per_byte_vs_fp8, 16.0 / 9.0);  // 1.78×
  EXPECT_DOUBLE_EQ(nvfp4.requests_vs_fp8, 96.0 / 59.0);        // the states dilute 1.78× to 1.63×

  const FormatPlan& bf16 = find(plan, KvDtype::kBF16);
  EXPECT_EQ(bf16.bytes_per_token, 65536);
  EXPECT_EQ(bf16.requests, 31);  // floor(72.9e9 / (512 × 4,194,304 + 153,944,064)) = floor(31.68)
  EXPECT_EQ(bf16.pool_pages, 16242);
  EXPECT_DOUBLE_EQ(bf16.tokens_per_byte_vs_fp8, 0.5);

  const FormatPlan& k8v4 = find(plan, KvDtype::kK8V4);
  EXPECT_EQ(k8v4.bytes_per_token, 25600);  // 16 × 4 × (256 + 128 + 16)
  EXPECT_EQ(k8v4.requests, 73);
  EXPECT_EQ(k8v4.pool_pages, 37635);
  EXPECT_DOUBLE_EQ(k8v4.tokens_per_byte_vs_fp8, 1.28);

  const FormatPlan& f32 = find(plan, KvDtype::kF32);
  EXPECT_EQ(f32.bytes_per_token, 131072);
  EXPECT_EQ(f32.requests, 16);
  EXPECT_EQ(f32.pool_pages, 8396);
}

TEST(Planner, DenseModelWithEstimatedWeights) {
  PlanInput in{
      .model = config::load_model_config(std::filesystem::path(NIBBLE_SOURCE_DIR) / "tests/data/configs/llama-3-8b.json"),
      .model_source = "llama-3-8b.json",
      .gpu_memory_bytes = 80'000'000'000,
      .mem_fraction = 0.9,
      .weights_bytes = std::nullopt,  // estimated from the config
      .context_tokens = 8192,
      .page_size = 16,
      .kv_dtypes = {KvDtype::kFP8, KvDtype::kNVFP4},
  };
  const MemoryPlan plan = plan_memory(in);
  EXPECT_TRUE(plan.weights_estimated);
  EXPECT_EQ(plan.parameter_count, 8'030'261'248);
  EXPECT_EQ(plan.weights_bytes, 2 * 8'030'261'248);  // bfloat16
  EXPECT_EQ(plan.budget_bytes, 72'000'000'000 - 16'060'522'496);
  EXPECT_EQ(plan.state_bytes_per_request, 0);
  const FormatPlan& fp8 = plan.formats[0];
  EXPECT_EQ(fp8.bytes_per_token, 65536);       // 32 layers × 8 heads × 128 × 2
  EXPECT_EQ(fp8.page_bytes, 1'048'576);        // × 16 tokens
  EXPECT_EQ(fp8.pool_pages, 53348);            // floor(55,939,477,504 / 1,048,576)
  EXPECT_EQ(fp8.pool_tokens, 53348 * 16);
  EXPECT_EQ(fp8.requests, 104);                // floor(55,939,477,504 / (512 × 1,048,576))
  const FormatPlan& nvfp4 = plan.formats[1];
  EXPECT_EQ(nvfp4.bytes_per_token, 36864);
  EXPECT_EQ(nvfp4.pool_pages, 94840);          // floor(55,939,477,504 / 589,824)
  EXPECT_EQ(nvfp4.requests, 185);              // floor(55,939,477,504 / (512 × 589,824))
}

TEST(Planner, PartialLastPageCountsWhole) {
  PlanInput in = builtin_input();
  in.context_tokens = 100;  // 2 pages of 64
  in.kv_dtypes = {KvDtype::kFP8};
  const MemoryPlan plan = plan_memory(in);
  EXPECT_EQ(plan.pages_per_request, 2);
  EXPECT_EQ(plan.formats[0].request_bytes, 2 * 2'097'152 + 153'944'064);
}

TEST(Planner, ContextLargerThanTheBudgetFitsNoRequest) {
  PlanInput in = builtin_input();
  in.context_tokens = 10'000'000;  // 156,250 pages × 2 MiB > 72.9 GB
  in.kv_dtypes = {KvDtype::kFP8, KvDtype::kNVFP4};
  const MemoryPlan plan = plan_memory(in);
  EXPECT_EQ(plan.formats[0].requests, 0);
  EXPECT_EQ(plan.formats[0].pool_pages, 72'900'000'000 / 2'097'152);  // nothing charged for states
  EXPECT_EQ(plan.formats[1].requests_vs_fp8, 0.0);
}

TEST(Planner, RejectsBadInput) {
  auto expect_error = [](auto mutate) {
    PlanInput in = builtin_input();
    mutate(in);
    EXPECT_THROW(plan_memory(in), nibble::Error);
  };
  expect_error([](PlanInput& in) { in.mem_fraction = 0; });
  expect_error([](PlanInput& in) { in.mem_fraction = 1.5; });
  expect_error([](PlanInput& in) { in.gpu_memory_bytes = 0; });
  expect_error([](PlanInput& in) { in.context_tokens = 0; });
  expect_error([](PlanInput& in) { in.page_size = 0; });
  expect_error([](PlanInput& in) { in.weights_bytes = -1; });
  expect_error([](PlanInput& in) { in.weights_bytes = 126'900'000'000; });  // nothing left for KV
  expect_error([](PlanInput& in) { in.kv_dtypes.clear(); });
  expect_error([](PlanInput& in) { in.model.head_dim = 8; });  // nvfp4 needs multiples of 16
  expect_error([](PlanInput& in) { in.context_tokens = INT64_MAX; });  // bytes per request overflow
}

}  // namespace
}  // namespace nibble::cache
