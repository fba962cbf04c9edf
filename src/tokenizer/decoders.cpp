#include "tokenizer/decoders.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/utf8.h"

namespace nibble {
namespace tj = tokenizer_json;
namespace {

// All tokens' characters back to bytes (a character outside the byte map keeps its UTF-8 bytes
// for the whole token), joined, then made valid UTF-8.
class ByteLevelDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      std::string mapped;
      bool all_mapped = true;
      for (char32_t cp : utf8::decode(token)) {
        const auto b = byte_level::char_byte(cp);
        if (!b) {
          all_mapped = false;
          break;
        }
        mapped.push_back(static_cast<char>(*b));
      }
      bytes += all_mapped ? mapped : token;
    }
    return {utf8::lossy(bytes)};
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& t : tokens) t = replace_all(t, from_, to_);
    return tokens;
  }

 private:
  std::string from_, to_;
};

// Runs of <0xXX> tokens become their bytes when those form valid UTF-8, else one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;  // bytes of the current run of byte tokens
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (utf8::is_valid(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending_count; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
      pending_count = 0;
    };
    for (std::string& t : tokens) {
      if (const int b = byte_token_value(t); b >= 0) {
        pending.push_back(static_cast<char>(b));
        ++pending_count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  static int byte_token_value(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string joined;
    for (const std::string& t : tokens) joined += t;
    return {joined};
  }
};

// Removes up to `start` leading and `stop` trailing occurrences of one character from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (size_t i = 0; i < start_ && t.compare(begin, content_.size(), content_) == 0 && begin < end; ++i)
        begin += content_.size();
      for (size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                         t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i)
        end -= content_.size();
      t = t.substr(begin, end - begin);
    }
    return tokens;
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string t = replace_all(tokens[i], replacement_, " ");
      if (i == 0 && strip_first_ && !t.empty() && t[0] == ' ') t.erase(0, 1);
      tokens[i] = std::move(t);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& step : steps_) tokens = step->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

size_t count_field(const nlohmann::json& json, const char* key) {
  const auto& v = tj::field(json, key, "Strip decoder");
  NIBBLE_CHECK(v.is_number_unsigned() && v.get<uint64_t>() < 1024, "tokenizer.json: Strip.{} must be a small count",
               key);
  return v.get<size_t>();
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& json, int depth) {
  NIBBLE_CHECK(depth < 16, "tokenizer.json: Sequence components nested more than 16 deep");
  const std::string type = tj::type_of(json, "decoder");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    std::string from;
    NIBBLE_CHECK(tj::string_pattern(tj::field(json, "pattern", "Replace decoder"), from) && !from.empty(),
                 "tokenizer.json: Replace decoder: only a non-empty {{\"String\": ...}} pattern is supported");
    return std::make_unique<ReplaceDecoder>(from, tj::string_field(json, "content", "Replace decoder"));
  }
  if (type == "Strip") {
    const std::string content = tj::string_field(json, "content", "Strip decoder");
    NIBBLE_CHECK(!content.empty() && utf8::decode(content).size() == 1,
                 "tokenizer.json: Strip.content must be one character");
    return std::make_unique<StripDecoder>(content, count_field(json, "start"), count_field(json, "stop"));
  }
  if (type == "Metaspace") {
    std::string scheme = "always";
    if (json.contains("prepend_scheme")) scheme = tj::string_field(json, "prepend_scheme", "Metaspace decoder");
    else if (!tj::bool_field(json, "add_prefix_space", "Metaspace decoder", true)) scheme = "never";
    return std::make_unique<MetaspaceDecoder>(tj::string_field(json, "replacement", "Metaspace decoder"),
                                              scheme != "never");
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& step : tj::array_field(json, "decoders", "Sequence decoder"))
      steps.push_back(make_decoder(step, depth + 1));
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  NIBBLE_FAIL("tokenizer.json: unsupported decoder type \"{}\" (supported: ByteLevel, Replace, ByteFallback, Fuse, "
              "Strip, Metaspace, Sequence)",
              type);
}

}  // namespace nibble
