#pragma once
// Added tokens (tokenizer.json "added_tokens"): found in the input before normalization
// (normalized = false) or after it (normalized = true), leftmost-longest, honoring lstrip / rstrip
// (absorb the whitespace beside the token) and single_word (only between non-word characters).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nibble {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// A piece of the input: either text to tokenize or an added token's id.
struct Segment {
  size_t begin, end;   // byte range in the split text
  int32_t token_id;    // -1: plain text
};

// Finds a set of added tokens in text.
class AddedTokenMatcher {
 public:
  // patterns[i] is what tokens[i] looks like in the text being split (its normalized form for a
  // normalized token). Empty patterns are ignored.
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);
  // Covers text with segments in order; plain-text segments are never empty.
  std::vector<Segment> split(std::string_view text) const;
  bool empty() const { return tokens_.empty(); }

 private:
  // Byte trie over the patterns; node 0 is the root.
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // (byte, child node)
    int32_t token = -1;                                        // index into tokens_ ending here
  };
  int32_t child(int32_t node, unsigned char byte) const;
  // Index of the longest pattern starting at text[pos] and its length, or (-1, 0).
  std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_;
};

}  // namespace nibble
