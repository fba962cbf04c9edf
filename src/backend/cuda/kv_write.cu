// The write-path kernel launch (validation: kv_write.cpp). This file is compiled with
// --fmad=false (CMakeLists.txt): the quantizers must round exactly as the CPU reference does, and a
// contracted multiply-add would skip a rounding step.
#include "backend/cuda/kernel_launch.h"
#include "backend/cuda/kv_write.cuh"

namespace nibble::cuda::detail {

namespace {

template <int kHeadDim, quant::ElemFormat KF, quant::ElemFormat VF, quant::Nvfp4ScaleRule R>
void launch(const KvWriteParams& p, cudaStream_t stream) {
  constexpr int kVectorsPerBlock = kKvWriteWarps * (512 / kHeadDim);
  const bool rope = p.rope_inv_freq != nullptr;
  const int64_t kv_blocks = (p.num_tokens * p.k_layout.kv_heads + kVectorsPerBlock - 1) / kVectorsPerBlock;
  const int64_t q_blocks = rope ? (p.num_tokens * p.q_heads + kVectorsPerBlock - 1) / kVectorsPerBlock : 0;
  const int64_t blocks = kv_blocks + q_blocks;
  const LaunchShape shape{.grid = dim3(static_cast<unsigned>(blocks)), .block = dim3(kKvWriteWarps * 32)};
  if (p.input_dtype == ActivationDtype::kF32) {
    launch_kernel(kv_write_kernel<kHeadDim, ActivationDtype::kF32, KF, VF, R>, shape, stream, p.programmatic_launch, p,
                  static_cast<int>(kv_blocks), static_cast<int>(q_blocks));
  } else {
    launch_kernel(kv_write_kernel<kHeadDim, ActivationDtype::kBF16, KF, VF, R>, shape, stream, p.programmatic_launch,
                  p, static_cast<int>(kv_blocks), static_cast<int>(q_blocks));
  }
}

// The 4-over-6 kernel only where the rule changes a byte: some part is nvfp4.
template <int kHeadDim, quant::ElemFormat KF, quant::ElemFormat VF>
void launch(const KvWriteParams& p, cudaStream_t stream) {
  if constexpr (KF == quant::ElemFormat::kNVFP4 || VF == quant::ElemFormat::kNVFP4) {
    if (p.nvfp4_scale_rule == quant::Nvfp4ScaleRule::kFourOverSix) {
      return launch<kHeadDim, KF, VF, quant::Nvfp4ScaleRule::kFourOverSix>(p, stream);
    }
  }
  launch<kHeadDim, KF, VF, quant::Nvfp4ScaleRule::kAmaxOver6>(p, stream);
}

// One kernel instance per (K format, V format) pair of quant::KvDtype (kv_write.cuh).
template <int kHeadDim>
void launch(const KvWriteParams& p, cudaStream_t stream) {
  using F = quant::ElemFormat;
  const F k = p.k_layout.format, v = p.v_layout.format;
  if (k == F::kF32 && v == F::kF32) return launch<kHeadDim, F::kF32, F::kF32>(p, stream);
  if (k == F::kBF16 && v == F::kBF16) return launch<kHeadDim, F::kBF16, F::kBF16>(p, stream);
  if (k == F::kFP8 && v == F::kFP8) return launch<kHeadDim, F::kFP8, F::kFP8>(p, stream);
  if (k == F::kNVFP4 && v == F::kNVFP4) return launch<kHeadDim, F::kNVFP4, F::kNVFP4>(p, stream);
  if (k == F::kFP8 && v == F::kNVFP4) return launch<kHeadDim, F::kFP8, F::kNVFP4>(p, stream);
  throw_unsupported("kv_write", "K/V element format pair (K << 8 | V)", "a KV dtype's pair (kv_write.cpp checks it)",
                    static_cast<long long>(k) << 8 | static_cast<long long>(v));
}

}  // namespace

void launch_kv_write(const KvWriteParams& p, cudaStream_t stream) {
  switch (p.k_layout.head_dim) {
    case 64: launch<64>(p, stream); break;
    case 128: launch<128>(p, stream); break;
    case 256: launch<256>(p, stream); break;
    default: throw_unsupported("kv_write", "head_dim", "64, 128, 256", p.k_layout.head_dim);
  }
}

}  // namespace nibble::cuda::detail
