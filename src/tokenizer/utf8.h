#pragma once
// UTF-8 helpers shared by the tokenizer: code point iteration, encoding, and Rust's
// String::from_utf8_lossy (what Hugging Face's decoders use), so decode output is always valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nibble::utf8 {

constexpr char32_t kReplacement = 0xFFFD;

// Length of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there are not one
// (overlong forms, surrogates, > U+10FFFF and truncated sequences are invalid).
size_t valid_sequence_length(std::string_view s, size_t i);
bool is_valid(std::string_view s);
// Each maximal invalid subsequence becomes one U+FFFD (the Unicode "maximal subpart" practice, as
// Rust's from_utf8_lossy does).
std::string lossy(std::string_view bytes);
// Bytes at the end of s that start a UTF-8 sequence which is valid so far but incomplete (0..3).
size_t incomplete_tail_length(std::string_view s);

void append(std::string& out, char32_t cp);
// Decodes valid UTF-8 (precondition: is_valid(s)) into code points.
std::vector<char32_t> decode(std::string_view s);
std::string encode(const std::vector<char32_t>& cps);

}  // namespace nibble::utf8
