// Stop conditions through the scheduler: EOS (and ignore_eos), stop token ids, stop strings
// across token boundaries with held-back text, max_tokens and the context limit, and the
// streaming detokenizer over the real DeepSeek-V3 tokenizer.
#include "common/error.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/scheduler.hpp"
#include "tests/runtime/scheduler_test_util.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>

#include <map>
#include <utility>

using namespace di::runtime;
using namespace di::test;

namespace {

using scripts = std::map<std::uint64_t, std::vector<std::int32_t>>;

/// Text per token id ("<id>" for others); finish() yields `tail` (bytes of a split character).
class map_decoder final : public text_decoder {
 public:
  map_decoder(std::map<std::int32_t, std::string> texts, std::string tail)
      : texts_(std::move(texts)), tail_(std::move(tail)) {}
  std::string push(std::int32_t id) override {
    auto it = texts_.find(id);
    return it != texts_.end() ? it->second : "<" + std::to_string(id) + ">";
  }
  std::string finish() override { return std::exchange(tail_, ""); }

 private:
  std::map<std::int32_t, std::string> texts_;
  std::string tail_;
};

text_decoder_factory map_decoders(std::map<std::int32_t, std::string> texts,
                                  std::string tail = "") {
  return [=](const sampling_params&) { return std::make_unique<map_decoder>(texts, tail); };
}

/// Answers every plan from per-request scripts of sampled tokens.
outputs run_scripts(scheduler& s, const scripts& sc) {
  outputs out;
  while (s.has_unfinished()) {
    step_plan plan = s.schedule();
    step_result r{.step_id = plan.step_id};
    for (const scheduled_sequence& q : plan.sequences) {
      sequence_output o{.seq_id = q.seq_id};
      const auto& script = sc.at(q.seq_id);
      if (q.is_sampling)
        o.token_ids.push_back(
            script[std::min<std::size_t>(std::size_t(q.sample_index), script.size() - 1)]);
      r.outputs.push_back(std::move(o));
    }
    if (plan.sequences.empty()) continue;
    apply_outcome a = s.apply(r);
    REQUIRE_MESSAGE(a.is_ok(), a.error);
    collect(out, a.events);
  }
  return out;
}

scheduler_config stop_config_with_eos(std::int64_t max_model_len = 64) {
  scheduler_config c = make_config({.max_model_len = max_model_len});
  c.eos_token_ids = {2};
  return c;
}

const std::map<std::int32_t, std::string> abc = {{5, "a"}, {6, "b"}, {7, "c"}, {2, "</s>"}};

}  // namespace

TEST_CASE("EOS stops a request; ignore_eos runs on to max_tokens") {
  scheduler s(stop_config_with_eos(), map_decoders(abc, "~"));
  REQUIRE(s.add_request(make_request(1, {9, 9}, 10)).is_accepted());
  request r = make_request(2, {9, 9}, 4);
  r.params.ignore_eos = true;
  REQUIRE(s.add_request(r).is_accepted());
  outputs out = run_scripts(s, {{1, {5, 6, 2, 7}}, {2, {5, 6, 2, 7}}});
  CHECK(out[1].tokens == std::vector<std::int32_t>{5, 6, 2});
  CHECK(out[1].text == "ab");
  CHECK(out[1].status == sequence_status::finished_stop);
  CHECK(out[1].stop_token == 2);
  CHECK(out[2].tokens == std::vector<std::int32_t>{5, 6, 2, 7});
  CHECK(out[2].text == "ab</s>c~");  // a length stop releases the decoder's pending bytes
  CHECK(out[2].status == sequence_status::finished_length);
  CHECK(out[1].num_events_after_finish + out[2].num_events_after_finish == 0);
}

TEST_CASE("stop_token_ids end a request like EOS") {
  scheduler s(stop_config_with_eos(), map_decoders(abc));
  request r = make_request(1, {9}, 10);
  r.params.stop_token_ids = {6};
  REQUIRE(s.add_request(r).is_accepted());
  outputs out = run_scripts(s, {{1, {5, 6, 7}}});
  CHECK(out[1].tokens == std::vector<std::int32_t>{5, 6});
  CHECK(out[1].text == "a");
  CHECK(out[1].stop_token == 6);
}

