#pragma once
// Event timing of eagerly launched calls, shared by the CUDA benchmark programs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace nibble::bench {

// Median seconds per call of fn(n) over 11 samples, each of enough back-to-back calls to last at
// least min_sample_ms (at most max_reps calls), after `warmup` calls; launched from the host on the
// default stream. n counts every call from 0 (warm-up included): callers that rotate through copies
// of their buffers (to defeat L2) take n % copies.
template <typename Fn>
double median_seconds_per_call(Fn&& fn, double min_sample_ms, int max_reps, int warmup) {
  cudaEvent_t start, stop;
  NIBBLE_CUDA_CHECK(cudaEventCreate(&start));
  NIBBLE_CUDA_CHECK(cudaEventCreate(&stop));
  int n = 0;
  for (int i = 0; i < warmup; ++i) fn(n++);
  NIBBLE_CUDA_CHECK(cudaEventRecord(start));
  fn(n++);
  NIBBLE_CUDA_CHECK(cudaEventRecord(stop));
  NIBBLE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  NIBBLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  const int reps = std::clamp(static_cast<int>(std::ceil(min_sample_ms / std::max(ms, 1e-4f))), 1, max_reps);
  std::vector<double> samples;
  for (int s = 0; s < 11; ++s) {
    NIBBLE_CUDA_CHECK(cudaEventRecord(start));
    for (int r = 0; r < reps; ++r) fn(n++);
    NIBBLE_CUDA_CHECK(cudaEventRecord(stop));
    NIBBLE_CUDA_CHECK(cudaEventSynchronize(stop));
    NIBBLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(ms * 1e-3 / reps);
  }
  NIBBLE_CUDA_CHECK(cudaEventDestroy(start));
  NIBBLE_CUDA_CHECK(cudaEventDestroy(stop));
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

// bench_prefill_attention's rule: samples of >= ~20 ms (at most 100 calls), 2 warm-up calls.
template <typename Fn>
double median_seconds(Fn&& fn) {
  return median_seconds_per_call([&](int) { fn(); }, 20.0, 100, 2);
}

}  // namespace nibble::bench
