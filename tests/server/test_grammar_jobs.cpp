// grammar_jobs: the compiles of requests' grammars before they start. Each request waits at
// most the limit (a 400 if its compile ran past it, a 429 if it never started), a compile past
// the limit goes on and serves the requests that ask for the same spec, and a spec is compiled
// once however many requests wait for it.
#include "server/grammar_jobs.hpp"

#include "runtime/grammar/compile_interrupt.hpp"
#include "runtime/grammar/response_format.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <thread>

using namespace di::server;
using namespace std::chrono_literals;

namespace {

/// A compiler whose "slow" specs block until released, "bad" ones fail; it counts the compiles
/// of each spec.
class fake_compiler {
 public:
  void compile(const std::string& spec) {
    std::unique_lock lock(mutex_);
    ++num_compiles_[spec];
    if (spec.starts_with("bad"))
      throw api_error(400, "invalid response_format: bad", "response_format");
    if (spec.starts_with("slow")) released_.wait(lock, [&] { return is_released_; });
    if (spec.starts_with("spin")) {  // like a long real compile: only an interrupt ends it
      lock.unlock();
      for (;;) {
        try {
          di::grammar::check_interrupt();
        } catch (const di::grammar::compile_interrupted&) {
          ++num_interrupted_;
          throw;
        }
        std::this_thread::sleep_for(1ms);
      }
    }
  }
  int num_interrupted() const { return num_interrupted_; }
  void release() {
    {
      std::lock_guard lock(mutex_);
      is_released_ = true;
    }
    released_.notify_all();
  }
  int num_compiles(const std::string& spec) {
    std::lock_guard lock(mutex_);
    return num_compiles_[spec];
  }

 private:
  std::mutex mutex_;
  std::condition_variable released_;
  bool is_released_ = false;
  std::map<std::string, int> num_compiles_;
  std::atomic<int> num_interrupted_{0};
};

/// One grammar thread, an I/O thread for the deadlines, and a limit (300 ms by default).
struct fixture {
  fake_compiler compiler;
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  std::thread io_thread{[this] { io.run(); }};
  boost::asio::thread_pool pool{1};
  grammar_jobs jobs;

  explicit fixture(std::chrono::nanoseconds limit = 300ms)
      : jobs(
            pool, 1, [this](const std::string& spec) { compiler.compile(spec); }, limit) {}

  ~fixture() {
    compiler.release();
    pool.join();
    work.reset();
    io.stop();
    io_thread.join();
  }
  /// The verdict `spec` gets, as a future.
  std::future<std::optional<api_error>> submit(const std::string& spec) {
    auto verdict = std::make_shared<std::promise<std::optional<api_error>>>();
    auto f = verdict->get_future();
    jobs.submit(spec, io.get_executor(),
                [verdict](std::optional<api_error> e) { verdict->set_value(std::move(e)); });
    return f;
  }
};

std::optional<api_error> wait(std::future<std::optional<api_error>>& f) {
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  return f.get();
}

}  // namespace

TEST_CASE("a grammar that compiles starts its request; one that does not is its 400") {
  fixture fx;
  auto good = fx.submit("regex:a");
  CHECK(!wait(good));
  auto bad = fx.submit("bad");
  const std::optional<api_error> e = wait(bad);
  REQUIRE(e);
  CHECK(e->status == 400);
  CHECK(e->param == "response_format");
}

using di::test::eventually;

TEST_CASE("a compile past the limit: refused at the limit, then cancelled") {
  fixture fx;
  const auto t0 = std::chrono::steady_clock::now();
  auto first = fx.submit("spin");  // runs until interrupted
  const std::optional<api_error> e = wait(first);
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE(e);
  CHECK(e->status == 400);
  CHECK(e->param == "response_format");
  const std::string message = e->what();
  CHECK(message.starts_with("the response_format took "));
  CHECK(message.ends_with(" s to compile; the limit is 0.3 s"));
  CHECK(waited >= 300ms);
  CHECK(waited < 5s);
  // Nobody waits for it any more: cancelled (it ran on to its end, holding the grammar thread).
  CHECK(eventually([&] { return fx.jobs.num_running() == 0; }));
  CHECK(fx.compiler.num_interrupted() == 1);
  CHECK(fx.jobs.num_jobs() == 0);
  // Not remembered as compiled, nor as failed: a later request compiles it again.
  auto again = fx.submit("spin");
  CHECK(again.wait_for(100ms) == std::future_status::timeout);
  CHECK(fx.jobs.num_jobs() == 1);
  REQUIRE(wait(again));
  CHECK(eventually([&] { return fx.jobs.num_running() == 0; }));
  CHECK(fx.compiler.num_compiles("spin") == 2);
  CHECK(fx.compiler.num_interrupted() == 2);
}

