// Runs the nibble binary as a user would and checks what it prints and how it exits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "e2e/support/nibble_command.h"

namespace {

using ::testing::HasSubstr;

using Result = nibble::test::CommandRun;

std::string data(const std::string& name) { return std::string(NIBBLE_SOURCE_DIR) + "/tests/data/configs/" + name; }

Result run_plan(const std::string& args) { return nibble::test::run_nibble("plan " + args); }

TEST(PlanE2E, BuiltinDefaultShowsTheWorkedExample) {
  const Result r = run_plan("");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("built-in geometry"));
  EXPECT_THAT(r.out, HasSubstr("16 full attention"));
  EXPECT_THAT(r.out, HasSubstr("4 KV heads × head_dim 256"));
  EXPECT_THAT(r.out, HasSubstr("float32"));  // the linear-attention state's element type is stated
  // 16 × 4 × 256 × 2: 32,768 B per token in fp8 and 18,432 B (9/16) in nvfp4, 16/9 = 1.78× the tokens.
  EXPECT_THAT(r.out, HasSubstr("32,768"));
  EXPECT_THAT(r.out, HasSubstr("18,432"));
  EXPECT_THAT(r.out, HasSubstr("1.78×"));
  EXPECT_THAT(r.out, HasSubstr("0.5625"));
}

