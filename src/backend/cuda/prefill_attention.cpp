// Host entry points of chunk attention (prefill / extend / generic decode, CUDA cores) and of the
// tensor-core prefill attention: validate, then launch (prefill_attention.cu).
#include "backend/cuda/prefill_attention.h"

#include "common/error.h"

namespace nibble::cuda {

namespace detail {
void launch_chunk_attention(const ChunkAttentionParams& p, cudaStream_t stream);      // prefill_attention.cu
void launch_prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream);  // prefill_attention.cu
}  // namespace detail

bool chunk_attention_supports_head_dim(int64_t head_dim) {
  switch (head_dim) {
    case 8: case 16: case 32: case 64: case 96: case 128: case 256: return true;
    default: return false;
  }
}

namespace {

void validate_chunk_part(const cache::KvPartLayout& part, const char* which, const ChunkAttentionParams& p) {
  NIBBLE_CHECK(part.head_dim == p.head_dim && part.kv_heads == p.num_kv_heads,
               "chunk attention: {} layout is {} kv heads × head_dim {}, the attention {} × {}", which,
               part.kv_heads, part.head_dim, p.num_kv_heads, p.head_dim);
  NIBBLE_CHECK(part.page_size > 0, "chunk attention: {} page_size must be > 0, got {}", which, part.page_size);
  NIBBLE_CHECK(part.data_row_bytes == quant::data_bytes(part.format, part.head_dim) &&
                   part.scale_row_bytes == quant::scale_bytes(part.format, part.head_dim),
               "chunk attention: {} row bytes: expected data {} scales {}, got {} and {}", which,
               quant::data_bytes(part.format, part.head_dim), quant::scale_bytes(part.format, part.head_dim),
               part.data_row_bytes, part.scale_row_bytes);
  NIBBLE_CHECK(part.format != quant::ElemFormat::kNVFP4 || part.head_dim % quant::kNvfp4Block == 0,
               "chunk attention: {} is nvfp4, which needs head_dim % 16 == 0, got {}", which, part.head_dim);
  NIBBLE_CHECK(part.data_offset + part.bytes <= p.page_bytes,
               "chunk attention: {} part ends at byte {}, past page_bytes {}", which, part.data_offset + part.bytes,
               p.page_bytes);
}

}  // namespace

void chunk_attention(const ChunkAttentionParams& p, cudaStream_t stream) {
  NIBBLE_CHECK(p.num_work >= 0, "chunk attention: num_work must be >= 0, got {}", p.num_work);
  if (p.num_work == 0) return;
  NIBBLE_CHECK(chunk_attention_supports_head_dim(p.head_dim),
               "chunk attention: head_dim must be one of 8, 16, 32, 64, 96, 128, 256 on CUDA, got {}", p.head_dim);
  NIBBLE_CHECK(p.num_kv_heads > 0 && p.num_q_heads > 0 && p.num_q_heads % p.num_kv_heads == 0,
               "chunk attention: {} query heads are not a positive multiple of {} kv heads", p.num_q_heads,
               p.num_kv_heads);
  NIBBLE_CHECK(p.num_q_heads <= 65535, "chunk attention: at most 65535 query heads, got {}", p.num_q_heads);
  NIBBLE_CHECK(p.num_work <= 0x7fffffff, "chunk attention: too many work items ({})", p.num_work);
  NIBBLE_CHECK(p.softmax_scale > 0.0f, "chunk attention: softmax_scale must be > 0, got {}", p.softmax_scale);
  NIBBLE_CHECK(p.q && p.out && p.work && p.seq_info && p.page_tables && p.pool && p.k && p.v,
               "chunk attention: a device pointer is null (q {}, k {}, v {}, out {}, work {}, seq_info {}, "
               "page_tables {}, pool {})",
               p.q != nullptr, p.k != nullptr, p.v != nullptr, p.out != nullptr, p.work != nullptr,
               p.seq_info != nullptr, p.page_tables != nullptr, p.pool != nullptr);
  NIBBLE_CHECK(p.num_seqs > 0 && p.max_pages_per_seq > 0 && p.page_bytes > 0,
               "chunk attention: num_seqs {}, max_pages_per_seq {}, page_bytes {} must be > 0", p.num_seqs,
               p.max_pages_per_seq, p.page_bytes);
  validate_chunk_part(p.k_layout, "K", p);
  validate_chunk_part(p.v_layout, "V", p);
  NIBBLE_CHECK(p.k_layout.page_size == p.v_layout.page_size, "chunk attention: K pages of {} tokens, V pages of {}",
               p.k_layout.page_size, p.v_layout.page_size);
  NIBBLE_CHECK(p.rotation == quant::Rotation::kNone || quant::is_power_of_two(p.head_dim),
               "chunk attention: the Hadamard rotation needs a power-of-two head_dim, got {}", p.head_dim);
  NIBBLE_CHECK(p.k_global_scale > 0.0f && p.v_global_scale > 0.0f,
               "chunk attention: global scales must be positive, got k {} v {}", p.k_global_scale, p.v_global_scale);
  detail::launch_chunk_attention(p, stream);
}

