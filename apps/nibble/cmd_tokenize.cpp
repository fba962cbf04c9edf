// nibble tokenize: text -> token ids as a JSON array (Hugging Face's add_special_tokens=True unless
// --no-special). --jsonl reads one JSON string per input line and prints one JSON array per line.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <iterator>
#include <string>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace {

struct TokenizeOptions {
  std::string model_dir;
  std::string text;
  bool from_stdin = false;
  bool jsonl = false;
  bool no_special = false;
};

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out + "]";
}

void run_tokenize(const TokenizeOptions& o) {
  const nibble::Tokenizer tokenizer = nibble::Tokenizer::load(o.model_dir);
  const bool add_special = !o.no_special;
  if (o.jsonl) {
    NIBBLE_CHECK(o.text.empty(), "--jsonl reads its input from stdin; do not also pass TEXT");
    std::string line;
    for (size_t line_number = 1; std::getline(std::cin, line); ++line_number) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      nlohmann::json value;
      try {
        value = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        NIBBLE_FAIL("stdin line {}: not valid JSON: {}", line_number, e.what());
      }
      NIBBLE_CHECK(value.is_string(), "stdin line {}: expected a JSON string", line_number);
      fmt::print("{}\n", ids_json(tokenizer.encode(value.get<std::string>(), add_special)));
    }
    return;
  }
  NIBBLE_CHECK(o.from_stdin != !o.text.empty(), "give exactly one of TEXT or --stdin");
  const std::string text =
      o.from_stdin ? std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()) : o.text;
  fmt::print("{}\n", ids_json(tokenizer.encode(text, add_special)));
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array");
  cmd->add_option("--model", options->model_dir, "Model directory with tokenizer.json")->required();
  cmd->add_option("text", options->text, "Text to tokenize");
  cmd->add_flag("--stdin", options->from_stdin, "Read the text from stdin (all of it, as one text)");
  cmd->add_flag("--jsonl", options->jsonl, "Read one JSON string per stdin line; print one JSON array per line");
  cmd->add_flag("--no-special", options->no_special, "Do not add the post-processor's special tokens (BOS/EOS)");
  cmd->callback([options] { run_tokenize(*options); });
}
