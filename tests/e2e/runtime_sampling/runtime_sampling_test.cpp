// run_forward_step_sampled (runtime/forward_step.h) on the CPU backend with models/stories260k, and
// the CPU backend's sample op (backend.h) that it calls:
//   - greedy: the sampled id is the argmax (lowest id on ties) of the logits run_forward_step
//     returns for the same step, and its logprob is their log-softmax at that id, through a
//     two-sequence prefill and several decode steps;
//   - seeded draws: the same (seed, draw) gives the same tokens on a fresh pool, and the token equals
//     the backend's sample of the host logits row and sample_host_logits' (one forward, bit-identical
//     logits);
//   - kept sets: every draw lies in sampling::filtered_distribution's support (top-k, top-p,
//     min-p), and over 4000 draws each kept token's frequency is within 5 standard deviations of
//     its probability;
//   - misuse (all_logits, a wrong number of requests) is an error naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <vector>

#include "backend/backend.h"
#include "common/error.h"
#include "runtime/forward_step.h"
#include "runtime/loaded_model.h"
#include "sampling/sampler.h"

namespace nibble::runtime {
namespace {

const std::filesystem::path kModelDir = std::filesystem::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k";
constexpr float kLogprobTolerance = 1e-5f;  // both sides are log-softmax of the same f32 logits

class RuntimeSampling : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = std::make_unique<LoadedModel>(load_model({.dir = kModelDir, .device = "cpu", .num_threads = 1,
                                                       .progress = false}));
  }
  static void TearDownTestSuite() { model_.reset(); }
  static cache::KvPool pool() {
    return make_kv_pool(*model_, {.kv_dtype = quant::KvDtype::kF32, .page_size = 16, .num_pages = 8});
  }
  int64_t vocab() const { return model_->config().vocab_size; }
  static std::unique_ptr<LoadedModel> model_;
};
std::unique_ptr<LoadedModel> RuntimeSampling::model_;

const std::vector<int32_t> kPromptA{1, 365, 1473, 263, 931, 29892, 727, 471, 263, 2217};
const std::vector<int32_t> kPromptB{1, 9038, 2501, 263, 931, 29892, 263};
const std::vector<int32_t> kPagesA{0, 1}, kPagesB{2, 3};

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

double log_softmax_at(std::span<const float> row, int32_t id) {
  double m = -INFINITY, total = 0;
  for (float l : row) m = std::max(m, static_cast<double>(l));
  for (float l : row) total += std::exp(l - m);
  return row[id] - m - std::log(total);
}

// Token ids of the stories260k vocabulary (512): clamp the prompts into it.
std::vector<int32_t> in_vocab(const std::vector<int32_t>& ids, int64_t vocab) {
  std::vector<int32_t> out;
  for (int32_t id : ids) out.push_back(static_cast<int32_t>(id % vocab));
  return out;
}

TEST_F(RuntimeSampling, GreedyEqualsTheArgmaxOfTheHostLogits) {
  cache::KvPool host_pool = pool(), device_pool = pool();
  const std::vector<int32_t> a = in_vocab(kPromptA, vocab()), b = in_vocab(kPromptB, vocab());
  std::vector<backend::SequenceStep> steps{{.first_position = 0, .tokens = a, .pages = kPagesA},
                                           {.first_position = 0, .tokens = b, .pages = kPagesB}};
  const std::vector<backend::SampleRequest> greedy(2);  // temperature 0
  std::vector<int32_t> next(2);
  for (int step = 0; step < 6; ++step) {
    const std::vector<float> logits = run_forward_step(*model_, host_pool, quant::Rotation::kNone, steps);
    const std::vector<backend::SampledToken> got =
        run_forward_step_sampled(*model_, device_pool, quant::Rotation::kNone, steps, greedy);
    ASSERT_EQ(got.size(), 2u);
    ASSERT_EQ(logits.size(), static_cast<size_t>(2 * vocab()));
    for (size_t i = 0; i < 2; ++i) {
      const std::span<const float> row = std::span(logits).subspan(i * vocab(), vocab());
      EXPECT_EQ(got[i].id, argmax(row)) << "step " << step << " sequence " << i;
      EXPECT_NEAR(got[i].logprob, log_softmax_at(row, got[i].id), kLogprobTolerance) << "step " << step;
      next[i] = got[i].id;
    }
    // Decode the chosen tokens (both pools see the same inputs).
    for (size_t i = 0; i < 2; ++i) {
      steps[i].first_position += static_cast<int64_t>(steps[i].tokens.size());
      steps[i].tokens = std::span(&next[i], 1);
    }
  }
}

