// The executor actor (see executor_actor.hpp): a scheduled actor in front of a device thread.
// The actor queues each request as a job and answers it when the device thread reports the
// job done; the device thread owns the runner and runs the jobs in arrival order. Grammars
// (a request's response_format) compile on a third thread, started on first use, into the
// cache the runner reads, while the device thread goes on running steps; requests for a spec
// that is compiling wait for that compile, which stops once the last of them has waited the
// limit (it used to run on to its end, holding the grammar thread: minutes for a hostile
// schema, and every later grammar queued behind it) or has been aborted (abandon_grammar_atom)
// or its scheduler has gone down (it used to run on to the limit, 100 s, with nobody waiting).
#include "actors/executor_actor.hpp"

#include "actors/logging.hpp"
#include "common/error.hpp"
#include "runtime/grammar/compile_interrupt.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <variant>
#include <vector>

namespace di::actors {

namespace {

/// One request for the device thread: the runner's info (nullopt) or one plan to run.
struct device_job {
  std::uint64_t id = 0;
  std::optional<run_step> step;
};

/// What a job produced: the answer, or an error after which the executor stops.
using job_outcome = std::variant<executor_info, step_done, caf::error>;

/// A thread that runs queued jobs in order (`run` on the thread) and, as it ends, `finish`.
/// Destruction lets the job in progress finish, drops the queued ones and joins the thread
/// (detaches instead when called on the thread itself, e.g. if it released the actor's last
/// handle).
template <class Job>
class job_thread {
 public:
  explicit job_thread(std::function<void(Job&)> run, std::function<void()> finish = {})
      : run_(std::move(run)), finish_(std::move(finish)) {
    thread_ = std::thread([this] { loop(); });
  }
  job_thread(const job_thread&) = delete;
  job_thread& operator=(const job_thread&) = delete;
  ~job_thread() {
    {
      std::lock_guard lock(mutex_);
      is_stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.get_id() == std::this_thread::get_id())
      thread_.detach();
    else
      thread_.join();
  }

  void push(Job job) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    wake_.notify_all();
  }

 private:
  void loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return is_stopping_ || !jobs_.empty(); });
        if (is_stopping_) break;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      run_(job);
    }
    if (finish_) finish_();
  }

  std::function<void(Job&)> run_;
  std::function<void()> finish_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  bool is_stopping_ = false;
  std::thread thread_;  // last: starts after everything it uses exists
};

/// The device thread and the jobs between it and the actor. Everything below `mutex` is
/// shared; the runner and the step-gap bookkeeping belong to the thread alone.
class device_thread {
 public:
  device_thread(executor_params params, caf::actor_addr owner)
      : params_(std::move(params)),
        owner_(std::move(owner)),
        log_(component_logger("executor")),
        // the runner dies on the thread that made it (a device context lives there)
        thread_([this](device_job& job) { run_job(job); }, [this] { bundle_ = {}; }) {}

  void push(device_job job) { thread_.push(std::move(job)); }

  /// The runner's grammar preparer (step_runner::grammar_preparer) once it has loaded.
  std::function<void(const std::string&)> grammar_preparer() {
    std::lock_guard lock(mutex_);
    return preparer_;
  }
  /// The runner's grammar lookup (step_runner::grammar_lookup) once it has loaded.
  std::function<bool(const std::string&)> grammar_lookup() {
    std::lock_guard lock(mutex_);
    return lookup_;
  }

  /// The outcome of finished job `id` (taken out), if there is one.
  std::optional<job_outcome> take(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    auto it = done_.find(id);
    if (it == done_.end()) return std::nullopt;
    job_outcome out = std::move(it->second);
    done_.erase(it);
    return out;
  }

 private:
  void run_job(device_job& job) {
    job_outcome out = job.step ? run_one(*job.step) : info();
    {
      std::lock_guard lock(mutex_);
      done_.emplace(job.id, std::move(out));
    }
    // A weak address: the thread must not keep the actor alive. Gone actor: nobody waits.
    if (caf::actor owner = caf::actor_cast<caf::actor>(owner_))
      caf::anon_send(owner, step_ran_atom::value, job.id);
  }

