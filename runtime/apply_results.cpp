// scheduler::apply: checks a step result against the plan it answers (a malformed result
// changes nothing), then turns each sequence's output into a token event — prompt logprobs,
// the sampled token through detokenizer and stop checker — and ends finished sequences.
#include "runtime/scheduler.hpp"

#include "common/error.hpp"

#include <algorithm>

namespace di::runtime {

std::string scheduler::check_result(const step_result& result) const {
  if (in_flight_.empty())
    return fmt::format("step result {}: no step is awaiting a result", result.step_id);
  const planned_step& step = in_flight_.front();
  if (result.step_id != step.step_id)
    return fmt::format("step result {}: step {} is the next awaiting a result", result.step_id,
                       step.step_id);
  if (result.outputs.size() != step.rows.size())
    return fmt::format("step result {}: {} outputs for {} scheduled sequences", result.step_id,
                       result.outputs.size(), step.rows.size());
  for (std::size_t i = 0; i < step.rows.size(); ++i) {
    const planned_rows& rows = step.rows[i];
    const sequence_output& out = result.outputs[i];
    if (out.seq_id != rows.seq_id)
      return fmt::format("step result {}: output {} is for sequence {}, the plan has {}",
                         result.step_id, i, out.seq_id, rows.seq_id);
    if (!out.error.empty() || out.not_run) continue;
    if (out.token_ids.size() != (rows.is_sampling ? 1u : 0u) ||
        out.prompt_logprobs.size() != rows.prompt_logprob_entries.size() ||
        (!out.logprobs.empty() && out.logprobs.size() != out.token_ids.size()))
      return fmt::format(
          "step result {}: sequence {} has {} tokens, {} logprobs and {} prompt "
          "logprobs for a plan of {} samples and {} prompt-logprob rows",
          result.step_id, out.seq_id, out.token_ids.size(), out.logprobs.size(),
          out.prompt_logprobs.size(), rows.is_sampling ? 1 : 0, rows.prompt_logprob_entries.size());
  }
  return {};
}

apply_outcome scheduler::apply(const step_result& result) {
  apply_outcome outcome;
  outcome.error = check_result(result);
  if (!outcome.is_ok()) return outcome;
  const planned_step step = std::move(in_flight_.front());
  in_flight_.pop_front();
  withdraw_unwritten(step, result);
  for (std::size_t i = 0; i < step.rows.size(); ++i)
    apply_output(step.rows[i], result.outputs[i], outcome.events);
  return outcome;
}

void scheduler::withdraw_unwritten(const planned_step& step, const step_result& result) {
  // Rows that did not run wrote nothing, whether or not their sequence still lives: the
  // prefix cache stops offering the blocks registered for them and the snapshot they were to
  // save, and every other sequence that adopted such a block meanwhile (in this plan or one
  // sent since) reads entries never written: it starts again, as one that restores the
  // snapshot does (apply_output). A sequence that failed here just ends.
  std::vector<std::int32_t> unwritten;  // withdrawn entries that sequences still hold
  std::vector<std::uint64_t> failed;
  for (std::size_t i = 0; i < step.rows.size(); ++i) {
    const sequence_output& out = result.outputs[i];
    if (!out.error.empty()) failed.push_back(out.seq_id);
    if (!out.not_run) continue;
    const planned_rows& rows = step.rows[i];
    for (std::uint64_t hash : rows.added_entries)
      if (std::optional<std::int32_t> id = blocks_.withdraw_entry(hash)) unwritten.push_back(*id);
    if (rows.save_snapshot)
      blocks_.withdraw_snapshot(*rows.save_snapshot, rows.save_snapshot_version);
  }
  if (unwritten.empty()) return;
  const std::vector<sequence*> order = running_;  // recompute edits running_
  for (sequence* seq : order) {
    if (std::find(failed.begin(), failed.end(), seq->id()) != failed.end()) continue;
    const auto& held = seq->blocks().held;
    if (std::any_of(held.begin(), held.end(), [&](const std::optional<std::int32_t>& h) {
          return h && std::find(unwritten.begin(), unwritten.end(), *h) != unwritten.end();
        }))
      recompute(*seq);
  }
}

void scheduler::recompute(sequence& seq) {
  // Its rows did not run because the snapshot it resumed from was never saved: it starts
  // again from scratch, as after a preemption. A new serial discards the outputs of its rows
  // in plans sent already (the executors skip them too), and their samples never come.
  if (is_running(seq.status())) {
    std::erase(running_, &seq);
    seq.set_status(sequence_status::preempted);
    waiting_.push_front(&seq);
  }
  blocks_.free(seq.blocks());
  seq.reset_computation();
  seq.restart(next_serial_++);
  seq.set_preempted_step(next_step_id_);  // the next plan makes the executors drop its state
  recomputed_ids_.push_back(seq.id());
  ++counters_.num_preemptions;
}

void scheduler::apply_output(const planned_rows& rows, const sequence_output& out,
                             std::vector<token_event>& events) {
  sequence* seq = find(rows.seq_id);
  if (seq == nullptr || seq->serial() != rows.serial) {  // ended while the step ran
    ++counters_.num_discarded_outputs;
    return;
  }
  if (out.not_run && out.error.empty()) return recompute(*seq);
  token_event event{.request_id = seq->id(), .status = seq->status(), .num_cached_tokens = seq->num_cached_tokens()};
  if (!out.error.empty()) {
    event.text = seq->flush_text();
    event.error = out.error;
    event.failure = out.error_param.empty() ? failure_kind::internal : failure_kind::invalid;
    event.failure_param = out.error_param;
    ++counters_.num_errors;
    finish(*seq, sequence_status::finished_error, event);
    events.push_back(std::move(event));
    return;
  }
  deliver_prompt_logprobs(*seq, rows, out, event);
  if (rows.is_sampling) accept_sample(*seq, out, event);  // may end and destroy seq
  if (!event.token_ids.empty() || !event.prompt_logprobs.empty() || event.is_finished())
    events.push_back(std::move(event));
}

void scheduler::deliver_prompt_logprobs(sequence& seq, const planned_rows& rows,
                                        const sequence_output& out, token_event& event) const {
  std::int64_t sent = seq.num_prompt_logprobs_sent();
  if (sent == 0 && seq.params().prompt_logprobs) {
    event.prompt_logprobs.emplace_back();  // entry 0: nothing predicted the first token
    sent = 1;
  }
  for (std::size_t i = 0; i < rows.prompt_logprob_entries.size(); ++i) {
    const std::int64_t entry = rows.prompt_logprob_entries[i];
    if (entry < sent) continue;   // delivered before a preemption made it run again
    if (entry != sent) continue;  // never out of order: rows run in position order
    event.prompt_logprobs.emplace_back(out.prompt_logprobs[i]);
    ++sent;
  }
  seq.set_num_prompt_logprobs_sent(sent);
}

void scheduler::accept_sample(sequence& seq, const sequence_output& out, token_event& event) {
  const std::int32_t token = out.token_ids[0];
  stop_update u;
  try {
    u = seq.accept_token(token);
  } catch (const di::error& e) {
    // A token the detokenizer cannot decode fails its request, not the scheduler (an
    // uncaught error here took the scheduler actor and its whole group down).
    event.error =
        fmt::format("the runner sampled token {}, which cannot be decoded: {}", token, e.what());
    event.failure = failure_kind::internal;
    ++counters_.num_errors;
    finish(seq, sequence_status::finished_error, event);
    return;
  }
  event.token_ids.push_back(token);
  if (!out.logprobs.empty()) event.logprobs.push_back(out.logprobs[0]);
  event.text = std::move(u.text);
  if (u.finished()) {
    if (u.stop_token >= 0) event.stop_token = u.stop_token;
    event.stop_string = std::move(u.stop_string);
    ++counters_.num_finished;
    finish(seq,
           u.reason == finish_reason::length ? sequence_status::finished_length
                                             : sequence_status::finished_stop,
           event);
    return;
  }
  event.status = seq.status();
  // The new token may complete a token block whose rows already ran (planned ahead).
  if (is_running(seq.status()))
    blocks_.cache_full_blocks(seq.blocks(), seq.known_tokens(), seq.num_computed());
}

}  // namespace di::runtime
