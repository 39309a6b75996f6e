// The pre-tokenizer: splits text into pieces that BPE encodes independently. It runs a list
// of regex Split steps (each step splits every piece of the previous one), via PCRE2 or, for
// DeepSeek-V3's exact pattern list, via a hand-written scanner that gives the same pieces.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/detail/regex.hpp"

namespace di::tok::detail {

/// A piece: byte offsets [begin, end) into the text being pre-tokenized.
struct piece {
  std::uint32_t begin;
  std::uint32_t end;
};

/// What a Split step does with the matches (HF SplitDelimiterBehavior).
enum class split_behavior {
  isolated,  ///< matches and the text between them all become pieces
  removed,   ///< matches are dropped; the text between them becomes pieces
};

/// One Split step as written in tokenizer.json.
struct split_step {
  std::string onig_pattern;  ///< the pattern as given (Oniguruma syntax) or the literal text
  bool is_literal = false;   ///< pattern.String rather than pattern.Regex
  split_behavior behavior = split_behavior::isolated;
};

/// Which implementation splits the text.
enum class pre_tokenizer_engine {
  automatic,  ///< the hand-written scanner when the steps are DeepSeek-V3's, else PCRE2
  pcre2,      ///< always PCRE2 (the reference the scanner is tested against)
};

/// The Split steps of DeepSeek-V3's tokenizer.json, in order (all Isolated).
const std::vector<std::string>& deepseek_v3_patterns();

/// Splits text with a fixed list of steps; immutable and shareable between threads.
class pre_tokenizer {
 public:
  pre_tokenizer(std::vector<split_step> steps, pre_tokenizer_engine engine);

  /// Replaces `out` with the pieces of `text` (valid UTF-8), in order; `scratch` is reused.
  void split(std::string_view text, std::vector<piece>& out, std::vector<piece>& scratch) const;
  /// True if the hand-written DeepSeek-V3 scanner is in use.
  bool uses_fast_path() const { return is_deepseek_v3_; }

 private:
  struct compiled_step {
    regex re;
    split_behavior behavior;
  };
  void split_piece(std::string_view text, piece p, const compiled_step& step,
                   std::vector<piece>& out) const;

  std::vector<compiled_step> steps_;
  bool is_deepseek_v3_ = false;
};

/// The hand-written equivalent of DeepSeek-V3's three Isolated splits; appends to `out`.
void split_deepseek_v3(std::string_view text, std::vector<piece>& out);

}  // namespace di::tok::detail