  /// Loads the runner on first use; an error when it cannot be loaded.
  caf::error ensure_loaded() {
    if (bundle_.runner) return {};
    try {
      bundle_ = params_.make_runner();
      {
        std::lock_guard lock(mutex_);
        preparer_ = bundle_.runner->grammar_preparer();
        lookup_ = bundle_.runner->grammar_lookup();
      }
      const runtime::runner_info info = bundle_.runner->info();
      log_->info("{}: runner ready on {} ({} block pools, max_model_len {})", params_.label,
                 info.device, info.num_blocks.size(), info.max_model_len);
      return {};
    } catch (const std::exception& e) {
      return caf::make_error(caf::sec::runtime_error, fmt::format("{}: cannot load the runner: {}",
                                                                  params_.label, e.what()));
    }
  }

  job_outcome info() {
    if (caf::error err = ensure_loaded()) return err;
    return executor_info{bundle_.runner->info(), bundle_.geometry, params_.node};
  }

  /// True when the plan continues the previous one: the next step id with a common sequence
  /// (the scheduler could have planned it while the previous step ran).
  bool continues(const runtime::step_plan& plan) const {
    if (!last_step_id_ || plan.step_id != *last_step_id_ + 1) return false;
    for (const runtime::scheduled_sequence& s : plan.sequences)
      if (std::binary_search(last_seq_ids_.begin(), last_seq_ids_.end(), s.seq_id)) return true;
    return false;
  }

  job_outcome run_one(const run_step& msg) {
    const std::int64_t start = now_ns();
    if (caf::error err = ensure_loaded()) return err;
    const runtime::step_plan& plan = msg.plan;
    step_done done{.received_ns = start};
    if (!plan.sequences.empty() && continues(plan)) {
      done.gap_ns = start - last_end_ns_;
      done.was_ready = msg.sent_ns <= last_end_ns_;
    }
    try {
      done.result = bundle_.runner->run(plan);
    } catch (const std::exception& e) {
      caf::error err = caf::make_error(
          caf::sec::runtime_error,
          fmt::format("{} failed at step {}: {}", params_.label, plan.step_id, e.what()));
      log_->error("{}", describe(err));
      return err;
    }
    const std::int64_t end = now_ns();
    done.run_ns = end - start;
    if (!plan.sequences.empty()) {
      last_step_id_ = plan.step_id;
      last_seq_ids_.clear();
      for (const runtime::scheduled_sequence& s : plan.sequences) last_seq_ids_.push_back(s.seq_id);
      std::sort(last_seq_ids_.begin(), last_seq_ids_.end());
      last_end_ns_ = end;
    }
    return done;
  }

  executor_params params_;
  caf::actor_addr owner_;
  std::shared_ptr<spdlog::logger> log_;
  // The device thread's own.
  runner_bundle bundle_;
  std::optional<std::uint64_t> last_step_id_;  // of the last plan with rows
  std::vector<std::uint64_t> last_seq_ids_;    // its sequences, sorted
  std::int64_t last_end_ns_ = 0;
  // Shared.
  std::mutex mutex_;
  std::map<std::uint64_t, job_outcome> done_;
  std::function<void(const std::string&)> preparer_;
  std::function<bool(const std::string&)> lookup_;
  job_thread<device_job> thread_;  // last: starts after everything it uses exists
};

/// A response_format spec to compile off the device thread; the actor hears how it ended
/// (grammar_done_atom).
struct grammar_job {
  std::uint64_t id = 0;
  std::function<void(const std::string&)> prepare;
  std::string spec;
  std::shared_ptr<const grammar::compile_cancel> cancel;  ///< set by the actor
};

/// Compiles `job` and tells `owner` ("" or the error).
void compile_grammar_job(grammar_job& job, const caf::actor_addr& owner) {
  std::string error;
  try {
    const grammar::interrupt_scope cancellable(*job.cancel);
    job.cancel->check();  // one that everybody gave up on while it queued does not start
    job.prepare(job.spec);
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "the grammar did not compile";
  }
  if (caf::actor a = caf::actor_cast<caf::actor>(owner))
    caf::anon_send(a, grammar_done_atom::value, job.id, std::move(error));
}

/// A request waiting for a compile: request `id` of the actor `from` (its scheduler).
struct grammar_waiter {
  caf::actor_addr from;
  std::uint64_t id = 0;
  caf::typed_response_promise<std::string> reply;
};

/// A compile on the grammar thread and the requests waiting for it.
struct grammar_compile {
  std::string spec;
  std::shared_ptr<grammar::compile_cancel> cancel;
  std::vector<grammar_waiter> waiting;
};

