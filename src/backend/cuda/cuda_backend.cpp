// The CUDA backend (cuda_backend.h): the seam's shape checks, then one kernel launch or cuBLAS call
// per op on the backend's stream.
#include "backend/cuda/cuda_backend.h"
#include "backend/validate.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_step.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/generic_kv_write.h"
#include "backend/cuda/kv_write.h"
#include "backend/cuda/prefill_attention.h"
#include "common/error.h"

#define NIBBLE_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                                \
    const cublasStatus_t nibble_blas_status_ = (call);                                                \
    if (nibble_blas_status_ != CUBLAS_STATUS_SUCCESS)                                                 \
      NIBBLE_FAIL("cuBLAS error at {}:{}: {} failed: {}", __FILE__, __LINE__, #call,                  \
                  cublasGetStatusString(nibble_blas_status_));                                        \
  } while (0)

namespace nibble::backend {

namespace {

// cudaMalloc'd bytes, zero-filled like the CPU backend's buffers; cudaFree waits for the device.
// The zero fill is queued on the backend's stream: the stream is non-blocking, so a fill on the
// legacy default stream would race with the copies and kernels that follow on it.
class DeviceBuffer final : public Buffer {
 public:
  DeviceBuffer(int64_t bytes, cudaStream_t stream) : bytes_(bytes) {
    if (bytes > 0) {
      NIBBLE_CUDA_CHECK(cudaMalloc(&data_, static_cast<size_t>(bytes)));
      NIBBLE_CUDA_CHECK(cudaMemsetAsync(data_, 0, static_cast<size_t>(bytes), stream));
    }
  }
  ~DeviceBuffer() override {
    if (data_ != nullptr) cudaFree(data_);
  }
  void* data() override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_;
};

void check_same_shape(const char* op, Tensor a, Tensor b) {
  NIBBLE_CHECK(a.rows == b.rows && a.cols == b.cols, "{}: shape mismatch [{}, {}] vs [{}, {}]", op, a.rows, a.cols,
               b.rows, b.cols);
}

const CudaPlannedStep& cuda_step(const PlannedStep& step, const char* op) {
  const auto* s = dynamic_cast<const CudaPlannedStep*>(&step);
  NIBBLE_CHECK(s != nullptr, "{}: the step was not planned by the CUDA backend", op);
  return *s;
}

bool fused_kv_kernels_support(int64_t head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

}  // namespace

CudaBackend::CudaBackend(WeightPrecision weights) : weights_(weights) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  NIBBLE_CHECK(status == cudaSuccess && count > 0, "device 'cuda': no usable CUDA device ({})",
               status == cudaSuccess ? "cudaGetDeviceCount returned 0" : cudaGetErrorString(status));
  int device = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
  NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
  NIBBLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  NIBBLE_CUBLAS_CHECK(cublasCreate(&blas_));
  NIBBLE_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (bf16_scratch_ != nullptr) cudaFree(bf16_scratch_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaBackend::synchronize() { NIBBLE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

std::unique_ptr<Buffer> CudaBackend::allocate(int64_t bytes) {
  NIBBLE_CHECK(bytes >= 0, "cannot allocate {} bytes", bytes);
  return std::make_unique<DeviceBuffer>(bytes, stream_);
}

void CudaBackend::copy_from_host(void* device_dst, const void* host_src, int64_t bytes) {
  if (bytes <= 0) return;
  NIBBLE_CUDA_CHECK(
      cudaMemcpyAsync(device_dst, host_src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
  synchronize();  // host_src may be freed as soon as we return
}

void CudaBackend::copy_to_host(void* host_dst, const void* device_src, int64_t bytes) {
  if (bytes <= 0) return;
  NIBBLE_CUDA_CHECK(
      cudaMemcpyAsync(host_dst, device_src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_));
  synchronize();
}

Matrix CudaBackend::upload_matrix(const float* host_data, int64_t out_features, int64_t in_features,
                                  std::unique_ptr<Buffer>& owner) {
  NIBBLE_CHECK(out_features > 0 && in_features > 0, "upload_matrix: shape [{}, {}] must be positive", out_features,
               in_features);
  const int64_t n = out_features * in_features;
  max_in_features_ = std::max(max_in_features_, in_features);
  if (weights_ == WeightPrecision::kF32) {  // f32 [out, in] as it is
    owner = allocate(n * static_cast<int64_t>(sizeof(float)));
    copy_from_host(owner->data(), host_data, n * static_cast<int64_t>(sizeof(float)));
    return {owner->data(), out_features, in_features};
  }
  owner = allocate(n * static_cast<int64_t>(sizeof(uint16_t)));
  auto* dst = static_cast<uint16_t*>(owner->data());
  // f32 through a staging buffer, rounded to bf16 on the device (quant::bf16_from_f32, RNE), in
  // pieces of at most 16M elements so the staging stays small.
  constexpr int64_t kPiece = int64_t{1} << 24;
  StreamBuffer staging(std::min(n, kPiece) * static_cast<int64_t>(sizeof(float)), stream_);
  for (int64_t first = 0; first < n; first += kPiece) {
    const int64_t count = std::min(kPiece, n - first);
    NIBBLE_CUDA_CHECK(cudaMemcpyAsync(staging.data(), host_data + first, static_cast<size_t>(count) * sizeof(float),
                                      cudaMemcpyHostToDevice, stream_));
    cuda::convert_f32_to_bf16({.x = staging.as<float>(), .out = dst + first, .n = count}, stream_);
  }
  synchronize();
  return {dst, out_features, in_features};
}

Vector CudaBackend::upload_vector(const float* host_data, int64_t size, std::unique_ptr<Buffer>& owner) {
  NIBBLE_CHECK(size >= 0, "upload_vector: size {} is negative", size);
  owner = allocate(size * static_cast<int64_t>(sizeof(float)));
  copy_from_host(owner->data(), host_data, size * static_cast<int64_t>(sizeof(float)));
  return {owner->floats(), size};
}

std::unique_ptr<PlannedStep> CudaBackend::plan(const StepPlan& plan) {
  // Size the matmul scratch for this step now, so no layer allocates (f32 weights need none).
  if (weights_ == WeightPrecision::kBF16) reserve_bf16_scratch(plan.total_tokens * max_in_features_);
  return std::make_unique<CudaPlannedStep>(plan, stream_);
}

void CudaBackend::reserve_bf16_scratch(int64_t elements) {
  if (elements <= bf16_scratch_elements_) return;
  if (bf16_scratch_ != nullptr) NIBBLE_CUDA_CHECK(cudaFreeAsync(bf16_scratch_, stream_));
  bf16_scratch_ = nullptr;
  bf16_scratch_elements_ = 0;
  NIBBLE_CUDA_CHECK(cudaMallocAsync(&bf16_scratch_, static_cast<size_t>(elements) * sizeof(uint16_t), stream_));
  bf16_scratch_elements_ = elements;
}

void CudaBackend::embedding(const PlannedStep& step, const Matrix& table, Tensor out) {
  const CudaPlannedStep& s = cuda_step(step, "embedding");
  const StepPlan& plan = s.host();
  NIBBLE_CHECK(out.rows == plan.total_tokens && out.cols == table.in_features,
               "embedding: out is [{}, {}], expected [{}, {}]", out.rows, out.cols, plan.total_tokens,
               table.in_features);
  for (int32_t id : plan.token_ids) {
    NIBBLE_CHECK(id >= 0 && id < table.out_features, "token id {} is outside the vocabulary of {}", id,
                 table.out_features);
  }
  cuda::embedding({.token_ids = s.token_ids(),
                   .table = table.data,
                   .table_dtype =
                       weights_ == WeightPrecision::kF32 ? cuda::WeightDtype::kF32 : cuda::WeightDtype::kBF16,
                   .out = out.data,
                   .rows = out.rows,
                   .vocab = table.out_features,
                   .hidden = table.in_features},
                  stream_);
}

void CudaBackend::rms_norm(Tensor x, const Vector& weight, float eps, Tensor out) {
  check_same_shape("rms_norm", x, out);
  NIBBLE_CHECK(weight.size == x.cols, "rms_norm: weight has {} elements, rows have {}", weight.size, x.cols);
  cuda::rms_norm({.x = x.data, .weight = weight.data, .out = out.data, .rows = x.rows, .cols = x.cols, .eps = eps},
                 stream_);
}

void CudaBackend::matmul(Tensor x, const Matrix& w, const Vector& bias, Tensor out) {
  validate_matmul(x, w, bias, out);
  NIBBLE_CHECK(x.rows < (int64_t{1} << 31) && w.out_features < (int64_t{1} << 31) && w.in_features < (int64_t{1} << 31),
               "matmul: [{}, {}] x [{}, {}]^T exceeds cuBLAS's int dimensions", x.rows, x.cols, w.out_features,
               w.in_features);
  if (x.rows == 0) return;
  // Row-major out [M, N] = x [M, K] · W^T, W row-major [N, K]. In cuBLAS's column-major terms:
  // out^T [N, M] = W^T(op T of W seen as col-major [K, N]) · x^T (col-major [K, M]).
  const int m = static_cast<int>(w.out_features), n = static_cast<int>(x.rows), k = static_cast<int>(w.in_features);
  const float alpha = 1.0f, beta = 0.0f;
  if (weights_ == WeightPrecision::kF32) {
    // PEDANTIC: f32 products and f32 sums, never TF32 or another reduced-precision path.
    NIBBLE_CUBLAS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w.data, CUDA_R_32F, k, x.data,
                                     CUDA_R_32F, k, &beta, out.data, CUDA_R_32F, m, CUBLAS_COMPUTE_32F_PEDANTIC,
                                     CUBLAS_GEMM_DEFAULT));
  } else {
    reserve_bf16_scratch(x.numel());  // a no-op after plan() sized it
    cuda::convert_f32_to_bf16({.x = x.data, .out = static_cast<uint16_t*>(bf16_scratch_), .n = x.numel()}, stream_);
    NIBBLE_CUBLAS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w.data, CUDA_R_16BF, k,
                                     bf16_scratch_, CUDA_R_16BF, k, &beta, out.data, CUDA_R_32F, m,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (bias.data != nullptr) {
    cuda::bias_add({.x = out.data, .bias = bias.data, .rows = out.rows, .cols = out.cols}, stream_);
  }
}

void CudaBackend::rope(const PlannedStep& step, Tensor q, Tensor k, int64_t head_dim, const Vector& inv_freq) {
  const CudaPlannedStep& s = cuda_step(step, "rope");
  const StepPlan& plan = s.host();
  NIBBLE_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even, got {}", head_dim);
  NIBBLE_CHECK(inv_freq.size == head_dim / 2, "rope: {} inverse frequencies for head_dim {}", inv_freq.size, head_dim);
  NIBBLE_CHECK(q.rows == plan.total_tokens && k.rows == plan.total_tokens, "rope: q has {} rows, k {}, the step {}",
               q.rows, k.rows, plan.total_tokens);
  NIBBLE_CHECK(q.cols % head_dim == 0 && k.cols % head_dim == 0, "rope: q/k widths {}/{} not multiples of head_dim {}",
               q.cols, k.cols, head_dim);
  cuda::rope({.q = q.data,
              .k = k.data,
              .positions = s.positions(),
              .inv_freq = inv_freq.data,
              .rows = q.rows,
              .q_heads = q.cols / head_dim,
              .k_heads = k.cols / head_dim,
              .head_dim = head_dim},
             stream_);
}

void CudaBackend::silu_mul(Tensor gate, Tensor up, Tensor out) {
  check_same_shape("silu_mul", gate, up);
  check_same_shape("silu_mul", gate, out);
  cuda::silu_mul({.gate = gate.data, .up = up.data, .out = out.data, .n = gate.numel()}, stream_);
}

void CudaBackend::add(Tensor a, Tensor b, Tensor out) {
  check_same_shape("add", a, b);
  check_same_shape("add", a, out);
  cuda::add({.a = a.data, .b = b.data, .out = out.data, .n = a.numel()}, stream_);
}

void CudaBackend::gather_logit_rows(const PlannedStep& step, Tensor x, Tensor out) {
  const CudaPlannedStep& s = cuda_step(step, "gather_logit_rows");
  const StepPlan& plan = s.host();
  NIBBLE_CHECK(x.rows == plan.total_tokens, "gather_logit_rows: x has {} rows, the step {}", x.rows, plan.total_tokens);
  NIBBLE_CHECK(out.rows == plan.num_logit_rows() && out.cols == x.cols,
               "gather_logit_rows: out is [{}, {}], expected [{}, {}]", out.rows, out.cols, plan.num_logit_rows(),
               x.cols);
  cuda::gather_rows({.x = x.data, .out = out.data, .index = s.logit_rows(), .count = out.rows, .cols = x.cols},
                    stream_);
}

void CudaBackend::kv_write(const PlannedStep& step, const KvCacheView& cache, int64_t layer, Tensor k, Tensor v) {
  const CudaPlannedStep& s = cuda_step(step, "kv_write");
  const StepPlan& plan = s.host();
  validate_cache("kv_write", plan, cache, layer);
  NIBBLE_CHECK(cache.nvfp4_scale_rule == quant::Nvfp4ScaleRule::kAmaxOver6,
               "kv_write: the CUDA write path implements only the amax/6 nvfp4 block-scale rule (4over6 is CPU-only)");
  const cache::KvGeometry& g = cache.layout->geometry();
  check_kv_shape("kv_write", "k", plan, g, k);
  check_kv_shape("kv_write", "v", plan, g, v);
  const cuda::KvWriteParams params{.k = k.data,
                                   .v = v.data,
                                   .input_dtype = cuda::ActivationDtype::kF32,
                                   .positions = s.positions(),
                                   .row_sequence = s.row_sequence(),
                                   .page_tables = s.page_tables(),
                                   .pool = cache.pool,
                                   .num_tokens = plan.total_tokens,
                                   .max_pages_per_seq = plan.max_pages_per_seq,
                                   .page_bytes = cache.layout->page_bytes(),
                                   .k_layout = cache.layout->k(layer),
                                   .v_layout = cache.layout->v(layer),
                                   .k_global_scale = cache.scales->k[layer],
                                   .v_global_scale = cache.scales->v[layer],
                                   .rotation = cache.rotation};
  if (fused_kv_kernels_support(g.head_dim)) {
    cuda::kv_write(params, stream_);
  } else {
    cuda::generic_kv_write(params, stream_);
  }
}

void CudaBackend::attention(const PlannedStep& step, const KvCacheView& cache, int64_t layer,
                            const AttentionShape& shape, Tensor q, Tensor k, Tensor v, Tensor out) {
  const CudaPlannedStep& s = cuda_step(step, "attention");
  const StepPlan& plan = s.host();
  validate_attention(plan, cache, layer, shape, q, k, v, out);
  const cache::KvGeometry& g = cache.layout->geometry();
  const int64_t d = g.head_dim;
  const cache::KvPartLayout& k_part = cache.layout->k(layer);
  const cache::KvPartLayout& v_part = cache.layout->v(layer);
  const bool decode_kernel = fused_kv_kernels_support(d) && plan.page_size % 16 == 0;
  NIBBLE_CHECK(cuda::chunk_attention_supports_head_dim(d) || (decode_kernel && s.num_chunk_work() == 0),
               "attention: head_dim {} is not supported by the CUDA prefill/extend kernel (8, 16, 32, 64, 96, 128, 256)",
               d);

  cuda::ChunkAttentionParams chunk{.q = q.data,
                                   .k = k.data,
                                   .v = v.data,
                                   .out = out.data,
                                   .seq_info = s.seq_info(),
                                   .num_seqs = plan.num_seqs(),
                                   .pool = cache.pool,
                                   .page_tables = s.page_tables(),
                                   .max_pages_per_seq = plan.max_pages_per_seq,
                                   .page_bytes = cache.layout->page_bytes(),
                                   .k_layout = k_part,
                                   .v_layout = v_part,
                                   .k_global_scale = cache.scales->k[layer],
                                   .v_global_scale = cache.scales->v[layer],
                                   .rotation = cache.rotation,
                                   .num_q_heads = shape.num_heads,
                                   .num_kv_heads = shape.num_kv_heads,
                                   .head_dim = d,
                                   .softmax_scale = shape.scale};
  // Prefill and extend sequences.
  if (s.num_chunk_work() > 0) {
    chunk.work = s.chunk_work();
    chunk.num_work = s.num_chunk_work();
    cuda::chunk_attention(chunk, stream_);
  }
  if (s.num_decode() == 0) return;
  if (!decode_kernel) {  // decode in a geometry the decode kernel does not take: the generic kernel
    chunk.work = s.decode_work();
    chunk.num_work = s.num_decode();
    cuda::chunk_attention(chunk, stream_);
    return;
  }
  CudaDecodeState& dec = s.decode_state(shape.num_heads, shape.num_kv_heads, d, k_part.format, v_part.format, num_sms_);
  const int64_t width = shape.num_heads * d;
  // The decode kernel reads q [num_decode][heads * head_dim] and writes out alike; in a mixed step
  // the decode rows are gathered into (and scattered back from) contiguous workspaces.
  const float* q_rows = q.data;
  float* out_rows = out.data;
  const int32_t* page_tables = s.page_tables();
  if (!s.all_decode()) {
    cuda::gather_rows({.x = q.data, .out = dec.q_rows.as<float>(), .index = s.decode_rows(), .count = s.num_decode(),
                       .cols = width},
                      stream_);
    q_rows = dec.q_rows.as<float>();
    out_rows = dec.out_rows.as<float>();
    page_tables = s.decode_page_tables();
  }
  cuda::decode_attention({.q = q_rows,
                          .q_dtype = cuda::ActivationDtype::kF32,
                          .out = out_rows,
                          .pool = cache.pool,
                          .page_tables = page_tables,
                          .plan_device = dec.plan_device.as<int32_t>(),
                          .plan = &dec.plan,
                          .partial_out = dec.partial_out.as<float>(),
                          .partial_lse = dec.partial_lse.as<float>(),
                          .num_q_heads = shape.num_heads,
                          .max_pages_per_seq = plan.max_pages_per_seq,
                          .page_bytes = cache.layout->page_bytes(),
                          .k_layout = k_part,
                          .v_layout = v_part,
                          .k_global_scale = cache.scales->k[layer],
                          .v_global_scale = cache.scales->v[layer],
                          .rotation = cache.rotation,
                          .softmax_scale = shape.scale},
                         stream_);
  if (!s.all_decode()) {
    cuda::scatter_rows({.x = out_rows, .out = out.data, .index = s.decode_rows(), .count = s.num_decode(),
                        .cols = width},
                       stream_);
  }
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options.weights.value_or(WeightPrecision::kBF16));
}

}  // namespace nibble::backend
