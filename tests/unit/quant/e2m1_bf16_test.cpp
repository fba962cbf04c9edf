// FP4 E2M1 (quant/e2m1.h) and bf16 (quant/bf16.h) against textbook tables and independent
// round-to-nearest-even oracles (oracle.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "quant/bf16.h"
#include "quant/e2m1.h"
#include "unit/quant/oracle.h"

namespace nibble::quant {
namespace {

using oracle::bits_of;
using oracle::float_of;

// ---- E2M1 ----------------------------------------------------------------------------------------

TEST(E2m1, TableMatchesTheSpecification) {
  // OCP FP4 E2M1 magnitudes by code 0..7 (DESIGN.md: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}).
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int code = 0; code < 16; ++code) {
    const float want = (code & 8) ? -magnitudes[code & 7] : magnitudes[code & 7];
    const float got = f32_from_e2m1(static_cast<uint8_t>(code));
    EXPECT_EQ(got, want) << "code " << code;
    EXPECT_EQ(std::signbit(got), code >= 8) << "code " << code;  // code 8 is -0
    EXPECT_EQ(static_cast<double>(got), oracle::e2m1_value(code)) << "code " << code;
  }
  EXPECT_EQ(kE2M1Max, 6.0f);
}

TEST(E2m1, EncodeOfDecodeIsIdentityForAllSixteenCodes) {
  for (int code = 0; code < 16; ++code) {
    EXPECT_EQ(e2m1_from_f32(f32_from_e2m1(static_cast<uint8_t>(code))), code) << "code " << code;
  }
}

TEST(E2m1, EveryTieRoundsToTheEvenCode) {
  // Each midpoint between neighbours goes to the even code; one float32 ulp below it goes to the
  // lower neighbour, one ulp above to the upper.
  const struct {
    float mid;
    int even, lower, upper;
  } ties[] = {{0.25f, 0, 0, 1}, {0.75f, 2, 1, 2}, {1.25f, 2, 2, 3}, {1.75f, 4, 3, 4},
              {2.5f, 4, 4, 5},  {3.5f, 6, 5, 6},  {5.0f, 6, 6, 7}};
  for (const auto& t : ties) {
    EXPECT_EQ(e2m1_from_f32(t.mid), t.even) << t.mid;
    EXPECT_EQ(e2m1_from_f32(-t.mid), 8 | t.even) << -t.mid;
    EXPECT_EQ(e2m1_from_f32(std::nextafter(t.mid, 0.0f)), t.lower) << "below " << t.mid;
    EXPECT_EQ(e2m1_from_f32(std::nextafter(t.mid, 10.0f)), t.upper) << "above " << t.mid;
    EXPECT_EQ(e2m1_from_f32(-std::nextafter(t.mid, 10.0f)), 8 | t.upper) << "below " << -t.mid;
  }
}

TEST(E2m1, ClampsToSix) {
  for (float x : {5.0001f, 6.0f, 6.5f, 7.0f, 1e9f, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(e2m1_from_f32(x), 0x7) << x;
    EXPECT_EQ(e2m1_from_f32(-x), 0xF) << -x;
  }
}

TEST(E2m1, SignOfZeroFollowsTheInput) {
  EXPECT_EQ(e2m1_from_f32(0.0f), 0x0);
  EXPECT_EQ(e2m1_from_f32(-0.0f), 0x8);
  EXPECT_EQ(e2m1_from_f32(-0.1f), 0x8);  // rounds to zero, keeps the sign
  EXPECT_TRUE(std::signbit(f32_from_e2m1(e2m1_from_f32(-0.1f))));
  EXPECT_EQ(e2m1_from_f32(std::numeric_limits<float>::denorm_min()), 0x0);
}

TEST(E2m1, MatchesBruteForceOverAFloatSweep) {
  // Every 101st float32 bit pattern from 0 to 16: ~11M inputs, both signs.
  int64_t mismatches = 0, checked = 0;
  for (uint32_t u = 0; u <= bits_of(16.0f); u += 101) {
    for (float x : {float_of(u), -float_of(u)}) {
      ++checked;
      if (e2m1_from_f32(x) != oracle::e2m1_encode(x) && ++mismatches <= 10) {
        ADD_FAILURE() << "x = " << x << ": got " << int{e2m1_from_f32(x)} << ", brute force "
                      << int{oracle::e2m1_encode(x)};
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(checked, 10000000);
}

// ---- bf16 ----------------------------------------------------------------------------------------

TEST(Bf16, DecodeIsTheUpperHalfOfAFloat32) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float got = f32_from_bf16(static_cast<uint16_t>(b));
    EXPECT_EQ(bits_of(got), b << 16) << std::hex << b;
  }
}

TEST(Bf16, ExactValuesRoundTrip) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float x = float_of(b << 16);
    if (std::isnan(x)) continue;
    ASSERT_EQ(bf16_from_f32(x), b) << std::hex << b;  // ±0, subnormals, normals, ±Inf
  }
}

TEST(Bf16, TiesRoundToEven) {
  // x = upper half h followed by exactly 0x8000: halfway between h and h+1.
  for (uint32_t h : {0x0000u, 0x0001u, 0x3F80u, 0x3F81u, 0x4049u, 0x0080u, 0x7F7Eu, 0xBF80u, 0xBF81u}) {
    const uint32_t want = (h & 1u) ? h + 1 : h;
    EXPECT_EQ(bf16_from_f32(float_of((h << 16) | 0x8000u)), want) << std::hex << h;
    EXPECT_EQ(bf16_from_f32(float_of((h << 16) | 0x7FFFu)), h) << std::hex << h;      // just below the tie
    EXPECT_EQ(bf16_from_f32(float_of((h << 16) | 0x8001u)), h + 1) << std::hex << h;  // just above
  }
  EXPECT_EQ(bf16_from_f32(1.00390625f), 0x3F80);  // 1 + 2^-8: tie between 1 and 1 + 2^-7, even is 1
}

TEST(Bf16, OverflowRoundsToInfinity) {
  EXPECT_EQ(bf16_from_f32(std::numeric_limits<float>::max()), 0x7F80);   // beyond max + half ulp
  EXPECT_EQ(bf16_from_f32(-std::numeric_limits<float>::max()), 0xFF80);
  EXPECT_EQ(bf16_from_f32(float_of(0x7F7F8000u)), 0x7F80);  // tie above the largest (odd) bf16 -> Inf
  EXPECT_EQ(bf16_from_f32(float_of(0x7F7F7FFFu)), 0x7F7F);  // below the tie: largest finite bf16
  EXPECT_EQ(bf16_from_f32(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(bf16_from_f32(-std::numeric_limits<float>::infinity()), 0xFF80);
}

TEST(Bf16, NanStaysNanWithItsSign) {
  // 0x7F800001 would truncate to Inf: the payload lives only in the discarded half.
  for (uint32_t u : {0x7FC00000u, 0x7F800001u, 0x7F80FFFFu, 0x7FFFFFFFu, 0xFFC00000u, 0xFF800001u}) {
    const uint16_t b = bf16_from_f32(float_of(u));
    EXPECT_TRUE(std::isnan(f32_from_bf16(b))) << std::hex << u;
    EXPECT_EQ(b >> 15, u >> 31) << std::hex << u;
  }
}

TEST(Bf16, MatchesRoundToNearestEvenOverAFloatSweep) {
  // Every 257th float32 bit pattern (~16.7M inputs, every exponent, both signs) against the oracle.
  int64_t mismatches = 0;
  for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 257) {
    const float x = float_of(static_cast<uint32_t>(u));
    if (std::isnan(x)) continue;
    if (bf16_from_f32(x) != oracle::bf16_encode(x) && ++mismatches <= 10) {
      ADD_FAILURE() << "bits " << std::hex << u << ": got " << bf16_from_f32(x) << ", oracle " << oracle::bf16_encode(x);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace nibble::quant
