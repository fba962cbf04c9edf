#pragma once
// The weights of a dense decoder (Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3), mapped from Hugging Face
// tensor names into a typed struct, every shape checked against the config.
//
// HF name                                               field                 shape
// model.embed_tokens.weight                             embed                 [vocab, hidden]
// model.layers.{i}.input_layernorm.weight               layers[i].attn_norm   [hidden]
// model.layers.{i}.self_attn.q_proj.weight (.bias)      wq (bq)               [n_heads*head_dim, hidden] ([n_heads*head_dim])
// model.layers.{i}.self_attn.k_proj.weight (.bias)      wk (bk)               [n_kv*head_dim, hidden] ([n_kv*head_dim])
// model.layers.{i}.self_attn.v_proj.weight (.bias)      wv (bv)               [n_kv*head_dim, hidden] ([n_kv*head_dim])
// model.layers.{i}.self_attn.o_proj.weight              wo                    [hidden, n_heads*head_dim]
// model.layers.{i}.self_attn.q_norm.weight / k_norm     q_norm / k_norm       [head_dim]
// model.layers.{i}.post_attention_layernorm.weight      mlp_norm              [hidden]
// model.layers.{i}.mlp.gate_proj.weight / up_proj       w_gate / w_up         [intermediate, hidden]
// model.layers.{i}.mlp.down_proj.weight                 w_down                [hidden, intermediate]
// model.norm.weight                                     final_norm            [hidden]
// lm_head.weight                                        lm_head               [vocab, hidden]; == embed when tied
// Matrices are row-major [out_features, in_features] (y = W x). Biases exist when
// config.attention_bias, q/k norms when config.qk_norm. Other tensors in the files (e.g.
// rotary_emb.inv_freq) are ignored.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/safetensors.h"

namespace nibble::model {

// One weight: where its stored bytes are and, when loaded for the CPU, its float32 values.
struct WeightTensor {
  std::string name;            // the HF tensor name, for messages
  Dtype dtype = Dtype::kF32;   // as stored in the file (F32, F16 or BF16)
  std::vector<int64_t> shape;  // row-major
  const std::byte* raw = nullptr;  // the stored bytes, inside the file mapping (any alignment)
  // float32 values [numel]: zero-copy into the mapping when stored as aligned F32, otherwise an
  // owned converted copy; null when loaded with convert_to_f32 = false and not stored as F32.
  const float* f32 = nullptr;

  int64_t numel() const;
  uint64_t raw_bytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }
  // The float32 values; throws nibble::Error naming the tensor when they were not loaded.
  const float* f32_data() const;
};

struct LayerWeights {
  WeightTensor attn_norm;              // [hidden]
  WeightTensor wq;                     // [n_heads*head_dim, hidden]
  std::optional<WeightTensor> bq;      // [n_heads*head_dim]       (attention_bias)
  WeightTensor wk;                     // [n_kv*head_dim, hidden]
  std::optional<WeightTensor> bk;      // [n_kv*head_dim]          (attention_bias)
  WeightTensor wv;                     // [n_kv*head_dim, hidden]
  std::optional<WeightTensor> bv;      // [n_kv*head_dim]          (attention_bias)
  WeightTensor wo;                     // [hidden, n_heads*head_dim]
  std::optional<WeightTensor> q_norm;  // [head_dim]               (qk_norm)
  std::optional<WeightTensor> k_norm;  // [head_dim]               (qk_norm)
  WeightTensor mlp_norm;               // [hidden]
  WeightTensor w_gate;                 // [intermediate, hidden]
  WeightTensor w_up;                   // [intermediate, hidden]
  WeightTensor w_down;                 // [hidden, intermediate]
};

// Owns the converted buffers and keeps the file mappings alive: every pointer in it is valid for
// the ModelWeights' lifetime (moves keep them valid; copies are not allowed).
class ModelWeights {
 public:
  WeightTensor embed;               // [vocab, hidden]
  std::vector<LayerWeights> layers;  // [num_layers]
  WeightTensor final_norm;          // [hidden]
  WeightTensor lm_head;             // [vocab, hidden]; the same pointers as embed when tied
  bool tied_embeddings = false;

  ModelWeights() = default;
  ModelWeights(ModelWeights&&) = default;
  ModelWeights& operator=(ModelWeights&&) = default;
  ModelWeights(const ModelWeights&) = delete;
  ModelWeights& operator=(const ModelWeights&) = delete;

  // Bytes of the stored weights referenced (tied lm_head counted once) and of converted copies.
  uint64_t stored_bytes = 0;
  uint64_t converted_bytes = 0;

 private:
  friend class WeightLoader;
  std::shared_ptr<const TensorStore> tensors_;      // keeps the mappings alive
  std::vector<std::unique_ptr<float[]>> converted_;  // owned float32 copies
};

struct LoadWeightsOptions {
  // Convert F16/BF16 (and unaligned F32) to owned float32 buffers, as the CPU backend needs.
  bool convert_to_f32 = true;
  // Draw a progress bar on stderr; nullopt: only when stderr is a terminal.
  std::optional<bool> progress;
};

// Maps, validates and (optionally) converts the weights of `checkpoint`. Throws nibble::Error
// naming the tensor for a missing tensor, a wrong shape (expected and actual) or a dtype other
// than F32/F16/BF16; and naming the architecture when it is not a dense decoder this loader maps
// (Qwen3-Next's linear-attention layers).
ModelWeights load_weights(const Checkpoint& checkpoint, const LoadWeightsOptions& options = {});

}  // namespace nibble::model
