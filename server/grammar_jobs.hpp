// The compiles of requests' response_format grammars before the requests start (api_routes.cpp):
// on the grammar threads (server.grammar_threads), never the I/O threads; one compile per spec
// however many requests ask for it meanwhile; none for a spec that compiled lately, whose
// request starts at once instead of queueing behind other compiles; and no request waits for
// one longer than the scheduler would (actors/grammar_limit.hpp). A compile that every request
// waiting for it has given up on (past the limit) is cancelled (grammar::compile_cancel): it
// stops within milliseconds and frees its memory, nothing is remembered, and a later request
// for the spec compiles it anew (it used to run on to its end on the grammar thread: 12 s and
// 300 MB for a hostile schema under a 1 s limit). A server that stops ends them all
// (stop()): the requests still waiting get a 503 and the compiles running are cancelled, so
// neither a client nor the exit waits for them.
#pragma once

#include "server/api_error.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace boost::asio {
class thread_pool;
}

namespace di::server {

struct server_context;

/// The compile of a request's grammar in this server: into the in-process runners' cache when
/// they share the process (server_context::prepare_grammar), else only to refuse a bad schema,
/// regex or grammar with a 400 (a launched cluster's runners compile it before it starts).
void compile_request_grammar(const server_context& ctx, const std::string& spec);

class grammar_jobs {
  struct job;

 public:
  /// Compiles one spec on a grammar thread; throws api_error for one that does not compile.
  using compile_fn = std::function<void(const std::string& spec)>;
  /// A request's verdict: nothing (start it) or the error to answer it with.
  using done_fn = std::function<void(std::optional<api_error>)>;

  /// How many compiled specs are remembered: as many as the runners' grammar cache keeps
  /// (grammar::grammar_cache::default_capacity), so a spec remembered here is mostly still
  /// compiled there.
  static constexpr std::size_t default_num_remembered = 256;

  /// `pool` runs the compiles (`num_threads` of them, named in a refusal); `limit` bounds each
  /// request's wait.
  grammar_jobs(boost::asio::thread_pool& pool, int num_threads, compile_fn compile,
               std::chrono::nanoseconds limit, std::size_t num_remembered = default_num_remembered);

  /// Compiles `spec` for one request and calls `done` once, on whichever thread settles it:
  /// nothing, at once on this thread, when `spec` is one of the last `num_remembered` that
  /// compiled (such a request queued behind every other compile: a cached regex waited 51 s
  /// for two large enums); else nothing when it compiled; the compile's error when it did
  /// not; when `limit` has passed since this call, a 400 naming response_format if the
  /// compile had started (actors::grammar_too_slow) or a 429 if every grammar thread was
  /// still busy with others. `timers` runs the deadline (an I/O executor: the grammar threads
  /// may all be busy). The compile is shared by the requests for `spec` that come while it is
  /// queued or running; the last of them to give up cancels it (a request that came later
  /// still waits for it, and keeps it running).
  /// Returns the request's place among the waiters, for withdraw() (empty when `done` was
  /// called at once).
  struct waiter_ref;
  waiter_ref submit(const std::string& spec, const boost::asio::any_io_executor& timers,
                    done_fn done);

  /// The request gives up its wait (its client left): its `done` is never called, and a
  /// compile in progress that no other request waits for is cancelled (one still queued does
  /// not start). False, changing nothing, when its verdict was given already (`done` called
  /// or being called). (A request whose client left waited on until the compile ended or its
  /// limit passed -- up to 100 s of a grammar thread, and of an admission slot, for nobody.)
  bool withdraw(const waiter_ref& w);

  /// Specs queued or compiling (each counted once, however many requests wait for it); a
  /// cancelled compile leaves the count at once, while it unwinds on its grammar thread.
  std::size_t num_jobs() const;
  /// Compiles running on the grammar threads, cancelled ones that are still unwinding
  /// included.
  std::size_t num_running() const;

  /// The server is stopping: every request still waiting for a compile is answered with a 503
  /// now, the compiles running stop at their next check (grammar::interrupt_scope), queued ones
  /// do not start, and a later submit gets the 503 at once. (A compile outlived its requests:
  /// SIGTERM with a 19 s compile in progress left the client's connection closed without an
  /// answer, and the exit waited for the compile.)
  void stop();

  struct waiter_ref {
    std::weak_ptr<job> of;
    std::uint64_t id = 0;
  };

 private:
  /// Adds `done` to the job of `spec` (a new one when none: `is_new`); under mutex_.
  std::shared_ptr<job> add_waiter(const std::string& spec,
                                  const boost::asio::any_io_executor& timers, done_fn done,
                                  bool& is_new, std::uint64_t& id);
  void run(const std::shared_ptr<job>& j);
  void expire(const std::shared_ptr<job>& j, std::uint64_t waiter_id);
  /// Cancels `j`, whose compile nobody waits for any more (`why`), and forgets it, so that a
  /// later request for its spec starts another (under mutex_).
  void abandon(const std::shared_ptr<job>& j, std::string why);
  /// Removes `j` from jobs_ if it is still its spec's job (an abandoned one may have been
  /// replaced by a later request's); under mutex_.
  void forget(const std::shared_ptr<job>& j);

  /// Whether `spec` is remembered as compiled (then it becomes the most recently used).
  bool is_compiled(const std::string& spec);
  /// Remembers that `spec` compiled (under mutex_), forgetting the least recently used.
  void remember(const std::string& spec);

  boost::asio::thread_pool& pool_;
  int num_threads_;
  compile_fn compile_;
  std::chrono::nanoseconds limit_;
  std::size_t num_remembered_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mutex_;
  std::uint64_t next_waiter_ = 0;
  std::size_t num_running_ = 0;
  std::unordered_map<std::string, std::shared_ptr<job>> jobs_;  // by spec
  // Hashes of the specs that compiled, most recently used first, and where each is in that
  // list. A hash collision only starts a request whose grammar the runners then compile
  // themselves, under the scheduler's limit; as does a spec their cache has dropped since.
  std::list<std::size_t> compiled_order_;
  std::unordered_map<std::size_t, std::list<std::size_t>::iterator> compiled_;
};

}  // namespace di::server
