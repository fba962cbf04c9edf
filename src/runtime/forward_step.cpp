#include "runtime/forward_step.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "backend/cpu/cpu_backend.h"
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

namespace {

cache::PageLayout kv_page_layout(model::Transformer& transformer, const KvPoolOptions& options) {
  NIBBLE_CHECK(options.page_size > 0, "page size must be positive, got {}", options.page_size);
  quant::validate_head_dim(options.kv_dtype, options.rotation, transformer.config().head_dim);
  return cache::PageLayout(transformer.kv_geometry(), options.kv_dtype, options.page_size);
}

// The scratch page of a pool whose storage holds one page more than it hands out (make_kv_pool),
// else -1.
int64_t scratch_page(const cache::KvPool& pool) {
  const int64_t needed = (pool.num_pages() + 1) * pool.layout().page_bytes();
  return pool.storage().bytes() >= needed ? pool.num_pages() : -1;
}

bool is_decode_step(std::span<const backend::SequenceStep> steps) {
  return std::all_of(steps.begin(), steps.end(), [](const backend::SequenceStep& s) {
    return s.first_position >= 1 && s.tokens.size() == 1 && !s.all_logits;
  });
}

int64_t next_power_of_two(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace

cache::PageLayout kv_page_layout(LoadedModel& model, const KvPoolOptions& options) {
  return kv_page_layout(model.transformer(), options);
}

cache::KvPool make_kv_pool(LoadedModel& model, const KvPoolOptions& options) {
  return make_kv_pool(model.transformer(), options);
}

cache::KvPool make_kv_pool(model::Transformer& transformer, const KvPoolOptions& options) {
  cache::PageLayout layout = kv_page_layout(transformer, options);
  NIBBLE_CHECK(options.num_pages > 0, "a KV pool needs at least one page, got {}", options.num_pages);
  std::unique_ptr<cache::KvStorage> storage;
  if (transformer.backend().name() != "cpu") {
    // + 1: the scratch page of padded decode steps (forward_step.h).
    storage = std::make_unique<BackendKvStorage>(
        transformer.backend().allocate((options.num_pages + 1) * layout.page_bytes()));
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

backend::KvCacheView kv_cache_view(cache::KvPool& pool, quant::Rotation rotation,
                                   quant::Nvfp4ScaleRule nvfp4_scale_rule) {
  return {.pool = pool.storage().data(),
          .num_pages = pool.num_pages(),
          .layout = &pool.layout(),
          .scales = &pool.global_scales(),
          .rotation = rotation,
          .nvfp4_scale_rule = nvfp4_scale_rule};
}

backend::StepPlan plan_forward_step(backend::Backend& backend, const cache::KvPool& pool,
                                    std::span<const backend::SequenceStep> steps) {
  NIBBLE_CHECK(!steps.empty(), "a step needs at least one sequence");
  const int64_t page_size = pool.layout().page_size();
  const int64_t n = static_cast<int64_t>(steps.size());
  const int64_t scratch = scratch_page(pool);
  if (scratch < 0 || !is_decode_step(steps) || page_size < 2) {
    return backend::make_step_plan(steps, page_size, pool.num_pages());
  }
  // Padding sequences: token 0 at position 1 of the scratch page (their K/V land there only).
  static constexpr int32_t kPadToken = 0;
  const int32_t pad_page = static_cast<int32_t>(scratch);
  const int64_t bucket = std::max(n, backend.decode_batch_bucket(n));
  std::vector<backend::SequenceStep> padded(steps.begin(), steps.end());
  for (int64_t i = n; i < bucket; ++i) {
    padded.push_back({.first_position = 1, .tokens = {&kPadToken, 1}, .pages = {&pad_page, 1}});
  }
  backend::StepPlan plan = backend::make_step_plan(padded, page_size, pool.num_pages() + 1);
  // Page tables to a power-of-two width: one graph serves every length up to it.
  const int64_t width = next_power_of_two(plan.max_pages_per_seq);
  if (width != plan.max_pages_per_seq) {
    std::vector<int32_t> tables(static_cast<size_t>(plan.num_seqs() * width), -1);
    for (int64_t s = 0; s < plan.num_seqs(); ++s) {
      std::copy_n(plan.page_table(s), plan.max_pages_per_seq, tables.begin() + s * width);
    }
    plan.page_tables = std::move(tables);
    plan.max_pages_per_seq = width;
  }
  // The padding rows keep their logit rows (so the step's shape depends on the bucket alone);
  // run_forward_step drops their logits.
  return plan;
}

std::vector<float> run_forward_step(LoadedModel& model, cache::KvPool& pool, quant::Rotation rotation,
                                    std::span<const backend::SequenceStep> steps,
                                    quant::Nvfp4ScaleRule nvfp4_scale_rule) {
  return run_forward_step(model.transformer(), pool, rotation, steps, nvfp4_scale_rule);
}

namespace {

// Declares the geometry, plans (padded) and runs the step with its logits left on the device:
// [plan.num_logit_rows(), vocab], the padding sequences' rows after the real ones. real_rows
// receives the number of rows of steps' own sequences.
backend::Tensor forward_step_on_device(model::Transformer& transformer, cache::KvPool& pool, quant::Rotation rotation,
                                       std::span<const backend::SequenceStep> steps,
                                       quant::Nvfp4ScaleRule nvfp4_scale_rule, int64_t& real_rows) {
  backend::Backend& be = transformer.backend();
  const config::ModelConfig& c = transformer.config();
  const cache::PageLayout& layout = pool.layout();
  be.prepare_attention({.shape = {.num_heads = c.num_heads,
                                  .num_kv_heads = c.num_kv_heads,
                                  .head_dim = c.head_dim,
                                  .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim))},
                        .k_format = layout.k(0).format,
                        .v_format = layout.v(0).format});
  const backend::StepPlan plan = plan_forward_step(be, pool, steps);
  backend::KvCacheView view = kv_cache_view(pool, rotation, nvfp4_scale_rule);
  if (scratch_page(pool) >= 0) view.num_pages = pool.num_pages() + 1;  // padding rows write the scratch page
  real_rows = plan.logit_begin[static_cast<size_t>(steps.size())];
  return transformer.forward_on_device(plan, view);
}

}  // namespace

std::vector<float> run_forward_step(model::Transformer& transformer, cache::KvPool& pool, quant::Rotation rotation,
                                    std::span<const backend::SequenceStep> steps,
                                    quant::Nvfp4ScaleRule nvfp4_scale_rule) {
  int64_t real_rows = 0;
  const backend::Tensor out = forward_step_on_device(transformer, pool, rotation, steps, nvfp4_scale_rule, real_rows);
  // Only the real rows come back (the padding rows' logits are dropped).
  std::vector<float> logits(static_cast<size_t>(real_rows * out.cols));
  transformer.backend().copy_to_host(logits.data(), out.data,
                                     static_cast<int64_t>(logits.size()) * static_cast<int64_t>(sizeof(float)));
  return logits;
}

std::vector<backend::SampledToken> run_forward_step_sampled(LoadedModel& model, cache::KvPool& pool,
                                                            quant::Rotation rotation,
                                                            std::span<const backend::SequenceStep> steps,
                                                            std::span<const backend::SampleRequest> requests,
                                                            quant::Nvfp4ScaleRule nvfp4_scale_rule) {
  return run_forward_step_sampled(model.transformer(), pool, rotation, steps, requests, nvfp4_scale_rule);
}

backend::Tensor launch_forward_step(LoadedModel& model, cache::KvPool& pool, quant::Rotation rotation,
                                    std::span<const backend::SequenceStep> steps,
                                    quant::Nvfp4ScaleRule nvfp4_scale_rule) {
  return launch_forward_step(model.transformer(), pool, rotation, steps, nvfp4_scale_rule);
}

backend::Tensor launch_forward_step(model::Transformer& transformer, cache::KvPool& pool, quant::Rotation rotation,
                                    std::span<const backend::SequenceStep> steps,
                                    quant::Nvfp4ScaleRule nvfp4_scale_rule) {
  for (size_t i = 0; i < steps.size(); ++i) {
    NIBBLE_CHECK(!steps[i].all_logits,
                 "sampled step: sequence {} asks for all its logits; on-device sampling returns only token ids "
                 "(use run_forward_step)",
                 i);
  }
  int64_t real_rows = 0;
  const backend::Tensor out = forward_step_on_device(transformer, pool, rotation, steps, nvfp4_scale_rule, real_rows);
  NIBBLE_ASSERT(real_rows == static_cast<int64_t>(steps.size()));
  transformer.backend().flush();  // the step's graph starts now, not when its draws are launched
  // One row per sequence, in order; the padding rows (after them) are not sampled.
  return {out.data, real_rows, out.cols};
}

std::vector<backend::SampledToken> run_forward_step_sampled(model::Transformer& transformer, cache::KvPool& pool,
                                                            quant::Rotation rotation,
                                                            std::span<const backend::SequenceStep> steps,
                                                            std::span<const backend::SampleRequest> requests,
                                                            quant::Nvfp4ScaleRule nvfp4_scale_rule) {
  NIBBLE_CHECK(requests.size() == steps.size(), "sampled step: {} sample requests for {} sequences", requests.size(),
               steps.size());
  const backend::Tensor logits = launch_forward_step(transformer, pool, rotation, steps, nvfp4_scale_rule);
  std::vector<backend::SampledToken> tokens(steps.size());
  transformer.backend().sample(logits, requests, tokens);
  return tokens;
}

std::vector<backend::SampledToken> sample_host_logits(std::span<const float> logits, int64_t vocab,
                                                      std::span<const backend::SampleRequest> requests) {
  const int64_t rows = static_cast<int64_t>(requests.size());
  NIBBLE_CHECK(vocab > 0 && static_cast<int64_t>(logits.size()) == rows * vocab,
               "sample_host_logits: {} logits for {} requests of vocab {}", logits.size(), rows, vocab);
  // The CPU backend's sample reads only its arguments (no threads, no state): one instance serves all.
  static backend::CpuBackend host_sampler({.num_threads = 1});
  std::vector<backend::SampledToken> out(requests.size());
  if (rows == 0) return out;
  host_sampler.sample({const_cast<float*>(logits.data()), rows, vocab}, requests, out);  // read only
  return out;
}

}  // namespace nibble::runtime
