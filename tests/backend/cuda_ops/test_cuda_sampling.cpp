// Sampling on the GPU (backend/cuda/sampling.h) through the seam's sample(), against the CPU's
// sampler (sampling/sampler.h):
//   - greedy equals sampling::greedy (largest logit, lowest id on ties) on random rows, rows with
//     planted ties and a Llama-3-sized vocabulary; the logprob equals log softmax within 1e-5; and
//     at the edges of the 4096-logit slices the first kernel reduces (ties across a slice boundary,
//     whole slices of -inf, a short last slice);
//   - top-k / top-p / min-p (and their mix) only ever return tokens of the CPU's kept set
//     (sampling::filtered_distribution > 0), and 40000 seeded draws of one row follow that
//     distribution: Pearson's chi-square over the kept tokens (bins with expected count < 5
//     pooled) stays below the chi-square quantile at p = 1e-6 (Wilson-Hilferty, z = 4.75), so a
//     correct sampler fails with probability 1e-6 per case, while a token kept with the wrong
//     weight by 10% of a 5% token (~20 sigma at this count) fails it;
//   - seeded sampling is reproducible: the same requests twice give the same ids; the stream is
//     not the CPU Sampler's mt19937 stream (it is Philox, sampling/philox.h);
//   - top_logprobs (N = 1..20): the same ids in the same order as the host computation
//     (engine/logprobs.cpp: partial_sort by logit, lower id first on equal logits) on random rows,
//     planted ties at and across the N-th place, ±0 and -Inf logits and a Llama-3-sized vocabulary;
//     logprobs (float32 on the GPU, float64 on the host) within 1e-5·max(1, |logprob|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/cuda_step.h"
#include "backend/step_plan.h"
#include "backend/cpu_sampling/fed_steps.h"
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

