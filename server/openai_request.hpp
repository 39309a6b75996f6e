// Parsing and validating the bodies of POST /v1/completions and /v1/chat/completions (the
// OpenAI schema subset in ../shared/testdata/openai/, plus vLLM's extensions top_k, min_p,
// repetition_penalty, stop_token_ids, ignore_eos, min_tokens, skip_special_tokens), and
// response_format (json_object, json_schema, plus regex and ebnf). Every
// error is an api_error(400) naming the parameter; nothing here touches the cluster.
#pragma once

#include "runtime/sampling_params.hpp"
#include "server/server_config.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace di::server {

enum class api_kind { completion, chat };

/// One prompt of a completions request: text, or token ids.
struct prompt_input {
  std::string text;
  std::vector<std::int32_t> ids;  ///< used when text is empty
};

struct generation_request {
  api_kind kind = api_kind::completion;
  std::string model;                  ///< empty: the served model
  std::vector<prompt_input> prompts;  ///< completions: one or more; chat: filled by render
  nlohmann::ordered_json messages;    ///< chat only
  nlohmann::ordered_json chat_kwargs = nlohmann::ordered_json::object();  ///< chat_template_kwargs
  nlohmann::ordered_json tools;  ///< chat only: tool schemas for the template; null = none
  int n = 1;
  bool stream = false;
  bool include_usage = false;     ///< stream_options.include_usage
  bool echo = false;              ///< completions only
  std::optional<int> logprobs;    ///< top-N per token (completions: logprobs; chat: top_logprobs)
  bool return_token_ids = false;  ///< vLLM extension: token ids in every choice
  std::string user;
  runtime::sampling_params params;  ///< max_tokens, stop, seed, ...
};

/// Rejects bodies nested deeper than `max_depth` before they are parsed (parsing and printing
/// are recursive); `body` need not be valid JSON.
bool exceeds_depth(std::string_view body, int max_depth);

/// Parses a body (400 for invalid JSON, UTF-8 or structure, naming the parameter).
nlohmann::json parse_body(std::string_view body, const server_settings& limits);

generation_request parse_completion_request(const nlohmann::json& body,
                                            const server_settings& limits);
generation_request parse_chat_request(const nlohmann::json& body, const server_settings& limits);

}  // namespace di::server
