#include "model/weights.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"
#include "model/load_progress.h"
#include "model/tensor_convert.h"

namespace nibble::model {

int64_t WeightTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const float* WeightTensor::f32_data() const {
  NIBBLE_CHECK(f32 != nullptr,
               "tensor '{}' ({}) has no float32 values: weights were loaded without conversion",
               name, dtype_name(dtype));
  return f32;
}

// Fills a ModelWeights in two passes: map and validate every expected tensor (so a bad
// checkpoint fails before any conversion work), then convert with a progress bar.
class WeightLoader {
 public:
  WeightLoader(const Checkpoint& checkpoint, const LoadWeightsOptions& options, ModelWeights& out)
      : checkpoint_(checkpoint), config_(checkpoint.config), options_(options), out_(out) {}

  void run() {
    check_architecture();
    out_.tensors_ = checkpoint_.tensors;
    map_all();
    reject_unused_biases();
    convert_all();
  }

 private:
  void check_architecture() const {
    const bool all_full_attention =
        std::all_of(config_.layer_kinds.begin(), config_.layer_kinds.end(),
                    [](auto kind) { return kind == config::LayerKind::kFullAttention; });
    NIBBLE_CHECK(config_.architecture != config::Architecture::kQwen3Next && all_full_attention,
                 "{}: architecture {} (model_type '{}') has linear-attention layers, which the "
                 "weight loader does not map (supported: Llama, Mistral, Qwen2, Qwen3)",
                 checkpoint_.dir.string(), config::architecture_name(config_.architecture),
                 config_.model_type);
  }

  // Looks up `name`, checks dtype and shape, and fills `dst`; records it for conversion.
  void map(WeightTensor& dst, const std::string& name, std::vector<int64_t> expected_shape,
           std::string_view why = {}) {
    const auto view = checkpoint_.tensors->find(name);
    NIBBLE_CHECK(view.has_value(), "missing tensor '{}' (expected shape {}{}) in model directory {}",
                 name, format_shape(expected_shape), why, checkpoint_.dir.string());
    NIBBLE_CHECK(is_weight_dtype(view->dtype()),
                 "tensor '{}' in {} has dtype {}, unsupported for weights (supported: F32, F16, "
                 "BF16)",
                 name, checkpoint_.tensors->source_of(name), dtype_name(view->dtype()));
    NIBBLE_CHECK(view->shape() == expected_shape,
                 "tensor '{}' in {}: expected shape {}, got {}", name,
                 checkpoint_.tensors->source_of(name), format_shape(expected_shape),
                 format_shape(view->shape()));
    dst.name = name;
    dst.dtype = view->dtype();
    dst.shape = std::move(expected_shape);
    dst.raw = view->data;
    out_.stored_bytes += view->byte_size();
    mapped_.push_back(&dst);
  }

  void map(std::optional<WeightTensor>& dst, const std::string& name,
           std::vector<int64_t> expected_shape, std::string_view why) {
    map(dst.emplace(), name, std::move(expected_shape), why);
  }

  void map_all() {
    const int64_t hidden = config_.hidden_size;
    const int64_t q_dim = config_.num_heads * config_.head_dim;
    const int64_t kv_dim = config_.num_kv_heads * config_.head_dim;
    const int64_t inter = config_.intermediate_size;
    const int64_t vocab = config_.vocab_size;
    constexpr std::string_view kBiasWhy = ", attention_bias";
    constexpr std::string_view kNormWhy = ", q/k norm of Qwen3";

    map(out_.embed, "model.embed_tokens.weight", {vocab, hidden});
    out_.layers.resize(static_cast<size_t>(config_.num_layers));
    for (int64_t i = 0; i < config_.num_layers; ++i) {
      LayerWeights& layer = out_.layers[static_cast<size_t>(i)];
      const std::string p = fmt::format("model.layers.{}.", i);
      map(layer.attn_norm, p + "input_layernorm.weight", {hidden});
      map(layer.wq, p + "self_attn.q_proj.weight", {q_dim, hidden});
      map(layer.wk, p + "self_attn.k_proj.weight", {kv_dim, hidden});
      map(layer.wv, p + "self_attn.v_proj.weight", {kv_dim, hidden});
      if (config_.attention_bias) {
        map(layer.bq, p + "self_attn.q_proj.bias", {q_dim}, kBiasWhy);
        map(layer.bk, p + "self_attn.k_proj.bias", {kv_dim}, kBiasWhy);
        map(layer.bv, p + "self_attn.v_proj.bias", {kv_dim}, kBiasWhy);
      }
      map(layer.wo, p + "self_attn.o_proj.weight", {hidden, q_dim});
      if (config_.qk_norm) {
        map(layer.q_norm, p + "self_attn.q_norm.weight", {config_.head_dim}, kNormWhy);
        map(layer.k_norm, p + "self_attn.k_norm.weight", {config_.head_dim}, kNormWhy);
      }
      map(layer.mlp_norm, p + "post_attention_layernorm.weight", {hidden});
      map(layer.w_gate, p + "mlp.gate_proj.weight", {inter, hidden});
      map(layer.w_up, p + "mlp.up_proj.weight", {inter, hidden});
      map(layer.w_down, p + "mlp.down_proj.weight", {hidden, inter});
    }
    map(out_.final_norm, "model.norm.weight", {hidden});

    // Tied: lm_head is the embedding (transformers ties them and ignores a stored lm_head).
    out_.tied_embeddings = config_.tie_word_embeddings;
    if (!out_.tied_embeddings)
      map(out_.lm_head, "lm_head.weight", {vocab, hidden}, ", tie_word_embeddings is false");
  }

