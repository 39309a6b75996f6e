// Helpers for the model-runner tests: the two models (a generated tiny-v41 and the golden
// v41_public checkpoint), a reference that runs one request alone the way `deepinfer
// generate` always has (one owned sequence state, the whole prompt in one forward, then one
// token per forward), deterministic request sets, and a driver that serves requests through
// the runtime scheduler and a step_runner (sequentially, or overlapped with placeholders).
#pragma once

#include "model/runner/cpu_model_runner.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/sampling_rng.hpp"
#include "tests/model/forward/golden.hpp"
#include "tests/model/make_model/make_model_fixture.hpp"
#include "tests/runtime/scheduler_test_util.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace di::test {

/// The tiny-v41 preset (seed 0), generated once per process, with its Engram hasher.
inline std::shared_ptr<const deepseek_model> tiny_v41() {
  static std::shared_ptr<const deepseek_model> model = [] {
    const fs::path dir = generated("tiny-v41");
    std::shared_ptr<deepseek_model> m = deepseek_model::load(dir);
    attach_engram_hasher(*m, tok::tokenizer::from_dir(dir.string()));
    return std::shared_ptr<const deepseek_model>(std::move(m));
  }();
  return model;
}

/// The tiny-v4 preset (seed 0), generated once per process.
inline std::shared_ptr<const deepseek_model> tiny_v4() {
  static std::shared_ptr<const deepseek_model> model = deepseek_model::load(generated("tiny-v4"));
  return model;
}

/// The golden v41_public checkpoint (its official Engram token map attached).
inline std::shared_ptr<const deepseek_model> golden_v41() {
  return std::shared_ptr<const deepseek_model>(golden("v41_public").model.get(),
                                               [](const deepseek_model*) {});
}

/// What one request produced.
struct reference_output {
  std::vector<std::int32_t> tokens;
  std::vector<runtime::position_logprobs> logprobs;
  std::vector<std::optional<runtime::position_logprobs>> prompt_logprobs;  ///< entry 0 null
};

/// Logits rows [rows, vocab] of `tokens` run on `state`.
inline tensor reference_forward(const deepseek_model& m, sequence_state& state,
                                std::span<const std::int32_t> tokens,
                                std::vector<std::int64_t> rows) {
  const std::vector<std::int64_t> ids(tokens.begin(), tokens.end());
  std::vector<std::int64_t> positions;
  std::vector<forward_request> batch{request_for(state, ids, positions, std::move(rows))};
  return m.forward(batch)[0].logits;
}

/// `r` run alone: the whole prompt in one forward, then sample / decode one token at a time
/// (EOS = the config's, unless ignore_eos), exactly as `generate` did before the runner.
inline reference_output run_alone(const deepseek_model& m, const runtime::request& r) {
  const runtime::sampling_params& p = r.params;
  const std::int64_t num_prompt = std::int64_t(r.prompt_ids.size());
  const std::int64_t max_new = p.max_tokens.value();
  kv_block_pool pool(m.layout(), int((num_prompt + max_new) / m.layout().entries_per_block + 2));
  sequence_state state(pool, num_prompt + max_new);
  std::vector<std::int32_t> stop = p.stop_token_ids;
  if (!p.ignore_eos) stop.push_back(std::int32_t(m.config().eos_token_id));
  std::vector<std::int64_t> rows{num_prompt - 1};
  if (p.prompt_logprobs) {
    rows.clear();
    for (std::int64_t i = 0; i < num_prompt; ++i) rows.push_back(i);
  }
  tensor logits = reference_forward(m, state, r.prompt_ids, rows);  // [rows, vocab]
  const std::int64_t vocab = logits.size(1);
  reference_output out;
  if (p.prompt_logprobs)
    out.prompt_logprobs = runtime::compute_prompt_logprobs(
        {logits.data<float>(), std::size_t((num_prompt - 1) * vocab)}, vocab, r.prompt_ids,
        *p.prompt_logprobs);
  runtime::token_counts counts(r.prompt_ids);
  runtime::sampler sampler;
  const float* next = logits.data<float>() + (logits.size(0) - 1) * vocab;
  for (std::int64_t step = 0; step < max_new; ++step) {
    const bool suppress = step < p.min_tokens;
    runtime::sample_result s =
        sampler.sample({.logits = {next, std::size_t(vocab)},
                        .params = &p,
                        .seed = r.seed,
                        .step = step,
                        .counts = &counts,
                        .suppressed_ids = suppress ? std::span(stop) : std::span(stop).first(0)});
    out.tokens.push_back(s.token_id);
    if (s.logprobs) out.logprobs.push_back(*s.logprobs);
    counts.add_output_token(s.token_id);
    if (std::find(stop.begin(), stop.end(), s.token_id) != stop.end()) break;
    if (step + 1 == max_new) break;
    logits = reference_forward(m, state, std::span(&out.tokens.back(), 1), {0});
    next = logits.data<float>();
  }
  return out;
}

