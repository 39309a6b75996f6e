// Structured output in the CPU runner: a request with params.response_format gets a grammar
// matcher when the runner starts it (the compiled grammar comes from the shared cache, keyed
// by the spec text); every output token fed to the forward advances it (so a recomputed
// sequence replays its tokens), and before each sample it fills the allowed-token mask. When
// the text is complete and nothing may follow, the mask allows only the stop tokens, so the
// scheduler's usual EOS handling ends the request (EOS stops a request with a response_format
// even under ignore_eos, which then only keeps EOS out while the grammar may go on; min_tokens
// likewise yields to a grammar that is done). A grammar that does not compile, or a token it
// refuses, fails only that sequence, with the message in its output.
#include "model/runner/cpu_model_runner.hpp"

#include "common/error.hpp"
#include "runtime/logits_processors.hpp"

namespace di {

void cpu_model_runner::enable_structured_output(std::shared_ptr<const grammar::token_vocabulary> v,
                                                std::shared_ptr<grammar::grammar_cache> cache) {
  DI_CHECK(v != nullptr, "runner: structured output needs a token vocabulary");
  DI_CHECK(std::int64_t(v->mask_size()) == num_token_ids_,
           "runner: the token vocabulary masks {} tokens, the runner samples {}", v->mask_size(),
           num_token_ids_);
  grammar_vocab_ = std::move(v);
  grammar_cache_ = cache ? std::move(cache) : std::make_shared<grammar::grammar_cache>();
}

std::function<void(const std::string& spec)> cpu_model_runner::grammar_preparer() const {
  if (!grammar_vocab_) return {};
  return [vocab = grammar_vocab_, cache = grammar_cache_](const std::string& spec) {
    cache->prepare(grammar::parse_inline_response_format(spec), vocab);
  };
}

std::function<bool(const std::string& spec)> cpu_model_runner::grammar_lookup() const {
  if (!grammar_vocab_) return {};
  return [vocab = grammar_vocab_, cache = grammar_cache_](const std::string& spec) {
    try {
      return cache->find(grammar::parse_inline_response_format(spec), vocab) != nullptr;
    } catch (const std::exception&) {
      return false;  // a malformed spec: the preparer reports it
    }
  };
}

void cpu_model_runner::start_grammar(live_sequence& seq) const {
  const std::string& spec = seq.start.params.response_format;
  if (spec.empty()) return;
  if (!grammar_vocab_) {
    seq.grammar_error = "this runner does not support response_format (no token vocabulary)";
    return;
  }
  try {
    auto tg = grammar_cache_->get(grammar::parse_inline_response_format(spec), grammar_vocab_);
    seq.matcher = std::make_unique<grammar::grammar_matcher>(std::move(tg));
    seq.mask.assign(grammar_vocab_->mask_words(), 0);
  } catch (const di::error& e) {
    seq.grammar_error = std::string("response_format: ") + e.what();
  }
}

void cpu_model_runner::feed_grammar(live_sequence& seq, std::int32_t output_token) const {
  if (!seq.matcher || !seq.grammar_error.empty()) return;
  if (!seq.matcher->accept_token(output_token))
    seq.grammar_error = fmt::format("response_format: the grammar refuses output token {}", output_token);
}

std::span<const std::uint32_t> cpu_model_runner::grammar_mask(live_sequence& seq) const {
  if (!seq.matcher) return {};
  seq.matcher->fill_next_token_mask(seq.mask);
  return seq.mask;
}

std::span<const std::int32_t> cpu_model_runner::suppressed_ids(const runtime::scheduled_sequence& s,
                                                               const live_sequence& seq) const {
  // A grammar where nothing may follow allows only the stop tokens: the request ends there
  // (stop), before min_tokens or with ignore_eos too, as nothing else could be generated.
  if (seq.matcher && seq.matcher->is_terminated()) return {};
  if (s.sample_index < seq.start.params.min_tokens) return seq.start.stop_token_ids;
  // ignore_eos under a grammar: the text goes on while the grammar lets it.
  if (seq.matcher && seq.start.params.ignore_eos) return grammar_vocab_->stop_ids();
  return {};
}

}  // namespace di
