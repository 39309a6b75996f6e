// Helpers for scheduler tests: a small cache geometry, configs sized in tokens, requests with
// deterministic prompts, and a driver that runs a scheduler against the fake executor until
// every request ends (sequentially, or overlapped: step N+1 planned before N's result).
#pragma once

#include "runtime/scheduler.hpp"
#include "tests/runtime/fake_executor.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace di::test {

/// Three streams (ratio 1 on layer 0, ratio 2 on layers 1 and 2), 4 entries per block: token
/// blocks of L = 8 tokens. Three layers, window 4: a bounded replay needs R = 2 * 3 + 3 = 9
/// tokens. The last layer's stream keeps any error of a short replay forever (as compressed
/// entries do in the real model), so the fake model's outputs expose it.
inline runtime::kv_geometry small_geometry() {
  return {.stream_ratios = {1, 2, 2},
          .entries_per_block = 4,
          .num_layers = 3,
          .window = 4,
          .max_overlap_ratio = 0,
          .engram_lookback = 2};
}

/// Per-stream pools that hold `num_tokens` tokens.
inline std::vector<std::int32_t> pools_for(const runtime::kv_geometry& g, std::int64_t num_tokens) {
  std::vector<std::int32_t> n;
  for (int s = 0; s < g.num_streams(); ++s) n.push_back(std::int32_t(g.num_blocks(s, num_tokens)));
  return n;
}

struct config_options {
  std::int64_t pool_tokens = 4096;  ///< KV pool capacity in tokens
  std::int64_t budget = 4096;
  std::int64_t max_model_len = 1024;
  bool prefix_caching = false;
  bool replay = true;
  int num_snapshots = 0;
  int snapshot_interval = 0;
};

inline runtime::scheduler_config make_config(const config_options& o,
                                             runtime::kv_geometry g = small_geometry()) {
  runtime::scheduler_config c;
  c.max_num_batched_tokens = o.budget;
  c.max_model_len = o.max_model_len;
  c.blocks = {.geometry = g,
              .num_blocks = pools_for(g, o.pool_tokens),
              .enable_prefix_caching = o.prefix_caching,
              .enable_replay = o.replay,
              .num_snapshots = o.num_snapshots,
              .snapshot_interval = o.snapshot_interval};
  return c;
}

/// `n` deterministic tokens in [0, vocab) drawn from `seed`.
inline std::vector<std::int32_t> prompt_tokens(std::uint64_t seed, std::int64_t n,
                                               std::int32_t vocab = 1000) {
  std::vector<std::int32_t> t;
  for (std::int64_t i = 0; i < n; ++i)
    t.push_back(std::int32_t(runtime::random_bits(seed, std::uint64_t(i)) % std::uint64_t(vocab)));
  return t;
}

inline runtime::request make_request(std::uint64_t id, std::vector<std::int32_t> prompt,
                                     int max_tokens) {
  runtime::request r{.id = id, .prompt_ids = std::move(prompt), .seed = id};
  r.params.max_tokens = max_tokens;
  return r;
}

/// Everything a client received for one request.
struct collected {
  std::vector<std::int32_t> tokens;
  std::string text;
  std::vector<std::optional<runtime::position_logprobs>> prompt_logprobs;
  runtime::sequence_status status = runtime::sequence_status::queued;
  std::string error;
  std::optional<std::int32_t> stop_token;
  std::string stop_string;
  std::vector<std::string> event_texts;  ///< text of each event, in order
  int num_events_after_finish = 0;
};

using outputs = std::map<std::uint64_t, collected>;

inline void collect(outputs& out, const std::vector<runtime::token_event>& events) {
  for (const runtime::token_event& e : events) {
    collected& c = out[e.request_id];
    if (runtime::is_finished(c.status)) ++c.num_events_after_finish;
    c.tokens.insert(c.tokens.end(), e.token_ids.begin(), e.token_ids.end());
    c.text += e.text;
    c.prompt_logprobs.insert(c.prompt_logprobs.end(), e.prompt_logprobs.begin(),
                             e.prompt_logprobs.end());
    c.status = e.status;
    c.event_texts.push_back(e.text);
    if (!e.error.empty()) c.error = e.error;
    if (e.stop_token) c.stop_token = e.stop_token;
    if (!e.stop_string.empty()) c.stop_string = e.stop_string;
  }
}

struct drive_options {
  bool overlap = false;            ///< plan N+1 before applying N's result
  bool scheduler_patches = false;  ///< overlap, but apply N and patch before "sending" N+1
  int max_steps = 100000;
  /// Called before each schedule() with the step count; may add or abort requests.
  std::function<void(int, runtime::scheduler&, outputs&)> before_step;
  /// Called with each plan before the executor runs it (the runner tests' serve()); may edit it.
  std::function<void(runtime::step_plan&)> before_run;
};

/// Runs `s` against `exec` until nothing is left; checks every plan's row budget.
inline outputs drive(runtime::scheduler& s, fake_executor& exec, const drive_options& o = {}) {
  outputs out;
  std::optional<runtime::step_result> pending;  // the executor's answer not yet applied
  for (int step = 0; step < o.max_steps; ++step) {
    if (o.before_step) o.before_step(step, s, out);
    if (!s.has_unfinished() && !pending) return out;
    runtime::step_plan plan = s.schedule();
    CHECK(plan.num_rows() <= s.config().max_num_batched_tokens);
    if (!o.overlap && !o.scheduler_patches) {
      runtime::step_result r = exec.run(plan);
      if (!plan.sequences.empty()) {
        runtime::apply_outcome a = s.apply(r);
        REQUIRE_MESSAGE(a.is_ok(), a.error);
        collect(out, a.events);
      }
      continue;
    }
    if (o.scheduler_patches && pending) {  // N's result arrives before N+1 is sent
      runtime::apply_outcome a = s.apply(*pending);
      REQUIRE_MESSAGE(a.is_ok(), a.error);
      collect(out, a.events);
      pending.reset();
      s.patch_placeholders(plan);
      for (const runtime::scheduled_sequence& q : plan.sequences)
        if (q.has_placeholder) CHECK_FALSE(s.status_of(q.seq_id).has_value());  // only dead ones
    }
    runtime::step_result r = exec.run(plan);
    if (pending) {
      runtime::apply_outcome a = s.apply(*pending);
      REQUIRE_MESSAGE(a.is_ok(), a.error);
      collect(out, a.events);
      pending.reset();
    }
    if (!plan.sequences.empty()) pending = std::move(r);
  }
  FAIL("the scheduler did not finish within the step limit");
  return out;
}

}  // namespace di::test
