// Structured output through scheduler and runner on the tiny-v41 model: requests sampled at
// temperature 1 with a response_format, batched and overlapped, all end with EOS and their
// text is a JSON value the schema allows (checked here by hand, independently of the grammar
// engine); a response_format that does not compile fails only its own request.
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/response_format.hpp"
#include "tests/model/runner/runner_test_util.hpp"

#include <nlohmann/json.hpp>

namespace di::test {
namespace {

const char* k_schema =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},)"
    R"("age":{"type":"integer","minimum":0,"maximum":150},)"
    R"("tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3}},)"
    R"("required":["name","age"],"additionalProperties":false})";

std::size_t code_points(const std::string& s) {
  return std::size_t(std::count_if(s.begin(), s.end(), [](char c) { return (std::uint8_t(c) & 0xC0) != 0x80; }));
}

/// The schema above, checked without the grammar engine.
bool valid_person(const std::string& text, std::string& why) {
  auto v = nlohmann::json::parse(text, nullptr, false);
  if (v.is_discarded() || !v.is_object()) return why = "not a JSON object", false;
  for (const auto& [k, x] : v.items())
    if (k != "name" && k != "age" && k != "tags") return why = "extra key " + k, false;
  if (!v.contains("name") || !v["name"].is_string()) return why = "name", false;
  if (code_points(v["name"].get<std::string>()) > 12) return why = "name too long", false;
  if (!v.contains("age") || !v["age"].is_number()) return why = "age", false;
  double age = v["age"].get<double>();
  if (age != double(std::int64_t(age)) || age < 0 || age > 150) return why = "age out of range", false;
  if (v.contains("tags")) {
    if (!v["tags"].is_array() || v["tags"].size() > 3) return why = "tags", false;
    for (const auto& t : v["tags"])
      if (t != "a" && t != "b" && t != "c") return why = "tag value", false;
  }
  return true;
}

struct grammar_setup {
  fs::path dir = generated("tiny-v41");
  tok::tokenizer tokenizer = tok::tokenizer::from_dir(dir.string());
  std::shared_ptr<const deepseek_model> model = tiny_v41();
  std::shared_ptr<const grammar::token_vocabulary> vocab =
      grammar::token_vocabulary::from_tokenizer(tokenizer, std::size_t(model->config().vocab_size));
};

runtime::scheduler scheduler_for(const cpu_model_runner& runner, const tok::tokenizer& t, int running) {
  runtime::scheduler_config c;
  c.max_num_batched_tokens = 256;
  c.max_num_running = running;
  c.blocks.enable_prefix_caching = false;
  c.eos_token_ids = {*t.eos_id()};
  return runtime::scheduler(scheduler_config_for(runner, std::move(c)));
}

runtime::request grammar_request(std::uint64_t id, const std::string& spec) {
  runtime::request r = runner_request(id, 6, 120);
  r.params.temperature = 1.0;
  r.params.seed = 1000 + id;
  r.params.response_format = spec;
  return r;
}

/// Serves `rs` through one runner with structured output (8 running at once).
served serve_formats(const grammar_setup& g, const std::vector<runtime::request>& rs) {
  cpu_model_runner runner(g.model, {.kv_pool_tokens = 4096, .max_model_len = 256});
  runner.enable_structured_output(g.vocab);
  runtime::scheduler s = scheduler_for(runner, g.tokenizer, 8);
  add_all(s, rs);
  return serve(s, runner);
}

}  // namespace

/// Under overlap the plan after a failed sample carries a placeholder for the failed
/// sequence, planned before the failure was known. The runner threw on it ("placeholder but no
/// sample"), which failed the whole executor and every request of its group; now that row
/// fails only its sequence, and the others are served as alone.
TEST_CASE("runner: a sequence failing its sample under overlap fails alone") {
  grammar_setup g;
  std::vector<runtime::request> rs = mixed_requests(4, 40, 6);
  runtime::request bad = grammar_request(50, "regex:(a");  // does not compile: its sample fails
  cpu_model_runner runner(g.model, {.kv_pool_tokens = 8192, .max_model_len = 256});
  runner.enable_structured_output(g.vocab);
  runtime::scheduler s = scheduler_for(runner, g.tokenizer, 8);
  std::vector<runtime::request> all = rs;
  all.push_back(bad);
  add_all(s, all);
  const served got = serve(s, runner, {.overlap = true});
  check_equal_alone(g.model, rs, got);
  const collected& c = got.out.at(bad.id);
  CHECK(c.status == runtime::sequence_status::finished_error);
  CHECK_MESSAGE(c.error.find("response_format") != std::string::npos, c.error);
  CHECK(runner.num_live() == 0);
}

