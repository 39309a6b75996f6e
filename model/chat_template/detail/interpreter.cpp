// Statement execution, macros and the for-loop context (see interpreter.hpp). Scoping
// follows Jinja: `if` shares its scope, every for-loop iteration, macro call and `with`
// gets a fresh child scope, so `set` inside them is invisible outside (hence namespace()).
#include "model/chat_template/detail/interpreter.hpp"

#include "model/chat_template/detail/builtins.hpp"
#include "model/chat_template/detail/format.hpp"

#include <fmt/format.h>

#include <optional>

namespace di::jinja {

namespace {

template <class... Fns>
struct overloaded : Fns... {
  using Fns::operator()...;
};
template <class... Fns>
overloaded(Fns...) -> overloaded<Fns...>;

class macro_object : public object {
 public:
  macro_object(std::shared_ptr<const macro_def> def, scope_ptr closure)
      : def_(std::move(def)), closure_(std::move(closure)) {}
  std::string_view type_name() const override { return "Macro"; }
  bool is_callable() const override { return true; }
  value call(interpreter& in, call_args& args) override {
    return in.call_macro(*def_, closure_, args);
  }
  void repr(std::string& out) const override { out += fmt::format("<Macro '{}'>", def_->name); }

 private:
  std::shared_ptr<const macro_def> def_;
  scope_ptr closure_;  // the scope the macro was defined in: it sees those variables
};

// `loop` inside a for body: index, first/last, previtem/nextitem, cycle(), changed().
class loop_object : public object, public std::enable_shared_from_this<loop_object> {
 public:
  explicit loop_object(std::shared_ptr<const std::vector<value>> items)
      : items_(std::move(items)) {}
  void set_index(std::size_t index) { index_ = index; }
  std::string_view type_name() const override { return "LoopContext"; }
  void repr(std::string& out) const override {
    out += fmt::format("<LoopContext {}/{}>", index_ + 1, items_->size());
  }
  value get_attr(std::string_view name) const override;

 private:
  value cycle(call_args& args) const;
  value changed(call_args& args);

  std::shared_ptr<const std::vector<value>> items_;
  std::size_t index_ = 0;
  std::optional<std::vector<value>> last_changed_;
};

value loop_object::get_attr(std::string_view name) const {
  auto n = std::int64_t(items_->size()), i = std::int64_t(index_);
  if (name == "index") return value::integer(i + 1);
  if (name == "index0") return value::integer(i);
  if (name == "revindex") return value::integer(n - i);
  if (name == "revindex0") return value::integer(n - i - 1);
  if (name == "first") return value::boolean(i == 0);
  if (name == "last") return value::boolean(i == n - 1);
  if (name == "length") return value::integer(n);
  if (name == "depth") return value::integer(1);
  if (name == "depth0") return value::integer(0);
  if (name == "previtem")
    return i > 0 ? (*items_)[index_ - 1] : value::undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < n ? (*items_)[index_ + 1] : value::undefined("there is no next item");
  auto self = std::const_pointer_cast<loop_object>(shared_from_this());
  if (name == "cycle")
    return value::object(std::make_shared<native_function>(
        "cycle", [self](interpreter&, call_args& args) { return self->cycle(args); }));
  if (name == "changed")
    return value::object(std::make_shared<native_function>(
        "changed", [self](interpreter&, call_args& args) { return self->changed(args); }));
  return object::get_attr(name);
}

value loop_object::cycle(call_args& args) const {
  if (args.positional.empty()) throw eval_error("loop.cycle() needs at least one item");
  return args.positional[index_ % args.positional.size()];
}

value loop_object::changed(call_args& args) {
  bool is_same = last_changed_ && last_changed_->size() == args.positional.size();
  for (std::size_t k = 0; is_same && k < args.positional.size(); ++k)
    is_same = values_equal((*last_changed_)[k], args.positional[k]);
  last_changed_ = args.positional;
  return value::boolean(!is_same);
}

std::optional<value> take_keyword(call_args& args, std::string_view name) {
  for (auto it = args.keyword.begin(); it != args.keyword.end(); ++it) {
    if (it->first != name) continue;
    std::optional<value> found(std::move(it->second));
    args.keyword.erase(it);
    return found;
  }
  return std::nullopt;
}

// Keeps call_depth_ balanced when a macro body throws.
class depth_scope {
 public:
  explicit depth_scope(int& depth) : depth_(depth) { ++depth_; }
  ~depth_scope() { --depth_; }
  depth_scope(const depth_scope&) = delete;
  depth_scope& operator=(const depth_scope&) = delete;

