#include "tokenizer/jinja/value.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "common/error.h"

namespace nibble::jinja {

Value Value::new_object() {
  Value v = make(Kind::kObject);
  v.object = std::make_shared<Object>();
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return from(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return from(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return from(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return from(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      for (const auto& item : json) a.push_back(from_json(item));
      return from(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value v = new_object();
      for (const auto& [k, item] : json.items()) v.object->set(k, from_json(item));
      return v;
    }
    default: NIBBLE_FAIL("chat template: unsupported JSON value in the context");
  }
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return boolean;
    case Kind::kInt: return integer != 0;
    case Kind::kFloat: return number != 0;
    case Kind::kString: return !string.empty();
    case Kind::kArray: return !array->empty();
    case Kind::kObject: return !object->items.empty();
    case Kind::kCallable: return true;
  }
  return false;
}

double Value::as_double() const {
  switch (kind) {
    case Kind::kBool: return boolean ? 1 : 0;
    case Kind::kInt: return static_cast<double>(integer);
    case Kind::kFloat: return number;
    default: NIBBLE_FAIL("chat template: expected a number, got {}", type_name());
  }
}

const char* Value::type_name() const {
  switch (kind) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "boolean";
    case Kind::kInt: return "integer";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kArray: return "list";
    case Kind::kObject: return "dict";
    case Kind::kCallable: return "callable";
  }
  return "?";
}

const Value* Object::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Arguments::get(size_t n, const char* name, Value fallback) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return n < positional.size() ? positional[n] : fallback;
}

Value Arguments::keyword_only(const char* name, Value fallback) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return fallback;
}

namespace {

std::string repr(const Value& v) {
  if (v.is_string()) {
    std::string out = "'";
    for (char c : v.string) {
      if (c == '\'' || c == '\\') out += '\\';
      if (c == '\n') { out += "\\n"; continue; }
      out += c;
    }
    return out + "'";
  }
  return to_string(v);
}

std::string format_float(double d) {
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e16) return fmt::format("{:.1f}", d);
  return fmt::format("{}", d);
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
}

void json_text(std::string& out, const Value& v, int indent, int depth) {
  const auto newline = [&](int d) {
    if (indent >= 0) out += "\n" + std::string(static_cast<size_t>(indent * d), ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.boolean ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.integer); return;
    case Value::Kind::kFloat: out += format_float(v.number); return;
    case Value::Kind::kString: json_string(out, v.string); return;
    case Value::Kind::kArray:
      if (v.array->empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < v.array->size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_text(out, (*v.array)[i], indent, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    case Value::Kind::kObject:
      if (v.object->items.empty()) { out += "{}"; return; }
      out += '{';
      for (size_t i = 0; i < v.object->items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(out, v.object->items[i].first);
        out += ": ";
        json_text(out, v.object->items[i].second, indent, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    case Value::Kind::kCallable: NIBBLE_FAIL("chat template: tojson cannot serialize a callable");
  }
}

}  // namespace

std::string to_string(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.boolean ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.integer);
    case Value::Kind::kFloat: return format_float(v.number);
    case Value::Kind::kString: return v.string;
    case Value::Kind::kArray: {
      std::string out = "[";
      for (size_t i = 0; i < v.array->size(); ++i) out += (i ? ", " : "") + repr((*v.array)[i]);
      return out + "]";
    }
    case Value::Kind::kObject: {
      std::string out = "{";
      for (size_t i = 0; i < v.object->items.size(); ++i)
        out += (i ? ", " : "") + repr(Value::from(v.object->items[i].first)) + ": " + repr(v.object->items[i].second);
      return out + "}";
    }
    case Value::Kind::kCallable: return "<function>";
  }
  return "";
}

std::string to_json_text(const Value& v, int indent) {
  std::string out;
  json_text(out, v, indent, 0);
  return out;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.string == b.string;
    case Value::Kind::kArray:
      if (a.array->size() != b.array->size()) return false;
      for (size_t i = 0; i < a.array->size(); ++i)
        if (!equals((*a.array)[i], (*b.array)[i])) return false;
      return true;
    case Value::Kind::kObject: {
      if (a.object->items.size() != b.object->items.size()) return false;
      for (const auto& [k, v] : a.object->items) {
        const Value* other = b.object->find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default: return a.callable == b.callable;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.string < b.string ? -1 : a.string > b.string ? 1 : 0;
  NIBBLE_FAIL("chat template: cannot compare {} with {}", a.type_name(), b.type_name());
}

}  // namespace nibble::jinja
