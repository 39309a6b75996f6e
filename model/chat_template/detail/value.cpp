// Value construction, Python truthiness/equality/ordering and JSON input conversion.
#include "model/chat_template/detail/value.hpp"

#include "common/error.hpp"
#include "model/chat_template/detail/text.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace di::jinja {

const value* dict_data::find(std::string_view key) const {
  if (entries_.size() <= linear_limit) {
    for (const auto& [k, v] : entries_)
      if (k == key) return &v;
    return nullptr;
  }
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void dict_data::set(std::string key, value v) {
  for (std::size_t i = 0; entries_.size() <= linear_limit && i < entries_.size(); ++i) {
    if (entries_[i].first == key) {
      entries_[i].second = std::move(v);
      return;
    }
  }
  if (entries_.size() > linear_limit) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      entries_[it->second].second = std::move(v);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(v));
  if (entries_.size() == linear_limit + 1) {
    for (std::size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  } else if (entries_.size() > linear_limit + 1) {
    index_.emplace(entries_.back().first, entries_.size() - 1);
  }
}

value object::get_attr(std::string_view name) const {
  return value::undefined(fmt::format("'{}' object has no attribute '{}'", type_name(), name));
}

bool object::set_attr(const std::string&, value) {
  return false;
}

value object::call(interpreter&, call_args&) {
  throw eval_error(fmt::format("'{}' object is not callable", type_name()));
}

value value::undefined(std::string hint, bool is_unsafe) {
  auto info = std::make_shared<undefined_info>(undefined_info{std::move(hint), is_unsafe});
  return value(storage(undefined_t{std::move(info)}));
}

namespace {
thread_local std::size_t* t_built = nullptr;
constexpr std::size_t item_bytes = 32;
}  // namespace

build_meter::build_meter(std::size_t& total) : previous_(std::exchange(t_built, &total)) {}
build_meter::~build_meter() {
  t_built = previous_;
}
void build_meter::add(std::size_t amount) {
  if (t_built != nullptr) *t_built += amount;
}

value value::string(std::string s) {
  build_meter::add(s.size());
  return value(storage(std::make_shared<const std::string>(std::move(s))));
}

value value::list(std::vector<value> items, bool is_tuple) {
  build_meter::add(items.size() * item_bytes);
  return value(storage(std::make_shared<const list_data>(list_data{std::move(items), is_tuple})));
}

value value::dict(dict_data d) {
  build_meter::add(d.size() * item_bytes);
  return value(storage(std::make_shared<const dict_data>(std::move(d))));
}

value value::object(std::shared_ptr<jinja::object> o) {
  return value(storage(std::move(o)));
}

std::string value::undefined_hint() const {
  const auto& info = std::get<undefined_t>(storage_).info;
  return info ? info->hint : std::string("value is undefined");
}

bool value::is_unsafe_undefined() const {
  const auto& info = std::get<undefined_t>(storage_).info;
  return info && info->is_unsafe;
}

bool truthy(const value& v) {
  switch (v.type()) {
    case value::kind::undefined:
    case value::kind::none:
      return false;
    case value::kind::boolean:
      return v.as_bool();
    case value::kind::integer:
      return v.as_int() != 0;
    case value::kind::floating:
      return v.as_float() != 0.0;
    case value::kind::string:
      return !v.as_string().empty();
    case value::kind::list:
      return !v.items().empty();
    case value::kind::dict:
      return v.as_dict().size() != 0;
    case value::kind::object:
      return true;
  }
  return false;
}

std::string type_name(const value& v) {
  switch (v.type()) {
    case value::kind::undefined:
      return "Undefined";
    case value::kind::none:
      return "NoneType";
    case value::kind::boolean:
      return "bool";
    case value::kind::integer:
      return "int";
    case value::kind::floating:
      return "float";
    case value::kind::string:
      return "str";
    case value::kind::list:
      return v.as_list().is_tuple ? "tuple" : "list";
    case value::kind::dict:
      return "dict";
    case value::kind::object:
      return std::string(v.as_object().type_name());
  }
  return "object";
}

double to_double(const value& v) {
  if (v.is_bool()) return v.as_bool() ? 1.0 : 0.0;
  if (v.is_int()) return double(v.as_int());
  return v.as_float();
}

namespace {

// Numeric comparison that is exact for int64 against double (Python compares exactly).
int compare_numbers(const value& a, const value& b) {
  if (!a.is_float() && !b.is_float()) {
    auto ia = a.is_bool() ? std::int64_t(a.as_bool()) : a.as_int();
    auto ib = b.is_bool() ? std::int64_t(b.as_bool()) : b.as_int();
    return ia < ib ? -1 : ia > ib ? 1 : 0;
  }
  auto wide = [](const value& v) {
    return v.is_float() ? static_cast<long double>(v.as_float())
                        : static_cast<long double>(v.is_bool() ? v.as_bool() : v.as_int());
  };
  long double x = wide(a), y = wide(b);
  return x < y ? -1 : x > y ? 1 : 0;  // NaN compares as equal-but-unordered; rare in templates
}

}  // namespace

bool values_equal(const value& a, const value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() && std::isnan(a.as_float())) return false;
    if (b.is_float() && std::isnan(b.as_float())) return false;
    return compare_numbers(a, b) == 0;
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case value::kind::undefined:
    case value::kind::none:
      return true;
    case value::kind::string:
      return a.as_string() == b.as_string();
    case value::kind::list: {
      const auto &x = a.as_list(), &y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (std::size_t i = 0; i < x.items.size(); ++i)
        if (!values_equal(x.items[i], y.items[i])) return false;
      return true;
    }
    case value::kind::dict: {
      const auto &x = a.as_dict(), &y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries()) {
        const value* other = y.find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case value::kind::object:
      return a.object_ptr() == b.object_ptr();
    default:
      return false;
  }
}

