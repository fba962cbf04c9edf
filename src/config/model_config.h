#pragma once
// ModelConfig: what nibble needs from a Hugging Face config.json — the architecture, the geometry
// of every layer, RoPE, and which layers keep a per-token KV cache (full attention) versus a fixed
// per-request state (linear attention in hybrid models such as Qwen3-Next / Qwen3.5).
//
// Accepted: LlamaForCausalLM (Llama 2/3.x; rope_scaling "llama3" and "linear"), MistralForCausalLM,
// Qwen2ForCausalLM (q/k/v biases), Qwen3ForCausalLM (qk_norm), and the Qwen3-Next / Qwen3.5 hybrids
// (Qwen3NextForCausalLM, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, their Moe variants),
// whose text model may sit in a nested "text_config".
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace nibble::config {

// kQwen3Next covers the whole hybrid family (Qwen3-Next and Qwen3.5): gated DeltaNet linear
// attention layers interleaved with gated full attention layers.
enum class Architecture { kLlama, kMistral, kQwen2, kQwen3, kQwen3Next };

enum class LayerKind { kFullAttention, kLinearAttention };

enum class WeightDtype { kF32, kBF16, kF16 };

int64_t dtype_bytes(WeightDtype dtype);  // 4, 2, 2
const char* weight_dtype_name(WeightDtype dtype);  // "float32", "bfloat16", "float16"

// rope_scaling {"rope_type": "llama3", ...}; kind kNone when the config has none (or "default").
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

  // Elements of state one request holds in one such layer:
  //   recurrent state [value_heads, key_head_dim, value_head_dim]
  //   conv state      [conv_kernel - 1, 2*key_heads*key_head_dim + value_heads*value_head_dim]
  int64_t recurrent_state_elements() const;
  int64_t conv_state_elements() const;
  // Bytes of that state with the recurrent and the conv state stored at the given element sizes.
  int64_t state_bytes(int64_t recurrent_dtype_bytes, int64_t conv_dtype_bytes) const;
  // Both parts at the same element size.
  int64_t state_bytes(int64_t state_dtype_bytes) const { return state_bytes(state_dtype_bytes, state_dtype_bytes); }
};

// Mixture-of-experts MLP (Qwen3-Next / Qwen3.5-MoE). Layers in mlp_only_layers use a dense MLP of
// intermediate_size instead.
struct MoeGeometry {
  int64_t num_experts = 0;
  int64_t num_experts_per_token = 0;
  int64_t expert_intermediate_size = 0;         // moe_intermediate_size
  int64_t shared_expert_intermediate_size = 0;  // 0 = no shared expert
  std::vector<int64_t> mlp_only_layers;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string model_type;  // as written in config.json, for messages

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense MLP width (0 when an MoE config gives none)
  int64_t num_layers = 0;
  int64_t num_heads = 0;     // query heads
  int64_t num_kv_heads = 0;  // key/value heads (GQA group = num_heads / num_kv_heads)
  int64_t head_dim = 0;      // head_dim if given, else hidden_size / num_heads
  int64_t max_position_embeddings = 0;
  std::optional<int64_t> sliding_window;  // Mistral v0.1 / Qwen2 with use_sliding_window; unset = none

  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;  // fraction of head_dim that RoPE rotates (Qwen3-Next: 0.25)
  RopeScaling rope_scaling;

  bool tie_word_embeddings = false;
  bool attention_bias = false;    // q/k/v biases (Qwen2)
  bool qk_norm = false;           // per-head RMSNorm on q and k (Qwen3, Qwen3-Next)
  bool attn_output_gate = false;  // q_proj also yields a sigmoid gate on the attention output (Qwen3-Next)
  WeightDtype torch_dtype = WeightDtype::kBF16;
  bool torch_dtype_given = false;  // false: config.json names no torch_dtype/dtype, bf16 assumed

  std::vector<LayerKind> layer_kinds;             // size num_layers
  std::optional<LinearAttentionGeometry> linear;  // set when any layer is linear attention
  // Element type of the linear-attention recurrent state: config's mamba_ssm_dtype (Qwen3.5 configs
  // say "float32"), else float32. The conv state is kept in torch_dtype.
  WeightDtype linear_state_dtype = WeightDtype::kF32;
  std::optional<MoeGeometry> moe;

  std::vector<int64_t> eos_token_ids;  // from config.json (generation_config.json may add more)
  std::optional<int64_t> bos_token_id;

  int64_t num_full_attention_layers() const;
  int64_t num_linear_attention_layers() const;
  // Bytes of linear-attention state one request holds across all linear layers (0 for dense models):
  // recurrent state at linear_state_dtype, conv state at torch_dtype.
  int64_t linear_state_bytes_per_request() const;
};

// Parses config.json text. Throws nibble::Error naming the missing or malformed field, or the
// unsupported architecture / model_type. `source` names the file in messages.
ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source);
ModelConfig load_model_config(const std::filesystem::path& config_json);

// Parameter count estimated from the geometry (embeddings, attention, MLP or MoE, norms, lm_head
// unless tied; linear-attention layers by their projections). Text model only: no vision tower, no
// multi-token-prediction layers.
int64_t estimate_parameter_count(const ModelConfig& config);
int64_t estimate_weight_bytes(const ModelConfig& config, int64_t bytes_per_param);
// At the config's own torch_dtype.
int64_t estimate_weight_bytes(const ModelConfig& config);

const char* architecture_name(Architecture arch);
// The Hugging Face architecture names parse_model_config accepts, comma separated, for messages.
std::string supported_architectures();

}  // namespace nibble::config
