#include "eval/retrieval.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "eval/token_metrics.h"
#include "runtime/session.h"

namespace nibble::eval {

std::string build_haystack(const std::string& intro, int64_t filler, const std::vector<PlacedNeedle>& needles,
                           const std::string& question) {
  std::string text = intro;
  auto insert_at = [&](int64_t boundary) {
    for (const PlacedNeedle& n : needles) {
      if (std::clamp<int64_t>(n.after, 0, filler) == boundary) text += n.text;
    }
  };
  for (int64_t i = 0; i < filler; ++i) {
    insert_at(i);
    text += kRetrievalFiller;
  }
  insert_at(filler);
  text += question;
  return text;
}

int64_t depth_to_sentence(double depth, int64_t filler) { return std::llround(depth * static_cast<double>(filler)); }

int64_t largest_fitting_filler(const std::function<bool(int64_t)>& fits, int64_t guess, const std::string& task,
                               int64_t length) {
  NIBBLE_CHECK(fits(0), "{} length {} is too short: the intro, needle(s) and question alone do not fit", task, length);
  int64_t f = std::max<int64_t>(guess, 0);
  while (f > 0 && !fits(f)) --f;
  while (fits(f + 1)) ++f;
  return f;
}

int64_t filler_sentence_tokens(const Tokenizer& tokenizer) {
  const auto n = static_cast<int64_t>(tokenizer.encode(kRetrievalFiller, false).size());
  NIBBLE_ASSERT(n > 0);
  return n;
}

std::string greedy_continuation(runtime::LoadedModel& model, const Tokenizer& tokenizer,
                                const std::vector<int32_t>& prompt, const KvConfig& config,
                                const GreedyOptions& options) {
  NIBBLE_CHECK(options.max_new_tokens >= 1, "{}: max new tokens must be at least 1, got {}", options.task,
               options.max_new_tokens);
  const int64_t context = model.config().max_position_embeddings;
  const int64_t needed = static_cast<int64_t>(prompt.size()) + options.max_new_tokens;
  NIBBLE_CHECK(needed <= context, "{} item of {} prompt tokens + {} new tokens exceeds the model's context of {}",
               options.task, prompt.size(), options.max_new_tokens, context);
  const std::vector<int32_t> eos = tokenizer.eos_ids();
  runtime::Session session(model, {.kv_dtype = config.dtype,
                                   .rotation = config.rotation,
                                   .page_size = options.page_size,
                                   .prefill_chunk = options.chunk,
                                   .max_context = needed,
                                   .global_scales = config.global_scales,
                                   .nvfp4_scale_rule = config.nvfp4_scale_rule});
  std::vector<float> logits = session.prefill(prompt);  // [vocab] of the last prompt token
  std::vector<int32_t> generated;
  for (int64_t t = 0; t < options.max_new_tokens; ++t) {
    const auto next = static_cast<int32_t>(argmax(logits));
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
    generated.push_back(next);
    if (t + 1 < options.max_new_tokens) logits = session.decode(next);
  }
  return tokenizer.decode(generated, /*skip_special=*/true);
}

std::string first_digit_run(const std::string& text) {
  size_t begin = 0;
  while (begin < text.size() && !(text[begin] >= '0' && text[begin] <= '9')) ++begin;
  size_t end = begin;
  while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
  return text.substr(begin, end - begin);
}

}  // namespace nibble::eval
