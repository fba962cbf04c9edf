#pragma once
// Jinja parser: tokens -> statement tree (recursive descent, Jinja2's operator precedence).
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace nibble::jinja {

// Throws nibble::Error "chat template line N: ..." on a syntax error or an unsupported tag.
Body parse(const std::vector<Token>& tokens);

}  // namespace nibble::jinja
