#include "backend/cpu/cpu_backend.h"
#include "backend/validate.h"

#include <cblas.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"

namespace nibble::backend {

namespace {

class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(int64_t bytes) : storage_((bytes + 15) / 16) , bytes_(bytes) {}
  void* data() override { return storage_.data(); }
  int64_t bytes() const override { return bytes_; }

 private:
  struct alignas(16) Chunk {
    unsigned char b[16];
  };
  std::vector<Chunk> storage_;  // 16-byte aligned, zero-initialized
  int64_t bytes_;
};

void check_same_shape(const char* op, Tensor a, Tensor b) {
  NIBBLE_CHECK(a.rows == b.rows && a.cols == b.cols, "{}: shape mismatch [{}, {}] vs [{}, {}]", op, a.rows, a.cols,
               b.rows, b.cols);
}

// Splits `rows` into chunks of about 16 rows for parallel_for.
constexpr int64_t kRowsPerTask = 16;

}  // namespace

CpuBackend::CpuBackend(CpuBackendOptions options) : pool_(options.num_threads) {}

int64_t CpuBackend::memory_bytes() const {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  NIBBLE_CHECK(pages > 0 && page_size > 0, "device 'cpu': the physical memory size is unknown (sysconf)");
  return static_cast<int64_t>(pages) * static_cast<int64_t>(page_size);
}

std::unique_ptr<Buffer> CpuBackend::allocate(int64_t bytes) {
  NIBBLE_CHECK(bytes >= 0, "cannot allocate {} bytes", bytes);
  return std::make_unique<HostBuffer>(bytes);
}

void CpuBackend::copy_from_host(void* device_dst, const void* host_src, int64_t bytes) {
  if (bytes > 0) std::memcpy(device_dst, host_src, static_cast<size_t>(bytes));
}

void CpuBackend::copy_to_host(void* host_dst, const void* device_src, int64_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, device_src, static_cast<size_t>(bytes));
}

Matrix CpuBackend::upload_matrix(const float* host_data, int64_t out_features, int64_t in_features,
                                 std::unique_ptr<Buffer>& owner) {
  owner.reset();
  return {host_data, out_features, in_features};
}

Vector CpuBackend::upload_vector(const float* host_data, int64_t size, std::unique_ptr<Buffer>& owner) {
  owner.reset();
  return {host_data, size};
}

std::unique_ptr<PlannedStep> CpuBackend::plan(const StepPlan& plan) {
  if (!plan.has_fed_tokens()) return std::make_unique<PlannedStep>(plan);
  StepPlan resolved = plan;
  for (size_t t = 0; t < resolved.fed_rows.size(); ++t) {
    const int32_t row = resolved.fed_rows[t];
    if (row < 0) continue;
    NIBBLE_CHECK(launched_valid_ && row < static_cast<int32_t>(launched_.size()),
                 "plan: token {} is fed from sample row {}, but the last sample_launch drew {} rows", t, row,
                 launched_valid_ ? launched_.size() : 0);
    resolved.token_ids[t] = launched_[static_cast<size_t>(row)].id;
  }
  return std::make_unique<PlannedStep>(std::move(resolved));
}

void CpuBackend::sample_launch(Tensor logits, std::span<const SampleRequest> requests) {
  launched_valid_ = false;
  launched_.assign(requests.size(), SampledToken{});
  sample(logits, requests, launched_);
  launched_valid_ = true;
}

void CpuBackend::sample_wait(std::span<SampledToken> out) {
  NIBBLE_CHECK(launched_valid_, "sample_wait: no sample_launch to wait for");
  NIBBLE_CHECK(out.size() == launched_.size(), "sample_wait: {} outputs for {} launched rows", out.size(),
               launched_.size());
  std::copy(launched_.begin(), launched_.end(), out.begin());
}

void CpuBackend::embedding(const PlannedStep& step, const Matrix& table, Tensor out) {
  const StepPlan& plan = step.host();
  NIBBLE_CHECK(out.rows == plan.total_tokens && out.cols == table.in_features,
               "embedding: out is [{}, {}], expected [{}, {}]", out.rows, out.cols, plan.total_tokens,
               table.in_features);
  const auto* rows = static_cast<const float*>(table.data);
  for (int64_t r = 0; r < out.rows; ++r) {
    const int64_t id = plan.token_ids[r];
    NIBBLE_CHECK(id >= 0 && id < table.out_features, "token id {} is outside the vocabulary of {}", id,
                 table.out_features);
    std::memcpy(out.row(r), rows + id * table.in_features, static_cast<size_t>(table.in_features) * sizeof(float));
  }
}

