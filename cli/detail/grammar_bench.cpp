// grammar bench: see grammar_bench.hpp.
#include "cli/detail/grammar_bench.hpp"
#include "cli/detail/option_checks.hpp"

#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/json_instance.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/token_class_cache.hpp"
#include "runtime/grammar/token_grammar.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>

namespace di::cli {

namespace {

using namespace di::grammar;
using clock_type = std::chrono::steady_clock;

double micros_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

struct summary {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
  std::size_t n = 0;
};

summary summarize(std::vector<double> v) {
  summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double total = 0;
  for (double x : v) total += x;
  s.mean = total / double(v.size());
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, std::size_t(double(v.size()) * 0.99))];
  s.max = v.back();
  return s;
}

nlohmann::json to_json(const summary& s) {
  return {{"n", s.n}, {"mean", s.mean}, {"p50", s.p50}, {"p99", s.p99}, {"max", s.max}};
}

struct bench_state {
  std::vector<double> compile_us;
  std::vector<double> mask_us;
  std::size_t schemas = 0, compiled = 0, instances = 0, unserializable = 0;
  std::size_t mask_violations = 0, refused_tokens = 0, not_accepting = 0;
  std::size_t fully_classified = 0;  ///< with --classify-ms: schemas classified within it
};

/// Feeds one tokenized instance, timing each mask; returns whether every step was consistent.
void feed(const std::shared_ptr<const token_grammar>& tg, const std::vector<tok::token_id>& ids,
          bench_state& st) {
  grammar_matcher m(tg);
  std::vector<std::uint32_t> mask(tg->vocabulary().mask_words());
  for (tok::token_id id : ids) {
    auto t0 = clock_type::now();
    m.fill_next_token_mask(mask);
    st.mask_us.push_back(micros_since(t0));
    if (!((mask[std::size_t(id) >> 5] >> (id & 31)) & 1u)) ++st.mask_violations;
    if (!m.accept_token(id)) {
      ++st.refused_tokens;
      return;
    }
  }
  auto t0 = clock_type::now();
  m.fill_next_token_mask(mask);
  st.mask_us.push_back(micros_since(t0));
  if (!m.is_accepting()) ++st.not_accepting;
}

void bench_schema(const nlohmann::ordered_json& row, const grammar_bench_options& o,
                  const tok::tokenizer& tok, const std::shared_ptr<const token_vocabulary>& vocab,
                  const std::shared_ptr<token_class_cache>& shared, bench_state& st, std::ofstream* out) {
  ++st.schemas;
  const auto& schema_v = row["schema"];
  nlohmann::ordered_json schema =
      schema_v.is_string() ? nlohmann::ordered_json::parse(schema_v.get<std::string>()) : schema_v;
  json_schema_options so;
  so.lenient = o.lenient;
  std::shared_ptr<const token_grammar> tg;
  auto t0 = clock_type::now();
  try {
    auto cg = compiled_grammar::compile(compile_json_schema(schema, so).g);
    tg = token_grammar::create(cg, vocab, o.precompute, o.shared_cache ? shared : nullptr);
    if (!o.precompute && o.classify_ms >= 0)
      st.fully_classified += tg->classify_states(o.classify_ms / 1e3);
  } catch (const di::error&) {
    return;
  }
  st.compile_us.push_back(micros_since(t0));
  ++st.compiled;
  nlohmann::json sequences = nlohmann::json::array();
  std::size_t used = 0;
  for (const auto& t : row.value("tests", nlohmann::ordered_json::array())) {
    if (!t.value("valid", false) || used >= o.max_instances) continue;
    auto text = grammar_serialization(tg->automaton(), t["data"]);
    if (!text) {
      ++st.unserializable;
      continue;
    }
    ++used;
    ++st.instances;
    std::vector<tok::token_id> ids = tok.encode(*text);
    feed(tg, ids, st);
    sequences.push_back(ids);
  }
  if (out && !sequences.empty())
    *out << nlohmann::ordered_json{{"id", row.value("id", "")}, {"schema", schema.dump()}, {"tokens", sequences}}.dump()
         << "\n";
}

}  // namespace