// The row maximum and normalizer come from 4096-logit slices (sampling.cu): ties across slice
// boundaries resolve to the lowest id, slices of -inf add nothing, a last slice of 1..3 logits counts.
TEST_F(CudaSampling, GreedyAcrossSliceBoundaries) {
  for (const int64_t vocab : {4096, 4097, 8195, 128256}) {
    const int64_t rows = 6;
    std::vector<float> logits = random_logits(rows, vocab, 2.0f, static_cast<uint32_t>(vocab) + 5);
    auto row = [&](int64_t r) { return logits.data() + r * vocab; };
    const auto top_of = [&](int64_t r) { return *std::max_element(row(r), row(r) + vocab) + 0.5f; };
    float t = top_of(0);  // row 0: a tie at the last id of slice 0 and the first of slice 1
    row(0)[std::min<int64_t>(4096, vocab - 1)] = t;
    row(0)[4095] = t;
    t = top_of(1);  // row 1: the maximum in the last logit of the row
    row(1)[vocab - 1] = t;
    std::fill(row(2), row(2) + std::min<int64_t>(vocab - 1, 8192), -INFINITY);  // row 2: slices of -inf first
    std::fill(row(3), row(3) + vocab, -INFINITY);  // row 3: one finite logit, late
    row(3)[vocab / 2 + 1] = -7.0f;
    t = top_of(4);  // row 4: the same maximum in every slice (the first slice's wins)
    for (int64_t i = 17; i < vocab; i += 4096) row(4)[i] = t;
    std::fill(row(5), row(5) + vocab, 0.25f);  // row 5: all equal
    std::vector<SampleRequest> requests(static_cast<size_t>(rows), SampleRequest{.temperature = 0.0f});
    requests[1].top_logprobs = 3;
    const std::vector<SampledToken> got = sample_gpu(logits, vocab, requests);
    for (int64_t r = 0; r < rows; ++r) {
      const std::span<const float> span(row(r), static_cast<size_t>(vocab));
      const int32_t want = sampling::greedy(span);
      EXPECT_EQ(got[r].id, want) << "vocab " << vocab << " row " << r;
      EXPECT_NEAR(got[r].logprob, log_softmax(span, want), 1e-5) << "vocab " << vocab << " row " << r;
    }
    EXPECT_EQ(got[1].num_top, 3);
    EXPECT_EQ(got[1].top[0].id, vocab - 1);
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
  EXPECT_THROW(sample_gpu(row, 16, {{.top_logprobs = kMaxSampleTopLogprobs + 1}}), nibble::Error);
  EXPECT_THROW(sample_gpu(row, 16, {{.top_logprobs = -1}}), nibble::Error);
}

// The host computation of top_logprobs, as engine/logprobs.cpp does it: the min(n, vocab) largest
// logits, larger first, lower id first on equal logits; log softmax in float64.
std::vector<TopLogprob> host_top_logprobs(std::span<const float> row, int32_t n) {
  std::vector<int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t m = std::min<size_t>(static_cast<size_t>(n), row.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(m), ids.end(),
                    [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
  std::vector<TopLogprob> out;
  for (size_t j = 0; j < m; ++j) out.push_back({.id = ids[j], .logprob = static_cast<float>(log_softmax(row, ids[j]))});
  return out;
}

// Rows that stress the order: random logits, with planted ties (the 3rd-largest value copied to
// several ids; the N-th value copied past the N-th place, so only the lowest ids of the tie are
// kept), all-equal rows, ±0 rows and -Inf entries.
std::vector<float> top_logprob_rows(int64_t rows, int64_t vocab, uint32_t seed) {
  std::vector<float> logits = random_logits(rows, vocab, 3.0f, seed);
  std::mt19937 rng(seed + 1);
  std::uniform_int_distribution<int64_t> any(0, vocab - 1);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits.data() + r * vocab;
    if (r % 4 == 1 && vocab > 3) {
      std::vector<float> sorted(row, row + vocab);
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      const float tie = sorted[std::min<int64_t>(vocab - 1, 2 + r % 18)];
      for (int c = 0; c < 6; ++c) row[any(rng)] = tie;
    }
    if (r % 4 == 2 && vocab > kMaxSampleTopLogprobs) row[any(rng)] = -INFINITY;  // never among the top N
    if (r % 7 == 3) std::fill(row, row + vocab, 1.25f);
    if (r % 7 == 5) {
      for (int64_t i = 0; i < vocab; ++i) row[i] = (i % 3 == 0) ? -0.0f : 0.0f;
      row[any(rng)] = -1.0f;
    }
  }
  return logits;
}

void expect_top_logprobs_match(std::span<const float> row, int32_t n, const SampledToken& got, const std::string& where,
                               double tolerance) {
  const std::vector<TopLogprob> want = host_top_logprobs(row, n);
  ASSERT_EQ(got.num_top, static_cast<int32_t>(want.size())) << where;
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_EQ(got.top[j].id, want[j].id) << where << " place " << j;
    EXPECT_NEAR(got.top[j].logprob, want[j].logprob, tolerance * std::max(1.0, std::fabs(double{want[j].logprob})))
        << where << " place " << j;
  }
}

TEST_F(CudaSampling, TopLogprobsEqualTheHostComputation) {
  double worst = 0.0;
  for (const int64_t vocab : {1, 7, 1000, 4099, 128256}) {
    const int64_t rows = 28;
    const std::vector<float> logits = top_logprob_rows(rows, vocab, static_cast<uint32_t>(vocab) + 11);
    std::vector<SampleRequest> requests(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      requests[r] = {.temperature = r % 2 ? 0.0f : 0.9f, .top_p = r % 3 == 0 ? 0.9f : 1.0f,
                     .seed = static_cast<uint64_t>(r),
                     .top_logprobs = static_cast<int32_t>(1 + r % kMaxSampleTopLogprobs)};
    }
    requests[0].top_logprobs = kMaxSampleTopLogprobs;
    const std::vector<SampledToken> got = sample_gpu(logits, vocab, requests);
    std::vector<SampleRequest> plain = requests;
    for (SampleRequest& q : plain) q.top_logprobs = 0;
    const std::vector<SampledToken> without = sample_gpu(logits, vocab, plain);
    for (int64_t r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + r * vocab, static_cast<size_t>(vocab));
      const std::string where = "vocab " + std::to_string(vocab) + " row " + std::to_string(r);
      expect_top_logprobs_match(row, requests[r].top_logprobs, got[r], where, 1e-5);
      if (testing::Test::HasFatalFailure()) return;
      for (int32_t j = 0; j < got[r].num_top; ++j) {
        worst = std::max(worst, std::fabs(double{got[r].top[j].logprob} - log_softmax(row, got[r].top[j].id)));
      }
      // Asking for alternatives changes nothing else.
      EXPECT_EQ(got[r].id, without[r].id) << where;
      EXPECT_EQ(got[r].logprob, without[r].logprob) << where;
      EXPECT_EQ(without[r].num_top, 0) << where;
    }
  }
  std::printf("measured: largest |GPU float32 - host float64| top logprob %.3g\n", worst);
}

