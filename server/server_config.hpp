// The HTTP front end's settings: the `[server]` section of a cluster file (read here, so the
// cluster parser stays the cluster's), `--set server.key=value` overrides and the
// DEEPINFER_API_KEY environment variable. Every limit a client could push against is here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace di::server {

/// [server]: one field per key, documented in the README ("HTTP server").
struct server_settings {
  std::string host = "127.0.0.1";            ///< listen address
  std::uint16_t port = 8000;                 ///< listen port; 0 = any free port (printed)
  std::vector<std::string> api_keys;         ///< accepted bearer keys; empty = no auth
  std::string model_name;                    ///< served model id; empty = the model folder's name
  int io_threads = 2;                        ///< Asio threads for all connections
  int grammar_threads = 0;  ///< threads compiling request grammars; 0 = num_grammar_threads()
  std::int64_t max_body_bytes = 8 << 20;     ///< larger bodies get 413
  std::int64_t max_header_bytes = 16 << 10;  ///< larger headers get 431
  int max_connections = 8192;                ///< open connections; beyond, 503 and close
  int max_concurrent_requests = 2048;        ///< generation requests in flight; beyond, 429
  int max_n = 16;                            ///< choices per request
  /// Prompts x n per request: what one group admits at once (serve sets it from the cluster's
  /// scheduler.max_num_running + max_num_queued and router.max_live_requests; not a key).
  /// A request's choices go to one group together, so past this they could never all start.
  std::int64_t max_choices = 1 << 20;
  int max_top_logprobs = 20;
  int max_stop = 16;          ///< stop strings per request
  int max_stop_bytes = 256;   ///< bytes per stop string
  int max_json_depth = 64;    ///< nesting of a request body
  /// Nesting of a response_format's schema (response_format.json_schema.schema), counted from
  /// the schema itself: schemas may nest deeper than the rest of a body. The schema parser
  /// allows 512 levels in all; the compiler refuses subschemas nested more than 400 deep.
  int max_schema_depth = 500;
  int header_timeout_s = 60;  ///< idle connection / slow headers are closed after this
  int retry_after_s = 1;      ///< Retry-After of 429 and 503 answers
  /// After SIGINT/SIGTERM: how long requests in flight may still finish (new ones get 503);
  /// those left are then aborted (finish_reason "abort"). 0 = abort them at once.
  int drain_timeout_s = 30;
  /// Whitespace a json_object / json_schema response_format allows between JSON tokens: "any"
  /// (JSON's, as vLLM and OpenAI), "compact" (none, vLLM's disable_any_whitespace) or "pretty"
  /// (at most a newline and 20 spaces or tabs: bounded, unlike "any").
  std::string json_whitespace = "any";
  /// Keys a json_schema response_format's (or a forced tool call's) object schema does not
  /// declare, and array items after prefixItems, where the schema says nothing of them: "forbid"
  /// (not written, as xgrammar's strict mode in vLLM and SGLang, and llama.cpp) or "allow" (JSON
  /// Schema's default: additionalProperties true).
  std::string json_schema_extra_keys = "forbid";
  /// vLLM's --reasoning-parser: "" (off, the default), "deepseek_r1" or "deepseek_v3"
  /// (server/reasoning.hpp): chat output before `</think>` goes to the message's `reasoning`.
  std::string reasoning_parser;
};

/// Splits `overrides` into server.* (applied here) and the rest (for the cluster file).
struct split_overrides {
  std::vector<std::string> server;
  std::vector<std::string> cluster;
};
split_overrides split_server_overrides(const std::vector<std::string>& overrides);

/// The cluster file's text without its [server] table (the cluster parser rejects unknown
/// tables), and the settings that table and the overrides give. Throws di::error naming the
/// file and the key for an unknown key or a bad value.
struct server_file {
  server_settings settings;
  std::string cluster_toml;  ///< the rest of the file
};
server_file read_server_file(const std::string& path,
                             const std::vector<std::string>& server_overrides);

/// Applies "server.key=value" overrides and DEEPINFER_API_KEY (appended to api_keys).
void apply_server_overrides(server_settings& s, const std::vector<std::string>& overrides);
void apply_server_env(server_settings& s);

/// Throws di::error naming the first setting out of range.
void validate(const server_settings& s);

/// The threads compiling request grammars: server.grammar_threads, or where it is 0, half of
/// `hardware_threads` rounded up, at least 2 and at most 64 (vLLM sizes its grammar pool the
/// same way). Compiles are CPU-bound, so more threads than cores only slow each other and the
/// steps; 2 on a large host let two slow new schemas hold up every other new one.
int num_grammar_threads(const server_settings& s, unsigned hardware_threads);

}  // namespace di::server
