#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"

namespace nibble::sampling {

namespace {

// Kept tokens, most probable first (lower id first on equal probability), with their probabilities.
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<double> probs;  // unnormalized after filtering
};

Candidates filter(std::span<const float> logits, const SamplingParams& p) {
  NIBBLE_CHECK(!logits.empty(), "cannot sample from an empty logit vector");
  NIBBLE_CHECK(p.temperature > 0.0f, "filtered_distribution needs a positive temperature");
  const size_t n = logits.size();
  double max_logit = -INFINITY;
  for (float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
  NIBBLE_CHECK(std::isfinite(max_logit), "logits contain no finite maximum (NaN or +inf)");
  std::vector<double> prob(n);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    prob[i] = std::exp((static_cast<double>(logits[i]) - max_logit) / p.temperature);
    total += prob[i];
  }
  for (double& x : prob) x /= total;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return prob[a] > prob[b]; });
  size_t keep = n;
  if (p.top_k > 0) keep = std::min(keep, static_cast<size_t>(p.top_k));
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    size_t i = 0;
    while (i < keep) {
      mass += prob[order[i]];
      ++i;
      if (mass >= p.top_p) break;
    }
    keep = i;
  }
  if (p.min_p > 0.0f) {
    const double threshold = p.min_p * prob[order[0]];
    size_t i = 1;
    while (i < keep && prob[order[i]] >= threshold) ++i;
    keep = i;
  }
  Candidates c;
  for (size_t i = 0; i < keep; ++i) {
    c.ids.push_back(order[i]);
    c.probs.push_back(prob[order[i]]);
  }
  return c;
}

}  // namespace

void validate(const SamplingParams& p) {
  NIBBLE_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.0f,
               "temperature must be a finite number >= 0, got {}", p.temperature);
  NIBBLE_CHECK(p.top_k >= 0, "top-k must be >= 0 (0 = off), got {}", p.top_k);
  NIBBLE_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, "top-p must be in (0, 1], got {}", p.top_p);
  NIBBLE_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "min-p must be in [0, 1], got {}", p.min_p);
}

int32_t greedy(std::span<const float> logits) {
  NIBBLE_CHECK(!logits.empty(), "cannot sample from an empty logit vector");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: the lowest id wins ties
  }
  return static_cast<int32_t>(best);
}

std::vector<double> filtered_distribution(std::span<const float> logits, const SamplingParams& params) {
  validate(params);
  const Candidates c = filter(logits, params);
  const double total = std::accumulate(c.probs.begin(), c.probs.end(), 0.0);
  std::vector<double> out(logits.size(), 0.0);
  for (size_t i = 0; i < c.ids.size(); ++i) out[c.ids[i]] = c.probs[i] / total;
  return out;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), engine_(params.seed) { validate(params); }

int32_t Sampler::sample(std::span<const float> logits) {
  if (params_.temperature == 0.0f || params_.top_k == 1) return greedy(logits);
  const Candidates c = filter(logits, params_);
  const double total = std::accumulate(c.probs.begin(), c.probs.end(), 0.0);
  const double u = static_cast<double>(engine_() >> 11) * 0x1.0p-53;  // [0, 1)
  const double target = u * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    cumulative += c.probs[i];
    if (target < cumulative) return c.ids[i];
  }
  return c.ids.back();  // rounding: u·total at the very top
}

}  // namespace nibble::sampling
