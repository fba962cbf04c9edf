#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace nibble::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<std::string, 256> byte_to_text;
  std::array<int16_t, 512> cp_to_byte{};  // every mapped code point is < 0x144; -1 = not mapped
};

// bytes_to_unicode() of GPT-2's encoder.py: printable Latin-1 bytes map to themselves, the others to
// 256 + n in byte order.
const Tables& tables() {
  static const Tables t = [] {
    Tables t;
    t.cp_to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t.byte_to_cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      utf8::append(t.byte_to_text[b], t.byte_to_cp[b]);
      t.cp_to_byte[t.byte_to_cp[b]] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_chars() { return tables().byte_to_text; }

std::optional<uint8_t> char_byte(char32_t cp) {
  if (cp >= 512 || tables().cp_to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(tables().cp_to_byte[cp]);
}

std::string encode(std::string_view bytes) {
  const auto& chars = byte_chars();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += chars[static_cast<uint8_t>(c)];
  return out;
}

}  // namespace nibble::byte_level
