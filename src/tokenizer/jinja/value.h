#pragma once
// Runtime values of the Jinja subset: undefined, none, bool, int, float, string, list, dict
// (insertion-ordered, shared by reference like Python's), and callables (macros, globals, bound
// methods). namespace() objects are dicts whose attributes may be assigned.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nibble::jinja {

struct Value;
using Array = std::vector<Value>;
struct Object;
struct Arguments;
using Function = std::function<Value(Arguments&)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kCallable };
  Kind kind = Kind::kUndefined;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string string;
  std::shared_ptr<Array> array;
  std::shared_ptr<Object> object;
  std::shared_ptr<Function> callable;

  static Value none() { return make(Kind::kNone); }
  static Value from(bool b) { Value v = make(Kind::kBool); v.boolean = b; return v; }
  static Value from(int64_t i) { Value v = make(Kind::kInt); v.integer = i; return v; }
  static Value from(double d) { Value v = make(Kind::kFloat); v.number = d; return v; }
  static Value from(std::string s) { Value v = make(Kind::kString); v.string = std::move(s); return v; }
  static Value from(Array a) { Value v = make(Kind::kArray); v.array = std::make_shared<Array>(std::move(a)); return v; }
  static Value from(Function f) { Value v = make(Kind::kCallable); v.callable = std::make_shared<Function>(std::move(f)); return v; }
  static Value new_object();
  // JSON objects keep their key order (ordered_json), as Python dicts do; tojson and items() show it.
  static Value from_json(const nlohmann::ordered_json& json);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_array() const { return kind == Kind::kArray; }
  bool is_object() const { return kind == Kind::kObject; }
  bool truthy() const;
  double as_double() const;
  const char* type_name() const;

 private:
  static Value make(Kind k) { Value v; v.kind = k; return v; }
};

struct Object {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, as Python dicts
  bool is_namespace = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

// A call's arguments: positional, then keyword. Arguments owns its Values (the evaluator builds it
// from freshly evaluated expressions), and get() returns copies, never references into it.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The n-th positional or the keyword `name`, else fallback.
  Value get(size_t n, const char* name, Value fallback = {}) const;
  // The keyword `name` only (keyword-only parameters such as tojson's indent=), else fallback.
  Value keyword_only(const char* name, Value fallback = {}) const;
};

// str(value) as Jinja prints it: None -> "None", True -> "True", lists/dicts in Python repr.
std::string to_string(const Value& v);
// Python's json.dumps(value, ensure_ascii=False, indent=indent) (indent < 0: single line).
std::string to_json_text(const Value& v, int indent);
bool equals(const Value& a, const Value& b);
// Python ordering for <, <=, >, >= on numbers and strings; throws nibble::Error otherwise.
int compare(const Value& a, const Value& b);

}  // namespace nibble::jinja
