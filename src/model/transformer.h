#pragma once
// The forward pass of a dense decoder (Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3), written only against
// the ops seam (backend/backend.h), so the same code runs on every backend.
//
// One step (a StepPlan: several sequences, prefill chunks and decode tokens mixed) per forward():
//   x = embed[tokens]                                                   [T, hidden]
//   per layer:  h = rms_norm(x);  q,k,v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
//               q,k = per-head rms_norm (Qwen3);  q,k = rope(q, k)
//               kv_write(k, v);  a = attention(q, k, v, cache);  x += a Wo^T
//               h = rms_norm(x);  x += (silu(h Wg^T) * (h Wu^T)) Wd^T
//   logits = rms_norm(x[logit rows]) lm_head^T                          [L, vocab]
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "cache/page_layout.h"
#include "config/model_config.h"
#include "model/weights.h"

namespace nibble::model {

// inv_freq [head_dim / 2] of the rotary embedding as Hugging Face computes it (float32), with the
// config's rope_scaling (none, linear or llama3) applied.
std::vector<float> rope_inverse_frequencies(const config::ModelConfig& config);

class Transformer {
 public:
  // Checks the config (full-attention layers only, full rotary) and uploads the weights to the
  // backend. `weights` and `backend` must outlive the Transformer (the CPU backend borrows weights).
  Transformer(const config::ModelConfig& config, const ModelWeights& weights, backend::Backend& backend);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const config::ModelConfig& config() const { return config_; }
  backend::Backend& backend() { return backend_; }
  // The KV geometry the cache must have for this model.
  cache::KvGeometry kv_geometry() const;

  // Runs one step. K/V of the new tokens are written into `cache`; returns the logits of the
  // plan's logit rows in `logits` (host, [plan.num_logit_rows(), vocab] row-major).
  void forward(const backend::StepPlan& plan, const backend::KvCacheView& cache, std::vector<float>& logits);
  // The same step, its logits left in the backend's memory: [plan.num_logit_rows(), vocab] f32,
  // row-major, valid until the next forward call (Backend::sample reads them on the device).
  backend::Tensor forward_on_device(const backend::StepPlan& plan, const backend::KvCacheView& cache);

  // Called in every forward() with (layer, k, v) right before kv_write: k, v [total_tokens,
  // num_kv_heads * head_dim] after RoPE, before any rotation, in the backend's memory. For
  // measurements (nibble calibrate); empty = none. The tensors are valid only during the call.
  using KvObserver = std::function<void(int64_t layer, backend::Tensor k, backend::Tensor v)>;
  void set_kv_observer(KvObserver observer) { kv_observer_ = std::move(observer); }

 private:
  struct LayerParams;
  struct Activations;
  void ensure_activations(int64_t tokens, int64_t logit_rows);

  config::ModelConfig config_;
  backend::Backend& backend_;
  std::vector<std::unique_ptr<backend::Buffer>> owned_;  // device copies of the weights, if any
  backend::Matrix embed_;       // [vocab, hidden]
  backend::Matrix lm_head_;     // [vocab, hidden]
  backend::Vector final_norm_;  // [hidden]
  backend::Vector inv_freq_;    // [head_dim / 2]
  std::vector<LayerParams> layers_;
  std::unique_ptr<Activations> act_;
  // The last step's plan, kept until the next forward: the logits forward_on_device returns may
  // still be computed by launches a CUDA backend defers until it is read (sample, copy_to_host).
  std::unique_ptr<backend::PlannedStep> step_;
  KvObserver kv_observer_;
};

}  // namespace nibble::model
