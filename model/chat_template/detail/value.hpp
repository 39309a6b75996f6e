// The interpreter's data model: Python values as chat templates see them (None, bool, int,
// float, str, list/tuple, insertion-ordered dict, objects such as namespaces and macros) plus
// Jinja's Undefined. Lists and dicts are immutable once built (the sandbox forbids mutation),
// so values share them and copying a value is cheap.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace di::jinja {

class value;
class interpreter;

/// An error raised while evaluating; the interpreter adds the template position.
class eval_error : public std::runtime_error {
 public:
  explicit eval_error(const std::string& message, bool is_raised = false)
      : std::runtime_error(message), is_raised_(is_raised) {}
  /// True when the template itself called raise_exception().
  bool is_raised() const { return is_raised_; }

 private:
  bool is_raised_;
};

/// Arguments of a call, filter or test, after evaluation.
struct call_args {
  std::vector<value> positional;
  std::vector<std::pair<std::string, value>> keyword;
};

/// Python's None (distinct from an undefined variable).
struct none_t {};

/// Why a value is undefined, phrased as the error Jinja gives when it is used.
struct undefined_info {
  std::string hint;        // e.g. "'foo' is undefined"
  bool is_unsafe = false;  // an attribute the sandbox blocks: calling it is a security error
};

struct undefined_t {
  std::shared_ptr<const undefined_info> info;  // null: anonymous (e.g. `a if false`)
};

struct list_data {
  std::vector<value> items;
  bool is_tuple = false;
};

/// A str-keyed dict that keeps insertion order, like Python's dict.
class dict_data {
 public:
  const value* find(std::string_view key) const;
  /// Inserts or replaces; a replaced key keeps its first position.
  void set(std::string key, value v);
  const std::vector<std::pair<std::string, value>>& entries() const { return entries_; }
  std::size_t size() const { return entries_.size(); }

 private:
  static constexpr std::size_t linear_limit = 8;  // index only dicts bigger than this
  std::vector<std::pair<std::string, value>> entries_;
  std::unordered_map<std::string, std::size_t> index_;
};

/// Something with behaviour rather than data: namespace(), loop, macros, bound methods.
class object {
 public:
  virtual ~object() = default;
  /// Python type name used in error messages ("Namespace", "LoopContext", "Macro").
  virtual std::string_view type_name() const = 0;
  /// Attribute lookup; an undefined value when absent.
  virtual value get_attr(std::string_view name) const;
  /// Attribute assignment (only namespaces allow it); false when not allowed.
  virtual bool set_attr(const std::string& name, value v);
  virtual bool is_callable() const { return false; }
  virtual value call(interpreter& in, call_args& args);
  virtual void repr(std::string& out) const = 0;
};

/// Counts what value::string, value::list and value::dict make on this thread while it lives
/// (string bytes; 32 per list item or dict entry), so that a render can bound the work a
/// template does inside single steps ("x" * 60000000 in a loop was one step per 60 MB).
class build_meter {
 public:
  explicit build_meter(std::size_t& total);
  ~build_meter();
  build_meter(const build_meter&) = delete;
  build_meter& operator=(const build_meter&) = delete;
  static void add(std::size_t amount);

 private:
  std::size_t* previous_;
};

/// A template value. Kinds follow Python types; `undefined` is Jinja's Undefined.
class value {
 public:
  enum class kind { undefined, none, boolean, integer, floating, string, list, dict, object };

  value() = default;  // an anonymous undefined
  static value undefined(std::string hint, bool is_unsafe = false);
  static value none() { return value(storage(none_t{})); }
  static value boolean(bool b) { return value(storage(b)); }
  static value integer(std::int64_t i) { return value(storage(i)); }
  static value floating(double d) { return value(storage(d)); }
  static value string(std::string s);
  static value list(std::vector<value> items, bool is_tuple = false);
  static value dict(dict_data d);
  static value object(std::shared_ptr<jinja::object> o);

  kind type() const { return static_cast<kind>(storage_.index()); }
  bool is_undefined() const { return type() == kind::undefined; }
  bool is_none() const { return type() == kind::none; }
  bool is_bool() const { return type() == kind::boolean; }
  bool is_int() const { return type() == kind::integer; }
  bool is_float() const { return type() == kind::floating; }
  /// int, float or bool (bool is an int subclass in Python).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return type() == kind::string; }
  bool is_list() const { return type() == kind::list; }
  bool is_dict() const { return type() == kind::dict; }
  bool is_object() const { return type() == kind::object; }

  bool as_bool() const { return std::get<bool>(storage_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(storage_); }
  double as_float() const { return std::get<double>(storage_); }
  const std::string& as_string() const { return *std::get<str_ptr>(storage_); }
  const list_data& as_list() const { return *std::get<list_ptr>(storage_); }
  const std::vector<value>& items() const { return as_list().items; }
  const dict_data& as_dict() const { return *std::get<dict_ptr>(storage_); }
  jinja::object& as_object() const { return *std::get<obj_ptr>(storage_); }
  const jinja::object* object_ptr() const { return std::get<obj_ptr>(storage_).get(); }
  /// The message for using this undefined value ("'x' is undefined").
  std::string undefined_hint() const;
  bool is_unsafe_undefined() const;

 private:
  using str_ptr = std::shared_ptr<const std::string>;
  using list_ptr = std::shared_ptr<const list_data>;
  using dict_ptr = std::shared_ptr<const dict_data>;
  using obj_ptr = std::shared_ptr<jinja::object>;
  using storage = std::variant<undefined_t, none_t, bool, std::int64_t, double, str_ptr, list_ptr,
                               dict_ptr, obj_ptr>;
  explicit value(storage s) : storage_(std::move(s)) {}

  storage storage_;
};

/// Python truthiness (undefined, None, 0, "", [], {} are false).
bool truthy(const value& v);
/// Python's type name: 'str', 'int', 'NoneType', 'list', 'dict', 'Undefined', ...
std::string type_name(const value& v);
/// Python ==: 1 == 1.0 == True, list != tuple, dicts compare without order.
bool values_equal(const value& a, const value& b);
/// Python ordering (<0, 0, >0); throws eval_error naming `op` for unorderable types.
int compare_values(const value& a, const value& b, std::string_view op = "<");
/// int/float/bool as a double.
double to_double(const value& v);
/// The items a for loop visits: list items, dict keys, string code points; undefined gives
/// none; anything else throws "'int' object is not iterable".
std::vector<value> iterate(const value& v);
/// Throws the error for using an undefined value.
[[noreturn]] void fail_undefined(const value& v);

/// Converts JSON input to values; objects keep their key order. Throws di::error when
/// nesting is deeper than `max_depth` or a number does not fit.
value from_json(const nlohmann::json& j, int max_depth = 512);
value from_json(const nlohmann::ordered_json& j, int max_depth = 512);

}  // namespace di::jinja
