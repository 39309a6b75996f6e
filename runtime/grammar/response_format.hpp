// What a request asks its output to match (`--response-format`, later the HTTP API's
// response_format), and the one entry point that turns it into a compiled grammar. Compiled
// token grammars are cached by (kind, text, options) so a repeated schema compiles once.
#pragma once

#include "runtime/grammar/compiled_grammar.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/token_grammar.hpp"

#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace di::grammar {

/// tool_calls: the grammar of tool_call_grammar.hpp (its spec's JSON is the text).
enum class format_kind { json_schema, json_object, regex, ebnf, tool_calls };

struct response_format {
  format_kind kind = format_kind::regex;
  std::string text;  ///< the schema, pattern or grammar text itself (empty for json_object)
  /// A format is for generation: one text per number (json_schema_use); `grammar check` sets
  /// validation, which accepts every spelling JSON Schema allows (1.0 as an integer).
  json_schema_options schema{.use = json_schema_use::generation};
  /// Non-empty: the output runs free until this marker and the format applies after it (a
  /// reasoning model's answer after `</think>`; free_text_prefix.hpp).
  std::string after_text;
};

/// The kinds the CLI syntax takes, as `--response-format`'s help and errors list them.
inline constexpr const char* k_cli_response_formats =
    "json_schema:FILE, json_object, regex:PATTERN or ebnf:FILE";

/// Parses the CLI syntax: "json_schema:FILE", "json_object", "regex:PATTERN" or "ebnf:FILE"
/// (files are read); the inline syntax's server-made kinds (tool_calls, after:) are not taken.
/// JSON kinds take modifiers: "json_schema+compact:FILE" (no whitespace), "+pretty" (at most a
/// newline and 20 spaces between tokens), "+any" (the default), "+lenient" (skip keywords that
/// cannot be enforced), "+extra_keys" (keys and items a schema is silent about may be written:
/// json_extra_keys::allow).
response_format parse_response_format(const std::string& spec);

/// The inline syntax that travels in a request (runtime::sampling_params::response_format):
/// "json_schema:<schema JSON>", "json_object", "regex:<pattern>", "ebnf:<grammar text>" or
/// "tool_calls:<spec JSON>" (the server's tool_choice; JSON modifiers apply to its schemas),
/// each optionally after "after:N:MARKER" (a marker of N bytes: free text until it, then the
/// format; response_format::after_text).
response_format parse_inline_response_format(const std::string& spec);
/// `f` in the inline syntax (whitespace, lenient and extra_keys are carried as modifiers; the
/// other options are not: defaults apply).
std::string to_inline_spec(const response_format& f);

/// Front end + compilation (di::error with a clear message on bad input). With after_text, one
/// compile of the free text and the format together; a format that alone matches nothing is
/// still refused (found by analysis, not by compiling it on its own).
std::shared_ptr<const compiled_grammar> compile_response_format(const response_format& f,
                                                                const compile_options& options = {});

/// A compiled format and what its JSON Schema's compile left unenforced.
struct compiled_format {
  std::shared_ptr<const compiled_grammar> grammar;
  std::vector<std::string> warnings;  ///< json_schema_result::warnings (none for other kinds)
};
/// compile_response_format with the warnings of the same compile: `grammar check` ran the
/// schema's front end a second time for them, and with it every number automaton.
compiled_format compile_response_format_with_warnings(const response_format& f,
                                                      const compile_options& options = {});

/// Token grammars keyed by format and vocabulary; thread-safe; compiles outside the lock.
/// Token classes are computed on first use and shared, per vocabulary, between grammars
/// (token_class_cache); prepare() computes them ahead, for up to `classify_s` seconds, and
/// leaves what is left to one background thread of the cache (lowest CPU priority, a slice at
/// a time), which classifies it while the grammar is still cached; first uses classify what
/// it has not reached yet.
/// At most `capacity` grammars stay cached: a new one evicts the least recently used (its
/// live matchers keep it until they end), so a server fed ever new schemas stays bounded.
class grammar_cache {
 public:
  /// The default classification budget of prepare() (scheduler.grammar_classify_ms).
  static constexpr double default_classify_s = 1.0;
  static constexpr std::size_t default_capacity = 256;
  explicit grammar_cache(std::size_t capacity = default_capacity,
                         double classify_s = default_classify_s)
      : capacity_(capacity > 0 ? capacity : 1), classify_s_(classify_s) {}
  ~grammar_cache();
  grammar_cache(const grammar_cache&) = delete;
  grammar_cache& operator=(const grammar_cache&) = delete;
  std::shared_ptr<const token_grammar> get(const response_format& f,
                                           const std::shared_ptr<const token_vocabulary>& v);
  /// A cached grammar with the warnings of the compile that built it (kept beside it, so a hit
  /// has them too).
  struct grammar_with_warnings {
    std::shared_ptr<const token_grammar> grammar;
    std::vector<std::string> warnings;  ///< compiled_format::warnings
  };
  /// get() and the compile's warnings: a caller that shows them (`generate --response-format`)
  /// need not run a JSON Schema's front end, number automata and all, a second time.
  grammar_with_warnings get_with_warnings(const response_format& f,
                                          const std::shared_ptr<const token_vocabulary>& v);
  /// The cached grammar of `f` (now the most recently used), or null; never compiles.
  std::shared_ptr<const token_grammar> find(const response_format& f,
                                            const std::shared_ptr<const token_vocabulary>& v);
  /// get(), then the token classes of the grammar's states for up to classify_s seconds
  /// (token_grammar::classify_states): what a request's grammar gets before the request
  /// starts, off the step loop, so that its first steps do not classify states there.
  std::shared_ptr<const token_grammar> prepare(const response_format& f,
                                               const std::shared_ptr<const token_vocabulary>& v);
  std::size_t size() const;
  /// Grammars queued for (or being given) background classification.
  std::size_t num_warming() const;

 private:
  void warm_later(const std::shared_ptr<const token_grammar>& g);
  void warm_loop();
  struct entry {
    std::shared_ptr<const token_grammar> grammar;
    std::vector<std::string> warnings;
    std::list<std::string>::iterator use;  // its place in recent_
  };
  mutable std::mutex mutex_;
  std::size_t capacity_;
  double classify_s_;
  std::list<std::string> recent_;  // keys, most recently used first
  std::unordered_map<std::string, entry> entries_;
  std::unordered_map<const token_vocabulary*, std::shared_ptr<token_class_cache>> classes_;
  // Background classification: weak, so that an evicted grammar nobody uses is not kept.
  mutable std::mutex warm_mutex_;
  std::condition_variable warm_wake_;
  std::deque<std::weak_ptr<const token_grammar>> warm_queue_;
  std::size_t warm_busy_ = 0;  ///< grammars taken off the queue and being classified
  bool warm_stop_ = false;
  std::thread warm_thread_;  ///< started by the first grammar left to it
};

}  // namespace di::grammar
