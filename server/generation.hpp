// One HTTP generation request in flight: its choices (prompts x n) submitted to the cluster as
// one job, the token events turned into an OpenAI response or SSE chunks on the connection's
// strand, usage and latency recorded, and the job aborted when the client goes away.
//
// Lifecycle: start() submits → every choice is accepted (a refusal ends the response with its
// error and aborts the rest) → stream: headers, chunks as events arrive → every choice ended →
// the response (or usage chunk and `data: [DONE]`) → the job's last event releases the slot.
#pragma once

#include "server/detail/http_session.hpp"
#include "server/openai_request.hpp"
#include "server/openai_response.hpp"

#include <memory>

namespace di::server {

/// Validates, tokenizes and submits `request` on `session` (the caller checked the model and
/// took an admission slot, which the generation gives back when its job has ended).
void start_generation(const std::shared_ptr<detail::http_session>& session,
                      generation_request request);

/// Whether a router refusal or a generation's error says the cluster cannot serve now (shut
/// down, a group or the router lost): 503.
bool cluster_unavailable(const std::string& message);

/// The HTTP error for a router refusal message (429/503 at limits, 400 otherwise).
/// `max_tokens_name` is the request's field for the token limit (chat may use
/// max_completion_tokens); the message and param name it in place of max_tokens.
api_error refusal_error(const std::string& message,
                        std::string_view max_tokens_name = "max_tokens");

}  // namespace di::server
