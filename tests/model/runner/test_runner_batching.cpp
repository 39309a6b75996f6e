// Continuous batching through the runtime scheduler and the CPU model runner gives every
// request exactly the tokens (and logprobs) it gets when run alone: concurrent mixed-length
// greedy requests with chunked prefill, overlapped scheduling with placeholders, preemption
// when the KV pool is too small, and seeded sampling with penalties and logprobs.
#include "tests/model/runner/runner_test_util.hpp"

namespace di::test {
namespace {

/// Serves `rs` on a fresh runner over `m` and checks every output against the request alone.
served serve_and_check(const std::shared_ptr<const deepseek_model>& m,
                       const std::vector<runtime::request>& rs, const cpu_runner_config& pool,
                       const serving_options& so, const drive_options& o = {}) {
  cpu_model_runner runner(m, pool);
  runtime::scheduler s = make_scheduler(runner, so);
  const std::int64_t free_at_start = s.stats().num_free_blocks;
  add_all(s, rs);
  served got = serve(s, runner, o);
  check_equal_alone(m, rs, got);
  CHECK(runner.num_live() == 0);
  CHECK(s.stats().num_free_blocks + s.stats().num_cached_blocks == free_at_start);
  return got;
}

TEST_CASE("runner: concurrent mixed-length greedy requests equal each request run alone") {
  // Sequential: chunked prefill beside decodes. Overlapped: step N + 1 is planned before N's
  // result is applied, so decodes carry placeholders the runner patches with its own samples.
  for (auto [name, model, n, overlap] :
       {std::tuple(std::string("v41_public"), golden_v41(), 16, false),
        std::tuple(std::string("v41_public"), golden_v41(), 16, true),
        std::tuple(std::string("tiny-v41"), tiny_v41(), 8, true)}) {
    CAPTURE(name);
    CAPTURE(overlap);
    const std::vector<runtime::request> rs = mixed_requests(n, 150, 12);
    cpu_model_runner runner(model, {.kv_pool_tokens = 16384, .max_model_len = 512});
    runtime::scheduler s = make_scheduler(runner, {.budget = 256, .prefill_chunk = 48});
    add_all(s, rs);
    const served got = serve(s, runner, {.overlap = overlap});
    check_equal_alone(model, rs, got);
    CHECK(runner.num_live() == 0);
    CHECK(s.stats().num_free_blocks == s.stats().num_blocks);
    // Real batching: several sequences per forward, decode rows beside prefill chunks.
    CHECK(runner.stats().num_steps < s.counters().num_prefill_tokens / 48 + 12);
    CHECK(s.counters().num_decode_tokens > 0);
  }
}

// The full acceptance run, too slow for CI's two cores: `test_runner --no-skip -tc="*64*"`.
TEST_CASE("runner: 64 concurrent requests of mixed lengths equal each request run alone" *
          doctest::skip()) {
  for (auto [name, model] : {std::tuple(std::string("v41_public"), golden_v41()),
                             std::tuple(std::string("tiny-v41"), tiny_v41())}) {
    CAPTURE(name);
    std::vector<runtime::request> rs = mixed_requests(64, 300, 24, 200);
    for (std::size_t i = 1; i < rs.size(); i += 4) {  // a quarter sampled with logprobs
      rs[i].params.temperature = 0.8;
      rs[i].params.top_p = 0.95;
      rs[i].params.logprobs = 2;
    }
    cpu_model_runner runner(model,
                            {.kv_pool_tokens = 16384, .num_snapshots = 32, .max_model_len = 1024});
    runtime::scheduler s = make_scheduler(
        runner,
        {.budget = 512, .prefill_chunk = 128, .prefix_caching = true, .snapshot_interval = 1});
    add_all(s, rs);
    const served got = serve(s, runner, {.overlap = true});
    check_equal_alone(model, rs, got);
    int num_equal = 0;
    for (const runtime::request& r : rs)
      num_equal += got.out.at(r.id).tokens == alone(model, r).tokens;
    const runner_stats& st = runner.stats();
    MESSAGE(name, ": ", num_equal, "/64 equal to the request alone; ", s.counters().num_steps,
            " steps, ", st.num_rows, " rows, prefix hits ", s.counters().num_prefix_hits,
            " skipping ", s.counters().num_prefix_skipped_tokens, " tokens; forward ",
            st.forward_seconds, " s, sampling ", st.sampling_seconds, " s, bookkeeping ",
            st.bookkeeping_seconds(), " s");
  }
}

/// Sampled requests (seeded, filtered, with penalties and logprobs) among greedy ones.
std::vector<runtime::request> sampled_requests(int n) {
  std::vector<runtime::request> rs = mixed_requests(n, 120, 10);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    runtime::sampling_params& p = rs[i].params;
    rs[i].seed = 1000 + i;
    if (i % 4 == 0) continue;  // greedy
    p.temperature = 0.6 + 0.1 * double(i % 5);
    if (i % 2 == 1) p.top_k = 40;
    if (i % 3 == 1) p.top_p = 0.9;
    if (i % 3 == 2) p.min_p = 0.02;
    if (i % 5 == 1) p.repetition_penalty = 1.3;
    if (i % 5 == 2) p.presence_penalty = 0.5;
    if (i % 5 == 3) p.frequency_penalty = 0.4;
    if (i % 2 == 0) p.logprobs = 3;
    if (i % 6 == 2) p.prompt_logprobs = 2;
  }
  return rs;
}

TEST_CASE("runner: seeded sampling, penalties and logprobs equal each request run alone") {
  for (auto [name, model, n] : {std::tuple(std::string("v41_public"), golden_v41(), 12),
                                std::tuple(std::string("tiny-v41"), tiny_v41(), 5)}) {
    CAPTURE(name);
    const std::vector<runtime::request> rs = sampled_requests(n);
    serve_and_check(model, rs, {.kv_pool_tokens = 8192, .max_model_len = 512},
                    {.budget = 160, .prefill_chunk = 40}, {.overlap = true});
  }
}

/// A request whose sampling needs every earlier token (penalties count them, a grammar reads
/// the output) resuming over a cached prefix, from a snapshot or after a bounded replay: the
/// plan carries the earlier tokens (prior_tokens). Before, the runner failed such a request
/// ("resumed after a cached prefix the runner never saw"), and under overlap the placeholder
/// row planned behind that failure failed the whole executor.
TEST_CASE("runner: penalties and response_format over a cached prefix equal the request alone") {
  const std::shared_ptr<const deepseek_model> m = tiny_v41();
  for (auto [snapshots, replay] : {std::pair(true, false), std::pair(false, true)}) {
    CAPTURE(snapshots);
    cpu_model_runner runner(
        m, {.kv_pool_tokens = 16384, .num_snapshots = snapshots ? 8 : 0, .max_model_len = 1024});
    runtime::scheduler s = make_scheduler(runner, {.budget = 512,
                                                   .prefix_caching = true,
                                                   .replay = replay,
                                                   .snapshot_interval = snapshots ? 1 : 0});
    const runtime::request warm = runner_request(1, 700, 2);
    add_all(s, {warm});
    serve(s, runner, {.overlap = true});
    std::vector<runtime::request> rs;
    for (int i = 0; i < 3; ++i) {
      runtime::request r = warm;
      r.id = std::uint64_t(10 + i);
      r.params.max_tokens = 8;
      if (i == 0) r.params.frequency_penalty = 1.5;
      if (i == 1) r.params.repetition_penalty = 1.4;
      if (i == 2) {
        r.params.presence_penalty = 1.0;
        r.params.temperature = 0.9;
        r.seed = 77;
      }
      rs.push_back(std::move(r));
    }
    const std::int64_t skipped_before = s.counters().num_prefix_skipped_tokens;
    add_all(s, rs);
    const served got = serve(s, runner, {.overlap = true});
    MESSAGE("snapshots ", snapshots, ": ", s.counters().num_prefix_skipped_tokens - skipped_before,
            " prefill rows skipped, ", s.counters().num_snapshot_restores, " snapshot restores");
    CHECK(s.counters().num_prefix_skipped_tokens - skipped_before >= 3 * 128);  // past position 0
    if (snapshots) CHECK(s.counters().num_snapshot_restores > 0);
    check_equal_alone(m, rs, got);
    CHECK(runner.num_live() == 0);
  }
}

/// V4's ratio-128 stream holds 8192 tokens in a block, so 32768 tokens of pool made 4 blocks,
/// and a sequence holds one as soon as it passes 128 tokens: only 4 such sequences ran at once
/// and the rest were preempted with the pools mostly free. Every stream now holds at least
/// one block per sequence that may run (min_blocks_per_stream = max_num_running).
TEST_CASE("runner: high-ratio streams hold a block for every running sequence") {
  const std::shared_ptr<const deepseek_model> m = tiny_v4();
  std::vector<runtime::request> rs;
  for (int i = 0; i < 8; ++i) rs.push_back(runner_request(std::uint64_t(300 + i), 200, 4));
  cpu_model_runner runner(m, {.kv_pool_tokens = 32768, .min_blocks_per_stream = 8});
  for (std::int32_t n : runner.info().num_blocks) CHECK(n >= 8);
  runtime::scheduler s = make_scheduler(runner, {.budget = 2048, .max_num_running = 8});
  add_all(s, rs);
  const served got = serve(s, runner);
  check_equal_alone(m, rs, got);
  CHECK(s.counters().num_preemptions == 0);
  CHECK(runner.stats().num_steps <= 6);  // all eight in one batch: one prefill, four decodes
}

TEST_CASE("runner: min_tokens suppresses the stop tokens of the first samples") {
  const std::shared_ptr<const deepseek_model> m = golden_v41();
  runtime::request free_run = runner_request(1, 30, 4);
  const std::int32_t first = alone(m, free_run).tokens.at(0);
  runtime::request r = free_run;
  r.id = 2;
  r.params.stop_token_ids = {first};  // greedy would stop at once
  r.params.min_tokens = 2;
  serve_and_check(m, {free_run, r}, {.kv_pool_tokens = 4096, .max_model_len = 256}, {});
  CHECK(alone(m, r).tokens.at(0) != first);
  CHECK(alone(m, r).tokens.size() == 4);
}

/// Prompts of 100 .. 127 tokens growing past 128 (a second block of the ratio-2 streams),
/// half of them sampled: in a pool of 384 tokens (three ratio-2 blocks) decodes must preempt.
std::vector<runtime::request> growing_requests(int n) {
  std::vector<runtime::request> rs;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t h = runtime::random_bits(5, std::uint64_t(i));
    runtime::request r = runner_request(std::uint64_t(200 + i), 100 + std::int64_t(h % 28),
                                        10 + int((h >> 20) % 20));
    if (i % 2 == 1) {
      r.params.temperature = 0.8;
      r.params.top_k = 50;
      r.params.repetition_penalty = i % 4 == 1 ? 1.2 : 1.0;
      r.params.logprobs = 2;
    }
    rs.push_back(std::move(r));
  }
  return rs;
}

