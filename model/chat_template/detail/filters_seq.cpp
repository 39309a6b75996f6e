// Jinja's sequence filters: length, first/last, join, sort, unique, dictsort, min/max/sum,
// and the higher-order map / select / reject / selectattr / rejectattr, which look up other
// filters and tests by name. Results that Jinja returns as generators are lists here.
#include "model/chat_template/detail/builtins.hpp"
#include "model/chat_template/detail/format.hpp"
#include "model/chat_template/detail/interpreter.hpp"
#include "model/chat_template/detail/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace di::jinja {

namespace {

// Jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
value lookup_attribute(interpreter& in, value item, const value& attribute) {
  if (!attribute.is_string()) return in.get_item(item, attribute);
  for (std::string_view rest = attribute.as_string();;) {
    std::size_t dot = rest.find('.');
    std::string part(rest.substr(0, dot));
    bool is_index = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    item = in.get_item(item, is_index ? value::integer(std::stoll(part)) : value::string(part));
    if (dot == std::string_view::npos) return item;
    rest.remove_prefix(dot + 1);
  }
}

value lower_if_string(const value& v) {
  return v.is_string() ? value::string(py_lower(v.as_string())) : v;
}

// The sort/unique/min/max key of an item: an attribute (or comma-separated attributes), case
// folded unless case_sensitive.
value sort_key(interpreter& in, const value& item, const std::optional<value>& attribute,
               bool case_sensitive) {
  auto fold = [&](const value& v) { return case_sensitive ? v : lower_if_string(v); };
  if (!attribute || attribute->is_none()) return fold(item);
  if (attribute->is_string() && attribute->as_string().find(',') != std::string::npos) {
    std::vector<value> keys;
    std::string comma = ",";
    for (const std::string& name : py_split(attribute->as_string(), &comma, -1))
      keys.push_back(fold(lookup_attribute(in, item, value::string(name))));
    return value::list(std::move(keys), true);
  }
  return fold(lookup_attribute(in, item, *attribute));
}

value filter_length(interpreter&, const value& v, call_args& args) {
  bind_args("length", args, {});
  switch (v.type()) {
    case value::kind::undefined:
      return value::integer(0);
    case value::kind::string:
      return value::integer(std::int64_t(utf8_length(v.as_string())));
    case value::kind::list:
      return value::integer(std::int64_t(v.items().size()));
    case value::kind::dict:
      return value::integer(std::int64_t(v.as_dict().size()));
    default:
      throw eval_error(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

value filter_first(interpreter&, const value& v, call_args& args) {
  bind_args("first", args, {});
  std::vector<value> items = iterate(v);
  return items.empty() ? value::undefined("No first item, sequence was empty.") : items.front();
}

value filter_last(interpreter&, const value& v, call_args& args) {
  bind_args("last", args, {});
  std::vector<value> items = iterate(v);
  return items.empty() ? value::undefined("No last item, sequence was empty.") : items.back();
}

value filter_list(interpreter&, const value& v, call_args& args) {
  bind_args("list", args, {});
  return value::list(iterate(v));
}

value filter_items(interpreter&, const value& v, call_args& args) {
  bind_args("items", args, {});
  if (v.is_undefined()) return value::list({});
  if (!v.is_dict()) throw eval_error("Can only get item pairs from a mapping.");
  std::vector<value> pairs;
  for (const auto& [k, item] : v.as_dict().entries())
    pairs.push_back(value::list({value::string(k), item}, true));
  return value::list(std::move(pairs));
}

value filter_join(interpreter& in, const value& v, call_args& args) {
  auto a = bind_args("join", args, {"d", "attribute"});
  std::string separator = a[0] ? to_str(*a[0]) : "";
  std::string out;
  bool first = true;
  for (const value& item : iterate(v)) {
    if (!first) out += separator;
    first = false;
    append_str(out, a[1] && !a[1]->is_none() ? lookup_attribute(in, item, *a[1]) : item);
    in.check_size(out.size());
  }
  return value::string(std::move(out));
}

value filter_reverse(interpreter&, const value& v, call_args& args) {
  bind_args("reverse", args, {});
  if (v.is_string()) {
    std::u32string cps = utf8_decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return value::string(utf8_encode(cps));
  }
  std::vector<value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return value::list(std::move(items));
}

// Stable sort by key, like Python's sorted(); reverse keeps equal items in input order.
std::vector<value> sorted_by(std::vector<value> items, std::vector<value> keys, bool reverse) {
  std::vector<std::size_t> order(items.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    if (values_equal(keys[x], keys[y])) return false;  // e.g. two missing attributes
    return reverse ? compare_values(keys[y], keys[x]) < 0 : compare_values(keys[x], keys[y]) < 0;
  });
  std::vector<value> out;
  out.reserve(items.size());
  for (std::size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

value filter_sort(interpreter& in, const value& v, call_args& args) {
  auto a = bind_args("sort", args, {"reverse", "case_sensitive", "attribute"});
  std::vector<value> items = iterate(v), keys;
  for (const value& item : items) keys.push_back(sort_key(in, item, a[2], arg_bool(a[1], false)));
  return value::list(sorted_by(std::move(items), std::move(keys), arg_bool(a[0], false)));
}

value filter_dictsort(interpreter&, const value& v, call_args& args) {
  auto a = bind_args("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw eval_error("dictsort needs a mapping");
  std::string by = arg_string(a[1], "dictsort", "by", "key");
  if (by != "key" && by != "value")
    throw eval_error("You can only sort by either \"key\" or \"value\"");
  std::vector<value> pairs, keys;
  for (const auto& [k, item] : v.as_dict().entries()) {
    value key = by == "key" ? value::string(k) : item;
    keys.push_back(arg_bool(a[0], false) ? key : lower_if_string(key));
    pairs.push_back(value::list({value::string(k), item}, true));
  }
  return value::list(sorted_by(std::move(pairs), std::move(keys), arg_bool(a[2], false)));
}

value filter_unique(interpreter& in, const value& v, call_args& args) {
  auto a = bind_args("unique", args, {"case_sensitive", "attribute"});
  std::unordered_set<std::string> seen;  // keyed by repr, which distinguishes values
  std::vector<value> out;
  for (const value& item : iterate(v)) {
    std::string key;
    append_repr(key, sort_key(in, item, a[1], arg_bool(a[0], false)));
    if (seen.insert(std::move(key)).second) out.push_back(item);
  }
  return value::list(std::move(out));
}

value min_or_max(interpreter& in, const value& v, call_args& args, bool is_max) {
  auto a = bind_args(is_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  std::vector<value> items = iterate(v);
  if (items.empty()) return value::undefined("No aggregated item, sequence was empty.");
  std::size_t best = 0;
  value best_key = sort_key(in, items[0], a[1], arg_bool(a[0], false));
  for (std::size_t i = 1; i < items.size(); ++i) {
    value key = sort_key(in, items[i], a[1], arg_bool(a[0], false));
    int c = compare_values(key, best_key);
    if (is_max ? c > 0 : c < 0) best = i, best_key = std::move(key);
  }
  return items[best];
}

value filter_min(interpreter& in, const value& v, call_args& args) {
  return min_or_max(in, v, args, false);
}
value filter_max(interpreter& in, const value& v, call_args& args) {
  return min_or_max(in, v, args, true);
}

value filter_sum(interpreter& in, const value& v, call_args& args) {
  auto a = bind_args("sum", args, {"attribute", "start"});
  value total = a[1] ? *a[1] : value::integer(0);
  for (const value& item : iterate(v)) {
    value term = a[0] && !a[0]->is_none() ? lookup_attribute(in, item, *a[0]) : item;
    total = binary_operation(binary_op::add, total, term, in);
  }
  return total;
}

// map(attribute='x', default=d) or map('filter', args...).
value filter_map(interpreter& in, const value& v, call_args& args) {
  std::vector<value> out;
  if (!truthy(v)) return value::list({});  // like Jinja, arguments are looked at per item
  if (args.positional.empty()) {
    auto a = bind_args("map", args, {"attribute", "default"});
    if (!a[0]) throw eval_error("map requires a filter name or attribute=");
    for (const value& item : iterate(v)) {
      value mapped = lookup_attribute(in, item, *a[0]);
      out.push_back(mapped.is_undefined() && a[1] && !a[1]->is_none() ? *a[1] : mapped);
    }
    return value::list(std::move(out));
  }
  std::string name = require_string(args.positional.front(), "map", "filter");
  filter_fn fn = find_filter(name);
  if (!fn) throw eval_error(fmt::format("no filter named '{}'", name));
  for (const value& item : iterate(v)) {
    call_args rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
    out.push_back(fn(in, item, rest));
  }
  return value::list(std::move(out));
}

// select/reject/selectattr/rejectattr: keep items whose (attribute) passes a test.
value select_items(interpreter& in, const value& v, call_args& args, bool keep, bool by_attribute) {
  if (!truthy(v)) return value::list({});  // like Jinja, arguments are looked at per item
  std::size_t next = 0;
  value attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw eval_error("selectattr/rejectattr need an attribute name");
    attribute = args.positional[next++];
  }
  test_fn fn = nullptr;
  if (next < args.positional.size()) {
    std::string name = require_string(args.positional[next++], "select", "test");
    fn = find_test(name);
    if (!fn) throw eval_error(fmt::format("no test named '{}'", name));
  }
  std::vector<value> out;
  for (const value& item : iterate(v)) {
    value subject = by_attribute ? lookup_attribute(in, item, attribute) : item;
    call_args rest{{args.positional.begin() + std::ptrdiff_t(next), args.positional.end()},
                   args.keyword};
    bool passes = fn ? fn(in, subject, rest) : truthy(subject);
    if (passes == keep) out.push_back(item);
  }
  return value::list(std::move(out));
}

value filter_select(interpreter& in, const value& v, call_args& a) {
  return select_items(in, v, a, true, false);
}
value filter_reject(interpreter& in, const value& v, call_args& a) {
  return select_items(in, v, a, false, false);
}
value filter_selectattr(interpreter& in, const value& v, call_args& a) {
  return select_items(in, v, a, true, true);
}
value filter_rejectattr(interpreter& in, const value& v, call_args& a) {
  return select_items(in, v, a, false, true);
}

}  // namespace

filter_fn find_sequence_filter(std::string_view name) {
  static const std::unordered_map<std::string_view, filter_fn> filters = {
      {"length", filter_length},
      {"count", filter_length},
      {"first", filter_first},
      {"last", filter_last},
      {"list", filter_list},
      {"items", filter_items},
      {"join", filter_join},
      {"reverse", filter_reverse},
      {"sort", filter_sort},
      {"dictsort", filter_dictsort},
      {"unique", filter_unique},
      {"min", filter_min},
      {"max", filter_max},
      {"sum", filter_sum},
      {"map", filter_map},
      {"select", filter_select},
      {"reject", filter_reject},
      {"selectattr", filter_selectattr},
      {"rejectattr", filter_rejectattr},
  };
  auto it = filters.find(name);
  return it == filters.end() ? nullptr : it->second;
}

}  // namespace di::jinja
