// The routes of the HTTP server: GET /health, /ready, /metrics, /v1/models[/ID];
// POST /v1/completions and /v1/chat/completions. Authentication (bearer keys compared in
// constant time; /health and /ready stay open), model checks and the server's admission limit
// happen here; generations continue in generation.cpp.
#pragma once

#include "server/detail/http_session.hpp"

#include <memory>
#include <optional>
#include <string_view>

namespace di::server {

/// Answers the request the session just read (on its strand). Throws api_error for errors.
void handle_request(const std::shared_ptr<detail::http_session>& session);

/// The error `req` gets whatever its body -- no route (404), a missing or wrong API key (401),
/// a method its route does not take (405, with Allow), a generation while the server drains
/// (503) -- found from its head alone, as handle_request finds it; none when the body decides.
/// A request that asked `Expect: 100-continue` gets it instead of the 100, and while draining
/// every request gets it before its body is read, so none uploads a body only to be refused.
std::optional<api_error> header_error(const detail::http_request& req, const server_context& ctx);

/// Answers `e`, with Retry-After on a 429 or 503 and the error's own headers (Allow on a 405).
void respond_api_error(const std::shared_ptr<detail::http_session>& session, const api_error& e);

/// True when `given` equals one of `keys`; the time taken depends only on the keys' lengths.
bool key_matches(std::string_view given, const std::vector<std::string>& keys);

}  // namespace di::server
