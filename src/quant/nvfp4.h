#pragma once
// NVFP4 (as nibble stores it in the KV cache): blocks of 16 consecutive elements of one head
// vector; each element an E2M1 code, each block one E4M3 scale s, and a float32 global multiplier g
// per layer and per K/V (g = 1 is SGLang's recipe). The exact order of operations, all float32:
//
//   t   = amax / 6
//   s   = e4m3(t / g)                      block scale, round to nearest even, saturating
//   if float(s) == 0: every code is 0      (the block is all zero)
//   q_i = e2m1(x_i / (float(s) * g))       a true, correctly rounded division
//   x̂_i = q_i * float(s) * g               multiplied left to right
//
// Packing ("decode order", docs/kv_layout.md): a block's 8 bytes are two groups of 4; group k holds
// elements 8k .. 8k+7, and its byte j holds element 8k+j upright and element 8k+j+4 mirrored:
//   upright  U(c) = sign << 7 | magnitude << 1     (bits 7, 3, 2, 1: s, e1, e0, m)
//   mirrored rev8(U(c))                            (bits 0, 4, 5, 6: s, e1, e0, m)
// so byte = U(c_j) | rev8(U(c_{j+4})). Read as a little-endian 32-bit word, the upright codes are
// already fp16 high bytes (E2M1 · 2^-14) and a bit reversal of the word turns the mirrored ones
// upright: the CUDA decode kernels take 8 codes to four fp16x2 in 7 integer operations
// (backend/cuda/e2m1_decode.h) instead of 11 with nibbles in element order.
// Non-finite input: a NaN anywhere in a block makes its scale the E4M3 NaN (0x7F), so all 16
// elements decode to NaN; ±Inf gives amax = Inf, the scale saturates to 448 and the Inf element
// to ±6·448·g (the other elements of that block quantize against that scale).
#include <cstdint>

#include "quant/bits.h"
#include "quant/e2m1.h"
#include "quant/e4m3.h"

