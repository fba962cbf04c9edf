#pragma once
// Timing of calls replayed from a CUDA graph, shared by the CUDA benchmark programs: the per-call
// median of graph replays, optionally after a sustained stretch of replays (the board's steady
// clock and power state) across which the board's energy counter is read.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "board_energy.h"

namespace nibble::bench {

// --sustain: seconds of replays before the samples (0: none) and the energy counter to read across
// them (null: none).
struct Sustain {
  double seconds = 0.0;
  const BoardEnergy* energy = nullptr;
};

// A graph timing: median seconds per call; after a sustained stretch with an energy counter, the
// board's mean power and joules per call over it (else 0).
struct GraphTiming {
  double seconds = 0;
  double watts = 0;
  double joules_per_call = 0;
};

// Median seconds per call of fn(copy, stream) replayed from a CUDA graph: after 3 eager warm-up
// calls (first-launch attribute setup happens there, outside the capture), N calls (copy k % copies,
// N >= copies and >= ~0.3 ms of work) are captured once into a graph on a private stream; each of
// 11 samples times one replay and divides by N. With sustain.seconds > 0 the graph is replayed for
// that long first (four replays in flight at a time, so the GPU does not idle between them), and
// sustain.energy, if any, is read before and after those replays.
template <typename Fn>
GraphTiming graph_median_seconds(Fn&& fn, int copies, const Sustain& sustain = {}) {
  cudaStream_t stream;
  NIBBLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  NIBBLE_CUDA_CHECK(cudaEventCreate(&start));
  NIBBLE_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) fn(i % copies, stream);
  NIBBLE_CUDA_CHECK(cudaEventRecord(start, stream));
  fn(0, stream);
  NIBBLE_CUDA_CHECK(cudaEventRecord(stop, stream));
  NIBBLE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  NIBBLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  const int calls = std::clamp(std::max(copies, static_cast<int>(std::ceil(0.3 / std::max(ms, 1e-4f)))), 1, 256);
  cudaGraph_t graph;
  NIBBLE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < calls; ++k) fn(k % copies, stream);
  NIBBLE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  NIBBLE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) NIBBLE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  GraphTiming timing;
  if (sustain.seconds > 0) {
    NIBBLE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::optional<double> joules_before = sustain.energy ? sustain.energy->joules() : std::nullopt;
    const auto begin = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(); };
    int64_t replays = 0;
    while (elapsed() < sustain.seconds) {
      for (int i = 0; i < 4; ++i) NIBBLE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      NIBBLE_CUDA_CHECK(cudaStreamSynchronize(stream));
      replays += 4;
    }
    const double seconds = elapsed();
    const std::optional<double> joules_after = sustain.energy ? sustain.energy->joules() : std::nullopt;
    if (joules_before && joules_after && *joules_after > *joules_before) {
      timing.watts = (*joules_after - *joules_before) / seconds;
      timing.joules_per_call = (*joules_after - *joules_before) / static_cast<double>(replays * calls);
    }
  }
  std::vector<double> samples;
  for (int s = 0; s < 11; ++s) {
    NIBBLE_CUDA_CHECK(cudaEventRecord(start, stream));
    NIBBLE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    NIBBLE_CUDA_CHECK(cudaEventRecord(stop, stream));
    NIBBLE_CUDA_CHECK(cudaEventSynchronize(stop));
    NIBBLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(ms * 1e-3 / calls);
  }
  NIBBLE_CUDA_CHECK(cudaGraphExecDestroy(exec));
  NIBBLE_CUDA_CHECK(cudaGraphDestroy(graph));
  NIBBLE_CUDA_CHECK(cudaEventDestroy(start));
  NIBBLE_CUDA_CHECK(cudaEventDestroy(stop));
  NIBBLE_CUDA_CHECK(cudaStreamDestroy(stream));
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  timing.seconds = samples[samples.size() / 2];
  return timing;
}

}  // namespace nibble::bench
