// The step-plan protocol's steps on the CPU engine (runtime/step_plan.hpp): create and find
// sequences, append planned blocks, restore or rebuild the slot, patch placeholders, one
// forward for the whole plan, save snapshots, then sample and compute logprobs per sequence.
#include "model/runner/cpu_model_runner.hpp"

#include "common/error.hpp"
#include "runtime/logprobs.hpp"

#include <algorithm>

namespace di {

namespace {

std::span<const float> logits_row(const tensor& logits, std::int64_t row) {
  const std::int64_t vocab = logits.size(1);
  return {logits.data<float>() + row * vocab, std::size_t(vocab)};
}

}  // namespace

void cpu_model_runner::start(const runtime::sequence_start& s) {
  DI_CHECK(!live_.contains(s.seq_id), "runner: sequence {} started twice", s.seq_id);
  live_sequence& seq = live_[s.seq_id];
  seq.start = s;
  seq.state = std::make_unique<sequence_state>(pool_, max_model_len_, block_source::planned);
  start_grammar(seq);
}

cpu_model_runner::live_sequence& cpu_model_runner::find(std::uint64_t seq_id) {
  auto it = live_.find(seq_id);
  DI_CHECK(it != live_.end(), "runner: rows for sequence {}, which is not live", seq_id);
  return it->second;
}

/// A fresh state that starts past position 0 (a prefix hit) adopts the cached prefix and
/// takes its slot from the snapshot, or keeps a fresh slot with the Engram history rebuilt
/// from the look-back tokens (a bounded replay follows). Returns the snapshot to load once
/// this plan has saved it, when the snapshot does not hold the resume position yet.
std::optional<std::int32_t> cpu_model_runner::restore_slot(live_sequence& seq,
                                                           const runtime::scheduled_sequence& s,
                                                           const planned_saves& saves) {
  sequence_state& state = *seq.state;
  const bool is_fresh = state.num_tokens() == 0 && state.num_cached_tokens() == 0;
  if (is_fresh && (s.first_position > 0 || s.num_cached_tokens > 0)) {
    state.adopt_prefix(s.num_cached_tokens, s.first_position);
    seq.has_all_tokens = s.first_position == 0;
    if (std::int64_t(s.prior_tokens.size()) == s.first_position && s.first_position > 0) {
      // What penalties and the grammar need of the tokens this runner never ran.
      const std::vector<std::int64_t> prior(s.prior_tokens.begin(), s.prior_tokens.end());
      count_tokens(seq, prior, 0);
      seq.has_all_tokens = true;
    }
  }
  if (s.restore_snapshot) {
    // A snapshot id is reused once evicted: the snapshot may still hold another prompt's
    // save at the same position while this plan saves the one asked for (the version tells).
    const std::int32_t k = *s.restore_snapshot;
    const std::uint64_t v = s.restore_snapshot_version;
    // A save that did not happen (its sequence did not run) waits too: drop_unsaved_restores
    // finds that no sequence of this plan makes it.
    auto saved = saves.find(k);
    if (!snapshot_holds(k, s.first_position, v) &&
        ((saved != saves.end() && saved->second.position == s.first_position &&
          saved->second.version == v) ||
         (v != 0 && std::size_t(k) < skipped_versions_.size() &&
          skipped_versions_[std::size_t(k)] == v)))
      return k;
    load_snapshot(state, k, s.first_position, v);
  } else if (is_fresh && s.first_position > 0 && state.layout().has_engram) {
    const std::vector<tok::token_id> lookback(s.lookback_tokens.begin(), s.lookback_tokens.end());
    state.engram() = model_->hasher()->history_at(s.first_position, lookback);
  }
  return std::nullopt;
}

void cpu_model_runner::count_tokens(live_sequence& seq, std::span<const std::int64_t> tokens,
                                    std::int64_t first_position) const {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto token = std::int32_t(tokens[i]);
    if (first_position + std::int64_t(i) < seq.start.num_prompt_tokens) {
      seq.counts.add_prompt_token(token);
    } else {
      seq.counts.add_output_token(token);
      feed_grammar(seq, token);
    }
  }
}

