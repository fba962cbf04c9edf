// Tokenizer: loading tokenizer.json / tokenizer_config.json, encode and decode.
#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

#include "common/error.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace nibble {
namespace tj = tokenizer_json;
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  NIBBLE_CHECK(in.good(), "cannot open {}", path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

nlohmann::json parse_json(std::string_view text, std::string_view what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    NIBBLE_FAIL("{} is not valid JSON: {}", what, e.what());
  }
}

AddedToken parse_added_token(const nlohmann::json& json) {
  const auto& id = tj::field(json, "id", "added_tokens entry");
  NIBBLE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (1 << 24),
               "tokenizer.json: added token id must be an integer in [0, 2^24)");
  AddedToken t{.id = id.get<int32_t>(),
               .content = tj::string_field(json, "content", "added_tokens entry"),
               .special = tj::bool_field(json, "special", "added_tokens entry", false),
               .normalized = tj::bool_field(json, "normalized", "added_tokens entry", false),
               .lstrip = tj::bool_field(json, "lstrip", "added_tokens entry", false),
               .rstrip = tj::bool_field(json, "rstrip", "added_tokens entry", false),
               .single_word = tj::bool_field(json, "single_word", "added_tokens entry", false)};
  NIBBLE_CHECK(utf8::is_valid(t.content), "tokenizer.json: added token {} is not valid UTF-8", t.id);
  return t;
}

// tokenizer_config.json's bos_token / eos_token: a string, an AddedToken-like {"content": ...}, or null.
std::string config_token(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"];
  NIBBLE_FAIL("tokenizer_config.json: {} must be a string, {{\"content\": ...}} or null", key);
}

}  // namespace

const std::string* Tokenizer::Impl::token_text(int32_t id) const {
  if (const auto it = added_by_id.find(id); it != added_by_id.end()) return &added[it->second].content;
  return model->id_to_token(id);
}

void Tokenizer::Impl::encode_text(std::string_view text, bool at_input_start, std::vector<int32_t>& ids) const {
  const std::string normalized = normalizer ? normalizer->normalize(text) : std::string(text);
  std::vector<Segment> segments;
  if (normalized_matcher) {
    segments = normalized_matcher->split(normalized);
  } else if (!normalized.empty()) {
    segments.push_back({0, normalized.size(), -1});
  }
  for (const Segment& s : segments) {
    if (s.token_id >= 0) {
      ids.push_back(s.token_id);
      continue;
    }
    std::vector<PreToken> words{{normalized.substr(s.begin, s.end - s.begin), at_input_start && s.begin == 0}};
    if (pre_tokenizer) pre_tokenizer->pre_tokenize(words);
    for (const PreToken& w : words) model->encode_word(w.text, ids);
  }
}

