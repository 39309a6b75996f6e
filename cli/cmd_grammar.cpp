// `deepinfer grammar check|bench`: structured-output grammars from the command line. `check`
// compiles a JSON Schema, regex or EBNF grammar and says, per line of a JSONL file of {"text":
// ...}, whether the text is a complete match; a grammar that does not compile is one clear message
// on stderr and exit code 2, an input file that cannot be read exit code 1 (as elsewhere).
// `bench` (cli/detail/grammar_bench.cpp) measures compile and mask times.
#include "cli/command.hpp"
#include "cli/detail/grammar_bench.hpp"
#include "cli/detail/schema_warnings.hpp"
#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "runtime/grammar/earley_parser.hpp"
#include "runtime/grammar/response_format.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <optional>
#include <utility>

namespace {

using namespace di::grammar;

struct check_options {
  std::string json_schema;
  std::optional<std::string> regex;  ///< "" is a regex too: the empty string alone
  std::string ebnf;
  std::string strings;
  bool print_grammar = false;
  bool lenient = false;
  std::string whitespace = "any";
};

/// Usage errors (exit code 2, "(see --help)"), checked before the grammar compiles: they were
/// reported as "the grammar does not compile: give exactly one of ...".
json_whitespace check_usage(const check_options& o) {
  const int given = int(!o.json_schema.empty()) + int(o.regex.has_value()) + int(!o.ebnf.empty());
  if (given != 1)
    throw CLI::ValidationError("give exactly one of --json-schema, --regex and --ebnf");
  if (o.whitespace == "any") return json_whitespace::any;
  if (o.whitespace == "compact") return json_whitespace::compact;
  if (o.whitespace == "pretty") return json_whitespace::pretty;
  throw CLI::ValidationError("--json-whitespace",
                             fmt::format("must be any, compact or pretty, got '{}'", o.whitespace));
}

/// The text of a grammar file. A missing, unreadable or directory path is an input error
/// (di::error, exit code 1: "--ebnf: F: cannot open: No such file or directory"), not a grammar
/// that does not compile (exit code 2, as it was).
std::string read_grammar_file(const std::string& path, const std::string& option) {
  di::open_input_file(path, option);
  return di::read_text_file(path);
}

/// The format of the options, its file read (before anything compiles).
response_format format_for_check(const check_options& o) {
  if (!o.json_schema.empty())
    return {format_kind::json_schema, read_grammar_file(o.json_schema, "--json-schema"), {}};
  if (o.regex) return {format_kind::regex, *o.regex, {}};
  return {format_kind::ebnf, read_grammar_file(o.ebnf, "--ebnf"), {}};
}

/// The grammar of the options; a grammar that matches no string at all compiles (every string
/// is then refused, as the JSON Schema `false` must be), with a warning that generation, the
/// HTTP server and --response-format refuse it.
std::shared_ptr<const compiled_grammar> compile_for_check(const check_options& o, response_format f,
                                                          json_whitespace whitespace) {
  f.schema.lenient = o.lenient;
  f.schema.whitespace = whitespace;
  f.schema.use = json_schema_use::validation;  // every spelling JSON Schema allows (1.0, 7.00)
  compile_options co;
  compiled_format c;  // the warnings from the same compile: a second built every automaton again
  try {
    c = compile_response_format_with_warnings(f, co);
  } catch (const di::error&) {
    co.allow_empty_language = true;  // compiles only if the language was empty: say so
    c = compile_response_format_with_warnings(f, co);
    fmt::print(stderr,
               "warning: the grammar matches no string at all: every string is refused here, "
               "and generation refuses the grammar\n");
  }
  di::cli::print_schema_warnings(c.warnings, "--json-schema " + o.json_schema);
  return c.grammar;
}

void run_check(const check_options& o) {
  const json_whitespace whitespace = check_usage(o);
  response_format f = format_for_check(o);  // an unreadable file: di::error, exit code 1
  std::shared_ptr<const compiled_grammar> g;
  try {
    g = compile_for_check(o, std::move(f), whitespace);
  } catch (const di::error& e) {
    fmt::print(stderr, "error: the grammar does not compile: {}\n", e.what());
    di::cli::set_exit_code(2);
    return;
  }
  if (o.print_grammar)
    fmt::print(stderr, "{} rules, {} automaton states\n", g->num_rules(), g->num_states());
  std::ifstream in = di::open_input_file(o.strings, "--strings");
  earley_parser parser(*g);
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto doc = nlohmann::json::parse(line, nullptr, false);
    DI_CHECK(
        !doc.is_discarded() && doc.is_object() && doc.contains("text") && doc["text"].is_string(),
        "--strings {} line {}: expected a JSON object with a string \"text\"", o.strings, n);
    const std::string& text = doc["text"].get_ref<const std::string&>();
    parser.reset();
    bool accepted = parser.push_all(text) == text.size() && parser.is_accepting();
    fmt::print("{{\"accepted\": {}}}\n", accepted ? "true" : "false");
  }
}

void setup_grammar(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("grammar", "Structured-output grammars: check strings, measure masks");
  cmd->require_subcommand(1);
  auto o = std::make_shared<check_options>();
  auto* check = cmd->add_subcommand("check", "Say whether each string fully matches a grammar");
  check->add_option("--json-schema", o->json_schema, "JSON Schema file (draft 2020-12 or draft 7)");
  check->add_option("--regex", o->regex, "Regular expression (full match)");
  check->add_option("--ebnf", o->ebnf, "EBNF grammar file (GBNF/xgrammar `::=` rules, or Lark)");
  check->add_option("--strings", o->strings, "JSONL file of {\"text\": ...} lines")->required();
  check->add_flag("--lenient", o->lenient, "JSON Schema: skip keywords that cannot be enforced");
  check->add_option("--json-whitespace", o->whitespace, "JSON Schema whitespace: any, compact or pretty")
      ->capture_default_str();
  check->add_flag("--print-grammar", o->print_grammar,
                  "Print the compiled grammar's size on stderr");
  check->footer(
      "Prints {\"accepted\": true|false} per line of --strings. Exit codes: 0 checked (whether "
      "or not the strings match); 1 an input that cannot be read (a missing --json-schema, "
      "--ebnf or --strings file, a bad --strings line); 2 a usage error or a grammar that does "
      "not compile.");
  check->callback([o] { run_check(*o); });
  di::cli::add_grammar_bench(*cmd);
}

}  // namespace

DI_REGISTER_COMMAND(setup_grammar);
