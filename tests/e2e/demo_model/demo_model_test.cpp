// The bundled demo model (models/demo-austen, scripts/train_demo_model.py) against its golden.json,
// written by transformers 5 in float32 on the CPU from the same bf16 files: nibble's tokenizer gives
// the same ids, nibble's CPU forward pass with an f32 KV cache gives the same logits (within
// kLogitTolerance) and the same 40 greedy tokens (a step may differ only where transformers' top-1
// and top-2 logits are within kNearTieGap, after which the sequences are no longer comparable), and
// generation with an nvfp4 KV cache runs and writes text.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>

#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace nibble::runtime {
namespace {

const std::filesystem::path kModelDir = std::filesystem::path(NIBBLE_SOURCE_DIR) / "models" / "demo-austen";
// bf16 weights widen exactly to f32, so only the order of f32 operations differs from transformers.
constexpr float kLogitTolerance = 1e-4f;
// Twice the logit tolerance on each of two logits, with margin: a gap above this cannot flip.
constexpr float kNearTieGap = 1e-3f;
constexpr size_t kGreedyTokens = 40;

nlohmann::json load_golden() {
  std::ifstream in(kModelDir / "golden.json");
  EXPECT_TRUE(in.good()) << "missing " << (kModelDir / "golden.json");
  return nlohmann::json::parse(in);
}

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Greedy continuation of `prompt`: n tokens.
std::vector<int32_t> greedy(LoadedModel& model, quant::KvDtype kv_dtype, const std::vector<int32_t>& prompt,
                            size_t n) {
  Session session(model, {.kv_dtype = kv_dtype, .page_size = 16});
  std::vector<float> logits = session.prefill(prompt);
  std::vector<int32_t> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(argmax(logits));
    if (i + 1 < n) logits = session.decode(out.back());
  }
  return out;
}

class DemoModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = std::make_unique<LoadedModel>(load_model({.dir = kModelDir}));
    golden_ = load_golden();
  }
  static void TearDownTestSuite() { model_.reset(); }
  static std::unique_ptr<LoadedModel> model_;
  static nlohmann::json golden_;
};
std::unique_ptr<LoadedModel> DemoModelTest::model_;
nlohmann::json DemoModelTest::golden_;

TEST_F(DemoModelTest, ConfigIsTheDocumentedArchitecture) {
  const auto& c = model_->config();
  EXPECT_EQ(c.vocab_size, 4096);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);  // a multiple of 16: nvfp4 blocks apply
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_LT(std::filesystem::file_size(kModelDir / "model.safetensors"), 10u * 1024 * 1024);  // small enough to commit
}

TEST_F(DemoModelTest, TokenizerMatchesHuggingFaceTokenizers) {
  const Tokenizer tokenizer = Tokenizer::load(kModelDir);
  ASSERT_EQ(golden_["cases"].size(), 2u);
  for (const nlohmann::json& c : golden_["cases"]) {
    EXPECT_EQ(tokenizer.encode(c["prompt"].get<std::string>()), c["prompt_ids"].get<std::vector<int32_t>>())
        << c["prompt"];
    EXPECT_EQ(tokenizer.decode(c["generated_ids"].get<std::vector<int32_t>>()), c["generated_text"].get<std::string>())
        << c["prompt"];
  }
  EXPECT_EQ(tokenizer.token_to_id("<|endoftext|>"), 0);
  EXPECT_EQ(tokenizer.eos_ids(), std::vector<int32_t>{0});
}

TEST_F(DemoModelTest, LogitsMatchTransformersFloat32) {
  const int64_t vocab = model_->config().vocab_size;
  for (const nlohmann::json& c : golden_["cases"]) {
    const auto ids = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto positions = c["logit_positions"].get<std::vector<int64_t>>();
    const auto expected = c["logits"].get<std::vector<std::vector<float>>>();
    ASSERT_EQ(positions.size(), 3u);
    Session session(*model_, {.kv_dtype = quant::KvDtype::kF32, .page_size = 16});
    const std::vector<float> all = session.prefill(ids, {.all_logits = true});  // [ids.size(), vocab]
    ASSERT_EQ(static_cast<int64_t>(all.size()), static_cast<int64_t>(ids.size()) * vocab);
    for (size_t k = 0; k < positions.size(); ++k) {
      ASSERT_EQ(static_cast<int64_t>(expected[k].size()), vocab);
      float max_diff = 0.0f;
      for (int64_t i = 0; i < vocab; ++i) {
        max_diff = std::max(max_diff, std::fabs(all[positions[k] * vocab + i] - expected[k][i]));
      }
      EXPECT_LE(max_diff, kLogitTolerance) << c["prompt"] << " position " << positions[k];
    }
  }
}

TEST_F(DemoModelTest, GreedyTokensMatchTransformersFloat32) {
  for (const nlohmann::json& c : golden_["cases"]) {
    const auto expected = c["generated_ids"].get<std::vector<int32_t>>();
    const auto gaps = c["top1_top2_gaps"].get<std::vector<float>>();
    ASSERT_EQ(expected.size(), kGreedyTokens);
    ASSERT_EQ(gaps.size(), kGreedyTokens);
    const std::vector<int32_t> got =
        greedy(*model_, quant::KvDtype::kF32, c["prompt_ids"].get<std::vector<int32_t>>(), kGreedyTokens);
    for (size_t i = 0; i < kGreedyTokens; ++i) {
      if (got[i] == expected[i]) continue;
      EXPECT_LT(gaps[i], kNearTieGap) << c["prompt"] << ": token " << i << " is " << got[i] << ", transformers "
                                      << expected[i] << " with a top-1/top-2 gap of " << gaps[i];
      break;  // past a near-tie the two continuations are no longer comparable
    }
  }
}

TEST_F(DemoModelTest, Nvfp4CacheGeneratesText) {
  const Tokenizer tokenizer = Tokenizer::load(kModelDir);
  const std::vector<int32_t> prompt = tokenizer.encode("It is a truth");
  const std::vector<int32_t> f32 = greedy(*model_, quant::KvDtype::kF32, prompt, 60);
  const std::vector<int32_t> fp4 = greedy(*model_, quant::KvDtype::kNVFP4, prompt, 60);
  const std::string text = tokenizer.decode(fp4);
  // Text: mostly letters and spaces, several words, no special token.
  const auto letters = std::count_if(text.begin(), text.end(), [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); });
  const auto spaces = std::count(text.begin(), text.end(), ' ');
  EXPECT_GT(text.size(), 120u) << text;
  EXPECT_GT(letters, static_cast<long>(text.size() * 6 / 10)) << text;
  EXPECT_GT(spaces, 15) << text;
  EXPECT_EQ(std::count(fp4.begin(), fp4.end(), 0), 0) << text;
  // The 4-bit cache changes the attention inputs only slightly: the continuation starts as the f32 one.
  const size_t common = std::mismatch(f32.begin(), f32.end(), fp4.begin()).first - f32.begin();
  EXPECT_GE(common, 3u) << "f32: " << tokenizer.decode(f32) << "\nnvfp4: " << text;
}

}  // namespace
}  // namespace nibble::runtime
