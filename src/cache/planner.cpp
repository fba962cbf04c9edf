#include "cache/planner.h"

#include <cmath>
#include <cstdint>

#include "cache/kv_accounting.h"
#include "cache/page_layout.h"
#include "common/error.h"
#include "common/units.h"

namespace nibble::cache {

config::ModelConfig builtin_model_geometry() {
  config::ModelConfig c;
  c.architecture = config::Architecture::kQwen3Next;
  c.model_type = "qwen3_5_text";
  c.vocab_size = 248320;
  c.hidden_size = 5120;
  c.intermediate_size = 17408;
  c.num_layers = 64;
  c.num_heads = 24;
  c.num_kv_heads = 4;
  c.head_dim = 256;
  c.max_position_embeddings = 262144;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e7;
  c.partial_rotary_factor = 0.25;
  c.qk_norm = true;
  c.attn_output_gate = true;
  c.torch_dtype = config::WeightDtype::kBF16;
  c.torch_dtype_given = true;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    c.layer_kinds.push_back((i + 1) % 4 == 0 ? config::LayerKind::kFullAttention : config::LayerKind::kLinearAttention);
  }
  c.linear = config::LinearAttentionGeometry{
      .num_key_heads = 16, .num_value_heads = 48, .key_head_dim = 128, .value_head_dim = 128, .conv_kernel = 4};
  c.linear_state_dtype = config::WeightDtype::kF32;
  return c;
}

MemoryPlan plan_memory(const PlanInput& in) {
  NIBBLE_CHECK(in.gpu_memory_bytes > 0, "GPU memory must be positive, got {} bytes", in.gpu_memory_bytes);
  NIBBLE_CHECK(in.mem_fraction > 0 && in.mem_fraction <= 1, "--mem-fraction must be in (0, 1], got {}",
               in.mem_fraction);
  NIBBLE_CHECK(in.context_tokens > 0, "--context must be a positive number of tokens, got {}", in.context_tokens);
  NIBBLE_CHECK(in.page_size > 0 && in.page_size <= 65536, "--page-size must be in 1..65536 tokens, got {}",
               in.page_size);
  NIBBLE_CHECK(!in.kv_dtypes.empty(), "no KV format to plan");
  const config::ModelConfig& model = in.model;

  MemoryPlan plan;
  plan.usable_bytes = std::llround(static_cast<double>(in.gpu_memory_bytes) * in.mem_fraction);
  plan.parameter_count = config::estimate_parameter_count(model);
  plan.weights_estimated = !in.weights_bytes.has_value();
  plan.weights_bytes = in.weights_bytes.value_or(config::estimate_weight_bytes(model));
  NIBBLE_CHECK(plan.weights_bytes >= 0, "--weights-bytes cannot be negative, got {}", plan.weights_bytes);
  plan.budget_bytes = plan.usable_bytes - plan.weights_bytes;
  NIBBLE_CHECK(plan.budget_bytes > 0,
               "the weights ({}, {} bytes{}) leave no KV budget out of {} (GPU memory {} × mem fraction {})",
               format_bytes(plan.weights_bytes), plan.weights_bytes,
               plan.weights_estimated ? ", estimated from the config" : "", format_bytes(plan.usable_bytes),
               format_bytes(in.gpu_memory_bytes), in.mem_fraction);
  plan.pages_per_request = in.context_tokens / in.page_size + (in.context_tokens % in.page_size != 0 ? 1 : 0);
  plan.state_bytes_per_request = model.linear_state_bytes_per_request();
  plan.full_attention_layers = model.num_full_attention_layers();
  plan.linear_attention_layers = model.num_linear_attention_layers();

  const KvGeometry geometry{
      .num_layers = plan.full_attention_layers, .kv_heads = model.num_kv_heads, .head_dim = model.head_dim};
  const auto plan_format = [&](quant::KvDtype dtype) {
    const PageLayout layout(geometry, dtype, in.page_size);
    FormatPlan f{.kv_dtype = dtype};
    f.bytes_per_token_per_layer = layout.bytes_per_token_per_layer();
    f.bytes_per_token = layout.bytes_per_token();
    f.page_bytes = layout.page_bytes();
    NIBBLE_CHECK(plan.pages_per_request <= (INT64_MAX - plan.state_bytes_per_request) / f.page_bytes,
                 "--context {} is too large: one request would need more than 2^63 bytes", in.context_tokens);
    f.request_bytes = plan.pages_per_request * f.page_bytes + plan.state_bytes_per_request;
    f.requests = plan.budget_bytes / f.request_bytes;
    f.pool_pages = (plan.budget_bytes - f.requests * plan.state_bytes_per_request) / f.page_bytes;
    f.pool_tokens = f.pool_pages * in.page_size;
    return f;
  };
  const FormatPlan fp8 = plan_format(quant::KvDtype::kFP8);
  for (quant::KvDtype dtype : in.kv_dtypes) {
    FormatPlan f = plan_format(dtype);
    f.tokens_per_byte_vs_fp8 = static_cast<double>(fp8.bytes_per_token) / static_cast<double>(f.bytes_per_token);
    f.requests_vs_fp8 = fp8.requests > 0 ? static_cast<double>(f.requests) / static_cast<double>(fp8.requests) : 0.0;
    plan.formats.push_back(f);
  }
  return plan;
}

}  // namespace nibble::cache
