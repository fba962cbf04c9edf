#include "eval/corpus.h"

#include <fstream>
#include <iterator>
#include <string>

#include "common/error.h"

namespace nibble::eval {

std::vector<std::vector<int32_t>> make_documents(const Tokenizer& tokenizer, std::string_view text,
                                                 const CorpusOptions& options) {
  NIBBLE_CHECK(options.context >= 2, "--context must be at least 2 tokens (one to condition on, one to score), got {}",
               options.context);
  NIBBLE_CHECK(options.max_documents >= 0, "--docs must not be negative, got {}", options.max_documents);
  const size_t context = static_cast<size_t>(options.context);
  std::vector<std::vector<int32_t>> documents;
  std::vector<int32_t> pending;  // ids not yet cut into a document
  int64_t total_tokens = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find("\n\n", start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view passage = text.substr(start, end - start);
    start = end + 2;
    if (passage.find_first_not_of(" \t\r\n") == std::string_view::npos) continue;
    const std::vector<int32_t> ids = tokenizer.encode(passage, /*add_special=*/true);
    total_tokens += static_cast<int64_t>(ids.size());
    pending.insert(pending.end(), ids.begin(), ids.end());
    while (pending.size() >= context) {
      documents.emplace_back(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(context));
      pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(context));
      if (options.max_documents > 0 && static_cast<int64_t>(documents.size()) == options.max_documents) {
        return documents;
      }
    }
  }
  NIBBLE_CHECK(!documents.empty(), "the corpus has {} tokens, fewer than one document of --context {} tokens",
               total_tokens, options.context);
  return documents;
}

std::vector<std::vector<int32_t>> load_documents(const Tokenizer& tokenizer, const std::filesystem::path& path,
                                                 const CorpusOptions& options) {
  std::ifstream in(path, std::ios::binary);
  NIBBLE_CHECK(in.good(), "cannot open the corpus file {}", path.string());
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  NIBBLE_CHECK(!text.empty(), "the corpus file {} is empty", path.string());
  try {
    return make_documents(tokenizer, text, options);
  } catch (const Error& e) {
    NIBBLE_FAIL("{}: {}", path.string(), e.what());
  }
}

}  // namespace nibble::eval