struct executor_state {
  static inline const char* name = "executor";
  std::unique_ptr<device_thread> device;
  std::chrono::nanoseconds grammar_limit{0};
  std::uint64_t next_job = 0;
  /// The requests waiting for their job, by job id.
  std::map<std::uint64_t, caf::typed_response_promise<executor_info>> info_waiting;
  std::map<std::uint64_t, caf::typed_response_promise<step_done>> step_waiting;
  std::unique_ptr<job_thread<grammar_job>> grammar;  ///< started by the first response_format
  std::map<std::uint64_t, grammar_compile> compiles;  ///< by job id, queued or running
  std::map<std::string, std::uint64_t> compiling;     ///< the job a request for a spec joins
  /// The actors that have waited for a compile (schedulers), monitored: one that goes down
  /// stops waiting (drop_requester).
  std::set<caf::actor_addr> requesters;

  executor_state() = default;
  executor_state(const executor_state&) = delete;
  executor_state& operator=(const executor_state&) = delete;
  /// Runs when the actor exits (CAF 0.17 destroys a state in on_exit): joins the device
  /// thread (after its current step) and fails the requests still waiting.
  ~executor_state() {
    device.reset();
    for (auto& [id, c] : compiles) c.cancel->cancel("the executor is stopping");
    grammar.reset();
    const caf::error gone = caf::make_error(caf::sec::request_receiver_down);
    for (auto& [id, rp] : info_waiting) rp.deliver(gone);
    for (auto& [id, rp] : step_waiting) rp.deliver(gone);
    for (auto& [id, c] : compiles)
      for (grammar_waiter& w : c.waiting) w.reply.deliver(gone);
  }
};

using self_ptr = executor_actor::stateful_pointer<executor_state>;

/// Answers job `id` with its outcome; an error also stops the executor (a failed device).
void on_job_done(self_ptr self, std::uint64_t id) {
  executor_state& st = self->state;
  std::optional<job_outcome> out = st.device ? st.device->take(id) : std::nullopt;
  if (!out) return;
  caf::error failure;
  if (auto* err = std::get_if<caf::error>(&*out)) failure = *err;
  if (auto it = st.info_waiting.find(id); it != st.info_waiting.end()) {
    if (failure)
      it->second.deliver(failure);
    else
      it->second.deliver(std::get<executor_info>(std::move(*out)));
    st.info_waiting.erase(it);
  } else if (auto jt = st.step_waiting.find(id); jt != st.step_waiting.end()) {
    if (failure)
      jt->second.deliver(failure);
    else
      jt->second.deliver(std::get<step_done>(std::move(*out)));
    st.step_waiting.erase(jt);
  }
  if (failure) self->quit(failure);
}

/// Request `id` of the sender compiles `spec`: it waits for the spec's compile, a new one when
/// none is in progress. A compile stops (grammar::compile_cancel) once grammar_limit has passed
/// since the last of its requests came -- each request that joins it moves its deadline -- or
/// once none of its requests waits any more (abandon_grammar, drop_requester).
caf::result<std::string> prepare_grammar(self_ptr self, std::uint64_t id, std::string& spec) {
  executor_state& st = self->state;
  std::function<void(const std::string&)> prepare = st.device->grammar_preparer();
  if (!prepare) return std::string();  // the runner reports it for the request
  // Compiled already: answered at once, not queued behind other compiles on the thread.
  if (auto lookup = st.device->grammar_lookup(); lookup && lookup(spec)) return std::string();
  if (!st.grammar)
    st.grammar = std::make_unique<job_thread<grammar_job>>(
        [owner = self->address()](grammar_job& job) { compile_grammar_job(job, owner); });
  std::uint64_t job = 0;
  auto it = st.compiling.find(spec);
  if (it != st.compiling.end() && st.compiles.at(it->second).cancel->extend_deadline()) {
    job = it->second;
  } else {
    // None, or one past its deadline (stopping; its requests are answered when it has).
    if (it != st.compiling.end()) st.compiling.erase(it);
    job = st.next_job++;
    auto cancel = std::make_shared<grammar::compile_cancel>(st.grammar_limit);
    st.compiles[job] = {.spec = spec, .cancel = cancel, .waiting = {}};
    st.compiling.emplace(spec, job);
    st.grammar->push({.id = job, .prepare = std::move(prepare), .spec = spec, .cancel = cancel});
  }
  // The sender before the promise: making it takes the sender out of the current message.
  // It is monitored: a scheduler that goes down without a word (killed, its node lost) no
  // longer waits (drop_requester).
  const caf::strong_actor_ptr& sender = self->current_sender();
  auto from = caf::actor_cast<caf::actor_addr>(sender);
  if (sender && st.requesters.insert(from).second) self->monitor(sender);
  auto rp = self->make_response_promise<std::string>();
  st.compiles[job].waiting.push_back({.from = std::move(from), .id = id, .reply = rp});
  return rp;
}

