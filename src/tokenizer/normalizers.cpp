#include "tokenizer/normalizers.h"

#include <vector>

#include "tokenizer/json_fields.h"
#include "tokenizer/unicode_nfc.h"

namespace nibble {
namespace tj = tokenizer_json;
namespace {

class NfcNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override { return nfc(text); }
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};  // Hugging Face prepends only to non-empty text
    return prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::string normalize(std::string_view text) const override { return replace_all(text, from_, to_); }

 private:
  std::string from_, to_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string current(text);
    for (const auto& step : steps_) current = step->normalize(current);
    return current;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& json, int depth) {
  NIBBLE_CHECK(depth < 16, "tokenizer.json: Sequence components nested more than 16 deep");
  const std::string type = tj::type_of(json, "normalizer");
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(tj::string_field(json, "prepend", "Prepend"));
  if (type == "Replace") {
    std::string from;
    NIBBLE_CHECK(tj::string_pattern(tj::field(json, "pattern", "Replace"), from) && !from.empty(),
                 "tokenizer.json: Replace normalizer: only a non-empty {{\"String\": ...}} pattern is supported");
    return std::make_unique<ReplaceNormalizer>(from, tj::string_field(json, "content", "Replace"));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : tj::array_field(json, "normalizers", "Sequence normalizer"))
      steps.push_back(make_normalizer(step, depth + 1));
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  NIBBLE_FAIL("tokenizer.json: unsupported normalizer type \"{}\" (supported: NFC, Prepend, Replace, Sequence)",
              type);
}

}  // namespace nibble
