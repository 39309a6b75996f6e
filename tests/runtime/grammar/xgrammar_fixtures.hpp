// Grammars and patterns that xgrammar's tests define in their Python source (the shared JSONL
// cases carry only the per-case arguments). Transcribed from mlc-ai/xgrammar tests/python
// (Apache-2.0) as test data: test_grammar_matcher_ebnf.py, test_grammar_matcher_regex.py,
// test_regex_converter.py.
#pragma once

#include <map>
#include <string>

namespace di::grammar::test {

/// test name -> the grammar (EBNF) or regex that the test applies to its arguments.
inline const std::map<std::string, std::string>& xgrammar_ebnf_fixtures() {
  static const std::map<std::string, std::string> m = {
      {"test_repetition", "root ::= rule {2, 3}\nrule ::= (\"a\" | [bc] {4,})\n"},
      {"test_repetition_with_empty",
       "root ::= rule {2, 3} \"d\"?\nrule ::= (\"a\" | [bc] {4,}) | \"\"\n"},
      {"json", R"(root ::= basic_array | basic_object
basic_any ::= basic_number | basic_string | basic_boolean | basic_null | basic_array | basic_object
basic_integer ::= ("0" | "-"? [1-9] [0-9]*) ".0"?
basic_number ::= ("0" | "-"? [1-9] [0-9]*) ("." [0-9]+)? ([eE] [+-]? [0-9]+)?
basic_string ::= (([\"] basic_string_1 [\"]))
basic_string_1 ::= "" | [^"\\\x00-\x1F] basic_string_1 | "\\" escape basic_string_1
escape ::= ["\\/bfnrt] | "u" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]
basic_boolean ::= "true" | "false"
basic_null ::= "null"
basic_array ::= "[" ("" | ws basic_any (ws "," ws basic_any)*) ws "]"
basic_object ::= "{" ("" | ws basic_string ws ":" ws basic_any ( ws "," ws basic_string ws ":" ws basic_any)*) ws "}"
ws ::= [ \n\t]*
)"},
  };
  return m;
}

inline const std::map<std::string, std::string>& xgrammar_regex_fixtures() {
  static const std::map<std::string, std::string> m = {
      {"test_repetition", "(a|[bc]{4,}){2,3}"},
      {"test_date_time",
       R"(^\d\d\d\d-(0[1-9]|1[0-2])-([0-2]\d|3[01])T([01]\d|2[0123]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0123]):[0-5]\d)$)"},
      {"test_date", R"(^\d\d\d\d-(0[1-9]|1[0-2])-([0-2]\d|3[01])$)"},
      {"test_time",
       R"(^([01]\d|2[0123]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0123]):[0-5]\d)$)"},
      {"test_email",
       R"(^([\w!#$%&'*+/=?^_`{|}~-]+(\.[\w!#$%&'*+/=?^_`{|}~-]+)*|"([\w!#$%&'*+/=?^_`{|}~\-(),:;<>@[\].]|\\")+")@(([a-z0-9]([a-z0-9-]*[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]*[a-z0-9])?)$)"},
  };
  return m;
}

}  // namespace di::grammar::test
