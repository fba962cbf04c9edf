#include "cache/kv_accounting.h"

#include "common/error.h"

namespace nibble::cache {

int64_t kv_bytes_per_token_per_layer(quant::KvDtype dtype, int64_t kv_heads, int64_t head_dim) {
  const quant::KvFormat fmt = quant::kv_format(dtype);
  return kv_heads * (quant::head_vector_bytes(fmt.k, head_dim) + quant::head_vector_bytes(fmt.v, head_dim));
}

KvCapacity kv_capacity(const PageLayout& layout, int64_t budget_bytes) {
  NIBBLE_CHECK(budget_bytes >= 0, "a KV memory budget cannot be negative ({} bytes)", budget_bytes);
  const int64_t pages = budget_bytes / layout.page_bytes();
  return {.pages = pages, .tokens = pages * layout.page_size()};
}

}  // namespace nibble::cache
