#include "tokenizer/jinja/builtins.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <optional>

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

// The string inside `v`. The reference lives as long as `v`, so a temporary Value (e.g. the result of
// Arguments::get) cannot be passed: bind it to a named Value first. This overload set is what makes
// the stack-use-after-scope of `const std::string& p = need_string(a.get(0, "prefix"), ...)` a
// compile error instead of an ASan report.
const std::string& need_string(const Value& v, const char* what) {
  NIBBLE_CHECK(v.is_string(), "chat template: {} needs a string, got {}", what, v.type_name());
  return v.string;
}
const std::string& need_string(Value&& v, const char* what) = delete;

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
  if (v.is_undefined()) return 0;  // Jinja's Undefined has length 0
  NIBBLE_FAIL("chat template: length of a {} value", v.type_name());
}

Value items_of(const Value& v) {
  NIBBLE_CHECK(v.is_object(), "chat template: items() of a {} value", v.type_name());
  Array out;
  for (const auto& [k, item] : v.object->items) out.push_back(Value::from(Array{Value::from(k), item}));
  return Value::from(std::move(out));
}

// The code points of a string, each as a one-character string (Python's list(str)).
Array characters(const std::string& s) {
  Array out;
  for (char32_t cp : utf8::decode(s)) {
    std::string c;
    utf8::append(c, cp);
    out.push_back(Value::from(std::move(c)));
  }
  return out;
}

// What a filter iterates: list items, dict keys, string characters; undefined is empty (Jinja's
// Undefined iterates as nothing).
Array elements(const Value& v, const char* filter) {
  if (v.is_array()) return *v.array;
  if (v.is_string()) return characters(v.string);
  if (v.is_object()) {
    Array keys;
    for (const auto& [k, item] : v.object->items) keys.push_back(Value::from(k));
    return keys;
  }
  if (v.is_undefined()) return {};
  NIBBLE_FAIL("chat template: filter {} cannot iterate over a {} value", filter, v.type_name());
}

// Jinja's attribute getter for filters (map, selectattr, sort, join): "a.b.0" walks dict keys and
// list indices; a missing step is undefined.
Value attribute_path(const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (current.is_object()) {
      const Value* hit = current.object->find(part);
      current = hit ? *hit : Value{};
    } else if (current.is_array() && !part.empty() &&
               std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      current = get_item(current, Value::from(static_cast<int64_t>(std::stoll(part))));
    } else {
      return {};
    }
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

// The arguments after the first `skip` positional ones (a test's own arguments inside select & co).
Arguments tail_arguments(const Arguments& a, size_t skip) {
  Arguments out;
  for (size_t i = skip; i < a.positional.size(); ++i) out.positional.push_back(a.positional[i]);
  out.keyword = a.keyword;
  return out;
}

// select/reject/selectattr/rejectattr: keep the items whose test (or truthiness, with no test name)
// equals `keep`. With `attribute`, the test sees item.attribute.
Value filter_by_test(const Value& v, const Arguments& a, bool keep, bool by_attribute, const char* filter) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    NIBBLE_CHECK(!a.positional.empty() && a.positional[0].is_string(), "chat template: {} needs an attribute name",
                 filter);
    attribute = a.positional[0].string;
    next = 1;
  }
  std::string test;
  if (a.positional.size() > next) {
    NIBBLE_CHECK(a.positional[next].is_string(), "chat template: {}'s test name must be a string", filter);
    test = a.positional[next].string;
    ++next;
  }
  Arguments test_args = tail_arguments(a, next);
  Array out;
  for (const Value& item : elements(v, filter)) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    const bool passed = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (passed == keep) out.push_back(item);
  }
  return Value::from(std::move(out));
}

// Python's "\uXXXX" escaping of json.dumps(ensure_ascii=True): code points above U+FFFF as a
// surrogate pair.
std::string ascii_escape(const std::string& json) {
  std::string out;
  for (char32_t cp : utf8::decode(json)) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
    } else {
      const uint32_t v = static_cast<uint32_t>(cp) - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    }
  }
  return out;
}

Value sorted_keys(const Value& v) {
  if (v.is_array()) {
    Array out;
    for (const Value& item : *v.array) out.push_back(sorted_keys(item));
    return Value::from(std::move(out));
  }
  if (!v.is_object()) return v;
  Value out = Value::new_object();
  std::vector<std::pair<std::string, Value>> items = v.object->items;
  std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (auto& [k, item] : items) out.object->set(k, sorted_keys(item));
  return out;
}

