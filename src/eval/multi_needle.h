#pragma once
// Multi-needle retrieval: N key-value needles "The secret code for NAME is DDDDD." hidden in the
// retrieval filler (eval/retrieval.h) of a chosen length; the question asks for one of them.
//
// Prompt (as text, tokenized once with special tokens):
//   kMultiNeedleIntro + filler with the N needles at sentence boundaries + multi_needle_question(name)
// Per item, from std::mt19937_64(seed) in item order (length, depth, sample): N distinct names from
// kMultiNeedleNames (a seeded partial shuffle), N distinct 5-digit values (10000 + rng() % 90000,
// redrawn on a repeat), which needle is asked (rng() % N), and the depths of the other N - 1
// needles: needle j (j = 0..N-1, asked excluded) at a uniform depth within stratum j of N equal
// strata of [0, 1], so the needles spread through the filler. The asked needle sits at the
// requested depth. Needles are listed in prompt order. The filler count F is, per item, the largest
// whose prompt fits in `length` tokens.
//
// Scoring: the item passes when the decoded output contains the asked needle's digits; it is a
// confusion when it fails and the output contains another needle's digits.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "eval/kv_config.h"
#include "eval/retrieval.h"
#include "eval/retrieval_summary.h"
#include "runtime/loaded_model.h"
#include "tokenizer/tokenizer.h"

namespace nibble::eval {

inline constexpr const char* kMultiNeedleIntro =
    "There are several secret codes hidden inside a lot of irrelevant text. Find them and remember "
    "them. I will ask you about one of them.\n";
inline constexpr std::array<const char*, 16> kMultiNeedleNames = {
    "Alice", "Bob",   "Carol", "David", "Emma",  "Frank", "Grace", "Henry",
    "Irene", "Jack",  "Kate",  "Leo",   "Maria", "Nick",  "Olga",  "Peter"};
std::string multi_needle_text(const std::string& name, const std::string& value);  // "The secret code for NAME is VALUE. "
std::string multi_needle_question(const std::string& name);  // "\nWhat is the secret code for NAME? The secret code for NAME is"

struct MultiNeedleOptions {
  std::vector<int64_t> lengths = {256, 512};                 // prompt tokens (at most)
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};  // depth of the asked needle
  int64_t needles = 4;                                       // N, 1..kMultiNeedleNames.size()
  int64_t samples = 2;                                       // items per length x depth
  uint64_t seed = 0;
  int64_t max_new_tokens = 8;
  int64_t chunk = 64;
  int64_t page_size = 16;
};

struct Needle {
  std::string name{};
  std::string value{};  // 5 digits
  double depth = 0;     // requested depth in [0, 1]
  int64_t after = 0;    // filler sentences before it
};

struct MultiNeedleItem {
  int64_t length = 0;  // the requested length
  double depth = 0;    // the asked needle's requested depth
  int64_t sample = 0;
  std::vector<Needle> needles{};  // [N], in prompt order
  int64_t asked = 0;              // index into needles
  int64_t filler_sentences = 0;
  std::vector<int32_t> prompt{};  // [<= length] token ids
};

// Items in order length, depth, sample. Throws nibble::Error for a depth outside [0, 1], samples < 1,
// needles outside 1..16, or a length too short to hold the intro, the needles and the question.
std::vector<MultiNeedleItem> make_multi_needle_items(const Tokenizer& tokenizer, const MultiNeedleOptions& options);

struct MultiNeedleOutcome {
  std::string output{};
  bool pass = false;      // output contains the asked needle's value
  bool confused = false;  // !pass and output contains another needle's value
};

MultiNeedleOutcome score_multi_needle(const MultiNeedleItem& item, const std::string& output);

struct MultiNeedleSummary {
  RetrievalSummary retrieval{};         // accuracy, cells, McNemar vs the reference
  std::vector<int64_t> confusions{};    // [configs]: items answered with another needle's value
};

// outcomes[c]: configuration c's outcomes in item order; names[0] is the reference.
MultiNeedleSummary summarize_multi_needle(const std::vector<MultiNeedleItem>& items,
                                          const std::vector<std::string>& names,
                                          const std::vector<std::vector<MultiNeedleOutcome>>& outcomes,
                                          const stats::DetectOptions& detect = {});

// Runs every item under one configuration. Throws nibble::Error when an item's prompt plus
// max_new_tokens exceeds the model's context.
std::vector<MultiNeedleOutcome> run_multi_needle(runtime::LoadedModel& model, const Tokenizer& tokenizer,
                                                 const std::vector<MultiNeedleItem>& items, const KvConfig& config,
                                                 const MultiNeedleOptions& options);

}  // namespace nibble::eval
