#pragma once
// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical composition),
// the NFC normalizer of Qwen2/Qwen3 tokenizers. Tables are generated from Unicode data by
// gen_unicode_nfc_tables.py.
#include <string>
#include <string_view>

namespace nibble {

// Precondition: text is valid UTF-8.
std::string nfc(std::string_view text);

}  // namespace nibble
