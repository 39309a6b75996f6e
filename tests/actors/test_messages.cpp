// Messages survive CAF's binary serialization field for field (optional fields included), and
// malformed bytes from the network give an error, never a crash or a huge allocation.
#include "common/error.hpp"
#include "tests/actors/actor_test_util.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

namespace di::test {

namespace {

template <class T>
std::vector<char> save(caf::actor_system& sys, T value) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(sink(value));
  return buf;
}

template <class T>
caf::error load(caf::actor_system& sys, const std::vector<char>& buf, T& out) {
  caf::binary_deserializer source{sys, buf};
  return source(out);
}

runtime::step_plan sample_plan() {
  runtime::step_plan p{.step_id = 42, .finished = {1, 2}, .preempted = {3}};
  runtime::sequence_start s{.seq_id = 9, .seed = 77, .num_prompt_tokens = 5, .stop_token_ids = {1}};
  s.params.seed = 123;
  s.params.max_tokens = 16;
  s.params.logprobs = 3;
  s.params.stop = {"\n\n"};
  s.params.response_format = "regex:(yes|no)!";
  p.started.push_back(s);
  runtime::scheduled_sequence q{.seq_id = 9, .first_position = 128, .token_ids = {0, 5, 6},
                                .has_placeholder = true, .num_cached_tokens = 128, .lookback_tokens = {4},
                                .restore_snapshot = 2, .new_blocks = {{7, 8}, {}}, .is_sampling = true,
                                .sample_index = 3, .prompt_logprob_rows = {1}, .prompt_logprob_tokens = {6}};
  p.sequences.push_back(q);
  return p;
}

}  // namespace

TEST_CASE("a step plan round-trips with its optional fields") {
  test_system ts;
  const runtime::step_plan p = sample_plan();
  actors::run_step out;
  REQUIRE_FALSE(load(ts.sys, save(ts.sys, actors::run_step{p, 5}), out));
  const runtime::step_plan& q = out.plan;
  CHECK(q.step_id == 42);
  CHECK(q.finished == p.finished);
  CHECK(q.preempted == p.preempted);
  REQUIRE(q.started.size() == 1);
  CHECK(q.started[0].params.seed == std::optional<std::uint64_t>(123));
  CHECK(q.started[0].params.max_tokens == std::optional<int>(16));
  CHECK(q.started[0].params.logprobs == std::optional<int>(3));
  CHECK_FALSE(q.started[0].params.prompt_logprobs.has_value());
  CHECK(q.started[0].params.stop == p.started[0].params.stop);
  CHECK(q.started[0].params.response_format == "regex:(yes|no)!");  // lost once: the grammar
  REQUIRE(q.sequences.size() == 1);
  const runtime::scheduled_sequence& s = q.sequences[0];
  CHECK(s.token_ids == p.sequences[0].token_ids);
  CHECK(s.has_placeholder);
  CHECK(s.restore_snapshot == std::optional<std::int32_t>(2));
  CHECK_FALSE(s.save_snapshot.has_value());
  CHECK(s.new_blocks == p.sequences[0].new_blocks);
  CHECK(s.sample_index == 3);
  CHECK(out.sent_ns == 5);
}

TEST_CASE("token events keep null prompt-logprob entries and the stop token") {
  test_system ts;
  runtime::token_event e{.request_id = 5, .token_ids = {10, 11}, .text = "hi"};
  e.prompt_logprobs = {std::nullopt, runtime::position_logprobs{.id = 3, .logprob = -1.5f, .rank = 2,
                                                                 .top = {{3, -1.5f}, {4, -2.0f}}}};
  e.status = runtime::sequence_status::finished_stop;
  e.stop_token = 1;
  actors::client_events out;
  REQUIRE_FALSE(load(ts.sys, save(ts.sys, actors::client_events{{e}}), out));
  REQUIRE(out.events.size() == 1);
  const runtime::token_event& f = out.events[0];
  CHECK(f.token_ids == e.token_ids);
  CHECK(f.text == "hi");
  REQUIRE(f.prompt_logprobs.size() == 2);
  CHECK_FALSE(f.prompt_logprobs[0].has_value());
  REQUIRE(f.prompt_logprobs[1].has_value());
  CHECK(f.prompt_logprobs[1]->top.size() == 2);
  CHECK(f.status == runtime::sequence_status::finished_stop);
  CHECK(f.stop_token == std::optional<std::int32_t>(1));
}

