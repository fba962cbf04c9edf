#pragma once
// The stories260k tokenizer (models/stories260k), loaded once per test binary.
#include <filesystem>

#include "tokenizer/tokenizer.h"

namespace nibble::eval {

inline const Tokenizer& stories_tokenizer() {
  static const Tokenizer t = Tokenizer::load(std::filesystem::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k");
  return t;
}

}  // namespace nibble::eval