// Jinja's sort/unique compare strings case-insensitively unless case_sensitive=true.
Value sort_key(const Value& v, bool case_sensitive) {
  return v.is_string() && !case_sensitive ? Value::from(ascii_case(v.string, false)) : v;
}

// Jinja's indent filter: lines after the first get `width` spaces; blank lines only with blank=true.
std::string indent(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::string out;
  size_t start = 0;
  for (size_t line = 0;; ++line) {
    const size_t end = s.find('\n', start);
    const std::string text = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if ((line > 0 || first) && (blank || !text.empty())) out += pad;
    out += text;
    if (end == std::string::npos) return out;
    out += '\n';
    start = end + 1;
  }
}

// Python's float(str): surrounding whitespace allowed, the whole rest must be the number.
std::optional<double> parse_float(const std::string& s) {
  const std::string t = strip_chars(s, Value{}, true, true);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

// Python's int(str) (base 10, optional sign, whitespace around, '_' between digits is rare: not taken).
std::optional<int64_t> parse_int(const std::string& s) {
  const std::string t = strip_chars(s, Value{}, true, true);
  size_t i = t.size() > 0 && (t[0] == '+' || t[0] == '-') ? 1 : 0;
  if (i == t.size()) return std::nullopt;
  for (size_t j = i; j < t.size(); ++j)
    if (t[j] < '0' || t[j] > '9') return std::nullopt;
  try {
    return static_cast<int64_t>(std::stoll(t));
  } catch (const std::exception&) {
    return std::nullopt;
  }
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

// str.startswith / str.endswith with a string or a tuple of strings.
bool affix_matches(const std::string& s, const Value& affix, bool starts) {
  const auto one = [&](const Value& p_value) {
    const std::string& p = need_string(p_value, starts ? "startswith" : "endswith");
    return p.size() <= s.size() &&
           (starts ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
  };
  if (!affix.is_array()) return one(affix);
  return std::any_of(affix.array->begin(), affix.array->end(), one);
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

// Methods are bound by value: each lambda captures a copy of its receiver (a string, or a Value
// whose shared_ptr keeps the dict alive) and nothing by reference, so a method outlives the
// expression that looked it up.
Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_object()) {
    if (const Value* v = object.object->find(name)) return *v;
    if (object.object->is_namespace) return {};
    const Value self = object;
    if (name == "items") return Value::from(Function([self](Arguments&) { return items_of(self); }));
    if (name == "keys" || name == "values") {
      const bool keys = name == "keys";
      return Value::from(Function([self, keys](Arguments&) {
        Array out;
        for (const auto& [k, v] : self.object->items) out.push_back(keys ? Value::from(k) : v);
        return Value::from(std::move(out));
      }));
    }
    if (name == "get") {
      return Value::from(Function([self](Arguments& a) {
        const Value key = a.get(0, "key");
        const Value* v = self.object->find(need_string(key, "get"));
        return v ? *v : a.get(1, "default", Value::none());
      }));
    }
    return {};
  }
  if (!object.is_string()) return {};
  const std::string s = object.string;
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return Value::from(Function([s, starts](Arguments& a) {
      const Value affix = a.get(0, "prefix");
      return Value::from(affix_matches(s, affix, starts));
    }));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return Value::from(Function([s, left, right](Arguments& a) {
      return Value::from(strip_chars(s, a.get(0, "chars"), left, right));
    }));
  }
  if (name == "split")
    return Value::from(Function([s](Arguments& a) { return split(s, a.get(0, "sep"), a.get(1, "maxsplit")); }));
  if (name == "replace") {
    return Value::from(Function([s](Arguments& a) {
      const Value from = a.get(0, "old"), to = a.get(1, "new"), count = a.get(2, "count");
      return Value::from(replace(s, need_string(from, "replace"), need_string(to, "replace"),
                                 count.kind == Value::Kind::kInt ? count.integer : -1));
    }));
  }
  if (name == "upper" || name == "lower") {
    const bool upper = name == "upper";
    return Value::from(Function([s, upper](Arguments&) { return Value::from(ascii_case(s, upper)); }));
  }
  if (name == "title") return Value::from(Function([s](Arguments&) { return Value::from(title(s)); }));
  if (name == "capitalize") {
    return Value::from(Function([s](Arguments&) {
      std::string out = ascii_case(s, false);
      if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
      return Value::from(std::move(out));
    }));
  }
  if (name == "join") {  // ', '.join(items)
    return Value::from(Function([s](Arguments& a) {
      const Value items = a.get(0, "iterable");
      std::string out;
      bool first = true;
      for (const Value& item : elements(items, "join")) {
        out += (first ? "" : s) + need_string(item, "str.join");
        first = false;
      }
      return Value::from(std::move(out));
    }));
  }
  return {};
}

Value apply_filter(const std::string& name, const Value& v, Arguments& a) {
  if (name == "trim") return Value::from(strip_chars(need_string(v, "trim"), a.get(0, "chars"), true, true));
  if (name == "length" || name == "count") return Value::from(length(v));
  if (name == "tojson") {
    // Keyword-only, as Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    // is called by the templates; indent=None (or absent) is the one-line form.
    const Value indent_value = a.keyword_only("indent");
    NIBBLE_CHECK(indent_value.kind == Value::Kind::kInt || indent_value.is_none() || indent_value.is_undefined(),
                 "chat template: tojson's indent must be an integer or none");
    const Value subject = a.keyword_only("sort_keys").truthy() ? sorted_keys(v) : v;
    const int indent = indent_value.kind == Value::Kind::kInt ? static_cast<int>(std::clamp<int64_t>(indent_value.integer, 0, 64)) : -1;
    std::string json = to_json_text(subject, indent);
    if (a.keyword_only("ensure_ascii").truthy()) json = ascii_escape(json);
    return Value::from(std::move(json));
  }
  if (name == "string") return Value::from(to_string(v));
  if (name == "safe") return v;  // no autoescaping in chat templates
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
    const Value sep = a.get(0, "d", Value::from(std::string()));
    const Value attribute = a.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : elements(v, "join")) {
      const Value shown = attribute.is_string() ? attribute_path(item, attribute.string) : item;
      out += (first ? "" : to_string(sep)) + to_string(shown);
      first = false;
    }
    return Value::from(std::move(out));
  }
  if (name == "items") return items_of(v);
  if (name == "list") return Value::from(elements(v, "list"));
  if (name == "reverse") {
    if (v.is_string() || v.is_array()) return get_slice(v, {}, {}, Value::from(int64_t{-1}));
    Array items = elements(v, "reverse");
    std::reverse(items.begin(), items.end());
    return Value::from(std::move(items));
  }
  if (name == "replace") {
    const Value from = a.get(0, "old"), to = a.get(1, "new"), count = a.get(2, "count");
    return Value::from(replace(need_string(v, "replace"), need_string(from, "replace"), need_string(to, "replace"),
                               count.kind == Value::Kind::kInt ? count.integer : -1));
  }
  if (name == "int") {
    if (v.kind == Value::Kind::kInt) return v;
    if (v.is_number()) return Value::from(static_cast<int64_t>(v.as_double()));
    if (v.is_string()) {
      if (const auto i = parse_int(v.string)) return Value::from(*i);
      if (const auto d = parse_float(v.string)) return Value::from(static_cast<int64_t>(*d));  // Jinja: int('3.7') == 3
    }
    return a.get(0, "default", Value::from(int64_t{0}));
  }
  if (name == "float") {
    if (v.is_number()) return Value::from(v.as_double());
    if (v.is_string())
      if (const auto d = parse_float(v.string)) return Value::from(*d);
    return a.get(0, "default", Value::from(0.0));
  }
  if (name == "bool") return Value::from(v.truthy());
  if (name == "abs") {
    if (v.kind == Value::Kind::kInt) return Value::from(v.integer < 0 ? -v.integer : v.integer);
    return Value::from(std::fabs(v.as_double()));
  }
  if (name == "select" || name == "reject") return filter_by_test(v, a, name == "select", false, name.c_str());
  if (name == "selectattr" || name == "rejectattr")
    return filter_by_test(v, a, name == "selectattr", true, name.c_str());
  if (name == "map") {
    Array out;
    const Value attribute = a.keyword_only("attribute");
    if (attribute.is_string()) {  // map(attribute='x', default=d)
      const Value fallback = a.keyword_only("default");
      for (const Value& item : elements(v, "map")) {
        Value mapped = attribute_path(item, attribute.string);
        out.push_back(mapped.is_undefined() ? fallback : std::move(mapped));
      }
      return Value::from(std::move(out));
    }
    NIBBLE_CHECK(!a.positional.empty() && a.positional[0].is_string(),
                 "chat template: map needs attribute= or a filter name");
    const std::string filter = a.positional[0].string;
    Arguments filter_args = tail_arguments(a, 1);
    for (const Value& item : elements(v, "map")) out.push_back(apply_filter(filter, item, filter_args));
    return Value::from(std::move(out));
  }
  if (name == "unique") {
    const bool case_sensitive = a.get(0, "case_sensitive").truthy();
    const Value attribute = a.get(1, "attribute");
    Array out, seen;
    for (const Value& item : elements(v, "unique")) {
      const Value key = sort_key(attribute.is_string() ? attribute_path(item, attribute.string) : item, case_sensitive);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value::from(std::move(out));
  }
  if (name == "sort") {
    const bool reverse = a.get(0, "reverse").truthy();
    const bool case_sensitive = a.get(1, "case_sensitive").truthy();
    const Value attribute = a.get(2, "attribute");
    Array items = elements(v, "sort");
    const auto key = [&](const Value& item) {
      return sort_key(attribute.is_string() ? attribute_path(item, attribute.string) : item, case_sensitive);
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return reverse ? compare(key(y), key(x)) < 0 : compare(key(x), key(y)) < 0;
    });
    return Value::from(std::move(items));
  }
  if (name == "indent") {
    const Value width = a.get(0, "width", Value::from(int64_t{4}));
    const std::string pad = width.is_string() ? width.string
                                              : std::string(static_cast<size_t>(std::clamp<int64_t>(width.integer, 0, 256)), ' ');
    return Value::from(indent(need_string(v, "indent"), pad, a.get(1, "first").truthy(), a.get(2, "blank").truthy()));
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
  if (name == "lower" || name == "upper")
    return v.is_string() && v.string == ascii_case(v.string, name == "upper");
  if (name == "odd" || name == "even") {
    NIBBLE_CHECK(v.kind == Value::Kind::kInt, "chat template: test {} of a {} value", name, v.type_name());
    return (v.integer % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value n = a.get(0, "num");
    NIBBLE_CHECK(v.kind == Value::Kind::kInt && n.kind == Value::Kind::kInt && n.integer != 0,
                 "chat template: divisibleby needs integers and a non-zero divisor");
    return v.integer % n.integer == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, a.get(0, "other"));
  if (name == "ne" || name == "!=") return !equals(v, a.get(0, "other"));
  if (name == "sameas") {  // Python's `is`: identity for None/True/False, the same list/dict object
    const Value other = a.get(0, "other");
    if (v.is_array() || v.is_object()) return v.kind == other.kind && (v.is_array() ? v.array == other.array : v.object == other.object);
    return v.kind == other.kind && equals(v, other);
  }
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, a.get(0, "other")) < 0;
  if (name == "le" || name == "<=") return compare(v, a.get(0, "other")) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, a.get(0, "other")) > 0;
  if (name == "ge" || name == ">=") return compare(v, a.get(0, "other")) >= 0;
  if (name == "in") {
    const Value container = a.get(0, "seq");
    if (container.is_string()) return v.is_string() && container.string.find(v.string) != std::string::npos;
    if (container.is_object()) return v.is_string() && container.object->find(v.string) != nullptr;
    for (const Value& item : elements(container, "in"))
      if (equals(item, v)) return true;
    return false;
  }
  NIBBLE_FAIL("chat template: unknown test '{}'", name);
}

void add_globals(Object& globals) {
  globals.set("raise_exception", Value::from(Function([](Arguments& a) -> Value {
    NIBBLE_FAIL("chat template raised an exception: {}", to_string(a.get(0, "message")));
  })));
  globals.set("namespace", Value::from(Function([](Arguments& a) {
    NIBBLE_CHECK(a.positional.size() <= 1, "chat template: namespace takes at most one positional argument");
    Value ns = Value::new_object();
    ns.object->is_namespace = true;
    if (!a.positional.empty()) {  // namespace(a_dict) copies its items
      NIBBLE_CHECK(a.positional[0].is_object(), "chat template: namespace's argument must be a dict");
      for (const auto& [k, v] : a.positional[0].object->items) ns.object->set(k, v);
    }
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
    const Value format_value = a.get(0, "format");
    const std::string& format = need_string(format_value, "strftime_now");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buffer[256];
    const size_t n = std::strftime(buffer, sizeof(buffer), format.c_str(), &tm);
    return Value::from(std::string(buffer, n));
  })));
}

}  // namespace nibble::jinja
