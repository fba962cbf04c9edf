#pragma once
// Reading tokenizer.json fields with errors that name the component and the field: the file is
// outside input, so a missing or mistyped field is a nibble::Error, never a JSON library exception.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "common/error.h"

namespace nibble::tokenizer_json {

inline const nlohmann::json& field(const nlohmann::json& obj, std::string_view key, std::string_view where) {
  NIBBLE_CHECK(obj.is_object(), "tokenizer.json: {} must be an object", where);
  const auto it = obj.find(key);
  NIBBLE_CHECK(it != obj.end(), "tokenizer.json: {} has no field \"{}\"", where, key);
  return *it;
}

inline std::string string_field(const nlohmann::json& obj, std::string_view key, std::string_view where) {
  const auto& v = field(obj, key, where);
  NIBBLE_CHECK(v.is_string(), "tokenizer.json: {}.{} must be a string", where, key);
  return v.get<std::string>();
}

inline bool bool_field(const nlohmann::json& obj, std::string_view key, std::string_view where, bool fallback) {
  NIBBLE_CHECK(obj.is_object(), "tokenizer.json: {} must be an object", where);
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  NIBBLE_CHECK(it->is_boolean(), "tokenizer.json: {}.{} must be true or false", where, key);
  return it->get<bool>();
}

inline const nlohmann::json& array_field(const nlohmann::json& obj, std::string_view key, std::string_view where) {
  const auto& v = field(obj, key, where);
  NIBBLE_CHECK(v.is_array(), "tokenizer.json: {}.{} must be an array", where, key);
  return v;
}

// The "type" of a component (normalizer, pre_tokenizer, decoder, ...).
inline std::string type_of(const nlohmann::json& obj, std::string_view where) {
  return string_field(obj, "type", where);
}

// {"String": "x"} patterns only; {"Regex": ...} is reported as unsupported by the caller.
inline bool string_pattern(const nlohmann::json& pattern, std::string& out) {
  if (!pattern.is_object()) return false;
  const auto it = pattern.find("String");
  if (it == pattern.end() || !it->is_string()) return false;
  out = it->get<std::string>();
  return true;
}

}  // namespace nibble::tokenizer_json
