#include "tokenizer/jinja/parser.h"

#include <fmt/format.h>

#include <initializer_list>
#include <string_view>

#include "common/error.h"

namespace nibble::jinja {
namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Body parse_template() {
    Body body = parse_body({});
    if (peek().kind != TokenKind::kEnd) fail("unexpected content after the template body");
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const {
    const size_t i = pos_ + ahead;
    return tokens_[i < tokens_.size() ? i : tokens_.size() - 1];
  }
  const Token& next() {
    const Token& t = peek();
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  [[noreturn]] void fail(const std::string& what) const {
    NIBBLE_FAIL("chat template line {}: {}", peek().line, what);
  }
  bool at_operator(std::string_view op) const { return peek().kind == TokenKind::kOperator && peek().text == op; }
  bool at_name(std::string_view name) const { return peek().kind == TokenKind::kName && peek().text == name; }
  void expect_operator(std::string_view op) {
    if (!at_operator(op)) fail(fmt::format("expected '{}', found '{}'", op, peek().text));
    next();
  }
  std::string expect_name() {
    if (peek().kind != TokenKind::kName) fail(fmt::format("expected a name, found '{}'", peek().text));
    return next().text;
  }
  void expect(TokenKind kind, const char* what) {
    if (peek().kind != kind) fail(fmt::format("expected {}, found '{}'", what, peek().text));
    next();
  }
  void expect_statement_end() { expect(TokenKind::kCloseStatement, "'%}'"); }

  // Statements until one of the `enders` tags ({% endif %}, {% else %}, ...), left unconsumed.
  Body parse_body(std::initializer_list<std::string_view> enders) {
    Body body;
    while (peek().kind != TokenKind::kEnd) {
      const Token& t = peek();
      if (t.kind == TokenKind::kText) {
        auto s = new_stmt(Stmt::Kind::kText, t.line, t.text);
        body.push_back(std::move(s));
        next();
      } else if (t.kind == TokenKind::kOpenExpression) {
        next();
        auto s = new_stmt(Stmt::Kind::kOutput, t.line);
        s->expr = parse_expression();
        expect(TokenKind::kCloseExpression, "'}}'");
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kOpenStatement) {
        const Token& keyword = peek(1);
        for (std::string_view e : enders)
          if (keyword.kind == TokenKind::kName && keyword.text == e) return body;
        next();
        if (StmtPtr s = parse_statement()) body.push_back(std::move(s));
      } else {
        fail(fmt::format("unexpected '{}'", t.text));
      }
    }
    if (enders.size() != 0) fail(fmt::format("missing {{% {} %}}", *enders.begin()));
    return body;
  }

  void expect_tag(std::string_view name) {
    expect(TokenKind::kOpenStatement, "'{%'");
    if (!at_name(name)) fail(fmt::format("expected {{% {} %}}", name));
    next();
  }

  StmtPtr parse_statement() {
    const DepthGuard guard(*this);
    const int line = peek().line;
    const std::string keyword = expect_name();
    if (keyword == "if") return parse_if(line);
    if (keyword == "for") return parse_for(line);
    if (keyword == "set") return parse_set(line);
    if (keyword == "macro") return parse_macro(line);
    if (keyword == "break" || keyword == "continue") {
      expect_statement_end();
      return new_stmt(keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, line);
    }
    if (keyword == "generation" || keyword == "endgeneration") {  // Hugging Face's assistant-mask markers
      expect_statement_end();
      return nullptr;
    }
    fail(fmt::format("unsupported or unexpected tag {{% {} %}}", keyword));
  }

  StmtPtr parse_if(int line) {
    auto s = new_stmt(Stmt::Kind::kIf, line);
    s->conditions.push_back(parse_expression());
    expect_statement_end();
    while (true) {
      s->bodies.push_back(parse_body({"elif", "else", "endif"}));
      next();  // {%
      const std::string tag = next().text;
      if (tag == "elif") {
        s->conditions.push_back(parse_expression());
        expect_statement_end();
        continue;
      }
      expect_statement_end();
      if (tag == "else") {
        s->bodies.push_back(parse_body({"endif"}));
        expect_tag("endif");
        expect_statement_end();
      }
      return s;
    }
  }

  StmtPtr parse_for(int line) {
    auto s = new_stmt(Stmt::Kind::kFor, line);
    s->targets.push_back(expect_name());
    while (at_operator(",")) {
      next();
      s->targets.push_back(expect_name());
    }
    if (!at_name("in")) fail("expected 'in' in a for loop");
    next();
    s->expr = parse_or_ternary(/*allow_conditional=*/false);
    if (at_name("if")) {
      next();
      s->conditions.push_back(parse_or_ternary(false));
    }
    expect_statement_end();
    s->bodies.push_back(parse_body({"else", "endfor"}));
    next();
    const std::string tag = next().text;
    expect_statement_end();
    if (tag == "else") {
      s->bodies.push_back(parse_body({"endfor"}));
      expect_tag("endfor");
      expect_statement_end();
    }
    return s;
  }

  StmtPtr parse_set(int line) {
    auto s = new_stmt(Stmt::Kind::kSet, line);
    s->targets.push_back(expect_name());
    while (at_operator(",")) {  // {% set a, b = pair %}
      next();
      s->targets.push_back(expect_name());
    }
    if (s->targets.size() == 1 && at_operator(".")) {
      next();
      s->attribute = expect_name();
    }
    if (at_operator("=")) {
      next();
      s->expr = parse_expression();
      expect_statement_end();
      return s;
    }
    if (s->targets.size() > 1) fail("{% set a, b %} needs '= value'");
    expect_statement_end();
    s->kind = Stmt::Kind::kSetBlock;
    s->bodies.push_back(parse_body({"endset"}));
    expect_tag("endset");
    expect_statement_end();
    return s;
  }

  StmtPtr parse_macro(int line) {
    auto s = new_stmt(Stmt::Kind::kMacro, line);
    s->targets.push_back(expect_name());
    expect_operator("(");
    while (!at_operator(")")) {
      s->targets.push_back(expect_name());
      if (at_operator("=")) {
        next();
        s->conditions.push_back(parse_expression());
      } else {
        s->conditions.push_back(nullptr);
      }
      if (!at_operator(",")) break;
      next();
    }
    expect_operator(")");
    expect_statement_end();
    s->bodies.push_back(parse_body({"endmacro"}));
    expect_tag("endmacro");
    expect_statement_end();
    return s;
  }

  static StmtPtr new_stmt(Stmt::Kind kind, int line, std::string text = {}) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    s->text = std::move(text);
    return s;
  }

  // ---- expressions -------------------------------------------------------------------------
  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  ExprPtr parse_expression() { return parse_or_ternary(true); }

  ExprPtr parse_or_ternary(bool allow_conditional) {
    const DepthGuard guard(*this);
    ExprPtr value = parse_or();
    if (!allow_conditional || !at_name("if")) return value;
    const int line = peek().line;
    next();
    auto e = make(Expr::Kind::kConditional, line);
    e->items.push_back(parse_or());
    e->items.push_back(std::move(value));
    if (at_name("else")) {
      next();
      e->items.push_back(parse_or_ternary(true));
    } else {
      e->items.push_back(nullptr);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    auto e = make(Expr::Kind::kBinary, line);
    e->name = std::move(op);
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const int line = next().line;
      left = binary("or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const int line = next().line;
      left = binary("and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    const DepthGuard guard(*this);
    if (at_name("not")) {
      const int line = next().line;
      auto e = make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->items.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    while (true) {
      const int line = peek().line;
      std::string op;
      if (peek().kind == TokenKind::kOperator &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == "<=" ||
           peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && peek(1).kind == TokenKind::kName && peek(1).text == "in") {
        next();
        next();
        op = "not in";
      } else {
        return left;
      }
      left = binary(op, std::move(left), parse_math1(), line);
    }
  }

  ExprPtr parse_math1() {  // + -
    ExprPtr left = parse_concat();
    while (at_operator("+") || at_operator("-")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), parse_concat(), t.line);
    }
    return left;
  }

  ExprPtr parse_concat() {  // ~
    ExprPtr left = parse_math2();
    while (at_operator("~")) {
      const int line = next().line;
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {  // * / // %
    ExprPtr left = parse_pow();
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), parse_pow(), t.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary();
    while (at_operator("**")) {
      const int line = next().line;
      left = binary("**", std::move(left), parse_unary(), line);
    }
    return left;
  }

  // As Jinja2: filters and tests apply to the whole signed operand, so `-3 | abs` is (-3) | abs.
  ExprPtr parse_unary(bool with_filters = true) {
    const DepthGuard guard(*this);
    ExprPtr e;
    if (at_operator("-") || at_operator("+")) {
      const Token& t = next();
      e = make(Expr::Kind::kUnary, t.line);
      e->name = t.text;
      e->items.push_back(parse_unary(/*with_filters=*/false));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filters ? parse_filters_and_tests(std::move(e)) : std::move(e);
  }

  // (args) after a callee, filter or test: positional then name=value keyword arguments.
  void parse_call_arguments(Expr& e) {
    expect_operator("(");
    while (!at_operator(")")) {
      if (peek().kind == TokenKind::kName && peek(1).kind == TokenKind::kOperator && peek(1).text == "=") {
        e.keywords.push_back(next().text);
        next();
        e.items.push_back(parse_expression());
      } else {
        if (!e.keywords.empty()) fail("positional argument after a keyword argument");
        e.items.push_back(parse_expression());
      }
      if (!at_operator(",")) break;
      next();
    }
    expect_operator(")");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (at_operator(".")) {
        next();
        auto a = make(Expr::Kind::kAttribute, line);
        a->name = expect_name();
        a->items.push_back(std::move(e));
        e = std::move(a);
      } else if (at_operator("[")) {
        next();
        e = parse_subscript(std::move(e), line);
      } else if (at_operator("(")) {
        auto c = make(Expr::Kind::kCall, line);
        c->items.push_back(std::move(e));
        parse_call_arguments(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object, int line) {
    ExprPtr parts[3];
    int colons = 0;
    while (!at_operator("]")) {
      if (at_operator(":")) {
        if (++colons > 2) fail("too many ':' in a slice");
        next();
        continue;
      }
      if (parts[colons]) fail("expected ':' or ']' in a subscript");
      parts[colons] = parse_expression();
    }
    next();
    if (colons == 0) {
      if (!parts[0]) fail("empty subscript []");
      auto e = make(Expr::Kind::kIndex, line);
      e->items.push_back(std::move(object));
      e->items.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(Expr::Kind::kSlice, line);
    e->items.push_back(std::move(object));
    for (auto& p : parts) e->items.push_back(std::move(p));
    return e;
  }

  ExprPtr parse_filters_and_tests(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (at_operator("|")) {
        next();
        auto f = make(Expr::Kind::kFilter, line);
        f->name = expect_name();
        f->items.push_back(std::move(e));
        if (at_operator("(")) parse_call_arguments(*f);
        e = std::move(f);
      } else if (at_name("is")) {
        next();
        auto t = make(Expr::Kind::kTest, line);
        if (at_name("not")) {
          next();
          t->negated = true;
        }
        t->name = expect_name();
        t->items.push_back(std::move(e));
        if (at_operator("(")) parse_call_arguments(*t);
        else if (starts_test_argument()) t->items.push_back(parse_postfix(parse_primary()));  // `x is in xs`
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  // Jinja2's one unparenthesized test argument (`n is divisibleby 3`): a literal, name, list or dict
  // that is not a keyword continuing the expression.
  bool starts_test_argument() const {
    const Token& t = peek();
    if (t.kind == TokenKind::kString || t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat) return true;
    if (t.kind == TokenKind::kOperator) return t.text == "[" || t.text == "{";
    if (t.kind != TokenKind::kName) return false;
    for (const char* keyword : {"else", "or", "and", "if", "is", "in", "not"})
      if (t.text == keyword) return false;
    return true;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    const int line = t.line;
    switch (t.kind) {
      case TokenKind::kString: {
        std::string s;
        while (peek().kind == TokenKind::kString) s += next().text;  // adjacent literals concatenate
        auto e = make(Expr::Kind::kLiteral, line);
        e->value = Value::from(std::move(s));
        return e;
      }
      case TokenKind::kInteger: {
        auto e = make(Expr::Kind::kLiteral, line);
        try {
          e->value = Value::from(static_cast<int64_t>(std::stoll(next().text)));
        } catch (const std::exception&) {
          fail("integer literal out of range");
        }
        return e;
      }
      case TokenKind::kFloat: {
        auto e = make(Expr::Kind::kLiteral, line);
        e->value = Value::from(std::stod(next().text));
        return e;
      }
      case TokenKind::kName: {
        const std::string name = next().text;
        auto e = make(Expr::Kind::kLiteral, line);
        if (name == "true" || name == "True") e->value = Value::from(true);
        else if (name == "false" || name == "False") e->value = Value::from(false);
        else if (name == "none" || name == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::kName;
          e->name = name;
        }
        return e;
      }
      case TokenKind::kOperator:
        if (t.text == "(") {
          next();
          ExprPtr first = parse_expression();
          if (at_operator(")")) {
            next();
            return first;
          }
          auto tuple = make(Expr::Kind::kTuple, line);
          tuple->items.push_back(std::move(first));
          while (at_operator(",")) {
            next();
            if (at_operator(")")) break;
            tuple->items.push_back(parse_expression());
          }
          expect_operator(")");
          return tuple;
        }
        if (t.text == "[") {
          next();
          auto list = make(Expr::Kind::kList, line);
          while (!at_operator("]")) {
            list->items.push_back(parse_expression());
            if (!at_operator(",")) break;
            next();
          }
          expect_operator("]");
          return list;
        }
        if (t.text == "{") {
          next();
          auto dict = make(Expr::Kind::kDict, line);
          while (!at_operator("}")) {
            dict->items.push_back(parse_expression());
            expect_operator(":");
            dict->items.push_back(parse_expression());
            if (!at_operator(",")) break;
            next();
          }
          expect_operator("}");
          return dict;
        }
        break;
      default: break;
    }
    fail(fmt::format("unexpected '{}' in an expression", t.text));
  }

  // Templates are outside input: nesting is bounded so recursion cannot exhaust the stack.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxDepth) parser.fail("expressions or blocks nested too deeply");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };
  static constexpr int kMaxDepth = 100;

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace nibble::jinja
