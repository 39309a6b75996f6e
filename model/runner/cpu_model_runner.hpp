// The CPU executor's model runner: runs the scheduler's step plans (runtime/step_plan.hpp) on
// the V4/V4.1 forward pass, one forward over every scheduled sequence per plan, and samples
// inside the runner. It holds the executor's side of the KV cache: per-stream block pools
// whose block ids come from the scheduler's block manager, one sequence_state per live
// sequence, and a pool of slot snapshots for exact prefix reuse.
#pragma once

#include "model/forward/model.hpp"
#include "model/forward/sequence_state.hpp"
#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/response_format.hpp"
#include "runtime/kv_geometry.hpp"
#include "runtime/sampler.hpp"
#include "runtime/scheduler.hpp"
#include "runtime/step_runner.hpp"
#include "runtime/token_counts.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace di::tok {
class tokenizer;
}

namespace di {

/// How big the runner's caches are.
struct cpu_runner_config {
  /// Tokens of context every stream's pool holds, all sequences together (each stream gets
  /// kv_geometry::num_blocks(s, kv_pool_tokens) blocks, or more: min_blocks_per_stream).
  std::int64_t kv_pool_tokens = 0;
  /// Each stream holds at least this many blocks (one per sequence that may run at once: the
  /// scheduler's max_num_running), or as many as the stream with the most blocks if that is
  /// fewer. A sequence holds a whole block of a stream as soon as it has one entry there, so a
  /// high-ratio stream sized by tokens alone (V4's ratio 128: 8192 tokens a block, 4 blocks for
  /// 32768 tokens) let only that many sequences past their first entry run at once while the
  /// other pools were mostly free. The lowest-ratio stream, the largest, stays as sized, so a
  /// small kv_pool_tokens still limits what runs.
  int min_blocks_per_stream = 0;
  int num_snapshots = 0;  ///< slot snapshots for prefix reuse (slot_bytes each)
  /// The longest sequence; 0 = kv_pool_tokens, capped by max_position_embeddings.
  std::int64_t max_model_len = 0;
  /// Sequence slots in the block pool's slot arena (kv_block_pool): the CUDA forward batches a
  /// decode step across its sequences only when each holds one. 0 = none (every sequence
  /// allocates its own slot; the CPU needs none).
  int num_state_slots = 0;
  /// Ids the sampler and logprobs range over: the tokenizer's (sampleable_ids). A checkpoint
  /// pads its head past them (V4: 129280 logits, 128815 ids); those logits are no tokens and
  /// are never sampled nor listed. 0 = every logit of the model.
  std::int64_t num_token_ids = 0;
};

/// The ids a model with `vocab_size` logits can emit as tokens of `tokenizer`.
std::int64_t sampleable_ids(const tok::tokenizer& tokenizer, std::int64_t vocab_size);

/// Where the runner's time went, summed over its steps.
struct runner_stats {
  std::int64_t num_steps = 0;        ///< plans run (with or without rows)
  std::int64_t num_rows = 0;         ///< forward rows
  std::int64_t num_replay_rows = 0;  ///< ... of them replay rows (no stream writes)
  std::int64_t num_samples = 0;
  std::int64_t num_snapshot_restores = 0;
  std::int64_t num_snapshot_saves = 0;
  /// Forwards beyond one per plan: a sequence restoring a snapshot that an earlier sequence
  /// of the same plan saves runs after it (see run()).
  std::int64_t num_extra_forwards = 0;
  /// Sequences that did not run because the snapshot they restore was never saved (the
  /// sequence saving it did not run): the scheduler computes them again (see run()).
  std::int64_t num_unsaved_restores = 0;
  double total_seconds = 0.0;     ///< inside run()
  double forward_seconds = 0.0;   ///< deepseek_model::forward
  double sampling_seconds = 0.0;  ///< sampler and logprobs
  /// Everything else in run(): plan bookkeeping, block tables, snapshots, batch assembly.
  double bookkeeping_seconds() const { return total_seconds - forward_seconds - sampling_seconds; }
};

class cpu_model_runner final : public runtime::step_runner {
 public:
  /// A runner over `model` (with its Engram hasher attached when it has Engram layers).
  /// Throws di::error for an invalid config.
  cpu_model_runner(std::shared_ptr<const deepseek_model> model, const cpu_runner_config& config);
  /// Loads the checkpoint folder `dir` (config, weights, and the tokenizer that Engram
  /// hashing needs).
  static std::unique_ptr<cpu_model_runner> load(const std::filesystem::path& dir,
                                                const cpu_runner_config& config,
                                                forward_options options = {});

