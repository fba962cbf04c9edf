#include "model/tensor_convert.h"

#include "common/error.h"

namespace nibble::model {

void convert_to_f32(Dtype dtype, const std::byte* src, std::span<float> dst) {
  switch (dtype) {
    case Dtype::kF32:
      if (!dst.empty()) std::memcpy(dst.data(), src, dst.size_bytes());
      return;
    case Dtype::kF16:
      for (size_t i = 0; i < dst.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, sizeof h);
        dst[i] = f32_from_f16(h);
      }
      return;
    case Dtype::kBF16:
      for (size_t i = 0; i < dst.size(); ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, sizeof b);
        dst[i] = quant::f32_from_bf16(b);
      }
      return;
    default:
      NIBBLE_FAIL("cannot convert dtype {} to float32 (supported: F32, F16, BF16)",
                  dtype_name(dtype));
  }
}

}  // namespace nibble::model
