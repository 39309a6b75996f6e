// The client actor: submits a list of requests to a router, keeping at most `concurrency` in
// flight, assembles each request's events into an outcome (the fields of `generate --json`)
// and hands it to a callback as soon as the request ends. It monitors the router: if the
// router goes away, every unfinished request ends with an error saying so. It stops when every
// request has an outcome. Used by `deepinfer client`, in-process callers and the tests; front
// ends that submit one request at a time from their own threads use client_session.hpp.
#pragma once

#include "actors/messages.hpp"

#include <caf/actor_system.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace di::actors {

/// Everything one request produced.
struct request_outcome {
  std::size_t index = 0;  ///< position in client_params::requests
  submit_reply reply;     ///< accepted or refused; seed and prompt ids
  std::vector<std::int32_t> output_ids;
  std::string text;
  std::vector<runtime::position_logprobs> logprobs;
  std::vector<std::optional<runtime::position_logprobs>> prompt_logprobs;
  runtime::sequence_status status = runtime::sequence_status::queued;
  std::string error;  ///< refusal or failure message
  /// What kind of failure the final event said (a refusal's kind is reply.kind).
  runtime::failure_kind failure = runtime::failure_kind::none;
  std::optional<std::int32_t> stop_token;
  std::string stop_string;
  double seconds = 0;  ///< submit to final event
  double first_token_seconds = -1;

  /// "stop", "length", "abort" or "error" (a refusal is an error).
  std::string finish_reason() const;
};

/// Adds one event of a request to its outcome (tokens, text, logprobs, status, error, stop
/// reason); `seconds` since submit becomes first_token_seconds at the first tokens.
void add_event(request_outcome& out, const runtime::token_event& e, double seconds);

struct client_params {
  router_actor router;
  std::vector<submit_request> requests;  ///< ids are replaced by their index
  int concurrency = 1;
  std::chrono::milliseconds submit_timeout{30000};
  /// Called on the client actor's thread when a request ends (in completion order).
  std::function<void(const request_outcome&)> on_finished;
  /// Called with text as it becomes final (index, text); optional.
  std::function<void(std::size_t, const std::string&)> on_text;
};

/// The client's interface: events from the router, plus aborting from its owner.
using client_handle = client_actor::extend<
    /// owner → client: abort request `index` (its outcome says abort); all when index = -1.
    caf::reacts_to<abort_request>>;

client_handle spawn_client_actor(caf::actor_system& sys, client_params params);

/// Runs `requests` through `router` and returns their outcomes in input order (blocks).
std::vector<request_outcome> run_requests(caf::actor_system& sys, const router_actor& router,
                                          std::vector<submit_request> requests, int concurrency);

}  // namespace di::actors
