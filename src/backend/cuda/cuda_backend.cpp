// The CUDA backend (cuda_backend.h): the seam's shape checks, then one kernel launch or cuBLAS call
// per op on the backend's stream.
#include "backend/cuda/cuda_backend.h"
#include "backend/validate.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_step.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemv.h"
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

uint64_t sig_i(int64_t v) { return static_cast<uint64_t>(v); }
uint64_t tsig(Tensor t) { return sig(t.data) ^ (sig_i(t.rows) << 1) ^ (sig_i(t.cols) << 33); }

// One bf16 product as a GemvParams (gemv.h): out = x @ W^T (+ bias).
cuda::GemvParams single_gemv(Tensor x, const Matrix& w, const Vector& bias, Tensor out) {
  cuda::GemvParams p{.x = x.data, .rows = x.rows, .k = w.in_features, .segments = {}, .num_segments = 1};
  p.segments[0] = {.w = static_cast<const uint16_t*>(w.data), .bias = bias.data, .out = out.data, .n = w.out_features};
  return p;
}

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;


}  // namespace

CudaBackend::CudaBackend(WeightPrecision weights, bool cuda_graphs)
    : weights_(weights), graphs_enabled_(cuda_graphs && !graphs_disabled_by_env()) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  NIBBLE_CHECK(status == cudaSuccess && count > 0, "device 'cuda': no usable CUDA device ({})",
               status == cudaSuccess ? "cudaGetDeviceCount returned 0" : cudaGetErrorString(status));
  int device = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
  NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
  size_t free_bytes = 0, total_bytes = 0;
  NIBBLE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  memory_bytes_ = static_cast<int64_t>(total_bytes);
  NIBBLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  NIBBLE_CUBLAS_CHECK(cublasCreate(&blas_));
  NIBBLE_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  // A workspace of our own: cuBLAS then allocates nothing while a decode step is being captured, and
  // picks the same kernels captured and eager.
  NIBBLE_CUDA_CHECK(cudaMalloc(&blas_workspace_, kCublasWorkspaceBytes));
  NIBBLE_CUBLAS_CHECK(cublasSetWorkspace(blas_, blas_workspace_, kCublasWorkspaceBytes));
  // The k-split GEMV's (gemv.h: the down product at 3-8 rows), for every width it takes: 2 MiB.
  const int64_t split_bytes = cuda::gemv_split_workspace_bytes(cuda::kGemvSplitMaxN);
  NIBBLE_CUDA_CHECK(cudaMalloc(&gemv_split_memory_, static_cast<size_t>(split_bytes)));
  // The counters start at zero; on stream_ (non-blocking: no order with the legacy stream's work).
  NIBBLE_CUDA_CHECK(cudaMemsetAsync(gemv_split_memory_, 0, static_cast<size_t>(split_bytes), stream_));
  gemv_split_ = {.partials = static_cast<float*>(gemv_split_memory_),
                 .counters = reinterpret_cast<uint32_t*>(static_cast<float*>(gemv_split_memory_) +
                                                         cuda::kGemvKParts * (cuda::kGemvSplitMaxN / 16) * 128),
                 .max_n = cuda::kGemvSplitMaxN};
}

