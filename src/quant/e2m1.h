#pragma once
// FP4 E2M1: 1 sign bit (bit 3), 2 exponent, 1 mantissa bit. Magnitudes by code 0..7:
// 0, 0.5, 1, 1.5, 2, 3, 4, 6. Encoding rounds to nearest, ties to the even code, and clamps to ±6.
// The sign bit follows the input's sign (-0.1 -> code 0x8, which decodes to -0.0).
// E2M1 has no NaN: callers (nvfp4.h) keep NaN in the block scale instead.
#include <cstdint>

#include "quant/bits.h"

namespace nibble::quant {

inline constexpr float kE2M1Max = 6.0f;

NIBBLE_HD uint8_t e2m1_from_f32(float x) {
  const uint8_t sign = (f32_bits(x) >> 31) ? 0x8 : 0x0;
  const float a = abs_f32(x);
  uint8_t m;
  // Decision points are the midpoints between neighbours; at a tie the even code wins,
  // hence <= where the lower neighbour's code is even and < where it is odd.
  if (a <= 0.25f) m = 0;
  else if (a < 0.75f) m = 1;
  else if (a <= 1.25f) m = 2;
  else if (a < 1.75f) m = 3;
  else if (a <= 2.5f) m = 4;
  else if (a < 3.5f) m = 5;
  else if (a <= 5.0f) m = 6;
  else m = 7;  // (5, +inf] clamps to 6
  return static_cast<uint8_t>(sign | m);
}

NIBBLE_HD float f32_from_e2m1(uint8_t code) {
  // 2·magnitude is 0,1,2,3,4,6,8,12 for codes 0..7.
  const uint32_t m = code & 0x7u;
  const float twice = m < 4 ? static_cast<float>(m) : static_cast<float>((m & 1u) ? (m == 5 ? 6 : 12) : (m == 4 ? 4 : 8));
  const float magnitude = twice * 0.5f;
  return (code & 0x8u) ? -magnitude : magnitude;
}

}  // namespace nibble::quant