  runtime::runner_info info() const override;
  /// Runs one plan (the protocol in runtime/step_plan.hpp). A plan that breaks the protocol
  /// (unknown sequence, stale snapshot, rows that do not continue a sequence) throws di::error.
  /// One forward runs every scheduled sequence, except that a sequence admitted onto a
  /// snapshot which another sequence of the same plan saves (the scheduler registers a
  /// prefix as soon as its rows are planned) waits for that save: it runs in a second forward.
  /// A sequence resumed past position 0 whose request has sampling penalties fails (its output
  /// carries the error): the plan does not carry the earlier tokens the penalties count.
  /// A sequence whose rows cannot run (a token outside the vocabulary, no sample to patch in)
  /// fails alone and saves nothing; one that restores a save which thus never happened, in
  /// this plan or an earlier one, does not run either and asks to be computed again; both
  /// say so (sequence_output::not_run), and so do their rows in later plans.
  runtime::step_result run(const runtime::step_plan& plan) override;

  /// Lets requests with a response_format run here (runner_grammar.cpp): each step's mask
  /// comes from the request's grammar over `v` (whose mask_size must be num_token_ids());
  /// compiled grammars come from `cache` (shared between runners; a private one when null).
  /// Without it such a request fails with a clear error.
  void enable_structured_output(std::shared_ptr<const grammar::token_vocabulary> v,
                                std::shared_ptr<grammar::grammar_cache> cache = nullptr);
  /// Compiles into the cache above (holds the vocabulary and cache, not the runner); empty
  /// until enable_structured_output.
  std::function<void(const std::string& spec)> grammar_preparer() const override;
  std::function<bool(const std::string& spec)> grammar_lookup() const override;

  const deepseek_model& model() const { return *model_; }
  /// The cache shape the scheduler's block manager must use with this runner.
  const runtime::kv_geometry& geometry() const { return geometry_; }
  const runner_stats& stats() const { return stats_; }
  /// The ids sampled and listed in logprobs (cpu_runner_config::num_token_ids).
  std::int64_t num_token_ids() const { return num_token_ids_; }
  /// Sequences whose state the runner holds.
  std::size_t num_live() const { return live_.size(); }

 private:
  /// What the runner keeps per sequence between steps.
  struct live_sequence {
    runtime::sequence_start start;
    std::unique_ptr<sequence_state> state;
    runtime::token_counts counts;  // tokens of the rows run so far, split at num_prompt_tokens
    bool has_all_tokens = true;    // counts saw every earlier token (no resume past position 0)
    std::optional<std::int32_t> last_sample;
    // Structured output (params.response_format): the matcher follows every output token fed.
    std::unique_ptr<grammar::grammar_matcher> matcher;
    std::vector<std::uint32_t> mask;  // [allowed_mask_words(vocab)]
    std::string grammar_error;        // set when the grammar failed: the sequence fails
    // Set when its rows of a step did not run (the error, or "" to be computed again): its
    // state no longer follows the plans, so its rows in later plans do not run either.
    std::optional<std::string> dropped;
  };
  /// One scheduled sequence's part of this step's forward.
  struct batch_entry {
    std::size_t index = 0;  // in plan.sequences and result.outputs
    live_sequence* seq = nullptr;
    std::vector<std::int64_t> tokens;              // [rows]
    std::vector<std::int64_t> positions;           // [rows]
    std::vector<std::int64_t> logit_rows;          // prompt-logprob rows, then the sampled row
    std::optional<std::int32_t> deferred_restore;  // a snapshot this plan saves first
  };
  /// What a save of the current plan leaves in a snapshot.
  struct planned_save {
    std::int64_t position = 0;
    std::uint64_t version = 0;
  };
  /// Snapshot id -> its save in the current plan.
  using planned_saves = std::unordered_map<std::int32_t, planned_save>;

