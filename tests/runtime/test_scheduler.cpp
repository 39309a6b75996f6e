// The scheduler's step plans and events: token budget and chunked prefill, decode priority,
// admission limits, abort in every phase (free blocks back to their starting count), result
// validation, per-sequence errors and failure of everything.
#include "runtime/scheduler.hpp"
#include "tests/runtime/scheduler_test_util.hpp"

#include <doctest/doctest.h>

using namespace di::runtime;
using namespace di::test;

namespace {

/// Runs one step on `exec` and applies it; returns the plan.
step_plan step(scheduler& s, fake_executor& exec, outputs* out = nullptr) {
  step_plan plan = s.schedule();
  step_result r = exec.run(plan);
  if (!plan.sequences.empty()) {
    apply_outcome a = s.apply(r);
    REQUIRE_MESSAGE(a.is_ok(), a.error);
    if (out) collect(*out, a.events);
  }
  return plan;
}

fake_executor executor_for(const scheduler& s) {
  return fake_executor(s.config().blocks.geometry, s.config().blocks.num_blocks,
                       s.config().blocks.num_snapshots, 1000);
}

const scheduled_sequence* find_rows(const step_plan& plan, std::uint64_t id) {
  for (const scheduled_sequence& q : plan.sequences)
    if (q.seq_id == id) return &q;
  return nullptr;
}

}  // namespace

TEST_CASE("a long prompt is prefilled in chunks within the token budget") {
  scheduler s(make_config({.budget = 16}));
  fake_executor exec = executor_for(s);
  const auto prompt = prompt_tokens(1, 50);
  REQUIRE(s.add_request(make_request(1, prompt, 3)).is_accepted());
  std::int64_t next = 0;
  for (std::int64_t expect : {16, 16, 16, 2}) {
    step_plan plan = step(s, exec);
    REQUIRE(plan.sequences.size() == 1);
    const scheduled_sequence& q = plan.sequences[0];
    CHECK(plan.started.size() == (next == 0 ? 1u : 0u));
    CHECK(q.first_position == next);
    CHECK(q.num_rows() == expect);
    CHECK(std::equal(q.token_ids.begin(), q.token_ids.end(), prompt.begin() + next));
    CHECK(q.is_sampling == (next + expect == 50));
    next += expect;
  }
  CHECK(s.status_of(1) == sequence_status::decoding);
  CHECK(s.counters().num_prefill_tokens == 50);
  step_plan decode = step(s, exec);
  REQUIRE(decode.sequences.size() == 1);
  CHECK(decode.sequences[0].first_position == 50);
  CHECK(decode.sequences[0].num_rows() == 1);
  CHECK(decode.sequences[0].sample_index == 1);
  CHECK(s.counters().num_decode_tokens == 1);
}

TEST_CASE("max_prefill_chunk caps a chunk below the budget") {
  scheduler_config c = make_config({.budget = 64});
  c.max_prefill_chunk = 10;
  scheduler s(c);
  fake_executor exec = executor_for(s);
  REQUIRE(s.add_request(make_request(1, prompt_tokens(2, 25), 2)).is_accepted());
  CHECK(step(s, exec).num_rows() == 10);
  CHECK(step(s, exec).num_rows() == 10);
  CHECK(step(s, exec).num_rows() == 5);
}

TEST_CASE("running decodes are scheduled before prefill chunks, even older ones") {
  scheduler_config c = make_config({.budget = 10});
  c.max_prefill_chunk = 8;
  scheduler s(c);
  fake_executor exec = executor_for(s);
  REQUIRE(s.add_request(make_request(1, prompt_tokens(3, 30), 5)).is_accepted());  // older, long
  REQUIRE(s.add_request(make_request(2, prompt_tokens(4, 2), 5)).is_accepted());
  step_plan first = step(s, exec);
  CHECK(find_rows(first, 1)->num_rows() == 8);
  CHECK(find_rows(first, 2)->num_rows() == 2);  // its whole prompt: decoding next
  step_plan second = step(s, exec);
  REQUIRE(second.sequences.size() == 2);
  CHECK(second.sequences[0].seq_id == 2);  // the decode comes first
  CHECK(second.sequences[0].num_rows() == 1);
  CHECK(second.sequences[1].seq_id == 1);
  CHECK(second.sequences[1].num_rows() == 8);
  // Decodes alone can use up the budget: then no prefill runs.
  scheduler tight(make_config({.budget = 2}));
  fake_executor exec2 = executor_for(tight);
  for (std::uint64_t id : {1, 2})
    REQUIRE(tight.add_request(make_request(id, {5}, 9)).is_accepted());
  step(tight, exec2);
  REQUIRE(tight.add_request(make_request(3, prompt_tokens(5, 10), 2)).is_accepted());
  step_plan p = step(tight, exec2);
  CHECK(p.sequences.size() == 2);
  CHECK_FALSE(find_rows(p, 3));
  CHECK(tight.status_of(3) == sequence_status::queued);
}

