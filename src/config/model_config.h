#pragma once
// ModelConfig: what nibble needs from a Hugging Face config.json — the architecture, the geometry
// of every layer, RoPE, and which layers keep a per-token KV cache (full attention) versus a fixed
// per-request state (linear attention in hybrid models such as Qwen3-Next / Qwen3.5).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace nibble::config {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3, kQwen3Next };

enum class LayerKind { kFullAttention, kLinearAttention };

enum class WeightDtype { kF32, kBF16, kF16 };

// rope_scaling {"rope_type": "llama3", ...}; kind kNone when the config has none.
struct RopeScaling {
  enum class Kind { kNone, kLlama3, kLinear } kind = Kind::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// The fixed per-request recurrent state of one linear-attention (gated DeltaNet) layer.
struct LinearAttentionGeometry {
  int64_t num_key_heads = 0;    // linear_num_key_heads
  int64_t num_value_heads = 0;  // linear_num_value_heads
  int64_t key_head_dim = 0;     // linear_key_head_dim
  int64_t value_head_dim = 0;   // linear_value_head_dim
  int64_t conv_kernel = 0;      // linear_conv_kernel_dim
  // Bytes of state one request holds in one such layer, at state_dtype_bytes per element:
  // recurrent state [value_heads, key_head_dim, value_head_dim] + conv state
  // [(conv_kernel - 1), 2*key_heads*key_head_dim + value_heads*value_head_dim].
  int64_t state_bytes(int64_t state_dtype_bytes) const;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string model_type;  // as written in config.json, for messages

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;     // query heads
  int64_t num_kv_heads = 0;  // key/value heads (GQA group = num_heads / num_kv_heads)
  int64_t head_dim = 0;      // head_dim if given, else hidden_size / num_heads
  int64_t max_position_embeddings = 0;

  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  RopeScaling rope_scaling;

  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
  WeightDtype torch_dtype = WeightDtype::kBF16;

  std::vector<LayerKind> layer_kinds;           // size num_layers
  std::optional<LinearAttentionGeometry> linear;  // set when any layer is linear attention

  std::vector<int64_t> eos_token_ids;  // from config.json (generation_config.json may add more)
  std::optional<int64_t> bos_token_id;

  int64_t num_full_attention_layers() const;
  int64_t num_linear_attention_layers() const;
};

// Parses config.json text. Throws nibble::Error naming the missing or malformed field, or the
// unsupported architecture / model_type. `source` names the file in messages.
ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source);
ModelConfig load_model_config(const std::filesystem::path& config_json);

// Parameter count estimated from the geometry (embeddings, attention, MLP, norms, lm_head unless
// tied; linear-attention layers by their projections), and the bytes at `bytes_per_param`.
int64_t estimate_parameter_count(const ModelConfig& config);
int64_t estimate_weight_bytes(const ModelConfig& config, int64_t bytes_per_param);

const char* architecture_name(Architecture arch);

}  // namespace nibble::config
