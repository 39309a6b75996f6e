// Recursive-descent parser from tokens to the AST, following Jinja's grammar and operator
// precedence (parser.py), so that templates mean here what they mean in transformers.
// Statements live in parser.cpp, expressions in parser_expr.cpp.
#pragma once

#include "model/chat_template/detail/ast.hpp"
#include "model/chat_template/detail/lexer.hpp"

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace di::jinja {

/// Parses template source; throws chat_template_error (syntax) with position and reason.
template_ast parse_template(std::string_view source);

class parser {
 public:
  explicit parser(std::vector<token> tokens) : tokens_(std::move(tokens)) {}
  template_ast parse();

 private:
  static constexpr int max_expression_depth = 128;
  static constexpr std::size_t max_block_depth = 64;

  // A block statement being parsed, for "never closed" / "unexpected end tag" messages.
  struct open_block {
    std::string name;
    source_pos pos;
    std::vector<std::string> end_tags;
  };

  // Token stream.
  const token& current() const { return tokens_[pos_]; }
  const token& peek(std::size_t ahead) const;
  const token& advance();
  bool at_name(std::string_view name) const;
  bool at_op(std::string_view op) const;
  bool skip_name(std::string_view name);
  bool skip_op(std::string_view op);
  void expect_op(std::string_view op, std::string_view context);
  std::string expect_name(std::string_view context);
  void expect_block_end(std::string_view statement);
  [[noreturn]] void fail(source_pos pos, const std::string& message) const;
  [[noreturn]] void fail_expected(std::string_view expected) const;

  // Statements (parser.cpp).
  std::string parse_body(stmt_list& out, std::initializer_list<std::string_view> end_tags);
  void parse_statement(stmt_list& out);
  [[noreturn]] void fail_misplaced_tag(const token& name) const;
  stmt parse_for(source_pos pos);
  stmt parse_if(source_pos pos);
  stmt parse_set(source_pos pos);
  stmt parse_macro(source_pos pos);
  stmt parse_call_block(source_pos pos);
  stmt parse_filter_block(source_pos pos);
  stmt parse_with(source_pos pos);
  stmt parse_generation(source_pos pos);
  stmt parse_loop_control(source_pos pos, bool is_break);
  void parse_macro_params(macro_def& def);
  stmt_list parse_block_body(const std::string& name, source_pos pos,
                             std::initializer_list<std::string_view> end_tags,
                             std::string* end_found = nullptr);
  assign_target parse_assign_target(bool allow_namespace);
  std::vector<filter_call> parse_filter_chain();

  // Expressions (parser_expr.cpp), from loosest to tightest binding.
  expr_ptr parse_tuple(bool with_condexpr = true, bool explicit_parens = false,
                       std::string_view extra_end = {});
  expr_ptr parse_expression(bool with_condexpr = true);
  expr_ptr parse_condexpr();
  expr_ptr parse_or();
  expr_ptr parse_and();
  expr_ptr parse_not();
  expr_ptr parse_compare();
  expr_ptr parse_math1();
  expr_ptr parse_concat();
  expr_ptr parse_math2();
  expr_ptr parse_pow();
  expr_ptr parse_unary(bool with_filter);
  expr_ptr parse_primary();
  expr_ptr parse_postfix(expr_ptr node);
  expr_ptr parse_filter_expr(expr_ptr node);
  expr_ptr parse_subscript(expr_ptr node);
  expr_ptr parse_subscribed();
  expr_ptr parse_test(expr_ptr node);
  expr_ptr parse_list_literal();
  expr_ptr parse_dict_literal();
  filter_call parse_filter_call();
  call_arg_exprs parse_call_args();
  void note_name(const std::string& name);

  std::vector<token> tokens_;
  std::size_t pos_ = 0;
  int expression_depth_ = 0;
  int loop_depth_ = 0;                   // enclosing for loops (for break/continue)
  std::vector<open_block> open_blocks_;  // innermost last
  std::vector<macro_def*> macros_;       // macros being parsed, innermost last
};

/// A human description of a token for error messages: 'foo', '}}', end of template.
std::string describe_token(const token& t);

}  // namespace di::jinja
