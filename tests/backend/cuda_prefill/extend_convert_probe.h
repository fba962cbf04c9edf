#pragma once
// The extend kernel's prefix-tile conversion (src/backend/cuda/extend_tile_load.cuh, convert_part)
// run alone on given raw rows, so a test can hold every value it produces against the format's
// definition bit for bit. head_dim 128, the staged build's tile (64 keys, 256 threads).
#include <cuda_runtime.h>

#include <cstdint>

#include "quant/kv_format.h"

namespace nibble::cuda::test {

inline constexpr int kProbeKeys = 64;
inline constexpr int kProbeHeadDim = 128;

// raw: [n_tiles][kProbeKeys][row bytes] (fp8: kProbeHeadDim, nvfp4: kProbeHeadDim / 2, in the
// cache's packing); scales: [n_tiles][kProbeKeys][kProbeHeadDim / 16] E4M3 (nvfp4; else unused);
// out: [n_tiles][kProbeKeys][kProbeHeadDim] bf16 bit patterns in natural order. Device pointers.
void convert_prefix_tiles(quant::ElemFormat format, const uint8_t* raw, const uint8_t* scales, uint16_t* out,
                          int n_tiles, cudaStream_t stream);

}  // namespace nibble::cuda::test
