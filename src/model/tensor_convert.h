#pragma once
// Weight element conversions to float32, done once at load time for the CPU backend.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "model/safetensors.h"
#include "quant/bf16.h"

namespace nibble::model {

// IEEE 754 binary16 -> binary32, exactly (every half is a float): sign, 5-bit exponent (bias 15),
// 10-bit mantissa. Subnormals (exponent 0) are mantissa * 2^-24; exponent 31 is ±Inf (mantissa 0)
// or NaN (payload kept in the top mantissa bits, so a quiet NaN stays quiet).
inline float f32_from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // ±0
  } else {
    // Subnormal: shift the leading 1 up to the implicit bit, lowering the exponent by each step.
    int32_t e = 127 - 15 + 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (static_cast<uint32_t>(e) << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Converts `count` little-endian elements of `dtype` (F32, F16 or BF16) at `src` (any alignment)
// to float32 in `dst`. Throws nibble::Error for other dtypes.
void convert_to_f32(Dtype dtype, const std::byte* src, std::span<float> dst);

}  // namespace nibble::model
