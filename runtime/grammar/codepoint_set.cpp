// Code point sets: range normalization, set algebra, Unicode categories from the generated
// tables, simple case folding, and the Perl classes \d \w \s in their ASCII/Unicode flavours.
#include "runtime/grammar/codepoint_set.hpp"

#include "runtime/grammar/detail/unicode_tables.hpp"

#include <algorithm>
#include <cctype>
#include <string>

namespace di::grammar {

codepoint_set codepoint_set::range(char32_t lo, char32_t hi) {
  codepoint_set s;
  s.add(lo, hi);
  return s;
}

void codepoint_set::add(char32_t lo, char32_t hi) {
  if (lo > hi) return;
  ranges_.push_back({lo, std::min(hi, k_max_codepoint)});
  normalize();
}

void codepoint_set::add(const codepoint_set& other) {
  ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
  normalize();
}

void codepoint_set::normalize() {
  std::sort(ranges_.begin(), ranges_.end(),
            [](const codepoint_range& a, const codepoint_range& b) { return a.lo < b.lo; });
  std::vector<codepoint_range> merged;
  for (const auto& r : ranges_) {
    if (!merged.empty() && std::uint64_t(r.lo) <= std::uint64_t(merged.back().hi) + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  ranges_ = std::move(merged);
}

codepoint_set codepoint_set::complement() const {
  codepoint_set out;
  char32_t next = 0;
  for (const auto& r : ranges_) {
    if (r.lo > next) out.ranges_.push_back({next, char32_t(r.lo - 1)});
    next = r.hi + 1;
  }
  if (next <= k_max_codepoint) out.ranges_.push_back({next, k_max_codepoint});
  return out;
}

codepoint_set codepoint_set::intersect(const codepoint_set& other) const {
  codepoint_set out;
  std::size_t i = 0, j = 0;
  while (i < ranges_.size() && j < other.ranges_.size()) {
    char32_t lo = std::max(ranges_[i].lo, other.ranges_[j].lo);
    char32_t hi = std::min(ranges_[i].hi, other.ranges_[j].hi);
    if (lo <= hi) out.ranges_.push_back({lo, hi});
    if (ranges_[i].hi < other.ranges_[j].hi)
      ++i;
    else
      ++j;
  }
  return out;
}

bool codepoint_set::contains(char32_t cp) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), cp,
                             [](char32_t v, const codepoint_range& r) { return v < r.lo; });
  return it != ranges_.begin() && std::prev(it)->hi >= cp;
}

std::uint64_t codepoint_set::size() const {
  std::uint64_t n = 0;
  for (const auto& r : ranges_) n += std::uint64_t(r.hi - r.lo) + 1;
  return n;
}

codepoint_set codepoint_set::case_folded() const {
  codepoint_set out = *this;
  const detail::fold_pair* begin = detail::k_fold_pairs;
  const detail::fold_pair* end = begin + detail::k_num_fold_pairs;
  for (const auto& r : ranges_) {
    auto it =
        std::lower_bound(begin, end, std::uint32_t(r.lo),
                         [](const detail::fold_pair& p, std::uint32_t v) { return p.cp < v; });
    for (; it != end && it->cp <= r.hi; ++it) {
      // Walk the whole orbit: members may lie outside this range.
      for (std::uint32_t c = it->next; c != it->cp;) {
        out.ranges_.push_back({c, c});
        auto nx = std::lower_bound(
            begin, end, c, [](const detail::fold_pair& p, std::uint32_t v) { return p.cp < v; });
        c = nx->next;
      }
    }
  }
  out.normalize();
  return out;
}