void run_grammar_bench(const grammar_bench_options& o) {
  tok::tokenizer tok = tok::tokenizer::from_dir(o.tokenizer);
  auto vocab = token_vocabulary::from_tokenizer(tok);
  std::ifstream in = open_input_file(o.schemas, "--schemas");
  std::unique_ptr<std::ofstream> out;
  if (!o.tokens_out.empty()) {
    out = std::make_unique<std::ofstream>(o.tokens_out);
    DI_CHECK(out->good(), "--tokens-out {}: cannot write", o.tokens_out);
  }
  bench_state st;
  auto shared = std::make_shared<token_class_cache>();
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (o.limit && st.schemas >= o.limit) break;
    auto row = nlohmann::ordered_json::parse(line, nullptr, false);
    DI_CHECK(!row.is_discarded() && row.is_object() && row.contains("schema"),
             "--schemas {} line {}: expected an object with \"schema\"", o.schemas, n);
    try {
      bench_schema(row, o, tok, vocab, shared, st, out.get());
    } catch (const nlohmann::json::exception& e) {  // a row of the wrong shape ("tests": "x")
      DI_FAIL("--schemas {} line {}: {}", o.schemas, n, e.what());
    }
  }
  summary c = summarize(st.compile_us), m = summarize(st.mask_us);
  if (o.json) {
    nlohmann::json j = {{"engine", "deepinfer"},
                        {"precompute", o.precompute},
                        {"classify_ms", o.classify_ms},
                        {"fully_classified", st.fully_classified},
                        {"shared_cache", o.shared_cache},
                        {"schemas", st.schemas},
                        {"compiled", st.compiled},
                        {"instances", st.instances},
                        {"unserializable", st.unserializable},
                        {"mask_violations", st.mask_violations},
                        {"refused_tokens", st.refused_tokens},
                        {"not_accepting", st.not_accepting},
                        {"compile_us", to_json(c)},
                        {"mask_us", to_json(m)}};
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("schemas {}  compiled {}  instances {}  (no accepted serialization: {})\n", st.schemas,
             st.compiled, st.instances, st.unserializable);
  const std::string classified =
      o.precompute ? " -> token classes of every state"
      : o.classify_ms >= 0
          ? fmt::format(" -> token classes for up to {} ms: all of them for {} of {}",
                        o.classify_ms, st.fully_classified, st.compiled)
          : "";
  fmt::print("compile (schema -> grammar{}), ms: mean {:.2f}  p50 {:.2f}  p99 {:.2f}  max {:.2f}\n",
             classified, c.mean / 1e3, c.p50 / 1e3, c.p99 / 1e3, c.max / 1e3);
  fmt::print("mask per token over {} steps, us: mean {:.1f}  p50 {:.1f}  p99 {:.1f}  max {:.1f}  (p99 / 1 ms limit: {:.2f})\n",
             m.n, m.mean, m.p50, m.p99, m.max, m.p99 / 1000.0);
  fmt::print("consistency: {} masks missing the next token, {} tokens refused, {} ends not accepting\n",
             st.mask_violations, st.refused_tokens, st.not_accepting);
}

void add_grammar_bench(CLI::App& grammar_cmd) {
  auto o = std::make_shared<grammar_bench_options>();
  auto* bench = grammar_cmd.add_subcommand("bench", "Measure compile time and per-token mask time");
  bench->add_option("--tokenizer", o->tokenizer, "Tokenizer directory (tokenizer.json)")->required();
  bench->add_option("--schemas", o->schemas, "JSONL of {\"id\", \"schema\", \"tests\"} rows")->required();
  bench->add_option("--tokens-out", o->tokens_out, "Write the token sequences fed (for compare.py)");
  bench->add_option("--limit", o->limit, "Only the first N schemas (0: all)");
  bench->add_option("--max-instances", o->max_instances, "Valid instances fed per schema")->capture_default_str();
  bench->add_flag("--precompute", o->precompute,
                  "Classify tokens for every automaton state at compile time (default: on first use)");
  bench
      ->add_option("--classify-ms", o->classify_ms,
                   "After a lazy compile, classify states for up to MS milliseconds (counted in "
                   "the compile time), as the server does before a request starts")
      ->check(non_negative_number())
      ->excludes("--precompute");
  // (a callback: "!--no-shared-cache" on the bool read "--no-shared-cache{false}" in --help)
  bench->add_flag_callback(
      "--no-shared-cache", [o] { o->shared_cache = false; },
      "Do not share token classes of equivalent states across schemas");
  bench->add_flag("--lenient", o->lenient, "Skip JSON Schema keywords that cannot be enforced");
  bench->add_flag("--json", o->json, "Print one JSON summary line");
  bench->callback([o] { run_grammar_bench(*o); });
}

}  // namespace di::cli
