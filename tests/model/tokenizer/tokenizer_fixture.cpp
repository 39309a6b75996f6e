// Loads the DeepSeek tokenizer and the golden lines once for all tokenizer tests.
#include "tests/model/tokenizer/tokenizer_fixture.hpp"

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/mapped_file.hpp"

namespace di::test {

const tok::tokenizer& deepseek_tokenizer(bool fast) {
  static const tok::tokenizer fast_tok =
      tok::tokenizer::from_dir(deepseek_tokenizer_dir(), {.allow_fast_pre_tokenizer = true});
  static const tok::tokenizer pcre2_tok =
      tok::tokenizer::from_dir(deepseek_tokenizer_dir(), {.allow_fast_pre_tokenizer = false});
  return fast ? fast_tok : pcre2_tok;
}

const std::vector<golden_line>& golden_lines() {
  static const std::vector<golden_line> lines = [] {
    std::vector<golden_line> out;
    std::istringstream in(
        read_text_file(shared_path("testdata/tokenizer/golden_public.jsonl").string()));
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      out.push_back({j.at("id"), j.at("text"), j.at("ids"), j.at("ids_add_special"),
                     j.at("ids_bos_transformers"), j.at("decoded"), j.at("decoded_skip_special")});
    }
    return out;
  }();
  return lines;
}

}  // namespace di::test
