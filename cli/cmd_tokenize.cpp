// `deepinfer tokenize`: JSON lines {"text": ...} on stdin -> {"ids": [...]} on stdout, with the
// DeepSeek tokenizer of a checkpoint folder. For checking ids against other tokenizers.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.hpp"
#include "cli/detail/json_input.hpp"
#include "common/error.hpp"
#include "common/json_brief.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace {

struct tokenize_args {
  std::string tokenizer_dir;
  bool add_special_tokens = false;
  bool add_bos = false;
};

// The "text" of one input line; di::error naming the line if it is not {"text": "..."}.
std::string text_of_line(const std::string& line, std::size_t line_number) {
  // (strict: a key given twice was taken silently, the last one winning)
  const nlohmann::json j =
      di::cli::parse_json_line(line, fmt::format("stdin line {}", line_number));
  DI_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(),
           "stdin line {}: expected an object with a string \"text\", got {}", line_number,
           di::json_brief(j, 80));
  return j["text"].get<std::string>();
}

void run_tokenize(const tokenize_args& args) {
  auto tok = di::tok::tokenizer::from_dir(args.tokenizer_dir);
  // --add-bos follows tokenizer_config.json; without one it adds nothing -- said, not silent.
  if (args.add_bos &&
      !std::filesystem::exists(std::filesystem::path(args.tokenizer_dir) / "tokenizer_config.json"))
    std::fprintf(stderr,
                 "tokenize: --add-bos: %s has no tokenizer_config.json (its add_bos_token / "
                 "add_eos_token): nothing is added\n",
                 args.tokenizer_dir.c_str());
  di::tok::encode_options options{.add_special_tokens = args.add_special_tokens,
                                  .add_bos = args.add_bos};
  std::string line;
  std::vector<di::tok::token_id> ids;
  for (std::size_t line_number = 1; std::getline(std::cin, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string text = text_of_line(line, line_number);
    ids.clear();
    try {
      tok.encode_into(text, ids, options);
    } catch (const di::error& e) {
      DI_FAIL("stdin line {}: {}", line_number, e.what());
    }
    std::string out = nlohmann::json{{"ids", ids}}.dump() + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  di::cli::check_stdin_read("tokenize");  // a directory or a closed stdin read as empty
  std::fflush(stdout);
}

void setup_tokenize(CLI::App& app) {
  auto args = std::make_shared<tokenize_args>();
  auto* sub = app.add_subcommand("tokenize",
                                 "Encode JSON lines {\"text\": ...} from stdin to "
                                 "{\"ids\": [...]} on stdout");
  sub->add_option("--tokenizer", args->tokenizer_dir,
                  "Folder with tokenizer.json (and tokenizer_config.json)")
      ->required()
      ->check(di::cli::not_empty("name the tokenizer's folder (\".\" for this one)"));
  sub->add_flag("--add-special-tokens", args->add_special_tokens,
                "Apply tokenizer.json's post_processor (as HF add_special_tokens=True)");
  sub->add_flag("--add-bos", args->add_bos,
                "Add BOS/EOS as tokenizer_config.json's add_bos_token/add_eos_token say "
                "(HF transformers behaviour)");
  sub->footer(
      "One output line per input line; blank lines are skipped. A malformed line (not JSON, no "
      "string \"text\", invalid UTF-8) stops the command with an error naming the line number "
      "and exit code 1; lines before it have been written.");
  sub->callback([args] { run_tokenize(*args); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_tokenize);
