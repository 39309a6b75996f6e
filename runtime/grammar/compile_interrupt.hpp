// Stopping a compile from outside it: a server that shuts down, or whose requests stopped
// waiting for a grammar (past the response_format limit), must not let the compile run on for
// minutes of CPU and memory. A compile_cancel is the stop condition -- cancel() from any thread,
// or a deadline -- and a thread obeys it for the compiles it runs while an interrupt_scope is
// alive (compile_options::cancel installs one too). The compiler's long loops call
// check_interrupt(), which throws compile_interrupted once a condition holds; the partial
// results go with the exception (nothing is cached). Without a scope it does nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

namespace di::grammar {

/// A compile stopped by its compile_cancel: "the grammar compile was cancelled after N s: WHY".
/// Not a di::error, on purpose: the compiler's fallbacks catch di::error (a size limit, a
/// pattern it cannot handle) and go on with a weaker grammar; a cancel must pass them all and
/// reach whoever installed the scope (server/grammar_jobs.cpp, actors/executor_actor.cpp),
/// who catch it by name or as a std::exception.
class compile_interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// When a compile should stop: cancel() from any thread, or a deadline, which those who share
/// the compile may push later (extend_deadline). Thread-safe.
class compile_cancel {
 public:
  using clock = std::chrono::steady_clock;
  /// No deadline: the compile stops only once cancel() is called.
  compile_cancel() = default;
  /// A deadline `limit` from now, too ("... the limit is L s").
  explicit compile_cancel(std::chrono::nanoseconds limit);
  compile_cancel(const compile_cancel&) = delete;
  compile_cancel& operator=(const compile_cancel&) = delete;

  /// Stops the compiles that obey this at their next check; the first `reason` is the one
  /// their error gives.
  void cancel(std::string reason);
  /// Moves the deadline to the limit from now: a second request that shares the compile keeps
  /// it running for its own limit. False, changing nothing, once the compile is cancelled (or
  /// its deadline seen passed): the caller starts another.
  bool extend_deadline();
  /// cancel() was called or the deadline has passed (which then stays passed).
  bool is_cancelled() const;
  /// Throws compile_interrupted when is_cancelled().
  void check() const;

 private:
  static constexpr std::int64_t k_none = INT64_MAX;  // no deadline
  static constexpr std::int64_t k_passed = INT64_MIN;
  clock::time_point start_ = clock::now();
  std::chrono::nanoseconds limit_{0};
  // The deadline in clock ticks since its epoch, k_none or k_passed. A deadline seen passed is
  // set to k_passed (a compare-exchange), so that extend_deadline() cannot revive a compile
  // that has begun to stop.
  mutable std::atomic<std::int64_t> deadline_{k_none};
  std::atomic<bool> is_cancelled_{false};
  mutable std::mutex mutex_;  // guards reason_
  std::string reason_;
};

namespace detail {
/// The conditions this thread's compiles obey, innermost first.
struct interrupt_link {
  const compile_cancel* cancel;
  const interrupt_link* outer;
};
inline thread_local const interrupt_link* interrupt_chain = nullptr;
void check_interrupt_chain(const interrupt_link* link);
}  // namespace detail

/// While alive, compiles on this thread stop (compile_interrupted) once `cancel` says so, as
/// well as when an enclosing scope's does. `cancel` must outlive the scope.
class interrupt_scope {
 public:
  explicit interrupt_scope(const compile_cancel& cancel) : link_{&cancel, detail::interrupt_chain} {
    detail::interrupt_chain = &link_;
  }
  ~interrupt_scope() { detail::interrupt_chain = link_.outer; }
  interrupt_scope(const interrupt_scope&) = delete;
  interrupt_scope& operator=(const interrupt_scope&) = delete;

 private:
  detail::interrupt_link link_;
};

/// Throws compile_interrupted when a condition this thread obeys holds (cheap without a scope:
/// one thread-local load; with one, a flag and at most a clock read per scope). The compiler
/// calls it at coarse but bounded intervals (a few milliseconds of work apart).
inline void check_interrupt() {
  if (const detail::interrupt_link* link = detail::interrupt_chain; link != nullptr) [[unlikely]]
    detail::check_interrupt_chain(link);
}

}  // namespace di::grammar
