#include "tokenizer/jinja/evaluator.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <unordered_map>

#include "common/error.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/utf8.h"

namespace nibble::jinja {
namespace {

constexpr size_t kMaxOutputBytes = size_t{64} << 20;  // a runaway template stops here
constexpr int kMaxCallDepth = 64;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const nlohmann::ordered_json& context) {
    scopes_.emplace_back();
    Object globals;
    add_globals(globals);
    for (auto& [k, v] : globals.items) scopes_.back()[k] = v;
    NIBBLE_CHECK(context.is_object(), "chat template: the context must be a JSON object");
    for (const auto& [k, v] : context.items()) scopes_.back()[k] = Value::from_json(v);
  }

  std::string run(const Body& body) {
    std::string out;
    exec_body(body, out);
    return out;
  }

 private:
  [[noreturn]] static void fail(int line, const std::string& what) {
    NIBBLE_FAIL("chat template line {}: {}", line, what);
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (const auto hit = it->find(name); hit != it->end()) return hit->second;
    return {};
  }

  Flow exec_body(const Body& body, std::string& out) {
    for (const StmtPtr& s : body) {
      const Flow flow = exec(*s, out);
      if (flow != Flow::kNormal) return flow;
      if (out.size() > kMaxOutputBytes) fail(s->line, "output exceeds 64 MiB");
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s, std::string& out) {
    try {
      return exec_unchecked(s, out);
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.rfind("chat template", 0) == 0) throw;
      fail(s.line, what);
    }
  }

