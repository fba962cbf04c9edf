// ChatTemplate: parse once (lexer + parser), render many times (evaluator).
#include <nlohmann/json.hpp>

#include "tokenizer/jinja/evaluator.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/tokenizer.h"

namespace nibble {

struct ChatTemplate::Program {
  jinja::Body body;
};

ChatTemplate ChatTemplate::parse(std::string_view source) {
  auto program = std::make_shared<Program>();
  program->body = jinja::parse(jinja::tokenize(source));
  return ChatTemplate(std::move(program));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return jinja::render(program_->body, context);
}

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return render(nlohmann::ordered_json(context));
}

}  // namespace nibble