/// The waiters `is_gone` picks stop waiting (each answered `answer`, if any), and a compile
/// that nobody waits for any more is cancelled -- it stops at its next check, or never starts
/// if it is still queued, instead of running on to the limit for nobody. A compile that
/// another request still waits for runs on.
void drop_waiters(executor_state& st, const std::function<bool(const grammar_waiter&)>& is_gone,
                  const std::optional<std::string>& answer) {
  for (auto& [job, c] : st.compiles) {
    const std::size_t before = c.waiting.size();
    std::erase_if(c.waiting, [&](grammar_waiter& w) {
      if (!is_gone(w)) return false;
      if (answer) w.reply.deliver(*answer);
      return true;
    });
    if (c.waiting.size() == before || !c.waiting.empty()) continue;
    c.cancel->cancel("no request waits for it any more");
    // A later request for the spec starts a new compile (this one is stopping); this one's
    // entry goes when the grammar thread reports it ended.
    if (auto s = st.compiling.find(c.spec); s != st.compiling.end() && s->second == job)
      st.compiling.erase(s);
  }
}

/// Request `id` of the sender was aborted: it stops waiting for its compile (answered now, an
/// answer its scheduler ignores); a compile that nobody waits for any more is cancelled.
void abandon_grammar(self_ptr self, std::uint64_t id) {
  const auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  drop_waiters(
      self->state, [&](const grammar_waiter& w) { return w.id == id && w.from == from; },
      std::string("the request was aborted"));
}

/// A requester (a scheduler) is down -- killed, or its node lost -- without having aborted its
/// requests: none of them waits any more (nobody hears an answer), and a compile that nobody
/// waits for any more is cancelled. They ran on to the limit (100 s) for nobody.
void drop_requester(self_ptr self, const caf::down_msg& dm) {
  executor_state& st = self->state;
  if (st.requesters.erase(dm.source) == 0) return;
  drop_waiters(
      st, [&](const grammar_waiter& w) { return w.from == dm.source; }, std::nullopt);
}

/// Compile `job` ended: its requests get `error` ("" when it compiled; a cancelled compile's
/// requests have been refused as too slow by their scheduler by then).
void finish_grammar(self_ptr self, std::uint64_t job, std::string& error) {
  executor_state& st = self->state;
  auto it = st.compiles.find(job);
  if (it == st.compiles.end()) return;
  for (grammar_waiter& w : it->second.waiting) w.reply.deliver(error);
  if (auto c = st.compiling.find(it->second.spec); c != st.compiling.end() && c->second == job)
    st.compiling.erase(c);
  st.compiles.erase(it);
}

executor_actor::behavior_type executor_impl(self_ptr self, executor_params params) {
  self->state.grammar_limit = params.grammar_limit;
  self->state.device = std::make_unique<device_thread>(std::move(params), self->address());
  // The executor monitors only the requesters of its compiles.
  self->set_down_handler([=](caf::down_msg& dm) { drop_requester(self, dm); });
  self->set_default_handler(
      [](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
        return caf::make_error(caf::sec::unexpected_message);
      });
  return {
      [=](info_atom) -> caf::result<executor_info> {
        const std::uint64_t id = self->state.next_job++;
        auto rp = self->make_response_promise<executor_info>();
        self->state.info_waiting.emplace(id, rp);
        self->state.device->push({.id = id});
        return rp;
      },
      [=](run_step& msg) -> caf::result<step_done> {
        const std::uint64_t id = self->state.next_job++;
        auto rp = self->make_response_promise<step_done>();
        self->state.step_waiting.emplace(id, rp);
        self->state.device->push({.id = id, .step = std::move(msg)});
        return rp;
      },
      [=](step_ran_atom, std::uint64_t id) { on_job_done(self, id); },
      [=](prepare_grammar_atom, std::uint64_t id, std::string& spec) -> caf::result<std::string> {
        return prepare_grammar(self, id, spec);
      },
      [=](abandon_grammar_atom, std::uint64_t id) { abandon_grammar(self, id); },
      [=](grammar_done_atom, std::uint64_t id, std::string& error) {
        finish_grammar(self, id, error);
      },
  };
}

}  // namespace

executor_actor spawn_executor_actor(caf::actor_system& sys, executor_params params) {
  return sys.spawn(executor_impl, std::move(params));
}

}  // namespace di::actors