  Flow exec_unchecked(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::kText: out += s.text; return Flow::kNormal;
      case Stmt::Kind::kOutput: out += to_string(eval(*s.expr)); return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i)
          if (eval(*s.conditions[i]).truthy()) return exec_body(s.bodies[i], out);
        if (s.bodies.size() > s.conditions.size()) return exec_body(s.bodies.back(), out);
        return Flow::kNormal;
      case Stmt::Kind::kFor: exec_for(s, out); return Flow::kNormal;
      case Stmt::Kind::kSet: assign(s, eval(*s.expr)); return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        exec_body(s.bodies[0], captured);
        assign(s, Value::from(std::move(captured)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro: define_macro(s); return Flow::kNormal;
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void assign(const Stmt& s, Value value) {
    if (s.targets.size() > 1) {
      bind_targets(s, value);
      return;
    }
    if (s.attribute.empty()) {
      scopes_.back()[s.targets[0]] = std::move(value);
      return;
    }
    const Value target = lookup(s.targets[0]);
    if (!target.is_object() || !target.object->is_namespace)
      fail(s.line, fmt::format("cannot set attribute '{}' of '{}': not a namespace()", s.attribute, s.targets[0]));
    target.object->set(s.attribute, std::move(value));
  }

  static Array iterate(const Value& v, int line) {
    if (v.is_array()) return *v.array;
    if (v.is_object()) {
      Array keys;
      for (const auto& [k, item] : v.object->items) keys.push_back(Value::from(k));
      return keys;
    }
    if (v.is_string()) {
      Array chars;
      for (char32_t cp : utf8::decode(v.string)) {
        std::string s;
        utf8::append(s, cp);
        chars.push_back(Value::from(std::move(s)));
      }
      return chars;
    }
    if (v.is_undefined() || v.is_none()) return {};
    fail(line, fmt::format("cannot iterate over a {} value", v.type_name()));
  }

  void bind_targets(const Stmt& s, const Value& item) {
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = item;
      return;
    }
    if (!item.is_array() || item.array->size() != s.targets.size())
      fail(s.line, fmt::format("cannot unpack a {} value into {} variables", item.type_name(), s.targets.size()));
    for (size_t i = 0; i < s.targets.size(); ++i) scopes_.back()[s.targets[i]] = (*item.array)[i];
  }

  void exec_for(const Stmt& s, std::string& out) {
    Array items = iterate(eval(*s.expr), s.line);
    scopes_.emplace_back();
    if (!s.conditions.empty()) {  // {% for x in xs if cond %}: filter before looping (loop.length counts kept items)
      Array kept;
      for (const Value& item : items) {
        bind_targets(s, item);
        if (eval(*s.conditions[0]).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Value loop = Value::new_object();
      loop.object->set("index", Value::from(i + 1));
      loop.object->set("index0", Value::from(i));
      loop.object->set("revindex", Value::from(n - i));
      loop.object->set("revindex0", Value::from(n - i - 1));
      loop.object->set("first", Value::from(i == 0));
      loop.object->set("last", Value::from(i == n - 1));
      loop.object->set("length", Value::from(n));
      loop.object->set("previtem", i > 0 ? items[i - 1] : Value{});
      loop.object->set("nextitem", i + 1 < n ? items[i + 1] : Value{});
      loop.object->set("cycle", Value::from(Function([i](Arguments& a) {  // loop.cycle('odd', 'even')
        NIBBLE_CHECK(!a.positional.empty(), "chat template: loop.cycle needs at least one value");
        return a.positional[static_cast<size_t>(i) % a.positional.size()];
      })));
      scopes_.back()["loop"] = loop;
      bind_targets(s, items[i]);
      if (exec_body(s.bodies[0], out) == Flow::kBreak) break;
    }
    scopes_.pop_back();
    if (n == 0 && s.bodies.size() > 1) exec_body(s.bodies[1], out);
  }

  // The macro's callable captures this Renderer and the macro's Stmt: both outlive it, since
  // callables live only in this render's scopes and namespaces and never reach the output string.
  void define_macro(const Stmt& s) {
    const Stmt* macro = &s;
    scopes_.back()[s.targets[0]] = Value::from(Function([this, macro](Arguments& a) {
      if (++depth_ > kMaxCallDepth) fail(macro->line, "macro recursion too deep");
      scopes_.emplace_back();
      const size_t params = macro->targets.size() - 1;
      if (a.positional.size() > params) fail(macro->line, fmt::format("macro {} called with too many arguments",
                                                                        macro->targets[0]));
      for (size_t p = 0; p < params; ++p) {
        Value v = a.get(p, macro->targets[p + 1].c_str());
        if (v.is_undefined() && macro->conditions[p]) v = eval(*macro->conditions[p]);
        scopes_.back()[macro->targets[p + 1]] = v;
      }
      std::string out;
      exec_body(macro->bodies[0], out);
      scopes_.pop_back();
      --depth_;
      return Value::from(std::move(out));
    }));
  }

  Arguments eval_arguments(const Expr& e, size_t first) {
    Arguments a;
    const size_t n_positional = e.items.size() - first - e.keywords.size();
    for (size_t i = 0; i < n_positional; ++i) a.positional.push_back(eval(*e.items[first + i]));
    for (size_t k = 0; k < e.keywords.size(); ++k)
      a.keyword.emplace_back(e.keywords[k], eval(*e.items[first + n_positional + k]));
    return a;
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.value;
      case Expr::Kind::kName: return lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        Array items;
        for (const auto& item : e.items) items.push_back(eval(*item));
        return Value::from(std::move(items));
      }
      case Expr::Kind::kDict: {
        Value d = Value::new_object();
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value key = eval(*e.items[i]);
          d.object->set(key.is_string() ? key.string : to_string(key), eval(*e.items[i + 1]));
        }
        return d;
      }
      case Expr::Kind::kAttribute: {
        const Value object = eval(*e.items[0]);
        if (object.is_undefined()) fail(e.line, fmt::format("'{}' of an undefined value", e.name));
        return get_attribute(object, e.name);
      }
      case Expr::Kind::kIndex: {
        const Value object = eval(*e.items[0]);
        if (object.is_undefined()) fail(e.line, "subscript of an undefined value");
        const Value index = eval(*e.items[1]);
        if (object.is_object() && index.is_string()) {
          const Value v = get_item(object, index);
          return v.is_undefined() ? get_attribute(object, index.string) : v;
        }
        return get_item(object, index);
      }
      case Expr::Kind::kSlice: {
        const Value object = eval(*e.items[0]);
        auto part = [&](size_t i) { return e.items[i] ? eval(*e.items[i]) : Value{}; };
        return get_slice(object, part(1), part(2), part(3));
      }
      case Expr::Kind::kCall: {
        const Value callee = eval(*e.items[0]);
        if (callee.kind != Value::Kind::kCallable) fail(e.line, "call of a value that is not a function");
        Arguments a = eval_arguments(e, 1);
        return (*callee.callable)(a);
      }
      case Expr::Kind::kFilter: {
        const Value v = eval(*e.items[0]);
        Arguments a = eval_arguments(e, 1);
        return apply_filter(e.name, v, a);
      }
      case Expr::Kind::kTest: {
        const Value v = eval(*e.items[0]);
        Arguments a = eval_arguments(e, 1);
        return Value::from(apply_test(e.name, v, a) != e.negated);
      }
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.items[0]);
        if (e.name == "not") return Value::from(!v.truthy());
        if (v.kind == Value::Kind::kInt) return Value::from(e.name == "-" ? -v.integer : v.integer);
        const double d = v.as_double();
        return Value::from(e.name == "-" ? -d : d);
      }
      case Expr::Kind::kConditional:
        if (eval(*e.items[0]).truthy()) return eval(*e.items[1]);
        return e.items[2] ? eval(*e.items[2]) : Value{};
      case Expr::Kind::kBinary: return eval_binary(e);
    }
    return {};
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    const Value left = eval(*e.items[0]);
    if (op == "and") return left.truthy() ? eval(*e.items[1]) : left;
    if (op == "or") return left.truthy() ? left : eval(*e.items[1]);
    const Value right = eval(*e.items[1]);
    if (op == "==") return Value::from(equals(left, right));
    if (op == "!=") return Value::from(!equals(left, right));
    if (op == "<") return Value::from(compare(left, right) < 0);
    if (op == "<=") return Value::from(compare(left, right) <= 0);
    if (op == ">") return Value::from(compare(left, right) > 0);
    if (op == ">=") return Value::from(compare(left, right) >= 0);
    if (op == "in" || op == "not in") return Value::from(contains(right, left, e.line) == (op == "in"));
    if (op == "~") return Value::from(to_string(left) + to_string(right));
    if (op == "+") {
      if (left.is_string() && right.is_string()) return Value::from(left.string + right.string);
      if (left.is_array() && right.is_array()) {
        Array joined = *left.array;
        joined.insert(joined.end(), right.array->begin(), right.array->end());
        return Value::from(std::move(joined));
      }
    }
    if (op == "*" && left.is_string() && right.kind == Value::Kind::kInt) {
      std::string out;
      for (int64_t i = 0; i < right.integer && out.size() < kMaxOutputBytes; ++i) out += left.string;
      return Value::from(std::move(out));
    }
    if (!left.is_number() || !right.is_number())
      fail(e.line, fmt::format("unsupported operand types for {}: {} and {}", op, left.type_name(), right.type_name()));
    const bool ints = left.kind != Value::Kind::kFloat && right.kind != Value::Kind::kFloat;
    const double x = left.as_double(), y = right.as_double();
    const int64_t a = ints ? static_cast<int64_t>(x) : 0, b = ints ? static_cast<int64_t>(y) : 0;
    if (op == "+") return ints ? Value::from(a + b) : Value::from(x + y);
    if (op == "-") return ints ? Value::from(a - b) : Value::from(x - y);
    if (op == "*") return ints ? Value::from(a * b) : Value::from(x * y);
    if (op == "/") {
      if (y == 0) fail(e.line, "division by zero");
      return Value::from(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail(e.line, "division by zero");
      if (ints) {
        const int64_t q = a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);  // floor division
        return op == "//" ? Value::from(q) : Value::from(a - q * b);
      }
      const double q = std::floor(x / y);
      return op == "//" ? Value::from(q) : Value::from(x - q * y);
    }
    if (op == "**") return ints && b >= 0 ? Value::from(static_cast<int64_t>(std::pow(x, y))) : Value::from(std::pow(x, y));
    fail(e.line, fmt::format("unknown operator {}", op));
  }

  static bool contains(const Value& container, const Value& item, int line) {
    if (container.is_string()) {
      if (!item.is_string()) fail(line, "'in <string>' needs a string on the left");
      return container.string.find(item.string) != std::string::npos;
    }
    if (container.is_array()) {
      for (const Value& v : *container.array)
        if (equals(v, item)) return true;
      return false;
    }
    if (container.is_object()) return item.is_string() && container.object->find(item.string) != nullptr;
    if (container.is_undefined() || container.is_none()) return false;
    fail(line, fmt::format("'in' of a {} value", container.type_name()));
  }

  std::vector<std::unordered_map<std::string, Value>> scopes_;
  int depth_ = 0;
};

}  // namespace

std::string render(const Body& body, const nlohmann::ordered_json& context) { return Renderer(context).run(body); }

}  // namespace nibble::jinja
