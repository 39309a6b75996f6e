// The continuous-batching scheduler of one data-parallel group: plain, single-threaded logic
// that the scheduler actor drives. The whole pipeline, per step:
//
//   plan = schedule();        // 1. decodes of running sequences first (one row each),
//                             // 2. running prefills continue (chunked),
//                             // 3. queued requests are admitted (prefix reuse, first chunk),
//                             //    all within one token budget; when blocks run out the
//                             //    youngest running sequence is preempted (recompute later)
//   ...executors run plan...  // step_plan.hpp: the executor's side of the contract
//   events = apply(result);   // sampled tokens -> detokenizer -> stop checker -> token events;
//                             // finished sequences free their blocks (cached blocks stay
//                             // cached for prefix reuse)
//
// Token blocks enter the prefix cache, and snapshots are reserved, when their rows are
// planned, so a sequence admitted in the same plan or the next can reuse them. Rows that the
// executors report as not run (sequence_output::not_run) wrote nothing: apply() withdraws
// their blocks and snapshot from the cache, and a sequence that adopted those blocks, or
// restored that snapshot, starts again from scratch (as after a preemption, counted as one).
//
// Overlapped scheduling: schedule() may run again before apply() of the previous plan; the
// next input of a decoding sequence is then a placeholder (protocol in step_plan.hpp).
// Results must be applied in plan order. Only plans with sequences expect a result; a plan
// with only `finished` / `preempted` ids must still reach the executors.
//
// Admission: add_request refuses at once, changing nothing, beyond max_num_queued requests
// waiting for a batch slot (waiting ones that the batch's free slots will take at the next step
// do not count) or max_queued_tokens waiting tokens, or for a request beyond max_model_len (the
// pools must hold one max_model_len request, checked at construction, so an accepted request
// always fits alone); max_num_running bounds the batch (the rest wait).
#pragma once

