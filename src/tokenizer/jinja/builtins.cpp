#include "tokenizer/jinja/builtins.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace nibble::jinja {
namespace {

bool is_py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right) {
  const auto strip = [&](char c) {
    return chars.is_string() ? chars.string.find(c) != std::string::npos : is_py_space(c);
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && strip(s[b])) ++b;
  if (right)
    while (e > b && strip(s[e - 1])) --e;
  return s.substr(b, e - b);
}

const std::string& need_string(const Value& v, const char* what) {
  NIBBLE_CHECK(v.is_string(), "chat template: {} needs a string, got {}", what, v.type_name());
  return v.string;
}

Value split(const std::string& s, const Value& sep, const Value& maxsplit_value) {
  const int64_t maxsplit = maxsplit_value.kind == Value::Kind::kInt ? maxsplit_value.integer : -1;
  Array parts;
  if (sep.is_undefined() || sep.is_none()) {  // runs of whitespace, no empty parts
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_py_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(Value::from(strip_chars(s.substr(i), Value{}, false, true)));
        break;
      }
      size_t j = i;
      while (j < s.size() && !is_py_space(s[j])) ++j;
      parts.push_back(Value::from(s.substr(i, j - i)));
      i = j;
    }
    return Value::from(std::move(parts));
  }
  const std::string& d = need_string(sep, "split's separator");
  NIBBLE_CHECK(!d.empty(), "chat template: split with an empty separator");
  size_t start = 0;
  while (true) {
    const size_t hit = s.find(d, start);
    if (hit == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) break;
    parts.push_back(Value::from(s.substr(start, hit - start)));
    start = hit + d.size();
  }
  parts.push_back(Value::from(s.substr(start)));
  return Value::from(std::move(parts));
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out += s.substr(pos, hit - pos) + to;
    pos = hit + from.size();
  }
  return out + s.substr(pos);
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                                : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    c = static_cast<char>(alpha ? (start ? std::toupper(static_cast<unsigned char>(c))
                                         : std::tolower(static_cast<unsigned char>(c)))
                                : c);
    start = !alpha;
  }
  return out;
}

int64_t length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(utf8::decode(v.string).size());
  if (v.is_array()) return static_cast<int64_t>(v.array->size());
  if (v.is_object()) return static_cast<int64_t>(v.object->items.size());
  NIBBLE_FAIL("chat template: length of a {} value", v.type_name());
}

Value items_of(const Value& v) {
  NIBBLE_CHECK(v.is_object(), "chat template: items() of a {} value", v.type_name());
  Array out;
  for (const auto& [k, item] : v.object->items) out.push_back(Value::from(Array{Value::from(k), item}));
  return Value::from(std::move(out));
}

Value method(Value self, Function f) {
  (void)self;
  return Value::from(std::move(f));
}

// Python's slice index normalization for a sequence of length n.
int64_t clamp_index(const Value& v, int64_t n, int64_t fallback, bool negative_step) {
  if (v.is_undefined() || v.is_none()) return fallback;
  NIBBLE_CHECK(v.kind == Value::Kind::kInt, "chat template: slice index must be an integer");
  int64_t i = v.integer;
  if (i < 0) i += n;
  if (negative_step) return std::clamp<int64_t>(i, -1, n - 1);
  return std::clamp<int64_t>(i, 0, n);
}

}  // namespace

