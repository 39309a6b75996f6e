// Sets of Unicode code points as sorted, disjoint, non-adjacent ranges: what character classes
// of the regex and EBNF front ends denote before they are lowered to UTF-8 byte sequences.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace di::grammar {

constexpr char32_t k_max_codepoint = 0x10FFFF;

/// One inclusive range of code points.
struct codepoint_range {
  char32_t lo;
  char32_t hi;
  bool operator==(const codepoint_range&) const = default;
};

/// A set of code points. Value type; every operation keeps the ranges normalized.
class codepoint_set {
 public:
  codepoint_set() = default;
  static codepoint_set single(char32_t cp) { return range(cp, cp); }
  static codepoint_set range(char32_t lo, char32_t hi);
  static codepoint_set all() { return range(0, k_max_codepoint); }

  void add(char32_t lo, char32_t hi);
  void add(const codepoint_set& other);
  codepoint_set complement() const;
  codepoint_set intersect(const codepoint_set& other) const;
  codepoint_set minus(const codepoint_set& other) const { return intersect(other.complement()); }
  /// Adds every code point that simple case folding equates with a member.
  codepoint_set case_folded() const;

  bool contains(char32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  /// Number of code points in the set.
  std::uint64_t size() const;
  const std::vector<codepoint_range>& ranges() const { return ranges_; }
  bool operator==(const codepoint_set&) const = default;

 private:
  void normalize();
  std::vector<codepoint_range> ranges_;
};

/// The code points of a Unicode general category or group, by short or long name ("L", "Lu",
/// "Letter", "Uppercase_Letter", "Nd"...), plus "Any", "ASCII" and "Assigned". Names compare
/// case-insensitively, ignoring spaces, '-' and '_'. Returns false for an unknown name.
bool unicode_property(std::string_view name, codepoint_set& out);

/// Perl-style classes: \d, \w, \s. `unicode` selects the Unicode definitions (Rust/Python
/// defaults); otherwise ASCII digits and word characters and ECMAScript white space.
codepoint_set digit_class(bool unicode);
codepoint_set word_class(bool unicode);
codepoint_set space_class(bool unicode);

}  // namespace di::grammar
