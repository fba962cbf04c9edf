// cache/kv_scales_file.h: scales from amax, the JSON round trip, the per-dtype choice of scale,
// and every validation error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "cache/kv_scales_file.h"
#include "common/error.h"
#include "support/expect_error.h"

namespace nibble::cache {
namespace {

using test_support::expect_error;

using quant::KvDtype;
using quant::Rotation;

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("nibble_kv_scales_" + std::to_string(::getpid()) + "_" + name);
}

std::filesystem::path write_text(const std::string& name, const std::string& text) {
  const auto p = temp_file(name);
  std::ofstream(p) << text;
  return p;
}

const char* kLayer = R"({"k_amax": 12.0, "v_amax": 3.0, "k_scale_nvfp4": 0.25, "v_scale_nvfp4": 0.5,
                          "k_scale_fp8": 2.0, "v_scale_fp8": 4.0})";

std::string file_with(const std::string& layers, const std::string& rotation = "none") {
  return R"({"model": "m", "rotation": ")" + rotation + R"(", "layers": [)" + layers + "]}";
}

TEST(KvScalesFile, ScalesFromAmaxAreAmaxOverFormatMaximum) {
  const KvScalesFile f = kv_scales_from_amax("m", Rotation::kHadamard, {2688.0f, 1.0f}, {26.88f, 448.0f});
  ASSERT_EQ(f.layers.size(), 2u);
  EXPECT_FLOAT_EQ(f.layers[0].k_scale_nvfp4, 1.0f);  // 2688 = 6 · 448
  EXPECT_FLOAT_EQ(f.layers[0].k_scale_fp8, 6.0f);
  EXPECT_FLOAT_EQ(f.layers[0].v_scale_nvfp4, 0.01f);
  EXPECT_FLOAT_EQ(f.layers[1].v_scale_fp8, 1.0f);
  EXPECT_FLOAT_EQ(f.layers[1].k_scale_nvfp4, 1.0f / 2688.0f);
  expect_error([] { kv_scales_from_amax("m", Rotation::kNone, {0.0f}, {1.0f}); }, "layers[0].k_scale_nvfp4");
  expect_error([] { kv_scales_from_amax("m", Rotation::kNone, {1.0f}, {std::nanf("")}); }, "v_amax");
}

TEST(KvScalesFile, RoundTripAndSelectionByElementFormat) {
  const KvScalesFile f = kv_scales_from_amax("stories", Rotation::kHadamard, {3.0f, 5.5f}, {0.75f, 9.0f});
  const auto path = temp_file("roundtrip.json");
  write_kv_scales_file(path, f);
  const KvScalesFile back = read_kv_scales_file(path);
  EXPECT_EQ(back.model, "stories");
  EXPECT_EQ(back.rotation, Rotation::kHadamard);
  ASSERT_EQ(back.layers.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back.layers[i].k_amax, f.layers[i].k_amax);
    EXPECT_EQ(back.layers[i].v_scale_nvfp4, f.layers[i].v_scale_nvfp4);
    EXPECT_EQ(back.layers[i].k_scale_fp8, f.layers[i].k_scale_fp8);
  }
  const KvScalesUse use{.num_layers = 2, .dtype = KvDtype::kNVFP4, .rotation = Rotation::kHadamard};
  const KvGlobalScales nv = load_kv_global_scales(path, use);
  EXPECT_EQ(nv.k, (std::vector<float>{3.0f / 2688.0f, 5.5f / 2688.0f}));
  EXPECT_EQ(nv.v, (std::vector<float>{0.75f / 2688.0f, 9.0f / 2688.0f}));
  KvScalesUse fp8 = use;
  fp8.dtype = KvDtype::kFP8;
  EXPECT_EQ(load_kv_global_scales(path, fp8).k, (std::vector<float>{3.0f / 448.0f, 5.5f / 448.0f}));
  KvScalesUse k8v4 = use;
  k8v4.dtype = KvDtype::kK8V4;  // K fp8, V nvfp4
  const KvGlobalScales mixed = load_kv_global_scales(path, k8v4);
  EXPECT_EQ(mixed.k, (std::vector<float>{3.0f / 448.0f, 5.5f / 448.0f}));
  EXPECT_EQ(mixed.v, (std::vector<float>{0.75f / 2688.0f, 9.0f / 2688.0f}));
  KvScalesUse bf16 = use;
  bf16.dtype = KvDtype::kBF16;  // no global scale
  EXPECT_EQ(load_kv_global_scales(path, bf16).v, (std::vector<float>{1.0f, 1.0f}));
  std::filesystem::remove(path);
}

