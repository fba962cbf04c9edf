// Parameter counts from the geometry alone, matrix by matrix as the Hugging Face modules declare
// them (weights [out, in]; a bias [out]). Used by `nibble plan` to subtract the weights from the
// memory budget before a checkpoint is at hand.
#include <algorithm>

#include "common/error.h"
#include "config/model_config.h"

namespace nibble::config {

namespace {

// Full (softmax) attention: q/k/v/o projections, optional biases, optional per-head q/k RMSNorm.
int64_t full_attention_params(const ModelConfig& c) {
  const int64_t q_out = c.num_heads * c.head_dim * (c.attn_output_gate ? 2 : 1);  // gate rides on q_proj
  const int64_t kv_out = c.num_kv_heads * c.head_dim;
  int64_t n = c.hidden_size * q_out + 2 * c.hidden_size * kv_out + c.num_heads * c.head_dim * c.hidden_size;
  if (c.architecture == Architecture::kQwen2) {
    n += q_out + 2 * kv_out;  // Qwen2: q/k/v biases, none on o_proj
  } else if (c.attention_bias) {
    n += q_out + 2 * kv_out + c.hidden_size;  // Llama-style attention_bias covers o_proj too
  }
  if (c.qk_norm) n += 2 * c.head_dim;
  return n;
}

// Gated DeltaNet (Qwen3-Next): in_proj_qkvz, in_proj_ba, depthwise conv1d over q|k|v (no bias),
// dt_bias and A_log per value head, the gated RMSNorm over value_head_dim, out_proj.
int64_t linear_attention_params(const ModelConfig& c) {
  const LinearAttentionGeometry& g = *c.linear;
  const int64_t key_dim = g.num_key_heads * g.key_head_dim;
  const int64_t value_dim = g.num_value_heads * g.value_head_dim;
  return c.hidden_size * (2 * key_dim + 2 * value_dim)   // in_proj_qkvz
         + c.hidden_size * 2 * g.num_value_heads         // in_proj_ba
         + (2 * key_dim + value_dim) * g.conv_kernel     // conv1d [channels, 1, kernel]
         + 2 * g.num_value_heads                         // dt_bias, A_log
         + g.value_head_dim                              // norm
         + value_dim * c.hidden_size;                    // out_proj
}

// SwiGLU MLP: gate, up [inter, hidden] and down [hidden, inter].
int64_t dense_mlp_params(const ModelConfig& c, int64_t intermediate) { return 3 * c.hidden_size * intermediate; }

int64_t moe_mlp_params(const ModelConfig& c) {
  const MoeGeometry& m = *c.moe;
  int64_t n = c.hidden_size * m.num_experts  // router
              + m.num_experts * dense_mlp_params(c, m.expert_intermediate_size);
  if (m.shared_expert_intermediate_size > 0) {
    n += dense_mlp_params(c, m.shared_expert_intermediate_size) + c.hidden_size;  // + shared_expert_gate [1, hidden]
  }
  return n;
}

}  // namespace

int64_t estimate_parameter_count(const ModelConfig& c) {
  NIBBLE_ASSERT(static_cast<int64_t>(c.layer_kinds.size()) == c.num_layers);
  int64_t n = c.vocab_size * c.hidden_size;                   // embed_tokens
  if (!c.tie_word_embeddings) n += c.vocab_size * c.hidden_size;  // lm_head
  n += c.hidden_size;                                          // final norm
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    n += 2 * c.hidden_size;  // input and post-attention RMSNorm
    n += c.layer_kinds[layer] == LayerKind::kFullAttention ? full_attention_params(c) : linear_attention_params(c);
    const bool dense = !c.moe || std::find(c.moe->mlp_only_layers.begin(), c.moe->mlp_only_layers.end(), layer) !=
                                     c.moe->mlp_only_layers.end();
    n += dense ? dense_mlp_params(c, c.intermediate_size) : moe_mlp_params(c);
  }
  return n;
}

int64_t estimate_weight_bytes(const ModelConfig& config, int64_t bytes_per_param) {
  NIBBLE_CHECK(bytes_per_param > 0, "bytes per parameter must be positive, got {}", bytes_per_param);
  return estimate_parameter_count(config) * bytes_per_param;
}

int64_t estimate_weight_bytes(const ModelConfig& config) {
  return estimate_weight_bytes(config, dtype_bytes(config.torch_dtype));
}

}  // namespace nibble::config
