#pragma once
// OCP FP8 E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; S.1111.111 is NaN.
// Normals 2^-6 .. 448, subnormals m·2^-9 (m = 1..7). Encoding rounds to nearest even and saturates:
// |x| >= 448 (±Inf included) -> ±448. NaN -> 0x7F | sign (stays NaN).
#include <cstdint>

#include "quant/bits.h"

namespace nibble::quant {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr uint8_t kE4M3NaN = 0x7F;

NIBBLE_HD uint8_t e4m3_from_f32(float x) {
  const uint32_t u = f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if (is_nan(x)) return static_cast<uint8_t>(sign | kE4M3NaN);
  const float a = abs_f32(x);
  if (a >= kE4M3Max) return static_cast<uint8_t>(sign | 0x7E);  // satfinite
  if (a < 0.015625f) {  // below 2^-6: subnormal grid of step 2^-9; a·2^9 is exact
    const float scaled = a * 512.0f;
    uint32_t q = static_cast<uint32_t>(scaled);  // floor, scaled < 8
    const float rem = scaled - static_cast<float>(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;  // q == 8 is the smallest normal, code 0x08
    return static_cast<uint8_t>(sign | q);
  }
  const uint32_t abits = u & 0x7FFFFFFFu;
  int exponent = static_cast<int>(abits >> 23) - 127;  // -6 .. 8
  const uint32_t mantissa = abits & 0x7FFFFFu;
  uint32_t keep = mantissa >> 20;  // top 3 mantissa bits
  const uint32_t rest = mantissa & 0xFFFFFu;
  if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u))) ++keep;
  if (keep == 8) {
    keep = 0;
    ++exponent;
  }
  // a < 448 guarantees the result is at most 448 (0x7E): 1.75·2^8 is the largest value below the cut.
  return static_cast<uint8_t>(sign | (static_cast<uint32_t>(exponent + 7) << 3) | keep);
}

NIBBLE_HD float f32_from_e4m3(uint8_t code) {
  const uint32_t exponent = (code >> 3) & 0xFu;
  const uint32_t mantissa = code & 0x7u;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) {
    magnitude = f32_from_bits(0x7FC00000u);  // NaN
  } else if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) * 0.001953125f;  // m·2^-9
  } else {
    magnitude = f32_from_bits(((exponent - 7 + 127) << 23) | (mantissa << 20));
  }
  return (code & 0x80u) ? -magnitude : magnitude;
}

}  // namespace nibble::quant
