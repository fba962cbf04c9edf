// F16 and BF16 -> float32, checked against the IEEE 754 definition (and the compiler's own
// _Float16 where it has one) rather than against the code under test.
#include "model/tensor_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/error.h"

namespace nibble::model {
namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// binary16 from its definition: (-1)^s · 2^(e-15) · (1 + m/2^10) for 0 < e < 31,
// (-1)^s · 2^-14 · (m/2^10) for e = 0, ±Inf / NaN for e = 31.
double f16_textbook(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double sign = s ? -1.0 : 1.0;
  if (e == 31) return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::nan("");
  if (e == 0) return sign * std::ldexp(m / 1024.0, -14);
  return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}

TEST(TensorConvert, F16KnownValues) {
  EXPECT_EQ(f32_from_f16(0x3C00), 1.0f);
  EXPECT_EQ(f32_from_f16(0xC000), -2.0f);
  EXPECT_EQ(f32_from_f16(0x3555), 0.333251953125f);  // nearest half to 1/3
  EXPECT_EQ(f32_from_f16(0x7BFF), 65504.0f);          // largest finite half
  EXPECT_EQ(f32_from_f16(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f32_from_f16(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_from_f16(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f32_from_f16(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(bits_of(f32_from_f16(0x0000)), 0x00000000u);
  EXPECT_EQ(bits_of(f32_from_f16(0x8000)), 0x80000000u);  // -0 keeps its sign
  EXPECT_EQ(f32_from_f16(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f32_from_f16(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f32_from_f16(0x7E00)));
  EXPECT_TRUE(std::isnan(f32_from_f16(0x7C01)));  // signalling-pattern NaN is still NaN
  EXPECT_TRUE(std::isnan(f32_from_f16(0xFE00)));
  EXPECT_TRUE(std::signbit(f32_from_f16(0xFE00)));
}

TEST(TensorConvert, F16AllBitPatternsMatchTheDefinition) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float actual = f32_from_f16(static_cast<uint16_t>(h));
    const double expected = f16_textbook(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(actual)) << std::hex << h;
      ASSERT_EQ(std::signbit(actual), (h & 0x8000) != 0) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(actual), expected) << std::hex << h;
      ASSERT_EQ(std::signbit(actual), (h & 0x8000) != 0) << std::hex << h;
    }
#if defined(__FLT16_MAX__)
    // Second oracle: the compiler's binary16 type.
    _Float16 half;
    const uint16_t h16 = static_cast<uint16_t>(h);
    std::memcpy(&half, &h16, sizeof half);
    if (!std::isnan(expected)) ASSERT_EQ(actual, static_cast<float>(half)) << std::hex << h;
#endif
  }
}

TEST(TensorConvert, ConvertsUnalignedBuffers) {
  // F16 [1.0, -0.5, 2^-24, -Inf] and BF16 [1.0, -3.0, 2^-130 (subnormal float)], one byte past an
  // aligned start.
  const uint16_t f16[] = {0x3C00, 0xB800, 0x0001, 0xFC00};
  const uint16_t bf16[] = {0x3F80, 0xC040, 0x0008};
  std::vector<std::byte> buffer(1 + sizeof f16);
  std::memcpy(buffer.data() + 1, f16, sizeof f16);
  std::vector<float> out(4);
  convert_to_f32(Dtype::kF16, buffer.data() + 1, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -0.5f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(out[3], -std::numeric_limits<float>::infinity());

  std::memcpy(buffer.data() + 1, bf16, sizeof bf16);
  out.assign(3, 0.0f);
  convert_to_f32(Dtype::kBF16, buffer.data() + 1, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -130));

  const float f32[] = {0.1f, -7.0f};
  std::memcpy(buffer.data() + 1, f32, sizeof f32);
  out.assign(2, 0.0f);
  convert_to_f32(Dtype::kF32, buffer.data() + 1, out);
  EXPECT_EQ(out[0], 0.1f);
  EXPECT_EQ(out[1], -7.0f);
}

TEST(TensorConvert, RejectsNonWeightDtypes) {
  std::vector<std::byte> buffer(8);
  std::vector<float> out(1);
  EXPECT_THROW(convert_to_f32(Dtype::kI64, buffer.data(), out), Error);
}

}  // namespace
}  // namespace nibble::model