TEST_CASE("a compile shared by requests is cancelled only when the last one gives up") {
  fixture fx(1s);
  auto first = fx.submit("spin");
  std::this_thread::sleep_for(500ms);
  auto second = fx.submit("spin");  // shares the compile; its limit ends 0.5 s later
  REQUIRE(wait(first));
  // The second still waits: the compile runs on.
  CHECK(second.wait_for(0s) == std::future_status::timeout);
  CHECK(fx.jobs.num_running() == 1);
  CHECK(fx.compiler.num_interrupted() == 0);
  const std::optional<api_error> e = wait(second);
  REQUIRE(e);
  CHECK(e->status == 400);
  CHECK(eventually([&] { return fx.jobs.num_running() == 0; }));
  CHECK(fx.compiler.num_interrupted() == 1);
  CHECK(fx.compiler.num_compiles("spin") == 1);
}

TEST_CASE("a real hostile compile past the limit stops, freeing its grammar thread") {
  // 20 rules of [aA]* and 3,600 [aA]: 13-18 s of compile when nothing stops it; the limit is
  // 1 s. Before cancellation the grammar thread compiled it to the end, so the cheap regex
  // after it waited for those seconds.
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::thread io_thread([&] { io.run(); });
  boost::asio::thread_pool pool{1};
  grammar_jobs jobs(
      pool, 1,
      [](const std::string& spec) {
        di::grammar::compile_response_format(di::grammar::parse_inline_response_format(spec));
      },
      1s);
  auto submit = [&](const std::string& spec) {
    auto p = std::make_shared<std::promise<std::optional<api_error>>>();
    auto f = p->get_future();
    jobs.submit(spec, io.get_executor(), [p](std::optional<api_error> e) { p->set_value(e); });
    return f;
  };
  const std::string grammar = di::test::slow_ebnf_grammar();
  const auto t0 = std::chrono::steady_clock::now();
  auto hostile = submit("ebnf:" + grammar);
  const std::optional<api_error> e = wait(hostile);
  REQUIRE(e);
  CHECK(e->status == 400);
  CHECK(std::string(e->what()).ends_with("the limit is 1 s"));
  auto cheap = submit("regex:[0-9]+");
  REQUIRE(cheap.wait_for(10s) == std::future_status::ready);
  CHECK(!cheap.get());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("the hostile grammar's refusal and the cheap regex after it: ", seconds, " s");
  CHECK(seconds < 4.0);  // 13 s and more while the hostile compile ran on
  CHECK(eventually([&] { return jobs.num_running() == 0 && jobs.num_jobs() == 0; }));
  pool.join();
  work.reset();
  io_thread.join();
}

TEST_CASE("requests for one spec share its compile") {
  fixture fx(30s);
  auto blocker = fx.submit("slow");  // holds the one grammar thread
  std::vector<std::future<std::optional<api_error>>> same;
  for (int i = 0; i < 3; ++i) same.push_back(fx.submit("regex:[0-9]+"));
  CHECK(fx.jobs.num_jobs() == 2);
  fx.compiler.release();
  CHECK(!wait(blocker));
  for (auto& f : same) CHECK(!wait(f));
  CHECK(fx.compiler.num_compiles("regex:[0-9]+") == 1);
}

