#pragma once
// Normalizers of tokenizer.json: NFC, Prepend, Replace (string pattern), Sequence.
// Applied to each piece of the input between added tokens, as Hugging Face does.
#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace nibble {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

// json: the "normalizer" object (not null). Throws nibble::Error naming an unsupported type.
// depth: nesting level of Sequence components (bounded: the file is outside input).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& json, int depth = 0);

// Replaces every occurrence of `from` (non-empty) in text with `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace nibble