TEST_CASE("beyond the admission limits add_request refuses at once and changes nothing") {
  scheduler_config c = make_config({.max_model_len = 64});
  c.max_num_queued = 2;
  c.max_num_running = 1;
  scheduler s(c);
  CHECK(s.add_request(make_request(1, prompt_tokens(1, 5), 4)).is_accepted());
  CHECK(s.add_request(make_request(2, prompt_tokens(2, 5), 4)).is_accepted());
  CHECK(s.add_request(make_request(3, prompt_tokens(3, 1), 4)).is_accepted());
  // Three wait; the one free batch slot takes one at the next step, so two wait for a slot.
  admission_result full = s.add_request(make_request(4, prompt_tokens(4, 1), 4));
  CHECK(full.status == admission_status::queue_full);
  CHECK(full.message == "2 requests are already waiting for a batch slot (the limit)");
  CHECK(s.num_waiting() == 3);
  CHECK_FALSE(s.status_of(4));
  s.schedule();  // request 1 starts and fills the batch: the other two still wait for a slot
  CHECK(s.num_waiting() == 2);
  CHECK(s.add_request(make_request(4, prompt_tokens(4, 1), 4)).status ==
        admission_status::queue_full);
  CHECK(s.counters().num_refused == 2);

  // max_num_queued = 0: no waiting line, the free batch slots only (it refused everything,
  // an idle group included: "0 requests are already waiting ... (the limit)")
  scheduler_config none = c;
  none.max_num_queued = 0;
  none.max_num_running = 2;
  scheduler z(none);
  CHECK(z.add_request(make_request(1, prompt_tokens(1, 3), 4)).is_accepted());
  CHECK(z.add_request(make_request(2, prompt_tokens(2, 3), 4)).is_accepted());
  CHECK(z.add_request(make_request(3, prompt_tokens(3, 3), 4)).status ==
        admission_status::queue_full);

  c.max_num_queued = 100;
  c.max_queued_tokens = 25;
  scheduler t(c);
  CHECK(t.add_request(make_request(3, prompt_tokens(3, 20), 4)).is_accepted());
  CHECK(t.add_request(make_request(4, prompt_tokens(4, 6), 4)).status ==
        admission_status::queued_tokens_full);
  CHECK(t.add_request(make_request(4, prompt_tokens(4, 5), 4)).is_accepted());
  CHECK(t.add_request(make_request(3, {1}, 4)).status == admission_status::duplicate_id);
  // Each refusal says what kind it is (and which field), as data: failure_of, param.
  admission_result r = t.add_request(make_request(7, prompt_tokens(7, 6), 4));
  CHECK(failure_of(r.status) == failure_kind::overloaded);
  CHECK(r.param.empty());
  r = t.add_request(make_request(9, {}, 4));
  CHECK(r.status == admission_status::invalid_request);
  CHECK(failure_of(r.status) == failure_kind::invalid);
  CHECK(r.param == "prompt");
  r = t.add_request(make_request(9, prompt_tokens(9, 64), 4));
  CHECK(r.status == admission_status::too_long);
  CHECK(r.param == "prompt");
  // Longer than the waiting requests may hold: never admissible, so no "retry later".
  r = t.add_request(make_request(9, prompt_tokens(9, 26), 4));
  CHECK(r.status == admission_status::too_long);
  CHECK(failure_of(r.status) == failure_kind::invalid);
  CHECK(r.message.find("scheduler.max_queued_tokens") != std::string::npos);
  // min_tokens past what the context leaves after the prompt (64 - 20): never met, with or
  // without max_tokens; at the limit it is accepted.
  scheduler u(make_config({.max_model_len = 64}));
  request greedy = make_request(11, prompt_tokens(11, 20), 4);
  greedy.params.max_tokens.reset();
  greedy.params.min_tokens = 45;
  r = u.add_request(greedy);
  CHECK(r.status == admission_status::invalid_request);
  CHECK(r.param == "min_tokens");
  CHECK(r.message ==
        "min_tokens 45 is more than the 44 tokens the context leaves after a 20-token prompt "
        "(max_model_len 64)");
  greedy.params.max_tokens = 100;  // above it: the same refusal
  CHECK(u.add_request(greedy).param == "min_tokens");
  greedy.params.max_tokens.reset();
  greedy.params.min_tokens = 44;
  CHECK(u.add_request(greedy).is_accepted());
  request bad_stop = make_request(9, {1}, 4);
  bad_stop.params.stop = {""};
  r = t.add_request(bad_stop);
  CHECK(r.status == admission_status::invalid_request);
  CHECK(r.message == "stop strings must not be empty");
  CHECK(r.param == "stop");
  bad_stop.params.stop = {"ok", "\xff\xfe"};  // output is valid UTF-8: it could never match
  r = t.add_request(bad_stop);
  CHECK(r.status == admission_status::invalid_request);
  CHECK(r.message == "stop strings must be valid UTF-8 (byte 0xFF at offset 0)");
  CHECK(r.param == "stop");
  bad_stop.params.stop = {"\xc3\xa9\xed\xa0\x80"};  // é, then a surrogate's encoding
  CHECK(t.add_request(bad_stop).message ==
        "stop strings must be valid UTF-8 (byte 0xED at offset 2)");
  request zero = make_request(9, {1}, 4);
  zero.params.max_tokens = 0;
  r = t.add_request(zero);
  CHECK(r.status == admission_status::invalid_request);
  CHECK(r.param == "max_tokens");
  CHECK(failure_of(admission_status::unavailable) == failure_kind::unavailable);
  CHECK(t.counters().num_refused == 10);
  CHECK(t.num_waiting() == 2);
  CHECK_FALSE(t.status_of(9));
}

