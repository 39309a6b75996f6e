// Statement parsing and the token-stream helpers (see parser.hpp). Every error names the
// tag and position, and for block mismatches which block is still open and how it ends.
#include "model/chat_template/detail/parser.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace di::jinja {

namespace {

std::string quote_list(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += i + 1 == names.size() ? " or " : ", ";
    out += "'" + names[i] + "'";
  }
  return out;
}

bool is_end_like(std::string_view name) {
  return name.starts_with("end") || name == "else" || name == "elif";
}

}  // namespace

std::string describe_token(const token& t) {
  switch (t.kind) {
    case token_kind::text:
      return "template text";
    case token_kind::variable_begin:
      return "'{{'";
    case token_kind::variable_end:
      return "'}}'";
    case token_kind::block_begin:
      return "'{%'";
    case token_kind::block_end:
      return "'%}'";
    case token_kind::string:
      return "a string literal";
    case token_kind::end_of_input:
      return "the end of the template";
    default:
      return "'" + t.text + "'";
  }
}

template_ast parse_template(std::string_view source) {
  return parser(tokenize(source)).parse();
}

template_ast parser::parse() {
  template_ast ast;
  parse_body(ast.body, {});
  return ast;
}

const token& parser::peek(std::size_t ahead) const {
  return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
}

const token& parser::advance() {
  const token& t = tokens_[pos_];
  if (pos_ + 1 < tokens_.size()) ++pos_;
  return t;
}

bool parser::at_name(std::string_view name) const {
  return current().kind == token_kind::name && current().text == name;
}

bool parser::at_op(std::string_view op) const {
  return current().kind == token_kind::op && current().text == op;
}

bool parser::skip_name(std::string_view name) {
  if (!at_name(name)) return false;
  advance();
  return true;
}

bool parser::skip_op(std::string_view op) {
  if (!at_op(op)) return false;
  advance();
  return true;
}

void parser::fail(source_pos pos, const std::string& message) const {
  throw_template_error(chat_template_error::kind::syntax, pos, message);
}

void parser::fail_expected(std::string_view expected) const {
  fail(current().pos, fmt::format("expected {}, got {}", expected, describe_token(current())));
}

void parser::expect_op(std::string_view op, std::string_view context) {
  if (!skip_op(op)) fail_expected(fmt::format("'{}' {}", op, context));
}

std::string parser::expect_name(std::string_view context) {
  if (current().kind != token_kind::name) fail_expected(fmt::format("a name {}", context));
  return advance().text;
}

void parser::expect_block_end(std::string_view statement) {
  if (current().kind != token_kind::block_end)
    fail_expected(fmt::format("'%}}' to end the '{}' tag", statement));
  advance();
}

// Parses until a `{% tag %}` in `end_tags` (returned, with the stream left just after the
// tag name) or, at top level, the end of input (returns "").
std::string parser::parse_body(stmt_list& out, std::initializer_list<std::string_view> end_tags) {
  while (true) {
    const token& t = current();
    switch (t.kind) {
      case token_kind::text:
        out.push_back(stmt{t.pos, text_stmt{t.text}});
        advance();
        break;
      case token_kind::variable_begin: {
        source_pos pos = t.pos;
        advance();
        expr_ptr e = parse_tuple();
        if (current().kind != token_kind::variable_end) fail_expected("'}}' to end the expression");
        advance();
        out.push_back(stmt{pos, print_stmt{std::move(e)}});
        break;
      }
      case token_kind::block_begin: {
        const token& name = peek(1);
        bool is_end = name.kind == token_kind::name &&
                      std::find(end_tags.begin(), end_tags.end(), name.text) != end_tags.end();
        if (is_end) {
          advance();
          return advance().text;
        }
        parse_statement(out);
        break;
      }
      case token_kind::end_of_input: {
        if (open_blocks_.empty()) return "";
        const open_block& b = open_blocks_.back();
        fail(t.pos, fmt::format("unexpected end of template: the '{}' block opened at {}:{} is "
                                "never closed (expected {})",
                                b.name, b.pos.line, b.pos.column, quote_list(b.end_tags)));
      }
      default:
        fail(t.pos, fmt::format("unexpected {}", describe_token(t)));
    }
  }
}

void parser::fail_misplaced_tag(const token& name) const {
  if (open_blocks_.empty())
    fail(name.pos, fmt::format("unexpected '{{% {} %}}': no block is open", name.text));
  const open_block& b = open_blocks_.back();
  fail(name.pos, fmt::format("unexpected '{{% {} %}}': the innermost open block is '{}' (opened "
                             "at {}:{}), which expects {}",
                             name.text, b.name, b.pos.line, b.pos.column, quote_list(b.end_tags)));
}

