// Matches one generation against a token grammar: accepts tokens, fills the allowed-token
// bitmask for the next step (runtime/logits_processors.hpp layout: bit id%32 of word id/32),
// rolls back k tokens (speculative decoding), and reports forced continuations (jump-forward).
// Per step, the mask is the union of the precomputed classes of the current states plus a
// parser check of only the uncertain tokens of rule instances begun before the step. One matcher
// per request; not thread-safe.
#pragma once

#include "runtime/grammar/earley_parser.hpp"
#include "runtime/grammar/token_grammar.hpp"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace di::grammar {

class grammar_matcher {
 public:
  explicit grammar_matcher(std::shared_ptr<const token_grammar> g);

  /// Advances by one token; returns false (state unchanged) if the grammar forbids it. A stop
  /// token is accepted only when the text so far is complete, and ends the match.
  bool accept_token(token_id id);
  /// Advances by raw bytes (all or nothing), e.g. a forced continuation.
  bool accept_bytes(std::string_view bytes);
  /// Writes the allowed tokens of the next step into `mask` (vocabulary().mask_words() words).
  void fill_next_token_mask(std::span<std::uint32_t> mask);
  /// Bytes every continuation must start with (jump-forward decoding); empty if none.
  std::string forced_bytes(std::size_t max_bytes = 4096);
  /// Undoes the last `num_tokens` accepted tokens (or accept_bytes calls).
  void rollback(std::size_t num_tokens);
  void reset();

  /// The text so far is a complete sentence: a stop token is allowed.
  bool is_accepting() const { return !stopped_ && parser_.is_accepting(); }
  /// Nothing more can follow: a stop token was accepted, or the text is complete and no byte
  /// may be added. A generation should end here.
  bool is_terminated() const;
  std::size_t num_tokens() const { return lengths_.size(); }
  const token_grammar& grammar() const { return *g_; }

 private:
  void check_uncertain(std::span<std::uint32_t> mask);

  std::shared_ptr<const token_grammar> g_;
  earley_parser parser_;
  token_classifier classifier_;
  std::vector<std::uint32_t> lengths_;  // bytes of each accepted step; k_stop_step for a stop token
  bool stopped_ = false;
  std::vector<std::uint32_t> scan_states_;  // scratch: state << 1 | its instance began earlier
  std::vector<node_id> uncertain_;          // scratch
  std::vector<node_id> path_;               // scratch
};

}  // namespace di::grammar
