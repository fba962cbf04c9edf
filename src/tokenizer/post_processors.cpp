#include "tokenizer/post_processors.h"

#include "tokenizer/json_fields.h"

namespace nibble {
namespace tj = tokenizer_json;

PostProcessor::PostProcessor(const nlohmann::json& json) { append_template(json, 0); }

void PostProcessor::append_template(const nlohmann::json& json, int depth) {
  NIBBLE_CHECK(depth < 16, "tokenizer.json: Sequence post_processors nested more than 16 deep");
  const std::string type = tj::type_of(json, "post_processor");
  if (type == "ByteLevel") return;  // trims offsets only
  if (type == "Sequence") {
    for (const auto& step : tj::array_field(json, "processors", "Sequence post_processor")) append_template(step, depth + 1);
    return;
  }
  NIBBLE_CHECK(type == "TemplateProcessing",
               "tokenizer.json: unsupported post_processor type \"{}\" (supported: TemplateProcessing, ByteLevel, "
               "Sequence)",
               type);
  const auto& specials = tj::field(json, "special_tokens", "TemplateProcessing");
  NIBBLE_CHECK(specials.is_object(), "tokenizer.json: TemplateProcessing.special_tokens must be an object");
  std::vector<Piece> pieces;
  size_t sequences = 0;
  for (const auto& item : tj::array_field(json, "single", "TemplateProcessing")) {
    NIBBLE_CHECK(item.is_object() && item.size() == 1, "tokenizer.json: TemplateProcessing.single has a malformed item");
    if (item.contains("Sequence")) {
      const std::string id = tj::string_field(item["Sequence"], "id", "TemplateProcessing Sequence");
      NIBBLE_CHECK(id == "A", "tokenizer.json: TemplateProcessing.single refers to sequence {:?}; only A exists", id);
      pieces.push_back({true, {}});
      ++sequences;
      continue;
    }
    NIBBLE_CHECK(item.contains("SpecialToken"), "tokenizer.json: TemplateProcessing item is neither Sequence nor "
                                                "SpecialToken");
    const std::string name = tj::string_field(item["SpecialToken"], "id", "TemplateProcessing SpecialToken");
    const auto it = specials.find(name);
    NIBBLE_CHECK(it != specials.end(), "tokenizer.json: TemplateProcessing uses special token {:?} it does not define",
                 name);
    Piece piece{false, {}};
    for (const auto& id : tj::array_field(*it, "ids", "TemplateProcessing special_tokens entry")) {
      NIBBLE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t{1} << 31),
                   "tokenizer.json: special token {:?} has an invalid id", name);
      piece.ids.push_back(id.get<int32_t>());
    }
    pieces.push_back(std::move(piece));
  }
  NIBBLE_CHECK(sequences == 1, "tokenizer.json: TemplateProcessing.single must contain $A exactly once");
  templates_.push_back(std::move(pieces));
}

std::vector<int32_t> PostProcessor::apply(std::vector<int32_t> ids) const {
  for (const auto& pieces : templates_) {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const Piece& p : pieces) {
      if (p.is_sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), p.ids.begin(), p.ids.end());
      }
    }
    ids = std::move(out);
  }
  return ids;
}

}  // namespace nibble
