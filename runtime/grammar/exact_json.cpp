// parse_json_exact (see exact_json.hpp): nlohmann's DOM builder behind a SAX layer that keeps
// the path of the value being read and compares each floating-point literal with its double.
#include "runtime/grammar/exact_json.hpp"

#include "common/error.hpp"
#include "common/strict_json.hpp"
#include "runtime/grammar/json_schema/number_ranges.hpp"

#include <fmt/format.h>

#include <cmath>
#include <vector>

namespace di::grammar {

namespace {

using json = nlohmann::ordered_json;

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
    if (!value() || too_deep()) return false;
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
    if (!value() || too_deep()) return false;
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

  /// Refuses nesting past max_json_nesting: everything that walks a value recurses once a
  /// level (dump(), the schema compiler), and 60,000 levels overflowed the stack.
  bool too_deep() {
    if (frames_.size() < max_json_nesting) return false;
    error = fmt::format("nested deeper than {} levels", max_json_nesting);
    return true;
  }

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
  try {  // the schema compiler's exact decimals; a double through its shortest round-trip text
    return json_detail::compare(json_detail::parse_decimal(literal),
                                json_detail::parse_decimal(fmt::format("{}", value))) != 0;
  } catch (const di::error&) {
    return true;  // an exponent past what the decimals hold: no double holds that literal either
  }
}

exact_json_result parse_json_exact(std::string_view text) {
  exact_json_result r;
  exact_sax sax(r.value);
  const bool ok = json::sax_parse(text, &sax, nlohmann::detail::input_format_t::json, true);
  if (!ok || !sax.error.empty()) {
    r.value = json(json::value_t::discarded);
    r.error = sax.error.empty() ? "the text is not valid JSON" : without_nlohmann_tag(sax.error);
    return r;
  }
  r.inexact = std::move(sax.inexact);
  return r;
}

}  // namespace di::grammar
