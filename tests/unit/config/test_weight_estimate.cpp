// Parameter counts estimated from the geometry against independent figures: the totals Hugging Face
// publishes for these checkpoints (the sum of their safetensors tensors), and for stories260k the
// sum of the shapes in its own model.safetensors header, read here.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config_test_util.h"

namespace nibble::config {
namespace {

using testing::load;

TEST(WeightEstimate, PublishedParameterCounts) {
  // Exact totals of the published checkpoints (the "params" figure on each Hugging Face model page).
  EXPECT_EQ(estimate_parameter_count(load("llama-3-8b.json")), 8'030'261'248);
  EXPECT_EQ(estimate_parameter_count(load("llama-3.1-8b-instruct.json")), 8'030'261'248);
  EXPECT_EQ(estimate_parameter_count(load("mistral-7b-v0.1.json")), 7'241'732'096);
  EXPECT_EQ(estimate_parameter_count(load("qwen2.5-7b.json")), 7'615'616'512);
  EXPECT_EQ(estimate_parameter_count(load("qwen3-8b.json")), 8'190'735'360);
}

TEST(WeightEstimate, BytesFollowTorchDtype) {
  const ModelConfig c = load("llama-3-8b.json");  // bfloat16
  EXPECT_EQ(estimate_weight_bytes(c), 2 * 8'030'261'248);
  EXPECT_EQ(estimate_weight_bytes(c, 1), 8'030'261'248);
  EXPECT_THROW(estimate_weight_bytes(c, 0), nibble::Error);
}

TEST(WeightEstimate, HybridMoeIsAboutItsAdvertisedSize) {
  // Qwen3-Next-80B-A3B: "80B parameters in total" on the model card; the estimate leaves out the
  // multi-token-prediction layer, so it must land just under 80B.
  const int64_t next = estimate_parameter_count(load("qwen3-next-80b-a3b.json"));
  EXPECT_GT(next, 78'500'000'000);
  EXPECT_LT(next, 80'000'000'000);
  // Qwen3.8-27B-style text model: "27B" with a vision tower and MTP layer the estimate leaves out.
  const int64_t dense_hybrid = estimate_parameter_count(load("qwen3.8-27b-style.json"));
  EXPECT_GT(dense_hybrid, 26'000'000'000);
  EXPECT_LT(dense_hybrid, 27'500'000'000);
}

// Sum of element counts over every tensor in a safetensors file's JSON header.
int64_t safetensors_parameter_count(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), sizeof header_bytes);  // little-endian u64
  std::string header(header_bytes, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_bytes));
  const auto j = nlohmann::json::parse(header);
  int64_t total = 0;
  for (const auto& [name, tensor] : j.items()) {
    if (name == "__metadata__") continue;
    int64_t n = 1;
    for (int64_t d : tensor.at("shape")) n *= d;
    total += n;
  }
  return total;
}

TEST(WeightEstimate, Stories260KMatchesItsCheckpoint) {
  const auto dir = std::filesystem::path(NIBBLE_SOURCE_DIR) / "models/stories260k";
  const ModelConfig c = load_model_config(dir / "config.json");
  const int64_t in_file = safetensors_parameter_count(dir / "model.safetensors");
  EXPECT_EQ(estimate_parameter_count(c), in_file);
  EXPECT_EQ(estimate_weight_bytes(c), 4 * in_file);  // float32
}

}  // namespace
}  // namespace nibble::config