TEST_CASE(
    "a request that never reached a grammar thread is a 429 at the limit, its compile dropped") {
  fixture fx;
  auto blocker = fx.submit("slow");  // past the limit, holding the one grammar thread
  auto queued = fx.submit("regex:b");
  const std::optional<api_error> e = wait(queued);
  REQUIRE(e);
  CHECK(e->status == 429);
  CHECK(e->code == "rate_limit_exceeded");
  CHECK(std::string(e->what()).find("server.grammar_threads") != std::string::npos);
  REQUIRE(wait(blocker));  // refused as too slow
  fx.compiler.release();
  for (int i = 0; i < 500 && fx.jobs.num_jobs() > 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(fx.jobs.num_jobs() == 0);
  CHECK(fx.compiler.num_compiles("regex:b") == 0);  // nobody waited for it any more
}

TEST_CASE("a spec that compiled lately starts at once, even with every grammar thread busy") {
  fixture fx(30s);
  auto first = fx.submit("regex:[0-9]{3}");
  CHECK(!wait(first));
  auto blocker = fx.submit("slow");  // holds the one grammar thread
  auto cached = fx.submit("regex:[0-9]{3}");
  // Answered inside submit(): it used to queue behind "slow" (a cached regex waited 51 s).
  REQUIRE(cached.wait_for(0s) == std::future_status::ready);
  CHECK(!cached.get());
  CHECK(fx.compiler.num_compiles("regex:[0-9]{3}") == 1);
  fx.compiler.release();
  CHECK(!wait(blocker));
  // A spec that failed is not remembered: it compiles (and fails) again.
  auto bad = fx.submit("bad");
  REQUIRE(wait(bad));
  auto bad_again = fx.submit("bad");
  REQUIRE(wait(bad_again));
  CHECK(fx.compiler.num_compiles("bad") == 2);
}

TEST_CASE("only the last num_remembered compiled specs start at once") {
  fake_compiler compiler;
  boost::asio::io_context io;
  boost::asio::thread_pool pool{1};
  grammar_jobs jobs(
      pool, 1, [&](const std::string& spec) { compiler.compile(spec); }, 30s, 2);
  auto verdict = [&](const std::string& spec) {
    auto p = std::make_shared<std::promise<std::optional<api_error>>>();
    auto f = p->get_future();
    jobs.submit(spec, io.get_executor(), [p](std::optional<api_error> e) { p->set_value(e); });
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    return f.get();
  };
  for (const char* spec : {"a", "b", "a", "c", "a", "b"}) CHECK(!verdict(spec));
  // a, b: compiled; a: remembered (now most recent); c: compiled, b forgotten; a: remembered;
  // b: compiled again.
  CHECK(compiler.num_compiles("a") == 1);
  CHECK(compiler.num_compiles("b") == 2);
  CHECK(compiler.num_compiles("c") == 1);
  pool.join();
}

TEST_CASE("stop: waiting requests get a 503 at once, the running compile is interrupted") {
  fixture fx(30s);
  auto a = fx.submit("spin");  // holds the one grammar thread until interrupted
  auto b = fx.submit("spin");  // shares that compile
  auto queued = fx.submit("regex:c");
  CHECK(a.wait_for(100ms) == std::future_status::timeout);
  const auto t0 = std::chrono::steady_clock::now();
  fx.jobs.stop();
  for (auto* f : {&a, &b, &queued}) {
    const std::optional<api_error> e = wait(*f);
    REQUIRE(e);
    CHECK(e->status == 503);
    CHECK(e->param == "response_format");
    CHECK(e->code == "shutting_down");
    CHECK(std::string(e->what()).find("the server is shutting down") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  // The compile ends (interrupted), the queued one never starts, and the thread is free.
  for (int i = 0; i < 500 && fx.jobs.num_jobs() > 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(fx.jobs.num_jobs() == 0);
  CHECK(fx.compiler.num_interrupted() == 1);
  CHECK(fx.compiler.num_compiles("spin") == 1);
  CHECK(fx.compiler.num_compiles("regex:c") == 0);
  // A request after stop() is refused inside submit().
  auto late = fx.submit("regex:d");
  REQUIRE(late.wait_for(0s) == std::future_status::ready);
  const std::optional<api_error> e = late.get();
  REQUIRE(e);
  CHECK(e->status == 503);
  CHECK(fx.compiler.num_compiles("regex:d") == 0);
}

TEST_CASE(
    "withdraw: a request whose client left is never answered; the last one stops the compile") {
  fixture fx(60s);
  std::atomic<int> answered{0};
  const auto count = [&](std::optional<api_error>) { ++answered; };
  const grammar_jobs::waiter_ref a = fx.jobs.submit("spin", fx.io.get_executor(), count);
  const grammar_jobs::waiter_ref b = fx.jobs.submit("spin", fx.io.get_executor(), count);
  const grammar_jobs::waiter_ref queued = fx.jobs.submit("regex:q", fx.io.get_executor(), count);
  REQUIRE(eventually([&] { return fx.jobs.num_running() == 1; }));
  CHECK(fx.jobs.withdraw(a));
  CHECK(!fx.jobs.withdraw(a));  // once
  std::this_thread::sleep_for(100ms);
  CHECK(fx.jobs.num_running() == 1);  // b still waits for it
  CHECK(fx.compiler.num_interrupted() == 0);
  CHECK(fx.jobs.withdraw(queued));  // queued behind it: never starts
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(fx.jobs.withdraw(b));
  CHECK(eventually([&] { return fx.compiler.num_interrupted() == 1; }));
  CHECK(eventually([&] { return fx.jobs.num_running() == 0 && fx.jobs.num_jobs() == 0; }));
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);  // it ran on to the 60 s limit
  CHECK(fx.compiler.num_compiles("regex:q") == 0);
  CHECK(answered.load() == 0);
  // A later request for the spec compiles it anew; one answered already cannot withdraw.
  auto again = fx.submit("regex:q");
  CHECK(!wait(again));
  CHECK(fx.compiler.num_compiles("regex:q") == 1);
  const grammar_jobs::waiter_ref cached = fx.jobs.submit("regex:q", fx.io.get_executor(), count);
  CHECK(answered.load() == 1);  // at once: compiled lately
  CHECK(!fx.jobs.withdraw(cached));
}
