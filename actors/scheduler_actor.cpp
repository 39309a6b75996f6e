// The scheduler actor (see scheduler_actor.hpp): startup (executor infos → runtime scheduler),
// message handlers, failure detection and the periodic status line. The step pipeline is in
// scheduler_steps.cpp.
#include "actors/detail/scheduler_state.hpp"

#include "actors/grammar_limit.hpp"
#include "actors/logging.hpp"
#include "common/error.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/text_decoder.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <optional>

namespace di::actors {

namespace {

using detail::scheduler_self;
using detail::scheduler_state;

/// One request of max_model_len tokens must fit alone. The scheduler checks it too, without
/// the keys to blame ("max_model_len 2000 needs 32 blocks of KV stream 4, the pool has 16"):
/// a smaller kv.num_blocks or kv.pool_tokens needs a smaller max_model_len.
void check_context_fits(const runtime::scheduler_config& c, const kv_section& kv, bool is_len_set) {
  const runtime::kv_geometry& g = c.blocks.geometry;
  auto short_stream = [&](std::int64_t len) -> std::optional<int> {  // one that lacks blocks
    for (int s = 0; s < g.num_streams(); ++s)
      if (g.num_blocks(s, len) > c.blocks.num_blocks[std::size_t(s)]) return s;
    return std::nullopt;
  };
  const std::optional<int> s = short_stream(c.max_model_len);
  if (!s) return;
  std::int64_t lo = 0, hi = c.max_model_len;  // the longest length that fits
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (short_stream(mid))
      hi = mid - 1;
    else
      lo = mid;
  }
  const std::int64_t needed = g.num_blocks(*s, c.max_model_len);
  if (kv.num_blocks > 0 && c.blocks.num_blocks[std::size_t(*s)] == kv.num_blocks)  // capped
    DI_FAIL(
        "kv.num_blocks = {} is too small for scheduler.max_model_len = {}: one request of "
        "that length needs {} blocks of KV stream {}; set scheduler.max_model_len to at "
        "most {} or raise kv.num_blocks",
        kv.num_blocks, c.max_model_len, needed, *s, lo);
  DI_FAIL(
      "kv.pool_tokens = {} is too small for {} = {}: one request of that length needs {} "
      "blocks of KV stream {}, the pool has {}; set scheduler.max_model_len to at most {} or "
      "raise kv.pool_tokens",
      kv.pool_tokens, is_len_set ? "scheduler.max_model_len" : "the runner's max_model_len",
      c.max_model_len, needed, *s, c.blocks.num_blocks[std::size_t(*s)], lo);
}

/// The runtime scheduler's configuration from the cluster file and the runner's report.
runtime::scheduler_config make_config(const scheduler_state& st, const executor_info& e) {
  const scheduler_section& l = st.params.limits;
  const kv_section& kv = st.params.kv;
  runtime::scheduler_config c;
  c.max_num_batched_tokens = l.max_num_batched_tokens;
  c.max_prefill_chunk = l.max_prefill_chunk;
  c.max_num_running = l.max_num_running;
  c.max_num_queued = l.max_num_queued;
  c.max_queued_tokens = l.max_queued_tokens;
  DI_CHECK(l.max_model_len <= e.runner.max_model_len,
           "scheduler.max_model_len = {} exceeds what the runner of {} supports ({})",
           l.max_model_len, e.runner.device, e.runner.max_model_len);
  c.max_model_len = l.max_model_len > 0 ? l.max_model_len : e.runner.max_model_len;
  c.eos_token_ids = st.params.eos_token_ids;
  c.blocks.geometry = e.geometry;
  c.blocks.num_blocks = e.runner.num_blocks;
  // A cap per stream: the streams' pools differ (V4.1's ratio-1 streams hold twice the blocks
  // of its ratio-2 ones), so a stream smaller than the cap keeps its pool. Only a cap above
  // every pool caps nothing.
  std::int32_t largest = 0;
  for (std::int32_t n : c.blocks.num_blocks) largest = std::max(largest, n);
  DI_CHECK(kv.num_blocks <= largest,
           "kv.num_blocks = {} exceeds the {} blocks of the largest KV pool the runner of {} has",
           kv.num_blocks, largest, e.runner.device);
  for (std::int32_t& n : c.blocks.num_blocks)
    if (kv.num_blocks > 0) n = std::min(n, std::int32_t(kv.num_blocks));
  check_context_fits(c, kv, l.max_model_len > 0);
  c.blocks.enable_prefix_caching = kv.enable_prefix_caching;
  c.blocks.enable_replay = kv.enable_replay;
  c.blocks.num_snapshots = std::min(kv.num_snapshots, e.runner.num_snapshots);
  c.blocks.snapshot_interval = c.blocks.num_snapshots > 0 ? kv.snapshot_interval : 0;
  return c;
}

/// Every executor answered: check they match, build the runtime scheduler, start serving.
void become_ready(scheduler_self self) {
  scheduler_state& st = self->state;
  const executor_info& e0 = *st.infos[0];
  try {
    for (std::size_t i = 1; i < st.infos.size(); ++i)
      DI_CHECK(st.infos[i]->runner.num_blocks == e0.runner.num_blocks &&
                   st.infos[i]->runner.max_model_len == e0.runner.max_model_len,
               "executors 0 and {} of group {} report different pools or context lengths", i,
               st.params.group);
    runtime::text_decoder_factory decoders;
    if (st.params.tokenizer) decoders = runtime::tokenizer_decoder_factory(*st.params.tokenizer);
    st.sched = std::make_unique<runtime::scheduler>(make_config(st, e0), std::move(decoders));
  } catch (const std::exception& e) {
    return detail::fail_group(self, fmt::format("group {} cannot start: {}", st.params.group, e.what()));
  }
  runtime::scheduler_stats s = st.sched->stats();
  st.info = {.group = st.params.group,
             .max_model_len = st.sched->config().max_model_len,
             .token_block_size = e0.geometry.token_block_size(),
             .num_blocks = s.num_blocks,
             .num_executors = int(st.infos.size()),
             .device = e0.runner.device};
  st.is_up = true;
  st.last_status_ns = now_ns();
  st.log->info("group {} ready: {} executor(s) on {}, {} KV blocks, context {} tokens",
               st.params.group, st.infos.size(), e0.runner.device, s.num_blocks,
               st.info.max_model_len);
  for (auto& rp : st.attach_waiters) rp.deliver(st.info);
  st.attach_waiters.clear();
}

void ask_executors(scheduler_self self) {
  scheduler_state& st = self->state;
  st.infos.resize(st.params.executors.size());
  const auto timeout = std::chrono::seconds(st.params.startup_timeout_s);
  for (std::size_t i = 0; i < st.params.executors.size(); ++i) {
    self->monitor(st.params.executors[i]);
    self->request(st.params.executors[i], timeout, info_atom::value)
        .then(
            [=](executor_info& info) {
              scheduler_state& s = self->state;
              s.infos[i] = std::move(info);
              for (const auto& x : s.infos)
                if (!x) return;
              become_ready(self);
            },
            [=](caf::error& err) {
              // An executor that quit before answering (stopped while its runner loaded, or
              // gone before the request reached it) answers only through CAF, or its own
              // goodbye: request_receiver_down, which says nothing of why. Its down message
              // follows (it is monitored) with the reason it quit with: on_down fails the
              // group with that.
              if (err == caf::sec::request_receiver_down) return;
              detail::fail_group(self, fmt::format("group {}: executor {} (node {}) did not start: {}",
                                                   self->state.params.group, i,
                                                   self->state.params.executor_nodes[i], describe(err)));
            });
  }
}

/// Request `id` no longer waits for its response_format: every executor drops it from the
/// compile it waits for, which stops once no request waits for it (it used to run on to the
/// limit for nobody, a core busy for up to 100 s).
void abandon_compiles(scheduler_self self, std::uint64_t id) {
  for (const executor_actor& e : self->state.params.executors)
    self->send(e, abandon_grammar_atom::value, id);
}

void on_down(scheduler_self self, const caf::down_msg& dm) {
  scheduler_state& st = self->state;
  for (std::size_t i = 0; i < st.params.executors.size(); ++i) {
    if (dm.source != st.params.executors[i].address()) continue;
    if (!st.sched)  // before the group started: as ask_executors words it
      return detail::fail_group(
          self, fmt::format("group {}: executor {} (node {}) did not start: {}", st.params.group, i,
                            st.params.executor_nodes[i], describe_down(dm.reason)));
    return detail::fail_group(
        self, fmt::format("group {}: executor {} on node {} is down ({})", st.params.group, i,
                          st.params.executor_nodes[i], describe_down(dm.reason)));
  }
  if (st.router && dm.source == st.router->address()) {
    if (dm.reason != caf::exit_reason::user_shutdown)
      st.log->warn("group {}: the router is down ({}); aborting live requests", st.params.group,
                   describe(dm.reason));
    if (st.sched) st.sched->fail_all("the router is down", runtime::failure_kind::unavailable);
    // Requests whose grammar still compiles end too: admitted later, they would run with
    // nobody to hear them (until session 51 they did). Their compiles stop unless another
    // request waits for them.
    for (auto& [id, p] : st.preparing) {
      abandon_compiles(self, id);
      p->is_ended = true;
      p->request = {};
      p->reply.deliver(runtime::admission_result{runtime::admission_status::unavailable,
                                                 "the router is down", ""});
    }
    st.preparing.clear();
    st.router.reset();
  }
}

group_status make_status(const scheduler_state& st) {
  group_status g{.group = st.params.group, .is_up = st.is_up, .down_reason = st.down_reason,
                 .scheduler_node = st.params.node, .executor_nodes = st.params.executor_nodes,
                 .timing = st.timing};
  if (st.sched) g.stats = st.sched->stats();
  g.stats.counters.num_aborts += st.num_prepare_aborts;
  g.stats.counters.num_refused += st.num_prepare_refusals;
  return g;
}

/// The periodic status line: throughput since the last line, batch, KV use, prefix hits.
void status_line(scheduler_self self) {
  scheduler_state& st = self->state;
  if (!st.sched) return;
  const std::int64_t now = now_ns();
  const double dt = double(now - st.last_status_ns) * 1e-9;
  const runtime::scheduler_stats s = st.sched->stats();
  const runtime::scheduler_counters& c = s.counters;
  const runtime::scheduler_counters& p = st.last_counters;
  if (c.num_steps == p.num_steps && s.num_running + s.num_waiting == 0) return;
  const double kv_use = s.num_blocks ? 100.0 * double(s.num_used_blocks) / double(s.num_blocks) : 0;
  const double hit = c.num_prefix_queries ? 100.0 * double(c.num_prefix_hits) / double(c.num_prefix_queries) : 0;
  const double idle = st.timing.run_ns ? 100.0 * double(st.timing.gap_ns) / double(st.timing.run_ns) : 0;
  st.log->info("group {}: prefill {:.0f} tok/s, decode {:.0f} tok/s, running {}, waiting {}, "
               "KV {:.1f}% ({} cached), prefix hits {:.1f}% ({}/{}), preempted {}, steps {}, "
               "executor idle {:.2f}%",
               st.params.group, double(c.num_prefill_tokens - p.num_prefill_tokens) / dt,
               double(c.num_decode_tokens - p.num_decode_tokens) / dt, s.num_running, s.num_waiting,
               kv_use, s.num_cached_blocks, hit, c.num_prefix_hits, c.num_prefix_queries,
               c.num_preemptions, c.num_steps, idle);
  st.last_counters = c;
  st.last_status_ns = now;
}

void on_tick(scheduler_self self) {
  scheduler_state& st = self->state;
  detail::check_deadline(self);
  if (st.is_failed) return;
  const double every = st.params.status_interval_s;
  if (every > 0 && double(now_ns() - st.last_status_ns) * 1e-9 >= every) status_line(self);
  self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
}

caf::result<group_info> on_attach(scheduler_self self, attach_router& msg) {
  scheduler_state& st = self->state;
  if (st.router && st.router->address() != msg.router.address()) self->demonitor(st.router->address());
  st.router = msg.router;
  self->monitor(msg.router);
  if (st.is_failed) return caf::make_error(caf::sec::runtime_error, st.down_reason);
  if (st.is_up) return st.info;
  auto rp = self->make_response_promise<group_info>();
  st.attach_waiters.push_back(rp);
  return rp;
}

caf::error not_serving(const scheduler_state& st) {
  return caf::make_error(caf::sec::runtime_error,
                         fmt::format("group {} is not serving{}{}", st.params.group,
                                     st.down_reason.empty() ? "" : ": ", st.down_reason));
}

runtime::admission_result admit(scheduler_self self, runtime::request request) {
  runtime::admission_result r = self->state.sched->add_request(std::move(request));
  if (r.is_accepted()) detail::pump(self);
  return r;
}

/// A request with a response_format is admitted once every executor of the group has compiled
/// its grammar on its grammar thread: compiled inside a step, it stalled every sequence of the
/// batch for the compile (seconds for a large schema). Until then it is in st.preparing, where
/// an abort finds it (abort_preparing).
caf::result<runtime::admission_result> prepare_then_admit(scheduler_self self,
                                                          runtime::request request) {
  const std::uint64_t id = request.id;
  if (self->state.preparing.contains(id))
    return runtime::admission_result{runtime::admission_status::duplicate_id,
                                     fmt::format("request id {} is being prepared already", id),
                                     ""};
  auto p = std::make_shared<detail::preparing_request>();
  p->request = std::move(request);
  p->reply = self->make_response_promise<runtime::admission_result>();
  p->start_ns = now_ns();
  self->state.preparing.emplace(id, p);
  const std::vector<executor_actor>& executors = self->state.params.executors;
  // The request is answered once every executor has compiled its grammar, or at the first that
  // could not: the others' compiles of it are then abandoned (they stop unless another request
  // waits for them). It waited for them all, and they compiled on for nobody, up to the limit.
  auto answered = [=](std::string error) -> void {
    if (p->error.empty()) p->error = std::move(error);
    const bool is_last = ++p->num_answers >= self->state.params.executors.size();
    scheduler_state& st = self->state;
    if (p->is_ended) return;  // aborted, or refused, meanwhile: answered then
    if (!is_last && p->error.empty()) return;
    st.preparing.erase(id);
    p->is_ended = true;
    if (!is_last) abandon_compiles(self, id);
    const double seconds = double(now_ns() - p->start_ns) * 1e-9;
    auto refuse = [&](auto r) {  // an admission_result, or not_serving's error
      ++st.num_prepare_refusals;
      p->reply.deliver(std::move(r));
    };
    if (!st.is_up) {
      refuse(not_serving(st));
    } else if (!p->error.empty()) {
      refuse(runtime::admission_result{runtime::admission_status::invalid_request,
                                       "invalid response_format: " + p->error, "response_format"});
    } else if (p->is_too_slow || now_ns() - p->start_ns > grammar_prepare_limit().count()) {
      refuse(runtime::admission_result{runtime::admission_status::invalid_request,
                                       grammar_too_slow(seconds), "response_format"});
    } else {
      if (seconds > 1)
        st.log->info("group {}: a response_format compiled in {:.1f} s (off the step loop)",
                     st.params.group, seconds);
      p->reply.deliver(admit(self, std::move(p->request)));
    }
  };
  for (const executor_actor& e : executors)
    self->request(e, grammar_prepare_limit(), prepare_grammar_atom::value, id,
                  p->request.params.response_format)
        .then([=](std::string& error) { answered(std::move(error)); },
              [=](caf::error& err) {
                // Past the limit: refused as too slow (it was "an executor did not compile it:
                // request_timeout", so the limit's own message never showed).
                if (err == caf::sec::request_timeout) {
                  p->is_too_slow = true;
                  return answered("");
                }
                answered(fmt::format("an executor did not compile it: {}", describe(err)));
              });
  return p->reply;
}

/// An abort of a request whose grammar is still compiling: it ends now, as an abort of a
/// request queued but not yet running does -- accepted, then one final event finished_abort
/// with no tokens (the reply first, as every admitted request's events follow its reply) --
/// and is never admitted. The executors drop it from their compiles, which stop once no
/// request waits for them (executor_actor.cpp; one shared with a live request runs on), and
/// its answers, success or failure, are ignored. False when no request with this id is being
/// prepared.
bool abort_preparing(scheduler_self self, std::uint64_t id) {
  scheduler_state& st = self->state;
  auto it = st.preparing.find(id);
  if (it == st.preparing.end()) return false;
  std::shared_ptr<detail::preparing_request> p = std::move(it->second);
  st.preparing.erase(it);
  p->is_ended = true;
  p->request = {};  // the prompt is not needed any more
  ++st.num_prepare_aborts;
  abandon_compiles(self, id);
  p->reply.deliver(runtime::admission_result{});
  detail::emit(self, {{.request_id = id, .status = runtime::sequence_status::finished_abort}});
  return true;
}

caf::result<runtime::admission_result> on_start(scheduler_self self, start_request& msg) {
  scheduler_state& st = self->state;
  if (!st.is_up) return not_serving(st);
  if (!msg.request.params.response_format.empty())
    return prepare_then_admit(self, std::move(msg.request));
  return admit(self, std::move(msg.request));
}

scheduler_actor::behavior_type scheduler_impl(scheduler_self self, scheduler_params params) {
  self->state.params = std::move(params);
  self->state.log = component_logger(fmt::format("scheduler.g{}", self->state.params.group));
  self->set_down_handler([=](caf::down_msg& dm) { on_down(self, dm); });
  self->set_default_handler([](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
    return caf::make_error(caf::sec::unexpected_message);
  });
  ask_executors(self);
  self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
  return {
      [=](attach_router& msg) { return on_attach(self, msg); },
      [=](start_request& msg) { return on_start(self, msg); },
      [=](abort_request& msg) {
        // An id it does not have is ignored: refused or ended already. The router's abort of a
        // request comes after its start_request (one sender's order), never before it.
        if (abort_preparing(self, msg.id) || !self->state.sched) return;
        if (std::optional<runtime::token_event> e = self->state.sched->abort(msg.id)) {
          detail::emit(self, {std::move(*e)});
          detail::pump(self);  // tells the executors to drop it
        }
      },
      [=](prefix_probe& msg) -> std::int64_t {
        return self->state.sched ? self->state.sched->longest_cached_prefix(msg.tokens, msg.root)
                                 : 0;
      },
      [=](status_atom) { return make_status(self->state); },
      [=](tick_atom) { on_tick(self); },
  };
}

}  // namespace

scheduler_actor spawn_scheduler_actor(caf::actor_system& sys, scheduler_params params) {
  return sys.spawn(scheduler_impl, std::move(params));
}

}  // namespace di::actors