/// run_alone, computed once per (model, request) for the whole test process.
inline const reference_output& alone(const std::shared_ptr<const deepseek_model>& m,
                                     const runtime::request& r) {
  static std::map<std::pair<const deepseek_model*, std::string>, reference_output> cache;
  const runtime::sampling_params& p = r.params;
  std::string key = fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {} {}|", r.seed, *p.max_tokens,
                                p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty,
                                p.presence_penalty, p.frequency_penalty, p.logprobs.value_or(-1),
                                p.prompt_logprobs.value_or(-1), p.min_tokens, p.ignore_eos,
                                p.stop_token_ids.size());
  for (std::int32_t t : r.prompt_ids) key += std::to_string(t) + ",";
  auto it = cache.find({m.get(), key});
  if (it == cache.end()) it = cache.emplace(std::pair(m.get(), key), run_alone(*m, r)).first;
  return it->second;
}

/// Request `id`: a prompt of `prompt_len` tokens, of which the first `shared` come from
/// `shared_seed` (a common prefix), greedy unless changed, `max_tokens` outputs.
inline runtime::request runner_request(std::uint64_t id, std::int64_t prompt_len, int max_tokens,
                                       std::int64_t shared = 0, std::uint64_t shared_seed = 7) {
  std::vector<std::int32_t> prompt = prompt_tokens(shared_seed, shared, 120000);
  const std::vector<std::int32_t> own = prompt_tokens(1000 + id, prompt_len - shared, 120000);
  prompt.insert(prompt.end(), own.begin(), own.end());
  for (std::int32_t& t : prompt) t += 3;  // past BOS, EOS and pad
  runtime::request r = make_request(id, std::move(prompt), max_tokens);
  r.params.temperature = 0.0;
  return r;
}

/// `n` requests of mixed lengths: prompts of 1 .. max_prompt tokens, 1 .. max_tokens outputs;
/// every third shares a prefix of `shared` tokens.
inline std::vector<runtime::request> mixed_requests(int n, std::int64_t max_prompt, int max_tokens,
                                                    std::int64_t shared = 0) {
  std::vector<runtime::request> rs;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t h = runtime::random_bits(99, std::uint64_t(i));
    const std::int64_t len = 1 + std::int64_t(h % std::uint64_t(max_prompt));
    const int out = 1 + int((h >> 20) % std::uint64_t(max_tokens));
    const bool share = shared > 0 && i % 3 == 0;
    rs.push_back(
        runner_request(std::uint64_t(i), share ? len + shared : len, out, share ? shared : 0));
  }
  return rs;
}

/// A scheduler for `runner` with the given budgets and prefix-cache settings.
struct serving_options {
  std::int64_t budget = 256;       ///< rows per step
  std::int64_t prefill_chunk = 0;  ///< 0 = the budget
  int max_num_running = 256;
  bool prefix_caching = false;
  bool replay = true;
  int snapshot_interval = 0;
};