CudaBackend::~CudaBackend() {
  recorder_.abort(stream_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  graphs_.clear();
  sampling_.release();
  prefill_workspace_ = StreamBuffer();  // freed on stream_, before it is destroyed
  extend_split_workspace_ = StreamBuffer();
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (bf16_scratch_ != nullptr) cudaFree(bf16_scratch_);
  if (blas_workspace_ != nullptr) cudaFree(blas_workspace_);
  if (gemv_split_memory_ != nullptr) cudaFree(gemv_split_memory_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaBackend::synchronize() {
  end_graph_section();
  NIBBLE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::end_graph_section() { recorder_.finish(stream_, graph_stats_); }

std::unique_ptr<Buffer> CudaBackend::allocate(int64_t bytes) {
  NIBBLE_CHECK(bytes >= 0, "cannot allocate {} bytes", bytes);
  end_graph_section();  // cudaMalloc cannot be captured
  return std::make_unique<DeviceBuffer>(bytes, stream_);
}

void CudaBackend::copy_from_host(void* device_dst, const void* host_src, int64_t bytes) {
  end_graph_section();
  if (bytes <= 0) return;
  NIBBLE_CUDA_CHECK(
      cudaMemcpyAsync(device_dst, host_src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
  synchronize();  // host_src may be freed as soon as we return
}

void CudaBackend::copy_to_host(void* host_dst, const void* device_src, int64_t bytes) {
  end_graph_section();  // the end of a decode step: launch its graph (or its deferred ops) first
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
  recorder_.abort(stream_);  // a section a failed step left open
  // Size the matmul scratch for this step now, so no layer allocates (f32 weights need none).
  if (weights_ == WeightPrecision::kBF16) reserve_bf16_scratch(plan.total_tokens * max_in_features_);
  auto step = std::make_unique<CudaPlannedStep>(plan, geometry_ ? &*geometry_ : nullptr, num_sms_);
  // The tensor-core prefill's and extend's bf16 K/V workspace, sized here so that attention()
  // allocates nothing.
  if (step->num_prefill() + step->num_extend() > 0 && geometry_.has_value() &&
      tensor_core_prefill(geometry_->shape.head_dim)) {
    prefill_workspace_.reserve(
        cuda::prefill_workspace_bytes(plan.total_tokens, geometry_->shape.num_kv_heads, geometry_->shape.head_dim),
        stream_);
  }
  if (step->num_extend() > 0 && geometry_.has_value() && tensor_core_prefill(geometry_->shape.head_dim)) {
    extend_split_workspace_.reserve(cuda::extend_split_workspace_bytes(geometry_->shape.head_dim, num_sms_), stream_);
  }
  // A decode step (every sequence decodes) with a declared geometry runs through a graph entry.
  const bool graph_step = graphs_enabled_ && geometry_.has_value() && step->all_decode() &&
                          step->num_chunk_work() == 0 && graph_batch_bucket(plan.num_seqs()) > 0;
  if (!graph_step) {
    step->bind_owned(stream_);
    resolve_fed_tokens(*step);
    ++graph_stats_.eager_steps;
    return step;
  }
  const auto& split = step->planned_decode();
  const GraphKey key{.num_seqs = plan.num_seqs(),
                     .max_pages_per_seq = plan.max_pages_per_seq,
                     .page_size = plan.page_size,
                     .split_planned = split.has_value(),
                     .num_work = split ? split->num_work : 0,
                     .num_units = split ? split->num_units : 0,
                     .max_splits = split ? split->max_splits : 0};
  GraphEntry& entry = graphs_.find_or_add(key, stream_);
  step->bind(entry.memory, stream_);  // inputs into the entry's fixed buffers, outside any graph
  resolve_fed_tokens(*step);
  if (entry.exec != nullptr) {
    recorder_.begin(entry, GraphMode::kReplay, stream_);
  } else if (++entry.seen >= 2) {  // the first time runs eagerly: every launcher is warmed up
    recorder_.begin(entry, GraphMode::kCapture, stream_);
  } else {
    ++graph_stats_.eager_steps;
  }
  if (recorder_.mode() != GraphMode::kEager) {
    recorder_.op({0x504C414Eull, sig(bf16_scratch_), sig(&entry), sig(blas_workspace_)}, [] {});
  }
  return step;
}

void CudaBackend::prepare_attention(const AttentionGeometry& geometry) { geometry_ = geometry; }

bool CudaBackend::tensor_core_prefill(int64_t head_dim) const {
  return weights_ == WeightPrecision::kBF16 && cuda::prefill_attention_supports_head_dim(head_dim);
}

int64_t CudaBackend::decode_batch_bucket(int64_t num_seqs) const {
  if (!graphs_enabled_) return num_seqs;
  const int64_t bucket = graph_batch_bucket(num_seqs);
  return bucket > 0 ? bucket : num_seqs;
}

void CudaBackend::resolve_fed_tokens(const CudaPlannedStep& step) {
  const StepPlan& plan = step.host();
  if (!plan.has_fed_tokens()) return;
  const int32_t max_row = *std::max_element(plan.fed_rows.begin(), plan.fed_rows.end());
  NIBBLE_CHECK(max_row < sampling_.launched_rows, "plan: a token is fed from sample row {}, but the last "
               "sample_launch drew {} rows", max_row, std::max<int64_t>(sampling_.launched_rows, 0));
  static_assert(sizeof(cuda::DeviceSampleResult) % sizeof(int32_t) == 0 && offsetof(cuda::DeviceSampleResult, id) == 0);
  cuda::resolve_fed_tokens({.token_ids = step.mutable_token_ids(),
                            .fed_rows = step.fed_rows(),
                            .ids = &sampling_.results()->id,
                            .id_stride = sizeof(cuda::DeviceSampleResult) / sizeof(int32_t),
                            .n = plan.total_tokens},
                           stream_);
}

void CudaBackend::sample(Tensor logits, std::span<const SampleRequest> requests, std::span<SampledToken> out) {
  NIBBLE_CHECK(out.size() == requests.size(), "sample: {} requests, {} outputs: expected equal counts",
               requests.size(), out.size());
  sample_launch(logits, requests);
  sample_wait(out);
}

void CudaBackend::sample_launch(Tensor logits, std::span<const SampleRequest> requests) {
  end_graph_section();
  cuda::launch_sample_rows(logits, requests, sampling_, stream_);
}

void CudaBackend::sample_wait(std::span<SampledToken> out) { cuda::wait_sample_rows(out, sampling_); }

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
  for (size_t t = 0; t < plan.token_ids.size(); ++t) {
    if (!plan.fed_rows.empty() && plan.fed_rows[t] >= 0) continue;  // drawn on the device, within the vocabulary
    const int32_t id = plan.token_ids[t];
    NIBBLE_CHECK(id >= 0 && id < table.out_features, "token id {} is outside the vocabulary of {}", id,
                 table.out_features);
  }
  const cuda::EmbeddingParams params{
      .token_ids = s.token_ids(),
      .table = table.data,
      .table_dtype = weights_ == WeightPrecision::kF32 ? cuda::WeightDtype::kF32 : cuda::WeightDtype::kBF16,
      .out = out.data,
      .rows = out.rows,
      .vocab = table.out_features,
      .hidden = table.in_features};
  recorder_.op({1, sig(s.token_ids()), sig(table.data), tsig(out), sig_i(table.out_features)},
               [this, params] { cuda::embedding(params, stream_); });
}

void CudaBackend::rms_norm(Tensor x, const Vector& weight, float eps, Tensor out) {
  check_same_shape("rms_norm", x, out);
  NIBBLE_CHECK(weight.size == x.cols, "rms_norm: weight has {} elements, rows have {}", weight.size, x.cols);
  const cuda::RmsNormParams params{
      .x = x.data, .weight = weight.data, .out = out.data, .rows = x.rows, .cols = x.cols, .eps = eps};
  recorder_.op({2, tsig(x), sig(weight.data), tsig(out), sig(eps)}, [this, params] { cuda::rms_norm(params, stream_); });
}

void CudaBackend::matmul(Tensor x, const Matrix& w, const Vector& bias, Tensor out) {
  validate_matmul(x, w, bias, out);
  NIBBLE_CHECK(x.rows < (int64_t{1} << 31) && w.out_features < (int64_t{1} << 31) && w.in_features < (int64_t{1} << 31),
               "matmul: [{}, {}] x [{}, {}]^T exceeds cuBLAS's int dimensions", x.rows, x.cols, w.out_features,
               w.in_features);
  if (x.rows == 0) return;
  if (const cuda::GemvParams gemv = single_gemv(x, w, bias, out); use_gemv(gemv)) {
    record_gemv(gemv);  // decode batches: W streamed once, bias fused
    return;
  }
  if (weights_ == WeightPrecision::kBF16) reserve_bf16_scratch(x.numel());  // a no-op after plan() sized it
  recorder_.op({3, tsig(x), sig(w.data), sig_i(w.out_features), sig_i(w.in_features), sig(bias.data), tsig(out),
                sig(bf16_scratch_)},
               [this, x, w, bias, out] { launch_matmul(x, w, bias, out); });
}

void CudaBackend::launch_matmul(Tensor x, const Matrix& w, const Vector& bias, Tensor out) {
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
    cuda::convert_f32_to_bf16({.x = x.data, .out = static_cast<uint16_t*>(bf16_scratch_), .n = x.numel()}, stream_);
    NIBBLE_CUBLAS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w.data, CUDA_R_16BF, k,
                                     bf16_scratch_, CUDA_R_16BF, k, &beta, out.data, CUDA_R_32F, m,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (bias.data != nullptr) {
    cuda::bias_add({.x = out.data, .bias = bias.data, .rows = out.rows, .cols = out.cols}, stream_);
  }
}

bool CudaBackend::use_gemv(const cuda::GemvParams& p) const {
  return weights_ == WeightPrecision::kBF16 && small_matmul_ && cuda::gemv_supports(p) &&
         (gemv_everywhere_ || p.rows <= cuda::gemv_faster_rows(p));
}

void CudaBackend::record_gemv(cuda::GemvParams p) {
  p.programmatic_launch = gemv_programmatic_;
  p.split = gemv_split_;  // fixed for the backend's life: not part of the op's signature
  const cuda::GemvSegment* g = p.segments;
  recorder_.op({15, sig(p.x), sig_i(p.rows), sig_i(p.k), sig(g[0].w), sig(g[0].bias), sig(g[0].out), sig_i(g[0].n),
                sig(g[1].w), sig(g[1].bias), sig(g[1].out), sig_i(g[1].n), sig(g[2].w), sig(g[2].bias), sig(g[2].out),
                sig_i(g[2].n), sig_i(p.num_segments), sig_i(static_cast<int64_t>(p.epilogue)), sig(p.residual),
                sig_i(p.programmatic_launch), sig(p.norm_weight), sig(p.norm_eps)},
               [this, p] { cuda::gemv_bf16(p, stream_); });
}

// The fused norm's checks (backend.h InputNorm) and its fields of a GemvParams.
void CudaBackend::apply_input_norm(const char* op, Tensor x, const InputNorm* norm, cuda::GemvParams& p) {
  if (norm == nullptr) return;
  NIBBLE_CHECK(norm->weight.size == x.cols, "{}: norm weight has {} elements, rows have {}", op, norm->weight.size,
               x.cols);
  check_same_shape(op, x, norm->normed);
  p.norm_weight = norm->weight.data;
  p.norm_eps = norm->eps;
}

void CudaBackend::matmul_shared_input(Tensor x, const InputNorm* norm, std::span<const Matrix> ws,
                                      std::span<const Vector> biases, std::span<const Tensor> outs) {
  NIBBLE_CHECK(ws.size() == biases.size() && ws.size() == outs.size(),
               "matmul_shared_input: {} matrices, {} biases, {} outputs", ws.size(), biases.size(), outs.size());
  for (size_t i = 0; i < ws.size(); ++i) validate_matmul(x, ws[i], biases[i], outs[i]);
  cuda::GemvParams p{.x = x.data, .rows = x.rows, .k = x.cols, .segments = {}};
  apply_input_norm("matmul_shared_input", x, norm, p);
  p.num_segments = static_cast<int>(std::min<size_t>(ws.size(), cuda::kGemvMaxSegments + 1));
  for (size_t i = 0; i < ws.size() && i < static_cast<size_t>(cuda::kGemvMaxSegments); ++i) {
    p.segments[i] = {.w = static_cast<const uint16_t*>(ws[i].data), .bias = biases[i].data, .out = outs[i].data,
                     .n = ws[i].out_features};
  }
  if (x.rows == 0 || ws.empty() || !use_gemv(p)) {  // more products than the kernel takes, or no GEMV
    Backend::matmul_shared_input(x, norm, ws, biases, outs);
    return;
  }
  record_gemv(p);
}

void CudaBackend::matmul_swiglu(Tensor x, const InputNorm* norm, const Matrix& w_gate, const Matrix& w_up,
                                Tensor gate, Tensor up, Tensor out) {
  validate_matmul(x, w_gate, {}, gate);
  validate_matmul(x, w_up, {}, up);
  check_same_shape("matmul_swiglu", gate, out);
  cuda::GemvParams p{.x = x.data, .rows = x.rows, .k = x.cols, .segments = {}, .num_segments = 2,
                     .epilogue = cuda::GemvEpilogue::kSwiGlu};
  p.segments[0] = {.w = static_cast<const uint16_t*>(w_gate.data), .out = out.data, .n = w_gate.out_features};
  p.segments[1] = {.w = static_cast<const uint16_t*>(w_up.data), .n = w_up.out_features};
  apply_input_norm("matmul_swiglu", x, norm, p);
  if (x.rows == 0 || !use_gemv(p)) {
    Backend::matmul_swiglu(x, norm, w_gate, w_up, gate, up, out);
    return;
  }
  record_gemv(p);
}

void CudaBackend::matmul_residual_add(Tensor x, const Matrix& w, Tensor scratch, Tensor residual) {
  validate_matmul(x, w, {}, scratch);
  check_same_shape("matmul_residual_add", scratch, residual);
  NIBBLE_CHECK(x.data != residual.data, "matmul_residual_add: x must not alias the residual");
  cuda::GemvParams p{
      .x = x.data, .rows = x.rows, .k = x.cols, .segments = {}, .num_segments = 1, .residual = residual.data};
  p.segments[0] = {.w = static_cast<const uint16_t*>(w.data), .out = residual.data, .n = w.out_features};
  if (x.rows == 0 || !use_gemv(p)) {
    Backend::matmul_residual_add(x, w, scratch, residual);
    return;
  }
  record_gemv(p);
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
  const cuda::RopeParams params{.q = q.data,
                                .k = k.data,
                                .positions = s.positions(),
                                .inv_freq = inv_freq.data,
                                .rows = q.rows,
                                .q_heads = q.cols / head_dim,
                                .k_heads = k.cols / head_dim,
                                .head_dim = head_dim};
  recorder_.op({4, tsig(q), tsig(k), sig(s.positions()), sig(inv_freq.data), sig_i(head_dim)},
               [this, params] { cuda::rope(params, stream_); });
}

void CudaBackend::silu_mul(Tensor gate, Tensor up, Tensor out) {
  check_same_shape("silu_mul", gate, up);
  check_same_shape("silu_mul", gate, out);
  const cuda::SiluMulParams params{.gate = gate.data, .up = up.data, .out = out.data, .n = gate.numel()};
  recorder_.op({5, tsig(gate), tsig(up), tsig(out)}, [this, params] { cuda::silu_mul(params, stream_); });
}

void CudaBackend::add(Tensor a, Tensor b, Tensor out) {
  check_same_shape("add", a, b);
  check_same_shape("add", a, out);
  const cuda::AddParams params{.a = a.data, .b = b.data, .out = out.data, .n = a.numel()};
  recorder_.op({6, tsig(a), tsig(b), tsig(out)}, [this, params] { cuda::add(params, stream_); });
}

void CudaBackend::gather_logit_rows(const PlannedStep& step, Tensor x, Tensor out) {
  const CudaPlannedStep& s = cuda_step(step, "gather_logit_rows");
  const StepPlan& plan = s.host();
  NIBBLE_CHECK(x.rows == plan.total_tokens, "gather_logit_rows: x has {} rows, the step {}", x.rows, plan.total_tokens);
  NIBBLE_CHECK(out.rows == plan.num_logit_rows() && out.cols == x.cols,
               "gather_logit_rows: out is [{}, {}], expected [{}, {}]", out.rows, out.cols, plan.num_logit_rows(),
               x.cols);
  const cuda::RowCopyParams params{.x = x.data, .out = out.data, .index = s.logit_rows(), .count = out.rows,
                                   .cols = x.cols};
  recorder_.op({7, tsig(x), tsig(out), sig(s.logit_rows())}, [this, params] { cuda::gather_rows(params, stream_); });
}

namespace {

// The write of layer `layer`'s new K/V rows (f32 activations) into the step's pages.
cuda::KvWriteParams kv_write_params(const CudaPlannedStep& s, const KvCacheView& cache, int64_t layer, Tensor k,
                                    Tensor v) {
  const StepPlan& plan = s.host();
  return cuda::KvWriteParams{.k = k.data,
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
                             .rotation = cache.rotation,
                             .nvfp4_scale_rule = cache.nvfp4_scale_rule};
}

}  // namespace

void CudaBackend::kv_write(const PlannedStep& step, const KvCacheView& cache, int64_t layer, Tensor k, Tensor v) {
  const CudaPlannedStep& s = cuda_step(step, "kv_write");
  const StepPlan& plan = s.host();
  validate_cache("kv_write", plan, cache, layer);
  const cache::KvGeometry& g = cache.layout->geometry();
  check_kv_shape("kv_write", "k", plan, g, k);
  check_kv_shape("kv_write", "v", plan, g, v);
  cuda::KvWriteParams params = kv_write_params(s, cache, layer, k, v);
  params.programmatic_launch = small_op_fusion_;
  const bool fused = fused_kv_kernels_support(g.head_dim);
  recorder_.op({8, tsig(k), tsig(v), sig(cache.pool), sig_i(cache.layout->page_bytes()),
                sig_i(static_cast<int64_t>(cache.layout->dtype())), sig_i(layer),
                sig(params.k_global_scale), sig(params.v_global_scale), sig_i(static_cast<int64_t>(cache.rotation)),
                sig(s.positions()), sig(s.page_tables()), sig_i(static_cast<int64_t>(cache.nvfp4_scale_rule)),
                sig_i(params.programmatic_launch)},
               [this, params, fused] {
                 if (fused) {
                   cuda::kv_write(params, stream_);
                 } else {
                   cuda::generic_kv_write(params, stream_);
                 }
               });
}

void CudaBackend::rope_kv_write(const PlannedStep& step, const KvCacheView& cache, int64_t layer, Tensor q, Tensor k,
                                Tensor v, int64_t head_dim, const Vector& inv_freq) {
  const CudaPlannedStep& s = cuda_step(step, "rope_kv_write");
  const StepPlan& plan = s.host();
  validate_cache("rope_kv_write", plan, cache, layer);
  const cache::KvGeometry& g = cache.layout->geometry();
  if (!small_op_fusion_ || !fused_kv_kernels_support(g.head_dim) || head_dim != g.head_dim) {
    Backend::rope_kv_write(step, cache, layer, q, k, v, head_dim, inv_freq);
    return;
  }
  check_kv_shape("rope_kv_write", "k", plan, g, k);
  check_kv_shape("rope_kv_write", "v", plan, g, v);
  NIBBLE_CHECK(inv_freq.size == head_dim / 2, "rope_kv_write: {} inverse frequencies for head_dim {}", inv_freq.size,
               head_dim);
  NIBBLE_CHECK(q.rows == plan.total_tokens && q.cols % head_dim == 0,
               "rope_kv_write: q is [{}, {}], expected {} rows of a multiple of head_dim {}", q.rows, q.cols,
               plan.total_tokens, head_dim);
  cuda::KvWriteParams params = kv_write_params(s, cache, layer, k, v);
  params.rope_inv_freq = inv_freq.data;  // RoPE of q and k fused in; the rotated k is written back
  params.q = q.data;
  params.q_heads = q.cols / head_dim;
  params.k_rotated = k.data;
  params.programmatic_launch = true;
  recorder_.op({16, tsig(q), tsig(k), tsig(v), sig(cache.pool), sig_i(cache.layout->page_bytes()),
                sig_i(static_cast<int64_t>(cache.layout->dtype())), sig_i(layer),
                sig(params.k_global_scale), sig(params.v_global_scale), sig_i(static_cast<int64_t>(cache.rotation)),
                sig(s.positions()), sig(s.page_tables()), sig_i(static_cast<int64_t>(cache.nvfp4_scale_rule)),
                sig(inv_freq.data), sig_i(head_dim)},
               [this, params] { cuda::kv_write(params, stream_); });
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
  // Everything a launch below bakes in beyond the step's device arrays.
  const std::initializer_list<uint64_t> attention_sig = {
      9, tsig(q), tsig(k), tsig(v), tsig(out), sig(cache.pool), sig_i(cache.layout->page_bytes()),
      sig_i(static_cast<int64_t>(cache.layout->dtype())), sig_i(layer),
      sig(chunk.k_global_scale), sig(chunk.v_global_scale), sig_i(static_cast<int64_t>(cache.rotation)),
      sig_i(shape.num_heads), sig_i(shape.num_kv_heads), sig(shape.scale), sig(s.seq_info())};
  // Prefill sequences on the tensor cores (bf16 weights, head_dim 64/128/256); then the chunk kernel
  // takes the extend sequences, leaving the prefill rows alone (skip_prefill).
  const bool tc_prefill = s.num_prefill() > 0 && tensor_core_prefill(d);
  const bool tc_extend = s.num_extend() > 0 && tensor_core_prefill(d);
  if (tc_prefill || tc_extend) {  // both kernels read the step's K/V from its bf16 copy
    const int64_t workspace_bytes = cuda::prefill_workspace_bytes(plan.total_tokens, shape.num_kv_heads, d);
    if (prefill_workspace_.bytes() < workspace_bytes) {  // no geometry declared before plan() (op tests)
      NIBBLE_CHECK(recorder_.mode() == GraphMode::kEager,
                   "attention: the prefill workspace was not sized in plan(); it cannot grow inside a "
                   "CUDA-graph capture");
      prefill_workspace_.reserve(workspace_bytes, stream_);
    }
  }
  if (tc_prefill) {
    const cuda::PrefillAttentionParams prefill{.q = q.data,
                                               .k = k.data,
                                               .v = v.data,
                                               .out = out.data,
                                               .seq_info = s.seq_info(),
                                               .num_seqs = plan.num_seqs(),
                                               .total_tokens = plan.total_tokens,
                                               .max_new_tokens = s.max_prefill_tokens(),
                                               .kv_workspace = prefill_workspace_.data(),
                                               .num_q_heads = shape.num_heads,
                                               .num_kv_heads = shape.num_kv_heads,
                                               .head_dim = d,
                                               .softmax_scale = shape.scale};
    recorder_.op({13, tsig(q), tsig(k), tsig(v), tsig(out), sig(s.seq_info()), sig_i(plan.num_seqs()),
                  sig_i(s.max_prefill_tokens()), sig(prefill_workspace_.data()), sig_i(shape.num_heads),
                  sig_i(shape.num_kv_heads), sig(shape.scale)},
                 [this, prefill] { cuda::prefill_attention(prefill, stream_); });
  }
  // Extend sequences on the tensor cores too (extend_attention: the quantized prefix tile by tile
  // from the pages, then the chunk's own K/V causally).
  if (tc_extend) {
    // The grid's bound and the prefix split's hints (extend_attention.h): the extend sequences'
    // longest chunk, their new tokens in all, their longest prefix.
    int64_t max_extend = 0, extend_tokens = 0, max_prefix = 0;
    for (const SequencePlan& sp : plan.seqs) {
      if (sp.path() != AttentionPath::kExtend) continue;
      max_extend = std::max(max_extend, sp.num_new_tokens);
      extend_tokens += sp.num_new_tokens;
      max_prefix = std::max(max_prefix, sp.first_position);
    }
    if (extend_split_workspace_.bytes() == 0) {  // no geometry declared before plan() (op tests)
      NIBBLE_CHECK(recorder_.mode() == GraphMode::kEager,
                   "attention: the extend split workspace was not sized in plan(); it cannot grow inside a "
                   "CUDA-graph capture");
      extend_split_workspace_.reserve(cuda::extend_split_workspace_bytes(d, num_sms_), stream_);
    }
    const cuda::ExtendAttentionParams extend{.q = q.data,
                                             .k = k.data,
                                             .v = v.data,
                                             .out = out.data,
                                             .seq_info = s.seq_info(),
                                             .num_seqs = plan.num_seqs(),
                                             .total_tokens = plan.total_tokens,
                                             .max_new_tokens = max_extend,
                                             .pool = chunk.pool,
                                             .page_tables = chunk.page_tables,
                                             .max_pages_per_seq = chunk.max_pages_per_seq,
                                             .page_bytes = chunk.page_bytes,
                                             .k_layout = k_part,
                                             .v_layout = v_part,
                                             .k_global_scale = chunk.k_global_scale,
                                             .v_global_scale = chunk.v_global_scale,
                                             .rotation = chunk.rotation,
                                             .num_q_heads = shape.num_heads,
                                             .num_kv_heads = shape.num_kv_heads,
                                             .head_dim = d,
                                             .softmax_scale = shape.scale,
                                             // The prefill call above converted this step's K/V.
                                             .kv_workspace = prefill_workspace_.data(),
                                             .kv_workspace_filled = tc_prefill,
                                             .extend_seqs = s.num_extend(),
                                             .extend_tokens = extend_tokens,
                                             .max_prefix_tokens = max_prefix,
                                             .num_sms = num_sms_,
                                             .split_workspace = extend_split_workspace_.data(),
                                             .split_workspace_bytes = extend_split_workspace_.bytes()};
    recorder_.op({17, sig_i(max_extend), sig(s.page_tables()), sig_i(plan.max_pages_per_seq),
                  sig(prefill_workspace_.data()), sig_i(tc_prefill ? 1 : 0), sig_i(s.num_extend()),
                  sig_i(extend_tokens), sig_i(max_prefix), sig(extend_split_workspace_.data()),
                  sig_i(extend_split_workspace_.bytes())},
                 [] {});
    recorder_.op(attention_sig, [this, extend] { cuda::extend_attention(extend, stream_); });
  }
  // Extend sequences (and prefill sequences when the tensor-core kernel did not take them).
  if (s.num_chunk_work() > 0 && !tc_extend && (!tc_prefill || s.num_extend() > 0)) {
    chunk.skip_prefill = tc_prefill;
    if (tc_prefill) recorder_.op({14, 1}, [] {});
    chunk.work = s.chunk_work();
    chunk.num_work = s.num_chunk_work();
    recorder_.op(attention_sig, [this, chunk] { cuda::chunk_attention(chunk, stream_); });
  }
  if (s.num_decode() == 0) return;
  if (!decode_kernel) {  // decode in a geometry the decode kernel does not take: the generic kernel
    chunk.work = s.decode_work();
    chunk.num_work = s.num_decode();
    recorder_.op(attention_sig, [this, chunk] { cuda::chunk_attention(chunk, stream_); });
    return;
  }
  const AttentionGeometry geometry{.shape = shape, .k_format = k_part.format, .v_format = v_part.format};
  CudaDecodeState& dec = s.decode_state(geometry, num_sms_, recorder_.mode() == GraphMode::kEager);
  const int64_t width = shape.num_heads * d;
  // The decode kernel reads q [num_decode][heads * head_dim] and writes out alike; in a mixed step
  // the decode rows are gathered into (and scattered back from) contiguous workspaces.
  const float* q_rows = q.data;
  float* out_rows = out.data;
  const int32_t* page_tables = s.page_tables();
  if (!s.all_decode()) {
    const cuda::RowCopyParams gather{
        .x = q.data, .out = dec.q_rows.as<float>(), .index = s.decode_rows(), .count = s.num_decode(), .cols = width};
    recorder_.op({10, sig(gather.out)}, [this, gather] { cuda::gather_rows(gather, stream_); });
    q_rows = dec.q_rows.as<float>();
    out_rows = dec.out_rows.as<float>();
    page_tables = s.decode_page_tables();
  }
  recorder_.op(attention_sig, [] {});  // the shared arguments, for the fingerprint
  const cuda::DecodeAttentionParams params{.q = q_rows,
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
                          .softmax_scale = shape.scale,
                          .early_dependents = merge_early_trigger_,
                          // A step begins with plainly launched work (the plan upload, the embedding),
                          // so every earlier step's KV is complete, and this step writes only each
                          // decode sequence's last token (the kernel just before this one).
                          .prefix_ready = decode_prefix_before_wait_,
                          .spread_blocks = decode_spread_blocks_,
                          // f32 weights are the exact mode: p enters P·V as exact hi + lo halves.
                          .exact_p = weights_ == WeightPrecision::kF32};
  recorder_.op({11, sig(dec.plan_device.data()), sig(dec.partial_out.data()), sig(dec.partial_lse.data()),
                sig_i(dec.plan.num_work), sig_i(dec.plan.num_units), sig(page_tables), sig_i(merge_early_trigger_),
                sig_i(decode_prefix_before_wait_), sig_i(decode_spread_blocks_)},
               [this, params] { cuda::decode_attention(params, stream_); });
  if (!s.all_decode()) {
    const cuda::RowCopyParams scatter{
        .x = out_rows, .out = out.data, .index = s.decode_rows(), .count = s.num_decode(), .cols = width};
    recorder_.op({12, sig(scatter.x)}, [this, scatter] { cuda::scatter_rows(scatter, stream_); });
  }
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options.weights.value_or(WeightPrecision::kBF16), options.cuda_graphs);
}

}  // namespace nibble::backend
