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
  unsigned cluster_x = 1;  // > 1: thread block clusters of this many consecutive blocks (grid.x a multiple)
};

// The launch configuration of `shape` on `stream`, with the attributes it names; `attribute` holds them.
inline cudaLaunchConfig_t launch_config(const LaunchShape& shape, cudaStream_t stream, bool programmatic,
                                        cudaLaunchAttribute (&attribute)[2]) {
  cudaLaunchConfig_t config = {};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.smem_bytes;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 0;
  if (programmatic) {
    attribute[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[config.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    ++config.numAttrs;
  }
  if (shape.cluster_x > 1) {
    attribute[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attribute[config.numAttrs].val.clusterDim.x = shape.cluster_x;
    attribute[config.numAttrs].val.clusterDim.y = 1;
    attribute[config.numAttrs].val.clusterDim.z = 1;
    ++config.numAttrs;
  }
  return config;
}

// kernel<<<shape, stream>>>(args...), programmatic or not; throws nibble::Error on a launch error.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), const LaunchShape& shape, cudaStream_t stream, bool programmatic,
                   Args&&... args) {
  cudaLaunchAttribute attribute[2];
  const cudaLaunchConfig_t config = launch_config(shape, stream, programmatic, attribute);
  NIBBLE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace nibble::cuda
