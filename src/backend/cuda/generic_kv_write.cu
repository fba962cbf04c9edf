// Kernel of generic_kv_write.h. Compiled with --fmad=false (CMakeLists.txt): the quantizers and the
// Hadamard butterflies must round exactly as the CPU reference.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/generic_kv_write.h"
#include "quant/hadamard.h"
#include "quant/kv_format.h"
#include "quant/nvfp4.h"

namespace nibble::cuda {

namespace {

constexpr int kThreads = 128;

// One thread per (row, head, side): side 0 = K, 1 = V.
__global__ void generic_kv_write_kernel(KvWriteParams p) {
  const int64_t heads = p.k_layout.kv_heads;
  const int d = static_cast<int>(p.k_layout.head_dim);
  const int64_t n = p.num_tokens * heads * 2;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const int side = static_cast<int>(t % 2);
  const int64_t head = (t / 2) % heads;
  const int64_t row = t / (2 * heads);
  const int32_t seq = p.row_sequence[row];
  if (seq < 0) return;
  const int64_t pos = p.positions[row];
  const int64_t page_size = p.k_layout.page_size;
  const int32_t page = p.page_tables[seq * p.max_pages_per_seq + pos / page_size];
  const int64_t slot = pos % page_size;
  uint8_t* base = p.pool + static_cast<int64_t>(page) * p.page_bytes;
  const cache::KvPartLayout& part = side == 0 ? p.k_layout : p.v_layout;
  const float* src = static_cast<const float*>(side == 0 ? p.k : p.v) + (row * heads + head) * d;
  float x[kGenericKvWriteMaxHeadDim];
  for (int i = 0; i < d; ++i) x[i] = src[i];
  if (p.rotation == quant::Rotation::kHadamard) quant::hadamard_inplace(x, d);
  const float g = side == 0 ? p.k_global_scale : p.v_global_scale;
  uint8_t* data = base + part.data_at(head, slot);      // [quant::data_bytes(format, d)]
  uint8_t* scales = base + part.scales_at(head, slot);  // nvfp4: [d / 16] E4M3 block scales
  if (part.format == quant::ElemFormat::kNVFP4 && p.nvfp4_scale_rule == quant::Nvfp4ScaleRule::kFourOverSix) {
    for (int b = 0; b < d / quant::kNvfp4Block; ++b) {  // the CPU backend's loop (cpu_attention.cpp)
      scales[b] = quant::nvfp4_quantize_block_4over6(x + b * quant::kNvfp4Block, g, data + b * quant::kNvfp4BlockBytes);
    }
    return;
  }
  quant::quantize_head_vector(part.format, x, d, g, data, scales);
}

}  // namespace

void generic_kv_write(const KvWriteParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  if (p.k_layout.head_dim < 1 || p.k_layout.head_dim > kGenericKvWriteMaxHeadDim) {
    throw_unsupported("generic_kv_write", "head_dim", "1..256", p.k_layout.head_dim);
  }
  if (p.input_dtype != ActivationDtype::kF32) {
    throw_unsupported("generic_kv_write", "input dtype (0 = f32)", "0", static_cast<long long>(p.input_dtype));
  }
  const int64_t threads = p.num_tokens * p.k_layout.kv_heads * 2;
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) throw_unsupported("generic_kv_write", "tokens × kv_heads", "< 2^37", threads / 2);
  generic_kv_write_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

}  // namespace nibble::cuda
