// Host entry point of the write path: validate the shapes and layouts, then launch (kv_write.cu).
#include "backend/cuda/kv_write.h"

#include <cstdint>
#include <tuple>

#include "common/error.h"

namespace nibble::cuda {

namespace detail {
void launch_kv_write(const KvWriteParams& p, cudaStream_t stream);  // kv_write.cu
}  // namespace detail

namespace {

void validate_write_part(const cache::KvPartLayout& part, const char* which, int64_t page_bytes) {
  NIBBLE_CHECK(part.head_dim == 64 || part.head_dim == 128 || part.head_dim == 256,
               "kv_write: {} head_dim must be 64, 128 or 256 on CUDA, got {}", which, part.head_dim);
  NIBBLE_CHECK(part.kv_heads > 0 && part.page_size > 0, "kv_write: {} layout has kv_heads {} and page_size {}",
               which, part.kv_heads, part.page_size);
  NIBBLE_CHECK(part.data_row_bytes == quant::data_bytes(part.format, part.head_dim),
               "kv_write: {} data_row_bytes: expected {}, got {}", which,
               quant::data_bytes(part.format, part.head_dim), part.data_row_bytes);
  NIBBLE_CHECK(part.scale_row_bytes == quant::scale_bytes(part.format, part.head_dim),
               "kv_write: {} scale_row_bytes: expected {}, got {}", which,
               quant::scale_bytes(part.format, part.head_dim), part.scale_row_bytes);
  NIBBLE_CHECK(part.data_offset % 16 == 0 && part.scale_offset % 16 == 0,
               "kv_write: {} part offsets must be 16-byte aligned, got data {} scales {}", which, part.data_offset,
               part.scale_offset);
  NIBBLE_CHECK(part.data_offset + part.bytes <= page_bytes, "kv_write: {} part ends at byte {}, past page_bytes {}",
               which, part.data_offset + part.bytes, page_bytes);
}

}  // namespace

void kv_write(const KvWriteParams& p, cudaStream_t stream) {
  NIBBLE_CHECK(p.num_tokens >= 0, "kv_write: num_tokens must be >= 0, got {}", p.num_tokens);
  if (p.num_tokens == 0) return;
  NIBBLE_CHECK(p.k && p.v && p.positions && p.row_sequence && p.page_tables && p.pool,
               "kv_write: a device pointer is null (k {}, v {}, positions {}, row_sequence {}, page_tables {}, pool {})",
               p.k != nullptr, p.v != nullptr, p.positions != nullptr, p.row_sequence != nullptr,
               p.page_tables != nullptr, p.pool != nullptr);
  NIBBLE_CHECK(p.page_bytes > 0 && p.page_bytes % 16 == 0, "kv_write: page_bytes must be a positive multiple of 16, got {}",
               p.page_bytes);
  NIBBLE_CHECK(p.max_pages_per_seq > 0, "kv_write: max_pages_per_seq must be > 0, got {}", p.max_pages_per_seq);
  validate_write_part(p.k_layout, "K", p.page_bytes);
  validate_write_part(p.v_layout, "V", p.page_bytes);
  NIBBLE_CHECK(p.k_layout.head_dim == p.v_layout.head_dim && p.k_layout.kv_heads == p.v_layout.kv_heads &&
                   p.k_layout.page_size == p.v_layout.page_size,
               "kv_write: K and V layouts disagree: head_dim {} vs {}, kv_heads {} vs {}, page_size {} vs {}",
               p.k_layout.head_dim, p.v_layout.head_dim, p.k_layout.kv_heads, p.v_layout.kv_heads,
               p.k_layout.page_size, p.v_layout.page_size);
  {
    using F = quant::ElemFormat;
    const F k = p.k_layout.format, v = p.v_layout.format;
    NIBBLE_CHECK(k == v || (k == F::kFP8 && v == F::kNVFP4),
                 "kv_write: K {} with V {} is not the pair of a KV dtype (both alike, or k8v4's fp8 K and nvfp4 V)",
                 quant::elem_format_name(k), quant::elem_format_name(v));
  }
  NIBBLE_CHECK(p.k_global_scale > 0.0f && p.v_global_scale > 0.0f,
               "kv_write: global scales must be positive, got k {} v {}", p.k_global_scale, p.v_global_scale);
  // nvfp4's block divisor s·g (s an E4M3 scale in [2^-9, 448]) must stay in [2^-60, 2^60], the
  // range of the kernel's division-free E2M1 rule (quant/e2m1_reciprocal.h).
  for (const auto& [part, g, which] : {std::tuple{&p.k_layout, p.k_global_scale, "k"},
                                       std::tuple{&p.v_layout, p.v_global_scale, "v"}}) {
    NIBBLE_CHECK(part->format != quant::ElemFormat::kNVFP4 || (g >= kNvfp4MinGlobalScale && g <= kNvfp4MaxGlobalScale),
                 "kv_write: the nvfp4 global scale of {} must be in [2^-51, 2^51] on CUDA, got {}", which, g);
  }
  NIBBLE_CHECK(p.nvfp4_scale_rule == quant::Nvfp4ScaleRule::kAmaxOver6 ||
                   p.nvfp4_scale_rule == quant::Nvfp4ScaleRule::kFourOverSix,
               "kv_write: unknown nvfp4 scale rule {}", static_cast<int>(p.nvfp4_scale_rule));
  NIBBLE_CHECK(p.num_tokens * p.k_layout.kv_heads < (int64_t{1} << 31),
               "kv_write: num_tokens × kv_heads must be < 2^31 (32-bit indexing), got {} × {}", p.num_tokens,
               p.k_layout.kv_heads);
  if (p.rope_inv_freq != nullptr) {
    NIBBLE_CHECK(p.input_dtype == ActivationDtype::kF32, "kv_write: RoPE needs f32 k and v, got bf16");
    NIBBLE_CHECK(p.k_rotated != nullptr && (p.q != nullptr || p.q_heads == 0) && p.q_heads >= 0,
                 "kv_write: RoPE needs the rotated k's pointer (set {}) and q (set {}, {} heads)",
                 p.k_rotated != nullptr, p.q != nullptr, p.q_heads);
    NIBBLE_CHECK(p.num_tokens * p.q_heads < (int64_t{1} << 31),
                 "kv_write: num_tokens × q_heads must be < 2^31 (32-bit indexing), got {} × {}", p.num_tokens,
                 p.q_heads);
  }
  detail::launch_kv_write(p, stream);
}

}  // namespace nibble::cuda
