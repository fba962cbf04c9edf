#include "eval/perplexity.h"

#include <algorithm>
#include <memory>

#include "common/error.h"
#include "eval/token_metrics.h"
#include "runtime/session.h"

namespace nibble::eval {
namespace {

ConfigTokenScores empty_scores(const KvConfig& config, int64_t documents, int64_t positions) {
  const auto cells = static_cast<size_t>(documents * positions);
  return {.config = config,
          .documents = documents,
          .positions = positions,
          .logprob = std::vector<double>(cells),
          .kl = std::vector<double>(cells),
          .top1_agree = std::vector<uint8_t>(cells)};
}

runtime::SessionOptions session_options(const KvConfig& config, const PerplexityOptions& options, int64_t tokens) {
  return {.kv_dtype = config.dtype,
          .rotation = config.rotation,
          .page_size = options.page_size,
          .prefill_chunk = 0,  // run_perplexity hands the session one chunk per prefill call
          .max_context = tokens,
          .global_scales = config.global_scales,
          .nvfp4_scale_rule = config.nvfp4_scale_rule};
}

}  // namespace

PerplexityRun run_perplexity(runtime::LoadedModel& model, std::span<const std::vector<int32_t>> documents,
                             const KvConfig& reference, std::span<const KvConfig> configs,
                             const PerplexityOptions& options) {
  NIBBLE_CHECK(!documents.empty(), "perplexity: no documents to score");
  NIBBLE_CHECK(options.chunk >= 1, "--chunk must be at least 1, got {}", options.chunk);
  const int64_t tokens = static_cast<int64_t>(documents[0].size());
  NIBBLE_CHECK(tokens >= 2, "perplexity: documents need at least 2 tokens, got {}", tokens);
  const int64_t vocab = model.config().vocab_size;
  const int64_t context = model.config().max_position_embeddings;
  NIBBLE_CHECK(tokens <= context, "perplexity: documents of {} tokens exceed the model's context of {}", tokens,
               context);
  for (const auto& doc : documents) {
    NIBBLE_CHECK(static_cast<int64_t>(doc.size()) == tokens, "perplexity: documents must all have {} tokens, one has {}",
                 tokens, doc.size());
    for (int32_t id : doc) NIBBLE_CHECK(id >= 0 && id < vocab, "token id {} is outside the vocabulary of {}", id, vocab);
  }
  const int64_t num_docs = static_cast<int64_t>(documents.size());
  const int64_t positions = tokens - 1;

  PerplexityRun run{.reference = reference, .reference_scores = empty_scores(reference, num_docs, positions)};
  for (const KvConfig& c : configs) run.configs.push_back(empty_scores(c, num_docs, positions));

  for (int64_t d = 0; d < num_docs; ++d) {
    const std::vector<int32_t>& doc = documents[static_cast<size_t>(d)];
    runtime::Session ref_session(model, session_options(reference, options, tokens));
    std::vector<std::unique_ptr<runtime::Session>> sessions;
    for (const KvConfig& c : configs) {
      sessions.push_back(std::make_unique<runtime::Session>(model, session_options(c, options, tokens)));
    }
    for (int64_t start = 0; start < tokens; start += options.chunk) {
      const int64_t len = std::min(options.chunk, tokens - start);
      const std::span<const int32_t> chunk_ids(doc.data() + start, static_cast<size_t>(len));
      // [len, vocab] logits of positions start .. start+len-1; the last document position has no
      // next token and is not scored.
      const std::vector<float> ref_logits = ref_session.prefill(chunk_ids, {.all_logits = true});
      const int64_t scored = std::min(len, positions - start);
      std::vector<std::vector<double>> ref_log_probs(static_cast<size_t>(scored));  // [scored][vocab]
      std::vector<int64_t> ref_top1(static_cast<size_t>(scored));
      for (int64_t r = 0; r < scored; ++r) {
        const std::span<const float> row(ref_logits.data() + r * vocab, static_cast<size_t>(vocab));
        ref_log_probs[static_cast<size_t>(r)] = log_softmax(row);
        ref_top1[static_cast<size_t>(r)] = argmax(row);
        const size_t cell = static_cast<size_t>(d * positions + start + r);
        run.reference_scores.logprob[cell] = ref_log_probs[static_cast<size_t>(r)][static_cast<size_t>(doc[start + r + 1])];
        run.reference_scores.top1_agree[cell] = 1;
      }
      for (size_t c = 0; c < configs.size(); ++c) {
        const std::vector<float> logits = sessions[c]->prefill(chunk_ids, {.all_logits = true});  // [len, vocab]
        for (int64_t r = 0; r < scored; ++r) {
          const PositionMetrics m = compare_position(
              ref_log_probs[static_cast<size_t>(r)], ref_top1[static_cast<size_t>(r)],
              std::span<const float>(logits.data() + r * vocab, static_cast<size_t>(vocab)), doc[start + r + 1]);
          const size_t cell = static_cast<size_t>(d * positions + start + r);
          run.configs[c].logprob[cell] = m.logprob;
          run.configs[c].kl[cell] = m.kl;
          run.configs[c].top1_agree[cell] = m.top1_agree ? 1 : 0;
        }
      }
    }
  }
  return run;
}

}  // namespace nibble::eval
