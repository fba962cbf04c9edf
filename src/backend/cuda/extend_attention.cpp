// Host entry point of the tensor-core extend attention: validate, then launch (extend_attention.cu).
#include "backend/cuda/extend_attention.h"

#include "common/error.h"

namespace nibble::cuda {

namespace detail {
void launch_extend_attention(const ExtendAttentionParams& p, cudaStream_t stream);  // extend_attention.cu
int extend_attention_splits(const ExtendAttentionParams& p);                         // extend_attention.cu

// The launcher's split (extend_attention.cu) against what the workspace holds and the grid allows.
void check_extend_split(int splits, int64_t work_blocks, int64_t tiles, int64_t merge_groups, int64_t record_bytes,
                        int64_t records, int64_t workspace_bytes) {
  NIBBLE_CHECK(splits == 1 || work_blocks * splits <= records,
               "extend attention: {} prefix parts need {} partial records of {} bytes, split_workspace holds {} "
               "({} bytes)",
               splits, work_blocks * splits, record_bytes, records, workspace_bytes);
  NIBBLE_CHECK(tiles * splits <= 65535 && (splits == 1 || tiles * merge_groups <= 65535),
               "extend attention: {} query tiles x {} prefix parts exceed the grid's 65535", tiles, splits);
}
}  // namespace detail

bool extend_attention_supports_head_dim(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

namespace {

void validate_extend_part(const cache::KvPartLayout& part, const char* which, const ExtendAttentionParams& p) {
  NIBBLE_CHECK(part.head_dim == p.head_dim && part.kv_heads == p.num_kv_heads,
               "extend attention: {} layout is {} kv heads × head_dim {}, the attention {} × {}", which,
               part.kv_heads, part.head_dim, p.num_kv_heads, p.head_dim);
  NIBBLE_CHECK(part.page_size > 0, "extend attention: {} page_size must be > 0, got {}", which, part.page_size);
  NIBBLE_CHECK(part.data_row_bytes == quant::data_bytes(part.format, part.head_dim) &&
                   part.scale_row_bytes == quant::scale_bytes(part.format, part.head_dim),
               "extend attention: {} row bytes: expected data {} scales {}, got {} and {}", which,
               quant::data_bytes(part.format, part.head_dim), quant::scale_bytes(part.format, part.head_dim),
               part.data_row_bytes, part.scale_row_bytes);
  NIBBLE_CHECK(part.data_offset % 16 == 0 && part.scale_offset % 16 == 0,
               "extend attention: {} part offsets {} / {} are not 16-byte aligned", which, part.data_offset,
               part.scale_offset);
  NIBBLE_CHECK(part.data_offset + part.bytes <= p.page_bytes,
               "extend attention: {} part ends at byte {}, past page_bytes {}", which, part.data_offset + part.bytes,
               p.page_bytes);
}

// Every argument check of extend_attention; false: nothing to do (no tokens or sequences).
bool validate(const ExtendAttentionParams& p) {
  NIBBLE_CHECK(p.total_tokens >= 0 && p.num_seqs >= 0, "extend attention: total_tokens {} and num_seqs {} must be >= 0",
               p.total_tokens, p.num_seqs);
  if (p.total_tokens == 0 || p.num_seqs == 0) return false;
  NIBBLE_CHECK(extend_attention_supports_head_dim(p.head_dim),
               "extend attention: head_dim must be 64, 128 or 256 on the tensor-core kernel, got {}", p.head_dim);
  NIBBLE_CHECK(p.num_kv_heads > 0 && p.num_q_heads > 0 && p.num_q_heads % p.num_kv_heads == 0,
               "extend attention: {} query heads are not a positive multiple of {} kv heads", p.num_q_heads,
               p.num_kv_heads);
  NIBBLE_CHECK(p.num_q_heads <= 65535 && p.num_seqs <= 65535,
               "extend attention: at most 65535 query heads and sequences per launch, got {} and {}", p.num_q_heads,
               p.num_seqs);
  NIBBLE_CHECK(p.max_new_tokens >= 0 && p.max_new_tokens <= p.total_tokens,
               "extend attention: max_new_tokens {} must be in [0, total_tokens {}]", p.max_new_tokens,
               p.total_tokens);
  NIBBLE_CHECK(p.softmax_scale > 0.0f, "extend attention: softmax_scale must be > 0, got {}", p.softmax_scale);
  NIBBLE_CHECK(p.q && p.k && p.v && p.out && p.seq_info && p.pool && p.page_tables && p.kv_workspace,
               "extend attention: a device pointer is null (q {}, k {}, v {}, out {}, seq_info {}, pool {}, "
               "page_tables {}, kv_workspace {})",
               p.q != nullptr, p.k != nullptr, p.v != nullptr, p.out != nullptr, p.seq_info != nullptr,
               p.pool != nullptr, p.page_tables != nullptr, p.kv_workspace != nullptr);
  const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; };
  NIBBLE_CHECK(!misaligned(p.q) && !misaligned(p.k) && !misaligned(p.v) && !misaligned(p.out) &&
                   !misaligned(p.pool) && !misaligned(p.kv_workspace),
               "extend attention: q, k, v, out, pool and kv_workspace must be 16-byte aligned");
  NIBBLE_CHECK(p.max_pages_per_seq > 0 && p.page_bytes > 0 && p.page_bytes % 16 == 0,
               "extend attention: max_pages_per_seq {} must be > 0 and page_bytes {} a positive multiple of 16",
               p.max_pages_per_seq, p.page_bytes);
  validate_extend_part(p.k_layout, "K", p);
  validate_extend_part(p.v_layout, "V", p);
  using quant::ElemFormat;
  const auto narrow = [](ElemFormat f) { return f == ElemFormat::kFP8 || f == ElemFormat::kNVFP4; };
  NIBBLE_CHECK(p.k_layout.format == p.v_layout.format || (narrow(p.k_layout.format) && narrow(p.v_layout.format)),
               "extend attention: K in {} with V in {}: K and V must share a format, or each be fp8 or nvfp4",
               quant::elem_format_name(p.k_layout.format), quant::elem_format_name(p.v_layout.format));
  NIBBLE_CHECK(p.k_layout.page_size == p.v_layout.page_size, "extend attention: K pages of {} tokens, V pages of {}",
               p.k_layout.page_size, p.v_layout.page_size);
  NIBBLE_CHECK(p.k_global_scale > 0.0f && p.v_global_scale > 0.0f,
               "extend attention: global scales must be positive, got k {} v {}", p.k_global_scale,
               p.v_global_scale);
  NIBBLE_CHECK(p.extend_seqs >= 0 && p.extend_tokens >= 0 && p.max_prefix_tokens >= 0 && p.num_sms >= 0,
               "extend attention: the split hints must be >= 0 (extend_seqs {}, extend_tokens {}, "
               "max_prefix_tokens {}, num_sms {})",
               p.extend_seqs, p.extend_tokens, p.max_prefix_tokens, p.num_sms);
  NIBBLE_CHECK(p.prefix_splits >= 0 && p.prefix_splits <= 1024,
               "extend attention: prefix_splits must be in [0, 1024] (0: chosen by the launcher), got {}",
               p.prefix_splits);
  NIBBLE_CHECK(p.kernel >= kExtendKernelDefault && p.kernel <= kExtendKernelWgmma,
               "extend attention: kernel must be 0 (default), 1 (mma.sync) or 2 (wgmma), got {}", p.kernel);
  if (p.kernel == kExtendKernelWgmma) {
    NIBBLE_CHECK(p.head_dim == 128 && narrow(p.k_layout.format) && narrow(p.v_layout.format) && p.prefix_splits == 1,
                 "extend attention: the wgmma kernel (kernel 2) takes head_dim 128, an fp8 / nvfp4 / k8v4 cache "
                 "and prefix_splits 1, got head_dim {}, {} cache, prefix_splits {}",
                 p.head_dim, quant::elem_format_name(p.k_layout.format), p.prefix_splits);
  }
  NIBBLE_CHECK(p.split_workspace_bytes >= 0 && !misaligned(p.split_workspace),
               "extend attention: split_workspace must be 16-byte aligned and its size >= 0, got {} bytes",
               p.split_workspace_bytes);
  return true;
}

}  // namespace

void extend_attention(const ExtendAttentionParams& p, cudaStream_t stream) {
  if (validate(p)) detail::launch_extend_attention(p, stream);
}

int extend_attention_splits(const ExtendAttentionParams& p) { return validate(p) ? detail::extend_attention_splits(p) : 1; }

}  // namespace nibble::cuda
