#include "runtime/session.h"

#include <algorithm>
#include <optional>

#include "backend/step_plan.h"
#include "common/error.h"
#include "runtime/forward_step.h"

namespace nibble::runtime {

namespace {

int64_t resolve_context(const config::ModelConfig& config, int64_t requested) {
  NIBBLE_CHECK(requested >= 0, "max_context must not be negative, got {}", requested);
  NIBBLE_CHECK(requested <= config.max_position_embeddings,
               "a context of {} tokens exceeds the model's context of {} (max_position_embeddings)", requested,
               config.max_position_embeddings);
  return requested == 0 ? config.max_position_embeddings : requested;
}

int64_t pool_pages(const SessionOptions& options, int64_t max_context) {
  NIBBLE_CHECK(options.page_size > 0, "page size must be positive, got {}", options.page_size);
  NIBBLE_CHECK(options.max_sequences > 0, "a session needs at least one sequence, got {}", options.max_sequences);
  return options.max_sequences * ((max_context + options.page_size - 1) / options.page_size);
}

cache::KvPool make_pool(LoadedModel& model, const SessionOptions& options, int64_t max_context) {
  return make_kv_pool(model, {.kv_dtype = options.kv_dtype,
                              .rotation = options.rotation,
                              .page_size = options.page_size,
                              .num_pages = pool_pages(options, max_context),
                              .global_scales = options.global_scales});
}

}  // namespace

Session::Session(LoadedModel& model, const SessionOptions& options)
    : model_(model),
      options_(options),
      max_context_(resolve_context(model.config(), options.max_context)),
      rotation_(options.rotation),
      pool_(make_pool(model, options, max_context_)) {
  NIBBLE_CHECK(options.prefill_chunk >= 0, "prefill chunk must not be negative, got {}", options.prefill_chunk);
  add_sequence();
}

Session::~Session() = default;

int64_t Session::vocab_size() const { return model_.config().vocab_size; }

Session::Sequence& Session::sequence(SequenceId id) {
  auto it = sequences_.find(id);
  NIBBLE_CHECK(it != sequences_.end(), "no sequence {} in this session", id);
  return it->second;
}
const Session::Sequence& Session::sequence(SequenceId id) const {
  auto it = sequences_.find(id);
  NIBBLE_CHECK(it != sequences_.end(), "no sequence {} in this session", id);
  return it->second;
}

SequenceId Session::add_sequence() {
  NIBBLE_CHECK(static_cast<int64_t>(sequences_.size()) < options_.max_sequences,
               "the session holds {} sequences already (max_sequences)", sequences_.size());
  sequences_[next_id_] = Sequence{};
  return next_id_++;
}

void Session::remove_sequence(SequenceId id) {
  Sequence& seq = sequence(id);
  pool_.allocator().release(seq.pages);
  sequences_.erase(id);
}

int64_t Session::length(SequenceId id) const { return sequence(id).length; }

std::vector<float> Session::step(std::span<const StepInput> inputs) {
  NIBBLE_CHECK(!inputs.empty(), "a step needs at least one sequence");
  std::vector<backend::SequenceStep> steps;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const StepInput& in = inputs[i];
    for (size_t j = 0; j < i; ++j) {
      NIBBLE_CHECK(inputs[j].sequence != in.sequence, "sequence {} appears twice in one step", in.sequence);
    }
    Sequence& seq = sequence(in.sequence);
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    NIBBLE_CHECK(n > 0, "sequence {}: a step needs at least one new token", in.sequence);
    NIBBLE_CHECK(seq.length + n <= max_context_,
                 "sequence {}: {} tokens after {} would exceed the context of {} tokens", in.sequence, n, seq.length,
                 max_context_);
    const int64_t pages_needed = (seq.length + n + options_.page_size - 1) / options_.page_size;
    const int64_t extra = pages_needed - static_cast<int64_t>(seq.pages.size());
    if (extra > 0) {
      std::optional<std::vector<cache::PageId>> pages = pool_.allocator().allocate(extra);
      NIBBLE_CHECK(pages.has_value(), "the KV pool has {} free pages, sequence {} needs {} more",
                   pool_.allocator().num_free(), in.sequence, extra);
      seq.pages.insert(seq.pages.end(), pages->begin(), pages->end());
    }
    steps.push_back({.first_position = seq.length, .tokens = in.tokens, .pages = seq.pages,
                     .all_logits = in.all_logits});
  }
  std::vector<float> logits = run_forward_step(model_, pool_, rotation_, steps, options_.nvfp4_scale_rule);
  for (const StepInput& in : inputs) sequence(in.sequence).length += static_cast<int64_t>(in.tokens.size());
  return logits;
}

std::vector<float> Session::prefill(std::span<const int32_t> tokens, const PrefillOptions& options) {
  NIBBLE_CHECK(!tokens.empty(), "prefill needs at least one token");
  const int64_t n = static_cast<int64_t>(tokens.size());
  NIBBLE_CHECK(length() + n <= max_context_, "a prompt of {} tokens (after {} cached) exceeds the context of {} tokens",
               n, length(), max_context_);
  const int64_t chunk = options_.prefill_chunk > 0 ? options_.prefill_chunk : n;
  std::vector<float> all;
  std::vector<float> last;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    const StepInput input{.sequence = 0, .tokens = tokens.subspan(begin, count), .all_logits = options.all_logits};
    last = step(std::span(&input, 1));
    if (options.all_logits) all.insert(all.end(), last.begin(), last.end());
  }
  return options.all_logits ? all : last;
}

std::vector<float> Session::decode(int32_t token) {
  const StepInput input{.sequence = 0, .tokens = std::span(&token, 1)};
  return step(std::span(&input, 1));
}

backend::KvCacheView Session::kv_view() { return kv_cache_view(pool_, rotation_, options_.nvfp4_scale_rule); }

void Session::check_integrity() const {
  pool_.check_integrity();
  int64_t owned = 0;
  for (const auto& [id, seq] : sequences_) {
    NIBBLE_CHECK(static_cast<int64_t>(seq.pages.size()) == (seq.length + options_.page_size - 1) / options_.page_size,
                 "sequence {}: {} pages for {} tokens", id, seq.pages.size(), seq.length);
    for (cache::PageId page : seq.pages) {
      NIBBLE_CHECK(pool_.allocator().ref_count(page) == 1, "sequence {}: page {} has {} owners, expected 1", id, page,
                   pool_.allocator().ref_count(page));
    }
    owned += static_cast<int64_t>(seq.pages.size());
  }
  NIBBLE_CHECK(owned == pool_.allocator().num_used(), "the sequences hold {} pages, the pool has {} in use", owned,
               pool_.allocator().num_used());
}

}  // namespace nibble::runtime
