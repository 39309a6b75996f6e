// End-to-end scheduling against the fake executor (fake_executor.hpp), whose tokens depend on
// the whole cached state, so every output is compared with an unconstrained run of the same
// requests: preemption by recompute under a small pool, prefix reuse (bounded replay and
// snapshots; a replay one layer short is caught), eviction under pressure, overlapped
// scheduling (executor- or scheduler-patched placeholders), and all of it at once.
#include "runtime/scheduler.hpp"
#include "tests/runtime/scheduler_test_util.hpp"

#include <doctest/doctest.h>

#include <iterator>
#include <set>

using namespace di::runtime;
using namespace di::test;

namespace {

struct workload {
  std::vector<request> requests;
};

/// Mixed lengths: prompts of 1..60 tokens, 1..24 new tokens; `shared` of them start with the
/// same 40-token prefix.
workload mixed(int n, int shared = 0) {
  workload w;
  const auto prefix = prompt_tokens(999, 40);
  for (int i = 0; i < n; ++i) {
    const std::uint64_t id = std::uint64_t(100 + i);
    auto prompt = prompt_tokens(id, 1 + (i * 37) % 60);
    if (i < shared) prompt.insert(prompt.begin(), prefix.begin(), prefix.end());
    w.requests.push_back(make_request(id, prompt, 1 + (i * 11) % 24));
  }
  return w;
}

struct run_result {
  outputs out;
  scheduler_counters counters;
  std::int64_t rows_run = 0;
  std::int64_t replay_rows = 0;
  std::int64_t placeholders = 0;
};

/// Runs `w` (all submitted up front, or `per_step` at a time) and checks that every block
/// came back.
run_result run(const workload& w, scheduler_config c, drive_options o = {}, int per_step = 0,
               kv_geometry model = small_geometry(), std::int32_t vocab = 1000) {
  scheduler s(c);
  fake_executor exec(model, c.blocks.num_blocks, c.blocks.num_snapshots, vocab);
  const std::int64_t free_at_start = s.stats().num_free_blocks;
  std::size_t next = 0;
  auto submit = o.before_step;
  o.before_step = [&](int step, scheduler& sch, outputs& out) {
    const std::size_t limit = per_step > 0 ? std::size_t(per_step) : w.requests.size();
    for (std::size_t k = 0; k < limit && next < w.requests.size(); ++k, ++next)
      REQUIRE(sch.add_request(w.requests[next]).is_accepted());
    if (submit) submit(step, sch, out);
  };
  run_result r;
  r.out = drive(s, exec, o);
  CHECK(next == w.requests.size());
  r.counters = s.counters();
  r.rows_run = exec.num_rows_run();
  r.replay_rows = exec.num_replay_rows_run();
  r.placeholders = exec.num_placeholders_patched();
  const scheduler_stats end = s.stats();
  CHECK(end.num_used_blocks == 0);
  CHECK(end.num_free_blocks + end.num_cached_blocks == free_at_start);
  return r;
}

/// The unconstrained run: a large pool and budget, no prefix cache, sequential.
outputs reference(const workload& w, kv_geometry model = small_geometry(),
                  std::int32_t vocab = 1000, std::vector<std::int32_t> eos = {}) {
  scheduler_config c = make_config({.pool_tokens = 1 << 14, .budget = 1 << 14});
  c.eos_token_ids = std::move(eos);
  return run(w, c, {}, 0, model, vocab).out;
}

void check_same_tokens(const outputs& got, const outputs& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [id, c] : want) {
    CAPTURE(id);
    const collected& g = got.at(id);
    CHECK(g.tokens == c.tokens);
    CHECK(g.status == c.status);
    CHECK(g.num_events_after_finish == 0);
  }
}

}  // namespace

TEST_CASE("a pool too small for the load preempts, and every output is unchanged") {
  const workload w = mixed(24);
  const outputs want = reference(w);
  for (bool overlap : {false, true}) {
    CAPTURE(overlap);
    scheduler_config c = make_config({.pool_tokens = 96, .budget = 32, .max_model_len = 96});
    run_result r = run(w, c, {.overlap = overlap});
    check_same_tokens(r.out, want);
    CHECK(r.counters.num_preemptions > 0);
    CHECK(r.counters.num_decode_tokens > 0);
  }
}

