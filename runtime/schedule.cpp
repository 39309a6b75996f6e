// scheduler::schedule: one step's plan in three passes over one token budget — running
// decodes, running prefill chunks, then admission of waiting requests — with preemption of
// the youngest running sequence when blocks run out.
#include "runtime/scheduler.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <utility>

namespace di::runtime {

step_plan scheduler::schedule() {
  step_context ctx;
  ctx.plan.step_id = next_step_id_++;
  ctx.plan.finished = std::exchange(finished_ids_, {});
  ctx.plan.preempted = std::exchange(recomputed_ids_, {});
  ctx.budget = config_.max_num_batched_tokens;
  blocks_.begin_step();
  schedule_decodes(ctx);
  schedule_prefills(ctx);
  admit_waiting(ctx);
  record_step(ctx);
  return std::move(ctx.plan);
}

// ---- the passes ----------------------------------------------------------------------------

void scheduler::schedule_decodes(step_context& ctx) {
  const std::vector<sequence*> order = running_;  // preemption edits running_
  for (sequence* seq : order) {
    if (ctx.budget <= 0) break;
    if (seq->status() != sequence_status::decoding || !seq->can_sample_more()) continue;
    const std::int64_t next = seq->num_computed() + 1;
    if (!make_room(ctx, *seq, next, /*may_preempt_self=*/true)) continue;
    blocks_.append(seq->blocks(), next);
    add_rows(ctx, *seq, 1);
  }
}

void scheduler::schedule_prefills(step_context& ctx) {
  const std::vector<sequence*> order = running_;
  for (sequence* seq : order) {
    if (ctx.budget <= 0) break;
    if (seq->status() != sequence_status::prefilling) continue;
    const std::int64_t first = seq->num_computed();
    std::int64_t n = chunk_size(*seq, first, ctx.budget);
    if (!make_room(ctx, *seq, first + n, /*may_preempt_self=*/false))
      n = blocks_.max_fitting_tokens(seq->blocks(), first, first + n) - first;  // a shorter chunk
    if (n <= 0) continue;
    blocks_.append(seq->blocks(), first + n);
    add_rows(ctx, *seq, n);
  }
}

void scheduler::admit_waiting(step_context& ctx) {
  while (!waiting_.empty() && ctx.budget > 0 && num_running() < config_.max_num_running) {
    sequence& seq = *waiting_.front();
    // First come, first served: a head that cannot start blocks the queue. A sequence waits
    // for samples still in flight (it recomputes with their ids) and is not readmitted in the
    // step that preempted it.
    if (seq.num_pending_samples() > 0 || seq.preempted_step() == ctx.plan.step_id) break;
    if (!admit_one(ctx, seq)) break;
  }
}

bool scheduler::admit_one(step_context& ctx, sequence& seq) {
  const bool may_reuse = !seq.needs_prompt_logprobs();   // those rows must be computed
  const std::int64_t max_cached = seq.num_tokens() - 1;  // the last row must run for its logits
  const std::uint64_t root = prefix_root(seq.params().cache_salt);  // its cache_salt's chain
  prefix_match match = may_reuse ? blocks_.match_prefix(seq.known_tokens(), max_cached, root)
                                 : prefix_match{.root = root};
  const std::int64_t first = match.resume_position;
  const std::int64_t n = chunk_size(seq, first, ctx.budget);
  if (!blocks_.can_allocate(match, first + n)) return false;
  blocks_.allocate(seq.blocks(), match, first + n);
  waiting_.pop_front();
  seq.set_status(sequence_status::prefilling);
  running_.push_back(&seq);
  seq.set_num_computed(first);
  seq.set_num_cached_tokens(match.num_cached_tokens);
  seq.set_num_inexact_tokens(first > 0 && !match.snapshot ? match.num_cached_tokens : 0);
  ctx.plan.started.push_back({.seq_id = seq.id(),
                              .params = seq.params(),
                              .seed = seq.seed(),
                              .num_prompt_tokens = seq.num_prompt_tokens(),
                              .stop_token_ids = seq.limits().stop_token_ids});
  if (blocks_.config().enable_prefix_caching && may_reuse) {
    ++counters_.num_prefix_queries;
    counters_.num_prefix_query_tokens += seq.num_tokens();
    ++(match.num_cached_tokens > 0 ? counters_.num_prefix_hits : counters_.num_prefix_misses);
    counters_.num_prefix_hit_tokens += match.num_cached_tokens;
    counters_.num_prefix_skipped_tokens += first;
  }
  scheduled_sequence& out = add_rows(ctx, seq, n);
  out.restore_snapshot = match.snapshot;
  out.restore_snapshot_version = match.snapshot_version;
  if (match.snapshot) ++counters_.num_snapshot_restores;
  if (first > 0 && !match.snapshot) {
    const std::int64_t from = std::max<std::int64_t>(0, first - blocks_.geometry().engram_lookback);
    auto known = seq.known_tokens();
    out.lookback_tokens.assign(known.begin() + from, known.begin() + first);
  }
  if (first > 0 && (seq.params().has_penalties() || !seq.params().response_format.empty())) {
    auto known = seq.known_tokens();
    out.prior_tokens.assign(known.begin(), known.begin() + first);
  }
  return true;
}

// ---- helpers -------------------------------------------------------------------------------

std::int64_t scheduler::chunk_size(const sequence& seq, std::int64_t first,
                                   std::int64_t budget) const {
  std::int64_t n = std::min(seq.num_tokens() - first, budget);
  if (config_.max_prefill_chunk > 0) n = std::min(n, config_.max_prefill_chunk);
  // End the chunk at a snapshot boundary so the slot can be saved there after the step.
  if (std::optional<std::int64_t> b = blocks_.next_snapshot_boundary(first); b && *b < first + n)
    n = *b - first;
  return n;
}

sequence* scheduler::youngest_unscheduled(const step_context& ctx, const sequence& self) const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it)
    if (*it == &self || (*it)->scheduled_step() != ctx.plan.step_id) return *it;
  return nullptr;
}