 private:
  int& depth_;
};

}  // namespace

const value* scope::find(std::string_view name) const {
  for (const scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(std::string(name));
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

std::string interpreter::render(const template_ast& ast, const value& context) {
  auto context_scope = std::make_shared<scope>(nullptr);
  for (const auto& [key, v] : context.as_dict().entries()) context_scope->vars[key] = v;
  auto root = std::make_shared<scope>(context_scope);
  std::string out;
  const build_meter meter(num_built_);
  exec(ast.body, root, out);
  return out;
}

void interpreter::count_step() {
  check_built();
  if (++num_steps_ > limits_.max_steps)
    throw eval_error(
        fmt::format("the template exceeded its budget of {} steps (a runaway loop "
                    "or recursion?)",
                    limits_.max_steps));
}

interpreter::nesting_guard::nesting_guard(interpreter& in) : depth_(in.nesting_depth_) {
  if (++depth_ > in.limits_.max_nesting_depth) {
    --depth_;
    throw eval_error(
        fmt::format("the template nests statements, expressions and macro calls "
                    "more than {} levels deep",
                    in.limits_.max_nesting_depth));
  }
}

void interpreter::check_built() const {
  if (num_built_ > limits_.max_built_bytes)
    throw eval_error(fmt::format(
        "the template built more than {} bytes of strings and lists in all (a runaway loop?)",
        limits_.max_built_bytes));
}

void interpreter::check_size(std::size_t size) const {
  check_built();
  if (size > limits_.max_output_bytes)
    throw eval_error(
        fmt::format("the template built a value larger than the limit of {} bytes (or items)",
                    limits_.max_output_bytes));
}

void interpreter::append_output(std::string& out, std::string_view text) const {
  out.append(text);
  check_size(out.size());
}

interpreter::flow interpreter::exec(const stmt_list& body, const scope_ptr& s, std::string& out) {
  for (const stmt& st : body) {
    flow f = exec_stmt(st, s, out);
    if (f != flow::normal) return f;
  }
  return flow::normal;
}

// One statement; evaluation errors not yet located get this statement's position.
interpreter::flow interpreter::exec_stmt(const stmt& st, const scope_ptr& s, std::string& out) {
  try {
    nesting_guard guard(*this);
    count_step();
    return std::visit(
        overloaded{
            [&](const text_stmt& t) {
              append_output(out, t.text);
              return flow::normal;
            },
            [&](const print_stmt& p) {
              value v = eval(*p.value, s);
              if (v.is_string())
                append_output(out, v.as_string());
              else
                append_output(out, to_str(v));
              return flow::normal;
            },
            [&](const if_stmt& i) { return exec_if(i, s, out); },
            [&](const for_stmt& f) { return exec_for(f, s, out); },
            [&](const set_stmt& a) {
              assign(a.target, eval(*a.value, s), s);
              return flow::normal;
            },
            [&](const set_block_stmt& b) {
              std::string text;
              flow f = exec(b.body, std::make_shared<scope>(s), text);
              assign(b.target, apply_filters(b.filters, value::string(std::move(text)), s), s);
              return f;
            },
            [&](const macro_stmt& m) {
              s->vars[m.def->name] = value::object(std::make_shared<macro_object>(m.def, s));
              return flow::normal;
            },
            [&](const call_block_stmt& c) {
              exec_call_block(c, s, out);
              return flow::normal;
            },
            [&](const filter_block_stmt& b) {
              std::string text;
              flow f = exec(b.body, std::make_shared<scope>(s), text);
              append_output(out,
                            to_str(apply_filters(b.filters, value::string(std::move(text)), s)));
              return f;
            },
            [&](const scope_stmt& w) {
              auto inner = std::make_shared<scope>(s);
              std::vector<value> values;  // all evaluated in the outer scope first
              for (const auto& [target, e] : w.assignments) values.push_back(eval(*e, s));
              for (std::size_t k = 0; k < values.size(); ++k)
                assign(w.assignments[k].first, values[k], inner);
              return exec(w.body, inner, out);
            },
            [&](const loop_control_stmt& l) {
              return l.is_break ? flow::break_loop : flow::continue_loop;
            },
        },
        st.node);
  } catch (const eval_error& e) {
    throw_template_error(
        e.is_raised() ? chat_template_error::kind::raised : chat_template_error::kind::render,
        st.pos, e.what());
  }
}

interpreter::flow interpreter::exec_if(const if_stmt& st, const scope_ptr& s, std::string& out) {
  for (const auto& [condition, body] : st.branches)
    if (truthy(eval(*condition, s))) return exec(body, s, out);
  return exec(st.else_body, s, out);
}

interpreter::flow interpreter::exec_for(const for_stmt& st, const scope_ptr& s, std::string& out) {
  value iterable = eval(*st.iterable, s);
  std::shared_ptr<std::vector<value>> items;
  try {
    items = std::make_shared<std::vector<value>>(iterate(iterable));
  } catch (const eval_error& e) {
    throw_template_error(chat_template_error::kind::render, st.iterable->pos, e.what());
  }
  if (st.filter) {
    std::vector<value> kept;
    for (value& item : *items) {
      count_step();
      auto filter_scope = std::make_shared<scope>(s);
      assign(st.target, item, filter_scope);
      if (truthy(eval(*st.filter, filter_scope))) kept.push_back(std::move(item));
    }
    *items = std::move(kept);
  }
  auto loop = std::make_shared<loop_object>(items);
  value loop_value = value::object(loop);
  for (std::size_t i = 0; i < items->size(); ++i) {
    count_step();
    loop->set_index(i);
    auto iteration = std::make_shared<scope>(s);
    assign(st.target, (*items)[i], iteration);
    iteration->vars["loop"] = loop_value;
    if (exec(st.body, iteration, out) == flow::break_loop) break;
  }
  if (items->empty()) return exec(st.else_body, std::make_shared<scope>(s), out);
  return flow::normal;
}

void interpreter::exec_call_block(const call_block_stmt& st, const scope_ptr& s, std::string& out) {
  const auto& call = std::get<call_expr>(st.call->node);
  value callee = eval(*call.callee, s);
  call_args args = eval_args(call.args, s);
  args.keyword.emplace_back("caller", value::object(std::make_shared<macro_object>(st.caller, s)));
  append_output(out, to_str(call_value(callee, args)));
}

value interpreter::apply_filters(const std::vector<filter_call>& filters, value input,
                                 const scope_ptr& s) {
  for (const filter_call& f : filters) input = eval_filter(f, input, s);
  return input;
}

void interpreter::assign(const assign_target& target, const value& v, const scope_ptr& s) {
  if (!target.ns_attr.empty()) {
    value ns = eval_name(target.names.front(), s);
    if (!ns.is_object() || !ns.as_object().set_attr(target.ns_attr, v))
      throw eval_error(
          fmt::format("cannot assign attribute '{}' on '{}': only namespace() "
                      "objects can be modified",
                      target.ns_attr, target.names.front()));
    return;
  }
  if (!target.is_tuple) {
    s->vars[target.names.front()] = v;
    return;
  }
  if (!v.is_list() && !v.is_string() && !v.is_dict())
    throw eval_error(fmt::format("cannot unpack non-iterable {} object", type_name(v)));
  std::vector<value> parts = iterate(v);
  if (parts.size() != target.names.size())
    throw eval_error(fmt::format("cannot unpack {} values into {} variables", parts.size(),
                                 target.names.size()));
  for (std::size_t k = 0; k < parts.size(); ++k) s->vars[target.names[k]] = parts[k];
}

value interpreter::call_macro(const macro_def& def, const scope_ptr& closure, call_args& args) {
  if (call_depth_ >= limits_.max_call_depth)
    throw eval_error(
        fmt::format("macro calls nested more than {} deep (runaway recursion in "
                    "'{}'?)",
                    limits_.max_call_depth, def.name));
  count_step();
  auto s = std::make_shared<scope>(closure);
  for (std::size_t i = 0; i < def.params.size(); ++i) {
    const auto& [name, default_value] = def.params[i];
    std::optional<value> given =
        i < args.positional.size() ? args.positional[i] : take_keyword(args, name);
    if (given)
      s->vars[name] = std::move(*given);
    else if (default_value)
      s->vars[name] = eval(*default_value, s);
    else
      s->vars[name] = value::undefined(fmt::format("parameter '{}' was not provided", name));
  }
  if (def.uses_caller) {
    std::optional<value> caller = take_keyword(args, "caller");
    s->vars["caller"] = caller ? *caller : value::undefined("no caller defined");
  }
  if (def.uses_kwargs) {
    dict_data extra;
    for (auto& [k, v] : args.keyword) extra.set(k, v);
    s->vars["kwargs"] = value::dict(std::move(extra));
  } else if (!args.keyword.empty()) {
    throw eval_error(fmt::format("macro '{}' takes no keyword argument '{}'", def.name,
                                 args.keyword.front().first));
  }
  if (def.uses_varargs) {
    std::vector<value> extra;
    for (std::size_t i = def.params.size(); i < args.positional.size(); ++i)
      extra.push_back(args.positional[i]);
    s->vars["varargs"] = value::list(std::move(extra), true);
  } else if (args.positional.size() > def.params.size()) {
    throw eval_error(
        fmt::format("macro '{}' takes not more than {} argument(s)", def.name, def.params.size()));
  }
  depth_scope depth(call_depth_);
  std::string out;
  exec(def.body, s, out);
  return value::string(std::move(out));
}

value interpreter::call_value(const value& callee, call_args& args) {
  if (callee.is_object() && callee.as_object().is_callable()) {
    count_step();
    return callee.as_object().call(*this, args);
  }
  if (callee.is_undefined()) fail_undefined(callee);
  throw eval_error(fmt::format("'{}' object is not callable", type_name(callee)));
}

}  // namespace di::jinja
