// Python's str()/repr() and json.dumps() over template values (see format.hpp).
#include "model/chat_template/detail/format.hpp"

#include "model/chat_template/detail/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace di::jinja {

namespace {

constexpr int max_print_depth = 512;

void check_depth(int depth) {
  if (depth > max_print_depth)
    throw eval_error("value nested too deeply to print (does a namespace contain itself?)");
}

// Python's str.isprintable() for non-ASCII code points, for the blocks where it is false.
bool is_printable(char32_t c) {
  return !((c >= 0x80 && c <= 0xA0) || c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) ||
           (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F) || c == 0x3000 ||
           (c >= 0xD800 && c <= 0xF8FF) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) ||
           c == 0xFFFE || c == 0xFFFF);
}

void append_string_repr(std::string& out, const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  out.push_back(quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == char32_t(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(char(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", unsigned(c));
    } else if (c < 0x7F || is_printable(c)) {
      append_utf8(out, c);
    } else {
      out += c <= 0xFF     ? fmt::format("\\x{:02x}", unsigned(c))
             : c <= 0xFFFF ? fmt::format("\\u{:04x}", unsigned(c))
                           : fmt::format("\\U{:08x}", unsigned(c));
    }
  }
  out.push_back(quote);
}

void append_repr_at(std::string& out, const value& v, int depth) {
  check_depth(depth);
  switch (v.type()) {
    case value::kind::undefined:
      out += "Undefined";
      return;
    case value::kind::string:
      append_string_repr(out, v.as_string());
      return;
    case value::kind::list: {
      const auto& l = v.as_list();
      out.push_back(l.is_tuple ? '(' : '[');
      for (std::size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        append_repr_at(out, l.items[i], depth + 1);
      }
      if (l.is_tuple && l.items.size() == 1) out.push_back(',');
      out.push_back(l.is_tuple ? ')' : ']');
      return;
    }
    case value::kind::dict: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, item] : v.as_dict().entries()) {
        if (!first) out += ", ";
        first = false;
        append_string_repr(out, k);
        out += ": ";
        append_repr_at(out, item, depth + 1);
      }
      out.push_back('}');
      return;
    }
    case value::kind::object:
      v.as_object().repr(out);
      return;
    default:
      append_str(out, v);
      return;
  }
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F && c <= 0xFFFF)) {
      out += fmt::format("\\u{:04x}", unsigned(c));
    } else if (ensure_ascii && c > 0xFFFF) {
      char32_t v = c - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", unsigned(0xD800 + (v >> 10)),
                         unsigned(0xDC00 + (v & 0x3FF)));
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back('"');
}

void append_json_float(std::string& out, double d) {
  if (std::isnan(d))
    out += "NaN";
  else if (std::isinf(d))
    out += d > 0 ? "Infinity" : "-Infinity";
  else
    out += float_repr(d);
}

struct json_writer {
  const json_options& options;
  std::string& out;

  void newline(int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *options.indent;
  }

  // Writes a '[...]' or '{...}' body; `write_item(i)` writes item i.
  template <class Fn>
  void container(char open, char close, std::size_t size, int level, Fn write_item) {
    out.push_back(open);
    if (size == 0) {
      out.push_back(close);
      return;
    }
    for (std::size_t i = 0; i < size; ++i) {
      if (i) out += options.item_separator;
      if (options.indent) newline(level + 1);
      write_item(i);
    }
    if (options.indent) newline(level);
    out.push_back(close);
  }

  void write(const value& v, int level) {
    check_depth(level);
    switch (v.type()) {
      case value::kind::none:
        out += "null";
        return;
      case value::kind::boolean:
        out += v.as_bool() ? "true" : "false";
        return;
      case value::kind::integer:
        out += std::to_string(v.as_int());
        return;
      case value::kind::floating:
        append_json_float(out, v.as_float());
        return;
      case value::kind::string:
        append_json_string(out, v.as_string(), options.ensure_ascii);
        return;
      case value::kind::list: {
        const auto& items = v.items();
        container('[', ']', items.size(), level,
                  [&](std::size_t i) { write(items[i], level + 1); });
        return;
      }
      case value::kind::dict:
        write_dict(v.as_dict(), level);
        return;
      default:
        throw eval_error(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
    }
  }

  void write_dict(const dict_data& d, int level) {
    std::vector<const std::pair<std::string, value>*> entries;
    for (const auto& e : d.entries()) entries.push_back(&e);
    if (options.sort_keys)
      std::stable_sort(entries.begin(), entries.end(),
                       [](auto* a, auto* b) { return a->first < b->first; });
    container('{', '}', entries.size(), level, [&](std::size_t i) {
      append_json_string(out, entries[i]->first, options.ensure_ascii);
      out += options.key_separator;
      write(entries[i]->second, level + 1);
    });
  }
};

}  // namespace

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, std::size_t(result.ptr - buf));  // e.g. "-1.2345e+02"
  bool negative = sci.front() == '-';
  if (negative) sci.remove_prefix(1);
  std::size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos))
    if (c != '.') digits.push_back(c);
  int exponent = std::stoi(std::string(sci.substr(e_pos + 1)));
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0.";
      out.append(std::size_t(-exponent - 1), '0');
      out += digits;
    } else {
      std::size_t int_len = std::size_t(exponent) + 1;
      if (digits.size() < int_len) digits.append(int_len - digits.size(), '0');
      out += digits.substr(0, int_len) + ".";
      out += digits.size() > int_len ? digits.substr(int_len) : "0";
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out.push_back('.');
    out.append(digits, 1, std::string::npos);
  }
  out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

void append_str(std::string& out, const value& v) {
  switch (v.type()) {
    case value::kind::undefined:
      return;
    case value::kind::none:
      out += "None";
      return;
    case value::kind::boolean:
      out += v.as_bool() ? "True" : "False";
      return;
    case value::kind::integer:
      out += std::to_string(v.as_int());
      return;
    case value::kind::floating:
      out += float_repr(v.as_float());
      return;
    case value::kind::string:
      out += v.as_string();
      return;
    default:
      append_repr_at(out, v, 0);
      return;
  }
}

std::string to_str(const value& v) {
  if (v.is_string()) return v.as_string();
  std::string out;
  append_str(out, v);
  return out;
}

void append_repr(std::string& out, const value& v) {
  append_repr_at(out, v, 0);
}

std::string json_dumps(const value& v, const json_options& options) {
  std::string out;
  json_writer{options, out}.write(v, 0);
  return out;
}

}  // namespace di::jinja