  // A bias the forward pass would not apply (o_proj / MLP biases of attention_bias Llama or
  // mlp_bias checkpoints, or q/k/v biases when the config says none) would silently change the
  // model, so it is an error rather than an ignored extra tensor.
  void reject_unused_biases() const {
    std::set<std::string_view> used;
    for (const WeightTensor* t : mapped_) used.insert(t->name);
    for (const auto& file : checkpoint_.tensors->files()) {
      for (const auto& info : file->tensors()) {
        const std::string_view name = info.name;
        if (!name.starts_with("model.layers.") || !name.ends_with(".bias")) continue;
        NIBBLE_CHECK(used.contains(name),
                     "tensor '{}' in {} is a bias that {} (attention_bias {}) does not use; "
                     "nibble does not support this checkpoint's biases",
                     info.name, file->source(), config::architecture_name(config_.architecture),
                     config_.attention_bias);
      }
    }
  }

  void convert_all() {
    uint64_t to_convert = 0;
    for (const WeightTensor* t : mapped_)
      if (needs_copy(*t)) to_convert += t->raw_bytes();
    const bool draw = options_.progress.value_or(stderr_is_terminal()) && to_convert > 0;
    {
      LoadProgress progress("loading weights", to_convert, draw);
      for (WeightTensor* t : mapped_) {
        if (t->dtype == Dtype::kF32 && !needs_copy(*t)) {
          t->f32 = reinterpret_cast<const float*>(t->raw);  // zero-copy on the mapping
        } else if (needs_copy(*t)) {
          t->f32 = convert(*t, progress);
        }
      }
    }
    if (out_.tied_embeddings) {
      out_.lm_head = out_.embed;
      out_.lm_head.name = "lm_head.weight (tied to model.embed_tokens.weight)";
    }
  }

  bool needs_copy(const WeightTensor& t) const {
    if (!options_.convert_to_f32) return false;
    if (t.dtype != Dtype::kF32) return true;
    return reinterpret_cast<uintptr_t>(t.raw) % alignof(float) != 0;
  }

  // Converts in chunks (so the bar moves), each chunk split over a few threads.
  const float* convert(const WeightTensor& t, LoadProgress& progress) {
    const auto n = static_cast<size_t>(t.numel());
    auto buffer = std::make_unique<float[]>(n);  // [numel] float32, row-major like the source
    const size_t element_bytes = static_cast<size_t>(dtype_size(t.dtype));
    constexpr size_t kChunk = size_t{1} << 22;
    const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
    for (size_t begin = 0; begin < n; begin += kChunk) {
      const size_t count = std::min(kChunk, n - begin);
      const size_t parts = count >= (size_t{1} << 18) ? threads : 1;
      const size_t per_part = (count + parts - 1) / parts;
      auto work = [&](size_t part) {
        const size_t b = begin + part * per_part;
        const size_t e = std::min(begin + count, b + per_part);
        if (b < e)
          convert_to_f32(t.dtype, t.raw + b * element_bytes, std::span<float>(buffer.get() + b, e - b));
      };
      std::vector<std::jthread> workers;
      for (size_t part = 1; part < parts; ++part) workers.emplace_back(work, part);
      work(0);
      workers.clear();  // joins
      progress.advance(count * element_bytes);
    }
    out_.converted_bytes += n * sizeof(float);
    out_.converted_.push_back(std::move(buffer));
    return out_.converted_.back().get();
  }

  const Checkpoint& checkpoint_;
  const config::ModelConfig& config_;
  const LoadWeightsOptions& options_;
  ModelWeights& out_;
  std::vector<WeightTensor*> mapped_;  // every tensor mapped, in load order
};

ModelWeights load_weights(const Checkpoint& checkpoint, const LoadWeightsOptions& options) {
  NIBBLE_CHECK(checkpoint.tensors != nullptr, "checkpoint {} has no tensors opened",
               checkpoint.dir.string());
  ModelWeights weights;
  WeightLoader(checkpoint, options, weights).run();
  return weights;
}

}  // namespace nibble::model
