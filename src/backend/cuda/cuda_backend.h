#pragma once
// The CUDA backend: the ops seam (backend/backend.h) on one NVIDIA GPU.
//
//   memory      device buffers (cudaMalloc, zero-filled), copies on the backend's stream;
//   weights     matrices in the backend's WeightPrecision (backend.h), fixed at construction: every
//               Matrix this backend hands out has it (the seam's Matrix carries no dtype).
//               kBF16 (default): converted once from f32 with round-to-nearest-even (quant/bf16.h);
//               kF32: copied as they are. Vectors stay f32;
//   matmul      cuBLAS, f32 output (+ a bias kernel). kBF16: the f32 activation rows are rounded to
//               bf16, then cublasGemmEx with f32 accumulation; 1..8 rows (decode) instead go through
//               gemv_bf16 (gemv.h: the same roundings, another summation order), which also does the
//               fused products in one launch each (q/k/v and gate/up + SwiGLU with their input
//               RMSNorm, the LM head with the final norm, o and down with the residual add); other
//               shapes run the seam's default (the separate ops).
//               kF32: cublasGemmEx on the f32 rows with CUBLAS_COMPUTE_32F_PEDANTIC (f32 products and
//               sums, never TF32);
//   small ops   elementwise.h;
//   KV writes   kv_write.h (head_dim 64/128/256), generic_kv_write.h otherwise; rope_kv_write as
//               one kv_write.h kernel (RoPE of q and k fused in, launched programmatically behind
//               the q/k/v GEMV);
//   attention   decode sequences -> decode_attention.h (head_dim 64/128/256, page_size % 16 == 0),
//               prefill / extend sequences (and decode in other geometries) -> prefill_attention.h;
//               a mixed step runs both, each on its own sequences. Prefill sequences (no cached
//               prefix) run on the tensor-core prefill_attention when the weights are kBF16 and
//               head_dim is 64/128/256 (the step's numerics are bf16 already); with kF32 weights
//               (exact CPU comparisons) or other head dims they stay on the f32 chunk_attention.
//
// All work is queued on one stream owned by the backend; copy_to_host waits for it. plan() uploads
// the step's arrays once and, for the geometry declared by prepare_attention(), makes the decode
// split plan and sizes its workspace (cuda_step.h): every layer's ops only read them. A caller that
// declared no geometry (op tests) gets the split plan made at the step's first attention() call.
// Decode steps are captured in CUDA graphs and replayed (cuda_graph.h); sample() draws tokens on
// the device (sampling.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <optional>

#include "backend/backend.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/cuda_step.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/sampling.h"

namespace nibble::backend {

class CudaBackend final : public Backend {
 public:
  // Uses the current CUDA device. Throws nibble::Error when there is none.
  explicit CudaBackend(WeightPrecision weights = WeightPrecision::kBF16, bool cuda_graphs = true);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }

  int64_t memory_bytes() const override { return memory_bytes_; }
  std::unique_ptr<Buffer> allocate(int64_t bytes) override;
  void copy_from_host(void* device_dst, const void* host_src, int64_t bytes) override;
  void copy_to_host(void* host_dst, const void* device_src, int64_t bytes) override;
  // W [out, in] f32 on the host -> [out, in] on the device in weight_precision() (owner holds it).
  Matrix upload_matrix(const float* host_data, int64_t out_features, int64_t in_features,
                       std::unique_ptr<Buffer>& owner) override;
  Vector upload_vector(const float* host_data, int64_t size, std::unique_ptr<Buffer>& owner) override;