TEST_CASE("prompt logprobs survive preemption: one entry per prompt token, none twice") {
  workload w = mixed(12);
  for (request& r : w.requests) r.params.prompt_logprobs = 0;
  scheduler_config c = make_config({.pool_tokens = 96, .budget = 16, .max_model_len = 96});
  run_result r = run(w, c);
  CHECK(r.counters.num_preemptions > 0);
  for (const request& q : w.requests) {
    const collected& got = r.out.at(q.id);
    REQUIRE(got.prompt_logprobs.size() == q.prompt_ids.size());
    for (std::size_t i = 1; i < q.prompt_ids.size(); ++i)
      CHECK(got.prompt_logprobs[i]->id == q.prompt_ids[i]);
  }
}

TEST_CASE("a shared prefix hits the cache, skips its prefill and changes no output") {
  const workload w = mixed(8, /*shared=*/8);
  const outputs want = reference(w);
  scheduler_config c = make_config({.budget = 64, .prefix_caching = true});
  c.max_num_running = 1;  // one at a time: each later request finds the prefix cached
  run_result r = run(w, c);
  check_same_tokens(r.out, want);
  CHECK(r.counters.num_prefix_queries == 8);
  CHECK(r.counters.num_prefix_hits == 7);
  CHECK(r.counters.num_prefix_misses == 1);
  CHECK(r.counters.num_prefix_hit_tokens >= 7 * 40);
  // Bounded replay resumes 9 tokens (R) before each hit: 31 of the 40 rows are skipped.
  CHECK(r.counters.num_prefix_skipped_tokens >= 7 * 31);
  CHECK(r.counters.num_replay_tokens == 7 * 9);
  CHECK(r.replay_rows == 7 * 9);
  scheduler_config cold = c;
  cold.blocks.enable_prefix_caching = false;
  run_result miss = run(w, cold);
  CHECK(miss.rows_run - r.rows_run == r.counters.num_prefix_skipped_tokens);
}

TEST_CASE("a replay shorter than R is caught by the fake model") {
  // Prompts of the shared 40-token prefix + 1 token: each later one hits P = 40 and samples
  // at row 40, whose last layer reads that layer's window ring at 37..39.
  workload w;
  const auto prefix = prompt_tokens(999, 40);
  for (std::uint64_t id : {1, 2, 3, 4}) {
    auto p = prefix;
    p.push_back(std::int32_t(id));
    w.requests.push_back(make_request(id, p, 6));
  }
  const outputs want = reference(w);
  auto num_differing = [&](int believed_layers) {
    kv_geometry believed = small_geometry();
    believed.num_layers = believed_layers;
    scheduler_config c = make_config({.budget = 64, .prefix_caching = true}, believed);
    c.max_num_running = 1;
    run_result r = run(w, c, {}, 0, small_geometry());
    REQUIRE(r.counters.num_prefix_hits == 3);
    int n = 0;
    for (const auto& [id, col] : want) n += r.out.at(id).tokens != col.tokens;
    return n;
  };
  CHECK(num_differing(3) == 0);  // R = 9: exact
  CHECK(num_differing(2) == 3);  // R = 6: the last layer's ring is wrong at 37..39
  CHECK(num_differing(1) == 3);  // R = 3: wrong entries in the streams as well
}

TEST_CASE("snapshots make a hit resume at the boundary with no replay, exactly") {
  const workload w = mixed(8, /*shared=*/8);
  const outputs want = reference(w);
  scheduler_config c = make_config({.budget = 64,
                                    .prefix_caching = true,
                                    .replay = false,
                                    .num_snapshots = 64,
                                    .snapshot_interval = 1});
  c.max_num_running = 1;
  run_result r = run(w, c);
  check_same_tokens(r.out, want);
  CHECK(r.counters.num_prefix_hits == 7);
  CHECK(r.counters.num_snapshot_restores == 7);
  CHECK(r.counters.num_snapshot_saves > 0);
  CHECK(r.counters.num_prefix_skipped_tokens >= 7 * 40);
  // With both schemes on, the scheduler takes the later resume point (the snapshot here).
  c.blocks.enable_replay = true;
  run_result both = run(w, c);
  check_same_tokens(both.out, want);
  CHECK(both.counters.num_prefix_skipped_tokens == r.counters.num_prefix_skipped_tokens);
}

