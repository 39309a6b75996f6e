// Global functions a template can call (range, namespace, dict, and transformers'
// raise_exception / strftime_now), the namespace object, and Python-style argument binding
// shared by all builtins.
#include "model/chat_template/detail/builtins.hpp"
#include "model/chat_template/detail/format.hpp"
#include "model/chat_template/detail/interpreter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <unordered_map>

namespace di::jinja {

namespace {

// Jinja's sandbox refuses ranges longer than this (MAX_RANGE).
constexpr std::int64_t max_range = 100000;

class namespace_object : public object {
 public:
  explicit namespace_object(dict_data attrs) : attrs_(std::move(attrs)) {}
  std::string_view type_name() const override { return "Namespace"; }
  value get_attr(std::string_view name) const override {
    const value* v = attrs_.find(name);
    return v ? *v : object::get_attr(name);
  }
  bool set_attr(const std::string& name, value v) override {
    attrs_.set(name, std::move(v));
    return true;
  }
  void repr(std::string& out) const override {
    out += "<Namespace ";
    dict_data copy = attrs_;
    append_repr(out, value::dict(std::move(copy)));
    out += ">";
  }

 private:
  dict_data attrs_;
};

// dict(...) and namespace(...): an optional mapping, then keyword entries.
dict_data collect_entries(std::string_view callee, call_args& args) {
  if (args.positional.size() > 1)
    throw eval_error(fmt::format("{}() takes at most 1 positional argument", callee));
  dict_data d;
  if (!args.positional.empty()) {
    const value& init = args.positional.front();
    if (!init.is_dict())
      throw eval_error(
          fmt::format("{}() positional argument must be a dict, not {}", callee, type_name(init)));
    for (const auto& [k, v] : init.as_dict().entries()) d.set(k, v);
  }
  for (auto& [k, v] : args.keyword) d.set(k, v);
  return d;
}

value global_range(interpreter&, call_args& args) {
  auto a = bind_args("range", args, {"start", "stop", "step"});
  if (!a[0]) throw eval_error("range() expected at least 1 argument, got 0");
  std::int64_t start = 0, stop = 0, step = arg_int(a[2], "range", "step", 1);
  if (a[1])
    start = arg_int(a[0], "range", "start", 0), stop = arg_int(a[1], "range", "stop", 0);
  else
    stop = arg_int(a[0], "range", "stop", 0);
  if (step == 0) throw eval_error("range() arg 3 must not be zero");
  __int128 count = 0;  // wide so that extreme bounds cannot overflow
  if (step > 0 && stop > start) count = (__int128(stop) - start + step - 1) / step;
  if (step < 0 && stop < start) count = (__int128(start) - stop - step - 1) / -__int128(step);
  if (count > max_range)
    throw eval_error(fmt::format("range() of {} items exceeds the sandbox limit of {}",
                                 std::int64_t(std::min<__int128>(count, INT64_MAX)), max_range));
  std::vector<value> items;
  items.reserve(std::size_t(count));
  for (std::int64_t i = 0; i < count; ++i) items.push_back(value::integer(start + i * step));
  return value::list(std::move(items));
}

value global_namespace(interpreter&, call_args& args) {
  return value::object(std::make_shared<namespace_object>(collect_entries("namespace", args)));
}

value global_dict(interpreter&, call_args& args) {
  return value::dict(collect_entries("dict", args));
}

value global_raise_exception(interpreter&, call_args& args) {
  auto a = bind_args("raise_exception", args, {"message"});
  throw eval_error(a[0] ? to_str(*a[0]) : std::string("raise_exception() called"), true);
}

// Local time, like transformers' datetime.now().strftime(format).
value global_strftime_now(interpreter& in, call_args& args) {
  auto a = bind_args("strftime_now", args, {"format"});
  std::string format = arg_string(a[0], "strftime_now", "format", "");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  if (format.empty()) return value::string("");
  for (std::size_t capacity = 256; capacity <= (1u << 20); capacity *= 4) {
    std::string buf(capacity, '\0');
    std::size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
    if (n > 0) {
      buf.resize(n);
      in.check_size(n);
      return value::string(std::move(buf));
    }
  }
  return value::string("");  // only formats that expand to nothing reach here
}

value make_global(std::string name, value (*fn)(interpreter&, call_args&)) {
  return value::object(std::make_shared<native_function>(std::move(name), fn));
}

}  // namespace

const value* find_global(std::string_view name) {
  static const std::unordered_map<std::string_view, value> globals = {
      {"range", make_global("range", global_range)},
      {"namespace", make_global("namespace", global_namespace)},
      {"dict", make_global("dict", global_dict)},
      {"raise_exception", make_global("raise_exception", global_raise_exception)},
      {"strftime_now", make_global("strftime_now", global_strftime_now)},
  };
  auto it = globals.find(name);
  return it == globals.end() ? nullptr : &it->second;
}

void native_function::repr(std::string& out) const {
  out += fmt::format("<built-in function {}>", name_);
}

value make_bound_method(const value& receiver, std::string name) {
  std::string label = name;
  return value::object(std::make_shared<native_function>(
      std::move(label), [receiver, name = std::move(name)](interpreter& in, call_args& args) {
        return call_method(in, receiver, name, args);
      }));
}

std::vector<std::optional<value>> bind_args(std::string_view callee, call_args& args,
                                            std::initializer_list<std::string_view> params) {
  std::vector<std::optional<value>> bound(params.size());
  if (args.positional.size() > params.size())
    throw eval_error(fmt::format("{}() takes at most {} argument(s) ({} given)", callee,
                                 params.size(), args.positional.size()));
  for (std::size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (auto& [key, v] : args.keyword) {
    auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end())
      throw eval_error(fmt::format("{}() got an unexpected keyword argument '{}'", callee, key));
    auto& slot = bound[std::size_t(it - params.begin())];
    if (slot)
      throw eval_error(fmt::format("{}() got multiple values for argument '{}'", callee, key));
    slot = v;
  }
  return bound;
}

std::string arg_string(const std::optional<value>& v, std::string_view callee,
                       std::string_view param, std::string fallback) {
  if (!v || v->is_none()) return fallback;
  return require_string(*v, callee, param);
}

std::int64_t arg_int(const std::optional<value>& v, std::string_view callee, std::string_view param,
                     std::int64_t fallback) {
  if (!v || v->is_none()) return fallback;
  if (v->is_int()) return v->as_int();
  if (v->is_bool()) return v->as_bool();
  throw eval_error(
      fmt::format("{}(): argument '{}' must be an integer, not {}", callee, param, type_name(*v)));
}

bool arg_bool(const std::optional<value>& v, bool fallback) {
  return v ? truthy(*v) : fallback;
}

std::string require_string(const value& v, std::string_view callee, std::string_view param) {
  if (v.is_string()) return v.as_string();
  if (v.is_undefined()) fail_undefined(v);
  throw eval_error(
      fmt::format("{}(): argument '{}' must be a string, not {}", callee, param, type_name(v)));
}

}  // namespace di::jinja
