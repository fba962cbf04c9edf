#include "eval/multi_needle.h"

#include <algorithm>
#include <random>

#include "common/error.h"

namespace nibble::eval {
namespace {

std::string build_prompt(const std::vector<Needle>& needles, int64_t asked, int64_t filler) {
  std::vector<PlacedNeedle> placed;
  for (const Needle& n : needles) placed.push_back({.after = n.after, .text = multi_needle_text(n.name, n.value)});
  return build_haystack(kMultiNeedleIntro, filler, placed, multi_needle_question(needles[asked].name));
}

// Places every needle for `filler` sentences and orders them by position (stable: equal positions
// keep their draw order); keeps `asked` pointing at the same needle.
void place(std::vector<Needle>& needles, int64_t& asked, int64_t filler) {
  for (Needle& n : needles) n.after = depth_to_sentence(n.depth, filler);
  const std::string asked_name = needles[asked].name;
  std::stable_sort(needles.begin(), needles.end(), [](const Needle& a, const Needle& b) { return a.after < b.after; });
  asked = std::find_if(needles.begin(), needles.end(), [&](const Needle& n) { return n.name == asked_name; }) -
          needles.begin();
}

std::vector<int32_t> encode_placed(const Tokenizer& tokenizer, std::vector<Needle>& needles, int64_t& asked,
                                   int64_t filler) {
  place(needles, asked, filler);
  return tokenizer.encode(build_prompt(needles, asked, filler));
}

}  // namespace

std::string multi_needle_text(const std::string& name, const std::string& value) {
  return "The secret code for " + name + " is " + value + ". ";
}

std::string multi_needle_question(const std::string& name) {
  return "\nWhat is the secret code for " + name + "? The secret code for " + name + " is";
}

std::vector<MultiNeedleItem> make_multi_needle_items(const Tokenizer& tokenizer, const MultiNeedleOptions& options) {
  const auto max_needles = static_cast<int64_t>(kMultiNeedleNames.size());
  NIBBLE_CHECK(options.needles >= 1 && options.needles <= max_needles, "--needles must lie in 1..{}, got {}",
               max_needles, options.needles);
  NIBBLE_CHECK(options.samples >= 1, "--samples must be at least 1, got {}", options.samples);
  NIBBLE_CHECK(!options.lengths.empty() && !options.depths.empty(),
               "multineedle: give at least one length and one depth");
  for (double d : options.depths) NIBBLE_CHECK(d >= 0.0 && d <= 1.0, "multineedle depth must lie in [0, 1], got {}", d);
  const int64_t n = options.needles;
  std::mt19937_64 rng(options.seed);
  const int64_t filler_tokens = filler_sentence_tokens(tokenizer);
  std::vector<MultiNeedleItem> items;
  for (int64_t length : options.lengths) {
    // A first filler count for this length from representative needles (the longest names, value
    // "00000", spread evenly); each item then refits from it, as its names and digits may take more
    // or fewer tokens.
    std::vector<Needle> probe;
    std::vector<std::string> names(kMultiNeedleNames.begin(), kMultiNeedleNames.end());
    std::stable_sort(names.begin(), names.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    for (int64_t j = 0; j < n; ++j) {
      probe.push_back({.name = names[j], .value = "00000", .depth = static_cast<double>(j) / std::max<int64_t>(n - 1, 1)});
    }
    auto fits = [&](int64_t f) {
      int64_t asked = 0;
      return static_cast<int64_t>(encode_placed(tokenizer, probe, asked, f).size()) <= length;
    };
    int64_t asked0 = 0;
    const auto bare = static_cast<int64_t>(encode_placed(tokenizer, probe, asked0, 0).size());
    const int64_t filler =
        largest_fitting_filler(fits, std::max<int64_t>(length - bare, 0) / filler_tokens, "multineedle", length);
    for (double depth : options.depths) {
      for (int64_t s = 0; s < options.samples; ++s) {
        MultiNeedleItem item{.length = length, .depth = depth, .sample = s, .filler_sentences = filler};
        std::vector<std::string> pool(kMultiNeedleNames.begin(), kMultiNeedleNames.end());
        for (int64_t j = 0; j < n; ++j) {  // partial Fisher-Yates: pool[0..n) become the names
          const auto pick = j + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_needles - j));
          std::swap(pool[j], pool[pick]);
        }
        std::vector<std::string> values;
        while (static_cast<int64_t>(values.size()) < n) {
          std::string v = std::to_string(10000 + rng() % 90000);
          if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(std::move(v));
        }
        item.asked = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
        for (int64_t j = 0, stratum = 0; j < n; ++j) {
          double d = depth;
          if (j != item.asked) {
            // One stratum per needle slot (N strata of [0, 1]); the draw is a portable uniform
            // fraction in [0, 1) from the top 53 bits (std distributions differ across libraries).
            d = (static_cast<double>(stratum) + static_cast<double>(rng() >> 11) * 0x1.0p-53) / static_cast<double>(n);
          }
          ++stratum;
          item.needles.push_back({.name = pool[j], .value = values[j], .depth = d});
        }
        // Names and digits tokenize differently from the probe: refit the filler for this item.
        auto item_fits = [&](int64_t f) {
          return static_cast<int64_t>(encode_placed(tokenizer, item.needles, item.asked, f).size()) <= length;
        };
        item.filler_sentences = largest_fitting_filler(item_fits, filler, "multineedle", length);
        item.prompt = encode_placed(tokenizer, item.needles, item.asked, item.filler_sentences);
        items.push_back(std::move(item));
      }
    }
  }
  return items;
}

