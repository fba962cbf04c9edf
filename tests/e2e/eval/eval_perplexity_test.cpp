// The perplexity task on a random head_dim-64 model (nvfp4 needs head_dim % 16 == 0): the reference
// against itself is exact, quantized caches diverge in the expected order, and the lockstep KL
// matches a KL computed from an independent session's logits.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <random>

#include "common/npy.h"
#include "e2e/model_support/random_checkpoint.h"
#include "eval/perplexity.h"
#include "eval/perplexity_summary.h"
#include "eval/report.h"
#include "runtime/session.h"

namespace nibble::eval {
namespace {

constexpr int64_t kTokens = 40;
constexpr int64_t kChunk = 8;

class PerplexityTask : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("nibble_eval_ppl_" + std::to_string(::getpid()));
    testing::write_random_checkpoint(dir_, {.model_type = "llama", .max_positions = 64});
    model_ = std::make_unique<runtime::LoadedModel>(runtime::load_model({.dir = dir_, .num_threads = 2}));
    std::mt19937 rng(17);
    for (int d = 0; d < 3; ++d) {
      std::vector<int32_t> doc(kTokens);
      for (int32_t& t : doc) t = static_cast<int32_t>(rng() % 96);
      docs_.push_back(doc);
    }
    configs_ = parse_kv_configs("f32,bf16,fp8,nvfp4,nvfp4+hadamard");
    run_ = std::make_unique<PerplexityRun>(
        run_perplexity(*model_, docs_, parse_kv_config("f32"), configs_, {.chunk = kChunk, .page_size = 16}));
  }
  static void TearDownTestSuite() {
    run_.reset();
    model_.reset();
    std::filesystem::remove_all(dir_);
  }
  static double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / static_cast<double>(v.size());
  }
  static const ConfigTokenScores& scores(const std::string& name) {
    for (const auto& c : run_->configs) if (c.config.name == name) return c;
    throw std::runtime_error("no config " + name);
  }
  static std::filesystem::path dir_;
  static std::unique_ptr<runtime::LoadedModel> model_;
  static std::vector<std::vector<int32_t>> docs_;
  static std::vector<KvConfig> configs_;
  static std::unique_ptr<PerplexityRun> run_;
};
std::filesystem::path PerplexityTask::dir_;
std::unique_ptr<runtime::LoadedModel> PerplexityTask::model_;
std::vector<std::vector<int32_t>> PerplexityTask::docs_;
std::vector<KvConfig> PerplexityTask::configs_;
std::unique_ptr<PerplexityRun> PerplexityTask::run_;

TEST_F(PerplexityTask, ReferenceAgainstItselfIsExact) {
  const ConfigTokenScores& f32 = scores("f32");
  ASSERT_EQ(f32.documents, 3);
  ASSERT_EQ(f32.positions, kTokens - 1);
  for (size_t i = 0; i < f32.kl.size(); ++i) {
    ASSERT_EQ(f32.kl[i], 0.0) << "cell " << i;
    ASSERT_EQ(f32.top1_agree[i], 1) << "cell " << i;
    ASSERT_EQ(f32.logprob[i], run_->reference_scores.logprob[i]) << "cell " << i;
  }
}

TEST_F(PerplexityTask, QuantizedCachesDivergeInPrecisionOrder) {
  const double bf16 = mean(scores("bf16").kl), fp8 = mean(scores("fp8").kl), nvfp4 = mean(scores("nvfp4").kl),
               nvfp4_h = mean(scores("nvfp4+hadamard").kl);
  EXPECT_GT(bf16, 0.0);
  EXPECT_GT(fp8, bf16);
  EXPECT_GT(nvfp4, fp8);
  EXPECT_GT(nvfp4_h, 0.0);
  // The first chunk attends only its own full-precision K/V: no cache read, so KL there is 0 for every
  // unrotated format, and only float rounding (Hadamard on q and k changes the summation order) for
  // a rotated one; later chunks read the quantized prefix.
  for (const auto& c : run_->configs) {
    const bool rotated = c.config.rotation == quant::Rotation::kHadamard;
    for (int64_t d = 0; d < c.documents; ++d) {
      for (int64_t p = 0; p < kChunk; ++p) {
        const double kl = c.kl[static_cast<size_t>(d * c.positions + p)];
        if (rotated) {
          EXPECT_LT(kl, 1e-9) << c.config.name;
        } else {
          EXPECT_EQ(kl, 0.0) << c.config.name;
        }
      }
    }
  }
  double late_fp8 = 0;
  for (int64_t p = kChunk; p < scores("fp8").positions; ++p) late_fp8 += scores("fp8").kl[static_cast<size_t>(p)];
  EXPECT_GT(late_fp8, 0.0);
}

