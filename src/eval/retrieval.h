#pragma once
// Pieces shared by the long-context retrieval tasks (passkey.h, multi_needle.h): the haystack
// prompt (intro + filler sentences with needle texts inserted at sentence boundaries + question),
// the largest filler count that fits a token budget, and a greedy decode of a few tokens under one
// KV configuration.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/kv_config.h"
#include "runtime/loaded_model.h"
#include "tokenizer/tokenizer.h"

namespace nibble::eval {

// Synthetic filler shared by every retrieval task: one "sentence" is this whole string.
inline constexpr const char* kRetrievalFiller =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";

struct PlacedNeedle {
  int64_t after = 0;   // filler sentences before it (0..filler; filler = after the last sentence)
  std::string text{};  // inserted verbatim
};

// intro + filler sentences with each needle inserted after `after` sentences (needles at the same
// boundary keep their order in `needles`) + question.
std::string build_haystack(const std::string& intro, int64_t filler, const std::vector<PlacedNeedle>& needles,
                           const std::string& question);

// The filler-sentence index for a depth in [0, 1]: round(depth * filler).
int64_t depth_to_sentence(double depth, int64_t filler);

// The largest filler count f >= 0 with fits(f), for a predicate monotone in f, starting the search
// at `guess`. Throws nibble::Error (naming `task` and `length`) when even fits(0) is false.
int64_t largest_fitting_filler(const std::function<bool(int64_t)>& fits, int64_t guess, const std::string& task,
                               int64_t length);

// Filler tokens per sentence (encoded alone, without special tokens); > 0.
int64_t filler_sentence_tokens(const Tokenizer& tokenizer);

struct GreedyOptions {
  int64_t max_new_tokens = 8;  // greedy decode budget
  int64_t chunk = 64;          // prefill tokens per step
  int64_t page_size = 16;
  std::string task = "retrieval";  // named in errors
};

// Prefills `prompt` in a fresh session under `config`, then decodes greedily until an EOS token or
// max_new_tokens; returns the decoded text (special tokens skipped). Throws nibble::Error when the
// prompt plus max_new_tokens exceeds the model's context, or max_new_tokens < 1.
std::string greedy_continuation(runtime::LoadedModel& model, const Tokenizer& tokenizer,
                                const std::vector<int32_t>& prompt, const KvConfig& config,
                                const GreedyOptions& options);

// The first maximal run of ASCII digits in `text` ("" when none).
std::string first_digit_run(const std::string& text);

}  // namespace nibble::eval
