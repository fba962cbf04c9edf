// Cross-framework check: random-initialized models of every supported architecture, made and run by
// Hugging Face transformers (scripts/make_hf_fixtures.py, eager attention, float32), loaded and run
// by nibble with an f32 KV cache. Tolerance: 1e-4 absolute on every logit (the logits are O(1);
// float32 summation-order differences are ~1e-6). Each prompt runs as one prefill, as a chunked
// prefill, and as prefill + decode steps, so all three attention paths are compared.
// A missing fixtures directory is a failure, not a skip: run the script and commit its output.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "common/npy.h"
#include "runtime/session.h"

namespace nibble::runtime {
namespace {

namespace fs = std::filesystem;
constexpr float kTolerance = 1e-4f;
const char* const kArchs[] = {"llama3_untied", "llama_tied", "mistral", "qwen2_bias", "qwen3_qknorm"};

fs::path fixtures_dir() {
  if (const char* env = std::getenv("NIBBLE_HF_FIXTURES")) return env;
  return fs::path(NIBBLE_SOURCE_DIR) / "tests" / "data" / "hf_fixtures";
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class HfFixtures : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFixtures, LogitsMatchTransformers) {
  const fs::path dir = fixtures_dir() / GetParam();
  ASSERT_TRUE(fs::exists(dir / "prompts.json"))
      << "fixture " << dir << " is missing: run `python3 scripts/make_hf_fixtures.py` on a machine with torch and "
      << "transformers, and commit tests/data/hf_fixtures/";
  LoadedModel model = load_model({.dir = dir, .num_threads = 2});
  std::ifstream in(dir / "prompts.json");
  const auto prompts = nlohmann::json::parse(in)["prompts"].get<std::vector<std::vector<int32_t>>>();
  ASSERT_FALSE(prompts.empty());
  const int64_t vocab = model.config().vocab_size;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& ids = prompts[i];
    const NpyArray expected = read_npy(dir / ("logits_" + std::to_string(i) + ".npy"));
    ASSERT_EQ(expected.shape, (std::vector<int64_t>{static_cast<int64_t>(ids.size()), vocab}));
    for (int64_t chunk : {0, 4}) {
      Session s(model, {.kv_dtype = quant::KvDtype::kF32, .page_size = 16, .prefill_chunk = chunk});
      const std::vector<float> got = s.prefill(ids, {.all_logits = true});
      EXPECT_LE(max_abs_diff(got, expected.data), kTolerance) << GetParam() << " prompt " << i << " chunk " << chunk;
    }
    // Prefill the first half, then decode the rest token by token.
    Session s(model, {.kv_dtype = quant::KvDtype::kF32, .page_size = 8});
    const size_t half = (ids.size() + 1) / 2;
    std::vector<float> got = s.prefill(std::span(ids).first(half));
    for (size_t p = half; p < ids.size(); ++p) {
      const std::vector<float> l = s.decode(ids[p]);
      got.insert(got.end(), l.begin(), l.end());
    }
    EXPECT_LE(max_abs_diff(got, std::span(expected.data).subspan((half - 1) * vocab)), kTolerance)
        << GetParam() << " prompt " << i << " decode";
  }
}

TEST(HfFixtureSet, LlamaFixtureUsesLlama3RopeScaling) {
  // The llama3 rope_scaling path must actually be exercised by the fixtures.
  const fs::path dir = fixtures_dir() / "llama3_untied";
  ASSERT_TRUE(fs::exists(dir / "config.json")) << "missing " << dir << ": run scripts/make_hf_fixtures.py";
  const model::Checkpoint ckpt = model::open_checkpoint(dir);
  EXPECT_EQ(ckpt.config.rope_scaling.kind, config::RopeScaling::Kind::kLlama3);
  EXPECT_FALSE(ckpt.config.tie_word_embeddings);
}

INSTANTIATE_TEST_SUITE_P(Architectures, HfFixtures, ::testing::ValuesIn(kArchs),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace nibble::runtime
