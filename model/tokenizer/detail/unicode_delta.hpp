// Code points that HF tokenizers' Oniguruma (Unicode 16) assigns to a general category but
// PCRE2 10.42 (Unicode 14) does not; added to PCRE2's \p{..} classes when patterns are
// translated, so ids match HF for emoji, CJK and scripts added since Unicode 14.
#pragma once

#include <cstddef>
#include <span>

namespace di::tok::detail {

/// An inclusive range of code points.
struct code_point_range {
  char32_t first;
  char32_t last;
};

/// The extra ranges of major category `category` ('L', 'M', 'N', 'P', 'S' or 'Z'); empty for
/// any other letter.
std::span<const code_point_range> onig_unicode_delta(char category);

}  // namespace di::tok::detail
