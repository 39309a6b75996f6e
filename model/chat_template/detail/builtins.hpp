// The library a template can reach: Jinja's filters and tests, the str/dict/list methods
// templates call (mutating ones are blocked, as in ImmutableSandboxedEnvironment), and the
// globals (range, namespace, dict, and transformers' raise_exception / strftime_now).
// Nothing here touches files, the environment or the process.
#pragma once

#include "model/chat_template/detail/ast.hpp"
#include "model/chat_template/detail/value.hpp"

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace di::jinja {

/// The filter or test of that name, or null (the parser reports unknown names).
filter_fn find_filter(std::string_view name);
test_fn find_test(std::string_view name);
/// The sequence filters (length, join, map, select, sort, ...); find_filter includes them.
filter_fn find_sequence_filter(std::string_view name);

/// Whether `receiver` (a str, dict or list) has method `name`, and whether the sandbox allows
/// calling it (mutating methods such as list.append are "unsafe").
enum class method_kind { none, safe, unsafe };
method_kind find_method(const value& receiver, std::string_view name);
/// Calls a safe method, e.g. str.strip or dict.get.
value call_method(interpreter& in, const value& receiver, std::string_view name, call_args& args);

/// A global function (range, namespace, dict, raise_exception, strftime_now), or null.
const value* find_global(std::string_view name);

/// A callable object backed by a C++ function (globals, bound methods, loop.cycle).
class native_function : public object {
 public:
  using fn_type = std::function<value(interpreter&, call_args&)>;
  native_function(std::string name, fn_type fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string_view type_name() const override { return "builtin_function_or_method"; }
  bool is_callable() const override { return true; }
  value call(interpreter& in, call_args& args) override { return fn_(in, args); }
  void repr(std::string& out) const override;

 private:
  std::string name_;
  fn_type fn_;
};

/// `s.strip` without a call: a callable bound to its receiver.
value make_bound_method(const value& receiver, std::string name);

// ---- argument binding (shared by filters, tests, methods and globals) --------------------

/// Binds positional then keyword arguments to `params` like a Python signature; unknown or
/// duplicate keywords and surplus positionals throw eval_error naming `callee`.
std::vector<std::optional<value>> bind_args(std::string_view callee, call_args& args,
                                            std::initializer_list<std::string_view> params);
/// The argument as a str (must be a string when given), else `fallback`.
std::string arg_string(const std::optional<value>& v, std::string_view callee,
                       std::string_view param, std::string fallback);
/// The argument as an int (int or bool), else `fallback`.
std::int64_t arg_int(const std::optional<value>& v, std::string_view callee, std::string_view param,
                     std::int64_t fallback);
/// The argument's truthiness, else `fallback`.
bool arg_bool(const std::optional<value>& v, bool fallback);
/// Python's str(v) for a value that must be text-like in a str method.
std::string require_string(const value& v, std::string_view callee, std::string_view param);

}  // namespace di::jinja
