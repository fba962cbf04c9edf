#pragma once
// Decoding packed E2M1 (nvfp4 element codes) with integer operations only: sm_90 has no hardware
// E2M1 conversion. A 4-bit code s.e1.e0.m placed into an fp16 bit pattern as
//   sign -> bit 15, e1 e0 m -> bits 11..9
// is an fp16 whose value is exactly E2M1(code) · 2^-14: for e > 0 the fp16 exponent field e gives
// 2^(e-15)·(1 + m/2) = 2^-14 · 2^(e-1)·(1 + m/2); for e = 0 the fp16 subnormal m·2^-1·2^-14 is
// 2^-14 · (m·0.5). The 2^14 is folded into the block scale (kE2M1F16Rescale), so decoding costs a
// shift, two masks and an OR per pair of elements, and the conversion to float happens in the
// fp16->f32 unit (or the pair feeds an f16 MMA directly).
//
// The format itself is defined in quant/e2m1.h; tests/backend/cuda_attention checks this decoder
// against quant::f32_from_e2m1 for every code.
#include <cstdint>

#include "quant/hd.h"

namespace nibble::cuda {

inline constexpr float kE2M1F16Rescale = 16384.0f;  // 2^14: fp16 pattern value -> E2M1 value

// Two codes at bits 0..3 and 16..19 of x -> two fp16 patterns (low half, high half).
NIBBLE_HD uint32_t e2m1_pair_to_f16x2_bits(uint32_t x) {
  return ((x & 0x00080008u) << 12) | ((x & 0x00070007u) << 9);
}

// One 32-bit word of packed codes (8 elements, element 2i in the low nibble of byte i) ->
// four fp16x2 patterns holding elements (0,1) (2,3) (4,5) (6,7), low half = even element.
NIBBLE_HD void e2m1x8_to_f16x2_bits(uint32_t word, uint32_t out[4]) {
  // Spread so that each 16-bit lane holds one byte: lanes (b0, b1) and (b2, b3).
  const uint32_t b01 = (word & 0x000000FFu) | ((word & 0x0000FF00u) << 8);  // b0 -> bits 0..7, b1 -> 16..23
  const uint32_t b23 = ((word >> 16) & 0x000000FFu) | ((word >> 8) & 0x00FF0000u);
  // In b01 the low nibbles hold elements 0 and 2, the high nibbles elements 1 and 3.
  const uint32_t even01 = e2m1_pair_to_f16x2_bits(b01);        // (e0, e2)
  const uint32_t odd01 = e2m1_pair_to_f16x2_bits(b01 >> 4);    // (e1, e3)
  const uint32_t even23 = e2m1_pair_to_f16x2_bits(b23);        // (e4, e6)
  const uint32_t odd23 = e2m1_pair_to_f16x2_bits(b23 >> 4);    // (e5, e7)
  // Re-pair to (e0,e1) (e2,e3) (e4,e5) (e6,e7): low half of even with low half of odd, etc.
  out[0] = (even01 & 0xFFFFu) | (odd01 << 16);
  out[1] = (even01 >> 16) | (odd01 & 0xFFFF0000u);
  out[2] = (even23 & 0xFFFFu) | (odd23 << 16);
  out[3] = (even23 >> 16) | (odd23 & 0xFFFF0000u);
}


// ---- the decode kernels' form: high bytes first, then one byte permute per pair ------------------
// An E2M1 pattern in fp16 has an all-zero low byte, so it is fully described by its high byte
// H(code) = sign << 7 | magnitude << 1. The codes in the high nibbles of a word's bytes already
// have their sign at bit 7: (x & 0x80808080) | ((x >> 3) & 0x0E0E0E0E) gives their four high bytes
// in 3 ops; the low nibbles' from x << 4 and x << 1 in 4. One byte permute against zero (or one
// mask) then makes each fp16x2: 11 integer ops for 4 pairs (the per-pair placement took ~15).

// Byte permute with __byte_perm's semantics (selector nibble i picks byte s_i of {a, b}).
NIBBLE_HD uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, selector);
#else
  const uint64_t both = static_cast<uint64_t>(a) | (static_cast<uint64_t>(b) << 32);
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((both >> (8 * ((selector >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
#endif
}

// x: 8 codes (nibble i = code i). lo_highs: bytes H(code 0), H(code 2), H(code 4), H(code 6);
// hi_highs: H(code 1), H(code 3), H(code 5), H(code 7).
NIBBLE_HD void e2m1x8_high_bytes(uint32_t x, uint32_t& lo_highs, uint32_t& hi_highs) {
  lo_highs = ((x << 4) & 0x80808080u) | ((x << 1) & 0x0E0E0E0Eu);
  hi_highs = (x & 0x80808080u) | ((x >> 3) & 0x0E0E0E0Eu);
}

// fp16x2 patterns (value · 2^-14 as above) from a word of high bytes: bytes 0 and 2 -> (low, high
// half), or bytes 1 and 3.
NIBBLE_HD uint32_t f16x2_from_high_bytes_02(uint32_t highs) { return byte_perm(highs, 0u, 0x2404u); }
NIBBLE_HD uint32_t f16x2_from_high_bytes_13(uint32_t highs) { return highs & 0xFF00FF00u; }

}  // namespace nibble::cuda
