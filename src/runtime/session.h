#pragma once
// A generation session: the KV pages of one or more sequences on one loaded model, chunked prefill
// and decode steps, logits back on the host. Used by `nibble generate`, `nibble score` and (later)
// the server's engine.
//
//   Session s(model, {.kv_dtype = KvDtype::kNVFP4, .prefill_chunk = 512});
//   logits = s.prefill(prompt_ids);          // [vocab] of the last prompt token
//   logits = s.decode(next_id);              // [vocab] of next_id
//
// Several sequences: add_sequence() ids, then step() with any mix of prefill chunks and decode
// tokens; each sequence's tokens attend along the path the StepPlan assigns (backend/step_plan.h).
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "quant/kv_format.h"
#include "backend/backend.h"
#include "cache/kv_pool.h"
#include "runtime/loaded_model.h"

namespace nibble::runtime {

struct SessionOptions {
  quant::KvDtype kv_dtype = quant::KvDtype::kF32;
  quant::Rotation rotation = quant::Rotation::kNone;
  int64_t page_size = 16;      // tokens per KV page
  int64_t prefill_chunk = 0;   // tokens per prefill step; 0 = the whole prompt in one step
  int64_t max_context = 0;     // tokens per sequence the pool is sized for; 0 = the model's context
  int64_t max_sequences = 1;   // sequences the pool is sized for
  // Per-layer K/V global scales g (e.g. from `nibble calibrate`, cache/kv_scales_file.h); empty = 1.0.
  cache::KvGlobalScales global_scales{};
  // nvfp4 block-scale rule (quant/nvfp4.h); both rules run on the CPU and the CUDA backend, bit-exactly alike.
  quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6;
};

struct PrefillOptions {
  bool all_logits = false;  // logits of every token [n, vocab] (scoring), else of the last [vocab]
};

using SequenceId = int64_t;

struct StepInput {
  SequenceId sequence = 0;
  std::span<const int32_t> tokens;  // new tokens, appended to the sequence
  bool all_logits = false;
};

class Session {
 public:
  // Creates sequence 0. Throws nibble::Error when the KV format does not suit the model (nvfp4
  // with head_dim not a multiple of 16, Hadamard with head_dim not a power of two) or max_context
  // exceeds the model's context.
  Session(LoadedModel& model, const SessionOptions& options);
  ~Session();

  int64_t max_context() const { return max_context_; }
  int64_t vocab_size() const;
  const cache::KvPool& kv_pool() const { return pool_; }
  backend::KvCacheView kv_view();

  // ---- one sequence (id 0) --------------------------------------------------------------------
  // Appends `tokens` (in chunks of prefill_chunk). Throws nibble::Error for no tokens or when the
  // sequence would exceed max_context.
  std::vector<float> prefill(std::span<const int32_t> tokens, const PrefillOptions& options = {});
  std::vector<float> decode(int32_t token);
  int64_t length() const { return length(0); }

  // ---- several sequences ------------------------------------------------------------------------
  SequenceId add_sequence();
  void remove_sequence(SequenceId id);  // returns its pages to the pool
  int64_t length(SequenceId id) const;
  // One forward step over `inputs` (distinct sequences). Returns the logits, input by input: all
  // new tokens' rows when all_logits, else the last token's; [rows, vocab] row-major.
  std::vector<float> step(std::span<const StepInput> inputs);

  void check_integrity() const;

 private:
  struct Sequence {
    int64_t length = 0;          // tokens in the cache
    std::vector<int32_t> pages;  // page ids, page i holds positions [i·page_size, (i+1)·page_size)
  };
  Sequence& sequence(SequenceId id);
  const Sequence& sequence(SequenceId id) const;

  LoadedModel& model_;
  SessionOptions options_;
  int64_t max_context_;
  quant::Rotation rotation_;
  cache::KvPool pool_;  // pages in the backend's memory; the session owns every page it allocates
  std::map<SequenceId, Sequence> sequences_;
  SequenceId next_id_ = 0;
};

}  // namespace nibble::runtime
