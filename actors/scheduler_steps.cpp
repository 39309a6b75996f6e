// The scheduler actor's step pipeline: plan, send to every executor of the group, collect the
// answers in step order, check that the executors agree, apply, stream the events — with up to
// two plans with rows in flight when overlap is on (the one running and the next one waiting
// in the executors' mailboxes).
#include "actors/detail/scheduler_state.hpp"

#include <caf/all.hpp>
#include <caf/binary_serializer.hpp>

namespace di::actors::detail {

namespace {

/// Every 16th step's messages (by step id) are serialized once more to measure their size.
constexpr std::int64_t size_sample_every = 16;

template <class T>
std::int64_t serialized_bytes(scheduler_self self, T& value) {
  std::vector<char> buf;
  caf::binary_serializer sink{self->system(), buf};
  if (auto err = sink(value)) return 0;
  return std::int64_t(buf.size());
}

bool same_tokens(const runtime::step_result& a, const runtime::step_result& b) {
  if (a.step_id != b.step_id || a.outputs.size() != b.outputs.size()) return false;
  for (std::size_t i = 0; i < a.outputs.size(); ++i)
    if (a.outputs[i].seq_id != b.outputs[i].seq_id ||
        a.outputs[i].token_ids != b.outputs[i].token_ids ||
        a.outputs[i].error != b.outputs[i].error)
      return false;
  return true;
}

void record_timing(scheduler_self self, const pending_step& ps) {
  executor_timing& t = self->state.timing;
  const step_done& d = *ps.replies[0];
  ++t.num_steps;
  t.run_ns += d.run_ns;
  if (d.gap_ns >= 0) {
    ++t.num_gaps;
    t.gap_ns += d.gap_ns;
    t.max_gap_ns = std::max(t.max_gap_ns, d.gap_ns);
    t.num_ready += d.was_ready;
  }
  if (ps.is_direct) {
    ++t.num_direct;
    t.direct_overhead_ns += std::max<std::int64_t>(0, now_ns() - ps.sent_ns - d.run_ns);
  }
}

/// Applies a complete step: agreement check, timing, runtime apply, events.
void process_step(scheduler_self self, pending_step& ps) {
  scheduler_state& st = self->state;
  if (!ps.has_rows) return;
  const runtime::step_result& r0 = ps.replies[0]->result;
  for (std::size_t i = 1; i < ps.replies.size(); ++i)
    if (!same_tokens(r0, ps.replies[i]->result))
      return fail_group(self, fmt::format("group {}: executors 0 and {} disagree at step {}",
                                          st.params.group, i, ps.step_id));
  record_timing(self, ps);
  if (ps.plan_bytes > 0) {
    ++st.timing.num_sized;
    st.timing.plan_bytes += ps.plan_bytes;
    st.timing.result_bytes += serialized_bytes(self, *ps.replies[0]);
  }
  runtime::apply_outcome out = st.sched->apply(r0);
  if (!out.is_ok())
    return fail_group(self, fmt::format("group {}: executor 0 answered step {} wrongly: {}",
                                        st.params.group, ps.step_id, out.error));
  emit(self, std::move(out.events));
}

void on_step_done(scheduler_self self, std::size_t executor, step_done done) {
  scheduler_state& st = self->state;
  if (st.is_failed) return;
  for (pending_step& ps : st.in_flight) {
    if (ps.step_id != done.result.step_id) continue;
    if (!ps.replies[executor]) ++ps.num_replies;
    ps.replies[executor] = std::move(done);
    break;
  }
  while (!st.in_flight.empty() &&
         st.in_flight.front().num_replies == int(st.in_flight.front().replies.size())) {
    pending_step ps = std::move(st.in_flight.front());
    st.in_flight.pop_front();
    if (ps.has_rows) --st.num_row_steps_in_flight;
    process_step(self, ps);
    if (st.is_failed) return;
  }
  pump(self);
}

void send_plan(scheduler_self self, runtime::step_plan plan) {
  scheduler_state& st = self->state;
  const std::size_t n = st.params.executors.size();
  pending_step ps{.step_id = plan.step_id,
                  .has_rows = !plan.sequences.empty(),
                  .sent_ns = now_ns(),
                  .is_direct = st.num_row_steps_in_flight == 0,
                  .replies = std::vector<std::optional<step_done>>(n)};
  run_step msg{std::move(plan), ps.sent_ns};
  if (ps.has_rows) {
    ++st.num_row_steps_in_flight;
    if (ps.step_id % size_sample_every == 0) ps.plan_bytes = serialized_bytes(self, msg);
  }
  const std::uint64_t step_id = ps.step_id;
  st.in_flight.push_back(std::move(ps));
  for (std::size_t i = 0; i < n; ++i) {
    self->request(st.params.executors[i], caf::infinite, msg)
        .then([=](step_done& done) { on_step_done(self, i, std::move(done)); },
              [=](caf::error& err) {
                // An executor stopped from outside answers request_receiver_down, without
                // why; its down message follows with the reason (on_down fails the group).
                if (err == caf::sec::request_receiver_down) return;
                fail_group(self, fmt::format("group {}: executor {} (node {}) failed step {}: {}",
                                             self->state.params.group, i,
                                             self->state.params.executor_nodes[i], step_id,
                                             describe(err)));
              });
  }
}

}  // namespace

void pump(scheduler_self self) {
  scheduler_state& st = self->state;
  const int depth = st.params.limits.overlap ? 2 : 1;
  while (st.is_up && !st.is_failed && st.num_row_steps_in_flight < depth) {
    runtime::step_plan plan = st.sched->schedule();
    if (plan.is_empty()) return;
    const bool has_rows = !plan.sequences.empty();
    send_plan(self, std::move(plan));
    if (!has_rows && !st.sched->has_unfinished()) return;
  }
}

void emit(scheduler_self self, std::vector<runtime::token_event> events) {
  scheduler_state& st = self->state;
  if (events.empty() || !st.router) return;
  self->send(*st.router, group_events{st.params.group, std::move(events)});
}

void fail_group(scheduler_self self, const std::string& reason) {
  scheduler_state& st = self->state;
  if (st.is_failed) return;
  st.is_failed = true;
  st.is_up = false;
  st.down_reason = reason;
  st.log->error("{}; failing its requests and stopping", reason);
  if (st.sched) emit(self, st.sched->fail_all(reason, runtime::failure_kind::unavailable));
  st.in_flight.clear();
  st.num_row_steps_in_flight = 0;
  for (auto& rp : st.attach_waiters) rp.deliver(caf::make_error(caf::sec::runtime_error, reason));
  st.attach_waiters.clear();
  for (const executor_actor& e : st.params.executors)
    self->send_exit(e, caf::exit_reason::user_shutdown);
  self->quit(caf::make_error(caf::sec::runtime_error, reason));
}

void check_deadline(scheduler_self self) {
  scheduler_state& st = self->state;
  if (st.in_flight.empty() || st.is_failed) return;
  const pending_step& front = st.in_flight.front();
  const std::int64_t limit_ns = std::int64_t(st.params.limits.step_timeout_s) * 1000000000;
  if (now_ns() - front.sent_ns > limit_ns)
    fail_group(self, fmt::format("group {}: step {} got no answer from its executors within {} s "
                                 "(scheduler.step_timeout_s)",
                                 st.params.group, front.step_id, st.params.limits.step_timeout_s));
}

}  // namespace di::actors::detail
