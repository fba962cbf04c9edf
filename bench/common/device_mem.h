#pragma once
// DeviceMem: an owned cudaMalloc'd buffer for the benchmark programs (at least 16 bytes, so an
// empty buffer still has a valid address); allocation failures exit through NIBBLE_CUDA_CHECK.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "backend/cuda/cuda_check.h"

namespace nibble::bench {

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) { NIBBLE_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~DeviceMem() { cudaFree(p); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

}  // namespace nibble::bench
