// Conformance of the EBNF, Lark and regex front ends on the shared cases from llama.cpp and
// xgrammar (../shared/testdata/grammars). Cases needing a model tokenizer or xgrammar-only
// extensions (structural tags, special-token sets, suffix/stop attributes) are out of scope
// and counted as not applicable; every applicable case must pass.
#include "common/error.hpp"
#include "tests/runtime/grammar/conformance_util.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"
#include "tests/runtime/grammar/xgrammar_fixtures.hpp"

#include <set>

using namespace di::grammar;
using namespace di::grammar::test;

namespace {

std::string str(const nlohmann::json& j) {
  return j.is_string() ? j.get<std::string>() : j.dump();
}

/// Compiles and checks each string; a compile error fails every string of the case.
void check_strings(tally& t, const std::string& label, const std::function<grammar()>& build,
                   const nlohmann::json& accepted, const nlohmann::json& rejected) {
  std::shared_ptr<const compiled_grammar> g;
  std::string error;
  try {
    g = compiled_grammar::compile(build());
  } catch (const di::error& e) {
    error = e.what();
  }
  for (const auto& s : accepted)
    t.record(g && accepts(*g, str(s)),
             label + " should accept " + str(s) + (error.empty() ? "" : " (" + error + ")"));
  for (const auto& s : rejected)
    t.record(g && !accepts(*g, str(s)),
             label + " should reject " + str(s) + (error.empty() ? "" : " (" + error + ")"));
}

void expect_error(tally& t, const std::string& label, const std::function<grammar()>& build) {
  bool failed = false;
  try {
    compiled_grammar::compile(build());
  } catch (const di::error&) {
    failed = true;
  }
  t.record(failed, label + " should not compile");
}

tally llamacpp_gbnf() {
  tally t{"llama.cpp GBNF integration cases"};
  for (const auto& r : read_jsonl(
           di::test::shared_path("testdata/grammars/llamacpp_grammar_integration_cases.jsonl"))) {
    if (r["kind"] != "gbnf") continue;
    std::string text = r["grammar"];
    check_strings(
        t, r["name"], [&] { return parse_ebnf(text); }, r["passing"], r["failing"]);
  }
  return t;
}

tally xgrammar_ebnf() {
  tally t{"xgrammar EBNF/Lark cases"};
  const auto& fx = xgrammar_ebnf_fixtures();
  for (const auto& r :
       read_jsonl(di::test::shared_path("testdata/grammars/xgrammar_ebnf_cases.jsonl"))) {
    std::string test = r["test"];
    const auto& a = r["args"];
    std::string label = test + "#" + std::to_string(r["case_index"].get<int>());
    auto ebnf = [](std::string text) { return [text] { return parse_grammar_text(text); }; };
    if (test == "test_repetition" || test == "test_repetition_with_empty") {
      check_strings(t, label, ebnf(fx.at(test)),
                    a["accepted"] ? nlohmann::json{a["input"]} : nlohmann::json::array(),
                    a["accepted"] ? nlohmann::json::array() : nlohmann::json{a["input"]});
    } else if (test == "test_json_accept" || test == "test_json_pressure") {
      check_strings(t, label, ebnf(fx.at("json")), {a.begin().value()}, nlohmann::json::array());
    } else if (test == "test_json_refuse") {
      check_strings(t, label, ebnf(fx.at("json")), nlohmann::json::array(), {a.begin().value()});
    } else if (test == "test_sparse_end_state_fsm_operations") {
      check_strings(t, label, ebnf(a["grammar_str"]), a["accepted_inputs"], a["rejected_inputs"]);
    } else if (test == "test_lark_repetition_forms") {
      check_strings(t, label, ebnf(a["grammar"]), a["accepted"], a["rejected"]);
    } else if (test == "test_lark_common_imports") {
      std::string name = a["common_name"];
      check_strings(t, label, ebnf("%import common." + name + "\nstart: " + name), a["accepted"],
                    a["rejected"]);
    } else if (test == "test_lexer_parser_errors") {
      expect_error(t, label, ebnf(a["ebnf_str"]));
    } else if (test == "test_lark_errors_are_explicit_and_located" ||
               test == "test_lark_max_tokens_errors") {
      // xgrammar refuses \p{..} under the i flag; we support case-folded Unicode classes.
      if (str(a["grammar"]) != "start: /\\p{L}/i")
        expect_error(t, label + " (" + str(a["grammar"]) + ")", ebnf(a["grammar"]));
    }
  }
  return t;
}

tally xgrammar_regex() {
  tally t{"xgrammar regex cases"};
  const auto& fx = xgrammar_regex_fixtures();
  // xgrammar rejects these valid regexes (its own limitations); we compile them.
  const std::set<std::string> xgrammar_only_refusals = {"a??", "(?:a)"};
  for (const auto& r :
       read_jsonl(di::test::shared_path("testdata/grammars/xgrammar_regex_cases.jsonl"))) {
    std::string test = r["test"];
    const auto& a = r["args"];
    std::string label = test + "#" + std::to_string(r["case_index"].get<int>());
    auto re = [](std::string p) { return [p] { return regex_grammar(p); }; };
    auto one = [](const nlohmann::json& v) { return nlohmann::json::array({v}); };
    auto none = nlohmann::json::array();
    if (test == "test_escape") {
      check_strings(t, label, re(a["regex"]), one(a["instance"]), none);
    } else if (fx.count(test) && a.contains("instance")) {
      bool ok = a["accepted"];
      check_strings(t, label, re(fx.at(test)), ok ? one(a["instance"]) : none,
                    ok ? none : one(a["instance"]));
    } else if (test == "test_repetition") {
      bool ok = a["accepted"];
      check_strings(t, label, re(fx.at(test)), ok ? one(a["input"]) : none,
                    ok ? none : one(a["input"]));
    } else if (test == "test_empty") {
      check_strings(t, label, re(a["regex"]), one(""), one("a"));
    } else if (test == "test_regex_accept") {
      check_strings(t, label, re(a["regex_input_accepted"]), none, none);
      t.record(true, label);
    } else if (test == "test_regex_refuse") {
      std::string p = a["regex_input_refused"];
      if (!xgrammar_only_refusals.count(p)) expect_error(t, label + " " + p, re(p));
    } else if (test == "test_advanced") {
      bool ok = a["is_accepted"];
      check_strings(t, label, re(a["regex_string"]), ok ? one(a["instance"]) : none,
                    ok ? none : one(a["instance"]));
    }
  }
  return t;
}

}  // namespace

TEST_CASE("grammar front ends pass every applicable llama.cpp and xgrammar case") {
  std::vector<tally> all{llamacpp_gbnf(), xgrammar_ebnf(), xgrammar_regex()};
  write_report("grammar_cases.json", all);
  for (const auto& t : all) {
    t.print();
    CHECK(t.passed == t.total);
  }
}
