#pragma once
// bf16: the upper 16 bits of a float32, rounded to nearest even. NaN stays NaN (quieted, sign
// kept); ±Inf stays ±Inf; finite values above bf16's largest round to ±Inf as IEEE rounding does.
#include <cstdint>

#include "quant/bits.h"

namespace nibble::quant {

NIBBLE_HD uint16_t bf16_from_f32(float x) {
  const uint32_t u = f32_bits(x);
  if (is_nan(x)) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);              // ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

NIBBLE_HD float f32_from_bf16(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

}  // namespace nibble::quant
