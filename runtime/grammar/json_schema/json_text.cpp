// JSON text building blocks (see json_text.hpp).
#include "runtime/grammar/json_schema/json_text.hpp"

#include "runtime/grammar/json_schema/number_exponents.hpp"

namespace di::grammar::json_detail {

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size();) {
    auto c = std::uint8_t(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + std::size_t(n) > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (std::uint8_t(s[i + std::size_t(k)]) & 0x3F);
    out.push_back(cp);
    i += std::size_t(n);
  }
  return out;
}

expr_id json_text::ws() {
  if (!ws_rule_) {
    ws_rule_ = g_.fresh_rule("ws");
    byte_set space;
    for (char c : {' ', '\t', '\n', '\r'}) space.set(std::uint8_t(c));
    expr_id body = g_.empty();
    if (ws_policy_ == json_whitespace::any) {
      body = g_.repeat(g_.bytes(space), 0, k_unbounded);
    } else if (ws_policy_ == json_whitespace::pretty) {
      byte_set indent;
      indent.set(' ');
      indent.set('\t');
      body = g_.choice({g_.empty(), g_.literal(" "),
                        g_.sequence({g_.literal("\n"), g_.repeat(g_.bytes(indent), 0, 20)})});
    }
    g_.define_rule(*ws_rule_, body);
  }
  return g_.ref(*ws_rule_);
}

expr_id json_text::json_char(const codepoint_set& chars) {
  std::vector<expr_id> alts;
  codepoint_set plain = chars.minus(codepoint_set::range(0, 0x1F))
                            .minus(codepoint_set::single('"'))
                            .minus(codepoint_set::single('\\'));
  if (!plain.empty()) alts.push_back(g_.codepoints(plain));
  if (chars.contains('"')) alts.push_back(g_.literal("\\\""));
  if (chars.contains('\\')) alts.push_back(g_.literal("\\\\"));
  static constexpr std::pair<char32_t, const char*> named[] = {
      {0x08, "\\b"}, {0x0C, "\\f"}, {0x0A, "\\n"}, {0x0D, "\\r"}, {0x09, "\\t"}};
  for (char32_t c = 0; c < 0x20; ++c) {
    if (!chars.contains(c)) continue;
    const char* esc = nullptr;
    for (auto [cp, text] : named)
      if (cp == c) esc = text;
    if (esc) {
      alts.push_back(g_.literal(esc));
      continue;
    }
    const char* hex = "0123456789abcdef";
    byte_set hi, lo;
    hi.set(std::uint8_t(hex[c >> 4]));
    lo.set(std::uint8_t(hex[c & 15]));
    if (std::isalpha(static_cast<unsigned char>(hex[c & 15]))) lo.set(std::uint8_t(std::toupper(hex[c & 15])));
    alts.push_back(g_.sequence({g_.literal("\\u00"), g_.bytes(hi), g_.bytes(lo)}));
  }
  return g_.choice(std::move(alts));
}

expr_id json_text::any_char() {
  byte_set hex;
  for (char c : std::string_view("0123456789abcdefABCDEF")) hex.set(std::uint8_t(c));
  byte_set simple;
  for (char c : std::string_view("\"\\/bfnrt")) simple.set(std::uint8_t(c));
  codepoint_set plain = codepoint_set::all().minus(codepoint_set::range(0, 0x1F));
  plain = plain.minus(codepoint_set::single('"')).minus(codepoint_set::single('\\'));
  return g_.choice({g_.codepoints(plain),
                    g_.sequence({g_.literal("\\"), g_.choice({g_.bytes(simple),
                                                              g_.sequence({g_.literal("u"), g_.repeat(g_.bytes(hex), 4, 4)})})})});
}

expr_id json_text::any_string() { return quoted(g_.repeat(any_char(), 0, k_unbounded)); }

expr_id json_text::zero_fraction() {
  if (use_ == json_schema_use::generation) return g_.empty();
  return g_.optional(g_.sequence({g_.literal("."), g_.repeat(g_.literal("0"), 1, k_unbounded)}));
}

expr_id json_text::any_integer() {
  expr_id digits = g_.sequence({g_.byte_range('1', '9'), g_.repeat(g_.byte_range('0', '9'), 0, k_unbounded)});
  if (use_ == json_schema_use::generation)  // 0|-?[1-9][0-9]*: no negative zero
    return g_.choice({g_.literal("0"), g_.sequence({g_.optional(g_.literal("-")), digits})});
  if (!exponent_integer_rule_) {
    exponent_integer_rule_ = g_.fresh_rule("integer_exponent");
    g_.define_rule(*exponent_integer_rule_, integers_with_exponent(g_));
  }
  return g_.choice({g_.sequence({g_.optional(g_.literal("-")), g_.choice({g_.literal("0"), digits}),
                                 zero_fraction()}),
                    g_.ref(*exponent_integer_rule_)});
}

