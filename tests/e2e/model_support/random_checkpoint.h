#pragma once
// Test helper: writes a small random-initialized Hugging Face model directory (config.json +
// model.safetensors, float32) for the architectures the forward pass supports, so tests can run
// models with head_dim 64 (nvfp4 needs head_dim % 16 == 0; stories260k has 8).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace nibble::testing {

struct RandomModelSpec {
  std::string model_type = "llama";  // llama | mistral | qwen2 | qwen3
  int64_t vocab = 96;
  int64_t hidden = 128;
  int64_t intermediate = 160;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 64;
  int64_t max_positions = 256;
  bool tied = false;
  uint32_t seed = 7;
};

// Writes `dir`/config.json and `dir`/model.safetensors. Weights ~ N(0, 0.08²) (norm weights
// around 1), large enough that attention is far from uniform.
inline void write_random_checkpoint(const std::filesystem::path& dir, const RandomModelSpec& s) {
  std::filesystem::create_directories(dir);
  const bool bias = s.model_type == "qwen2";
  const bool qk_norm = s.model_type == "qwen3";
  const char* arch = s.model_type == "llama"     ? "LlamaForCausalLM"
                     : s.model_type == "mistral" ? "MistralForCausalLM"
                     : s.model_type == "qwen2"   ? "Qwen2ForCausalLM"
                                                 : "Qwen3ForCausalLM";
  nlohmann::json config = {{"architectures", {arch}},
                           {"model_type", s.model_type},
                           {"vocab_size", s.vocab},
                           {"hidden_size", s.hidden},
                           {"intermediate_size", s.intermediate},
                           {"num_hidden_layers", s.layers},
                           {"num_attention_heads", s.heads},
                           {"num_key_value_heads", s.kv_heads},
                           {"head_dim", s.head_dim},
                           {"max_position_embeddings", s.max_positions},
                           {"rms_norm_eps", 1e-6},
                           {"rope_theta", 10000.0},
                           {"tie_word_embeddings", s.tied},
                           {"attention_bias", bias},
                           {"hidden_act", "silu"},
                           {"torch_dtype", "float32"},
                           {"bos_token_id", 1},
                           {"eos_token_id", 2}};
  std::ofstream(dir / "config.json") << config.dump(2);

  std::mt19937 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 0.08f);
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  std::vector<Entry> entries;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> data(n);
    for (float& x : data) x = norm ? 1.0f + normal(rng) : normal(rng);
    entries.push_back({name, std::move(shape), std::move(data)});
  };
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  add("model.embed_tokens.weight", {s.vocab, s.hidden}, false);
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {s.hidden}, true);
    add(p + "self_attn.q_proj.weight", {q, s.hidden}, false);
    add(p + "self_attn.k_proj.weight", {kv, s.hidden}, false);
    add(p + "self_attn.v_proj.weight", {kv, s.hidden}, false);
    add(p + "self_attn.o_proj.weight", {s.hidden, q}, false);
    if (bias) {
      add(p + "self_attn.q_proj.bias", {q}, false);
      add(p + "self_attn.k_proj.bias", {kv}, false);
      add(p + "self_attn.v_proj.bias", {kv}, false);
    }
    if (qk_norm) {
      add(p + "self_attn.q_norm.weight", {s.head_dim}, true);
      add(p + "self_attn.k_norm.weight", {s.head_dim}, true);
    }
    add(p + "post_attention_layernorm.weight", {s.hidden}, true);
    add(p + "mlp.gate_proj.weight", {s.intermediate, s.hidden}, false);
    add(p + "mlp.up_proj.weight", {s.intermediate, s.hidden}, false);
    add(p + "mlp.down_proj.weight", {s.hidden, s.intermediate}, false);
  }
  add("model.norm.weight", {s.hidden}, true);
  if (!s.tied) add("lm_head.weight", {s.vocab, s.hidden}, false);

  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const Entry& e : entries) {
    const uint64_t bytes = e.data.size() * sizeof(float);
    header[e.name] = {{"dtype", "F32"}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  const uint64_t header_len = text.size();
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const Entry& e : entries) {
    out.write(reinterpret_cast<const char*>(e.data.data()), static_cast<std::streamsize>(e.data.size() * sizeof(float)));
  }
}

}  // namespace nibble::testing
