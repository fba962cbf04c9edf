// NVFP4 blocks (quant/nvfp4.h) against the brute-force oracle of oracle.h, which follows DESIGN.md's
// order of operations in float32: t = amax/6; s = e4m3(t/g); q_i = e2m1(x_i/(s·g)); x̂_i = q_i·s·g.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "quant/nvfp4.h"
#include "unit/quant/oracle.h"

namespace nibble::quant {
namespace {

using Block = std::array<float, kNvfp4Block>;  // [16] float32, one block of a head vector
using Packed = std::array<uint8_t, kNvfp4BlockBytes>;  // [8] bytes, element 2i in the low nibble

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Quantized {
  uint8_t scale;
  Packed packed;
};

Quantized quantize(const Block& x, float g) {
  Quantized q{};
  q.scale = nvfp4_quantize_block(x.data(), g, q.packed.data());
  return q;
}

Block dequantize(const Quantized& q, float g) {
  Block out{};
  nvfp4_dequantize_block(q.packed.data(), q.scale, g, out.data());
  return out;
}

// Packs the oracle's codes by the documented rule (oracle::nvfp4_packed_byte: element 8k+j upright,
// 8k+j+4 mirrored in byte 4k+j) and compares everything bit for bit: scale, packed bytes,
// dequantized floats.
void expect_matches_oracle(const Block& x, float g, const char* what) {
  const oracle::Nvfp4Block want = oracle::nvfp4_encode(x.data(), g);
  const Quantized got = quantize(x, g);
  ASSERT_EQ(got.scale, want.scale) << what << ", g = " << g << ", x[0] = " << x[0];
  for (int i = 0; i < kNvfp4BlockBytes; ++i) {
    ASSERT_EQ(got.packed[i], oracle::nvfp4_packed_byte(want.codes, i)) << what << ", g = " << g << ", byte " << i;
  }
  const Block out = dequantize(got, g);
  for (int i = 0; i < kNvfp4Block; ++i) {
    const float expected = oracle::nvfp4_decode(want.codes[i], want.scale, g);
    ASSERT_EQ(oracle::bits_of(out[i]), oracle::bits_of(expected)) << what << ", g = " << g << ", element " << i;
  }
}

TEST(Nvfp4, HandWorkedBlock) {
  // amax = 6 -> t = 1 -> s = e4m3(1) = 0x38; elements quantize against 1.0:
  //   6 -> 7, -0.5 -> 0x9, 1 -> 2, 0 -> 0, 2.9 -> 5 (3), -5.5 -> 0xF (6), 0.3 -> 1, 1.3 -> 3 (1.5)
  Block x{};
  const float head[8] = {6.0f, -0.5f, 1.0f, 0.0f, 2.9f, -5.5f, 0.3f, 1.3f};
  for (int i = 0; i < 8; ++i) x[i] = head[i];
  const Quantized q = quantize(x, 1.0f);
  EXPECT_EQ(q.scale, 0x38);
  // Byte j = element j upright (sign bit 7, magnitude bits 3..1) | element j+4 mirrored (sign bit 0,
  // e1 bit 4, e0 bit 5, m bit 6): 0x0E | 0x50, 0x82 | 0x71, 0x04 | 0x40, 0x00 | 0x60.
  const Packed want = {0x5E, 0xF3, 0x44, 0x60, 0, 0, 0, 0};
  EXPECT_EQ(q.packed, want);
  const Block out = dequantize(q, 1.0f);
  const float back[8] = {6.0f, -0.5f, 1.0f, 0.0f, 3.0f, -6.0f, 0.5f, 1.5f};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], back[i]) << i;
  for (int i = 8; i < 16; ++i) EXPECT_EQ(out[i], 0.0f) << i;
}

TEST(Nvfp4, PackingPlacesEachElementUprightOrMirrored) {
  // Element k alone at 6 (code 7: magnitude 111) with every other element 0: element 8g+j (j < 4)
  // sits upright in byte 4g+j (bits 3..1: 0x0E), element 8g+j+4 mirrored there (bits 4..6: 0x70).
  for (int k = 0; k < kNvfp4Block; ++k) {
    Block x{};
    x[k] = 6.0f;
    const Quantized q = quantize(x, 1.0f);
    const int byte = 4 * (k / 8) + k % 4;
    for (int i = 0; i < kNvfp4BlockBytes; ++i) {
      const uint8_t want = i == byte ? static_cast<uint8_t>(k % 8 < 4 ? 0x0E : 0x70) : 0x00;
      EXPECT_EQ(q.packed[i], want) << "element " << k << ", byte " << i;
    }
  }
  // The sign: bit 7 upright, bit 0 mirrored. Element 0 = -6 (code 0xF), element 4 = -1 (code 0xA:
  // magnitude 010, mirrored to bit 5).
  Block x{};
  x[0] = -6.0f;
  x[4] = -1.0f;
  EXPECT_EQ(quantize(x, 1.0f).packed[0], 0x8E | 0x01 | 0x20);
  // Element 1 = 0.5 (code 1: mantissa only) upright: bit 1; element 5 = 0.5 mirrored: bit 6.
  Block y{};
  y[1] = 0.5f;
  y[5] = 0.5f;
  y[15] = 6.0f;  // amax 6: scale 1
  const Quantized qy = quantize(y, 1.0f);
  EXPECT_EQ(qy.packed[1], 0x02 | 0x40);
  EXPECT_EQ(qy.packed[7], 0x70);  // element 15 = 8·1 + 3 + 4: mirrored in byte 7
}

