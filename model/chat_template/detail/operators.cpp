// Python's arithmetic, containment and slicing on template values. Integers are 64-bit:
// where Python would grow a big integer we raise a clear overflow error instead.
#include "model/chat_template/detail/format.hpp"
#include "model/chat_template/detail/interpreter.hpp"
#include "model/chat_template/detail/text.hpp"

#include <fmt/format.h>

#include <cmath>

namespace di::jinja {

namespace {

const char* symbol(binary_op op) {
  switch (op) {
    case binary_op::add:
      return "+";
    case binary_op::sub:
      return "-";
    case binary_op::mul:
      return "*";
    case binary_op::div:
      return "/";
    case binary_op::floordiv:
      return "//";
    case binary_op::mod:
      return "%";
    case binary_op::pow:
      return "**";
    default:
      return "?";
  }
}

[[noreturn]] void unsupported(binary_op op, const value& a, const value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  throw eval_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", symbol(op),
                               type_name(a), type_name(b)));
}

std::int64_t int_of(const value& v) {
  return v.is_bool() ? std::int64_t(v.as_bool()) : v.as_int();
}

[[noreturn]] void overflow() {
  throw eval_error("integer overflow: the result does not fit in 64 bits");
}

// Wraps the __builtin_*_overflow checks: `op(a, b, &out)` returns true on overflow.
template <class Op>
std::int64_t checked(Op op, std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (op(a, b, &out)) overflow();
  return out;
}

bool add_overflows(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return __builtin_add_overflow(a, b, out);
}
bool sub_overflows(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return __builtin_sub_overflow(a, b, out);
}
bool mul_overflows(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

value int_pow(std::int64_t base, std::int64_t exponent) {
  if (exponent < 0) {
    if (base == 0) throw eval_error("0.0 cannot be raised to a negative power");
    return value::floating(std::pow(double(base), double(exponent)));
  }
  std::int64_t result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = checked(mul_overflows, result, base);
    exponent >>= 1;
    if (exponent > 0) base = checked(mul_overflows, base, base);
  }
  return value::integer(result);
}

value int_arithmetic(binary_op op, std::int64_t a, std::int64_t b) {
  switch (op) {
    case binary_op::add:
      return value::integer(checked(add_overflows, a, b));
    case binary_op::sub:
      return value::integer(checked(sub_overflows, a, b));
    case binary_op::mul:
      return value::integer(checked(mul_overflows, a, b));
    case binary_op::div:
      if (b == 0) throw eval_error("division by zero");
      return value::floating(double(a) / double(b));
    case binary_op::floordiv:
    case binary_op::mod: {
      if (b == 0) throw eval_error("integer division or modulo by zero");
      if (a == INT64_MIN && b == -1) overflow();
      std::int64_t q = a / b, m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) --q, m += b;  // Python floors toward -infinity
      return value::integer(op == binary_op::floordiv ? q : m);
    }
    case binary_op::pow:
      return int_pow(a, b);
    default:
      break;
  }
  return value();
}

value float_arithmetic(binary_op op, double a, double b) {
  switch (op) {
    case binary_op::add:
      return value::floating(a + b);
    case binary_op::sub:
      return value::floating(a - b);
    case binary_op::mul:
      return value::floating(a * b);
    case binary_op::div:
      if (b == 0) throw eval_error("float division by zero");
      return value::floating(a / b);
    case binary_op::floordiv:
    case binary_op::mod: {
      if (b == 0) throw eval_error("float modulo by zero");
      double m = std::fmod(a, b);
      if (m != 0 && ((m < 0) != (b < 0))) m += b;
      if (op == binary_op::mod) return value::floating(m);
      return value::floating(std::floor((a - m) / b + 0.5));
    }
    case binary_op::pow:
      if (a == 0 && b < 0) throw eval_error("0.0 cannot be raised to a negative power");
      return value::floating(std::pow(a, b));
    default:
      break;
  }
  return value();
}

// `seq * n` for str, list and tuple; n <= 0 gives an empty sequence.
value repeat(const value& seq, std::int64_t n, const interpreter& in) {
  std::size_t count = n > 0 ? std::size_t(n) : 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && count > 0)
      in.check_size(count > SIZE_MAX / s.size() ? SIZE_MAX : s.size() * count);
    std::string out;
    out.reserve(s.size() * count);
    for (std::size_t i = 0; i < count; ++i) out += s;
    return value::string(std::move(out));
  }
  const auto& items = seq.items();
  if (!items.empty() && count > 0)
    in.check_size(count > SIZE_MAX / items.size() ? SIZE_MAX : items.size() * count);
  std::vector<value> out;
  for (std::size_t i = 0; i < count; ++i) out.insert(out.end(), items.begin(), items.end());
  return value::list(std::move(out), seq.as_list().is_tuple);
}

