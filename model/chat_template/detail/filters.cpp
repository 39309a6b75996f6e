// Jinja's scalar and text filters (trim, lower, replace, indent, tojson, int, round,
// default, ...) and the filter registry. tojson is transformers' version: json.dumps with
// ensure_ascii=False and indent/separators/sort_keys passed through.
#include "model/chat_template/detail/builtins.hpp"
#include "model/chat_template/detail/format.hpp"
#include "model/chat_template/detail/interpreter.hpp"
#include "model/chat_template/detail/text.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

namespace di::jinja {

namespace {

value filter_trim(interpreter&, const value& v, call_args& args) {
  auto a = bind_args("trim", args, {"chars"});
  if (!a[0] || a[0]->is_none()) return value::string(py_strip(to_str(v), strip_side::both));
  std::string chars = require_string(*a[0], "trim", "chars");
  return value::string(py_strip(to_str(v), strip_side::both, &chars));
}

template <std::string (*Fn)(std::string_view)>
value text_filter(interpreter&, const value& v, call_args& args) {
  bind_args("filter", args, {});
  return value::string(Fn(to_str(v)));
}

// Jinja's title: upper-case the first letter after start/whitespace/-({[<, lower the rest.
std::string jinja_title(std::string_view s) {
  std::u32string cps = utf8_decode(s);
  bool word_start = true;
  for (char32_t& c : cps) {
    bool separator = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    c = word_start ? py_toupper(c) : py_tolower(c);
    word_start = separator;
  }
  return utf8_encode(cps);
}

std::string identity_text(std::string_view s) {
  return std::string(s);
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

value filter_replace(interpreter& in, const value& v, call_args& args) {
  auto a = bind_args("replace", args, {"old", "new", "count"});
  if (!a[0] || !a[1]) throw eval_error("replace() needs the 'old' and 'new' arguments");
  std::string result = py_replace(to_str(v), a[0] ? to_str(*a[0]) : "", a[1] ? to_str(*a[1]) : "",
                                  arg_int(a[2], "replace", "count", -1));
  in.check_size(result.size());
  return value::string(std::move(result));
}

value filter_indent(interpreter& in, const value& v, call_args& args) {
  auto a = bind_args("indent", args, {"width", "first", "blank"});
  if (v.is_undefined()) fail_undefined(v);
  std::string indentation =
      a[0] && a[0]->is_string()
          ? a[0]->as_string()
          : std::string(std::size_t(std::max<std::int64_t>(arg_int(a[0], "indent", "width", 4), 0)),
                        ' ');
  std::vector<std::string> lines = py_splitlines(to_str(v) + "\n");
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    bool indent_line =
        i == 0 ? arg_bool(a[1], false) : (!lines[i].empty() || arg_bool(a[2], false));
    if (indent_line) out += indentation;
    out += lines[i];
    in.check_size(out.size());
  }
  return value::string(std::move(out));
}

value filter_wordcount(interpreter&, const value& v, call_args& args) {
  bind_args("wordcount", args, {});
  std::int64_t words = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(to_str(v))) {
    bool is_word = py_isword(c);
    if (is_word && !in_word) ++words;
    in_word = is_word;
  }
  return value::integer(words);
}

value filter_center(interpreter& in, const value& v, call_args& args) {
  auto a = bind_args("center", args, {"width"});
  call_args method_args;
  method_args.positional.push_back(value::integer(arg_int(a[0], "center", "width", 80)));
  return call_method(in, value::string(to_str(v)), "center", method_args);
}

value filter_tojson(interpreter& in, const value& v, call_args& args) {
  auto a = bind_args("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  json_options options;
  options.ensure_ascii = arg_bool(a[0], false);
  if (a[1] && !a[1]->is_none()) {
    options.indent = a[1]->is_string() ? a[1]->as_string()
                                       : std::string(std::size_t(std::max<std::int64_t>(
                                                         arg_int(a[1], "tojson", "indent", 0), 0)),
                                                     ' ');
    options.item_separator.assign(1, ',');  // json.dumps drops the space when indenting
  }
  if (a[2] && !a[2]->is_none()) {
    if (!a[2]->is_list() || a[2]->items().size() != 2)
      throw eval_error("separators must be a pair (item_separator, key_separator)");
    options.item_separator = require_string(a[2]->items()[0], "tojson", "separators");
    options.key_separator = require_string(a[2]->items()[1], "tojson", "separators");
  }
  options.sort_keys = arg_bool(a[3], false);
  std::string out = json_dumps(v, options);
  in.check_size(out.size());
  return value::string(std::move(out));
}

// Removes the underscores Python allows in numbers (each between two digits); nullopt when
// an underscore is misplaced.
std::optional<std::string> without_digit_separators(const std::string& s) {
  std::string out;
  auto is_digit_like = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      out.push_back(s[i]);
      continue;
    }
    if (i == 0 || i + 1 == s.size() || !is_digit_like(s[i - 1]) || !is_digit_like(s[i + 1]))
      return std::nullopt;
  }
  return out;
}

// Python's float(str): surrounding whitespace, underscores between digits, inf/nan.
std::optional<double> parse_float(const std::string& text) {
  std::string s = py_strip(text, strip_side::both);
  if (s.find_first_of("xXpP") != std::string::npos) return std::nullopt;  // no hex floats
  std::optional<std::string> cleaned = without_digit_separators(s);
  if (!cleaned) return std::nullopt;
  const std::string& digits = *cleaned;
  if (digits.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size()) return std::nullopt;
  return d;
}

