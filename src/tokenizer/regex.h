#pragma once
// A compiled PCRE2 pattern (UTF + UCP: \p{L}, \s, \w are Unicode-aware, as in the Oniguruma engine
// Hugging Face tokenizers use). The Split pre-tokenizer's look-ahead patterns need a backtracking engine.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nibble {

class Regex {
 public:
  // Throws nibble::Error with PCRE2's message and offset when the pattern does not compile.
  explicit Regex(const std::string& pattern);
  // Non-overlapping matches, left to right, as [begin, end) byte offsets into text (valid UTF-8).
  // An empty match advances by one character, as Rust's find_iter does.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<Code> code_;
};

}  // namespace nibble
