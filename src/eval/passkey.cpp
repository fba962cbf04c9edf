#include "eval/passkey.h"

#include <random>

#include "common/error.h"

namespace nibble::eval {
namespace {

std::string build_prompt(const std::string& key, int64_t filler, int64_t needle_after) {
  return build_haystack(kPasskeyIntro, filler, {{.after = needle_after, .text = passkey_needle(key)}},
                        kPasskeyQuestion);
}

}  // namespace

std::string passkey_needle(const std::string& key) {
  return "The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
}

std::vector<PasskeyItem> make_passkey_items(const Tokenizer& tokenizer, const PasskeyOptions& options) {
  NIBBLE_CHECK(options.samples >= 1, "--samples must be at least 1, got {}", options.samples);
  NIBBLE_CHECK(!options.lengths.empty() && !options.depths.empty(), "passkey: give at least one length and one depth");
  for (double d : options.depths) NIBBLE_CHECK(d >= 0.0 && d <= 1.0, "passkey depth must lie in [0, 1], got {}", d);
  std::mt19937_64 rng(options.seed);
  const int64_t filler_tokens = filler_sentence_tokens(tokenizer);
  std::vector<PasskeyItem> items;
  for (int64_t length : options.lengths) {
    // The filler count depends on the length only (keys all have 5 digits); found once per length
    // with a representative key, then checked for every item.
    auto fits = [&](int64_t f) {
      return static_cast<int64_t>(tokenizer.encode(build_prompt("00000", f, depth_to_sentence(0.5, f))).size()) <=
             length;
    };
    const auto bare = static_cast<int64_t>(tokenizer.encode(build_prompt("00000", 0, 0)).size());
    const int64_t filler =
        largest_fitting_filler(fits, std::max<int64_t>(length - bare, 0) / filler_tokens, "passkey", length);
    for (double depth : options.depths) {
      for (int64_t s = 0; s < options.samples; ++s) {
        PasskeyItem item{.length = length, .depth = depth, .sample = s, .filler_sentences = filler};
        item.key = std::to_string(10000 + rng() % 90000);
        item.needle_after = depth_to_sentence(depth, filler);
        item.prompt = tokenizer.encode(build_prompt(item.key, filler, item.needle_after));
        // Digits may tokenize differently from "00000"; drop filler until the prompt fits.
        while (static_cast<int64_t>(item.prompt.size()) > length && item.filler_sentences > 0) {
          --item.filler_sentences;
          item.needle_after = depth_to_sentence(depth, item.filler_sentences);
          item.prompt = tokenizer.encode(build_prompt(item.key, item.filler_sentences, item.needle_after));
        }
        NIBBLE_CHECK(static_cast<int64_t>(item.prompt.size()) <= length, "passkey length {} cannot hold key {}", length,
                     item.key);
        items.push_back(std::move(item));
      }
    }
  }
  return items;
}

std::vector<PasskeyOutcome> run_passkey(runtime::LoadedModel& model, const Tokenizer& tokenizer,
                                        const std::vector<PasskeyItem>& items, const KvConfig& config,
                                        const PasskeyOptions& options) {
  const GreedyOptions greedy{
      .max_new_tokens = options.max_new_tokens, .chunk = options.chunk, .page_size = options.page_size, .task = "passkey"};
  std::vector<PasskeyOutcome> outcomes;
  for (const PasskeyItem& item : items) {
    PasskeyOutcome outcome{.output = greedy_continuation(model, tokenizer, item.prompt, config, greedy)};
    outcome.pass = first_digit_run(outcome.output) == item.key;
    outcomes.push_back(std::move(outcome));
  }
  return outcomes;
}

}  // namespace nibble::eval
