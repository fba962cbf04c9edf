#include "tokenizer/pre_tokenizers.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/regex.h"

namespace nibble {
namespace tj = tokenizer_json;
namespace {

// GPT-2's pre-tokenization pattern, used by ByteLevel with use_regex = true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::vector<SplitRange> cover(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                              bool invert) {
  std::vector<SplitRange> ranges;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) ranges.push_back({prev, b, invert});
    ranges.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != text.size()) ranges.push_back({prev, text.size(), invert});
  return ranges;
}

std::vector<std::pair<size_t, size_t>> find_string(std::string_view text, std::string_view needle) {
  std::vector<std::pair<size_t, size_t>> matches;
  for (size_t pos = text.find(needle); pos != std::string_view::npos; pos = text.find(needle, pos + needle.size()))
    matches.emplace_back(pos, pos + needle.size());
  return matches;
}

void refine(std::vector<PreToken>& tokens, const auto& split_one) {
  std::vector<PreToken> out;
  out.reserve(tokens.size());
  for (const PreToken& token : tokens) {
    for (const auto& [b, e] : split_one(token))
      out.push_back({token.text.substr(b, e - b), token.at_input_start && b == 0});
  }
  tokens = std::move(out);
}

SplitBehavior parse_behavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  NIBBLE_FAIL("tokenizer.json: unknown Split behavior \"{}\"", name);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  explicit SplitPreTokenizer(const nlohmann::json& json)
      : behavior_(parse_behavior(tj::string_field(json, "behavior", "Split"))),
        invert_(tj::bool_field(json, "invert", "Split", false)) {
    const auto& pattern = tj::field(json, "pattern", "Split");
    if (!tj::string_pattern(pattern, literal_)) {
      NIBBLE_CHECK(pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string(),
                   "tokenizer.json: Split.pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}");
      regex_ = std::make_unique<Regex>(pattern["Regex"].get<std::string>());
    } else {
      NIBBLE_CHECK(!literal_.empty(), "tokenizer.json: Split.pattern is an empty string");
    }
  }
  void pre_tokenize(std::vector<PreToken>& tokens) const override {
    refine(tokens, [&](const PreToken& t) {
      const auto matches = regex_ ? regex_->find_all(t.text) : find_string(t.text, literal_);
      return apply_split_behavior(cover(t.text, matches, invert_), behavior_);
    });
  }

 private:
  SplitBehavior behavior_;
  bool invert_;
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  explicit ByteLevelPreTokenizer(const nlohmann::json& json)
      : add_prefix_space_(tj::bool_field(json, "add_prefix_space", "ByteLevel", true)) {
    if (tj::bool_field(json, "use_regex", "ByteLevel", true)) regex_ = std::make_unique<Regex>(kGpt2Pattern);
  }
  void pre_tokenize(std::vector<PreToken>& tokens) const override {
    if (add_prefix_space_) {
      for (PreToken& t : tokens)
        if (!t.text.empty() && t.text[0] != ' ') t.text.insert(0, " ");
    }
    if (regex_) {
      refine(tokens, [&](const PreToken& t) {
        return apply_split_behavior(cover(t.text, regex_->find_all(t.text), false), SplitBehavior::kIsolated);
      });
    }
    for (PreToken& t : tokens) t.text = byte_level::encode(t.text);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  explicit MetaspacePreTokenizer(const nlohmann::json& json)
      : replacement_(tj::string_field(json, "replacement", "Metaspace")),
        split_(tj::bool_field(json, "split", "Metaspace", true)) {
    if (json.contains("prepend_scheme")) {
      scheme_ = tj::string_field(json, "prepend_scheme", "Metaspace");
    } else {  // older files: add_prefix_space = true means "always"
      scheme_ = tj::bool_field(json, "add_prefix_space", "Metaspace", true) ? "always" : "never";
    }
    NIBBLE_CHECK(scheme_ == "always" || scheme_ == "first" || scheme_ == "never",
                 "tokenizer.json: unknown Metaspace prepend_scheme \"{}\"", scheme_);
    NIBBLE_CHECK(!replacement_.empty(), "tokenizer.json: Metaspace.replacement is empty");
  }
  void pre_tokenize(std::vector<PreToken>& tokens) const override {
    for (PreToken& t : tokens) {
      t.text = replace_all(t.text, " ", replacement_);
      const bool prepend = scheme_ == "always" || (scheme_ == "first" && t.at_input_start);
      if (prepend && t.text.rfind(replacement_, 0) != 0) t.text.insert(0, replacement_);
    }
    if (split_) {
      refine(tokens, [&](const PreToken& t) {
        return apply_split_behavior(cover(t.text, find_string(t.text, replacement_), false),
                                    SplitBehavior::kMergedWithNext);
      });
    }
  }

 private:
  std::string replacement_;
  std::string scheme_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<PreToken>& tokens) const override {
    for (const auto& step : steps_) step->pre_tokenize(tokens);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::vector<std::pair<size_t, size_t>> apply_split_behavior(std::vector<SplitRange> ranges, SplitBehavior behavior) {
  std::vector<std::pair<size_t, size_t>> out;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& r : ranges) out.emplace_back(r.begin, r.end);
      break;
    case SplitBehavior::kRemoved:
      for (const auto& r : ranges)
        if (!r.is_match) out.emplace_back(r.begin, r.end);
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const auto& r : ranges) {
        if (r.is_match && previous_match && !out.empty()) {
          out.back().second = r.end;
        } else {
          out.emplace_back(r.begin, r.end);
        }
        previous_match = r.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& r : ranges) {
        if (r.is_match && !previous_match && !out.empty()) {
          out.back().second = r.end;
        } else {
          out.emplace_back(r.begin, r.end);
        }
        previous_match = r.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().first = it->begin;
        } else {
          out.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  std::erase_if(out, [](const auto& r) { return r.first == r.second; });
  return out;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& json, int depth) {
  NIBBLE_CHECK(depth < 16, "tokenizer.json: Sequence components nested more than 16 deep");
  const std::string type = tj::type_of(json, "pre_tokenizer");
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(json);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(json);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(json);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& step : tj::array_field(json, "pretokenizers", "Sequence pre_tokenizer"))
      steps.push_back(make_pre_tokenizer(step, depth + 1));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  NIBBLE_FAIL("tokenizer.json: unsupported pre_tokenizer type \"{}\" (supported: Split, ByteLevel, Metaspace, "
              "Sequence)",
              type);
}

}  // namespace nibble
