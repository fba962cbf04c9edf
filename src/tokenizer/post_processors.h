#pragma once
// Post-processors of tokenizer.json for single sequences: TemplateProcessing (adds BOS/EOS-like special
// tokens), ByteLevel (offsets only: no change to ids) and Sequence. Applied when encode(add_special=true).
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <vector>

namespace nibble {

class PostProcessor {
 public:
  // json: the "post_processor" object (not null). Throws nibble::Error naming an unsupported type.
  explicit PostProcessor(const nlohmann::json& json);
  std::vector<int32_t> apply(std::vector<int32_t> ids) const;

 private:
  // The "single" template flattened: a special token's ids, or (empty, is_sequence) for $A.
  struct Piece {
    bool is_sequence;
    std::vector<int32_t> ids;
  };
  void append_template(const nlohmann::json& json, int depth);
  std::vector<std::vector<Piece>> templates_;  // one per TemplateProcessing in a Sequence, in order
};

}  // namespace nibble