TEST_CASE("a failure's kind and blamed field travel with refusals, results and events") {
  test_system ts;
  actors::submit_reply r{.accepted = false,
                         .error = "top_p must be in (0, 1], got 2",
                         .kind = runtime::failure_kind::invalid,
                         .param = "top_p"};
  actors::submit_reply r2;
  REQUIRE_FALSE(load(ts.sys, save(ts.sys, r), r2));
  CHECK(r2.kind == runtime::failure_kind::invalid);
  CHECK(r2.param == "top_p");
  runtime::token_event e{.request_id = 1,
                         .status = runtime::sequence_status::finished_error,
                         .error = "response_format: the grammar refuses output token 7",
                         .failure = runtime::failure_kind::invalid,
                         .failure_param = "response_format"};
  actors::client_events out;
  REQUIRE_FALSE(load(ts.sys, save(ts.sys, actors::client_events{{e}}), out));
  REQUIRE(out.events.size() == 1);
  CHECK(out.events[0].failure == runtime::failure_kind::invalid);
  CHECK(out.events[0].failure_param == "response_format");
  runtime::admission_result a{runtime::admission_status::too_long, "long", "prompt"};
  runtime::admission_result a2;
  REQUIRE_FALSE(load(ts.sys, save(ts.sys, a), a2));
  CHECK(a2.status == runtime::admission_status::too_long);
  CHECK(a2.param == "prompt");
  runtime::sequence_output o{.seq_id = 3, .error = "x", .error_param = "response_format"};
  runtime::sequence_output o2;
  REQUIRE_FALSE(load(ts.sys, save(ts.sys, o), o2));
  CHECK(o2.error_param == "response_format");
}

TEST_CASE("describe: a node gone without a reason is said so, not 'unknown'") {
  const std::string gone = actors::describe(caf::make_error(caf::exit_reason::unknown));
  CHECK(gone.find("went away without a reason") != std::string::npos);
  CHECK(gone.find("unknown") == std::string::npos);
  CHECK(actors::describe(caf::make_error(caf::exit_reason::remote_link_unreachable)) ==
        "remote_link_unreachable");
}

TEST_CASE("an empty text prompt travels as a prompt, apart from no text") {
  // An empty string meant "no text": `client --prompt ""` could not send BOS alone.
  test_system ts;
  actors::submit_request out;
  REQUIRE_FALSE(load(ts.sys, save(ts.sys, actors::submit_request{.id = 1, .prompt = ""}), out));
  CHECK(out.prompt == std::optional<std::string>(""));
  CHECK(out.prompt_ids.empty());
  REQUIRE_FALSE(
      load(ts.sys, save(ts.sys, actors::submit_request{.id = 2, .prompt_ids = {0, 5}}), out));
  CHECK_FALSE(out.prompt.has_value());
  CHECK(out.prompt_ids == std::vector<std::int32_t>{0, 5});
}

