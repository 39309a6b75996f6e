// One HTTP generation request in flight: its choices (prompts x n) submitted to the cluster as
// one job, the token events turned into an OpenAI response or SSE chunks on the connection's
// strand, usage and latency recorded, and the job aborted when the client goes away.
//
// Lifecycle: start() submits → every choice is accepted (a refusal ends the response with its
// error and aborts the rest) → stream: headers, chunks as events arrive → every choice ended →
// the response (or usage chunk and `data: [DONE]`) → the job's last event releases the slot.
#pragma once

#include "runtime/failure.hpp"
#include "server/detail/http_session.hpp"
#include "server/openai_request.hpp"
#include "server/openai_response.hpp"

#include <memory>

namespace di::server {

/// Validates, tokenizes and submits `request` on `session` (the caller checked the model and
/// took an admission slot, which the generation gives back when its job has ended).
void start_generation(const std::shared_ptr<detail::http_session>& session,
                      generation_request request);

/// The HTTP error for a refusal, by the kind the router, the scheduler or the client session
/// gave it (runtime::failure_kind, not the message's words): overloaded 429, unavailable 503,
/// internal 500, invalid 400 with `param` (the field the refusal blames). `max_tokens_name` is
/// the request's field for the token limit (chat may use max_completion_tokens); the message
/// and param name it in place of max_tokens. `logprobs_name` likewise for the number of top
/// logprobs (chat's top_logprobs: its `logprobs` is a switch).
api_error refusal_error(runtime::failure_kind kind, const std::string& message,
                        const std::string& param = {},
                        std::string_view max_tokens_name = "max_tokens",
                        std::string_view logprobs_name = "logprobs");

/// The HTTP error for a generation that failed after it was accepted (its final event's
/// failure kind): invalid 400 (a response_format the grammar could not follow), unavailable
/// 503 (the cluster cut it off), else 500.
api_error generation_error(runtime::failure_kind kind, const std::string& message,
                           const std::string& param);

}  // namespace di::server