Tokenizer Tokenizer::load(const std::filesystem::path& model_dir) {
  const auto tokenizer_path = model_dir / "tokenizer.json";
  NIBBLE_CHECK(std::filesystem::is_regular_file(tokenizer_path), "model directory {} has no tokenizer.json",
               model_dir.string());
  const auto config_path = model_dir / "tokenizer_config.json";
  const std::string config = std::filesystem::is_regular_file(config_path) ? read_file(config_path) : std::string();
  try {
    return from_json(read_file(tokenizer_path), config);
  } catch (const Error& e) {
    NIBBLE_FAIL("{}: {}", model_dir.string(), e.what());
  }
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  const nlohmann::json json = parse_json(tokenizer_json, "tokenizer.json");
  NIBBLE_CHECK(json.is_object(), "tokenizer.json must be a JSON object");
  auto impl = std::make_shared<Impl>();
  impl->model = std::make_unique<BpeModel>(tj::field(json, "model", "tokenizer.json"));
  auto component = [&](const char* key) -> const nlohmann::json* {
    const auto it = json.find(key);
    return it == json.end() || it->is_null() ? nullptr : &*it;
  };
  if (const auto* j = component("normalizer")) impl->normalizer = make_normalizer(*j);
  if (const auto* j = component("pre_tokenizer")) impl->pre_tokenizer = make_pre_tokenizer(*j);
  if (const auto* j = component("post_processor")) impl->post_processor = std::make_unique<PostProcessor>(*j);
  if (const auto* j = component("decoder")) impl->decoder = make_decoder(*j);
  for (const char* unsupported : {"truncation", "padding"})
    NIBBLE_CHECK(component(unsupported) == nullptr, "tokenizer.json: {} is set; nibble does not support it", unsupported);

  impl->vocab_size = impl->model->max_id() + 1;
  if (const auto* added = component("added_tokens")) {
    NIBBLE_CHECK(added->is_array(), "tokenizer.json: added_tokens must be an array");
    for (const auto& entry : *added) {
      AddedToken t = parse_added_token(entry);
      impl->vocab_size = std::max(impl->vocab_size, t.id + 1);
      impl->added_by_id[t.id] = impl->added.size();
      impl->added_by_content.emplace(t.content, t.id);
      impl->added.push_back(std::move(t));
    }
  }
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const AddedToken& t : impl->added) {
    if (t.normalized && impl->normalizer) {
      normalized_patterns.push_back(impl->normalizer->normalize(t.content));
      normalized.push_back(t);
    } else {
      raw_patterns.push_back(t.content);
      raw.push_back(t);
    }
  }
  if (!raw.empty()) impl->raw_matcher = std::make_unique<AddedTokenMatcher>(raw, raw_patterns);
  if (!normalized.empty())
    impl->normalized_matcher = std::make_unique<AddedTokenMatcher>(normalized, normalized_patterns);

  if (!tokenizer_config_json.empty()) {
    const nlohmann::json config = parse_json(tokenizer_config_json, "tokenizer_config.json");
    NIBBLE_CHECK(config.is_object(), "tokenizer_config.json must be a JSON object");
    impl->bos_token = config_token(config, "bos_token");
    impl->eos_token = config_token(config, "eos_token");
    if (const auto it = config.find("chat_template"); it != config.end() && !it->is_null()) {
      std::string source;
      if (it->is_string()) {
        source = it->get<std::string>();
      } else {  // [{"name": "default", "template": ...}, ...]: the default one
        NIBBLE_CHECK(it->is_array(), "tokenizer_config.json: chat_template must be a string or a list");
        for (const auto& named : *it)
          if (named.is_object() && named.value("name", "") == "default") source = named.value("template", "");
        NIBBLE_CHECK(!source.empty(), "tokenizer_config.json: chat_template list has no \"default\" template");
      }
      try {
        impl->chat_template = ChatTemplate::parse(source);
      } catch (const Error& e) {
        NIBBLE_FAIL("tokenizer_config.json: chat_template: {}", e.what());
      }
    }
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  NIBBLE_CHECK(utf8::is_valid(text), "cannot tokenize text that is not valid UTF-8");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (impl_->raw_matcher) {
    for (const Segment& s : impl_->raw_matcher->split(text)) {
      if (s.token_id >= 0) {
        ids.push_back(s.token_id);
      } else {
        impl_->encode_text(text.substr(s.begin, s.end - s.begin), s.begin == 0, ids);
      }
    }
  } else {
    impl_->encode_text(text, true, ids);
  }
  if (add_special && impl_->post_processor) ids = impl_->post_processor->apply(std::move(ids));
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* text = impl_->token_text(id);
    NIBBLE_CHECK(text != nullptr, "cannot decode token id {}: not in the vocabulary (size {})", id, vocab_size());
    if (skip_special && is_special(id)) continue;
    tokens.push_back(*text);
  }
  std::string out;
  if (!impl_->decoder) {
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return utf8::lossy(out);
  }
  for (const std::string& piece : impl_->decoder->decode_chain(std::move(tokens))) out += piece;
  return utf8::lossy(out);
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* text = impl_->token_text(id);
  NIBBLE_CHECK(text != nullptr, "token id {} is not in the vocabulary (size {})", id, vocab_size());
  return *text;
}

bool Tokenizer::is_special(int32_t id) const {
  const auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

std::optional<int32_t> Tokenizer::bos_id() const {
  if (impl_->bos_token.empty()) return std::nullopt;
  return token_to_id(impl_->bos_token);
}

std::vector<int32_t> Tokenizer::eos_ids() const {
  if (impl_->eos_token.empty()) return {};
  const auto id = token_to_id(impl_->eos_token);
  return id ? std::vector<int32_t>{*id} : std::vector<int32_t>{};
}

const std::string& Tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& Tokenizer::eos_token() const { return impl_->eos_token; }

}  // namespace nibble