TEST_CASE("a burst between two steps is not refused while batch slots are free") {
  // Arrivals wait until the next step plans them; those the free slots will take do not count
  // against max_num_queued, so an idle server takes a burst of max_num_running + max_num_queued.
  scheduler_config c = make_config({});
  c.max_num_running = 4;
  c.max_num_queued = 2;
  scheduler s(c);
  for (std::uint64_t id = 1; id <= 6; ++id)
    CHECK(s.add_request(make_request(id, prompt_tokens(id, 3), 4)).is_accepted());
  CHECK(s.add_request(make_request(7, prompt_tokens(7, 3), 4)).status ==
        admission_status::queue_full);
  const step_plan p = s.schedule();
  CHECK(p.sequences.size() == 4);
  CHECK(s.num_running() == 4);
  CHECK(s.num_waiting() == 2);
  CHECK(s.add_request(make_request(7, prompt_tokens(7, 3), 4)).status ==
        admission_status::queue_full);
  CHECK(s.abort(1));  // a slot frees: one more may wait beyond the two
  CHECK(s.add_request(make_request(7, prompt_tokens(7, 3), 4)).is_accepted());
  CHECK(s.add_request(make_request(8, prompt_tokens(8, 3), 4)).status ==
        admission_status::queue_full);
}

TEST_CASE("max_num_running bounds the batch; the rest wait their turn") {
  scheduler_config c = make_config({});
  c.max_num_running = 1;
  scheduler s(c);
  fake_executor exec = executor_for(s);
  REQUIRE(s.add_request(make_request(1, {1, 2}, 2)).is_accepted());
  REQUIRE(s.add_request(make_request(2, {3, 4}, 2)).is_accepted());
  step(s, exec);
  CHECK(s.num_running() == 1);
  CHECK(s.status_of(2) == sequence_status::queued);
  outputs out = drive(s, exec);
  CHECK(out[1].status == sequence_status::finished_length);
  CHECK(out[2].status == sequence_status::finished_length);
}

TEST_CASE("a pool too small for max_model_len is a configuration error") {
  CHECK_THROWS_WITH(scheduler(make_config({.pool_tokens = 32, .max_model_len = 64})),
                    "scheduler: max_model_len 64 needs 16 blocks of KV stream 0, the pool has 8");
}

