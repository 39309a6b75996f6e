// Builds the char_class_table by running PCRE2 property classes over every code point.
#include "model/tokenizer/detail/char_classes.hpp"

#include <map>
#include <string>

#include "model/tokenizer/detail/regex.hpp"
#include "model/tokenizer/detail/utf8.hpp"

namespace di::tok::detail {

namespace {

constexpr char32_t k_num_code_points = 0x110000;

// Planes 4-13 are unassigned and planes 15-16 private use: no class bit applies there, so
// only planes 0-3 and 14 are scanned (a third of the code points, and a third of the time).
bool may_have_class(char32_t cp) {
  return cp < 0x40000 || (cp >= 0xE0000 && cp < 0xF0000);
}

// The scalar values that may have a class, in order, UTF-8 encoded (freed after the build).
std::string all_code_points() {
  std::string text;
  text.reserve(std::size_t(0x50000) * 4);
  for (char32_t cp = 0; cp < k_num_code_points; ++cp) {
    if ((cp < 0xD800 || cp > 0xDFFF) && may_have_class(cp)) append_utf8(text, cp);
  }
  return text;
}

}  // namespace

const char_class_table& char_class_table::get() {
  static const char_class_table table;
  return table;
}

char_class_table::char_class_table() {
  const std::string all = all_code_points();
  const auto* bytes = reinterpret_cast<const unsigned char*>(all.data());
  std::vector<std::uint8_t> flat(k_num_code_points, 0);
  // The same classes, with the same Unicode additions, as the translated PCRE2 patterns.
  const std::pair<std::string, std::uint8_t> classes[] = {
      {"[" + onig_category_class('L') + "]+", cc_letter},
      {"[" + onig_category_class('M') + "]+", cc_mark},
      {"[" + onig_category_class('N') + "]+", cc_number},
      {"[" + onig_category_class('P') + onig_category_class('S') + "]+", cc_punct_symbol},
      {"[" + onig_space_class() + "]+", cc_space},
  };
  for (const auto& [pattern, bit] : classes) {
    regex re(pattern, "char class table");
    regex_match m;
    std::size_t pos = 0;
    while (pos < all.size() && re.find(all, pos, m)) {
      for (std::size_t i = m.begin; i < m.end;) {
        char32_t cp;
        i += std::size_t(decode_utf8(bytes + i, cp));
        flat[cp] |= bit;
      }
      pos = m.end;
    }
  }
  for (char32_t cp = 0; cp < 0x80; ++cp) ascii_[cp] = flat[cp];
  // Deduplicate 256-code-point blocks: most planes are uniform.
  block_index_.resize(k_num_code_points >> 8);
  std::map<std::string, std::uint16_t> seen;
  for (std::size_t b = 0; b < block_index_.size(); ++b) {
    std::string key(reinterpret_cast<const char*>(flat.data() + b * 256), 256);
    auto [it, inserted] = seen.emplace(std::move(key), std::uint16_t(seen.size()));
    if (inserted) {
      auto first = flat.begin() + std::ptrdiff_t(b * 256);
      blocks_.insert(blocks_.end(), first, first + 256);
    }
    block_index_[b] = it->second;
  }
}

}  // namespace di::tok::detail
