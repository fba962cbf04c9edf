#pragma once
// Renders a parsed template against a context of variables.
#include <nlohmann/json_fwd.hpp>

#include <string>

#include "tokenizer/jinja/ast.h"

namespace nibble::jinja {

// Throws nibble::Error "chat template line N: ..." on a runtime error (including raise_exception).
std::string render(const Body& body, const nlohmann::ordered_json& context);

}  // namespace nibble::jinja
