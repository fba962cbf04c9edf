// The integer E2M1 -> fp16 decode of the decode kernels (backend/cuda/e2m1_decode.h), checked for
// every byte in every position against the packing (quant::nvfp4_code_at) and the format's
// definition (quant::f32_from_e2m1), with an independent fp16 decoder. Host-only: runs with or
// without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/e2m1_decode.h"
#include "quant/e2m1.h"
#include "quant/nvfp4.h"

namespace nibble::cuda {
namespace {

// IEEE binary16 bits -> value, from the definition (sign, 5-bit exponent bias 15, 10-bit mantissa).
double f16_value(uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1F, mantissa = bits & 0x3FF;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

// The expected code of element e (0..7) of a packed group: quant::nvfp4_code_at on its 4 bytes.
uint8_t code_of(uint32_t word, int e) {
  const uint8_t bytes[8] = {static_cast<uint8_t>(word), static_cast<uint8_t>(word >> 8),
                            static_cast<uint8_t>(word >> 16), static_cast<uint8_t>(word >> 24), 0, 0, 0, 0};
  return quant::nvfp4_code_at(bytes, e);
}

void expect_group_decodes(uint32_t word) {
  uint32_t pairs[4];
  e2m1x8_f16x2(word, pairs);
  for (int p = 0; p < 4; ++p) {
    for (int h = 0; h < 2; ++h) {
      const uint8_t code = code_of(word, e2m1x8_element(p, h));
      const double decoded = f16_value(static_cast<uint16_t>(pairs[p] >> (16 * h))) * kE2M1F16Rescale;
      const float expected = quant::f32_from_e2m1(code);
      ASSERT_EQ(decoded, static_cast<double>(expected)) << "word " << word << " pair " << p << " half " << h;
      ASSERT_EQ(std::signbit(decoded), std::signbit(expected)) << "word " << word << " code " << int(code);
    }
  }
}

TEST(E2M1Decode, EveryPairOfBytesInEveryPositionMatchesTheDefinition) {
  // Each output pair reads two bytes of the group (0 and 2, or 1 and 3); every combination of two
  // byte values in both pairs of positions, the other bytes varied.
  for (uint32_t a = 0; a < 256; ++a) {
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t x = ((a * 13 + b) & 0xFFu), y = (((b * 7) ^ a) & 0xFFu);
      expect_group_decodes(a | (x << 8) | (b << 16) | (y << 24));
      expect_group_decodes(x | (a << 8) | (y << 16) | (b << 24));
    }
  }
}

TEST(E2M1Decode, ElementsOfThePairsAreEachElementOnce) {
  bool seen[8] = {};
  for (int p = 0; p < 4; ++p) {
    for (int h = 0; h < 2; ++h) {
      const int e = e2m1x8_element(p, h);
      ASSERT_GE(e, 0);
      ASSERT_LT(e, 8);
      EXPECT_FALSE(seen[e]) << "element " << e;
      seen[e] = true;
    }
  }
  // Packing a group of codes 0..7 (element e = code e) and decoding it gives each element's value.
  uint8_t codes[16], packed[8];
  for (int i = 0; i < 16; ++i) codes[i] = static_cast<uint8_t>(i < 8 ? i : 0);
  quant::nvfp4_pack_codes(codes, packed);
  const uint32_t word = packed[0] | (packed[1] << 8) | (packed[2] << 16) | (static_cast<uint32_t>(packed[3]) << 24);
  uint32_t pairs[4];
  e2m1x8_f16x2(word, pairs);
  for (int p = 0; p < 4; ++p) {
    for (int h = 0; h < 2; ++h) {
      const double decoded = f16_value(static_cast<uint16_t>(pairs[p] >> (16 * h))) * kE2M1F16Rescale;
      EXPECT_EQ(decoded, quant::f32_from_e2m1(static_cast<uint8_t>(e2m1x8_element(p, h)))) << "pair " << p << " half " << h;
    }
  }
}

TEST(E2M1Decode, BitReversalMatchesItsDefinition) {
  EXPECT_EQ(reverse_bits32(0x00000001u), 0x80000000u);
  EXPECT_EQ(reverse_bits32(0x0000000Eu), 0x70000000u);
  EXPECT_EQ(reverse_bits32(0x12345678u), 0x1E6A2C48u);
}

}  // namespace
}  // namespace nibble::cuda
