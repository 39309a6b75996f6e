// grammar_jobs (see grammar_jobs.hpp). Every change of a job -- a waiter added, answered or
// expired, the compile started or ended -- happens under one mutex, so each waiter is answered
// exactly once; the answers themselves are called outside it.
#include "server/grammar_jobs.hpp"

#include "actors/grammar_limit.hpp"
#include "runtime/grammar/compile_interrupt.hpp"
#include "runtime/grammar/response_format.hpp"
#include "server/server_context.hpp"

#include <fmt/format.h>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <vector>

namespace di::server {

namespace asio = boost::asio;

void compile_request_grammar(const server_context& ctx, const std::string& spec) {
  try {
    if (ctx.prepare_grammar)
      ctx.prepare_grammar(spec);
    else
      grammar::compile_response_format(grammar::parse_inline_response_format(spec));
  } catch (const grammar::compile_interrupted&) {
    throw;  // not the request's fault (grammar_jobs::stop)
  } catch (const std::exception& e) {
    throw api_error(400, fmt::format("invalid response_format: {}", e.what()), "response_format");
  }
}

/// One spec, queued or compiling, and the requests waiting for it.
struct grammar_jobs::job {
  struct waiter {
    std::uint64_t id = 0;
    done_fn done;
    std::shared_ptr<asio::steady_timer> deadline;
    std::chrono::steady_clock::time_point since;
  };
  std::string spec;
  bool is_started = false;
  std::vector<waiter> waiters;  // not answered yet
  /// Stops the compile: once its last waiter has given up (abandon()) or the server stops.
  grammar::compile_cancel cancel;
};

static_assert(grammar_jobs::default_num_remembered == grammar::grammar_cache::default_capacity);

grammar_jobs::grammar_jobs(asio::thread_pool& pool, int num_threads, compile_fn compile,
                           std::chrono::nanoseconds limit, std::size_t num_remembered)
    : pool_(pool),
      num_threads_(num_threads),
      compile_(std::move(compile)),
      limit_(limit),
      num_remembered_(num_remembered) {}

namespace {
api_error stopping_error() {
  return api_error(503, "the server is shutting down; the response_format was not compiled",
                   "response_format", "shutting_down");
}
}  // namespace

grammar_jobs::waiter_ref grammar_jobs::submit(const std::string& spec,
                                              const asio::any_io_executor& timers, done_fn done) {
  if (is_compiled(spec)) {
    done(std::nullopt);
    return {};
  }
  std::shared_ptr<job> j;
  bool is_new = false;
  std::uint64_t id = 0;
  {
    std::lock_guard lock(mutex_);
    // Under the lock: stop() answers every waiter added before it, this one answers itself.
    if (!stopping_) j = add_waiter(spec, timers, std::move(done), is_new, id);
  }
  if (j == nullptr) {
    done(stopping_error());
    return {};
  }
  if (is_new) asio::post(pool_, [this, j] { run(j); });
  return {.of = j, .id = id};
}

bool grammar_jobs::withdraw(const waiter_ref& w) {
  const std::shared_ptr<job> j = w.of.lock();
  if (j == nullptr) return false;
  std::lock_guard lock(mutex_);
  const auto it = std::find_if(j->waiters.begin(), j->waiters.end(),
                               [&](const job::waiter& x) { return x.id == w.id; });
  if (it == j->waiters.end()) return false;  // answered, or being answered
  it->deadline->cancel();
  j->waiters.erase(it);
  // (one still queued finds no waiter when its turn comes, and does not start: run())
  if (j->is_started && j->waiters.empty())
    abandon(j, "no request waits for it any more (their clients left)");
  return true;
}

std::shared_ptr<grammar_jobs::job> grammar_jobs::add_waiter(const std::string& spec,
                                                            const asio::any_io_executor& timers,
                                                            done_fn done, bool& is_new,
                                                            std::uint64_t& id) {
  std::shared_ptr<job>& slot = jobs_[spec];
  is_new = slot == nullptr;
  if (is_new) {
    slot = std::make_shared<job>();
    slot->spec = spec;
  }
  std::shared_ptr<job> j = slot;
  // The timer is armed under the lock, as it is cancelled under it (run()).
  auto timer = std::make_shared<asio::steady_timer>(timers, limit_);
  id = next_waiter_++;
  // Weak: a job holds its waiters' timers, so a strong reference here would be a cycle.
  timer->async_wait([this, weak = std::weak_ptr<job>(j), id](boost::system::error_code ec) {
    if (auto alive = weak.lock(); alive && !ec) expire(alive, id);
  });
  j->waiters.push_back({.id = id,
                        .done = std::move(done),
                        .deadline = std::move(timer),
                        .since = std::chrono::steady_clock::now()});
  return j;
}

void grammar_jobs::run(const std::shared_ptr<job>& j) {
  {
    std::lock_guard lock(mutex_);
    if (j->waiters.empty()) {  // every request for it was refused while it queued
      forget(j);
      return;
    }
    j->is_started = true;
    ++num_running_;
  }
  std::optional<api_error> failed;
  try {
    if (stopping_) throw stopping_error();
    const grammar::interrupt_scope interruptible(j->cancel);
    compile_(j->spec);
  } catch (const grammar::compile_interrupted&) {
    failed = stopping_error();  // stop(); an abandoned job has nobody to tell
  } catch (const api_error& e) {
    failed = e;
  } catch (const std::exception& e) {
    failed =
        api_error(400, fmt::format("invalid response_format: {}", e.what()), "response_format");
  }
  std::vector<job::waiter> waiters;
  {
    std::lock_guard lock(mutex_);
    --num_running_;
    if (!failed) remember(j->spec);
    // An abandoned job is no longer the spec's: a later request may have started another.
    forget(j);
    waiters.swap(j->waiters);
    for (job::waiter& w : waiters) w.deadline->cancel();
  }
  for (job::waiter& w : waiters) w.done(failed);
}

void grammar_jobs::expire(const std::shared_ptr<job>& j, std::uint64_t waiter_id) {
  std::optional<job::waiter> w;
  bool is_started = false;
  {
    std::lock_guard lock(mutex_);
    for (auto it = j->waiters.begin(); it != j->waiters.end(); ++it)
      if (it->id == waiter_id) {
        w = std::move(*it);
        j->waiters.erase(it);
        break;
      }
    is_started = j->is_started;
    if (w && is_started && j->waiters.empty())
      abandon(j, fmt::format("no request waits for it any more (the limit is {:g} s)",
                             std::chrono::duration<double>(limit_).count()));
  }
  if (!w) return;  // answered meanwhile
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - w->since).count();
  if (is_started)
    return w->done(api_error(400, actors::grammar_too_slow(waited, limit_), "response_format"));
  w->done(api_error(429,
                    fmt::format("the response_format waited {:.0f} s and did not start compiling: "
                                "all {} grammar threads (server.grammar_threads) are busy with "
                                "other grammars; retry later",
                                waited, num_threads_),
                    "response_format", "rate_limit_exceeded"));
}

