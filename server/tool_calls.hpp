// Tool calls in the chat output, in the format of DeepSeek V3's chat template (what vLLM's
// `--tool-call-parser deepseek_v3` reads):
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//   \n<｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>
// The parser turns the output into message content (the text before the calls) and calls,
// incrementally for streams; text that does not parse stays content. The grammar spec makes a
// model write such calls (tool_choice "required" or a named function).
#pragma once

#include "server/openai_request.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace di::server {

/// The markers of DeepSeek V3's chat template around assistant tool calls.
namespace deepseek_tool_format {
inline constexpr std::string_view calls_begin = "<｜tool▁calls▁begin｜>";
inline constexpr std::string_view call_begin = "<｜tool▁call▁begin｜>";
inline constexpr std::string_view sep = "<｜tool▁sep｜>";
inline constexpr std::string_view call_end = "<｜tool▁call▁end｜>";
inline constexpr std::string_view calls_end = "<｜tool▁calls▁end｜>";
}  // namespace deepseek_tool_format

struct tool_call {
  std::string name;
  std::string arguments;  ///< a JSON object's text, as the model wrote it
  bool operator==(const tool_call&) const = default;
};

/// What a piece of output adds to the message: content, then whole calls.
struct tool_call_delta {
  std::string content;
  std::vector<tool_call> calls;
};

/// Reads output as it comes. Content is released once it cannot be the start of the calls; a
/// call once it is complete (its arguments a whole JSON object), so a stream never sends a
/// call that the whole text would not have. Once calls began, the text after them (other than
/// separators and the closing marker) is content, and so is everything when the first call
/// does not parse: pushing a text in any pieces gives what pushing it whole gives.
class tool_call_parser {
 public:
  /// `max_calls`: calls kept (parallel_tool_calls false: 1; later ones are read and dropped);
  /// 0: no limit.
  explicit tool_call_parser(std::size_t max_calls = 0) : max_calls_(max_calls) {}

  tool_call_delta push(std::string_view text);
  /// The end of the output: what was held back.
  tool_call_delta finish();
  /// Calls released so far.
  std::size_t num_calls() const { return num_kept_; }

 private:
  enum class stage { content, calls, rest };  ///< rest: the remaining text is content
  tool_call_delta advance(bool is_final);
  void read_calls(tool_call_delta& d, bool is_final);

  std::size_t max_calls_;
  stage stage_ = stage::content;
  std::string pending_;  ///< text not released yet
  std::size_t num_read_ = 0;
  std::size_t num_kept_ = 0;
};

/// Why a function named `name` could not be called in this format ("" when it can): the parser
/// reads a call's name up to its newline, trimmed, and takes none that is empty, longer than
/// max_tool_name_bytes or holds a marker's "<｜". A call of such a function -- forced by
/// tool_choice "required" or the function's name -- was written under a grammar and then not
/// read: the answer was the raw markup as content, no tool_calls, finish_reason "stop".
std::string unreadable_tool_name(std::string_view name);

/// The longest function name a call may carry (bytes).
inline constexpr std::size_t max_tool_name_bytes = 256;

/// A whole output's content and calls (push + finish).
tool_call_delta parse_tool_calls(std::string_view text, std::size_t max_calls = 0);

/// The response_format spec (runtime/grammar/tool_call_grammar.hpp) under which a model writes
/// one or more calls in this format (one only unless `parallel`) of the functions in `tools`,
/// or of the one named `only` when it is not empty, with arguments valid against each
/// function's `parameters` (none: an empty object). `json_modifier` is the JSON modifiers of
/// the spec ("", "+compact", "+pretty", "+compact+extra_keys", ...). The schemas compile for
/// generation, so an object schema silent about other keys takes only those it declares unless
/// the modifiers say "+extra_keys" (json_extra_keys).
std::string tool_call_grammar_spec(const request_json& tools, const std::string& only,
                                   bool parallel, const std::string& json_modifier);

}  // namespace di::server
