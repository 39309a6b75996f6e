// The recursive-descent regex parser behind compile_regex (regex.hpp). Structure (groups,
// alternation, quantifiers, anchors) is in regex_parser.cpp; escapes and bracket classes in
// regex_classes.cpp.
#pragma once

#include "runtime/grammar/detail/search_automaton.hpp"
#include "runtime/grammar/regex.hpp"

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace di::grammar::detail {

class regex_parser {
 public:
  regex_parser(grammar& g, std::string_view pattern, const regex_options& options);
  expr_id parse();

 private:
  struct flags {
    bool case_insensitive = false;
    bool dot_all = false;
    bool multi_line = false;
    bool extended = false;
    bool unicode = true;
  };
  /// A parsed sub-pattern, its paths split by the anchors they pass: `cell[s][e]` is the text of
  /// the paths that pass '^' (s: the text starts at the start of the input) or '$' (e: it ends at
  /// its end), none where no path does. Kept apart, a concatenation sees which paths its anchors
  /// leave a way through, exactly: (a$|c)b is cb, c(^a|b) is cb, x*^a is ^a.
  struct piece {
    std::optional<expr_id> cell[2][2];
    bool anchor_only = false;  ///< ^, $, \A, \z by themselves (or only such)
    piece() = default;
    explicit piece(expr_id e) { cell[0][0] = e; }
    bool start() const { return cell[1][0] || cell[1][1]; }
    bool end() const { return cell[0][1] || cell[1][1]; }
    bool open() const { return cell[0][0] || cell[1][0]; }       ///< some path passes no '$'
    bool unstarted() const { return cell[0][0] || cell[0][1]; }  ///< some path passes no '^'
    bool any() const { return open() || end(); }
  };

  /// '^' (`start`) or '$' by itself.
  piece anchor(bool start) const;
  piece parse_alternation(std::size_t depth);
  piece parse_concat(std::size_t depth);
  /// The concatenation of `items` (`offsets`: where each starts, then where the last ends).
  piece join_all(const std::vector<piece>& items, const std::vector<std::size_t>& offsets);
  /// `a` then `b`, each pair of their paths kept where the anchors allow it: after '$' only
  /// empty text, before '^' only empty text from the start.
  piece join(const piece& a, const piece& b) const;
  /// The text of all paths (full match, where anchors sit at the ends; atomic groups).
  expr_id flatten(const piece& p) const;
  /// Search mode's expression for `p`: each path not tied to the start or the end padded with
  /// "any character"* there; the alternatives of paths not tied to the start that begin with
  /// literal text (a character or class per position, the classes pairwise equal or disjoint)
  /// matched by the texts' Aho-Corasick automaton instead (regex_search.cpp).
  expr_id search(const piece& p);
  /// Search mode: `e` less the optional text at its end (`at_end`) or start, which the "any
  /// text" padding there takes in: (result)(any text) is the language of e(any text), likewise
  /// before. X{m,n} at that end becomes X{m}, X* and X? go, and a path that may match empty is
  /// the empty string (then the pattern matches every text). Subset construction no longer
  /// follows the optional copies: [0-9]{2}[A-Z0-9]{11,30} is searched as [0-9]{2}[A-Z0-9]{11}.
  /// `nullable`: matches_empty by expression, memoised.
  expr_id search_trim(expr_id e, bool at_end, std::unordered_map<expr_id, bool>& nullable);
  /// The characters that `items` (a sequence's children) spell from the first, one set per
  /// character (`units`: indices into unit_sets_), and where it may be cut: (characters,
  /// items) after each character or counted group.
  struct literal_start {
    std::vector<std::uint32_t> units;
    std::vector<std::pair<std::size_t, std::size_t>> cuts;
  };
  literal_start literal_prefix(const std::vector<expr_id>& items) const;
  /// An alternative searched through the literal automaton: its literal start as symbols of the
  /// automaton's alphabet, then `rest`, at the end of the input (`to_end`) or not.
  struct literal_path {
    std::vector<std::uint32_t> symbols;
    std::vector<expr_id> rest;
    bool to_end = false;
    expr_id alternative = 0;  ///< the whole alternative, for the padded form
  };
  /// `items`' literal start as symbols of `alphabet` (at most `max_symbols`, up to the first
  /// class that overlaps a symbol without being one, cut back where an item starts); none where
  /// that leaves no character.
  std::optional<literal_path> literal_path_of(const std::vector<expr_id>& items,
                                              detail::search_alphabet& alphabet,
                                              std::size_t max_symbols) const;
  /// A rule that compiles as automaton `a` of `paths` (grammar::set_automaton: its moves
  /// written out, a row per state; its body: the alternatives padded, the same language), or
  /// none where the rows would be too large (states times symbols).
  std::optional<expr_id> search_rule(const detail::search_automaton& a,
                                     const detail::search_alphabet& alphabet,
                                     const std::vector<literal_path>& paths, expr_id pad);
  /// The rules of automaton `a` of `paths` (their symbols over `alphabet`): any text up to the
  /// end of an occurrence of a path's literal, then its rest, and `pad` after it where the path
  /// is not tied to the end. None where they would be too many (nothing added then).
  std::optional<expr_id> search_literals(const detail::search_automaton& a,
                                         const detail::search_alphabet& alphabet,
                                         const std::vector<literal_path>& paths, expr_id pad);
  /// `e` as one byte set where it is a choice of single bytes (fewer NFA states).
  expr_id single_bytes(expr_id e);
  /// Records that `e` is the expression of `set` (characters of a class or a literal).
  void note_char(expr_id e, const codepoint_set& set) const;
  /// Whether expression `id` matches the empty string.
  bool matches_empty(expr_id id) const;
  /// Whether expression `id` matches no string at all.
  bool matches_nothing(expr_id id) const;
  /// Search mode's error for item `k` of a concatenation (`offsets`: where each item starts,
  /// then its end), after which no path is left: the items up to `ended_at` end the input on
  /// every path, or item `k` starts it on every path after text.
  [[noreturn]] void anchors_leave_no_path(const std::vector<std::size_t>& offsets,
                                          const std::vector<piece>& items, std::size_t k,
                                          std::optional<std::size_t> ended_at);
  std::optional<piece> parse_atom(std::size_t depth);
  std::optional<piece> parse_group(std::size_t depth);
  /// Reads flags after "(?"; true for "(?flags)", false for "(?flags:".
  bool parse_flag_group();
  /// CPython 3.11's rules for the letters of one flag group (on before '-', off after it).
  void check_python_flags(const std::string& on, const std::string& off, bool negated, bool global);
  /// A (?P<name>...) name as CPython's re takes it, not used before in the pattern.
  void check_python_group_name(std::string_view name);
  piece apply_quantifier(piece p);
  bool parse_counted(std::uint32_t& min, std::uint32_t& max);
  /// No string of `e` is a proper prefix of another: an atomic group or possessive quantifier
  /// over it keeps its language (false also where the automaton would be too large to tell).
  bool is_prefix_free(expr_id e) const;
  expr_id any_char() const;

  // Escapes and classes (regex_classes.cpp).
  expr_id parse_escape_atom();
  bool parse_class_escape(codepoint_set& out);
  /// Python flavour: refuses `\` + an ASCII letter that CPython's re has no escape for, at pos_.
  void check_python_escape(bool in_class) const;
  char32_t parse_escaped_char();
  codepoint_set parse_class();
  /// Items of a class up to its ']'. `nested`: `[` opens a nested class (in the right operand of
  /// `&&`, `--` or `~~`), else it is a literal; an `operand` also stops before the next such
  /// operator, so that they apply left to right.
  codepoint_set parse_class_items(std::size_t depth, bool nested = false, bool operand = false);
  /// At a class set operator of Rust's syntax (`&&`, `--`, `~~`) after `first` items or not.
  bool at_class_operator(bool first) const;
  codepoint_set parse_property(bool negated);
  std::uint32_t parse_hex(std::size_t min_digits, std::size_t max_digits);
  expr_id class_expr(codepoint_set set) const;
  expr_id char_expr(char32_t cp) const;
  /// The set under (?i): Unicode simple case folding, or ASCII letters only in Python's (?a).
  codepoint_set fold_case(const codepoint_set& set) const;

  char32_t peek_cp() const;
  char32_t next_cp();
  bool eat(char c);
  bool at_end() const { return pos_ >= p_.size(); }
  /// Skips what (?x) ignores, and Python's (?#...) comments.
  void skip_extended();
  [[noreturn]] void fail(const std::string& what) const;

  grammar& g_;
  std::string_view p_;
  std::size_t pos_ = 0;
  regex_options options_;
  flags flags_;
  // Python flavour: nothing but global flag groups and comments read yet; the global a and u
  // flags set; the group names used.
  bool at_pattern_start_ = true;
  bool global_ascii_ = false;
  bool global_unicode_ = false;
  std::vector<std::string> group_names_;
  std::size_t num_atoms_ = 0;  // atoms read, for check_interrupt() now and then
  // A character or class of lone surrogates only (U+D800..U+DFFF, e.g. Python's \ud800) was
  // read: no UTF-8 text holds one, so it matches nothing here.
  mutable bool surrogates_only_ = false;
  /// Expressions of characters and classes, by the expressions a sequence around them holds:
  /// part `index` of `length` of one set's expression (`unit`: which one, its characters in
  /// unit_sets_), for literal_prefix.
  struct char_part {
    std::uint32_t unit;
    std::uint32_t index;
    std::uint32_t length;
  };
  mutable std::unordered_map<expr_id, char_part> char_parts_;
  mutable std::vector<codepoint_set> unit_sets_;
};

}  // namespace di::grammar::detail
