// Response formats: CLI parsing, dispatch to the front ends, and the compiled-grammar cache.
#include "runtime/grammar/response_format.hpp"

#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "runtime/grammar/ebnf.hpp"
#include "runtime/grammar/regex.hpp"

namespace di::grammar {

response_format parse_response_format(const std::string& spec) {
  auto colon = spec.find(':');
  std::string kind = spec.substr(0, colon);
  std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "json_schema") {
    DI_CHECK(!arg.empty(), "response format 'json_schema:' needs a schema file");
    return {format_kind::json_schema, read_text_file(arg), {}};
  }
  if (kind == "json_object") {
    DI_CHECK(arg.empty(), "response format 'json_object' takes no argument");
    return {format_kind::json_object, "", {}};
  }
  if (kind == "regex") {
    DI_CHECK(colon != std::string::npos, "response format 'regex:' needs a pattern");
    return {format_kind::regex, arg, {}};
  }
  if (kind == "ebnf") {
    DI_CHECK(!arg.empty(), "response format 'ebnf:' needs a grammar file");
    return {format_kind::ebnf, read_text_file(arg), {}};
  }
  DI_FAIL("unknown response format '{}' (expected json_schema:FILE, json_object, regex:PATTERN or ebnf:FILE)", spec);
}

std::shared_ptr<const compiled_grammar> compile_response_format(const response_format& f,
                                                                const compile_options& o) {
  switch (f.kind) {
    case format_kind::json_schema: return compiled_grammar::compile(compile_json_schema_text(f.text, f.schema).g, o);
    case format_kind::json_object: return compiled_grammar::compile(json_object_grammar(f.schema), o);
    case format_kind::regex: return compiled_grammar::compile(regex_grammar(f.text), o);
    case format_kind::ebnf: return compiled_grammar::compile(parse_grammar_text(f.text), o);
  }
  DI_FAIL("unknown response format kind");
}

std::shared_ptr<const token_grammar> grammar_cache::get(
    const response_format& f, const std::shared_ptr<const token_vocabulary>& v) {
  // The vocabulary's address is part of the key: an entry is only valid for the vocabulary it
  // was built with (the cache holds no reference to it, callers keep it alive).
  std::string key = std::to_string(int(f.kind)) + ":" + std::to_string(reinterpret_cast<std::uintptr_t>(v.get())) +
                    ":" + std::to_string(int(f.schema.whitespace)) + std::to_string(f.schema.lenient) +
                    std::to_string(f.schema.format_assertion) + ":" + f.text;
  {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(key); it != entries_.end()) return it->second;
  }
  auto tg = token_grammar::create(compile_response_format(f), v);
  std::lock_guard lock(mutex_);
  return entries_.emplace(key, tg).first->second;
}

std::size_t grammar_cache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace di::grammar
