#pragma once
// Pre-tokenizers of tokenizer.json: Split (PCRE2 regex or string, every split behavior, invert),
// ByteLevel, Metaspace and Sequence. They cut each normalized piece of the input into the words the
// BPE model merges within.
#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <vector>

namespace nibble {

struct PreToken {
  std::string text;
  bool at_input_start = false;  // begins at byte 0 of the original input (Metaspace's "first" scheme)
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `tokens` by their refinement.
  virtual void pre_tokenize(std::vector<PreToken>& tokens) const = 0;
};

// json: the "pre_tokenizer" object (not null). Throws nibble::Error naming an unsupported type/option.
// depth: nesting level of Sequence components (bounded: the file is outside input).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& json, int depth = 0);

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// A cover of a text by ranges, each a delimiter match or not (Hugging Face's find_matches output).
struct SplitRange {
  size_t begin, end;
  bool is_match;
};
// Applies a split behavior; returns the [begin, end) ranges of the resulting non-empty pieces.
std::vector<std::pair<size_t, size_t>> apply_split_behavior(std::vector<SplitRange> ranges, SplitBehavior behavior);

}  // namespace nibble
