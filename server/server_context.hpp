// What every connection of the HTTP server shares: settings, the engine (the cluster), the
// served model's tokenizer and chat template, the metrics and the admission counters.
#pragma once

#include "model/chat_template/tokenizer_chat_template.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "server/engine.hpp"
#include "server/metrics.hpp"
#include "server/server_config.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <string>

namespace di::server {

class grammar_jobs;

struct served_model {
  std::string name;  ///< the id clients pass as "model"
  std::shared_ptr<const tok::tokenizer> tokenizer;
  std::shared_ptr<const tokenizer_chat_template> chat_template;  ///< null: chat is refused
  std::string chat_template_error;                               ///< why there is none
  std::int64_t created_unix = 0;
};

struct server_context {
  server_settings settings;
  engine* cluster = nullptr;
  served_model model;
  /// Set when the model's runners live in this process: compiles a request's response_format
  /// (the inline spec) into the grammar cache they share, on the HTTP thread, before the
  /// request is submitted -- so the step loop finds it compiled instead of stalling every other
  /// sequence for the compile. Throws di::error for a spec that does not compile.
  std::function<void(const std::string& spec)> prepare_grammar;
  /// Where request grammars compile (server.grammar_threads, owned by the http_server): off
  /// the I/O threads, which a long compile (tens of seconds for a huge regex) would hold,
  /// stalling every connection they serve; each request waits at most the scheduler's limit
  /// (actors/grammar_limit.hpp). Null: on the I/O thread.
  grammar_jobs* grammars = nullptr;
  server_metrics metrics;
  std::atomic<std::int64_t> num_connections{0};
  std::atomic<std::int64_t> num_inflight{0};  ///< generation requests admitted by the server
  /// Requests read whose response is not fully written yet (any route).
  std::atomic<std::int64_t> num_responding{0};
  /// Set on the first stop signal: generation requests get 503, /ready says not ready, and
  /// each connection closes after its current response.
  std::atomic<bool> is_draining{false};
};

}  // namespace di::server