TEST_CASE("abort in every phase frees everything it held") {
  for (bool caching : {false, true}) {
    CAPTURE(caching);
    scheduler_config c = make_config({.budget = 8, .prefix_caching = caching});
    c.max_num_running = 2;
    scheduler s(c);
    fake_executor exec = executor_for(s);
    const scheduler_stats start = s.stats();
    REQUIRE(s.add_request(make_request(1, prompt_tokens(1, 3), 50)).is_accepted());  // decodes
    REQUIRE(s.add_request(make_request(2, prompt_tokens(2, 30), 5)).is_accepted());  // prefills
    REQUIRE(s.add_request(make_request(3, prompt_tokens(3, 5), 5)).is_accepted());   // queued
    step(s, exec);
    step(s, exec);
    CHECK(s.status_of(1) == sequence_status::decoding);
    CHECK(s.status_of(2) == sequence_status::prefilling);
    CHECK(s.status_of(3) == sequence_status::queued);
    CHECK(s.stats().num_used_blocks > 0);
    for (std::uint64_t id : {3, 2}) {
      std::optional<token_event> e = s.abort(id);
      REQUIRE(e);
      CHECK(e->status == sequence_status::finished_abort);
      CHECK_FALSE(s.status_of(id));
    }
    // Mid-decode with its next step in flight: that step's output is dropped.
    step_plan inflight = s.schedule();
    REQUIRE(find_rows(inflight, 1));
    CHECK(inflight.finished == std::vector<std::uint64_t>{3, 2});  // executors drop them
    step_result r = exec.run(inflight);
    CHECK(s.abort(1)->status == sequence_status::finished_abort);
    CHECK_FALSE(s.abort(1));
    CHECK_FALSE(s.abort(77));
    apply_outcome a = s.apply(r);
    CHECK(a.is_ok());
    CHECK(a.events.empty());
    CHECK(s.counters().num_discarded_outputs == 1);
    CHECK(s.counters().num_aborts == 3);
    CHECK_FALSE(s.has_unfinished());
    const scheduler_stats end = s.stats();
    CHECK(end.num_used_blocks == 0);
    if (caching) {
      CHECK(end.num_free_blocks + end.num_cached_blocks == start.num_free_blocks);
    } else {
      CHECK(end.num_free_blocks == start.num_free_blocks);
    }
    step_plan next = s.schedule();
    CHECK(next.finished == std::vector<std::uint64_t>{1});
    exec.run(next);
    CHECK(exec.num_live() == 0);
  }
}

TEST_CASE("a malformed result is rejected and changes nothing") {
  scheduler s(make_config({}));
  fake_executor exec = executor_for(s);
  REQUIRE(s.add_request(make_request(1, {1, 2, 3}, 4)).is_accepted());
  CHECK(s.apply(step_result{.step_id = 0}).error == "step result 0: no step is awaiting a result");
  step_plan plan = s.schedule();
  step_result good = exec.run(plan);
  step_result wrong_step = good;
  wrong_step.step_id = 5;
  CHECK(s.apply(wrong_step).error == "step result 5: step 0 is the next awaiting a result");
  step_result two_tokens = good;
  two_tokens.outputs[0].token_ids.push_back(1);
  CHECK_FALSE(s.apply(two_tokens).is_ok());
  step_result other_seq = good;
  other_seq.outputs[0].seq_id = 2;
  CHECK_FALSE(s.apply(other_seq).is_ok());
  CHECK(s.num_in_flight() == 1);
  apply_outcome ok = s.apply(good);
  REQUIRE(ok.is_ok());
  REQUIRE(ok.events.size() == 1);
  CHECK(ok.events[0].token_ids == good.outputs[0].token_ids);
}

TEST_CASE("a failed row ends only its own sequence") {
  scheduler s(make_config({}));
  fake_executor exec = executor_for(s);
  REQUIRE(s.add_request(make_request(1, {1, 2}, 4)).is_accepted());
  REQUIRE(s.add_request(make_request(2, {3, 4}, 4)).is_accepted());
  step_plan plan = s.schedule();
  step_result r = exec.run(plan);
  r.outputs[0].token_ids.clear();
  r.outputs[0].error = "logits of row 1 are not finite";
  apply_outcome a = s.apply(r);
  REQUIRE(a.is_ok());
  REQUIRE(a.events.size() == 2);
  CHECK(a.events[0].status == sequence_status::finished_error);
  CHECK(a.events[0].error == "logits of row 1 are not finite");
  CHECK(a.events[1].status == sequence_status::decoding);
  CHECK(s.counters().num_errors == 1);
  CHECK(s.status_of(2) == sequence_status::decoding);
}

