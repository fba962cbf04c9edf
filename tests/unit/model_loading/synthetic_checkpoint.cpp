#include "unit/model_loading/synthetic_checkpoint.h"

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace nibble::model::testing {

namespace {

uint32_t fnv1a(const std::string& text) {
  uint32_t h = 2166136261u;
  for (unsigned char c : text) h = (h ^ c) * 16777619u;
  return h;
}

TestTensor synthetic(const std::string& name, const std::string& dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = synthetic_value(name, i);
  return make_tensor(name, dtype, std::move(shape), values);
}

}  // namespace

float synthetic_value(const std::string& name, int64_t i) {
  const int64_t k = static_cast<int64_t>((fnv1a(name) + static_cast<uint64_t>(i) * 37u) % 255u) - 127;
  return static_cast<float>(k) / 64.0f;
}

std::vector<TestTensor> synthetic_tensors(const SyntheticModel& m) {
  const std::string& dt = m.dtype;
  const int64_t q_dim = m.heads * m.head_dim;
  const int64_t kv_dim = m.kv_heads * m.head_dim;
  std::vector<TestTensor> out;
  out.push_back(synthetic("model.embed_tokens.weight", dt, {m.vocab, m.hidden}));
  for (int64_t i = 0; i < m.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    out.push_back(synthetic(p + "input_layernorm.weight", dt, {m.hidden}));
    out.push_back(synthetic(p + "self_attn.q_proj.weight", dt, {q_dim, m.hidden}));
    out.push_back(synthetic(p + "self_attn.k_proj.weight", dt, {kv_dim, m.hidden}));
    out.push_back(synthetic(p + "self_attn.v_proj.weight", dt, {kv_dim, m.hidden}));
    if (m.biases) {
      out.push_back(synthetic(p + "self_attn.q_proj.bias", dt, {q_dim}));
      out.push_back(synthetic(p + "self_attn.k_proj.bias", dt, {kv_dim}));
      out.push_back(synthetic(p + "self_attn.v_proj.bias", dt, {kv_dim}));
    }
    out.push_back(synthetic(p + "self_attn.o_proj.weight", dt, {m.hidden, q_dim}));
    if (m.qk_norm) {
      out.push_back(synthetic(p + "self_attn.q_norm.weight", dt, {m.head_dim}));
      out.push_back(synthetic(p + "self_attn.k_norm.weight", dt, {m.head_dim}));
    }
    out.push_back(synthetic(p + "post_attention_layernorm.weight", dt, {m.hidden}));
    out.push_back(synthetic(p + "mlp.gate_proj.weight", dt, {m.intermediate, m.hidden}));
    out.push_back(synthetic(p + "mlp.up_proj.weight", dt, {m.intermediate, m.hidden}));
    out.push_back(synthetic(p + "mlp.down_proj.weight", dt, {m.hidden, m.intermediate}));
  }
  out.push_back(synthetic("model.norm.weight", dt, {m.hidden}));
  if (!m.tied) out.push_back(synthetic("lm_head.weight", dt, {m.vocab, m.hidden}));
  return out;
}

void write_synthetic_checkpoint(const std::filesystem::path& dir, const SyntheticModel& m,
                                const WriteCheckpointOptions& options) {
  std::filesystem::create_directories(dir);
  if (options.write_config) {
    const char* torch_dtype = m.dtype == "BF16" ? "bfloat16" : m.dtype == "F16" ? "float16" : "float32";
    nlohmann::json config = {
        {"architectures", {m.architecture}},
        {"model_type", m.model_type},
        {"vocab_size", m.vocab},
        {"hidden_size", m.hidden},
        {"intermediate_size", m.intermediate},
        {"num_hidden_layers", m.layers},
        {"num_attention_heads", m.heads},
        {"num_key_value_heads", m.kv_heads},
        {"head_dim", m.head_dim},
        {"max_position_embeddings", 128},
        {"rms_norm_eps", 1e-6},
        {"rope_theta", 10000.0},
        {"tie_word_embeddings", m.tied},
        {"torch_dtype", torch_dtype},
        {"bos_token_id", 1},
        {"eos_token_id", 2},
    };
    if (m.biases && m.model_type != "qwen2") config["attention_bias"] = true;
    std::ofstream(dir / "config.json") << config.dump(2);
  }

  std::vector<TestTensor> tensors = synthetic_tensors(m);
  if (options.edit_tensors) options.edit_tensors(tensors);
  if (m.shards <= 1) {
    write_bytes(dir / "model.safetensors", build_safetensors(tensors));
    return;
  }
  // Tensors dealt round-robin over the shards, so each shard holds pieces of every layer.
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<std::vector<TestTensor>> per_shard(static_cast<size_t>(m.shards));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t shard = i % per_shard.size();
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", shard + 1, m.shards);
    weight_map[tensors[i].name] = file;
    per_shard[shard].push_back(tensors[i]);
  }
  for (size_t s = 0; s < per_shard.size(); ++s)
    write_bytes(dir / fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, m.shards),
                build_safetensors(per_shard[s]));
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
}

}  // namespace nibble::model::testing
