// What a request asks its output to match (`--response-format`, later the HTTP API's
// response_format), and the one entry point that turns it into a compiled grammar. Compiled
// token grammars are cached by (kind, text, options) so a repeated schema compiles once.
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/token_grammar.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace di::grammar {

enum class format_kind { json_schema, json_object, regex, ebnf };

struct response_format {
  format_kind kind = format_kind::regex;
  std::string text;  ///< the schema, pattern or grammar text itself (empty for json_object)
  json_schema_options schema;
};

/// Parses the CLI syntax: "json_schema:FILE", "json_object", "regex:PATTERN" or "ebnf:FILE"
/// (files are read).
response_format parse_response_format(const std::string& spec);

/// Front end + compilation (di::error with a clear message on bad input).
std::shared_ptr<const compiled_grammar> compile_response_format(const response_format& f,
                                                                const compile_options& options = {});

/// Token grammars keyed by format and vocabulary; thread-safe; compiles outside the lock.
class grammar_cache {
 public:
  std::shared_ptr<const token_grammar> get(const response_format& f,
                                           const std::shared_ptr<const token_vocabulary>& v);
  std::size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const token_grammar>> entries_;
};

}  // namespace di::grammar
