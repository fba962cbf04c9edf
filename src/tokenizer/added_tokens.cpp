#include "tokenizer/added_tokens.h"

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace nibble {
namespace {

bool is_whitespace(char32_t c) {  // Unicode White_Space (Rust's char::is_whitespace)
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_char(std::string_view ch) {  // alphanumeric or '_', as Hugging Face's single_word check
  static const Regex word(R"(^[\p{L}\p{N}_]$)");
  return !word.find_all(ch).empty();
}

// Start of the whitespace run that ends text.
size_t trailing_whitespace_start(std::string_view text) {
  const auto cps = utf8::decode(text);
  size_t pos = text.size();
  for (auto it = cps.rbegin(); it != cps.rend() && is_whitespace(*it); ++it) {
    std::string enc;
    utf8::append(enc, *it);
    pos -= enc.size();
  }
  return pos;
}

// Length of the whitespace run that starts text.
size_t leading_whitespace_length(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t n = utf8::valid_sequence_length(text, pos);
    if (n == 0 || !is_whitespace(utf8::decode(text.substr(pos, n))[0])) break;
    pos += n;
  }
  return pos;
}

std::string_view last_char(std::string_view text) {
  size_t i = text.size();
  while (i > 0 && (static_cast<unsigned char>(text[i - 1]) & 0xC0) == 0x80) --i;
  return i > 0 ? text.substr(i - 1) : text;
}

std::string_view first_char(std::string_view text) {
  const size_t n = utf8::valid_sequence_length(text, 0);
  return text.substr(0, n == 0 ? 1 : n);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns)
    : tokens_(std::move(tokens)), trie_(1) {
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& pattern = patterns[t];
    if (pattern.empty()) continue;
    int32_t node = 0;
    for (unsigned char byte : pattern) {
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(trie_.size());
        trie_[node].children.emplace_back(byte, next);
        trie_.emplace_back();
      }
      node = next;
    }
    if (trie_[node].token < 0) trie_[node].token = static_cast<int32_t>(t);  // first definition wins
  }
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char byte) const {
  for (const auto& [b, c] : trie_[node].children)
    if (b == byte) return c;
  return -1;
}

std::pair<int32_t, size_t> AddedTokenMatcher::longest_at(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (trie_[node].token >= 0) best = {trie_[node].token, i + 1 - pos};
  }
  return best;
}

std::vector<Segment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Segment> segments;
  size_t emitted = 0;  // text before this is covered by segments
  for (size_t pos = 0; pos < text.size();) {
    const auto [index, length] = trie_.size() > 1 ? longest_at(text, pos) : std::pair<int32_t, size_t>{-1, 0};
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos, stop = pos + length;
    pos = stop;  // matching resumes after the match itself, whatever lstrip/rstrip absorb
    if (token.single_word) {
      const bool word_before = start > 0 && is_word_char(last_char(text.substr(0, start)));
      const bool word_after = stop < text.size() && is_word_char(first_char(text.substr(stop)));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_whitespace_start(text.substr(0, start)), emitted);
    if (token.rstrip) stop += leading_whitespace_length(text.substr(stop));
    if (start < emitted) continue;  // overlaps whitespace a previous rstrip already absorbed
    if (emitted < start) segments.push_back({emitted, start, -1});
    segments.push_back({start, stop, token.id});
    emitted = stop;
    pos = std::max(pos, stop);
  }
  if (emitted < text.size()) segments.push_back({emitted, text.size(), -1});
  return segments;
}

}  // namespace nibble
