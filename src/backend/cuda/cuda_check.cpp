#include "backend/cuda/cuda_check.h"

#include "common/error.h"

namespace nibble::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  NIBBLE_FAIL("CUDA error at {}:{}: {} failed: {} ({})", file, line, call, cudaGetErrorString(status),
              cudaGetErrorName(status));
}

void throw_unsupported(const char* op, const char* what, const char* expected, long long value) {
  NIBBLE_FAIL("{}: {} must be one of {}, got {}", op, what, expected, value);
}

}  // namespace nibble::cuda
