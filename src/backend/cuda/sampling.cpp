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
  if (stats_ != nullptr) cudaFreeAsync(stats_, stream_);
  // Pinned host buffers (and the event): a copy still queued may use them, so wait for the stream first.
  if ((host_requests_ != nullptr || host_results_ != nullptr) && stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (host_requests_ != nullptr) cudaFreeHost(host_requests_);
  if (host_results_ != nullptr) cudaFreeHost(host_results_);
  requests_ = nullptr;
  results_ = nullptr;
  stats_ = nullptr;
  host_requests_ = nullptr;
  host_results_ = nullptr;
  if (results_copied != nullptr) cudaEventDestroy(results_copied);  // the stream was synchronized above
  results_copied = nullptr;
  launched_rows = -1;
  capacity_ = 0;
  stats_capacity_ = 0;
}

void SamplingWorkspace::reserve(int64_t rows, int64_t vocab, cudaStream_t stream) {
  if (rows <= capacity_ && rows * sample_row_slices(vocab) <= stats_capacity_) return;
  // Grow, never shrink: a step of fewer rows but a wider vocabulary keeps the row capacity.
  rows = std::max(rows, capacity_);
  const int64_t stats = std::max(rows * sample_row_slices(vocab), stats_capacity_);
  release();
  stream_ = stream;
  NIBBLE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&requests_), rows * sizeof(DeviceSampleRequest), stream));
  NIBBLE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&results_), rows * sizeof(DeviceSampleResult), stream));
  NIBBLE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&stats_), stats * sizeof(RowSliceStats), stream));
  NIBBLE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_requests_), rows * sizeof(DeviceSampleRequest)));
  NIBBLE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_results_), rows * sizeof(DeviceSampleResult)));
  capacity_ = rows;
  stats_capacity_ = stats;
}

void launch_sample_rows(backend::Tensor logits, std::span<const backend::SampleRequest> requests,
                        SamplingWorkspace& workspace, cudaStream_t stream) {
  workspace.launched_rows = -1;
  NIBBLE_CHECK(static_cast<int64_t>(requests.size()) == logits.rows, "sample: {} logits rows, {} requests: expected "
               "equal counts", logits.rows, requests.size());
  NIBBLE_CHECK(logits.cols > 0 && logits.cols < (int64_t{1} << 31), "sample: vocab {} must be in [1, 2^31)",
               logits.cols);
  if (logits.rows == 0) {
    workspace.launched_rows = 0;
    return;
  }
  // The pinned requests are rewritten below: the previous launch's upload must be done (it is, once
  // its results were waited for; otherwise this waits).
  if (workspace.results_copied != nullptr) NIBBLE_CUDA_CHECK(cudaEventSynchronize(workspace.results_copied));
  workspace.reserve(logits.rows, logits.cols, stream);
  if (workspace.results_copied == nullptr) {
    NIBBLE_CUDA_CHECK(cudaEventCreateWithFlags(&workspace.results_copied, cudaEventDisableTiming));
  }
  DeviceSampleRequest* device = workspace.host_requests();
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
  NIBBLE_CUDA_CHECK(cudaMemcpyAsync(workspace.requests(), device, requests.size() * sizeof(DeviceSampleRequest),
                                    cudaMemcpyHostToDevice, stream));
  launch_sample_kernel(logits.data, logits.rows, logits.cols, workspace.stats(), workspace.requests(),
                       workspace.results(), stream);
  NIBBLE_CUDA_CHECK(cudaMemcpyAsync(workspace.host_results(), workspace.results(),
                                    requests.size() * sizeof(DeviceSampleResult), cudaMemcpyDeviceToHost, stream));
  NIBBLE_CUDA_CHECK(cudaEventRecord(workspace.results_copied, stream));
  workspace.launched_rows = logits.rows;
}

void wait_sample_rows(std::span<backend::SampledToken> out, SamplingWorkspace& workspace) {
  NIBBLE_CHECK(workspace.launched_rows >= 0, "sample_wait: no sample_launch to wait for");
  NIBBLE_CHECK(static_cast<int64_t>(out.size()) == workspace.launched_rows,
               "sample_wait: {} outputs for {} launched rows", out.size(), workspace.launched_rows);
  if (workspace.launched_rows == 0) return;
  NIBBLE_CUDA_CHECK(cudaEventSynchronize(workspace.results_copied));
  const DeviceSampleResult* results = workspace.host_results();
  for (size_t r = 0; r < out.size(); ++r) {
    const DeviceSampleResult& d = results[r];
    out[r] = {.id = d.id, .logprob = d.logprob, .num_top = d.num_top};
    for (int j = 0; j < d.num_top; ++j) out[r].top[j] = {.id = d.top_id[j], .logprob = d.top_logprob[j]};
  }
}

}  // namespace nibble::cuda
