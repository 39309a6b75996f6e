// Tree-walking interpreter for a parsed chat template. It owns the sandbox: a step budget
// (statements, loop iterations and calls), a size cap on every string or list it builds,
// and a macro call-depth limit, so any template terminates with output or a clear error.
// Statements are executed in interpreter.cpp, expressions evaluated in evaluator.cpp.
#pragma once

#include "model/chat_template/chat_template.hpp"
#include "model/chat_template/detail/ast.hpp"

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace di::jinja {

struct scope;
using scope_ptr = std::shared_ptr<scope>;

/// Variables of one level (template, for-loop iteration, macro call); lookups walk outward.
struct scope {
  explicit scope(scope_ptr parent_scope) : parent(std::move(parent_scope)) {}
  const value* find(std::string_view name) const;

  scope_ptr parent;
  std::unordered_map<std::string, value> vars;
};

class interpreter {
 public:
  explicit interpreter(const chat_template_limits& limits) : limits_(limits) {}

  /// Renders `ast` with the entries of `context` (a dict) as template variables.
  std::string render(const template_ast& ast, const value& context);

  /// Spends one step of the budget; throws eval_error when it is exhausted.
  void count_step();
  /// Throws eval_error when a string or list of `size` bytes/items exceeds the output cap.
  void check_size(std::size_t size) const;
  /// Throws eval_error once the values built exceed limits.max_built_bytes.
  void check_built() const;
  /// Counts one level of recursion for the duration of a scope; throws eval_error past the
  /// nesting limit, so that no template can exhaust the C++ stack.
  class nesting_guard {
   public:
    explicit nesting_guard(interpreter& in);
    ~nesting_guard() { --depth_; }
    nesting_guard(const nesting_guard&) = delete;
    nesting_guard& operator=(const nesting_guard&) = delete;

   private:
    int& depth_;
  };
  /// Calls a macro (or a call block's caller) with its captured scope.
  value call_macro(const macro_def& def, const scope_ptr& closure, call_args& args);
  /// Calls any callable value; undefined and non-callables throw eval_error.
  value call_value(const value& callee, call_args& args);
  /// Jinja's getattr/getitem with the sandbox's rules (evaluator.cpp).
  value get_attr(const value& object, std::string_view name);
  value get_item(const value& object, const value& key);

 private:
  enum class flow { normal, break_loop, continue_loop };

  // Statements (interpreter.cpp).
  flow exec(const stmt_list& body, const scope_ptr& s, std::string& out);
  flow exec_stmt(const stmt& st, const scope_ptr& s, std::string& out);
  flow exec_if(const if_stmt& st, const scope_ptr& s, std::string& out);
  flow exec_for(const for_stmt& st, const scope_ptr& s, std::string& out);
  void exec_call_block(const call_block_stmt& st, const scope_ptr& s, std::string& out);
  value apply_filters(const std::vector<filter_call>& filters, value input, const scope_ptr& s);
  void assign(const assign_target& target, const value& v, const scope_ptr& s);
  void append_output(std::string& out, std::string_view text) const;

  // Expressions (evaluator.cpp).
  value eval(const expr& e, const scope_ptr& s);
  value eval_node(const expr& e, const scope_ptr& s);
  value eval_call(const call_expr& c, const scope_ptr& s);
  value eval_filter(const filter_call& f, const value& input, const scope_ptr& s);
  value eval_compare(const compare_expr& c, const scope_ptr& s);
  value eval_slice(const value& object, const slice_expr& sl, const scope_ptr& s);
  value eval_name(const std::string& name, const scope_ptr& s) const;
  call_args eval_args(const call_arg_exprs& args, const scope_ptr& s);

  chat_template_limits limits_;
  std::size_t num_steps_ = 0;
  std::size_t num_built_ = 0;  // bytes of values built (build_meter)
  int call_depth_ = 0;
  int nesting_depth_ = 0;  // statements + expressions on the C++ stack right now
};

/// Python's binary operators on values (operators.cpp); throws eval_error like Python's
/// TypeError/ZeroDivisionError. `in` follows Python's containment rules.
value binary_operation(binary_op op, const value& a, const value& b, const interpreter& in);
value unary_operation(unary_op op, const value& v);
bool contains(const value& container, const value& item);
/// Python slicing of a str, list or tuple with optional start/stop/step.
value slice_value(const value& v, const value& start, const value& stop, const value& step);

}  // namespace di::jinja
