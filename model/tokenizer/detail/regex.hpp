// PCRE2 (8-bit, UTF, Unicode properties, JIT) behind a small interface for the Split
// pre-tokenizer. Patterns in tokenizer.json are written for Oniguruma (what HF tokenizers
// uses); `translate_onig_pattern` rewrites the constructs whose meaning differs in PCRE2.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace di::tok::detail {

/// Oniguruma `\s` (Unicode: U+0009..U+000D, U+0085 and General_Category Z), as a PCRE2 class body.
inline constexpr std::string_view k_onig_space_class = "\\x{9}-\\x{d}\\x{85}\\p{Z}";

/// Rewrites `\s` / `\S` to Oniguruma's Unicode definition (PCRE2's lacks U+0085); throws
/// di::error naming `where` for constructs that cannot be translated faithfully.
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
