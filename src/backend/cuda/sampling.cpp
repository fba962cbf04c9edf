// Host side of GPU sampling (sampling.h): validation, request upload, result download.
#include "backend/cuda/sampling.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "common/error.h"
#include "sampling/sampler.h"

namespace nibble::cuda {

static_assert(kDeviceMaxTopLogprobs == backend::kMaxSampleTopLogprobs, "the kernel's result holds every top logprob");

SamplingWorkspace::~SamplingWorkspace() { release(); }

void SamplingWorkspace::release() {
  if (requests_ != nullptr) cudaFreeAsync(requests_, stream_);
  if (results_ != nullptr) cudaFreeAsync(results_, stream_);
  requests_ = nullptr;
  results_ = nullptr;
  capacity_ = 0;
}

void SamplingWorkspace::reserve(int64_t rows, cudaStream_t stream) {
  if (rows <= capacity_) return;
  if (requests_ != nullptr) NIBBLE_CUDA_CHECK(cudaFreeAsync(requests_, stream_));
  if (results_ != nullptr) NIBBLE_CUDA_CHECK(cudaFreeAsync(results_, stream_));
  requests_ = nullptr;
  results_ = nullptr;
  capacity_ = 0;
  stream_ = stream;
  NIBBLE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&requests_), rows * sizeof(DeviceSampleRequest), stream));
  NIBBLE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&results_), rows * sizeof(DeviceSampleResult), stream));
  capacity_ = rows;
}

void sample_rows(backend::Tensor logits, std::span<const backend::SampleRequest> requests,
                 std::span<backend::SampledToken> out, SamplingWorkspace& workspace, cudaStream_t stream) {
  NIBBLE_CHECK(static_cast<int64_t>(requests.size()) == logits.rows && out.size() == requests.size(),
               "sample: {} logits rows, {} requests, {} outputs: expected equal counts", logits.rows, requests.size(),
               out.size());
  NIBBLE_CHECK(logits.cols > 0 && logits.cols < (int64_t{1} << 31), "sample: vocab {} must be in [1, 2^31)",
               logits.cols);
  if (logits.rows == 0) return;
  std::vector<DeviceSampleRequest> device(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    const backend::SampleRequest& q = requests[r];
    sampling::validate({.temperature = q.temperature, .top_k = q.top_k, .top_p = q.top_p, .min_p = q.min_p});
    NIBBLE_CHECK(q.top_logprobs >= 0 && q.top_logprobs <= backend::kMaxSampleTopLogprobs,
                 "sample: top_logprobs must be in [0, {}], got {} (row {})", backend::kMaxSampleTopLogprobs,
                 q.top_logprobs, r);
    const bool greedy = q.temperature == 0.0f || q.top_k == 1;
    device[r] = {.temperature = greedy ? 0.0f : q.temperature,
                 .top_k = static_cast<int32_t>(q.top_k > 0 ? std::min(q.top_k, logits.cols) : logits.cols),
                 .top_p = q.top_p,
                 .min_p = q.min_p,
                 .seed = q.seed,
                 .draw = q.draw,
                 .top_n = static_cast<int32_t>(std::min<int64_t>(q.top_logprobs, logits.cols))};
  }
  workspace.reserve(logits.rows, stream);
  NIBBLE_CUDA_CHECK(cudaMemcpyAsync(workspace.requests(), device.data(), device.size() * sizeof(DeviceSampleRequest),
                                    cudaMemcpyHostToDevice, stream));
  launch_sample_kernel(logits.data, logits.rows, logits.cols, workspace.requests(), workspace.results(), stream);
  std::vector<DeviceSampleResult> results(requests.size());
  NIBBLE_CUDA_CHECK(cudaMemcpyAsync(results.data(), workspace.results(), results.size() * sizeof(DeviceSampleResult),
                                    cudaMemcpyDeviceToHost, stream));
  NIBBLE_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (size_t r = 0; r < results.size(); ++r) {
    const DeviceSampleResult& d = results[r];
    out[r] = {.id = d.id, .logprob = d.logprob, .num_top = d.num_top};
    for (int j = 0; j < d.num_top; ++j) out[r].top[j] = {.id = d.top_id[j], .logprob = d.top_logprob[j]};
  }
}

}  // namespace nibble::cuda
