#pragma once
// What the current device and this build can run: the sm_90a kernels (wgmma) need both a build that
// targets sm_90a (CMAKE_CUDA_ARCHITECTURES containing 90a) and a compute capability 9.0 device.

namespace nibble::cuda {

// This build compiled the sm_90a kernels.
bool sm90a_built();
// The current device is compute capability 9.0 (H100 / H200). Asked once per device and cached.
bool device_is_sm90();
// Both: the wgmma kernels run here.
inline bool wgmma_runs() { return sm90a_built() && device_is_sm90(); }

}  // namespace nibble::cuda