TEST_CASE("fail_all ends every request with the error and returns every block") {
  scheduler s(make_config({.budget = 8, .prefix_caching = true}));
  fake_executor exec = executor_for(s);
  const std::int64_t free_at_start = s.stats().num_free_blocks;
  for (std::uint64_t id : {1, 2, 3})
    REQUIRE(s.add_request(make_request(id, prompt_tokens(id, 12), 9)).is_accepted());
  step(s, exec);
  s.schedule();  // a step in flight when the executor dies
  std::vector<token_event> events =
      s.fail_all("executor on node 1 is down", failure_kind::unavailable);
  REQUIRE(events.size() == 3);
  for (const token_event& e : events) {
    CHECK(e.status == sequence_status::finished_error);
    CHECK(e.error == "executor on node 1 is down");
    CHECK(e.failure == failure_kind::unavailable);
  }
  CHECK_FALSE(s.has_unfinished());
  CHECK(s.stats().num_free_blocks == free_at_start);
}

TEST_CASE("prompt logprobs arrive once per prompt token, across chunks, never from reused blocks") {
  scheduler s(make_config({.budget = 8, .prefix_caching = true}));
  fake_executor exec = executor_for(s);
  const auto prompt = prompt_tokens(11, 21);
  REQUIRE(s.add_request(make_request(1, prompt, 2)).is_accepted());  // caches the prompt
  drive(s, exec);
  request r = make_request(2, prompt, 3);
  r.params.prompt_logprobs = 1;
  REQUIRE(s.add_request(r).is_accepted());
  const std::int64_t rows_before = exec.num_rows_run();
  outputs out = drive(s, exec);
  const collected& c = out[2];
  REQUIRE(c.prompt_logprobs.size() == prompt.size());
  CHECK_FALSE(c.prompt_logprobs[0]);
  for (std::size_t i = 1; i < prompt.size(); ++i) {
    REQUIRE(c.prompt_logprobs[i]);
    CHECK(c.prompt_logprobs[i]->id == prompt[i]);
  }
  // No reuse for it: every prompt row ran (plus two decode rows).
  CHECK(exec.num_rows_run() - rows_before == 21 + 2);
}

