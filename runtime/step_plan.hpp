// What the scheduler sends its executors each step (step_plan) and what they send back
// (step_result). Plain values only (ids, vectors, optionals, strings; no pointers), so the
// scheduler actor can serialize one plan and send it to every executor of its group in
// lockstep; block tables travel as per-step additions, never whole.
//
// How an executor runs a plan (every executor of a group, plans strictly in step order):
//   1. forget the sequences in `finished` and `preempted` (slot, block tables, last sample);
//   2. create each `started` sequence with a fresh slot and empty block tables;
//   3. for each scheduled sequence: append `new_blocks` to its tables, restore its slot from
//      `restore_snapshot` if set (the save recorded with `restore_snapshot_version`: when the
//      snapshot holds an earlier save and this plan saves that version, after that save;
//      when that save did not happen, in this plan or an earlier one, because its sequence
//      did not run, the sequence does not run either and says so, see 5; any other mismatch
//      is a stale snapshot and throws), else (a started sequence with
//      first_position > 0) rebuild its Engram history from `lookback_tokens` (and count
//      `prior_tokens` for penalties and feed their output part to the grammar); if
//      `has_placeholder`, put the token this executor sampled for the sequence in its
//      previous step into token_ids[0];
//   4. run every sequence's rows in one forward; rows at positions below num_cached_tokens
//      are replay rows: they rebuild the slot but never write stream entries (those come from
//      the shared cached blocks; see block_manager.hpp for why this is exact);
//   5. copy the slot to `save_snapshot` if set, with `save_snapshot_version` (after the
//      forward, so a snapshot restored and saved in one step is read before it is overwritten);
//      a sequence whose rows do not run (it fails before the forward, or restores a snapshot
//      whose save did not happen) saves nothing and says so (sequence_output::not_run), and
//      so do its rows in plans sent before the scheduler learnt it;
//   6. sample the last row of each `is_sampling` sequence (sampler.hpp: step = sample_index,
//      stop_token_ids suppressed while sample_index < params.min_tokens), compute the asked
//      logprobs, remember the sampled token per sequence, and reply with a step_result.
//
// Overlapped scheduling. The scheduler may plan step N+1 before step N's result arrives.
// The only thing N+1 needs from N is the token each decoding sequence sampled at N, which is
// that sequence's next input; the plan marks it `has_placeholder` and the executor patches it
// from its own record (3 above). Executors of one group agree on the token because sampling
// is a pure function of (logits, seed, step). If the result of N arrives before N+1 is sent,
// scheduler::patch_placeholders fills the tokens in itself and clears the flags. Either way
// the token sequences are the ones sequential scheduling gives: a sequence that finishes at N
// (EOS, stop string, max_tokens) has one wasted row at N+1 whose output the scheduler drops,
// and its blocks are freed when N's result is applied, never while a planned step uses them
// (plans run in order, so a block freed at N and reused by N+1 is written after N is done).
#pragma once

#include "runtime/logprobs.hpp"
#include "runtime/sampling_params.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace di::runtime {

/// A sequence the executors have not seen (admitted, or readmitted after preemption).
struct sequence_start {
  std::uint64_t seq_id = 0;
  sampling_params params;
  std::uint64_t seed = 0;                    ///< the sampling seed (params.seed or drawn)
  std::int64_t num_prompt_tokens = 0;        ///< later positions are output tokens (penalties)
  std::vector<std::int32_t>
      stop_token_ids;  ///< EOS (unless ignore_eos without response_format) + params.stop_token_ids
};

/// One sequence's rows in a step: a prefill chunk, one decode token (later: k draft tokens).
struct scheduled_sequence {
  std::uint64_t seq_id = 0;
  std::int64_t first_position = 0;      ///< position of token_ids[0]; the rest follow
  std::vector<std::int32_t> token_ids;  ///< [num rows] the tokens to run
  bool has_placeholder = false;         ///< token_ids[0] (0 here) is this executor's last sample
  std::int64_t num_cached_tokens = 0;   ///< P: positions below it are replay rows
  std::vector<std::int32_t> lookback_tokens;          ///< Engram look-back before first_position
  /// A started sequence resuming past position 0 whose sampling needs every earlier token
  /// (penalties count them, a response_format's matcher reads the output): tokens
  /// [0, first_position), which the runner counts and feeds without running them.
  std::vector<std::int32_t> prior_tokens;
  std::optional<std::int32_t> restore_snapshot;       ///< slot := snapshot before the rows run
  std::optional<std::int32_t> save_snapshot;          ///< snapshot := slot after the rows ran
  /// Which save of restore_snapshot the slot needs / the identity save_snapshot records
  /// (block_manager::snapshot_version; snapshot ids are reused, positions can coincide).
  std::uint64_t restore_snapshot_version = 0;
  std::uint64_t save_snapshot_version = 0;
  std::vector<std::vector<std::int32_t>> new_blocks;  ///< [stream] ids appended to its tables
  bool is_sampling = false;                           ///< sample the next token from the last row
  std::int64_t sample_index = 0;  ///< its index in the output (RNG step, min_tokens)
  std::vector<std::int32_t> prompt_logprob_rows;    ///< rows whose logprobs a client asked
  std::vector<std::int32_t> prompt_logprob_tokens;  ///< the prompt token each such row predicts

  std::int64_t num_rows() const { return std::int64_t(token_ids.size()); }
};

struct step_plan {
  std::uint64_t step_id = 0;             ///< 0, 1, 2, ... per scheduler
  std::vector<std::uint64_t> finished;   ///< ended (stop, length, abort, error): drop state
  std::vector<std::uint64_t> preempted;  ///< taken back for recompute: drop state
  std::vector<sequence_start> started;
  std::vector<scheduled_sequence> sequences;

  std::int64_t num_rows() const;
  bool is_empty() const;
};

/// One scheduled sequence's outcome.
struct sequence_output {
  std::uint64_t seq_id = 0;
  std::vector<std::int32_t> token_ids;             ///< the sampled token (is_sampling), or none
  std::vector<position_logprobs> logprobs;         ///< per sampled token, when params.logprobs
  std::vector<position_logprobs> prompt_logprobs;  ///< one per prompt_logprob_rows
  std::string error;  ///< this sequence failed (e.g. non-finite logits); others are unaffected
  /// The request field its failure blames ("response_format" when the grammar failed), or ""
  /// (then the failure is the engine's own: failure_kind::internal).
  std::string error_param;
  /// Its rows did not run, so nothing they were to write was written: neither the stream
  /// entries of the token blocks the scheduler registered for them nor `save_snapshot`. With
  /// an error the sequence failed before the forward; without one it was to restore a
  /// snapshot whose save did not happen (the saving sequence did not run), and the scheduler
  /// computes it again from scratch.
  bool not_run = false;
};

struct step_result {
  std::uint64_t step_id = 0;
  std::vector<sequence_output> outputs;  ///< one per scheduled sequence, in plan order
};

}  // namespace di::runtime
