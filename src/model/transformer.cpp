#include "model/transformer.h"

#include <cmath>
#include <numbers>

#include "common/error.h"

namespace nibble::model {

using backend::Matrix;
using backend::Tensor;
using backend::Vector;

std::vector<float> rope_inverse_frequencies(const config::ModelConfig& config) {
  const int64_t d = config.head_dim;
  NIBBLE_CHECK(d > 0 && d % 2 == 0, "RoPE needs an even head_dim, got {}", d);
  std::vector<float> inv_freq(d / 2);
  // inv_freq_i = 1 / theta^(2i/d), in float32 as transformers' _compute_default_rope_parameters.
  for (int64_t i = 0; i < d / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(d);
    inv_freq[i] = 1.0f / static_cast<float>(std::pow(config.rope_theta, static_cast<double>(exponent)));
  }
  const config::RopeScaling& s = config.rope_scaling;
  switch (s.kind) {
    case config::RopeScaling::Kind::kNone: break;
    case config::RopeScaling::Kind::kLinear:
      for (float& f : inv_freq) f /= static_cast<float>(s.factor);
      break;
    case config::RopeScaling::Kind::kLlama3: {
      // transformers' _compute_llama3_parameters: long wavelengths divided by factor, short ones kept,
      // a smooth interpolation in between.
      const float factor = static_cast<float>(s.factor);
      const float low = static_cast<float>(s.low_freq_factor);
      const float high = static_cast<float>(s.high_freq_factor);
      const float old_context = static_cast<float>(s.original_max_position_embeddings);
      NIBBLE_CHECK(factor > 0 && high != low, "llama3 rope_scaling: factor {} and low/high_freq_factor {}/{} invalid",
                   s.factor, s.low_freq_factor, s.high_freq_factor);
      const float low_freq_wavelen = old_context / low;
      const float high_freq_wavelen = old_context / high;
      for (float& f : inv_freq) {
        const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
        float scaled = wavelen > low_freq_wavelen ? f / factor : f;
        if (!(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)) {
          const float smooth = (old_context / wavelen - low) / (high - low);
          scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
        }
        f = scaled;
      }
      break;
    }
  }
  return inv_freq;
}

struct Transformer::LayerParams {
  Vector attn_norm;         // [hidden]
  Matrix wq, wk, wv, wo;    // [H*D, hidden], [KVH*D, hidden] ×2, [hidden, H*D]
  Vector bq, bk, bv;        // [H*D], [KVH*D] ×2, or empty
  Vector q_norm, k_norm;    // [head_dim] or empty
  Vector mlp_norm;          // [hidden]
  Matrix w_gate, w_up;      // [intermediate, hidden]
  Matrix w_down;            // [hidden, intermediate]
};

// Scratch activations in the backend's memory, sized for `tokens` rows (grown on demand).
struct Transformer::Activations {
  int64_t tokens = 0;
  int64_t logit_rows = 0;
  std::unique_ptr<backend::Buffer> x, h, q, k, v, attn, gate, up, logits_in, logits;
};

namespace {

void check_shape(const WeightTensor& w, std::initializer_list<int64_t> expected) {
  NIBBLE_CHECK(w.shape == std::vector<int64_t>(expected), "weight {} has shape {}, the forward pass expects {}", w.name,
               format_shape(w.shape), format_shape(std::vector<int64_t>(expected)));
}

}  // namespace

Transformer::Transformer(const config::ModelConfig& config, const ModelWeights& weights, backend::Backend& backend)
    : config_(config), backend_(backend), act_(std::make_unique<Activations>()) {
  NIBBLE_CHECK(config.num_linear_attention_layers() == 0,
               "{}: linear-attention layers are not supported by the forward pass (full attention only)",
               config.model_type);
  NIBBLE_CHECK(config.partial_rotary_factor == 1.0, "{}: partial rotary (factor {}) is not supported",
               config.model_type, config.partial_rotary_factor);
  NIBBLE_CHECK(config.num_heads > 0 && config.num_kv_heads > 0 && config.num_heads % config.num_kv_heads == 0,
               "{} query heads are not a multiple of {} kv heads", config.num_heads, config.num_kv_heads);
  NIBBLE_CHECK(static_cast<int64_t>(weights.layers.size()) == config.num_layers, "{} layers of weights for {} layers",
               weights.layers.size(), config.num_layers);
  const int64_t hidden = config.hidden_size, d = config.head_dim, inter = config.intermediate_size;
  const int64_t q_width = config.num_heads * d, kv_width = config.num_kv_heads * d;

  auto matrix = [&](const WeightTensor& w, int64_t out, int64_t in) {
    check_shape(w, {out, in});
    std::unique_ptr<backend::Buffer> owner;
    Matrix m = backend_.upload_matrix(w.f32_data(), out, in, owner);
    if (owner) owned_.push_back(std::move(owner));
    return m;
  };
  auto vector = [&](const WeightTensor& w, int64_t size) {
    check_shape(w, {size});
    std::unique_ptr<backend::Buffer> owner;
    Vector v = backend_.upload_vector(w.f32_data(), size, owner);
    if (owner) owned_.push_back(std::move(owner));
    return v;
  };
  auto optional_vector = [&](const std::optional<WeightTensor>& w, bool wanted, int64_t size, const char* what) {
    NIBBLE_CHECK(w.has_value() == wanted, "layer weights: {} is {} but the config says {}", what,
                 w ? "present" : "absent", wanted ? "present" : "absent");
    return w ? vector(*w, size) : Vector{};
  };

  embed_ = matrix(weights.embed, config.vocab_size, hidden);
  lm_head_ = matrix(weights.lm_head, config.vocab_size, hidden);
  final_norm_ = vector(weights.final_norm, hidden);
  const std::vector<float> inv_freq = rope_inverse_frequencies(config);
  {
    owned_.push_back(backend_.allocate(static_cast<int64_t>(inv_freq.size() * sizeof(float))));
    backend_.copy_from_host(owned_.back()->data(), inv_freq.data(), owned_.back()->bytes());
    inv_freq_ = {owned_.back()->floats(), static_cast<int64_t>(inv_freq.size())};
  }
  layers_.reserve(config.num_layers);
  for (const LayerWeights& lw : weights.layers) {
    LayerParams p;
    p.attn_norm = vector(lw.attn_norm, hidden);
    p.wq = matrix(lw.wq, q_width, hidden);
    p.wk = matrix(lw.wk, kv_width, hidden);
    p.wv = matrix(lw.wv, kv_width, hidden);
    p.wo = matrix(lw.wo, hidden, q_width);
    p.bq = optional_vector(lw.bq, config.attention_bias, q_width, "the q_proj bias");
    p.bk = optional_vector(lw.bk, config.attention_bias, kv_width, "the k_proj bias");
    p.bv = optional_vector(lw.bv, config.attention_bias, kv_width, "the v_proj bias");
    p.q_norm = optional_vector(lw.q_norm, config.qk_norm, d, "q_norm");
    p.k_norm = optional_vector(lw.k_norm, config.qk_norm, d, "k_norm");
    p.mlp_norm = vector(lw.mlp_norm, hidden);
    p.w_gate = matrix(lw.w_gate, inter, hidden);
    p.w_up = matrix(lw.w_up, inter, hidden);
    p.w_down = matrix(lw.w_down, hidden, inter);
    layers_.push_back(p);
  }
}

Transformer::~Transformer() = default;

cache::KvGeometry Transformer::kv_geometry() const {
  return {.num_layers = config_.num_layers, .kv_heads = config_.num_kv_heads, .head_dim = config_.head_dim};
}

void Transformer::ensure_activations(int64_t tokens, int64_t logit_rows) {
  Activations& a = *act_;
  auto floats = [&](int64_t n) { return backend_.allocate(n * static_cast<int64_t>(sizeof(float))); };
  if (tokens > a.tokens) {
    const int64_t hidden = config_.hidden_size;
    a.x = floats(tokens * hidden);
    a.h = floats(tokens * hidden);
    a.q = floats(tokens * config_.num_heads * config_.head_dim);
    a.k = floats(tokens * config_.num_kv_heads * config_.head_dim);
    a.v = floats(tokens * config_.num_kv_heads * config_.head_dim);
    a.attn = floats(tokens * config_.num_heads * config_.head_dim);
    a.gate = floats(tokens * config_.intermediate_size);
    a.up = floats(tokens * config_.intermediate_size);
    a.tokens = tokens;
  }
  if (logit_rows > a.logit_rows) {
    a.logits_in = floats(logit_rows * config_.hidden_size);
    a.logits = floats(logit_rows * config_.vocab_size);
    a.logit_rows = logit_rows;
  }
}

void Transformer::forward(const backend::StepPlan& plan, const backend::KvCacheView& cache, std::vector<float>& logits) {
  const Tensor out = forward_on_device(plan, cache);
  logits.resize(static_cast<size_t>(out.numel()));
  backend_.copy_to_host(logits.data(), out.data, out.numel() * static_cast<int64_t>(sizeof(float)));
}

backend::Tensor Transformer::forward_on_device(const backend::StepPlan& plan, const backend::KvCacheView& cache) {
  const int64_t t = plan.total_tokens;
  NIBBLE_CHECK(t > 0, "a forward step needs at least one token");
  for (const backend::SequencePlan& s : plan.seqs) {
    NIBBLE_CHECK(s.context_after <= config_.max_position_embeddings,
                 "a sequence of {} tokens exceeds the model's context of {} (max_position_embeddings)",
                 s.context_after, config_.max_position_embeddings);
  }
  const cache::KvGeometry want = kv_geometry();
  const cache::KvGeometry& have = cache.layout->geometry();
  NIBBLE_CHECK(have.num_layers == want.num_layers && have.kv_heads == want.kv_heads && have.head_dim == want.head_dim,
               "the KV cache has {} layers × {} kv heads × head_dim {}, the model needs {} × {} × {}", have.num_layers,
               have.kv_heads, have.head_dim, want.num_layers, want.kv_heads, want.head_dim);
  const int64_t logit_rows = plan.num_logit_rows();
  ensure_activations(t, logit_rows);
  Activations& a = *act_;
  backend::Backend& be = backend_;
  const int64_t hidden = config_.hidden_size, d = config_.head_dim, inter = config_.intermediate_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const Tensor x{a.x->floats(), t, hidden};
  const Tensor h{a.h->floats(), t, hidden};
  const Tensor q{a.q->floats(), t, config_.num_heads * d};
  const Tensor k{a.k->floats(), t, config_.num_kv_heads * d};
  const Tensor v{a.v->floats(), t, config_.num_kv_heads * d};
  const Tensor attn{a.attn->floats(), t, config_.num_heads * d};
  const Tensor gate{a.gate->floats(), t, inter};
  const Tensor up{a.up->floats(), t, inter};
  const backend::AttentionShape shape{.num_heads = config_.num_heads,
                                      .num_kv_heads = config_.num_kv_heads,
                                      .head_dim = d,
                                      .scale = 1.0f / std::sqrt(static_cast<float>(d))};

  // The previous step's device arrays go first: plan() may begin a CUDA-graph capture, and a free
  // issued on a capturing stream fails. The free is stream-ordered, so work still queued is safe.
  step_.reset();
  step_ = be.plan(plan);
  const backend::PlannedStep* step = step_.get();
  be.embedding(*step, embed_, x);
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    const LayerParams& p = layers_[layer];
    // q/k/v of rms_norm(x) (h: the norm's scratch), then x += attention @ wo^T, then
    // x += (silu(n(x) @ gate^T) * (n(x) @ up^T)) @ down^T: four fused products per layer.
    const backend::Backend::InputNorm attn_norm{.weight = p.attn_norm, .eps = eps, .normed = h};
    const Matrix qkv_w[] = {p.wq, p.wk, p.wv};
    const Vector qkv_b[] = {p.bq, p.bk, p.bv};
    const Tensor qkv_out[] = {q, k, v};
    be.matmul_shared_input(x, &attn_norm, qkv_w, qkv_b, qkv_out);
    if (config_.qk_norm) {
      be.rms_norm(q.reshaped(d), p.q_norm, eps, q.reshaped(d));
      be.rms_norm(k.reshaped(d), p.k_norm, eps, k.reshaped(d));
    }
    if (kv_observer_) {  // the observer sees the rotated k and v before they are written
      be.rope(*step, q, k, d, inv_freq_);
      kv_observer_(layer, k, v);
      be.kv_write(*step, cache, layer, k, v);
    } else {
      be.rope_kv_write(*step, cache, layer, q, k, v, d, inv_freq_);
    }
    be.attention(*step, cache, layer, shape, q, k, v, attn);
    be.matmul_residual_add(attn, p.wo, h, x);  // h: scratch
    const backend::Backend::InputNorm mlp_norm{.weight = p.mlp_norm, .eps = eps, .normed = h};
    be.matmul_swiglu(x, &mlp_norm, p.w_gate, p.w_up, gate, up, gate);
    be.matmul_residual_add(gate, p.w_down, h, x);
  }
  // The final norm and the LM head over the logit rows: gathered into logits_in and normalized in
  // place there, or, when every row is a logit row (decode), normalized from x into logits_in with
  // no gather (on CUDA the LM head then follows the last product directly, launched early).
  const Tensor last{a.logits_in->floats(), logit_rows, hidden};
  const Tensor out{a.logits->floats(), logit_rows, config_.vocab_size};
  const bool gather = !plan.logit_rows_are_all_rows();
  if (gather) be.gather_logit_rows(*step, x, last);
  const backend::Backend::InputNorm norm{.weight = final_norm_, .eps = eps, .normed = last};
  const Vector no_bias{};
  be.matmul_shared_input(gather ? last : x, &norm, std::span<const Matrix>(&lm_head_, 1),
                         std::span<const Vector>(&no_bias, 1), std::span<const Tensor>(&out, 1));
  return out;
}

}  // namespace nibble::model