TEST_CASE("runner: preemption when the KV pool is too small keeps every output") {
  for (auto [name, model, n, overlap] :
       {std::tuple(std::string("v41_public"), golden_v41(), 8, false),
        std::tuple(std::string("v41_public"), golden_v41(), 8, true),
        std::tuple(std::string("tiny-v41"), tiny_v41(), 4, false)}) {
    CAPTURE(name);
    CAPTURE(overlap);
    const std::vector<runtime::request> rs = growing_requests(n);
    cpu_model_runner runner(model, {.kv_pool_tokens = 384, .max_model_len = 256});
    runtime::scheduler s = make_scheduler(runner, {.budget = 256, .prefill_chunk = 64});
    add_all(s, rs);
    const served got = serve(s, runner, {.overlap = overlap});
    check_equal_alone(model, rs, got);
    MESSAGE(name, ": ", s.counters().num_preemptions, " preemptions in ", s.counters().num_steps,
            " steps");
    CHECK(s.counters().num_preemptions > 0);
    CHECK(s.stats().num_free_blocks == s.stats().num_blocks);
    CHECK(runner.num_live() == 0);
  }
}

/// tiny-v4 (ratio-4 streams with overlapping windows and an indexer, ratio-128 streams, hash
/// routing): greedy and seeded requests with logprobs and prompt logprobs, chunked into 33-row
/// pieces that end off the compressors' groups, in a pool of one ratio-128 block (so at most one
/// sequence past 128 tokens runs: the others are preempted and computed again), sequentially
/// and overlapped, give bitwise the tokens and logprobs of each request alone.
TEST_CASE("runner: tiny-v4 chunked, overlapped and preempted requests equal each alone") {
  const std::shared_ptr<const deepseek_model> m = tiny_v4();
  std::vector<runtime::request> rs = mixed_requests(6, 300, 10);
  rs.push_back(runner_request(6, 290, 12));
  for (std::size_t i = 0; i < rs.size(); ++i) {
    rs[i].params.logprobs = 2;
    if (i % 2 == 1) {
      rs[i].params.temperature = 0.9;
      rs[i].seed = 40 + i;
    }
    if (i % 3 == 0) rs[i].params.prompt_logprobs = 1;
  }
  for (bool overlap : {false, true}) {
    CAPTURE(overlap);
    cpu_model_runner runner(m, {.kv_pool_tokens = 768, .max_model_len = 512});
    runtime::scheduler s = make_scheduler(runner, {.budget = 96, .prefill_chunk = 33});
    add_all(s, rs);
    const served got = serve(s, runner, {.overlap = overlap});
    check_equal_alone(m, rs, got);
    MESSAGE("tiny-v4, overlap ", overlap, ": ", s.counters().num_preemptions, " preemptions in ",
            s.counters().num_steps, " steps");
    CHECK(s.counters().num_preemptions > 0);
    CHECK(s.stats().num_free_blocks == s.stats().num_blocks);
    CHECK(runner.num_live() == 0);
  }
}

}  // namespace
}  // namespace di::test
