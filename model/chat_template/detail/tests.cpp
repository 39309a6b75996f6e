// Jinja's tests (`x is defined`, `x is string`, `n is divisibleby 3`, ...), with Python's
// type rules: bool counts as a number but not as an integer; Undefined is iterable.
#include "model/chat_template/detail/builtins.hpp"
#include "model/chat_template/detail/format.hpp"
#include "model/chat_template/detail/interpreter.hpp"
#include "model/chat_template/detail/text.hpp"

#include <fmt/format.h>

#include <unordered_map>

namespace di::jinja {

namespace {

using predicate = bool (*)(const value&);

// A test without arguments, from a predicate on the value.
template <predicate Pred>
bool unary_test(interpreter&, const value& v, call_args& args) {
  bind_args("test", args, {});
  return Pred(v);
}

// The argument of a two-operand test (`x is eq 3`, `x is divisibleby 3`).
value operand(call_args& args) {
  auto a = bind_args("test", args, {"other"});
  if (!a[0]) throw eval_error("this test needs an argument");
  return *a[0];
}

std::int64_t integer_of(const value& v) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  if (v.is_undefined()) fail_undefined(v);
  throw eval_error(fmt::format("expected an integer, got {}", type_name(v)));
}

// str.islower()/isupper(): at least one cased character, all of the given case.
bool only_case(const value& v, bool upper) {
  bool has_cased = false;
  for (char32_t c : utf8_decode(to_str(v))) {
    if (!py_iscased(c)) continue;
    has_cased = true;
    if ((py_toupper(c) == c) != upper) return false;
  }
  return has_cased;
}

bool is_defined(const value& v) {
  return !v.is_undefined();
}
bool is_undefined(const value& v) {
  return v.is_undefined();
}
bool is_none(const value& v) {
  return v.is_none();
}
bool is_boolean(const value& v) {
  return v.is_bool();
}
bool is_true(const value& v) {
  return v.is_bool() && v.as_bool();
}
bool is_false(const value& v) {
  return v.is_bool() && !v.as_bool();
}
bool is_integer(const value& v) {
  return v.is_int();
}
bool is_float(const value& v) {
  return v.is_float();
}
bool is_number(const value& v) {
  return v.is_number();
}
bool is_string(const value& v) {
  return v.is_string();
}
bool is_mapping(const value& v) {
  return v.is_dict();
}
bool is_iterable(const value& v) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool is_callable(const value& v) {
  return v.is_undefined() || (v.is_object() && v.as_object().is_callable());
}
bool is_escaped(const value&) {
  return false;
}  // no Markup values without autoescape
bool is_odd(const value& v) {
  return integer_of(v) % 2 != 0;
}
bool is_even(const value& v) {
  return integer_of(v) % 2 == 0;
}
bool is_lower(const value& v) {
  return only_case(v, false);
}
bool is_upper(const value& v) {
  return only_case(v, true);
}

bool test_eq(interpreter&, const value& v, call_args& a) {
  return values_equal(v, operand(a));
}
bool test_ne(interpreter&, const value& v, call_args& a) {
  return !values_equal(v, operand(a));
}
bool test_lt(interpreter&, const value& v, call_args& a) {
  return compare_values(v, operand(a), "<") < 0;
}
bool test_le(interpreter&, const value& v, call_args& a) {
  return compare_values(v, operand(a), "<=") <= 0;
}
bool test_gt(interpreter&, const value& v, call_args& a) {
  return compare_values(v, operand(a), ">") > 0;
}
bool test_ge(interpreter&, const value& v, call_args& a) {
  return compare_values(v, operand(a), ">=") >= 0;
}
bool test_in(interpreter&, const value& v, call_args& a) {
  return contains(operand(a), v);
}

bool test_divisibleby(interpreter&, const value& v, call_args& a) {
  std::int64_t divisor = integer_of(operand(a));
  if (divisor == 0) throw eval_error("integer division or modulo by zero");
  return integer_of(v) % divisor == 0;
}

// Python's `is`: identity for containers and objects, equality of type and value otherwise.
bool test_sameas(interpreter&, const value& v, call_args& a) {
  value other = operand(a);
  if (v.type() != other.type()) return false;
  if (v.is_list() || v.is_dict()) return &v.items() == &other.items();
  if (v.is_object()) return v.object_ptr() == other.object_ptr();
  return values_equal(v, other);
}

bool test_filter(interpreter&, const value& v, call_args& a) {
  bind_args("filter", a, {});
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}

bool test_test(interpreter&, const value& v, call_args& a) {
  bind_args("test", a, {});
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

}  // namespace

test_fn find_test(std::string_view name) {
  static const std::unordered_map<std::string_view, test_fn> tests = {
      {"defined", unary_test<is_defined>},
      {"undefined", unary_test<is_undefined>},
      {"none", unary_test<is_none>},
      {"boolean", unary_test<is_boolean>},
      {"true", unary_test<is_true>},
      {"false", unary_test<is_false>},
      {"integer", unary_test<is_integer>},
      {"float", unary_test<is_float>},
      {"number", unary_test<is_number>},
      {"string", unary_test<is_string>},
      {"mapping", unary_test<is_mapping>},
      {"iterable", unary_test<is_iterable>},
      {"sequence", unary_test<is_iterable>},
      {"callable", unary_test<is_callable>},
      {"escaped", unary_test<is_escaped>},
      {"odd", unary_test<is_odd>},
      {"even", unary_test<is_even>},
      {"lower", unary_test<is_lower>},
      {"upper", unary_test<is_upper>},
      {"divisibleby", test_divisibleby},
      {"sameas", test_sameas},
      {"in", test_in},
      {"eq", test_eq},
      {"equalto", test_eq},
      {"==", test_eq},
      {"ne", test_ne},
      {"!=", test_ne},
      {"lt", test_lt},
      {"lessthan", test_lt},
      {"<", test_lt},
      {"le", test_le},
      {"<=", test_le},
      {"gt", test_gt},
      {"greaterthan", test_gt},
      {">", test_gt},
      {"ge", test_ge},
      {">=", test_ge},
      {"filter", test_filter},
      {"test", test_test},
  };
  auto it = tests.find(name);
  return it == tests.end() ? nullptr : it->second;
}

}  // namespace di::jinja
