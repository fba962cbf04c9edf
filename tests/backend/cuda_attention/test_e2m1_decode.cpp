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

}  // namespace
}  // namespace nibble::cuda
