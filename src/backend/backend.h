#pragma once
// The ops seam: everything the model's forward pass asks of a device. The forward pass
// (model/transformer.h) is written only against this interface; cpu/ implements it in float32 as
// the oracle, cuda/ on the GPU. Every op validates its shapes (expected vs actual in the message).
//
// Conventions shared by every backend:
//   - activations are Tensor views [tokens, features] in the backend's memory, float32;
//   - a step is planned once (plan()) and the PlannedStep is passed to every op of every layer;
//   - the KV cache is the paged pool of cache/page_layout.h, reached through KvCacheView;
//   - ops may run asynchronously; copy_to_host() waits for the results it copies.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "backend/step_plan.h"
#include "backend/tensor.h"
#include "cache/page_layout.h"
#include "common/error.h"
#include "quant/kv_format.h"

namespace nibble::backend {

// The KV pool as the attention ops see it. The pool is num_pages × layout->page_bytes() bytes in the
// backend's memory, page p at p · page_bytes (layout in cache/page_layout.h). The global scales g
// are per full-attention layer (1.0 = SGLang's recipe); rotation applies to q, k and v.
struct KvCacheView {
  uint8_t* pool = nullptr;                      // [num_pages][page_bytes]
  int64_t num_pages = 0;
  const cache::PageLayout* layout = nullptr;
  const cache::KvGlobalScales* scales = nullptr;  // k[layer], v[layer], host memory
  quant::Rotation rotation = quant::Rotation::kNone;
  // nvfp4 block-scale rule of kv_write (quant/nvfp4.h); both backends implement both rules, bit-exactly alike.
  quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6;
};

// Geometry of one attention layer.
struct AttentionShape {
  int64_t num_heads = 0;     // query heads
  int64_t num_kv_heads = 0;  // query head h reads KV head h / (num_heads / num_kv_heads)
  int64_t head_dim = 0;
  float scale = 0.0f;        // softmax scale, 1/sqrt(head_dim) for every supported model
};

// The attention geometry and KV formats of the model a backend runs. Declared before plan()
// (prepare_attention) so that plan() can make the step's attention metadata (CUDA: the split-KV
// plan and its workspace) once per step: no attention call then allocates or plans.
struct AttentionGeometry {
  AttentionShape shape;
  quant::ElemFormat k_format = quant::ElemFormat::kF32;
  quant::ElemFormat v_format = quant::ElemFormat::kF32;
};

// One logits row to sample on the device (sample()). temperature 0 or top_k 1 = greedy (the largest
// logit, the lowest id on ties, exactly sampling::greedy). Otherwise p = softmax(logits /
// temperature), kept = the most probable tokens allowed by top_k, top_p and min_p (the rules of
// sampling/sampler.h), and one draw u = sampling::philox_uniform(seed, draw) picks from the kept mass.
struct SampleRequest {
  float temperature = 0.0f;
  int64_t top_k = 0;    // 0 = off
  float top_p = 1.0f;   // 1 = off
  float min_p = 0.0f;   // 0 = off
  uint64_t seed = 0;    // the request's stream
  uint64_t draw = 0;    // this draw's index in the stream (0, 1, 2, ... per sampled token)
  int32_t top_logprobs = 0;  // also return the row's N most probable tokens, 0 <= N <= kMaxSampleTopLogprobs
};
inline constexpr int32_t kMaxSampleTopLogprobs = 20;  // OpenAI's top_logprobs limit
struct TopLogprob {
  int32_t id = 0;
  float logprob = 0.0f;  // log softmax(logits)[id] at temperature 1
};
struct SampledToken {
  int32_t id = 0;
  float logprob = 0.0f;  // log softmax(logits)[id] at temperature 1 (the OpenAI API's logprob)
  // The min(top_logprobs, vocab) largest logits of the row: larger logit first, lower id first on
  // equal logits (exact comparisons of the logits), each with its temperature-1 logprob.
  int32_t num_top = 0;
  std::array<TopLogprob, kMaxSampleTopLogprobs> top{};
};

// A step as a backend holds it after plan(): the host plan plus whatever the device needs.
class PlannedStep {
 public:
  explicit PlannedStep(StepPlan plan) : plan_(std::move(plan)) {}
  virtual ~PlannedStep() = default;
  const StepPlan& host() const { return plan_; }

 private:
  StepPlan plan_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // ---- memory ---------------------------------------------------------------------------------
  // Bytes of the memory allocate() draws from: the machine's physical RAM (CPU), the device's total
  // memory (CUDA). `nibble serve --mem-fraction` sizes the KV pool as a fraction of it.
  virtual int64_t memory_bytes() const = 0;
  virtual std::unique_ptr<Buffer> allocate(int64_t bytes) = 0;
  virtual void copy_from_host(void* device_dst, const void* host_src, int64_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* device_src, int64_t bytes) = 0;
  // Makes a float32 host weight matrix W [out, in] usable by matmul/embedding. `owner` receives the
  // device copy when the backend needs one; the CPU backend borrows host_data (keep it alive).
  virtual Matrix upload_matrix(const float* host_data, int64_t out_features, int64_t in_features,
                               std::unique_ptr<Buffer>& owner) = 0;
  virtual Vector upload_vector(const float* host_data, int64_t size, std::unique_ptr<Buffer>& owner) = 0;

