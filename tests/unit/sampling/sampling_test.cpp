// Sampling: greedy tie-breaking, the filters against brute-force definitions, frequencies of many
// seeded draws against the textbook softmax (chi-square), reproducibility, parameter validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "common/error.h"
#include "sampling/sampler.h"

namespace nibble::sampling {
namespace {

// Textbook softmax(logits / t), in long double.
std::vector<double> softmax(const std::vector<float>& logits, double t) {
  long double m = *std::max_element(logits.begin(), logits.end());
  long double total = 0;
  std::vector<long double> e;
  for (float l : logits) e.push_back(std::exp((l - m) / t)), total += e.back();
  std::vector<double> out;
  for (long double x : e) out.push_back(static_cast<double>(x / total));
  return out;
}

std::vector<float> random_logits(uint64_t seed, int n) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> l(n);
  for (float& x : l) x = normal(rng);
  return l;
}

TEST(Greedy, LargestLogitLowestIdOnTies) {
  EXPECT_EQ(greedy(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f}), 1);
  EXPECT_EQ(greedy(std::vector<float>{3.0f, 3.0f, 3.0f}), 0);
  EXPECT_EQ(greedy(std::vector<float>{-5.0f, -4.0f}), 1);
  EXPECT_THROW(greedy(std::vector<float>{}), Error);
}

TEST(Sampler, TemperatureZeroAndTopKOneAreGreedy) {
  for (uint64_t s = 0; s < 50; ++s) {
    const std::vector<float> logits = random_logits(s, 100);
    Sampler zero({.temperature = 0.0f, .seed = s});
    Sampler top1({.temperature = 1.5f, .top_k = 1, .seed = s});
    EXPECT_EQ(zero.sample(logits), greedy(logits));
    EXPECT_EQ(top1.sample(logits), greedy(logits));
  }
}

TEST(FilteredDistribution, TopKKeepsTheKLargest) {
  const std::vector<float> logits = random_logits(7, 50);
  const std::vector<double> full = softmax(logits, 0.8);
  const std::vector<double> d = filtered_distribution(logits, {.temperature = 0.8f, .top_k = 5});
  std::vector<float> sorted = logits;
  std::sort(sorted.rbegin(), sorted.rend());
  double kept_mass = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] >= sorted[4]) kept_mass += full[i];
  }
  int kept = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] >= sorted[4]) {
      ++kept;
      EXPECT_NEAR(d[i], full[i] / kept_mass, 1e-7);  // temperature 0.8f vs 0.8
    } else {
      EXPECT_EQ(d[i], 0.0);
    }
  }
  EXPECT_EQ(kept, 5);
}

TEST(FilteredDistribution, TopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 from log-probabilities.
  const std::vector<float> logits = {std::log(0.125f), std::log(0.5f), std::log(0.0625f), std::log(0.25f),
                                     std::log(0.0625f)};
  auto kept = [&](float top_p) {
    const std::vector<double> d = filtered_distribution(logits, {.temperature = 1.0f, .top_p = top_p});
    std::vector<int> ids;
    for (int i = 0; i < 5; ++i) if (d[i] > 0) ids.push_back(i);
    return ids;
  };
  EXPECT_EQ(kept(0.4f), (std::vector<int>{1}));
  EXPECT_EQ(kept(0.5f), (std::vector<int>{1}));
  EXPECT_EQ(kept(0.6f), (std::vector<int>{1, 3}));
  EXPECT_EQ(kept(0.8f), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(kept(1.0f), (std::vector<int>{0, 1, 2, 3, 4}));
  const std::vector<double> d = filtered_distribution(logits, {.temperature = 1.0f, .top_p = 0.8f});
  EXPECT_NEAR(d[1], 0.5 / 0.875, 1e-6);
  EXPECT_NEAR(d[3], 0.25 / 0.875, 1e-6);
  EXPECT_NEAR(d[0], 0.125 / 0.875, 1e-6);
}

TEST(FilteredDistribution, MinPCutsBelowAFractionOfTheTop) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  // min_p 0.2: threshold 0.1 keeps 0.5, 0.3, 0.15; min_p 0.5: threshold 0.25 keeps 0.5, 0.3.
  std::vector<double> d = filtered_distribution(logits, {.temperature = 1.0f, .min_p = 0.2f});
  EXPECT_NEAR(d[0], 0.5 / 0.95, 1e-6);
  EXPECT_NEAR(d[2], 0.15 / 0.95, 1e-6);
  EXPECT_EQ(d[3], 0.0);
  d = filtered_distribution(logits, {.temperature = 1.0f, .min_p = 0.5f});
  EXPECT_NEAR(d[1], 0.3 / 0.8, 1e-6);
  EXPECT_EQ(d[2], 0.0);
}

// Pearson chi-square of `draws` samples against `expected` probabilities.
double chi_square(Sampler& sampler, const std::vector<float>& logits, const std::vector<double>& expected, int draws) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) ++counts[sampler.sample(logits)];
  double chi = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double e = expected[i] * draws;
    const double o = counts.count(static_cast<int32_t>(i)) ? counts[static_cast<int32_t>(i)] : 0;
    if (expected[i] == 0) {
      EXPECT_EQ(o, 0) << "token " << i << " was filtered out but drawn";
      continue;
    }
    chi += (o - e) * (o - e) / e;
  }
  return chi;
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
  Sampler sampler({.temperature = 0.7f, .seed = 1234});
  // 4 degrees of freedom: P(chi² > 18.47) = 0.001.
  EXPECT_LT(chi_square(sampler, logits, softmax(logits, 0.7), 100000), 18.47);
}

TEST(Sampler, FrequenciesFollowTheFilteredDistribution) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f};
  // top-k 4 of softmax(l / 1.3): keeps ids 1, 4, 0, 2 (brute force), renormalized.
  std::vector<double> expected = softmax(logits, 1.3);
  double mass = expected[0] + expected[1] + expected[2] + expected[4];
  for (int i : {0, 1, 2, 4}) expected[i] /= mass;
  expected[3] = expected[5] = 0;
  Sampler sampler({.temperature = 1.3f, .top_k = 4, .seed = 99});
  EXPECT_LT(chi_square(sampler, logits, expected, 100000), 16.27);  // 3 dof, p = 0.001
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const std::vector<float> logits = random_logits(3, 64);
  auto run = [&](uint64_t seed) {
    Sampler s({.temperature = 1.0f, .top_p = 0.95f, .seed = seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(s.sample(logits));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}), Error);
  EXPECT_THROW(Sampler({.temperature = NAN}), Error);
  EXPECT_THROW(Sampler({.top_k = -1}), Error);
  EXPECT_THROW(Sampler({.top_p = 0.0f}), Error);
  EXPECT_THROW(Sampler({.top_p = 1.5f}), Error);
  EXPECT_THROW(Sampler({.min_p = 2.0f}), Error);
}

}  // namespace
}  // namespace nibble::sampling
