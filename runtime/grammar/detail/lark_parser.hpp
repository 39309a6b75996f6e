// The Lark front end's parser (parse_lark in ebnf.hpp). Lark separates rules (lowercase) from
// terminals (uppercase); `%ignore` text may appear before any terminal inside rules, so every
// terminal occurrence in a rule is prefixed by the ignore rule and the start rule is followed
// by it. Definitions end at a newline unless the next line continues with '|'.
#pragma once

#include "runtime/grammar/ebnf.hpp"

#include <map>
#include <set>
#include <string>

namespace di::grammar::detail {

class lark_parser {
 public:
  lark_parser(std::string_view text, const ebnf_options& options);
  grammar parse();

 private:
  struct context {
    bool terminal = false;  ///< inside a terminal definition (no ignore, no rule references)
    std::string name;       ///< the definition being parsed
  };

  void parse_statement();
  void parse_definition();
  void parse_directive();
  void parse_import();
  void import_common(const std::string& name, const std::string& alias);
  expr_id parse_expansions(bool nested, std::size_t depth);
  expr_id parse_sequence(bool nested, std::size_t depth);
  expr_id parse_postfix(expr_id item);
  expr_id parse_atom(bool nested, std::size_t depth);
  expr_id parse_name_ref();
  expr_id parse_string_atom();
  expr_id parse_regex_atom();
  std::string parse_string_body();
  expr_id token(expr_id e);
  void check_terminal_cycles();
  std::uint32_t parse_number();

  void skip_inline();
  void skip_all();
  bool continues_with_bar();
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  std::string parse_identifier();
  [[noreturn]] void fail(const std::string& what) const;

  grammar g_;
  std::string_view s_;
  std::size_t pos_ = 0;
  ebnf_options options_;
  context ctx_;
  rule_id ignore_rule_ = 0;
  std::vector<expr_id> ignore_alternatives_;
  std::set<std::string> defined_;
  std::map<std::string, std::size_t> first_use_;  // name -> offset of first reference
  std::map<std::string, std::set<std::string>> terminal_refs_;
};

}  // namespace di::grammar::detail
