#pragma once
// Kernel launches through cudaLaunchKernelEx, optionally as a programmatic dependent launch (PDL,
// sm_90): the kernel's blocks may then be scheduled while the stream's previous kernel still runs
// (once that kernel's blocks have executed griddepcontrol.launch_dependents or exited), so each
// kernel must execute griddepcontrol.wait before it reads anything its predecessor writes. Every
// kernel of a decode step launches this way (the GEMVs, the KV write, decode attention, its merge).
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace nibble::cuda {

struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t smem_bytes = 0;  // dynamic shared memory per block
};

// kernel<<<shape, stream>>>(args...), programmatic or not; throws nibble::Error on a launch error.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), const LaunchShape& shape, cudaStream_t stream, bool programmatic,
                   Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic ? 1 : 0;
  NIBBLE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace nibble::cuda
