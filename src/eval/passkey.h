#pragma once
// Passkey retrieval (shared haystack / fitting / decoding in eval/retrieval.h): a random 5-digit key hidden at a chosen depth of synthetic filler text of a
// chosen length; the prompt ends asking for the key; a few tokens are decoded greedily and the item
// passes when the first run of digits in the output is the key.
//
// Prompt (as text, tokenized once with special tokens):
//   kPasskeyIntro + filler * k + kPasskeyNeedle(key) + filler * (F - k) + kPasskeyQuestion
// F filler sentences are chosen as the largest count whose prompt fits in `length` tokens, and the
// needle goes after k = round(depth * F) sentences (depth 0 = first, 1 = last before the question).
// Keys come from std::mt19937_64(seed) in item order (length, depth, sample), so a seed fixes the
// items on every platform.
#include <cstdint>
#include <string>
#include <vector>

#include "eval/kv_config.h"
#include "eval/retrieval.h"
#include "runtime/loaded_model.h"
#include "tokenizer/tokenizer.h"

namespace nibble::eval {

inline constexpr const char* kPasskeyIntro =
    "There is an important piece of information hidden inside a lot of irrelevant text. Find it and "
    "remember it. I will ask you about it.\n";
inline constexpr const char* kPasskeyFiller = kRetrievalFiller;
inline constexpr const char* kPasskeyQuestion = "\nWhat is the pass key? The pass key is";
std::string passkey_needle(const std::string& key);  // "The pass key is KEY. Remember it. KEY is the pass key. "

struct PasskeyOptions {
  std::vector<int64_t> lengths = {256, 512};             // prompt tokens (at most)
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};  // needle position as a fraction of the filler
  int64_t samples = 2;                                   // items (keys) per length x depth
  uint64_t seed = 0;
  int64_t max_new_tokens = 8;                            // greedy decode budget
  int64_t chunk = 64;                                    // prefill tokens per step (see perplexity.h)
  int64_t page_size = 16;
};

struct PasskeyItem {
  int64_t length = 0;       // the requested length
  double depth = 0;
  int64_t sample = 0;
  std::string key{};          // 5 digits, 10000..99999
  int64_t filler_sentences = 0;
  int64_t needle_after = 0;  // filler sentences before the needle
  std::vector<int32_t> prompt{};  // [<= length] token ids
};

// Items in order length, depth, sample. Throws nibble::Error for a depth outside [0, 1], samples < 1,
// or a length too short to hold the intro, the needle and the question.
std::vector<PasskeyItem> make_passkey_items(const Tokenizer& tokenizer, const PasskeyOptions& options);

struct PasskeyOutcome {
  std::string output{};  // decoded greedy continuation
  bool pass = false;
};

// Scored by first_digit_run(output) == key (eval/retrieval.h).
// Runs every item under one configuration (which must suit the model). Throws nibble::Error when
// an item's prompt plus max_new_tokens exceeds the model's context.
std::vector<PasskeyOutcome> run_passkey(runtime::LoadedModel& model, const Tokenizer& tokenizer,
                                        const std::vector<PasskeyItem>& items, const KvConfig& config,
                                        const PasskeyOptions& options);

}  // namespace nibble::eval