TEST_CASE("a stop string across tokens is cut, and text that may start it is held back") {
  scheduler s(stop_config_with_eos(),
              map_decoders({{10, "Hel"}, {11, "lo"}, {12, " wor"}, {13, "ld"}}));
  request r = make_request(1, {9}, 10);
  r.params.stop = {"o w"};
  REQUIRE(s.add_request(r).is_accepted());
  outputs out = run_scripts(s, {{1, {10, 11, 12, 13}}});
  CHECK(out[1].tokens == std::vector<std::int32_t>{10, 11, 12});
  CHECK(out[1].event_texts == std::vector<std::string>{"Hel", "l", ""});
  CHECK(out[1].text == "Hell");
  CHECK(out[1].stop_string == "o w");
  CHECK(out[1].status == sequence_status::finished_stop);
}

TEST_CASE("max_tokens and the context end with length and release held-back text") {
  scheduler s(stop_config_with_eos(/*max_model_len=*/8), map_decoders({{20, "abx"}}, "~"));
  request held = make_request(1, {9}, 1);
  held.params.stop = {"xyz"};
  REQUIRE(s.add_request(held).is_accepted());
  request no_max = make_request(2, {9, 9, 9, 9, 9}, 0);
  no_max.params.max_tokens.reset();
  REQUIRE(s.add_request(no_max).is_accepted());
  outputs out = run_scripts(s, {{1, {20}}, {2, {7, 7, 7, 7, 7}}});
  CHECK(out[1].text == "abx~");
  CHECK(out[1].status == sequence_status::finished_length);
  CHECK(out[2].tokens.size() == 3);  // 5 prompt + 3 = the context of 8
  CHECK(out[2].status == sequence_status::finished_length);
}

TEST_CASE("abort returns the text held back so far") {
  scheduler s(stop_config_with_eos(), map_decoders({{10, "Hel"}, {11, "lo"}}));
  request r = make_request(1, {9}, 10);
  r.params.stop = {"o w"};
  REQUIRE(s.add_request(r).is_accepted());
  for (int i = 0; i < 2; ++i) {
    step_plan plan = s.schedule();
    step_result res{.step_id = plan.step_id,
                    .outputs = {{.seq_id = 1, .token_ids = {std::int32_t(10 + i)}}}};
    REQUIRE(s.apply(res).is_ok());
  }
  std::optional<token_event> e = s.abort(1);
  REQUIRE(e);
  CHECK(e->text == "o");
  CHECK(e->status == sequence_status::finished_abort);
}

TEST_CASE("the tokenizer's streaming decoder through the scheduler: stop string in real text") {
  const auto tok =
      di::tok::tokenizer::from_dir((source_dir() / "assets" / "deepseek-v3-tokenizer").string());
  const std::string text = "Hello world, this is a test of the stop string. Ünïcödé ✓";
  const std::vector<std::int32_t> ids = tok.encode(text);
  scheduler s(make_config({.max_model_len = 256}), tokenizer_decoder_factory(tok));
  request stop = make_request(1, {9}, 100);
  stop.params.stop = {"is a"};
  REQUIRE(s.add_request(stop).is_accepted());
  request whole = make_request(2, {9}, int(ids.size()));
  REQUIRE(s.add_request(whole).is_accepted());
  outputs out = run_scripts(s, {{1, ids}, {2, ids}});
  CHECK(out[1].text == "Hello world, this ");
  CHECK(out[1].status == sequence_status::finished_stop);
  CHECK(out[2].text == text);
  CHECK(out[2].tokens == ids);
  CHECK(out[2].status == sequence_status::finished_length);
}

TEST_CASE("a token the detokenizer refuses fails its request only") {
  // The runner once sampled an id past the tokenizer's (the head pads past them); the
  // decoder's error escaped apply() and took the scheduler actor down with every request.
  class refusing_decoder final : public text_decoder {
   public:
    std::string push(std::int32_t id) override {
      DI_CHECK(id != 666, "token id {} is not in the vocabulary", id);
      return "x";
    }
    std::string finish() override { return ""; }
  };
  scheduler s(stop_config_with_eos(),
              [](const sampling_params&) { return std::make_unique<refusing_decoder>(); });
  REQUIRE(s.add_request(make_request(1, {9, 9}, 4)).is_accepted());
  REQUIRE(s.add_request(make_request(2, {9, 9}, 4)).is_accepted());
  outputs out = run_scripts(s, {{1, {5, 666, 7}}, {2, {5, 6, 7}}});
  CHECK(out.at(1).status == sequence_status::finished_error);
  CHECK(out.at(1).error.find("token 666, which cannot be decoded") != std::string::npos);
  CHECK(out.at(2).status == sequence_status::finished_length);
  CHECK(out.at(2).tokens.size() == 4);
  CHECK(s.stats().num_used_blocks == 0);
}
