// Prints the grammar IR as GBNF-style EBNF (bytes outside printable ASCII as \xHH), so that a
// compiled schema or regex can be inspected and the output parsed back by the EBNF front end.
#include "runtime/grammar/grammar.hpp"

#include <fmt/format.h>

namespace di::grammar {

namespace {

void append_byte(std::string& out, unsigned b, bool in_class) {
  bool special = b == '\\' || (in_class ? (b == ']' || b == '^' || b == '-') : b == '"');
  if (b >= 0x20 && b < 0x7F && !special) {
    out.push_back(char(b));
  } else if (b == '\n') {
    out += "\\n";
  } else if (b == '\t') {
    out += "\\t";
  } else if (b == '\r') {
    out += "\\r";
  } else if (special) {
    out.push_back('\\');
    out.push_back(char(b));
  } else {
    out += fmt::format("\\x{:02X}", b);
  }
}

std::string byte_class(const byte_set& s) {
  if (s.count() == 1) {
    for (unsigned b = 0; b < 256; ++b)
      if (s.test(std::uint8_t(b))) {
        std::string out = "\"";
        append_byte(out, b, false);
        return out + "\"";
      }
  }
  std::string out = "[";
  for (unsigned b = 0; b < 256;) {
    if (!s.test(std::uint8_t(b))) {
      ++b;
      continue;
    }
    unsigned e = b;
    while (e + 1 < 256 && s.test(std::uint8_t(e + 1))) ++e;
    append_byte(out, b, true);
    if (e > b) {
      out.push_back('-');
      append_byte(out, e, true);
    }
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string grammar::expr_to_string(expr_id id) const {
  const expr& e = exprs_[id];
  switch (e.kind) {
    case expr_kind::empty:
      return "\"\"";
    case expr_kind::bytes:
      return e.bytes.empty() ? "[^\\x00-\\xFF]" : byte_class(e.bytes);
    case expr_kind::rule_ref:
      return rules_[e.rule].name;
    case expr_kind::sequence:
    case expr_kind::choice: {
      std::string out = "(";
      for (std::size_t i = 0; i < e.children.size(); ++i) {
        if (i) out += e.kind == expr_kind::choice ? " | " : " ";
        out += expr_to_string(e.children[i]);
      }
      return out + ")";
    }
    case expr_kind::repeat: {
      std::string inner = expr_to_string(e.children[0]);
      if (e.min == 0 && e.max == k_unbounded) return inner + "*";
      if (e.min == 1 && e.max == k_unbounded) return inner + "+";
      if (e.min == 0 && e.max == 1) return inner + "?";
      if (e.max == k_unbounded) return fmt::format("{}{{{},}}", inner, e.min);
      if (e.min == e.max) return fmt::format("{}{{{}}}", inner, e.min);
      return fmt::format("{}{{{},{}}}", inner, e.min, e.max);
    }
  }
  return "";
}

std::string grammar::to_string() const {
  std::string out;
  for (const rule& r : rules_) {
    if (!r.body) continue;
    out += fmt::format("{} ::= {}\n", r.name, expr_to_string(*r.body));
  }
  return out;
}

}  // namespace di::grammar
