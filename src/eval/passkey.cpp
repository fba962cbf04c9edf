#include "eval/passkey.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "common/error.h"
#include "eval/token_metrics.h"
#include "runtime/session.h"

namespace nibble::eval {
namespace {

std::string build_prompt(const std::string& key, int64_t filler, int64_t needle_after) {
  std::string text = kPasskeyIntro;
  for (int64_t i = 0; i < filler; ++i) {
    if (i == needle_after) text += passkey_needle(key);
    text += kPasskeyFiller;
  }
  if (needle_after >= filler) text += passkey_needle(key);
  text += kPasskeyQuestion;
  return text;
}

int64_t needle_position(double depth, int64_t filler) { return std::llround(depth * static_cast<double>(filler)); }

}  // namespace

std::string passkey_needle(const std::string& key) {
  return "The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
}

std::vector<PasskeyItem> make_passkey_items(const Tokenizer& tokenizer, const PasskeyOptions& options) {
  NIBBLE_CHECK(options.samples >= 1, "--samples must be at least 1, got {}", options.samples);
  NIBBLE_CHECK(!options.lengths.empty() && !options.depths.empty(), "passkey: give at least one length and one depth");
  for (double d : options.depths) NIBBLE_CHECK(d >= 0.0 && d <= 1.0, "passkey depth must lie in [0, 1], got {}", d);
  std::mt19937_64 rng(options.seed);
  const auto filler_tokens = static_cast<int64_t>(tokenizer.encode(kPasskeyFiller, false).size());
  NIBBLE_ASSERT(filler_tokens > 0);
  std::vector<PasskeyItem> items;
  for (int64_t length : options.lengths) {
    // The filler count depends on the length only (keys all have 5 digits); found once per length
    // with a representative key, then checked for every item.
    const int64_t bare = static_cast<int64_t>(tokenizer.encode(build_prompt("00000", 0, 0)).size());
    NIBBLE_CHECK(bare <= length, "passkey length {} is too short: the intro, needle and question alone take {} tokens",
                 length, bare);
    int64_t filler = (length - bare) / filler_tokens;
    auto fits = [&](int64_t f) {
      return static_cast<int64_t>(tokenizer.encode(build_prompt("00000", f, needle_position(0.5, f))).size()) <= length;
    };
    while (filler > 0 && !fits(filler)) --filler;
    while (fits(filler + 1)) ++filler;
    for (double depth : options.depths) {
      for (int64_t s = 0; s < options.samples; ++s) {
        PasskeyItem item{.length = length, .depth = depth, .sample = s, .filler_sentences = filler};
        item.key = std::to_string(10000 + rng() % 90000);
        item.needle_after = needle_position(depth, filler);
        item.prompt = tokenizer.encode(build_prompt(item.key, filler, item.needle_after));
        // Digits may tokenize differently from "00000"; drop filler until the prompt fits.
        while (static_cast<int64_t>(item.prompt.size()) > length && item.filler_sentences > 0) {
          --item.filler_sentences;
          item.needle_after = needle_position(depth, item.filler_sentences);
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

std::string first_digit_run(const std::string& output) {
  size_t begin = 0;
  while (begin < output.size() && !(output[begin] >= '0' && output[begin] <= '9')) ++begin;
  size_t end = begin;
  while (end < output.size() && output[end] >= '0' && output[end] <= '9') ++end;
  return output.substr(begin, end - begin);
}

std::vector<PasskeyOutcome> run_passkey(runtime::LoadedModel& model, const Tokenizer& tokenizer,
                                        const std::vector<PasskeyItem>& items, const KvConfig& config,
                                        const PasskeyOptions& options) {
  NIBBLE_CHECK(options.max_new_tokens >= 1, "passkey: max new tokens must be at least 1, got {}", options.max_new_tokens);
  const int64_t context = model.config().max_position_embeddings;
  const std::vector<int32_t> eos = tokenizer.eos_ids();
  std::vector<PasskeyOutcome> outcomes;
  for (const PasskeyItem& item : items) {
    const int64_t needed = static_cast<int64_t>(item.prompt.size()) + options.max_new_tokens;
    NIBBLE_CHECK(needed <= context, "passkey item of {} prompt tokens + {} new tokens exceeds the model's context of {}",
                 item.prompt.size(), options.max_new_tokens, context);
    runtime::Session session(model, {.kv_dtype = config.dtype,
                                     .rotation = config.rotation,
                                     .page_size = options.page_size,
                                     .prefill_chunk = options.chunk,
                                     .max_context = needed,
                                     .global_scales = config.global_scales,
                                     .nvfp4_scale_rule = config.nvfp4_scale_rule});
    std::vector<float> logits = session.prefill(item.prompt);  // [vocab] of the last prompt token
    std::vector<int32_t> generated;
    for (int64_t t = 0; t < options.max_new_tokens; ++t) {
      const auto next = static_cast<int32_t>(argmax(logits));
      if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
      generated.push_back(next);
      if (t + 1 < options.max_new_tokens) logits = session.decode(next);
    }
    PasskeyOutcome outcome{.output = tokenizer.decode(generated, /*skip_special=*/true)};
    outcome.pass = first_digit_run(outcome.output) == item.key;
    outcomes.push_back(std::move(outcome));
  }
  return outcomes;
}

}  // namespace nibble::eval