void CpuBackend::rms_norm(Tensor x, const Vector& weight, float eps, Tensor out) {
  check_same_shape("rms_norm", x, out);
  NIBBLE_CHECK(weight.size == x.cols, "rms_norm: weight has {} elements, rows have {}", weight.size, x.cols);
  pool_.parallel_for((x.rows + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task) {
    const int64_t end = std::min(x.rows, (task + 1) * kRowsPerTask);
    for (int64_t r = task * kRowsPerTask; r < end; ++r) {
      const float* in = x.row(r);
      float* o = out.row(r);
      double sum_sq = 0.0;
      for (int64_t i = 0; i < x.cols; ++i) sum_sq += static_cast<double>(in[i]) * in[i];
      const float inv_rms = 1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(x.cols)) + eps);
      for (int64_t i = 0; i < x.cols; ++i) o[i] = weight.data[i] * (in[i] * inv_rms);
    }
  });
}

void CpuBackend::matmul(Tensor x, const Matrix& w, const Vector& bias, Tensor out) {
  validate_matmul(x, w, bias, out);
  if (x.rows == 0) return;
  // out [rows, out] = x [rows, in] · W^T, W row-major [out, in].
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(x.rows), static_cast<int>(w.out_features),
              static_cast<int>(w.in_features), 1.0f, x.data, static_cast<int>(x.cols),
              static_cast<const float*>(w.data), static_cast<int>(w.in_features), 0.0f, out.data,
              static_cast<int>(out.cols));
  if (bias.data != nullptr) {
    for (int64_t r = 0; r < out.rows; ++r) {
      float* o = out.row(r);
      for (int64_t i = 0; i < out.cols; ++i) o[i] += bias.data[i];
    }
  }
}

void CpuBackend::rope(const PlannedStep& step, Tensor q, Tensor k, int64_t head_dim, const Vector& inv_freq) {
  const StepPlan& plan = step.host();
  NIBBLE_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even, got {}", head_dim);
  NIBBLE_CHECK(inv_freq.size == head_dim / 2, "rope: {} inverse frequencies for head_dim {}", inv_freq.size, head_dim);
  NIBBLE_CHECK(q.rows == plan.total_tokens && k.rows == plan.total_tokens, "rope: q has {} rows, k {}, the step {}",
               q.rows, k.rows, plan.total_tokens);
  NIBBLE_CHECK(q.cols % head_dim == 0 && k.cols % head_dim == 0, "rope: q/k widths {}/{} not multiples of head_dim {}",
               q.cols, k.cols, head_dim);
  const int64_t half = head_dim / 2;
  pool_.parallel_for(q.rows, [&](int64_t r) {
    // Angles in float32 as Hugging Face computes them: position · inv_freq, then cos/sin.
    std::vector<float> cos_v(half), sin_v(half);
    const float pos = static_cast<float>(plan.positions[r]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq.data[i];
      cos_v[i] = std::cos(angle);
      sin_v[i] = std::sin(angle);
    }
    for (Tensor t : {q, k}) {
      float* row = t.row(r);
      for (int64_t h = 0; h < t.cols / head_dim; ++h) {
        float* x = row + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = x[i], x2 = x[i + half];
          x[i] = x1 * cos_v[i] - x2 * sin_v[i];
          x[i + half] = x2 * cos_v[i] + x1 * sin_v[i];
        }
      }
    }
  });
}

void CpuBackend::silu_mul(Tensor gate, Tensor up, Tensor out) {
  check_same_shape("silu_mul", gate, up);
  check_same_shape("silu_mul", gate, out);
  const int64_t n = gate.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate.data[i];
    out.data[i] = g / (1.0f + std::exp(-g)) * up.data[i];
  }
}

void CpuBackend::add(Tensor a, Tensor b, Tensor out) {
  check_same_shape("add", a, b);
  check_same_shape("add", a, out);
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) out.data[i] = a.data[i] + b.data[i];
}

void CpuBackend::gather_logit_rows(const PlannedStep& step, Tensor x, Tensor out) {
  const StepPlan& plan = step.host();
  NIBBLE_CHECK(x.rows == plan.total_tokens, "gather_logit_rows: x has {} rows, the step {}", x.rows, plan.total_tokens);
  NIBBLE_CHECK(out.rows == plan.num_logit_rows() && out.cols == x.cols,
               "gather_logit_rows: out is [{}, {}], expected [{}, {}]", out.rows, out.cols, plan.num_logit_rows(),
               x.cols);
  for (int64_t i = 0; i < out.rows; ++i) {
    std::memcpy(out.row(i), x.row(plan.logit_rows[i]), static_cast<size_t>(x.cols) * sizeof(float));
  }
}

void CpuBackend::kv_write(const PlannedStep& step, const KvCacheView& cache, int64_t layer, Tensor k, Tensor v) {
  cpu_kv_write(pool_, step.host(), cache, layer, k, v);
}

void CpuBackend::attention(const PlannedStep& step, const KvCacheView& cache, int64_t layer,
                           const AttentionShape& shape, Tensor q, Tensor k, Tensor v, Tensor out) {
  cpu_attention(pool_, step.host(), cache, layer, shape, q, k, v, out);
}

}  // namespace nibble::backend
