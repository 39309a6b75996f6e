// Chat templates: a sandboxed interpreter for the Jinja subset that Hugging Face chat
// templates use (DeepSeek, Qwen, Llama), rendering byte-for-byte what transformers'
// apply_chat_template renders. Templates cannot read files, import other templates, mutate
// their inputs or run unboundedly. For a tokenizer folder, see tokenizer_chat_template.hpp.
#pragma once

#include "model/chat_template/template_error.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace di {

namespace jinja {
struct template_ast;
}

/// Bounds on one render; exceeding any of them raises chat_template_error (kind render).
struct chat_template_limits {
  std::size_t max_steps = 10'000'000;        ///< statements + loop iterations + calls
  std::size_t max_output_bytes = 64u << 20;  ///< the output and any string or list built
  /// Every string and list built during a render together (string bytes, 32 a list item):
  /// bounds the work done inside single steps, e.g. a huge string made in each iteration.
  std::size_t max_built_bytes = 256u << 20;
  int max_call_depth = 64;                   ///< nested macro calls
  int max_nesting_depth = 1000;              ///< statements + expressions being evaluated at once
                                             ///< (each costs < 0.5 KiB of stack)
};

/// A parsed chat template. Immutable; render() may be called concurrently.
class chat_template {
 public:
  /// Parses Jinja source with transformers' settings (trim_blocks, lstrip_blocks). Throws
  /// chat_template_error (kind syntax) whose message gives LINE:COLUMN and the problem.
  static chat_template parse(std::string_view source);

  /// Renders with the keys of `context` (a JSON object) as template variables. An
  /// nlohmann::json object has its keys sorted; pass ordered_json to keep key order (it
  /// matters for `tools | tojson`). Throws chat_template_error (render or raised).
  std::string render(const nlohmann::json& context, const chat_template_limits& limits = {}) const;
  std::string render(const nlohmann::ordered_json& context,
                     const chat_template_limits& limits = {}) const;

 private:
  explicit chat_template(std::shared_ptr<const jinja::template_ast> ast) : ast_(std::move(ast)) {}
  template <class Json>
  std::string render_json(const Json& context, const chat_template_limits& limits) const;

  std::shared_ptr<const jinja::template_ast> ast_;
};

}  // namespace di