TEST(Nvfp4, PackAndCodeAtInvertEachOther) {
  // Every code in every position, neighbours varied.
  for (int k = 0; k < kNvfp4Block; ++k) {
    for (uint8_t c = 0; c < 16; ++c) {
      uint8_t codes[kNvfp4Block];
      for (int i = 0; i < kNvfp4Block; ++i) codes[i] = static_cast<uint8_t>((i * 5 + c * 3) & 0xF);
      codes[k] = c;
      uint8_t packed[kNvfp4BlockBytes];
      nvfp4_pack_codes(codes, packed);
      for (int b = 0; b < kNvfp4BlockBytes; ++b) ASSERT_EQ(packed[b], oracle::nvfp4_packed_byte(codes, b));
      for (int i = 0; i < kNvfp4Block; ++i) {
        ASSERT_EQ(nvfp4_code_at(packed, i), codes[i]) << "element " << i;
        ASSERT_EQ(oracle::nvfp4_unpacked_code(packed, i), codes[i]) << "element " << i;
      }
    }
  }
}

TEST(Nvfp4, EveryElementTieRoundsToEven) {
  // amax = 12 -> t = 2 -> s = 2 exactly (g = 1): x_i / 2 hits every E2M1 midpoint exactly.
  const float mids[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const uint8_t even[7] = {0, 2, 2, 4, 4, 6, 6};
  Block x{};
  x[15] = 12.0f;
  for (int i = 0; i < 7; ++i) {
    x[i] = 2.0f * mids[i];
    x[7 + i] = -2.0f * mids[i];
  }
  const Quantized q = quantize(x, 1.0f);
  ASSERT_EQ(q.scale, 0x40);  // 2.0
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(oracle::nvfp4_unpacked_code(q.packed.data(), i), even[i]) << "tie " << mids[i];
    const uint8_t neg = oracle::nvfp4_unpacked_code(q.packed.data(), 7 + i);
    EXPECT_EQ(neg, 8 | even[i]) << "tie " << -mids[i];
  }
  expect_matches_oracle(x, 1.0f, "ties");
}

TEST(Nvfp4, ZeroBlocks) {
  const Block zeros{};
  Quantized q = quantize(zeros, 1.0f);
  EXPECT_EQ(q.scale, 0x00);
  EXPECT_EQ(q.packed, Packed{});
  for (float v : dequantize(q, 1.0f)) EXPECT_EQ(v, 0.0f);

  Block negative_zeros;
  negative_zeros.fill(-0.0f);
  q = quantize(negative_zeros, 0.5f);
  EXPECT_EQ(q.scale & 0x7F, 0x00);
  EXPECT_EQ(q.packed, Packed{});
  for (float v : dequantize(q, 0.5f)) EXPECT_EQ(v, 0.0f);
}

TEST(Nvfp4, ScaleThatRoundsToZeroZeroesTheBlock) {
  // amax = 6·2^-10 -> t = 2^-10, the tie between E4M3 0 and 2^-9: the even code 0 wins, so the
  // whole block is zero even though it is not.
  Block x{};
  x[0] = 6.0f * std::ldexp(1.0f, -10);
  x[1] = -2.0e-3f;
  Quantized q = quantize(x, 1.0f);
  EXPECT_EQ(q.scale, 0x00);
  EXPECT_EQ(q.packed, Packed{});
  for (float v : dequantize(q, 1.0f)) EXPECT_EQ(v, 0.0f);
  expect_matches_oracle(x, 1.0f, "scale rounds to zero");

  // One ulp more and the scale is the smallest subnormal 2^-9; x[0] / 2^-9 = 3.0000002 -> code 5.
  x[0] = std::nextafter(x[0], 1.0f);
  q = quantize(x, 1.0f);
  EXPECT_EQ(q.scale, 0x01);
  EXPECT_EQ(oracle::nvfp4_unpacked_code(q.packed.data(), 0), 5);
  expect_matches_oracle(x, 1.0f, "smallest subnormal scale");
}

TEST(Nvfp4, SubnormalScales) {
  // t/g = m·2^-9 for every subnormal mantissa m: the scale is code m and the amax element is 6.
  for (int m = 1; m <= 7; ++m) {
    Block x{};
    for (int i = 0; i < kNvfp4Block; ++i) x[i] = std::ldexp(static_cast<float>(m), -9) * (i % 7) * ((i & 1) ? -1 : 1);
    x[3] = 6.0f * std::ldexp(static_cast<float>(m), -9);
    const Quantized q = quantize(x, 1.0f);
    EXPECT_EQ(q.scale, m) << "m = " << m;
    EXPECT_EQ(oracle::nvfp4_unpacked_code(q.packed.data(), 3), 7) << "m = " << m;
    expect_matches_oracle(x, 1.0f, "subnormal scale");
  }
}