TEST_CASE("snapshots are never taken inside a bounded replay, where the slot is not exact") {
  // Request 1 generates 70 tokens: decode-time blocks are cached without snapshots. Request 2
  // continues that conversation: a hit at P = 64 with a pure replay from 55, whose chunks end
  // at the snapshot boundaries 56 (inside the replay: the slot is not exact yet) and 64.
  // Request 3 shares only 56 tokens: a snapshot saved at 56 would poison it.
  const std::vector<std::int32_t> first = prompt_tokens(7, 1);
  const outputs one = reference({.requests = {make_request(1, first, 70)}});
  std::vector<std::int32_t> chat = first;
  chat.insert(chat.end(), one.at(1).tokens.begin(), one.at(1).tokens.end());
  REQUIRE(chat.size() == 71);
  std::vector<std::int32_t> p2(chat.begin(), chat.begin() + 66),
      p3(chat.begin(), chat.begin() + 60);
  p2.push_back(5);
  p3.push_back(9);
  const workload w{
      .requests = {make_request(1, first, 70), make_request(2, p2, 3), make_request(3, p3, 3)}};
  const outputs want = reference(w);
  scheduler_config c = make_config({.budget = 5,
                                    .prefix_caching = true,
                                    .replay = true,
                                    .num_snapshots = 8,
                                    .snapshot_interval = 1});
  c.max_num_running = 1;
  run_result r = run(w, c);
  check_same_tokens(r.out, want);
  CHECK(r.counters.num_prefix_hits == 2);
  // Request 2 saves at 64, where its replay ends; request 3, replaying from 47, saves at its
  // own P = 56. Had request 2 saved at 56 mid-replay, request 3 would restore that instead.
  CHECK(r.counters.num_snapshot_saves == 2);
  CHECK(r.counters.num_snapshot_restores == 0);
  CHECK(r.counters.num_replay_tokens == 9 + 9);
}

TEST_CASE("eviction under pressure: an evicted prefix misses and still gives the same output") {
  workload w;
  for (std::uint64_t id = 1; id <= 8; ++id)
    w.requests.push_back(make_request(id, prompt_tokens(id, 40), 4));
  w.requests.push_back(make_request(9, prompt_tokens(1, 40), 4));   // request 1's prompt again
  w.requests.push_back(make_request(10, prompt_tokens(8, 40), 4));  // the last one's again
  const outputs want = reference(w);
  scheduler_config c =
      make_config({.pool_tokens = 128, .budget = 64, .max_model_len = 96, .prefix_caching = true});
  c.max_num_running = 1;
  scheduler s(c);
  fake_executor exec(small_geometry(), c.blocks.num_blocks, 0, 1000);
  outputs got;
  for (const request& q : w.requests) {
    REQUIRE(s.add_request(q).is_accepted());
    outputs one = drive(s, exec);
    got.insert(one.begin(), one.end());
    if (q.id == 9) CHECK(s.counters().num_prefix_hits == 0);   // evicted long ago
    if (q.id == 10) CHECK(s.counters().num_prefix_hits == 1);  // still cached
  }
  check_same_tokens(got, want);
  CHECK(s.blocks().num_evictions() > 0);
}

