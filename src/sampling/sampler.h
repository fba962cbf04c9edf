#pragma once
// Sampling a next token from a logit vector.
//
//   temperature == 0            greedy: the largest logit, the lowest id on ties (no randomness)
//   otherwise                   p = softmax(logits / temperature), then, in this order,
//     top_k  > 0                keep the k most probable tokens (ties at the boundary: lower ids first)
//     top_p  < 1                keep the smallest most-probable-first prefix whose mass reaches top_p
//     min_p  > 0                keep tokens with p >= min_p · p_max
//   and draw from what is kept, renormalized. top_k == 1 is greedy.
//
// Randomness: each Sampler owns a std::mt19937_64 seeded with params.seed; a draw takes one
// 53-bit uniform double u = (engine() >> 11) · 2^-53 and walks the kept tokens in order
// (most probable first) until the cumulative mass exceeds u · total. The same seed and the same
// logits give the same tokens on every platform.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace nibble::sampling {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off; in (0, 1]
  float min_p = 0.0f;        // 0 = off; in [0, 1]
  uint64_t seed = 0;
};

// Throws nibble::Error naming the parameter when one is out of range (negative or non-finite
// temperature, negative top_k, top_p outside (0, 1], min_p outside [0, 1]).
void validate(const SamplingParams& params);

// The largest logit, lowest id on ties. Throws on an empty vector.
int32_t greedy(std::span<const float> logits);

// The probabilities the sampler draws from (after temperature, top-k, top-p, min-p), [vocab] with
// zeros for dropped tokens, summing to 1. For tests and for reporting; temperature must be > 0.
std::vector<double> filtered_distribution(std::span<const float> logits, const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);  // validates
  int32_t sample(std::span<const float> logits);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 engine_;
};

}  // namespace nibble::sampling
