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

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

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
cluster_config cluster_for(std::int64_t num_prompt, std::int64_t len, int n, std::int64_t chunk) {
  cluster_config c;
  c.scheduler.max_prefill_chunk = chunk;
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

/// Reports a one-request prefill's progress (generation_request::on_prefill_progress) from a
/// thread that asks the router for its scheduler's counters: the prefill rows planned, of which
/// the chunk in flight is not done yet. Stopped at the first token (token_arrived) or at the
/// end (stop, before the cluster stops).
class progress_reporter {
 public:
  progress_reporter(actors::local_cluster& cluster, const generation_request& r, std::int64_t chunk,
                    clock_type::time_point submitted)
      : cluster_(cluster),
        report_(r.on_prefill_progress),
        total_(std::int64_t(r.prompt_ids.size())),
        chunk_(chunk > 0 ? chunk : total_),
        submitted_(submitted) {
    if (report_) thread_ = std::thread([this] { run(); });
  }
  ~progress_reporter() { stop(); }
  progress_reporter(const progress_reporter&) = delete;
  progress_reporter& operator=(const progress_reporter&) = delete;

  /// The first token came: the last report (if any was made) says so, and none follows.
  void token_arrived() {
    std::lock_guard lock(mutex_);
    if (is_over_) return;
    is_over_ = true;
    if (num_reports_ > 0) report_({total_, total_, seconds(), true});
    wake_.notify_all();
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      is_stopping_ = true;
      wake_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  double seconds() const {
    return std::chrono::duration<double>(clock_type::now() - submitted_).count();
  }
  void run() {
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, std::chrono::seconds(1), [&] { return is_over_ || is_stopping_; });
    while (!is_over_ && !is_stopping_) {
      lock.unlock();
      std::int64_t planned = 0;
      try {
        const actors::cluster_status s = cluster_.status();
        if (!s.groups.empty()) planned = s.groups.front().stats.counters.num_prefill_tokens;
      } catch (const di::error&) {
      }
      lock.lock();
      if (is_over_ || is_stopping_) break;
      // The chunk in flight is not done: the rows of the chunks before it are.
      const std::int64_t done = planned > 0 ? (planned - 1) / chunk_ * chunk_ : 0;
      report_({std::min(done, total_), total_, seconds(), false});
      ++num_reports_;
      wake_.wait_for(lock, std::chrono::milliseconds(500),
                     [&] { return is_over_ || is_stopping_; });
    }
  }

  actors::local_cluster& cluster_;
  std::function<void(const prefill_progress&)> report_;
  std::int64_t total_, chunk_;
  clock_type::time_point submitted_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool is_over_ = false, is_stopping_ = false;
  int num_reports_ = 0;
  std::thread thread_;
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
  // Progress is shown for one request; on the CPU a long prompt then advances in chunks.
  const bool show_progress = n == 1 && r.on_prefill_progress != nullptr;
  const std::int64_t chunk = show_progress && m.model->dev().kind == device_kind::cpu &&
                                     num_prompt > 2 * prefill_progress_chunk
                                 ? prefill_progress_chunk
                                 : 0;
  actors::local_cluster_params params{
      .config = cluster_for(num_prompt, len, n, chunk),
      .assets = assets_of(m),
      .make_runner = [&m, len, n](int, int) { return runner_for(m, len, n); }};
  actors::process_config cfg(actors::network_settings_of(params.config));
  caf::actor_system sys{cfg};
  actors::local_cluster cluster(sys, std::move(params));
  std::vector<actors::request_outcome> outcomes(static_cast<std::size_t>(n));
  std::vector<event_times> times(static_cast<std::size_t>(n));
  std::optional<progress_reporter> progress;
  {
    actors::client_session session(sys, caf::actor_cast<actors::router_actor>(cluster.router()));
    std::vector<std::future<actors::request_outcome>> pending;
    for (int i = 0; i < n; ++i) {
      actors::submit_request req{.prompt_ids = r.prompt_ids, .params = r.params};
      req.params.seed = out[std::size_t(i)].seed;
      event_times& t = times[std::size_t(i)];
      t.submitted = clock_type::now();
      if (show_progress) progress.emplace(cluster, r, chunk, t.submitted);
      const bool stream = n == 1 && r.on_text != nullptr;
      auto on_event = [&r, &t, &progress, stream](const runtime::token_event& e) {
        t.last = clock_type::now();
        if (!t.has_token && !e.token_ids.empty()) {
          t.first_token = t.last;
          t.has_token = true;
          if (progress) progress->token_arrived();  // its line ends before the text
        }
        if (stream && !e.text.empty()) r.on_text(e.text);
      };
      pending.push_back(session.submit(std::move(req), on_event));
    }
    for (int i = 0; i < n; ++i) outcomes[std::size_t(i)] = pending[std::size_t(i)].get();
    if (progress) progress->stop();  // before the cluster stops
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
