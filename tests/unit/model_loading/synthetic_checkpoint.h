#pragma once
// Small synthetic Hugging Face checkpoints written by the tests: config.json, the weights of every
// supported architecture under their HF names (sharded or not), and the value of every element
// from a formula, so loaded values can be checked against the formula rather than the loader.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "unit/model_loading/safetensors_writer.h"

namespace nibble::model::testing {

struct SyntheticModel {
  std::string architecture = "LlamaForCausalLM";  // config.json "architectures"[0]
  std::string model_type = "llama";
  int64_t vocab = 16;
  int64_t hidden = 8;
  int64_t intermediate = 12;
  int64_t layers = 2;
  int64_t heads = 2;
  int64_t kv_heads = 1;
  int64_t head_dim = 4;  // written explicitly (hidden / heads would also give 4)
  bool tied = false;
  bool biases = false;   // q/k/v biases (Qwen2 always has them)
  bool qk_norm = false;  // q_norm / k_norm (Qwen3)
  std::string dtype = "F32";  // every weight stored as this
  int shards = 1;             // > 1: model-0000K-of-0000N.safetensors + index
};

// The HF tensors of `model` with their shapes, in the order they are written.
std::vector<TestTensor> synthetic_tensors(const SyntheticModel& model);

// Element i of tensor `name`: a multiple of 1/64 in [-127/64, 127/64], exact in F16 and BF16.
float synthetic_value(const std::string& name, int64_t i);

struct WriteCheckpointOptions {
  // Edits the tensors before writing (drop one, change a shape or dtype, add extras).
  std::function<void(std::vector<TestTensor>&)> edit_tensors;
  bool write_config = true;
};

// Writes config.json and the weights of `model` into `dir`.
void write_synthetic_checkpoint(const std::filesystem::path& dir, const SyntheticModel& model,
                                const WriteCheckpointOptions& options = {});

}  // namespace nibble::model::testing