void grammar_jobs::abandon(const std::shared_ptr<job>& j, std::string why) {
  j->cancel.cancel(std::move(why));
  forget(j);
}

void grammar_jobs::forget(const std::shared_ptr<job>& j) {
  if (auto it = jobs_.find(j->spec); it != jobs_.end() && it->second == j) jobs_.erase(it);
}

bool grammar_jobs::is_compiled(const std::string& spec) {
  std::lock_guard lock(mutex_);
  const auto it = compiled_.find(std::hash<std::string>{}(spec));
  if (it == compiled_.end()) return false;
  compiled_order_.splice(compiled_order_.begin(), compiled_order_, it->second);
  return true;
}

void grammar_jobs::remember(const std::string& spec) {
  const std::size_t key = std::hash<std::string>{}(spec);
  if (compiled_.contains(key)) return;
  compiled_order_.push_front(key);
  compiled_.emplace(key, compiled_order_.begin());
  while (compiled_.size() > num_remembered_) {
    compiled_.erase(compiled_order_.back());
    compiled_order_.pop_back();
  }
}

void grammar_jobs::stop() {
  std::vector<job::waiter> waiters;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& [spec, j] : jobs_) {
      j->cancel.cancel("the server is stopping");
      for (job::waiter& w : j->waiters) {
        w.deadline->cancel();
        waiters.push_back(std::move(w));
      }
      j->waiters.clear();
    }
  }
  for (job::waiter& w : waiters) w.done(stopping_error());
}

std::size_t grammar_jobs::num_jobs() const {
  std::lock_guard lock(mutex_);
  return jobs_.size();
}

std::size_t grammar_jobs::num_running() const {
  std::lock_guard lock(mutex_);
  return num_running_;
}

}  // namespace di::server
