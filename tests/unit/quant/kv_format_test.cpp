// Head vectors in every element format (quant/kv_format.h): byte counts, quantize/dequantize round
// trips with error bounds derived from each format's precision, names and validation errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "quant/kv_format.h"
#include "support/expect_error.h"
#include "unit/quant/oracle.h"

namespace nibble::quant {
namespace {

using test_support::expect_error;

constexpr ElemFormat kAllFormats[] = {ElemFormat::kF32, ElemFormat::kBF16, ElemFormat::kFP8, ElemFormat::kNVFP4};

TEST(KvFormat, BytesPerHeadVector) {
  // DESIGN.md: f32 4d, bf16 2d, fp8 d, nvfp4 d/2 codes + d/16 E4M3 scales.
  EXPECT_EQ(head_vector_bytes(ElemFormat::kF32, 128), 512);
  EXPECT_EQ(head_vector_bytes(ElemFormat::kBF16, 128), 256);
  EXPECT_EQ(head_vector_bytes(ElemFormat::kFP8, 128), 128);
  EXPECT_EQ(data_bytes(ElemFormat::kNVFP4, 128), 64);
  EXPECT_EQ(scale_bytes(ElemFormat::kNVFP4, 128), 8);
  EXPECT_EQ(head_vector_bytes(ElemFormat::kNVFP4, 128), 72);
  EXPECT_EQ(head_vector_bytes(ElemFormat::kNVFP4, 256), 144);
  for (ElemFormat f : {ElemFormat::kF32, ElemFormat::kBF16, ElemFormat::kFP8}) EXPECT_EQ(scale_bytes(f, 128), 0);
}

TEST(KvFormat, Nvfp4IsNineSixteenthsOfFp8) {
  // (8 + 1)/16 = 0.5625 for every head_dim nvfp4 accepts; the seed's 4 heads × 256 × 16 layers:
  // 32,768 B per token in fp8, 18,432 B in nvfp4 (K and V).
  for (int64_t d = 16; d <= 1024; d += 16) {
    EXPECT_EQ(16 * head_vector_bytes(ElemFormat::kNVFP4, d), 9 * head_vector_bytes(ElemFormat::kFP8, d)) << d;
    EXPECT_DOUBLE_EQ(static_cast<double>(head_vector_bytes(ElemFormat::kNVFP4, d)) /
                         static_cast<double>(head_vector_bytes(ElemFormat::kFP8, d)),
                     0.5625);
  }
  EXPECT_EQ(16 * 4 * 2 * head_vector_bytes(ElemFormat::kFP8, 256), 32768);
  EXPECT_EQ(16 * 4 * 2 * head_vector_bytes(ElemFormat::kNVFP4, 256), 18432);
}

TEST(KvFormat, KvDtypesPairKeyAndValueFormats) {
  EXPECT_EQ(kv_format(KvDtype::kK8V4).k, ElemFormat::kFP8);
  EXPECT_EQ(kv_format(KvDtype::kK8V4).v, ElemFormat::kNVFP4);
  EXPECT_EQ(kv_format(KvDtype::kNVFP4).k, ElemFormat::kNVFP4);
  EXPECT_EQ(kv_format(KvDtype::kBF16).v, ElemFormat::kBF16);
  EXPECT_TRUE(uses_global_scale(ElemFormat::kFP8));
  EXPECT_TRUE(uses_global_scale(ElemFormat::kNVFP4));
  EXPECT_FALSE(uses_global_scale(ElemFormat::kBF16));
  EXPECT_FALSE(uses_global_scale(ElemFormat::kF32));
}

// One head vector through quantize_head_vector / dequantize_head_vector.
std::vector<float> roundtrip(ElemFormat f, const std::vector<float>& x, float g, std::vector<uint8_t>* scales_out = nullptr) {
  const int d = static_cast<int>(x.size());
  std::vector<float> data_words((data_bytes(f, d) + 3) / 4);  // [data_bytes] float-aligned
  std::vector<uint8_t> scales(scale_bytes(f, d));              // [d/16]
  auto* data = reinterpret_cast<uint8_t*>(data_words.data());
  quantize_head_vector(f, x.data(), d, g, data, scales.data());
  std::vector<float> out(d);
  dequantize_head_vector(f, data, scales.data(), d, g, out.data());
  if (scales_out) *scales_out = scales;
  return out;
}

std::vector<float> test_vector(int d, std::mt19937& rng, float magnitude) {
  std::normal_distribution<float> normal(0.0f, magnitude);
  std::vector<float> x(d);
  for (float& v : x) v = normal(rng);
  x[d / 3] *= 20.0f;  // an outlier, as real K vectors have
  return x;
}

TEST(KvFormat, F32RoundTripIsExact) {
  std::mt19937 rng(1);
  const std::vector<float> x = test_vector(128, rng, 3.0f);
  const std::vector<float> out = roundtrip(ElemFormat::kF32, x, 1.0f);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(oracle::bits_of(out[i]), oracle::bits_of(x[i]));
}

TEST(KvFormat, Bf16RoundTripWithinHalfAnUlp) {
  // 8 significant bits: |x̂ - x| <= 2^-8·|x|, and the codes are the bf16 oracle's.
  std::mt19937 rng(2);
  for (int d : {16, 64, 128, 256}) {
    const std::vector<float> x = test_vector(d, rng, 5.0f);
    const std::vector<float> out = roundtrip(ElemFormat::kBF16, x, 1.0f);
    for (int i = 0; i < d; ++i) {
      EXPECT_LE(std::fabs(out[i] - x[i]), std::ldexp(std::fabs(x[i]), -8)) << i;
      EXPECT_EQ(oracle::bits_of(out[i]), static_cast<uint32_t>(oracle::bf16_encode(x[i])) << 16) << i;
    }
  }
}

TEST(KvFormat, Fp8RoundTripWithinHalfAnUlpOfTheScaledValue) {
  // 4 significant bits: |x/g| in [2^-6, 448] -> relative error <= 2^-4; below 2^-6 the subnormal
  // step 2^-9 bounds the error by 2^-10·g; beyond 448·g it saturates. (Float32 rounding of x/g and
  // of q·g adds at most a few ulps, covered by the 1e-6 relative slack.)
  std::mt19937 rng(3);
  for (float g : {1.0f, 0.01f, 2.5f}) {
    for (int d : {16, 128}) {
      const std::vector<float> x = test_vector(d, rng, 40.0f * g);
      const std::vector<float> out = roundtrip(ElemFormat::kFP8, x, g);
      for (int i = 0; i < d; ++i) {
        const double a = std::fabs(static_cast<double>(x[i]) / g);
        const double err = std::fabs(static_cast<double>(out[i]) - x[i]);
        if (a > 448.0) {
          EXPECT_EQ(std::fabs(out[i]), 448.0f * g) << "saturated, g = " << g;
        } else if (a >= 0.015625) {
          EXPECT_LE(err, std::fabs(x[i]) * (0.0625 + 1e-6)) << "g = " << g << ", x = " << x[i];
        } else {
          EXPECT_LE(err, std::ldexp(1.0, -10) * g * (1 + 1e-6)) << "g = " << g << ", x = " << x[i];
        }
        EXPECT_EQ(out[i], f32_from_e4m3(oracle::e4m3_encode(x[i] / g)) * g) << i;
      }
    }
  }
}

TEST(KvFormat, Nvfp4RoundTripWithinHalfAStepOfItsBlock) {
  // Within a block of scale s, E2M1 steps are at most 2·s·g wide (4 -> 6), so |x̂ - x| <= s·g unless
  // the element clamps at 6·s·g (only when the scale rounded down): then |x| - 6·s·g.
  std::mt19937 rng(4);
  for (float g : {1.0f, 0.05f, 7.0f}) {
    for (int d : {16, 64, 128, 256}) {
      const std::vector<float> x = test_vector(d, rng, 2.0f * g);
      std::vector<uint8_t> scales;
      const std::vector<float> out = roundtrip(ElemFormat::kNVFP4, x, g, &scales);
      ASSERT_EQ(static_cast<int>(scales.size()), d / 16);
      for (int b = 0; b < d / 16; ++b) {
        const double step = static_cast<double>(f32_from_e4m3(scales[b])) * g;
        double amax = 0;
        for (int i = 16 * b; i < 16 * b + 16; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
        const double bound = std::max(step, amax - 6 * step) * (1 + 1e-6);
        for (int i = 16 * b; i < 16 * b + 16; ++i) {
          EXPECT_LE(std::fabs(static_cast<double>(out[i]) - x[i]), bound) << "g = " << g << ", element " << i;
        }
        // The scale is the oracle's e4m3(amax/6/g), and each block is independent of the others.
        EXPECT_EQ(scales[b], oracle::nvfp4_encode(x.data() + 16 * b, g).scale) << "block " << b;
      }
    }
  }
}

TEST(KvFormat, Nvfp4HeadVectorIsItsBlocksInOrder) {
  // quantize_head_vector lays block b's 8 bytes at data + 8b and its scale at scales[b].
  std::mt19937 rng(5);
  const std::vector<float> x = test_vector(64, rng, 1.0f);
  std::vector<uint8_t> data(32), scales(4);
  quantize_head_vector(ElemFormat::kNVFP4, x.data(), 64, 0.5f, data.data(), scales.data());
  for (int b = 0; b < 4; ++b) {
    const oracle::Nvfp4Block want = oracle::nvfp4_encode(x.data() + 16 * b, 0.5f);
    EXPECT_EQ(scales[b], want.scale);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(data[8 * b + i], oracle::nvfp4_packed_byte(want.codes, i)) << "block " << b << " byte " << i;
    }
  }
}

TEST(KvFormat, NanInOneBlockLeavesTheOthersAlone) {
  std::vector<float> x(32, 0.75f);
  x[5] = std::nanf("");
  const std::vector<float> out = roundtrip(ElemFormat::kNVFP4, x, 1.0f);
  for (int i = 0; i < 16; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
  for (int i = 16; i < 32; ++i) EXPECT_EQ(out[i], 0.75f) << i;  // 0.75 = 6 · 0.125, exact
  const std::vector<float> fp8 = roundtrip(ElemFormat::kFP8, x, 1.0f);
  EXPECT_TRUE(std::isnan(fp8[5]));
  EXPECT_EQ(fp8[4], 0.75f);
}

TEST(KvFormat, NamesParseBack) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4}) {
    EXPECT_EQ(parse_kv_dtype(kv_dtype_name(d)), d);
  }
  for (ElemFormat f : kAllFormats) EXPECT_EQ(parse_elem_format(elem_format_name(f)), f);
  EXPECT_EQ(parse_rotation("none"), Rotation::kNone);
  EXPECT_EQ(parse_rotation("hadamard"), Rotation::kHadamard);
  EXPECT_STREQ(kv_dtype_name(KvDtype::kK8V4), "k8v4");
}