bool cpu_model_runner::snapshot_holds(std::int32_t k, std::int64_t position,
                                      std::uint64_t version) const {
  return k >= 0 && std::size_t(k) < snapshots_.size() &&
         snapshot_positions_[std::size_t(k)] == position &&
         snapshot_versions_[std::size_t(k)] == version;
}

void cpu_model_runner::load_snapshot(sequence_state& state, std::int32_t snapshot,
                                     std::int64_t position, std::uint64_t version) {
  const std::size_t k = std::size_t(snapshot);
  DI_CHECK(snapshot_holds(snapshot, position, version),
           "runner: a sequence restores save {} of snapshot {} at position {}, which holds save "
           "{} at {}",
           version, snapshot, position, k < snapshots_.size() ? snapshot_versions_[k] : 0,
           k < snapshots_.size() ? snapshot_positions_[k] : -1);
  state.load_slot(snapshots_[k]);
  ++stats_.num_snapshot_restores;
}

std::optional<cpu_model_runner::batch_entry> cpu_model_runner::prepare(
    std::size_t index, const runtime::scheduled_sequence& s, const planned_saves& saves,
    runtime::sequence_output& out) {
  live_sequence& seq = find(s.seq_id);
  out.not_run = true;  // until it joins the batch
  if (seq.dropped) {   // its state stopped at rows that did not run: none of its rows do
    if (!seq.dropped->empty())
      out.error =
          fmt::format("sequence {} did not run in an earlier step: {}", s.seq_id, *seq.dropped);
    return std::nullopt;
  }
  sequence_state& state = *seq.state;
  DI_CHECK(s.new_blocks.empty() || int(s.new_blocks.size()) == geometry_.num_streams(),
           "runner: sequence {} gets blocks for {} streams, the model has {}", s.seq_id,
           s.new_blocks.size(), geometry_.num_streams());
  for (std::size_t st = 0; st < s.new_blocks.size(); ++st)
    state.append_blocks(int(st), s.new_blocks[st]);
  const std::optional<std::int32_t> deferred = restore_slot(seq, s, saves);
  DI_CHECK(s.num_rows() > 0 && state.num_tokens() == s.first_position,
           "runner: sequence {} has {} rows at position {}, its state is at {}", s.seq_id,
           s.num_rows(), s.first_position, state.num_tokens());
  batch_entry e{.index = index, .seq = &seq, .deferred_restore = deferred};
  e.tokens.assign(s.token_ids.begin(), s.token_ids.end());
  if (s.has_placeholder) {
    // No sample: the sequence failed in its previous step (its error output ends it at the
    // scheduler); this overlapped row, planned before that was known, fails it again here
    // instead of failing the whole executor.
    if (!seq.last_sample) {
      out.error = fmt::format("sequence {} has no sample from its previous step (it failed there)",
                              s.seq_id);
      seq.dropped = out.error;
      return std::nullopt;
    }
    e.tokens[0] = *seq.last_sample;
  }
  const std::int64_t vocab = model_->config().vocab_size;
  for (std::int64_t t : e.tokens)
    if (t < 0 || t >= vocab) {
      out.error = fmt::format("token id {} is outside the vocabulary [0, {})", t, vocab);
      seq.dropped = out.error;
      return std::nullopt;
    }
  for (std::int64_t i = 0; i < s.num_rows(); ++i) e.positions.push_back(s.first_position + i);
  count_tokens(seq, std::span<const std::int64_t>(e.tokens), s.first_position);
  e.logit_rows.assign(s.prompt_logprob_rows.begin(), s.prompt_logprob_rows.end());
  if (s.is_sampling) e.logit_rows.push_back(s.num_rows() - 1);
  out.not_run = false;
  return e;
}

std::vector<forward_output> cpu_model_runner::run_forward(std::vector<batch_entry*>& wave) {
  std::vector<forward_request> requests;
  for (batch_entry* e : wave) {
    forward_request r;
    r.state = e->seq->state.get();
    r.tokens = e->tokens;
    r.positions = e->positions;
    r.logit_rows = e->logit_rows;
    requests.push_back(std::move(r));
  }
  return model_->forward(requests);
}

