// Kernels of elementwise.h (validation: elementwise.cpp). Element-wise ops use grid-stride loops
// over int64 indices; RMSNorm uses one warp per row up to 1024 columns (per-head norms), one block
// per row above (hidden rows); RoPE one thread per rotated pair. Never fast-math: sincosf/expf/sqrtf are the accurate versions.
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.h"
#include "quant/bf16.h"

namespace nibble::cuda::detail {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

unsigned blocks_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void convert_kernel(ConvertBf16Params p) {
  for (int64_t i = global_thread(); i < p.n; i += grid_threads()) p.out[i] = quant::bf16_from_f32(p.x[i]);
}

__global__ void fed_tokens_kernel(FedTokensParams p) {
  for (int64_t t = global_thread(); t < p.n; t += grid_threads()) {
    const int32_t row = p.fed_rows[t];
    if (row >= 0) p.token_ids[t] = p.ids[static_cast<int64_t>(row) * p.id_stride];
  }
}

__global__ void embedding_kernel(EmbeddingParams p) {
  const int64_t n = p.rows * p.hidden;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t row = i / p.hidden, col = i % p.hidden;
    const int64_t src = static_cast<int64_t>(p.token_ids[row]) * p.hidden + col;
    p.out[i] = p.table_dtype == WeightDtype::kF32
                   ? static_cast<const float*>(p.table)[src]
                   : quant::f32_from_bf16(static_cast<const uint16_t*>(p.table)[src]);
  }
}

// One warp per row: sum of squares in f32 (per-lane partial sums, then a butterfly), then scale.
__global__ void rms_norm_kernel(RmsNormParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.rows) return;
  const float* in = p.x + row * p.cols;
  float* out = p.out + row * p.cols;
  float sum_sq = 0.0f;
  for (int64_t i = lane; i < p.cols; i += 32) sum_sq += in[i] * in[i];
  for (int offset = 16; offset > 0; offset /= 2) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(p.cols) + p.eps);
  // All lanes have read their inputs before any writes (out may alias x): each lane reads and
  // writes only its own columns.
  for (int64_t i = lane; i < p.cols; i += 32) out[i] = p.weight[i] * (in[i] * inv_rms);
}

// One block per row, for wide rows (cols > kWideRow): a decode step has a handful of rows of 4096+
// columns, which one warp would read with ~128 dependent steps. Sum of squares: per-thread partials,
// warp shuffles, then the warps added in order (deterministic). Each thread writes only the columns
// it read (out may alias x).
constexpr int64_t kWideRow = 1024;
__global__ void rms_norm_wide_kernel(RmsNormParams p) {
  __shared__ float warp_sums[kThreads / 32];
  const int64_t row = blockIdx.x;
  const float* in = p.x + row * p.cols;
  float* out = p.out + row * p.cols;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < p.cols; i += kThreads) sum_sq += in[i] * in[i];
  for (int offset = 16; offset > 0; offset /= 2) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum_sq;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(p.cols) + p.eps);
  for (int64_t i = threadIdx.x; i < p.cols; i += kThreads) out[i] = p.weight[i] * (in[i] * inv_rms);
}

// One thread per (row, head of q or k, i < head_dim/2).
__global__ void rope_kernel(RopeParams p) {
  const int64_t half = p.head_dim / 2;
  const int64_t heads = p.q_heads + p.k_heads;
  const int64_t n = p.rows * heads * half;
  for (int64_t t = global_thread(); t < n; t += grid_threads()) {
    const int64_t i = t % half;
    const int64_t head = (t / half) % heads;
    const int64_t row = t / (half * heads);
    float* x = head < p.q_heads ? p.q + (row * p.q_heads + head) * p.head_dim
                                : p.k + (row * p.k_heads + (head - p.q_heads)) * p.head_dim;
    const float angle = static_cast<float>(p.positions[row]) * p.inv_freq[i];
    float sin_v, cos_v;
    sincosf(angle, &sin_v, &cos_v);
    const float x1 = x[i], x2 = x[i + half];
    x[i] = x1 * cos_v - x2 * sin_v;
    x[i + half] = x2 * cos_v + x1 * sin_v;
  }
}

__global__ void silu_mul_kernel(SiluMulParams p) {
  for (int64_t i = global_thread(); i < p.n; i += grid_threads()) {
    const float g = p.gate[i];
    p.out[i] = g / (1.0f + expf(-g)) * p.up[i];
  }
}

__global__ void add_kernel(AddParams p) {
  for (int64_t i = global_thread(); i < p.n; i += grid_threads()) p.out[i] = p.a[i] + p.b[i];
}

__global__ void bias_add_kernel(BiasAddParams p) {
  const int64_t n = p.rows * p.cols;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) p.x[i] += p.bias[i % p.cols];
}

template <bool kScatter>
__global__ void row_copy_kernel(RowCopyParams p) {
  const int64_t n = p.count * p.cols;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t r = i / p.cols, c = i % p.cols;
    const int64_t indexed = static_cast<int64_t>(p.index[r]) * p.cols + c;
    if (kScatter) {
      p.out[indexed] = p.x[i];
    } else {
      p.out[i] = p.x[indexed];
    }
  }
}

}  // namespace

void launch_convert_f32_to_bf16(const ConvertBf16Params& p, cudaStream_t stream) {
  convert_kernel<<<blocks_for(p.n), kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

void launch_resolve_fed_tokens(const FedTokensParams& p, cudaStream_t stream) {
  fed_tokens_kernel<<<blocks_for(p.n), kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

void launch_embedding(const EmbeddingParams& p, cudaStream_t stream) {
  embedding_kernel<<<blocks_for(p.rows * p.hidden), kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

void launch_rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.cols > kWideRow) {
    if (p.rows > 0x7fffffff) throw_unsupported("rms_norm", "rows", "< 2^31", p.rows);
    rms_norm_wide_kernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p);
    NIBBLE_CUDA_CHECK_LAUNCH();
    return;
  }
  constexpr int64_t kRowsPerBlock = kThreads / 32;
  const int64_t blocks = (p.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > 0x7fffffff) throw_unsupported("rms_norm", "rows", "< 2^34", p.rows);
  rms_norm_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

void launch_rope(const RopeParams& p, cudaStream_t stream) {
  rope_kernel<<<blocks_for(p.rows * (p.q_heads + p.k_heads) * (p.head_dim / 2)), kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

void launch_silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  silu_mul_kernel<<<blocks_for(p.n), kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

void launch_add(const AddParams& p, cudaStream_t stream) {
  add_kernel<<<blocks_for(p.n), kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

void launch_bias_add(const BiasAddParams& p, cudaStream_t stream) {
  bias_add_kernel<<<blocks_for(p.rows * p.cols), kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows(const RowCopyParams& p, cudaStream_t stream) {
  row_copy_kernel<false><<<blocks_for(p.count * p.cols), kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

void launch_scatter_rows(const RowCopyParams& p, cudaStream_t stream) {
  row_copy_kernel<true><<<blocks_for(p.count * p.cols), kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

}  // namespace nibble::cuda::detail
