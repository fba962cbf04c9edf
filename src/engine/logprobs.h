#pragma once
// Log-probabilities of tokens under the model's raw distribution: log_softmax of the logits, before
// temperature or any filtering (what OpenAI's logprobs report and what prompt scoring needs).
#include <cstdint>
#include <span>
#include <vector>

namespace nibble::engine {

struct TopLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;          // log p(token)
  std::vector<TopLogprob> top;   // the top_n most probable tokens, most probable first, lower id on ties
};

// logits [vocab]; 0 <= token < vocab; top_n >= 0 (clamped to vocab). Computed in double.
// Throws nibble::Error on an empty vector or a token out of range.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int64_t top_n);

}  // namespace nibble::engine
