// Methods templates call on data: str (strip, split, startswith, replace, format, ...),
// dict (get, items, keys, values) and list (index, count). Mutating methods exist only to
// be refused, as transformers' ImmutableSandboxedEnvironment refuses them.
#include "model/chat_template/detail/builtins.hpp"
#include "model/chat_template/detail/format.hpp"
#include "model/chat_template/detail/interpreter.hpp"
#include "model/chat_template/detail/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

namespace di::jinja {

namespace {

using names = std::unordered_set<std::string_view>;

const names& str_methods() {
  static const names n = {
      "strip",        "lstrip",  "rstrip",  "split",   "rsplit",     "splitlines", "startswith",
      "endswith",     "upper",   "lower",   "title",   "capitalize", "replace",    "find",
      "rfind",        "index",   "rindex",  "count",   "join",       "format",     "isdigit",
      "isalpha",      "isalnum", "isspace", "islower", "isupper",    "istitle",    "removeprefix",
      "removesuffix", "center",  "ljust",   "rjust"};
  return n;
}

// Python's str.format for `{}`, `{0}`, `{name}`, `{!r}` and `{{ }}`; format specs are refused.
std::string str_format(const std::string& fmt_text, const call_args& args) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt_text.size(); ++i) {
    char c = fmt_text[i];
    if (c == '}') {
      if (i + 1 < fmt_text.size() && fmt_text[i + 1] == '}')
        ++i;
      else
        throw eval_error("single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt_text.size() && fmt_text[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    std::size_t close = fmt_text.find('}', i);
    if (close == std::string::npos) throw eval_error("single '{' encountered in format string");
    std::string field = fmt_text.substr(i + 1, close - i - 1);
    i = close;
    bool as_repr = false;
    if (auto bang = field.find('!'); bang != std::string::npos) {
      as_repr = field.substr(bang + 1) == "r";
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos || field.find('.') != std::string::npos ||
        field.find('[') != std::string::npos)
      throw eval_error("format specs and field lookups in str.format() are not supported");
    const value* arg = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      std::size_t index = field.empty() ? auto_index++ : std::stoul(field);
      if (index >= args.positional.size())
        throw eval_error(fmt::format("format(): replacement index {} out of range", index));
      arg = &args.positional[index];
    } else {
      for (const auto& [k, v] : args.keyword)
        if (k == field) arg = &v;
      if (!arg) throw eval_error(fmt::format("format(): missing keyword argument '{}'", field));
    }
    if (as_repr)
      append_repr(out, *arg);
    else
      append_str(out, *arg);
  }
  return out;
}

bool all_code_points(const std::string& s, bool (*pred)(char32_t)) {
  std::u32string cps = utf8_decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

// str.islower()/isupper(): has cased characters and none of the other case.
bool has_only_case(const std::string& s, bool upper) {
  bool has_cased = false;
  for (char32_t c : utf8_decode(s)) {
    if (!py_iscased(c)) continue;
    has_cased = true;
    if ((py_toupper(c) == c) != upper) return false;
  }
  return has_cased;
}

// str.istitle(): cased characters start words (upper) or continue them (lower).
bool is_title_case(const std::string& s) {
  bool previous_cased = false, has_cased = false;
  for (char32_t c : utf8_decode(s)) {
    bool upper = py_iscased(c) && py_toupper(c) == c && py_tolower(c) != c;
    bool lower = py_iscased(c) && py_tolower(c) == c && py_toupper(c) != c;
    if ((upper && previous_cased) || (lower && !previous_cased)) return false;
    has_cased = has_cased || upper || lower;
    previous_cased = upper || lower;
  }
  return has_cased;
}

// startswith/endswith accept a str or a tuple of str.
bool affix_match(const std::string& s, const value& affix, bool at_start, std::string_view callee) {
  auto test = [&](const value& a) {
    std::string t = require_string(a, callee, "prefix");
    return at_start ? s.starts_with(t) : s.ends_with(t);
  };
  if (affix.is_list()) return std::any_of(affix.items().begin(), affix.items().end(), test);
  return test(affix);
}

std::string pad(const std::string& s, std::int64_t width, const std::string& fill, int align) {
  auto len = std::int64_t(utf8_length(s));
  if (width <= len) return s;
  std::int64_t total = width - len;
  std::int64_t left = align < 0 ? 0 : align > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (std::int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (std::int64_t i = left; i < total; ++i) out += fill;
  return out;
}

value string_list(std::vector<std::string> parts) {
  std::vector<value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(value::string(std::move(p)));
  return value::list(std::move(items));
}

value call_str_split(const std::string& s, std::string_view name, call_args& args) {
  auto a = bind_args(name, args, {"sep", "maxsplit"});
  std::int64_t maxsplit = arg_int(a[1], name, "maxsplit", -1);
  if (!a[0] || a[0]->is_none())
    return string_list(py_split(s, nullptr, maxsplit, name == "rsplit"));
  std::string sep = require_string(*a[0], name, "sep");
  if (sep.empty()) throw eval_error("empty separator");
  return string_list(py_split(s, &sep, maxsplit, name == "rsplit"));
}

value call_str_find(const std::string& s, std::string_view name, call_args& args) {
  auto a = bind_args(name, args, {"sub"});
  std::string sub = a[0] ? require_string(*a[0], name, "sub") : std::string();
  bool from_right = name == "rfind" || name == "rindex";
  std::int64_t at = py_find(s, sub, from_right);
  if (at < 0 && (name == "index" || name == "rindex")) throw eval_error("substring not found");
  return value::integer(at);
}

value call_str_join(const std::string& s, call_args& args) {
  auto a = bind_args("join", args, {"iterable"});
  if (!a[0]) throw eval_error("join() takes exactly one argument");
  std::string out;
  std::vector<value> items = iterate(*a[0]);
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string())
      throw eval_error(
          fmt::format("sequence item {}: expected str instance, {} found", i, type_name(items[i])));
    if (i) out += s;
    out += items[i].as_string();
  }
  return value::string(std::move(out));
}

value call_str_strip(const std::string& s, std::string_view name, call_args& args) {
  auto a = bind_args(name, args, {"chars"});
  strip_side side = name == "strip"    ? strip_side::both
                    : name == "lstrip" ? strip_side::left
                                       : strip_side::right;
  if (!a[0] || a[0]->is_none()) return value::string(py_strip(s, side));
  std::string chars = require_string(*a[0], name, "chars");
  return value::string(py_strip(s, side, &chars));
}

// isdigit/isalpha/isspace/isalnum/islower/isupper/istitle.
value call_str_predicate(const std::string& s, std::string_view name, call_args& args) {
  bind_args(name, args, {});
  if (name == "isdigit") return value::boolean(all_code_points(s, py_isdigit));
  if (name == "isalpha") return value::boolean(all_code_points(s, py_isalpha));
  if (name == "isspace") return value::boolean(all_code_points(s, py_isspace));
  if (name == "isalnum")
    return value::boolean(
        all_code_points(s, [](char32_t c) { return py_isalpha(c) || py_isdigit(c); }));
  if (name == "istitle") return value::boolean(is_title_case(s));
  return value::boolean(has_only_case(s, name == "isupper"));
}

// upper/lower/title/capitalize/removeprefix/removesuffix/center/ljust/rjust.
value call_str_transform(interpreter& in, const std::string& s, std::string_view name,
                         call_args& args) {
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    bind_args(name, args, {});
    return value::string(name == "upper"   ? py_upper(s)
                         : name == "lower" ? py_lower(s)
                         : name == "title" ? py_title(s)
                                           : py_capitalize(s));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto a = bind_args(name, args, {"affix"});
    std::string affix = arg_string(a[0], name, "affix", "");
    if (name == "removeprefix" && s.starts_with(affix))
      return value::string(s.substr(affix.size()));
    if (name == "removesuffix" && !affix.empty() && s.ends_with(affix))
      return value::string(s.substr(0, s.size() - affix.size()));
    return value::string(s);
  }
  auto a = bind_args(name, args, {"width", "fillchar"});  // center / ljust / rjust
  std::int64_t width = arg_int(a[0], name, "width", 0);
  in.check_size(std::size_t(std::max<std::int64_t>(width, 0)));
  std::string fill = arg_string(a[1], name, "fillchar", " ");
  if (utf8_length(fill) != 1)
    throw eval_error("The fill character must be exactly one character long");
  return value::string(pad(s, width, fill, name == "ljust" ? -1 : name == "rjust" ? 1 : 0));
}

