#include "extend_convert_probe.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/extend_tile_load.cuh"

namespace nibble::cuda::test {

namespace {

using detail::PrefillSchedule;
using detail::PrefillTile;
// The extend kernel's head_dim 128 tile (extend_attention.cu, ExtendTileFor<128>).
using Tile = PrefillTile<kProbeHeadDim, 8, 2, kProbeKeys, 1, true, 2, PrefillSchedule::kLazyRescale>;
constexpr int kRawBytes = kProbeKeys * kProbeHeadDim;  // the widest probed row: fp8
constexpr int kScaleBytes = kProbeKeys * (kProbeHeadDim / 16);
constexpr int kTileBytes = kProbeKeys * kProbeHeadDim * 2;

// One block per tile: raw rows and scales into shared memory, convert_part, the swizzled bf16 tile
// read back in natural order.
__global__ void __launch_bounds__(Tile::kThreads) convert_probe_kernel(quant::ElemFormat format, const uint8_t* raw,
                                                                       const uint8_t* scales, uint16_t* out) {
  __shared__ __align__(128) uint8_t tile[kTileBytes];
  __shared__ __align__(16) uint8_t raw_s[kRawBytes];
  __shared__ __align__(16) uint8_t scales_s[kScaleBytes];
  const int row_bytes = format == quant::ElemFormat::kNVFP4 ? kProbeHeadDim / 2 : kProbeHeadDim;
  const uint8_t* raw_t = raw + static_cast<int64_t>(blockIdx.x) * kProbeKeys * row_bytes;
  for (int i = threadIdx.x; i < kProbeKeys * row_bytes; i += blockDim.x) raw_s[i] = raw_t[i];
  for (int i = threadIdx.x; i < kScaleBytes; i += blockDim.x) {
    scales_s[i] = scales != nullptr ? scales[static_cast<int64_t>(blockIdx.x) * kScaleBytes + i] : 0;
  }
  __syncthreads();
  detail::convert_part<kProbeHeadDim, Tile>(detail::smem_address(tile), raw_s, scales_s, format);
  __syncthreads();
  uint16_t* out_t = out + static_cast<int64_t>(blockIdx.x) * kProbeKeys * kProbeHeadDim;
  for (int i = threadIdx.x; i < kProbeKeys * kProbeHeadDim; i += blockDim.x) {
    const int r = i / kProbeHeadDim, d = i % kProbeHeadDim;
    out_t[i] = *reinterpret_cast<const uint16_t*>(tile + detail::swizzled_bytes<kProbeHeadDim>(r, d / 8) + 2 * (d % 8));
  }
}

}  // namespace

void convert_prefix_tiles(quant::ElemFormat format, const uint8_t* raw, const uint8_t* scales, uint16_t* out,
                          int n_tiles, cudaStream_t stream) {
  convert_probe_kernel<<<n_tiles, Tile::kThreads, 0, stream>>>(format, raw, scales, out);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

}  // namespace nibble::cuda::test
