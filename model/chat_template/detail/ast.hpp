// The syntax tree of a parsed chat template: one small struct per construct of the Jinja
// subset we support, held in two closed variants (expressions and statements). The tree is
// immutable after parsing; filters and tests are resolved to functions at parse time so an
// unknown name is a syntax error, as in Jinja.
#pragma once

#include "model/chat_template/detail/lexer.hpp"
#include "model/chat_template/detail/value.hpp"

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace di::jinja {

struct expr;
struct stmt;
using expr_ptr = std::unique_ptr<expr>;
using stmt_list = std::vector<stmt>;

/// A filter: `input | name(args)`.
using filter_fn = value (*)(interpreter& in, const value& input, call_args& args);
/// A test: `input is name(args)`.
using test_fn = bool (*)(interpreter& in, const value& input, call_args& args);

struct call_arg_exprs {
  std::vector<expr_ptr> positional;
  std::vector<std::pair<std::string, expr_ptr>> keyword;
  expr_ptr star_args;    // f(*xs): extra positionals, may be null
  expr_ptr star_kwargs;  // f(**d): extra keywords, may be null
};

// ---- expressions ----------------------------------------------------------------------

struct literal_expr {
  value constant;
};
struct name_expr {
  std::string name;
};
struct list_expr {  // [a, b] or (a, b)
  std::vector<expr_ptr> items;
  bool is_tuple = false;
};
struct dict_expr {
  std::vector<std::pair<expr_ptr, expr_ptr>> entries;
};
struct attr_expr {  // object.attr
  expr_ptr object;
  std::string attr;
};
struct item_expr {  // object[index]; index may be a slice_expr
  expr_ptr object;
  expr_ptr index;
};
struct slice_expr {  // start:stop:step, each may be null
  expr_ptr start, stop, step;
};
struct call_expr {
  expr_ptr callee;
  call_arg_exprs args;
};
struct filter_call {
  std::string name;
  filter_fn fn = nullptr;
  call_arg_exprs args;
  source_pos pos;
};
struct filter_expr {
  expr_ptr input;
  filter_call filter;
};
struct test_expr {
  expr_ptr input;
  std::string name;
  test_fn fn = nullptr;
  call_arg_exprs args;
  bool negated = false;  // `is not`
};
enum class unary_op { neg, pos, logical_not };
struct unary_expr {
  unary_op op;
  expr_ptr operand;
};
enum class binary_op { add, sub, mul, div, floordiv, mod, pow, logical_and, logical_or };
struct binary_expr {
  binary_op op;
  expr_ptr lhs, rhs;
};
struct concat_expr {  // a ~ b ~ c
  std::vector<expr_ptr> parts;
};
enum class compare_op { eq, ne, lt, le, gt, ge, in, not_in };
struct compare_expr {  // a < b <= c chains like Python
  expr_ptr first;
  std::vector<std::pair<compare_op, expr_ptr>> rest;
};
struct cond_expr {                           // then_expr if condition else else_expr
  expr_ptr condition, then_expr, else_expr;  // else_expr may be null (gives undefined)
};

struct expr {
  source_pos pos;
  std::variant<literal_expr, name_expr, list_expr, dict_expr, attr_expr, item_expr, slice_expr,
               call_expr, filter_expr, test_expr, unary_expr, binary_expr, concat_expr,
               compare_expr, cond_expr>
      node;
};

// ---- statements -----------------------------------------------------------------------

/// Left side of set/for/with: `x`, `a, b`, or `ns.attr`.
struct assign_target {
  std::vector<std::string> names;  // one name, or the names of a tuple unpacking
  bool is_tuple = false;
  std::string ns_attr;  // non-empty for `ns.attr`; names[0] is the namespace variable
};

struct macro_def {
  std::string name;
  std::vector<std::pair<std::string, expr_ptr>> params;  // default may be null
  stmt_list body;
  bool uses_varargs = false;  // body mentions `varargs`: extra positionals allowed
  bool uses_kwargs = false;   // body mentions `kwargs`: unknown keywords allowed
  bool uses_caller = false;   // body mentions `caller`
};

struct text_stmt {
  std::string text;
};
struct print_stmt {  // {{ value }}
  expr_ptr value;
};
struct if_stmt {
  std::vector<std::pair<expr_ptr, stmt_list>> branches;  // if + elifs
  stmt_list else_body;
};
struct for_stmt {
  assign_target target;
  expr_ptr iterable;
  expr_ptr filter;  // `for x in xs if cond`; may be null
  stmt_list body;
  stmt_list else_body;
};
struct set_stmt {
  assign_target target;
  expr_ptr value;
};
struct set_block_stmt {  // {% set x | filter %}...{% endset %}
  assign_target target;
  std::vector<filter_call> filters;
  stmt_list body;
};
struct macro_stmt {
  std::shared_ptr<const macro_def> def;
};
struct call_block_stmt {  // {% call(params) macro(args) %}body{% endcall %}
  std::shared_ptr<const macro_def> caller;
  expr_ptr call;
};
struct filter_block_stmt {  // {% filter upper %}...{% endfilter %}
  std::vector<filter_call> filters;
  stmt_list body;
};
struct scope_stmt {  // {% with a = 1 %}...{% endwith %}, {% generation %}...{% endgeneration %}
  std::vector<std::pair<assign_target, expr_ptr>> assignments;
  stmt_list body;
};
struct loop_control_stmt {  // {% break %} / {% continue %}
  bool is_break = false;
};

struct stmt {
  source_pos pos;
  std::variant<text_stmt, print_stmt, if_stmt, for_stmt, set_stmt, set_block_stmt, macro_stmt,
               call_block_stmt, filter_block_stmt, scope_stmt, loop_control_stmt>
      node;
};

struct template_ast {
  stmt_list body;
};

}  // namespace di::jinja