void cpu_model_runner::save_snapshot(const live_sequence& seq, std::int32_t snapshot,
                                     std::uint64_t version) {
  const std::size_t k = std::size_t(snapshot);
  DI_CHECK(k < snapshots_.size(), "runner: snapshot {} of {}", snapshot, snapshots_.size());
  const std::span<const std::uint8_t> slot = seq.state->slot();
  snapshots_[k].assign(slot.begin(), slot.end());
  snapshot_positions_[k] = seq.state->num_tokens();
  snapshot_versions_[k] = version;
  ++stats_.num_snapshot_saves;
}

void cpu_model_runner::sample(const runtime::step_plan& plan, const std::vector<batch_entry>& batch,
                              const std::vector<forward_output>& logits,
                              runtime::step_result& result) {
  std::vector<runtime::sample_request> requests;
  std::vector<std::size_t> owners;  // batch index of each request
  for (std::size_t b = 0; b < batch.size(); ++b) {
    const batch_entry& e = batch[b];
    const runtime::scheduled_sequence& s = plan.sequences[e.index];
    runtime::sequence_output& out = result.outputs[e.index];
    prompt_logprobs(s, e, logits[b].logits, out);
    if (!s.is_sampling) continue;
    live_sequence& seq = *e.seq;
    seq.last_sample.reset();  // set again below only if this sample succeeds
    if (!out.error.empty()) continue;
    if ((seq.start.params.has_penalties() || seq.matcher) && !seq.has_all_tokens) {
      out.error =
          "sampling penalties and response_format need every earlier token, but this sequence "
          "resumed after a cached prefix the runner never saw";
      continue;
    }
    if (!seq.grammar_error.empty()) {
      out.error = seq.grammar_error;
      out.error_param = "response_format";
      continue;
    }
    const std::span<const std::uint32_t> mask = grammar_mask(seq);
    requests.push_back({.logits = logits_row(logits[b].logits, logits[b].logits.size(0) - 1)
                                      .first(std::size_t(num_token_ids_)),
                        .params = &seq.start.params,
                        .seed = seq.start.seed,
                        .step = s.sample_index,
                        .counts = &seq.counts,
                        .allowed_mask = mask,
                        .suppressed_ids = suppressed_ids(s, seq)});
    owners.push_back(b);
  }
  std::vector<runtime::sample_outcome> outcomes = sampler_.sample_batch(requests);
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const batch_entry& e = batch[owners[i]];
    runtime::sequence_output& out = result.outputs[e.index];
    if (!outcomes[i].is_ok()) {
      out.error = outcomes[i].error;
      continue;
    }
    runtime::sample_result& r = outcomes[i].result;
    out.token_ids.push_back(r.token_id);
    if (r.logprobs) out.logprobs.push_back(std::move(*r.logprobs));
    e.seq->last_sample = r.token_id;
    ++stats_.num_samples;
  }
}

void cpu_model_runner::prompt_logprobs(const runtime::scheduled_sequence& s,
                                       const batch_entry& entry, const tensor& logits,
                                       runtime::sequence_output& out) const {
  if (s.prompt_logprob_rows.empty()) return;
  DI_CHECK(s.prompt_logprob_rows.size() == s.prompt_logprob_tokens.size(),
           "runner: sequence {} asks {} prompt-logprob rows with {} tokens", s.seq_id,
           s.prompt_logprob_rows.size(), s.prompt_logprob_tokens.size());
  const int num_top = entry.seq->start.params.prompt_logprobs.value_or(0);
  try {
    for (std::size_t i = 0; i < s.prompt_logprob_rows.size(); ++i)
      out.prompt_logprobs.push_back(runtime::compute_logprobs(
          logits_row(logits, std::int64_t(i)).first(std::size_t(num_token_ids_)),
          s.prompt_logprob_tokens[i], num_top));
  } catch (const di::error& err) {
    out.prompt_logprobs.clear();
    out.error = err.what();
  }
}

}  // namespace di
