#include "eval/token_metrics.h"

#include <cmath>

#include "common/error.h"

namespace nibble::eval {

std::vector<double> log_softmax(std::span<const float> logits) {
  NIBBLE_ASSERT(!logits.empty());
  double max_logit = logits[0];
  for (float x : logits) max_logit = std::max(max_logit, static_cast<double>(x));
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  const double log_z = max_logit + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t v = 0; v < logits.size(); ++v) out[v] = static_cast<double>(logits[v]) - log_z;
  return out;
}

int64_t argmax(std::span<const float> logits) {
  NIBBLE_ASSERT(!logits.empty());
  int64_t best = 0;
  for (size_t v = 1; v < logits.size(); ++v) {
    if (logits[v] > logits[static_cast<size_t>(best)]) best = static_cast<int64_t>(v);
  }
  return best;
}

PositionMetrics compare_position(std::span<const double> ref_log_probs, int64_t ref_top1,
                                 std::span<const float> logits, int32_t next_token) {
  NIBBLE_ASSERT(ref_log_probs.size() == logits.size());
  NIBBLE_ASSERT(next_token >= 0 && static_cast<size_t>(next_token) < logits.size());
  const std::vector<double> log_probs = log_softmax(logits);
  double kl = 0.0;
  for (size_t v = 0; v < log_probs.size(); ++v) {
    kl += std::exp(ref_log_probs[v]) * (ref_log_probs[v] - log_probs[v]);
  }
  return {.logprob = log_probs[static_cast<size_t>(next_token)],
          .ref_logprob = ref_log_probs[static_cast<size_t>(next_token)],
          .kl = std::max(kl, 0.0),  // rounding can leave -1e-17 for near-identical rows
          .top1_agree = argmax(logits) == ref_top1};
}

}  // namespace nibble::eval
