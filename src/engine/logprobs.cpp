#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"

namespace nibble::engine {

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int64_t top_n) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  NIBBLE_CHECK(vocab > 0, "logprobs of an empty logit vector");
  NIBBLE_CHECK(token >= 0 && token < vocab, "token {} is outside the vocabulary of {}", token, vocab);
  NIBBLE_CHECK(top_n >= 0, "top_n must be >= 0, got {}", top_n);
  double max_logit = logits[0];
  for (float x : logits) max_logit = std::max(max_logit, static_cast<double>(x));
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  const double log_norm = max_logit + std::log(sum);  // log sum exp
  TokenLogprob out{.token = token, .logprob = static_cast<float>(static_cast<double>(logits[token]) - log_norm)};
  const int64_t n = std::min(top_n, vocab);
  if (n > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (int64_t i = 0; i < n; ++i) {
      out.top.push_back({.token = ids[i], .logprob = static_cast<float>(static_cast<double>(logits[ids[i]]) - log_norm)});
    }
  }
  return out;
}

}  // namespace nibble::engine