// The CPU backend's sample() fills top_logprobs with the host computation (float64); runs without a GPU.
TEST(CpuSampling, TopLogprobsEqualTheHostComputation) {
  const std::unique_ptr<Backend> cpu = make_backend({.device = "cpu", .num_threads = 1});
  for (const int64_t vocab : {1, 7, 1000}) {
    const int64_t rows = 28;
    std::vector<float> logits = top_logprob_rows(rows, vocab, static_cast<uint32_t>(vocab) + 3);
    std::vector<SampleRequest> requests(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      requests[r] = {.temperature = r % 2 ? 0.0f : 0.9f,
                     .top_logprobs = static_cast<int32_t>(r % (kMaxSampleTopLogprobs + 1))};
    }
    std::vector<SampledToken> got(static_cast<size_t>(rows));
    cpu->sample({logits.data(), rows, vocab}, requests, got);
    for (int64_t r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + r * vocab, static_cast<size_t>(vocab));
      expect_top_logprobs_match(row, requests[r].top_logprobs, got[r],
                                "vocab " + std::to_string(vocab) + " row " + std::to_string(r), 1e-7);
    }
  }
  std::vector<float> row(4, 0.0f);
  std::vector<SampledToken> out(1);
  EXPECT_THROW(cpu->sample({row.data(), 1, 4}, std::vector<SampleRequest>{{.top_logprobs = 21}}, out), nibble::Error);
}

using test::fed_plan;
using test::peaked_rows;

// The CUDA backend resolves fed tokens on the device, stream-ordered after the launched draws: the
// plan is made before the draws are waited for, and a second launch replaces the first.
TEST_F(CudaSampling, FedTokensReadTheDrawsOnTheDevice) {
  auto read_token_ids = [&](const PlannedStep& step) {
    const auto& cuda_step = dynamic_cast<const CudaPlannedStep&>(step);
    std::vector<int32_t> ids(3);
    NIBBLE_CUDA_CHECK(cudaDeviceSynchronize());
    NIBBLE_CUDA_CHECK(cudaMemcpy(ids.data(), cuda_step.token_ids(), sizeof(int32_t) * 3, cudaMemcpyDeviceToHost));
    return ids;
  };
  EXPECT_THROW(gpu_->plan(fed_plan(0, 1)), nibble::Error);  // nothing launched yet
  for (const int64_t vocab : {16, 5000}) {  // one slice of the row statistics, and several
    const std::vector<float> first = peaked_rows({7, 3}, vocab), second = peaked_rows({9, 4, 12}, vocab);
    auto buffer = gpu_->allocate(static_cast<int64_t>(second.size() * sizeof(float)));
    gpu_->copy_from_host(buffer->data(), first.data(), static_cast<int64_t>(first.size() * sizeof(float)));
    gpu_->sample_launch({buffer->floats(), 2, vocab}, std::vector<SampleRequest>(2));
    const std::unique_ptr<PlannedStep> step = gpu_->plan(fed_plan(1, 0));  // before the wait
    EXPECT_EQ(read_token_ids(*step), (std::vector<int32_t>{3, 7, 11}));
    EXPECT_THROW(gpu_->plan(fed_plan(0, 2)), nibble::Error);
    std::vector<SampledToken> drawn(2);
    gpu_->sample_wait(drawn);
    EXPECT_EQ(drawn[0].id, 7);
    EXPECT_EQ(drawn[1].id, 3);

    gpu_->copy_from_host(buffer->data(), second.data(), buffer->bytes());
    gpu_->sample_launch({buffer->floats(), 3, vocab}, std::vector<SampleRequest>(3));
    const std::unique_ptr<PlannedStep> again = gpu_->plan(fed_plan(2, 1));
    EXPECT_EQ(read_token_ids(*again), (std::vector<int32_t>{12, 4, 11}));
    std::vector<SampledToken> wrong(2), right(3);
    EXPECT_THROW(gpu_->sample_wait(wrong), nibble::Error);
    gpu_->sample_wait(right);
    EXPECT_EQ(right[2].id, 12);
  }
}

}  // namespace
}  // namespace nibble::backend
