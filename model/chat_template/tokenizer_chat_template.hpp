// Rendering a conversation with a tokenizer folder's chat template the way transformers'
// apply_chat_template does: which template (by name, "tool_use" when tools are given, else
// "default"), which variables the template sees (messages, tools, documents,
// add_generation_prompt, bos_token/eos_token and the other special tokens, extra kwargs),
// and continue_final_message's trimming of the rendered prompt.
#pragma once

#include "model/chat_template/chat_template.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace di {

/// One apply_chat_template call. Keys keep their order (it shows in `tools | tojson`).
struct chat_request {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  ///< [{"role", "content"}...]
  nlohmann::ordered_json tools;         ///< JSON schemas of callable tools; null when none
  nlohmann::ordered_json documents;     ///< retrieval documents; null when none
  bool add_generation_prompt = true;    ///< end with the assistant header
  bool continue_final_message = false;  ///< end inside the last message (prefill)
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  ///< extra template variables
  std::string
      template_name;  ///< empty: "tool_use" if tools are given and it exists, else "default"
};

/// A tokenizer folder's chat template(s) with the special tokens the templates refer to.
class tokenizer_chat_template {
 public:
  /// Loads DIR/tokenizer_config.json. As in transformers, DIR/chat_template.jinja replaces
  /// the config's template and DIR/additional_chat_templates/NAME.jinja adds named ones.
  /// Throws di::error naming the file and, for syntax errors, the template and position.
  static tokenizer_chat_template load(const std::string& tokenizer_dir);
  /// From a parsed tokenizer_config.json object ("chat_template" plus special tokens).
  static tokenizer_chat_template from_config(const nlohmann::ordered_json& config);
  /// A template given as source; special tokens come from `config` (may be an empty object).
  static tokenizer_chat_template from_source(
      std::string_view source,
      const nlohmann::ordered_json& config = nlohmann::ordered_json::object());

  /// Renders `request`; throws chat_template_error from the template, di::error for a bad
  /// request (unknown template name, continue_final_message without a final message).
  std::string apply(const chat_request& request, const chat_template_limits& limits = {}) const;

  /// The template apply() would use for `name` (empty: the default choice) and tools.
  const chat_template& select(std::string_view name, bool has_tools) const;
  std::vector<std::string> template_names() const;
  /// bos_token, eos_token, ... as strings (additional_special_tokens as a list).
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  tokenizer_chat_template() = default;
  void add_template(std::string name, std::string_view source);

  std::vector<std::pair<std::string, chat_template>> templates_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

}  // namespace di
