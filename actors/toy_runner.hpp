// A deterministic toy step_runner: follows the executor's side of the step-plan protocol
// (runtime/step_plan.hpp) with a "model" whose every state lives in the paged KV pool, so the
// actor runtime can be tested end to end without weights (model.runner = "toy").
//
// The model: one stream of ratio 1. Row p of a sequence computes h(p) = mix(h(p - 1), token,
// p), reading h(p - 1) from the block that holds entry p - 1, and writes h(p) to entry p
// (replay rows, below num_cached_tokens, verify the cached entry instead of writing it). The
// sampled token is a function of h(last row) (and of the seed and sample index unless greedy),
// so a wrong block table, a lost placeholder, a bad prefix reuse or a reordered step changes
// the output; outputs are independent of batching, chunking and preemption, as the real CPU
// engine's are. With no slot state, a prefix hit resumes exactly at the cached boundary (R = 0).
// Logprobs are synthetic but deterministic. `step_ms` / `row_us` simulate device time.
#pragma once

#include "runtime/kv_geometry.hpp"
#include "runtime/step_runner.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace di::actors {

struct toy_runner_config {
  int vocab_size = 1000;
  int entries_per_block = 16;
  std::int32_t num_blocks = 1024;
  std::int64_t max_model_len = 4096;
  double step_ms = 0;  ///< simulated time per step
  double row_us = 0;   ///< ... plus per row
  std::string device = "toy";
};

class toy_runner : public runtime::step_runner {
 public:
  explicit toy_runner(toy_runner_config config);

  /// The cache geometry the scheduler must use with this runner.
  static runtime::kv_geometry geometry(const toy_runner_config& config);

  runtime::runner_info info() const override;
  runtime::step_result run(const runtime::step_plan& plan) override;

  std::int64_t num_rows_run() const { return num_rows_run_; }
  std::int64_t num_replay_rows_run() const { return num_replay_rows_run_; }

 private:
  struct sequence_record {
    runtime::sequence_start start;
    std::vector<std::int32_t> table;  // block ids of stream 0
    std::optional<std::int32_t> last_sample;
    std::int64_t next_position = 0;
  };

  runtime::sequence_output run_sequence(const runtime::scheduled_sequence& s);
  std::uint64_t* entry(const sequence_record& q, std::int64_t position);
  std::int32_t sample(const sequence_record& q, const runtime::scheduled_sequence& s,
                      std::uint64_t h) const;
  runtime::position_logprobs make_logprobs(std::int32_t token, std::uint64_t h, int num_top) const;
  void simulate_time(std::int64_t start_ns, std::int64_t num_rows) const;

  toy_runner_config config_;
  std::vector<std::uint64_t> pool_;  // [num_blocks * entries_per_block]
  std::unordered_map<std::uint64_t, sequence_record> seqs_;
  std::int64_t num_rows_run_ = 0;
  std::int64_t num_replay_rows_run_ = 0;
};

}  // namespace di::actors