// Python's int(str, base): whitespace, sign, a 0x/0o/0b prefix matching base, underscores.
std::optional<std::int64_t> parse_int(const std::string& text, int base) {
  std::string s = py_strip(text, strip_side::both);
  bool negative = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.erase(0, 1);
  if (s.size() > 2 && s[0] == '0') {
    char p = char(s[1] | 0x20);
    if ((p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2))
      s.erase(0, 2);
  }
  std::optional<std::string> cleaned = without_digit_separators(s);
  if (!cleaned || cleaned->empty() || base < 2 || base > 36) return std::nullopt;
  const std::string& digits = *cleaned;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(digits.c_str(), &end, base);
  if (errno != 0 || end != digits.c_str() + digits.size() || digits[0] == '-' || digits[0] == '+')
    return std::nullopt;
  return negative ? -v : v;
}

std::optional<std::int64_t> float_to_int(double d) {
  if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return std::nullopt;
  return std::int64_t(d);  // truncates toward zero like int(float)
}

value filter_int(interpreter&, const value& v, call_args& args) {
  auto a = bind_args("int", args, {"default", "base"});
  if (v.is_undefined()) fail_undefined(v);
  value fallback = a[0] ? *a[0] : value::integer(0);
  std::optional<std::int64_t> result;
  if (v.is_int() || v.is_bool())
    result = v.is_int() ? v.as_int() : std::int64_t(v.as_bool());
  else if (v.is_float())
    result = float_to_int(v.as_float());
  else if (v.is_string()) {
    result = parse_int(v.as_string(), int(arg_int(a[1], "int", "base", 10)));
    if (!result) {
      auto d = parse_float(v.as_string());
      if (d) result = float_to_int(*d);
    }
  }
  return result ? value::integer(*result) : fallback;
}

value filter_float(interpreter&, const value& v, call_args& args) {
  auto a = bind_args("float", args, {"default"});
  if (v.is_undefined()) fail_undefined(v);
  value fallback = a[0] ? *a[0] : value::floating(0.0);
  if (v.is_number()) return value::floating(to_double(v));
  if (v.is_string()) {
    auto d = parse_float(v.as_string());
    if (d) return value::floating(*d);
  }
  return fallback;
}

value filter_abs(interpreter&, const value& v, call_args& args) {
  bind_args("abs", args, {});
  if (v.is_float()) return value::floating(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool())
    return unary_operation(v.is_int() && v.as_int() < 0 ? unary_op::neg : unary_op::pos, v);
  if (v.is_undefined()) fail_undefined(v);
  throw eval_error(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}

// Python's round(x, n): correctly rounded, ties to even on the exact binary value.
double round_half_even(double x, std::int64_t precision) {
  if (!std::isfinite(x)) return x;
  if (precision >= 0) {
    std::string text = fmt::format("{:.{}f}", x, std::min<std::int64_t>(precision, 300));
    return std::strtod(text.c_str(), nullptr);
  }
  double scale = std::pow(10.0, double(-precision));
  return std::nearbyint(x / scale) * scale;
}

value filter_round(interpreter&, const value& v, call_args& args) {
  auto a = bind_args("round", args, {"precision", "method"});
  std::int64_t precision = arg_int(a[0], "round", "precision", 0);
  std::string method = arg_string(a[1], "round", "method", "common");
  if (!v.is_number()) {
    if (v.is_undefined()) fail_undefined(v);
    throw eval_error(fmt::format("type {} doesn't define __round__ method", type_name(v)));
  }
  if (method == "common") {
    if (!v.is_float() && precision >= 0)
      return value::integer(v.is_int() ? v.as_int() : v.as_bool());
    return value::floating(round_half_even(to_double(v), precision));
  }
  if (method != "floor" && method != "ceil")
    throw eval_error("method must be 'common', 'ceil' or 'floor'");
  double scale = std::pow(10.0, double(precision));
  double scaled = to_double(v) * scale;
  return value::floating((method == "floor" ? std::floor(scaled) : std::ceil(scaled)) / scale);
}

value filter_default(interpreter&, const value& v, call_args& args) {
  auto a = bind_args("default", args, {"default_value", "boolean"});
  bool use_default = v.is_undefined() || (arg_bool(a[1], false) && !truthy(v));
  return use_default ? (a[0] ? *a[0] : value::string("")) : v;
}

}  // namespace

filter_fn find_filter(std::string_view name) {
  static const std::unordered_map<std::string_view, filter_fn> filters = {
      {"trim", filter_trim},
      {"lower", text_filter<py_lower>},
      {"upper", text_filter<py_upper>},
      {"title", text_filter<jinja_title>},
      {"capitalize", text_filter<py_capitalize>},
      {"string", text_filter<identity_text>},
      {"safe", text_filter<identity_text>},
      {"escape", text_filter<html_escape>},
      {"e", text_filter<html_escape>},
      {"forceescape", text_filter<html_escape>},
      {"replace", filter_replace},
      {"indent", filter_indent},
      {"wordcount", filter_wordcount},
      {"center", filter_center},
      {"tojson", filter_tojson},
      {"int", filter_int},
      {"float", filter_float},
      {"abs", filter_abs},
      {"round", filter_round},
      {"default", filter_default},
      {"d", filter_default},
  };
  auto it = filters.find(name);
  if (it != filters.end()) return it->second;
  return find_sequence_filter(name);
}

}  // namespace di::jinja