TEST_CASE("overlapped scheduling gives the tokens of sequential scheduling") {
  const workload w = mixed(20);
  const std::vector<std::int32_t> eos = {3};
  const outputs want = reference(w, small_geometry(), /*vocab=*/16, eos);  // some stop early
  int num_stopped = 0;
  for (const auto& [id, c] : want) num_stopped += c.status == sequence_status::finished_stop;
  REQUIRE(num_stopped > 0);
  for (bool scheduler_patches : {false, true}) {
    CAPTURE(scheduler_patches);
    scheduler_config c = make_config({.budget = 24});
    c.eos_token_ids = eos;
    run_result r =
        run(w, c, {.overlap = !scheduler_patches, .scheduler_patches = scheduler_patches}, 0,
            small_geometry(), 16);
    check_same_tokens(r.out, want);
    CHECK(r.counters.num_discarded_outputs > 0);  // rows planned past a stop, then dropped
    if (scheduler_patches)
      CHECK(r.placeholders < r.counters.num_decode_tokens / 2);
    else
      CHECK(r.placeholders > 0);
  }
}

TEST_CASE("two steps planned ahead: plan N, plan N+1, then apply N and N+1") {
  scheduler s(make_config({}));
  fake_executor exec(small_geometry(), s.config().blocks.num_blocks, 0, 1000);
  const auto prompt = prompt_tokens(5, 10);
  REQUIRE(s.add_request(make_request(1, prompt, 5)).is_accepted());
  step_plan p0 = s.schedule();  // prefill, samples token 0
  step_plan p1 = s.schedule();  // decode of token 0, not known yet
  REQUIRE(p1.sequences.size() == 1);
  CHECK(p1.sequences[0].has_placeholder);
  CHECK(p1.sequences[0].first_position == 10);
  CHECK(p1.sequences[0].sample_index == 1);
  step_plan p2 = s.schedule();  // and token 1, two steps ahead
  CHECK(p2.sequences[0].has_placeholder);
  CHECK(p2.sequences[0].sample_index == 2);
  const step_result r0 = exec.run(p0), r1 = exec.run(p1), r2 = exec.run(p2);
  outputs out;
  collect(out, s.apply(r0).events);
  step_plan p3 = s.schedule();
  s.patch_placeholders(p3);  // token 2 is not known yet: stays a placeholder
  CHECK(p3.sequences[0].has_placeholder);
  collect(out, s.apply(r1).events);
  collect(out, s.apply(r2).events);
  s.patch_placeholders(p3);
  CHECK_FALSE(p3.sequences[0].has_placeholder);
  collect(out, s.apply(exec.run(p3)).events);
  collect(out, s.apply(exec.run(s.schedule())).events);
  const outputs want = reference({.requests = {make_request(1, prompt, 5)}});
  CHECK(out[1].tokens == want.at(1).tokens);
  CHECK(out[1].status == sequence_status::finished_length);
  CHECK_FALSE(s.has_unfinished());
}

TEST_CASE("everything at once: arrivals over time, overlap, a small pool, prefix reuse, aborts") {
  const workload w = mixed(32, /*shared=*/12);
  const outputs want = reference(w);
  scheduler_config c = make_config({.pool_tokens = 160,
                                    .budget = 40,
                                    .max_model_len = 128,
                                    .prefix_caching = true,
                                    .num_snapshots = 3,
                                    .snapshot_interval = 2});
  c.max_prefill_chunk = 24;
  const std::set<std::uint64_t> aborted = {103, 117, 124};
  drive_options o{.overlap = true};
  o.before_step = [&](int step, scheduler& s, outputs& out) {
    if (step == 9 || step == 20 || step == 31) {
      const std::uint64_t id = *std::next(aborted.begin(), step / 11);
      if (std::optional<token_event> e = s.abort(id)) collect(out, {*e});
    }
  };
  run_result r = run(w, c, o, /*per_step=*/2);
  CHECK(r.counters.num_preemptions > 0);
  CHECK(r.counters.num_prefix_hits > 0);
  for (const auto& [id, col] : want) {
    CAPTURE(id);
    const collected& got = r.out.at(id);
    if (aborted.contains(id) && got.status == sequence_status::finished_abort) {
      // A prefix of what it would have produced.
      REQUIRE(got.tokens.size() <= col.tokens.size());
      CHECK(std::equal(got.tokens.begin(), got.tokens.end(), col.tokens.begin()));
    } else {
      CHECK(got.tokens == col.tokens);
      CHECK(got.status == col.status);
    }
  }
}
