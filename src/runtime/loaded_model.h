#pragma once
// A model directory loaded onto a backend: checkpoint (config + mapped tensors), weights, the
// backend and the forward pass. Movable; the parts live behind pointers so the Transformer's
// references stay valid.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "config/model_config.h"
#include "model/checkpoint.h"
#include "model/transformer.h"
#include "model/weights.h"

namespace nibble::runtime {

struct LoadModelOptions {
  std::filesystem::path dir;
  std::string device = "cpu";
  int num_threads = 0;             // CPU backend threads; 0 = one per core
  std::optional<bool> progress;    // loading progress bar; nullopt = when stderr is a terminal
  // Weight matrices on the device (backend.h); nullopt = the backend's default (bf16 on cuda,
  // f32 on cpu, which rejects bf16).
  std::optional<backend::WeightPrecision> weights;
  // CUDA graphs for decode steps (backend.h's BackendOptions::cuda_graphs; NIBBLE_CUDA_GRAPHS=0 also
  // turns them off).
  bool cuda_graphs = true;
};

class LoadedModel {
 public:
  const config::ModelConfig& config() const { return checkpoint_->config; }
  const model::Checkpoint& checkpoint() const { return *checkpoint_; }
  model::Transformer& transformer() { return *transformer_; }
  backend::Backend& backend() { return *backend_; }

 private:
  friend LoadedModel load_model(const LoadModelOptions& options);
  LoadedModel() = default;
  std::unique_ptr<model::Checkpoint> checkpoint_;
  std::unique_ptr<model::ModelWeights> weights_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<model::Transformer> transformer_;
};

// The command line's --weights value: "" = nullopt (the device's default), "bf16", "f32"; anything
// else throws nibble::Error naming the value.
std::optional<backend::WeightPrecision> parse_weight_precision(std::string_view name);

// Throws nibble::Error naming the directory and the missing or malformed file (config.json,
// safetensors), the unsupported architecture, or the device.
LoadedModel load_model(const LoadModelOptions& options);

}  // namespace nibble::runtime
