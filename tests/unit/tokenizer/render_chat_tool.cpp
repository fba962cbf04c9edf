// tokenizer_render_chat: nibble's side of the chat-template comparison with @huggingface/jinja
// (tests/reference/render_chat.mjs has the same contract).
// usage: tokenizer_render_chat TEMPLATE_SOURCE [EXTRA_JSON] < contexts.jsonl > rendered.jsonl
// TEMPLATE_SOURCE "-": each line is {"template": SOURCE, "context": {...}} (the feature cases).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: {} TEMPLATE_SOURCE [EXTRA_JSON] < contexts.jsonl\n", argv[0]);
    return 2;
  }
  try {
    const std::string path = argv[1];
    const bool inline_templates = path == "-";
    std::optional<nibble::ChatTemplate> shared;
    if (!inline_templates) {
      std::ifstream in(path, std::ios::binary);
      NIBBLE_CHECK(in.good(), "cannot open {}", path);
      std::stringstream buffer;
      buffer << in.rdbuf();
      std::string source = buffer.str();
      if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0)
        source = nlohmann::json::parse(source).at("chat_template").get<std::string>();
      shared = nibble::ChatTemplate::parse(source);
    }
    // ordered_json: objects keep their key order, as in the reference and in Python.
    const nlohmann::ordered_json extra = nlohmann::ordered_json::parse(argc > 2 ? argv[2] : "{}");
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      const nlohmann::ordered_json input = nlohmann::ordered_json::parse(line);
      nlohmann::ordered_json context =
          inline_templates ? input.value("context", nlohmann::ordered_json::object()) : input;
      context.update(extra);
      try {  // a parse error of an inline template counts as an error line, as in render_chat.mjs
        const nibble::ChatTemplate tmpl =
            inline_templates ? nibble::ChatTemplate::parse(input.at("template").get<std::string>()) : *shared;
        fmt::print("{}\n", nlohmann::json(tmpl.render(context)).dump());
      } catch (const nibble::Error&) {
        fmt::print("{}\n", R"({"error":true})");
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "tokenizer_render_chat: {}\n", e.what());
    return 1;
  }
  return 0;
}
