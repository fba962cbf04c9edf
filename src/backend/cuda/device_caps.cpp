#include "backend/cuda/device_caps.h"

#include <cuda_runtime.h>

#include <array>
#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace nibble::cuda {

bool sm90a_built() {
#if NIBBLE_CUDA_SM90A
  return true;
#else
  return false;
#endif
}

bool device_is_sm90() {
  static std::array<int8_t, 64> known{};  // 0 unknown, 1 yes, 2 no
  int device = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= static_cast<int>(known.size())) return false;
  if (known[device] == 0) {
    int major = 0, minor = 0;
    NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    known[device] = major == 9 && minor == 0 ? 1 : 2;
  }
  return known[device] == 1;
}

}  // namespace nibble::cuda
