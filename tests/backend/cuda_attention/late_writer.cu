#include "late_writer.h"

#include "backend/cuda/cuda_check.h"

namespace nibble::cuda::test {

namespace {

__device__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void late_writer_kernel(uint8_t* dst, const uint8_t* src, const int64_t* ranges, int count,
                                   uint64_t delay_ns) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const uint64_t until = global_ns() + delay_ns;
  while (global_ns() < until) {
  }
  for (int r = 0; r < count; ++r) {
    const int64_t at = ranges[2 * r], n = ranges[2 * r + 1];
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[at + i] = src[at + i];
  }
}

}  // namespace

void launch_late_writer(uint8_t* dst, const uint8_t* src, const int64_t* ranges, int count, uint64_t delay_ns,
                        cudaStream_t stream) {
  late_writer_kernel<<<1, 128, 0, stream>>>(dst, src, ranges, count, delay_ns);
  NIBBLE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace nibble::cuda::test
