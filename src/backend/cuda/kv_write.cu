// The write-path kernel launch (validation: kv_write.cpp). This file is compiled with
// --fmad=false (CMakeLists.txt): the quantizers must round exactly as the CPU reference does, and a
// contracted multiply-add would skip a rounding step.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_write.cuh"

namespace nibble::cuda::detail {

namespace {

template <int kHeadDim, quant::Nvfp4ScaleRule R>
void launch(const KvWriteParams& p, cudaStream_t stream) {
  constexpr int kVectorsPerBlock = kKvWriteWarps * (512 / kHeadDim);
  const int64_t vectors = p.num_tokens * p.k_layout.kv_heads;
  const dim3 grid(static_cast<unsigned>((vectors + kVectorsPerBlock - 1) / kVectorsPerBlock), 2);
  const dim3 block(kKvWriteWarps * 32);
  if (p.input_dtype == ActivationDtype::kF32) {
    kv_write_kernel<kHeadDim, ActivationDtype::kF32, R><<<grid, block, 0, stream>>>(p);
  } else {
    kv_write_kernel<kHeadDim, ActivationDtype::kBF16, R><<<grid, block, 0, stream>>>(p);
  }
  NIBBLE_CUDA_CHECK_LAUNCH();
}

// The 4-over-6 kernel only where the rule changes a byte: some part is nvfp4.
template <int kHeadDim>
void launch(const KvWriteParams& p, cudaStream_t stream) {
  const bool has_nvfp4 =
      p.k_layout.format == quant::ElemFormat::kNVFP4 || p.v_layout.format == quant::ElemFormat::kNVFP4;
  if (has_nvfp4 && p.nvfp4_scale_rule == quant::Nvfp4ScaleRule::kFourOverSix) {
    launch<kHeadDim, quant::Nvfp4ScaleRule::kFourOverSix>(p, stream);
  } else {
    launch<kHeadDim, quant::Nvfp4ScaleRule::kAmaxOver6>(p, stream);
  }
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
