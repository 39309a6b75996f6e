// Expression evaluation (see interpreter.hpp): names, literals, attribute and item access
// with the sandbox's rules, calls, filters, tests, comparisons and slices. An error gets the
// position of the innermost expression that raised it.
#include "model/chat_template/detail/builtins.hpp"
#include "model/chat_template/detail/format.hpp"
#include "model/chat_template/detail/interpreter.hpp"
#include "model/chat_template/detail/text.hpp"

#include <fmt/format.h>

namespace di::jinja {

namespace {

template <class... Fns>
struct overloaded : Fns... {
  using Fns::operator()...;
};
template <class... Fns>
overloaded(Fns...) -> overloaded<Fns...>;

// How Jinja names an object in "has no attribute" messages: "'dict object'", "None".
std::string object_description(const value& v) {
  if (v.is_none()) return "None";
  return fmt::format("{} object", type_name(v));
}

value missing_attribute(const value& object, std::string_view name) {
  return value::undefined(
      fmt::format("'{}' has no attribute '{}'", object_description(object), name));
}

value method_or_missing(const value& object, std::string_view name) {
  switch (find_method(object, name)) {
    case method_kind::safe:
      return make_bound_method(object, std::string(name));
    case method_kind::unsafe:
      return value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe "
                                          "(chat templates cannot modify their inputs)",
                                          name, type_name(object)),
                              true);
    case method_kind::none:
      break;
  }
  return missing_attribute(object, name);
}

// Index into a sequence of `size` elements with Python's negative indexing; -1 when out of range.
std::int64_t resolve_index(const value& key, std::size_t size) {
  std::int64_t i = key.is_bool() ? std::int64_t(key.as_bool()) : key.as_int();
  if (i < 0) i += std::int64_t(size);
  return (i < 0 || i >= std::int64_t(size)) ? -1 : i;
}

}  // namespace

value interpreter::eval(const expr& e, const scope_ptr& s) {
  try {
    nesting_guard guard(*this);
    return eval_node(e, s);
  } catch (const eval_error& err) {
    throw_template_error(
        err.is_raised() ? chat_template_error::kind::raised : chat_template_error::kind::render,
        e.pos, err.what());
  }
}

value interpreter::eval_node(const expr& e, const scope_ptr& s) {
  return std::visit(
      overloaded{
          [&](const literal_expr& l) { return l.constant; },
          [&](const name_expr& n) { return eval_name(n.name, s); },
          [&](const list_expr& l) {
            check_size(l.items.size());
            std::vector<value> items;
            items.reserve(l.items.size());
            for (const auto& item : l.items) items.push_back(eval(*item, s));
            return value::list(std::move(items), l.is_tuple);
          },
          [&](const dict_expr& d) {
            dict_data out;
            for (const auto& [k, v] : d.entries) {
              value key = eval(*k, s);
              if (!key.is_string())
                throw eval_error(fmt::format("dict keys must be strings in chat templates, got {}",
                                             type_name(key)));
              out.set(key.as_string(), eval(*v, s));
            }
            return value::dict(std::move(out));
          },
          [&](const attr_expr& a) { return get_attr(eval(*a.object, s), a.attr); },
          [&](const item_expr& i) {
            value object = eval(*i.object, s);
            if (const auto* sl = std::get_if<slice_expr>(&i.index->node))
              return eval_slice(object, *sl, s);
            return get_item(object, eval(*i.index, s));
          },
          [&](const slice_expr&) -> value { throw eval_error("a slice is only valid inside []"); },
          [&](const call_expr& c) { return eval_call(c, s); },
          [&](const filter_expr& f) { return eval_filter(f.filter, eval(*f.input, s), s); },
          [&](const test_expr& t) {
            value input = eval(*t.input, s);
            call_args args = eval_args(t.args, s);
            return value::boolean(t.fn(*this, input, args) != t.negated);
          },
          [&](const unary_expr& u) {
            value v = eval(*u.operand, s);
            if (u.op == unary_op::logical_not) return value::boolean(!truthy(v));
            return unary_operation(u.op, v);
          },
          [&](const binary_expr& b) {
            value lhs = eval(*b.lhs, s);
            if (b.op == binary_op::logical_and) return truthy(lhs) ? eval(*b.rhs, s) : lhs;
            if (b.op == binary_op::logical_or) return truthy(lhs) ? lhs : eval(*b.rhs, s);
            return binary_operation(b.op, lhs, eval(*b.rhs, s), *this);
          },
          [&](const concat_expr& c) {
            std::string out;
            for (const auto& part : c.parts) {
              append_str(out, eval(*part, s));
              check_size(out.size());
            }
            return value::string(std::move(out));
          },
          [&](const compare_expr& c) { return eval_compare(c, s); },
          [&](const cond_expr& c) {
            if (truthy(eval(*c.condition, s))) return eval(*c.then_expr, s);
            return c.else_expr ? eval(*c.else_expr, s) : value();
          },
      },
      e.node);
}

value interpreter::eval_name(const std::string& name, const scope_ptr& s) const {
  if (const value* v = s->find(name)) return *v;
  if (const value* g = find_global(name)) return *g;
  return value::undefined(fmt::format("'{}' is undefined", name));
}