MultiNeedleOutcome score_multi_needle(const MultiNeedleItem& item, const std::string& output) {
  MultiNeedleOutcome o{.output = output};
  o.pass = output.find(item.needles.at(item.asked).value) != std::string::npos;
  for (size_t j = 0; j < item.needles.size() && !o.pass; ++j) {
    if (static_cast<int64_t>(j) != item.asked && output.find(item.needles[j].value) != std::string::npos) {
      o.confused = true;
    }
  }
  return o;
}

MultiNeedleSummary summarize_multi_needle(const std::vector<MultiNeedleItem>& items,
                                          const std::vector<std::string>& names,
                                          const std::vector<std::vector<MultiNeedleOutcome>>& outcomes,
                                          const stats::DetectOptions& detect) {
  std::vector<RetrievalItemKey> keys;
  for (const MultiNeedleItem& item : items) keys.push_back({.length = item.length, .depth = item.depth});
  std::vector<std::vector<bool>> passes;
  MultiNeedleSummary out;
  for (const auto& list : outcomes) {
    std::vector<bool>& p = passes.emplace_back();
    int64_t confused = 0;
    for (const MultiNeedleOutcome& o : list) {
      p.push_back(o.pass);
      confused += o.confused ? 1 : 0;
    }
    out.confusions.push_back(confused);
  }
  out.retrieval = summarize_retrieval(keys, names, passes, "multineedle", detect);
  return out;
}

std::vector<MultiNeedleOutcome> run_multi_needle(runtime::LoadedModel& model, const Tokenizer& tokenizer,
                                                 const std::vector<MultiNeedleItem>& items, const KvConfig& config,
                                                 const MultiNeedleOptions& options) {
  const GreedyOptions greedy{.max_new_tokens = options.max_new_tokens,
                             .chunk = options.chunk,
                             .page_size = options.page_size,
                             .task = "multineedle"};
  std::vector<MultiNeedleOutcome> outcomes;
  for (const MultiNeedleItem& item : items) {
    outcomes.push_back(score_multi_needle(item, greedy_continuation(model, tokenizer, item.prompt, config, greedy)));
  }
  return outcomes;
}

}  // namespace nibble::eval
