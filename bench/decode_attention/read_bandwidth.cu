// The device's practical read bandwidth: a read-only reduction over a buffer much larger than L2
// (16-byte loads, four in flight per thread, a grid of a few waves), timed with CUDA events.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace nibble::bench {

namespace {

__global__ void read_sum_kernel(const uint4* __restrict__ data, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = data[i], b = data[i + stride], c = data[i + 2 * stride], d = data[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) acc ^= data[i].x ^ data[i].y ^ data[i].z ^ data[i].w;
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads alive; practically never taken
}

}  // namespace

// Seconds for one read of `bytes` bytes at `data` (fastest of reps - 1 timed runs after a warm-up).
double time_read(const void* data, int64_t bytes, unsigned* sink, int sms, int reps) {
  cudaEvent_t start, stop;
  NIBBLE_CUDA_CHECK(cudaEventCreate(&start));
  NIBBLE_CUDA_CHECK(cudaEventCreate(&stop));
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    NIBBLE_CUDA_CHECK(cudaEventRecord(start));
    read_sum_kernel<<<sms * 8, 256>>>(static_cast<const uint4*>(data), bytes / 16, sink);
    NIBBLE_CUDA_CHECK_LAUNCH();
    NIBBLE_CUDA_CHECK(cudaEventRecord(stop));
    NIBBLE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    NIBBLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0) best = best < ms * 1e-3 ? best : ms * 1e-3;  // first run is the warm-up
  }
  NIBBLE_CUDA_CHECK(cudaEventDestroy(start));
  NIBBLE_CUDA_CHECK(cudaEventDestroy(stop));
  return best;
}

}  // namespace nibble::bench
