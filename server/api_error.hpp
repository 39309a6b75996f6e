// An OpenAI error object ({"error": {"message", "type", "param", "code"}}) with its HTTP
// status, thrown by request parsing and turned into a response by the HTTP layer.
#pragma once

#include "common/error.hpp"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace di::server {

struct api_error : std::runtime_error {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string param;  ///< the offending request field; empty = none
  std::string code;   ///< machine-readable; empty = null
  /// Response headers that belong to the error (e.g. Allow for a 405).
  std::vector<std::pair<std::string, std::string>> headers;

  api_error(int status_, std::string message, std::string param_ = {}, std::string code_ = {},
            std::string type_ = {})
      : std::runtime_error(visible_nuls(std::move(message))),
        status(status_),
        param(std::move(param_)),
        code(std::move(code_)) {
    type = !type_.empty() ? type_ : default_type(status_);
  }

  /// OpenAI's type for a status ("invalid_request_error", "authentication_error", ...).
  static std::string default_type(int status);
  /// The response body.
  nlohmann::ordered_json body() const;
};

/// Throws api_error(400, message, param).
[[noreturn]] void bad_param(const std::string& param, const std::string& message);

}  // namespace di::server
