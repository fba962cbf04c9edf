// Host entry points of the small kernels (elementwise.h): validate sizes, then launch (elementwise.cu).
#include "backend/cuda/elementwise.h"

#include "common/error.h"

namespace nibble::cuda {

namespace detail {  // elementwise.cu
void launch_convert_f32_to_bf16(const ConvertBf16Params& p, cudaStream_t stream);
void launch_embedding(const EmbeddingParams& p, cudaStream_t stream);
void launch_resolve_fed_tokens(const FedTokensParams& p, cudaStream_t stream);
void launch_rms_norm(const RmsNormParams& p, cudaStream_t stream);
void launch_rope(const RopeParams& p, cudaStream_t stream);
void launch_silu_mul(const SiluMulParams& p, cudaStream_t stream);
void launch_add(const AddParams& p, cudaStream_t stream);
void launch_bias_add(const BiasAddParams& p, cudaStream_t stream);
void launch_gather_rows(const RowCopyParams& p, cudaStream_t stream);
void launch_scatter_rows(const RowCopyParams& p, cudaStream_t stream);
}  // namespace detail

namespace {

void check_count(const char* op, const char* what, int64_t n) {
  NIBBLE_CHECK(n >= 0, "{}: {} must be >= 0, got {}", op, what, n);
}

}  // namespace

void convert_f32_to_bf16(const ConvertBf16Params& p, cudaStream_t stream) {
  check_count("convert_f32_to_bf16", "n", p.n);
  if (p.n == 0) return;
  NIBBLE_CHECK(p.x && p.out, "convert_f32_to_bf16: a device pointer is null (x {}, out {})", p.x != nullptr,
               p.out != nullptr);
  detail::launch_convert_f32_to_bf16(p, stream);
}

void resolve_fed_tokens(const FedTokensParams& p, cudaStream_t stream) {
  check_count("resolve_fed_tokens", "n", p.n);
  if (p.n == 0) return;
  NIBBLE_CHECK(p.token_ids && p.fed_rows && p.ids && p.id_stride >= 1,
               "resolve_fed_tokens: a device pointer is null or the id stride {} is not positive", p.id_stride);
  detail::launch_resolve_fed_tokens(p, stream);
}

void embedding(const EmbeddingParams& p, cudaStream_t stream) {
  check_count("embedding", "rows", p.rows);
  NIBBLE_CHECK(p.hidden > 0 && p.vocab > 0, "embedding: table is [{}, {}], expected positive sizes", p.vocab,
               p.hidden);
  if (p.rows == 0) return;
  NIBBLE_CHECK(p.token_ids && p.table && p.out, "embedding: a device pointer is null (ids {}, table {}, out {})",
               p.token_ids != nullptr, p.table != nullptr, p.out != nullptr);
  detail::launch_embedding(p, stream);
}

void rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  check_count("rms_norm", "rows", p.rows);
  NIBBLE_CHECK(p.cols > 0, "rms_norm: rows must have > 0 columns, got {}", p.cols);
  NIBBLE_CHECK(p.eps >= 0.0f, "rms_norm: eps must be >= 0, got {}", p.eps);
  if (p.rows == 0) return;
  NIBBLE_CHECK(p.x && p.weight && p.out, "rms_norm: a device pointer is null (x {}, weight {}, out {})",
               p.x != nullptr, p.weight != nullptr, p.out != nullptr);
  detail::launch_rms_norm(p, stream);
}

void rope(const RopeParams& p, cudaStream_t stream) {
  check_count("rope", "rows", p.rows);
  NIBBLE_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0, "rope: head_dim must be positive and even, got {}", p.head_dim);
  NIBBLE_CHECK(p.q_heads >= 0 && p.k_heads >= 0, "rope: head counts must be >= 0, got q {} k {}", p.q_heads,
               p.k_heads);
  if (p.rows == 0 || p.q_heads + p.k_heads == 0) return;
  NIBBLE_CHECK(p.positions && p.inv_freq && (p.q || p.q_heads == 0) && (p.k || p.k_heads == 0),
               "rope: a device pointer is null (q {}, k {}, positions {}, inv_freq {})", p.q != nullptr,
               p.k != nullptr, p.positions != nullptr, p.inv_freq != nullptr);
  detail::launch_rope(p, stream);
}

void silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  check_count("silu_mul", "n", p.n);
  if (p.n == 0) return;
  NIBBLE_CHECK(p.gate && p.up && p.out, "silu_mul: a device pointer is null");
  detail::launch_silu_mul(p, stream);
}

void add(const AddParams& p, cudaStream_t stream) {
  check_count("add", "n", p.n);
  if (p.n == 0) return;
  NIBBLE_CHECK(p.a && p.b && p.out, "add: a device pointer is null");
  detail::launch_add(p, stream);
}

void bias_add(const BiasAddParams& p, cudaStream_t stream) {
  check_count("bias_add", "rows", p.rows);
  NIBBLE_CHECK(p.cols > 0, "bias_add: rows must have > 0 columns, got {}", p.cols);
  if (p.rows == 0) return;
  NIBBLE_CHECK(p.x && p.bias, "bias_add: a device pointer is null (x {}, bias {})", p.x != nullptr,
               p.bias != nullptr);
  detail::launch_bias_add(p, stream);
}

void gather_rows(const RowCopyParams& p, cudaStream_t stream) {
  check_count("gather_rows", "count", p.count);
  NIBBLE_CHECK(p.cols > 0, "gather_rows: rows must have > 0 columns, got {}", p.cols);
  if (p.count == 0) return;
  NIBBLE_CHECK(p.x && p.out && p.index, "gather_rows: a device pointer is null");
  detail::launch_gather_rows(p, stream);
}

void scatter_rows(const RowCopyParams& p, cudaStream_t stream) {
  check_count("scatter_rows", "count", p.count);
  NIBBLE_CHECK(p.cols > 0, "scatter_rows: rows must have > 0 columns, got {}", p.cols);
  if (p.count == 0) return;
  NIBBLE_CHECK(p.x && p.out && p.index, "scatter_rows: a device pointer is null");
  detail::launch_scatter_rows(p, stream);
}

}  // namespace nibble::cuda
