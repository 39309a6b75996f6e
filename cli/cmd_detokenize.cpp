// `deepinfer detokenize`: JSON lines {"ids": [...]} on stdin -> {"text": ...} on stdout, with
// the DeepSeek tokenizer of a checkpoint folder.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/command.hpp"
#include "cli/detail/json_input.hpp"
#include "common/error.hpp"
#include "common/json_brief.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace {

struct detokenize_args {
  std::string tokenizer_dir;
  bool skip_special_tokens = false;
};

/// A token id: a non-negative JSON integer, or a whole-number float (1.0, 1e2), read as that
/// integer as config.json's integer fields are (128.0); nullopt for a fraction, a negative number
/// or a non-number. A float at or past 2^64 gives UINT64_MAX: outside any vocabulary.
std::optional<std::uint64_t> id_of(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer())
    return v.get<std::int64_t>() >= 0 ? std::optional(std::uint64_t(v.get<std::int64_t>()))
                                      : std::nullopt;
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  if (!(d >= 0.0) || std::floor(d) != d) return std::nullopt;
  return d < 0x1p64 ? std::uint64_t(d) : std::numeric_limits<std::uint64_t>::max();
}

// The "ids" of one input line; di::error naming the line if it is not {"ids": [int, ...]}.
std::vector<di::tok::token_id> ids_of_line(const std::string& line, std::size_t line_number,
                                           std::size_t vocab_size) {
  // (strict: a key given twice was taken silently, the last one winning)
  const nlohmann::json j =
      di::cli::parse_json_line(line, fmt::format("stdin line {}", line_number));
  DI_CHECK(j.is_object() && j.contains("ids") && j["ids"].is_array(),
           "stdin line {}: expected an object with an array \"ids\", got {}", line_number,
           di::json_brief(j, 80));
  std::vector<di::tok::token_id> ids;
  for (const auto& v : j["ids"]) {
    // (1.0 was refused, where config.json takes 128.0 for an integer)
    const std::optional<std::uint64_t> id = id_of(v);
    DI_CHECK(id.has_value(), "stdin line {}: ids must be non-negative integers, got {}{}",
             line_number, di::json_brief(v),
             v.is_number_float() && v.get<double>() >= 0.0 ? " (not a whole number)" : "");
    // Past the vocabulary (also past any 64-bit id): the tokenizer's own wording.
    DI_CHECK(*id < vocab_size, "stdin line {}: token id {} is not in the vocabulary (size {})",
             line_number, di::json_brief(v), vocab_size);
    ids.push_back(di::tok::token_id(*id));
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
      "One output line per input line; blank lines are skipped. An id may be written as a "
      "whole-number float (1.0, 1e2); 1.5 is an error. Invalid UTF-8 in the decoded "
      "bytes becomes U+FFFD. A malformed line (not JSON, no \"ids\" array, an id outside the "
      "vocabulary) stops the command with an error naming the line number and exit code 1; "
      "lines before it have been written.");
  sub->callback([args] { run_detokenize(*args); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_detokenize);