TEST(PlanE2E, JsonOnAHybridConfig) {
  const Result r = run_plan("--config '" + data("qwen3-next-80b-a3b.json") +
                            "' --json --gpu-memory 256GB --mem-fraction 0.85 --context 65536 --page-size 32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["model"]["builtin_geometry"].get<bool>());
  EXPECT_EQ(j["model"]["full_attention_layers"], 12);  // 48 layers, every 4th
  EXPECT_EQ(j["model"]["linear_attention_layers"], 36);
  EXPECT_EQ(j["usable_bytes"], 217'600'000'000);  // 256e9 × 0.85 (80B bf16 weights need two H200s)
  EXPECT_TRUE(j["weights_estimated"].get<bool>());
  const int64_t weights = j["weights_bytes"];
  EXPECT_EQ(weights, 2 * j["parameter_count"].get<int64_t>());  // bfloat16
  const int64_t budget = j["budget_bytes"];
  EXPECT_EQ(budget, 217'600'000'000 - weights);
  EXPECT_EQ(j["pages_per_request"], 2048);  // 65536 / 32
  // 36 linear layers × (recurrent [32, 128, 128] × 4 B + conv [3, 2·16·128 + 32·128] × 2 B).
  const int64_t state = 36 * (32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 2);
  EXPECT_EQ(j["linear_state"]["bytes_per_request"], state);
  EXPECT_EQ(j["linear_state"]["recurrent_dtype"], "float32");
  ASSERT_EQ(j["formats"].size(), 5u);
  for (const auto& f : j["formats"]) {
    const std::string name = f["kv_dtype"];
    SCOPED_TRACE(name);
    // 12 layers × 2 KV heads × (K + V) × bytes per 256-element head vector.
    const int64_t vector_bytes = name == "f32" ? 1024 : name == "bf16" ? 512 : name == "fp8" ? 256
                                 : name == "nvfp4" ? 128 + 16 : -1;
    const int64_t per_token = name == "k8v4" ? 12 * 2 * (256 + 144) : 12 * 2 * 2 * vector_bytes;
    EXPECT_EQ(f["bytes_per_token"], per_token);
    const int64_t page = 32 * per_token;  // no padding at this shape
    EXPECT_EQ(f["page_bytes"], page);
    const int64_t requests = budget / (2048 * page + state);
    EXPECT_EQ(f["requests"], requests);
    EXPECT_EQ(f["pool_pages"], (budget - requests * state) / page);
    EXPECT_EQ(f["pool_tokens"], 32 * ((budget - requests * state) / page));
    EXPECT_DOUBLE_EQ(f["tokens_per_byte_vs_fp8"].get<double>(), 12.0 * 2 * 2 * 256 / per_token);
  }
}

TEST(PlanE2E, DenseConfigWithGivenWeights) {
  const Result r = run_plan("--config '" + data("qwen3-8b.json") +
                            "' --json --kv-dtype fp8,nvfp4 --gpu-memory 80GiB --mem-fraction 1 --weights-bytes 16GiB"
                            " --context 4096 --page-size 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["weights_estimated"].get<bool>());
  EXPECT_EQ(j["budget_bytes"], 64LL << 30);  // 80 GiB − 16 GiB
  EXPECT_TRUE(j["linear_state"].is_null());
  ASSERT_EQ(j["formats"].size(), 2u);
  // 36 layers × 8 KV heads × 128 × 2 = 73,728 B (fp8); 16-token pages of 1,179,648 B; 256 pages a request.
  EXPECT_EQ(j["formats"][0]["bytes_per_token"], 73728);
  EXPECT_EQ(j["formats"][0]["pool_pages"], (64LL << 30) / 1'179'648);
  EXPECT_EQ(j["formats"][0]["requests"], (64LL << 30) / (256 * 1'179'648));
  EXPECT_EQ(j["formats"][1]["bytes_per_token"], 41472);  // 9/16 of 73,728
  EXPECT_EQ(j["formats"][1]["pool_pages"], (64LL << 30) / (16 * 41472));
}

TEST(PlanE2E, SmallHeadDimSkipsNvfp4WithAReason) {
  const Result r = run_plan("--config '" + std::string(NIBBLE_SOURCE_DIR) + "/models/stories260k/config.json' --json"
                            " --gpu-memory 1GB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["formats"].size(), 3u);  // f32, bf16, fp8
  ASSERT_EQ(j["skipped_formats"].size(), 2u);
  EXPECT_EQ(j["skipped_formats"][0]["kv_dtype"], "nvfp4");
  EXPECT_THAT(j["skipped_formats"][0]["reason"].get<std::string>(), HasSubstr("multiple of 16"));
}

TEST(PlanE2E, BadInputExitsNonZeroWithAMessage) {
  const Result missing = run_plan("--config '" + data("bad/missing-hidden-size.json") + "'");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("missing required field 'hidden_size'"));
  EXPECT_THAT(missing.err, HasSubstr("missing-hidden-size.json"));
  EXPECT_TRUE(missing.out.empty());

  const Result arch = run_plan("--config '" + data("bad/unsupported-architecture.json") + "'");
  EXPECT_NE(arch.exit_code, 0);
  EXPECT_THAT(arch.err, HasSubstr("GPT2LMHeadModel"));

  const Result dtype = run_plan("--kv-dtype int3");
  EXPECT_NE(dtype.exit_code, 0);
  EXPECT_THAT(dtype.err, HasSubstr("unknown KV dtype 'int3'"));

  const Result nvfp4 = run_plan("--config '" + std::string(NIBBLE_SOURCE_DIR) +
                                "/models/stories260k/config.json' --kv-dtype nvfp4");
  EXPECT_NE(nvfp4.exit_code, 0);
  EXPECT_THAT(nvfp4.err, HasSubstr("multiple of 16"));

  const Result fraction = run_plan("--mem-fraction 1.5");
  EXPECT_NE(fraction.exit_code, 0);
  EXPECT_THAT(fraction.err, HasSubstr("--mem-fraction"));

  const Result memory = run_plan("--gpu-memory 141XB");
  EXPECT_NE(memory.exit_code, 0);
  EXPECT_THAT(memory.err, HasSubstr("141XB"));

  const Result weights = run_plan("--weights-bytes 200GB");
  EXPECT_NE(weights.exit_code, 0);
  EXPECT_THAT(weights.err, HasSubstr("leave no KV budget"));

  const Result file = run_plan("--config /nonexistent/config.json");
  EXPECT_NE(file.exit_code, 0);
  EXPECT_THAT(file.err, HasSubstr("/nonexistent/config.json"));
}

}  // namespace
