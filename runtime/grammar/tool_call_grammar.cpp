// Tool-call grammars (see tool_call_grammar.hpp): each call's schema compiles on its own and is
// imported into one grammar under a prefix of its own, so that rule names never collide.
#include "runtime/grammar/tool_call_grammar.hpp"

#include "common/error.hpp"
#include "runtime/grammar/compiled_grammar.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

namespace di::grammar {

namespace {

using json = nlohmann::ordered_json;

std::string text_member(const json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  DI_CHECK(it != j.end() && it->is_string(), "tool calls format: {}'{}' must be a string", where,
           key);
  return it->get<std::string>();
}

}  // namespace

grammar tool_calls_grammar(const json& spec, const json_schema_options& options) {
  DI_CHECK(spec.is_object(), "tool calls format: the spec must be a JSON object");
  const auto calls = spec.find("calls");
  DI_CHECK(calls != spec.end() && calls->is_array() && !calls->empty(),
           "tool calls format: 'calls' must be a non-empty list");
  std::uint32_t max_calls = 0;
  if (const auto m = spec.find("max_calls"); m != spec.end()) {
    DI_CHECK(m->is_number_unsigned(), "tool calls format: 'max_calls' must be a whole number");
    max_calls = std::uint32_t(std::min<std::uint64_t>(m->get<std::uint64_t>(), UINT32_MAX - 1));
  }
  grammar g;
  std::vector<expr_id> alternatives;
  for (std::size_t i = 0; i < calls->size(); ++i) {
    const json& call = (*calls)[i];
    const std::string where = fmt::format("calls[{}].", i);
    DI_CHECK(call.is_object() && call.contains("schema"),
             "tool calls format: '{}' must be an object with a 'schema'", where);
    json_schema_result schema;
    try {
      schema = compile_json_schema(call["schema"], options);
    } catch (const di::error& e) {
      const auto name = call.find("name");  // optional: how errors name the call
      if (name != call.end() && name->is_string())
        DI_FAIL("the parameters of '{}': {}", name->get<std::string>(), e.what());
      DI_FAIL("tool call {} ({}): {}", i, text_member(call, "begin", where), e.what());
    }
    const rule_id args = g.import_rules(schema.g, fmt::format("call{}_", i));
    alternatives.push_back(g.sequence({g.literal(text_member(call, "begin", where)), g.ref(args),
                                       g.literal(text_member(call, "end", where))}));
  }
  const rule_id one = g.fresh_rule("tool_call");
  g.define_rule(one, g.choice(std::move(alternatives)));
  const expr_id more =
      g.repeat(g.sequence({g.literal(text_member(spec, "separator", "")), g.ref(one)}), 0,
               max_calls == 0 ? k_unbounded : max_calls - 1);
  const rule_id root = g.fresh_rule("tool_calls");
  g.define_rule(root, g.sequence({g.literal(text_member(spec, "begin", "")), g.ref(one), more,
                                  g.literal(text_member(spec, "end", ""))}));
  g.set_root(root);
  return g;
}

grammar tool_calls_grammar_text(std::string_view spec, const json_schema_options& options) {
  exact_json_result doc = parse_json_exact(spec);
  if (!doc.error.empty()) DI_FAIL("tool calls format: the spec is not valid JSON: {}", doc.error);
  if (doc.inexact) DI_FAIL("{}", inexact_schema_number(*doc.inexact));
  return tool_calls_grammar(doc.value, options);
}

}  // namespace di::grammar
