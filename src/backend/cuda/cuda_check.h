#pragma once
// CUDA error checks usable from .cu files. nvcc cannot compile fmt 9's compile-time format
// checks, so .cu files never call fmt: errors are raised through these functions, defined in
// cuda_check.cpp (g++), which throw nibble::Error with the call, file:line and CUDA's message.
// Shape validation with NIBBLE_CHECK lives in the host entry points (.cpp).
#include <cuda_runtime.h>

namespace nibble::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
// "<op>: <what> must be one of <expected>, got <value>" for a runtime value no kernel handles.
[[noreturn]] void throw_unsupported(const char* op, const char* what, const char* expected, long long value);

}  // namespace nibble::cuda

#define NIBBLE_CUDA_CHECK(call)                                                          \
  do {                                                                                   \
    const cudaError_t nibble_cuda_status_ = (call);                                      \
    if (nibble_cuda_status_ != cudaSuccess)                                              \
      ::nibble::cuda::throw_cuda_error(nibble_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports launch-configuration errors (too much shared memory, bad grid)
// at the launch site. Does not synchronize, so it is safe inside CUDA-graph capture.
#define NIBBLE_CUDA_CHECK_LAUNCH() NIBBLE_CUDA_CHECK(cudaGetLastError())
