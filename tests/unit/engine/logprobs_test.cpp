// token_logprob against the textbook log-softmax in long double and a brute-force top-n.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/error.h"
#include "engine/logprobs.h"

namespace nibble::engine {
namespace {

TEST(Logprobs, UniformLogitsGiveMinusLogVocab) {
  const std::vector<float> logits(8, 3.0f);
  const TokenLogprob lp = token_logprob(logits, 5, 3);
  EXPECT_NEAR(lp.logprob, -std::log(8.0), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token, 0);  // ties: lower ids first
  EXPECT_EQ(lp.top[1].token, 1);
  EXPECT_EQ(lp.top[2].token, 2);
}

TEST(Logprobs, RandomLogitsMatchLongDoubleReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(300);
    for (float& x : logits) x = normal(rng);
    long double sum = 0;
    for (float x : logits) sum += std::exp(static_cast<long double>(x));
    const int32_t token = static_cast<int32_t>(rng() % logits.size());
    const TokenLogprob lp = token_logprob(logits, token, 5);
    EXPECT_NEAR(lp.logprob, static_cast<double>(logits[token] - std::log(sum)), 1e-5);
    std::vector<int32_t> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    ASSERT_EQ(lp.top.size(), 5u);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(lp.top[i].token, order[i]);
      EXPECT_NEAR(lp.top[i].logprob, static_cast<double>(logits[order[i]] - std::log(sum)), 1e-5);
    }
  }
}

TEST(Logprobs, RejectsBadInput) {
  const std::vector<float> logits = {1.0f, 2.0f};
  EXPECT_THROW(token_logprob(logits, 2, 0), Error);
  EXPECT_THROW(token_logprob(logits, -1, 0), Error);
  EXPECT_THROW(token_logprob({}, 0, 0), Error);
  EXPECT_EQ(token_logprob(logits, 0, 10).top.size(), 2u);  // clamped to the vocabulary
}

}  // namespace
}  // namespace nibble::engine
