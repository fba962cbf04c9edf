#pragma once
// The KV-cache formats and how one head vector of head_dim elements is stored in each.
//
//   KvDtype  keys   values   bytes per head vector (data + scales), d = head_dim
//   f32      f32    f32      4d            (reference only)
//   bf16     bf16   bf16     2d
//   fp8      fp8    fp8      d             (per-layer, per-K/V float32 multiplier g)
//   nvfp4    nvfp4  nvfp4    d/2 + d/16    (= 9/16 of fp8; g as for fp8)
//   k8v4     fp8    nvfp4    d  |  d/2 + d/16
//
// Head vectors are quantized independently; nvfp4 needs head_dim % 16 == 0, rotation needs a
// power-of-two head_dim. docs/kv_layout.md is the one document that states all of this.
#include <cstdint>
#include <string>
#include <string_view>

#include "quant/bf16.h"
#include "quant/e4m3.h"
#include "quant/hadamard.h"
#include "quant/hd.h"
#include "quant/nvfp4.h"

namespace nibble::quant {

enum class ElemFormat : uint8_t { kF32, kBF16, kFP8, kNVFP4 };
enum class KvDtype : uint8_t { kF32, kBF16, kFP8, kNVFP4, kK8V4 };
enum class Rotation : uint8_t { kNone, kHadamard };

struct KvFormat {
  ElemFormat k;
  ElemFormat v;
};

constexpr KvFormat kv_format(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32: return {ElemFormat::kF32, ElemFormat::kF32};
    case KvDtype::kBF16: return {ElemFormat::kBF16, ElemFormat::kBF16};
    case KvDtype::kFP8: return {ElemFormat::kFP8, ElemFormat::kFP8};
    case KvDtype::kNVFP4: return {ElemFormat::kNVFP4, ElemFormat::kNVFP4};
    case KvDtype::kK8V4: return {ElemFormat::kFP8, ElemFormat::kNVFP4};
  }
  return {ElemFormat::kF32, ElemFormat::kF32};
}

// Bytes of element data for one head vector (codes only, no scales).
NIBBLE_HD constexpr int64_t data_bytes(ElemFormat f, int64_t head_dim) {
  switch (f) {
    case ElemFormat::kF32: return 4 * head_dim;
    case ElemFormat::kBF16: return 2 * head_dim;
    case ElemFormat::kFP8: return head_dim;
    case ElemFormat::kNVFP4: return head_dim / 2;
  }
  return 0;
}

// Bytes of block scales for one head vector (nvfp4: one E4M3 per 16 elements; others none).
NIBBLE_HD constexpr int64_t scale_bytes(ElemFormat f, int64_t head_dim) {
  return f == ElemFormat::kNVFP4 ? head_dim / kNvfp4Block : 0;
}

NIBBLE_HD constexpr int64_t head_vector_bytes(ElemFormat f, int64_t head_dim) {
  return data_bytes(f, head_dim) + scale_bytes(f, head_dim);
}

// Whether the format applies a global multiplier g (fp8 and nvfp4 do; f32 and bf16 ignore it).
constexpr bool uses_global_scale(ElemFormat f) { return f == ElemFormat::kFP8 || f == ElemFormat::kNVFP4; }

// Quantizes one head vector x: [head_dim] float32 into data: [data_bytes] and scales: [scale_bytes]
// (scales is unused unless nvfp4). Bit-exact to the definitions in bf16.h, e4m3.h and nvfp4.h.
NIBBLE_HD void quantize_head_vector(ElemFormat f, const float* x, int head_dim, float global_scale, uint8_t* data,
                                    uint8_t* scales) {
  switch (f) {
    case ElemFormat::kF32: {
      auto* out = reinterpret_cast<float*>(data);
      for (int i = 0; i < head_dim; ++i) out[i] = x[i];
      break;
    }
    case ElemFormat::kBF16: {
      auto* out = reinterpret_cast<uint16_t*>(data);
      for (int i = 0; i < head_dim; ++i) out[i] = bf16_from_f32(x[i]);
      break;
    }
    case ElemFormat::kFP8:
      for (int i = 0; i < head_dim; ++i) data[i] = e4m3_from_f32(x[i] / global_scale);
      break;
    case ElemFormat::kNVFP4:
      for (int b = 0; b < head_dim / kNvfp4Block; ++b) {
        scales[b] = nvfp4_quantize_block(x + b * kNvfp4Block, global_scale, data + b * kNvfp4BlockBytes);
      }
      break;
  }
}

// The inverse: data/scales of one head vector -> out: [head_dim] float32.
NIBBLE_HD void dequantize_head_vector(ElemFormat f, const uint8_t* data, const uint8_t* scales, int head_dim,
                                      float global_scale, float* out) {
  switch (f) {
    case ElemFormat::kF32: {
      const auto* in = reinterpret_cast<const float*>(data);
      for (int i = 0; i < head_dim; ++i) out[i] = in[i];
      break;
    }
    case ElemFormat::kBF16: {
      const auto* in = reinterpret_cast<const uint16_t*>(data);
      for (int i = 0; i < head_dim; ++i) out[i] = f32_from_bf16(in[i]);
      break;
    }
    case ElemFormat::kFP8:
      for (int i = 0; i < head_dim; ++i) out[i] = f32_from_e4m3(data[i]) * global_scale;
      break;
    case ElemFormat::kNVFP4:
      for (int b = 0; b < head_dim / kNvfp4Block; ++b) {
        nvfp4_dequantize_block(data + b * kNvfp4BlockBytes, scales[b], global_scale, out + b * kNvfp4Block);
      }
      break;
  }
}

// Names as the command line spells them: f32 bf16 fp8 nvfp4 k8v4; hadamard / none.
const char* kv_dtype_name(KvDtype dtype);
const char* elem_format_name(ElemFormat f);
KvDtype parse_kv_dtype(std::string_view name);        // throws nibble::Error listing the valid names
ElemFormat parse_elem_format(std::string_view name);  // f32 bf16 fp8 nvfp4
Rotation parse_rotation(std::string_view name);       // none | hadamard

// Throws nibble::Error unless head_dim suits the format (nvfp4: multiple of 16) and the rotation
// (hadamard: power of two).
void validate_head_dim(KvDtype dtype, Rotation rotation, int64_t head_dim);
void validate_head_dim(ElemFormat f, Rotation rotation, int64_t head_dim);

}  // namespace nibble::quant
