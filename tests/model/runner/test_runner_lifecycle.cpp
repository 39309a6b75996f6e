// Request lifecycle through scheduler and runner: aborts while queued, mid-prefill and
// mid-decode end with finish_reason abort and give every block back, while the other requests
// still get their outputs; and the runner's own checks of the step-plan protocol (a broken
// plan throws, a bad token fails only its sequence).
#include "tests/model/runner/runner_test_util.hpp"

#include <limits>

namespace di::test {
namespace {

using runtime::sequence_status;

/// Aborts `id` once `when` holds, recording the status it had.
struct abort_rule {
  std::uint64_t id = 0;
  std::function<bool(int step, sequence_status status, const collected& c)> when;
  std::optional<sequence_status> aborted_in;
};

TEST_CASE("runner: abort while queued, mid-prefill and mid-decode frees every block") {
  const std::shared_ptr<const deepseek_model> m = golden_v41();
  const std::vector<runtime::request> rs = {
      runner_request(1, 20, 40),  // aborted mid-decode
      runner_request(2, 300, 4),  // aborted mid-prefill (32-row chunks)
      runner_request(3, 30, 4),   // aborted while queued (two may run)
      runner_request(4, 40, 8)};  // runs to the end
  for (bool overlap : {false, true}) {
    CAPTURE(overlap);
    cpu_model_runner runner(m, {.kv_pool_tokens = 4096, .max_model_len = 512});
    runtime::scheduler s =
        make_scheduler(runner, {.budget = 64, .prefill_chunk = 32, .max_num_running = 2});
    const std::int64_t free_at_start = s.stats().num_free_blocks;
    add_all(s, rs);
    std::vector<abort_rule> rules = {
        {1,
         [](int, sequence_status st, const collected& c) {
           return st == sequence_status::decoding && c.tokens.size() >= 2;
         }},
        {2, [](int step, sequence_status st,
               const collected&) { return st == sequence_status::prefilling && step >= 3; }},
        {3, [](int step, sequence_status st, const collected&) {
           return st == sequence_status::queued && step >= 1;
         }}};
    drive_options o{.overlap = overlap};
    o.before_step = [&](int step, runtime::scheduler& sch, outputs& out) {
      for (abort_rule& rule : rules) {
        const std::optional<sequence_status> st = sch.status_of(rule.id);
        if (rule.aborted_in || !st || !rule.when(step, *st, out[rule.id])) continue;
        rule.aborted_in = st;
        collect(out, {*sch.abort(rule.id)});
      }
    };
    const served got = serve(s, runner, o);
    for (const abort_rule& rule : rules) {
      CAPTURE(rule.id);
      REQUIRE(rule.aborted_in.has_value());
      CHECK(got.out.at(rule.id).status == sequence_status::finished_abort);
    }
    CHECK(*rules[0].aborted_in == sequence_status::decoding);
    CHECK(*rules[1].aborted_in == sequence_status::prefilling);
    CHECK(*rules[2].aborted_in == sequence_status::queued);
    CHECK(s.counters().num_aborts == 3);
    check_equal_alone(m, {rs[3]}, got);
    CHECK(s.stats().num_free_blocks == free_at_start);
    CHECK(runner.num_live() == 0);
  }
}

/// A started sequence of `rows` tokens from position 0 with blocks for them.
runtime::step_plan first_rows(const cpu_model_runner& runner, std::uint64_t id,
                              std::vector<std::int32_t> tokens, std::int32_t first_block) {
  runtime::step_plan plan;
  runtime::sequence_start start{.seq_id = id, .num_prompt_tokens = std::int64_t(tokens.size())};
  start.params.temperature = 0.0;
  plan.started.push_back(start);
  runtime::scheduled_sequence s{.seq_id = id, .token_ids = std::move(tokens), .is_sampling = true};
  for (int st = 0; st < runner.geometry().num_streams(); ++st)
    s.new_blocks.push_back({first_block});
  plan.sequences.push_back(std::move(s));
  return plan;
}

TEST_CASE("runner: a pool of one token is refused by the setting's name") {
  // It was refused as "max_model_len 1 must be in [2, ...]", naming a setting nobody gave.
  CHECK_THROWS_WITH_AS(cpu_model_runner(golden_v41(), {.kv_pool_tokens = 1}),
                       doctest::Contains("kv.pool_tokens must be at least 2"), error);
  CHECK_NOTHROW(cpu_model_runner(golden_v41(), {.kv_pool_tokens = 2}));
}

TEST_CASE("runner: a plan that breaks the protocol throws; a bad token fails its sequence only") {
  cpu_model_runner runner(golden_v41(), {.kv_pool_tokens = 1024, .num_snapshots = 2});
  CHECK(runner.info().device == "cpu");
  CHECK(runner.info().num_snapshots == 2);
  CHECK(runner.info().num_blocks.size() == std::size_t(runner.geometry().num_streams()));

  runtime::step_plan plan = first_rows(runner, 1, {5, 6, 7}, 0);
  runtime::step_plan bad = first_rows(runner, 2, {5, 200000, 7}, 1);
  plan.started.push_back(bad.started[0]);
  plan.sequences.push_back(bad.sequences[0]);
  runtime::step_result r = runner.run(plan);
  REQUIRE(r.outputs.size() == 2);
  CHECK(r.outputs[0].error.empty());
  CHECK(r.outputs[0].token_ids.size() == 1);
  CHECK(r.outputs[1].error.find("outside the vocabulary") != std::string::npos);

  runtime::step_plan next{.step_id = 1};
  next.sequences.push_back({.seq_id = 1,
                            .first_position = 3,
                            .token_ids = {0},
                            .has_placeholder = true,
                            .is_sampling = true,
                            .sample_index = 1});
  CHECK(runner.run(next).outputs[0].error.empty());  // the placeholder became its last sample

  runtime::step_plan gap{.step_id = 2};
  gap.sequences.push_back({.seq_id = 1, .first_position = 9, .token_ids = {5}});
  CHECK_THROWS_WITH_AS(runner.run(gap), doctest::Contains("its state is at 4"), error);
  runtime::step_plan unknown{.step_id = 3};
  unknown.sequences.push_back({.seq_id = 77, .token_ids = {5}});
  CHECK_THROWS_WITH_AS(runner.run(unknown), doctest::Contains("not live"), error);
  CHECK_THROWS_WITH_AS(runner.run(first_rows(runner, 1, {5}, 2)), doctest::Contains("twice"),
                       error);
  runtime::step_plan stale = first_rows(runner, 5, {5}, 3);
  stale.sequences[0].first_position = 128;
  stale.sequences[0].num_cached_tokens = 128;
  stale.sequences[0].restore_snapshot = 1;  // never saved
  CHECK_THROWS_WITH_AS(runner.run(stale), doctest::Contains("of snapshot 1 at position 128"),
                       error);
  runtime::step_plan no_blocks{.step_id = 4, .finished = {1, 2, 5}};
  no_blocks.started.push_back({.seq_id = 6});
  no_blocks.sequences.push_back({.seq_id = 6, .token_ids = std::vector<std::int32_t>(3, 9)});
  CHECK_THROWS_WITH_AS(runner.run(no_blocks), doctest::Contains("more blocks than the plan gave"),
                       error);
}

TEST_CASE("runner: a KV pool larger than the host's memory is refused naming the key") {
  // kv.pool_tokens = 2^31 - 1 failed as a bare std::bad_alloc ("cannot load the runner: ...");
  // a pool whose arenas were each allocated had every page touched by their zeroing.
  auto m = tiny_v41();
  CHECK_THROWS_WITH_AS(
      cpu_model_runner(m, {.kv_pool_tokens = std::numeric_limits<std::int32_t>::max()}),
      doctest::Contains("kv.pool_tokens = 2147483647 needs"), di::error);
  CHECK(cpu_model_runner(m, {.kv_pool_tokens = 1024}).info().max_model_len == 1024);
}

TEST_CASE("runner: more snapshots than the host's memory holds are refused naming the key") {
  // 2^31 - 1 snapshots failed as a bare std::bad_alloc ("cannot load the runner: ...").
  auto m = tiny_v41();
  CHECK_THROWS_WITH_AS(
      cpu_model_runner(
          m, {.kv_pool_tokens = 1024, .num_snapshots = std::numeric_limits<std::int32_t>::max()}),
      doctest::Contains("kv.num_snapshots = 2147483647 needs"), di::error);
  CHECK(cpu_model_runner(m, {.kv_pool_tokens = 1024, .num_snapshots = 4}).info().num_snapshots ==
        4);
}

}  // namespace
TEST_CASE("runner: ids past num_token_ids are never sampled nor listed in logprobs") {
  // A checkpoint's head pads past its tokenizer's ids (V4: 129280 logits, 128815 ids); a
  // generation that sampled one failed in the detokenizer. Here the runner samples the first
  // 1000 ids of tiny-v41's 129280 at temperature 100 (nearly uniform over the whole head).
  auto m = tiny_v41();
  CHECK_THROWS_WITH_AS(cpu_model_runner(m, {.kv_pool_tokens = 1024, .num_token_ids = 200000}),
                       doctest::Contains("num_token_ids must be in [0, 129280]"), di::error);
  cpu_model_runner runner(m, {.kv_pool_tokens = 1024, .num_token_ids = 1000});
  CHECK(runner.num_token_ids() == 1000);
  runtime::scheduler s = make_scheduler(runner, {});
  runtime::request r = runner_request(1, 5, 60);
  for (std::int32_t& t : r.prompt_ids) t %= 1000;
  r.params.temperature = 100;
  r.params.seed = 5;
  r.params.logprobs = 20;
  r.params.prompt_logprobs = 20;
  r.params.ignore_eos = true;
  add_all(s, {r});
  served got = serve(s, runner);
  const collected& c = got.out.at(1);
  REQUIRE_MESSAGE(c.error.empty(), c.error);
  CHECK(c.tokens.size() == 60);
  CHECK(std::all_of(c.tokens.begin(), c.tokens.end(), [](std::int32_t t) { return t < 1000; }));
  REQUIRE(got.logprobs.at(1).size() == 60);
  for (const runtime::position_logprobs& p : got.logprobs.at(1)) {
    REQUIRE(p.top.size() == 20);
    for (const runtime::token_logprob& t : p.top) CHECK(t.id < 1000);
  }
  // Without the limit the same request samples past it (the test would not notice otherwise).
  cpu_model_runner full(m, {.kv_pool_tokens = 1024});
  runtime::scheduler s2 = make_scheduler(full, {});
  add_all(s2, {r});
  const collected& d = serve(s2, full).out.at(1);
  CHECK(std::any_of(d.tokens.begin(), d.tokens.end(), [](std::int32_t t) { return t >= 1000; }));
}

}  // namespace di::test
