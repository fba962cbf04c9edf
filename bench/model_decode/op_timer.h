#pragma once
// A Backend that forwards every call to the CUDA backend and, while timing is on, brackets each
// compute op with CUDA events on the backend's stream: the per-op breakdown of an eager decode step
// (bench_model_decode). Time on only with CUDA graphs off: a captured or replayed step launches
// nothing at the seam, and events between kernels end programmatic launches' overlap (so the
// breakdown is the eager step's, a little slower than a graph replay's).
//
// Op labels: the seam method, with its weight shape for the products ("matmul_swiglu [2x14336,
// 4096] +norm"), so the products of one layer and the LM head are told apart.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"

namespace nibble::bench {

class OpTimer final : public backend::Backend {
 public:
  explicit OpTimer(backend::CudaBackend& inner);
  ~OpTimer() override;

  // Starts timing a step (events from here on); stop_step() waits for the step and adds its ops'
  // times to the totals.
  void start_step();
  void stop_step();

  struct OpTotals {
    int64_t calls = 0;                // over all timed steps
    std::vector<double> us;           // per call
    double weight_bytes_per_call = 0; // bf16 weights the op reads (products), else 0
  };
  // Label -> totals, and the order labels were first seen in.
  const std::map<std::string, OpTotals>& totals() const { return totals_; }
  const std::vector<std::string>& order() const { return order_; }
  int64_t steps() const { return steps_; }

  // Ablation (bench_model_decode --skip): calls of these ops are dropped, not forwarded, so a step
  // (and its graph) holds only the other kernels. The logits are then not the model's; timing only.
  struct Skip {
    bool attention = false;      // attention (decode attention and its split merge)
    bool rope_kv_write = false;  // rope_kv_write (or rope and kv_write when unfused)
  };
  void set_skip(Skip s) { skip_ = s; }

  // Host time instead (bench_model_decode --timeline, graph replays): while on, each op's call,
  // plan() and sample() are timed on the host clock (a replayed step records its ops and launches
  // nothing until the graph), summed per label. Off with event timing on.
  void set_host_timing(bool on) { host_on_ = on; }
  struct HostTotals {
    int64_t calls = 0;
    double total_us = 0;
  };
  const std::map<std::string, HostTotals>& host_totals() const { return host_totals_; }
  const std::vector<std::string>& host_order() const { return host_order_; }
  void clear_host_totals() { host_totals_.clear(), host_order_.clear(); }

  std::string_view name() const override { return inner_.name(); }
  int64_t memory_bytes() const override { return inner_.memory_bytes(); }
  std::unique_ptr<backend::Buffer> allocate(int64_t bytes) override { return inner_.allocate(bytes); }
  void copy_from_host(void* dst, const void* src, int64_t bytes) override { inner_.copy_from_host(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, int64_t bytes) override { inner_.copy_to_host(dst, src, bytes); }
  backend::Matrix upload_matrix(const float* host, int64_t out, int64_t in,
                                std::unique_ptr<backend::Buffer>& owner) override {
    return inner_.upload_matrix(host, out, in, owner);
  }
  backend::Vector upload_vector(const float* host, int64_t size, std::unique_ptr<backend::Buffer>& owner) override {
    return inner_.upload_vector(host, size, owner);
  }
  std::unique_ptr<backend::PlannedStep> plan(const backend::StepPlan& plan) override;
  void prepare_attention(const backend::AttentionGeometry& g) override { inner_.prepare_attention(g); }
  int64_t decode_batch_bucket(int64_t num_seqs) const override { return inner_.decode_batch_bucket(num_seqs); }
  void sample(backend::Tensor logits, std::span<const backend::SampleRequest> requests,
              std::span<backend::SampledToken> out) override;
  void sample_launch(backend::Tensor logits, std::span<const backend::SampleRequest> requests) override;
  void flush() override { inner_.flush(); }
  void sample_wait(std::span<backend::SampledToken> out) override;
  void embedding(const backend::PlannedStep& step, const backend::Matrix& table, backend::Tensor out) override;
  void rms_norm(backend::Tensor x, const backend::Vector& weight, float eps, backend::Tensor out) override;
  void matmul(backend::Tensor x, const backend::Matrix& w, const backend::Vector& bias, backend::Tensor out) override;
  void rope(const backend::PlannedStep& step, backend::Tensor q, backend::Tensor k, int64_t head_dim,
            const backend::Vector& inv_freq) override;
  void silu_mul(backend::Tensor gate, backend::Tensor up, backend::Tensor out) override;
  void add(backend::Tensor a, backend::Tensor b, backend::Tensor out) override;
  void gather_logit_rows(const backend::PlannedStep& step, backend::Tensor x, backend::Tensor out) override;
  void matmul_shared_input(backend::Tensor x, const InputNorm* norm, std::span<const backend::Matrix> ws,
                           std::span<const backend::Vector> biases, std::span<const backend::Tensor> outs) override;
  void matmul_swiglu(backend::Tensor x, const InputNorm* norm, const backend::Matrix& w_gate,
                     const backend::Matrix& w_up, backend::Tensor gate, backend::Tensor up,
                     backend::Tensor out) override;
  void matmul_residual_add(backend::Tensor x, const backend::Matrix& w, backend::Tensor scratch,
                           backend::Tensor residual) override;
  void kv_write(const backend::PlannedStep& step, const backend::KvCacheView& cache, int64_t layer, backend::Tensor k,
                backend::Tensor v) override;
  // Timed as one op ("rope_kv_write") when the CUDA backend fuses it, else as rope and kv_write.
  void rope_kv_write(const backend::PlannedStep& step, const backend::KvCacheView& cache, int64_t layer,
                     backend::Tensor q, backend::Tensor k, backend::Tensor v, int64_t head_dim,
                     const backend::Vector& inv_freq) override;
  void attention(const backend::PlannedStep& step, const backend::KvCacheView& cache, int64_t layer,
                 const backend::AttentionShape& shape, backend::Tensor q, backend::Tensor k, backend::Tensor v,
                 backend::Tensor out) override;

 private:
  // Runs `op` between two events when timing, or timed on the host clock when host timing, under
  // the label label() returns (made only then: the pass-through adds no formatting to a step).
  template <class L, class F>
  void timed(L&& label, double weight_bytes, F&& op);
  void add_host(const std::string& label, std::chrono::steady_clock::time_point begin);

  backend::CudaBackend& inner_;
  bool on_ = false;
  std::vector<cudaEvent_t> events_;  // pool; events_[0] opens the step, events_[i + 1] closes op i
  struct Pending {
    std::string label;
    double weight_bytes;
  };
  std::vector<Pending> pending_;  // ops of the step being timed
  std::map<std::string, OpTotals> totals_;
  std::vector<std::string> order_;
  int64_t steps_ = 0;
  Skip skip_;
  bool host_on_ = false;
  std::map<std::string, HostTotals> host_totals_;
  std::vector<std::string> host_order_;
};

}  // namespace nibble::bench
