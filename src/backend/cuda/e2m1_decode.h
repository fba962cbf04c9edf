#pragma once
// Decoding packed E2M1 (nvfp4 element codes) with integer operations only: sm_90 has no hardware
// E2M1 conversion. A 4-bit code s.e1.e0.m placed into an fp16 bit pattern as
//   sign -> bit 15, e1 e0 m -> bits 11..9
// is an fp16 whose value is exactly E2M1(code) · 2^-14: for e > 0 the fp16 exponent field e gives
// 2^(e-15)·(1 + m/2) = 2^-14 · 2^(e-1)·(1 + m/2); for e = 0 the fp16 subnormal m·2^-1·2^-14 is
// 2^-14 · (m·0.5). The 2^14 is folded into the block scale (kE2M1F16Rescale). That pattern has an
// all-zero low byte, and its high byte is the "upright" placement of quant/nvfp4.h's packing
// (sign bit 7, magnitude bits 3..1): the cache stores codes that way, so decoding is masks.
//
// One group of 4 packed bytes (a little-endian word x, elements 8k .. 8k+7: byte j = element j
// upright | element j+4 mirrored) gives four fp16x2 in 7 integer operations:
//   (x << 8) & M   bytes 0, 2 upright   -> elements (0, 2)
//    x       & M   bytes 1, 3 upright   -> elements (1, 3)
//    y       & M   y = brev(x): byte k of y is byte 3-k of x bit-reversed, so the mirrored codes of
//   (y << 8) & M   bytes 2, 0 and 3, 1 stand upright   -> elements (6, 4) and (7, 5)
// with M = 0x8E008E00 (bits 15, 11..9 of each half). With nibbles in element order the same took 11
// (two shifts and masks per four high bytes, one byte permute per pair): 32 × 32K GQA 4, H200,
// 292.2 -> 278.6 us per decode call, 0.617 -> 0.592 × fp8 (PERFORMANCE.md, twenty-ninth round).
// No placement of two codes per byte lets shifts alone do it (no four disjoint translates of the
// pattern {15, 11, 10, 9} tile 16 bits); the bit reversal is the one extra permutation needed.
//
// The format itself is defined in quant/e2m1.h and quant/nvfp4.h; tests/backend/cuda_attention
// (test_e2m1_decode.cpp) checks this decoder against quant::nvfp4_code_at for every byte in every
// position.
#include <cstdint>

#include "quant/hd.h"

namespace nibble::cuda {

inline constexpr float kE2M1F16Rescale = 16384.0f;  // 2^14: fp16 pattern value -> E2M1 value
inline constexpr uint32_t kE2M1F16x2Mask = 0x8E008E00u;  // sign and magnitude bits of both halves

// The element (of the group's 8) in half h of pair p of e2m1x8_f16x2's output.
NIBBLE_HD constexpr int e2m1x8_element(int p, int h) { return p < 2 ? p + 2 * h : p + 4 - 2 * h; }

NIBBLE_HD uint32_t reverse_bits32(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __brev(x);
#else
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
#endif
}

// x: one packed group of 8 codes -> out[p]: fp16x2 patterns (E2M1 · 2^-14) of elements
// e2m1x8_element(p, 0) (low half) and e2m1x8_element(p, 1): (0, 2) (1, 3) (6, 4) (7, 5).
NIBBLE_HD void e2m1x8_f16x2(uint32_t x, uint32_t (&out)[4]) {
  const uint32_t y = reverse_bits32(x);
  out[0] = (x << 8) & kE2M1F16x2Mask;
  out[1] = x & kE2M1F16x2Mask;
  out[2] = y & kE2M1F16x2Mask;
  out[3] = (y << 8) & kE2M1F16x2Mask;
}

}  // namespace nibble::cuda