value concatenate(const value& a, const value& b, const interpreter& in) {
  if (a.is_string() && b.is_string()) {
    in.check_size(a.as_string().size() + b.as_string().size());
    return value::string(a.as_string() + b.as_string());
  }
  if (a.is_string()) {
    if (b.is_undefined()) fail_undefined(b);
    throw eval_error(fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)));
  }
  if (b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    in.check_size(a.items().size() + b.items().size());
    std::vector<value> out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    return value::list(std::move(out), a.as_list().is_tuple);
  }
  if (b.is_undefined()) fail_undefined(b);
  throw eval_error(fmt::format("can only concatenate {} (not \"{}\") to {}", type_name(a),
                               type_name(b), type_name(a)));
}

}  // namespace

value binary_operation(binary_op op, const value& a, const value& b, const interpreter& in) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return float_arithmetic(op, to_double(a), to_double(b));
    return int_arithmetic(op, int_of(a), int_of(b));
  }
  if (op == binary_op::add && (a.is_string() || a.is_list())) return concatenate(a, b, in);
  if (op == binary_op::mul) {
    bool a_seq = a.is_string() || a.is_list(), b_seq = b.is_string() || b.is_list();
    bool a_int = a.is_int() || a.is_bool(), b_int = b.is_int() || b.is_bool();
    if (a_seq && b_int) return repeat(a, int_of(b), in);
    if (b_seq && a_int) return repeat(b, int_of(a), in);
  }
  if (op == binary_op::mod && a.is_string())
    throw eval_error("printf-style formatting ('...' % args) is not supported; use ~ or format()");
  unsupported(op, a, b);
}

value unary_operation(unary_op op, const value& v) {
  if (v.is_float()) return value::floating(op == unary_op::neg ? -v.as_float() : v.as_float());
  if (v.is_int() || v.is_bool()) {
    std::int64_t i = int_of(v);
    if (op == unary_op::neg && i == INT64_MIN) overflow();
    return value::integer(op == unary_op::neg ? -i : i);
  }
  if (v.is_undefined()) fail_undefined(v);
  throw eval_error(fmt::format("bad operand type for unary {}: '{}'",
                               op == unary_op::neg ? "-" : "+", type_name(v)));
}

bool contains(const value& container, const value& item) {
  switch (container.type()) {
    case value::kind::string:
      if (!item.is_string())
        throw eval_error(
            fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case value::kind::list:
      for (const value& v : container.items())
        if (values_equal(v, item)) return true;
      return false;
    case value::kind::dict:
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    case value::kind::undefined:
      return false;  // Undefined iterates as empty
    default:
      throw eval_error(fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

namespace {

std::int64_t slice_bound(const value& v, std::string_view what) {
  if (v.is_int() || v.is_bool()) return int_of(v);
  throw eval_error(fmt::format("slice {}s must be integers or None, not {}", what, type_name(v)));
}

// CPython's PySlice_AdjustIndices: clamps start/stop for `length` items and `step`.
std::vector<std::size_t> slice_positions(std::size_t length, const value& start_v,
                                         const value& stop_v, std::int64_t step) {
  auto len = std::int64_t(length);
  auto adjust = [&](const value& v, std::int64_t if_none) {
    if (v.is_none()) return if_none;
    std::int64_t x = slice_bound(v, "index");
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  std::int64_t start = adjust(start_v, step < 0 ? len - 1 : 0);
  std::int64_t stop = adjust(stop_v, step < 0 ? -1 : len);
  std::vector<std::size_t> positions;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    positions.push_back(std::size_t(i));
  return positions;
}

}  // namespace

value slice_value(const value& v, const value& start, const value& stop, const value& step_v) {
  std::int64_t step = step_v.is_none() ? 1 : slice_bound(step_v, "step");
  if (step == 0) throw eval_error("slice step cannot be zero");
  if (v.is_string()) {
    std::u32string cps = utf8_decode(v.as_string());
    std::u32string out;
    for (std::size_t i : slice_positions(cps.size(), start, stop, step)) out.push_back(cps[i]);
    return value::string(utf8_encode(out));
  }
  if (v.is_list()) {
    std::vector<value> out;
    for (std::size_t i : slice_positions(v.items().size(), start, stop, step))
      out.push_back(v.items()[i]);
    return value::list(std::move(out), v.as_list().is_tuple);
  }
  // Jinja's getitem turns "not subscriptable" into an undefined value.
  return value::undefined(fmt::format("'{}' object is not subscriptable", type_name(v)));
}

}  // namespace di::jinja
