// The whole model over the paged cache in every KV format (± Hadamard), on a random model with
// head_dim 64: prefill-then-decode against chunked extend, chunk-size invariance, batching
// invariance, and the bad-input errors of a Session.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/error.h"
#include "e2e/model_support/random_checkpoint.h"
#include "runtime/session.h"

namespace nibble::runtime {
namespace {

using quant::KvDtype;
using quant::Rotation;

constexpr int64_t kTokens = 40;

struct Case {
  KvDtype dtype;
  Rotation rotation;
  // Largest logit difference allowed between two schedules that see different tokens at cache
  // precision (decode sees its own token quantized, extend sees its chunk at full precision).
  // Empirical bounds on this random model (observed maxima over the schedules below times ~1.4):
  // what one format's rounding can do to the logits, far below what a wrong page, slot or path
  // does (differences of several units).
  float schedule_tolerance;
};

std::filesystem::path model_dir() {
  static const std::filesystem::path dir = [] {
    const auto d = std::filesystem::temp_directory_path() / ("nibble_kv_formats_" + std::to_string(::getpid()));
    testing::write_random_checkpoint(d, {.model_type = "qwen3", .max_positions = 128});
    return d;
  }();
  return dir;
}

std::vector<int32_t> tokens() {
  std::mt19937 rng(5);
  std::vector<int32_t> t(kTokens);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 96);
  return t;
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class KvFormats : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { model_ = std::make_unique<LoadedModel>(load_model({.dir = model_dir(), .num_threads = 2})); }
  static void TearDownTestSuite() {
    model_.reset();
    std::filesystem::remove_all(model_dir());
  }
  SessionOptions options(int64_t chunk) const {
    return {.kv_dtype = GetParam().dtype, .rotation = GetParam().rotation, .page_size = 16, .prefill_chunk = chunk};
  }
  // Logits at every position, by chunked prefill.
  std::vector<float> chunked(int64_t chunk) {
    Session s(*model_, options(chunk));
    const std::vector<int32_t> t = tokens();
    return s.prefill(t, {.all_logits = true});
  }
  static std::unique_ptr<LoadedModel> model_;
};
std::unique_ptr<LoadedModel> KvFormats::model_;

TEST_P(KvFormats, PrefillThenDecodeEqualsChunkedExtend) {
  const std::vector<int32_t> t = tokens();
  const int64_t vocab = model_->config().vocab_size;
  Session s(*model_, options(0));
  std::vector<float> stepwise = s.prefill(std::span(t).first(24));  // logits at position 23
  for (int64_t p = 24; p < kTokens; ++p) {
    const std::vector<float> l = s.decode(t[p]);
    stepwise.insert(stepwise.end(), l.begin(), l.end());
  }
  const std::vector<float> extend = chunked(8);
  const float diff = max_abs_diff(stepwise, std::span(extend).subspan(23 * vocab));
  EXPECT_LE(diff, GetParam().schedule_tolerance);
  s.check_integrity();
}

TEST_P(KvFormats, ChunkSizeChangesResultsOnlyWithinTheFormatsError) {
  const std::vector<float> whole = chunked(0);
  for (int64_t chunk : {1, 5, 16, 17}) {
    const float diff = max_abs_diff(whole, chunked(chunk));
    // f32: only float rounding may differ. Quantized: the schedules differ in which tokens are
    // seen at cache precision, so the format's own error.
    EXPECT_LE(diff, GetParam().schedule_tolerance) << "chunk " << chunk;
  }
}

TEST_P(KvFormats, BatchingDoesNotChangeResults) {
  // Two sequences stepped together (a prefill chunk with a decode token, then extend + decode)
  // see exactly what each sees alone. Only float rounding may differ (BLAS may sum a batch of
  // rows in another order), which a quantized format can amplify by flipping a rounding decision.
  const std::vector<int32_t> t = tokens();
  Session alone_a(*model_, options(0)), alone_b(*model_, options(0));
  std::vector<float> a1 = alone_a.prefill(std::span(t).first(20));
  std::vector<float> b1 = alone_b.prefill(std::span(t).subspan(10, 9));
  std::vector<float> a2 = alone_a.prefill(std::span(t).subspan(20, 13));
  std::vector<float> b2 = alone_b.decode(t[39]);

  SessionOptions opts = options(0);
  opts.max_sequences = 2;
  Session both(*model_, opts);
  const SequenceId b = both.add_sequence();
  std::vector<StepInput> step1 = {{.sequence = 0, .tokens = std::span(t).first(20)},
                                  {.sequence = b, .tokens = std::span(t).subspan(10, 9)}};
  const std::vector<float> r1 = both.step(step1);
  const int32_t last = t[39];
  std::vector<StepInput> step2 = {{.sequence = b, .tokens = std::span(&last, 1)},
                                  {.sequence = 0, .tokens = std::span(t).subspan(20, 13)}};
  const std::vector<float> r2 = both.step(step2);
  const size_t vocab = a1.size();
  const float tol = GetParam().schedule_tolerance;
  EXPECT_LE(max_abs_diff(std::span(r1).first(vocab), a1), tol);
  EXPECT_LE(max_abs_diff(std::span(r1).subspan(vocab), b1), tol);
  EXPECT_LE(max_abs_diff(std::span(r2).first(vocab), b2), tol);
  EXPECT_LE(max_abs_diff(std::span(r2).subspan(vocab), a2), tol);
  both.check_integrity();
  both.remove_sequence(b);
  both.check_integrity();
}

TEST_P(KvFormats, QuantizedLogitsStayNearF32) {
  // Sanity bound on the format error itself: every format is compared with the f32 cache.
  Session f32(*model_, {.kv_dtype = KvDtype::kF32, .page_size = 16});
  Session q(*model_, options(0));
  const std::vector<int32_t> t = tokens();
  std::vector<float> ref = f32.prefill(std::span(t).first(8)), got = q.prefill(std::span(t).first(8));
  float diff = 0;
  for (int64_t p = 8; p < kTokens; ++p) {
    ref = f32.decode(t[p]);
    got = q.decode(t[p]);
    diff = std::max(diff, max_abs_diff(ref, got));
  }
  EXPECT_LE(diff, GetParam().schedule_tolerance);
}

std::vector<Case> cases() {
  std::vector<Case> c;
  for (Rotation r : {Rotation::kNone, Rotation::kHadamard}) {
    c.push_back({KvDtype::kF32, r, 2e-5f});
    c.push_back({KvDtype::kBF16, r, 2e-2f});
    c.push_back({KvDtype::kFP8, r, 0.3f});
    c.push_back({KvDtype::kNVFP4, r, 1.0f});
    c.push_back({KvDtype::kK8V4, r, 0.8f});
  }
  return c;
}

INSTANTIATE_TEST_SUITE_P(Formats, KvFormats, ::testing::ValuesIn(cases()), [](const auto& info) {
  return std::string(quant::kv_dtype_name(info.param.dtype)) +
         (info.param.rotation == Rotation::kHadamard ? "_hadamard" : "_plain");
});

TEST(SessionErrors, PromptLongerThanContextEmptyPromptAndMissingFiles) {
  LoadedModel model = load_model({.dir = model_dir(), .num_threads = 1});
  Session s(model, {.max_context = 32});
  std::vector<int32_t> long_prompt(33, 3);
  try {
    s.prefill(long_prompt);
    FAIL() << "no error for a prompt longer than the context";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the context of 32"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.length(), 0);
  EXPECT_THROW(s.prefill(std::vector<int32_t>{}), Error);
  EXPECT_THROW(Session(model, {.max_context = 129}), Error);  // the model's context is 128
  std::vector<int32_t> bad_id = {96};
  EXPECT_THROW(s.prefill(bad_id), Error);

  const auto empty_dir = std::filesystem::temp_directory_path() / ("nibble_empty_" + std::to_string(::getpid()));
  std::filesystem::create_directories(empty_dir);
  try {
    load_model({.dir = empty_dir});
    FAIL() << "no error for a directory without config.json";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
  std::filesystem::copy_file(model_dir() / "config.json", empty_dir / "config.json");
  try {
    load_model({.dir = empty_dir});
    FAIL() << "no error for a directory without weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("safetensors"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(empty_dir);
  EXPECT_THROW(load_model({.dir = empty_dir}), Error);
}

}  // namespace
}  // namespace nibble::runtime