TEST(KvScalesFile, ReadsTheDocumentedFieldsVerbatim) {
  const auto path = write_text("verbatim.json", file_with(kLayer));
  const KvGlobalScales g = load_kv_global_scales(path, {.num_layers = 1, .dtype = KvDtype::kK8V4});
  EXPECT_EQ(g.k[0], 2.0f);   // k_scale_fp8
  EXPECT_EQ(g.v[0], 0.5f);   // v_scale_nvfp4
  std::filesystem::remove(path);
}

TEST(KvScalesFile, RejectsMismatchesWithTheRun) {
  const auto path = write_text("mismatch.json", file_with(std::string(kLayer) + "," + kLayer));
  expect_error([&] { load_kv_global_scales(path, {.num_layers = 5, .dtype = KvDtype::kNVFP4}); },
               "scales for 2 layers, the model has 5");
  expect_error(
      [&] {
        load_kv_global_scales(path, {.num_layers = 2, .dtype = KvDtype::kNVFP4, .rotation = Rotation::kHadamard});
      },
      "calibrated with rotation 'none', this run uses 'hadamard'");
  std::filesystem::remove(path);
}

TEST(KvScalesFile, RejectsMalformedFiles) {
  struct Bad {
    std::string name, text, message;
  };
  auto layer_with = [](const std::string& key, const std::string& value) {
    std::string l = kLayer;
    const size_t at = l.find("\"" + key + "\": ");
    const size_t begin = at + key.size() + 4;
    const size_t end = l.find_first_of(",}", begin);
    return l.substr(0, begin) + value + l.substr(end);
  };
  const Bad cases[] = {
      {"json", "{\"rotation\": ", "malformed JSON"},
      {"array", "[1, 2]", "expected a JSON object"},
      {"norot", R"({"layers": [)" + std::string(kLayer) + "]}", "missing string field \"rotation\""},
      {"badrot", file_with(kLayer, "givens"), "rotation 'givens' is not none or hadamard"},
      {"nolayers", R"({"rotation": "none", "layers": []})", "\"layers\" must be a non-empty array"},
      {"layernotobj", file_with("3"), "layers[0] is not an object"},
      {"missing", file_with(R"({"k_amax": 1})"), "layers[0] has no \"v_amax\""},
      {"string", file_with(layer_with("k_scale_fp8", "\"2\"")), "layers[0].k_scale_fp8 is not a number"},
      {"zero", file_with(layer_with("v_scale_fp8", "0")), "layers[0].v_scale_fp8 = 0 is not a finite scale"},
      {"tiny", file_with(layer_with("k_scale_nvfp4", "1e-31")), "layers[0].k_scale_nvfp4"},
      {"huge", file_with(layer_with("v_scale_nvfp4", "1e31")), "layers[0].v_scale_nvfp4"},
      {"inf", file_with(layer_with("k_scale_fp8", "1e39")), "layers[0].k_scale_fp8 = inf"},  // overflows float
      {"negative", file_with(layer_with("k_scale_nvfp4", "-0.25")), "layers[0].k_scale_nvfp4 = -0.25"},
      {"negamax", file_with(layer_with("v_amax", "-1")), "layers[0].v_amax = -1"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.name);
    const auto path = write_text(b.name + ".json", b.text);
    expect_error([&] { read_kv_scales_file(path); }, b.message);
    expect_error([&] { read_kv_scales_file(path); }, path.string());
    std::filesystem::remove(path);
  }
  expect_error([] { read_kv_scales_file("/nonexistent/kv_scales.json"); },
               "cannot read KV scales file /nonexistent/kv_scales.json");
}

}  // namespace
}  // namespace nibble::cache
