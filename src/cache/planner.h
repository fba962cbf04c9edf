#pragma once
// The memory planner behind `nibble plan`: how much KV cache a GPU holds after the weights, per KV
// format, and how many requests of a given context fit.
//
//   usable  = round(gpu_memory × mem_fraction)
//   budget  = usable − weights                      (weights estimated from the config unless given)
//   per request: pages_per_request = ceil(context / page_size) pages of the format's page_bytes,
//                plus state_bytes, the fixed linear-attention state of a hybrid model (0 if dense)
//   requests = floor(budget / (pages_per_request × page_bytes + state_bytes))
//   pool     = floor((budget − requests × state_bytes) / page_bytes) pages, × page_size tokens
//
// The pool is what is left for KV pages once the states of the requests that fit are charged; for
// a dense model it is simply floor(budget / page_bytes). Nothing else is reserved (no activation or
// CUDA-graph workspace): mem_fraction is the knob for that, as in SGLang's mem_fraction_static.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "quant/kv_format.h"

namespace nibble::cache {

struct PlanInput {
  config::ModelConfig model;
  std::string model_source;         // the config path, or a description of the built-in geometry
  bool builtin_geometry = false;
  int64_t gpu_memory_bytes = 141'000'000'000;  // H200
  double mem_fraction = 0.9;
  std::optional<int64_t> weights_bytes;  // unset: estimate_weight_bytes(model) at its torch_dtype
  int64_t context_tokens = 32768;
  int64_t page_size = 64;
  std::vector<quant::KvDtype> kv_dtypes;  // the formats to plan, in order
};

struct FormatPlan {
  quant::KvDtype kv_dtype;
  int64_t bytes_per_token_per_layer = 0;  // exact, scales included, no padding
  int64_t bytes_per_token = 0;            // × full-attention layers
  int64_t page_bytes = 0;                 // one page, all layers, with the layout's padding
  int64_t request_bytes = 0;              // pages_per_request × page_bytes + state_bytes_per_request
  int64_t requests = 0;                   // requests of context_tokens that fit
  int64_t pool_pages = 0;
  int64_t pool_tokens = 0;
  double tokens_per_byte_vs_fp8 = 0;  // fp8 bytes_per_token / this format's: nvfp4 = 16/9 = 1.78
  double requests_vs_fp8 = 0;         // requests / fp8 requests (0 when fp8 fits none)
};

struct MemoryPlan {
  int64_t usable_bytes = 0;
  int64_t weights_bytes = 0;
  bool weights_estimated = false;
  int64_t parameter_count = 0;  // estimated from the geometry (also when weights_bytes was given)
  int64_t budget_bytes = 0;
  int64_t pages_per_request = 0;
  int64_t state_bytes_per_request = 0;  // linear-attention state, all linear layers
  int64_t full_attention_layers = 0;
  int64_t linear_attention_layers = 0;
  std::vector<FormatPlan> formats;  // in PlanInput::kv_dtypes order
};

// Throws nibble::Error on an input out of range (fraction outside (0, 1], non-positive memory,
// context or page size, negative weights) or weights that leave no budget.
MemoryPlan plan_memory(const PlanInput& input);

// The model `nibble plan` uses without --config: the seed's Qwen3.8-27B-style hybrid (64 layers,
// every 4th full attention → 16, 4 KV heads, head_dim 256, hidden 5120, intermediate 17408, 24 query
// heads, vocab 248320, bf16; gated DeltaNet layers with 16 key / 48 value heads of dim 128 and conv
// kernel 4, recurrent state in float32 as its config's mamba_ssm_dtype says).
config::ModelConfig builtin_model_geometry();

}  // namespace nibble::cache
