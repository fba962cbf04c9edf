// The SM-clock probe (sm_clock.h).
#include "sm_clock.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace nibble::bench {

namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// mhz[block] = SM cycles per µs of one spin on thread 0 of each block.
__global__ void sm_clock_kernel(long long spin_ns, double* mhz) {
  if (threadIdx.x != 0) return;
  const uint64_t t0 = global_ns();
  const long long c0 = clock64();
  uint64_t t1 = t0;
  while (t1 - t0 < static_cast<uint64_t>(spin_ns)) t1 = global_ns();
  const long long c1 = clock64();
  mhz[blockIdx.x] = static_cast<double>(c1 - c0) * 1e3 / static_cast<double>(t1 - t0);
}

}  // namespace

double sm_clock_mhz(int sms, long long spin_ns) {
  if (sms <= 0 || spin_ns < 100000) {
    throw std::invalid_argument("sm_clock_mhz: sms " + std::to_string(sms) + " must be > 0 and spin_ns " +
                                std::to_string(spin_ns) + " >= 100000");
  }
  double* d_mhz = nullptr;
  NIBBLE_CUDA_CHECK(cudaMalloc(&d_mhz, sizeof(double) * static_cast<size_t>(sms)));
  NIBBLE_CUDA_CHECK(cudaDeviceSynchronize());
  sm_clock_kernel<<<sms, 32>>>(spin_ns, d_mhz);
  NIBBLE_CUDA_CHECK_LAUNCH();
  std::vector<double> mhz(static_cast<size_t>(sms));
  NIBBLE_CUDA_CHECK(cudaMemcpy(mhz.data(), d_mhz, sizeof(double) * mhz.size(), cudaMemcpyDeviceToHost));
  NIBBLE_CUDA_CHECK(cudaFree(d_mhz));
  std::nth_element(mhz.begin(), mhz.begin() + mhz.size() / 2, mhz.end());
  return mhz[mhz.size() / 2];
}

}  // namespace nibble::bench