TEST_F(PerplexityTask, KlMatchesAnIndependentSessionsLogits) {
  // Document 1 under nvfp4 and f32, scored by plain sessions with the same chunking; KL by hand.
  const std::vector<int32_t>& doc = docs_[1];
  const int64_t vocab = model_->config().vocab_size;
  auto logits_of = [&](quant::KvDtype dtype) {
    runtime::Session s(*model_, {.kv_dtype = dtype, .page_size = 16, .prefill_chunk = kChunk, .max_context = kTokens});
    return s.prefill(doc, {.all_logits = true});  // [kTokens, vocab]
  };
  const std::vector<float> ref = logits_of(quant::KvDtype::kF32), q = logits_of(quant::KvDtype::kNVFP4);
  const ConfigTokenScores& nv = scores("nvfp4");
  for (int64_t p : {0L, 9L, 23L, kTokens - 2}) {
    double zr = 0, zq = 0, mr = -1e30, mq = -1e30;
    for (int64_t v = 0; v < vocab; ++v) mr = std::max(mr, double(ref[p * vocab + v])), mq = std::max(mq, double(q[p * vocab + v]));
    for (int64_t v = 0; v < vocab; ++v) zr += std::exp(ref[p * vocab + v] - mr), zq += std::exp(q[p * vocab + v] - mq);
    double kl = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double lp = ref[p * vocab + v] - mr - std::log(zr), lq = q[p * vocab + v] - mq - std::log(zq);
      kl += std::exp(lp) * (lp - lq);
    }
    const size_t cell = static_cast<size_t>(1 * nv.positions + p);
    EXPECT_NEAR(nv.kl[cell], kl, 1e-12 + 1e-9 * kl) << "position " << p;
    EXPECT_NEAR(nv.logprob[cell], q[p * vocab + doc[p + 1]] - mq - std::log(zq), 1e-9);
  }
}

TEST_F(PerplexityTask, SummaryAndReportFiles) {
  const PerplexitySummary s = summarize_perplexity(*run_, {.bootstrap = {.resamples = 200, .seed = 1}, .position_buckets = 4});
  ASSERT_EQ(s.configs.size(), configs_.size());
  const ConfigPerplexitySummary& f32 = s.configs[0];
  EXPECT_EQ(f32.delta_nll.estimate, 0.0);
  EXPECT_EQ(f32.delta_nll.lower, 0.0);
  EXPECT_EQ(f32.delta_nll.upper, 0.0);
  EXPECT_EQ(f32.top1_agreement, 1.0);
  EXPECT_DOUBLE_EQ(f32.perplexity, s.reference_perplexity);
  ASSERT_TRUE(f32.delta_nll_resolution.has_value());
  EXPECT_FALSE(f32.delta_nll_resolution->resolvable);
  const ConfigPerplexitySummary& nv = s.configs[3];
  EXPECT_EQ(nv.name, "nvfp4");
  EXPECT_LE(nv.kl.lower, nv.mean_kl);
  EXPECT_GE(nv.kl.upper, nv.mean_kl);
  ASSERT_EQ(nv.by_position.size(), 4u);
  EXPECT_EQ(nv.by_position.front().begin, 0);
  EXPECT_EQ(nv.by_position.back().end, kTokens - 1);

  EvalReport report{.model = dir_.string(), .reference = "f32", .configs = {"f32", "bf16", "fp8", "nvfp4", "nvfp4+hadamard"}};
  report.perplexity_run = *run_;
  report.perplexity = s;
  const auto out = dir_ / "report";
  const auto files = write_report_files(out, report);
  EXPECT_EQ(files.size(), 2u + 5u + 1u);  // json, md, five .npy, one plot
  std::ifstream in(out / "report.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["schema"], "nibble-eval/1");
  EXPECT_EQ(j["perplexity"]["configs"][0]["mean_kl"], 0.0);
  EXPECT_NEAR(j["perplexity"]["configs"][3]["mean_kl"].get<double>(), nv.mean_kl, 1e-15);
  const NpyArray tokens = read_npy(out / "tokens_nvfp4_hadamard.npy");
  EXPECT_EQ(tokens.shape, (std::vector<int64_t>{3, kTokens - 1, 3}));
  const ConfigTokenScores& h = scores("nvfp4+hadamard");
  EXPECT_FLOAT_EQ(tokens.data[3 * 10 + 1], static_cast<float>(h.kl[10]));
  EXPECT_NE(std::ifstream(out / "kl_by_position.svg").peek(), EOF);
}

}  // namespace
}  // namespace nibble::eval