call_args interpreter::eval_args(const call_arg_exprs& args, const scope_ptr& s) {
  call_args out;
  out.positional.reserve(args.positional.size());
  for (const auto& e : args.positional) out.positional.push_back(eval(*e, s));
  for (const auto& [name, e] : args.keyword) out.keyword.emplace_back(name, eval(*e, s));
  if (args.star_args) {
    for (value& v : iterate(eval(*args.star_args, s))) out.positional.push_back(std::move(v));
  }
  if (args.star_kwargs) {
    value extra = eval(*args.star_kwargs, s);
    if (!extra.is_dict())
      throw eval_error(
          fmt::format("argument after ** must be a mapping, not {}", type_name(extra)));
    for (const auto& [k, v] : extra.as_dict().entries()) out.keyword.emplace_back(k, v);
  }
  return out;
}

value interpreter::eval_call(const call_expr& c, const scope_ptr& s) {
  if (const auto* attr = std::get_if<attr_expr>(&c.callee->node)) {
    // `text.strip()`: call str/list/dict methods directly instead of binding them first.
    value receiver = eval(*attr->object, s);
    bool has_methods = receiver.is_string() || receiver.is_list() || receiver.is_dict();
    if (has_methods && find_method(receiver, attr->attr) == method_kind::safe) {
      call_args args = eval_args(c.args, s);
      count_step();
      return call_method(*this, receiver, attr->attr, args);
    }
    value callee = get_attr(receiver, attr->attr);
    call_args args = eval_args(c.args, s);
    return call_value(callee, args);
  }
  value callee = eval(*c.callee, s);
  call_args args = eval_args(c.args, s);
  return call_value(callee, args);
}

value interpreter::eval_filter(const filter_call& f, const value& input, const scope_ptr& s) {
  call_args args = eval_args(f.args, s);
  try {
    return f.fn(*this, input, args);
  } catch (const eval_error& err) {
    throw_template_error(chat_template_error::kind::render, f.pos,
                         fmt::format("filter '{}': {}", f.name, err.what()));
  }
}

value interpreter::eval_compare(const compare_expr& c, const scope_ptr& s) {
  value left = eval(*c.first, s);
  for (const auto& [op, e] : c.rest) {
    value right = eval(*e, s);
    bool holds = false;
    switch (op) {
      case compare_op::eq:
        holds = values_equal(left, right);
        break;
      case compare_op::ne:
        holds = !values_equal(left, right);
        break;
      case compare_op::lt:
        holds = compare_values(left, right, "<") < 0;
        break;
      case compare_op::le:
        holds = compare_values(left, right, "<=") <= 0;
        break;
      case compare_op::gt:
        holds = compare_values(left, right, ">") > 0;
        break;
      case compare_op::ge:
        holds = compare_values(left, right, ">=") >= 0;
        break;
      case compare_op::in:
        holds = contains(right, left);
        break;
      case compare_op::not_in:
        holds = !contains(right, left);
        break;
    }
    if (!holds) return value::boolean(false);
    left = std::move(right);
  }
  return value::boolean(true);
}

value interpreter::eval_slice(const value& object, const slice_expr& sl, const scope_ptr& s) {
  auto part = [&](const expr_ptr& e) { return e ? eval(*e, s) : value::none(); };
  value start = part(sl.start), stop = part(sl.stop), step = part(sl.step);
  if (object.is_undefined()) fail_undefined(object);
  return slice_value(object, start, stop, step);
}

value interpreter::get_attr(const value& object, std::string_view name) {
  switch (object.type()) {
    case value::kind::undefined:
      fail_undefined(object);
    case value::kind::dict: {
      if (find_method(object, name) != method_kind::none) return method_or_missing(object, name);
      const value* v = object.as_dict().find(name);
      return v ? *v : missing_attribute(object, name);
    }
    case value::kind::string:
    case value::kind::list:
      return method_or_missing(object, name);
    case value::kind::object:
      return object.as_object().get_attr(name);
    default:
      return missing_attribute(object, name);
  }
}

value interpreter::get_item(const value& object, const value& key) {
  if (object.is_undefined()) fail_undefined(object);
  bool int_key = key.is_int() || key.is_bool();
  if (object.is_dict() && key.is_string()) {
    if (const value* v = object.as_dict().find(key.as_string())) return *v;
  } else if (object.is_list() && int_key) {
    std::int64_t i = resolve_index(key, object.items().size());
    if (i >= 0) return object.items()[std::size_t(i)];
  } else if (object.is_string() && int_key) {
    std::u32string cps = utf8_decode(object.as_string());
    std::int64_t i = resolve_index(key, cps.size());
    if (i >= 0) return value::string(utf8_encode(cps.substr(std::size_t(i), 1)));
  }
  if (key.is_string()) {
    if (object.is_object()) return object.as_object().get_attr(key.as_string());
    if (object.is_dict() || object.is_list() || object.is_string())
      return method_or_missing(object, key.as_string());
    return missing_attribute(object, key.as_string());
  }
  return value::undefined(
      fmt::format("{} has no element {}", object_description(object), to_str(key)));
}

}  // namespace di::jinja
