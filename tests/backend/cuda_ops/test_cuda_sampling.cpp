// Sampling on the GPU (backend/cuda/sampling.h) through the seam's sample(), against the CPU's
// sampler (sampling/sampler.h):
//   - greedy equals sampling::greedy (largest logit, lowest id on ties) on random rows, rows with
//     planted ties and a Llama-3-sized vocabulary; the logprob equals log softmax within 1e-5;
//   - top-k / top-p / min-p (and their mix) only ever return tokens of the CPU's kept set
//     (sampling::filtered_distribution > 0), and 40000 seeded draws of one row follow that
//     distribution: Pearson's chi-square over the kept tokens (bins with expected count < 5
//     pooled) stays below the chi-square quantile at p = 1e-6 (Wilson-Hilferty, z = 4.75), so a
//     correct sampler fails with probability 1e-6 per case, while a token kept with the wrong
//     weight by 10% of a 5% token (~20 sigma at this count) fails it;
//   - seeded sampling is reproducible: the same requests twice give the same ids; the stream is
//     not the CPU Sampler's mt19937 stream (it is Philox, sampling/philox.h).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "backend/backend.h"
#include "backend/cuda_common/cuda_test_util.h"
#include "common/error.h"
#include "sampling/sampler.h"

namespace nibble::backend {
namespace {

class CudaSampling : public ::testing::Test {
 protected:
  void SetUp() override {
    NIBBLE_SKIP_WITHOUT_GPU();
    gpu_ = make_backend({.device = "cuda", .weights = WeightPrecision::kF32});
    cpu_ = make_backend({.device = "cpu", .num_threads = 1});
  }
  // logits [rows, vocab] on the GPU; returns the sampled tokens.
  std::vector<SampledToken> sample_gpu(const std::vector<float>& logits, int64_t vocab,
                                       const std::vector<SampleRequest>& requests) {
    const int64_t rows = static_cast<int64_t>(logits.size()) / vocab;
    auto buffer = gpu_->allocate(static_cast<int64_t>(logits.size() * sizeof(float)));
    gpu_->copy_from_host(buffer->data(), logits.data(), buffer->bytes());
    std::vector<SampledToken> out(static_cast<size_t>(rows));
    gpu_->sample({buffer->floats(), rows, vocab}, requests, out);
    return out;
  }
  std::unique_ptr<Backend> gpu_, cpu_;
};

std::vector<float> random_logits(int64_t rows, int64_t vocab, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(static_cast<size_t>(rows * vocab));
  for (float& x : out) x = normal(rng);
  return out;
}

double log_softmax(std::span<const float> row, int32_t id) {
  double mx = -INFINITY, total = 0;
  for (float x : row) mx = std::max(mx, static_cast<double>(x));
  for (float x : row) total += std::exp(x - mx);
  return row[id] - mx - std::log(total);
}

TEST_F(CudaSampling, GreedyEqualsCpuArgmaxIncludingTies) {
  for (const int64_t vocab : {1, 7, 1000, 4099, 128256}) {
    const int64_t rows = 24;
    std::vector<float> logits = random_logits(rows, vocab, 3.0f, static_cast<uint32_t>(vocab));
    std::mt19937 rng(1);
    for (int64_t r = 0; r < rows; r += 2) {  // every other row: the maximum planted at 2..4 ids
      float* row = logits.data() + r * vocab;
      const float top = *std::max_element(row, row + vocab) + 1.0f;
      const int copies = 2 + static_cast<int>(r % 3);
      for (int c = 0; c < copies; ++c) row[std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng)] = top;
    }
    for (int64_t r = 0; r < rows; r += 5) {  // a row of all-equal logits: id 0
      std::fill(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab, -2.5f);
    }
    std::vector<SampleRequest> requests(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) requests[r] = {.temperature = r % 3 == 1 ? 0.0f : 0.8f, .top_k = r % 3 == 1 ? 0 : 1};
    const std::vector<SampledToken> got = sample_gpu(logits, vocab, requests);
    std::vector<SampledToken> cpu(static_cast<size_t>(rows));
    cpu_->sample({logits.data(), rows, vocab}, requests, cpu);
    for (int64_t r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + r * vocab, static_cast<size_t>(vocab));
      const int32_t want = sampling::greedy(row);
      EXPECT_EQ(got[r].id, want) << "vocab " << vocab << " row " << r;
      EXPECT_EQ(cpu[r].id, want);
      EXPECT_NEAR(got[r].logprob, log_softmax(row, want), 1e-5) << "vocab " << vocab << " row " << r;
    }
  }
}

// Wilson-Hilferty: the chi-square quantile with `df` degrees of freedom at the normal quantile z.
double chi_square_quantile(double df, double z) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

struct FilterCase {
  const char* name;
  SampleRequest request;
};

