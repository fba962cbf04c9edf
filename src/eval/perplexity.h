#pragma once
// Perplexity, KL divergence and top-1 agreement of KV configurations against a reference
// configuration, on the same documents.
//
// How the quantized cache is exercised: every document is prefilled in chunks of `chunk` tokens,
// each chunk one forward step that appends to the same sequence. A chunk's queries attend over its
// own K/V at full precision and over every earlier chunk's K/V as stored in the paged cache (the
// extend path, DESIGN.md), so position p >= chunk sees floor(p / chunk) * chunk quantized prefix
// tokens. With chunk = 1 every position reads its whole past from the cache (the decode path's
// view); with chunk >= context nothing is read back from the cache at all and every configuration
// equals the reference up to its own chunk's rounding. The default (64) keeps all but the first 64
// positions on the cached-prefix path at a fraction of chunk = 1's cost.
//
// All sessions of one document step in lockstep, chunk by chunk, so only [chunk, vocab] logits per
// configuration are alive at once (vocabularies of 150k tokens times 4k contexts would not fit).
#include <cstdint>
#include <span>
#include <vector>

#include "eval/kv_config.h"
#include "runtime/loaded_model.h"

namespace nibble::eval {

struct PerplexityOptions {
  int64_t chunk = 64;      // prefill tokens per step (see above)
  int64_t page_size = 16;  // tokens per KV page
};

// One configuration's per-token results. Position i of a document scores token i+1 given 0..i, so
// a document of n tokens has n-1 positions; arrays are [documents, positions] row-major.
struct ConfigTokenScores {
  KvConfig config{};
  int64_t documents = 0;
  int64_t positions = 0;
  std::vector<double> logprob{};       // [documents, positions] log p_config(next token), nats
  std::vector<double> kl{};            // [documents, positions] KL(reference || config), nats
  std::vector<uint8_t> top1_agree{};   // [documents, positions] 1 when both argmaxes agree
};

struct PerplexityRun {
  KvConfig reference{};
  ConfigTokenScores reference_scores{};      // the reference's own log-probs (kl = 0, top1 = 1)
  std::vector<ConfigTokenScores> configs{};  // in the order given; a config equal to the reference is run again
};

// documents: [documents][tokens], all the same length >= 2, ids < vocab. Every configuration must
// suit the model (callers skip unsuitable ones first; Session throws otherwise).
// Throws nibble::Error for no documents, unequal lengths, or a length over the model's context.
PerplexityRun run_perplexity(runtime::LoadedModel& model, std::span<const std::vector<int32_t>> documents,
                             const KvConfig& reference, std::span<const KvConfig> configs,
                             const PerplexityOptions& options);

}  // namespace nibble::eval
