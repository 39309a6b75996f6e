// The grammar of a model's tool calls, for an API that demands one (tool_choice "required" or
// a named function): the calls' opening text, one or more calls separated by a separator, the
// closing text; each call is its own opening (the chat format's markers and the function's
// name), JSON arguments valid against the function's parameters schema, and its closing. The
// texts come from the caller, who knows the chat format; this only composes the grammars.
#pragma once

#include "runtime/grammar/json_schema.hpp"

#include <nlohmann/json.hpp>

#include <string_view>

namespace di::grammar {

/// `spec`: {"begin": TEXT, "separator": TEXT, "end": TEXT, "max_calls": N (0: no limit),
/// "calls": [{"begin": TEXT, "schema": SCHEMA, "end": TEXT, "name": NAME (optional, for
/// errors)}, ...]} -- begin, then one to
/// max_calls calls (each one of "calls"), separated, then end. di::error for a malformed spec
/// or a schema that does not compile (naming the call).
grammar tool_calls_grammar(const nlohmann::ordered_json& spec,
                           const json_schema_options& options = {});
/// As above from the spec's JSON text, parsed exactly (a schema's numbers are not rounded).
grammar tool_calls_grammar_text(std::string_view spec, const json_schema_options& options = {});

}  // namespace di::grammar
