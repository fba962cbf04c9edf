#pragma once
// Decoders of tokenizer.json: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence.
// Like Hugging Face's decode_chain they map the list of token strings to a new list; the caller
// concatenates the result.
#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <vector>

namespace nibble {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// json: the "decoder" object (not null). Throws nibble::Error naming an unsupported type.
// depth: nesting level of Sequence components (bounded: the file is outside input).
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& json, int depth = 0);

}  // namespace nibble
