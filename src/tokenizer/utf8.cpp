#include "tokenizer/utf8.h"

namespace nibble::utf8 {
namespace {

// How many bytes of a sequence starting at s[i] are a valid prefix, and the full length it needs.
struct Prefix {
  size_t valid;   // bytes that form a valid (possibly incomplete) prefix
  size_t needed;  // total length of the sequence the lead byte announces (0: invalid lead)
};

Prefix valid_prefix(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return {1, 1};
  size_t needed = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    needed = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    needed = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    needed = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 0};
  }
  size_t valid = 1;
  for (size_t k = 1; k < needed && i + k < s.size(); ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
    ++valid;
  }
  return {valid, needed};
}

}  // namespace

size_t valid_sequence_length(std::string_view s, size_t i) {
  const Prefix p = valid_prefix(s, i);
  return p.needed != 0 && p.valid == p.needed ? p.needed : 0;
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = valid_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const Prefix p = valid_prefix(bytes, i);
    if (p.needed != 0 && p.valid == p.needed) {
      out.append(bytes.substr(i, p.needed));
      i += p.needed;
    } else {
      append(out, kReplacement);
      i += p.valid == 0 ? 1 : p.valid;  // a maximal invalid subpart is replaced as a whole
    }
  }
  return out;
}

size_t incomplete_tail_length(std::string_view s) {
  const size_t lookback = s.size() < 4 ? s.size() : 4;
  for (size_t k = 1; k <= lookback; ++k) {
    const size_t i = s.size() - k;
    const auto b = static_cast<uint8_t>(s[i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const Prefix p = valid_prefix(s, i);
    return p.needed > k && p.valid == k ? k : 0;
  }
  return 0;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<char32_t> decode(std::string_view s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    size_t n = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    if (i + n > s.size()) n = s.size() - i;
    char32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    cps.push_back(cp);
    i += n;
  }
  return cps;
}

std::string encode(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append(out, cp);
  return out;
}

}  // namespace nibble::utf8
