#include "tokenizer/jinja/lexer.h"

#include <cctype>

#include "common/error.h"

namespace nibble::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// trim_blocks / lstrip_blocks and the dropped trailing newline, as text transforms (the same ones
// @huggingface/jinja applies): leading spaces/tabs of a line before "{%" or "{#" go, and so does a
// newline right after "%}" or "#}".
std::string preprocess(std::string_view source) {
  std::string s(source);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  std::string lstripped;
  lstripped.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t line_end = s.find('\n', i);
    const size_t end = line_end == std::string::npos ? s.size() : line_end + 1;
    size_t j = i;
    while (j < end && (s[j] == ' ' || s[j] == '\t')) ++j;
    const bool block = j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '%' || s[j + 1] == '#' || s[j + 1] == '-');
    lstripped.append(s, block ? j : i, end - (block ? j : i));
    i = end;
  }
  std::string out;
  out.reserve(lstripped.size());
  for (size_t i = 0; i < lstripped.size(); ++i) {
    out += lstripped[i];
    const char c = lstripped[i];
    if (c == '}' && i > 0 && (lstripped[i - 1] == '%' || lstripped[i - 1] == '#' || lstripped[i - 1] == '-') &&
        i + 1 < lstripped.size() && lstripped[i + 1] == '\n')
      ++i;  // drop the newline
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      if (!in_tag_) {
        lex_text();
      } else {
        lex_tag_token();
      }
    }
    if (in_tag_) fail("unexpected end of template inside a tag");
    tokens_.push_back({TokenKind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { NIBBLE_FAIL("chat template line {}: {}", line_, what); }
  bool starts(std::string_view s) const { return src_.compare(pos_, s.size(), s) == 0; }
  void advance(size_t n) {
    for (size_t k = 0; k < n && pos_ < src_.size(); ++k, ++pos_)
      if (src_[pos_] == '\n') ++line_;
  }
  void push(TokenKind kind, std::string text) { tokens_.push_back({kind, std::move(text), line_}); }
  void strip_previous_text() {
    if (tokens_.empty() || tokens_.back().kind != TokenKind::kText) return;
    std::string& t = tokens_.back().text;
    while (!t.empty() && is_space(t.back())) t.pop_back();
    if (t.empty()) tokens_.pop_back();
  }
  void skip_whitespace() {
    while (pos_ < src_.size() && is_space(src_[pos_])) advance(1);
  }

  void lex_text() {
    std::string text;
    while (pos_ < src_.size() && !(src_[pos_] == '{' && pos_ + 1 < src_.size() &&
                                   (src_[pos_ + 1] == '%' || src_[pos_ + 1] == '{' || src_[pos_ + 1] == '#'))) {
      text += src_[pos_];
      advance(1);
    }
    if (!text.empty()) push(TokenKind::kText, std::move(text));
    if (pos_ >= src_.size()) return;
    const bool strip = pos_ + 2 < src_.size() && src_[pos_ + 2] == '-';
    if (starts("{#")) {
      advance(2);
      if (strip) strip_previous_text();
      const size_t end = src_.find("#}", pos_);
      if (end == std::string::npos) fail("unclosed comment {#");
      const bool strip_after = end > pos_ && src_[end - 1] == '-';
      advance(end + 2 - pos_);
      if (strip_after) skip_whitespace();
      return;
    }
    const bool statement = src_[pos_ + 1] == '%';
    if (strip) strip_previous_text();
    push(statement ? TokenKind::kOpenStatement : TokenKind::kOpenExpression, statement ? "{%" : "{{");
    advance(strip ? 3 : 2);
    in_tag_ = true;
    closing_ = statement ? "%}" : "}}";
    brace_depth_ = 0;
  }

  void lex_tag_token() {
    skip_whitespace();
    if (pos_ >= src_.size()) return;
    if (brace_depth_ == 0 && (starts(std::string("-") + closing_) || starts(closing_))) {
      const bool strip = src_[pos_] == '-';
      push(closing_ == "%}" ? TokenKind::kCloseStatement : TokenKind::kCloseExpression, closing_);
      advance(strip ? 3 : 2);
      in_tag_ = false;
      if (strip) skip_whitespace();
      return;
    }
    const char c = src_[pos_];
    if (c == '"' || c == '\'') return lex_string(c);
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::string name;
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        name += src_[pos_];
        advance(1);
      }
      return push(TokenKind::kName, std::move(name));
    }
    static constexpr std::string_view kOperators[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                                      "~",  "<",  ">",  "=",  "(",  ")",  "[", "]", "{", "}", ",",
                                                      ".",  ":",  "|"};
    for (std::string_view op : kOperators) {
      if (!starts(op)) continue;
      if (op == "{") ++brace_depth_;
      if (op == "}") --brace_depth_;
      push(TokenKind::kOperator, std::string(op));
      advance(op.size());
      return;
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  void lex_string(char quote) {
    advance(1);
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) fail("unterminated string literal");
      const char c = src_[pos_];
      if (c == quote) break;
      if (c == '\\') {
        if (pos_ + 1 >= src_.size()) fail("unterminated string literal");
        const char e = src_[pos_ + 1];
        switch (e) {
          case 'n': value += '\n'; break;
          case 't': value += '\t'; break;
          case 'r': value += '\r'; break;
          case 'b': value += '\b'; break;
          case 'f': value += '\f'; break;
          case 'v': value += '\v'; break;
          case '\'': case '"': case '\\': value += e; break;
          default: fail(std::string("unsupported escape \\") + e + " in a string literal");
        }
        advance(2);
        continue;
      }
      value += c;
      advance(1);
    }
    advance(1);
    push(TokenKind::kString, std::move(value));
  }

  void lex_number() {
    std::string digits;
    while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
      digits += src_[pos_];
      advance(1);
    }
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      digits += '.';
      advance(1);
      while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        digits += src_[pos_];
        advance(1);
      }
      return push(TokenKind::kFloat, std::move(digits));
    }
    push(TokenKind::kInteger, std::move(digits));
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool in_tag_ = false;
  std::string closing_;
  int brace_depth_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(preprocess(source)).run(); }

}  // namespace nibble::jinja