void parser::parse_statement(stmt_list& out) {
  source_pos pos = advance().pos;  // '{%'
  if (current().kind != token_kind::name) fail_expected("a tag name after '{%'");
  const token& name_token = current();
  std::string name = name_token.text;
  if (open_blocks_.size() >= max_block_depth)
    fail(pos, fmt::format("blocks nested more than {} deep", max_block_depth));
  if (name == "include" || name == "import" || name == "from" || name == "extends" ||
      name == "block")
    fail(name_token.pos, fmt::format("'{}' is not supported: chat templates are rendered in a "
                                     "sandbox and cannot load or extend other templates",
                                     name));
  if (is_end_like(name)) fail_misplaced_tag(name_token);
  advance();
  if (name == "for")
    out.push_back(parse_for(pos));
  else if (name == "if")
    out.push_back(parse_if(pos));
  else if (name == "set")
    out.push_back(parse_set(pos));
  else if (name == "macro")
    out.push_back(parse_macro(pos));
  else if (name == "call")
    out.push_back(parse_call_block(pos));
  else if (name == "filter")
    out.push_back(parse_filter_block(pos));
  else if (name == "with")
    out.push_back(parse_with(pos));
  else if (name == "generation")
    out.push_back(parse_generation(pos));
  else if (name == "break" || name == "continue")
    out.push_back(parse_loop_control(pos, name == "break"));
  else if (name == "print") {
    // {% print a, b %} prints each expression in turn (not a tuple); {% print %} prints nothing.
    for (bool first = true; current().kind != token_kind::block_end; first = false) {
      if (!first) expect_op(",", "between printed expressions");
      expr_ptr e = parse_expression();
      out.push_back(stmt{pos, print_stmt{std::move(e)}});
    }
    expect_block_end("print");
  } else {
    fail(name_token.pos, fmt::format("unknown tag '{}'", name));
  }
}

// Parses a block's body up to one of `end_tags`, keeping `name` on the open-block stack for
// error messages; the stream is left after the end tag's name.
stmt_list parser::parse_block_body(const std::string& name, source_pos pos,
                                   std::initializer_list<std::string_view> end_tags,
                                   std::string* end_found) {
  open_blocks_.push_back(open_block{name, pos, {end_tags.begin(), end_tags.end()}});
  stmt_list body;
  std::string end = parse_body(body, end_tags);
  open_blocks_.pop_back();
  if (end_found) *end_found = end;
  return body;
}

stmt parser::parse_for(source_pos pos) {
  for_stmt s;
  s.target = parse_assign_target(false);
  if (!skip_name("in")) fail_expected("'in' after the loop variable");
  s.iterable = parse_tuple(false, false, "recursive");
  if (skip_name("if")) s.filter = parse_expression();
  if (at_name("recursive")) fail(current().pos, "recursive for loops are not supported");
  expect_block_end("for");
  std::string end;
  ++loop_depth_;
  s.body = parse_block_body("for", pos, {"else", "endfor"}, &end);
  --loop_depth_;
  if (end == "else") {
    expect_block_end("else");
    s.else_body = parse_block_body("for", pos, {"endfor"});
  }
  expect_block_end("endfor");
  return stmt{pos, std::move(s)};
}

stmt parser::parse_if(source_pos pos) {
  if_stmt s;
  std::string end = "if";
  while (end == "if" || end == "elif") {
    expr_ptr condition = parse_tuple(false);
    expect_block_end(end);
    stmt_list body = parse_block_body("if", pos, {"elif", "else", "endif"}, &end);
    s.branches.emplace_back(std::move(condition), std::move(body));
  }
  if (end == "else") {
    expect_block_end("else");
    s.else_body = parse_block_body("if", pos, {"endif"});
  }
  expect_block_end("endif");
  return stmt{pos, std::move(s)};
}

stmt parser::parse_set(source_pos pos) {
  assign_target target = parse_assign_target(true);
  if (skip_op("=")) {
    expr_ptr value = parse_tuple();
    expect_block_end("set");
    return stmt{pos, set_stmt{std::move(target), std::move(value)}};
  }
  set_block_stmt s{std::move(target), {}, {}};
  if (at_op("|")) s.filters = parse_filter_chain();
  expect_block_end("set");
  s.body = parse_block_body("set", pos, {"endset"});
  expect_block_end("endset");
  return stmt{pos, std::move(s)};
}

