// Expression parsing with Jinja's precedence, loosest first: conditional (`a if c else b`),
// or, and, not, comparisons (incl. in / not in), + -, ~, * / // %, **, unary - +, then
// primaries with postfix . [] () and filters / tests (which bind tighter than any operator,
// so `xs|length - 1` is `(xs|length) - 1`).
#include "model/chat_template/detail/builtins.hpp"
#include "model/chat_template/detail/parser.hpp"

#include <fmt/format.h>

namespace di::jinja {

namespace {

template <class Node>
expr_ptr make(source_pos pos, Node node) {
  return std::make_unique<expr>(expr{pos, std::move(node)});
}

// Bounds recursion so that a hostile template cannot overflow the stack.
class depth_guard {
 public:
  depth_guard(int& depth, int limit, source_pos pos) : depth_(depth) {
    if (++depth_ > limit)
      throw_template_error(chat_template_error::kind::syntax, pos,
                           fmt::format("expression nested more than {} levels deep", limit));
  }
  ~depth_guard() { --depth_; }
  depth_guard(const depth_guard&) = delete;
  depth_guard& operator=(const depth_guard&) = delete;

 private:
  int& depth_;
};

}  // namespace

expr_ptr parser::parse_tuple(bool with_condexpr, bool explicit_parens, std::string_view extra_end) {
  source_pos pos = current().pos;
  std::vector<expr_ptr> items;
  bool is_tuple = false;
  auto at_end = [&] {
    const token& t = current();
    return t.kind == token_kind::variable_end || t.kind == token_kind::block_end ||
           (t.kind == token_kind::op && t.text == ")") ||
           (!extra_end.empty() && at_name(extra_end));
  };
  while (true) {
    if (!items.empty()) expect_op(",", "between tuple items");
    if (at_end()) break;
    items.push_back(parse_expression(with_condexpr));
    if (!at_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items.front());
    if (!explicit_parens) fail_expected("an expression");
  }
  return make(pos, list_expr{std::move(items), true});
}

expr_ptr parser::parse_expression(bool with_condexpr) {
  depth_guard guard(expression_depth_, max_expression_depth, current().pos);
  return with_condexpr ? parse_condexpr() : parse_or();
}

expr_ptr parser::parse_condexpr() {
  expr_ptr then_expr = parse_or();
  while (at_name("if")) {
    source_pos pos = advance().pos;
    expr_ptr condition = parse_or();
    expr_ptr else_expr = skip_name("else") ? parse_condexpr() : nullptr;
    then_expr =
        make(pos, cond_expr{std::move(condition), std::move(then_expr), std::move(else_expr)});
  }
  return then_expr;
}

expr_ptr parser::parse_or() {
  expr_ptr left = parse_and();
  while (at_name("or")) {
    source_pos pos = advance().pos;
    left = make(pos, binary_expr{binary_op::logical_or, std::move(left), parse_and()});
  }
  return left;
}

expr_ptr parser::parse_and() {
  expr_ptr left = parse_not();
  while (at_name("and")) {
    source_pos pos = advance().pos;
    left = make(pos, binary_expr{binary_op::logical_and, std::move(left), parse_not()});
  }
  return left;
}

expr_ptr parser::parse_not() {
  if (!at_name("not")) return parse_compare();
  source_pos pos = advance().pos;
  depth_guard guard(expression_depth_, max_expression_depth, pos);
  return make(pos, unary_expr{unary_op::logical_not, parse_not()});
}

expr_ptr parser::parse_compare() {
  source_pos pos = current().pos;
  expr_ptr first = parse_math1();
  std::vector<std::pair<compare_op, expr_ptr>> rest;
  while (true) {
    compare_op op;
    if (skip_op("=="))
      op = compare_op::eq;
    else if (skip_op("!="))
      op = compare_op::ne;
    else if (skip_op("<"))
      op = compare_op::lt;
    else if (skip_op("<="))
      op = compare_op::le;
    else if (skip_op(">"))
      op = compare_op::gt;
    else if (skip_op(">="))
      op = compare_op::ge;
    else if (skip_name("in"))
      op = compare_op::in;
    else if (at_name("not") && peek(1).kind == token_kind::name && peek(1).text == "in") {
      advance();
      advance();
      op = compare_op::not_in;
    } else {
      break;
    }
    rest.emplace_back(op, parse_math1());
  }
  if (rest.empty()) return first;
  return make(pos, compare_expr{std::move(first), std::move(rest)});
}

expr_ptr parser::parse_math1() {
  expr_ptr left = parse_concat();
  while (at_op("+") || at_op("-")) {
    const token& op = advance();
    binary_op kind = op.text == "+" ? binary_op::add : binary_op::sub;
    left = make(op.pos, binary_expr{kind, std::move(left), parse_concat()});
  }
  return left;
}

expr_ptr parser::parse_concat() {
  source_pos pos = current().pos;
  std::vector<expr_ptr> parts;
  parts.push_back(parse_math2());
  while (skip_op("~")) parts.push_back(parse_math2());
  if (parts.size() == 1) return std::move(parts.front());
  return make(pos, concat_expr{std::move(parts)});
}

expr_ptr parser::parse_math2() {
  expr_ptr left = parse_pow();
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    const token& op = advance();
    binary_op kind = op.text == "*"    ? binary_op::mul
                     : op.text == "/"  ? binary_op::div
                     : op.text == "//" ? binary_op::floordiv
                                       : binary_op::mod;
    left = make(op.pos, binary_expr{kind, std::move(left), parse_pow()});
  }
  return left;
}

