// The device's read bandwidth, for the weight-read limit: each thread streams 16-byte loads over a
// buffer far larger than L2 (grid-stride, two loads in flight), XOR-folded into a sink so the loads
// are kept; the fastest of several timed passes after a warm-up.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace nibble::bench {

namespace {

__global__ void stream_read(const uint4* __restrict__ src, int64_t count, uint32_t* sink) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  uint32_t fold = 0;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + step < count; i += 2 * step) {
    const uint4 a = src[i];
    const uint4 b = src[i + step];
    fold ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
  }
  if (i < count) fold ^= src[i].x ^ src[i].w;
  if (fold == 0xDEADBEEFu) sink[0] = fold;
}

}  // namespace

// Reads `bytes` of `buffer` on `stream` (a kernel of one wave per SM), evicting what L2 held
// before with clean lines (a memset would leave dirty ones, written back during the next timing).
void read_through(const void* buffer, int64_t bytes, uint32_t* sink, cudaStream_t stream) {
  int device = 0, sms = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
  NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  stream_read<<<sms * 4, 512, 0, stream>>>(static_cast<const uint4*>(buffer), bytes / 16, sink);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

// Bytes per second reading a fresh `bytes`-byte device buffer (best of `passes` after one warm-up).
double measure_read_bandwidth(int64_t bytes, int passes) {
  void* buffer = nullptr;
  uint32_t* sink = nullptr;
  NIBBLE_CUDA_CHECK(cudaMalloc(&buffer, static_cast<size_t>(bytes)));
  NIBBLE_CUDA_CHECK(cudaMalloc(&sink, sizeof(uint32_t)));
  NIBBLE_CUDA_CHECK(cudaMemset(buffer, 1, static_cast<size_t>(bytes)));
  int device = 0, sms = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
  NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaEvent_t begin, end;
  NIBBLE_CUDA_CHECK(cudaEventCreate(&begin));
  NIBBLE_CUDA_CHECK(cudaEventCreate(&end));
  double best = 1e30;
  for (int p = 0; p <= passes; ++p) {
    NIBBLE_CUDA_CHECK(cudaEventRecord(begin));
    stream_read<<<sms * 4, 512>>>(static_cast<const uint4*>(buffer), bytes / 16, sink);
    NIBBLE_CUDA_CHECK_LAUNCH();
    NIBBLE_CUDA_CHECK(cudaEventRecord(end));
    NIBBLE_CUDA_CHECK(cudaEventSynchronize(end));
    float ms = 0;
    NIBBLE_CUDA_CHECK(cudaEventElapsedTime(&ms, begin, end));
    if (p > 0 && ms * 1e-3 < best) best = ms * 1e-3;
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  cudaFree(sink);
  cudaFree(buffer);
  return static_cast<double>(bytes) / best;
}

}  // namespace nibble::bench
