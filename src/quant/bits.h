#pragma once
// Bit casts and round-to-nearest-even helpers usable on host and device.
#include <cstdint>
#include <cstring>

#include "quant/hd.h"

namespace nibble::quant {

NIBBLE_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

NIBBLE_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

NIBBLE_HD bool is_nan(float x) { return (f32_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }

NIBBLE_HD float abs_f32(float x) { return f32_from_bits(f32_bits(x) & 0x7FFFFFFFu); }

// max(|a|, |b|) that propagates NaN (fmaxf would drop it, and a NaN must never become finite).
NIBBLE_HD float amax_nan(float a, float b) {
  if (is_nan(a)) return a;
  if (is_nan(b)) return b;
  const float x = abs_f32(a), y = abs_f32(b);
  return x > y ? x : y;
}

// a·b rounded once, never contracted into a multiply-add with what follows (a CUDA translation unit
// built with FMA contraction may otherwise fuse a*b + c; the quantizers' roundings must be the
// definition's wherever they are inlined).
NIBBLE_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// Exact 2^e for -126 <= e <= 127.
NIBBLE_HD float exp2i(int e) { return f32_from_bits(static_cast<uint32_t>(e + 127) << 23); }

}  // namespace nibble::quant
