// Reasoning ("thinking") text in the chat output, as vLLM's `--reasoning-parser deepseek_r1` /
// `deepseek_v3` read it: DeepSeek R1 / V3.1-style models think first, then write `</think>`
// and the answer. The parser splits the output into reasoning (before the first `</think>`)
// and content (after it), incrementally for streams; an output with no `</think>` is all
// reasoning (cut off while thinking). The markers are matched as text: in the DeepSeek-V3
// vocabulary they are no single tokens.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace di::server {

/// The markers around a DeepSeek model's reasoning.
namespace deepseek_think_format {
inline constexpr std::string_view begin = "<think>";
inline constexpr std::string_view end = "</think>";
}  // namespace deepseek_think_format

/// `serve --reasoning-parser` / server.reasoning_parser.
enum class reasoning_parser_kind {
  none,         ///< the output is content (the default, as in vLLM)
  deepseek_r1,  ///< every chat output is split
  deepseek_v3,  ///< split when chat_template_kwargs asks for thinking, else content
};

/// The names serve accepts, for error messages.
inline constexpr std::string_view reasoning_parser_names = "deepseek_r1, deepseek_v3";

/// The parser of `name` ("" = none); nullopt for an unknown name.
std::optional<reasoning_parser_kind> reasoning_parser_of(std::string_view name);

/// Whether a chat request's output is split: deepseek_r1 always; deepseek_v3 when
/// `chat_template_kwargs` has `thinking` or `enable_thinking` true by Python's truth value, as
/// vLLM's DeepSeek V3 parser reads both (`bool(...)`: true, 1, "yes" and even "false" are true;
/// false, 0, "", null, [] and {} are not) and as V3.1's template reads `thinking`.
bool splits_reasoning(reasoning_parser_kind kind, const nlohmann::ordered_json& chat_kwargs);

/// What a piece of output adds to the message: reasoning, then content.
struct reasoning_delta {
  std::string reasoning;
  std::string content;
};

/// Reads output as it comes. A `<think>` that opens the output is dropped (the model writes it
/// when its prompt did not); reasoning runs to the first `</think>`, which is dropped too, and
/// everything after it is content, `<think>` and `</think>` included. Text that may still turn
/// out to be a marker is held back, so pushing a text in any pieces gives what pushing it whole
/// gives.
class reasoning_parser {
 public:
  reasoning_delta push(std::string_view text);
  /// The end of the output: what was held back (reasoning: no `</think>` came).
  reasoning_delta finish();

 private:
  enum class stage { start, reasoning, content };
  stage stage_ = stage::start;
  std::string pending_;  ///< text not released yet
};

/// A whole output's reasoning and content (push + finish).
reasoning_delta split_reasoning(std::string_view text);

/// The response_format spec (runtime/grammar/response_format.hpp's inline syntax) under which
/// the output runs free until `</think>` -- the reasoning -- and then follows `spec`.
std::string after_reasoning_spec(const std::string& spec);

/// Test hook DEEPINFER_TEST_GRAMMAR_OVER_REASONING=1 (read once): a response_format beside a
/// reasoning parser constrains the whole output, reasoning included, instead of the answer
/// after `</think>` -- so end-to-end tests can make a random-weight model write the markers.
bool grammar_over_reasoning_allowed();

}  // namespace di::server
