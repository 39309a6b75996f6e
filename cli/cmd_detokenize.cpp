// `deepinfer detokenize`: JSON lines {"ids": [...]} on stdin -> {"text": ...} on stdout, with
// the DeepSeek tokenizer of a checkpoint folder.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.hpp"
#include "common/error.hpp"
#include "common/json_brief.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace {

struct detokenize_args {
  std::string tokenizer_dir;
  bool skip_special_tokens = false;
};

// The "ids" of one input line; di::error naming the line if it is not {"ids": [int, ...]}.
std::vector<di::tok::token_id> ids_of_line(const std::string& line, std::size_t line_number,
                                           std::size_t vocab_size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    DI_FAIL("stdin line {}: not valid JSON: {}", line_number, e.what());
  }
  DI_CHECK(j.is_object() && j.contains("ids") && j["ids"].is_array(),
           "stdin line {}: expected an object with an array \"ids\", got {}", line_number,
           di::json_brief(j, 80));
  std::vector<di::tok::token_id> ids;
  for (const auto& v : j["ids"]) {
    DI_CHECK(v.is_number_integer() && (v.is_number_unsigned() || v.get<std::int64_t>() >= 0),
             "stdin line {}: ids must be non-negative integers, got {}", line_number,
             di::json_brief(v));
    // Past the vocabulary (also past any 64-bit id): the tokenizer's own wording.
    const std::uint64_t id = v.get<std::uint64_t>();
    DI_CHECK(id < vocab_size, "stdin line {}: token id {} is not in the vocabulary (size {})",
             line_number, id, vocab_size);
    ids.push_back(di::tok::token_id(id));
  }
  return ids;
}

void run_detokenize(const detokenize_args& args) {
  auto tok = di::tok::tokenizer::from_dir(args.tokenizer_dir);
  di::tok::decode_options options{.skip_special_tokens = args.skip_special_tokens};
  std::string line;
  for (std::size_t line_number = 1; std::getline(std::cin, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto ids = ids_of_line(line, line_number, tok.vocab_size());
    std::string text;
    try {
      text = tok.decode(ids, options);
    } catch (const di::error& e) {
      DI_FAIL("stdin line {}: {}", line_number, e.what());
    }
    std::string out = nlohmann::json{{"text", text}}.dump() + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  di::cli::check_stdin_read("detokenize");  // a directory or a closed stdin read as empty
  std::fflush(stdout);
}

void setup_detokenize(CLI::App& app) {
  auto args = std::make_shared<detokenize_args>();
  auto* sub = app.add_subcommand("detokenize",
                                 "Decode JSON lines {\"ids\": [...]} from stdin to "
                                 "{\"text\": ...} on stdout");
  sub->add_option("--tokenizer", args->tokenizer_dir,
                  "Folder with tokenizer.json (and tokenizer_config.json)")
      ->required()
      ->check(di::cli::not_empty("name the tokenizer's folder (\".\" for this one)"));
  sub->add_flag("--skip-special-tokens", args->skip_special_tokens,
                "Leave out special tokens (HF skip_special_tokens=True)");
  sub->footer(
      "One output line per input line; blank lines are skipped. Invalid UTF-8 in the decoded "
      "bytes becomes U+FFFD. A malformed line (not JSON, no \"ids\" array, an id outside the "
      "vocabulary) stops the command with an error naming the line number and exit code 1; "
      "lines before it have been written.");
  sub->callback([args] { run_detokenize(*args); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_detokenize);
