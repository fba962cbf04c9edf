// Golden test on a real trained model: models/stories260k against llama2.c run.c's outputs
// (golden.json). With an f32 KV cache nibble must reproduce all 200 greedy tokens of every case and
// the logits at positions 0-2 and 200-202 within 1e-4; also with chunked prefill.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "runtime/session.h"

namespace nibble::runtime {
namespace {

const std::filesystem::path kModelDir = std::filesystem::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k";
constexpr float kLogitTolerance = 1e-4f;

nlohmann::json load_golden() {
  std::ifstream in(kModelDir / "golden.json");
  EXPECT_TRUE(in.good()) << "missing " << (kModelDir / "golden.json");
  return nlohmann::json::parse(in);
}

class GoldenTest : public ::testing::TestWithParam<int64_t> {  // param: prefill chunk size (0 = whole)
 protected:
  static void SetUpTestSuite() { model_ = std::make_unique<LoadedModel>(load_model({.dir = kModelDir})); }
  static void TearDownTestSuite() { model_.reset(); }
  static std::unique_ptr<LoadedModel> model_;
};
std::unique_ptr<LoadedModel> GoldenTest::model_;

TEST_P(GoldenTest, GreedyContinuationsMatchRunC) {
  const nlohmann::json golden = load_golden();
  ASSERT_EQ(golden["cases"].size(), 6u);
  for (const nlohmann::json& c : golden["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto expected = c["generated_ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(expected.size(), 200u);
    Session session(*model_, {.kv_dtype = quant::KvDtype::kF32, .page_size = 16, .prefill_chunk = GetParam()});
    std::vector<float> logits = session.prefill(prompt);
    std::vector<int32_t> generated;
    for (size_t i = 0; i < expected.size(); ++i) {
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      generated.push_back(next);
      if (next != expected[i]) break;
      if (i + 1 < expected.size()) logits = session.decode(next);
    }
    EXPECT_EQ(generated, expected) << "prompt: " << c["prompt"];
  }
}

TEST_P(GoldenTest, LogitsMatchRunC) {
  const nlohmann::json golden = load_golden();
  for (const nlohmann::json& entry : golden["logits"]) {
    const auto ids = entry["input_ids"].get<std::vector<int32_t>>();
    const auto positions = entry["positions"].get<std::vector<int64_t>>();
    const auto expected = entry["logits"].get<std::vector<std::vector<float>>>();
    Session session(*model_, {.kv_dtype = quant::KvDtype::kF32, .page_size = 16, .prefill_chunk = GetParam()});
    // All-position logits of the whole sequence in one (chunked) prefill.
    const std::vector<float> all = session.prefill(ids, {.all_logits = true});
    const int64_t vocab = model_->config().vocab_size;
    ASSERT_EQ(static_cast<int64_t>(all.size()), static_cast<int64_t>(ids.size()) * vocab);
    for (size_t k = 0; k < positions.size(); ++k) {
      ASSERT_EQ(static_cast<int64_t>(expected[k].size()), vocab);
      float max_diff = 0.0f;
      for (int64_t i = 0; i < vocab; ++i) {
        max_diff = std::max(max_diff, std::fabs(all[positions[k] * vocab + i] - expected[k][i]));
      }
      EXPECT_LE(max_diff, kLogitTolerance) << entry["prompt"] << " position " << positions[k];
    }
  }
}

TEST_P(GoldenTest, DecodedLogitsMatchRunCAtLongContext) {
  // The same positions 200-202 reached through decode steps (the decode path reads pages only).
  const nlohmann::json golden = load_golden();
  const nlohmann::json& entry = golden["logits"][2];
  const auto ids = entry["input_ids"].get<std::vector<int32_t>>();
  const auto expected = entry["logits"].get<std::vector<std::vector<float>>>();
  ASSERT_EQ(ids.size(), 203u);
  Session session(*model_, {.kv_dtype = quant::KvDtype::kF32, .page_size = 16, .prefill_chunk = GetParam()});
  std::vector<float> logits = session.prefill(std::span(ids).first(200));
  for (size_t p = 200; p < 203; ++p) {
    logits = session.decode(ids[p]);
    float max_diff = 0.0f;
    for (size_t i = 0; i < logits.size(); ++i) max_diff = std::max(max_diff, std::fabs(logits[i] - expected[p - 200][i]));
    EXPECT_LE(max_diff, kLogitTolerance) << "position " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(PrefillChunks, GoldenTest, ::testing::Values(0, 1, 7, 64),
                         [](const auto& info) { return "chunk" + std::to_string(info.param); });

}  // namespace
}  // namespace nibble::runtime
