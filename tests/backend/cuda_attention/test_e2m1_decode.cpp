// The integer E2M1 -> fp16 bit placement used by the decode kernels (backend/cuda/e2m1_decode.h),
// checked for every byte against the format's definition (quant::f32_from_e2m1) with an
// independent fp16 decoder. Host-only: runs with or without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/e2m1_decode.h"
#include "quant/e2m1.h"

namespace nibble::cuda {
namespace {

// IEEE binary16 bits -> value, from the definition (sign, 5-bit exponent bias 15, 10-bit mantissa).
double f16_value(uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1F, mantissa = bits & 0x3FF;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

TEST(E2M1Decode, EveryWordOfFourBytesMatchesTheDefinition) {
  for (uint32_t b = 0; b < 256; ++b) {
    // Each byte in each position of the word, with different neighbours.
    const uint32_t word = b | ((b ^ 0x5Au) << 8) | ((255 - b) << 16) | (((b * 7) & 0xFFu) << 24);
    uint32_t pairs[4];
    e2m1x8_to_f16x2_bits(word, pairs);
    for (int e = 0; e < 8; ++e) {
      const uint8_t code = (word >> (4 * e)) & 0xF;
      const uint16_t half_bits = static_cast<uint16_t>(pairs[e / 2] >> (16 * (e % 2)));
      const double decoded = f16_value(half_bits) * kE2M1F16Rescale;
      const float expected = quant::f32_from_e2m1(code);
      EXPECT_EQ(decoded, static_cast<double>(expected)) << "byte " << b << " element " << e << " code " << int(code);
      EXPECT_EQ(std::signbit(decoded), std::signbit(expected)) << "code " << int(code);
    }
  }
}


TEST(E2M1Decode, HighBytesThenPermuteMatchTheDefinitionForEveryPairOfBytes) {
  // Every combination of the two bytes that one output pair reads (bytes 0 and 2), the other
  // bytes varied, and the 1/3 outputs from the same words.
  for (uint32_t lo = 0; lo < 256; ++lo) {
    for (uint32_t hi = 0; hi < 256; ++hi) {
      const uint32_t word = lo | (((lo * 13 + hi) & 0xFFu) << 8) | (hi << 16) | (((hi * 7) ^ lo) & 0xFFu) << 24;
      uint32_t lo_highs = 0, hi_highs = 0;
      e2m1x8_high_bytes(word, lo_highs, hi_highs);
      // code index of each half of each output: {lo_highs, hi_highs} x {02, 13}
      const uint32_t outs[4] = {f16x2_from_high_bytes_02(lo_highs), f16x2_from_high_bytes_13(lo_highs),
                                f16x2_from_high_bytes_02(hi_highs), f16x2_from_high_bytes_13(hi_highs)};
      const int codes[4][2] = {{0, 4}, {2, 6}, {1, 5}, {3, 7}};
      for (int o = 0; o < 4; ++o) {
        for (int h = 0; h < 2; ++h) {
          const uint8_t code = (word >> (4 * codes[o][h])) & 0xF;
          const double decoded = f16_value(static_cast<uint16_t>(outs[o] >> (16 * h))) * kE2M1F16Rescale;
          const float expected = quant::f32_from_e2m1(code);
          ASSERT_EQ(decoded, static_cast<double>(expected)) << "word " << word << " output " << o << " half " << h;
          ASSERT_EQ(std::signbit(decoded), std::signbit(expected)) << "code " << int(code);
        }
      }
    }
  }
}

TEST(E2M1Decode, BytePermMatchesItsDefinition) {
  EXPECT_EQ(byte_perm(0x44332211u, 0x88776655u, 0x3210u), 0x44332211u);
  EXPECT_EQ(byte_perm(0x44332211u, 0x88776655u, 0x7654u), 0x88776655u);
  EXPECT_EQ(byte_perm(0x44332211u, 0u, 0x2404u), 0x33001100u);
  EXPECT_EQ(byte_perm(0x44332211u, 0x88776655u, 0x5140u), 0x66225511u);
}

}  // namespace
}  // namespace nibble::cuda
