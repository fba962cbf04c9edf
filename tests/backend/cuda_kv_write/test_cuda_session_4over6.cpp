// End to end: a CUDA Session accepts the "4 over 6" nvfp4 block-scale rule and its logits follow the
// CPU Session's under the same rule, for committed Hugging Face fixtures (head_dim 64: the fused
// write kernel) with f32 weights, as chunked prefill then decode.
//
// Tolerance: 5e-3 of the logit scale, test_cuda_model's kQuantizedCacheTolerance for f32 weights and
// a quantized cache (derived in tests/backend/cuda_model/test_cuda_model.cpp): both backends store
// bit-identical codes for identical K/V (test_cuda_kv_write.cpp, test_cuda_backend_kv_write.cpp), but the
// K/V themselves differ by f32 summation order, so a rare element near a code boundary (or, under
// 4 over 6, a block near an err4/err6 tie) quantizes differently on the two sides.
// The CPU Session's logits under 4 over 6 must also differ from its amax/6 ones: the rule reaches
// the cache write through the Session.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda_common/cuda_test_util.h"
#include "runtime/forward_step.h"
#include "runtime/session.h"

namespace nibble::runtime {
namespace {

namespace fs = std::filesystem;
using quant::KvDtype;
using quant::Nvfp4ScaleRule;
using quant::Rotation;

constexpr double kQuantizedCacheTolerance = 5e-3;
const fs::path kFixtures = fs::path(NIBBLE_SOURCE_DIR) / "tests" / "data" / "hf_fixtures";

using cuda::test::logit_error;

// Prefill the first half of `ids` (chunks of 5, every token's logits), then decode the rest.
std::vector<float> run(LoadedModel& model, const SessionOptions& options, const std::vector<int32_t>& ids) {
  Session s(model, options);
  const size_t half = ids.size() / 2;
  std::vector<float> logits = s.prefill(std::span(ids).first(half), {.all_logits = true});
  for (size_t p = half; p < ids.size(); ++p) {
    const std::vector<float> l = s.decode(ids[p]);
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}

TEST(CudaSessionFourOverSix, LogitsFollowTheCpuSession) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (const char* arch : {"llama3_untied", "qwen3_qknorm"}) {
    const fs::path dir = kFixtures / arch;
    ASSERT_TRUE(fs::exists(dir / "prompts.json")) << "missing fixture " << dir;
    std::ifstream in(dir / "prompts.json");
    const auto prompts = nlohmann::json::parse(in)["prompts"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_FALSE(prompts.empty());
    // The longest prompt (40 tokens in both fixtures): 20 prefilled in chunks of 5, 20 decoded.
    const std::vector<int32_t>& ids =
        *std::max_element(prompts.begin(), prompts.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
    ASSERT_GE(ids.size(), 4u) << "the fixture's longest prompt is too short for prefill + decode";
    LoadedModel cpu = load_model({.dir = dir, .device = "cpu", .num_threads = 2, .progress = false});
    LoadedModel gpu = load_model({.dir = dir, .device = "cuda", .progress = false,
                                  .weights = backend::WeightPrecision::kF32});
    for (const auto& [dtype, rotation] : {std::pair{KvDtype::kNVFP4, Rotation::kHadamard},
                                          std::pair{KvDtype::kNVFP4, Rotation::kNone},
                                          std::pair{KvDtype::kK8V4, Rotation::kHadamard}}) {
      SCOPED_TRACE(std::string(arch) + " " + quant::kv_dtype_name(dtype) +
                   (rotation == Rotation::kHadamard ? " hadamard" : " none"));
      SessionOptions options{.kv_dtype = dtype, .rotation = rotation, .page_size = 16, .prefill_chunk = 5,
                             .nvfp4_scale_rule = Nvfp4ScaleRule::kFourOverSix};
      const std::vector<float> got = run(gpu, options, ids);
      const std::vector<float> want = run(cpu, options, ids);
      const double err = logit_error(got, want);
      std::printf("measured 4over6 %s %s rot %d: max err %.3e (bound %.1e)\n", arch, quant::kv_dtype_name(dtype),
                  static_cast<int>(rotation), err, kQuantizedCacheTolerance);
      EXPECT_LE(err, kQuantizedCacheTolerance) << "CUDA vs CPU session, both 4 over 6";
      options.nvfp4_scale_rule = Nvfp4ScaleRule::kAmaxOver6;
      EXPECT_GT(logit_error(run(cpu, options, ids), want), 0.0) << "4 over 6 changed no logit on the CPU";
    }
  }
}

}  // namespace
}  // namespace nibble::runtime
