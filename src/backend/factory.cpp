// The backend factory: one visible place that maps a device name to an implementation.
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#if defined(NIBBLE_HAVE_CUDA_BACKEND)
#include "backend/cuda/cuda_backend.h"
#endif

namespace nibble::backend {

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.device == "cpu") {
    NIBBLE_CHECK(options.weights != WeightPrecision::kBF16,
                 "device 'cpu' keeps weights in float32 only: bf16 weights need --device cuda");
    return std::make_unique<CpuBackend>(CpuBackendOptions{.num_threads = options.num_threads});
  }
  if (options.device == "cuda") {
#if defined(NIBBLE_HAVE_CUDA_BACKEND)
    return make_cuda_backend(options);
#else
    NIBBLE_FAIL("device 'cuda': this build has no CUDA backend (configure with -DNIBBLE_CUDA=ON on a machine with nvcc)");
#endif
  }
  NIBBLE_FAIL("unknown device '{}': expected cpu or cuda", options.device);
}

}  // namespace nibble::backend
