// OCP FP8 E4M3FN (quant/e4m3.h) against the textbook formula and a brute-force encoder (oracle.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "quant/e4m3.h"
#include "unit/quant/oracle.h"

namespace nibble::quant {
namespace {

using oracle::bits_of;
using oracle::float_of;

TEST(E4m3, EveryCodeDecodesToTheOcpFormula) {
  for (int code = 0; code < 256; ++code) {
    const double expected = oracle::e4m3_value(code);
    const float got = f32_from_e4m3(static_cast<uint8_t>(code));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), expected) << "code " << code;
    EXPECT_EQ(std::signbit(got), code >= 0x80) << "code " << code;  // -0 for 0x80
  }
}

TEST(E4m3, TextbookValues) {
  // Values given by the OCP FP8 specification for E4M3.
  EXPECT_EQ(f32_from_e4m3(0x7E), 448.0f);                     // max normal S.1111.110
  EXPECT_EQ(f32_from_e4m3(0x08), 0.015625f);                  // min normal 2^-6
  EXPECT_EQ(f32_from_e4m3(0x07), 0.875f * 0.015625f);         // max subnormal 0.875·2^-6
  EXPECT_EQ(f32_from_e4m3(0x01), std::ldexp(1.0f, -9));       // min subnormal 2^-9
  EXPECT_EQ(f32_from_e4m3(0x38), 1.0f);                       // exponent 7 = bias
  EXPECT_EQ(f32_from_e4m3(0xB8), -1.0f);
  EXPECT_TRUE(std::isnan(f32_from_e4m3(0x7F)));
  EXPECT_TRUE(std::isnan(f32_from_e4m3(0xFF)));
  EXPECT_EQ(kE4M3Max, 448.0f);
}

TEST(E4m3, EncodeOfDecodeIsIdentityForEveryNonNanCode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    EXPECT_EQ(e4m3_from_f32(f32_from_e4m3(static_cast<uint8_t>(code))), code) << "code " << code;
  }
  EXPECT_EQ(e4m3_from_f32(-0.0f), 0x80);
  EXPECT_EQ(e4m3_from_f32(0.0f), 0x00);
}

TEST(E4m3, EveryTieBetweenNeighboursRoundsToTheEvenCode) {
  // Positive codes 0x00..0x7E are ordered by value; the midpoint of two neighbours has at most
  // 5 significant bits, so it is exact in float32.
  for (int code = 0; code < 0x7E; ++code) {
    const double lo = oracle::e4m3_value(code), hi = oracle::e4m3_value(code + 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const int even = code % 2 == 0 ? code : code + 1;
    EXPECT_EQ(e4m3_from_f32(mid), even) << "tie between codes " << code << " and " << code + 1;
    EXPECT_EQ(e4m3_from_f32(-mid), 0x80 | even) << "negative tie between codes " << code << " and " << code + 1;
    // One float32 ulp either side of the tie decides it.
    EXPECT_EQ(e4m3_from_f32(std::nextafter(mid, 0.0f)), code) << "just below the tie after code " << code;
    EXPECT_EQ(e4m3_from_f32(std::nextafter(mid, 1000.0f)), code + 1) << "just above the tie after code " << code;
  }
}

TEST(E4m3, SubnormalsDownToTwoToTheMinusNine) {
  for (int m = 1; m <= 7; ++m) {
    EXPECT_EQ(e4m3_from_f32(std::ldexp(static_cast<float>(m), -9)), m);
    EXPECT_EQ(e4m3_from_f32(-std::ldexp(static_cast<float>(m), -9)), 0x80 | m);
  }
  const float half_min = std::ldexp(1.0f, -10);  // the tie between 0 and 2^-9: even code 0
  EXPECT_EQ(e4m3_from_f32(half_min), 0x00);
  EXPECT_EQ(e4m3_from_f32(std::nextafter(half_min, 1.0f)), 0x01);
  for (float tiny : {std::nextafter(half_min, 0.0f), 1e-4f, 1e-20f, std::numeric_limits<float>::denorm_min(),
                     std::numeric_limits<float>::min()}) {
    EXPECT_EQ(e4m3_from_f32(tiny), 0x00) << tiny;
    EXPECT_EQ(e4m3_from_f32(-tiny), 0x80) << -tiny;  // the sign survives as -0
  }
}

TEST(E4m3, SaturatesAt448) {
  const float beyond[] = {448.0f,  std::nextafter(448.0f, 1e9f), 449.0f, 456.0f, 463.99f, 464.0f, 465.0f,
                          480.0f,  1e6f, std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()};
  for (float x : beyond) {
    EXPECT_EQ(e4m3_from_f32(x), 0x7E) << x;
    EXPECT_EQ(e4m3_from_f32(-x), 0xFE) << -x;
    EXPECT_EQ(f32_from_e4m3(e4m3_from_f32(x)), 448.0f) << x;
  }
  // Just below 448: the tie 432 between 416 and 448 goes to the even code 0x7E, below it to 416.
  EXPECT_EQ(e4m3_from_f32(432.0f), 0x7E);
  EXPECT_EQ(e4m3_from_f32(std::nextafter(432.0f, 0.0f)), 0x7D);
  EXPECT_EQ(e4m3_from_f32(std::nextafter(448.0f, 0.0f)), 0x7E);
}

TEST(E4m3, NanStaysNan) {
  const uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFFC00000u, 0xFF800001u};
  for (uint32_t u : nans) {
    const uint8_t code = e4m3_from_f32(float_of(u));
    EXPECT_EQ(code & 0x7F, 0x7F) << std::hex << u;
    EXPECT_EQ(code >> 7, u >> 31) << std::hex << u;  // the sign is kept
    EXPECT_TRUE(std::isnan(f32_from_e4m3(code))) << std::hex << u;
  }
}

TEST(E4m3, MatchesBruteForceOverAFloatSweep) {
  // Every 997th float32 bit pattern from 0 up to 2^10 (past saturation), both signs, plus every
  // pattern within 8 ulps of each tie: ~1.1M inputs, each checked against the brute-force encoder.
  std::vector<float> inputs;
  for (uint64_t u = 0; u <= bits_of(1024.0f); u += 997) inputs.push_back(float_of(static_cast<uint32_t>(u)));
  for (int code = 0; code < 0x7E; ++code) {
    const uint32_t mid = bits_of(static_cast<float>((oracle::e4m3_value(code) + oracle::e4m3_value(code + 1)) / 2));
    for (int d = -8; d <= 8; ++d) inputs.push_back(float_of(mid + d));
  }
  int64_t mismatches = 0;
  for (float x : inputs) {
    for (float signed_x : {x, -x}) {
      const uint8_t got = e4m3_from_f32(signed_x), want = oracle::e4m3_encode(signed_x);
      if (got != want && ++mismatches <= 10) {
        ADD_FAILURE() << "x = " << signed_x << " (bits " << std::hex << bits_of(signed_x) << "): got 0x"
                      << int{got} << ", brute force 0x" << int{want};
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(inputs.size(), 1000000u);
}

}  // namespace
}  // namespace nibble::quant
