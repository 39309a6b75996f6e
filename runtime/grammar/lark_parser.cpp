// Lark grammar text -> grammar IR (see detail/lark_parser.hpp for the model). Statements,
// directives and terminal bookkeeping live here; expansions and atoms in lark_expansions.cpp.
#include "runtime/grammar/detail/lark_parser.hpp"

#include "common/error.hpp"
#include "runtime/grammar/detail/lark_common.hpp"

#include <cctype>
#include <functional>

namespace di::grammar::detail {

namespace {

bool is_terminal_name(std::string_view name) {
  for (char c : name)
    if (c != '_') return std::isupper(static_cast<unsigned char>(c)) != 0;
  return false;
}

}  // namespace

lark_parser::lark_parser(std::string_view text, const ebnf_options& options)
    : s_(text), options_(options) {}

void lark_parser::fail(const std::string& what) const {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < pos_ && i < s_.size(); ++i) {
    if (s_[i] == '\n')
      ++line, col = 1;
    else
      ++col;
  }
  DI_FAIL("Lark grammar: line {}, column {}: {}", line, col, what);
}

void lark_parser::skip_inline() {
  while (!at_end()) {
    char c = s_[pos_];
    if (c == ' ' || c == '\t' || c == '\r') {
      ++pos_;
    } else if (s_.substr(pos_, 2) == "//") {
      while (!at_end() && s_[pos_] != '\n') ++pos_;
    } else if (s_.substr(pos_, 2) == "\\\n") {
      pos_ += 2;
    } else {
      break;
    }
  }
}

void lark_parser::skip_all() {
  for (skip_inline(); !at_end() && s_[pos_] == '\n'; skip_inline()) ++pos_;
}

bool lark_parser::continues_with_bar() {
  std::size_t save = pos_;
  skip_all();
  if (peek() == '|') return true;
  pos_ = save;
  return false;
}

std::string lark_parser::parse_identifier() {
  std::size_t start = pos_;
  while (!at_end() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
    ++pos_;
  if (pos_ == start) fail(std::string("unexpected character '") + peek() + "'");
  return std::string(s_.substr(start, pos_ - start));
}

grammar lark_parser::parse() {
  ignore_rule_ = g_.declare_rule("__ignore");
  for (skip_all(); !at_end(); skip_all()) parse_statement();
  if (!defined_.count("start")) DI_FAIL("Lark grammar: no start rule (define `start: ...`)");
  for (const auto& [name, offset] : first_use_)
    if (!defined_.count(name)) pos_ = offset, fail("unknown name '" + name + "'");
  check_terminal_cycles();
  g_.define_rule(ignore_rule_, ignore_alternatives_.empty()
                                   ? g_.empty()
                                   : g_.repeat(g_.choice(ignore_alternatives_), 0, k_unbounded));
  rule_id root = g_.fresh_rule("__start");
  g_.define_rule(root, g_.sequence({g_.ref(*g_.find_rule("start")), g_.ref(ignore_rule_)}));
  g_.set_root(root);
  return std::move(g_);
}

void lark_parser::parse_statement() {
  if (peek() == '%') return parse_directive();
  parse_definition();
  skip_inline();
  if (!at_end() && peek() != '\n')
    fail(std::string("unexpected '") + peek() + "' after definition");
}

void lark_parser::parse_definition() {
  if (peek() == '?' || peek() == '!') ++pos_;
  std::size_t name_pos = pos_;
  std::string name = parse_identifier();
  bool terminal = is_terminal_name(name);
  skip_inline();
  if (peek() == '.') fail("priorities are not supported");
  if (peek() == '{') fail("Lark templates are not supported");
  if (s_.substr(pos_, 2) == "::") fail("parametric grammar is not supported");
  if (peek() == '[') {
    if (terminal) fail("attributes are only supported on rules");
    fail("rule attributes such as [" +
         std::string(s_.substr(pos_ + 1, s_.find_first_of("]=,", pos_) - pos_ - 1)) +
         "] are not supported");
  }
  if (peek() != ':') fail("expected ':' after rule name");
  ++pos_;
  if (defined_.count(name)) pos_ = name_pos, fail("duplicate rule or terminal '" + name + "'");
  defined_.insert(name);
  ctx_ = context{terminal, name};
  rule_id r = g_.declare_rule(name);
  g_.define_rule(r, parse_expansions(false, 0));
}

void lark_parser::parse_directive() {
  ++pos_;  // '%'
  std::string word = parse_identifier();
  skip_inline();
  if (word == "import") return parse_import();
  if (word == "ignore") {
    ctx_ = context{true, "%ignore"};
    ignore_alternatives_.push_back(parse_expansions(false, 0));
    return;
  }
  fail("directive %" + word + " is not supported");
}

void lark_parser::parse_import() {
  std::string module = parse_identifier();
  if (module != "common") fail("only %import common.NAME is supported (got '" + module + "')");
  skip_inline();
  if (peek() == '(') {
    ++pos_;
    for (skip_all(); peek() != ')'; skip_all()) {
      import_common(parse_identifier(), "");
      skip_all();
      if (peek() == ',')
        ++pos_;
      else if (peek() != ')')
        fail("expected ',' or ')' in %import list");
    }
    ++pos_;
    return;
  }
  if (peek() != '.') fail("expected '.' after %import common");
  ++pos_;
  std::string name = parse_identifier();
  skip_inline();
  std::string alias;
  if (s_.substr(pos_, 2) == "->") {
    pos_ += 2;
    skip_inline();
    alias = parse_identifier();
  }
  import_common(name, alias);
}

void lark_parser::import_common(const std::string& name, const std::string& alias) {
  std::string_view body = lark_common_body(name);
  if (body.empty()) fail("unknown common import '" + name + "'");
  std::string target = alias.empty() ? name : alias;
  if (defined_.count(target)) fail("duplicate rule or terminal '" + target + "'");
  // Dependencies first (uppercase words of the body that are common definitions).
  for (std::size_t i = 0; i < body.size();) {
    std::size_t j = i;
    while (j < body.size() && (std::isalnum(static_cast<unsigned char>(body[j])) || body[j] == '_'))
      ++j;
    if (j > i) {
      std::string word(body.substr(i, j - i));
      if (word != name && is_terminal_name(word) && !lark_common_body(word).empty() &&
          !defined_.count(word))
        import_common(word, "");
      i = j;
    } else {
      ++i;
    }
  }
  std::string_view saved_s = s_;
  std::size_t saved_pos = pos_;
  context saved_ctx = ctx_;
  s_ = body;
  pos_ = 0;
  ctx_ = context{true, target};
  defined_.insert(target);
  g_.define_rule(g_.declare_rule(target), parse_expansions(false, 0));
  s_ = saved_s;
  pos_ = saved_pos;
  ctx_ = saved_ctx;
}

void lark_parser::check_terminal_cycles() {
  std::map<std::string, int> state;  // 1 visiting, 2 done
  std::function<void(const std::string&)> visit = [&](const std::string& t) {
    state[t] = 1;
    for (const auto& u : terminal_refs_[t]) {
      if (state[u] == 1) DI_FAIL("Lark grammar: circular reference in terminal '{}'", t);
      if (state[u] == 0) visit(u);
    }
    state[t] = 2;
  };
  for (const auto& [t, refs] : terminal_refs_)
    if (state[t] == 0) visit(t);
}

}  // namespace di::grammar::detail

namespace di::grammar {

grammar parse_lark(std::string_view text, const ebnf_options& options) {
  return detail::lark_parser(text, options).parse();
}

}  // namespace di::grammar