  // runner_steps.cpp: the protocol's steps.
  void start(const runtime::sequence_start& s);
  live_sequence& find(std::uint64_t seq_id);
  std::optional<std::int32_t> restore_slot(live_sequence& seq, const runtime::scheduled_sequence& s,
                                           const planned_saves& saves);
  /// Whether snapshot `k` holds the save `version` made at `position`.
  bool snapshot_holds(std::int32_t k, std::int64_t position, std::uint64_t version) const;
  void load_snapshot(sequence_state& state, std::int32_t snapshot, std::int64_t position,
                     std::uint64_t version);
  std::optional<batch_entry> prepare(std::size_t index, const runtime::scheduled_sequence& s,
                                     const planned_saves& saves, runtime::sequence_output& out);
  void drop_unsaved_restores(const runtime::step_plan& plan, std::vector<batch_entry>& batch,
                             runtime::step_result& result);
  std::vector<forward_output> run_waves(const runtime::step_plan& plan,
                                        std::vector<batch_entry>& batch);
  std::vector<forward_output> run_forward(std::vector<batch_entry*>& wave);
  void save_snapshot(const live_sequence& seq, std::int32_t snapshot, std::uint64_t version);
  // runner_grammar.cpp: structured output.
  void start_grammar(live_sequence& seq) const;
  void feed_grammar(live_sequence& seq, std::int32_t output_token) const;
  /// Counts tokens at positions first_position... for penalties (prompt or output) and feeds
  /// the output ones to the grammar.
  void count_tokens(live_sequence& seq, std::span<const std::int64_t> tokens,
                    std::int64_t first_position) const;
  /// The allowed-token mask for the next sample (empty span: no grammar).
  std::span<const std::uint32_t> grammar_mask(live_sequence& seq) const;
  /// The tokens the next sample must not take: the stop tokens before min_tokens, EOS under
  /// ignore_eos while a grammar may go on; none once a grammar is done.
  std::span<const std::int32_t> suppressed_ids(const runtime::scheduled_sequence& s,
                                               const live_sequence& seq) const;
  void sample(const runtime::step_plan& plan, const std::vector<batch_entry>& batch,
              const std::vector<forward_output>& logits, runtime::step_result& result);
  void prompt_logprobs(const runtime::scheduled_sequence& s, const batch_entry& entry,
                       const tensor& logits, runtime::sequence_output& out) const;

  std::shared_ptr<const deepseek_model> model_;
  std::int64_t num_token_ids_ = 0;
  runtime::kv_geometry geometry_;
  std::int64_t max_model_len_ = 0;
  kv_block_pool pool_;
  std::vector<std::vector<std::uint8_t>> snapshots_;  // [snapshot] slot bytes
  std::vector<std::int64_t> snapshot_positions_;      // [snapshot] tokens it holds; -1 = none
  std::vector<std::uint64_t> snapshot_versions_;      // [snapshot] the save it holds
  std::vector<std::uint64_t> skipped_versions_;       // [snapshot] its last save not made, or 0
  std::unordered_map<std::uint64_t, live_sequence> live_;
  runtime::sampler sampler_;
  std::shared_ptr<const grammar::token_vocabulary> grammar_vocab_;
  std::shared_ptr<grammar::grammar_cache> grammar_cache_;
  runner_stats stats_;
};

/// Attaches the Engram hasher that `model`'s Engram layers need (none for a model without
/// them), built from `tokenizer`, the model's own.
void attach_engram_hasher(deepseek_model& model, const tok::tokenizer& tokenizer);

/// A scheduler config that matches `runner`: its cache geometry, block counts, snapshots and
/// max_model_len, and the model's EOS; the rest (budgets, limits, prefix caching, snapshot
/// interval) from `base`.
runtime::scheduler_config scheduler_config_for(const cpu_model_runner& runner,
                                               runtime::scheduler_config base);

}  // namespace di
