// `deepinfer grammar check|bench`: structured-output grammars from the command line. `check`
// compiles a regex or EBNF grammar and says, per line of a JSONL file of {"text": ...},
// whether the text is a complete match; a grammar that does not compile is one clear message
// on stderr and exit code 2.
#include "cli/command.hpp"
#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "runtime/grammar/earley_parser.hpp"
#include "runtime/grammar/response_format.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>

namespace {

using namespace di::grammar;

struct check_options {
  std::string regex;
  std::string ebnf;
  std::string strings;
  bool print_grammar = false;
};

std::shared_ptr<const compiled_grammar> compile_for_check(const check_options& o) {
  int given = int(!o.regex.empty()) + int(!o.ebnf.empty());
  DI_CHECK(given == 1, "give exactly one of --regex and --ebnf");
  response_format f = !o.regex.empty()
                          ? response_format{format_kind::regex, o.regex}
                          : response_format{format_kind::ebnf, di::read_text_file(o.ebnf)};
  return compile_response_format(f);
}

void run_check(const check_options& o) {
  std::shared_ptr<const compiled_grammar> g;
  try {
    g = compile_for_check(o);
  } catch (const di::error& e) {
    fmt::print(stderr, "error: the grammar does not compile: {}\n", e.what());
    di::cli::set_exit_code(2);
    return;
  }
  if (o.print_grammar)
    fmt::print(stderr, "{} rules, {} automaton states\n", g->num_rules(), g->num_states());
  std::ifstream in(o.strings);
  DI_CHECK(in.good(), "--strings {}: cannot open", o.strings);
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
  check->add_option("--regex", o->regex, "Regular expression (full match)");
  check->add_option("--ebnf", o->ebnf, "EBNF grammar file (GBNF/xgrammar `::=` rules, or Lark)");
  check->add_option("--strings", o->strings, "JSONL file of {\"text\": ...} lines")->required();
  check->add_flag("--print-grammar", o->print_grammar,
                  "Print the compiled grammar's size on stderr");
  check->callback([o] { run_check(*o); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_grammar);