value call_str_method(interpreter& in, const std::string& s, std::string_view name,
                      call_args& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") return call_str_strip(s, name, args);
  if (name == "split" || name == "rsplit") return call_str_split(s, name, args);
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex")
    return call_str_find(s, name, args);
  if (name == "join") return call_str_join(s, args);
  if (name.starts_with("is")) return call_str_predicate(s, name, args);
  if (name == "splitlines") {
    auto a = bind_args(name, args, {"keepends"});
    if (arg_bool(a[0], false)) throw eval_error("splitlines(keepends=True) is not supported");
    return string_list(py_splitlines(s));
  }
  if (name == "startswith" || name == "endswith") {
    auto a = bind_args(name, args, {"prefix"});
    if (!a[0]) throw eval_error(fmt::format("{}() takes at least 1 argument", name));
    return value::boolean(affix_match(s, *a[0], name == "startswith", name));
  }
  if (name == "count") {
    auto a = bind_args(name, args, {"sub"});
    return value::integer(py_count(s, arg_string(a[0], name, "sub", "")));
  }
  if (name == "replace" || name == "format") {
    std::string result;
    if (name == "format") {
      result = str_format(s, args);
    } else {
      auto a = bind_args(name, args, {"old", "new", "count"});
      if (!a[0] || !a[1]) throw eval_error("replace() needs the 'old' and 'new' arguments");
      result = py_replace(s, arg_string(a[0], name, "old", ""), arg_string(a[1], name, "new", ""),
                          arg_int(a[2], name, "count", -1));
    }
    in.check_size(result.size());
    return value::string(std::move(result));
  }
  return call_str_transform(in, s, name, args);
}

