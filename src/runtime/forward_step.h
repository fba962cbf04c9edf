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
//
// A backend buffer holds one page more than the pool hands out: page num_pages is the scratch page
// that the sequences padding a decode step to its CUDA-graph bucket write into (run_forward_step);
// no sequence of the pool ever owns it.
cache::KvPool make_kv_pool(LoadedModel& model, const KvPoolOptions& options);
cache::KvPool make_kv_pool(model::Transformer& transformer, const KvPoolOptions& options);

// The view the attention ops read the pool through.
backend::KvCacheView kv_cache_view(cache::KvPool& pool, quant::Rotation rotation,
                                   quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6);

// One forward pass over `steps` (distinct sequences; pages owned by the caller, covering
// first_position + tokens). Returns the logits, sequence by sequence: every new token's row when
// all_logits, else the last token's; [rows, vocab] row-major, float32, host memory.
//
// Per step it declares the model's attention geometry to the backend (Backend::prepare_attention,
// so plan() makes the split-KV plan), and on a backend with CUDA graphs a decode step (every
// sequence one new token after a cached prefix) is padded to the backend's batch bucket with
// sequences decoding one token in the pool's scratch page, and its page tables to a power-of-two
// width, so that steps of nearby shapes replay one graph; the padding rows' logits are dropped.
// The plan's sequences [steps.size(), num_seqs) are the padding.
std::vector<float> run_forward_step(LoadedModel& model, cache::KvPool& pool, quant::Rotation rotation,
                                    std::span<const backend::SequenceStep> steps,
                                    quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6);
std::vector<float> run_forward_step(model::Transformer& transformer, cache::KvPool& pool, quant::Rotation rotation,
                                    std::span<const backend::SequenceStep> steps,
                                    quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6);

// run_forward_step, then one token drawn per sequence by the backend's sample op from that
// sequence's logits row, which never leaves the backend's memory: out[i] is steps[i]'s token under
// requests[i] (Backend::sample's rules: greedy = argmax, lowest id on ties; else Philox(seed, draw)
// over the top-k / top-p / min-p kept set) with its temperature-1 logprob, and the row's
// requests[i].top_logprobs most probable alternatives. Only ids and logprobs come back to the host,
// so a caller uses it when nothing of the step needs host logits: every steps[i].all_logits false
// (throws nibble::Error otherwise, and when requests.size() != steps.size()); callers needing
// prompt scoring or echo use run_forward_step.
// Sequences that do not sample this step (a prompt chunk before the last) get a token too: ignore it.
std::vector<backend::SampledToken> run_forward_step_sampled(
    LoadedModel& model, cache::KvPool& pool, quant::Rotation rotation, std::span<const backend::SequenceStep> steps,
    std::span<const backend::SampleRequest> requests,
    quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6);
std::vector<backend::SampledToken> run_forward_step_sampled(
    model::Transformer& transformer, cache::KvPool& pool, quant::Rotation rotation,
    std::span<const backend::SequenceStep> steps, std::span<const backend::SampleRequest> requests,
    quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6);

// The first half of run_forward_step_sampled, for a caller that launches this step, then does
// other work (reads the previous step's tokens), then draws this step's tokens with
// Backend::sample_launch / sample_wait: runs the forward pass over `steps` (fed tokens,
// SequenceStep::fed_row, resolved by the backend from its last sample_launch) and returns the
// logits rows of steps' own sequences, one each, in the backend's memory: [steps.size(), vocab],
// valid until the next forward step. On a backend with a device queue nothing waits for it. Throws
// nibble::Error as run_forward_step_sampled does for a sequence asking for all its logits.
backend::Tensor launch_forward_step(model::Transformer& transformer, cache::KvPool& pool, quant::Rotation rotation,
                                    std::span<const backend::SequenceStep> steps,
                                    quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6);
backend::Tensor launch_forward_step(LoadedModel& model, cache::KvPool& pool, quant::Rotation rotation,
                                    std::span<const backend::SequenceStep> steps,
                                    quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6);

// The same rule as Backend::sample (the CPU backend's implementation: float64, Philox(seed, draw)) on
// host logits rows [requests.size(), vocab]: for a caller that needed host logits this step but wants
// a request's draws to follow the one Philox stream whichever path its steps take. The CUDA sampler
// may pick the neighbouring token where a draw falls on a float rounding boundary (backend.h).
std::vector<backend::SampledToken> sample_host_logits(std::span<const float> logits, int64_t vocab,
                                                      std::span<const backend::SampleRequest> requests);

// The plan run_forward_step runs: make_step_plan over `steps`, padded as described above when
// `backend` asks for a larger decode bucket and `pool` has its scratch page. Exposed for tests.
backend::StepPlan plan_forward_step(backend::Backend& backend, const cache::KvPool& pool,
                                    std::span<const backend::SequenceStep> steps);

}  // namespace nibble::runtime