TEST_CASE("runner: sampled generations under a JSON schema all parse, validate and stop") {
  grammar_setup g;
  REQUIRE(g.tokenizer.eos_id().has_value());
  const std::string spec = "json_schema+compact:" + std::string(k_schema);
  for (bool overlap : {false, true}) {
    CAPTURE(overlap);
    cpu_model_runner runner(g.model, {.kv_pool_tokens = 8192, .max_model_len = 256});
    runner.enable_structured_output(g.vocab);
    runtime::scheduler s = scheduler_for(runner, g.tokenizer, 16);
    std::vector<runtime::request> rs;
    for (std::uint64_t id = 0; id < 16; ++id) rs.push_back(grammar_request(id, spec));
    add_all(s, rs);
    served got = serve(s, runner, {.overlap = overlap});
    for (const auto& r : rs) {
      const collected& c = got.out.at(r.id);
      REQUIRE_MESSAGE(c.error.empty(), c.error);
      CHECK(c.status == runtime::sequence_status::finished_stop);
      REQUIRE(!c.tokens.empty());
      CHECK(c.tokens.back() == *g.tokenizer.eos_id());
      std::vector<std::int32_t> text_ids(c.tokens.begin(), c.tokens.end() - 1);
      std::string text = g.tokenizer.decode(text_ids);
      std::string why;
      CHECK_MESSAGE(valid_person(text, why), why, ": ", text);
    }
  }
}

TEST_CASE("runner: regex and EBNF formats end exactly when the grammar is complete") {
  grammar_setup g;
  served got = serve_formats(g, {grammar_request(1, "regex:[0-9]{3}-[a-z]{2}"),
                                 grammar_request(2, "ebnf:root ::= \"yes\" | \"no\""),
                                 grammar_request(3, "json_object+compact")});
  auto text_of = [&](std::uint64_t id) {
    const collected& c = got.out.at(id);
    REQUIRE_MESSAGE(c.error.empty(), c.error);
    std::vector<std::int32_t> ids(c.tokens.begin(), c.tokens.end() - 1);
    return g.tokenizer.decode(ids);
  };
  std::string a = text_of(1), b = text_of(2), o = text_of(3);
  CHECK(a.size() == 6);
  CHECK(std::all_of(a.begin(), a.begin() + 3, [](char ch) { return ch >= '0' && ch <= '9'; }));
  CHECK(a[3] == '-');
  CHECK((b == "yes" || b == "no"));
  auto obj = nlohmann::json::parse(o, nullptr, false);
  CHECK_MESSAGE((!obj.is_discarded() && obj.is_object()), o);
}

TEST_CASE("runner: a response_format that does not compile fails only its request") {
  grammar_setup g;
  served got =
      serve_formats(g, {grammar_request(1, "regex:(unclosed"), grammar_request(2, "regex:ok")});
  CHECK(got.out.at(1).error.find("response_format") != std::string::npos);
  CHECK(got.out.at(2).error.empty());
  CHECK(g.tokenizer.decode(std::vector<std::int32_t>(got.out.at(2).tokens.begin(), got.out.at(2).tokens.end() - 1)) == "ok");
}

TEST_CASE("runner: a grammar that is done ends its request under ignore_eos and min_tokens") {
  grammar_setup g;
  std::vector<runtime::request> rs = {grammar_request(1, "regex:[0-9]{2}"),
                                      grammar_request(2, "regex:[0-9]{2}"),
                                      grammar_request(3, "regex:[0-9]+")};
  rs[0].params.ignore_eos = true;  // done after two digits: EOS ends it anyway
  rs[1].params.min_tokens = 50;    // done long before min_tokens: it ends there
  rs[2].params.ignore_eos = true;  // may always go on: digits up to max_tokens, no EOS
  rs[2].params.max_tokens = 12;
  served got = serve_formats(g, rs);
  const std::int32_t eos = *g.tokenizer.eos_id();
  for (std::uint64_t id : {1, 2}) {
    const collected& c = got.out.at(id);
    REQUIRE_MESSAGE(c.error.empty(), c.error);
    CHECK(c.status == runtime::sequence_status::finished_stop);
    REQUIRE(!c.tokens.empty());
    CHECK(c.tokens.back() == eos);
    CHECK(g.tokenizer.decode(std::vector<std::int32_t>(c.tokens.begin(), c.tokens.end() - 1))
              .size() == 2);
  }
  const collected& c = got.out.at(3);
  REQUIRE_MESSAGE(c.error.empty(), c.error);
  CHECK(c.status == runtime::sequence_status::finished_length);
  CHECK(c.tokens.size() == 12);
  CHECK(std::find(c.tokens.begin(), c.tokens.end(), eos) == c.tokens.end());
  const std::string digits = g.tokenizer.decode(c.tokens);
  CHECK(std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }));
}

}  // namespace di::test
