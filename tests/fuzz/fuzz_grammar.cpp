// libFuzzer target for the grammar front ends. The first input byte picks EBNF/GBNF/Lark,
// regex or JSON Schema (mod 3; bit 4: lenient, bit 8: compiled for generation); the rest, up to
// a NUL, is the grammar text, and what follows the NUL is fed to the Earley recognizer when the
// grammar compiles. Compilation runs with small state limits so that each input stays fast.
// Success or di::error are the only allowed outcomes; another exception, a sanitizer report or
// a hang is a bug.
#include "common/error.hpp"
#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/earley_parser.hpp"
#include "runtime/grammar/ebnf.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/regex.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

using namespace di::grammar;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string_view all(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string_view text = all.substr(0, all.find('\0'));
  std::string_view input = text.size() < all.size() ? all.substr(text.size() + 1) : std::string_view();
  compile_options o;
  o.max_rule_size = 20'000;
  o.max_rule_states = 5'000;
  o.max_total_states = 20'000;
  o.allow_empty_language = true;
  try {
    grammar g;
    switch (data[0] % 3) {
      case 0: g = parse_grammar_text(text); break;
      case 1: g = regex_grammar(text); break;
      default: {
        json_schema_options so;
        so.max_string_states = 2'000;
        so.lenient = data[0] & 4;
        // generation's grammars differ (one spelling per number, no undeclared keys or items)
        so.use = data[0] & 8 ? json_schema_use::generation : json_schema_use::validation;
        g = compile_json_schema_text(text, so).g;
      }
    }
    auto cg = compiled_grammar::compile(g, o);
    earley_parser p(*cg);
    std::size_t n = p.push_all(input);
    if (n > input.size()) __builtin_trap();
    p.pop(n);
    if (p.num_bytes() != 0) __builtin_trap();
  } catch (const di::error&) {
  }
  return 0;
}