  // ---- the step plan --------------------------------------------------------------------------
  // The plan's fed tokens (StepPlan::fed_rows) are resolved here, from the last sample_launch():
  // throws nibble::Error when a fed row is not a row it drew.
  virtual std::unique_ptr<PlannedStep> plan(const StepPlan& plan) = 0;
  // The attention geometry every later plan() prepares for (see AttentionGeometry). Optional: a
  // backend that needs no per-step attention metadata ignores it.
  virtual void prepare_attention(const AttentionGeometry& geometry) { (void)geometry; }
  // The batch size a step of `num_seqs` decode sequences should be padded to (CUDA: the CUDA-graph
  // bucket); the caller pads with sequences whose results it discards. num_seqs = no padding.
  virtual int64_t decode_batch_bucket(int64_t num_seqs) const { return num_seqs; }

  // Starts the work the backend holds back (CUDA: a decode step's graph, recorded by its ops and
  // launched at the end of the step), without waiting for it. A caller that launches a step and
  // then waits for something else (the previous step's draws) calls it first.
  virtual void flush() {}

  // ---- sampling ----------------------------------------------------------------------------------
  // out[r] = a token drawn from logits row r [rows, vocab] in the backend's memory under requests[r];
  // only the ids (and their logprobs) come back to the host, plus out[r].top when
  // requests[r].top_logprobs > 0 (so a step that reports top_logprobs keeps its logits on the device;
  // the CPU backend computes them in float64, CUDA in float32, the ids identical). Throws
  // nibble::Error when the counts differ or a request is out of range (sampling::validate's rules,
  // top_logprobs in [0, kMaxSampleTopLogprobs]).
  virtual void sample(Tensor logits, std::span<const SampleRequest> requests, std::span<SampledToken> out) = 0;
  // sample() in two halves, so that the caller can launch the next step in between: sample_launch()
  // validates and starts the draws (the same rules and results as sample()), sample_wait() returns
  // them. The launched draws' ids are what the next plan's fed tokens (SequenceStep::fed_row) read.
  // A later sample_launch() or sample() replaces the launched draws, waited for or not. Throws
  // nibble::Error as sample() does, and from sample_wait() when out's size is not the launched rows
  // or nothing was launched.
  virtual void sample_launch(Tensor logits, std::span<const SampleRequest> requests) = 0;
  virtual void sample_wait(std::span<SampledToken> out) = 0;

  // ---- element-wise and dense ops ---------------------------------------------------------------
  // out [total_tokens, hidden] = table[token_ids[row]]; table [vocab, hidden]. Throws on an id
  // outside the vocabulary.
  virtual void embedding(const PlannedStep& step, const Matrix& table, Tensor out) = 0;
  // out [rows, n] = x / sqrt(mean(x²) + eps) * weight [n], per row. out may alias x. Per-head
  // q/k norms pass the [tokens * heads, head_dim] view.
  virtual void rms_norm(Tensor x, const Vector& weight, float eps, Tensor out) = 0;
  // out [rows, out] = x [rows, in] @ W^T (+ bias [out] when bias.data). out must not alias x.
  virtual void matmul(Tensor x, const Matrix& w, const Vector& bias, Tensor out) = 0;
  // Rotary embedding in place, Hugging Face rotate-half convention: for i < head_dim/2 with
  // angle = position · inv_freq[i]: (x_i, x_{i+d/2}) -> (x_i cos - x_{i+d/2} sin, x_{i+d/2} cos + x_i sin).
  // q [tokens, num_heads * head_dim], k [tokens, num_kv_heads * head_dim], inv_freq [head_dim / 2].
  virtual void rope(const PlannedStep& step, Tensor q, Tensor k, int64_t head_dim, const Vector& inv_freq) = 0;
  // out [rows, n] = silu(gate) * up (SwiGLU); out may alias gate or up.
  virtual void silu_mul(Tensor gate, Tensor up, Tensor out) = 0;
  // out = a + b, same shapes; out may alias a or b.
  virtual void add(Tensor a, Tensor b, Tensor out) = 0;
  // out [num_logit_rows, cols] = x rows plan.logit_rows.
  virtual void gather_logit_rows(const PlannedStep& step, Tensor x, Tensor out) = 0;

