#pragma once
// The CPU backend: the float32 oracle. Matrix products through OpenBLAS (cblas_sgemm), the other
// ops on a small thread pool owned by the backend. Weights are borrowed from host memory.
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/thread_pool.h"

namespace nibble::backend {

struct CpuBackendOptions {
  int num_threads = 0;  // 0 = one per core
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options = {});

  std::string_view name() const override { return "cpu"; }

  int64_t memory_bytes() const override;
  std::unique_ptr<Buffer> allocate(int64_t bytes) override;
  void copy_from_host(void* device_dst, const void* host_src, int64_t bytes) override;
  void copy_to_host(void* host_dst, const void* device_src, int64_t bytes) override;
  Matrix upload_matrix(const float* host_data, int64_t out_features, int64_t in_features,
                       std::unique_ptr<Buffer>& owner) override;
  Vector upload_vector(const float* host_data, int64_t size, std::unique_ptr<Buffer>& owner) override;

  std::unique_ptr<PlannedStep> plan(const StepPlan& plan) override;

  void embedding(const PlannedStep& step, const Matrix& table, Tensor out) override;
  void rms_norm(Tensor x, const Vector& weight, float eps, Tensor out) override;
  void matmul(Tensor x, const Matrix& w, const Vector& bias, Tensor out) override;
  void rope(const PlannedStep& step, Tensor q, Tensor k, int64_t head_dim, const Vector& inv_freq) override;
  void silu_mul(Tensor gate, Tensor up, Tensor out) override;
  void add(Tensor a, Tensor b, Tensor out) override;
  void gather_logit_rows(const PlannedStep& step, Tensor x, Tensor out) override;

  void kv_write(const PlannedStep& step, const KvCacheView& cache, int64_t layer, Tensor k, Tensor v) override;
  void attention(const PlannedStep& step, const KvCacheView& cache, int64_t layer, const AttentionShape& shape,
                 Tensor q, Tensor k, Tensor v, Tensor out) override;
  // cpu_sampling.cpp: sampling::greedy, or sampling::filtered_distribution walked in id order.
  void sample(Tensor logits, std::span<const SampleRequest> requests, std::span<SampledToken> out) override;
  // The draws are made at once and held until sample_wait(); plan() reads their ids for fed tokens.
  void sample_launch(Tensor logits, std::span<const SampleRequest> requests) override;
  void sample_wait(std::span<SampledToken> out) override;

  ThreadPool& pool() { return pool_; }

 private:
  ThreadPool pool_;
  std::vector<SampledToken> launched_;  // the last sample_launch()'s draws
  bool launched_valid_ = false;         // launched_ holds draws (sample_launch ran and did not throw)
};

// Attention on the CPU (cpu_attention.cpp), exposed for the backend and its tests.
void cpu_attention(ThreadPool& pool, const StepPlan& plan, const KvCacheView& cache, int64_t layer,
                   const AttentionShape& shape, Tensor q, Tensor k, Tensor v, Tensor out);
void cpu_kv_write(ThreadPool& pool, const StepPlan& plan, const KvCacheView& cache, int64_t layer, Tensor k, Tensor v);

}  // namespace nibble::backend