expr_ptr parser::parse_pow() {
  expr_ptr left = parse_unary(true);
  while (at_op("**")) {
    source_pos pos = advance().pos;
    left = make(pos, binary_expr{binary_op::pow, std::move(left), parse_unary(true)});
  }
  return left;
}

expr_ptr parser::parse_unary(bool with_filter) {
  expr_ptr node;
  if (at_op("-") || at_op("+")) {
    const token& op = advance();
    depth_guard guard(expression_depth_, max_expression_depth, op.pos);
    unary_op kind = op.text == "-" ? unary_op::neg : unary_op::pos;
    node = make(op.pos, unary_expr{kind, parse_unary(false)});
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
}

expr_ptr parser::parse_primary() {
  const token& t = current();
  source_pos pos = t.pos;
  switch (t.kind) {
    case token_kind::name: {
      std::string name = advance().text;
      if (name == "true" || name == "True") return make(pos, literal_expr{value::boolean(true)});
      if (name == "false" || name == "False") return make(pos, literal_expr{value::boolean(false)});
      if (name == "none" || name == "None") return make(pos, literal_expr{value::none()});
      note_name(name);
      return make(pos, name_expr{std::move(name)});
    }
    case token_kind::string: {
      std::string text;
      while (current().kind == token_kind::string) text += advance().text;  // 'a' 'b' == 'ab'
      return make(pos, literal_expr{value::string(std::move(text))});
    }
    case token_kind::integer:
      return make(pos, literal_expr{value::integer(advance().int_value)});
    case token_kind::floating:
      return make(pos, literal_expr{value::floating(advance().float_value)});
    case token_kind::op:
      if (t.text == "(") {
        advance();
        expr_ptr inner = parse_tuple(true, true);
        expect_op(")", "to close the parenthesis");
        return inner;
      }
      if (t.text == "[") return parse_list_literal();
      if (t.text == "{") return parse_dict_literal();
      break;
    default:
      break;
  }
  fail_expected("an expression");
}

expr_ptr parser::parse_list_literal() {
  source_pos pos = advance().pos;  // '['
  std::vector<expr_ptr> items;
  while (!at_op("]")) {
    if (!items.empty()) expect_op(",", "between list items");
    if (at_op("]")) break;
    items.push_back(parse_expression());
  }
  advance();
  return make(pos, list_expr{std::move(items), false});
}

expr_ptr parser::parse_dict_literal() {
  source_pos pos = advance().pos;  // '{'
  std::vector<std::pair<expr_ptr, expr_ptr>> entries;
  while (!at_op("}")) {
    if (!entries.empty()) expect_op(",", "between dict items");
    if (at_op("}")) break;
    expr_ptr key = parse_expression();
    expect_op(":", "after a dict key");
    entries.emplace_back(std::move(key), parse_expression());
  }
  advance();
  return make(pos, dict_expr{std::move(entries)});
}

expr_ptr parser::parse_postfix(expr_ptr node) {
  while (true) {
    if (at_op(".") || at_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (at_op("(")) {
      source_pos pos = current().pos;
      node = make(pos, call_expr{std::move(node), parse_call_args()});
    } else {
      return node;
    }
  }
}

expr_ptr parser::parse_filter_expr(expr_ptr node) {
  while (true) {
    if (at_op("|")) {
      advance();
      source_pos pos = current().pos;
      node = make(pos, filter_expr{std::move(node), parse_filter_call()});
    } else if (at_name("is")) {
      node = parse_test(std::move(node));
    } else if (at_op("(")) {
      source_pos pos = current().pos;
      node = make(pos, call_expr{std::move(node), parse_call_args()});
    } else {
      return node;
    }
  }
}

expr_ptr parser::parse_subscript(expr_ptr node) {
  const token& t = advance();
  source_pos pos = t.pos;
  if (t.text == ".") {
    if (current().kind == token_kind::name)
      return make(pos, attr_expr{std::move(node), advance().text});
    if (current().kind == token_kind::integer) {
      expr_ptr index = make(current().pos, literal_expr{value::integer(advance().int_value)});
      return make(pos, item_expr{std::move(node), std::move(index)});
    }
    fail_expected("an attribute name after '.'");
  }
  std::vector<expr_ptr> indices;
  while (!at_op("]")) {
    if (!indices.empty()) expect_op(",", "between subscripts");
    indices.push_back(parse_subscribed());
  }
  advance();                                                         // ']'
  expr_ptr index = indices.size() == 1 ? std::move(indices.front())  // x[] indexes with ()
                                       : make(pos, list_expr{std::move(indices), true});
  return make(pos, item_expr{std::move(node), std::move(index)});
}

expr_ptr parser::parse_subscribed() {
  source_pos pos = current().pos;
  auto slice_part_ends = [&] { return at_op(":") || at_op("]") || at_op(","); };
  slice_expr slice;
  if (!at_op(":")) {
    expr_ptr start = parse_expression();
    if (!at_op(":")) return start;
    slice.start = std::move(start);
  }
  advance();  // first ':'
  if (!slice_part_ends()) slice.stop = parse_expression();
  if (skip_op(":") && !slice_part_ends()) slice.step = parse_expression();
  return make(pos, std::move(slice));
}

expr_ptr parser::parse_test(expr_ptr node) {
  source_pos pos = advance().pos;  // 'is'
  bool negated = skip_name("not");
  source_pos name_pos = current().pos;
  std::string name = expect_name("for a test after 'is'");
  test_fn fn = find_test(name);
  if (!fn) fail(name_pos, fmt::format("unknown test '{}'", name));
  call_arg_exprs args;
  const token& t = current();
  bool starts_operand =
      (t.kind == token_kind::name && t.text != "else" && t.text != "or" && t.text != "and") ||
      t.kind == token_kind::string || t.kind == token_kind::integer ||
      t.kind == token_kind::floating ||
      (t.kind == token_kind::op && (t.text == "[" || t.text == "{"));
  if (at_op("(")) {
    args = parse_call_args();
  } else if (starts_operand) {
    if (at_name("is")) fail(t.pos, "tests cannot be chained with 'is'");
    args.positional.push_back(parse_postfix(parse_primary()));
  }
  return make(pos, test_expr{std::move(node), std::move(name), fn, std::move(args), negated});
}

filter_call parser::parse_filter_call() {
  source_pos pos = current().pos;
  std::string name = expect_name("for a filter after '|'");
  filter_fn fn = find_filter(name);
  if (!fn) fail(pos, fmt::format("unknown filter '{}'", name));
  call_arg_exprs args;
  if (at_op("(")) args = parse_call_args();
  return filter_call{std::move(name), fn, std::move(args), pos};
}

call_arg_exprs parser::parse_call_args() {
  expect_op("(", "to start the arguments");
  call_arg_exprs args;
  bool first = true;
  while (!at_op(")")) {
    if (!first) expect_op(",", "between arguments");
    first = false;
    if (at_op(")")) break;
    if (skip_op("*")) {
      if (args.star_args) fail(current().pos, "only one '*' argument is allowed");
      args.star_args = parse_expression();
    } else if (skip_op("**")) {
      if (args.star_kwargs) fail(current().pos, "only one '**' argument is allowed");
      args.star_kwargs = parse_expression();
    } else if (current().kind == token_kind::name && peek(1).kind == token_kind::op &&
               peek(1).text == "=") {
      std::string key = advance().text;
      advance();  // '='
      args.keyword.emplace_back(std::move(key), parse_expression());
    } else {
      if (!args.keyword.empty())
        fail(current().pos, "a positional argument follows a keyword argument");
      args.positional.push_back(parse_expression());
    }
  }
  advance();  // ')'
  return args;
}

void parser::note_name(const std::string& name) {
  if (macros_.empty()) return;
  macro_def* m = macros_.back();
  if (name == "varargs")
    m->uses_varargs = true;
  else if (name == "kwargs")
    m->uses_kwargs = true;
  else if (name == "caller")
    m->uses_caller = true;
}

}  // namespace di::jinja
