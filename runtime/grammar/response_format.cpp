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
  if (kind == "regex") {
    DI_CHECK(colon != std::string::npos, "response format 'regex:' needs a pattern");
    return {format_kind::regex, arg};
  }
  if (kind == "ebnf") {
    DI_CHECK(!arg.empty(), "response format 'ebnf:' needs a grammar file");
    return {format_kind::ebnf, read_text_file(arg)};
  }
  DI_FAIL("unknown response format '{}' (expected regex:PATTERN or ebnf:FILE)", spec);
}

std::shared_ptr<const compiled_grammar> compile_response_format(const response_format& f) {
  switch (f.kind) {
    case format_kind::regex:
      return compiled_grammar::compile(regex_grammar(f.text));
    case format_kind::ebnf:
      return compiled_grammar::compile(parse_grammar_text(f.text));
  }
  DI_FAIL("unknown response format kind");
}

std::shared_ptr<const token_grammar> grammar_cache::get(
    const response_format& f, const std::shared_ptr<const token_vocabulary>& v) {
  std::string key = std::to_string(int(f.kind)) + ":" +
                    std::to_string(reinterpret_cast<std::uintptr_t>(v.get())) + ":" + f.text;
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
