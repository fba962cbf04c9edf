#include "backend/validate.h"

#include "common/error.h"
#include "quant/kv_format.h"

namespace nibble::backend {

void validate_cache(const char* op, const StepPlan& plan, const KvCacheView& cache, int64_t layer) {
  NIBBLE_CHECK(cache.pool != nullptr && cache.layout != nullptr && cache.scales != nullptr,
               "{}: the KV cache view is incomplete", op);
  const cache::KvGeometry& g = cache.layout->geometry();
  NIBBLE_CHECK(layer >= 0 && layer < g.num_layers, "{}: layer {} outside the cache's {} layers", op, layer,
               g.num_layers);
  NIBBLE_CHECK(static_cast<int64_t>(cache.scales->k.size()) == g.num_layers &&
                   static_cast<int64_t>(cache.scales->v.size()) == g.num_layers,
               "{}: {} / {} global scales for {} layers", op, cache.scales->k.size(), cache.scales->v.size(),
               g.num_layers);
  NIBBLE_CHECK(plan.page_size == cache.layout->page_size(), "{}: the step plans pages of {} tokens, the pool has {}",
               op, plan.page_size, cache.layout->page_size());
  quant::validate_head_dim(cache.layout->dtype(), cache.rotation, g.head_dim);
  for (int32_t page : plan.page_tables) {
    NIBBLE_CHECK(page < cache.num_pages, "{}: page id {} outside the pool of {} pages", op, page, cache.num_pages);
  }
}

void check_kv_shape(const char* op, const char* what, const StepPlan& plan, const cache::KvGeometry& g, Tensor t) {
  NIBBLE_CHECK(t.rows == plan.total_tokens && t.cols == g.kv_heads * g.head_dim,
               "{}: {} is [{}, {}], expected [{}, {}] (tokens, kv_heads * head_dim)", op, what, t.rows, t.cols,
               plan.total_tokens, g.kv_heads * g.head_dim);
}

}  // namespace nibble::backend