  std::unique_ptr<PlannedStep> plan(const StepPlan& plan) override;
  void prepare_attention(const AttentionGeometry& geometry) override;
  // The graph bucket (cuda_graph.h) when graphs are on, else num_seqs.
  int64_t decode_batch_bucket(int64_t num_seqs) const override;
  void sample(Tensor logits, std::span<const SampleRequest> requests, std::span<SampledToken> out) override;
  // The draws' ids stay on the device (the sampler's results) for the next plan's fed tokens;
  // sample_wait() waits for their copy back only, not for work queued after it.
  void sample_launch(Tensor logits, std::span<const SampleRequest> requests) override;
  void flush() override { end_graph_section(); }
  void sample_wait(std::span<SampledToken> out) override;

  void embedding(const PlannedStep& step, const Matrix& table, Tensor out) override;
  void rms_norm(Tensor x, const Vector& weight, float eps, Tensor out) override;
  void matmul(Tensor x, const Matrix& w, const Vector& bias, Tensor out) override;
  void rope(const PlannedStep& step, Tensor q, Tensor k, int64_t head_dim, const Vector& inv_freq) override;
  void silu_mul(Tensor gate, Tensor up, Tensor out) override;
  void add(Tensor a, Tensor b, Tensor out) override;
  void gather_logit_rows(const PlannedStep& step, Tensor x, Tensor out) override;
  void matmul_shared_input(Tensor x, const InputNorm* norm, std::span<const Matrix> ws, std::span<const Vector> biases,
                           std::span<const Tensor> outs) override;
  void matmul_swiglu(Tensor x, const InputNorm* norm, const Matrix& w_gate, const Matrix& w_up, Tensor gate, Tensor up,
                     Tensor out) override;
  void matmul_residual_add(Tensor x, const Matrix& w, Tensor scratch, Tensor residual) override;

  void kv_write(const PlannedStep& step, const KvCacheView& cache, int64_t layer, Tensor k, Tensor v) override;
  // One kernel (kv_write.h with RoPE, launched programmatically behind the q/k/v GEMV) for head_dim
  // 64/128/256; otherwise, or with small-op fusion off, the seam's default (rope, then kv_write).
  void rope_kv_write(const PlannedStep& step, const KvCacheView& cache, int64_t layer, Tensor q, Tensor k, Tensor v,
                     int64_t head_dim, const Vector& inv_freq) override;
  void attention(const PlannedStep& step, const KvCacheView& cache, int64_t layer, const AttentionShape& shape,
                 Tensor q, Tensor k, Tensor v, Tensor out) override;

  WeightPrecision weight_precision() const { return weights_; }
  cudaStream_t stream() const { return stream_; }
  bool graphs_enabled() const { return graphs_enabled_; }
  // Turns decode-step graphs on or off from the next plan() (benchmarks compare both on one model).
  void set_graphs_enabled(bool on) { graphs_enabled_ = on; }
  // bf16 matmuls of 1..8 rows through gemv.h's gemv_bf16 (default, fused products too) or cuBLAS
  // (the fused products then run as the separate ops).
  void set_small_matmul(bool on) { small_matmul_ = on; }
  // With small matmuls on, the GEMV for every product it takes (tests of the kernel, benchmarks),
  // instead of only up to the rows where it outpaces cuBLAS (gemv_faster_rows; default).
  void set_gemv_everywhere(bool on) { gemv_everywhere_ = on; }
  // GEMV launches with programmatic dependent launch (gemv.h; default on).
  void set_gemv_programmatic_launch(bool on) { gemv_programmatic_ = on; }
  // RoPE + KV write in one kernel and the KV write launched programmatically (default on); off: the
  // separate rope and kv_write kernels, launched plainly (benchmarks compare both).
  void set_small_op_fusion(bool on) { small_op_fusion_ = on; }
  bool small_op_fusion() const { return small_op_fusion_; }
  // The decode split merge triggers the next kernel (the o GEMV) at its start (default on; see
  // DecodeAttentionParams::early_dependents); off: at its end (benchmarks compare both).
  void set_merge_early_trigger(bool on) { merge_early_trigger_ = on; }
  // Decode attention copies the KV of a sequence's earlier tokens before waiting for the KV write
  // of its last one (default on; DecodeAttentionParams::prefix_ready); off: every copy after the
  // wait (benchmarks compare both).
  void set_decode_prefix_before_wait(bool on) { decode_prefix_before_wait_ = on; }
  // Decode plans sized for 2 blocks per SM launch with at most 2 per SM (default on;
  // DecodeAttentionParams::spread_blocks); off: as many as fit (benchmarks compare both).
  void set_decode_spread_blocks(bool on) { decode_spread_blocks_ = on; }
  const GraphStats& graph_stats() const { return graph_stats_; }
  // Waits for all queued work.
  void synchronize();

