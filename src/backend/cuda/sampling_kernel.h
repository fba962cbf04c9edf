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

// One slice of a logits row (sampling.cu's first kernel): its maximum, the lowest id holding it (or
// INT_MAX for none), and Σ exp(l - max) over the slice.
struct RowSliceStats {
  float max;
  int32_t id;
  float sum;
};
inline constexpr int64_t kSliceLogits = 4096;  // logits per slice (16 per thread of a 256-thread block)
inline constexpr int64_t sample_row_slices(int64_t vocab) { return (vocab + kSliceLogits - 1) / kSliceLogits; }

// Launches the sampling kernels over logits [rows, vocab] (device, f32): the slice statistics into
// stats [rows][sample_row_slices(vocab)] (device scratch), then one block per row.
void launch_sample_kernel(const float* logits, int64_t rows, int64_t vocab, RowSliceStats* stats,
                          const DeviceSampleRequest* requests, DeviceSampleResult* results, cudaStream_t stream);

}  // namespace nibble::cuda
