// PCRE2 (8-bit, UTF, Unicode properties, JIT) behind a small interface for the Split
// pre-tokenizer. Patterns in tokenizer.json are written for Oniguruma (what HF tokenizers
// uses); `translate_onig_pattern` rewrites the constructs whose meaning differs in PCRE2.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace di::tok::detail {

/// PCRE2 class body (no brackets) of Oniguruma's `\p{category}` for a major category
/// ('L', 'M', 'N', 'P', 'S', 'Z'): PCRE2's class plus the code points Oniguruma's newer
/// Unicode adds (unicode_delta.hpp).
std::string onig_category_class(char category);

/// PCRE2 class body of Oniguruma's `\s`: U+0009..U+000D, U+0085 and \p{Z}.
std::string onig_space_class();

/// Rewrites the constructs whose meaning differs between Oniguruma (HF tokenizers) and PCRE2:
/// `\s`/`\S` (PCRE2's lacks U+0085) and `\p{X}`/`\P{X}` for major categories (Unicode 16 vs
/// 14). Throws di::error naming `where` for constructs it cannot translate faithfully.
std::string translate_onig_pattern(std::string_view pattern, std::string_view where);

/// A match: byte offsets [begin, end) in the subject.
struct regex_match {
  std::size_t begin = 0;
  std::size_t end = 0;
};

/// A compiled pattern; immutable and shareable between threads (match state is per thread).
class regex {
 public:
  /// Compiles `pattern` (PCRE2 syntax) with UTF and UCP; throws di::error naming `where`.
  regex(std::string_view pattern, std::string_view where);
  /// A literal (non-regex) pattern.
  static regex literal(std::string_view text, std::string_view where);
  ~regex();
  regex(regex&& other) noexcept;
  regex& operator=(regex&& other) noexcept;
  regex(const regex&) = delete;
  regex& operator=(const regex&) = delete;

  /// First match in `subject` starting at or after `start`; the subject ends where the piece
  /// ends, so look-aheads see the piece boundary. `subject` must be valid UTF-8.
  bool find(std::string_view subject, std::size_t start, regex_match& match) const;

 private:
  regex() = default;
  void compile(std::string_view pattern, unsigned options, std::string_view where);

  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace di::tok::detail
