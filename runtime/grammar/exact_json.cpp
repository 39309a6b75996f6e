// parse_json_exact (see exact_json.hpp): nlohmann's DOM builder behind a SAX layer that keeps
// the path of the value being read and compares each floating-point literal with its double.
#include "runtime/grammar/exact_json.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <vector>

namespace di::grammar {

namespace {

using json = nlohmann::ordered_json;

/// A decimal number as digits (no leading or trailing zeros; empty for zero) times 10^exp.
struct decimal_form {
  bool negative = false;
  std::string digits;
  long long exp = 0;
  bool operator==(const decimal_form&) const = default;
};

decimal_form decimal_of(std::string_view s) {
  decimal_form d;
  std::size_t i = 0;
  if (i < s.size() && s[i] == '-') {
    d.negative = true;
    ++i;
  }
  std::string mantissa;
  long long fraction_digits = 0;
  bool after_point = false;
  for (; i < s.size() && s[i] != 'e' && s[i] != 'E'; ++i) {
    if (s[i] == '.') {
      after_point = true;
      continue;
    }
    mantissa.push_back(s[i]);
    fraction_digits += after_point;
  }
  long long exp = 0;
  if (i < s.size()) exp = std::strtoll(std::string(s.substr(i + 1)).c_str(), nullptr, 10);
  const std::size_t first = mantissa.find_first_not_of('0');
  if (first == std::string::npos) return {};  // zero, of either sign
  mantissa.erase(0, first);
  std::size_t trailing = 0;
  while (mantissa[mantissa.size() - 1 - trailing] == '0') ++trailing;
  mantissa.resize(mantissa.size() - trailing);
  d.digits = std::move(mantissa);
  d.exp = exp - fraction_digits + (long long)trailing;
  return d;
}

/// nlohmann's DOM builder, with the path of the current value and the first inexact number.
class exact_sax {
 public:
  explicit exact_sax(json& root) : dom_(root, false) {}

  bool null() { return value() && dom_.null(); }
  bool boolean(bool v) { return value() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return value() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return value() && dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& literal) {
    if (!value()) return false;
    if (!inexact && is_inexact_literal(literal, v)) inexact = inexact_number{path(), literal};
    return dom_.number_float(v, literal);
  }
  bool string(json::string_t& v) { return value() && dom_.string(v); }
  bool binary(json::binary_t& v) { return value() && dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (!value()) return false;
    frames_.push_back({false, {}, 0});
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    frames_.back().key = k;
    return dom_.key(k);
  }
  bool end_object() {
    frames_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (!value()) return false;
    frames_.push_back({true, {}, 0});
    return dom_.start_array(n);
  }
  bool end_array() {
    frames_.pop_back();
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& e) {
    error = e.what();
    return dom_.parse_error(position, token, e);
  }

  std::optional<inexact_number> inexact;
  std::string error;

 private:
  struct frame {
    bool is_array;
    std::string key;    // objects: the member being read
    std::size_t index;  // arrays: the element being read, + 1
  };

  /// A value starts: in an array, it is the next element.
  bool value() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().index;
    return true;
  }

  std::string path() const {
    std::string p;
    for (const frame& f : frames_) {
      if (f.is_array)
        p += fmt::format("[{}]", f.index - 1);
      else
        p += (p.empty() ? "" : ".") + f.key;
    }
    return p;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<frame> frames_;
};

}  // namespace

bool is_inexact_literal(std::string_view literal, double value) {
  if (!std::isfinite(value)) return true;
  return !(decimal_of(literal) == decimal_of(fmt::format("{}", value)));
}

exact_json_result parse_json_exact(std::string_view text) {
  exact_json_result r;
  exact_sax sax(r.value);
  const bool ok = json::sax_parse(text, &sax, nlohmann::detail::input_format_t::json, true);
  if (!ok || !sax.error.empty()) {
    r.value = json(json::value_t::discarded);
    r.error = sax.error.empty() ? "the text is not valid JSON" : sax.error;
    return r;
  }
  r.inexact = std::move(sax.inexact);
  return r;
}

}  // namespace di::grammar
