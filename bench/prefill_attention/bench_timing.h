#pragma once
// Timing helper of bench_prefill_attention (shared by its prefill and extend sections).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace nibble::bench {

// Median seconds per call of fn() over 11 samples of enough calls to last >= ~20 ms each.
template <typename Fn>
inline double median_seconds(Fn&& fn) {
  cudaEvent_t start, stop;
  NIBBLE_CUDA_CHECK(cudaEventCreate(&start));
  NIBBLE_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 2; ++i) fn();
  NIBBLE_CUDA_CHECK(cudaEventRecord(start));
  fn();
  NIBBLE_CUDA_CHECK(cudaEventRecord(stop));
  NIBBLE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  NIBBLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  const int reps = std::clamp(static_cast<int>(std::ceil(20.0 / std::max(ms, 1e-3f))), 1, 100);
  std::vector<double> samples;
  for (int s = 0; s < 11; ++s) {
    NIBBLE_CUDA_CHECK(cudaEventRecord(start));
    for (int r = 0; r < reps; ++r) fn();
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

}  // namespace nibble::bench