TEST_F(CudaSampling, FilteredDrawsStayInTheKeptSetAndFollowItsDistribution) {
  constexpr int64_t kVocab = 64, kDraws = 40000;
  constexpr double kZ = 4.75;  // one-sided normal quantile of p = 1e-6
  const std::vector<float> row = random_logits(1, kVocab, 1.5f, 99);
  const FilterCase cases[] = {
      {"temperature 0.9", {.temperature = 0.9f}},
      {"top_k 5", {.temperature = 1.0f, .top_k = 5}},
      {"top_p 0.8", {.temperature = 1.0f, .top_p = 0.8f}},
      {"min_p 0.15", {.temperature = 1.0f, .min_p = 0.15f}},
      {"top_k 12 top_p 0.9 min_p 0.05 t 0.7", {.temperature = 0.7f, .top_k = 12, .top_p = 0.9f, .min_p = 0.05f}},
      {"top_p 0.5 t 2", {.temperature = 2.0f, .top_p = 0.5f}},
  };
  for (const FilterCase& fc : cases) {
    const SampleRequest& q = fc.request;
    const std::vector<double> want = sampling::filtered_distribution(
        row, {.temperature = q.temperature, .top_k = q.top_k, .top_p = q.top_p, .min_p = q.min_p});
    std::vector<float> logits;
    std::vector<SampleRequest> requests;
    for (int64_t d = 0; d < kDraws; ++d) {
      logits.insert(logits.end(), row.begin(), row.end());
      SampleRequest r = q;
      r.seed = 1234 + static_cast<uint64_t>(d % 7);  // several streams, several draws of each
      r.draw = static_cast<uint64_t>(d / 7);
      requests.push_back(r);
    }
    const std::vector<SampledToken> got = sample_gpu(logits, kVocab, requests);
    std::vector<int64_t> counts(kVocab, 0);
    for (const SampledToken& t : got) {
      ASSERT_TRUE(t.id >= 0 && t.id < kVocab) << fc.name;
      ASSERT_GT(want[t.id], 0.0) << fc.name << ": drew token " << t.id << ", outside the kept set";
      ++counts[t.id];
    }
    double chi2 = 0, pooled_expected = 0, pooled_observed = 0;
    int bins = 0;
    for (int64_t i = 0; i < kVocab; ++i) {
      if (want[i] <= 0) continue;
      const double expected = want[i] * kDraws;
      if (expected < 5) {
        pooled_expected += expected;
        pooled_observed += static_cast<double>(counts[i]);
        continue;
      }
      chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
      ++bins;
    }
    if (pooled_expected > 0) {
      chi2 += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / std::max(pooled_expected, 1.0);
      ++bins;
    }
    if (bins <= 1) {  // one kept token: every draw is it
      EXPECT_EQ(counts[std::max_element(want.begin(), want.end()) - want.begin()], kDraws) << fc.name;
      continue;
    }
    const double limit = chi_square_quantile(bins - 1, kZ);
    std::printf("measured sampling %s: %d bins, chi-square %.1f (limit %.1f)\n", fc.name, bins, chi2, limit);
    EXPECT_LT(chi2, limit) << fc.name;
    // Reproducible: the same requests again give the same ids.
    const std::vector<SampledToken> again = sample_gpu(logits, kVocab, requests);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i].id, again[i].id) << fc.name << " draw " << i;
  }
}

TEST_F(CudaSampling, LargeVocabularyTopKAndTopPKeepTheRightTokens) {
  constexpr int64_t kVocab = 128256;
  const std::vector<float> row = random_logits(1, kVocab, 4.0f, 5);
  for (const SampleRequest q : {SampleRequest{.temperature = 1.0f, .top_k = 40},
                                SampleRequest{.temperature = 0.8f, .top_p = 0.9f},
                                SampleRequest{.temperature = 1.0f, .min_p = 0.02f}}) {
    const std::vector<double> want = sampling::filtered_distribution(
        row, {.temperature = q.temperature, .top_k = q.top_k, .top_p = q.top_p, .min_p = q.min_p});
    std::vector<float> logits;
    std::vector<SampleRequest> requests;
    for (int d = 0; d < 256; ++d) {
      logits.insert(logits.end(), row.begin(), row.end());
      SampleRequest r = q;
      r.seed = static_cast<uint64_t>(d);
      requests.push_back(r);
    }
    const std::vector<SampledToken> got = sample_gpu(logits, kVocab, requests);
    std::set<int32_t> distinct;
    for (const SampledToken& t : got) {
      ASSERT_GT(want[t.id], 0.0) << "token " << t.id << " is outside the kept set (top_k " << q.top_k << " top_p "
                                 << q.top_p << " min_p " << q.min_p << ")";
      distinct.insert(t.id);
    }
    EXPECT_GT(distinct.size(), 1u) << "different seeds should not all draw one token";
  }
}

TEST_F(CudaSampling, RejectsBadRequests) {
  const std::vector<float> row = random_logits(1, 16, 1.0f, 3);
  EXPECT_THROW(sample_gpu(row, 16, {{.temperature = -1.0f}}), nibble::Error);
  EXPECT_THROW(sample_gpu(row, 16, {{.temperature = 1.0f, .top_p = 0.0f}}), nibble::Error);
  EXPECT_THROW(sample_gpu(row, 16, {{}, {}}), nibble::Error);  // two requests for one row
}

}  // namespace
}  // namespace nibble::backend