TEST(KvFormat, UnknownNamesAreErrorsThatListTheValidOnes) {
  for (const char* bad : {"fp4", "", "NVFP4", "fp8 ", "int4"}) {
    expect_error([&] { parse_kv_dtype(bad); }, "unknown KV dtype");
    expect_error([&] { parse_kv_dtype(bad); }, "f32, bf16, fp8, nvfp4, k8v4");
  }
  expect_error([] { parse_elem_format("k8v4"); }, "unknown format 'k8v4'");
  expect_error([] { parse_rotation("walsh"); }, "unknown rotation 'walsh'");
}

TEST(KvFormat, ValidateHeadDim) {
  EXPECT_NO_THROW(validate_head_dim(KvDtype::kNVFP4, Rotation::kNone, 80));
  EXPECT_NO_THROW(validate_head_dim(KvDtype::kFP8, Rotation::kNone, 72));
  EXPECT_NO_THROW(validate_head_dim(KvDtype::kK8V4, Rotation::kHadamard, 128));
  EXPECT_NO_THROW(validate_head_dim(ElemFormat::kBF16, Rotation::kHadamard, 8));
  expect_error([] { validate_head_dim(KvDtype::kNVFP4, Rotation::kNone, 72); }, "multiple of 16");
  expect_error([] { validate_head_dim(KvDtype::kK8V4, Rotation::kNone, 24); }, "got 24");  // its values are nvfp4
  expect_error([] { validate_head_dim(KvDtype::kFP8, Rotation::kHadamard, 48); }, "power-of-two");
  expect_error([] { validate_head_dim(KvDtype::kNVFP4, Rotation::kHadamard, 80); }, "power-of-two head_dim, got 80");
  expect_error([] { validate_head_dim(KvDtype::kBF16, Rotation::kNone, 0); }, "positive");
  expect_error([] { validate_head_dim(ElemFormat::kF32, Rotation::kNone, -16); }, "positive, got -16");
}

}  // namespace
}  // namespace nibble::quant