TEST_CASE("rows that did not run: their blocks and snapshot are withdrawn, B on them restarts") {
  // Plan 0: A's first chunk ends at the snapshot boundary 8 and reserves snapshot 0; B, which
  // shares A's first token block, is admitted onto it and that snapshot in the same plan.
  // Neither runs: A fails before the forward (an error), and B's restore waits for a save that
  // never happens (not_run, no error). With overlap, plan 1 (both again) is planned before
  // that. B read A's block, never written, so it starts again even without the snapshot.
  const std::vector<std::int32_t> x = prompt_tokens(1, 20);
  std::vector<std::int32_t> y(x.begin(), x.begin() + 12);
  for (std::int32_t t : prompt_tokens(2, 6)) y.push_back(t);
  const config_options o{.budget = 64,
                         .prefix_caching = true,
                         .replay = false,
                         .num_snapshots = 2,
                         .snapshot_interval = 1};
  scheduler alone(make_config(o));  // B by itself: what it must still produce
  fake_executor alone_exec = executor_for(alone);
  REQUIRE(alone.add_request(make_request(2, y, 4)).is_accepted());
  const outputs want = drive(alone, alone_exec);
  for (bool overlap : {false, true}) {
    CAPTURE(overlap);
    scheduler s(make_config(o));
    const std::int64_t free_at_start = s.stats().num_free_blocks;
    REQUIRE(s.add_request(make_request(1, x, 4)).is_accepted());
    REQUIRE(s.add_request(make_request(2, y, 4)).is_accepted());
    const step_plan p0 = s.schedule();
    const scheduled_sequence* a0 = find_rows(p0, 1);
    const scheduled_sequence* b0 = find_rows(p0, 2);
    REQUIRE(a0);
    REQUIRE(b0);
    CHECK(a0->save_snapshot == 0);
    CHECK(b0->restore_snapshot == 0);
    CHECK(b0->first_position == 8);
    CHECK(s.blocks().num_snapshots_used() == 2);  // B reserves one at 16 too
    step_result r0{.step_id = p0.step_id};
    for (const scheduled_sequence& q : p0.sequences)
      r0.outputs.push_back({.seq_id = q.seq_id, .not_run = true});
    r0.outputs[0].error = "token id 5000 is outside the vocabulary [0, 1000)";
    std::optional<step_plan> p1;
    if (overlap) {
      p1 = s.schedule();
      CHECK(find_rows(*p1, 1));
      CHECK(find_rows(*p1, 2));
    }
    apply_outcome a = s.apply(r0);
    REQUIRE_MESSAGE(a.is_ok(), a.error);
    REQUIRE(a.events.size() == 1);  // B goes back to wait silently
    CHECK(a.events[0].request_id == 1);
    CHECK(a.events[0].status == sequence_status::finished_error);
    CHECK(s.status_of(2) == sequence_status::preempted);
    CHECK(s.counters().num_preemptions == 1);
    if (p1) {  // the executor skips both there too; the scheduler discards both outputs
      step_result r1{.step_id = p1->step_id};
      for (const scheduled_sequence& q : p1->sequences)
        r1.outputs.push_back({.seq_id = q.seq_id, .not_run = true});
      r1.outputs[0].error = "sequence 1 did not run in an earlier step";
      a = s.apply(r1);
      REQUIRE_MESSAGE(a.is_ok(), a.error);
      CHECK(a.events.empty());
    }
    // B's outputs: plan 0's (B had started again already: it holds A's block), plan 1's.
    CHECK(s.counters().num_discarded_outputs == (overlap ? 3 : 1));
    // Nothing those rows were to write is offered any more.
    CHECK(s.blocks().num_cached_entries() == 0);
    CHECK(s.blocks().num_snapshots_used() == 0);
    CHECK(s.longest_cached_prefix(y) == 0);

    fake_executor exec = executor_for(s);
    outputs out;
    const step_plan next = step(s, exec, &out);  // executors drop A and B; B waits a plan
    CHECK(next.finished == std::vector<std::uint64_t>{1});
    CHECK(next.preempted == std::vector<std::uint64_t>{2});
    CHECK_FALSE(find_rows(next, 2));
    const step_plan again = step(s, exec, &out);  // B from scratch
    const scheduled_sequence* b = find_rows(again, 2);
    REQUIRE(b);
    CHECK(b->first_position == 0);
    CHECK_FALSE(b->restore_snapshot);
    const outputs rest = drive(s, exec);
    collected got = out[2];
    const collected& tail = rest.at(2);
    got.tokens.insert(got.tokens.end(), tail.tokens.begin(), tail.tokens.end());
    CHECK(got.tokens == want.at(2).tokens);
    CHECK(tail.status == sequence_status::finished_length);
    CHECK(s.stats().num_used_blocks == 0);
    CHECK(s.stats().num_free_blocks + s.stats().num_cached_blocks == free_at_start);
  }
}

TEST_CASE("the router's probe counts what an admission reuses: a prompt's last token runs") {
  // A prompt of two whole token blocks (8 tokens each), all cached: its admission reuses the
  // first block only (the last token must run for its logits), but the probe answered 16, so
  // the router sent such a prompt to this group by affinity for no reuse at all (8 tokens:
  // probe 8, reuse 0).
  scheduler s(make_config({.budget = 64, .prefix_caching = true}));
  fake_executor exec = executor_for(s);
  const std::vector<std::int32_t> x = prompt_tokens(7, 16);
  REQUIRE(s.add_request(make_request(1, x, 2)).is_accepted());
  drive(s, exec);
  const std::vector<std::int32_t> one(x.begin(), x.begin() + 8);
  std::vector<std::int32_t> longer = x;
  longer.push_back(3);
  CHECK(s.longest_cached_prefix(one) == 0);
  CHECK(s.longest_cached_prefix(x) == 8);
  CHECK(s.longest_cached_prefix(longer) == 16);
  std::uint64_t id = 2;
  for (const auto& p : {one, x, longer}) {
    const std::int64_t probe = s.longest_cached_prefix(p);
    REQUIRE(s.add_request(make_request(id, p, 1)).is_accepted());
    const step_plan plan = s.schedule();
    const scheduled_sequence* rows = find_rows(plan, id);
    REQUIRE(rows);
    CHECK(rows->num_cached_tokens == probe);
    CHECK(s.abort(id)->status == sequence_status::finished_abort);
    ++id;
  }
}

