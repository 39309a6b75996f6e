// The executor actor (see executor_actor.hpp).
#include "actors/executor_actor.hpp"

#include "actors/logging.hpp"
#include "common/error.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <optional>

namespace di::actors {

namespace {

struct executor_state {
  static inline const char* name = "executor";
  executor_state() = default;

  executor_params params;
  runner_bundle bundle;
  std::shared_ptr<spdlog::logger> log;
  std::optional<std::uint64_t> last_step_id;  // of the last plan with rows
  std::vector<std::uint64_t> last_seq_ids;    // its sequences, sorted
  std::int64_t last_end_ns = 0;
};

using self_ptr = executor_actor::stateful_pointer<executor_state>;

/// Loads the runner on first use; an error value when it cannot be loaded.
caf::error ensure_loaded(self_ptr self) {
  executor_state& st = self->state;
  if (st.bundle.runner) return {};
  try {
    st.bundle = st.params.make_runner();
    const runtime::runner_info info = st.bundle.runner->info();
    st.log->info("{}: runner ready on {} ({} block pools, max_model_len {})", st.params.label,
                 info.device, info.num_blocks.size(), info.max_model_len);
    return {};
  } catch (const std::exception& e) {
    return caf::make_error(caf::sec::runtime_error,
                           fmt::format("{}: cannot load the runner: {}", st.params.label, e.what()));
  }
}

/// True when the plan continues the previous one: the next step id with a common sequence
/// (the scheduler could have planned it while the previous step ran).
bool continues(const executor_state& st, const runtime::step_plan& plan) {
  if (!st.last_step_id || plan.step_id != *st.last_step_id + 1) return false;
  for (const runtime::scheduled_sequence& s : plan.sequences)
    if (std::binary_search(st.last_seq_ids.begin(), st.last_seq_ids.end(), s.seq_id)) return true;
  return false;
}

caf::result<step_done> run_one(self_ptr self, run_step& msg) {
  executor_state& st = self->state;
  const std::int64_t start = now_ns();
  if (caf::error err = ensure_loaded(self)) {
    self->quit(err);
    return err;
  }
  const runtime::step_plan& plan = msg.plan;
  step_done done{.received_ns = start};
  if (!plan.sequences.empty() && continues(st, plan)) {
    done.gap_ns = start - st.last_end_ns;
    done.was_ready = msg.sent_ns <= st.last_end_ns;
  }
  try {
    done.result = st.bundle.runner->run(plan);
  } catch (const std::exception& e) {
    caf::error err = caf::make_error(
        caf::sec::runtime_error,
        fmt::format("{} failed at step {}: {}", st.params.label, plan.step_id, e.what()));
    st.log->error("{}", describe(err));
    self->quit(err);
    return err;
  }
  const std::int64_t end = now_ns();
  done.run_ns = end - start;
  if (!plan.sequences.empty()) {
    st.last_step_id = plan.step_id;
    st.last_seq_ids.clear();
    for (const runtime::scheduled_sequence& s : plan.sequences) st.last_seq_ids.push_back(s.seq_id);
    std::sort(st.last_seq_ids.begin(), st.last_seq_ids.end());
    st.last_end_ns = end;
  }
  return done;
}

executor_actor::behavior_type executor_impl(self_ptr self, executor_params params) {
  self->state.params = std::move(params);
  self->state.log = component_logger("executor");
  self->set_default_handler([](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
    return caf::make_error(caf::sec::unexpected_message);
  });
  return {
      [=](info_atom) -> caf::result<executor_info> {
        if (caf::error err = ensure_loaded(self)) {
          self->quit(err);
          return err;
        }
        const runner_bundle& b = self->state.bundle;
        return executor_info{b.runner->info(), b.geometry, self->state.params.node};
      },
      [=](run_step& msg) -> caf::result<step_done> { return run_one(self, msg); },
  };
}

}  // namespace

executor_actor spawn_executor_actor(caf::actor_system& sys, executor_params params) {
  return sys.spawn<caf::detached>(executor_impl, std::move(params));
}

}  // namespace di::actors
