#pragma once
// The pieces of a forward step that do not depend on who owns the pages: a KV pool in the
// backend's memory, the view the attention ops read it through, and one forward pass over
// externally planned sequences. Session (one process, its own pages) and the serving engine
// (pages owned by the scheduler) both run their steps through these.
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/step_plan.h"
#include "cache/kv_pool.h"
#include "quant/kv_format.h"
#include "runtime/loaded_model.h"

namespace nibble::runtime {

struct KvPoolOptions {
  quant::KvDtype kv_dtype = quant::KvDtype::kF32;
  quant::Rotation rotation = quant::Rotation::kNone;
  int64_t page_size = 16;  // tokens per page, >= 1
  int64_t num_pages = 0;   // >= 1
  cache::KvGlobalScales global_scales{};  // per-layer K/V g (cache/kv_scales_file.h); empty = 1.0
};

// The page layout a pool for `model` would have (validates the format against head_dim).
cache::PageLayout kv_page_layout(LoadedModel& model, const KvPoolOptions& options);

// A pool of options.num_pages pages of the model's KV geometry, its bytes in the backend's memory
// (host memory for the CPU backend, a backend buffer otherwise). Throws nibble::Error when the
// format does not suit the model's head_dim or the sizes are not positive, or when global_scales
// does not cover every full-attention layer with finite, positive scales.
cache::KvPool make_kv_pool(LoadedModel& model, const KvPoolOptions& options);

// Throws nibble::Error unless the model's backend implements `rule` in its cache write (4-over-6:
// the CPU backend only).
void check_nvfp4_scale_rule(LoadedModel& model, quant::Nvfp4ScaleRule rule);

// The view the attention ops read the pool through.
backend::KvCacheView kv_cache_view(cache::KvPool& pool, quant::Rotation rotation,
                                   quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6);

// One forward pass over `steps` (distinct sequences; pages owned by the caller, covering
// first_position + tokens). Returns the logits, sequence by sequence: every new token's row when
// all_logits, else the last token's; [rows, vocab] row-major, float32, host memory.
std::vector<float> run_forward_step(LoadedModel& model, cache::KvPool& pool, quant::Rotation rotation,
                                    std::span<const backend::SequenceStep> steps,
                                    quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6);

}  // namespace nibble::runtime
