#pragma once
// The per-layer K/V global scales file that `nibble calibrate` writes and `--kv-scales` reads:
//
//   {"model": "<dir name>", "rotation": "none" | "hadamard",
//    "layers": [{"k_amax", "v_amax",                    (one entry per full-attention layer, in order)
//                "k_scale_nvfp4", "v_scale_nvfp4",      = amax / (6 · 448)
//                "k_scale_fp8", "v_scale_fp8"}, ...]}   = amax / 448
//
// amax is the largest |element| of K (after RoPE and, with "hadamard", after the rotation: what
// the cache quantizes) and of V (rotated likewise) over the calibration corpus. A scale g maps
// amax onto the format's largest magnitude: nvfp4's 6 (E2M1) × 448 (E4M3 block scale), fp8's 448.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/page_layout.h"
#include "quant/kv_format.h"

namespace nibble::cache {

inline constexpr float kKvScaleMin = 1e-30f;  // accepted scales lie in [kKvScaleMin, kKvScaleMax]
inline constexpr float kKvScaleMax = 1e30f;

struct KvLayerScales {
  float k_amax = 0.0f, v_amax = 0.0f;
  float k_scale_nvfp4 = 0.0f, v_scale_nvfp4 = 0.0f;
  float k_scale_fp8 = 0.0f, v_scale_fp8 = 0.0f;
};

struct KvScalesFile {
  std::string model;
  quant::Rotation rotation = quant::Rotation::kNone;
  std::vector<KvLayerScales> layers;  // [full-attention layers]
};

// Scales from measured amax: nvfp4 amax/(6·448), fp8 amax/448 (float32). Throws nibble::Error
// naming the layer when an amax is not finite or gives a scale outside [kKvScaleMin, kKvScaleMax]
// (e.g. a layer whose K or V was all zero).
KvScalesFile kv_scales_from_amax(std::string model, quant::Rotation rotation, const std::vector<float>& k_amax,
                                 const std::vector<float>& v_amax);

// Throws nibble::Error naming the path and the field: unreadable file, malformed JSON, a missing
// or non-numeric field, no layers, a scale not finite or outside [kKvScaleMin, kKvScaleMax].
KvScalesFile read_kv_scales_file(const std::filesystem::path& path);
void write_kv_scales_file(const std::filesystem::path& path, const KvScalesFile& file);

struct KvScalesUse {
  int64_t num_layers = 0;  // the model's full-attention layers
  quant::KvDtype dtype = quant::KvDtype::kF32;
  quant::Rotation rotation = quant::Rotation::kNone;
};

// The g per layer for `use.dtype`: K and V each take the nvfp4 or the fp8 scale by their element
// format (k8v4: K fp8, V nvfp4); formats without a global scale (f32, bf16) get 1.0. Throws
// nibble::Error when the layer count or the rotation differs from the run's (`source` names the
// file in the message).
KvGlobalScales select_kv_global_scales(const KvScalesFile& file, const KvScalesUse& use, const std::string& source);

// read_kv_scales_file + select_kv_global_scales.
KvGlobalScales load_kv_global_scales(const std::filesystem::path& path, const KvScalesUse& use);

}  // namespace nibble::cache
