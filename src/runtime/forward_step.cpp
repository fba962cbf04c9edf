#include "runtime/forward_step.h"

#include <memory>

#include "common/error.h"

namespace nibble::runtime {

namespace {

// The pool's bytes in the backend's memory: host memory for the CPU backend (KvPool's own zeroed
// storage), a backend buffer otherwise.
class BackendKvStorage final : public cache::KvStorage {
 public:
  explicit BackendKvStorage(std::unique_ptr<backend::Buffer> buffer) : buffer_(std::move(buffer)) {}
  uint8_t* data() override { return static_cast<uint8_t*>(buffer_->data()); }
  const uint8_t* data() const override { return static_cast<const uint8_t*>(buffer_->data()); }
  int64_t bytes() const override { return buffer_->bytes(); }
  bool host_accessible() const override { return false; }

 private:
  std::unique_ptr<backend::Buffer> buffer_;
};

}  // namespace

cache::PageLayout kv_page_layout(LoadedModel& model, const KvPoolOptions& options) {
  NIBBLE_CHECK(options.page_size > 0, "page size must be positive, got {}", options.page_size);
  quant::validate_head_dim(options.kv_dtype, options.rotation, model.config().head_dim);
  return cache::PageLayout(model.transformer().kv_geometry(), options.kv_dtype, options.page_size);
}

cache::KvPool make_kv_pool(LoadedModel& model, const KvPoolOptions& options) {
  cache::PageLayout layout = kv_page_layout(model, options);
  NIBBLE_CHECK(options.num_pages > 0, "a KV pool needs at least one page, got {}", options.num_pages);
  std::unique_ptr<cache::KvStorage> storage;
  if (model.backend().name() != "cpu") {
    storage = std::make_unique<BackendKvStorage>(model.backend().allocate(options.num_pages * layout.page_bytes()));
  }
  cache::KvPool pool(layout, options.num_pages, std::move(storage));
  if (!options.global_scales.k.empty() || !options.global_scales.v.empty()) {
    const int64_t layers = layout.geometry().num_layers;
    NIBBLE_CHECK(static_cast<int64_t>(options.global_scales.k.size()) == layers &&
                     static_cast<int64_t>(options.global_scales.v.size()) == layers,
                 "KV global scales cover {} (K) and {} (V) layers, the model has {} full-attention layers",
                 options.global_scales.k.size(), options.global_scales.v.size(), layers);
    pool.global_scales() = options.global_scales;
    pool.check_integrity();
  }
  return pool;
}

void check_nvfp4_scale_rule(LoadedModel& model, quant::Nvfp4ScaleRule rule) {
  NIBBLE_CHECK(rule == quant::Nvfp4ScaleRule::kAmaxOver6 || model.backend().name() == "cpu",
               "the 4-over-6 nvfp4 scale rule is implemented on the CPU KV write path only; the {} backend does not "
               "support it yet (use --nvfp4-scale-rule 6 or --device cpu)", model.backend().name());
}

backend::KvCacheView kv_cache_view(cache::KvPool& pool, quant::Rotation rotation,
                                   quant::Nvfp4ScaleRule nvfp4_scale_rule) {
  return {.pool = pool.storage().data(),
          .num_pages = pool.num_pages(),
          .layout = &pool.layout(),
          .scales = &pool.global_scales(),
          .rotation = rotation,
          .nvfp4_scale_rule = nvfp4_scale_rule};
}

std::vector<float> run_forward_step(LoadedModel& model, cache::KvPool& pool, quant::Rotation rotation,
                                    std::span<const backend::SequenceStep> steps,
                                    quant::Nvfp4ScaleRule nvfp4_scale_rule) {
  NIBBLE_CHECK(!steps.empty(), "a step needs at least one sequence");
  const backend::StepPlan plan = backend::make_step_plan(steps, pool.layout().page_size(), pool.num_pages());
  std::vector<float> logits;
  model.transformer().forward(plan, kv_cache_view(pool, rotation, nvfp4_scale_rule), logits);
  return logits;
}

}  // namespace nibble::runtime