expr_id json_text::any_number() {
  expr_id digit = g_.byte_range('0', '9');
  expr_id int_part = g_.choice({g_.literal("0"), g_.sequence({g_.byte_range('1', '9'), g_.repeat(digit, 0, k_unbounded)})});
  byte_set e, sign;
  e.set('e');
  e.set('E');
  sign.set('+');
  sign.set('-');
  const expr_id fraction =
      g_.optional(g_.sequence({g_.literal("."), g_.repeat(digit, 1, k_unbounded)}));
  const expr_id exponent = g_.optional(
      g_.sequence({g_.bytes(e), g_.optional(g_.bytes(sign)), g_.repeat(digit, 1, k_unbounded)}));
  if (use_ == json_schema_use::validation)
    return g_.sequence({g_.optional(g_.literal("-")), int_part, fraction, exponent});
  // Generation: a minus sign only before a nonzero digit (never -0, -0.0, -0e5).
  const expr_id nonzero =
      g_.choice({g_.sequence({g_.byte_range('1', '9'), g_.repeat(digit, 0, k_unbounded), fraction}),
                 g_.sequence({g_.literal("0."), g_.repeat(digit, 0, k_unbounded),
                              g_.byte_range('1', '9'), g_.repeat(digit, 0, k_unbounded)})});
  return g_.sequence(
      {g_.choice({g_.sequence({int_part, fraction}), g_.sequence({g_.literal("-"), nonzero})}),
       exponent});
}

void json_text::build_any() {
  value_rule_ = g_.fresh_rule("json_value");
  object_rule_ = g_.fresh_rule("json_object");
  array_rule_ = g_.fresh_rule("json_array");
  expr_id member = g_.sequence({any_string(), ws(), g_.literal(":"), ws(), g_.ref(*value_rule_)});
  expr_id sep = g_.sequence({ws(), g_.literal(","), ws()});
  g_.define_rule(*object_rule_, g_.sequence({g_.literal("{"), ws(),
                                             g_.optional(g_.sequence({member, g_.repeat(g_.sequence({sep, member}), 0, k_unbounded)})),
                                             ws(), g_.literal("}")}));
  expr_id item = g_.ref(*value_rule_);
  g_.define_rule(*array_rule_, g_.sequence({g_.literal("["), ws(),
                                            g_.optional(g_.sequence({item, g_.repeat(g_.sequence({sep, item}), 0, k_unbounded)})),
                                            ws(), g_.literal("]")}));
  g_.define_rule(*value_rule_, g_.choice({g_.ref(*object_rule_), g_.ref(*array_rule_), any_string(), any_number(),
                                          boolean(), null_value()}));
}

expr_id json_text::any_value() {
  if (!value_rule_) build_any();
  return g_.ref(*value_rule_);
}
expr_id json_text::any_object() {
  if (!value_rule_) build_any();
  return g_.ref(*object_rule_);
}
expr_id json_text::any_array() {
  if (!value_rule_) build_any();
  return g_.ref(*array_rule_);
}

expr_id json_text::string_literal(std::string_view s) {
  std::vector<expr_id> chars;
  for (char32_t cp : decode_utf8(s)) chars.push_back(json_char(codepoint_set::single(cp)));
  return quoted(g_.sequence(std::move(chars)));
}

expr_id json_text::numbers_with_exponent(const exponent_constraint& c, std::size_t max_states) {
  auto text = [](const decimal& d) {
    return (d.negative ? "-" : "") + d.int_digits + "." + d.frac_digits;
  };
  auto bound_text = [&](const std::optional<bound>& b) {
    return b ? (b->exclusive ? "(" : "[") + text(b->value) : std::string("none");
  };
  const std::string key = bound_text(c.lo) + " " + bound_text(c.hi) + " " +
                          (c.step ? text(*c.step) : "any") + (c.non_integer ? " non-integer" : "");
  if (auto it = exponent_numbers_.find(key); it != exponent_numbers_.end()) return it->second;
  const expr_id e = json_detail::numbers_with_exponent(g_, c, max_states);
  exponent_numbers_.emplace(key, e);
  return e;
}

expr_id json_text::literal(const nlohmann::ordered_json& v, bool number_exponents) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null: return null_value();
    case nlohmann::ordered_json::value_t::boolean: return g_.literal(v.get<bool>() ? "true" : "false");
    case nlohmann::ordered_json::value_t::string: return string_literal(v.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
    case nlohmann::ordered_json::value_t::number_float: {
      if (use_ == json_schema_use::generation) {
        const decimal x = to_decimal(v);  // exact: the schema's numbers are (exact_json.hpp)
        return g_.literal((x.negative && !x.is_zero() ? "-" : "") + x.int_digits +  // never -0
                          (x.frac_digits.empty() ? "" : "." + x.frac_digits));
      }
      // Validation: every spelling of the exact value (7: 7.0, 70e-1, 0.7E1; 0: -0, 0e9).
      return spellings_of(g_, to_decimal(v), number_exponents);
    }
    case nlohmann::ordered_json::value_t::array: {
      std::vector<expr_id> items{g_.literal("["), ws()};
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) items.insert(items.end(), {ws(), g_.literal(","), ws()});
        items.push_back(literal(v[i], number_exponents));
      }
      items.insert(items.end(), {ws(), g_.literal("]")});
      return g_.sequence(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<expr_id> items{g_.literal("{"), ws()};
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) items.insert(items.end(), {ws(), g_.literal(","), ws()});
        first = false;
        items.insert(items.end(), {string_literal(k), ws(), g_.literal(":"), ws(),
                                   literal(x, number_exponents)});
      }
      items.insert(items.end(), {ws(), g_.literal("}")});
      return g_.sequence(std::move(items));
    }
    default: return g_.nothing();
  }
}

}  // namespace di::grammar::json_detail