TEST_CASE("a restore of a snapshot whose save did not run starts again over the cached blocks") {
  // X computes token block [0, 8) and snapshot 0 there; Y's save evicts that snapshot (one
  // slot), X's block stays cached. A adopts it, resumes at 0 (no replay, no snapshot) and
  // saves snapshot 0 for it at 8; B, admitted in the same plan, restores that save. A's rows
  // do not run: the block is fine (X wrote it), the snapshot is not. B registers no block of
  // its own, so only its not_run output sends it back: it starts over from X's block.
  const config_options o{.budget = 64,
                         .prefix_caching = true,
                         .replay = false,
                         .num_snapshots = 1,
                         .snapshot_interval = 1};
  const std::vector<std::int32_t> x = prompt_tokens(1, 12);
  std::vector<std::int32_t> a_prompt = x, b_prompt(x.begin(), x.end());
  for (std::int32_t t : prompt_tokens(3, 8)) a_prompt.push_back(t);
  for (std::int32_t t : prompt_tokens(4, 2)) b_prompt.push_back(t);
  scheduler alone(make_config(o));
  fake_executor alone_exec = executor_for(alone);
  REQUIRE(alone.add_request(make_request(2, b_prompt, 4)).is_accepted());
  const outputs want = drive(alone, alone_exec);

  scheduler s(make_config(o));
  fake_executor exec = executor_for(s);
  REQUIRE(s.add_request(make_request(10, x, 2)).is_accepted());
  drive(s, exec);
  REQUIRE(s.add_request(make_request(11, prompt_tokens(5, 12), 2)).is_accepted());
  drive(s, exec);
  CHECK(s.blocks().num_snapshot_evictions() == 1);
  CHECK(s.longest_cached_prefix(b_prompt) == 8);
  REQUIRE(s.add_request(make_request(1, a_prompt, 4)).is_accepted());
  REQUIRE(s.add_request(make_request(2, b_prompt, 4)).is_accepted());
  const step_plan p0 = s.schedule();
  const scheduled_sequence* a0 = find_rows(p0, 1);
  const scheduled_sequence* b0 = find_rows(p0, 2);
  REQUIRE(a0);
  REQUIRE(b0);
  CHECK(a0->first_position == 0);
  CHECK(a0->save_snapshot == 0);
  CHECK(b0->restore_snapshot == 0);
  CHECK(b0->first_position == 8);
  step_result r0{.step_id = p0.step_id};
  for (const scheduled_sequence& q : p0.sequences)
    r0.outputs.push_back({.seq_id = q.seq_id, .not_run = true});
  r0.outputs[0].error = "token id 5000 is outside the vocabulary [0, 1000)";
  const apply_outcome a = s.apply(r0);
  REQUIRE_MESSAGE(a.is_ok(), a.error);
  REQUIRE(a.events.size() == 1);
  CHECK(a.events[0].status == sequence_status::finished_error);
  CHECK(s.status_of(2) == sequence_status::preempted);
  CHECK(s.counters().num_discarded_outputs == 0);
  CHECK(s.blocks().num_snapshots_used() == 0);  // A's save is withdrawn, X's block is not
  CHECK(s.longest_cached_prefix(b_prompt) == 8);

  outputs out;
  const step_plan next = step(s, exec, &out);
  CHECK(next.preempted == std::vector<std::uint64_t>{2});
  const step_plan again = step(s, exec, &out);
  const scheduled_sequence* b = find_rows(again, 2);
  REQUIRE(b);
  CHECK(b->first_position == 0);  // over X's cached block, as replay rows
  CHECK(b->num_cached_tokens == 8);
  CHECK_FALSE(b->restore_snapshot);
  const outputs rest = drive(s, exec);
  std::vector<std::int32_t> tokens = out[2].tokens;
  tokens.insert(tokens.end(), rest.at(2).tokens.begin(), rest.at(2).tokens.end());
  CHECK(tokens == want.at(2).tokens);
}
