// Fuzz target: the OpenAI request parser on arbitrary bytes, for both endpoints. It must never
// crash or throw; every input is either a ParsedRequest or a 400 ApiError with a message.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/request_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nibble::server;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (Endpoint e : {Endpoint::kChatCompletions, Endpoint::kCompletions}) {
    ParseResult r = parse_request(e, body);
    if (auto* err = std::get_if<ApiError>(&r)) {
      if (err->status != 400 || err->message.empty()) std::abort();
      (void)error_body(*err).dump();
    } else {
      const ParsedRequest& p = std::get<ParsedRequest>(r);
      if (e == Endpoint::kCompletions && !p.prompt_text && p.prompt_ids.empty()) std::abort();
      if (p.top_logprobs < 0 || p.top_logprobs > nibble::engine::kMaxTopLogprobs) std::abort();
    }
  }
  return 0;
}