#include "runtime/block_manager.hpp"
#include "runtime/sequence.hpp"
#include "runtime/step_plan.hpp"
#include "runtime/text_decoder.hpp"

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace di::runtime {

struct scheduler_config {
  std::int64_t max_num_batched_tokens = 8192;  ///< token budget of one step (all rows)
  std::int64_t max_prefill_chunk = 0;          ///< rows of one prefill chunk; 0 = the budget
  int max_num_running = 256;                   ///< sequences in the running batch
  int max_num_queued = 4096;  ///< requests waiting beyond the free batch slots (refused beyond)
  std::int64_t max_queued_tokens = std::int64_t(1) << 24;  ///< tokens waiting (likewise)
  std::int64_t max_model_len = 0;           ///< prompt + output tokens of one request
  std::vector<std::int32_t> eos_token_ids;  ///< stop tokens of every request unless ignore_eos
  block_manager_config blocks;

  /// Throws di::error naming the first invalid setting.
  void validate() const;
};

enum class admission_status : std::uint8_t {
  accepted,
  invalid_request,     ///< empty prompt, bad stop parameters
  duplicate_id,        ///< a live request has this id
  too_long,            ///< the prompt leaves no room for output within max_model_len
  queue_full,          ///< max_num_queued requests are waiting for a batch slot
  queued_tokens_full,  ///< the waiting requests hold max_queued_tokens tokens
  unavailable,         ///< the group cannot serve now (set by the scheduler's actor)
};
std::string_view to_string(admission_status status);

/// add_request's answer: an error value, never an exception.
struct admission_result {
  admission_status status = admission_status::accepted;
  std::string message;  ///< why it was refused, for the client
  std::string param;    ///< the request field to blame (invalid requests), or ""
  bool is_accepted() const { return status == admission_status::accepted; }
};
/// The failure kind of an admission status: limits are `overloaded`, wrong requests `invalid`.
failure_kind failure_of(admission_status status);

/// Monotonic counters for the status line and a metrics endpoint.
struct scheduler_counters {
  std::int64_t num_steps = 0;           ///< plans with at least one row
  std::int64_t num_prefill_tokens = 0;  ///< prefill rows planned (replay rows included)
  std::int64_t num_replay_tokens = 0;   ///< rows that rebuilt a slot over cached blocks
  std::int64_t num_decode_tokens = 0;   ///< decode rows planned
  std::int64_t num_prefix_queries = 0;  ///< admissions that looked up the prefix cache
  std::int64_t num_prefix_hits = 0;     ///< ... that reused cached blocks
  std::int64_t num_prefix_misses = 0;
  std::int64_t num_prefix_query_tokens = 0;    ///< tokens those admissions looked up
  std::int64_t num_prefix_hit_tokens = 0;      ///< tokens whose stream blocks were reused
  std::int64_t num_prefix_skipped_tokens = 0;  ///< prefill rows a hit made unnecessary
  std::int64_t num_snapshot_restores = 0;
  std::int64_t num_snapshot_saves = 0;
  std::int64_t num_preemptions = 0;
  std::int64_t num_aborts = 0;
  std::int64_t num_errors = 0;
  std::int64_t num_finished = 0;           ///< ended by stop or length
  std::int64_t num_refused = 0;            ///< add_request refusals
  std::int64_t num_discarded_outputs = 0;  ///< results for sequences that had ended
};

/// Counters plus the current gauges.
struct scheduler_stats {
  scheduler_counters counters;
  int num_running = 0;
  int num_waiting = 0;
  std::int64_t num_queued_tokens = 0;
  std::int64_t num_blocks = 0;  ///< all streams
  std::int64_t num_free_blocks = 0;
  std::int64_t num_cached_blocks = 0;  ///< cached and unreferenced (evictable)
  std::int64_t num_used_blocks = 0;    ///< held by live sequences
  int num_snapshots_used = 0;
  std::int64_t num_evictions = 0;
};

/// apply()'s answer: events, or why the result was rejected (then nothing changed).
struct apply_outcome {
  std::vector<token_event> events;
  std::string error;
  bool is_ok() const { return error.empty(); }
};

class scheduler {
 public:
  /// Throws di::error for an invalid config. Without a decoder factory events carry no text.
  explicit scheduler(scheduler_config config, text_decoder_factory make_decoder = {});

  /// Queues a request, or refuses it (see the file comment). Never throws for bad input.
  admission_result add_request(request r);
  /// Ends a live request in any phase, freeing everything it holds; the final event (its
  /// held-back text, status finished_abort), or none when no live request has this id.
  std::optional<token_event> abort(std::uint64_t id);
  /// Plans the next step.
  step_plan schedule();
  /// Applies the result of the oldest unanswered plan.
  apply_outcome apply(const step_result& result);
  /// Fills placeholders whose tokens are known by now (a plan not yet sent).
  void patch_placeholders(step_plan& plan) const;
  /// Ends every live request with `message` and `kind` (an executor died: unavailable): all
  /// blocks freed, the prefix
  /// cache cleared (in-flight steps may not have written it), nothing left in flight.
  std::vector<token_event> fail_all(std::string_view message, failure_kind kind);

  /// Live requests, or results still expected.
  bool has_unfinished() const { return !sequences_.empty() || !in_flight_.empty(); }
  std::optional<sequence_status> status_of(std::uint64_t id) const;
  /// Tokens of the prompt `tokens` that an admission here would take from the prefix cache,
  /// in the chain of `root` (prefix_root of the request's cache_salt): the router's affinity.
  /// A prompt's last token always runs, so a prompt cached whole counts one token block less.
  std::int64_t longest_cached_prefix(std::span<const std::int32_t> tokens,
                                     std::uint64_t root = unsalted_prefix_root) const;
  int num_running() const { return int(running_.size()); }
  int num_waiting() const { return int(waiting_.size()); }
  std::size_t num_in_flight() const { return in_flight_.size(); }
  const scheduler_counters& counters() const { return counters_; }
  scheduler_stats stats() const;
  const block_manager& blocks() const { return blocks_; }
  const scheduler_config& config() const { return config_; }

 private:
  /// One plan being built.
  struct step_context {
    step_plan plan;
    std::int64_t budget = 0;                        // rows left
    std::vector<std::vector<std::uint64_t>> added;  // [sequence] cache entries its rows add
  };
  /// What apply() needs to check and interpret a planned sequence's output.
  struct planned_rows {
    std::uint64_t seq_id = 0;
    std::uint64_t serial = 0;
    bool is_sampling = false;
    std::vector<std::int64_t> prompt_logprob_entries;  // entry index of each asked row
    // What the rows were to write, withdrawn if they do not run (sequence_output::not_run).
    std::vector<std::uint64_t> added_entries;  // hashes of the cache entries registered for them
    std::optional<std::int32_t> save_snapshot;
    std::uint64_t save_snapshot_version = 0;
  };
  struct planned_step {
    std::uint64_t step_id = 0;
    std::vector<planned_rows> rows;
  };

  // schedule.cpp: the three passes and their helpers.
  void schedule_decodes(step_context& ctx);
  void schedule_prefills(step_context& ctx);
  void admit_waiting(step_context& ctx);
  bool admit_one(step_context& ctx, sequence& seq);
  std::int64_t chunk_size(const sequence& seq, std::int64_t first, std::int64_t budget) const;
  bool make_room(step_context& ctx, sequence& seq, std::int64_t num_tokens, bool may_preempt_self);
  sequence* youngest_unscheduled(const step_context& ctx, const sequence& self) const;
  void preempt(step_context& ctx, sequence& seq);
  scheduled_sequence& add_rows(step_context& ctx, sequence& seq, std::int64_t count);
  void add_prompt_logprob_rows(const sequence& seq, scheduled_sequence& out) const;
  void record_step(const step_context& ctx);

  // apply_results.cpp
  std::string check_result(const step_result& result) const;
  void apply_output(const planned_rows& rows, const sequence_output& out,
                    std::vector<token_event>& events);
  void deliver_prompt_logprobs(sequence& seq, const planned_rows& rows, const sequence_output& out,
                               token_event& event) const;
  void accept_sample(sequence& seq, const sequence_output& out, token_event& event);
  void withdraw_unwritten(const planned_step& step, const step_result& result);
  void recompute(sequence& seq);
  void finish(sequence& seq, sequence_status status, token_event& event);

  sequence* find(std::uint64_t id) const;
  std::int64_t num_queued_tokens() const;
  sequence_limits limits_for(const request& r) const;
  std::optional<admission_result> invalid_reason(const request& r) const;
  std::optional<admission_result> limit_reason(std::int64_t num_prompt_tokens) const;

  scheduler_config config_;
  text_decoder_factory make_decoder_;
  block_manager blocks_;
  std::unordered_map<std::uint64_t, std::unique_ptr<sequence>> sequences_;  // live requests
  std::deque<sequence*> waiting_;            // queued and preempted, in admission order
  std::vector<sequence*> running_;           // prefilling and decoding, oldest admission first
  std::vector<std::uint64_t> finished_ids_;  // ended since the last plan: executors drop them
  std::vector<std::uint64_t> recomputed_ids_;  // sent back to wait by apply: executors drop them
  std::deque<planned_step> in_flight_;       // plans with rows whose results are pending
  std::uint64_t next_step_id_ = 0;
  std::uint64_t next_serial_ = 0;
  scheduler_counters counters_;
};

}  // namespace di::runtime
