// Tokenizer's chat-template entry points: the model's template with the variables Hugging Face's
// apply_chat_template passes (messages, add_generation_prompt, bos_token, eos_token).
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace nibble {

bool Tokenizer::has_chat_template() const { return impl_->chat_template.has_value(); }

const ChatTemplate& Tokenizer::chat_template() const {
  NIBBLE_CHECK(impl_->chat_template.has_value(), "the model has no chat_template in tokenizer_config.json");
  return *impl_->chat_template;
}

std::string Tokenizer::apply_chat_template(std::span<const ChatMessage> messages, const ChatOptions& options) const {
  nlohmann::ordered_json array = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) array.push_back({{"role", m.role}, {"content", m.content}});
  return apply_chat_template(array, options);
}

std::string Tokenizer::apply_chat_template(const nlohmann::ordered_json& messages, const ChatOptions& options) const {
  NIBBLE_CHECK(messages.is_array(), "chat messages must be a JSON array");
  const nlohmann::ordered_json context = {{"messages", messages},
                                  {"add_generation_prompt", options.add_generation_prompt},
                                  {"bos_token", impl_->bos_token},
                                  {"eos_token", impl_->eos_token}};
  return chat_template().render(context);
}

}  // namespace nibble