TEST(Nvfp4, GlobalScaleDividesTheBlockScale) {
  // With g = 1/64, amax = 6·2^-6 gives t/g = 1: scale 1.0, and x̂ = q·1·(1/64).
  const float g = 1.0f / 64.0f;
  Block x{};
  x[0] = 6.0f / 64.0f;
  x[1] = 1.0f / 64.0f;
  x[2] = -3.0f / 64.0f;
  const Quantized q = quantize(x, g);
  EXPECT_EQ(q.scale, 0x38);
  const Block out = dequantize(q, g);
  EXPECT_EQ(out[0], 6.0f / 64.0f);
  EXPECT_EQ(out[1], 1.0f / 64.0f);
  EXPECT_EQ(out[2], -3.0f / 64.0f);
  // With g = 1 the same block takes the scale t = 2^-6, the smallest normal E4M3 (code 0x08).
  EXPECT_EQ(quantize(x, 1.0f).scale, 0x08);
}

TEST(Nvfp4, NanAnywherePoisonsOnlyItsBlock) {
  for (int k = 0; k < kNvfp4Block; ++k) {
    for (float nan : {kNaN, -kNaN}) {
      Block x{};
      for (int i = 0; i < kNvfp4Block; ++i) x[i] = 0.1f * static_cast<float>(i + 1);
      x[k] = nan;
      const Quantized q = quantize(x, 1.0f);
      EXPECT_EQ(q.scale & 0x7F, 0x7F) << "NaN at " << k;
      for (float v : dequantize(q, 1.0f)) EXPECT_TRUE(std::isnan(v)) << "NaN at " << k;
    }
  }
}

TEST(Nvfp4, InfinitySaturates) {
  for (float inf : {kInf, -kInf}) {
    for (float g : {1.0f, 0.25f, 3.0f}) {
      Block x{};
      x[3] = inf;
      x[4] = 100.0f * g;   // 100/448 -> 0.223 -> code 0
      x[5] = -1500.0f * g;  // -1500/448 = -3.35 -> 3 -> code 0xD
      const Quantized q = quantize(x, g);
      EXPECT_EQ(q.scale, 0x7E) << "g = " << g;  // 448
      const Block out = dequantize(q, g);
      EXPECT_EQ(out[3], std::copysign(6.0f * 448.0f * g, inf)) << "g = " << g;
      EXPECT_EQ(out[4], 0.0f);
      EXPECT_EQ(out[5], -3.0f * 448.0f * g);
      expect_matches_oracle(x, g, "infinity");
    }
  }
}

TEST(Nvfp4, LargeBlocksSaturateTheScale) {
  // amax/6/g above 448: the scale saturates and the largest elements clamp to ±6·448·g.
  Block x{};
  x[0] = 1e6f;
  x[1] = -5000.0f;
  x[2] = 300.0f;
  const Quantized q = quantize(x, 1.0f);
  EXPECT_EQ(q.scale, 0x7E);
  EXPECT_EQ(dequantize(q, 1.0f)[0], 2688.0f);
  expect_matches_oracle(x, 1.0f, "saturated scale");
}

TEST(Nvfp4, RandomBlocksMatchTheOracleBitForBit) {
  std::mt19937 rng(20240611);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30), outlier_at(0, kNvfp4Block - 1);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const float globals[] = {1.0f, 0.5f, 1.0f / 448.0f, 0.0137f, 3.7f, 1000.0f, 1e-6f};
  int blocks = 0;
  for (float g : globals) {
    for (int trial = 0; trial < 3000; ++trial) {
      Block x{};
      const float magnitude = std::ldexp(1.0f, exponent(rng));
      switch (trial % 4) {
        case 0:  // Gaussian
          for (float& v : x) v = normal(rng) * magnitude;
          break;
        case 1:  // Gaussian with one outlier
          for (float& v : x) v = normal(rng) * magnitude;
          x[outlier_at(rng)] = 40.0f * magnitude;
          break;
        case 2:  // values on a coarse grid, so that exact ties between E2M1 neighbours occur
          for (float& v : x) v = std::round(unit(rng) * 24.0f) * 0.25f * magnitude;
          break;
        case 3:  // mixed exponents within a block
          for (float& v : x) v = unit(rng) * std::ldexp(1.0f, exponent(rng) / 3);
          break;
      }
      expect_matches_oracle(x, g, "random block");
      if (testing::Test::HasFatalFailure()) return;
      ++blocks;
    }
  }
  EXPECT_EQ(blocks, 7 * 3000);
}

}  // namespace
}  // namespace nibble::quant
