// Helpers for the grammar tests: compile a grammar text and ask whether a string is a
// complete sentence, byte by byte through the Earley recognizer.
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/earley_parser.hpp"
#include "runtime/grammar/ebnf.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/regex.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace di::grammar::test {

inline bool accepts(const compiled_grammar& g, std::string_view text) {
  earley_parser p(g);
  return p.push_all(text) == text.size() && p.is_accepting();
}

inline std::shared_ptr<const compiled_grammar> compile_ebnf(std::string_view text) {
  return compiled_grammar::compile(parse_grammar_text(text));
}

inline std::shared_ptr<const compiled_grammar> compile_re(std::string_view pattern,
                                                          const regex_options& o = {}) {
  return compiled_grammar::compile(regex_grammar(pattern, o));
}

/// A JSON Schema `{"type": "string", "pattern": P}`, compiled with `o`.
inline std::shared_ptr<const compiled_grammar> pattern_schema(const std::string& pattern,
                                                              const compile_options& o = {}) {
  const nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", pattern}};
  return compiled_grammar::compile(compile_json_schema_text(schema.dump()).g, o);
}

/// Whether a JSON Schema's grammar takes `text` written as a JSON string.
inline bool pattern_accepts(const compiled_grammar& g, const std::string& text) {
  return accepts(g, nlohmann::json(text).dump());
}

}  // namespace di::grammar::test
