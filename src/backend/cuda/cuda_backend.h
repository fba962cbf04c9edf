#pragma once
// The CUDA backend: the ops seam (backend/backend.h) on one NVIDIA GPU.
//
//   memory      device buffers (cudaMalloc, zero-filled), copies on the backend's stream;
//   weights     matrices in the backend's WeightPrecision (backend.h), fixed at construction: every
//               Matrix this backend hands out has it (the seam's Matrix carries no dtype).
//               kBF16 (default): converted once from f32 with round-to-nearest-even (quant/bf16.h);
//               kF32: copied as they are. Vectors stay f32;
//   matmul      cuBLAS, f32 output (+ a bias kernel). kBF16: the f32 activation rows are rounded to
//               bf16, then cublasGemmEx with f32 accumulation. kF32: cublasGemmEx on the f32 rows
//               with CUBLAS_COMPUTE_32F_PEDANTIC (f32 products and sums, never TF32);
//   small ops   elementwise.h;
//   KV writes   kv_write.h (head_dim 64/128/256), generic_kv_write.h otherwise;
//   attention   decode sequences -> decode_attention.h (head_dim 64/128/256, page_size % 16 == 0),
//               prefill / extend sequences (and decode in other geometries) -> prefill_attention.h;
//               a mixed step runs both, each on its own sequences.
//
// All work is queued on one stream owned by the backend; copy_to_host waits for it. plan() uploads
// the step's arrays once (one device allocation, stream-ordered); every layer's ops read them. The
// decode split plan depends on the attention shape, which the seam's plan() does not see, so it is
// made by the step's first attention() call and reused by every later layer.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "backend/backend.h"

namespace nibble::backend {

class CudaBackend final : public Backend {
 public:
  // Uses the current CUDA device. Throws nibble::Error when there is none.
  explicit CudaBackend(WeightPrecision weights = WeightPrecision::kBF16);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }

  std::unique_ptr<Buffer> allocate(int64_t bytes) override;
  void copy_from_host(void* device_dst, const void* host_src, int64_t bytes) override;
  void copy_to_host(void* host_dst, const void* device_src, int64_t bytes) override;
  // W [out, in] f32 on the host -> [out, in] on the device in weight_precision() (owner holds it).
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

  WeightPrecision weight_precision() const { return weights_; }
  cudaStream_t stream() const { return stream_; }
  // Waits for all queued work.
  void synchronize();

 private:
  // Grows the bf16 scratch that matmul converts its activations into (stream-ordered).
  void reserve_bf16_scratch(int64_t elements);

  WeightPrecision weights_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  int num_sms_ = 0;
  int64_t max_in_features_ = 0;         // widest matrix uploaded: sizes the scratch in plan()
  void* bf16_scratch_ = nullptr;        // [bf16_scratch_elements_] bf16 activations of one matmul (kBF16 only)
  int64_t bf16_scratch_elements_ = 0;
};

// The factory's entry (backend/factory.cpp). options.weights nullopt = kBF16; num_threads is ignored.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);

}  // namespace nibble::backend
