#include "server/api_error.h"

namespace nibble::server {

nlohmann::json error_body(const ApiError& error) {
  nlohmann::json inner = {{"message", error.message}, {"type", error.type}};
  inner["param"] = error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param);
  inner["code"] = error.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.code);
  return {{"error", inner}};
}

ApiError invalid_param(const std::string& param, const std::string& message) {
  return {.status = 400, .message = message, .param = param, .code = "invalid_value"};
}

ApiError context_length_exceeded(const std::string& param, const std::string& message) {
  return {.status = 400, .message = message, .param = param, .code = "context_length_exceeded"};
}

}  // namespace nibble::server