bool prefill_attention_supports_head_dim(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

int64_t prefill_workspace_bytes(int64_t total_tokens, int64_t num_kv_heads, int64_t head_dim) {
  return 2 * total_tokens * num_kv_heads * head_dim * static_cast<int64_t>(sizeof(uint16_t));
}

void prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream) {
  NIBBLE_CHECK(p.total_tokens >= 0 && p.num_seqs >= 0, "prefill attention: total_tokens {} and num_seqs {} must be >= 0",
               p.total_tokens, p.num_seqs);
  if (p.total_tokens == 0 || p.num_seqs == 0) return;
  NIBBLE_CHECK(prefill_attention_supports_head_dim(p.head_dim),
               "prefill attention: head_dim must be 64, 128 or 256 on the tensor-core kernel, got {}", p.head_dim);
  NIBBLE_CHECK(p.num_kv_heads > 0 && p.num_q_heads > 0 && p.num_q_heads % p.num_kv_heads == 0,
               "prefill attention: {} query heads are not a positive multiple of {} kv heads", p.num_q_heads,
               p.num_kv_heads);
  NIBBLE_CHECK(p.num_q_heads <= 0x7fffffff && p.num_seqs <= 65535,
               "prefill attention: at most 65535 sequences per launch, got {} ({} query heads)", p.num_seqs,
               p.num_q_heads);
  NIBBLE_CHECK(p.max_new_tokens >= 0 && p.max_new_tokens <= p.total_tokens,
               "prefill attention: max_new_tokens {} must be in [0, total_tokens {}]", p.max_new_tokens,
               p.total_tokens);
  NIBBLE_CHECK(p.softmax_scale > 0.0f, "prefill attention: softmax_scale must be > 0, got {}", p.softmax_scale);
  NIBBLE_CHECK(p.tile >= 0 && p.tile <= prefill_tile_count(p.head_dim),
               "prefill attention: tile must be in [0, {}] at head_dim {}, got {}", prefill_tile_count(p.head_dim),
               p.head_dim, p.tile);
  NIBBLE_CHECK(p.q && p.k && p.v && p.out && p.seq_info && p.kv_workspace,
               "prefill attention: a device pointer is null (q {}, k {}, v {}, out {}, seq_info {}, kv_workspace {})",
               p.q != nullptr, p.k != nullptr, p.v != nullptr, p.out != nullptr, p.seq_info != nullptr,
               p.kv_workspace != nullptr);
  const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; };
  NIBBLE_CHECK(!misaligned(p.q) && !misaligned(p.k) && !misaligned(p.v) && !misaligned(p.out) &&
                   !misaligned(p.kv_workspace),
               "prefill attention: q, k, v, out and kv_workspace must be 16-byte aligned");
  const int64_t tiles = (p.max_new_tokens > 0 ? p.max_new_tokens : p.total_tokens) + 15;
  NIBBLE_CHECK(tiles / 16 <= 65535, "prefill attention: {} tokens per sequence exceed the grid", tiles - 15);
  detail::launch_prefill_attention(p, stream);
}

}  // namespace nibble::cuda