int compare_values(const value& a, const value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) return compare_numbers(a, b);
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto &x = a.items(), &y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return compare_values(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  throw eval_error(fmt::format("'{}' not supported between instances of '{}' and '{}'", op,
                               type_name(a), type_name(b)));
}

std::vector<value> iterate(const value& v) {
  switch (v.type()) {
    case value::kind::undefined:
      return {};
    case value::kind::list:
      return v.items();
    case value::kind::dict: {
      std::vector<value> keys;
      keys.reserve(v.as_dict().size());
      for (const auto& [k, _] : v.as_dict().entries()) keys.push_back(value::string(k));
      return keys;
    }
    case value::kind::string: {
      std::vector<value> chars;
      std::string one;
      for (char32_t c : utf8_decode(v.as_string())) {
        one.clear();
        append_utf8(one, c);
        chars.push_back(value::string(one));
      }
      return chars;
    }
    default:
      throw eval_error(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

void fail_undefined(const value& v) {
  throw eval_error(v.undefined_hint());
}

namespace {

template <class Json>
value convert_json(const Json& j, int depth_left) {
  DI_CHECK(depth_left > 0, "chat template input is nested too deeply (more than 512 levels)");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return value::none();
    case nlohmann::json::value_t::boolean:
      return value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return value::integer(j.template get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.template get<std::uint64_t>();
      DI_CHECK(u <= std::uint64_t(std::numeric_limits<std::int64_t>::max()),
               "chat template input has an integer too large for 64 bits: {}", u);
      return value::integer(std::int64_t(u));
    }
    case nlohmann::json::value_t::number_float:
      return value::floating(j.template get<double>());
    case nlohmann::json::value_t::string:
      return value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(convert_json(item, depth_left - 1));
      return value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      dict_data d;
      for (auto it = j.begin(); it != j.end(); ++it)
        d.set(it.key(), convert_json(it.value(), depth_left - 1));
      return value::dict(std::move(d));
    }
    default:
      DI_FAIL("chat template input holds a JSON value of unsupported type (binary data)");
  }
}

}  // namespace

value from_json(const nlohmann::json& j, int max_depth) {
  return convert_json(j, max_depth);
}
value from_json(const nlohmann::ordered_json& j, int max_depth) {
  return convert_json(j, max_depth);
}

}  // namespace di::jinja