TEST_CASE("infinite and NaN floating-point values travel unchanged") {
  // CAF 0.17's own float encoding never returns for an infinity (the sender's thread spun
  // forever on `client --temperature inf`) and turns NaN into -1; they travel as bits now, and
  // the router's validation refuses them by name.
  test_system ts;
  const double inf = std::numeric_limits<double>::infinity();
  actors::submit_request r{.id = 1, .prompt_ids = {0, 5}};
  r.params.temperature = inf;
  r.params.top_p = std::numeric_limits<double>::quiet_NaN();
  r.params.presence_penalty = -inf;
  r.params.min_p = 0.25;
  r.params.repetition_penalty = std::numeric_limits<double>::denorm_min();
  actors::submit_request out;
  REQUIRE_FALSE(load(ts.sys, save(ts.sys, r), out));
  const runtime::sampling_params& p = out.params;
  CHECK(p.temperature == inf);
  CHECK(std::isnan(p.top_p));
  CHECK(p.presence_penalty == -inf);
  CHECK(p.min_p == 0.25);
  CHECK(p.repetition_penalty == std::numeric_limits<double>::denorm_min());
  CHECK(p.frequency_penalty == 0.0);
  CHECK_THROWS_WITH_AS(p.validate(1000, {}),
                       doctest::Contains("temperature must be a finite number"), di::error);

  // A masked token's logprob is -inf.
  runtime::token_event e{.request_id = 5, .token_ids = {10}};
  const float neg_inf = -std::numeric_limits<float>::infinity();
  e.logprobs = {runtime::position_logprobs{
      .id = 10, .logprob = -0.5f, .rank = 1, .top = {{10, -0.5f}, {11, neg_inf}}}};
  actors::client_events events;
  REQUIRE_FALSE(load(ts.sys, save(ts.sys, actors::client_events{{e}}), events));
  REQUIRE(events.events.size() == 1);
  REQUIRE(events.events[0].logprobs.size() == 1);
  const runtime::position_logprobs& l = events.events[0].logprobs[0];
  CHECK(l.logprob == -0.5f);
  REQUIRE(l.top.size() == 2);
  CHECK(l.top[1].logprob == neg_inf);
}

TEST_CASE("a step's prompt logprobs fit the cluster file's estimate of their size") {
  // config/cluster_config.cpp checks cluster.max_message_bytes against 32 + 16 x max_logprobs
  // bytes per prompt row; the encoding must stay within that (worst case: large ids and ranks).
  test_system ts;
  for (int k : {0, 1, 20, 100}) {
    runtime::step_result r{.step_id = 1};
    runtime::sequence_output& o = r.outputs.emplace_back();
    o.seq_id = 7;
    for (int row = 0; row < 256; ++row) {
      runtime::position_logprobs& p = o.prompt_logprobs.emplace_back();
      p.id = 129279;
      p.logprob = -12.5f;
      p.rank = 129280;
      for (int i = 0; i < k; ++i) p.top.push_back({129279 - i, -float(i)});
    }
    const std::size_t bytes = save(ts.sys, actors::step_done{.result = r}).size();
    CAPTURE(k);
    CAPTURE(bytes);
    CHECK(bytes <= std::size_t(256 * (32 + 16 * k)) + 4096);
  }
}

TEST_CASE("malformed bytes are an error, not a crash") {
  test_system ts;
  std::vector<char> buf = save(ts.sys, actors::run_step{sample_plan(), 1});
  for (std::size_t cut : {std::size_t(0), std::size_t(3), buf.size() / 2, buf.size() - 1}) {
    actors::run_step out;
    CHECK(load(ts.sys, std::vector<char>(buf.begin(), buf.begin() + std::ptrdiff_t(cut)), out));
  }
  // A sequence length of 2^32 - 1 with nothing behind it: CAF reads element by element and
  // stops at the end of the buffer (no up-front allocation for non-byte vectors).
  std::vector<char> huge{char(0xFF), char(0xFF), char(0xFF), char(0xFF), char(0x0F)};
  actors::prefix_probe probe;
  CHECK(load(ts.sys, huge, probe));
  // Presence flags that promise more values than follow, or fewer.
  for (auto [present, num_values] : {std::pair{std::vector<std::int32_t>{1, 1}, 1},
                                     std::pair{std::vector<std::int32_t>{0}, 1}}) {
    std::vector<runtime::position_logprobs> values(static_cast<std::size_t>(num_values));
    std::vector<char> bytes;
    caf::binary_serializer sink{ts.sys, bytes};
    REQUIRE_FALSE(sink(present, values));
    std::vector<std::optional<runtime::position_logprobs>> target;
    runtime::optional_list<runtime::position_logprobs> field{target};
    caf::binary_deserializer source{ts.sys, bytes};
    CHECK(source(field));
  }
}

}  // namespace di::test
