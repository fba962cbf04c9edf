#pragma once
// An error as the OpenAI API reports it: an HTTP status and the body
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens" | null,
//              "code": "context_length_exceeded" | null}}
#include <nlohmann/json.hpp>

#include <string>

namespace nibble::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};

nlohmann::json error_body(const ApiError& error);

// The common cases.
ApiError invalid_param(const std::string& param, const std::string& message);
ApiError context_length_exceeded(const std::string& param, const std::string& message);

}  // namespace nibble::server
