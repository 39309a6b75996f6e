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

namespace di::tok {
class tokenizer;
}  // namespace di::tok

namespace di::server {

/// A request body as parsed: objects keep their keys in the body's order.
using request_json = nlohmann::ordered_json;

enum class api_kind { completion, chat };

/// One prompt of a completions request: text, or token ids.
struct prompt_input {
  std::string text;
  std::vector<std::int32_t> ids;  ///< the prompt when given; empty: `text` is ("" = BOS alone)
};

struct generation_request {
  api_kind kind = api_kind::completion;
  std::string model;                  ///< empty: the served model
  std::vector<prompt_input> prompts;  ///< completions: one or more; chat: filled by render
  nlohmann::ordered_json messages;    ///< chat only
  nlohmann::ordered_json chat_kwargs = nlohmann::ordered_json::object();  ///< chat_template_kwargs
  nlohmann::ordered_json tools;      ///< chat only: tool schemas for the template; null = none
  nlohmann::ordered_json documents;  ///< chat only: vLLM's documents for the template; null = none
  /// chat only: the output's tool calls are parsed (tools given, tool_choice not "none")
  bool parses_tool_calls = false;
  /// chat only: tool_choice "required" or a named function; params.response_format holds the
  /// grammar of the calls (server/tool_calls.hpp)
  bool forces_tool_calls = false;
  bool parallel_tool_calls = true;      ///< chat only: false: at most one call
  /// chat only: the output is split into reasoning and content (server.reasoning_parser, and
  /// for deepseek_v3 chat_template_kwargs asking for thinking; server/reasoning.hpp)
  bool splits_reasoning = false;
  bool add_generation_prompt = true;    ///< chat only: end the prompt with the assistant header
  bool continue_final_message = false;  ///< chat only: the reply continues the last message
  int n = 1;
  bool stream = false;
  bool include_usage = false;     ///< stream_options.include_usage
  bool echo = false;              ///< completions only
  std::optional<int> logprobs;    ///< top-N per token (completions: logprobs; chat: top_logprobs)
  bool return_token_ids = false;  ///< vLLM extension: token ids in every choice
  /// vLLM extension: logprobs name their tokens "token_id:N" instead of by their text
  bool return_tokens_as_token_ids = false;
  std::string user;
  runtime::sampling_params params;  ///< max_tokens, stop, seed, ...
  /// The field that set params.max_tokens, for error messages: chat's max_completion_tokens.
  std::string max_tokens_name = "max_tokens";
};

/// What a body's text shows before it is parsed; `body` need not be valid JSON.
struct body_shape {
  int depth = 0;  ///< nesting; the scan stops once it passes its limit
  /// Whether the nesting passed its limit: max_depth, or inside a response_format's schema
  /// (response_format.json_schema.schema) max_schema_depth counted from the schema itself.
  bool too_deep = false;
  int depth_limit = 0;         ///< the limit it passed (max_depth or max_schema_depth)
  std::string too_deep_at;     ///< where: the path of the value that passed it, shortened
  std::string too_deep_field;  ///< the field it belongs to (top-level, or the schema's path)
  /// The sum over its objects of members squared: the parse keeps key order (a schema's
  /// properties are written in its order, a tool's too), and inserting a key into such an
  /// object scans the object's keys.
  double member_pairs = 0;
};
body_shape measure_body(std::string_view body, int max_depth, int max_schema_depth = 0);

/// Bodies whose objects' members squared add up to more are refused before parsing (one object
/// of about 10,000 members fits and takes ~0.1 s to parse; real requests have a few hundred).
inline constexpr double max_body_member_pairs = 1e8;

/// Parses a body in its key order (400 for invalid JSON, UTF-8 or structure, nesting deeper
/// than limits.max_json_depth -- a response_format's schema: limits.max_schema_depth below
/// itself -- or objects past max_body_member_pairs, naming the parameter).
request_json parse_body(std::string_view body, const server_settings& limits);

generation_request parse_completion_request(const request_json& body,
                                            const server_settings& limits);
generation_request parse_chat_request(const request_json& body, const server_settings& limits);

/// A token-id prompt holds only ids `tok` has a token for: 400 (param "prompt") naming the
/// first other -- outside the tokenizer's ids, or in a gap of them (tokenizer.json lists no
/// token with that id), which the router's range check lets through. Such a prompt's echo was
/// "" and its logprobs named the token "", silently.
void check_prompt_ids(const generation_request& r, const tok::tokenizer& tok);

}  // namespace di::server
