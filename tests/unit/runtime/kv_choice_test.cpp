// resolve_kv_choice: what `--kv-dtype auto --rotate auto` (the commands' defaults) picks per head_dim,
// that explicit names win, and that impossible combinations are rejected naming the problem.
#include "runtime/kv_choice.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace nibble::runtime {
namespace {

using quant::KvDtype;
using quant::Rotation;

TEST(KvChoice, AutoIsFp8WithHadamardWhereHeadDimIsAPowerOfTwoElseBf16) {
  EXPECT_EQ(kRecommendedDtype, KvDtype::kFP8);  // docs/ACCURACY.md's recommendation
  EXPECT_EQ(kUnrotatedDtype, KvDtype::kBF16);
  for (int64_t d : {8, 16, 64, 128, 256}) {
    const KvChoice c = resolve_kv_choice("auto", "auto", d);
    EXPECT_EQ(c.dtype, KvDtype::kFP8) << d;
    EXPECT_EQ(c.rotation, Rotation::kHadamard) << d;
  }
  for (int64_t d : {24, 80, 96, 112}) {  // no rotation possible: bf16, not outlier-fragile plain fp8
    const KvChoice c = resolve_kv_choice("auto", "auto", d);
    EXPECT_EQ(c.dtype, KvDtype::kBF16) << d;
    EXPECT_EQ(c.rotation, Rotation::kNone) << d;
  }
  // An explicit --rotate none keeps the dtype rule of the head_dim (fp8 at a power of two).
  EXPECT_EQ(resolve_kv_choice("auto", "none", 80).dtype, KvDtype::kBF16);
}

TEST(KvChoice, ExplicitNamesWin) {
  const KvChoice f32 = resolve_kv_choice("f32", "auto", 64);
  EXPECT_EQ(f32.dtype, KvDtype::kF32);
  EXPECT_EQ(f32.rotation, Rotation::kNone);  // auto rotates only quantized formats
  const KvChoice bf16 = resolve_kv_choice("bf16", "auto", 128);
  EXPECT_EQ(bf16.dtype, KvDtype::kBF16);
  EXPECT_EQ(bf16.rotation, Rotation::kNone);
  const KvChoice k8v4 = resolve_kv_choice("k8v4", "auto", 128);
  EXPECT_EQ(k8v4.dtype, KvDtype::kK8V4);
  EXPECT_EQ(k8v4.rotation, Rotation::kHadamard);
  const KvChoice plain = resolve_kv_choice("auto", "none", 128);
  EXPECT_EQ(plain.dtype, KvDtype::kFP8);
  EXPECT_EQ(plain.rotation, Rotation::kNone);
  const KvChoice rotated_bf16 = resolve_kv_choice("bf16", "hadamard", 64);
  EXPECT_EQ(rotated_bf16.rotation, Rotation::kHadamard);
  EXPECT_EQ(resolve_kv_choice("nvfp4", "none", 80).dtype, KvDtype::kNVFP4);
}

void expect_error_naming(const char* dtype, const char* rotate, int64_t head_dim, const std::string& needle) {
  try {
    resolve_kv_choice(dtype, rotate, head_dim);
    FAIL() << "accepted --kv-dtype " << dtype << " --rotate " << rotate << " at head_dim " << head_dim;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(KvChoice, RejectsUnknownNamesAndImpossibleChoices) {
  expect_error_naming("int4", "auto", 64, "int4");
  expect_error_naming("auto", "givens", 64, "givens");
  expect_error_naming("nvfp4", "none", 8, "multiple of 16");
  expect_error_naming("k8v4", "auto", 24, "multiple of 16");
  expect_error_naming("bf16", "hadamard", 80, "power-of-two");
  expect_error_naming("auto", "auto", 0, "head_dim");
}

}  // namespace
}  // namespace nibble::runtime