  // ---- fused products (a backend may do each in one pass; the defaults are the ops above, in
  // this order, so a backend that keeps them computes bit for bit what the separate calls do) ----
  // An RMSNorm applied to a product's input first: the product reads rms_norm(x, weight, eps).
  // normed [rows, x.cols] is scratch: the default writes the normalized rows there and multiplies
  // them; a backend that fuses the norm may leave it unwritten.
  struct InputNorm {
    Vector weight;
    float eps = 0.0f;
    Tensor normed;
  };
  // outs[i] = n(x) @ ws[i]^T (+ biases[i]) for products that share their input (q/k/v; or one
  // product, the LM head), n = the norm when `norm`, else identity; equal span lengths.
  virtual void matmul_shared_input(Tensor x, const InputNorm* norm, std::span<const Matrix> ws,
                                   std::span<const Vector> biases, std::span<const Tensor> outs) {
    NIBBLE_CHECK(ws.size() == biases.size() && ws.size() == outs.size(),
                 "matmul_shared_input: {} matrices, {} biases, {} outputs", ws.size(), biases.size(), outs.size());
    if (norm != nullptr) {
      rms_norm(x, norm->weight, norm->eps, norm->normed);
      x = norm->normed;
    }
    for (size_t i = 0; i < ws.size(); ++i) matmul(x, ws[i], biases[i], outs[i]);
  }
  // SwiGLU product: out = silu(n(x) @ w_gate^T) * (n(x) @ w_up^T), n as above. gate and up
  // [rows, w_gate.out] are scratch the default writes (matmul into each, then silu_mul(gate, up,
  // out)); out may alias gate.
  virtual void matmul_swiglu(Tensor x, const InputNorm* norm, const Matrix& w_gate, const Matrix& w_up, Tensor gate,
                             Tensor up, Tensor out) {
    if (norm != nullptr) {
      rms_norm(x, norm->weight, norm->eps, norm->normed);
      x = norm->normed;
    }
    matmul(x, w_gate, {}, gate);
    matmul(x, w_up, {}, up);
    silu_mul(gate, up, out);
  }
  // Residual product: residual += x @ W^T. scratch [rows, w.out] is written by the default
  // (matmul into it, then add(residual, scratch, residual)); x must not alias residual.
  virtual void matmul_residual_add(Tensor x, const Matrix& w, Tensor scratch, Tensor residual) {
    matmul(x, w, {}, scratch);
    add(residual, scratch, residual);
  }

  // ---- the KV cache and attention ---------------------------------------------------------------
  // Quantizes and stores the new tokens' K/V of full-attention layer `layer` (rotated first when
  // cache.rotation is Hadamard): k, v [total_tokens, num_kv_heads * head_dim] (after RoPE).
  virtual void kv_write(const PlannedStep& step, const KvCacheView& cache, int64_t layer, Tensor k, Tensor v) = 0;
  // rope(step, q, k, head_dim, inv_freq) then kv_write(step, cache, layer, k, v), in one call: q and
  // k are left rotated in place as rope leaves them. The default is those two ops (the CPU oracle); a
  // backend may fuse them (CUDA: one kernel, its rotation within rope's tolerance of the CPU's and
  // the stored bytes those of kv_write on the k it leaves).
  virtual void rope_kv_write(const PlannedStep& step, const KvCacheView& cache, int64_t layer, Tensor q, Tensor k,
                             Tensor v, int64_t head_dim, const Vector& inv_freq) {
    rope(step, q, k, head_dim, inv_freq);
    kv_write(step, cache, layer, k, v);
  }
  // out [total_tokens, num_heads * head_dim] = causal attention of q [total_tokens, num_heads *
  // head_dim] per sequence, along each sequence's AttentionPath: the cached prefix is read from the
  // quantized pages (dequantized inside the loop, never to a prefix-sized buffer), the chunk's own
  // K/V from k, v [total_tokens, num_kv_heads * head_dim]. kv_write of this layer must run first
  // (decode reads its own new token from the pages).
  virtual void attention(const PlannedStep& step, const KvCacheView& cache, int64_t layer,
                         const AttentionShape& shape, Tensor q, Tensor k, Tensor v, Tensor out) = 0;
};

// How a backend stores weight matrices (Matrix); vectors (norms, biases) are always float32.
//   kBF16  rounded once to bf16 (round-to-nearest-even) and multiplied with activations rounded to
//          bf16 (f32 accumulation): half the memory and bandwidth, logits within ~1e-2 of f32's.
//   kF32   float32 as loaded, multiplied in float32 (no TF32, no reduced-precision products): the
//          CUDA backend then matches the CPU backend up to summation order.
enum class WeightPrecision : uint8_t { kBF16, kF32 };

// "cpu" (always) or "cuda" (when built with the CUDA backend). num_threads 0 = one per core.
// weights: nullopt = the backend's default, bf16 on cuda; the CPU backend is float32 only and
// rejects an explicit kBF16 (nibble::Error) rather than silently computing something else.
struct BackendOptions {
  std::string device = "cpu";
  int num_threads = 0;
  std::optional<WeightPrecision> weights;
  // CUDA: capture decode steps in CUDA graphs and replay them (the environment variable
  // NIBBLE_CUDA_GRAPHS=0 also turns them off). Ignored by the CPU backend.
  bool cuda_graphs = true;
};
// Throws nibble::Error for an unknown device name or "cuda" in a build without the CUDA backend.
std::unique_ptr<Backend> make_backend(const BackendOptions& options);

}  // namespace nibble::backend
