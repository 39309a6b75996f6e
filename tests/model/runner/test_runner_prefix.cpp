// Prefix reuse through scheduler and runner: a request that shares a >= 200-token prefix with
// an earlier one hits the prefix cache, runs fewer rows (measured by the runner) and still
// produces exactly the tokens it gets alone, whether its slot comes from a snapshot or from a
// bounded replay over the shared blocks; sharing with a request still running; eviction of
// cached prefixes when the pool runs short.
#include "tests/model/runner/runner_test_util.hpp"

namespace di::test {
namespace {

/// Rows and forward time the runner spent on one batch of requests.
struct work {
  std::int64_t rows = 0;
  std::int64_t replay_rows = 0;
  double forward_seconds = 0.0;
};

/// Serves `rs` (all at once) on `runner` and returns the work it took.
work serve_batch(runtime::scheduler& s, cpu_model_runner& runner,
                 const std::vector<runtime::request>& rs, served& got) {
  const runner_stats before = runner.stats();
  add_all(s, rs);
  served more = serve(s, runner);
  got.out.insert(more.out.begin(), more.out.end());
  got.logprobs.insert(more.logprobs.begin(), more.logprobs.end());
  const runner_stats& after = runner.stats();
  return {after.num_rows - before.num_rows, after.num_replay_rows - before.num_replay_rows,
          after.forward_seconds - before.forward_seconds};
}

struct prefix_case {
  std::string name;
  std::shared_ptr<const deepseek_model> model;
  int num_snapshots = 0;           // 0: bounded replay only
  std::int64_t shared = 0;         // tokens B shares with A
  std::int64_t expect_resume = 0;  // where B's rows start
};

TEST_CASE("runner: a request sharing a long prefix hits the cache, skips prefill, same output") {
  const std::shared_ptr<const deepseek_model> golden = golden_v41(), tiny = tiny_v41();
  // v41_public: replay span R = 9 * 15 + 15 = 150; tiny-v41: 9 * 31 + 31 = 310; L = 128.
  for (const prefix_case& pc :
       {prefix_case{"v41_public, snapshot", golden, 8, 260, 256},
        prefix_case{"v41_public, bounded replay", golden, 0, 300, 256 - 150},
        prefix_case{"v41_public, replay from 0 over the shared blocks", golden, 0, 200, 0},
        prefix_case{"tiny-v41, snapshot", tiny, 8, 260, 256}}) {
    CAPTURE(pc.name);
    REQUIRE(runtime::make_kv_geometry(pc.model->layout(), 4).token_block_size() == 128);
    const runtime::request a = runner_request(1, 300, 6, 300);
    const runtime::request b = runner_request(2, 340, 6, pc.shared);
    cpu_model_runner runner(
        pc.model,
        {.kv_pool_tokens = 4096, .num_snapshots = pc.num_snapshots, .max_model_len = 512});
    runtime::scheduler s = make_scheduler(
        runner,
        {.budget = 512, .prefix_caching = true, .snapshot_interval = pc.num_snapshots ? 1 : 0});
    served got;
    const work for_a = serve_batch(s, runner, {a}, got);
    const work for_b = serve_batch(s, runner, {b}, got);
    check_equal_alone(pc.model, {a, b}, got);
    const runtime::scheduler_counters& c = s.counters();
    CHECK(c.num_prefix_hits == 1);
    CHECK(c.num_prefix_hit_tokens == (pc.shared >= 256 ? 256 : 128));
    CHECK(c.num_prefix_skipped_tokens == pc.expect_resume);
    CHECK(c.num_snapshot_restores == (pc.num_snapshots ? 1 : 0));
    // B runs its prompt from the resume point, plus one row per later output token.
    CHECK(for_b.rows == 340 - pc.expect_resume + 5);
    CHECK(for_b.replay_rows == c.num_prefix_hit_tokens - pc.expect_resume);
    CHECK(for_a.rows == 300 + 5);
    MESSAGE(pc.name, ": B ran ", for_b.rows, " rows (", for_b.replay_rows, " replay) in ",
            for_b.forward_seconds, " s of forward; A ran ", for_a.rows, " rows in ",
            for_a.forward_seconds, " s");
  }
}

/// The cases above resume tiny-v41 (replay span R = 310) at 0 or from a snapshot. Here the hit
/// is past R: B shares 500 tokens with A, so P = 384 and B resumes at 74 from a fresh slot, with
/// the Engram history rebuilt from the look-back tokens; rows 74 .. 383 are replay rows over the
/// shared blocks. Greedy A and seeded B (logprobs bitwise), whole and in 50-row chunks.
TEST_CASE("runner: tiny-v41 resumes a hit past its replay span exactly") {
  const std::shared_ptr<const deepseek_model> m = tiny_v41();
  REQUIRE(runtime::make_kv_geometry(m->layout(), 4).replay_span() == 310);
  runtime::request a = runner_request(1, 520, 6, 520);
  runtime::request b = runner_request(2, 560, 6, 500);
  a.params.logprobs = 2;
  b.params.logprobs = 2;
  b.params.temperature = 0.9;
  b.seed = 5;
  for (std::int64_t chunk : {0, 50}) {
    CAPTURE(chunk);
    cpu_model_runner runner(m, {.kv_pool_tokens = 4096, .max_model_len = 1024});
    runtime::scheduler s =
        make_scheduler(runner, {.budget = 512, .prefill_chunk = chunk, .prefix_caching = true});
    served got;
    serve_batch(s, runner, {a}, got);
    const work for_b = serve_batch(s, runner, {b}, got);
    check_equal_alone(m, {a, b}, got);
    const runtime::scheduler_counters& c = s.counters();
    CHECK(c.num_prefix_hits == 1);
    CHECK(c.num_prefix_hit_tokens == 384);
    CHECK(c.num_prefix_skipped_tokens == 384 - 310);
    CHECK(for_b.replay_rows == 310);
    CHECK(for_b.rows == 560 - 74 + 5);
  }
}

/// `r` sampled at temperature 1 with `seed` (request ids differ, the seed is the same).
runtime::request sampled(runtime::request r, std::uint64_t seed) {
  r.params.temperature = 1.0;
  r.seed = seed;
  r.params.logprobs = 1;
  return r;
}

TEST_CASE("runner: a sampled request with a cached prefix draws exactly the tokens of a cold run") {
  // The promise: same prompt + same seed -> same tokens, whether the prefix came from the cache
  // (snapshot or bounded replay) or was computed fresh, and whatever else shares the batch.
  // Prompts of 256 tokens (a whole number of token blocks: the match stops one block short so
  // the last prompt position is computed) and 300 (a partial last block).
  const std::shared_ptr<const deepseek_model> golden = golden_v41(), tiny = tiny_v41();
  for (auto [name, model, num_snapshots] :
       {std::tuple(std::string("v41_public, bounded replay"), golden, 0),
        std::tuple(std::string("v41_public, snapshot"), golden, 8),
        std::tuple(std::string("tiny-v41, replay from 0"), tiny, 0),
        std::tuple(std::string("tiny-v41, snapshot"), tiny, 8)}) {
    for (std::int64_t len : {256, 300}) {
      CAPTURE(name);
      CAPTURE(len);
      const runtime::request cold = sampled(runner_request(1, len, 8, len), 3);
      runtime::request warm = cold;  // the same prompt and seed again
      warm.id = 2;
      const runtime::request other = sampled(runner_request(3, 90, 8), 4);  // shares the batch
      cpu_model_runner runner(
          model, {.kv_pool_tokens = 4096, .num_snapshots = num_snapshots, .max_model_len = 512});
      runtime::scheduler s = make_scheduler(
          runner,
          {.budget = 512, .prefix_caching = true, .snapshot_interval = num_snapshots ? 1 : 0});
      served got;
      serve_batch(s, runner, {cold}, got);
      serve_batch(s, runner, {warm, other}, got);
      CHECK(s.counters().num_prefix_hits == 1);
      CHECK(s.counters().num_prefix_hit_tokens == (len == 256 ? 128 : 256));
      CHECK(got.out.at(2).tokens == got.out.at(1).tokens);
      const auto& lp_cold = got.logprobs.at(1);
      const auto& lp_warm = got.logprobs.at(2);
      REQUIRE(lp_cold.size() == lp_warm.size());
      for (std::size_t i = 0; i < lp_cold.size(); ++i)
        CHECK(lp_cold[i].logprob == lp_warm[i].logprob);  // bitwise, not approximately
      check_equal_alone(model, {cold, warm, other}, got);
    }
  }
}

TEST_CASE("runner: requests sharing a prefix with a running request, concurrently") {
  const std::shared_ptr<const deepseek_model> m = golden_v41();
  std::vector<runtime::request> rs;
  for (std::uint64_t i = 0; i < 4; ++i)
    rs.push_back(runner_request(10 + i, 270 + std::int64_t(i) * 7, 8, 260));
  cpu_model_runner runner(m, {.kv_pool_tokens = 8192, .num_snapshots = 4, .max_model_len = 512});
  runtime::scheduler s = make_scheduler(
      runner, {.budget = 128, .prefill_chunk = 64, .prefix_caching = true, .snapshot_interval = 1});
  REQUIRE(s.add_request(rs[0]).is_accepted());
  drive_options o{.overlap = true};
  o.before_step = [&](int step, runtime::scheduler& sch, outputs&) {
    if (step == 6)  // rs[0] has computed its first two token blocks
      for (std::size_t i = 1; i < rs.size(); ++i) REQUIRE(sch.add_request(rs[i]).is_accepted());
  };
  const served got = serve(s, runner, o);
  check_equal_alone(m, rs, got);
  CHECK(s.counters().num_prefix_hits == 3);
  CHECK(s.counters().num_prefix_skipped_tokens == 3 * 256);
}

TEST_CASE("runner: a request admitted onto a snapshot saved in the same step waits for it") {
  // The scheduler registers A's first token block (and reserves its snapshot) when it plans
  // A's first chunk, so B, admitted in that same step, restores a snapshot A saves only after
  // the forward: the runner runs B in a second forward after that save.
  const std::shared_ptr<const deepseek_model> m = golden_v41();
  const runtime::request a = runner_request(1, 300, 4, 300);
  const runtime::request b = runner_request(2, 200, 4, 160);
  cpu_model_runner runner(m, {.kv_pool_tokens = 4096, .num_snapshots = 4, .max_model_len = 512});
  runtime::scheduler s =
      make_scheduler(runner, {.budget = 512, .prefix_caching = true, .snapshot_interval = 1});
  add_all(s, {a, b});
  const served got = serve(s, runner);
  check_equal_alone(m, {a, b}, got);
  CHECK(s.counters().num_prefix_hits == 1);
  CHECK(runner.stats().num_snapshot_restores == 1);
  CHECK(runner.stats().num_extra_forwards == 1);
}

TEST_CASE("runner: a snapshot id reused in the step that restores it is not read stale") {
  // One snapshot. X (200 tokens) saves it at 128 only. Y1 and Y2 (the same prompt, unrelated to X)
  // start in one step: Y1's first chunk ends at 128 and takes snapshot 0 from X, Y2 hits Y1's block
  // and restores snapshot 0 at 128, which Y1 saves only after the forward. Snapshot 0 still holds
  // X's save at position 128: the runner used to load it at once, and Y2 continued from X's
  // slot (wrong tokens). The version in the plan names Y1's save: Y2 waits for it.
  const std::shared_ptr<const deepseek_model> m = tiny_v41();
  const runtime::request x = runner_request(1, 200, 4, 200, /*shared_seed=*/11);
  runtime::request y1 = runner_request(2, 300, 6, 300, /*shared_seed=*/12);
  runtime::request y2 = runner_request(3, 300, 6, 300, /*shared_seed=*/12);
  REQUIRE(y1.prompt_ids == y2.prompt_ids);
  y1.params.logprobs = y2.params.logprobs = 1;  // compared exactly: any other slot shows
  cpu_model_runner runner(m, {.kv_pool_tokens = 4096, .num_snapshots = 1, .max_model_len = 512});
  runtime::scheduler s = make_scheduler(
      runner, {.budget = 512, .prefix_caching = true, .replay = false, .snapshot_interval = 1});
  served got;
  serve_batch(s, runner, {x}, got);
  CHECK(runner.stats().num_snapshot_saves >= 1);
  serve_batch(s, runner, {y1, y2}, got);
  check_equal_alone(m, {x, y1, y2}, got);
  CHECK(got.out.at(2).tokens == got.out.at(3).tokens);
  CHECK(got.logprobs.at(2).at(0).logprob == got.logprobs.at(3).at(0).logprob);
  CHECK(s.counters().num_snapshot_restores == 1);
  CHECK(runner.stats().num_snapshot_restores == 1);
  CHECK(runner.stats().num_extra_forwards == 1);  // Y2 ran after Y1's save
}

/// One case of the test below: A's prompt of `a_len` tokens (a single output token when it is
/// one block: no rows in the next plan); B admitted in A's plan or (overlap) the next;
/// snapshots every `interval` token blocks.
void check_rows_not_run(std::int64_t a_len, bool overlap, int interval) {
  const std::shared_ptr<const deepseek_model> m = tiny_v41();
  const runtime::request a = runner_request(1, a_len, a_len == 128 ? 1 : 4, a_len);
  runtime::request b = runner_request(2, 200, 4, 160);
  b.params.logprobs = 1;                                      // compared exactly
  const runtime::request c = runner_request(3, 220, 4, 160);  // afterwards, the same prefix
  const auto vocab = std::int32_t(m->config().vocab_size);
  cpu_model_runner runner(m, {.kv_pool_tokens = 4096, .num_snapshots = 4, .max_model_len = 512});
  runtime::scheduler s = make_scheduler(
      runner,
      {.budget = 512, .prefix_caching = true, .replay = false, .snapshot_interval = interval});
  REQUIRE(s.add_request(a).is_accepted());
  drive_options o{.overlap = overlap};
  o.before_step = [&](int step, runtime::scheduler& sch, outputs&) {
    if (step == (overlap ? 1 : 0)) REQUIRE(sch.add_request(b).is_accepted());
  };
  bool dropped = false;
  o.before_run = [&](runtime::step_plan& plan) {
    for (runtime::scheduled_sequence& q : plan.sequences)
      if (q.seq_id == a.id && q.save_snapshot && !std::exchange(dropped, true)) {
        CHECK(q.first_position + q.num_rows() == interval * 128);
        q.token_ids[0] = vocab;
      }
  };
  served got = serve(s, runner, o);
  REQUIRE(dropped);
  const collected& failed = got.out.at(a.id);
  CHECK(failed.status == runtime::sequence_status::finished_error);
  CHECK(failed.error.find("outside the vocabulary") != std::string::npos);
  check_equal_alone(m, {b}, got);
  CHECK(s.counters().num_prefix_hits == 1);  // B's first admission; the second misses
  CHECK(s.counters().num_preemptions == 1);  // B sent back
  CHECK(runner.stats().num_snapshot_restores == 0);
  // B's own blocks and snapshots are what C finds now.
  add_all(s, {c});
  got = serve(s, runner);
  check_equal_alone(m, {c}, got);
  CHECK(s.counters().num_prefix_hits == 2);
  CHECK(runner.num_live() == 0);
}

TEST_CASE("runner: rows that did not run are never reused: who adopted them computes again") {
  // A's first chunk ends at a snapshot boundary and saves a snapshot there. B shares A's
  // first token block and is admitted onto it: in the same plan, or (overlap) in the next
  // one, planned before the first plan's result arrived. The runner does not run A's chunk
  // (a token outside the vocabulary, put into the plan), so neither A's blocks nor its save
  // were written. With snapshots every token block, B restores that save: the runner failed
  // the whole step -- "restores snapshots that no sequence of it saves" in the same plan, a
  // stale snapshot in the next (or, when A has rows there too, A's rows, which no longer
  // continue its state) -- and with it the group. With snapshots every second block,
  // B adopts A's first block without one and replays over it: B's tokens came from entries
  // never written. Now A fails alone, B's rows are thrown away, the scheduler withdraws what
  // A's rows were to write and computes B again from scratch: B gets exactly its tokens alone.
  for (const auto& [name, a_len, overlap, interval] :
       {std::tuple(std::string("B restores the snapshot, in the same plan"), 300, false, 1),
        std::tuple(std::string("B restores the snapshot, in the next plan (overlap)"), 128, true,
                   1),
        std::tuple(std::string("... and A has rows there too"), 300, true, 1),
        std::tuple(std::string("B adopts the block without a snapshot, in the same plan"), 300,
                   false, 2),
        std::tuple(std::string("B adopts the block without a snapshot, in the next plan (overlap)"),
                   300, true, 2)}) {
    CAPTURE(name);
    try {
      check_rows_not_run(a_len, overlap, interval);
    } catch (const std::exception& e) {  // the other cases still run
      FAIL_CHECK("threw: " << std::string(e.what()));
    }
  }
}

TEST_CASE("runner: cached prefixes are evicted under pressure and outputs stay exact") {
  const std::shared_ptr<const deepseek_model> m = golden_v41();
  for (int num_snapshots : {0, 4}) {
    CAPTURE(num_snapshots);
    const runtime::request a = runner_request(1, 300, 4, 300);
    const runtime::request c = runner_request(3, 380, 4);  // unrelated, needs most of the pool
    const runtime::request b = runner_request(2, 320, 4, 290);
    cpu_model_runner runner(
        m, {.kv_pool_tokens = 512, .num_snapshots = num_snapshots, .max_model_len = 512});
    runtime::scheduler s = make_scheduler(
        runner,
        {.budget = 512, .prefix_caching = true, .snapshot_interval = num_snapshots ? 1 : 0});
    served got;
    serve_batch(s, runner, {a}, got);
    CHECK(s.stats().num_cached_blocks > 0);
    serve_batch(s, runner, {c}, got);
    CHECK(s.stats().num_evictions > 0);
    serve_batch(s, runner, {b}, got);
    check_equal_alone(m, {a, c, b}, got);
    MESSAGE(s.stats().num_evictions, " token blocks evicted; B reused ",
            s.counters().num_prefix_hit_tokens, " cached tokens");
    CHECK(runner.num_live() == 0);
  }
}

}  // namespace
}  // namespace di::test
