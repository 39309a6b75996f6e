// The routes of the HTTP server: GET /health, /ready, /metrics, /v1/models[/ID];
// POST /v1/completions and /v1/chat/completions. Authentication (bearer keys compared in
// constant time; /health and /ready stay open), model checks and the server's admission limit
// happen here; generations continue in generation.cpp.
#pragma once

#include "server/detail/http_session.hpp"

#include <memory>
#include <string_view>

namespace di::server {

/// Answers the request the session just read (on its strand). Throws api_error for errors.
void handle_request(const std::shared_ptr<detail::http_session>& session);

/// True when `given` equals one of `keys`; the time taken depends only on the keys' lengths.
bool key_matches(std::string_view given, const std::vector<std::string>& keys);

}  // namespace di::server