namespace nibble::quant {

inline constexpr int kNvfp4Block = 16;                 // elements per block scale
inline constexpr int kNvfp4BlockBytes = kNvfp4Block / 2;  // packed codes per block

// The two placements of one E2M1 code in a byte (the packing above). Upright: sign -> bit 7,
// magnitude (e1 e0 m) -> bits 3..1. Mirrored, the upright byte bit-reversed: sign -> bit 0,
// e1 -> bit 4, e0 -> bit 5, m -> bit 6.
NIBBLE_HD constexpr uint32_t reverse_bits3(uint32_t m) { return (0x73516240u >> (4 * m)) & 0x7u; }  // m: 0..7
NIBBLE_HD constexpr uint8_t nvfp4_upright(uint32_t code) {
  return static_cast<uint8_t>(((code & 0x8u) << 4) | ((code & 0x7u) << 1));
}
NIBBLE_HD constexpr uint8_t nvfp4_mirrored(uint32_t code) {
  return static_cast<uint8_t>(((code & 0x8u) >> 3) | (reverse_bits3(code & 0x7u) << 4));
}
// The code held upright / mirrored in byte b.
NIBBLE_HD constexpr uint8_t nvfp4_upright_code(uint32_t b) {
  return static_cast<uint8_t>(((b >> 4) & 0x8u) | ((b >> 1) & 0x7u));
}
NIBBLE_HD constexpr uint8_t nvfp4_mirrored_code(uint32_t b) {
  return static_cast<uint8_t>(((b & 0x1u) << 3) | reverse_bits3((b >> 4) & 0x7u));
}

// Byte of element i (0..15) within its block, and whether it sits there mirrored: element 8k+j
// (j < 4) upright in byte 4k+j, element 8k+j+4 mirrored in the same byte.
NIBBLE_HD constexpr int nvfp4_byte_of(int i) { return 4 * (i / 8) + i % 4; }
NIBBLE_HD constexpr bool nvfp4_is_mirrored(int i) { return i % 8 >= 4; }

// codes: [16] E2M1 codes in element order -> packed: [8] bytes.
NIBBLE_HD void nvfp4_pack_codes(const uint8_t* codes, uint8_t* packed) {
  for (int b = 0; b < kNvfp4BlockBytes; ++b) {
    const int e = 8 * (b / 4) + b % 4;  // the byte's upright element; e + 4 is its mirrored one
    packed[b] = static_cast<uint8_t>(nvfp4_upright(codes[e]) | nvfp4_mirrored(codes[e + 4]));
  }
}

// The E2M1 code of element i (0..15) of a packed block.
NIBBLE_HD constexpr uint8_t nvfp4_code_at(const uint8_t* packed, int i) {
  const uint8_t b = packed[nvfp4_byte_of(i)];
  return nvfp4_is_mirrored(i) ? nvfp4_mirrored_code(b) : nvfp4_upright_code(b);
}

// Block scale for one block of 16; NaN-propagating amax.
NIBBLE_HD uint8_t nvfp4_block_scale(const float* x, float global_scale) {
  float amax = 0.0f;
  for (int i = 0; i < kNvfp4Block; ++i) amax = amax_nan(amax, x[i]);
  const float t = amax / 6.0f;
  return e4m3_from_f32(t / global_scale);
}

// x: [16] float32 -> packed: [8] bytes, returns the block's E4M3 scale.
NIBBLE_HD uint8_t nvfp4_quantize_block(const float* x, float global_scale, uint8_t* packed) {
  const uint8_t scale = nvfp4_block_scale(x, global_scale);
  const float s = f32_from_e4m3(scale);
  if (s == 0.0f || is_nan(s)) {  // zero block, or NaN kept in the scale
    for (int i = 0; i < kNvfp4BlockBytes; ++i) packed[i] = 0;
    return scale;
  }
  const float denom = s * global_scale;
  uint8_t codes[kNvfp4Block];
  for (int i = 0; i < kNvfp4Block; ++i) codes[i] = e2m1_from_f32(x[i] / denom);
  nvfp4_pack_codes(codes, packed);
  return scale;
}

// Which block scale nvfp4 stores: kAmaxOver6 (the definition above, the default) or kFourOverSix.
enum class Nvfp4ScaleRule : uint8_t { kAmaxOver6, kFourOverSix };

// "4 over 6": quantizes the block twice, once with t = amax/6 (nvfp4_quantize_block exactly) and
// once with t = amax/4 (same steps otherwise: s = e4m3(t / g), zero block when s = 0,
// q_i = e2m1(x_i / (float(s)·g)), x̂_i = q_i·s·g), and keeps the candidate whose block error
// E = Σ_i (x̂_i − x_i)², summed in float32 over i = 0..15 in order, is smaller; on a tie (and when
// either error is not a number, e.g. NaN or Inf in the block) it keeps amax/6. amax/4 maps the
// largest element to the E2M1 code 4 instead of 6: coarser headroom but finer steps near amax
// (4 → 6 is one step of 2; 3 → 4 one step of 1). Decoding is unchanged (nvfp4_dequantize_block).
// docs/kv_layout.md states the same.

// Σ_i (x̂_i − x_i)² of one quantized block, float32, i = 0..15 in order. x: [16], packed: [8].
NIBBLE_HD float nvfp4_block_squared_error(const float* x, const uint8_t* packed, uint8_t scale, float global_scale) {
  const float s = f32_from_e4m3(scale);
  float err = 0.0f;
  for (int i = 0; i < kNvfp4Block; ++i) {
    const float q = f32_from_e2m1(nvfp4_code_at(packed, i));
    const float d = q * s * global_scale - x[i];
    err += d * d;
  }
  return err;
}

// x: [16] float32 -> packed: [8] bytes, returns the block's E4M3 scale (the 4-over-6 rule above).
NIBBLE_HD uint8_t nvfp4_quantize_block_4over6(const float* x, float global_scale, uint8_t* packed) {
  const uint8_t scale6 = nvfp4_quantize_block(x, global_scale, packed);
  float amax = 0.0f;
  for (int i = 0; i < kNvfp4Block; ++i) amax = amax_nan(amax, x[i]);
  const uint8_t scale4 = e4m3_from_f32((amax / 4.0f) / global_scale);
  const float s4 = f32_from_e4m3(scale4);
  if (s4 == 0.0f || is_nan(s4)) return scale6;  // nothing to gain: zero or NaN block
  uint8_t codes4[kNvfp4Block], packed4[kNvfp4BlockBytes];
  const float denom = s4 * global_scale;
  for (int i = 0; i < kNvfp4Block; ++i) codes4[i] = e2m1_from_f32(x[i] / denom);
  nvfp4_pack_codes(codes4, packed4);
  const float err6 = nvfp4_block_squared_error(x, packed, scale6, global_scale);
  const float err4 = nvfp4_block_squared_error(x, packed4, scale4, global_scale);
  if (!(err4 < err6)) return scale6;  // ties and NaN errors keep amax/6
  for (int i = 0; i < kNvfp4BlockBytes; ++i) packed[i] = packed4[i];
  return scale4;
}

// packed: [8] bytes + scale -> out: [16] float32.
NIBBLE_HD void nvfp4_dequantize_block(const uint8_t* packed, uint8_t scale, float global_scale, float* out) {
  const float s = f32_from_e4m3(scale);
  for (int i = 0; i < kNvfp4Block; ++i) out[i] = f32_from_e2m1(nvfp4_code_at(packed, i)) * s * global_scale;
}

}  // namespace nibble::quant
