// The generation path of `deepinfer generate`: validate, then start a local cluster sized for
// the one request (router, scheduler, executor whose runner wraps the loaded model), submit it
// through a client session, stream the text of each event, and stop the cluster.
#include "cli/detail/offline_generation.hpp"

#include "actors/client_session.hpp"
#include "actors/local_cluster.hpp"
#include "actors/logging.hpp"
#include "actors/node_runtime.hpp"
#include "cli/detail/model_folder.hpp"
#include "common/error.hpp"
#include "model/runner/cpu_model_runner.hpp"
#include "runtime/sampling_rng.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>

namespace di::cli {

namespace {

using clock_type = std::chrono::steady_clock;

/// The ids the runner samples (prompts and stop_token_ids must be among them).
std::int64_t token_ids_of(const loaded_model& m) {
  return sampleable_ids(*m.tokenizer, m.model->config().vocab_size);
}

void check_request(const loaded_model& m, const generation_request& r) {
  const model_config& c = m.model->config();
  const std::int64_t ids = token_ids_of(m);
  DI_CHECK(!r.prompt_ids.empty(), "the prompt is empty");
  for (std::size_t i = 0; i < r.prompt_ids.size(); ++i)
    DI_CHECK(r.prompt_ids[i] >= 0 && r.prompt_ids[i] < ids,
             "prompt token {} (position {}) is outside the tokenizer's ids [0, {})",
             r.prompt_ids[i], i, ids);
  r.params.validate(ids);
  std::int64_t context = c.max_position_embeddings > 0 ? c.max_position_embeddings : INT64_MAX;
  std::int64_t prompt = std::int64_t(r.prompt_ids.size());
  DI_CHECK(prompt < context, "the prompt has {} tokens but the model's context is {} tokens",
           prompt, context);
  std::int64_t max_new = r.params.max_tokens.value_or(context - prompt);
  DI_CHECK(prompt + max_new <= context,
           "prompt ({} tokens) + max_tokens ({}) exceeds the model's context of {} tokens", prompt,
           max_new, context);
}

/// The cluster of `n` copies of one request: one group, one executor, pools of exactly n x
/// `len` tokens (the prompt plus max_tokens each), one whole prompt per step, all n running at
/// once, no prefix cache (copies are not guaranteed to be prefilled after one another). The
/// executor's device is the model's (make_runner wraps it); "cpu" here only fills the slot.
cluster_config cluster_for(std::int64_t num_prompt, std::int64_t len, int n) {
  cluster_config c;
  c.nodes = {node_config{}};
  c.groups = {
      group_config{.scheduler_node = 0, .executor_nodes = {0}, .executor_devices = {"cpu"}}};
  c.scheduler.max_num_batched_tokens = num_prompt;
  c.scheduler.max_num_running = n;
  c.scheduler.max_model_len = len;
  c.kv.pool_tokens = len * n;
  c.kv.enable_prefix_caching = false;
  c.logging.status_interval_s = 0;
  // generate checks stop strings itself (none of the server's limits on them).
  c.router.max_stop_strings = 1 << 20;
  c.router.max_stop_string_bytes = 1 << 30;
  return c;
}

actors::model_assets assets_of(const loaded_model& m) {
  const std::optional<tok::token_id> eos = m.tokenizer->eos_id();
  return {.tokenizer = m.tokenizer,
          .vocab_size = token_ids_of(m),
          .eos_token_ids = {eos ? *eos : std::int32_t(m.model->config().eos_token_id)}};
}

/// The executor's runner: the CPU model runner over the model as loaded and placed.
actors::runner_bundle runner_for(const loaded_model& m, std::int64_t len, int n) {
  auto r = std::make_unique<cpu_model_runner>(
      m.model, cpu_runner_config{.kv_pool_tokens = len * n,
                                 .min_blocks_per_stream = n,
                                 .max_model_len = len,
                                 .num_state_slots = m.model->dev().kind == device_kind::cpu ? 0 : n,
                                 .num_token_ids = token_ids_of(m)});
  if (m.grammar_vocab) r->enable_structured_output(m.grammar_vocab, m.grammars);
  runtime::kv_geometry g = r->geometry();
  return {std::move(r), std::move(g)};
}

/// Actor logs are for clusters; generate reports failures as its own error message.
void quiet_actor_logs() {
  static std::once_flag once;
  std::call_once(once, [] { actors::configure_logging("error", "", "generate"); });
}

/// Times of the request's events (written on the session's thread, read after it ends).
struct event_times {
  clock_type::time_point submitted, first_token, last;
  bool has_token = false;
};

/// Fills `out` from the request's outcome; a refusal or failure throws its message.
void take_outcome(const actors::request_outcome& o, const event_times& t, generation_result& out) {
  DI_CHECK(o.reply.accepted, "{}", o.reply.error.empty() ? o.error : o.reply.error);
  DI_CHECK(o.status != runtime::sequence_status::finished_error, "generation failed: {}", o.error);
  out.output_ids = o.output_ids;
  out.text = o.text;
  out.logprobs = o.logprobs;
  out.prompt_logprobs = o.prompt_logprobs;
  if (o.status == runtime::sequence_status::finished_stop)
    out.finish = runtime::finish_reason::stop;
  if (o.status == runtime::sequence_status::finished_length)
    out.finish = runtime::finish_reason::length;
  const auto first = t.has_token ? t.first_token : t.last;
  out.prefill_seconds = std::chrono::duration<double>(first - t.submitted).count();
  out.decode_seconds = std::chrono::duration<double>(t.last - first).count();
}

}  // namespace

loaded_model load_model_for_generation(const std::string& dir, bool act_quant) {
  loaded_model m;
  require_model_folder(dir);
  // deepseek_model::load checks the tensors against config.json first (headers only).
  m.model = deepseek_model::load(dir, forward_options{.act_quant = act_quant});
  DI_CHECK(std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"),
           "{}: no tokenizer.json in the model folder", dir);
  m.tokenizer = std::make_shared<const tok::tokenizer>(tok::tokenizer::from_dir(dir));
  attach_engram_hasher(*m.model, *m.tokenizer);
  return m;
}

void enable_structured_output(loaded_model& m) {
  if (m.grammar_vocab) return;
  m.grammar_vocab =
      grammar::token_vocabulary::from_tokenizer(*m.tokenizer, std::size_t(token_ids_of(m)));
  m.grammars = std::make_shared<grammar::grammar_cache>();
}

std::vector<generation_result> generate_n(const loaded_model& m, const generation_request& r,
                                          int n) {
  DI_CHECK(n >= 1, "n must be at least 1, got {}", n);
  check_request(m, r);
  if (!r.params.response_format.empty()) {
    DI_CHECK(m.grammar_vocab != nullptr,
             "response_format given but structured output is not enabled");
    m.grammars->get(grammar::parse_inline_response_format(r.params.response_format),
                    m.grammar_vocab);
  }
  const std::int64_t num_prompt = std::int64_t(r.prompt_ids.size());
  const std::int64_t len = num_prompt + r.params.max_tokens.value_or(
                                            m.model->config().max_position_embeddings - num_prompt);
  std::vector<generation_result> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    out[std::size_t(i)].seed = r.params.seed ? *r.params.seed + std::uint64_t(i)
                                             : runtime::draw_request_seed();

  quiet_actor_logs();
  actors::local_cluster_params params{
      .config = cluster_for(num_prompt, len, n),
      .assets = assets_of(m),
      .make_runner = [&m, len, n](int, int) { return runner_for(m, len, n); }};
  actors::process_config cfg(actors::network_settings_of(params.config));
  caf::actor_system sys{cfg};
  actors::local_cluster cluster(sys, std::move(params));
  std::vector<actors::request_outcome> outcomes(static_cast<std::size_t>(n));
  std::vector<event_times> times(static_cast<std::size_t>(n));
  {
    actors::client_session session(sys, caf::actor_cast<actors::router_actor>(cluster.router()));
    std::vector<std::future<actors::request_outcome>> pending;
    for (int i = 0; i < n; ++i) {
      actors::submit_request req{.prompt_ids = r.prompt_ids, .params = r.params};
      req.params.seed = out[std::size_t(i)].seed;
      event_times& t = times[std::size_t(i)];
      t.submitted = clock_type::now();
      const bool stream = n == 1 && r.on_text != nullptr;
      auto on_event = [&r, &t, stream](const runtime::token_event& e) {
        t.last = clock_type::now();
        if (!t.has_token && !e.token_ids.empty()) {
          t.first_token = t.last;
          t.has_token = true;
        }
        if (stream && !e.text.empty()) r.on_text(e.text);
      };
      pending.push_back(session.submit(std::move(req), on_event));
    }
    for (int i = 0; i < n; ++i) outcomes[std::size_t(i)] = pending[std::size_t(i)].get();
  }
  cluster.shutdown();
  for (int i = 0; i < n; ++i)
    take_outcome(outcomes[std::size_t(i)], times[std::size_t(i)], out[std::size_t(i)]);
  return out;
}

generation_result generate(const loaded_model& m, const generation_request& r) {
  return std::move(generate_n(m, r, 1).front());
}

}  // namespace di::cli
