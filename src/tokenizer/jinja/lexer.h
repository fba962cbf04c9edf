#pragma once
// Jinja lexer: template source -> tokens. Applies the environment Hugging Face renders chat templates
// with (trim_blocks, lstrip_blocks, one trailing newline dropped) and the {%- -%} / {{- -}} / {#- -#}
// whitespace control.
#include <string>
#include <string_view>
#include <vector>

namespace nibble::jinja {

enum class TokenKind { kText, kOpenStatement, kCloseStatement, kOpenExpression, kCloseExpression, kName, kString,
                       kInteger, kFloat, kOperator, kEnd };

struct Token {
  TokenKind kind;
  std::string text;  // text, name, decoded string literal, number or operator
  int line;
};

// Throws nibble::Error "chat template line N: ..." on a lexical error.
std::vector<Token> tokenize(std::string_view source);

}  // namespace nibble::jinja