TEST_F(RuntimeSampling, SeededDrawsAreReproducibleAndMatchTheBackendOnHostLogits) {
  const std::vector<int32_t> a = in_vocab(kPromptA, vocab()), b = in_vocab(kPromptB, vocab());
  const std::vector<backend::SequenceStep> steps{{.first_position = 0, .tokens = a, .pages = kPagesA},
                                                 {.first_position = 0, .tokens = b, .pages = kPagesB}};
  cache::KvPool host_pool = pool();
  std::vector<float> logits = run_forward_step(*model_, host_pool, quant::Rotation::kNone, steps);
  int distinct_draws = 0;
  for (uint64_t draw = 0; draw < 8; ++draw) {
    const std::vector<backend::SampleRequest> requests{
        {.temperature = 1.0f, .top_k = 40, .seed = 7, .draw = draw},
        {.temperature = 0.8f, .top_p = 0.9f, .min_p = 0.01f, .seed = 1234, .draw = draw}};
    cache::KvPool p1 = pool(), p2 = pool();
    const auto first = run_forward_step_sampled(*model_, p1, quant::Rotation::kNone, steps, requests);
    const auto second = run_forward_step_sampled(*model_, p2, quant::Rotation::kNone, steps, requests);
    std::vector<backend::SampledToken> direct(2);
    model_->backend().sample({logits.data(), 2, vocab()}, requests, direct);
    const std::vector<backend::SampledToken> host = sample_host_logits(logits, vocab(), requests);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(first[i].id, second[i].id) << "draw " << draw << " sequence " << i;
      EXPECT_EQ(first[i].logprob, second[i].logprob);
      EXPECT_EQ(first[i].id, direct[i].id) << "draw " << draw << " sequence " << i;
      EXPECT_EQ(first[i].id, host[i].id) << "sample_host_logits, draw " << draw << " sequence " << i;
      EXPECT_EQ(first[i].logprob, host[i].logprob);
      const std::span<const float> row = std::span(logits).subspan(i * vocab(), vocab());
      const sampling::SamplingParams params{.temperature = requests[i].temperature,
                                            .top_k = requests[i].top_k,
                                            .top_p = requests[i].top_p,
                                            .min_p = requests[i].min_p};
      EXPECT_GT(sampling::filtered_distribution(row, params)[first[i].id], 0.0) << "draw " << draw;
      if (first[i].id != argmax(row)) ++distinct_draws;
    }
  }
  // 16 draws at temperature ~1 over stories260k's spread distributions: some are not the argmax.
  EXPECT_GT(distinct_draws, 0) << "every seeded draw was the argmax: the draws are not random";
}

TEST_F(RuntimeSampling, DrawsStayInTheKeptSetAndFollowItsDistribution) {
  const std::vector<int32_t> a = in_vocab(kPromptA, vocab());
  const std::vector<backend::SequenceStep> steps{{.first_position = 0, .tokens = a, .pages = kPagesA}};
  cache::KvPool host_pool = pool();
  std::vector<float> logits = run_forward_step(*model_, host_pool, quant::Rotation::kNone, steps);
  const std::span<const float> row(logits);
  const sampling::SamplingParams cases[] = {{.temperature = 1.5f, .top_k = 4},
                                            {.temperature = 1.0f, .top_p = 0.6f},
                                            {.temperature = 2.0f, .min_p = 0.2f}};
  constexpr int kDraws = 4000;
  for (const sampling::SamplingParams& params : cases) {
    const std::vector<double> dist = sampling::filtered_distribution(row, params);
    const int kept = static_cast<int>(std::count_if(dist.begin(), dist.end(), [](double p) { return p > 0; }));
    ASSERT_GE(kept, 2) << "the case should keep several tokens to test a distribution";
    std::vector<backend::SampleRequest> requests(kDraws);
    for (int d = 0; d < kDraws; ++d) {
      requests[d] = {.temperature = params.temperature,
                     .top_k = params.top_k,
                     .top_p = params.top_p,
                     .min_p = params.min_p,
                     .seed = 99,
                     .draw = static_cast<uint64_t>(d)};
    }
    // One logits row repeated: [kDraws, vocab] in host memory (the CPU backend's memory).
    std::vector<float> rows;
    for (int d = 0; d < kDraws; ++d) rows.insert(rows.end(), row.begin(), row.end());
    std::vector<backend::SampledToken> out(kDraws);
    model_->backend().sample({rows.data(), kDraws, vocab()}, requests, out);
    std::map<int32_t, int> counts;
    for (const backend::SampledToken& t : out) {
      ASSERT_GE(t.id, 0);
      ASSERT_LT(t.id, vocab());
      ASSERT_GT(dist[t.id], 0.0) << "token " << t.id << " is outside the kept set (top_k " << params.top_k
                                 << ", top_p " << params.top_p << ", min_p " << params.min_p << ")";
      ++counts[t.id];
    }
    for (size_t id = 0; id < dist.size(); ++id) {
      if (dist[id] <= 0) continue;
      const double expected = dist[id] * kDraws;
      const double sigma = std::sqrt(kDraws * dist[id] * (1 - dist[id]));
      EXPECT_NEAR(counts[static_cast<int32_t>(id)], expected, 5 * sigma + 1)
          << "token " << id << " p " << dist[id] << " (top_k " << params.top_k << ", top_p " << params.top_p
          << ", min_p " << params.min_p << ")";
    }
  }
}

TEST_F(RuntimeSampling, MisuseIsAnErrorNamingTheProblem) {
  const std::vector<int32_t> a = in_vocab(kPromptA, vocab());
  cache::KvPool p = pool();
  const std::vector<backend::SampleRequest> one(1), two(2);
  const std::vector<backend::SequenceStep> all_logits{
      {.first_position = 0, .tokens = a, .pages = kPagesA, .all_logits = true}};
  try {
    run_forward_step_sampled(*model_, p, quant::Rotation::kNone, all_logits, one);
    ADD_FAILURE() << "all_logits was accepted by the sampled step";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all its logits"), std::string::npos) << e.what();
  }
  const std::vector<backend::SequenceStep> steps{{.first_position = 0, .tokens = a, .pages = kPagesA}};
  try {
    run_forward_step_sampled(*model_, p, quant::Rotation::kNone, steps, two);
    ADD_FAILURE() << "two requests for one sequence were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 sample requests for 1 sequences"), std::string::npos) << e.what();
  }
  // An out-of-range request is rejected by the backend (sampling::validate's rules).
  const std::vector<backend::SampleRequest> bad{{.temperature = 1.0f, .top_p = 0.0f}};
  EXPECT_THROW(run_forward_step_sampled(*model_, p, quant::Rotation::kNone, steps, bad), Error);
  const std::vector<float> three(3, 0.0f);
  EXPECT_THROW(sample_host_logits(three, 2, one), Error);  // 3 logits are not 1 row of 2
}

}  // namespace
}  // namespace nibble::runtime