Value get_item(const Value& object, const Value& index) {
  if (object.is_array() || object.is_string()) {
    if (index.kind != Value::Kind::kInt) return {};
    if (object.is_array()) {
      const int64_t n = static_cast<int64_t>(object.array->size());
      const int64_t i = index.integer < 0 ? index.integer + n : index.integer;
      return i >= 0 && i < n ? (*object.array)[i] : Value{};
    }
    const auto cps = utf8::decode(object.string);
    const int64_t n = static_cast<int64_t>(cps.size());
    const int64_t i = index.integer < 0 ? index.integer + n : index.integer;
    if (i < 0 || i >= n) return {};
    std::string out;
    utf8::append(out, cps[i]);
    return Value::from(std::move(out));
  }
  if (object.is_object()) {
    const Value* v = object.object->find(index.is_string() ? index.string : to_string(index));
    return v ? *v : Value{};
  }
  return {};
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step_value) {
  int64_t step = 1;
  if (!step_value.is_undefined() && !step_value.is_none()) {
    NIBBLE_CHECK(step_value.kind == Value::Kind::kInt && step_value.integer != 0,
                 "chat template: slice step must be a non-zero integer");
    step = step_value.integer;
  }
  std::vector<char32_t> cps;
  if (object.is_string()) cps = utf8::decode(object.string);
  else NIBBLE_CHECK(object.is_array(), "chat template: cannot slice a {} value", object.type_name());
  const int64_t n = object.is_string() ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(object.array->size());
  const bool neg = step < 0;
  const int64_t b = clamp_index(start, n, neg ? n - 1 : 0, neg);
  const int64_t e = clamp_index(stop, n, neg ? -1 : n, neg);
  std::vector<int64_t> picks;
  for (int64_t i = b; neg ? i > e : i < e; i += step) picks.push_back(i);
  if (object.is_string()) {
    std::string out;
    for (int64_t i : picks) utf8::append(out, cps[i]);
    return Value::from(std::move(out));
  }
  Array out;
  for (int64_t i : picks) out.push_back((*object.array)[i]);
  return Value::from(std::move(out));
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_object()) {
    if (const Value* v = object.object->find(name)) return *v;
    if (object.object->is_namespace) return {};
    if (name == "items") return method(object, [object](Arguments&) { return items_of(object); });
    if (name == "keys" || name == "values") {
      return method(object, [object, name](Arguments&) {
        Array out;
        for (const auto& [k, v] : object.object->items) out.push_back(name == "keys" ? Value::from(k) : v);
        return Value::from(std::move(out));
      });
    }
    if (name == "get") {
      return method(object, [object](Arguments& a) {
        const Value* v = object.object->find(need_string(a.get(0, "key"), "get"));
        return v ? *v : a.get(1, "default", Value::none());
      });
    }
    return {};
  }
  if (object.is_string()) {
    const std::string s = object.string;
    if (name == "startswith" || name == "endswith") {
      const bool starts = name == "startswith";
      return method(object, [s, starts](Arguments& a) {
        const Value prefix = a.get(0, "prefix");
        const std::string p = need_string(prefix, starts ? "startswith" : "endswith");
        const bool hit = p.size() <= s.size() &&
                         (starts ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
        return Value::from(hit);
      });
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return method(object, [s, name](Arguments& a) {
        return Value::from(strip_chars(s, a.get(0, "chars"), name != "rstrip", name != "lstrip"));
      });
    }
    if (name == "split")
      return method(object, [s](Arguments& a) { return split(s, a.get(0, "sep"), a.get(1, "maxsplit")); });
    if (name == "replace") {
      return method(object, [s](Arguments& a) {
        const Value count = a.get(2, "count");
        return Value::from(replace(s, need_string(a.get(0, "old"), "replace"), need_string(a.get(1, "new"), "replace"),
                                   count.kind == Value::Kind::kInt ? count.integer : -1));
      });
    }
    if (name == "upper" || name == "lower")
      return method(object, [s, name](Arguments&) { return Value::from(ascii_case(s, name == "upper")); });
    if (name == "title") return method(object, [s](Arguments&) { return Value::from(title(s)); });
    return {};
  }
  return {};
}

