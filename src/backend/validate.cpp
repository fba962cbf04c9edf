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
  // Every layer's ops run this: a plan from make_step_plan carries its largest page id (the check
  // was a pass over all page-table entries per op: ~1.7 us per call at one 32K-token sequence, and
  // 64 calls per step of a 32-layer model).
  if (plan.max_page_id != StepPlan::kMaxPageUnknown) {
    NIBBLE_CHECK(plan.max_page_id < cache.num_pages, "{}: page id {} outside the pool of {} pages", op,
                 plan.max_page_id, cache.num_pages);
    return;
  }
  for (int32_t page : plan.page_tables) {
    NIBBLE_CHECK(page < cache.num_pages, "{}: page id {} outside the pool of {} pages", op, page, cache.num_pages);
  }
}

void check_kv_shape(const char* op, const char* what, const StepPlan& plan, const cache::KvGeometry& g, Tensor t) {
  NIBBLE_CHECK(t.rows == plan.total_tokens && t.cols == g.kv_heads * g.head_dim,
               "{}: {} is [{}, {}], expected [{}, {}] (tokens, kv_heads * head_dim)", op, what, t.rows, t.cols,
               plan.total_tokens, g.kv_heads * g.head_dim);
}

void validate_attention(const StepPlan& plan, const KvCacheView& cache, int64_t layer, const AttentionShape& shape,
                        Tensor q, Tensor k, Tensor v, Tensor out) {
  validate_cache("attention", plan, cache, layer);
  const cache::KvGeometry& g = cache.layout->geometry();
  NIBBLE_CHECK(shape.num_kv_heads == g.kv_heads && shape.head_dim == g.head_dim,
               "attention: layer shape ({} kv heads, head_dim {}) differs from the cache ({}, {})", shape.num_kv_heads,
               shape.head_dim, g.kv_heads, g.head_dim);
  NIBBLE_CHECK(shape.num_heads > 0 && shape.num_heads % shape.num_kv_heads == 0,
               "attention: {} query heads are not a multiple of {} kv heads", shape.num_heads, shape.num_kv_heads);
  check_kv_shape("attention", "k", plan, g, k);
  check_kv_shape("attention", "v", plan, g, v);
  for (Tensor t : {q, out}) {
    NIBBLE_CHECK(t.rows == plan.total_tokens && t.cols == shape.num_heads * g.head_dim,
                 "attention: q/out is [{}, {}], expected [{}, {}] (tokens, heads * head_dim)", t.rows, t.cols,
                 plan.total_tokens, shape.num_heads * g.head_dim);
  }
}

void validate_matmul(Tensor x, const Matrix& w, const Vector& bias, Tensor out) {
  NIBBLE_CHECK(x.cols == w.in_features, "matmul: x has {} columns, W [{}, {}] expects {}", x.cols, w.out_features,
               w.in_features, w.in_features);
  NIBBLE_CHECK(out.rows == x.rows && out.cols == w.out_features, "matmul: out is [{}, {}], expected [{}, {}]",
               out.rows, out.cols, x.rows, w.out_features);
  NIBBLE_CHECK(bias.data == nullptr || bias.size == w.out_features, "matmul: bias has {} elements, expected {}",
               bias.size, w.out_features);
}

}  // namespace nibble::backend
