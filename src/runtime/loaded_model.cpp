#include "runtime/loaded_model.h"

#include "common/error.h"

namespace nibble::runtime {

std::optional<backend::WeightPrecision> parse_weight_precision(std::string_view name) {
  if (name.empty()) return std::nullopt;
  if (name == "bf16") return backend::WeightPrecision::kBF16;
  if (name == "f32") return backend::WeightPrecision::kF32;
  NIBBLE_FAIL("unknown weight precision '{}': expected bf16 or f32", name);
}

LoadedModel load_model(const LoadModelOptions& options) {
  NIBBLE_CHECK(std::filesystem::is_directory(options.dir), "model directory {} does not exist",
               options.dir.string());
  LoadedModel model;
  model.backend_ = backend::make_backend(
      {.device = options.device,
       .num_threads = options.num_threads,
       .weights = options.weights,
       .cuda_graphs = options.cuda_graphs});
  model.checkpoint_ = std::make_unique<model::Checkpoint>(model::open_checkpoint(options.dir));
  model.weights_ = std::make_unique<model::ModelWeights>(
      model::load_weights(*model.checkpoint_, {.convert_to_f32 = true, .progress = options.progress}));
  model.transformer_ =
      std::make_unique<model::Transformer>(model.checkpoint_->config, *model.weights_, *model.backend_);
  return model;
}

}  // namespace nibble::runtime
