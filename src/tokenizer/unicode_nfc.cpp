#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tokenizer/utf8.h"

namespace nibble {
namespace {

struct CombiningClassEntry {
  char32_t cp;
  uint8_t ccc;
};
struct DecompositionEntry {
  char32_t cp, first, second;  // second == 0: a singleton decomposition
};
struct CompositionEntry {
  char32_t first, second, composite;
};
#include "tokenizer/unicode_nfc_tables.inc"

// Hangul syllables (Unicode section 3.12): composed and decomposed arithmetically.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = std::end(kCombiningClass);
  const auto* it = std::lower_bound(std::begin(kCombiningClass), end, cp,
                                    [](const CombiningClassEntry& e, char32_t c) { return e.cp < c; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = std::end(kDecomposition);
  const auto* it = std::lower_bound(std::begin(kDecomposition), end, cp,
                                    [](const DecompositionEntry& e, char32_t c) { return e.cp < c; });
  if (cp < 0xC0 || it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of (first, second), or 0.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  const auto* end = std::end(kComposition);
  const auto* it = std::lower_bound(std::begin(kComposition), end, std::pair{first, second},
                                    [](const CompositionEntry& e, std::pair<char32_t, char32_t> k) {
                                      return e.first != k.first ? e.first < k.first : e.second < k.second;
                                    });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

}  // namespace

std::string nfc(std::string_view text) {
  // Fast path: text below U+00C0 (ASCII and Latin-1 symbols) is already in NFC.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0xC3; }))
    return std::string(text);
  std::vector<char32_t> d;
  d.reserve(text.size());
  for (char32_t cp : utf8::decode(text)) decompose(cp, d);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j,
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition (Unicode section 3.11, D117).
  std::vector<char32_t> out;
  out.reserve(d.size());
  size_t starter = SIZE_MAX;  // index in `out` of the last starter
  int last_ccc = -1;
  for (char32_t cp : d) {
    const int ccc = combining_class(cp);
    if (starter != SIZE_MAX) {
      const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        if (const char32_t c = compose(out[starter], cp); c != 0) {
          out[starter] = c;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = out.size();
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(cp);
  }
  return utf8::encode(out);
}

}  // namespace nibble
