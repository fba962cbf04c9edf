#pragma once
// GPT-2's byte <-> character map: every byte 0..255 is shown as one printable code point, so byte-level
// BPE vocabularies are plain strings ("Ġ" is the space byte 0x20, "Ċ" is '\n').
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nibble::byte_level {

// The UTF-8 text of each byte's character.
const std::array<std::string, 256>& byte_chars();
// The byte behind code point cp, if cp is one of the 256 characters.
std::optional<uint8_t> char_byte(char32_t cp);
// Every byte of text replaced by its character.
std::string encode(std::string_view bytes);

}  // namespace nibble::byte_level
