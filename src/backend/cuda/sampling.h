#pragma once
// Sampling on the GPU (the seam's Backend::sample): the row's maximum and normalizer by slices over
// many blocks, then one thread block per logits row; only the chosen ids and their logprobs are
// copied back to the host.
//
//   greedy   (temperature 0 or top_k 1) the largest logit, the lowest id on ties: a block arg-max
//            whose ties resolve to the lower index, so it equals sampling::greedy exactly.
//   random   e_i = exp((l_i - max) / temperature) in f32 (e_max = 1), and the fixed-point masses
//            q_i = floor(e_i · 2^40) (integer sums: the same bits every run). kept = the `keep` most
//            probable tokens, lower ids first on equal e, keep = min(K, P, M) with
//              K = top_k (or vocab),  M = #{e_i >= min_p},
//              P = the shortest most-probable-first prefix with mass >= top_p · Σq,
//            each found by an 8-bit radix select over the bits of e (4 passes, shared histograms).
//            The draw: u = philox_uniform(seed, draw), target = floor(u · Σ_kept q), and the token is
//            the kept one where the cumulative kept mass, in id order, first exceeds target.
//   top      (top_logprobs N > 0, N <= 20) the N largest logits in the host's order (larger first,
//            lower id first on equal logits; exact key comparisons, so the ids equal the host's): a
//            count radix select over order-preserving logit keys, the keys above the N-th taken and
//            its ties by lowest id; logprob = (l - max) - log Σ exp(l_i - max) in float32 like the
//            sampled token's (the host computes float64: |Δ| <= 1e-5·max(1, |logprob|), tested).
//
// Reproducible: a request's draws depend only on (logits, seed, draw); they do not reproduce the
// CPU Sampler's mt19937 stream (a different generator), and the filtered probabilities are f32
// here versus f64 on the CPU, so the allowed set can differ only for a token whose cumulative mass
// sits within rounding of the top_p / min_p boundary.
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "backend/cuda/sampling_kernel.h"

namespace nibble::cuda {

// Buffers of sample(), grown as needed and reused: the device ones stream-ordered, the requests and
// results also in pinned host memory (their copies then skip the driver's staging).
class SamplingWorkspace {
 public:
  SamplingWorkspace() = default;
  ~SamplingWorkspace();
  SamplingWorkspace(const SamplingWorkspace&) = delete;
  SamplingWorkspace& operator=(const SamplingWorkspace&) = delete;
  void reserve(int64_t rows, int64_t vocab, cudaStream_t stream);
  void release();  // frees every buffer (stream-ordered); the owner calls it before destroying the stream
  DeviceSampleRequest* requests() const { return requests_; }
  DeviceSampleResult* results() const { return results_; }
  RowSliceStats* stats() const { return stats_; }
  DeviceSampleRequest* host_requests() const { return host_requests_; }
  DeviceSampleResult* host_results() const { return host_results_; }
  // The last launch_sample_rows(): its rows (-1: none, or it failed), and the event after its
  // results' copy to the host.
  int64_t launched_rows = -1;
  cudaEvent_t results_copied = nullptr;

 private:
  DeviceSampleRequest* requests_ = nullptr;       // [capacity_] device
  DeviceSampleResult* results_ = nullptr;         // [capacity_] device
  RowSliceStats* stats_ = nullptr;                // [stats_capacity_] device: [rows][sample_row_slices(vocab)]
  DeviceSampleRequest* host_requests_ = nullptr;  // [capacity_] pinned host
  DeviceSampleResult* host_results_ = nullptr;    // [capacity_] pinned host
  int64_t capacity_ = 0;
  int64_t stats_capacity_ = 0;
  cudaStream_t stream_ = nullptr;
};

// The seam's sample_launch(): validates (nibble::Error naming the parameter), uploads the
// requests, launches, and queues the results' copy back. The drawn ids stay in
// workspace.results()[r].id on the device for the next plan's fed tokens.
void launch_sample_rows(backend::Tensor logits, std::span<const backend::SampleRequest> requests,
                        SamplingWorkspace& workspace, cudaStream_t stream);
// The seam's sample_wait(): waits for that copy (not for later work on the stream) and converts.
void wait_sample_rows(std::span<backend::SampledToken> out, SamplingWorkspace& workspace);

}  // namespace nibble::cuda
