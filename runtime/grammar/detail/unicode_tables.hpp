// The generated Unicode tables (detail/unicode_tables.cpp, from tools/gen_unicode_tables.py):
// general category runs covering every code point, and simple case-folding orbits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace di::grammar::detail {

constexpr std::size_t k_num_categories = 30;

/// Code points [lo, hi] all have general category k_category_names[category].
struct category_run {
  std::uint32_t lo;
  std::uint32_t hi;
  std::uint8_t category;
};

/// Following `next` from `cp` cycles through every code point that case-folds with `cp`.
struct fold_pair {
  std::uint32_t cp;
  std::uint32_t next;
};

extern const char* const k_unicode_version;
extern const char* const k_category_names[k_num_categories];
extern const category_run k_category_runs[];
extern const std::size_t k_num_category_runs;
extern const fold_pair k_fold_pairs[];
extern const std::size_t k_num_fold_pairs;

}  // namespace di::grammar::detail
