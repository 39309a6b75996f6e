// api_error (see api_error.hpp).
#include "server/api_error.hpp"

namespace di::server {

std::string api_error::default_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    case 500:
      return "internal_error";
    case 503:
      return "service_unavailable_error";
    default:
      return "invalid_request_error";
  }
}

nlohmann::ordered_json api_error::body() const {
  nlohmann::ordered_json e = {
      {"message", what()}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}

void bad_param(const std::string& param, const std::string& message) {
  throw api_error(400, message, param);
}

}  // namespace di::server