namespace {

std::string canonical_name(std::string_view name) {
  std::string out;
  for (char c : name)
    if (c != ' ' && c != '_' && c != '-') out.push_back(char(std::tolower((unsigned char)c)));
  return out;
}

/// Long names and groups, each as the list of two-letter categories it covers.
struct category_alias {
  const char* name;
  const char* categories;  // space-separated two-letter codes
};

constexpr category_alias k_aliases[] = {
    {"other", "Cc Cf Cn Co Cs"},
    {"control", "Cc"},
    {"cntrl", "Cc"},
    {"format", "Cf"},
    {"unassigned", "Cn"},
    {"privateuse", "Co"},
    {"surrogate", "Cs"},
    {"letter", "Ll Lm Lo Lt Lu"},
    {"casedletter", "Ll Lt Lu"},
    {"lc", "Ll Lt Lu"},
    {"lowercaseletter", "Ll"},
    {"modifierletter", "Lm"},
    {"otherletter", "Lo"},
    {"titlecaseletter", "Lt"},
    {"uppercaseletter", "Lu"},
    {"mark", "Mc Me Mn"},
    {"combiningmark", "Mc Me Mn"},
    {"spacingmark", "Mc"},
    {"enclosingmark", "Me"},
    {"nonspacingmark", "Mn"},
    {"number", "Nd Nl No"},
    {"decimalnumber", "Nd"},
    {"digit", "Nd"},
    {"letternumber", "Nl"},
    {"othernumber", "No"},
    {"punctuation", "Pc Pd Pe Pf Pi Po Ps"},
    {"punct", "Pc Pd Pe Pf Pi Po Ps"},
    {"connectorpunctuation", "Pc"},
    {"dashpunctuation", "Pd"},
    {"closepunctuation", "Pe"},
    {"finalpunctuation", "Pf"},
    {"initialpunctuation", "Pi"},
    {"otherpunctuation", "Po"},
    {"openpunctuation", "Ps"},
    {"symbol", "Sc Sk Sm So"},
    {"currencysymbol", "Sc"},
    {"modifiersymbol", "Sk"},
    {"mathsymbol", "Sm"},
    {"othersymbol", "So"},
    {"separator", "Zl Zp Zs"},
    {"lineseparator", "Zl"},
    {"paragraphseparator", "Zp"},
    {"spaceseparator", "Zs"},
    {"c", "Cc Cf Cn Co Cs"},
    {"l", "Ll Lm Lo Lt Lu"},
    {"m", "Mc Me Mn"},
    {"n", "Nd Nl No"},
    {"p", "Pc Pd Pe Pf Pi Po Ps"},
    {"s", "Sc Sk Sm So"},
    {"z", "Zl Zp Zs"},
};

codepoint_set categories(std::string_view codes) {
  codepoint_set out;
  for (std::size_t k = 0; k < detail::k_num_category_runs; ++k) {
    const auto& run = detail::k_category_runs[k];
    std::string_view name = detail::k_category_names[run.category];
    for (std::size_t p = 0; p < codes.size(); p += 3)
      if (codes.substr(p, 2) == name) out.add(run.lo, run.hi);
  }
  return out;
}

}  // namespace

bool unicode_property(std::string_view name, codepoint_set& out) {
  std::string key = canonical_name(name);
  if (key == "any") return out = codepoint_set::all(), true;
  if (key == "ascii") return out = codepoint_set::range(0, 0x7F), true;
  if (key == "assigned") return out = categories("Cn").complement(), true;
  for (std::size_t c = 0; c < detail::k_num_categories; ++c) {
    if (canonical_name(detail::k_category_names[c]) == key) {
      out = categories(detail::k_category_names[c]);
      return true;
    }
  }
  for (const auto& a : k_aliases) {
    if (key == a.name) {
      out = categories(a.categories);
      return true;
    }
  }
  return false;
}

codepoint_set digit_class(bool unicode) {
  if (!unicode) return codepoint_set::range('0', '9');
  codepoint_set s;
  unicode_property("Nd", s);
  return s;
}

codepoint_set word_class(bool unicode) {
  codepoint_set s;
  if (unicode) {
    // Rust/Python Unicode \w: letters, marks, decimal and letter numbers, connectors.
    for (const char* p : {"L", "M", "Nd", "Nl", "Pc"}) {
      codepoint_set part;
      unicode_property(p, part);
      s.add(part);
    }
    s.add(0x200C, 0x200D);  // Join_Control
    return s;
  }
  s.add('0', '9');
  s.add('A', 'Z');
  s.add('_', '_');
  s.add('a', 'z');
  return s;
}

codepoint_set space_class(bool unicode) {
  codepoint_set s;
  s.add('\t', '\r');
  s.add(' ', ' ');
  s.add(0xA0, 0xA0);
  s.add(0x1680, 0x1680);
  s.add(0x2000, 0x200A);
  s.add(0x2028, 0x2029);
  s.add(0x202F, 0x202F);
  s.add(0x205F, 0x205F);
  s.add(0x3000, 0x3000);
  if (unicode) {
    s.add(0x85, 0x85);  // White_Space includes NEL
  } else {
    s.add(0xFEFF, 0xFEFF);  // ECMAScript \s includes the BOM
  }
  return s;
}

}  // namespace di::grammar