value call_dict_method(const dict_data& d, std::string_view name, call_args& args) {
  if (name == "get") {
    auto a = bind_args(name, args, {"key", "default"});
    if (!a[0]) throw eval_error("get() expected at least 1 argument, got 0");
    const value* v = a[0]->is_string() ? d.find(a[0]->as_string()) : nullptr;
    return v ? *v : (a[1] ? *a[1] : value::none());
  }
  bind_args(name, args, {});
  if (name == "copy") return value::dict(d);
  std::vector<value> out;
  for (const auto& [k, v] : d.entries()) {
    if (name == "keys")
      out.push_back(value::string(k));
    else if (name == "values")
      out.push_back(v);
    else
      out.push_back(value::list({value::string(k), v}, true));
  }
  return value::list(std::move(out));
}

value call_list_method(const value& list, std::string_view name, call_args& args) {
  if (name == "copy") {
    bind_args(name, args, {});
    return value::list(list.items(), list.as_list().is_tuple);
  }
  auto a = bind_args(name, args, {"value"});
  if (!a[0]) throw eval_error(fmt::format("{}() takes exactly one argument", name));
  std::int64_t count = 0;
  for (std::size_t i = 0; i < list.items().size(); ++i) {
    if (!values_equal(list.items()[i], *a[0])) continue;
    if (name == "index") return value::integer(std::int64_t(i));
    ++count;
  }
  if (name == "index") throw eval_error(fmt::format("{} is not in list", to_str(*a[0])));
  return value::integer(count);
}

}  // namespace

method_kind find_method(const value& receiver, std::string_view name) {
  static const names list_safe = {"index", "count", "copy"};
  static const names list_unsafe = {"append", "extend",  "insert", "pop",
                                    "remove", "reverse", "sort",   "clear"};
  static const names dict_safe = {"get", "items", "keys", "values", "copy"};
  static const names dict_unsafe = {"pop", "popitem", "update", "setdefault", "clear"};
  auto kind_in = [&](const names& safe, const names* unsafe) {
    if (safe.count(name)) return method_kind::safe;
    if (unsafe && unsafe->count(name)) return method_kind::unsafe;
    return method_kind::none;
  };
  if (receiver.is_string()) return kind_in(str_methods(), nullptr);
  if (receiver.is_list()) return kind_in(list_safe, &list_unsafe);
  if (receiver.is_dict()) return kind_in(dict_safe, &dict_unsafe);
  return method_kind::none;
}

value call_method(interpreter& in, const value& receiver, std::string_view name, call_args& args) {
  if (receiver.is_string()) return call_str_method(in, receiver.as_string(), name, args);
  if (receiver.is_dict()) return call_dict_method(receiver.as_dict(), name, args);
  return call_list_method(receiver, name, args);
}

}  // namespace di::jinja