Value apply_filter(const std::string& name, const Value& v, Arguments& a) {
  if (name == "trim") return Value::from(strip_chars(need_string(v, "trim"), a.get(0, "chars"), true, true));
  if (name == "length" || name == "count") return Value::from(length(v));
  if (name == "tojson") {
    const Value indent = a.get(0, "indent");
    return Value::from(to_json_text(v, indent.kind == Value::Kind::kInt ? static_cast<int>(indent.integer) : -1));
  }
  if (name == "string") return Value::from(to_string(v));
  if (name == "upper" || name == "lower") return Value::from(ascii_case(need_string(v, name.c_str()), name == "upper"));
  if (name == "title") return Value::from(title(need_string(v, "title")));
  if (name == "capitalize") {
    std::string s = ascii_case(need_string(v, "capitalize"), false);
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return Value::from(std::move(s));
  }
  if (name == "first" || name == "last") {
    if (v.is_string() || v.is_array()) {
      const int64_t n = length(v);
      return n == 0 ? Value{} : get_item(v, Value::from(name == "first" ? int64_t{0} : int64_t{-1}));
    }
    NIBBLE_FAIL("chat template: filter {} of a {} value", name, v.type_name());
  }
  if (name == "default" || name == "d") {
    const bool boolean = a.get(1, "boolean", Value::from(false)).truthy();
    return (v.is_undefined() || (boolean && !v.truthy())) ? a.get(0, "default_value", Value::from(std::string())) : v;
  }
  if (name == "join") {
    NIBBLE_CHECK(v.is_array(), "chat template: join of a {} value", v.type_name());
    const Value sep = a.get(0, "d", Value::from(std::string()));
    std::string out;
    for (size_t i = 0; i < v.array->size(); ++i) out += (i ? sep.string : "") + to_string((*v.array)[i]);
    return Value::from(std::move(out));
  }
  if (name == "items") return items_of(v);
  if (name == "list") {
    if (v.is_array()) return v;
    if (v.is_string()) {
      Array out;
      for (char32_t cp : utf8::decode(v.string)) {
        std::string s;
        utf8::append(s, cp);
        out.push_back(Value::from(std::move(s)));
      }
      return Value::from(std::move(out));
    }
    NIBBLE_FAIL("chat template: list of a {} value", v.type_name());
  }
  if (name == "reverse") return get_slice(v, {}, {}, Value::from(int64_t{-1}));
  if (name == "replace") {
    const Value count = a.get(2, "count");
    return Value::from(replace(need_string(v, "replace"), need_string(a.get(0, "old"), "replace"),
                               need_string(a.get(1, "new"), "replace"),
                               count.kind == Value::Kind::kInt ? count.integer : -1));
  }
  if (name == "int") {
    if (v.kind == Value::Kind::kInt) return v;
    if (v.is_number()) return Value::from(static_cast<int64_t>(v.as_double()));
    if (v.is_string()) {
      try {
        return Value::from(static_cast<int64_t>(std::stoll(v.string)));
      } catch (const std::exception&) {
      }
    }
    return a.get(0, "default", Value::from(int64_t{0}));
  }
  if (name == "abs") {
    if (v.kind == Value::Kind::kInt) return Value::from(v.integer < 0 ? -v.integer : v.integer);
    return Value::from(std::fabs(v.as_double()));
  }
  NIBBLE_FAIL("chat template: unknown filter '{}'", name);
}

bool apply_test(const std::string& name, const Value& v, Arguments& a) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kFloat;
  if (name == "integer") return v.kind == Value::Kind::kInt;
  if (name == "float") return v.kind == Value::Kind::kFloat;
  if (name == "boolean") return v.kind == Value::Kind::kBool;
  if (name == "true") return v.kind == Value::Kind::kBool && v.boolean;
  if (name == "false") return v.kind == Value::Kind::kBool && !v.boolean;
  if (name == "mapping") return v.is_object();
  if (name == "sequence" || name == "iterable") return v.is_array() || v.is_string() || v.is_object();
  if (name == "callable") return v.kind == Value::Kind::kCallable;
  if (name == "odd" || name == "even") {
    NIBBLE_CHECK(v.kind == Value::Kind::kInt, "chat template: test {} of a {} value", name, v.type_name());
    return (v.integer % 2 != 0) == (name == "odd");
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, a.get(0, "other"));
  if (name == "ne" || name == "!=") return !equals(v, a.get(0, "other"));
  NIBBLE_FAIL("chat template: unknown test '{}'", name);
}

void add_globals(Object& globals) {
  globals.set("raise_exception", Value::from(Function([](Arguments& a) -> Value {
    NIBBLE_FAIL("chat template raised an exception: {}", to_string(a.get(0, "message")));
  })));
  globals.set("namespace", Value::from(Function([](Arguments& a) {
    Value ns = Value::new_object();
    ns.object->is_namespace = true;
    for (const auto& [k, v] : a.keyword) ns.object->set(k, v);
    return ns;
  })));
  globals.set("range", Value::from(Function([](Arguments& a) {
    NIBBLE_CHECK(!a.positional.empty() && a.positional.size() <= 3, "chat template: range takes 1 to 3 arguments");
    for (const Value& p : a.positional)
      NIBBLE_CHECK(p.kind == Value::Kind::kInt, "chat template: range arguments must be integers");
    const int64_t start = a.positional.size() == 1 ? 0 : a.positional[0].integer;
    const int64_t stop = a.positional.size() == 1 ? a.positional[0].integer : a.positional[1].integer;
    const int64_t step = a.positional.size() == 3 ? a.positional[2].integer : 1;
    NIBBLE_CHECK(step != 0, "chat template: range step is zero");
    NIBBLE_CHECK((stop - start) / step < 1'000'000, "chat template: range too long");
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::from(i));
    return Value::from(std::move(out));
  })));
  globals.set("strftime_now", Value::from(Function([](Arguments& a) {
    const std::string format = need_string(a.get(0, "format"), "strftime_now");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buffer[256];
    const size_t n = std::strftime(buffer, sizeof(buffer), format.c_str(), &tm);
    return Value::from(std::string(buffer, n));
  })));
}

}  // namespace nibble::jinja
