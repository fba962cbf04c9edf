// The seam's sample() on the CPU: the sampler's own rules (sampling/sampler.h) on host logits.
// Greedy is sampling::greedy; a random draw takes the filtered distribution (float64) and walks it
// in id order until the cumulative mass exceeds u = philox_uniform(seed, draw), as the CUDA
// sampler does (it need not pick the same token at a float rounding boundary).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "sampling/philox.h"
#include "sampling/sampler.h"

namespace nibble::backend {

namespace {

sampling::SamplingParams params_of(const SampleRequest& r) {
  return {.temperature = r.temperature, .top_k = r.top_k, .top_p = r.top_p, .min_p = r.min_p, .seed = r.seed};
}

float log_softmax_at(std::span<const float> row, int32_t id) {
  double max_logit = -INFINITY;
  for (float l : row) max_logit = std::max(max_logit, static_cast<double>(l));
  double total = 0.0;
  for (float l : row) total += std::exp(static_cast<double>(l) - max_logit);
  return static_cast<float>(static_cast<double>(row[id]) - max_logit - std::log(total));
}

// out.top = the min(n, vocab) largest logits, larger first, lower id first on equal logits (as
// engine/logprobs.cpp orders them), each with log_softmax_at's float64 value.
void fill_top_logprobs(std::span<const float> row, int32_t n, SampledToken& out) {
  double max_logit = -INFINITY;
  for (float l : row) max_logit = std::max(max_logit, static_cast<double>(l));
  double total = 0.0;
  for (float l : row) total += std::exp(static_cast<double>(l) - max_logit);
  const double log_total = std::log(total);
  const int32_t m = static_cast<int32_t>(std::min<size_t>(static_cast<size_t>(n), row.size()));
  std::vector<int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + m, ids.end(),
                    [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
  out.num_top = m;
  for (int32_t j = 0; j < m; ++j) {
    const double logit = row[ids[j]];
    out.top[j] = {.id = ids[j], .logprob = static_cast<float>(logit - max_logit - log_total)};
  }
}

}  // namespace

void CpuBackend::sample(Tensor logits, std::span<const SampleRequest> requests, std::span<SampledToken> out) {
  NIBBLE_CHECK(static_cast<int64_t>(requests.size()) == logits.rows && out.size() == requests.size(),
               "sample: {} logits rows, {} requests, {} outputs: expected equal counts", logits.rows, requests.size(),
               out.size());
  NIBBLE_CHECK(logits.cols > 0, "sample: logits rows are empty");
  for (int64_t r = 0; r < logits.rows; ++r) {
    const SampleRequest& req = requests[r];
    const sampling::SamplingParams params = params_of(req);
    sampling::validate(params);
    NIBBLE_CHECK(req.top_logprobs >= 0 && req.top_logprobs <= kMaxSampleTopLogprobs,
                 "sample: top_logprobs must be in [0, {}], got {} (row {})", kMaxSampleTopLogprobs,
                 req.top_logprobs, r);
    const std::span<const float> row(logits.row(r), static_cast<size_t>(logits.cols));
    int32_t id = 0;
    if (req.temperature == 0.0f || req.top_k == 1) {
      id = sampling::greedy(row);
    } else {
      const std::vector<double> dist = sampling::filtered_distribution(row, params);
      const double target = sampling::philox_uniform(req.seed, req.draw);
      double cumulative = 0.0;
      id = -1;
      int32_t last_kept = 0;
      for (size_t i = 0; i < dist.size(); ++i) {
        if (dist[i] <= 0.0) continue;
        last_kept = static_cast<int32_t>(i);
        cumulative += dist[i];
        if (target < cumulative) {
          id = static_cast<int32_t>(i);
          break;
        }
      }
      if (id < 0) id = last_kept;  // rounding: u at the very top of the mass
    }
    out[r] = {.id = id, .logprob = log_softmax_at(row, id)};
    if (req.top_logprobs > 0) fill_top_logprobs(row, req.top_logprobs, out[r]);
  }
}

}  // namespace nibble::backend
