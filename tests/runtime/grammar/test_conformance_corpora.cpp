// Conformance over the remaining corpora of ../shared/testdata: the Rust regex test suite
// (full-match adaptation of `has_match`: the pattern compiled in search mode must accept the
// whole haystack exactly when Rust finds a match) and xgrammar's JSON Schema cases that carry
// instances (ranges, multipleOf, formats, any JSON). Rates are printed; what compiles must be
// right, and the compile rates must not fall below the floors measured when this was written.
#include "common/error.hpp"
#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/regex.hpp"
#include "tests/runtime/grammar/conformance_util.hpp"
#include "tests/runtime/grammar/grammar_test_util.hpp"
#include "runtime/grammar/json_instance.hpp"

#include <map>

using namespace di::grammar;
using namespace di::grammar::test;

namespace {

struct corpus_result {
  tally compiled;
  tally correct;
  std::size_t skipped = 0;  // cases needing features outside full-match semantics
};

/// Rust's test haystacks for options we do not model (byte-oriented, non-Unicode, sub-ranges,
/// overlapping searches) are skipped; everything else is applicable.
bool applicable_regex_case(const nlohmann::json& r) {
  if (r.value("unicode", true) == false || r.value("utf8", true) == false) return false;
  if (r.contains("bounds") || r.value("unescape", false)) return false;
  if (r.value("search-kind", "leftmost") != "leftmost") return false;
  return true;
}

corpus_result rust_regex_corpus() {
  corpus_result res{{"rust regex corpus: compiled"}, {"rust regex corpus: has_match right (of compiled)"}};
  for (const auto& r : read_jsonl(di::test::shared_path("testdata/regex/rust_regex_tests.jsonl"))) {
    if (!applicable_regex_case(r)) {
      ++res.skipped;
      continue;
    }
    std::string label = r["file"].get<std::string>() + "/" + r["name"].get<std::string>();
    std::string pattern = r["regex"].is_string() ? r["regex"].get<std::string>() : "";
    if (!r["regex"].is_string()) {
      ++res.skipped;  // a regex set: several patterns at once
      continue;
    }
    if (r.value("anchored", false)) pattern = "^(?:" + pattern + ")";
    regex_options o;
    o.search = true;
    o.case_insensitive = r.value("case-insensitive", false);
    std::shared_ptr<const compiled_grammar> g;
    std::string error;
    try {
      compile_options co;
      co.allow_empty_language = true;  // e.g. `[a&&b]`: matches nothing
      g = compiled_grammar::compile(regex_grammar(pattern, o), co);
    } catch (const di::error& e) {
      error = e.what();
    }
    res.compiled.record(g != nullptr, label + " " + pattern + ": " + error);
    if (!g) continue;
    std::string hay = r["haystack"];
    res.correct.record(accepts(*g, hay) == r["has_match"].get<bool>(), label + " " + pattern + " on '" + hay + "'");
  }
  return res;
}

std::shared_ptr<const compiled_grammar> compile_schema(const nlohmann::ordered_json& schema, std::string& error) {
  try {
    compile_options co;
    co.allow_empty_language = true;
    return compiled_grammar::compile(compile_json_schema(schema).g, co);
  } catch (const di::error& e) {
    error = e.what();
    return nullptr;
  }
}

void check_instances(corpus_result& res, const std::string& label, const nlohmann::ordered_json& schema,
                     const std::vector<std::pair<std::string, bool>>& texts) {
  std::string error;
  auto g = compile_schema(schema, error);
  res.compiled.record(g != nullptr, label + ": " + error);
  if (!g) return;
  for (const auto& [text, ok] : texts) {
    auto doc = nlohmann::ordered_json::parse(text, nullptr, false);
    bool accepted = doc.is_discarded() ? accepts(*g, text) : accepts_instance(*g, doc);
    res.correct.record(accepted == ok, label + (ok ? " should accept " : " should reject ") + text);
  }
}

/// xgrammar's `format` cases follow its own readings of the RFCs (e.g. it accepts "00.00.00.00"
/// as an ipv4, which the JSON-Schema-Test-Suite refuses); they are tallied apart in `formats`.
corpus_result xgrammar_schema_cases(corpus_result& formats) {
  corpus_result res{{"xgrammar JSON Schema cases: compiled"}, {"xgrammar JSON Schema cases: right (of compiled)"}};
  using oj = nlohmann::ordered_json;
  for (const auto& line : read_jsonl_ordered(di::test::shared_path("testdata/grammars/xgrammar_json_schema_cases.jsonl"))) {
    std::string test = line["test"];
    const oj& a = line["args"];
    std::string label = test + "#" + std::to_string(line["case_index"].get<int>());
    const std::string suffix = "_format";
    if (a.contains("schema") && a.contains("instance") && a.contains("accepted")) {
      const oj& inst = a["instance"];
      std::string text = inst.is_string() ? inst.get<std::string>() : inst.dump();
      check_instances(res, label, a["schema"], {{text, a["accepted"].get<bool>()}});
    } else if (a.contains("schema") && a.contains("accepted_instances") && test != "test_non_strict" &&
               !a.contains("warning_message")) {
      std::vector<std::pair<std::string, bool>> texts;
      for (const auto& v : a["accepted_instances"]) texts.push_back({v.dump(), true});
      for (const auto& v : a["rejected_instances"]) texts.push_back({v.dump(), false});
      check_instances(res, label, a["schema"], texts);
    } else if (a.contains("instance") && a.contains("accepted") && test.size() > suffix.size() + 5 &&
               test.compare(test.size() - suffix.size(), suffix.size(), suffix) == 0) {
      std::string format = test.substr(5, test.size() - 5 - suffix.size());
      std::replace(format.begin(), format.end(), '_', '-');
      oj schema = {{"type", "string"}, {"format", format}};
      check_instances(formats, label, schema, {{oj(a["instance"].get<std::string>()).dump(), a["accepted"].get<bool>()}});
    } else if (test == "test_json_accept" || test == "test_json_refuse") {
      bool ok = test == "test_json_accept";
      std::string text = a[ok ? "json_input_accepted" : "json_input_refused"];
      // xgrammar refuses whitespace after the value, which RFC 8259 allows: not applicable.
      if (!ok && !nlohmann::json::parse(text, nullptr, false).is_discarded()) {
        ++res.skipped;
        continue;
      }
      check_instances(res, label, oj::object(), {{text, ok}});
    } else {
      // Expected grammar text, error messages, tokenizer-level cases, non-strict mode.
      ++res.skipped;
    }
  }
  return res;
}

void report(const corpus_result& r, double compile_floor, double correct_floor = 1.0) {
  r.compiled.print();
  r.correct.print();
  MESSAGE("  not applicable: " << r.skipped);
  CHECK(r.correct.rate() >= correct_floor);
  CHECK(r.compiled.rate() >= compile_floor);
}

}  // namespace

TEST_CASE("Rust regex corpus: full-match has_match on every applicable case") {
  corpus_result r = rust_regex_corpus();
  write_report("rust_regex.json", {r.compiled, r.correct}, {{"not_applicable", r.skipped}});
  report(r, 0.93);  // measured 497/532: \b, \B, multi-line anchors, Emoji/Math properties refused
}

TEST_CASE("xgrammar JSON Schema cases with instances") {
  corpus_result f{{"xgrammar format cases: compiled"}, {"xgrammar format cases: same verdict as xgrammar"}};
  corpus_result r = xgrammar_schema_cases(f);
  write_report("xgrammar_json_schema.json", {r.compiled, r.correct, f.compiled, f.correct},
               {{"not_applicable", r.skipped}});
  report(r, 1.0);
  report(f, 1.0, 0.85);
}
