#pragma once
// The GPU sampling kernel's types and launcher (sampling.h describes the algorithm). Free of
// backend/ and fmt headers so that sampling.cu compiles with nvcc alone.
#include <cuda_runtime.h>

#include <cstdint>

namespace nibble::cuda {

// The device copy of one SampleRequest (validated and clamped on the host).
struct DeviceSampleRequest {
  float temperature = 0.0f;  // 0 = greedy
  int32_t top_k = 0;         // in [1, vocab]; vocab = off
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  uint64_t draw = 0;
  int32_t top_n = 0;  // in [0, min(kDeviceMaxTopLogprobs, vocab)]: also return the n largest logits
};
inline constexpr int kDeviceMaxTopLogprobs = 20;  // = backend::kMaxSampleTopLogprobs (checked in sampling.cpp)
struct DeviceSampleResult {
  int32_t id = 0;
  float logprob = 0.0f;
  int32_t num_top = 0;                       // = the request's top_n
  int32_t top_id[kDeviceMaxTopLogprobs];     // [num_top] larger logit first, lower id first on equal logits
  float top_logprob[kDeviceMaxTopLogprobs];  // [num_top] (l - max) - log Σ exp(l_i - max), float32
};

// Launches the sampling kernel: rows blocks over logits [rows, vocab] (device, f32).
void launch_sample_kernel(const float* logits, int64_t rows, int64_t vocab, const DeviceSampleRequest* requests,
                          DeviceSampleResult* results, cudaStream_t stream);

}  // namespace nibble::cuda
