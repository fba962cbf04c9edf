// The "4 over 6" nvfp4 block rule (quant/nvfp4.h): never a larger block error than the plain
// amax/6 rule, picks amax/4 where that is better, equals the plain rule where it should.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "quant/nvfp4.h"

namespace nibble::quant {
namespace {

using Block = std::array<float, kNvfp4Block>;

struct Quantized {
  std::array<uint8_t, kNvfp4BlockBytes> packed{};
  uint8_t scale = 0;
};

Quantized plain(const Block& x, float g) {
  Quantized q;
  q.scale = nvfp4_quantize_block(x.data(), g, q.packed.data());
  return q;
}
Quantized four_over_six(const Block& x, float g) {
  Quantized q;
  q.scale = nvfp4_quantize_block_4over6(x.data(), g, q.packed.data());
  return q;
}

// Squared error after dequantization, in double (independent of the float32 sum the rule uses).
double block_error(const Block& x, const Quantized& q, float g) {
  Block out{};
  nvfp4_dequantize_block(q.packed.data(), q.scale, g, out.data());
  double e = 0.0;
  for (int i = 0; i < kNvfp4Block; ++i) {
    const double diff = static_cast<double>(out[i]) - x[i];
    e += diff * diff;
  }
  return e;
}

bool same(const Quantized& a, const Quantized& b) { return a.scale == b.scale && a.packed == b.packed; }

TEST(Nvfp4FourOverSix, NeverWorseThanPlainOverManyRandomBlocks) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-6.0f, 6.0f);
  const float globals[] = {1.0f, 0.01f, 3.7e-3f, 2.5f};
  int picked_four = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const float magnitude = std::exp2(log_scale(rng));
    const float g = globals[trial % 4];
    Block x{};
    for (float& v : x) v = normal(rng) * magnitude;
    if (trial % 3 == 0) x[trial % kNvfp4Block] *= 8.0f;  // an outlier
    const Quantized p = plain(x, g), f = four_over_six(x, g);
    const double ep = block_error(x, p, g), ef = block_error(x, f, g);
    EXPECT_LE(ef, ep * (1.0 + 1e-5) + 1e-30) << "trial " << trial;
    if (!same(p, f)) {
      ++picked_four;
      // The other candidate is exactly amax/4's: s = e4m3(amax/4 / g).
      float amax = 0.0f;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      EXPECT_EQ(f.scale, e4m3_from_f32((amax / 4.0f) / g)) << "trial " << trial;
      EXPECT_LT(ef, ep) << "trial " << trial;
    }
  }
  // Both rules win often on Gaussian blocks; a rule that never switches would not test anything.
  EXPECT_GT(picked_four, 1000);
  EXPECT_LT(picked_four, 19000);
}

TEST(Nvfp4FourOverSix, PicksAmaxOverFourWhereThatIsBetter) {
  // Every element 4: amax/6 = 0.667 rounds to the E4M3 0.6875, 4/0.6875 = 5.8 → E2M1 6 → 4.125
  // (error 16 × 0.125²). amax/4 = 1 is exact in E4M3 and 4/1 = 4 is an E2M1 code: error 0.
  Block x{};
  x.fill(4.0f);
  const Quantized p = plain(x, 1.0f), f = four_over_six(x, 1.0f);
  EXPECT_FLOAT_EQ(f32_from_e4m3(p.scale), 0.6875f);
  EXPECT_NEAR(block_error(x, p, 1.0f), 16 * 0.125 * 0.125, 1e-9);
  EXPECT_EQ(f32_from_e4m3(f.scale), 1.0f);
  Block out{};
  nvfp4_dequantize_block(f.packed.data(), f.scale, 1.0f, out.data());
  for (float v : out) EXPECT_EQ(v, 4.0f);
}

TEST(Nvfp4FourOverSix, EqualsPlainRuleWhenAmaxOverSixIsExactOrTied) {
  // amax/6 = 1: every element on the E2M1 grid, error 0; amax/4 cannot do better (tie → amax/6).
  const Block exact = {6, -3, 1, 0.5f, 0, -6, 4, 2, 1.5f, -1, 0, 0, 3, -0.5f, 2, -4};
  EXPECT_TRUE(same(plain(exact, 1.0f), four_over_six(exact, 1.0f)));
  EXPECT_EQ(block_error(exact, four_over_six(exact, 1.0f), 1.0f), 0.0);
  // The zero block.
  const Block zero{};
  EXPECT_TRUE(same(plain(zero, 1.0f), four_over_six(zero, 1.0f)));
  // A NaN anywhere: the plain rule's NaN scale is kept.
  Block nan_block = exact;
  nan_block[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(same(plain(nan_block, 1.0f), four_over_six(nan_block, 1.0f)));
  // Inf: errors are not numbers, so amax/6 is kept.
  Block inf_block = exact;
  inf_block[2] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(same(plain(inf_block, 1.0f), four_over_six(inf_block, 1.0f)));
}

TEST(Nvfp4FourOverSix, SquaredErrorMatchesDequantization) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  Block x{};
  for (float& v : x) v = normal(rng);
  const Quantized p = plain(x, 0.5f);
  EXPECT_NEAR(nvfp4_block_squared_error(x.data(), p.packed.data(), p.scale, 0.5f), block_error(x, p, 0.5f),
              1e-5 * block_error(x, p, 0.5f));
}

}  // namespace
}  // namespace nibble::quant
