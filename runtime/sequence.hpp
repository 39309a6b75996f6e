// One request inside the scheduler: its tokens (prompt, sampled outputs, samples still in
// flight), how far its cache is computed, the blocks it holds, and the per-request output
// pipeline (streaming detokenizer -> stop checker). The scheduler owns these records; what
// travels to executors is in step_plan.hpp, what travels to clients is token_event.
#pragma once

#include "runtime/block_manager.hpp"
#include "runtime/failure.hpp"
#include "runtime/logprobs.hpp"
#include "runtime/sampling_params.hpp"
#include "runtime/sequence_status.hpp"
#include "runtime/stop_checker.hpp"
#include "runtime/text_decoder.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace di::runtime {

/// A request as the scheduler receives it: tokenized, with parameters the router validated.
struct request {
  std::uint64_t id = 0;  ///< unique among the scheduler's live requests
  std::vector<std::int32_t> prompt_ids;
  sampling_params params;
  std::uint64_t seed = 0;  ///< params.seed, or one the router drew
};

/// What a client learns about one request from one step (or from abort / failure).
struct token_event {
  std::uint64_t request_id = 0;
  std::vector<std::int32_t> token_ids;      ///< newly sampled tokens
  std::string text;                         ///< text that became final (may lag the tokens)
  std::vector<position_logprobs> logprobs;  ///< one per token, when params.logprobs
  /// The next prompt_logprobs entries (vLLM layout: entry 0, the first token's, is null).
  std::vector<std::optional<position_logprobs>> prompt_logprobs;
  sequence_status status = sequence_status::queued;  ///< after this event
  std::optional<std::int32_t> stop_token;            ///< the stop token id that ended it
  std::string stop_string;                           ///< the stop string that ended it
  std::string error;                                 ///< why it failed (finished_error)
  failure_kind failure = failure_kind::none;         ///< what kind of failure (finished_error)
  std::string failure_param;                         ///< the request field it blames, or ""
  /// Prompt tokens the current admission took from the prefix cache (usage.cached_tokens).
  std::int64_t num_cached_tokens = 0;

  bool is_finished() const { return runtime::is_finished(status); }
};

/// Per-request limits the scheduler derives at admission.
struct sequence_limits {
  std::int64_t max_new_tokens = 1;           ///< params.max_tokens capped by the context
  std::vector<std::int32_t>
      stop_token_ids;  ///< EOS unless ignore_eos (always with response_format), then params.
};

class sequence {
 public:
  /// Throws di::error for stop parameters the stop checker rejects.
  sequence(request r, sequence_limits limits, std::unique_ptr<text_decoder> decoder,
           std::uint64_t serial);

  std::uint64_t id() const { return request_.id; }
  /// Distinguishes this record from an earlier one with the same id (results in flight).
  std::uint64_t serial() const { return serial_; }
  const sampling_params& params() const { return request_.params; }
  std::uint64_t seed() const { return request_.seed; }
  const sequence_limits& limits() const { return limits_; }
  sequence_status status() const { return status_; }
  /// Moves along the lifecycle (sequence_status.hpp); throws on an illegal move.
  void set_status(sequence_status to) { transition(status_, to); }

  std::int64_t num_prompt_tokens() const { return std::int64_t(request_.prompt_ids.size()); }
  std::int64_t num_output_tokens() const { return num_known_tokens() - num_prompt_tokens(); }
  std::int64_t num_pending_samples() const { return num_pending_; }
  /// Prompt, sampled outputs, and samples in flight (their ids not known yet).
  std::int64_t num_tokens() const { return num_known_tokens() + num_pending_; }
  std::int64_t num_known_tokens() const { return std::int64_t(tokens_.size()); }
  /// Prompt followed by the known outputs.
  std::span<const std::int32_t> known_tokens() const { return tokens_; }
  std::span<const std::int32_t> output_tokens() const;
  /// True while another sample fits under max_new_tokens.
  bool can_sample_more() const;

  /// Tokens whose rows are planned (their cache entries exist once the plans ran).
  std::int64_t num_computed() const { return num_computed_; }
  void set_num_computed(std::int64_t n) { num_computed_ = n; }
  /// P of the current admission: positions below it are replay rows over cached blocks.
  std::int64_t num_cached_tokens() const { return num_cached_tokens_; }
  void set_num_cached_tokens(std::int64_t n) { num_cached_tokens_ = n; }
  /// Until this many tokens are computed the slot differs from the original run's (a bounded
  /// replay from a fresh slot is under way), so it must not be snapshotted.
  std::int64_t num_inexact_tokens() const { return num_inexact_tokens_; }
  void set_num_inexact_tokens(std::int64_t n) { num_inexact_tokens_ = n; }

  sequence_blocks& blocks() { return blocks_; }
  const sequence_blocks& blocks() const { return blocks_; }
  /// Block ids of stream `s` not yet sent to executors, marked sent.
  std::vector<std::int32_t> take_new_blocks(int s);
  /// Back to "nothing computed, nothing held, executors know nothing" (preemption).
  void reset_computation();

  /// The step in which this sequence was last scheduled or preempted.
  std::optional<std::uint64_t> scheduled_step() const { return scheduled_step_; }
  void set_scheduled_step(std::uint64_t step) { scheduled_step_ = step; }
  std::optional<std::uint64_t> preempted_step() const { return preempted_step_; }
  void set_preempted_step(std::uint64_t step) { preempted_step_ = step; }

  /// A sample was planned; its token arrives later through accept_token.
  void add_pending_sample() { ++num_pending_; }
  /// Results of the steps planned so far no longer count (their rows did not run): a new
  /// serial, and no sample pending.
  void restart(std::uint64_t serial) {
    serial_ = serial;
    num_pending_ = 0;
  }
  /// The next sampled token: detokenized and stop-checked. The update's text is final.
  stop_update accept_token(std::int32_t id);
  /// Ends the text stream early (abort, error): the text still held back.
  std::string flush_text();

  /// Prompt-logprob entries delivered so far (entry 0 included).
  std::int64_t num_prompt_logprobs_sent() const { return num_prompt_logprobs_sent_; }
  void set_num_prompt_logprobs_sent(std::int64_t n) { num_prompt_logprobs_sent_ = n; }
  /// True while the client still waits for prompt logprobs (no prefix reuse then).
  bool needs_prompt_logprobs() const;

 private:
  request request_;
  sequence_limits limits_;
  std::uint64_t serial_;
  sequence_status status_ = sequence_status::queued;
  std::vector<std::int32_t> tokens_;  // prompt + known outputs
  std::int64_t num_pending_ = 0;
  std::int64_t num_computed_ = 0;
  std::int64_t num_cached_tokens_ = 0;
  std::int64_t num_inexact_tokens_ = 0;
  sequence_blocks blocks_;
  std::vector<std::size_t> num_blocks_sent_;  // per stream
  std::optional<std::uint64_t> scheduled_step_;
  std::optional<std::uint64_t> preempted_step_;
  std::int64_t num_prompt_logprobs_sent_ = 0;
  stop_checker stop_;
  std::unique_ptr<text_decoder> decoder_;
};

}  // namespace di::runtime
