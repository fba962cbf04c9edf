#pragma once
// Per-position comparison of a configuration's logits with the reference's, in double precision.
#include <cstdint>
#include <span>
#include <vector>

namespace nibble::eval {

// log_softmax of one row of logits ([vocab] -> [vocab]), max-shifted.
std::vector<double> log_softmax(std::span<const float> logits);

// First index of the largest logit.
int64_t argmax(std::span<const float> logits);

struct PositionMetrics {
  double logprob = 0;      // log p_config(next token)
  double ref_logprob = 0;  // log p_reference(next token)
  double kl = 0;           // KL(reference || config) = sum_v p_ref(v) (log p_ref(v) - log p_config(v)), nats
  bool top1_agree = false; // argmax of both rows is the same token
};

// ref_log_probs: the reference row's log_softmax ([vocab]); logits: the configuration's row
// ([vocab]). Identical rows give kl == 0 exactly (every term is p * 0).
PositionMetrics compare_position(std::span<const double> ref_log_probs, int64_t ref_top1,
                                 std::span<const float> logits, int32_t next_token);

}  // namespace nibble::eval