void parser::parse_macro_params(macro_def& def) {
  expect_op("(", "to start the parameter list");
  while (!at_op(")")) {
    if (!def.params.empty()) expect_op(",", "between parameters");
    if (at_op(")")) break;
    std::string param = expect_name("for a parameter");
    expr_ptr default_value = skip_op("=") ? parse_expression() : nullptr;
    if (!default_value && !def.params.empty() && def.params.back().second)
      fail(current().pos, "a parameter without a default follows one with a default");
    def.params.emplace_back(std::move(param), std::move(default_value));
  }
  advance();  // ')'
}

stmt parser::parse_macro(source_pos pos) {
  auto def = std::make_shared<macro_def>();
  def->name = expect_name("for the macro");
  parse_macro_params(*def);
  expect_block_end("macro");
  int saved_loop_depth = std::exchange(loop_depth_, 0);
  macros_.push_back(def.get());
  def->body = parse_block_body("macro", pos, {"endmacro"});
  macros_.pop_back();
  loop_depth_ = saved_loop_depth;
  expect_block_end("endmacro");
  return stmt{pos, macro_stmt{std::move(def)}};
}

stmt parser::parse_call_block(source_pos pos) {
  auto caller = std::make_shared<macro_def>();
  caller->name = "caller";
  if (at_op("(")) parse_macro_params(*caller);
  expr_ptr call = parse_expression();
  if (!std::holds_alternative<call_expr>(call->node))
    fail(call->pos, "expected a macro call after '{% call %}'");
  expect_block_end("call");
  int saved_loop_depth = std::exchange(loop_depth_, 0);
  macros_.push_back(caller.get());
  caller->body = parse_block_body("call", pos, {"endcall"});
  macros_.pop_back();
  loop_depth_ = saved_loop_depth;
  expect_block_end("endcall");
  return stmt{pos, call_block_stmt{std::move(caller), std::move(call)}};
}

stmt parser::parse_filter_block(source_pos pos) {
  filter_block_stmt s;
  s.filters.push_back(parse_filter_call());
  if (at_op("|")) {
    for (auto& f : parse_filter_chain()) s.filters.push_back(std::move(f));
  }
  expect_block_end("filter");
  s.body = parse_block_body("filter", pos, {"endfilter"});
  expect_block_end("endfilter");
  return stmt{pos, std::move(s)};
}

stmt parser::parse_with(source_pos pos) {
  scope_stmt s;
  while (current().kind != token_kind::block_end) {
    if (!s.assignments.empty()) expect_op(",", "between 'with' assignments");
    assign_target target = parse_assign_target(false);
    expect_op("=", "in a 'with' assignment");
    s.assignments.emplace_back(std::move(target), parse_expression());
  }
  expect_block_end("with");
  s.body = parse_block_body("with", pos, {"endwith"});
  expect_block_end("endwith");
  return stmt{pos, std::move(s)};
}

// transformers' AssistantTracker tag: renders its body (it only records offsets).
stmt parser::parse_generation(source_pos pos) {
  expect_block_end("generation");
  scope_stmt s;
  s.body = parse_block_body("generation", pos, {"endgeneration"});
  expect_block_end("endgeneration");
  return stmt{pos, std::move(s)};
}

stmt parser::parse_loop_control(source_pos pos, bool is_break) {
  std::string_view name = is_break ? "break" : "continue";
  if (loop_depth_ == 0) fail(pos, fmt::format("'{}' outside of a for loop", name));
  expect_block_end(name);
  return stmt{pos, loop_control_stmt{is_break}};
}

assign_target parser::parse_assign_target(bool allow_namespace) {
  assign_target target;
  if (allow_namespace && current().kind == token_kind::name && peek(1).kind == token_kind::op &&
      peek(1).text == ".") {
    target.names.push_back(advance().text);
    advance();  // '.'
    target.ns_attr = expect_name("after '.' in an assignment");
    return target;
  }
  bool parens = skip_op("(");
  while (true) {
    if (at_op("(")) fail(current().pos, "nested tuple unpacking is not supported");
    std::string name = expect_name("to assign to");
    if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" ||
        name == "None")
      fail(peek(0).pos, fmt::format("cannot assign to '{}'", name));
    target.names.push_back(std::move(name));
    if (!skip_op(",")) break;
    target.is_tuple = true;
    if (current().kind != token_kind::name) break;  // trailing comma
  }
  if (parens) expect_op(")", "to close the assignment target");
  return target;
}

std::vector<filter_call> parser::parse_filter_chain() {
  std::vector<filter_call> filters;
  while (skip_op("|")) filters.push_back(parse_filter_call());
  return filters;
}

}  // namespace di::jinja