bool scheduler::make_room(step_context& ctx, sequence& seq, std::int64_t num_tokens,
                          bool may_preempt_self) {
  while (!blocks_.can_append(seq.blocks(), num_tokens)) {
    sequence* victim = youngest_unscheduled(ctx, seq);
    if (victim == &seq && !may_preempt_self) return false;
    preempt(ctx, *victim);
    if (victim == &seq) return false;
  }
  return true;
}

void scheduler::preempt(step_context& ctx, sequence& seq) {
  blocks_.free(seq.blocks());
  seq.reset_computation();
  seq.set_status(sequence_status::preempted);
  seq.set_preempted_step(ctx.plan.step_id);
  std::erase(running_, &seq);
  waiting_.push_front(&seq);
  ctx.plan.preempted.push_back(seq.id());
  ++counters_.num_preemptions;
}

scheduled_sequence& scheduler::add_rows(step_context& ctx, sequence& seq, std::int64_t count) {
  const std::int64_t first = seq.num_computed(), end = first + count;
  auto known = seq.known_tokens();
  // Rows are known tokens, except a decode input still in flight (then the only row).
  DI_CHECK(
      count > 0 && end <= seq.num_tokens() && (end <= std::int64_t(known.size()) || count == 1),
      "scheduler: rows [{}, {}) of sequence {} with {} known tokens", first, end, seq.id(),
      seq.num_known_tokens());
  scheduled_sequence out{
      .seq_id = seq.id(), .first_position = first, .num_cached_tokens = seq.num_cached_tokens()};
  for (std::int64_t p = first; p < end; ++p)
    out.token_ids.push_back(p < std::int64_t(known.size()) ? known[std::size_t(p)] : 0);
  out.has_placeholder = end > std::int64_t(known.size());  // a decode input still in flight
  for (int s = 0; s < int(seq.blocks().tables.size()); ++s)
    out.new_blocks.push_back(seq.take_new_blocks(s));
  add_prompt_logprob_rows(seq, out);

  const bool is_prefill = seq.status() == sequence_status::prefilling;
  (is_prefill ? counters_.num_prefill_tokens : counters_.num_decode_tokens) += count;
  counters_.num_replay_tokens +=
      std::max<std::int64_t>(0, std::min(end, out.num_cached_tokens) - first);
  seq.set_num_computed(end);
  seq.set_scheduled_step(ctx.plan.step_id);
  ctx.budget -= count;
  if (end == seq.num_tokens()) {  // the last token runs: sample the next one
    out.is_sampling = true;
    out.sample_index = seq.num_output_tokens() + seq.num_pending_samples();
    seq.add_pending_sample();
    if (is_prefill) seq.set_status(sequence_status::decoding);
  }
  ctx.added.push_back(blocks_.cache_full_blocks(seq.blocks(), seq.known_tokens(), end));
  if (is_prefill && end >= seq.num_inexact_tokens() &&
      blocks_.next_snapshot_boundary(end - 1) == end) {
    out.save_snapshot = blocks_.reserve_snapshot(seq.blocks(), end);
    if (out.save_snapshot) {
      out.save_snapshot_version = blocks_.snapshot_version(*out.save_snapshot);
      ++counters_.num_snapshot_saves;
    }
  }
  ctx.plan.sequences.push_back(std::move(out));
  return ctx.plan.sequences.back();
}

void scheduler::add_prompt_logprob_rows(const sequence& seq, scheduled_sequence& out) const {
  if (!seq.needs_prompt_logprobs()) return;
  // Row p predicts prompt token p + 1 (entry p + 1); entries already delivered are skipped.
  const std::int64_t first = out.first_position;
  for (std::int64_t i = 0; i < out.num_rows(); ++i) {
    const std::int64_t entry = first + i + 1;
    if (entry < std::max<std::int64_t>(1, seq.num_prompt_logprobs_sent())) continue;
    if (entry >= seq.num_prompt_tokens()) break;
    out.prompt_logprob_rows.push_back(std::int32_t(i));
    out.prompt_logprob_tokens.push_back(seq.known_tokens()[std::size_t(entry)]);
  }
}

void scheduler::record_step(const step_context& ctx) {
  if (ctx.plan.sequences.empty()) return;  // nothing to answer
  planned_step step{.step_id = ctx.plan.step_id};
  for (std::size_t i = 0; i < ctx.plan.sequences.size(); ++i) {
    const scheduled_sequence& s = ctx.plan.sequences[i];
    const sequence& seq = *find(s.seq_id);
    planned_rows rows{.seq_id = s.seq_id,
                      .serial = seq.serial(),
                      .is_sampling = s.is_sampling,
                      .added_entries = ctx.added[i],
                      .save_snapshot = s.save_snapshot,
                      .save_snapshot_version = s.save_snapshot_version};
    for (std::int32_t r : s.prompt_logprob_rows)
      rows.prompt_logprob_entries.push_back(s.first_position + r + 1);
    step.rows.push_back(std::move(rows));
  }
  in_flight_.push_back(std::move(step));
  ++counters_.num_steps;
}

}  // namespace di::runtime