inline runtime::scheduler make_scheduler(const cpu_model_runner& runner, const serving_options& o) {
  runtime::scheduler_config c;
  c.max_num_batched_tokens = o.budget;
  c.max_prefill_chunk = o.prefill_chunk;
  c.max_num_running = o.max_num_running;
  c.blocks.enable_prefix_caching = o.prefix_caching;
  c.blocks.enable_replay = o.replay;
  c.blocks.snapshot_interval = o.snapshot_interval;
  return runtime::scheduler(scheduler_config_for(runner, c));
}

/// What serving gave each request: events as the scheduler tests collect them, plus the
/// logprobs of the sampled tokens.
struct served {
  outputs out;
  std::map<std::uint64_t, std::vector<runtime::position_logprobs>> logprobs;
};

/// Serves everything queued in `s` through `runner` until nothing is left (drive_options as
/// in the scheduler tests: overlap plans step N + 1 before N's result is applied), then runs
/// the last plan, which only carries the ids of the finished sequences.
inline served serve(runtime::scheduler& s, runtime::step_runner& runner,
                    const drive_options& o = {}) {
  served got;
  std::optional<runtime::step_result> pending;
  auto apply = [&](const runtime::step_result& r) {
    runtime::apply_outcome a = s.apply(r);
    REQUIRE_MESSAGE(a.is_ok(), a.error);
    collect(got.out, a.events);
    for (const runtime::token_event& e : a.events) {
      auto& lp = got.logprobs[e.request_id];
      lp.insert(lp.end(), e.logprobs.begin(), e.logprobs.end());
    }
  };
  for (int step = 0; step < o.max_steps; ++step) {
    if (o.before_step) o.before_step(step, s, got.out);
    if (!s.has_unfinished() && !pending) {
      runner.run(s.schedule());
      return got;
    }
    runtime::step_plan plan = s.schedule();
    CHECK(plan.num_rows() <= s.config().max_num_batched_tokens);
    if (o.before_run) o.before_run(plan);
    runtime::step_result r = runner.run(plan);
    if (pending) apply(*std::exchange(pending, std::nullopt));
    if (plan.sequences.empty()) continue;
    if (o.overlap) {
      pending = std::move(r);
    } else {
      apply(r);
    }
  }
  FAIL("serving did not finish within the step limit");
  return got;
}

/// Adds every request to `s` (all must be accepted).
inline void add_all(runtime::scheduler& s, const std::vector<runtime::request>& rs) {
  for (const runtime::request& r : rs) REQUIRE(s.add_request(r).is_accepted());
}

/// Checks every request's tokens, logprobs and prompt logprobs against the request run alone.
inline void check_equal_alone(const std::shared_ptr<const deepseek_model>& m,
                              const std::vector<runtime::request>& rs, const served& got) {
  for (const runtime::request& r : rs) {
    const reference_output& want = alone(m, r);
    const collected& c = got.out.at(r.id);
    CHECK_MESSAGE(c.tokens == want.tokens, "request ", r.id, " (", r.prompt_ids.size(),
                  " prompt tokens)");
    CHECK_MESSAGE(c.error.empty(), c.error);
    CHECK(runtime::is_finished(c.status));
    if (r.params.logprobs) {
      const auto& lp = got.logprobs.at(r.id);
      REQUIRE(lp.size() == want.logprobs.size());
      for (std::size_t i = 0; i < lp.size(); ++i) {
        CHECK(lp[i].logprob == want.logprobs[i].logprob);
        CHECK(lp[i].top.size() == want.logprobs[i].top.size());
      }
    }
    if (r.params.prompt_logprobs) {
      REQUIRE(c.prompt_logprobs.size() == want.prompt_logprobs.size());
      CHECK_FALSE(c.prompt_logprobs[0].has_value());
      for (std::size_t i = 1; i < want.prompt_logprobs.size(); ++i) {
        CHECK(c.prompt_logprobs[i]->logprob == want.prompt_logprobs[i]->logprob);
        CHECK(c.prompt_logprobs[i]->rank == want.prompt_logprobs[i]->rank);
      }
    }
  }
}

}  // namespace di::test