 private:
  // Grows the bf16 scratch that matmul converts its activations into (stream-ordered).
  void reserve_bf16_scratch(int64_t elements);
  void launch_matmul(Tensor x, const Matrix& w, const Vector& bias, Tensor out);
  // Whether a product runs on gemv_bf16 (bf16 weights, GEMV on, a shape it takes, rows where it
  // is the faster path unless set_gemv_everywhere).
  bool use_gemv(const cuda::GemvParams& p) const;
  // Records (or launches) one gemv_bf16 call; its signature covers every field of p.
  void record_gemv(cuda::GemvParams p);
  // Checks a fused product's InputNorm (when not null) and sets p's norm fields.
  static void apply_input_norm(const char* op, Tensor x, const InputNorm* norm, cuda::GemvParams& p);
  // Writes the plan's fed tokens into the bound step's token ids, from the sampler's results on the
  // device (stream-ordered after the last sample_launch). Throws nibble::Error for a row it did not draw.
  void resolve_fed_tokens(const CudaPlannedStep& step);
  // Ends a graph section (cuda_graph.h) before a call that cannot be captured.
  void end_graph_section();
  // Whether prefill sequences run on the tensor-core prefill_attention (the rule in the file comment).
  bool tensor_core_prefill(int64_t head_dim) const;

  WeightPrecision weights_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  int num_sms_ = 0;
  int64_t memory_bytes_ = 0;            // the device's total memory (cudaMemGetInfo)
  int64_t max_in_features_ = 0;         // widest matrix uploaded: sizes the scratch in plan()
  void* bf16_scratch_ = nullptr;        // [bf16_scratch_elements_] bf16 activations of one matmul (kBF16 only)
  int64_t bf16_scratch_elements_ = 0;
  void* blas_workspace_ = nullptr;      // cuBLAS's workspace (cublasSetWorkspace), fixed for graph capture
  void* gemv_split_memory_ = nullptr;   // the k-split GEMV's workspace (gemv_split_), fixed likewise
  cuda::GemvSplitWorkspace gemv_split_;
  bool graphs_enabled_ = true;
  bool small_matmul_ = true;
  bool gemv_everywhere_ = false;
  bool gemv_programmatic_ = true;
  bool small_op_fusion_ = true;
  bool merge_early_trigger_ = true;
  bool decode_prefix_before_wait_ = true;
  bool decode_spread_blocks_ = true;
  std::optional<AttentionGeometry> geometry_;  // declared by prepare_attention()
  GraphCache graphs_;
  GraphRecorder recorder_;
  GraphStats graph_stats_;
  cuda::SamplingWorkspace sampling_;
  // bf16 K/V copies for prefill_attention and extend_attention (prefill_workspace_bytes of the
  // step; the extend call reuses what the prefill call wrote), grown in plan()
  // for the declared geometry, or at the first attention() of an eager step that declared none.
  StreamBuffer prefill_workspace_;
  // Partial (O, m, l) records of extend attention's prefix split (extend_split.h): the most any
  // split of the declared head_dim writes on this device (extend_split_workspace_bytes), reserved
  // in plan() with the first extend step.
  StreamBuffer extend_split_workspace_;
};

// The factory's entry (backend/factory.cpp). options.weights nullopt = kBF16; num_threads is ignored.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);

}  // namespace nibble::backend
